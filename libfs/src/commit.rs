//! The path of every update: reserve the space its publication will need, append the
//! entry to the log and make it durable, apply it to the view — and the way back once it
//! is published (catch up: drop reservations and overlay segments, reclaim log space).
//!
//! Space: every entry reserves the data blocks its publication may need (blocks not yet
//! mapped, plus indirect-block overhead); an update that does not fit first forces a full
//! publication (which frees what unlinks and truncates released and makes the estimate
//! exact), then fails with ENOSPC. A full log likewise forces publication before ENOSPC.
//! Publication can therefore not run out of space for what was acknowledged.
//!
//! In the offload mode the public area's space is the node's, kept by nicfs: the client
//! reserves blocks from nicfs in grants of [`GRANT_BLOCKS`] (or exactly what it lacks when
//! the node is nearly full), spends its credit on entries as above, and hands back what
//! published entries reserved once it has caught up with them.

use crate::api::Ino;
use crate::error::{FsError, FsResult};
use crate::publication::Pending;
use crate::state::Front;
use linefs_pm::layout::BLOCK_SIZE;
use linefs_pm::oplog::AppendError;
use linefs_pm::record::{decode_records, EntryBuilder, Record};
use linefs_proto::RemoteError;
use std::sync::atomic::Ordering;

/// Blocks a client in the offload mode reserves from nicfs at a time (64 MiB of data).
pub(crate) const GRANT_BLOCKS: u64 = 16384;
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
        let free = self.publication.free_blocks.load(Ordering::Acquire);
        // nicfs keeps the node's margin for publication's metadata; a client that
        // publishes itself keeps it here.
        free.saturating_sub(self.reserved + self.link.space_margin())
    }

    /// Reserves at least `need` more blocks from the node (a whole grant if the node has
    /// room). Returns false if it has not that many (host-only: never, the count is all
    /// the public area has).
    fn reserve_more(&mut self, need: u64) -> FsResult<bool> {
        let remote = self.link.clone();
        let grant = need.max(GRANT_BLOCKS);
        for ask in [grant, need] {
            match remote.reserve_blocks(ask) {
                Ok(()) => {
                    self.publication.free_blocks.fetch_add(ask, Ordering::AcqRel);
                    return Ok(true);
                }
                Err(FsError::Refused { code: RemoteError::NoSpace, .. }) => continue,
                // The whole grant is over this uid's share of the node: ask for exactly
                // what is missing; if even that is, the application is told EDQUOT.
                Err(FsError::Refused { code: RemoteError::QuotaExceeded, .. }) if ask > need => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(false)
    }

    /// Makes `est_blocks` available for an entry: from what is reserved, from nicfs, or by
    /// publishing everything (which frees what unlinks and truncates released).
    fn make_room(&mut self, est_blocks: u64) -> FsResult<()> {
        if est_blocks <= self.space_available() {
            return Ok(());
        }
        if self.reserve_more(est_blocks - self.space_available())? {
            return Ok(());
        }
        self.publish_all()?;
        if est_blocks <= self.space_available() || self.reserve_more(est_blocks - self.space_available())? {
            return Ok(());
        }
        Err(FsError::NoSpace("public area full"))
    }

    /// Make an entry durable and apply it to the view. `est_blocks` is the number of data
    /// blocks publication may need for it.
    pub(crate) fn commit(&mut self, b: &EntryBuilder, est_blocks: u64) -> FsResult<Vec<Record>> {
        if self.shut {
            return Err(FsError::ShutDown);
        }
        if self.link.failed() {
            let why = self.link.failure().unwrap_or_default();
            tracing::warn!(%why, "refusing update: publication failed earlier");
            return Err(FsError::PublicationFailed(why));
        }
        // Publication may free space (unlinks, truncates) and makes the estimate exact.
        self.make_room(est_blocks)?;
        let loc = match self.publication.log.append(self.tail, self.reclaimed, b.payload()) {
            Ok(loc) => loc,
            Err(AppendError::Full(full)) => {
                self.free_log(full.need)?;
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
        self.link.set_committed(loc.end);
        let records = decode_records(b.payload(), loc.payload_off)?;
        self.view.apply(&records, loc.lsn);
        // Offload: a number this client frees is not reused by it: another client may hold
        // the inode open, and then nicfs keeps it (nicfs's `opens`); nicfs hands the number
        // out again once it is free — and forgets this client's lease on it, so this
        // client forgets it too.
        for r in &records {
            if let Record::FreeInode { ino } = r {
                self.link.leases().freed(*ino);
            }
        }
        self.reserved += est_blocks;
        self.publication.pending.lock().push_back(Pending { end: loc.end, est_blocks });
        Ok(records)
    }

    /// Bring the view up to the publisher's checkpoint: drop published entries, their
    /// reservations and their overlay segments, and only then let the log space be reused.
    pub(crate) fn catch_up(&mut self) {
        self.link.follow(&self.publication);
        let (published, reclaim, touched) = {
            let mut ps = self.publication.public.write();
            (ps.published, ps.reclaim, std::mem::take(&mut ps.touched))
        };
        if published <= self.reclaimed {
            return;
        }
        let mut released = 0;
        let mut entries = 0;
        {
            let mut q = self.publication.pending.lock();
            while q.front().is_some_and(|p| p.end <= published) {
                if let Some(p) = q.pop_front() {
                    released += p.est_blocks;
                    entries += 1;
                }
            }
        }
        let trimmed = self.view.trim(published);
        {
            let mut ps = self.publication.public.write();
            // Offload: nicfs's notices may come after its FsyncDone; every inode whose
            // unpublished changes were just dropped is read again too.
            let remote = ps.area().is_none();
            if remote {
                ps.entries += entries;
            }
            drop(ps);
            let mut inos: Vec<u64> =
                if touched.contains(&u64::MAX) { self.view.nodes.keys().copied().collect() } else { touched };
            if remote {
                inos.extend(trimmed);
                inos.sort_unstable();
                inos.dedup();
            }
            for ino in inos {
                if let Some(n) = self.view.node_mut(ino) {
                    n.pub_blocks.forget();
                }
            }
        }
        self.reserved = self.reserved.saturating_sub(released);
        // What the published entries reserved is spent or no longer needed.
        if released > 0 {
            self.link.reservation_done(&self.publication, released);
        }
        // Log space is reused only once it is replicated as well (the slot's reclaim LSN);
        // until then catching up runs again, harmlessly.
        self.reclaimed = published.min(reclaim);
    }

    /// Makes room in a full log for `need` bytes. Host-only publishes everything; offload
    /// waits only until nicfs has published the oldest quarter of the log (or `need`, if
    /// more) — chunks its pipeline already has in hand — and goes on writing while nicfs
    /// publishes the rest, instead of waiting for all of it.
    fn free_log(&mut self, need: u64) -> FsResult<()> {
        let quarter = self.publication.log.ring_bytes() / 4;
        self.link.publish(&self.publication, self.reclaimed + need.max(quarter), u64::MAX)?;
        self.catch_up();
        Ok(())
    }

    /// Publish everything in the log (an update that needs space, sync, shutdown).
    pub(crate) fn publish_all(&mut self) -> FsResult<()> {
        self.link.publish(&self.publication, u64::MAX, u64::MAX)?;
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
            if !public.reader().is_mapped(ino, idx)? {
                need += 1;
            }
        }
        Ok(need + if need > 0 { 3 } else { 0 })
    }
}
