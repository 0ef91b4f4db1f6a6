//! Publication of one log slot: scan the committed entries *in PM* from the slot's durable
//! checkpoint, validate each entry against the public state, apply it, fence, and durably
//! advance the checkpoint. libfs's own thread in the host-only mode calls [`publish_slot`];
//! it needs the PM layer only.
//!
//! nicfs publishes in *batches* it decoded itself, from a copy of the log it fetched
//! ([`Batch`], [`publish_batch`]): every entry of the batch is validated before any is
//! applied, file data goes through the caller's [`DataMover`] (kworker's copy lists), and
//! the batch ends with one settle (the moves executed, then the pointers to the blocks they
//! filled), one fence and one checkpoint. [`read_batch`] reads a batch from the log in PM.
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

pub use crate::batch::Batch;
use crate::coalesce::{self, Plan, Saved};
use crate::layout::FormatError;
use crate::oplog::{LogSlot, ScanStop};
use crate::public::Permissions;
use crate::public::{DataMover, PublicArea, PublishError};
use crate::record::{decode_records, Record};

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
    /// What coalescing left out ([`publish_batch`] with a plan).
    pub saved: Saved,
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
    /// A batch that does not start at the slot's checkpoint (it was read before another
    /// publication of the slot moved the checkpoint): nothing was done.
    #[error("log slot {slot}: batch from lsn {from} is stale, the checkpoint is at {checkpoint}")]
    Stale { slot: u32, from: u64, checkpoint: u64 },
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
            done.touched.extend(r.changed_inode());
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

/// Reads the batch of `log`'s committed entries from its checkpoint within `bounds`, from PM.
pub fn read_batch(log: &LogSlot, bounds: Bounds) -> Result<Batch, SlotError> {
    let slot = log.slot();
    let log_err = |source| SlotError::Log { slot, source };
    let from = log.published_lsn().map_err(log_err)?;
    let mut batch = Batch::new(slot, from);
    log.scan_with(from, bounds.until, bounds.max_bytes, |loc, payload| batch.push(loc, payload)).map_err(log_err)?;
    Ok(batch)
}

/// Publishes `batch` as one, its file data moved by `mover`: checks that it starts at the
/// slot's checkpoint, validates every entry (each against the state the ones before it
/// leave), applies the valid ones — as `plan` coalesced them, when given (a plan made for
/// more entries than turn out valid is made again for the valid ones) — settles the mover
/// (its moves executed, then the pointers to the blocks they filled persisted), fences and
/// durably advances the checkpoint past the last valid entry. A refused entry — invalid,
/// or malformed — stops the batch there as [`publish_slot`] does ([`SlotError::Rejected`],
/// with what was published). If applying or moving fails, nothing is checkpointed and the
/// area forgets the batch's pending links.
pub fn publish_batch(
    area: &mut PublicArea,
    log: &LogSlot,
    batch: &Batch,
    plan: Option<&Plan>,
    mover: &mut dyn DataMover,
) -> Result<Published, SlotError> {
    publish_batch_checked(area, log, batch, plan, mover, None)
}

/// [`publish_batch`] for a publisher that does not trust the writer: each structurally
/// valid entry must also pass the permission checks ([`PublicArea::check_permissions`])
/// for its caller as `perms` resolves it; the first that does not is refused like an
/// invalid one, with everything after it.
pub fn publish_batch_checked(
    area: &mut PublicArea,
    log: &LogSlot,
    batch: &Batch,
    plan: Option<&Plan>,
    mover: &mut dyn DataMover,
    perms: Option<&mut dyn Permissions>,
) -> Result<Published, SlotError> {
    let slot = log.slot();
    let log_err = |source| SlotError::Log { slot, source };
    let checkpoint = log.published_lsn().map_err(log_err)?;
    if checkpoint != batch.from {
        return Err(SlotError::Stale { slot, from: batch.from, checkpoint });
    }
    let (mut valid, invalid) = area.validate_batch(batch.entries.iter().map(|(_, r)| &r[..]), mover.log_len());
    let mut rejected = match invalid {
        Some(e) => Some((batch.entries[valid].0.lsn, e.to_string())),
        None => batch.malformed.clone(),
    };
    let mut perms = perms;
    if let Some(perms) = perms.as_deref_mut() {
        let (allowed, why) = area.check_permissions(batch, valid, perms);
        if let Some(why) = why {
            rejected = Some((batch.entries[allowed].0.lsn, why));
            valid = allowed;
        }
    }
    let mut done = Published { from: batch.from, upto: batch.from, ..Published::default() };
    let accepted = &batch.entries[..valid];
    let Some((last, _)) = accepted.last() else {
        return match rejected {
            Some((lsn, why)) => Err(refused(slot, lsn, why, done)),
            None => Ok(done),
        };
    };
    let failed = |area: &mut PublicArea, source| {
        area.abandon_pending();
        SlotError::Failed { slot, lsn: last.lsn, source }
    };
    if let Some(perms) = perms {
        perms.admitting(last.end);
    }
    let replanned;
    match plan {
        Some(p) => {
            let p = if p.entries == valid {
                p
            } else {
                replanned = coalesce::plan(accepted.iter().map(|(_, r)| &r[..]));
                &replanned
            };
            for step in &p.steps {
                if let Err(e) = area.apply_step(step, mover) {
                    return Err(failed(area, e));
                }
            }
            done.saved = p.saved;
        }
        None => {
            for (loc, records) in accepted {
                for r in records {
                    if let Err(e) = area.apply_with(r, mover) {
                        area.abandon_pending();
                        return Err(SlotError::Failed { slot, lsn: loc.lsn, source: e });
                    }
                }
            }
        }
    }
    if let Err(e) = area.settle(mover) {
        return Err(failed(area, e));
    }
    area.fence();
    log.set_published_lsn(last.end).map_err(log_err)?;
    area.checkpoint_done();
    done.upto = last.end;
    done.entries = valid as u64;
    done.touched = accepted.iter().flat_map(|(_, r)| r.iter().filter_map(Record::changed_inode)).collect();
    done.touched.sort_unstable();
    done.touched.dedup();
    match rejected {
        Some((lsn, why)) => Err(refused(slot, lsn, why, done)),
        None => Ok(done),
    }
}

fn refused(slot: u32, lsn: u64, why: String, published: Published) -> SlotError {
    tracing::error!(slot, lsn, %why, "log entry refused; it and what follows stay unpublished");
    SlotError::Rejected { slot, lsn, why, published }
}
