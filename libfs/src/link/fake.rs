//! An in-process node for the offload mode's tests ([`FakeLink`]): what nicfs answers a
//! single client, without a nicfs process or a socket. It formats a node in a temporary
//! directory, hands the client its log slot's file and the public file, grants every lease
//! at once, hands out inode numbers and block reservations from the public area's counts,
//! and publishes the client's log with pm's publisher when the client reports a chunk or
//! asks for an fsync. Nothing here is what nicfs checks (leases of other clients,
//! permissions, limits): tests of that interaction run the real nicfs.

use super::{InodeRange, NodeLink, Observer, Progress, Space};
use crate::error::{FsError, FsResult};
use crate::leases::{Grant, Leases, Need};
use crate::mount::Session;
use linefs_pm::layout::FormatParams;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::PublicArea;
use linefs_pm::publish::{publish_slot, Bounds};
use linefs_proto::RemoteError;
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// A formatted node and the one client it serves in process.
pub(crate) struct FakeLink {
    _dir: tempfile::TempDir,
    leases: Leases,
    node: Mutex<Node>,
    committed: AtomicU64,
    next_lease: AtomicU64,
}

impl FakeLink {
    /// A node of `params` and the session of its slot 0 (what nicfs's `Attached` carries).
    pub(crate) fn new(params: &FormatParams) -> (FakeLink, Session) {
        let dir = tempfile::tempdir().expect("tempdir");
        let pm = linefs_pm::mkfs::format_dir(&dir.path().join("node0"), params).expect("format");
        let rec = linefs_pm::recovery::recover(&pm).expect("recover a fresh node");
        let geo = rec.geometry;
        let in_use: BTreeSet<u64> = rec.loaded.inodes.keys().copied().collect();
        let free_inodes = (1..geo.inode_count).filter(|i| !in_use.contains(i)).collect();
        let log = LogSlot::new(pm.logs[0].clone(), &geo, 0);
        let published = log.published_lsn().expect("slot header");
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
            node: Mutex::new(node),
            committed: AtomicU64::new(published),
            next_lease: AtomicU64::new(1),
        };
        (link, session)
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

impl NodeLink for FakeLink {
    fn leases(&self) -> &Leases {
        &self.leases
    }

    fn request_lease(&self, need: Need) -> FsResult<()> {
        let lease = self.next_lease.fetch_add(1, Ordering::Relaxed);
        self.leases.granted(Grant { ino: need.ino, write: need.write, lease });
        Ok(())
    }

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

    fn statfs(&self) -> FsResult<Space> {
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

    fn take_progress(&self) -> Progress {
        let mut n = self.node.lock();
        Progress {
            published: n.published,
            reclaim: n.published,
            touched: std::mem::take(&mut n.touched),
            touched_all: false,
            failed: n.failed.clone(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Cred, ROOT_INO};
    use crate::options::FsOptions;
    use crate::state::Fs;
    use std::sync::Arc;

    fn client(params: &FormatParams) -> Fs {
        let (fake, session) = FakeLink::new(params);
        let opts = FsOptions { publish_interval: std::time::Duration::from_millis(20), ..Default::default() };
        Fs::offload(session, Arc::new(fake), InodeRange { first: 0, count: 0 }, "(fake)".into(), opts).unwrap()
    }

    /// The offload client's whole path against the fake node: inode numbers and blocks
    /// granted, leases taken, the log published on sync, the public area read back.
    #[test]
    fn an_offload_client_writes_syncs_and_reads_back() {
        let fs = client(&FormatParams { size: 32 << 20, log_size: 4 << 20, log_slots: 2, inodes: 1024 });
        assert!(fs.offloaded());
        let root = Cred::root();
        let before = fs.statfs();
        let (a, fh) = fs.create(&root, ROOT_INO, b"f", 0o644, 0o022, libc::O_RDWR).unwrap();
        let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
        fs.write(&root, a.ino, 0, &data).unwrap();
        fs.sync_all().unwrap();
        let s = fs.status();
        assert_eq!(s.published_lsn, s.tail_lsn, "everything published on sync");
        assert_eq!(fs.read(a.ino, 0, data.len() as u32).unwrap(), data);
        assert!(fs.statfs().bfree + 256 <= before.bfree, "{:?} then {:?}", before, fs.statfs());
        fs.release(a.ino, fh);
    }

    /// A node full of data: the writer gets ENOSPC from the node's refusal, and space
    /// comes back once the file is deleted and the delete published.
    #[test]
    fn the_node_full_is_enospc_and_a_delete_gives_the_space_back() {
        let fs = client(&FormatParams { size: 8 << 20, log_size: 2 << 20, log_slots: 2, inodes: 256 });
        let root = Cred::root();
        let (a, fh) = fs.create(&root, ROOT_INO, b"big", 0o644, 0o022, libc::O_RDWR).unwrap();
        let chunk = vec![1u8; 64 << 10];
        let mut off = 0;
        let e = loop {
            match fs.write(&root, a.ino, off, &chunk) {
                Ok(_) => off += chunk.len() as u64,
                Err(e) => break e,
            }
            assert!(off < 16 << 20, "an 8 MiB node took {off} bytes");
        };
        assert_eq!(e.errno(), libc::ENOSPC, "{e}");
        fs.release(a.ino, fh);
        fs.forget(a.ino, 1);
        fs.unlink(&root, ROOT_INO, b"big").unwrap();
        fs.sync_all().unwrap();
        let (b, fh) = fs.create(&root, ROOT_INO, b"again", 0o644, 0o022, libc::O_RDWR).unwrap();
        fs.write(&root, b.ino, 0, &chunk).unwrap();
        fs.release(b.ino, fh);
    }
}
