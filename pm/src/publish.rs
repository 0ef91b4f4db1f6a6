//! Publication of one log slot: scan the committed entries *in PM* from the slot's durable
//! checkpoint, validate each entry against the public state, apply it, fence, and durably
//! advance the checkpoint. Whoever publishes — libfs's own thread in the host-only mode,
//! nicfs later — calls [`publish_slot`]; it needs the PM layer only.
//!
//! An entry is validated whole before any of it is applied, so it is published entirely or
//! not at all. An entry that fails validation (or does not decode) is *rejected*: what came
//! before it is published and checkpointed, it and everything after it stay in the log
//! unpublished (a later entry may depend on it), and the caller is told which LSN and why.
//! A failure while applying a validated entry (no space, a PM error) leaves that entry
//! partly applied: nothing is checkpointed past the previous batch, and re-publishing it
//! later converges because publication is idempotent.
//!
//! Ordering (see [`crate::public`]): every write of the batch is persisted, then one fence,
//! then the checkpoint word is persisted and fenced, then blocks the batch freed become
//! reusable.

use crate::layout::FormatError;
use crate::oplog::{LogSlot, ScanStop};
use crate::public::{PublicArea, PublishError};
use crate::record::decode_records;

/// How much of a slot one call may publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Publish only entries that start before this LSN: the end of what the log's writer
    /// has made durable (entries past it may be half-written). `u64::MAX` for a log whose
    /// writer is gone (recovery).
    pub until: u64,
    /// Stop once the entries published span this many bytes of log (at least one entry).
    pub max_bytes: u64,
}

impl Bounds {
    /// Everything committed up to `until`.
    pub fn until(until: u64) -> Bounds {
        Bounds { until, max_bytes: u64::MAX }
    }
}

/// What one call published.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Published {
    /// The checkpoint before and after (durable) the call.
    pub from: u64,
    pub upto: u64,
    pub entries: u64,
    /// Inodes the published records changed (sorted, no duplicates).
    pub touched: Vec<u64>,
}

/// Why a slot's publication stopped short.
#[derive(Debug, thiserror::Error)]
pub enum SlotError {
    /// The entry at `lsn` may not be published; `published` says what was, before it.
    #[error("log slot {slot}: entry at lsn {lsn} refused: {why}")]
    Rejected { slot: u32, lsn: u64, why: String, published: Published },
    /// Applying a validated entry failed (public area full, PM error); nothing past the
    /// previous checkpoint is checkpointed.
    #[error("log slot {slot}: publishing the entry at lsn {lsn} failed: {source}")]
    Failed {
        slot: u32,
        lsn: u64,
        #[source]
        source: PublishError,
    },
    /// The slot itself is unreadable (header, PM access).
    #[error("log slot {slot}: {source}")]
    Log {
        slot: u32,
        #[source]
        source: FormatError,
    },
}

/// Publish committed entries of `log` from its checkpoint, within `bounds`. Returns what
/// was published (possibly nothing); the new checkpoint is durable when it returns.
pub fn publish_slot(area: &mut PublicArea, log: &LogSlot, bounds: Bounds) -> Result<Published, SlotError> {
    let slot = log.slot();
    let log_err = |source| SlotError::Log { slot, source };
    let from = log.published_lsn().map_err(log_err)?;
    // The scan reads and checks every payload; decode it there rather than read it again.
    let mut decoded = Vec::new();
    let scan = log
        .scan_with(from, bounds.until, bounds.max_bytes, |loc, payload| {
            decoded.push((*loc, decode_records(payload, loc.payload_off)))
        })
        .map_err(log_err)?;
    let mut done = Published { from, upto: from, ..Published::default() };
    let mut rejected = None;
    for (loc, records) in decoded {
        let records = match records {
            Ok(r) => r,
            Err(e) => {
                rejected = Some((loc.lsn, format!("malformed entry: {e}")));
                break;
            }
        };
        if let Err(e) = area.validate(&records, log.region()) {
            rejected = Some((loc.lsn, e.to_string()));
            break;
        }
        for r in &records {
            area.apply(r, log.region()).map_err(|source| SlotError::Failed { slot, lsn: loc.lsn, source })?;
            done.touched.push(r.target());
        }
        done.upto = loc.end;
        done.entries += 1;
    }
    // A pad entry at the end of the ring is consumed with the entry that follows it; one
    // that ends the scan is left for the next call.
    if done.upto > from {
        area.fence();
        log.set_published_lsn(done.upto).map_err(log_err)?;
        area.checkpoint_done();
    }
    done.touched.sort_unstable();
    done.touched.dedup();
    if let Some((lsn, why)) = rejected {
        tracing::error!(slot, lsn, %why, "log entry refused; it and what follows stay unpublished");
        return Err(SlotError::Rejected { slot, lsn, why, published: done });
    }
    if let ScanStop::Invalid(why) = &scan.stop {
        // Normal at the tail of a log whose writer crashed; a live writer's entries up to
        // `until` are durable, so this is only seen past them.
        tracing::debug!(slot, %why, "scan ended at an invalid entry");
    }
    Ok(done)
}
