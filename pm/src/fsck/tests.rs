//! fsck on a clean public area (nothing reported) and on images corrupted one way each
//! (each reported, by kind and inode).

use super::*;
use crate::layout::FormatParams;
use crate::public::format::encode_dirent;
use crate::public::PublicArea;
use crate::record::{decode_records, dtype, EntryBuilder, InodeImage};

const A: u64 = 2;
const B: u64 = 3;
const F: u64 = 4;
const G: u64 = 5;
const BIG: u64 = 6;
const LOST: u64 = 7;
const IN_LOST: u64 = 8;

/// /a (dir), /a/b (dir), /a/b/f (10000 bytes), /g and /a/h (one file, two names, with
/// xattrs), /big (with an indirect block), /lost (dir) holding /lost/x.
fn node() -> (Arc<PmRegion>, Geometry) {
    let geo =
        Geometry::compute(&FormatParams { size: 16 << 20, log_size: 1 << 20, log_slots: 1, inodes: 256 }).unwrap();
    let region = Arc::new(PmRegion::traced(16 << 20));
    let root = InodeImage { ino: 1, mode: libc::S_IFDIR | 0o755, nlink: 4, parent: 1, ..Default::default() };
    PublicArea::format(&region, &geo, &root).unwrap();
    let (mut pa, _) = PublicArea::load(region.clone(), geo).unwrap();
    let dir = |ino, parent, nlink| InodeImage {
        ino,
        parent,
        mode: libc::S_IFDIR | 0o755,
        nlink,
        size: 64,
        ..Default::default()
    };
    let file = |ino, nlink, size| InodeImage { ino, mode: libc::S_IFREG | 0o644, nlink, size, ..Default::default() };
    let mut b = EntryBuilder::new();
    b.inode(&InodeImage { nlink: 4, ..root }, false);
    b.inode(&dir(A, 1, 3), true);
    b.dirent(1, b"a", A, dtype::DIR);
    b.inode(&dir(B, A, 2), true);
    b.dirent(A, b"b", B, dtype::DIR);
    b.inode(&file(F, 1, 10000), true);
    b.dirent(B, b"f", F, dtype::REG);
    b.write(F, 0, &vec![7u8; 10000]);
    b.inode(&file(G, 2, 5), true);
    b.dirent(1, b"g", G, dtype::REG);
    b.dirent(A, b"h", G, dtype::REG);
    b.write(G, 0, b"hello");
    b.xattrs(G, [(&b"user.k"[..], &b"v"[..])]);
    b.inode(&file(BIG, 1, 13 * BLOCK_SIZE), true);
    b.dirent(1, b"big", BIG, dtype::REG);
    b.write(BIG, 0, &vec![9u8; 13 * BLOCK_SIZE as usize]);
    b.inode(&dir(LOST, 1, 2), true);
    b.dirent(1, b"lost", LOST, dtype::DIR);
    b.inode(&file(IN_LOST, 1, 0), true);
    b.dirent(LOST, b"x", IN_LOST, dtype::REG);
    let log = PmRegion::traced(b.payload().len().next_multiple_of(4096) as u64 + 4096);
    log.write(4096, b.payload()).unwrap();
    for r in decode_records(b.payload(), 4096).unwrap() {
        pa.apply(&r, &log).unwrap();
    }
    pa.fence();
    pa.checkpoint_done();
    (region, geo)
}

fn fsck(region: &Arc<PmRegion>, geo: Geometry, live: bool) -> Report {
    check(&PublicReader::new(region.clone(), geo), &Options { live })
}

fn inode(region: &Arc<PmRegion>, geo: Geometry, ino: u64) -> PmInode {
    PublicReader::new(region.clone(), geo).read_inode(ino).unwrap()
}

/// Rewrites inode `ino` after `f` (with a good checksum).
fn edit(region: &Arc<PmRegion>, geo: Geometry, ino: u64, f: impl FnOnce(&mut PmInode)) {
    let mut i = inode(region, geo, ino);
    f(&mut i);
    region.write(geo.inode_off(ino), &i.encode()).unwrap();
}

/// The offset of the slot of `dir` that names `name`.
fn slot_of(region: &Arc<PmRegion>, geo: Geometry, dir: u64, name: &[u8]) -> u64 {
    let r = PublicReader::new(region.clone(), geo);
    let d = r.read_inode(dir).unwrap();
    let block = r.lookup(&d, 0).unwrap().unwrap();
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    region.read(block * BLOCK_SIZE, &mut b).unwrap();
    for k in 0..DIRENTS_PER_BLOCK {
        let s = &b[(k * DIRENT_SIZE) as usize..((k + 1) * DIRENT_SIZE) as usize];
        if decode_dirent(s, geo.inode_count).is_some_and(|(_, _, n)| n == name) {
            return block * BLOCK_SIZE + k * DIRENT_SIZE;
        }
    }
    panic!("no {name:?} in {dir}");
}

/// The offset of a free slot of `dir`.
fn free_slot(region: &Arc<PmRegion>, geo: Geometry, dir: u64) -> u64 {
    let r = PublicReader::new(region.clone(), geo);
    let block = r.lookup(&r.read_inode(dir).unwrap(), 0).unwrap().unwrap();
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    region.read(block * BLOCK_SIZE, &mut b).unwrap();
    let k = (0..DIRENTS_PER_BLOCK)
        .find(|k| b[(k * DIRENT_SIZE) as usize..][..DIRENT_SIZE as usize].iter().all(|&x| x == 0));
    block * BLOCK_SIZE + k.unwrap() * DIRENT_SIZE
}

fn unlink_raw(region: &Arc<PmRegion>, geo: Geometry, dir: u64, name: &[u8]) {
    region.zero(slot_of(region, geo, dir, name), DIRENT_SIZE).unwrap();
}

fn link_raw(region: &Arc<PmRegion>, geo: Geometry, dir: u64, name: &[u8], ino: u64, dt: u8) {
    region.write(free_slot(region, geo, dir), &encode_dirent(ino, dt, name)).unwrap();
}

/// The report's problems as (kind, inode), for comparison.
fn kinds(r: &Report) -> Vec<(Kind, u64)> {
    r.problems.iter().map(|p| (p.kind, p.ino)).collect()
}

fn assert_has(r: &Report, kind: Kind, ino: u64) {
    assert!(r.problems.iter().any(|p| p.kind == kind && p.ino == ino), "no {kind:?} at {ino} in {:#?}", r.problems);
}

#[test]
fn a_clean_node_reports_nothing() {
    let (region, geo) = node();
    let r = fsck(&region, geo, false);
    assert_eq!(kinds(&r), vec![], "{:#?}", r.problems);
    assert!(r.notes.is_empty());
    assert_eq!((r.inodes, r.dirs), (8, 4));
    // f: 3 blocks, g: 1 + 1 xattr, big: 13 + 1 indirect, one directory block each of 4.
    assert_eq!(r.blocks_used, 3 + 2 + 14 + 4);
    // A freshly formatted node too.
    let geo2 = geo;
    let fresh = Arc::new(PmRegion::traced(16 << 20));
    let root = InodeImage { ino: 1, mode: libc::S_IFDIR | 0o755, nlink: 2, parent: 1, ..Default::default() };
    PublicArea::format(&fresh, &geo2, &root).unwrap();
    assert!(fsck(&fresh, geo2, false).is_clean());
}

#[test]
fn a_wrong_link_count_is_reported() {
    let (region, geo) = node();
    edit(&region, geo, G, |i| i.img.nlink = 1);
    edit(&region, geo, A, |i| i.img.nlink = 2);
    edit(&region, geo, F, |i| i.img.nlink = 0);
    let r = fsck(&region, geo, false);
    assert_eq!(kinds(&r), vec![(Kind::LinkCount, A), (Kind::LinkCount, F), (Kind::LinkCount, G)], "{:#?}", r.problems);
}

#[test]
fn a_block_in_two_files_is_reported() {
    let (region, geo) = node();
    let theirs = inode(&region, geo, BIG).roots[0];
    edit(&region, geo, F, |i| i.roots[1] = theirs);
    let r = fsck(&region, geo, false);
    let (f, big) = (format!("inode {F}"), format!("inode {BIG}"));
    assert!(
        r.problems.iter().any(|p| p.kind == Kind::SharedBlock
            && ((p.ino == F && p.detail.contains(&big)) || (p.ino == BIG && p.detail.contains(&f)))),
        "{:#?}",
        r.problems
    );
    // And a block pointer out of the data area.
    edit(&region, geo, F, |i| i.roots[1] = 1);
    assert_has(&fsck(&region, geo, false), Kind::BadPointer, F);
}

#[test]
fn a_directory_cycle_is_reported() {
    let (region, geo) = node();
    // /a moved into /a/b by hand: its name in the root is gone, b names it.
    unlink_raw(&region, geo, 1, b"a");
    link_raw(&region, geo, B, b"a", A, dtype::DIR);
    let r = fsck(&region, geo, false);
    assert_has(&r, Kind::Cycle, A);
    assert_has(&r, Kind::Parent, A);
    // A hard link to a directory.
    let (region, geo) = node();
    link_raw(&region, geo, 1, b"b-again", B, dtype::DIR);
    assert_has(&fsck(&region, geo, false), Kind::DirectoryNames, B);
}

#[test]
fn an_unreachable_directory_is_reported() {
    let (region, geo) = node();
    unlink_raw(&region, geo, 1, b"lost");
    let r = fsck(&region, geo, false);
    assert_has(&r, Kind::Orphan, LOST);
    assert_has(&r, Kind::Unreachable, IN_LOST);
    // On a live node the directory with nlink 2 and no name is still a problem; a file
    // with nlink 0 and no name is a note (it may be open).
    assert_has(&fsck(&region, geo, true), Kind::Orphan, LOST);
    let (region, geo) = node();
    unlink_raw(&region, geo, B, b"f");
    edit(&region, geo, F, |i| i.img.nlink = 0);
    assert_eq!(kinds(&fsck(&region, geo, false)), vec![(Kind::Orphan, F)]);
    let live = fsck(&region, geo, true);
    assert!(live.is_clean(), "{:#?}", live.problems);
    assert_eq!(live.notes.iter().map(|n| (n.kind, n.ino)).collect::<Vec<_>>(), vec![(Kind::Orphan, F)]);
}

#[test]
fn names_of_free_inodes_and_wrong_types_are_reported() {
    let (region, geo) = node();
    region.zero(geo.inode_off(F), INODE_SIZE).unwrap();
    link_raw(&region, geo, 1, b"g-as-dir", G, dtype::DIR);
    let r = fsck(&region, geo, false);
    assert_has(&r, Kind::DanglingName, B);
    assert_has(&r, Kind::WrongType, 1);
    assert_has(&r, Kind::LinkCount, G);
}

#[test]
fn a_bad_checksum_is_reported() {
    let (region, geo) = node();
    let off = geo.inode_off(G);
    let mut b = [0u8; 1];
    region.read(off + 8, &mut b).unwrap();
    region.write(off + 8, &[b[0] ^ 0x40]).unwrap();
    let r = fsck(&region, geo, false);
    assert_has(&r, Kind::InodeChecksum, G);
    // An xattr chain whose block is damaged.
    let (region, geo) = node();
    let x = inode(&region, geo, G).xattr;
    region.write(x * BLOCK_SIZE + crate::public::format::XATTR_HEADER as u64, b"garbage").unwrap();
    assert_has(&fsck(&region, geo, false), Kind::Xattrs, G);
    // A free inode slot that is not zero.
    let (region, geo) = node();
    edit(&region, geo, 200, |i| i.img.size = 1);
    assert_has(&fsck(&region, geo, false), Kind::TornFree, 200);
}

#[test]
fn a_wrong_parent_pointer_is_reported() {
    let (region, geo) = node();
    edit(&region, geo, B, |i| i.img.parent = 1);
    edit(&region, geo, 1, |i| i.img.parent = A);
    assert_eq!(kinds(&fsck(&region, geo, false)), vec![(Kind::Parent, 1), (Kind::Parent, B)]);
}

#[test]
fn every_problem_is_one_line() {
    let (region, geo) = node();
    edit(&region, geo, G, |i| i.img.nlink = 9);
    let r = fsck(&region, geo, false);
    let line = r.problems[0].to_string();
    assert_eq!(line, "inode 5: link-count: nlink 9, but 2 names");
    assert!(!line.contains('\n'));
}

#[test]
fn a_node_directory_is_checked_with_its_superblock_and_log_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node0");
    let params = FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 2, inodes: 256 };
    crate::mkfs::format_dir(&dir, &params).unwrap();
    let opts = Options::default();
    let r = check_dir(&dir, &opts).unwrap();
    assert!(r.is_clean(), "{:#?}", r.problems);
    assert_eq!((r.inodes, r.dirs), (1, 1));
    // A log file of the wrong size, another missing: each a problem of the node.
    std::fs::OpenOptions::new().write(true).open(dir.join(log_file_name(0))).unwrap().set_len(4096).unwrap();
    std::fs::remove_file(dir.join(log_file_name(1))).unwrap();
    let r = check_dir(&dir, &opts).unwrap();
    assert_eq!(kinds(&r), vec![(Kind::Geometry, 0), (Kind::Geometry, 0)], "{:#?}", r.problems);
    assert!(r.problems.iter().all(|p| p.to_string().starts_with("node: geometry: ")));
    // A damaged superblock: nothing further can be read.
    let public = std::fs::OpenOptions::new().write(true).open(dir.join(PUBLIC_FILE)).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&public, b"XXXX", 0).unwrap();
    assert!(check_dir(&dir, &opts).is_err());
}
