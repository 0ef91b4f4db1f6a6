//! libfs: the linefs client library.
//!
//! Every update is appended to the client-private operation log in PM as one checksummed
//! entry (an atomic group of records), persisted, and only then applied to the DRAM view and
//! acknowledged. Reads consult the DRAM view: unpublished data is found through the per-file
//! overlay (the hash index of unpublished log data), published data through the public area.
//! Publication, recovery and formatting are pm's ([`linefs_pm::publish`],
//! [`linefs_pm::recovery`], [`linefs_pm::mkfs`]). Everything the calls ask of the node goes
//! through its link (`link::NodeLink`): in the host-only mode the client is the node
//! (`link::host`: a thread of the client publishes with pm's publisher); in the offload
//! mode ([`FsOptions::nicfs`]) the client attaches to its node's nicfs instead (`remote`):
//! it is handed its log file read-write and the public file read-only, nicfs publishes, and
//! the node's leases, inode numbers and space come from nicfs.
//!
//! Modules: `api` (the types of the calls), `options`, `state` (the client's state and the
//! view lookups), `commit` (the update path and space reservation), `publisher` (the
//! background publisher thread), `publication` (what the client and its publisher share),
//! `mount` (recovery at mount, shutdown), `calls` (the calls, by concern), `link` (the seam
//! to the node: the `NodeLink` trait the calls go through, its host-only implementation, a
//! fake node and a fault-injecting link for tests), `remote` (its offload implementation,
//! the one place wire messages are built), `leases`, `wakeup` (the publisher's), `view` (the
//! DRAM view), `perm` (permission checks), `status`, `error` (every errno), `testing`
//! (feature `testing`: clients of a fake node or behind a fault link, for tests).
#![deny(clippy::undocumented_unsafe_blocks)]

mod api;
mod calls;
mod commit;
mod error;
mod leases;
mod link;
mod mount;
mod options;
mod perm;
mod publication;
mod publisher;
mod remote;
mod state;
mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod time;
mod view;
mod wakeup;

pub use api::*;
pub use error::{FsError, FsResult};
pub use options::FsOptions;
pub use state::Fs;
pub use status::FsStatus;
