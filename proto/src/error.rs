//! Why a frame was refused ([`DecodeError`]), every refusal that crosses the wire
//! ([`RemoteError`]), and the one place that decides each one's errno.

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
    /// The frame fails its integrity check (header byte 13's scheme): garbled on the way or
    /// forged by someone without the key. The stream cannot be trusted past it.
    #[error("frame fails its integrity check (scheme {scheme}): garbled or forged")]
    BadCheck { scheme: u8 },
    /// An authentic frame that is not the next one its sender sent: replayed, reordered, or
    /// one before it was dropped.
    #[error("frame out of sequence: number {found}, expected {expected} (replayed, reordered or dropped)")]
    OutOfSequence { expected: u64, found: u64 },
}

impl DecodeError {
    /// What the peer is told in the Error reply: one exhaustive match, so a new variant
    /// cannot go without one (its errno is then [`RemoteError::errno`]'s).
    pub fn remote(&self) -> RemoteError {
        match self {
            // The peer does not speak our protocol at all.
            DecodeError::BadMagic { .. } => RemoteError::Protocol,
            DecodeError::UnsupportedVersion { .. } | DecodeError::VersionRefused { .. } => RemoteError::VersionMismatch,
            DecodeError::Oversized { .. } => RemoteError::TooLarge,
            // A kind from a newer peer, or one that has no business on this socket.
            DecodeError::UnknownKind { .. } | DecodeError::WrongLink { .. } | DecodeError::WrongSender { .. } => {
                RemoteError::Unsupported
            }
            // A frame of a known kind that is not well formed.
            DecodeError::Truncated { .. }
            | DecodeError::FdCount { .. }
            | DecodeError::FieldOutOfRange { .. }
            | DecodeError::ReservedNonZero { .. }
            | DecodeError::ListTooLong { .. }
            | DecodeError::BadUtf8 { .. }
            | DecodeError::TrailingBytes { .. }
            | DecodeError::BadCheck { .. } => RemoteError::Malformed,
            // An authentic frame at the wrong place in the stream.
            DecodeError::OutOfSequence { .. } => RemoteError::Protocol,
        }
    }

    /// The errno of [`DecodeError::remote`].
    pub fn errno(&self) -> i32 {
        self.remote().errno()
    }
}

/// Every refusal a peer can answer with: the closed set of failures that cross the wire
/// (the `code` of an Error reply and of a Rejected notice, protocol version 6). Each
/// variant is one reason, and [`RemoteError::errno`] is the one place that decides the errno
/// it stands for — nicfs picks a variant, never a number, and libfs hands the variant's
/// errno to the application. Several variants share an errno where an application cannot
/// act differently on them (the session failed, an I/O error: both EIO), but they stay
/// apart on the wire, in logs and in tests.
///
/// Codes are little-endian u16s and never reused. Code 0 is the version refusal: it is the
/// one Error a peer of *any* version must read, and version 5 had these two bytes reserved
/// as zero, so its bytes are exactly what version 5 sent for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u16)]
pub enum RemoteError {
    /// The peer speaks another protocol version (EPROTONOSUPPORT).
    #[error("protocol version not supported")]
    VersionMismatch = 0,
    /// Not our protocol, or a frame out of sequence (a Hello expected or said twice) (EPROTO).
    #[error("protocol error")]
    Protocol = 1,
    /// A frame of a known kind that is not well formed (EBADMSG).
    #[error("malformed frame")]
    Malformed = 2,
    /// A frame over the size limit (EMSGSIZE).
    #[error("frame too large")]
    TooLarge = 3,
    /// A kind the peer does not know or does not take on this link or from this sender
    /// (EOPNOTSUPP).
    #[error("message not supported here")]
    Unsupported = 4,
    /// A well-formed request that names nothing valid or is not one this sender may make
    /// (no such inode number, a Hello naming a session on the control channel, …) (EINVAL).
    #[error("invalid request")]
    Invalid = 5,
    /// The caller's process may not do this at all (a mount daemon not root, stated
    /// credentials that are not the caller's, a kworker of another user) (EPERM).
    #[error("operation not permitted")]
    NotPermitted = 6,
    /// The file system's permissions refuse it (a write lease on a file the caller may not
    /// write, a session of another process) (EACCES).
    #[error("permission denied")]
    AccessDenied = 7,
    /// No such session (ENOENT).
    #[error("no such session")]
    NoSuchSession = 8,
    /// Held by someone else: every log slot in use, a second bulk connection or kworker
    /// (EBUSY).
    #[error("busy")]
    Busy = 9,
    /// A limit on clients: slots per uid, connections (EUSERS).
    #[error("too many clients")]
    TooManyClients = 10,
    /// Refused for now, may be asked again: a fenced uid's backoff, too many lease requests
    /// waiting (EAGAIN).
    #[error("try again")]
    TryAgain = 11,
    /// No free data blocks or inode numbers (ENOSPC).
    #[error("no space left on the node")]
    NoSpace = 12,
    /// The caller's share of the node is used up (EDQUOT).
    #[error("quota exceeded")]
    QuotaExceeded = 13,
    /// nicfs is shutting down (ESHUTDOWN).
    #[error("nicfs is shutting down")]
    ShuttingDown = 14,
    /// The client left a revoke unanswered past the lease timeout and was fenced (ETIMEDOUT).
    #[error("fenced: a revoke went unanswered past the lease timeout")]
    Fenced = 15,
    /// The session failed earlier (an entry refused, fenced): nothing more is done for it
    /// until the client attaches again (EIO).
    #[error("the session failed")]
    SessionFailed = 16,
    /// An entry of the client's log failed validation (EINVAL).
    #[error("log entry refused")]
    EntryRefused = 17,
    /// An I/O error on the peer's side (a file it could not open, a publication that
    /// failed) (EIO).
    #[error("I/O error on the peer")]
    Io = 18,
}

impl RemoteError {
    /// Every variant, in code order (tests walk it).
    pub const ALL: [RemoteError; 19] = [
        RemoteError::VersionMismatch,
        RemoteError::Protocol,
        RemoteError::Malformed,
        RemoteError::TooLarge,
        RemoteError::Unsupported,
        RemoteError::Invalid,
        RemoteError::NotPermitted,
        RemoteError::AccessDenied,
        RemoteError::NoSuchSession,
        RemoteError::Busy,
        RemoteError::TooManyClients,
        RemoteError::TryAgain,
        RemoteError::NoSpace,
        RemoteError::QuotaExceeded,
        RemoteError::ShuttingDown,
        RemoteError::Fenced,
        RemoteError::SessionFailed,
        RemoteError::EntryRefused,
        RemoteError::Io,
    ];

    /// The errno this refusal stands for: the one place that decides it.
    pub fn errno(self) -> i32 {
        match self {
            RemoteError::VersionMismatch => errno::EPROTONOSUPPORT,
            RemoteError::Protocol => errno::EPROTO,
            RemoteError::Malformed => errno::EBADMSG,
            RemoteError::TooLarge => errno::EMSGSIZE,
            RemoteError::Unsupported => errno::EOPNOTSUPP,
            RemoteError::Invalid | RemoteError::EntryRefused => errno::EINVAL,
            RemoteError::NotPermitted => errno::EPERM,
            RemoteError::AccessDenied => errno::EACCES,
            RemoteError::NoSuchSession => errno::ENOENT,
            RemoteError::Busy => errno::EBUSY,
            RemoteError::TooManyClients => errno::EUSERS,
            RemoteError::TryAgain => errno::EAGAIN,
            RemoteError::NoSpace => errno::ENOSPC,
            RemoteError::QuotaExceeded => errno::EDQUOT,
            RemoteError::ShuttingDown => errno::ESHUTDOWN,
            RemoteError::Fenced => errno::ETIMEDOUT,
            // Nothing an application can retry or fix: as any failed I/O.
            RemoteError::SessionFailed | RemoteError::Io => errno::EIO,
        }
    }

    /// The wire code (little-endian u16 in the Error and Rejected payloads).
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The variant of a wire code; None for a code this version does not know.
    pub fn from_code(code: u16) -> Option<RemoteError> {
        RemoteError::ALL.get(usize::from(code)).copied()
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
    pub const EBUSY: i32 = 16;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const EPROTO: i32 = 71;
    pub const EBADMSG: i32 = 74;
    pub const EUSERS: i32 = 87;
    pub const EMSGSIZE: i32 = 90;
    pub const EPROTONOSUPPORT: i32 = 93;
    pub const EOPNOTSUPP: i32 = 95;
    pub const ESHUTDOWN: i32 = 108;
    pub const ETIMEDOUT: i32 = 110;
    pub const EDQUOT: i32 = 122;
    /// Largest errno value accepted on the wire (Linux's MAX_ERRNO).
    pub const MAX: i32 = 4095;
}
