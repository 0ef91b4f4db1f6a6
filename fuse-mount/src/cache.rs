//! What the kernel may cache of a linefs mount, and for how long: the policy the adapter
//! follows in its replies ([`KernelCache`]), decided by the mount's mode.
//!
//! - **Host-only** (`--offload off`): the mount is the node's only client, so nothing changes
//!   a file or directory behind the kernel's back. Attributes and names are cached for
//!   [`LONG_TTL`], every open keeps the page cache (`FOPEN_KEEP_CACHE`).
//! - **Offload**: other clients of the node change files under leases, and the kernel's
//!   caches are kept true by invalidation when a lease is lost ([`crate::invalidate`]). Until
//!   that invalidation is set up, the mount caches as it always did: [`SHORT_TTL`] and no
//!   `FOPEN_KEEP_CACHE`. Once it is ([`KernelCache::set_invalidation`]): attributes for
//!   [`LONG_TTL`] (they are expired before a lease is handed back); names for [`LONG_TTL`] if
//!   the kernel can expire them without a lock before the hand-back
//!   (`FUSE_NOTIFY_INC_EPOCH`), else for [`SHORT_TTL`] (they are then dropped only after the
//!   hand-back); and pages kept across opens, except for an open of an inode whose lease was
//!   lost since (its pages are then dropped by the open, [`KernelCache::open_flags`]). A file
//!   kept open across another client's change is covered by `FUSE_AUTO_INVAL_DATA` (the
//!   adapter asks for it in the offload mode): every read first revalidates the attributes,
//!   expired by the revoke, and drops the pages when the size or modification time changed.
//!
//! docs/ARCHITECTURE.md ("Kernel caches and leases") gives the reasoning.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use fuser::{FopenFlags, INodeNo, Notifier};

/// The first FUSE ABI minor version with `FUSE_NOTIFY_INC_EPOCH` (Linux 6.16), which
/// [`crate::invalidate`] sends: whether the kernel has it decides how long names are cached.
pub const EPOCH_MINOR: u32 = 44;

/// How long attributes and names are cached when nothing can change them unseen.
pub const LONG_TTL: Duration = Duration::from_secs(3600);

/// How long they are cached when a change could only be seen by their expiry.
pub const SHORT_TTL: Duration = Duration::from_secs(1);

/// How kernel caches of lost leases are dropped (offload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidation {
    /// Not (yet): nothing is dropped when a lease is lost.
    None,
    /// Attributes before the hand-back, pages and names after it.
    NamesAfter,
    /// Attributes and names before the hand-back, pages after it.
    Full,
}

impl Invalidation {
    fn code(self) -> u8 {
        match self {
            Invalidation::None => 0,
            Invalidation::NamesAfter => 1,
            Invalidation::Full => 2,
        }
    }
    fn from_code(c: u8) -> Invalidation {
        match c {
            1 => Invalidation::NamesAfter,
            2 => Invalidation::Full,
            _ => Invalidation::None,
        }
    }
}

/// The caching policy of one mount, shared by the adapter (which replies by it) and the
/// invalidation (which sets it up and records the inodes whose pages went stale).
#[derive(Debug)]
pub struct KernelCache {
    /// Other clients may change the node (offload).
    shared: bool,
    invalidation: AtomicU8,
    /// The kernel's FUSE ABI minor version (from INIT; 0 before).
    kernel_minor: AtomicU32,
    /// Inodes whose lease was lost since their pages were last dropped by an open.
    stale: Mutex<HashSet<u64>>,
    /// The session's notifier, once mounted ([`KernelCache::expire_attrs`]).
    notifier: Mutex<Option<Notifier>>,
}

impl KernelCache {
    /// The policy of a host-only mount (`shared` false) or an offload one.
    pub fn new(shared: bool) -> KernelCache {
        KernelCache {
            shared,
            invalidation: AtomicU8::new(0),
            kernel_minor: AtomicU32::new(0),
            stale: Mutex::new(HashSet::new()),
            notifier: Mutex::new(None),
        }
    }

    /// Whether other clients may change what this mount serves.
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// Records the kernel's FUSE ABI minor version (at INIT).
    pub fn set_kernel_minor(&self, minor: u32) {
        self.kernel_minor.store(minor, Ordering::Release);
    }

    /// Whether the kernel takes `FUSE_NOTIFY_INC_EPOCH` (ABI 7.44, Linux 6.16).
    pub fn kernel_has_epoch(&self) -> bool {
        self.kernel_minor.load(Ordering::Acquire) >= EPOCH_MINOR
    }

    /// Records how lost leases are now invalidated.
    pub fn set_invalidation(&self, how: Invalidation) {
        self.invalidation.store(how.code(), Ordering::Release);
    }

    pub fn invalidation(&self) -> Invalidation {
        Invalidation::from_code(self.invalidation.load(Ordering::Acquire))
    }

    /// How long the kernel may cache attributes.
    pub fn attr_ttl(&self) -> Duration {
        if !self.shared || self.invalidation() != Invalidation::None {
            LONG_TTL
        } else {
            SHORT_TTL
        }
    }

    /// How long the kernel may cache names (and the attributes a lookup returns with them).
    pub fn entry_ttl(&self) -> Duration {
        if !self.shared || self.invalidation() == Invalidation::Full {
            LONG_TTL
        } else {
            SHORT_TTL
        }
    }

    /// The flags of an open of `ino`: keep the page cache unless it may be stale.
    pub fn open_flags(&self, ino: u64) -> FopenFlags {
        if !self.shared {
            return FopenFlags::FOPEN_KEEP_CACHE;
        }
        if self.invalidation() == Invalidation::None {
            return FopenFlags::empty();
        }
        let stale = self.stale.lock().map(|mut s| s.remove(&ino)).unwrap_or(true);
        if stale {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        }
    }

    /// Gives the policy the session's notifier (once mounted).
    pub fn set_notifier(&self, n: Notifier) {
        if let Ok(mut slot) = self.notifier.lock() {
            *slot = Some(n);
        }
    }

    /// Has the kernel forget the cached attributes of `ino`: libfs changed them as a side
    /// effect the kernel does not know of (setuid/setgid dropped by a write, fallocate or
    /// `O_TRUNC`, which `FUSE_HANDLE_KILLPRIV_V2` leaves to libfs). Attributes only (a
    /// negative offset): no lock of the kernel's is taken, so a request handler of the
    /// same inode may call it. Without a notifier yet (the moment between INIT and the
    /// end of mounting) the mode stays cached until its time-out.
    pub fn expire_attrs(&self, ino: u64) {
        let n = self.notifier.lock().ok().and_then(|n| n.clone());
        if let Some(n) = n {
            if let Err(e) = n.inval_inode(INodeNo(ino), -1, 0) {
                if e.raw_os_error() != Some(libc::ENOENT) {
                    tracing::debug!(ino, error = %e, "cannot expire the kernel's attributes");
                }
            }
        }
    }

    /// The kernel forgot `ino` (FORGET): it holds no page of it any more, so no mark is
    /// needed (this keeps the marks bounded by the kernel's inode cache).
    pub fn forgotten(&self, ino: u64) {
        if let Ok(mut s) = self.stale.lock() {
            s.remove(&ino);
        }
    }

    /// The lease of `ino` is lost: its pages may be stale at its next open.
    pub fn lost(&self, ino: u64) {
        if let Ok(mut s) = self.stale.lock() {
            s.insert(ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_only_caches_everything() {
        let c = KernelCache::new(false);
        assert_eq!(c.attr_ttl(), LONG_TTL);
        assert_eq!(c.entry_ttl(), LONG_TTL);
        assert_eq!(c.open_flags(5), FopenFlags::FOPEN_KEEP_CACHE);
    }

    #[test]
    fn offload_caches_only_what_is_invalidated() {
        let c = KernelCache::new(true);
        assert_eq!((c.attr_ttl(), c.entry_ttl()), (SHORT_TTL, SHORT_TTL));
        assert_eq!(c.open_flags(5), FopenFlags::empty());
        c.set_invalidation(Invalidation::NamesAfter);
        assert_eq!((c.attr_ttl(), c.entry_ttl()), (LONG_TTL, SHORT_TTL));
        assert_eq!(c.open_flags(5), FopenFlags::FOPEN_KEEP_CACHE);
        c.set_invalidation(Invalidation::Full);
        assert_eq!((c.attr_ttl(), c.entry_ttl()), (LONG_TTL, LONG_TTL));
    }

    #[test]
    fn a_lost_lease_drops_the_pages_at_the_next_open_only() {
        let c = KernelCache::new(true);
        c.set_invalidation(Invalidation::Full);
        c.lost(7);
        assert_eq!(c.open_flags(8), FopenFlags::FOPEN_KEEP_CACHE);
        assert_eq!(c.open_flags(7), FopenFlags::empty());
        assert_eq!(c.open_flags(7), FopenFlags::FOPEN_KEEP_CACHE);
        c.lost(9);
        c.forgotten(9);
        assert_eq!(c.open_flags(9), FopenFlags::FOPEN_KEEP_CACHE);
    }
}
