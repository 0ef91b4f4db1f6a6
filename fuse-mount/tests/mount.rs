//! Mount tests: linefs and the passthrough mounted in-process, exercised through `std::fs`.
//!
//! They need `/dev/fuse` and `fusermount3` (and, for our own `mount(2)`, root); without them
//! each test prints why it is skipped and passes.

use std::ffi::CString;
use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[path = "support/fuse.rs"]
mod support;
use support::fuse_available;

use fuse_mount::mount::mount;
use fuse_mount::{LinefsFuse, MountConfig};
use libfs::{Fs, FsOptions};
use linefs_passthrough::Passthrough;

fn config() -> MountConfig {
    MountConfig { threads: 2, ..MountConfig::default() }
}

fn setxattr(path: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: NUL-terminated strings; value is readable for its length.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn getxattr(path: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: buf is writable for its length; strings are NUL-terminated.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// The operations every backend must get right.
fn exercise(root: &Path) {
    // create, write, read
    let a = root.join("a.txt");
    fs::write(&a, b"hello").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"hello");
    // append + fsync
    {
        let mut f = OpenOptions::new().append(true).open(&a).unwrap();
        f.write_all(b" world").unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(fs::read_to_string(&a).unwrap(), "hello world");
    assert_eq!(fs::metadata(&a).unwrap().len(), 11);
    // a larger file spanning several writes
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    fs::write(root.join("big"), &big).unwrap();
    let mut back = Vec::new();
    fs::File::open(root.join("big")).unwrap().read_to_end(&mut back).unwrap();
    assert!(back == big, "big file differs");
    // mkdir, rename, readdir
    fs::create_dir(root.join("d")).unwrap();
    fs::rename(&a, root.join("d/b.txt")).unwrap();
    assert!(!a.exists());
    assert_eq!(names(root), vec!["big", "d"]);
    assert_eq!(names(&root.join("d")), vec!["b.txt"]);
    // symlink
    std::os::unix::fs::symlink("d/b.txt", root.join("s")).unwrap();
    assert_eq!(fs::read_link(root.join("s")).unwrap(), Path::new("d/b.txt"));
    assert_eq!(fs::read_to_string(root.join("s")).unwrap(), "hello world");
    // hard link
    fs::hard_link(root.join("d/b.txt"), root.join("h")).unwrap();
    assert_eq!(fs::read_to_string(root.join("h")).unwrap(), "hello world");
    // xattr
    setxattr(&root.join("d/b.txt"), "user.k", b"v1").unwrap();
    assert_eq!(getxattr(&root.join("d/b.txt"), "user.k").unwrap(), b"v1");
    // truncate and chmod
    OpenOptions::new().write(true).open(root.join("d/b.txt")).unwrap().set_len(2).unwrap();
    assert_eq!(fs::read_to_string(root.join("d/b.txt")).unwrap(), "he");
    fs::set_permissions(root.join("h"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::metadata(root.join("h")).unwrap().permissions().mode() & 0o777, 0o600);
    // unlink, rmdir
    fs::remove_file(root.join("h")).unwrap();
    fs::remove_file(root.join("s")).unwrap();
    fs::remove_file(root.join("d/b.txt")).unwrap();
    fs::remove_dir(root.join("d")).unwrap();
    assert_eq!(names(root), vec!["big"]);
    // errors come back as errnos
    let e = fs::read(root.join("missing")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(fs::remove_dir(root.join("big")).is_err());
}

fn mounted_type(path: &Path) -> Option<String> {
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let path = path.to_str()?;
    info.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (left.split(' ').nth(4)? == path).then(|| right.split(' ').next().unwrap_or("").to_string())
    })
}

#[test]
fn linefs_mount_works_and_persists() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let pm = tmp.path().join("node0.pm");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    linefs_pm::mkfs::format_dir(&pm, &linefs_pm::layout::FormatParams::for_size(64 << 20)).unwrap();
    let open = || Arc::new(Fs::mount(FsOptions { pm_path: pm.clone(), ..FsOptions::default() }).unwrap());

    let fs1 = open();
    let session = mount(LinefsFuse::new(fs1.clone()), &mnt, &config()).unwrap();
    let mnt = session.mountpoint().to_path_buf();
    assert_eq!(mounted_type(&mnt).as_deref(), Some("fuse.linefs"));
    exercise(&mnt);
    // An ioctl (here isatty's TCGETS, which Python's open asks) is refused with ENOTTY.
    {
        use std::os::fd::AsRawFd;
        fs::write(mnt.join("tty"), b"not a terminal").unwrap();
        let f = fs::File::open(mnt.join("tty")).unwrap();
        let mut t = std::mem::MaybeUninit::<libc::termios>::uninit();
        // SAFETY: a valid descriptor and a buffer the size TCGETS writes.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::TCGETS, t.as_mut_ptr()) };
        assert_eq!((r, std::io::Error::last_os_error().raw_os_error()), (-1, Some(libc::ENOTTY)));
        fs::remove_file(mnt.join("tty")).unwrap();
    }
    fs::write(mnt.join("keep"), b"kept").unwrap();
    session.unmount(Duration::from_secs(10)).unwrap();
    fs1.shutdown().unwrap();
    drop(fs1);
    assert_eq!(mounted_type(&mnt), None);

    // Remount: the data is still there.
    let fs2 = open();
    let cfg = MountConfig { subtype: None, ..config() };
    let session = mount(LinefsFuse::new(fs2.clone()), &mnt, &cfg).unwrap();
    assert_eq!(mounted_type(&mnt).as_deref(), Some("fuse"));
    assert_eq!(fs::read(mnt.join("keep")).unwrap(), b"kept");
    assert_eq!(names(&mnt), vec!["big", "keep"]);
    session.unmount(Duration::from_secs(10)).unwrap();
    fs2.shutdown().unwrap();
}

/// The writeback cache (host-only): the same operations; writes gathered by the kernel reach
/// libfs by fsync, close or unmount at the latest, with the size and times the kernel kept;
/// privileges dropped by another user's write. Everything is there after a remount.
#[test]
fn linefs_mount_with_the_writeback_cache_works_and_persists() {
    if !fuse_available() {
        return;
    }
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let pm = tmp.path().join("node0.pm");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    linefs_pm::mkfs::format_dir(&pm, &linefs_pm::layout::FormatParams::for_size(64 << 20)).unwrap();
    let open = || Arc::new(Fs::mount(FsOptions { pm_path: pm.clone(), ..FsOptions::default() }).unwrap());

    let fs1 = open();
    let session = mount(LinefsFuse::new(fs1.clone()).with_writeback_cache(true), &mnt, &config()).unwrap();
    let mnt = session.mountpoint().to_path_buf();
    exercise(&mnt);
    // Small writes, read back before anything is pushed; then fsync.
    let f = OpenOptions::new().create(true).read(true).write(true).truncate(true).open(mnt.join("wb")).unwrap();
    for i in 0..256u64 {
        f.write_all_at(&[i as u8; 1000], i * 1000).unwrap();
    }
    let mut back = vec![0u8; 256_000];
    f.read_exact_at(&mut back, 0).unwrap();
    assert!(back.chunks(1000).enumerate().all(|(i, c)| c.iter().all(|&b| b == i as u8)));
    f.sync_all().unwrap();
    let written = fs::metadata(mnt.join("wb")).unwrap();
    assert_eq!(written.len(), 256_000);
    // Not fsynced: close pushes it.
    f.write_all_at(b"tail", 256_000).unwrap();
    drop(f);
    assert_eq!(
        fs1.getattr(fs1.lookup(&libfs::Cred::root(), libfs::ROOT_INO, b"wb").unwrap().ino).unwrap().size,
        256_004
    );
    fs::write(mnt.join("unsynced"), b"pushed at unmount").unwrap();
    let mtime = fs::metadata(mnt.join("wb")).unwrap().modified().unwrap();
    session.unmount(Duration::from_secs(10)).unwrap();
    fs1.shutdown().unwrap();
    drop(fs1);

    let fs2 = open();
    let session = mount(LinefsFuse::new(fs2.clone()), &mnt, &config()).unwrap();
    let got = fs::read(mnt.join("wb")).unwrap();
    assert_eq!(got.len(), 256_004);
    assert_eq!(&got[256_000..], b"tail");
    assert_eq!(fs::metadata(mnt.join("wb")).unwrap().modified().unwrap(), mtime, "the kernel's mtime was lost");
    assert_eq!(fs::read(mnt.join("unsynced")).unwrap(), b"pushed at unmount");
    session.unmount(Duration::from_secs(10)).unwrap();
    fs2.shutdown().unwrap();
}

#[test]
fn passthrough_mount_works() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&src).unwrap();
    fs::create_dir(&mnt).unwrap();
    let session = mount(Passthrough::new(&src).unwrap(), &mnt, &config()).unwrap();
    let mnt = session.mountpoint().to_path_buf();
    exercise(&mnt);
    // What the mount shows is what the source holds.
    assert_eq!(names(&src), vec!["big"]);
    fs::write(src.join("direct"), b"x").unwrap();
    assert_eq!(fs::read(mnt.join("direct")).unwrap(), b"x");
    session.unmount(Duration::from_secs(10)).unwrap();
    assert_eq!(mounted_type(&mnt), None);
}
