//! The seam between libfs and its node: [`NodeLink`], what the calls ask of the node that
//! owns the PM in the offload mode — leases, inode numbers, block reservations, opens,
//! fsync (publication up to an LSN), statfs, publication progress — as typed calls whose
//! refusals are [`crate::FsError::Refused`] with the node's
//! [`linefs_proto::RemoteError`].
//!
//! The calls layer sees only this trait (`Publication::link`), never a wire message:
//! the offload implementation (`remote::Remote`) is the one place that builds
//! them. Tests put a fault-injecting link in front of it ([`fault`]). A replicated fsync
//! or the MINOS modes are one more implementation (a link that forwards `fsync` along a
//! chain), not a branch at every call site. It is a trait object, not a type parameter of
//! `Fs`: the calls already pay a lock and a system call per request, so one indirect call
//! costs nothing measurable, and `Fs` stays one type for the FUSE adapter, the CLI and
//! loadgen (mountpoint-s3 makes its core generic over the client because its client is
//! on every read path; ours is only on the slow paths).

use crate::error::FsResult;
use crate::leases::{Leases, Need};
pub(crate) use linefs_proto::{InodeRange, Space};
use std::sync::Arc;

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
pub(crate) mod fault;

/// What nicfs has said about publication, shared with the publisher thread.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The public area holds the log up to here.
    pub(crate) published: u64,
    /// The log before this may be reused.
    pub(crate) reclaim: u64,
    /// Inodes publication changed since the front end last caught up.
    pub(crate) touched: Vec<u64>,
    /// Publication changed more inodes than a notice lists.
    pub(crate) touched_all: bool,
    /// Why the client cannot publish any more (an entry refused, nicfs gone).
    pub(crate) failed: Option<String>,
}

/// What is told of an inode whose lease this client lost: before the hand-back (must not
/// block) and after it. Both take the inode number.
#[derive(Clone)]
pub(crate) struct Observer {
    pub(crate) before: Arc<dyn Fn(u64) + Send + Sync>,
    pub(crate) after: Arc<dyn Fn(u64) + Send + Sync>,
}

/// What a client in the offload mode asks of its node. Every method may be called from
/// any thread (FUSE workers, the publisher thread, status); the blocking ones wait for the
/// node's answer.
pub(crate) trait NodeLink: Send + Sync {
    /// The leases this client holds ([`crate::leases`]).
    fn leases(&self) -> &Leases;
    /// Asks for a lease; it is recorded in [`NodeLink::leases`] when granted.
    fn request_lease(&self, need: Need) -> FsResult<()>;
    /// A range of free inode numbers for this client.
    fn alloc_inodes(&self, count: u32) -> FsResult<InodeRange>;
    /// Reserves `count` data blocks of the node for this client's entries.
    fn reserve_blocks(&self, count: u64) -> FsResult<()>;
    /// Hands reserved blocks back (nothing awaited).
    fn release_blocks(&self, count: u64);
    /// Publishes the log up to `lsn` (waits): the LSN it is durable up to.
    fn fsync(&self, lsn: u64) -> FsResult<u64>;
    /// The node's free blocks and inode numbers.
    fn statfs(&self) -> FsResult<Space>;
    /// This client's first open of `ino`, and its last close.
    fn opened(&self, ino: u64);
    fn closed(&self, ino: u64);
    /// The log is committed up to `lsn` (what a lease's hand-back covers).
    fn set_committed(&self, lsn: u64);
    /// Tells the node that the log is committed up to `lsn` (publication may start).
    fn chunk_ready(&self, lsn: u64);
    /// What the node reported since the last call (the inodes touched are taken).
    fn take_progress(&self) -> Progress;
    /// Whether the session failed: updates are refused from then on.
    fn failed(&self) -> bool;
    fn failure(&self) -> Option<String>;
    /// Who is told of inodes whose lease this client loses.
    fn set_observer(&self, o: Observer);
    /// Ends the session (the node publishes what the log holds).
    fn detach(&self);
}

/// A shared link.
pub(crate) type Link = Arc<dyn NodeLink>;
