//! The unit that flows through the pipeline: a session's log cut into chunks. A fetch
//! request ([`FetchReq`]) becomes chunks fetched ([`Fetched`]: a copy of the log), then
//! checked and decoded ([`Checked`]: a batch, and its coalescing plan), then an outcome told
//! to the session's sequencer in order ([`Event`], through the session's [`Flow`]).
//!
//! Imports: the session, and pm's types; nothing of the pipeline's stages.

use crate::session::Session;
use linefs_pm::coalesce::Plan;
use linefs_pm::oplog::LogCopy;
use linefs_pm::publish::{Batch, Published, SlotError};
use std::sync::Arc;

/// What the pipeline tells a session's sequencer.
#[derive(Debug)]
pub(crate) enum Event {
    /// The fetch request of `generation` is done: the chunks up to `next_seq` were fetched and
    /// cover the log up to `end` (short of the request's end if the log ends there).
    Fetched { generation: u64, end: u64, next_seq: u64, error: Option<SlotError> },
    /// Chunk `seq`, which covered the log up to `end`, was published (or refused, or its
    /// publication failed).
    Published { seq: u64, end: u64, result: Result<Published, SlotError> },
    /// Chunk `seq` was not published: its session had failed, or it was stale.
    Dropped { seq: u64 },
    /// Every live member of the slot's chain holds its log durable up to `lsn` (an fsync
    /// the sequencer asked replication for, [`crate::pipeline::replicate`]).
    Replicated { lsn: u64 },
}

/// A session as the pipeline sees it: its slot and where its events go.
pub(crate) struct Flow {
    pub(crate) session: Arc<Session>,
    pub(crate) events: crossbeam_channel::Sender<Event>,
}

impl Flow {
    pub(super) fn tell(&self, e: Event) {
        // The sequencer leaves only once nothing is in flight, so this is always read.
        let _ = self.events.send(e);
    }
}

/// Fetch the log of `flow`'s slot from `from` up to `until`, numbering chunks from `seq`.
pub(crate) struct FetchReq {
    pub(crate) flow: Arc<Flow>,
    pub(crate) generation: u64,
    pub(crate) from: u64,
    pub(crate) until: u64,
    pub(crate) seq: u64,
}

/// A chunk fetched, to be checked.
pub(super) struct Fetched {
    pub(super) flow: Arc<Flow>,
    pub(super) seq: u64,
    pub(super) copy: LogCopy,
}

/// A chunk checked and decoded (and coalesced, once `plan` is set), to be published.
pub(super) struct Checked {
    pub(super) flow: Arc<Flow>,
    pub(super) seq: u64,
    pub(super) end: u64,
    pub(super) batch: Batch,
    pub(super) plan: Option<Plan>,
    /// The validated bytes of the batch (`[batch.from, batch.end())`), kept for replication
    /// when the node replicates.
    pub(super) bytes: Option<Arc<[u8]>>,
}
