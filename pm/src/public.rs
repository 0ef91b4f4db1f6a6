//! The public area: inode table, directories, per-file block maps and block allocation,
//! and the idempotent publication of log records into it.
//!
//! * [`format`]: the persisted structures, byte by byte (inode, indirect block, directory
//!   slot, xattr block).
//! * [`reader`]: [`PublicReader`], the read-only view any process can use (inodes, block
//!   maps, file data, directory entries, xattrs, a full load).
//! * `area`, `validate`, `apply`: [`PublicArea`], the publisher's side — allocation state
//!   rebuilt at load, validation of records against the public state, and their effects.
//! * `policy`, `shadow`: the checks of a publisher that does not trust the writer —
//!   entries judged by their POSIX meaning on a shadow state, derived values compared.
//!   `access`: the permission-bit rule both use.
//! * [`mover`]: how file data gets into data blocks — at once ([`DirectMover`]), or recorded
//!   as an ordered list of moves executed later by someone else ([`Collector`]: nicfs hands
//!   them to kworker as copy lists).
//!
//! # Idempotent publication
//!
//! Records are blind post-images (see [`crate::record`]), and every structure is updated
//! by key (a name's slot is found by name, a block through the block map), so applying a
//! log suffix again over a public area that already holds any part of it converges to the
//! same state. Recovery relies on this: it re-publishes from the last checkpoint.
//!
//! Ordering rules that make a crash mid-publication safe:
//! * a newly allocated block (data, indirect, directory, xattr) is fully written — zero
//!   fill included — persisted and fenced *before* a pointer to it is persisted, so no
//!   crash state links a block with stale content. With a deferred mover a data block's
//!   contents are only recorded moves, so the pointer waits in DRAM (a *pending link*)
//!   until [`PublicArea::settle`] has had the moves executed and fenced;
//! * a freed block goes to a pending list and is reused only after the caller's checkpoint
//!   (the log's published LSN) is durable, so no crash state has two owners of one block;
//! * the block allocator is not persisted: it is rebuilt at load from the block maps;
//! * a structure rewritten in place (inode, directory slot, xattr chain) carries checksums:
//!   a torn one found at load is remembered as suspect, and must be rewritten by recovery's
//!   replay (else it is corruption). An xattr chain is rewritten block by block, so a crash
//!   between two blocks leaves a mix that passes every per-block check: the first block
//!   also holds a checksum of the whole stream.

mod access;
mod apply;
mod area;
pub mod format;
pub mod mover;
mod policy;
pub mod reader;
mod shadow;
mod validate;
pub use access::allows;
pub use policy::Permissions;

pub use crate::record::dtype::of_mode as dtype_of_mode;
pub use area::PublicArea;
pub use format::{xattr_chain_blocks, PmInode, DIRENTS_PER_BLOCK, DIRENT_SIZE, XATTR_SPACE};
pub use mover::{execute_moves, Collector, DataMover, DirectMover, Move, MoveStats};
pub use reader::{InodeReload, LoadVisitor, Loaded, LoadedDirent, LoadedInode, PublicReader};

use crate::layout::FormatError;

/// Errors while publishing a record: the record is invalid for the current public state
/// (only possible with a buggy or hostile log writer), the public area is full, or PM
/// access failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("invalid record for inode {ino}: {why}")]
    Invalid { ino: u64, why: String },
    #[error("public area full: no free data block")]
    NoSpace,
    /// A deferred mover could not execute its moves (a copy list failed).
    #[error("moving file data failed: {0}")]
    Mover(String),
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl From<crate::region::PmError> for PublishError {
    fn from(e: crate::region::PmError) -> Self {
        PublishError::Format(e.into())
    }
}

type Result<T, E = PublishError> = std::result::Result<T, E>;

/// Extended attributes as (name, value) pairs.
pub type XattrList = Vec<(Vec<u8>, Vec<u8>)>;

fn invalid(ino: u64, why: impl Into<String>) -> PublishError {
    PublishError::Invalid { ino, why: why.into() }
}

fn corrupt(ino: u64, detail: String) -> FormatError {
    FormatError::Corrupt { what: format!("inode {ino}"), detail }
}

#[cfg(test)]
mod tests;
