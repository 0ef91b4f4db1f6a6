//! Allocation state that belongs to the node, not to one client: inode numbers and data
//! blocks. With several clients per node no client may allocate from its own view — two
//! would pick the same free inode or count the same free block — so nicfs hands them out.
//!
//! * **Inode numbers** go to a slot's session in ranges ([`Alloc::grant_inodes_avoiding`]): the
//!   first with `Attached`, more on `AllocInodes`. A number is *taken* while it is in use in
//!   the public area or granted to a live session; only untaken numbers are granted. When a
//!   session ends (after its log is settled), the numbers of its grants that the public
//!   area does not use go back. Numbers that clients free by publishing `FreeInode` are not
//!   tracked as they are published: when no untaken number is left, the inode table is
//!   read again and every number free there and granted to nobody comes back
//!   ([`Alloc::grant_inodes_avoiding`] does it once before saying ENOSPC). In the offload mode a
//!   client never reuses a number it freed: once its free is published (or nicfs frees the
//!   orphan it kept, [`crate::node::opens`]), the number is nobody's and free ([`Alloc::freed`]).
//! * **Data blocks** are *reserved* by sessions for entries they have not yet had
//!   published ([`Alloc::reserve`]): a reservation succeeds only if the public area's free
//!   blocks, less every session's reservations and a margin for publication's own metadata,
//!   cover it. A client reserves in large grants and hands back what its published entries
//!   no longer need (`ReleaseBlocks`); a session's reservations end with it. Blocks that
//!   publication has used and the client has not yet handed back count twice for a moment:
//!   space looks smaller than it is, never larger, so publication cannot run out of space
//!   for an entry a client was allowed to log.
//!
//! Each number granted is also recorded in the lease table as write-leased by the session
//! (it creates the inode), and numbers the table still knows are skipped
//! ([`Alloc::grant_inodes_avoiding`], called under the table's mutex by
//! [`crate::lease::manager::Leases::grant_inodes`]).
//!
//! Lock order: the node's public-area mutex or the lease table's, then this module's mutex
//! (a leaf otherwise).

use linefs_pm::bitmap::Bitmap;
use linefs_pm::layout::Geometry;
use linefs_pm::public::PublicReader;
use linefs_proto::RemoteError;
use parking_lot::Mutex;
use std::collections::HashMap;

/// Blocks kept free for publication's own metadata (indirect, directory and xattr blocks).
pub const META_RESERVE: u64 = 64;
/// Inode numbers handed to a session when it attaches.
pub const FIRST_GRANT: u64 = 64;

/// Why an allocation request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("no free inode number on the node")]
    NoInodes,
    #[error("{asked} blocks asked, {available} available on the node")]
    NoSpace { asked: u64, available: u64 },
    /// An unprivileged uid is at its limit ([`crate::limits`]).
    #[error("uid {uid} holds {held} {what} not yet used; {asked} more asked (limit {limit})")]
    Limit { uid: u32, what: &'static str, held: u64, asked: u64, limit: u64 },
}

impl AllocError {
    /// What a client is answered with.
    pub fn remote(&self) -> RemoteError {
        match self {
            AllocError::NoInodes | AllocError::NoSpace { .. } => RemoteError::NoSpace,
            AllocError::Limit { .. } => RemoteError::QuotaExceeded,
        }
    }
}

#[derive(Default)]
struct SlotState {
    /// The uid of the session ([`Alloc::begin_session`]).
    uid: u32,
    /// Inode numbers granted and not yet known to be used or returned.
    granted: Vec<u64>,
    /// Data blocks reserved.
    reserved: u64,
}

struct Inner {
    /// Inode numbers in use in the public area or granted to a session.
    taken: Bitmap,
    slots: HashMap<u32, SlotState>,
    reserved_total: u64,
    /// Per unprivileged uid: most inode numbers granted and not yet used, most blocks
    /// reserved.
    max_inodes: u64,
    max_blocks: u64,
}

/// The node's inode-number and block-reservation state.
pub struct Alloc {
    inner: Mutex<Inner>,
    reader: PublicReader,
    geo: Geometry,
}

impl Alloc {
    /// Starts from the inodes the public area uses (`in_use`, as recovery loaded them).
    pub fn new(reader: PublicReader, in_use: impl IntoIterator<Item = u64>) -> Alloc {
        let geo = *reader.geometry();
        let mut taken = Bitmap::new(geo.inode_count);
        taken.set(0);
        taken.set(linefs_pm::record::ROOT_INO);
        for ino in in_use {
            taken.set(ino);
        }
        let inner =
            Inner { taken, slots: HashMap::new(), reserved_total: 0, max_inodes: u64::MAX, max_blocks: u64::MAX };
        Alloc { inner: Mutex::new(inner), reader, geo }
    }

    /// Sets the per-uid limits (`--max-inodes-per-uid`, `--max-blocks-per-uid`); root has
    /// none.
    pub fn set_limits(&self, inodes: u64, blocks: u64) {
        let mut inner = self.inner.lock();
        inner.max_inodes = inodes;
        inner.max_blocks = blocks;
    }

    /// A session of `uid` starts on `slot`: what it is granted counts against that uid.
    pub fn begin_session(&self, slot: u32, uid: u32) {
        self.inner.lock().slots.entry(slot).or_default().uid = uid;
    }

    /// How many of `count` inode numbers `slot`'s session may still be granted under its
    /// uid's limit; numbers the public area now uses stop counting (they are dropped from
    /// the grants: a number in use is never granted again anyway).
    fn inodes_allowed(&self, inner: &mut Inner, slot: u32, count: u64) -> Result<u64, AllocError> {
        let uid = inner.slots.get(&slot).map_or(0, |s| s.uid);
        if uid == 0 || inner.max_inodes == u64::MAX {
            return Ok(count);
        }
        let held = |inner: &Inner| -> u64 {
            inner.slots.values().filter(|s| s.uid == uid).map(|s| s.granted.len() as u64).sum()
        };
        if held(inner) + count > inner.max_inodes {
            for s in inner.slots.values_mut().filter(|s| s.uid == uid) {
                s.granted.retain(|&ino| self.unused(ino));
            }
        }
        let held = held(inner);
        let left = inner.max_inodes.saturating_sub(held);
        if left == 0 {
            return Err(AllocError::Limit { uid, what: "inode numbers", held, asked: count, limit: inner.max_inodes });
        }
        Ok(count.min(left))
    }

    /// Grants up to `count` inode numbers to `slot`'s session, as one contiguous range
    /// where possible (the range returned may be shorter than asked, never empty).
    #[cfg(test)]
    pub fn grant_inodes(&self, slot: u32, count: u64) -> Result<(u64, u64), AllocError> {
        self.grant_inodes_avoiding(slot, count, &|_| false)
    }

    /// Grants up to `count` inode numbers to `slot`'s session, as one contiguous range
    /// where possible (the range returned may be shorter than asked, never empty),
    /// skipping the numbers `busy` names: those the lease table
    /// still knows (a lease on an inode freed since, or a number of an ended session's
    /// range not yet dropped). A skipped number stays taken and granted to nobody, so the
    /// next rescan considers it again.
    pub fn grant_inodes_avoiding(
        &self,
        slot: u32,
        count: u64,
        busy: &dyn Fn(u64) -> bool,
    ) -> Result<(u64, u64), AllocError> {
        let mut inner = self.inner.lock();
        let count = self.inodes_allowed(&mut inner, slot, count)?;
        if inner.taken.free() == 0 {
            self.rescan(&mut inner);
        }
        let first = loop {
            let ino = inner.taken.alloc(None).ok_or(AllocError::NoInodes)?;
            if !busy(ino) {
                break ino;
            }
            tracing::debug!(ino, "inode number still known to the lease table; skipped");
        };
        let mut n = 1;
        while n < count && !busy(first + n) && inner.taken.set(first + n) {
            n += 1;
        }
        inner.slots.entry(slot).or_default().granted.extend(first..first + n);
        Ok((first, n))
    }

    /// Whether `ino` is granted to `slot` and not yet given back.
    #[cfg(test)]
    pub fn is_granted(&self, slot: u32, ino: u64) -> bool {
        self.inner.lock().slots.get(&slot).is_some_and(|s| s.granted.contains(&ino))
    }

    /// A client's FreeInode of `ino` is published, or nicfs freed a kept orphan: the number
    /// is granted to nobody any more, and free again unless the public area still uses it
    /// (a kept orphan: [`crate::node::opens`]).
    pub fn freed(&self, ino: u64) {
        let mut inner = self.inner.lock();
        for s in inner.slots.values_mut() {
            s.granted.retain(|&g| g != ino);
        }
        if ino > linefs_pm::record::ROOT_INO && ino < self.geo.inode_count && self.unused(ino) {
            inner.taken.clear(ino);
        }
    }

    /// `ino` is a kept orphan: no session's grant any more (it stays taken until freed).
    pub fn forget_grant(&self, ino: u64) {
        for s in self.inner.lock().slots.values_mut() {
            s.granted.retain(|&g| g != ino);
        }
    }

    /// Gives back every number not in use in the public area and granted to no session.
    fn rescan(&self, inner: &mut Inner) {
        let granted: std::collections::HashSet<u64> =
            inner.slots.values().flat_map(|s| s.granted.iter().copied()).collect();
        let mut back = 0;
        for ino in 2..self.geo.inode_count {
            if inner.taken.test(ino) && !granted.contains(&ino) && self.unused(ino) {
                inner.taken.clear(ino);
                back += 1;
            }
        }
        tracing::info!(back, "inode numbers freed by publication returned to the pool");
    }

    /// Whether the public area has no inode `ino` (an unreadable one counts as used).
    fn unused(&self, ino: u64) -> bool {
        matches!(self.reader.read_inode(ino), Ok(i) if i.img.mode == 0)
    }

    /// Reserves `count` data blocks for `slot`'s session; `free` is the public area's free
    /// blocks now (pending frees included).
    pub fn reserve(&self, slot: u32, count: u64, free: u64) -> Result<(), AllocError> {
        let mut inner = self.inner.lock();
        let uid = inner.slots.get(&slot).map_or(0, |s| s.uid);
        if uid != 0 {
            let held: u64 = inner.slots.values().filter(|s| s.uid == uid).map(|s| s.reserved).sum();
            if held.saturating_add(count) > inner.max_blocks {
                return Err(AllocError::Limit {
                    uid,
                    what: "blocks reserved",
                    held,
                    asked: count,
                    limit: inner.max_blocks,
                });
            }
        }
        let available = free.saturating_sub(inner.reserved_total + META_RESERVE);
        if count > available {
            return Err(AllocError::NoSpace { asked: count, available });
        }
        inner.reserved_total += count;
        inner.slots.entry(slot).or_default().reserved += count;
        Ok(())
    }

    /// Hands back up to `count` blocks `slot`'s session reserved; returns how many it had.
    pub fn release(&self, slot: u32, count: u64) -> u64 {
        let mut inner = self.inner.lock();
        let Some(s) = inner.slots.get_mut(&slot) else { return 0 };
        let n = count.min(s.reserved);
        s.reserved -= n;
        inner.reserved_total -= n;
        n
    }

    /// Blocks reserved by every session but `slot`'s: what a batch of `slot`'s may not use
    /// ([`linefs_pm::public::PublicArea::set_alloc_floor`]).
    pub fn reserved_by_others(&self, slot: u32) -> u64 {
        let inner = self.inner.lock();
        inner.reserved_total - inner.slots.get(&slot).map_or(0, |s| s.reserved)
    }

    /// What statfs tells a client: blocks a new reservation could get (free less every
    /// reservation and the margin), and inode numbers not taken.
    pub fn space(&self, free: u64) -> (u64, u64) {
        let inner = self.inner.lock();
        (free.saturating_sub(inner.reserved_total + META_RESERVE), inner.taken.free())
    }

    /// The session of `slot` ended and its log is settled: its reservations end, and the
    /// numbers it was granted but did not use (the public area has no such inode) go back.
    pub fn end_session(&self, slot: u32) {
        let mut inner = self.inner.lock();
        let Some(s) = inner.slots.remove(&slot) else { return };
        inner.reserved_total -= s.reserved;
        let mut back = 0;
        for ino in s.granted {
            if self.unused(ino) {
                inner.taken.clear(ino);
                back += 1;
            }
        }
        tracing::debug!(
            slot,
            released_blocks = s.reserved,
            inodes_back = back,
            "allocation state of the session ended"
        );
    }

    /// Totals for the status file: inode numbers taken, blocks reserved.
    #[cfg(test)]
    pub fn totals(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (self.geo.inode_count - inner.taken.free(), inner.reserved_total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linefs_pm::layout::FormatParams;

    fn node() -> (tempfile::TempDir, linefs_pm::node::NodePm) {
        let dir = tempfile::tempdir().unwrap();
        let params = FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 2, inodes: 256 };
        let node = linefs_pm::mkfs::format_dir(&dir.path().join("n"), &params).unwrap();
        (dir, node)
    }

    fn alloc(node: &linefs_pm::node::NodePm) -> Alloc {
        Alloc::new(PublicReader::shared(node.public.clone(), node.geometry), [])
    }

    #[test]
    fn grants_are_disjoint_and_unused_ones_come_back_at_session_end() {
        let (_d, node) = node();
        let a = alloc(&node);
        let (f0, n0) = a.grant_inodes(0, 10).unwrap();
        let (f1, n1) = a.grant_inodes(1, 10).unwrap();
        assert_eq!((n0, n1), (10, 10));
        assert!(f0 >= 2 && (f0 + n0 <= f1 || f1 + n1 <= f0), "{f0}+{n0} vs {f1}+{n1}");
        assert!(a.is_granted(0, f0) && !a.is_granted(1, f0));
        let before = a.totals().0;
        a.end_session(0);
        assert_eq!(a.totals().0, before - 10, "nothing was created: all ten come back");
        assert!(!a.is_granted(0, f0));
    }

    #[test]
    fn every_number_can_be_granted_then_exhaustion_is_an_error() {
        let (_d, node) = node();
        let a = alloc(&node);
        let total = node.geometry.inode_count - 2;
        let mut got = 0;
        while got < total {
            let (_, n) = a.grant_inodes(0, 1000).unwrap();
            got += n;
        }
        assert_eq!(got, total);
        assert_eq!(a.grant_inodes(1, 1), Err(AllocError::NoInodes));
        // Granted numbers are never re-granted by a rescan while their session lives.
        assert_eq!(a.grant_inodes(1, 1), Err(AllocError::NoInodes));
        a.end_session(0);
        assert!(a.grant_inodes(1, 1).is_ok());
    }

    #[test]
    fn an_unprivileged_uid_is_held_to_its_limits_root_is_not() {
        let (_d, node) = node();
        let a = alloc(&node);
        a.set_limits(20, 100);
        a.begin_session(0, 1000);
        a.begin_session(1, 1000);
        a.begin_session(2, 0);
        assert_eq!(a.grant_inodes(0, 15).unwrap().1, 15);
        assert_eq!(a.grant_inodes(1, 15).unwrap().1, 5, "clamped to what is left of the uid's 20");
        assert!(matches!(a.grant_inodes(1, 1), Err(AllocError::Limit { uid: 1000, held: 20, .. })));
        assert_eq!(a.grant_inodes(2, 100).unwrap().1, 100, "root has no limit");
        a.reserve(0, 60, 10_000).unwrap();
        let e = a.reserve(1, 41, 10_000).unwrap_err();
        assert_eq!(e.remote(), RemoteError::QuotaExceeded);
        let (_, reserved_before) = a.totals();
        assert_eq!(reserved_before, 60, "a refused reservation takes nothing");
        a.reserve(1, 40, 10_000).unwrap();
        a.reserve(2, 5000, 10_000).unwrap();
        assert_eq!(a.reserved_by_others(2), 100);
        assert_eq!(a.reserved_by_others(0), 5040);
        a.end_session(0);
        a.begin_session(0, 1000);
        a.reserve(0, 60, 10_000).unwrap();
    }

    #[test]
    fn reservations_are_bounded_by_free_space_and_end_with_the_session() {
        let (_d, node) = node();
        let a = alloc(&node);
        let free = 1000;
        a.reserve(0, 600, free).unwrap();
        assert_eq!(a.reserve(1, 400, free), Err(AllocError::NoSpace { asked: 400, available: 336 }));
        a.reserve(1, 336, free).unwrap();
        assert_eq!(a.space(free).0, 0);
        assert_eq!(a.release(0, 100), 100);
        assert_eq!(a.release(0, 10_000), 500, "no more than was reserved");
        assert_eq!(a.space(free).0, 600);
        a.end_session(1);
        assert_eq!(a.space(free).0, free - META_RESERVE);
    }
}
