//! Pins the bytes of every persisted structure of format version 6.
//!
//! Each expected image below was written by hand from the byte tables in the module docs
//! (`pm/src/layout.rs`, `oplog.rs`, `record.rs`, `public/format.rs`), one line per field,
//! and is deliberately *not* derived from the offset constants: a change to any offset,
//! width, order, magic or checksum coverage makes the encoder's output differ from the
//! literal and a test fail. The crc32c values were computed by an independent
//! implementation over the covered bytes of the literal; each test also recomputes them over
//! the documented coverage, so the literal states what the checksum covers.
//!
//! A format change therefore has to touch this file — and bump `FORMAT_VERSION` (see
//! `format_image.rs` for what else the bump involves).
//!
//! Literal syntax: hex byte strings separated by white space, `XX*N` for N bytes of value
//! XX, `#` to the end of the line is a comment (the field's offset and meaning).

use linefs_pm::layout::{FormatError, FormatParams, Geometry, Superblock, BLOCK_SIZE, FORMAT_VERSION};
use linefs_pm::oplog::{EntryLoc, LogSlot, ScanStop};
use linefs_pm::public::format::{decode_dirent, encode_dirent, PmInode, XattrBlock};
use linefs_pm::record::{decode_entry, decode_records, dtype, Caller, EntryBuilder, InodeImage, Record, Timespec};
use linefs_pm::PmRegion;
use std::sync::Arc;

/// Parse a literal (syntax in the module doc).
fn hex(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in s.lines() {
        let line = line.split('#').next().unwrap_or("");
        for tok in line.split_whitespace() {
            let (bytes, n) = match tok.split_once('*') {
                Some((b, n)) => (b, n.parse::<usize>().expect("repeat count")),
                None => (tok, 1),
            };
            assert!(bytes.len() % 2 == 0, "odd hex token {tok}");
            let bytes: Vec<u8> =
                (0..bytes.len()).step_by(2).map(|i| u8::from_str_radix(&bytes[i..i + 2], 16).expect("hex")).collect();
            for _ in 0..n {
                out.extend_from_slice(&bytes);
            }
        }
    }
    out
}

fn le32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

/// The test changes if the version does: a new version needs new literals.
#[test]
fn format_version_is_7() {
    assert_eq!(FORMAT_VERSION, 7);
}

// ---------------------------------------------------------------- superblock

const SUPERBLOCK: &str = "
    4c494e454653504d                  #   0 magic b\"LINEFSPM\"
    07000000                          #   8 version 7
    00100000                          #  12 block_size 4096
    4200000000000000                  #  16 total_blocks 66 (of the public file)
    01000000                          #  24 log_slots 1
    00000000                          #  28 reserved
    0000000000000000                  #  32 reserved (version 3: log_start)
    4000000000000000                  #  40 log_blocks 64
    0100000000000000                  #  48 itable_start 1
    1000000000000000                  #  56 inode_count 16
    0200000000000000                  #  64 data_start 2
    4000000000000000                  #  72 data_blocks 64
    000102030405060708090a0b0c0d0e0f  #  80 uuid
    0102030405060708                  #  96 format_time 0x0807060504030201
    00*148                            # 104 reserved
    3e824784                          # 252 crc32c over 0..252
";

/// The smallest geometry `Geometry::compute` allows: one log file of 64 blocks; a public
/// file of the superblock, one inode block and 64 data blocks.
fn tiny_geometry() -> Geometry {
    Geometry::compute(&FormatParams { size: 130 * BLOCK_SIZE, log_size: 64 * BLOCK_SIZE, log_slots: 1, inodes: 16 })
        .unwrap()
}

#[test]
fn superblock_bytes() {
    let expect = hex(SUPERBLOCK);
    assert_eq!(expect.len(), 256);
    assert_eq!(le32_at(&expect, 252), crc32c::crc32c(&expect[..252]));
    let uuid: [u8; 16] = std::array::from_fn(|i| i as u8);
    let sb = Superblock { geometry: tiny_geometry(), uuid, format_time_ns: 0x0807_0605_0403_0201 };
    assert_eq!(sb.encode().to_vec(), expect);
    let decoded = Superblock::decode(&expect.clone().try_into().unwrap(), 66 * BLOCK_SIZE).unwrap();
    assert_eq!(decoded, sb);
    // A version-2 superblock with a valid checksum is refused by its version.
    let mut old: [u8; 256] = expect.try_into().unwrap();
    old[8] = 2;
    let crc = crc32c::crc32c(&old[..252]);
    old[252..].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(Superblock::decode(&old, 66 * BLOCK_SIZE), Err(FormatError::Version { found: 2, expected: 7 })));
    // Version 6 (its bytes are these but for the version: checksum 0x4ad4f45f) is told to
    // upgrade.
    old[8] = 6;
    let crc = crc32c::crc32c(&old[..252]);
    assert_eq!(crc, 0x4ad4_f45f);
    old[252..].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        Superblock::decode(&old, 66 * BLOCK_SIZE),
        Err(FormatError::NeedsUpgrade { found: 6, expected: 7 })
    ));
}

// ---------------------------------------------------------------- node record

const NODE_RECORD: &str = "
    4c46534e4f444500                  #   0 magic b\"LFSNODE\\0\"
    01000000                          #   8 version 1
    01000000                          #  12 history_len 1
    0300000000000000                  #  16 seq 3
    02000000                          #  24 node_id 2
    01000000                          #  28 chain_pos 1
    0500000000000000                  #  32 epoch 5
    101112131415161718191a1b1c1d1e1f  #  40 cluster_id
    0700000000000000                  #  56 members {0, 1, 2}
    0400000000000000                  #  64 history[0].epoch 4
    0300000000000000                  #  72 history[0].members {0, 1}
    0807060504030201                  #  80 history[0].since_ns
    00*420                            #  88 history[1..16], reserved 448..508
    95428b75                          # 508 crc32c over 0..508
";

#[test]
fn node_record_bytes() {
    use linefs_pm::noderecord::{EpochEntry, NodeRecord};
    let expect = hex(NODE_RECORD);
    assert_eq!(expect.len(), 512);
    assert_eq!(le32_at(&expect, 508), crc32c::crc32c(&expect[..508]));
    let rec = NodeRecord {
        seq: 3,
        node_id: Some(2),
        chain_pos: Some(1),
        epoch: 5,
        cluster_id: std::array::from_fn(|i| 16 + i as u8),
        members: 0b111,
        history: vec![EpochEntry { epoch: 4, members: 0b11, since_ns: 0x0102_0304_0506_0708 }],
    };
    assert_eq!(rec.encode().to_vec(), expect);
    assert_eq!(NodeRecord::decode(&expect.try_into().unwrap()).unwrap(), rec);
    // No node id, no chain position: u32::MAX.
    let none = NodeRecord::initial().encode();
    assert_eq!(le32_at(&none, 24), u32::MAX);
    assert_eq!(le32_at(&none, 28), u32::MAX);
}

// ---------------------------------------------------------------- log slot header

const SLOT_HEADER: &str = "
    4c464c4f47534c54                  #   0 magic b\"LFLOGSLT\"
    01000000                          #   8 slot 1
    00000000                          #  12 reserved
    00f0030000000000                  #  16 ring_bytes 258048 (63 blocks)
    00*36                             #  24 reserved
    a1daa0df                          #  60 crc32c over 0..60
    8877665544332211                  #  64 published_lsn 0x1122334455667788
    8877665544332211                  #  72 replicated_lsn, raised with it (no replicas)
    00*48                             #  80 rest of the 128 bytes format writes
";

/// The log file of slot 1 of a node with two slots of 64 blocks (slot 1, so that the slot
/// index is non-trivial).
fn two_slots() -> (Arc<PmRegion>, Geometry) {
    let geo = Geometry::compute(&FormatParams { size: 8 << 20, log_size: 64 * BLOCK_SIZE, log_slots: 2, inodes: 64 })
        .unwrap();
    (Arc::new(PmRegion::traced(geo.log_size())), geo)
}

#[test]
fn log_slot_header_bytes() {
    let expect = hex(SLOT_HEADER);
    assert_eq!(expect.len(), 128);
    assert_eq!(le32_at(&expect, 60), crc32c::crc32c(&expect[..60]));
    let (region, geo) = two_slots();
    let slot = LogSlot::new(region.clone(), &geo, 1);
    slot.format().unwrap();
    slot.set_published_lsn(0x1122_3344_5566_7788).unwrap();
    let mut got = vec![0u8; 128];
    region.read(0, &mut got).unwrap();
    assert_eq!(got, expect);

    // Decode the literal in a fresh region.
    let (region, geo) = two_slots();
    region.write(0, &expect).unwrap();
    let slot = LogSlot::new(region.clone(), &geo, 1);
    assert_eq!(slot.published_lsn().unwrap(), 0x1122_3344_5566_7788);
    assert_eq!(slot.replicated_lsn().unwrap(), 0x1122_3344_5566_7788);
    // Replication behind publication: log space is reclaimed only up to it.
    slot.set_replicated_lsn(0x1000).unwrap();
    assert_eq!(slot.reclaim_lsn().unwrap(), 0x1000);
    slot.set_published_lsn(0x0800).unwrap();
    assert_eq!((slot.replicated_lsn().unwrap(), slot.reclaim_lsn().unwrap()), (0x1000, 0x0800));
    // Every byte before the checksum is covered; the published LSN is not.
    for i in 0..64 {
        let (region, geo) = two_slots();
        let mut bad = expect.clone();
        bad[i] ^= 0x10;
        region.write(0, &bad).unwrap();
        assert!(LogSlot::new(region, &geo, 1).published_lsn().is_err(), "byte {i} of the slot header is unchecked");
    }
}

// ---------------------------------------------------------------- log entry

/// An entry at LSN 3 * 258048 + 128 (ring offset 128, third lap) with an 8-byte payload.
const ENTRY: &str = "
    4c46454e                          #   0 magic b\"LFEN\"
    40000000                          #   4 total_len 64
    80d00b0000000000                  #   8 lsn 774272
    08000000                          #  16 payload_len 8
    0000                              #  20 kind 0 = records
    000000000000                      #  22 reserved
    17c86c9f                          #  28 crc32c over 0..28, then the payload
    6162636465666768                  #  32 payload b\"abcdefgh\"
    00*24                             #  40 zero padding to total_len
";
const ENTRY_LSN: u64 = 3 * 258048 + 128;

/// The pad entry that fills the last 64 bytes of the ring (LSN 4 * 258048 - 64) when the
/// next entry does not fit, and that entry, at ring offset 0 with 40 bytes of 0x5a.
const PAD_THEN_ENTRY: &str = "
    4c46454e                          #   0 magic
    40000000                          #   4 total_len 64 (the rest of the ring)
    c0bf0f0000000000                  #   8 lsn 1032128
    00000000                          #  16 payload_len 0
    0100                              #  20 kind 1 = pad
    000000000000                      #  22 reserved
    2881ed18                          #  28 crc32c over 0..28 (no payload)
    ----
    4c46454e                          #   0 magic
    80000000                          #   4 total_len 128
    00c00f0000000000                  #   8 lsn 1032192
    28000000                          #  16 payload_len 40
    0000                              #  20 kind 0 = records
    000000000000                      #  22 reserved
    050f8662                          #  28 crc32c over 0..28, then the payload
    5a*40                             #  32 payload
    00*56                             #  72 zero padding to total_len
";

/// Where the ring starts in a log file: after its header block.
fn ring_off(_geo: &Geometry, _slot: u32) -> u64 {
    BLOCK_SIZE
}

#[test]
fn log_entry_bytes() {
    let expect = hex(ENTRY);
    assert_eq!(expect.len(), 64);
    assert_eq!(le32_at(&expect, 28), crc32c::crc32c_append(crc32c::crc32c(&expect[..28]), &expect[32..40]));
    let (region, geo) = two_slots();
    let slot = LogSlot::new(region.clone(), &geo, 1);
    slot.format().unwrap();
    let loc = slot.append(ENTRY_LSN, ENTRY_LSN, b"abcdefgh").unwrap();
    let at = ring_off(&geo, 1) + 128;
    assert_eq!(loc, EntryLoc { lsn: ENTRY_LSN, end: ENTRY_LSN + 64, payload_off: at + 32, payload_len: 8 });
    let mut got = vec![0u8; 64];
    region.read(at, &mut got).unwrap();
    assert_eq!(got, expect);

    // Decode the literal in a fresh slot.
    let scan_literal = |bytes: &[u8]| {
        let (region, geo) = two_slots();
        let slot = LogSlot::new(region.clone(), &geo, 1);
        slot.format().unwrap();
        region.write(ring_off(&geo, 1) + 128, bytes).unwrap();
        let scan = slot.scan(ENTRY_LSN).unwrap();
        let payloads: Vec<Vec<u8>> = scan.entries.iter().map(|l| slot.read_payload(l).unwrap()).collect();
        (scan, payloads)
    };
    let (scan, payloads) = scan_literal(&expect);
    assert_eq!(scan.entries, vec![loc]);
    assert_eq!(payloads, vec![b"abcdefgh".to_vec()]);
    assert_eq!((scan.end, scan.stop), (ENTRY_LSN + 64, ScanStop::End));

    // The checksum covers every header byte (version 2 left 28..32 out) and the payload.
    for i in 0..40 {
        let mut bad = expect.clone();
        bad[i] ^= 0x10;
        let (scan, _) = scan_literal(&bad);
        assert!(scan.entries.is_empty(), "byte {i} of the entry is not covered by any check");
    }
}

#[test]
fn log_pad_entry_bytes() {
    let text: Vec<&str> = PAD_THEN_ENTRY.split("----").collect();
    let (pad, entry) = (hex(text[0]), hex(text[1]));
    assert_eq!((pad.len(), entry.len()), (32, 128));
    assert_eq!(le32_at(&pad, 28), crc32c::crc32c(&pad[..28]));
    assert_eq!(le32_at(&entry, 28), crc32c::crc32c_append(crc32c::crc32c(&entry[..28]), &entry[32..72]));
    let (region, geo) = two_slots();
    let slot = LogSlot::new(region.clone(), &geo, 1);
    slot.format().unwrap();
    let ring = slot.ring_bytes();
    assert_eq!(ring, 258048);
    let tail = 4 * ring - 64;
    let loc = slot.append(tail, tail, &[0x5a; 40]).unwrap();
    assert_eq!((loc.lsn, loc.end), (4 * ring, 4 * ring + 128));
    let mut got = vec![0u8; 32];
    region.read(ring_off(&geo, 1) + ring - 64, &mut got).unwrap();
    assert_eq!(got, pad);
    let mut got = vec![0u8; 128];
    region.read(ring_off(&geo, 1), &mut got).unwrap();
    assert_eq!(got, entry);

    // Decode: the scan steps over the pad and finds the entry.
    let (region, geo) = two_slots();
    let slot = LogSlot::new(region.clone(), &geo, 1);
    slot.format().unwrap();
    region.write(ring_off(&geo, 1) + ring - 64, &pad).unwrap();
    region.write(ring_off(&geo, 1), &entry).unwrap();
    let scan = slot.scan(tail).unwrap();
    assert_eq!(scan.entries, vec![loc]);
    assert_eq!(slot.read_payload(&loc).unwrap(), vec![0x5a; 40]);
}

// ---------------------------------------------------------------- records and InodeImage

/// An InodeImage with a distinct value in every field (a negative time included).
const INODE_IMAGE: &str = "
    0200000000000000                  #   0 ino 2
    3412000000000000                  #   8 size 0x1234
    0100000000000000                  #  16 parent 1
    a4810000                          #  24 mode 0o100644
    e8030000                          #  28 uid 1000
    e9030000                          #  32 gid 1001
    01000000                          #  36 nlink 1
    01080000                          #  40 rdev 0x801
    07000000                          #  44 generation 7
    10000000                          #  48 flags 0x10
    00000000                          #  52 reserved
    01f1536500000000 0b000000 00000000  #  56 atime: sec 1700000001, nsec 11, reserved
    02f1536500000000 16000000 00000000  #  72 mtime: 1700000002 s, 22 ns
    03f1536500000000 21000000 00000000  #  88 ctime: 1700000003 s, 33 ns
    feffffffffffffff 2c000000 00000000  # 104 crtime: -2 s, 44 ns
";

fn inode_image() -> InodeImage {
    InodeImage {
        ino: 2,
        size: 0x1234,
        parent: 1,
        mode: 0o100644,
        uid: 1000,
        gid: 1001,
        nlink: 1,
        rdev: 0x801,
        generation: 7,
        flags: 0x10,
        atime: Timespec { sec: 1_700_000_001, nsec: 11 },
        mtime: Timespec { sec: 1_700_000_002, nsec: 22 },
        ctime: Timespec { sec: 1_700_000_003, nsec: 33 },
        crtime: Timespec { sec: -2, nsec: 44 },
    }
}

/// One record of each kind; framing: kind u8 | flags u8 | reserved u16 | len u32, payload,
/// zero padding to 8 bytes.
const RECORDS: &str = "
    01 01 0000 78000000               # INODE, flags 1 (fresh), len 120
    @INODE_IMAGE
    02 00 0000 1c000000               # DIRENT, len 28
    0200000000000000                  #   0 dir 2
    0900000000000000                  #   8 ino 9
    08                                #  16 dtype DT_REG
    04                                #  17 name_len 4
    000000000000                      #  18 reserved
    6e616d65                          #  24 name b\"name\"
    00000000                          # padding
    03 00 0000 13000000               # WRITE, len 19 (its data starts at payload offset 192)
    0900000000000000                  #   0 ino 9
    0010000000000000                  #   8 offset 0x1000
    616263                            #  16 data b\"abc\"
    0000000000                        # padding
    04 00 0000 10000000               # TRUNCATE, len 16
    0900000000000000                  #   0 ino 9
    0020000000000000                  #   8 size 0x2000
    05 00 0000 18000000               # PUNCH, len 24
    0900000000000000                  #   0 ino 9
    1000000000000000                  #   8 offset 0x10
    2000000000000000                  #  16 len 0x20
    06 00 0000 18000000               # ALLOC, len 24
    0900000000000000                  #   0 ino 9
    3000000000000000                  #   8 offset 0x30
    4000000000000000                  #  16 len 0x40
    07 00 0000 20000000               # XATTRS, len 32
    0900000000000000                  #   0 ino 9
    01000000                          #   8 count 1
    00000000                          #  12 reserved
    06 000000 02000000                #  16 name_len 6, reserved, value_len 2
    757365722e61 7879                 #  24 name b\"user.a\", value b\"xy\"
    08 00 0000 08000000               # FREE_INODE, len 8
    0900000000000000                  #   0 ino 9
    0a 00 0000 08000000               # OPEN_WRITE, len 8 (version 6)
    0900000000000000                  #   0 ino 9
";

fn records_literal() -> Vec<u8> {
    hex(&RECORDS.replace("@INODE_IMAGE", INODE_IMAGE))
}

#[test]
fn inode_image_bytes() {
    let expect = hex(INODE_IMAGE);
    assert_eq!(expect.len(), 120);
    let mut got = [0xffu8; 120];
    inode_image().encode_into(&mut got);
    assert_eq!(got.to_vec(), expect);
    assert_eq!(InodeImage::decode(&expect), inode_image());
}

#[test]
fn record_bytes() {
    let expect = records_literal();
    let mut b = EntryBuilder::new();
    b.inode(&inode_image(), true);
    b.dirent(2, b"name", 9, dtype::REG);
    b.write(9, 0x1000, b"abc");
    b.truncate(9, 0x2000);
    b.punch(9, 0x10, 0x20);
    b.alloc(9, 0x30, 0x40);
    b.xattrs(9, [(&b"user.a"[..], &b"xy"[..])]);
    b.free_inode(9);
    b.open_write(9);
    assert_eq!(b.payload(), &expect[..]);
    assert_eq!(b.count(), 9);
    assert_eq!(b.write_data(), &[(192, 3)]);

    let recs = decode_records(&expect, 1000).unwrap();
    assert_eq!(
        recs,
        vec![
            Record::Inode { fresh: true, img: inode_image() },
            Record::Dirent { dir: 2, ino: 9, dtype: dtype::REG, name: b"name".to_vec() },
            Record::Write { ino: 9, off: 0x1000, len: 3, data_off: 1192 },
            Record::Truncate { ino: 9, size: 0x2000 },
            Record::Punch { ino: 9, off: 0x10, len: 0x20 },
            Record::Alloc { ino: 9, off: 0x30, len: 0x40 },
            Record::Xattrs { ino: 9, attrs: vec![(b"user.a".to_vec(), b"xy".to_vec())] },
            Record::FreeInode { ino: 9 },
            Record::OpenWrite { ino: 9 },
        ]
    );
    // CALLER: entry metadata, first; not counted as a record and not decoded as one.
    let caller = Caller { uid: 1000, gid: 100, groups: vec![10, 27] };
    let expect_caller = hex("
        09 00 0000 18000000               # CALLER, len 24
        e8030000                          #   0 uid 1000
        64000000                          #   4 gid 100
        02000000                          #   8 ngroups 2
        00000000                          #  12 reserved
        0a000000 1b000000                 #  16 groups 10, 27
    ");
    let mut b = EntryBuilder::by(&caller);
    assert_eq!(b.payload(), &expect_caller[..]);
    assert!(b.is_empty());
    b.free_inode(9);
    assert_eq!(b.count(), 1);
    let (stated, recs) = decode_entry(b.payload(), 0).unwrap();
    assert_eq!((stated, recs), (Some(caller), vec![Record::FreeInode { ino: 9 }]));
    assert_eq!(decode_records(b.payload(), 0).unwrap(), vec![Record::FreeInode { ino: 9 }]);
    // Anywhere but first, it is corrupt.
    let mut late = EntryBuilder::new();
    late.free_inode(9);
    let mut bytes = late.payload().to_vec();
    bytes.extend_from_slice(&expect_caller);
    assert!(decode_records(&bytes, 0).is_err());
    // A non-fresh INODE record differs only in its flags byte.
    let mut b = EntryBuilder::new();
    b.inode(&inode_image(), false);
    let mut expect_plain = expect[..128].to_vec();
    expect_plain[1] = 0;
    assert_eq!(b.payload(), &expect_plain[..]);
}

// ---------------------------------------------------------------- public area

/// The on-PM inode: the InodeImage above, then the xattr pointer and the block-map roots.
const PM_INODE: &str = "
    @INODE_IMAGE                      #   0 attributes (120 bytes)
    5000000000000000                  # 120 first xattr block 0x50
    4200000000000000                  # 128 direct[0] 0x42
    4300000000000000                  # 136 direct[1] 0x43
    00*80                             # 144 direct[2..12] holes
    4400000000000000                  # 224 single indirect 0x44
    0000000000000000                  # 232 double indirect: hole
    4500000000000000                  # 240 triple indirect 0x45
    00000000                          # 248 reserved
    fe76ed91                          # 252 crc32c over 0..252
";

#[test]
fn pm_inode_bytes() {
    let expect = hex(&PM_INODE.replace("@INODE_IMAGE", INODE_IMAGE));
    assert_eq!(expect.len(), 256);
    assert_eq!(le32_at(&expect, 252), crc32c::crc32c(&expect[..252]));
    let mut roots = [0u64; 15];
    roots[0] = 0x42;
    roots[1] = 0x43;
    roots[12] = 0x44;
    roots[14] = 0x45;
    let ino = PmInode { img: inode_image(), xattr: 0x50, roots };
    assert_eq!(ino.encode().to_vec(), expect);
    assert_eq!(PmInode::decode(&expect.clone().try_into().unwrap()), (ino, true));
    let mut bad: [u8; 256] = expect.try_into().unwrap();
    bad[250] = 1; // reserved bytes are covered
    assert!(!PmInode::decode(&bad).1);
}

const DIRENT_SLOT: &str = "
    3412000000000000                  #   0 ino 0x1234
    0a                                #   8 dtype DT_LNK
    04                                #   9 name_len 4
    6c696e6b                          #  10 name b\"link\"
    00*251                            #  14 rest of the 255-byte name field
    000000                            # 265 reserved
    32a76a60                          # 268 crc32c over 0..268
";

#[test]
fn directory_slot_bytes() {
    let expect = hex(DIRENT_SLOT);
    assert_eq!(expect.len(), 272);
    assert_eq!(le32_at(&expect, 268), crc32c::crc32c(&expect[..268]));
    assert_eq!(encode_dirent(0x1234, dtype::LNK, b"link").to_vec(), expect);
    assert_eq!(decode_dirent(&expect, 0x2000), Some((0x1234, dtype::LNK, &b"link"[..])));
    assert_eq!(decode_dirent(&expect, 0x1234), None, "inode beyond the table");
    let mut bad = expect.clone();
    bad[266] = 1; // reserved bytes are covered
    assert_eq!(decode_dirent(&bad, 0x2000), None);
}

const XATTR_BLOCK: &str = "
    4c465832                          #   0 magic b\"LFX2\"
    10000000                          #   4 used 16
    5100000000000000                  #   8 next 0x51
    10200000                          #  16 total 0x2010
    03000000                          #  20 count 3
    efbeadde                          #  24 stream_crc 0xdeadbeef
    8e786da3                          #  28 crc32c over 0..28, then the 16 stream bytes
    06 000000 02000000 757365722e61 7879  #  32 stream: one attribute user.a = xy
    00*4048                           #  48 rest of the block
";

#[test]
fn xattr_block_bytes() {
    let expect = hex(XATTR_BLOCK);
    assert_eq!(expect.len(), BLOCK_SIZE as usize);
    assert_eq!(le32_at(&expect, 28), crc32c::crc32c_append(crc32c::crc32c(&expect[..28]), &expect[32..48]));
    let hdr = XattrBlock { used: 16, next: 0x51, total: 0x2010, count: 3, stream_crc: 0xdead_beef };
    let mut got = vec![0xffu8; BLOCK_SIZE as usize];
    hdr.encode(&expect[32..48], &mut got);
    assert_eq!(got, expect);
    assert_eq!(XattrBlock::decode(&expect), Some(hdr));
    for i in 0..48 {
        let mut bad = expect.clone();
        bad[i] ^= 0x10;
        assert_ne!(XattrBlock::decode(&bad), Some(hdr), "byte {i} of the xattr block is unchecked");
    }
}
