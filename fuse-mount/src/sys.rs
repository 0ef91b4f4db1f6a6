//! Safe wrappers over the few raw system calls this crate needs that `std` does not offer:
//! `mount(2)`/`umount2(2)`, the `*at` family on `O_PATH` descriptors (for the passthrough),
//! extended attributes, and signal masks.
//!
//! Every wrapper turns C strings and buffers into Rust types and returns `io::Result` built
//! from `errno`, so the unsafe code is confined here and each block is a single libc call on
//! arguments that this function owns.

use std::ffi::{CString, OsStr};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn cstr(s: &[u8]) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

fn check_fd(ret: libc::c_int) -> io::Result<OwnedFd> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: the call just returned this new descriptor, which nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(ret) })
    }
}

fn check_size(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() }
}

pub fn getegid() -> u32 {
    // SAFETY: getegid has no arguments and cannot fail.
    unsafe { libc::getegid() }
}

/// `mount(2)`.
pub fn mount(source: &str, target: &Path, fstype: &str, flags: libc::c_ulong, data: &str) -> io::Result<()> {
    let (source, target) = (cstr(source.as_bytes())?, cstr(target.as_os_str().as_bytes())?);
    let (fstype, data) = (cstr(fstype.as_bytes())?, cstr(data.as_bytes())?);
    // SAFETY: all pointers are valid NUL-terminated strings that outlive the call.
    check(unsafe { libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), flags, data.as_ptr().cast()) })
}

/// `umount2(2)`.
pub fn umount(target: &Path, flags: libc::c_int) -> io::Result<()> {
    let target = cstr(target.as_os_str().as_bytes())?;
    // SAFETY: target is a valid NUL-terminated string.
    check(unsafe { libc::umount2(target.as_ptr(), flags) })
}

/// `openat(2)`.
pub fn openat(dir: BorrowedFd<'_>, name: &OsStr, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let name = cstr(name.as_bytes())?;
    // SAFETY: valid descriptor and NUL-terminated name; the result is checked.
    check_fd(unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })
}

/// `open(2)` of a path.
pub fn open(path: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let path = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: valid NUL-terminated path; the result is checked.
    check_fd(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, mode as libc::c_uint) })
}

/// `fstatat(2)`; an empty `name` with `AT_EMPTY_PATH` stats `dir` itself.
pub fn fstatat(dir: BorrowedFd<'_>, name: &OsStr, flags: i32) -> io::Result<libc::stat> {
    let name = cstr(name.as_bytes())?;
    let mut st = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: st points to writable memory of the right size; name is NUL-terminated.
    check(unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), flags) })?;
    // SAFETY: fstatat succeeded, so it filled st.
    Ok(unsafe { st.assume_init() })
}

/// Stats the object an (`O_PATH`) descriptor refers to, without following symlinks.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    fstatat(fd, OsStr::new(""), libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW)
}

pub fn mknodat(dir: BorrowedFd<'_>, name: &OsStr, mode: u32, rdev: u64) -> io::Result<()> {
    let name = cstr(name.as_bytes())?;
    // SAFETY: valid descriptor and NUL-terminated name.
    check(unsafe { libc::mknodat(dir.as_raw_fd(), name.as_ptr(), mode, rdev) })
}

pub fn mkdirat(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> io::Result<()> {
    let name = cstr(name.as_bytes())?;
    // SAFETY: valid descriptor and NUL-terminated name.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) })
}

pub fn symlinkat(target: &OsStr, dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
    let (target, name) = (cstr(target.as_bytes())?, cstr(name.as_bytes())?);
    // SAFETY: valid descriptor and NUL-terminated strings.
    check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
}

/// `linkat(AT_FDCWD, from, dir, name, flags)`.
pub fn linkat(from: &Path, dir: BorrowedFd<'_>, name: &OsStr, flags: i32) -> io::Result<()> {
    let (from, name) = (cstr(from.as_os_str().as_bytes())?, cstr(name.as_bytes())?);
    // SAFETY: valid descriptor and NUL-terminated strings.
    check(unsafe { libc::linkat(libc::AT_FDCWD, from.as_ptr(), dir.as_raw_fd(), name.as_ptr(), flags) })
}

pub fn unlinkat(dir: BorrowedFd<'_>, name: &OsStr, flags: i32) -> io::Result<()> {
    let name = cstr(name.as_bytes())?;
    // SAFETY: valid descriptor and NUL-terminated name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

pub fn renameat2(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    newdir: BorrowedFd<'_>,
    newname: &OsStr,
    flags: u32,
) -> io::Result<()> {
    let (name, newname) = (cstr(name.as_bytes())?, cstr(newname.as_bytes())?);
    // SAFETY: valid descriptors and NUL-terminated names.
    check(unsafe {
        libc::renameat2(dir.as_raw_fd(), name.as_ptr(), newdir.as_raw_fd(), newname.as_ptr(), flags as libc::c_uint)
    })
}

/// `readlinkat(fd, "")`: the target of the symlink an `O_PATH` descriptor refers to.
pub fn readlink_fd(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: buf is writable for buf.len() bytes; "" is a valid C string.
    let n = check_size(unsafe { libc::readlinkat(fd.as_raw_fd(), c"".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) })?;
    buf.truncate(n);
    Ok(buf)
}

/// `fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)`; `None` keeps the id.
pub fn fchown_fd(fd: BorrowedFd<'_>, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    let uid = uid.unwrap_or(u32::MAX);
    let gid = gid.unwrap_or(u32::MAX);
    let flags = libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW;
    // SAFETY: valid descriptor; "" is a valid C string.
    check(unsafe { libc::fchownat(fd.as_raw_fd(), c"".as_ptr(), uid, gid, flags) })
}

/// A time for [`utimens`]: `None` leaves it, `Some(None)` sets "now".
pub type TimeArg = Option<Option<std::time::SystemTime>>;

fn timespec(t: TimeArg) -> libc::timespec {
    match t {
        None => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        Some(None) => libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        Some(Some(at)) => {
            let (sec, nsec) = match at.duration_since(std::time::UNIX_EPOCH) {
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
            libc::timespec { tv_sec: sec as libc::time_t, tv_nsec: nsec as _ }
        }
    }
}

/// `utimensat(AT_FDCWD, path, [atime, mtime], 0)`.
pub fn utimens(path: &Path, atime: TimeArg, mtime: TimeArg) -> io::Result<()> {
    let path = cstr(path.as_os_str().as_bytes())?;
    let times = [timespec(atime), timespec(mtime)];
    // SAFETY: path is NUL-terminated; times is an array of two timespecs.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) })
}

pub fn truncate(path: &Path, size: u64) -> io::Result<()> {
    let path = cstr(path.as_os_str().as_bytes())?;
    let size = libc::off_t::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: path is NUL-terminated.
    check(unsafe { libc::truncate(path.as_ptr(), size) })
}

pub fn faccessat(path: &Path, mask: i32) -> io::Result<()> {
    let path = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: path is NUL-terminated.
    check(unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), mask, 0) })
}

pub fn getxattr(path: &Path, name: &OsStr) -> io::Result<Vec<u8>> {
    let (path, name) = (cstr(path.as_os_str().as_bytes())?, cstr(name.as_bytes())?);
    loop {
        // SAFETY: NUL-terminated strings; a null buffer of size 0 asks for the size.
        let size = check_size(unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) })?;
        let mut buf = vec![0u8; size];
        // SAFETY: buf is writable for buf.len() bytes.
        match check_size(unsafe { libc::getxattr(path.as_ptr(), name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            // The value grew between the two calls: ask again.
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

pub fn listxattr(path: &Path) -> io::Result<Vec<u8>> {
    let path = cstr(path.as_os_str().as_bytes())?;
    loop {
        // SAFETY: NUL-terminated path; a null buffer of size 0 asks for the size.
        let size = check_size(unsafe { libc::listxattr(path.as_ptr(), std::ptr::null_mut(), 0) })?;
        let mut buf = vec![0u8; size];
        // SAFETY: buf is writable for buf.len() bytes.
        match check_size(unsafe { libc::listxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) }) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if e.raw_os_error() == Some(libc::ERANGE) => continue,
            Err(e) => return Err(e),
        }
    }
}

pub fn setxattr(path: &Path, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let (path, name) = (cstr(path.as_os_str().as_bytes())?, cstr(name.as_bytes())?);
    // SAFETY: NUL-terminated strings; value is readable for value.len() bytes.
    check(unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), flags) })
}

pub fn removexattr(path: &Path, name: &OsStr) -> io::Result<()> {
    let (path, name) = (cstr(path.as_os_str().as_bytes())?, cstr(name.as_bytes())?);
    // SAFETY: NUL-terminated strings.
    check(unsafe { libc::removexattr(path.as_ptr(), name.as_ptr()) })
}

pub fn fallocate(fd: BorrowedFd<'_>, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    let big = |_| io::Error::from_raw_os_error(libc::EFBIG);
    let offset = libc::off_t::try_from(offset).map_err(big)?;
    let len = libc::off_t::try_from(len).map_err(big)?;
    // SAFETY: valid descriptor; plain integer arguments.
    check(unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset, len) })
}

pub fn lseek(fd: BorrowedFd<'_>, offset: i64, whence: i32) -> io::Result<i64> {
    // SAFETY: valid descriptor; plain integer arguments.
    let ret = unsafe { libc::lseek(fd.as_raw_fd(), offset as libc::off_t, whence) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as i64)
    }
}

pub fn statvfs(path: &Path) -> io::Result<libc::statvfs> {
    let path = cstr(path.as_os_str().as_bytes())?;
    let mut st = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: st is writable memory of the right size; path is NUL-terminated.
    check(unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) })?;
    // SAFETY: statvfs succeeded, so it filled st.
    Ok(unsafe { st.assume_init() })
}

/// Sets the process umask, returning the previous one.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: umask only swaps an integer in the process state.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

/// Raises the soft open-file limit to the hard limit (the passthrough keeps one descriptor
/// per inode the kernel knows).
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut lim = MaybeUninit::<libc::rlimit>::uninit();
    // SAFETY: lim is writable memory of the right size.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, lim.as_mut_ptr()) })?;
    // SAFETY: getrlimit succeeded, so it filled lim.
    let mut lim = unsafe { lim.assume_init() };
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: lim is a valid rlimit.
    check(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) })?;
    Ok(lim.rlim_cur)
}

/// A set of signals, blocked in the calling thread (and every thread it creates afterwards)
/// so that [`SignalSet::wait`] can receive them synchronously.
pub struct SignalSet {
    set: libc::sigset_t,
}

impl SignalSet {
    /// Blocks `signals` in the calling thread.
    pub fn block(signals: &[i32]) -> io::Result<SignalSet> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: set is writable memory of the right size for sigemptyset to initialise.
        check(unsafe { libc::sigemptyset(set.as_mut_ptr()) })?;
        // SAFETY: sigemptyset initialised set.
        let mut set = unsafe { set.assume_init() };
        for &s in signals {
            // SAFETY: set is an initialised sigset_t.
            check(unsafe { libc::sigaddset(&mut set, s) })?;
        }
        // SAFETY: set is initialised; a null old-set pointer is allowed.
        let ret = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
        Ok(SignalSet { set })
    }

    /// Waits up to `timeout` for one of the signals; `None` on timeout or interruption.
    pub fn wait(&self, timeout: Duration) -> Option<i32> {
        let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
        // SAFETY: set and ts are initialised; a null siginfo pointer is allowed.
        let ret = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (ret > 0).then_some(ret)
    }
}
