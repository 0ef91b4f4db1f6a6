//! The seam between libfs and its node: [`NodeLink`], what the calls ask of the node that
//! owns the PM — leases, inode numbers, block reservations, opens, publication (fsync),
//! statfs, publication progress — as typed calls whose refusals are
//! [`crate::FsError::Refused`] with the node's [`linefs_proto::RemoteError`].
//!
//! The calls layer sees only this trait (`Client::link`, `Front::link`), never a mode and
//! never a wire message. Its implementations:
//! * [`host::HostLink`], the host-only mode: the client is its node's only one and the
//!   node itself — it publishes its own log with pm's publisher, holds every lease
//!   ([`Leases::sole`]), takes inode numbers from its view and space from the public
//!   area's count.
//! * `remote::Remote`, the offload mode: every call is a request to the node's nicfs (the
//!   one place wire messages are built).
//! * [`fake::FakeLink`] (tests, feature `testing`): an in-process node, no nicfs process.
//! * [`fault::FaultLink`] (tests, feature `testing`): refuses chosen calls of the link it
//!   wraps with chosen codes, or all of them from a moment on (a node gone).
//!
//! A replicated fsync or the MINOS modes are one more implementation (a link whose
//! [`NodeLink::publish`] waits for the replicas, or forwards along a chain), not a branch at
//! every call site. It is a trait object, not a type parameter of `Fs`: the calls already
//! pay a lock and a system call per request, so one indirect call costs nothing
//! measurable, and `Fs` stays one type for the FUSE adapter, the CLI and loadgen
//! (mountpoint-s3 makes its core generic over the client because its client is on every
//! read path; ours is only on the slow paths).

use crate::error::{FsError, FsResult};
use crate::leases::{Leases, Need};
pub(crate) use crate::publication::Progress;
use crate::publication::Publication;
use linefs_pm::bitmap::Bitmap;
use linefs_pm::PmRegion;
use linefs_proto::RemoteError;
pub(crate) use linefs_proto::{InodeRange, Space};
use parking_lot::Mutex;
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[cfg(any(test, feature = "testing"))]
pub(crate) mod fake;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod fault;
pub(crate) mod host;

/// Inode numbers a client asks its node for at a time.
pub(crate) const INODE_GRANT: u32 = 256;

/// What is told of an inode whose lease this client lost: before the hand-back (must not
/// block) and after it. Both take the inode number.
#[derive(Clone)]
pub(crate) struct Observer {
    pub(crate) before: Arc<dyn Fn(u64) + Send + Sync>,
    pub(crate) after: Arc<dyn Fn(u64) + Send + Sync>,
}

/// What a client asks of its node. Every method may be called from any thread (FUSE
/// workers, the publisher thread, status); the blocking ones wait for the node's answer.
pub(crate) trait NodeLink: Send + Sync {
    /// Whether the node is another process's (nicfs publishes, other clients may share
    /// the node and change it under this one): the FUSE adapter then keeps the kernel's
    /// caches only under leases.
    fn shared(&self) -> bool;
    /// The leases this client holds ([`crate::leases`]).
    fn leases(&self) -> &Leases;
    /// Asks for a lease; it is recorded in [`NodeLink::leases`] when granted.
    fn request_lease(&self, need: Need) -> FsResult<()>;
    /// A free inode number for a new inode, set in `in_use` (the client's map of the
    /// numbers in use) and held for writing until the create is logged or fails.
    fn take_inode(&self, in_use: &mut Bitmap) -> FsResult<u64>;
    /// A number [`NodeLink::take_inode`] gave whose create failed (already cleared in the
    /// client's map): the link may hand it out again.
    fn give_back_inode(&self, ino: u64);
    /// Free inode numbers this client holds for itself and has not used.
    fn own_inodes(&self) -> u64;
    /// Blocks the client leaves unreserved for publication's own metadata (the node keeps
    /// its own margin when it counts the space itself).
    fn space_margin(&self) -> u64;
    /// Reserves `count` more data blocks of the node for this client's entries.
    fn reserve_blocks(&self, count: u64) -> FsResult<()>;
    /// Hands reserved blocks back (nothing awaited).
    fn release_blocks(&self, count: u64);
    /// Published entries had reserved `blocks`: spent, or no longer needed. By default
    /// what is left of the credit goes back to the node.
    fn reservation_done(&self, publication: &Publication, blocks: u64) {
        let credit = publication.free_blocks.load(Ordering::Acquire);
        let back = blocks.min(credit);
        publication.free_blocks.fetch_sub(back, Ordering::AcqRel);
        self.release_blocks(back);
    }
    /// Has the node publish the log up to `lsn` (waits): the LSN it is durable up to.
    fn fsync(&self, lsn: u64) -> FsResult<u64>;
    /// Whether an fsync must ask the node: true where the log in this host's PM is not
    /// all that makes an update durable — offload in a replicated cluster, where nicfs
    /// answers an fsync once the log is published there and acknowledged durable by every
    /// replica. False (the default) where the log entry itself is the durable copy
    /// (host-only, or a node on its own).
    fn fsync_asks_node(&self) -> bool {
        false
    }
    /// Publishes `publication`'s log at least through the first committed entry that ends
    /// at or past `lsn` (all of it if none does), at most about `budget` bytes where the
    /// node publishes in batches; returns the LSN published up to. By default the node
    /// publishes: [`NodeLink::fsync`], and `publication` follows its answer.
    fn publish(&self, publication: &Publication, lsn: u64, budget: u64) -> FsResult<u64> {
        let _ = budget;
        publication.publish_by(lsn, |until| {
            if let Some(why) = self.failure() {
                return Err(FsError::PublicationFailed(why));
            }
            self.fsync(until)
        })
    }
    /// Takes what the node reported since the last call into `publication`'s state.
    fn follow(&self, publication: &Publication);
    /// The node's free blocks and free inode numbers (this client's not counted); `in_use`
    /// is the client's map of the numbers in use.
    fn statfs(&self, in_use: &Bitmap) -> FsResult<Space>;
    /// This client's first open of `ino`, and its last close.
    fn opened(&self, ino: u64);
    fn closed(&self, ino: u64);
    /// The log is committed up to `lsn` (what a lease's hand-back covers).
    fn set_committed(&self, lsn: u64);
    /// Tells the node that the log is committed up to `lsn` (publication may start).
    fn chunk_ready(&self, lsn: u64);
    /// Whether publication failed (the session, or this client's own publisher): updates
    /// are refused from then on.
    fn failed(&self) -> bool;
    fn failure(&self) -> Option<String>;
    /// Who is told of inodes whose lease this client loses.
    fn set_observer(&self, o: Observer);
    /// Ends the session (the node publishes what the log holds).
    fn detach(&self);
}

/// A shared link.
pub(crate) type Link = Arc<dyn NodeLink>;

/// What a node hands a client it attaches: its log slot's file (read-write) and the public
/// file (read-only), the slot's ring size and the LSN to append at.
pub(crate) struct Session {
    pub(crate) public: Arc<PmRegion>,
    pub(crate) log: Arc<PmRegion>,
    pub(crate) slot: u32,
    pub(crate) ring_bytes: u64,
    pub(crate) start_lsn: u64,
}

/// The free inode numbers a node granted this client and it has not used, as ranges
/// (the latest grant's lowest number handed out first). Each number is held for writing
/// from its grant ([`Leases::pool`]) until a revoke takes it.
#[derive(Default)]
pub(crate) struct InodePool {
    ranges: Mutex<Vec<std::ops::Range<u64>>>,
}

impl InodePool {
    /// Adds a grant (at most [`INODE_GRANT`] times 16 numbers of it: a node hands out
    /// [`INODE_GRANT`] at a time).
    pub(crate) fn grant(&self, leases: &Leases, r: InodeRange) {
        let end = r.first.saturating_add(r.count.min(u64::from(INODE_GRANT) * 16));
        for ino in r.first..end {
            leases.pool(ino);
        }
        self.ranges.lock().push(r.first..end);
    }

    fn pop(&self) -> Option<u64> {
        let mut ranges = self.ranges.lock();
        loop {
            let r = ranges.last_mut()?;
            if let Some(ino) = r.next() {
                return Some(ino);
            }
            ranges.pop();
        }
    }

    /// A number for a create (see [`NodeLink::take_inode`]); `refill` asks the node for
    /// more when the pool is empty.
    pub(crate) fn take(
        &self,
        leases: &Leases,
        in_use: &mut Bitmap,
        refill: impl Fn(u32) -> FsResult<InodeRange>,
    ) -> FsResult<u64> {
        loop {
            while let Some(ino) = self.pop() {
                // Pinned until the create is logged (`created_here`) or fails
                // (`give_back_ino`); a number a revoke took is dropped, and so is one past
                // the node's inode table.
                if ino >= in_use.len() || !leases.claim(ino) {
                    continue;
                }
                if in_use.set(ino) {
                    return Ok(ino);
                }
                leases.unpin(&[Need::write(ino)]);
            }
            match refill(INODE_GRANT) {
                Ok(r) => self.grant(leases, r),
                Err(FsError::Refused { code: RemoteError::NoSpace, .. }) => {
                    return Err(FsError::NoSpace("no free inode"))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// A number back from a create that failed.
    pub(crate) fn give_back(&self, leases: &Leases, ino: u64) {
        self.ranges.lock().push(ino..ino + 1);
        leases.unpin(&[Need::write(ino)]);
    }

    /// Numbers left.
    pub(crate) fn len(&self) -> u64 {
        self.ranges.lock().iter().map(|r| r.end - r.start).sum()
    }
}
