//! SEEK_DATA / SEEK_HOLE through a real mount (the kernel forwards them to the file system):
//! a negative offset gives ENXIO, as on Linux's local file systems (xfstests generic/448).
//!
//! Needs `/dev/fuse` and `fusermount3`; without them it prints why it is skipped and passes.

use std::fs;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

#[path = "support/fuse.rs"]
mod support;
use support::fuse_available;

use fuse_mount::mount::mount;
use fuse_mount::{LinefsFuse, MountConfig};
use libfs::{Fs, FsOptions};

/// lseek(2) as the kernel answers it: the offset, or the errno.
fn lseek(file: &fs::File, off: i64, whence: i32) -> Result<i64, i32> {
    // SAFETY: lseek on a descriptor this function borrows open; no memory is passed.
    let r = unsafe { libc::lseek(file.as_raw_fd(), off, whence) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}

#[test]
fn seek_data_and_hole() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pm = tmp.path().join("node0.pm");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    linefs_pm::mkfs::format_dir(&pm, &linefs_pm::layout::FormatParams::for_size(32 << 20)).unwrap();
    let fs = Arc::new(Fs::mount(FsOptions { pm_path: pm, ..FsOptions::default() }).unwrap());
    let session =
        mount(LinefsFuse::new(fs.clone()), &mnt, &MountConfig { threads: 2, ..MountConfig::default() }).unwrap();
    let mnt = session.mountpoint().to_path_buf();

    fs::write(mnt.join("f"), vec![7u8; 10_000]).unwrap();
    let f = fs::File::open(mnt.join("f")).unwrap();
    for whence in [libc::SEEK_DATA, libc::SEEK_HOLE] {
        assert_eq!(lseek(&f, -1, whence), Err(libc::ENXIO), "whence {whence}, offset -1");
        assert_eq!(lseek(&f, i64::MIN, whence), Err(libc::ENXIO), "whence {whence}, offset MIN");
        assert_eq!(lseek(&f, 10_000, whence), Err(libc::ENXIO), "whence {whence}, at the end");
    }
    assert_eq!(lseek(&f, 100, libc::SEEK_DATA), Ok(100));
    assert_eq!(lseek(&f, 100, libc::SEEK_HOLE), Ok(10_000));
    drop(f);
    session.unmount(Duration::from_secs(10)).unwrap();
    fs.shutdown().unwrap();
}
