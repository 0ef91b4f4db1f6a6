//! A link that injects the node's refusals in front of another ([`FaultLink`]), as
//! mountpoint-s3's failure client wraps its client: a test decides which call the node
//! refuses, with which [`RemoteError`], and how many times (a node fenced, shutting down,
//! timing out), or cuts the link altogether (the node died between two calls: every call
//! fails from then on, the session failed), and checks what the application sees. Everything else
//! goes through to the link it wraps, which must be one whose node publishes (the default
//! [`NodeLink::publish`] runs here, so an injected fsync refusal is seen where a real one
//! would be).

use super::{Link, NodeLink, Observer, Space};
use crate::error::{FsError, FsResult};
use crate::leases::{Leases, Need};
use crate::publication::Publication;
use linefs_pm::bitmap::Bitmap;
use linefs_proto::RemoteError;
use parking_lot::Mutex;
use std::collections::HashMap;

/// The calls of a link that can be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// A lease request (every call on an inode not held).
    Lease,
    /// Free inode numbers (a create).
    AllocInodes,
    /// A block reservation (a write, a create).
    ReserveBlocks,
    /// Publication up to an LSN (fsync, sync, a full log, unmount).
    Fsync,
    /// The node's free space (statfs, status).
    StatFs,
}

impl Call {
    /// Every call that can be refused.
    pub const ALL: [Call; 5] = [Call::Lease, Call::AllocInodes, Call::ReserveBlocks, Call::Fsync, Call::StatFs];
}

/// Wraps `inner`; each armed call is refused with its code while its count lasts.
pub(crate) struct FaultLink {
    inner: Link,
    armed: Mutex<HashMap<Call, (RemoteError, u32)>>,
    /// Cut: the node is gone (every call fails as on a closed connection, the session
    /// failed).
    cut: std::sync::atomic::AtomicBool,
}

impl FaultLink {
    pub(crate) fn new(inner: Link) -> FaultLink {
        FaultLink { inner, armed: Mutex::new(HashMap::new()), cut: std::sync::atomic::AtomicBool::new(false) }
    }

    /// The next `times` calls of `call` are refused with `code` (`u32::MAX`: every one).
    pub(crate) fn refuse(&self, call: Call, code: RemoteError, times: u32) {
        self.armed.lock().insert(call, (code, times));
    }

    /// `call` goes through again.
    pub(crate) fn disarm(&self, call: Call) {
        self.armed.lock().remove(&call);
    }

    /// From now on the node is gone, as `remote` sees nicfs die or hang up: every call
    /// fails as on a closed connection, notices are dropped, the session counts as failed
    /// and its leases are dropped.
    pub(crate) fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::Release);
        self.inner.leases().drop_all();
    }

    fn is_cut(&self) -> bool {
        self.cut.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Refuses `call` if it is armed; fails it if the link is cut.
    fn check(&self, call: Call) -> FsResult<()> {
        if self.is_cut() {
            let source =
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the node is gone (injected by FaultLink)");
            return Err(FsError::Io { what: format!("{call:?}"), source });
        }
        let mut armed = self.armed.lock();
        let Some((code, left)) = armed.get_mut(&call) else { return Ok(()) };
        let code = *code;
        *left = left.saturating_sub(1);
        if *left == 0 {
            armed.remove(&call);
        }
        Err(FsError::Refused { what: format!("{call:?} (injected)"), code, message: "injected by FaultLink".into() })
    }
}

impl NodeLink for FaultLink {
    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn leases(&self) -> &Leases {
        self.inner.leases()
    }

    fn request_lease(&self, need: Need) -> FsResult<()> {
        self.check(Call::Lease)?;
        self.inner.request_lease(need)
    }

    /// Refused as the node's `AllocInodes` would be (whether or not the wrapped link has
    /// numbers left from an earlier grant).
    fn take_inode(&self, in_use: &mut Bitmap) -> FsResult<u64> {
        self.check(Call::AllocInodes)?;
        self.inner.take_inode(in_use)
    }

    fn give_back_inode(&self, ino: u64) {
        self.inner.give_back_inode(ino)
    }

    fn own_inodes(&self) -> u64 {
        self.inner.own_inodes()
    }

    fn space_margin(&self) -> u64 {
        self.inner.space_margin()
    }

    fn reserve_blocks(&self, count: u64) -> FsResult<()> {
        self.check(Call::ReserveBlocks)?;
        self.inner.reserve_blocks(count)
    }

    fn release_blocks(&self, count: u64) {
        if !self.is_cut() {
            self.inner.release_blocks(count)
        }
    }

    fn fsync(&self, lsn: u64) -> FsResult<u64> {
        self.check(Call::Fsync)?;
        self.inner.fsync(lsn)
    }

    fn fsync_asks_node(&self) -> bool {
        self.inner.fsync_asks_node()
    }

    fn follow(&self, publication: &Publication) {
        self.inner.follow(publication)
    }

    fn statfs(&self, in_use: &Bitmap) -> FsResult<Space> {
        self.check(Call::StatFs)?;
        self.inner.statfs(in_use)
    }

    fn opened(&self, ino: u64) {
        if !self.is_cut() {
            self.inner.opened(ino)
        }
    }

    fn closed(&self, ino: u64) {
        if !self.is_cut() {
            self.inner.closed(ino)
        }
    }

    fn set_committed(&self, lsn: u64) {
        self.inner.set_committed(lsn)
    }

    fn chunk_ready(&self, lsn: u64) {
        if !self.is_cut() {
            self.inner.chunk_ready(lsn)
        }
    }

    fn failed(&self) -> bool {
        self.is_cut() || self.inner.failed()
    }

    fn failure(&self) -> Option<String> {
        if self.is_cut() {
            return Some("the node is gone (injected by FaultLink)".into());
        }
        self.inner.failure()
    }

    fn set_observer(&self, o: Observer) {
        self.inner.set_observer(o)
    }

    fn detach(&self) {
        if !self.is_cut() {
            self.inner.detach()
        }
    }
}
