//! The one system interface the passthrough needs that neither `std` nor rustix offers
//! safely; everything else (the `*at` family, extended attributes, umask, rlimits) is a
//! rustix call at the place that uses it.
//!
//! - `truncate(2)` of a path: rustix has only `ftruncate`. The passthrough truncates through
//!   `/proc/self/fd/N` of an `O_PATH` descriptor, which `ftruncate` refuses (`EBADF`), and
//!   opening the file for writing first would block on a FIFO and change which errors the
//!   caller sees (`EISDIR`, `EACCES` for the open rather than the truncate).
//!
//! Each unsafe block is a single libc call on arguments that the function owns.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

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
