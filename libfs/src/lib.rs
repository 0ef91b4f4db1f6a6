//! libfs: the linefs client library.
//!
//! Every update is appended to the client-private operation log in PM as one checksummed
//! entry (an atomic group of records), persisted, and only then applied to the DRAM view and
//! acknowledged. Reads consult the DRAM view: unpublished data is found through the per-file
//! overlay (the hash index of unpublished log data), published data through the public area.
//! A background publisher applies committed log entries to the public area and reclaims log
//! space only once they are published. Mounting replays the committed prefix of the log.
#![deny(clippy::undocumented_unsafe_blocks)]

mod api;
mod error;
mod fs;
mod perm;
mod publisher;
mod view;

pub use api::*;
pub use error::{FsError, FsResult};
pub use fs::*;
