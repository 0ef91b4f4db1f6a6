//! What nicfs owns of its node: the exclusive lock of the node (pm's `node::LOCK_FILE`), the mapped PM, the
//! public area (one publisher at a time: a mutex), the log slots and which of them sessions
//! hold ([`crate::node::slots`]: claims, and a fresh log file for every session), and the
//! publication counters.
//!
//! Opening the node takes the lock, replaces the log files a client left the wrong size
//! (`replace_resized_logs`), removes the fresh log files a crash left before their
//! rename (pm's `slotfile::remove_stray`), recovers the node, and then replaces every slot's
//! log file, so that no process holding a descriptor from before can write a log that
//! counts.
//!
//! Publication works on *chunks*: [`Node::fetch_into`] copies up to [`CHUNK_BYTES`] of a slot's
//! committed log out of the client's log file into nicfs's memory (counted: that is the
//! PCIe crossing); the chunk is scanned, checked and decoded on that copy and never read
//! from the log again; [`Node::publish_batch`] publishes it as one batch under the area's
//! mutex, so that sessions interleave and, as recovery assumes, at most one slot can be
//! caught mid-batch by a crash. Metadata is applied by nicfs; file data becomes the batch's
//! copy list, executed through the host link before the batch's checkpoint
//! ([`crate::host::copylist`]).

pub(crate) mod alloc;
pub(crate) mod caller;
pub(crate) mod grants;
pub(crate) mod lease_record;
pub(crate) mod opens;
pub(crate) mod rejudge;
pub(crate) mod sigbus;
pub(crate) mod slots;

use crate::host::copylist;
use crate::host::link::{Copied, HostLink};
use crate::node::alloc::Alloc;
use crate::node::lease_record::LeaseFile;
use crate::node::rejudge::Rejudge;
use crate::observe::counters::Counters;
use linefs_pm::coalesce::Plan;
use linefs_pm::layout::{FormatError, Geometry};
use linefs_pm::node::{log_file_name, NodePm, PUBLIC_FILE};
use linefs_pm::oplog::{LogCopy, LogSlot};
use linefs_pm::public::{Permissions, PublicArea, PublicReader};
use linefs_pm::publish::{publish_batch_checked, Batch, Published, SlotError};
use linefs_pm::record::InodeImage;
use linefs_pm::recovery::{recover_judged, RecoveryError};
use parking_lot::{Mutex, MutexGuard};

pub(crate) use crate::node::slots::Claim;
use crate::node::slots::Slots;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a client is asked to publish at (ChunkReady every this many committed bytes), and
/// the most log one fetched chunk — one publication batch, one hold of the area's mutex —
/// covers (a single longer entry makes a longer chunk).
pub(crate) const CHUNK_BYTES: u64 = 4 << 20;

/// Why nicfs cannot serve a node.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("node {0} is in use (another nicfs, or a host-only mount, holds it)")]
    Busy(PathBuf),
    #[error("node {dir}: {source}")]
    Format { dir: PathBuf, source: FormatError },
    #[error("node {dir}: recovery failed: {source}")]
    Recovery { dir: PathBuf, source: RecoveryError },
    #[error("node {dir}: {why}")]
    Leases { dir: PathBuf, why: String },
}

/// The node nicfs serves.
pub(crate) struct Node {
    pub(crate) dir: PathBuf,
    pub(crate) geometry: Geometry,
    area: Mutex<PublicArea>,
    slots: Slots,
    /// Most log one fetch copies ([`CHUNK_BYTES`] unless `--chunk-bytes` says otherwise).
    chunk_bytes: AtomicU64,
    pub(crate) counters: Counters,
    /// Inode numbers and block reservations of the node's sessions.
    pub(crate) alloc: Alloc,
    /// Inodes the sessions hold open, and orphans kept for them.
    pub(crate) opens: crate::node::opens::Opens,
    /// What each session may write whatever the modes say now ([`crate::node::grants`]).
    pub(crate) grants: crate::node::grants::Grants,
    /// The write leases, recorded in PM for the next start's recovery.
    pub(crate) leases: Arc<LeaseFile>,
    /// Keeps the public file mapped (the area holds its own reference too; the slots hold
    /// the log files); its block 0 holds the node record ([`Node::public_file`]).
    pm: NodePm,
    /// The exclusive flock of the node's lock file (pm's `node::LOCK_FILE`), held for the
    /// process's life.
    _lock: File,
}

impl Node {
    /// Locks the node in `dir`, opens it and recovers it.
    pub(crate) fn open(dir: &Path) -> Result<Node, StartError> {
        let lock = match linefs_pm::node::lock_node(dir) {
            Ok(Some(l)) => l,
            Ok(None) => return Err(StartError::Busy(dir.to_path_buf())),
            Err(source) => return Err(StartError::Open { path: dir.join(linefs_pm::node::LOCK_FILE), source }),
        };
        replace_resized_logs(dir).map_err(|source| StartError::Format { dir: dir.to_path_buf(), source })?;
        let mut pm = NodePm::open(dir).map_err(|source| StartError::Format { dir: dir.to_path_buf(), source })?;
        linefs_pm::slotfile::remove_stray(dir, &pm.geometry);
        // The log suffixes are admitted by the write leases recorded before the restart, and
        // what no check saw before the crash is judged by meaning (crate::node::rejudge); a node
        // without a record (new, or run host-only until now) trusts its logs.
        let (leases, recorded) = LeaseFile::open(dir, pm.geometry.inode_count, pm.geometry.log_slots)
            .map_err(|why| StartError::Leases { dir: dir.to_path_buf(), why })?;
        let rec = recover_judged(&pm, &mut Rejudge::new(&leases, recorded))
            .map_err(|source| StartError::Recovery { dir: dir.to_path_buf(), source })?;
        leases.clear();
        for s in &rec.slots {
            tracing::info!(slot = s.slot, replayed = s.replayed, checkpoint = s.published, stop = ?s.stop, "recovered log slot");
        }
        tracing::info!(
            dir = %dir.display(),
            slots = rec.geometry.log_slots,
            inodes = rec.loaded.inodes.len(),
            replayed = rec.replayed(),
            orphans_freed = rec.orphans_freed,
            "node recovered"
        );
        let geometry = rec.geometry;
        let alloc = Alloc::new(PublicReader::shared(pm.public.clone(), geometry), rec.loaded.inodes.keys().copied());
        let checkpoints: Vec<u64> = rec.slots.iter().map(|s| s.published).collect();
        let slots = Slots::open(dir, geometry, std::mem::take(&mut pm.logs), &checkpoints);
        Ok(Node {
            dir: dir.to_path_buf(),
            geometry,
            area: Mutex::new(rec.area),
            slots,
            chunk_bytes: AtomicU64::new(CHUNK_BYTES),
            counters: Counters::default(),
            alloc,
            opens: Default::default(),
            grants: crate::node::grants::Grants::new(geometry.inode_count),
            leases: Arc::new(leases),
            pm,
            _lock: lock,
        })
    }

    /// The public file, whose block 0 holds the node record (pm's `noderecord`, written
    /// only by the cluster membership, `crate::daemon::cluster`).
    pub(crate) fn public_file(&self) -> &Arc<linefs_pm::PmRegion> {
        &self.pm.public
    }

    fn log_path(&self, slot: u32) -> PathBuf {
        self.dir.join(log_file_name(slot))
    }
}

/// Replaces every log file of the node in `dir` whose size is not the geometry's — a client
/// of an earlier nicfs truncated or grew it — by a fresh one (pm's `slotfile`), so that the
/// node starts: what that client logged past its checkpoint is lost, and nothing else. The
/// checkpoint is the old header's published LSN if the header is still whole and valid,
/// else 0 (a fresh ring of zeros is empty from any LSN).
fn replace_resized_logs(dir: &Path) -> Result<(), FormatError> {
    use linefs_pm::slotfile::{self, SlotLsns};
    let public = linefs_pm::PmRegion::open_read_only(&dir.join(PUBLIC_FILE))?;
    let geo = linefs_pm::layout::Superblock::read(&public)?.geometry;
    drop(public);
    for slot in 0..geo.log_slots {
        let path = dir.join(log_file_name(slot));
        let size = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => m.len(),
            Ok(_) => 0,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
            Err(e) => return Err(linefs_pm::PmError::Io { what: format!("stat {}", path.display()), source: e }.into()),
        };
        if size == geo.log_size() {
            continue;
        }
        let published = header_lsn(&path, &geo, slot).unwrap_or(0);
        tracing::warn!(
            slot,
            size,
            expected = geo.log_size(),
            published,
            "log file of the wrong size (its client resized it): replaced by a fresh one"
        );
        slotfile::replace(dir, &geo, slot, SlotLsns { published, replicated: published })?;
    }
    Ok(())
}

/// The published LSN in the header of the log file at `path`, read with `pread` (the file
/// may be shorter than its header), if the header is whole and valid.
fn header_lsn(path: &Path, geo: &Geometry, slot: u32) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path).ok()?;
    let mut block = vec![0u8; linefs_pm::layout::BLOCK_SIZE as usize];
    f.read_exact_at(&mut block, 0).ok()?;
    // The header block alone: the header's checks take the ring's size from `geo`.
    let region = Arc::new(linefs_pm::PmRegion::traced_from_image(block));
    LogSlot::new(region, geo, slot).published_lsn().ok()
}

impl Node {
    /// Claims a free slot, or None when every slot is held.
    #[cfg(test)]
    pub(crate) fn claim(&self) -> Option<Claim> {
        self.slots.claim()
    }

    /// Claims a free slot if more than `keep_free` are free.
    pub(crate) fn claim_keeping(&self, keep_free: usize) -> Option<Claim> {
        self.slots.claim_keeping(keep_free)
    }

    /// Frees a claimed slot once its log is settled: its session's reservations end, the
    /// inode numbers it did not use go back, and its log file is replaced by a fresh one
    /// before anyone may claim it again ([`crate::node::slots`]).
    pub(crate) fn release(&self, claim: Claim) {
        self.leases.session_settled(claim.slot);
        self.alloc.end_session(claim.slot);
        self.slots.release(claim);
    }

    /// Times a client's log file was found resized since start.
    pub(crate) fn log_files_resized(&self) -> u64 {
        self.slots.resized_found()
    }

    /// Log files replaced since start (one per session ended, and every slot at start).
    pub(crate) fn log_files_replaced(&self) -> u64 {
        self.slots.replaced()
    }

    /// The descriptors a client of `slot` is handed: its log file read-write, and the
    /// public file read-only when `public` (a trusted client, [`crate::daemon::trust`]).
    pub(crate) fn client_files(&self, slot: u32, public: bool) -> std::io::Result<(File, Option<File>)> {
        let log = OpenOptions::new().read(true).write(true).open(self.log_path(slot))?;
        let public = if public { Some(File::open(self.dir.join(PUBLIC_FILE))?) } else { None };
        Ok((log, public))
    }

    /// The slot's durable checkpoint, as nicfs recorded it (not as the client's writable
    /// file may say).
    pub(crate) fn checkpoint(&self, slot: u32) -> u64 {
        self.slots.checkpoint(slot)
    }

    /// Slot `slot`'s log file as the start found it: see [`Slots::take_previous`].
    pub(crate) fn take_previous(&self, slot: u32) -> Option<(Arc<LogSlot>, u64)> {
        self.slots.take_previous(slot)
    }

    /// The public area's free data blocks now, pending frees included.
    pub(crate) fn free_blocks(&self) -> u64 {
        let area = self.area.lock();
        area.free_blocks() + area.pending_free_blocks()
    }

    pub(crate) fn ring_bytes(&self) -> u64 {
        if self.geometry.log_slots == 0 {
            return 0;
        }
        self.slots.log(0).ring_bytes()
    }

    /// Sets the most log one fetch copies.
    pub(crate) fn set_chunk_bytes(&self, bytes: u64) {
        self.chunk_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Copies the committed entries of `slot` from `from` that start before `until`, at most
    /// a chunk of them (at least one entry), out of its log file.
    #[cfg(test)]
    pub(crate) fn fetch(&self, slot: u32, from: u64, until: u64) -> Result<LogCopy, SlotError> {
        self.fetch_into(slot, from, until, Vec::new())
    }

    /// `Node::fetch` into `buf`, the buffer of an earlier copy handed back for reuse.
    pub(crate) fn fetch_into(&self, slot: u32, from: u64, until: u64, buf: Vec<u8>) -> Result<LogCopy, SlotError> {
        let max = self.chunk_bytes.load(Ordering::Relaxed);
        let resized = |why: String| {
            tracing::warn!(slot, "{why}; the session fails");
            SlotError::Log { slot, source: FormatError::Corrupt { what: format!("log slot {slot}"), detail: why } }
        };
        if let Some(why) = self.slots.resized(slot) {
            return Err(resized(why));
        }
        let fetched = self.slots.log(slot).fetch_into(from, until, max, buf);
        // A shrink during the copy faulted into zeros ([`crate::node::sigbus`]): what was read
        // is not the log.
        if let Some(why) = self.slots.resized(slot) {
            return Err(resized(why));
        }
        let (copy, read) = fetched.map_err(|source| SlotError::Log { slot, source })?;
        self.counters.fetched(read);
        Ok(copy)
    }

    /// Publishes `batch` (decoded from a fetched copy) as one batch — as `plan` coalesced it,
    /// if given — its file data copied through `host`; returns what was published and what
    /// the copies took.
    pub(crate) fn publish_batch(
        &self,
        batch: &Batch,
        plan: Option<&Plan>,
        host: &HostLink,
        perms: Option<&mut dyn Permissions>,
    ) -> (Result<Published, SlotError>, Copied) {
        let log = self.slots.log(batch.slot);
        let mut copied = Copied::default();
        let r = {
            let mut area = self.area.lock();
            // What the other sessions reserved is theirs: a batch that would need it fails
            // (its own session fails), rather than theirs later.
            area.set_alloc_floor(self.alloc.reserved_by_others(batch.slot));
            let mut mover = copylist::mover(host, batch.slot, log.region().len(), &mut copied);
            let r = publish_batch_checked(&mut area, &log, batch, plan, &mut mover, perms);
            area.set_alloc_floor(0);
            if let Ok(p) | Err(SlotError::Rejected { published: p, .. }) = &r {
                self.slots.set_checkpoint(batch.slot, p.upto);
            }
            r
        };
        match &r {
            Ok(p) | Err(SlotError::Rejected { published: p, .. }) => self.counters.published(p),
            Err(_) => {}
        }
        self.counters.copied(&copied);
        (r, copied)
    }

    /// Publishes this node's copy of another node's log (`log`, a replica copy nicfs alone
    /// writes) from its checkpoint, the entries that start before `until`, as one batch
    /// under the area's mutex — the same validation, permission checks (for the caller
    /// `perms` resolves) and checkpoint as a session's batch; file data is copied from the
    /// copy's region by nicfs. What local sessions reserved is kept from it. `admit` judges
    /// the batch first (`Err((n, lsn, why))`: entry `n`, at `lsn`, and the rest refused).
    /// Returns what was published and where the batch read ended (its last whole entry).
    pub(crate) fn publish_copy(
        &self,
        log: &LogSlot,
        until: u64,
        perms: &mut dyn Permissions,
        admit: impl FnOnce(&Batch) -> Result<(), (usize, u64, String)>,
    ) -> (Result<Published, SlotError>, u64) {
        let mut batch = match linefs_pm::publish::read_batch(log, linefs_pm::publish::Bounds::until(until)) {
            Ok(b) => b,
            Err(e) => return (Err(e), 0),
        };
        let end = batch.end();
        if let Err((n, lsn, why)) = admit(&batch) {
            batch = batch.refused_from(n, lsn, why);
        }
        if batch.entries.is_empty() && batch.malformed.is_none() {
            return (Ok(Published { from: batch.from, upto: batch.from, ..Published::default() }), end);
        }
        let r = {
            let mut area = self.area.lock();
            area.set_alloc_floor(self.alloc.reserved_by_others(u32::MAX));
            let mut mover = linefs_pm::public::DirectMover::new(log.region());
            let r = publish_batch_checked(&mut area, log, &batch, None, &mut mover, Some(perms));
            area.set_alloc_floor(0);
            r
        };
        if let Ok(p) | Err(SlotError::Rejected { published: p, .. }) = &r {
            self.counters.published(p);
        }
        (r, end)
    }

    /// Durably records how far `slot`'s log is replicated (its header's replicated LSN).
    pub(crate) fn set_replicated_lsn(&self, slot: u32, lsn: u64) -> Result<(), FormatError> {
        self.slots.log(slot).set_replicated_lsn(lsn)
    }

    /// Inode `ino` as published (None: not allocated).
    pub(crate) fn inode(&self, ino: u64) -> Result<Option<InodeImage>, FormatError> {
        let img = self.area.lock().read_inode(ino)?.img;
        Ok((img.mode != 0).then_some(img))
    }

    /// Where `slot`'s log space may be reused up to (published and replicated).
    pub(crate) fn reclaim_lsn(&self, slot: u32) -> Result<u64, FormatError> {
        self.slots.log(slot).reclaim_lsn()
    }

    /// Frees orphan `ino` (no link left; its last opener closed it): as recovery frees
    /// orphans, under the area's mutex, then its number is free again (and nobody's write
    /// grant of it survives). An inode that is
    /// free already, or linked, is left alone.
    pub(crate) fn free_orphan(&self, ino: u64) {
        let freed = {
            let mut area = self.area.lock();
            match area.read_inode(ino) {
                Ok(i) if i.img.mode != 0 && i.img.nlink == 0 => {
                    let region = area.region().clone();
                    let r = area.apply(&linefs_pm::record::Record::FreeInode { ino }, &region);
                    area.fence();
                    area.checkpoint_done();
                    r.map_err(|e| tracing::error!(ino, error = %e, "cannot free a kept orphan; recovery will")).is_ok()
                }
                Ok(_) => false,
                Err(e) => {
                    tracing::error!(ino, error = %e, "cannot read a kept orphan; recovery will free it");
                    false
                }
            }
        };
        if freed {
            tracing::debug!(ino, "kept orphan freed");
            self.grants.freed(ino);
            self.alloc.freed(ino);
        }
    }

    /// Drops the unpublished suffix of `slot` — entries that were refused and those after
    /// them — by moving its durable checkpoint past the end of its committed log. Used once
    /// the writer of refused entries is gone, so that the slot's next client starts clean
    /// and a restart's recovery does not stop at them. Returns the dropped range.
    pub(crate) fn discard_unpublished(&self, slot: u32) -> Result<(u64, u64), FormatError> {
        let log = self.slots.log(slot);
        // The area's mutex orders this with every publication.
        let _area = self.area.lock();
        let from = self.slots.checkpoint(slot);
        let end = log.scan(from)?.end;
        if end > from {
            log.set_published_lsn(end)?;
            self.slots.set_checkpoint(slot, end);
        }
        Ok((from, end))
    }

    /// The end of `slot`'s committed log now: where a scan from its checkpoint stops. Under
    /// the area's mutex, so that the checkpoint does not move (nor the client reuse the log
    /// space before it) during the scan.
    pub(crate) fn committed_end(&self, slot: u32) -> Result<u64, FormatError> {
        let log = self.slots.log(slot);
        let _area = self.area.lock();
        Ok(log.scan(self.slots.checkpoint(slot))?.end)
    }

    /// A reader of the public area that does not wait for publications (a torn inode is
    /// read again): for checks that must not hold the area's mutex.
    pub(crate) fn public_reader(&self) -> PublicReader {
        PublicReader::shared(self.pm.public.clone(), self.geometry)
    }

    /// Holds the public area: no publication runs while the guard lives (shutdown holds it
    /// to the end of the process).
    pub(crate) fn freeze(&self) -> MutexGuard<'_, PublicArea> {
        self.area.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linefs_pm::layout::FormatParams;
    use linefs_pm::oplog::LogSlot;
    use linefs_pm::record::ROOT_INO;
    use linefs_pm::testing::create_file;
    use linefs_pm::PmRegion;
    use std::sync::Arc;
    use std::time::Duration;

    /// A formatted node served by a `Node`, and slot 0's log file as its client maps it.
    fn node() -> (tempfile::TempDir, Node, LogSlot) {
        let dir = tempfile::tempdir().unwrap();
        let params = FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 2, inodes: 256 };
        linefs_pm::mkfs::format_dir(dir.path(), &params).unwrap();
        let node = Node::open(dir.path()).unwrap();
        let region = Arc::new(PmRegion::open(&dir.path().join(log_file_name(0))).unwrap());
        let log = LogSlot::new(region, &node.geometry, 0);
        (dir, node, log)
    }

    #[test]
    fn what_is_published_is_what_was_fetched_not_what_the_log_says_later() {
        let (dir, node, log) = node();
        let host = HostLink::new(dir.path().to_path_buf(), Duration::from_millis(100));
        let first = log.append(0, 0, create_file(2, b"honest", b"data").payload()).unwrap();
        let copy = node.fetch(0, 0, first.end).unwrap();
        let header = linefs_pm::oplog::ENTRY_HEADER;
        assert_eq!(node.counters.snapshot().bytes_fetched, first.end + header, "the entry and its header peeked");
        let (batch, _) = Batch::from_copy(&copy);
        // The client rewrites the entry after the fetch: another inode, another name, a
        // valid checksum. The copy is what gets published.
        log.append(0, 0, create_file(3, b"sneaky", b"data").payload()).unwrap();
        let (r, copied) = node.publish_batch(&batch, None, &host, None);
        let p = r.unwrap();
        assert_eq!((p.upto, p.entries), (first.end, 1));
        assert_eq!(copied.by_nicfs, 1, "isolated: nicfs copied the data itself");
        assert_eq!(node.counters.snapshot().copy_lists_by_nicfs, 1);
        let loaded = node.freeze().reader().load().unwrap();
        let names: Vec<_> = loaded.dirs[&ROOT_INO].iter().map(|e| (e.name.clone(), e.ino)).collect();
        assert_eq!(names, vec![(b"honest".to_vec(), 2)]);
    }
}
