//! libfs: the linefs client library.
//!
//! Every update is appended to the client-private operation log in PM as one checksummed
//! entry (an atomic group of records), persisted, and only then applied to the DRAM view and
//! acknowledged. Reads consult the DRAM view: unpublished data is found through the per-file
//! overlay (the hash index of unpublished log data), published data through the public area.
//! Publication, recovery and formatting are pm's ([`linefs_pm::publish`],
//! [`linefs_pm::recovery`], [`linefs_pm::mkfs`]); in the host-only mode a thread of the
//! client calls them. In the offload mode ([`FsOptions::nicfs`]) the client attaches to its
//! node's nicfs instead (`remote`): it is handed its log file read-write and the public file
//! read-only, nicfs publishes, and the node's inode numbers and space come from nicfs.
//!
//! Modules: `api` (the types of the calls), `options`, `state` (the client's state and the
//! view lookups), `commit` (the update path and space reservation), `publisher` (host-only
//! publication), `mount` (recovery at mount, shutdown), `calls` (the calls, by concern),
//! `link` (the seam to the node: the `NodeLink` trait the calls go through, and a
//! fault-injecting link for tests), `remote` (its offload implementation, the one place
//! wire messages are built), `leases`, `wakeup` (the publisher's), `view` (the DRAM view),
//! `perm` (permission checks), `status`, `error` (every errno).
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
mod time;
mod view;
mod wakeup;

pub use api::*;
pub use error::{FsError, FsResult};
pub use options::FsOptions;
pub use state::Fs;
pub use status::FsStatus;
