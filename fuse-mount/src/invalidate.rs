//! Kernel cache invalidation for a mount in the offload mode: when libfs loses a lease on an
//! inode (another client of the node is about to change it), the kernel's caches of it are
//! dropped, so that the next call on this mount reaches libfs — which takes the lease again
//! and reads the other client's changes. [`Invalidator`] is libfs's [`LeaseObserver`].
//!
//! The kernel may hold a directory's lock, or a file's page locks, while its request waits in
//! libfs for a lease that the other client must hand back first; so what runs before our
//! hand-back must take no lock of the kernel's, or the two clients could wait for each other
//! for ever. Two notifications take none (checked in the kernel's `fs/fuse`: they bump
//! counters under spinlocks): `FUSE_NOTIFY_INVAL_INODE` with a negative offset expires the
//! inode's attributes only, and `FUSE_NOTIFY_INC_EPOCH` (kernel 6.16, FUSE 7.44) expires
//! every name the kernel caches for the mount. Those run before the hand-back
//! ([`LeaseObserver::before_handback`]): after it the other client can change the inode, and
//! by then a stat or a lookup on this mount goes to libfs. What takes locks — dropping the
//! cached pages (page locks, and with them an unmapping of mmaps), and without the epoch
//! notification each cached name (the directory's lock) — is queued for a thread of its
//! own after the hand-back. Until it has run, a read of a file kept open is still right:
//! `FUSE_AUTO_INVAL_DATA` has the read revalidate the (expired) attributes first and drop the
//! pages if the size or modification time changed; an open of the inode drops them too
//! ([`KernelCache::lost`]). A notification about an inode the kernel does not know (ENOENT)
//! is normal and ignored.

use std::ffi::OsStr;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

use fuser::{INodeNo, Notifier};
use libfs::{Fs, LeaseObserver, LostInode};
use tracing::{debug, warn};

use crate::cache::{Invalidation, KernelCache};

/// `FUSE_NOTIFY_INC_EPOCH` from the kernel's `include/uapi/linux/fuse.h` (ABI 7.44,
/// [`crate::cache::EPOCH_MINOR`]); fuser 0.18 does not send it, so [`EpochNotifier`] writes
/// it to the device itself.
const FUSE_NOTIFY_INC_EPOCH: i32 = 8;

/// Sends `FUSE_NOTIFY_INC_EPOCH` on a descriptor of the session's `/dev/fuse`: every cached
/// name of the mount is revalidated (a LOOKUP) at its next use.
#[derive(Debug, Clone)]
pub struct EpochNotifier {
    dev: Arc<OwnedFd>,
}

impl EpochNotifier {
    /// `dev`: a descriptor of the mount's `/dev/fuse` (a duplicate of the session's).
    pub fn new(dev: OwnedFd) -> EpochNotifier {
        EpochNotifier { dev: Arc::new(dev) }
    }

    /// Expires every name the kernel caches for the mount.
    // The FUSE device speaks the host's byte order (a kernel ABI, not a stored or wire format).
    #[allow(clippy::host_endian_bytes)]
    pub fn bump(&self) -> io::Result<()> {
        // struct fuse_out_header { u32 len; i32 error; u64 unique; }: a notification has
        // unique 0 and its code in `error`; this one has no body.
        let mut msg = [0u8; 16];
        msg[0..4].copy_from_slice(&16u32.to_ne_bytes());
        msg[4..8].copy_from_slice(&FUSE_NOTIFY_INC_EPOCH.to_ne_bytes());
        let n = rustix::io::write(&*self.dev, &msg)?;
        if n != msg.len() {
            return Err(io::Error::other(format!("short write of a notification: {n} bytes")));
        }
        Ok(())
    }
}

/// libfs's observer of lost leases for one mount.
pub struct Invalidator {
    notifier: Notifier,
    /// `None` without the epoch notification (kernel before 6.16, or a mount made through
    /// fusermount3, whose device descriptor we do not have).
    epoch: Option<EpochNotifier>,
    /// Set when the kernel refused the epoch notification: names go after the hand-back.
    epoch_failed: AtomicBool,
    cache: Arc<KernelCache>,
    queue: Mutex<mpsc::Sender<LostInode>>,
}

/// Starts the invalidation of `fs`'s mount: registers an [`Invalidator`] with libfs and starts
/// the thread that drops pages (and names without the epoch notification) after each
/// hand-back, then tells `cache` how lost leases are now invalidated. The thread ends when
/// libfs drops the invalidator (the client is gone).
pub fn start(fs: &Fs, notifier: Notifier, epoch: Option<EpochNotifier>, cache: Arc<KernelCache>) -> io::Result<()> {
    let (tx, rx) = mpsc::channel::<LostInode>();
    let how = if epoch.is_some() { Invalidation::Full } else { Invalidation::NamesAfter };
    let inv = Arc::new(Invalidator {
        notifier: notifier.clone(),
        epoch,
        epoch_failed: AtomicBool::new(false),
        cache: cache.clone(),
        queue: Mutex::new(tx),
    });
    let names = inv.clone();
    std::thread::Builder::new().name("fuse-invalidate".into()).spawn(move || {
        while let Ok(lost) = rx.recv() {
            after(&notifier, &lost, !names.names_before());
        }
    })?;
    fs.observe_leases(inv);
    cache.set_invalidation(how);
    debug!(?how, "kernel cache invalidation set up");
    Ok(())
}

impl Invalidator {
    /// Whether names are expired before the hand-back.
    fn names_before(&self) -> bool {
        self.epoch.is_some() && !self.epoch_failed.load(Ordering::Acquire)
    }
}

/// Logs a failed notification; ENOENT (an inode the kernel does not know) is normal.
fn quiet(ino: u64, what: &str, r: io::Result<()>) {
    if let Err(e) = r {
        if e.raw_os_error() != Some(libc::ENOENT) {
            debug!(ino, what, error = %e, "kernel cache invalidation failed");
        }
    }
}

impl LeaseObserver for Invalidator {
    fn before_handback(&self, lost: &LostInode) {
        debug!(ino = lost.ino, dir = ?lost.dir, "lease lost: expiring the kernel's attributes and names");
        // Attributes only (a negative offset): no page lock is taken.
        quiet(lost.ino, "attributes", self.notifier.inval_inode(INodeNo(lost.ino), -1, 0));
        if lost.dir != Some(true) {
            self.cache.lost(lost.ino);
        }
        if lost.dir != Some(false) {
            if let Some(epoch) = &self.epoch {
                if !self.epoch_failed.load(Ordering::Acquire) {
                    if let Err(e) = epoch.bump() {
                        warn!(error = %e, "the kernel refused FUSE_NOTIFY_INC_EPOCH; names are now dropped after a lease is handed back");
                        self.epoch_failed.store(true, Ordering::Release);
                        self.cache.set_invalidation(Invalidation::NamesAfter);
                    }
                }
            }
        }
    }

    fn after_handback(&self, lost: LostInode) {
        if let Ok(q) = self.queue.lock() {
            let _ = q.send(lost);
        }
    }
}

/// After the hand-back: every cached page (and mapping) of the inode, and the names of a
/// directory unless the epoch notification expired them already.
fn after(notifier: &Notifier, lost: &LostInode, names: bool) {
    quiet(lost.ino, "pages", notifier.inval_inode(INodeNo(lost.ino), 0, 0));
    if names {
        for name in &lost.names {
            quiet(lost.ino, "entry", notifier.inval_entry(INodeNo(lost.ino), OsStr::from_bytes(name)));
        }
    }
}
