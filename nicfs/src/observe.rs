//! Observability primitives the working parts record into: the publication counters
//! ([`counters`]) and latency histograms ([`latency`]). What reads them — the status file
//! and `/metrics` — is the daemon's ([`crate::daemon::status`], [`crate::daemon::metrics`]).
//!
//! Imports: only [`crate::host::link`] (the outcome of a copy list, which the counters
//! count).

pub(crate) mod counters;
pub(crate) mod latency;
