//! Tests of the public area: publication round trips, reload, idempotence, xattr chains,
//! hostile records.

use super::format::XATTR_PAYLOAD;
use super::*;
use crate::layout::FormatParams;
use crate::layout::{Geometry, BLOCK_SIZE};
use crate::record::{decode_records, dtype, xattrs_len, EntryBuilder, InodeImage, Record};
use crate::region::PmRegion;
use std::sync::Arc;

fn setup() -> (Arc<PmRegion>, Geometry) {
    let geo =
        Geometry::compute(&FormatParams { size: 16 << 20, log_size: 1 << 20, log_slots: 1, inodes: 256 }).unwrap();
    let region = Arc::new(PmRegion::traced(16 << 20));
    let root = InodeImage { ino: 1, mode: libc::S_IFDIR | 0o755, nlink: 2, parent: 1, ..Default::default() };
    PublicArea::format(&region, &geo, &root).unwrap();
    (region, geo)
}

/// A log file for records that name no data.
fn no_log() -> PmRegion {
    PmRegion::traced(1 << 20)
}

/// Apply an entry built in DRAM: its payload is placed in a log file of its own so that
/// WRITE records can name their data.
fn apply(pa: &mut PublicArea, b: &EntryBuilder) {
    let log = PmRegion::traced(b.payload().len().next_multiple_of(4096) as u64 + 4096);
    let at = 4096;
    log.write(at, b.payload()).unwrap();
    for r in decode_records(b.payload(), at).unwrap() {
        pa.apply(&r, &log).unwrap();
    }
    pa.fence();
    pa.checkpoint_done();
}

fn file(ino: u64) -> InodeImage {
    InodeImage { ino, mode: libc::S_IFREG | 0o644, nlink: 1, ..Default::default() }
}

#[test]
fn create_write_read_reload() {
    let (region, geo) = setup();
    let (mut pa, loaded) = PublicArea::load(region.clone(), geo).unwrap();
    assert_eq!(loaded.inodes.len(), 1);
    let mut b = EntryBuilder::new();
    b.inode(&InodeImage { size: 10000, ..file(2) }, true);
    b.dirent(1, b"f", 2, dtype::REG);
    let data: Vec<u8> = (0..10000u32).map(|i| (i % 251) as u8).collect();
    b.write(2, 0, &data);
    b.xattrs(2, [(&b"user.k"[..], &b"v"[..])]);
    apply(&mut pa, &b);
    let mut got = vec![0u8; 10000];
    pa.reader().read_file(2, 0, &mut got).unwrap();
    assert_eq!(got, data);
    let free = pa.free_blocks();
    let (pa2, loaded) = PublicArea::load(region, geo).unwrap();
    assert_eq!(pa2.free_blocks(), free);
    assert_eq!(loaded.dirs[&1], vec![LoadedDirent { name: b"f".to_vec(), ino: 2, dtype: dtype::REG }]);
    assert_eq!(loaded.inodes[&2].img.size, 10000);
    assert_eq!(loaded.inodes[&2].blocks, 3);
    assert_eq!(loaded.inodes[&2].xattrs, vec![(b"user.k".to_vec(), b"v".to_vec())]);
}

#[test]
fn large_file_uses_indirect_blocks_and_truncate_frees_them() {
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region.clone(), geo).unwrap();
    let start_free = pa.free_blocks();
    let mut b = EntryBuilder::new();
    b.inode(&file(3), true);
    b.write(3, 600 * 4096, b"far");
    b.write(3, 5 * 4096, b"near");
    apply(&mut pa, &b);
    let mut got = [0u8; 4];
    pa.reader().read_file(3, 600 * 4096, &mut got[..3]).unwrap();
    assert_eq!(&got[..3], b"far");
    pa.reader().read_file(3, 5 * 4096, &mut got).unwrap();
    assert_eq!(&got, b"near");
    // two data blocks, a double-indirect root, one second-level block
    assert_eq!(start_free - pa.free_blocks(), 4);
    let mut b = EntryBuilder::new();
    b.truncate(3, 5 * 4096 + 2);
    apply(&mut pa, &b);
    assert_eq!(start_free - pa.free_blocks(), 1);
    pa.reader().read_file(3, 5 * 4096, &mut got).unwrap();
    assert_eq!(&got, b"ne\0\0");
    let (pa2, _) = PublicArea::load(region, geo).unwrap();
    assert_eq!(pa2.free_blocks(), pa.free_blocks());
}

#[test]
fn replaying_an_entry_is_idempotent() {
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region.clone(), geo).unwrap();
    let mut b = EntryBuilder::new();
    b.inode(&file(4), true);
    b.dirent(1, b"a", 4, dtype::REG);
    b.write(4, 100, &[7u8; 9000]);
    b.dirent(1, b"a", 0, 0);
    b.dirent(1, b"b", 4, dtype::REG);
    b.punch(4, 4096, 4096);
    apply(&mut pa, &b);
    let free = pa.free_blocks();
    apply(&mut pa, &b);
    assert_eq!(pa.free_blocks(), free);
    let (_, loaded) = PublicArea::load(region, geo).unwrap();
    assert_eq!(loaded.dirs[&1].len(), 1);
    assert_eq!(loaded.dirs[&1][0].name, b"b");
}

#[test]
fn xattr_chains_grow_shrink_reload_and_reveal_a_torn_block() {
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region.clone(), geo).unwrap();
    let mut b = EntryBuilder::new();
    b.inode(&file(2), true);
    apply(&mut pa, &b);
    let base = pa.free_blocks();
    let set = |pa: &mut PublicArea, attrs: &XattrList| {
        let mut b = EntryBuilder::new();
        b.xattrs(2, attrs.iter().map(|(n, v)| (&n[..], &v[..])));
        apply(pa, &b);
    };
    let loaded = |region: &Arc<PmRegion>| PublicArea::load(region.clone(), geo).unwrap().1.inodes[&2].xattrs.clone();
    // A thousand small attributes and one value of the 64 KiB maximum.
    let mut attrs: XattrList =
        (0..1000).map(|i| (format!("user.attribute_{i}").into_bytes(), format!("value_{i}").into_bytes())).collect();
    attrs.push((b"user.big".to_vec(), (0..65536u32).map(|i| (i * 13) as u8).collect()));
    set(&mut pa, &attrs);
    let blocks = xattrs_len(attrs.iter().map(|(n, v)| (&n[..], &v[..]))).div_ceil(XATTR_PAYLOAD) as u64;
    assert!(blocks > 20);
    assert_eq!(base - pa.free_blocks(), blocks);
    assert_eq!(loaded(&region), attrs);
    // Shrink to one block (the surplus is freed), grow again, remove all.
    set(&mut pa, &attrs[..10].to_vec());
    assert_eq!(base - pa.free_blocks(), 1);
    assert_eq!(loaded(&region), attrs[..10].to_vec());
    set(&mut pa, &attrs);
    assert_eq!(base - pa.free_blocks(), blocks);
    let (pa2, _) = PublicArea::load(region.clone(), geo).unwrap();
    assert_eq!(pa2.free_blocks(), pa.free_blocks());
    // A torn block in the middle of the chain: the inode is suspect until rewritten.
    let first = pa.read_inode(2).unwrap().xattr;
    let (chain, _) = pa.read_xattrs(first).unwrap();
    region.write(chain[5] * BLOCK_SIZE + 100, b"torn").unwrap();
    let (mut pa3, l3) = PublicArea::load(region.clone(), geo).unwrap();
    assert!(l3.inodes[&2].xattrs.is_empty());
    assert!(pa3.check_suspects().is_err());
    set(&mut pa3, &attrs);
    pa3.check_suspects().unwrap();
    assert_eq!(loaded(&region), attrs);
    let (pa4, _) = PublicArea::load(region.clone(), geo).unwrap();
    assert_eq!(pa4.free_blocks(), base - blocks);
    set(&mut pa3, &Vec::new());
    assert_eq!(pa3.free_blocks(), base);
    assert!(loaded(&region).is_empty());
    // More than an inode may hold is refused.
    let huge: XattrList = (0..5).map(|i| (format!("user.{i}").into_bytes(), vec![1u8; 65536])).collect();
    assert!(pa3.apply(&Record::Xattrs { ino: 2, attrs: huge }, &no_log()).is_err());
    assert!(pa3
        .apply(&Record::Xattrs { ino: 2, attrs: vec![(b"user.v".to_vec(), vec![0; 65537])] }, &no_log())
        .is_err());
}

#[test]
fn hostile_records_are_refused() {
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region, geo).unwrap();
    assert!(pa.apply(&Record::Write { ino: 9, off: 0, len: 1, data_off: 0 }, &no_log()).is_err());
    assert!(pa.apply(&Record::FreeInode { ino: 1 }, &no_log()).is_err());
    assert!(pa.apply(&Record::Dirent { dir: 77, ino: 2, dtype: dtype::REG, name: b"x".to_vec() }, &no_log()).is_err());
    assert!(pa.apply(&Record::Inode { fresh: true, img: InodeImage { ino: 100000, ..file(0) } }, &no_log()).is_err());
    assert!(pa.apply(&Record::Inode { fresh: true, img: InodeImage { mode: 0, ..file(5) } }, &no_log()).is_err());
}

#[test]
fn an_open_for_writing_is_validated_and_changes_nothing() {
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region, geo).unwrap();
    let mut b = EntryBuilder::new();
    b.inode(&file(2), true);
    b.dirent(1, b"f", 2, dtype::REG);
    apply(&mut pa, &b);
    let log = no_log();
    let open = |ino| vec![Record::OpenWrite { ino }];
    pa.validate(&open(2), &log).unwrap();
    // A directory, a free number, a number outside the node.
    for (ino, why) in [(1, "non-file"), (3, "not allocated"), (1 << 40, "out of range")] {
        let e = pa.validate(&open(ino), &log).unwrap_err().to_string();
        assert!(e.contains(why), "inode {ino}: {e}");
    }
    // Valid after the create in the same entry.
    let mut b = EntryBuilder::new();
    b.inode(&file(3), true);
    b.open_write(3);
    pa.validate(&decode_records(b.payload(), 0).unwrap(), &log).unwrap();
    let before = pa.read_inode(2).unwrap();
    pa.apply(&Record::OpenWrite { ino: 2 }, &log).unwrap();
    assert_eq!(pa.read_inode(2).unwrap(), before);
}

#[test]
fn a_deferred_mover_s_blocks_are_linked_only_after_its_moves_ran() {
    use super::mover::{execute_moves, Collector, Move};
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region.clone(), geo).unwrap();
    let mut b = EntryBuilder::new();
    b.inode(&InodeImage { size: 5000, ..file(2) }, true);
    b.write(2, 0, &[9u8; 5000]);
    let log = PmRegion::traced(1 << 16);
    log.write(4096, b.payload()).unwrap();
    let reader = pa.reader().clone();
    let mut ran = 0;
    let mut mover = Collector::new(log.len(), |m: &[Move]| {
        // Nothing points to the blocks these moves fill yet.
        assert!(!reader.is_mapped(2, 0).unwrap() && !reader.is_mapped(2, 1).unwrap());
        ran += 1;
        execute_moves(m, &log, &region)
    });
    for r in decode_records(b.payload(), 4096).unwrap() {
        pa.apply_with(&r, &mut mover).unwrap();
    }
    assert_eq!(pa.file_blocks(2), 2, "counted as the file's already");
    assert!(!pa.reader().is_mapped(2, 0).unwrap());
    pa.settle(&mut mover).unwrap();
    let stats = mover.stats();
    drop(mover);
    assert_eq!(ran, 1);
    assert_eq!((stats.copy_bytes, stats.zero_bytes), (5000, 2 * 4096 - 5000));
    let mut got = vec![0u8; 5000];
    pa.reader().read_file(2, 0, &mut got).unwrap();
    assert_eq!(got, vec![9u8; 5000]);

    // An abandoned batch links nothing; its blocks come back after the next checkpoint.
    let free = pa.free_blocks();
    let mut mover = Collector::new(log.len(), |_: &[Move]| Err("no".to_string()));
    let mut b = EntryBuilder::new();
    b.write(2, 8 * 4096, &[1u8; 10]);
    log.write(4096, b.payload()).unwrap();
    for r in decode_records(b.payload(), 4096).unwrap() {
        pa.apply_with(&r, &mut mover).unwrap();
    }
    assert!(pa.settle(&mut mover).is_err());
    pa.abandon_pending();
    assert!(!pa.reader().is_mapped(2, 8).unwrap());
    assert_eq!(pa.file_blocks(2), 2);
    pa.fence();
    pa.checkpoint_done();
    assert_eq!(pa.free_blocks(), free);
}

#[test]
fn an_allocation_that_runs_out_of_space_gives_back_what_it_took() {
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region, geo).unwrap();
    let mut b = EntryBuilder::new();
    b.inode(&file(2), true);
    b.dirent(1, b"f", 2, dtype::REG);
    apply(&mut pa, &b);
    let free = pa.free_blocks();
    let too_many = (free + 10) * BLOCK_SIZE;
    for rec in
        [Record::Alloc { ino: 2, off: 0, len: too_many }, Record::Write { ino: 2, off: 0, len: too_many, data_off: 0 }]
    {
        let log = if matches!(rec, Record::Write { .. }) { PmRegion::traced(too_many + 4096) } else { no_log() };
        assert!(matches!(pa.apply(&rec, &log), Err(PublishError::NoSpace)), "{rec:?}");
        assert_eq!(pa.free_blocks(), free, "{rec:?}: every block it took is free again");
    }
}

#[test]
fn the_allocation_floor_keeps_blocks_out_of_reach() {
    let (region, geo) = setup();
    let (mut pa, _) = PublicArea::load(region, geo).unwrap();
    let mut b = EntryBuilder::new();
    b.inode(&file(2), true);
    b.dirent(1, b"f", 2, dtype::REG);
    apply(&mut pa, &b);
    let free = pa.free_blocks();
    pa.set_alloc_floor(free - 10);
    let log = no_log();
    assert!(matches!(
        pa.apply(&Record::Alloc { ino: 2, off: 0, len: 11 * BLOCK_SIZE }, &log),
        Err(PublishError::NoSpace)
    ));
    assert_eq!(pa.free_blocks(), free);
    pa.apply(&Record::Alloc { ino: 2, off: 0, len: 9 * BLOCK_SIZE }, &log).unwrap();
    assert_eq!(pa.free_blocks(), free - 9, "what lies above the floor may be used");
    pa.set_alloc_floor(0);
    pa.apply(&Record::Alloc { ino: 2, off: 0, len: 20 * BLOCK_SIZE }, &log).unwrap();
}
