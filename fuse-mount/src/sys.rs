//! The two system interfaces this crate needs that neither `std` nor rustix offers safely;
//! everything else (`mount(2)`, `umount2(2)`, the `*at` family, extended attributes, umask,
//! rlimits) is a rustix call at the place that uses it.
//!
//! - `truncate(2)` of a path: rustix has only `ftruncate`. The passthrough truncates through
//!   `/proc/self/fd/N` of an `O_PATH` descriptor, which `ftruncate` refuses (`EBADF`), and
//!   opening the file for writing first would block on a FIFO and change which errors the
//!   caller sees (`EISDIR`, `EACCES` for the open rather than the truncate).
//! - Signal masks and `sigtimedwait`: rustix has them only in its hidden `runtime` module,
//!   whose raw system calls are meant for code that replaces libc and bypass the signals libc
//!   reserves for itself; `pthread_sigmask` is the call to make in a libc process.
//!
//! Each unsafe block is a single libc call on arguments that the function owns.

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `truncate(2)`; a size beyond `off_t` is `EFBIG`, a path with a NUL byte `EINVAL`.
pub fn truncate(path: &Path, size: u64) -> io::Result<()> {
    let path = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let size = libc::off_t::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: path is NUL-terminated.
    check(unsafe { libc::truncate(path.as_ptr(), size) })
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
