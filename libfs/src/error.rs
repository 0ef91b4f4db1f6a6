//! Errors of libfs and the one place that decides their errno.
//!
//! Every failure a caller can see is an [`FsError`] variant; [`FsError::errno`] is an
//! exhaustive match, so a new variant cannot be added without choosing its errno.

use linefs_pm::layout::FormatError;
use linefs_pm::recovery::RecoveryError;
use linefs_pm::PmError;
use linefs_proto::RemoteError;

pub type FsResult<T> = Result<T, FsError>;

#[derive(Debug, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("name longer than 255 bytes")]
    NameTooLong,
    #[error("permission denied")]
    Access,
    #[error("operation not permitted")]
    Perm,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("no space left: {0}")]
    NoSpace(&'static str),
    #[error("file too large")]
    TooBig,
    #[error("too many links")]
    TooManyLinks,
    #[error("no such attribute")]
    NoAttr,
    #[error("attribute value or list does not fit the buffer")]
    Range,
    #[error("attribute value too large")]
    AttrTooBig,
    #[error("operation not supported: {0}")]
    NotSupported(&'static str),
    #[error("position beyond the end of the file")]
    NoData,
    #[error("file system is shut down")]
    ShutDown,
    #[error("PM file: {0}")]
    Format(#[from] FormatError),
    /// Publication of this client's log failed (an entry the public area refused, or an
    /// I/O error underneath); updates are refused from then on, the log stays intact and
    /// the next mount's recovery deals with it.
    #[error("publication failed, updates are refused (the log is intact): {0}")]
    PublicationFailed(String),
    #[error("recovery: {0}")]
    Recovery(#[from] RecoveryError),
    /// The node refused a request (offload: nicfs's answer). The errno is the one the node
    /// decided ([`RemoteError::errno`]): an application sees nicfs's EPERM, EACCES, ENOSPC,
    /// EDQUOT, ESHUTDOWN, ETIMEDOUT… as themselves, not as EIO.
    #[error("{what}: the node refused ({code}): {message}")]
    Refused { what: String, code: RemoteError, message: String },
    #[error("another process has {0} mounted")]
    Busy(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl From<PmError> for FsError {
    fn from(e: PmError) -> Self {
        FsError::Format(e.into())
    }
}

impl FsError {
    /// The errno reported to the application for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Access => libc::EACCES,
            FsError::Perm => libc::EPERM,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::NoSpace(_) => libc::ENOSPC,
            FsError::TooBig => libc::EFBIG,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::NoAttr => libc::ENODATA,
            FsError::Range => libc::ERANGE,
            FsError::AttrTooBig => libc::E2BIG,
            FsError::NotSupported(_) => libc::EOPNOTSUPP,
            // lseek(SEEK_DATA/SEEK_HOLE) past the end.
            FsError::NoData => libc::ENXIO,
            FsError::ShutDown => libc::EIO,
            FsError::Busy(_) => libc::EBUSY,
            // The node's own decision, made in one place on its side.
            FsError::Refused { code, .. } => code.errno(),
            // Whatever went wrong underneath the calls — a corrupt PM file, a failed or
            // refused publication, an I/O error, a log that recovery will not replay — is an
            // I/O error to the caller: what is in the log stays intact, but we cannot go on.
            // A full public area is never found by publication itself: every entry reserves
            // its blocks when it is committed (NoSpace above).
            FsError::PublicationFailed(_) | FsError::Recovery(_) | FsError::Format(_) | FsError::Io { .. } => libc::EIO,
        }
    }
}
