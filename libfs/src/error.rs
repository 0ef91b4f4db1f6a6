//! Errors of libfs and the one place that decides their errno.
//!
//! Every failure a caller can see is an [`FsError`] variant; [`FsError::errno`] is an
//! exhaustive match, so a new variant cannot be added without choosing its errno.

use linefs_pm::layout::FormatError;
use linefs_pm::public::PublishError;
use linefs_pm::PmError;

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
    #[error("bad file handle")]
    BadHandle,
    #[error("position beyond the end of the file")]
    NoData,
    #[error("file system is shut down")]
    ShutDown,
    #[error("PM file: {0}")]
    Format(#[from] FormatError),
    #[error("publication failed: {0}")]
    Publish(#[from] PublishError),
    #[error(
        "log of client {client} holds an invalid entry at lsn {lsn} ({why}); refusing to mount, nothing was changed"
    )]
    InvalidLog { client: u32, lsn: u64, why: String },
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
            FsError::BadHandle => libc::EBADF,
            // lseek(SEEK_DATA/SEEK_HOLE) past the end.
            FsError::NoData => libc::ENXIO,
            FsError::ShutDown => libc::EIO,
            FsError::Busy(_) => libc::EBUSY,
            // A full public area found during publication is still "no space" to the
            // caller; anything else that went wrong underneath is an I/O error: the data
            // in the log is intact, but we cannot go on.
            FsError::Publish(PublishError::NoSpace) => libc::ENOSPC,
            FsError::Publish(_) | FsError::Format(_) | FsError::Io { .. } | FsError::InvalidLog { .. } => libc::EIO,
        }
    }
}
