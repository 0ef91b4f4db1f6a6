//! A link that injects the node's refusals in front of another ([`FaultLink`]), as
//! mountpoint-s3's failure client wraps its client: a test decides which call the node
//! refuses, with which [`RemoteError`], and how many times, and checks what the
//! application sees. Everything else goes through to the link it wraps.

use super::{InodeRange, Link, NodeLink, Observer, Progress, Space};
use crate::error::{FsError, FsResult};
use crate::leases::{Leases, Need};
use linefs_proto::RemoteError;
use parking_lot::Mutex;
use std::collections::HashMap;

/// The calls of a link that can be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Call {
    Lease,
    AllocInodes,
    ReserveBlocks,
    Fsync,
    StatFs,
}

/// Wraps `inner`; each armed call is refused with its code while its count lasts.
pub(crate) struct FaultLink {
    inner: Link,
    armed: Mutex<HashMap<Call, (RemoteError, u32)>>,
}

impl FaultLink {
    pub(crate) fn new(inner: Link) -> FaultLink {
        FaultLink { inner, armed: Mutex::new(HashMap::new()) }
    }

    /// The next `times` calls of `call` are refused with `code` (`u32::MAX`: every one).
    pub(crate) fn refuse(&self, call: Call, code: RemoteError, times: u32) {
        self.armed.lock().insert(call, (code, times));
    }

    /// `call` goes through again.
    pub(crate) fn disarm(&self, call: Call) {
        self.armed.lock().remove(&call);
    }

    /// Refuses `call` if it is armed.
    fn check(&self, call: Call) -> FsResult<()> {
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
    fn leases(&self) -> &Leases {
        self.inner.leases()
    }

    fn request_lease(&self, need: Need) -> FsResult<()> {
        self.check(Call::Lease)?;
        self.inner.request_lease(need)
    }

    fn alloc_inodes(&self, count: u32) -> FsResult<InodeRange> {
        self.check(Call::AllocInodes)?;
        self.inner.alloc_inodes(count)
    }

    fn reserve_blocks(&self, count: u64) -> FsResult<()> {
        self.check(Call::ReserveBlocks)?;
        self.inner.reserve_blocks(count)
    }

    fn release_blocks(&self, count: u64) {
        self.inner.release_blocks(count)
    }

    fn fsync(&self, lsn: u64) -> FsResult<u64> {
        self.check(Call::Fsync)?;
        self.inner.fsync(lsn)
    }

    fn statfs(&self) -> FsResult<Space> {
        self.check(Call::StatFs)?;
        self.inner.statfs()
    }

    fn opened(&self, ino: u64) {
        self.inner.opened(ino)
    }

    fn closed(&self, ino: u64) {
        self.inner.closed(ino)
    }

    fn set_committed(&self, lsn: u64) {
        self.inner.set_committed(lsn)
    }

    fn chunk_ready(&self, lsn: u64) {
        self.inner.chunk_ready(lsn)
    }

    fn take_progress(&self) -> Progress {
        self.inner.take_progress()
    }

    fn failed(&self) -> bool {
        self.inner.failed()
    }

    fn failure(&self) -> Option<String> {
        self.inner.failure()
    }

    fn set_observer(&self, o: Observer) {
        self.inner.set_observer(o)
    }

    fn detach(&self) {
        self.inner.detach()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Cred, ROOT_INO};
    use crate::link::fake::FakeLink;
    use crate::options::FsOptions;
    use crate::state::Fs;
    use linefs_pm::layout::FormatParams;
    use std::sync::Arc;

    /// A client of an in-process fake node, its calls going through a fault link.
    fn client() -> (Fs, Arc<FaultLink>) {
        let (fake, session) =
            FakeLink::new(&FormatParams { size: 32 << 20, log_size: 4 << 20, log_slots: 2, inodes: 1024 });
        let fault = Arc::new(FaultLink::new(Arc::new(fake)));
        let opts = FsOptions { background_publish: false, ..Default::default() };
        let fs = Fs::offload(session, fault.clone(), InodeRange { first: 0, count: 0 }, "(fake)".into(), opts).unwrap();
        (fs, fault)
    }

    /// Whatever the node refuses a block reservation or an fsync with, the application's
    /// write or sync fails with that refusal's errno — every code the wire has, including
    /// those a real nicfs cannot be made to send on demand (fenced, shutting down, …).
    #[test]
    fn every_refusal_reaches_the_application_as_its_errno() {
        let (fs, fault) = client();
        let root = Cred::root();
        let (a, fh) = fs.create(&root, ROOT_INO, b"f", 0o644, 0o022, libc::O_RDWR).unwrap();
        for (i, code) in RemoteError::ALL.into_iter().enumerate() {
            let off = (2 * i as u64) << 16;
            fault.refuse(Call::ReserveBlocks, code, u32::MAX);
            let e = fs.write(&root, a.ino, off, &[7u8; 4096]).unwrap_err();
            assert_eq!(e.errno(), code.errno(), "{code:?} on ReserveBlocks: {e}");
            fault.disarm(Call::ReserveBlocks);
            fs.write(&root, a.ino, off, &[7u8; 4096]).unwrap();
            fault.refuse(Call::Fsync, code, 1);
            let e = fs.sync_all().unwrap_err();
            assert_eq!(e.errno(), code.errno(), "{code:?} on Fsync: {e}");
            fs.sync_all().unwrap();
        }
        fs.release(a.ino, fh);
        assert_eq!(fs.read(a.ino, 0, 4096).unwrap(), vec![7u8; 4096], "the writes that went through are there");
    }

    /// A refused lease fails the call that needed it with the refusal's errno; the
    /// node's inode numbers refused, a create fails with it.
    #[test]
    fn a_refused_lease_or_inode_grant_reaches_the_application() {
        let (fs, fault) = client();
        let root = Cred::root();
        fault.refuse(Call::Lease, RemoteError::AccessDenied, 1);
        assert_eq!(fs.lookup(&root, ROOT_INO, b"x").unwrap_err().errno(), libc::EACCES);
        fault.refuse(Call::AllocInodes, RemoteError::QuotaExceeded, 1);
        assert_eq!(fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap_err().errno(), libc::EDQUOT);
        let d = fs.mkdir(&root, ROOT_INO, b"d", 0o755, 0).unwrap();
        assert_eq!(fs.lookup(&root, ROOT_INO, b"d").unwrap().ino, d.ino);
    }
}
