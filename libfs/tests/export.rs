//! Lookups the kernel makes when it rebuilds an inode from a file handle (FUSE export
//! support, as open_by_handle_at uses it after the inode left its caches): "." of any inode
//! number, ".." of a directory. Found by xfstests generic/426.

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

#[test]
fn dot_of_any_inode_and_dotdot_of_a_directory() {
    let fs = fresh(32 << 20);
    let root = Cred::root();
    let d = fs.mkdir(&root, ROOT_INO, b"dir", 0o755, 0).unwrap();
    let (f, fh) = fs.create(&root, d.ino, b"file", 0o644, 0o022, libc::O_RDWR).unwrap();
    fs.release(f.ino, fh);

    // "." of a regular file: the file itself, with its generation.
    let again = fs.lookup(&root, f.ino, b".").unwrap();
    assert_eq!((again.ino, again.generation), (f.ino, f.generation));
    // "." and ".." of a directory, as before.
    assert_eq!(fs.lookup(&root, d.ino, b".").unwrap().ino, d.ino);
    assert_eq!(fs.lookup(&root, d.ino, b"..").unwrap().ino, ROOT_INO);
    // ".." of a file, or any other name under it, is still not a directory lookup.
    assert!(matches!(fs.lookup(&root, f.ino, b".."), Err(FsError::NotDir)));
    assert!(matches!(fs.lookup(&root, f.ino, b"x"), Err(FsError::NotDir)));

    // A file with no name left is stale, even while it is open.
    let (g, gfh) = fs.create(&root, d.ino, b"gone", 0o644, 0o022, libc::O_RDWR).unwrap();
    fs.unlink(&root, d.ino, b"gone").unwrap();
    assert!(matches!(fs.lookup(&root, g.ino, b"."), Err(FsError::NotFound)));
    fs.release(g.ino, gfh);
    assert!(matches!(fs.lookup(&root, g.ino, b"."), Err(FsError::NotFound)));
}
