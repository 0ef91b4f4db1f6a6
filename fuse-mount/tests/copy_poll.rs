//! copy_file_range(2) and poll(2) through a real mount: a copy inside the file system is
//! answered by linefs (whole, at offsets, short at the source's end, into a file being
//! extended) with the bytes of the source, and poll on a file reports it ready.
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

/// copy_file_range(2) between two descriptors at explicit offsets: bytes copied, or errno.
fn copy_range(src: &fs::File, off_in: i64, dst: &fs::File, off_out: i64, len: usize) -> Result<usize, i32> {
    let (mut a, mut b) = (off_in, off_out);
    // SAFETY: both descriptors are open for the call; the offsets are locals it updates.
    let r = unsafe { libc::copy_file_range(src.as_raw_fd(), &mut a, dst.as_raw_fd(), &mut b, len, 0) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r as usize)
    }
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn copy_file_range_and_poll_through_the_mount() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pm = tmp.path().join("node0.pm");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    linefs_pm::mkfs::format_dir(&pm, &linefs_pm::layout::FormatParams::for_size(64 << 20)).unwrap();
    let fs = Arc::new(Fs::mount(FsOptions { pm_path: pm, ..FsOptions::default() }).unwrap());
    let session =
        mount(LinefsFuse::new(fs.clone()), &mnt, &MountConfig { threads: 2, ..MountConfig::default() }).unwrap();
    let mnt = session.mountpoint().to_path_buf();

    // 3 MiB and a bit: more than one of the adapter's 1 MiB pieces, not a multiple of a page.
    let src_bytes = pattern(3 * (1 << 20) + 1234, 7);
    fs::write(mnt.join("src"), &src_bytes).unwrap();
    let src = fs::File::open(mnt.join("src")).unwrap();

    // The whole file into a new one.
    let dst = fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(mnt.join("dst")).unwrap();
    let mut copied = 0;
    while copied < src_bytes.len() {
        let n = copy_range(&src, copied as i64, &dst, copied as i64, src_bytes.len() - copied).unwrap();
        assert!(n > 0, "copy_file_range stopped at {copied}");
        copied += n;
    }
    drop(dst);
    assert_eq!(fs::read(mnt.join("dst")).unwrap(), src_bytes);

    // A middle range to an offset of an existing file, beyond its end (a hole before it).
    let base = pattern(5000, 9);
    fs::write(mnt.join("mid"), &base).unwrap();
    let dst = fs::OpenOptions::new().write(true).open(mnt.join("mid")).unwrap();
    assert_eq!(copy_range(&src, 100_000, &dst, 8192, 300_000), Ok(300_000));
    drop(dst);
    let mut want = base.clone();
    want.resize(8192, 0);
    want.extend_from_slice(&src_bytes[100_000..400_000]);
    assert_eq!(fs::read(mnt.join("mid")).unwrap(), want);

    // Asking past the source's end copies what there is; at the end, nothing.
    let dst = fs::OpenOptions::new().write(true).create(true).truncate(true).open(mnt.join("tail")).unwrap();
    let from = src_bytes.len() - 1000;
    assert_eq!(copy_range(&src, from as i64, &dst, 0, 1 << 20), Ok(1000));
    assert_eq!(copy_range(&src, src_bytes.len() as i64, &dst, 1000, 4096), Ok(0));
    drop(dst);
    assert_eq!(fs::read(mnt.join("tail")).unwrap(), &src_bytes[from..]);

    // poll: a file is always ready for what it was asked.
    let f = fs::OpenOptions::new().read(true).write(true).open(mnt.join("tail")).unwrap();
    let mut p = libc::pollfd { fd: f.as_raw_fd(), events: libc::POLLIN | libc::POLLOUT, revents: 0 };
    // SAFETY: one pollfd that lives across the call.
    let r = unsafe { libc::poll(&mut p, 1, 1000) };
    assert_eq!(r, 1);
    assert_eq!(p.revents & (libc::POLLIN | libc::POLLOUT), libc::POLLIN | libc::POLLOUT);
    drop(f);
    drop(src);

    session.unmount(Duration::from_secs(10)).unwrap();
    fs.shutdown().unwrap();
}
