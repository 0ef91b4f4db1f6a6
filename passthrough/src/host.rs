//! The host side of the passthrough: the calls it makes on the source directory in the forms
//! it needs (stat of a descriptor, open flags, `mknodat`, extended attributes through a path,
//! `fallocate`, `lseek` with `SEEK_DATA`/`SEEK_HOLE`, the open-file limit) and the
//! conversions between the host's values and FUSE's (errno, times, file types). Knows nothing
//! of inodes or handles: [`crate::fs`] does.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileType, TimeOrNow};
use rustix::fs::{self as rfs, AtFlags, FallocateFlags, Mode, OFlags, SeekFrom, Stat, Timespec};
use rustix::io::Errno as RErrno;
use tracing::debug;

pub(crate) fn errno(op: &str, e: io::Error) -> Errno {
    debug!(op, error = %e, "passthrough request failed");
    Errno::from(e)
}

pub(crate) fn time(sec: i64, nsec: i64) -> SystemTime {
    let nsec = nsec.clamp(0, 999_999_999) as u32;
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec.into())
    }
}

pub(crate) fn kind_of(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFSOCK => FileType::Socket,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        _ => FileType::RegularFile,
    }
}

/// A time for `utimensat`: unchanged, "now", or the time given.
pub(crate) fn timespec(t: Option<TimeOrNow>) -> Timespec {
    match t {
        None => Timespec { tv_sec: 0, tv_nsec: rfs::UTIME_OMIT },
        Some(TimeOrNow::Now) => Timespec { tv_sec: 0, tv_nsec: rfs::UTIME_NOW },
        Some(TimeOrNow::SpecificTime(at)) => {
            let (sec, nsec) = match at.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
                Err(e) => {
                    // Before 1970: negative seconds, nanoseconds in [0, 1e9).
                    let d = e.duration();
                    let (s, n) = (d.as_secs() as i64, i64::from(d.subsec_nanos()));
                    if n == 0 {
                        (-s, 0)
                    } else {
                        (-s - 1, 1_000_000_000 - n)
                    }
                }
            };
            Timespec { tv_sec: sec, tv_nsec: nsec }
        }
    }
}

/// Stats the object an (`O_PATH`) descriptor refers to, without following symlinks.
pub(crate) fn fstat(fd: &OwnedFd) -> io::Result<Stat> {
    Ok(rfs::statat(fd, c"", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW)?)
}

/// Raw `open(2)` flags as rustix flags, close-on-exec added (as every descriptor we keep).
pub(crate) fn oflags(flags: i32) -> OFlags {
    OFlags::from_bits_retain(flags as u32) | OFlags::CLOEXEC
}

/// `mknodat(2)` with a raw mode: rustix takes the file type apart from the permission bits.
/// A type of 0 means a regular file, as for the kernel; an invalid type stays invalid
/// (rustix passes `S_IFMT`), so the kernel answers `EINVAL` as it would have.
pub(crate) fn mknodat(dir: &OwnedFd, name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
    let kind = match mode & libc::S_IFMT {
        0 => rfs::FileType::RegularFile,
        t => rfs::FileType::from_raw_mode(t),
    };
    Ok(rfs::mknodat(dir, name, kind, Mode::from_bits_retain(mode & !libc::S_IFMT), rdev)?)
}

/// `getxattr(2)` of a whole value: ask its size, then read it (again if it grew meanwhile).
pub(crate) fn getxattr(path: &Path, name: &OsStr) -> io::Result<Vec<u8>> {
    loop {
        let mut buf = vec![0u8; rfs::getxattr_query(path, name)?];
        match rfs::getxattr(path, name, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(RErrno::RANGE) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// `listxattr(2)` of the whole list, as [`getxattr`].
pub(crate) fn listxattr(path: &Path) -> io::Result<Vec<u8>> {
    loop {
        let mut buf = vec![0u8; rfs::listxattr_query(path)?];
        match rfs::listxattr(path, &mut buf[..]) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(RErrno::RANGE) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// `fallocate(2)`; offsets beyond `off_t` are `EFBIG` (rustix would pass them on as negative
/// numbers, which the kernel answers with `EINVAL`).
pub(crate) fn fallocate(file: &File, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    if i64::try_from(offset).is_err() || i64::try_from(len).is_err() {
        return Err(io::Error::from_raw_os_error(libc::EFBIG));
    }
    Ok(rfs::fallocate(file, FallocateFlags::from_bits_retain(mode as u32), offset, len)?)
}

/// `lseek(2)` with a raw `whence`; the offset reaches the kernel unchanged for every whence
/// (a negative one too: `SEEK_DATA` at -1 must fail as the source file system decides).
pub(crate) fn lseek(file: &File, offset: i64, whence: i32) -> io::Result<i64> {
    let pos = match whence {
        libc::SEEK_SET => SeekFrom::Start(offset as u64),
        libc::SEEK_CUR => SeekFrom::Current(offset),
        libc::SEEK_END => SeekFrom::End(offset),
        libc::SEEK_DATA => SeekFrom::Data(offset as u64),
        libc::SEEK_HOLE => SeekFrom::Hole(offset as u64),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    Ok(rfs::seek(file, pos)? as i64)
}

/// Raises the soft open-file limit to the hard limit (the passthrough keeps one descriptor
/// per inode the kernel knows).
pub fn raise_nofile_limit() -> io::Result<()> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    Ok(setrlimit(Resource::Nofile, Rlimit { current: lim.maximum, maximum: lim.maximum })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_convert() {
        assert_eq!(time(1, 5), UNIX_EPOCH + Duration::new(1, 5));
        assert_eq!(time(-2, 0), UNIX_EPOCH - Duration::from_secs(2));
        assert_eq!(time(-2, 500), UNIX_EPOCH - Duration::from_secs(2) + Duration::from_nanos(500));
    }
}
