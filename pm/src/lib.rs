//! linefs-pm: the layer every linefs component shares.
//!
//! * [`region`]: a PM region over a memory-mapped file with explicit `persist`/`fence`
//!   primitives, plus the tracing backend the crash tests use ([`trace`]).
//! * [`mountinfo`]: the parser of `/proc/self/mountinfo` (DAX detection, the CLI's mounts).
//! * [`layout`]: the persisted format of a node's PM file (superblock and geometry).
//! * [`record`]: operation-log records (the unit libfs appends and publishers apply).
//! * [`oplog`]: the operation-log ring: entry framing, append, scan of the committed prefix.
//! * [`public`]: the public area (inode table, directories, block maps, allocation) and the
//!   idempotent publication of log records into it.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod layout;
pub mod mountinfo;
pub mod oplog;
pub mod public;
pub mod record;
pub mod region;
pub mod trace;

pub use region::{Backing, PersistMethod, PmError, PmRegion, PmStats};
