//! The host-only mode as a link ([`HostLink`]): the client is its node's only one, and the
//! node itself. It publishes its own log with pm's publisher
//! ([`Publication::publish_local`]), holds every lease for good ([`Leases::sole`]), takes
//! inode numbers from its own view (the lowest free one) and counts space from the public
//! area it publishes into (less [`META_RESERVE`] for publication's own metadata). The node
//! has nobody else to tell of opens, commits or a detach.

use super::{NodeLink, Observer, Space};
use crate::error::{FsError, FsResult};
use crate::leases::{Leases, Need};
use crate::publication::Publication;
use linefs_pm::bitmap::Bitmap;
use linefs_proto::RemoteError;
use std::sync::Arc;

/// Blocks kept free for publication's own metadata (indirect, directory, xattr blocks).
pub(crate) const META_RESERVE: u64 = 64;

/// The link of a client that publishes its own node (host-only).
pub(crate) struct HostLink {
    publication: Arc<Publication>,
    leases: Leases,
}

impl HostLink {
    pub(crate) fn new(publication: Arc<Publication>) -> HostLink {
        HostLink { publication, leases: Leases::sole() }
    }
}

impl NodeLink for HostLink {
    fn shared(&self) -> bool {
        false
    }

    fn leases(&self) -> &Leases {
        &self.leases
    }

    fn request_lease(&self, _need: Need) -> FsResult<()> {
        // Every lease is held ([`Leases::sole`]): nothing is ever missing.
        Ok(())
    }

    fn take_inode(&self, in_use: &mut Bitmap) -> FsResult<u64> {
        in_use.alloc(None).ok_or(FsError::NoSpace("no free inode"))
    }

    fn give_back_inode(&self, _ino: u64) {
        // Cleared in the view's map: free again, the lowest is taken next.
    }

    fn own_inodes(&self) -> u64 {
        0
    }

    fn space_margin(&self) -> u64 {
        META_RESERVE
    }

    fn reserve_blocks(&self, _count: u64) -> FsResult<()> {
        // The client's count already is every free block of the public area.
        Err(FsError::Refused {
            what: "reserve blocks".into(),
            code: RemoteError::NoSpace,
            message: "the public area has no blocks beyond its count".into(),
        })
    }

    fn release_blocks(&self, _count: u64) {}

    fn reservation_done(&self, _publication: &Publication, _blocks: u64) {
        // The publisher counted the public area's free blocks afresh.
    }

    fn fsync(&self, _lsn: u64) -> FsResult<u64> {
        self.publication.publish_local(u64::MAX)
    }

    /// Publishes everything queued (whatever `lsn`), in one batch of at most `budget`.
    fn publish(&self, publication: &Publication, _lsn: u64, budget: u64) -> FsResult<u64> {
        publication.publish_local(budget)
    }

    fn follow(&self, _publication: &Publication) {
        // The publisher is this client: its state is current.
    }

    fn statfs(&self, in_use: &Bitmap) -> FsResult<Space> {
        // The free blocks are all the client's own (its count, `Front::space_available`).
        Ok(Space { free_blocks: 0, free_inodes: in_use.free() })
    }

    fn opened(&self, _ino: u64) {}

    fn closed(&self, _ino: u64) {}

    fn set_committed(&self, _lsn: u64) {}

    fn chunk_ready(&self, _lsn: u64) {}

    fn failed(&self) -> bool {
        self.publication.failed_here()
    }

    fn failure(&self) -> Option<String> {
        self.publication.failure_here()
    }

    fn set_observer(&self, _o: Observer) {
        // Nothing but this client changes the node: no lease is ever lost.
    }

    fn detach(&self) {}
}
