//! The pipeline's side of chain replication: what it hands the replication driver (the
//! daemon's `replication` module implements [`Replicate`]) and asks of it. The pipeline
//! knows nothing of chains, peers or epochs; a node on its own has no driver and the
//! pipeline behaves as before.
//!
//! * **What is replicated**: each chunk's bytes as published on this node — the validated
//!   copy the pipeline fetched, cut at the end of what its publication accepted — handed
//!   over in the slot's log order by the publish stage, just after the chunk's checkpoint
//!   and before its sequencer hears of it ([`Replicate::append`]). Nothing is read from the
//!   client's log again, and an entry this node refused never leaves it.
//! * **Fsync**: once the fsync's LSN is published here, the sequencer asks the driver
//!   ([`Replicate::fsync`]) and answers the client only when the driver tells it, through
//!   the session's event channel ([`crate::pipeline::chunk::Event::Replicated`]), that every
//!   live chain member holds the log durable up to there.
//! * **Reclaim**: a `Published` notice lets the client reuse its log only up to what is
//!   published here *and* replicated ([`Replicate::replicated`]).

use crate::pipeline::chunk::Event;
use std::sync::Arc;

/// Who wrote a slot's log (the session's client): the credentials a replica checks the
/// entries for, as this node's admission did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Writer {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) groups: Vec<u32>,
    /// The client states the caller of each entry and is believed (it runs as root).
    pub(crate) trusted: bool,
}

/// The replication driver as the pipeline sees it.
pub(crate) trait Replicate: Send + Sync {
    /// Log bytes `[from, from + bytes.len())` of `slot`, published on this node (whole
    /// entries), written by `writer`. Called in log order per slot; may wait while too many
    /// bytes are in flight (flow control).
    fn append(&self, slot: u32, from: u64, bytes: Arc<[u8]>, writer: &Writer);
    /// An fsync of `slot` up to `lsn` (published here): send [`Event::Replicated`] to
    /// `wake` once every live member of the slot's chain holds it durable.
    fn fsync(&self, slot: u32, lsn: u64, wake: crossbeam_channel::Sender<Event>);
    /// How far `slot`'s log is replicated on every member of its chain.
    fn replicated(&self, slot: u32) -> u64;
}
