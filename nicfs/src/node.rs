//! What nicfs owns of its node: the exclusive lock of the public file, the mapped PM, the
//! public area (one publisher at a time: a mutex), the log slots and which of them sessions
//! hold, and the publication counters.
//!
//! A slot is *claimed* by an exclusive `flock` of its log file, taken on a descriptor of
//! nicfs's own and held for the session, so that nothing else that follows the convention
//! (a host-only mount of that slot, a second nicfs) can use it meanwhile. The descriptors
//! handed to the client are opened separately: a lock belongs to an open file description,
//! and a client sharing ours could unlock it.
//!
//! Publication takes the area's mutex for one batch at a time (at most [`BATCH_BYTES`] of
//! log), so that sessions interleave and, as recovery assumes, at most one slot can be
//! caught mid-batch by a crash. Metadata is applied by nicfs; file data becomes the batch's
//! copy list, executed through the host link before the batch's checkpoint
//! ([`crate::copylist`]).

use crate::copylist;
use crate::hostlink::{Copied, HostLink};
use linefs_pm::layout::{FormatError, Geometry};
use linefs_pm::node::{log_file_name, NodePm, PUBLIC_FILE};
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::PublicArea;
use linefs_pm::publish::{publish_batch, read_batch, Bounds, Published, SlotError};
use linefs_pm::recovery::{recover, RecoveryError};
use parking_lot::{Mutex, MutexGuard};
use rustix::fs::{flock, FlockOperation};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Most bytes of log one publication batch covers (one hold of the area's mutex).
pub const BATCH_BYTES: u64 = 1 << 20;
/// What a client is asked to publish at: ChunkReady every this many committed bytes.
pub const CHUNK_BYTES: u64 = 4 << 20;

/// Why nicfs cannot serve a node.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("node {0} is in use (another nicfs, or a host-only mount, holds it)")]
    Busy(PathBuf),
    #[error("node {dir}: {source}")]
    Format { dir: PathBuf, source: FormatError },
    #[error("node {dir}: recovery failed: {source}")]
    Recovery { dir: PathBuf, source: RecoveryError },
}

/// Publication counters of the node, for the status file.
#[derive(Debug, Default)]
pub struct Counters {
    pub entries: AtomicU64,
    pub bytes: AtomicU64,
    pub chunks: AtomicU64,
    pub rejections: AtomicU64,
}

/// A claimed slot: released (lock dropped, slot free again) by [`Node::release`].
#[derive(Debug)]
pub struct Claim {
    pub slot: u32,
    lock: File,
}

/// The node nicfs serves.
pub struct Node {
    pub dir: PathBuf,
    pub geometry: Geometry,
    area: Mutex<PublicArea>,
    logs: Vec<LogSlot>,
    claimed: Mutex<Vec<bool>>,
    pub counters: Counters,
    /// Keeps the PM mapped (the area and slots hold their own references too).
    _pm: NodePm,
    /// The exclusive flock of public.pm, held for the process's life.
    _lock: File,
}

impl Node {
    /// Locks the node in `dir`, opens it and recovers it.
    pub fn open(dir: &Path) -> Result<Node, StartError> {
        let public = dir.join(PUBLIC_FILE);
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&public)
            .map_err(|source| StartError::Open { path: public.clone(), source })?;
        if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(StartError::Busy(dir.to_path_buf()));
        }
        let pm = NodePm::open(dir).map_err(|source| StartError::Format { dir: dir.to_path_buf(), source })?;
        let rec = recover(&pm).map_err(|source| StartError::Recovery { dir: dir.to_path_buf(), source })?;
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
        let logs = pm.logs.iter().enumerate().map(|(s, r)| LogSlot::new(r.clone(), &geometry, s as u32)).collect();
        Ok(Node {
            dir: dir.to_path_buf(),
            geometry,
            area: Mutex::new(rec.area),
            logs,
            claimed: Mutex::new(vec![false; geometry.log_slots as usize]),
            counters: Counters::default(),
            _pm: pm,
            _lock: lock,
        })
    }

    fn log_path(&self, slot: u32) -> PathBuf {
        self.dir.join(log_file_name(slot))
    }

    /// Claims a free slot, or None when every slot is held.
    pub fn claim(&self) -> Option<Claim> {
        let mut claimed = self.claimed.lock();
        for slot in 0..self.geometry.log_slots {
            if claimed[slot as usize] {
                continue;
            }
            let path = self.log_path(slot);
            let lock = match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(f) => f,
                Err(e) => {
                    tracing::error!(slot, path = %path.display(), error = %e, "cannot open log file");
                    continue;
                }
            };
            if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
                tracing::warn!(slot, "log file locked by another process; skipping the slot");
                continue;
            }
            claimed[slot as usize] = true;
            return Some(Claim { slot, lock });
        }
        None
    }

    /// Frees a claimed slot (its lock is dropped with the claim).
    pub fn release(&self, claim: Claim) {
        self.claimed.lock()[claim.slot as usize] = false;
        drop(claim.lock);
    }

    /// The descriptors a client of `slot` is handed: its log file read-write, the public
    /// file read-only.
    pub fn client_files(&self, slot: u32) -> std::io::Result<(File, File)> {
        let log = OpenOptions::new().read(true).write(true).open(self.log_path(slot))?;
        let public = File::open(self.dir.join(PUBLIC_FILE))?;
        Ok((log, public))
    }

    /// The slot's durable checkpoint.
    pub fn checkpoint(&self, slot: u32) -> Result<u64, FormatError> {
        self.logs[slot as usize].published_lsn()
    }

    pub fn ring_bytes(&self) -> u64 {
        self.logs.first().map_or(0, |l| l.ring_bytes())
    }

    /// Publishes `slot`'s committed entries that start before `until`, batch by batch, the
    /// file data of each batch copied through `host`. On a refusal, what was published
    /// before it is in the error's `published`.
    pub fn publish(&self, slot: u32, until: u64, host: &HostLink) -> Result<Published, SlotError> {
        let log = &self.logs[slot as usize];
        let mut total: Option<Published> = None;
        loop {
            let mut area = self.area.lock();
            let batch = read_batch(log, Bounds { until, max_bytes: BATCH_BYTES })?;
            let mut copied = Copied::default();
            let r = publish_batch(
                &mut area,
                log,
                &batch,
                &mut copylist::mover(host, slot, log.region().len(), &mut copied),
            );
            drop(area);
            let step = match r {
                Ok(p) => p,
                Err(SlotError::Rejected { slot, lsn, why, published }) => {
                    self.count(&published);
                    let published = merge(total, published);
                    return Err(SlotError::Rejected { slot, lsn, why, published });
                }
                Err(e) => return Err(e),
            };
            self.count(&step);
            let done = step.entries == 0;
            total = Some(merge(total, step));
            if done {
                return Ok(total.unwrap_or_default());
            }
        }
    }

    fn count(&self, p: &Published) {
        self.counters.entries.fetch_add(p.entries, Ordering::Relaxed);
        self.counters.bytes.fetch_add(p.upto - p.from, Ordering::Relaxed);
    }

    /// Drops the unpublished suffix of `slot` — entries that were refused and those after
    /// them — by moving its durable checkpoint past the end of its committed log. Used once
    /// the writer of refused entries is gone, so that the slot's next client starts clean
    /// and a restart's recovery does not stop at them. Returns the dropped range.
    pub fn discard_unpublished(&self, slot: u32) -> Result<(u64, u64), FormatError> {
        let log = &self.logs[slot as usize];
        // The area's mutex orders this with every publication.
        let _area = self.area.lock();
        let from = log.published_lsn()?;
        let end = log.scan(from)?.end;
        if end > from {
            log.set_published_lsn(end)?;
        }
        Ok((from, end))
    }

    /// Holds the public area: no publication runs while the guard lives (shutdown holds it
    /// to the end of the process).
    pub fn freeze(&self) -> MutexGuard<'_, PublicArea> {
        self.area.lock()
    }
}

fn merge(total: Option<Published>, step: Published) -> Published {
    match total {
        None => step,
        Some(mut t) => {
            t.upto = step.upto;
            t.entries += step.entries;
            t.touched.extend(step.touched);
            t.touched.sort_unstable();
            t.touched.dedup();
            t
        }
    }
}
