//! The path of every update: reserve the space its publication will need, append the
//! entry to the log and make it durable, apply it to the view — and the way back once it
//! is published (catch up: drop reservations and overlay segments, reclaim log space).
//!
//! Space: every entry reserves the data blocks its publication may need (blocks not yet
//! mapped, plus indirect-block overhead); an update that does not fit first forces a full
//! publication (which frees what unlinks and truncates released and makes the estimate
//! exact), then fails with ENOSPC. A full log likewise forces publication before ENOSPC.
//! Publication can therefore not run out of space for what was acknowledged.

use crate::api::Ino;
use crate::error::{FsError, FsResult};
use crate::publication::Pending;
use crate::state::Front;
use linefs_pm::layout::BLOCK_SIZE;
use linefs_pm::oplog::AppendError;
use linefs_pm::record::{decode_records, EntryBuilder, Record};
use std::sync::atomic::Ordering;

/// Blocks kept free for publication's own metadata (indirect, directory, xattr blocks).
pub(crate) const META_RESERVE: u64 = 64;
/// Block pointers per indirect block.
const PTRS_PER_BLOCK: u64 = linefs_pm::public::format::PTRS_PER_BLOCK;

/// Most indirect blocks that mapping `span` new data blocks of one file may need: one per
/// PTRS_PER_BLOCK data blocks, one per PTRS_PER_BLOCK² at the next level, plus a partly
/// filled block at each of the three levels where the range starts or ends mid-block.
fn index_blocks(span: u64) -> u64 {
    span.div_ceil(PTRS_PER_BLOCK) + span.div_ceil(PTRS_PER_BLOCK * PTRS_PER_BLOCK) + 3
}

/// How many data blocks `free` free blocks can hold once their indirect blocks are paid
/// for: what statfs reports as free, so that a file as large as `df` says fits does fit.
pub(crate) fn data_capacity(free: u64) -> u64 {
    let index = free.div_ceil(PTRS_PER_BLOCK + 1) + free.div_ceil(PTRS_PER_BLOCK * PTRS_PER_BLOCK) + 3;
    free.saturating_sub(index)
}

impl Front {
    pub(crate) fn space_available(&self) -> u64 {
        self.publication.free_blocks.load(Ordering::Acquire).saturating_sub(self.reserved + META_RESERVE)
    }

    /// Make an entry durable and apply it to the view. `est_blocks` is the number of data
    /// blocks publication may need for it.
    pub(crate) fn commit(&mut self, b: &EntryBuilder, est_blocks: u64) -> FsResult<Vec<Record>> {
        if self.shut {
            return Err(FsError::ShutDown);
        }
        if self.publication.failed() {
            let why = self.publication.public.read().failed.clone().unwrap_or_default();
            tracing::warn!(%why, "refusing update: publication failed earlier");
            return Err(FsError::PublicationFailed(why));
        }
        if est_blocks > self.space_available() {
            // Publication may free space (unlinks, truncates) and makes the estimate exact.
            self.publish_all()?;
            if est_blocks > self.space_available() {
                return Err(FsError::NoSpace("public area full"));
            }
        }
        let loc = match self.publication.log.append(self.tail, self.reclaimed, b.payload()) {
            Ok(loc) => loc,
            Err(AppendError::Full(_)) => {
                self.publish_all()?;
                match self.publication.log.append(self.tail, self.reclaimed, b.payload()) {
                    Ok(loc) => loc,
                    Err(AppendError::Full(_)) => return Err(FsError::NoSpace("operation log full")),
                    Err(AppendError::TooLarge { .. }) => return Err(FsError::NoSpace("entry larger than the log")),
                    Err(AppendError::Pm(e)) => return Err(e.into()),
                }
            }
            Err(AppendError::TooLarge { .. }) => return Err(FsError::NoSpace("entry larger than the log")),
            Err(AppendError::Pm(e)) => return Err(e.into()),
        };
        self.tail = loc.end;
        self.appended += 1;
        let records = decode_records(b.payload(), loc.payload_off)?;
        self.view.apply(&records, loc.lsn);
        self.reserved += est_blocks;
        self.publication.pending.lock().push_back(Pending { end: loc.end, est_blocks });
        Ok(records)
    }

    /// Bring the view up to the publisher's checkpoint: drop published entries, their
    /// reservations and their overlay segments, and only then let the log space be reused.
    pub(crate) fn catch_up(&mut self) {
        let (published, touched) = {
            let mut ps = self.publication.public.write();
            (ps.published, std::mem::take(&mut ps.touched))
        };
        if published <= self.reclaimed {
            return;
        }
        let mut released = 0;
        {
            let mut q = self.publication.pending.lock();
            while q.front().is_some_and(|p| p.end <= published) {
                if let Some(p) = q.pop_front() {
                    released += p.est_blocks;
                }
            }
        }
        {
            let ps = self.publication.public.read();
            for ino in touched {
                if let Some(n) = self.view.node_mut(ino) {
                    n.pub_blocks = ps.area.file_blocks(ino);
                }
            }
        }
        self.reserved = self.reserved.saturating_sub(released);
        self.view.trim(published);
        self.reclaimed = published;
    }

    /// Publish everything in the log (an update that needs space, sync, shutdown).
    pub(crate) fn publish_all(&mut self) -> FsResult<()> {
        self.publication.publish_batch(u64::MAX)?;
        self.catch_up();
        Ok(())
    }

    /// Data blocks a write of [off, off+len) may need: the blocks not mapped yet.
    pub(crate) fn estimate_blocks(&self, ino: Ino, off: u64, len: u64) -> FsResult<u64> {
        let first = off / BLOCK_SIZE;
        let last = (off + len).div_ceil(BLOCK_SIZE);
        let span = last - first;
        let conservative = span + index_blocks(span);
        // While space is plentiful, reserve conservatively (as if no block were mapped) and
        // leave the public area alone: its lock may be held by a publication batch. Only
        // near full does the exact count matter.
        if span > 64 || conservative.saturating_mul(4) < self.space_available() {
            return Ok(conservative);
        }
        let mut need = 0;
        let public = self.publication.public.read();
        for idx in first..last {
            if !public.area.reader().is_mapped(ino, idx)? {
                need += 1;
            }
        }
        Ok(need + if need > 0 { 3 } else { 0 })
    }
}
