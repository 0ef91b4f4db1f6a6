//! nicfs: the NIC-side daemon (publishing and replication pipelines, leases, MINOS engine).
//!
//! Not built yet: in this version libfs publishes its own log (the host-only mode, which
//! stays available as a baseline once nicfs exists). See docs/ARCHITECTURE.md.
