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
//! * **In a cluster** (`--zk`, [`Alloc::use_cluster_ranges`]): inode numbers must be unique
//!   cluster-wide, since every node's public area receives every node's entries. A node
//!   hands out only numbers of the ranges clustermgr cut for it from ZooKeeper's counter
//!   ([`ranges`]: persisted in the node directory before use, so a restart never hands out
//!   a number of another node's range). Every number outside them is *taken* for good, so
//!   the bitmap's free count is the free numbers of the node's ranges; a number freed in a
//!   range of another node never comes back here (it is that node's). When fewer than
//!   a range are free, a new range is asked for (the `cluster` thread's refill task,
//!   [`Alloc::wanted`], [`Alloc::add_range`]); the data path never waits on ZooKeeper
//!   except in [`Alloc::await_numbers`], bounded, before the lease table's mutex is taken,
//!   and only when no number is left. ZooKeeper unreachable and the ranges exhausted: the
//!   request fails at once with [`AllocError::NoClusterInodes`] (ENOSPC) naming why.
//!   Without `--zk` every number of the node's table is its own, as before.
//!
//! Lock order: the node's public-area mutex or the lease table's, then this module's mutex
//! (a leaf otherwise).

pub(crate) mod ranges;

use crate::node::alloc::ranges::RangeFile;
use clustermgr::InodeRange;
use linefs_pm::bitmap::Bitmap;
use linefs_pm::layout::Geometry;
use linefs_pm::public::PublicReader;
use linefs_proto::RemoteError;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Blocks kept free for publication's own metadata (indirect, directory and xattr blocks).
pub const META_RESERVE: u64 = 64;
/// Inode numbers handed to a session when it attaches.
pub const FIRST_GRANT: u64 = 64;
/// Longest a request for inode numbers waits for a cluster range when none is left.
pub const AWAIT_NUMBERS: Duration = Duration::from_secs(3);

/// Why an allocation request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    #[error("no free inode number on the node")]
    NoInodes,
    /// In a cluster: the node's ranges are exhausted and no new one came.
    #[error("no inode number left in this node's cluster ranges, and no new range: {0}")]
    NoClusterInodes(String),
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
            AllocError::NoInodes | AllocError::NoClusterInodes(_) | AllocError::NoSpace { .. } => RemoteError::NoSpace,
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

/// The node's cluster ranges and the refill's state ([`Alloc::use_cluster_ranges`]).
struct ClusterRanges {
    node: u32,
    dir: PathBuf,
    /// Sorted, disjoint; persisted in [`ranges::RANGES_FILE`].
    owned: Vec<InodeRange>,
    /// A range has been asked for and neither arrived nor failed.
    asked: bool,
    /// Why the last request failed (cleared by the next range).
    failure: Option<String>,
    /// Outcomes (ranges added, failures) so far: what a waiter watches.
    outcomes: u64,
}

impl ClusterRanges {
    fn owns(&self, ino: u64) -> bool {
        let i = self.owned.partition_point(|r| r.end <= ino);
        self.owned.get(i).is_some_and(|r| r.contains(ino))
    }
}

struct Inner {
    /// Inode numbers in use in the public area or granted to a session — and, in a
    /// cluster, every number outside the node's ranges.
    taken: Bitmap,
    /// In a cluster: the node's ranges (None: every number is the node's).
    cluster: Option<ClusterRanges>,
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
    /// Signalled when a range arrives or a request fails.
    arrived: Condvar,
    /// Woken when a new range is wanted (the cluster thread's refill task waits on it).
    want: Arc<tokio::sync::Notify>,
}

impl Inner {
    /// Whether `ino` may be handed out by this node (its own range, or no cluster).
    fn mine(&self, ino: u64) -> bool {
        self.cluster.as_ref().is_none_or(|c| c.owns(ino))
    }
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
        let inner = Inner {
            taken,
            cluster: None,
            slots: HashMap::new(),
            reserved_total: 0,
            max_inodes: u64::MAX,
            max_blocks: u64::MAX,
        };
        Alloc {
            inner: Mutex::new(inner),
            reader,
            geo,
            arrived: Condvar::new(),
            want: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Numbers asked of clustermgr at a time: an 8th of the inode table, 8..=2^20. A node
    /// asks for the next range as soon as fewer than this many are free, so it keeps at
    /// least a range in reserve: creates go on through a ZooKeeper outage of as many files
    /// (2048 on a 256 MiB node; `cli/tests/membership.rs` kills ZooKeeper under a load).
    pub fn range_len(&self) -> u64 {
        (self.geo.inode_count / 8).clamp(8, 1 << 20)
    }

    /// From now on only numbers of the cluster ranges granted to `node` are handed out: the
    /// ranges persisted in `dir` are loaded (a list of another node refuses), and every
    /// number outside them is taken. Called once, before any session attaches.
    pub fn use_cluster_ranges(&self, dir: &Path, node: u32) -> Result<(), String> {
        let file = RangeFile::load(dir)?.unwrap_or(RangeFile { node, ranges: Vec::new() });
        if file.node != node {
            return Err(format!(
                "the inode ranges of {} were granted to node {}, not node {node}",
                dir.display(),
                file.node
            ));
        }
        let mut inner = self.inner.lock();
        let c = ClusterRanges {
            node,
            dir: dir.to_path_buf(),
            owned: file.ranges,
            asked: false,
            failure: None,
            outcomes: 0,
        };
        for ino in 2..self.geo.inode_count {
            if !c.owns(ino) {
                inner.taken.set(ino);
            }
        }
        tracing::info!(
            node,
            ranges = c.owned.len(),
            free = inner.taken.free(),
            "inode numbers from the cluster's ranges"
        );
        inner.cluster = Some(c);
        Ok(())
    }

    /// What the refill task waits on ([`Alloc::wanted`] says whether to ask).
    pub fn want_signal(&self) -> Arc<tokio::sync::Notify> {
        self.want.clone()
    }

    /// In a cluster, whether a new range should be asked for now (fewer than a range free
    /// and none asked for yet); if so it counts as asked from now on.
    pub fn wanted(&self) -> bool {
        let mut inner = self.inner.lock();
        let low = self.range_len();
        let free = inner.taken.free();
        match inner.cluster.as_mut() {
            Some(c) if free < low && !c.asked => {
                c.asked = true;
                true
            }
            _ => false,
        }
    }

    /// Asks for a range if few numbers are left (called after grants, under the mutex).
    fn maybe_want(&self, inner: &Inner) {
        if let Some(c) = &inner.cluster {
            if !c.asked && inner.taken.free() < self.range_len() {
                self.want.notify_one();
            }
        }
    }

    /// A range clustermgr cut for this node: persisted first (a range not in the file is
    /// never used), then its numbers are free (those of it the public area uses stay
    /// taken). A range past the inode table is clipped; one wholly past it, or one
    /// overlapping a range the node has, is refused.
    pub fn add_range(&self, r: InodeRange) -> Result<(), String> {
        let r = InodeRange { start: r.start.max(2), end: r.end.min(self.geo.inode_count) };
        // Decided under the mutex, persisted and read outside it (a grant waits for this
        // mutex under the lease table's): only the refill task adds ranges, one at a time,
        // and nobody can use a number of the range before it is the node's.
        let planned = {
            let inner = self.inner.lock();
            match inner.cluster.as_ref() {
                None => Err("the node is not in a cluster".to_string()),
                Some(_) if r.start >= r.end => {
                    Err("the cluster's inode numbers are exhausted (the counter is past the inode table)".to_string())
                }
                Some(c) if c.owned.iter().any(|o| o.start < r.end && r.start < o.end) => {
                    Err(format!("range {}..{} overlaps one the node has", r.start, r.end))
                }
                Some(c) => {
                    let mut owned = c.owned.clone();
                    owned.push(r);
                    owned.sort();
                    Ok((RangeFile { node: c.node, ranges: owned.clone() }, c.dir.clone(), owned))
                }
            }
        };
        let stored = planned.and_then(|(file, dir, owned)| {
            file.store(&dir).map_err(|e| format!("cannot persist the inode ranges: {e}")).map(|()| owned)
        });
        let owned = match stored {
            Ok(owned) => owned,
            Err(why) => {
                self.range_failed(why.clone());
                return Err(why);
            }
        };
        let unused: Vec<u64> = (r.start..r.end).filter(|&ino| self.unused(ino)).collect();
        let mut inner = self.inner.lock();
        for ino in unused {
            inner.taken.clear(ino);
        }
        let free = inner.taken.free();
        if let Some(c) = inner.cluster.as_mut() {
            c.owned = owned;
            c.asked = false;
            c.failure = None;
            c.outcomes += 1;
        }
        tracing::info!(start = r.start, end = r.end, free, "cluster inode range persisted and in use");
        self.arrived.notify_all();
        self.maybe_want(&inner);
        Ok(())
    }

    /// A range request failed (ZooKeeper unreachable, not joined, numbers exhausted):
    /// waiters are told at once; the next grant that runs low asks again.
    pub fn range_failed(&self, why: String) {
        let mut inner = self.inner.lock();
        if let Some(c) = inner.cluster.as_mut() {
            c.asked = false;
            c.outcomes += 1;
            c.failure = Some(why);
        }
        self.arrived.notify_all();
    }

    /// The node's cluster ranges, sorted (empty outside a cluster).
    pub fn cluster_ranges(&self) -> Vec<InodeRange> {
        self.inner.lock().cluster.as_ref().map(|c| c.owned.clone()).unwrap_or_default()
    }

    /// Whether `ino` is in a cluster range of this node (always true outside a cluster).
    #[cfg(test)]
    pub fn owns(&self, ino: u64) -> bool {
        self.inner.lock().mine(ino)
    }

    /// In a cluster with no number free: asks for a range and waits for it, at most
    /// `within` — or less, if the request fails (ZooKeeper unreachable). Called before the
    /// lease table's mutex is taken, never under it. Returns at once otherwise.
    pub fn await_numbers(&self, within: Duration) {
        let deadline = Instant::now() + within;
        let mut inner = self.inner.lock();
        let Some(c) = inner.cluster.as_ref() else { return };
        if inner.taken.free() > 0 {
            return;
        }
        let seen = c.outcomes;
        self.want.notify_one();
        loop {
            let Some(c) = inner.cluster.as_ref() else { return };
            if inner.taken.free() > 0 || c.outcomes != seen {
                return;
            }
            if self.arrived.wait_until(&mut inner, deadline).timed_out() {
                return;
            }
        }
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
        let none_left = |inner: &Inner| match &inner.cluster {
            None => AllocError::NoInodes,
            Some(c) => AllocError::NoClusterInodes(
                c.failure.clone().unwrap_or_else(|| "a new range is being asked for; try again".into()),
            ),
        };
        let first = loop {
            let Some(ino) = inner.taken.alloc(None) else {
                let e = none_left(&inner);
                self.maybe_want(&inner);
                return Err(e);
            };
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
        self.maybe_want(&inner);
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
        if ino > linefs_pm::record::ROOT_INO && ino < self.geo.inode_count && inner.mine(ino) && self.unused(ino) {
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
            if inner.taken.test(ino) && !granted.contains(&ino) && inner.mine(ino) && self.unused(ino) {
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
            if inner.mine(ino) && self.unused(ino) {
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

    #[test]
    fn in_a_cluster_only_numbers_of_the_nodes_ranges_are_granted_and_they_persist() {
        let (d, node) = node();
        let dir = d.path().join("n");
        let a = alloc(&node);
        a.use_cluster_ranges(&dir, 4).unwrap();
        assert_eq!(a.space(1000).1, 0, "no range yet: nothing free");
        let e = a.grant_inodes(0, 4).unwrap_err();
        assert!(matches!(e, AllocError::NoClusterInodes(_)), "{e:?}");
        assert_eq!(e.remote(), RemoteError::NoSpace);
        assert!(a.wanted(), "a range is asked for");
        assert!(!a.wanted(), "once");
        a.add_range(InodeRange { start: 100, end: 110 }).unwrap();
        a.add_range(InodeRange { start: 30, end: 34 }).unwrap();
        assert!(a.add_range(InodeRange { start: 105, end: 120 }).is_err(), "overlap refused");
        let mut got = Vec::new();
        while let Ok((f, n)) = a.grant_inodes(0, 3) {
            got.extend(f..f + n);
        }
        got.sort();
        let want: Vec<u64> = (30..34).chain(100..110).collect();
        assert_eq!(got, want, "exactly the ranges' numbers");
        // A number of another node's range freed here does not become this node's.
        a.freed(50);
        a.end_session(0);
        assert_eq!(a.space(1000).1, 14, "only the node's own numbers come back");
        assert!(a.owns(31) && !a.owns(50) && !a.owns(110));
        // A restart finds the ranges; another node id is refused.
        let b = alloc(&node);
        b.use_cluster_ranges(&dir, 4).unwrap();
        assert_eq!(b.cluster_ranges(), vec![InodeRange { start: 30, end: 34 }, InodeRange { start: 100, end: 110 }]);
        assert_eq!(b.space(1000).1, 14);
        let c = alloc(&node);
        assert!(c.use_cluster_ranges(&dir, 5).unwrap_err().contains("node 4"));
        // A range past the inode table (256) is clipped, or refused when wholly past it.
        b.add_range(InodeRange { start: 250, end: 300 }).unwrap();
        assert_eq!(b.space(1000).1, 20);
        assert!(b.add_range(InodeRange { start: 300, end: 310 }).unwrap_err().contains("exhausted"));
    }

    #[test]
    fn a_waiter_for_numbers_is_answered_by_a_range_or_at_once_by_a_failure() {
        let (d, node) = node();
        let a = Arc::new(alloc(&node));
        a.use_cluster_ranges(&d.path().join("n"), 0).unwrap();
        // Outside a cluster, or with numbers free, no wait.
        let t = Instant::now();
        let b = a.clone();
        let failer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            b.range_failed("ZooKeeper unreachable".into());
        });
        a.await_numbers(Duration::from_secs(20));
        failer.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        let e = a.grant_inodes(0, 1).unwrap_err();
        assert!(e.to_string().contains("ZooKeeper unreachable"), "{e}");
        let b = a.clone();
        let adder = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            b.add_range(InodeRange { start: 40, end: 48 }).unwrap();
        });
        a.await_numbers(Duration::from_secs(20));
        adder.join().unwrap();
        assert_eq!(a.grant_inodes(0, 100).unwrap(), (40, 8));
        // Bounded: nobody answers.
        let t = Instant::now();
        a.await_numbers(Duration::from_millis(200));
        assert!(t.elapsed() >= Duration::from_millis(200));
    }
}
