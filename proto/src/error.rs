//! Why a frame was refused, and the one place that decides the errno a peer is told.

use crate::kind::{Kind, Link, Party};

/// A frame or payload that does not decode. Every variant names what was wrong, so that the
/// log line and the Error reply say it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated {what}: {need} bytes needed, {have} present")]
    Truncated { what: &'static str, need: usize, have: usize },
    #[error("bad frame magic {found:02x?}")]
    BadMagic { found: [u8; 4] },
    #[error("protocol version {version} is not supported (this side speaks version {supported})")]
    UnsupportedVersion { version: u16, supported: u16 },
    /// The peer answered with an Error frame of its own version: it does not speak ours.
    #[error("peer speaks protocol version {version} and refused this one: {message} (errno {errno})")]
    VersionRefused { version: u16, errno: i32, message: String },
    #[error("frame of {declared} bytes is over the {max}-byte limit")]
    Oversized { declared: u64, max: usize },
    #[error("unknown message kind {kind:#06x}")]
    UnknownKind { kind: u16 },
    #[error("{kind} is not a message of the {link:?} link")]
    WrongLink { kind: Kind, link: Link },
    #[error("{kind} is never sent by {from:?}")]
    WrongSender { kind: Kind, from: Party },
    #[error("{kind} carries {expected} file descriptors, the frame declares or passed {found}")]
    FdCount { kind: Kind, expected: u8, found: usize },
    #[error("{field} = {value} is out of range")]
    FieldOutOfRange { field: &'static str, value: u64 },
    #[error("reserved bytes of {field} are not zero")]
    ReservedNonZero { field: &'static str },
    #[error("{field}: {count} elements, at most {max} allowed")]
    ListTooLong { field: &'static str, count: u64, max: u64 },
    #[error("{field} is not valid UTF-8")]
    BadUtf8 { field: &'static str },
    #[error("{extra} bytes after the end of a {kind} payload")]
    TrailingBytes { kind: Kind, extra: usize },
}

impl DecodeError {
    /// The errno told to the peer in the Error reply. One exhaustive match, so a new variant
    /// cannot go without one.
    pub fn errno(&self) -> i32 {
        match self {
            // The peer does not speak our protocol at all.
            DecodeError::BadMagic { .. } => errno::EPROTO,
            DecodeError::UnsupportedVersion { .. } | DecodeError::VersionRefused { .. } => errno::EPROTONOSUPPORT,
            DecodeError::Oversized { .. } => errno::EMSGSIZE,
            // A kind from a newer peer, or one that has no business on this socket.
            DecodeError::UnknownKind { .. } | DecodeError::WrongLink { .. } | DecodeError::WrongSender { .. } => {
                errno::EOPNOTSUPP
            }
            // A frame of a known kind that is not well formed.
            DecodeError::Truncated { .. }
            | DecodeError::FdCount { .. }
            | DecodeError::FieldOutOfRange { .. }
            | DecodeError::ReservedNonZero { .. }
            | DecodeError::ListTooLong { .. }
            | DecodeError::BadUtf8 { .. }
            | DecodeError::TrailingBytes { .. } => errno::EBADMSG,
        }
    }
}

/// The Linux errno values this crate sends (asm-generic numbering, the same on every Linux
/// architecture linefs builds for). Kept here rather than taken from libc so that the wire
/// values are visibly fixed.
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const EBADF: i32 = 9;
    pub const EAGAIN: i32 = 11;
    pub const EACCES: i32 = 13;
    pub const ENOSPC: i32 = 28;
    pub const EPROTO: i32 = 71;
    pub const EBADMSG: i32 = 74;
    pub const EMSGSIZE: i32 = 90;
    pub const EPROTONOSUPPORT: i32 = 93;
    pub const EOPNOTSUPP: i32 = 95;
    /// Largest errno value accepted on the wire (Linux's MAX_ERRNO).
    pub const MAX: i32 = 4095;
}
