//! An in-process node for the offload mode's tests ([`FakeLink`]): what nicfs answers a
//! single client, without a nicfs process or a socket. It formats a node in a temporary
//! directory ([`format`]; a client after another recovers it first, as a restarted nicfs
//! would), hands the client its log slot's file and the public file, grants every lease
//! at once, hands out inode numbers and block reservations from the public area's counts,
//! and publishes the client's log with pm's publisher when the client reports a chunk or
//! asks for an fsync. Nothing here is what nicfs checks (leases of other clients,
//! permissions, limits): tests of that interaction run the real nicfs.

use super::{InodePool, InodeRange, NodeLink, Observer, Progress, Session, Space};
use crate::error::{FsError, FsResult};
use crate::leases::{Grant, Leases, Need};
use crate::publication::Publication;
use linefs_pm::bitmap::Bitmap;
use linefs_pm::layout::FormatParams;
use linefs_pm::node::NodePm;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::PublicArea;
use linefs_pm::publish::{publish_slot, Bounds};
use linefs_proto::RemoteError;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Blocks the fake keeps for publication's own metadata (as nicfs's margin).
const META_RESERVE: u64 = 64;

struct Node {
    area: PublicArea,
    log: LogSlot,
    /// Inode numbers neither in use at format nor handed out.
    free_inodes: BTreeSet<u64>,
    reserved: u64,
    published: u64,
    touched: Vec<u64>,
    failed: Option<String>,
}

/// The temporary directory of a fake node, kept while the node or a client of it lives.
pub(crate) type NodeDir = Arc<tempfile::TempDir>;

/// Formats a node of `params` in a temporary directory.
pub(crate) fn format(params: &FormatParams) -> FsResult<NodeDir> {
    let dir =
        tempfile::tempdir().map_err(|e| FsError::Io { what: "fake node: temporary directory".into(), source: e })?;
    linefs_pm::mkfs::format_dir(&node_path(&dir), params)?;
    Ok(Arc::new(dir))
}

fn node_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("node0")
}

/// A formatted node and the one client it serves in process.
pub(crate) struct FakeLink {
    _dir: NodeDir,
    leases: Leases,
    pool: InodePool,
    node: Mutex<Node>,
    committed: AtomicU64,
    next_lease: AtomicU64,
}

impl FakeLink {
    /// The node in `dir`, recovered (every slot's committed log published, orphans freed),
    /// and the session of its slot 0 (what nicfs's `Attached` carries).
    pub(crate) fn open(dir: NodeDir) -> FsResult<(FakeLink, Session)> {
        let pm = NodePm::open(&node_path(&dir))?;
        let rec = linefs_pm::recovery::recover(&pm)?;
        let geo = rec.geometry;
        let in_use: BTreeSet<u64> = rec.loaded.inodes.keys().copied().collect();
        let free_inodes = (1..geo.inode_count).filter(|i| !in_use.contains(i)).collect();
        let log = LogSlot::new(pm.logs[0].clone(), &geo, 0);
        let published = log.published_lsn()?;
        let session = Session {
            public: pm.public.clone(),
            log: pm.logs[0].clone(),
            slot: 0,
            ring_bytes: log.ring_bytes(),
            start_lsn: published,
        };
        let node = Node { area: rec.area, log, free_inodes, reserved: 0, published, touched: Vec::new(), failed: None };
        let link = FakeLink {
            _dir: dir,
            leases: Leases::default(),
            pool: InodePool::default(),
            node: Mutex::new(node),
            committed: AtomicU64::new(published),
            next_lease: AtomicU64::new(1),
        };
        Ok((link, session))
    }

    /// Publishes the committed log up to `until` (as nicfs's pipeline would).
    fn publish(&self, until: u64) -> FsResult<u64> {
        let mut n = self.node.lock();
        if let Some(why) = &n.failed {
            return Err(refused(RemoteError::SessionFailed, why));
        }
        let until = until.min(self.committed.load(Ordering::Acquire));
        if n.published >= until {
            return Ok(n.published);
        }
        let Node { area, log, .. } = &mut *n;
        match publish_slot(area, log, Bounds { until, max_bytes: u64::MAX }) {
            Ok(p) => {
                n.published = p.upto;
                n.touched.extend(p.touched);
                Ok(p.upto)
            }
            Err(e) => {
                let why = e.to_string();
                n.failed = Some(why.clone());
                Err(refused(RemoteError::EntryRefused, &why))
            }
        }
    }

    /// Data blocks a new reservation could get.
    fn available(n: &Node) -> u64 {
        (n.area.free_blocks() + n.area.pending_free_blocks()).saturating_sub(n.reserved + META_RESERVE)
    }
}

fn refused(code: RemoteError, message: &str) -> FsError {
    FsError::Refused { what: "fake node".into(), code, message: message.into() }
}

impl FakeLink {
    /// A range of free inode numbers (what nicfs's `AllocInodes` answers).
    fn alloc_inodes(&self, count: u32) -> FsResult<InodeRange> {
        let mut n = self.node.lock();
        // A contiguous run from the lowest free number.
        let Some(&first) = n.free_inodes.first() else { return Err(refused(RemoteError::NoSpace, "no free inode")) };
        let mut count_given = 0;
        while count_given < u64::from(count) && n.free_inodes.remove(&(first + count_given)) {
            count_given += 1;
        }
        Ok(InodeRange { first, count: count_given })
    }
}

impl NodeLink for FakeLink {
    fn shared(&self) -> bool {
        true
    }

    fn leases(&self) -> &Leases {
        &self.leases
    }

    fn request_lease(&self, need: Need) -> FsResult<()> {
        let lease = self.next_lease.fetch_add(1, Ordering::Relaxed);
        self.leases.granted(Grant { ino: need.ino, write: need.write, lease });
        Ok(())
    }

    fn take_inode(&self, in_use: &mut Bitmap) -> FsResult<u64> {
        self.pool.take(&self.leases, in_use, |n| self.alloc_inodes(n))
    }

    fn give_back_inode(&self, ino: u64) {
        self.pool.give_back(&self.leases, ino)
    }

    fn own_inodes(&self) -> u64 {
        self.pool.len()
    }

    fn space_margin(&self) -> u64 {
        // Kept by the node (`available`), as nicfs does.
        0
    }

    fn reserve_blocks(&self, count: u64) -> FsResult<()> {
        let mut n = self.node.lock();
        if count > FakeLink::available(&n) {
            return Err(refused(RemoteError::NoSpace, "not that many free blocks"));
        }
        n.reserved += count;
        Ok(())
    }

    fn release_blocks(&self, count: u64) {
        let mut n = self.node.lock();
        n.reserved -= count.min(n.reserved);
    }

    fn fsync(&self, lsn: u64) -> FsResult<u64> {
        self.publish(lsn)
    }

    fn statfs(&self, _in_use: &Bitmap) -> FsResult<Space> {
        let n = self.node.lock();
        Ok(Space { free_blocks: FakeLink::available(&n), free_inodes: n.free_inodes.len() as u64 })
    }

    fn opened(&self, _ino: u64) {}

    fn closed(&self, _ino: u64) {}

    fn set_committed(&self, lsn: u64) {
        self.committed.fetch_max(lsn, Ordering::AcqRel);
    }

    fn chunk_ready(&self, lsn: u64) {
        if let Err(e) = self.publish(lsn) {
            tracing::error!(error = %e, "fake node: publication failed");
        }
    }

    fn follow(&self, publication: &Publication) {
        let progress = {
            let mut n = self.node.lock();
            Progress {
                published: n.published,
                reclaim: n.published,
                touched: std::mem::take(&mut n.touched),
                touched_all: false,
                failed: n.failed.clone(),
            }
        };
        publication.follow(progress);
    }

    fn failed(&self) -> bool {
        self.node.lock().failed.is_some()
    }

    fn failure(&self) -> Option<String> {
        self.node.lock().failed.clone()
    }

    fn set_observer(&self, _o: Observer) {}

    fn detach(&self) {
        let _ = self.publish(u64::MAX);
    }
}
