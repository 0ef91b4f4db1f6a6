//! Dropping setuid/setgid after someone else's write: the FUSE kernel asks for it as a mode
//! change in the writer's name (xfstests generic/684, 685: fallocate by an unprivileged user
//! on a setuid file failed with EPERM). Allowed to whoever may write the file, only when it
//! clears nothing but those bits.

use libfs::*;
use linefs_pm::layout::{FormatParams, Geometry};
use linefs_pm::PmRegion;
use std::sync::Arc;

fn fresh(size: u64) -> Fs {
    let region = Arc::new(PmRegion::traced(size));
    let geo = Geometry::compute(&FormatParams::for_size(size)).unwrap();
    Fs::format_region(&region, &geo).unwrap();
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
