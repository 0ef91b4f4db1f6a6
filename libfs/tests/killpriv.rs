//! Dropping setuid/setgid after someone else's write: the FUSE kernel asks for it as a mode
//! change in the writer's name (xfstests generic/684, 685: fallocate by an unprivileged user
//! on a setuid file failed with EPERM). Allowed to whoever may write the file, only when it
//! clears nothing but those bits. Likewise the file capabilities (security.capability),
//! which the kernel removes before another user's write or fallocate (generic/688) — unless
//! the mount asks for FUSE_HANDLE_KILLPRIV_V2, as linefs mounts do: then libfs drops them
//! itself on every write, truncate and fallocate, whoever the writer.

use libfs::*;
use linefs_pm::layout::{FormatParams, Geometry};
use linefs_pm::PmRegion;
use std::sync::Arc;

fn fresh(size: u64) -> Fs {
    let region = Arc::new(PmRegion::traced(size));
    let geo = Geometry::compute(&FormatParams::for_size(size)).unwrap();
    linefs_pm::mkfs::format_region(&region, &geo).unwrap();
    Fs::mount_region(region, FsOptions { background_publish: false, ..Default::default() }).unwrap()
}

fn chmod(fs: &Fs, cred: &Cred, ino: Ino, mode: u32) -> FsResult<Attr> {
    fs.setattr(cred, ino, &SetAttr { mode: Some(mode), ..Default::default() })
}

#[test]
fn a_writer_may_drop_setuid_and_setgid_but_not_chmod() {
    let fs = fresh(32 << 20);
    let root = Cred::root();
    let user = Cred { uid: 1000, gid: 1000, groups: Vec::new() };
    let (f, fh) = fs.create(&root, ROOT_INO, b"f", 0o6666, 0, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh);
    assert_eq!(f.perm, 0o6666);

    // Not the owner: no chmod, even to the same mode, and no dropping of other bits.
    assert!(matches!(chmod(&fs, &user, f.ino, 0o6666), Err(FsError::Perm)));
    assert!(matches!(chmod(&fs, &user, f.ino, 0o6644), Err(FsError::Perm)));
    assert!(matches!(chmod(&fs, &user, f.ino, 0o0644), Err(FsError::Perm)));
    assert!(matches!(chmod(&fs, &user, f.ino, 0o7666), Err(FsError::Perm)));
    // Dropping setuid and setgid, as the kernel does after the user's write: allowed.
    // (setgid also goes when the caller is not in the file's group, as with any chmod.)
    assert_eq!(chmod(&fs, &user, f.ino, 0o2666).unwrap().perm & 0o4777, 0o0666);
    assert_eq!(fs.getattr(f.ino).unwrap().perm, 0o0666);

    // Someone who may not write the file may not drop them either.
    let (g, gh) = fs.create(&root, ROOT_INO, b"g", 0o6644, 0, libc::O_RDWR).unwrap();
    fs.release(g.ino, gh);
    assert!(matches!(chmod(&fs, &user, g.ino, 0o0644), Err(FsError::Perm)));
    assert_eq!(fs.getattr(g.ino).unwrap().perm, 0o6644);
}

#[test]
fn a_writer_may_remove_file_capabilities_but_no_other_security_attribute() {
    let fs = fresh(32 << 20);
    let root = Cred::root();
    let user = Cred { uid: 1000, gid: 1000, groups: Vec::new() };
    let caps = b"security.capability";
    let (f, fh) = fs.create(&root, ROOT_INO, b"f", 0o666, 0, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh);
    fs.setxattr(&root, f.ino, caps, b"\x01\x00\x00\x02", 0).unwrap();
    fs.setxattr(&root, f.ino, b"security.other", b"x", 0).unwrap();

    // Not the owner: may not set capabilities nor remove another security attribute.
    assert!(matches!(fs.setxattr(&user, f.ino, caps, b"y", 0), Err(FsError::Perm)));
    assert!(matches!(fs.removexattr(&user, f.ino, b"security.other"), Err(FsError::Perm)));
    // May write the file, so may remove its capabilities (what the write would do anyway).
    fs.removexattr(&user, f.ino, caps).unwrap();
    assert!(matches!(fs.getxattr(&root, f.ino, caps), Err(FsError::NoAttr)));
    assert_eq!(fs.getxattr(&root, f.ino, b"security.other").unwrap(), b"x");

    // Someone who may not write the file may not.
    let (g, gh) = fs.create(&root, ROOT_INO, b"g", 0o644, 0, libc::O_RDWR).unwrap();
    fs.release(g.ino, gh);
    fs.setxattr(&root, g.ino, caps, b"\x01\x00\x00\x02", 0).unwrap();
    assert!(matches!(fs.removexattr(&user, g.ino, caps), Err(FsError::Perm)));
    assert!(fs.getxattr(&root, g.ino, caps).is_ok());
}

#[test]
fn every_write_truncate_and_fallocate_drops_file_capabilities_and_nothing_else() {
    let fs = fresh(32 << 20);
    let root = Cred::root();
    let caps = b"security.capability";
    let (f, fh) = fs.create(&root, ROOT_INO, b"f", 0o644, 0, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh);
    let set = |fs: &Fs| {
        fs.setxattr(&root, f.ino, caps, b"\x01\x00\x00\x02", 0).unwrap();
        fs.setxattr(&root, f.ino, b"user.keep", b"k", 0).unwrap();
    };
    let check = |fs: &Fs, what: &str| {
        assert!(matches!(fs.getxattr(&root, f.ino, caps), Err(FsError::NoAttr)), "{what} kept the capabilities");
        assert_eq!(fs.getxattr(&root, f.ino, b"user.keep").unwrap(), b"k", "{what}");
    };
    set(&fs);
    fs.write(&root, f.ino, 0, b"data").unwrap();
    check(&fs, "a write by root");
    set(&fs);
    fs.setattr(&root, f.ino, &SetAttr { size: Some(1), ..Default::default() }).unwrap();
    check(&fs, "a truncate");
    set(&fs);
    fs.fallocate(&root, f.ino, 0, 8192, 0).unwrap();
    check(&fs, "a fallocate");
    set(&fs);
    let fh = fs.open(&root, f.ino, libc::O_RDWR | libc::O_TRUNC).unwrap();
    fs.release(f.ino, fh);
    check(&fs, "an open with O_TRUNC");
    // Nothing to drop: a write leaves the other attributes alone.
    fs.write(&root, f.ino, 0, b"more").unwrap();
    assert_eq!(fs.getxattr(&root, f.ino, b"user.keep").unwrap(), b"k");
}
