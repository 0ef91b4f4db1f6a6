//! A stored PM image of format version 7, opened by the current code; the stored images of
//! versions 6, 5 and 4, upgraded in place (crash-tested at every fence of the upgrade); the
//! image of version 3, refused.
//!
//! `tests/data/format-v7.img.hex` is version 7 of the node below: the same bytes as
//! version 6's but for the superblock's version and the node record in block 0 (new in
//! version 7: no cluster yet). `tests/data/format-v6.img.hex` is a whole node of the smallest geometry
//! `Geometry::compute` allows (one log file of 64 blocks; a public file of 66 blocks: the
//! superblock, 16 inodes, 64 data blocks; 520 KiB in all), packed in one image (the public
//! file, then the log file), made by [`make_format_image`] through pm's own API the way a
//! node is formatted and run: log file, public area with the root, superblock last; then five
//! entries appended, published and checkpointed (a directory, a file whose data spans two
//! blocks and a block behind a single-indirect pointer, an xattr, a symlink), and four
//! more entries committed to the log but not published, two of them stating their caller (a
//! CALLER record, new in version 5), the last one an open for writing (an OPEN_WRITE
//! record, new in version 6). [`check_image`] states what the image holds, field by field.
//! Opened by this build it is refused with the advice to upgrade; upgraded
//! ([`stored_v6_image_upgrades`]) it holds exactly what the version 7 image holds.
//!
//! `tests/data/format-v5.img.hex` is the same tree in version 5 with three unpublished
//! entries (no OPEN_WRITE record), and `tests/data/format-v4.img.hex` in version 4 (no
//! CALLER record, no replicated LSN in the log header): both upgrade to version 7 with the
//! same public tree, and recovery replays their three entries
//! ([`stored_v5_and_v4_images_upgrade`]). `tests/data/format-v3.img.hex` is the same tree in
//! version 3's single PM file (logs inside it), refused: there is no upgrade from it
//! ([`stored_v3_image_is_refused`]).
//!
//! # File format of the stored image
//!
//! Text, so that it diffs and reviews: lines starting with `#` are comments; `size N` gives
//! the image size in bytes; every other line is `OFFSET HEX`, a 64-byte line of the image
//! at hex byte offset OFFSET as 128 hex digits. Lines not listed are zero.
//!
//! # At the next format version bump
//!
//! * Keep `format-v7.img.hex` and this file's v7 expectations: the new code must either
//!   refuse the v7 image with a clear error or upgrade it on purpose (pm's `upgrade`: then
//!   test that the upgraded image holds exactly the tree [`check_image`] describes, as
//!   [`stored_v6_image_upgrades`] does). Never regenerate an old image with the new code.
//! * Make `format-v8.img.hex` with the generator for the new version (point [`IMAGE`] at the
//!   new name, run `cargo test -p linefs-pm --test format_image -- --ignored
//!   make_format_image`), and open it in a test like this one.
//! * Update the byte pins in `format_bytes.rs`.

use linefs_pm::layout::{FormatError, FormatParams, Geometry, Superblock, BLOCK_SIZE, FORMAT_VERSION};
use linefs_pm::node::NodePm;
use linefs_pm::noderecord::NodeRecord;
use linefs_pm::oplog::{LogSlot, ScanStop};
use linefs_pm::public::{LoadedDirent, PublicArea, PublicReader};
use linefs_pm::record::{decode_entry, decode_records, dtype, Caller, EntryBuilder, InodeImage, Record, Timespec};
use linefs_pm::trace::CrashOpts;
use linefs_pm::upgrade::{upgrade_packed, Upgrade};
use linefs_pm::PmRegion;
use std::sync::Arc;

/// The stored image of the current format version, relative to the crate.
const IMAGE: &str = "tests/data/format-v7.img.hex";
/// The version 6 image, upgraded.
const V6_IMAGE: &str = "tests/data/format-v6.img.hex";
/// The version 5 image, upgraded.
const V5_IMAGE: &str = "tests/data/format-v5.img.hex";
/// The version 4 image, upgraded.
const V4_IMAGE: &str = "tests/data/format-v4.img.hex";
/// The image of version 3 (one PM file holding the logs), kept to show it is refused.
const V3_IMAGE: &str = "tests/data/format-v3.img.hex";

const UUID: [u8; 16] = *b"linefs v6 image!";
const FORMAT_TIME_NS: u64 = 1_700_000_000_000_000_000;

fn geometry() -> Geometry {
    Geometry::compute(&FormatParams { size: 130 * BLOCK_SIZE, log_size: 64 * BLOCK_SIZE, log_slots: 1, inodes: 16 })
        .unwrap()
}

fn t(sec: i64) -> Timespec {
    Timespec { sec: 1_700_000_000 + sec, nsec: sec as u32 * 1000 }
}

fn times(img: InodeImage, at: i64) -> InodeImage {
    InodeImage { atime: t(at), mtime: t(at), ctime: t(at), ..img }
}

const DIR: u32 = libc::S_IFDIR | 0o755;

fn root(size: u64, nlink: u32, at: i64) -> InodeImage {
    let img =
        InodeImage { ino: 1, size, parent: 1, mode: DIR, nlink, generation: 1, crtime: t(0), ..Default::default() };
    times(img, at)
}

fn docs(size: u64, at: i64) -> InodeImage {
    let img = InodeImage {
        ino: 2,
        size,
        parent: 1,
        mode: DIR,
        uid: 1000,
        gid: 1000,
        nlink: 2,
        generation: 2,
        crtime: t(1),
        ..Default::default()
    };
    times(img, at)
}

/// The file's data: two runs of a pattern, one across the boundary of file blocks 0 and 1,
/// one in file block 13 (behind the single-indirect pointer).
const RUN1: (u64, usize) = (4000, 200);
const RUN2: (u64, usize) = (13 * BLOCK_SIZE, 100);
const DATA_SIZE: u64 = 13 * BLOCK_SIZE + 100;

fn pattern(off: u64, len: usize) -> Vec<u8> {
    (off..off + len as u64).map(|i| (i % 251) as u8 + 1).collect()
}

fn data(size: u64, at: i64) -> InodeImage {
    let img = InodeImage {
        ino: 3,
        size,
        mode: libc::S_IFREG | 0o640,
        uid: 1000,
        gid: 100,
        nlink: 1,
        generation: 3,
        crtime: t(2),
        ..Default::default()
    };
    times(img, at)
}

const TARGET: &[u8] = b"docs/data";

fn link() -> InodeImage {
    let img = InodeImage {
        ino: 4,
        size: TARGET.len() as u64,
        mode: libc::S_IFLNK | 0o777,
        nlink: 1,
        generation: 4,
        crtime: t(5),
        ..Default::default()
    };
    times(img, 5)
}

const LATE: &[u8] = b"committed to the log, not yet published\n";

fn late() -> InodeImage {
    let img = InodeImage {
        ino: 5,
        size: LATE.len() as u64,
        mode: libc::S_IFREG | 0o600,
        nlink: 1,
        generation: 5,
        crtime: t(6),
        ..Default::default()
    };
    times(img, 6)
}

/// The entries published into the public area, in log order.
fn published_entries() -> Vec<EntryBuilder> {
    let mut mkdir = EntryBuilder::new();
    mkdir.inode(&docs(64, 1), true);
    mkdir.dirent(1, b"docs", 2, dtype::DIR);
    mkdir.inode(&root(96, 3, 1), false);

    let mut create = EntryBuilder::new();
    create.inode(&data(0, 2), true);
    create.dirent(2, b"data", 3, dtype::REG);
    create.inode(&docs(96, 2), false);

    let mut write = EntryBuilder::new();
    write.write(3, RUN1.0, &pattern(RUN1.0, RUN1.1));
    write.write(3, RUN2.0, &pattern(RUN2.0, RUN2.1));
    write.inode(&data(DATA_SIZE, 3), false);

    let mut setxattr = EntryBuilder::new();
    setxattr.xattrs(3, [(&b"user.format"[..], &b"version 3"[..])]);
    setxattr.inode(&InodeImage { ctime: t(4), ..data(DATA_SIZE, 3) }, false);

    let mut symlink = EntryBuilder::new();
    symlink.inode(&link(), true);
    symlink.write(4, 0, TARGET);
    symlink.dirent(1, b"link", 4, dtype::LNK);
    symlink.inode(&root(128, 3, 5), false);

    vec![mkdir, create, write, setxattr, symlink]
}

/// The caller the second and fourth unpublished entries state.
fn caller() -> Caller {
    Caller { uid: 1000, gid: 100, groups: vec![10, 27] }
}

/// The entries committed after the published LSN, in log order.
fn unpublished_entries() -> Vec<EntryBuilder> {
    let mut create = EntryBuilder::new();
    create.inode(&late(), true);
    create.write(5, 0, LATE);
    create.dirent(1, b"late", 5, dtype::REG);
    create.inode(&root(160, 3, 6), false);

    let mut setxattr = EntryBuilder::by(&caller());
    setxattr.xattrs(2, [(&b"user.topic"[..], &b"formats"[..]), (&b"user.empty"[..], &b""[..])]);
    setxattr.inode(&InodeImage { ctime: t(7), ..docs(96, 2) }, false);

    let mut unlink = EntryBuilder::new();
    unlink.dirent(1, b"link", 0, 0);
    unlink.free_inode(4);
    unlink.inode(&root(128, 3, 8), false);

    // The owner opens `data` for writing (0640, theirs).
    let mut open = EntryBuilder::by(&caller());
    open.open_write(3);

    vec![create, setxattr, unlink, open]
}

/// Make the image with the current code (see the module doc).
fn build_image() -> Vec<u8> {
    let geo = geometry();
    let node = NodePm::traced(&geo);
    let region = node.public.clone();
    // As pm's mkfs formats a node: every log file, the public area with its root, then the
    // superblock, written last.
    let slot = LogSlot::new(node.logs[0].clone(), &geo, 0);
    slot.format().unwrap();
    PublicArea::format(&region, &geo, &root(64, 2, 0)).unwrap();
    let first = NodeRecord::initial();
    region.write(1024 + 512 * (first.seq % 2), &first.encode()).unwrap();
    region.persist_now(1024 + 512 * (first.seq % 2), 512).unwrap();
    region.fence();
    let sb = Superblock { geometry: geo, uuid: UUID, format_time_ns: FORMAT_TIME_NS };
    region.write(0, &sb.encode()).unwrap();
    region.persist_now(0, 256).unwrap();

    // As libfs runs: append (durable), then publish in log order, fence, checkpoint.
    let (mut pa, _) = PublicArea::load(region.clone(), geo).unwrap();
    let mut tail = 0;
    for e in published_entries() {
        let loc = slot.append(tail, 0, e.payload()).unwrap();
        tail = loc.end;
        let recs = decode_records(&slot.read_payload(&loc).unwrap(), loc.payload_off).unwrap();
        pa.validate(&recs, slot.region()).unwrap();
        for r in &recs {
            pa.apply(r, slot.region()).unwrap();
        }
    }
    pa.fence();
    let published = tail;
    slot.set_published_lsn(published).unwrap();
    pa.checkpoint_done();
    for e in unpublished_entries() {
        tail = slot.append(tail, published, e.payload()).unwrap().end;
    }
    // Everything was persisted and fenced: the durable image is the whole story.
    region.tracer().expect("traced region").durable_image()
}

/// Check that `image` holds exactly what [`make_format_image`] put there.
fn check_image(image: Vec<u8>) {
    let node = check_public(image);
    check_log(&node);
}

/// Check the superblock, the node record (a node of no cluster) and the public tree of
/// `image`: those of every version's image once upgraded.
fn check_public(image: Vec<u8>) -> NodePm {
    let geo = geometry();
    assert_eq!(image.len() as u64, geo.node_size());
    let node = NodePm::packed(Arc::new(PmRegion::traced_from_image(image))).unwrap();
    let region = node.public.clone();
    assert_eq!(NodeRecord::load(&region).unwrap(), NodeRecord::initial());
    // The superblock copy is the superblock (the last rewrite's) or nothing (format).
    let mut copy = [0u8; 256];
    region.read(512, &mut copy).unwrap();
    let mut primary = [0u8; 256];
    region.read(0, &mut primary).unwrap();
    assert!(copy == primary || copy == [0u8; 256], "stale superblock copy");

    // Superblock.
    let sb = Superblock::read(&region).unwrap();
    // Each version's image names its version in its uuid ("linefs v6 image!"); version 7's
    // is version 6's upgraded.
    let uuid = if &sb.uuid[..8] == b"linefs v" { sb.uuid } else { UUID };
    assert_eq!(&uuid[9..], b" image!");
    assert_eq!(sb, Superblock { geometry: geo, uuid, format_time_ns: FORMAT_TIME_NS });
    assert_eq!(
        (geo.total_blocks, geo.log_slots, geo.log_blocks, geo.itable_start, geo.inode_count),
        (66, 1, 64, 1, 16)
    );
    assert_eq!((geo.data_start, geo.data_blocks), (2, 64));

    // Public area: the tree after the five published entries, nothing of the other four.
    let loaded = PublicReader::new(region.clone(), geo).load().unwrap();
    let mut inos: Vec<u64> = loaded.inodes.keys().copied().collect();
    inos.sort();
    assert_eq!(inos, vec![1, 2, 3, 4]);
    let dirent = |name: &[u8], ino, dtype| LoadedDirent { name: name.to_vec(), ino, dtype };
    assert_eq!(loaded.dirs.len(), 2);
    assert_eq!(loaded.dirs[&1], vec![dirent(b"docs", 2, dtype::DIR), dirent(b"link", 4, dtype::LNK)]);
    assert_eq!(loaded.dirs[&2], vec![dirent(b"data", 3, dtype::REG)]);
    let inode = |ino: u64| &loaded.inodes[&ino];
    assert_eq!(inode(1).img, root(128, 3, 5));
    assert_eq!(inode(2).img, docs(96, 2));
    assert_eq!(inode(3).img, InodeImage { ctime: t(4), ..data(DATA_SIZE, 3) });
    assert_eq!(inode(4).img, link());
    assert_eq!(inode(3).xattrs, vec![(b"user.format".to_vec(), b"version 3".to_vec())]);
    for ino in [1, 2, 4] {
        assert!(inode(ino).xattrs.is_empty(), "inode {ino} has xattrs");
    }
    // One directory block each, three data blocks of the file, one of the symlink.
    let blocks: Vec<u64> = (1..=4).map(|i| inode(i).blocks).collect();
    assert_eq!(blocks, vec![1, 1, 3, 1]);

    let reader = PublicReader::new(region.clone(), geo);
    let mut expect = vec![0u8; DATA_SIZE as usize];
    for (off, len) in [RUN1, RUN2] {
        expect[off as usize..off as usize + len].copy_from_slice(&pattern(off, len));
    }
    let mut got = vec![0xffu8; DATA_SIZE as usize];
    reader.read_file(3, 0, &mut got).unwrap();
    assert!(got == expect, "file data differs");
    let mapped: Vec<u64> = (0..14).filter(|&i| reader.is_mapped(3, i).unwrap()).collect();
    assert_eq!(mapped, vec![0, 1, 13]);
    let mut target = vec![0u8; TARGET.len()];
    reader.read_file(4, 0, &mut target).unwrap();
    assert_eq!(target, TARGET);

    // The publisher's load agrees: nothing torn, the blocks above plus the file's indirect
    // block and its xattr block in use.
    let (pa, _) = PublicArea::load(region.clone(), geo).unwrap();
    pa.check_suspects().unwrap();
    assert_eq!(pa.free_blocks(), 64 - 8);
    node
}

/// Check the log of the current image: the four unpublished entries.
fn check_log(node: &NodePm) {
    let geo = geometry();
    // Log: exactly the four unpublished entries after the published LSN.
    let slot = LogSlot::new(node.logs[0].clone(), &geo, 0);
    let published = slot.published_lsn().unwrap();
    // No replicas: replicated with publication.
    assert_eq!(slot.replicated_lsn().unwrap(), published);
    let scan = slot.scan(published).unwrap();
    assert_eq!(scan.stop, ScanStop::End);
    assert_eq!(scan.entries.len(), 4);
    assert_eq!(scan.entries[0].lsn, published);
    assert_eq!(scan.end, scan.entries[3].end);
    let callers: Vec<Option<Caller>> =
        scan.entries.iter().map(|l| decode_entry(&slot.read_payload(l).unwrap(), l.payload_off).unwrap().0).collect();
    assert_eq!(callers, vec![None, Some(caller()), None, Some(caller())]);
    let decoded: Vec<Vec<Record>> =
        scan.entries.iter().map(|l| decode_records(&slot.read_payload(l).unwrap(), l.payload_off).unwrap()).collect();
    let late_data = match &decoded[0][1] {
        Record::Write { data_off, .. } => *data_off,
        r => panic!("expected a WRITE record, found {r:?}"),
    };
    assert_eq!(
        decoded,
        vec![
            vec![
                Record::Inode { fresh: true, img: late() },
                Record::Write { ino: 5, off: 0, len: LATE.len() as u64, data_off: late_data },
                Record::Dirent { dir: 1, ino: 5, dtype: dtype::REG, name: b"late".to_vec() },
                Record::Inode { fresh: false, img: root(160, 3, 6) },
            ],
            vec![
                Record::Xattrs {
                    ino: 2,
                    attrs: vec![(b"user.topic".to_vec(), b"formats".to_vec()), (b"user.empty".to_vec(), vec![])]
                },
                Record::Inode { fresh: false, img: InodeImage { ctime: t(7), ..docs(96, 2) } },
            ],
            vec![
                Record::Dirent { dir: 1, ino: 0, dtype: 0, name: b"link".to_vec() },
                Record::FreeInode { ino: 4 },
                Record::Inode { fresh: false, img: root(128, 3, 8) },
            ],
            vec![Record::OpenWrite { ino: 3 }],
        ]
    );
    assert_eq!(late_data, scan.entries[0].payload_off + 8 + 120 + 8 + 16);
    let mut late_bytes = vec![0u8; LATE.len()];
    slot.region().read(late_data, &mut late_bytes).unwrap();
    assert_eq!(late_bytes, LATE);
    // The published entries are still in the ring before the checkpoint, intact.
    let before = slot.scan(0).unwrap();
    assert_eq!(before.entries.len(), 9);
    assert_eq!(before.entries[5].lsn, published);
}

fn image_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(IMAGE)
}

/// Parse the stored image (format in the module doc).
fn read_image() -> Vec<u8> {
    read_image_at(IMAGE)
}

/// Parse a stored image at `rel` (relative to the crate).
fn read_image_at(rel: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut image: Option<Vec<u8>> = None;
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(size) = line.strip_prefix("size ") {
            image = Some(vec![0u8; size.parse().unwrap_or_else(|e| panic!("line {n}: {e}"))]);
            continue;
        }
        let image = image.as_mut().unwrap_or_else(|| panic!("line {n}: data before the size line"));
        let (off, hex) = line.split_once(' ').unwrap_or_else(|| panic!("line {n}: no offset"));
        let off = usize::from_str_radix(off, 16).unwrap_or_else(|e| panic!("line {n}: {e}"));
        assert!(hex.len() == 128 && off % 64 == 0 && off + 64 <= image.len(), "line {n}: malformed");
        for i in 0..64 {
            image[off + i] = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or_else(|e| panic!("line {n}: {e}"));
        }
    }
    image.expect("no size line")
}

/// The v7 image as stored, opened by the current code.
#[test]
fn stored_v7_image_opens() {
    assert_eq!(FORMAT_VERSION, 7, "a new format version: see the module doc of this file");
    check_image(read_image());
}

/// The v6 image is refused with the advice to upgrade; upgraded, it holds exactly what the
/// v7 image holds (byte for byte, but for the superblock copy the upgrade leaves), and a
/// second upgrade changes nothing.
#[test]
fn stored_v6_image_upgrades() {
    let image = read_image_at(V6_IMAGE);
    let region = Arc::new(PmRegion::traced_from_image(image));
    let err = NodePm::packed(region.clone()).err().expect("refused before the upgrade");
    assert_eq!(
        err.to_string(),
        "PM file has format version 6, this build reads version 7: `linefs upgrade` (or `linefs up`) converts it in place"
    );
    let done = upgrade_packed(&region).unwrap();
    assert_eq!(done, Upgrade { from: 6, to: 7, superblock_restored: false });
    let upgraded = region.tracer().unwrap().live_image();
    check_image(upgraded.clone());
    let mut want = read_image();
    want[512..768].copy_from_slice(&upgraded[..256]);
    assert!(upgraded == want, "the upgraded v6 image differs from the v7 image");
    assert!(!upgrade_packed(&region).unwrap().changed());
}

/// A crash at every fence of the upgrade, each pending line present or not (and torn):
/// the node opens as version 7 with everything, or is still version 6 and upgrades.
#[test]
fn an_upgrade_crashed_anywhere_opens_or_upgrades_again() {
    let region = Arc::new(PmRegion::traced_from_image(read_image_at(V6_IMAGE)));
    let tracer = region.tracer().unwrap();
    tracer.start_recording();
    upgrade_packed(&region).unwrap();
    let opts = CrashOpts { max_exhaustive: 6, samples: 8, seed: 11, torn_words: true, line_cap: 4 };
    let (mut images, mut old, mut restored) = (0, 0, 0);
    for point in tracer.crash_points() {
        for img in point.images(&opts) {
            let crashed = Arc::new(PmRegion::traced_from_image(img.image));
            match NodePm::packed(crashed.clone()) {
                Ok(_) => {}
                Err(FormatError::NeedsUpgrade { found: 6, .. }) => old += 1,
                Err(e) => panic!("{point:?} {}: {e}", img.description),
            }
            let done = upgrade_packed(&crashed).unwrap_or_else(|e| panic!("{point:?} {}: {e}", img.description));
            restored += usize::from(done.superblock_restored);
            check_image(crashed.tracer().unwrap().live_image());
            images += 1;
        }
    }
    assert!(images > 10 && old > 0 && restored > 0, "{images} images, {old} old, {restored} restored");
}

/// The v5 and v4 images upgrade to version 7: the same public tree, the replicated LSN
/// raised to the published one where version 4 left it zero, and recovery replays their
/// three unpublished entries.
#[test]
fn stored_v5_and_v4_images_upgrade() {
    for (rel, from) in [(V5_IMAGE, 5), (V4_IMAGE, 4)] {
        let region = Arc::new(PmRegion::traced_from_image(read_image_at(rel)));
        let err = NodePm::packed(region.clone()).err().expect("refused before the upgrade");
        assert!(matches!(err, FormatError::NeedsUpgrade { found, expected: 7 } if found == from), "{err:?}");
        assert_eq!(upgrade_packed(&region).unwrap(), Upgrade { from, to: 7, superblock_restored: false });
        let node = check_public(region.tracer().unwrap().live_image());
        let slot = LogSlot::new(node.logs[0].clone(), &geometry(), 0);
        let published = slot.published_lsn().unwrap();
        assert!(published > 0);
        assert_eq!(slot.replicated_lsn().unwrap(), published, "version {from}");
        let rec = linefs_pm::recovery::recover(&node).expect("recovery");
        assert_eq!(rec.replayed(), 3, "version {from}");
        assert!(!rec.loaded.inodes.contains_key(&4) && rec.loaded.inodes.contains_key(&5));
    }
}

/// The v3 image (one PM file with the logs inside) is refused with a message naming both
/// versions: there is no upgrade path from it.
#[test]
fn stored_v3_image_is_refused() {
    let image = read_image_at(V3_IMAGE);
    let err = Superblock::read(&PmRegion::traced_from_image(image.clone())).unwrap_err();
    assert!(matches!(err, FormatError::Version { found: 3, expected: 7 }), "{err:?}");
    let region = Arc::new(PmRegion::traced_from_image(image));
    let err = NodePm::packed(region.clone()).err().expect("refused");
    assert_eq!(err.to_string(), "PM file has format version 3, this build reads version 7");
    assert!(matches!(upgrade_packed(&region), Err(FormatError::Version { found: 3, .. })));
}

/// Recovery of the stored image replays its four unpublished entries: `late` appears with
/// its data, `docs` gets its two attributes, `link` and its inode are gone, and the open
/// for writing changes nothing (`data` is as published).
#[test]
fn stored_v7_image_recovers() {
    let node = NodePm::packed(Arc::new(PmRegion::traced_from_image(read_image()))).unwrap();
    let rec = linefs_pm::recovery::recover(&node).expect("recovery");
    assert_eq!(rec.replayed(), 4);
    assert_eq!(rec.loaded.inodes[&3].img, InodeImage { ctime: t(4), ..data(DATA_SIZE, 3) });
    assert_eq!(rec.orphans_freed, 0);
    let mut names: Vec<_> = rec.loaded.dirs[&1].iter().map(|e| e.name.clone()).collect();
    names.sort();
    assert_eq!(names, vec![b"docs".to_vec(), b"late".to_vec()]);
    assert_eq!(rec.loaded.inodes[&5].img, late());
    assert!(!rec.loaded.inodes.contains_key(&4));
    let mut topic = rec.loaded.inodes[&2].xattrs.clone();
    topic.sort();
    assert_eq!(topic, vec![(b"user.empty".to_vec(), Vec::new()), (b"user.topic".to_vec(), b"formats".to_vec())]);
    let mut buf = vec![0u8; LATE.len()];
    rec.area.reader().read_file(5, 0, &mut buf).unwrap();
    assert_eq!(buf, LATE);
    let log = LogSlot::new(node.logs[0].clone(), &geometry(), 0);
    assert_eq!(log.scan(log.published_lsn().unwrap()).unwrap().entries.len(), 0, "all published");
}

/// The generator and the checks agree with the current code (so that a generator change is
/// caught before an image is made with it).
#[test]
fn generated_image_passes_the_same_checks() {
    check_image(build_image());
}

/// A file whose superblock says version 2 (checksum recomputed, so only the version is
/// wrong) is refused, with a message naming both versions.
#[test]
fn version_2_is_refused() {
    let mut image = read_image();
    image[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32c::crc32c(&image[..252]);
    image[252..256].copy_from_slice(&crc.to_le_bytes());
    let region = PmRegion::traced_from_image(image);
    let err = Superblock::read(&region).unwrap_err();
    assert!(matches!(err, FormatError::Version { found: 2, expected: 7 }), "{err:?}");
    assert_eq!(err.to_string(), "PM file has format version 2, this build reads version 7");
}

/// Write the image of the current format version (run on purpose, see the module doc).
#[test]
#[ignore = "generator: writes tests/data/format-v7.img.hex"]
fn make_format_image() {
    let image = build_image();
    check_image(image.clone());
    let mut text = String::new();
    text.push_str(&format!(
        "# linefs PM image, format version {FORMAT_VERSION}, made by pm/tests/format_image.rs (make_format_image).\n\
         # Do not regenerate after a format change: keep it as the record of version {FORMAT_VERSION}.\n\
         # Each line: hex byte offset, then the 64 bytes there as hex; lines not listed are zero.\n\
         # A node packed in one image: the public file (blocks of 4096: 0 superblock, 1 inode table,\n\
         # 2..=65 data: directories, file data, indirect, xattr and symlink blocks), then the log\n\
         # file of slot 0 (blocks 66 header, 67..=129 ring).\n"
    ));
    text.push_str(&format!("size {}\n", image.len()));
    for (i, line) in image.chunks(64).enumerate() {
        if line.iter().any(|&b| b != 0) {
            let hex: String = line.iter().map(|b| format!("{b:02x}")).collect();
            text.push_str(&format!("{:08x} {hex}\n", i * 64));
        }
    }
    let path = image_path();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    assert_eq!(read_image(), image);
}
