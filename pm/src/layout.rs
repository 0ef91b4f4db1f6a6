//! The persisted layout of a node's PM: superblock and geometry.
//!
//! A node's PM is several files (see [`crate::node`]): one *public* file that nicfs (or the
//! host-only client) owns, and one *log* file per client slot, so that a client can be
//! handed write access to its own log and read access to the public area only. Each is an
//! array of 4 KiB blocks. The public file:
//!
//! ```text
//! block 0                      superblock (bytes 0..256), its copy while it is rewritten
//!                              (512..768), the node record's two slots (1024..2048;
//!                              crate::noderecord), the rest zero
//! [itable_start, +itable_blocks)       inode table: 256-byte inodes, 16 per block,
//!                              inode number i at index i (0 unused, 1 = root)
//! [data_start, total_blocks)   data blocks: file data, directory slots, indirect
//!                              blocks, xattr blocks
//! ```
//!
//! A log file: one header block followed by a ring of `log_blocks - 1` blocks (see
//! [`crate::oplog`]). Block numbers in the public area (inode block maps) count blocks of
//! the public file; offsets in log records (a WRITE's data) count bytes of the writer's log
//! file.
//!
//! Tests and the crash suite hold a whole node in one region, *packed*: the public file
//! followed by log 0, log 1, … ([`Geometry::packed_log_off`]).
//!
//! Superblock, byte by byte (all integers little-endian):
//!
//! ```text
//! off len field
//!   0   8 magic          b"LINEFSPM"
//!   8   4 version        FORMAT_VERSION
//!  12   4 block_size     4096
//!  16   8 total_blocks   size of the public file / 4096
//!  24   4 log_slots      number of client logs (log files)
//!  28   4 reserved       0
//!  32   8 reserved       0 (version 3: log_start, when the logs were inside this file)
//!  40   8 log_blocks     blocks per log file, header block included
//!  48   8 itable_start   first block of the inode table
//!  56   8 inode_count    inodes in the table (index 0 unused)
//!  64   8 data_start     first data block
//!  72   8 data_blocks    number of data blocks
//!  80  16 uuid           random identity of this file system
//!  96   8 format_time    nanoseconds since the Unix epoch
//! 104 148 reserved       0
//! 252   4 crc32c         over bytes 0..252
//! ```
//!
//! The offsets are the constants of [`sb_off`], which the encoder and the decoder both use;
//! `pm/tests/format_bytes.rs` pins the bytes against this table.
//!
//! The superblock is written at format and rewritten only by an upgrade of the format
//! version ([`crate::upgrade`]); opening checks magic, version, checksum and that the
//! geometry fits the file. A rewrite first stores the new superblock at
//! [`SUPERBLOCK_COPY_OFF`], persisted and fenced, then over the
//! superblock: a crash in the middle leaves the superblock torn and the copy whole, and
//! [`Superblock::read`] takes the copy when the superblock's checksum fails. What changes
//! with a node's life (its id, epoch, chain position) is the node record's
//! ([`crate::noderecord`]), not the superblock's.
//!
//! Every checksummed structure of the format follows one rule: its crc32c is the last field
//! of its (header) bytes and covers every byte before it, reserved bytes included, then the
//! payload if it has one; no header byte goes unprotected. The one field placed after a
//! checksum on purpose is the log slot's published LSN, which is updated in place by a
//! single atomic store (see [`crate::oplog`]).

use crate::region::{PmError, PmRegion};
use linefs_bytes::{Fixed, FixedOut};

/// Size of every block of a node's PM files.
pub const BLOCK_SIZE: u64 = 4096;
/// Persisted format version this build reads and writes. Versions
/// [`UPGRADABLE_FROM`]`..FORMAT_VERSION` are upgraded in place by [`crate::upgrade`] (`linefs
/// upgrade`, and `linefs up`); any other is refused. `pm/tests/format_image.rs` opens a stored
/// image of this version, upgrades the stored images of the earlier ones, and says what to do
/// at the next bump.
/// 2: extended attributes in a chain of blocks (up to 254 KiB per inode) and 32-bit value
/// lengths in XATTRS records.
/// 3: the log entry checksum moves to header bytes 28..32 and covers the whole header before
/// it (version 2 left bytes 28..32 unprotected); the log slot header checksum moves to bytes
/// 60..64 and covers bytes 0..60.
/// 4: a node is a public file plus one file per log slot (the logs left the PM file, so that
/// a client can be given its own log and nothing else to write); superblock bytes 32..40
/// (log_start) are reserved; WRITE records name offsets in the writer's log file.
/// 5: CALLER records (record kind 9: who an entry was logged for, checked by nicfs) may
/// open a log entry; a version 4 reader would refuse them as corrupt.
/// 6: OPEN_WRITE records (record kind 10: the entry's caller opened a file for writing,
/// checked by nicfs); a version 5 reader would refuse them as corrupt.
/// 7: the mutable node record (node id, cluster, epoch, chain position, epoch history) in
/// two slots of block 0, and the superblock copy used while the superblock is rewritten
/// (crate::noderecord); versions 4–6 are upgraded in place (crate::upgrade).
pub const FORMAT_VERSION: u32 = 7;
/// The oldest version [`crate::upgrade`] converts: 4, the first with a file per log (a
/// version 3 node keeps its logs inside the PM file and must be formatted anew).
pub const UPGRADABLE_FROM: u32 = 4;
/// Magic at offset 0 of a linefs PM file.
pub const MAGIC: &[u8; 8] = b"LINEFSPM";
/// Size of one on-PM inode.
pub const INODE_SIZE: u64 = 256;
/// Size of the superblock's used part.
pub const SUPERBLOCK_SIZE: usize = 256;
/// Offset in block 0 of the superblock's copy, written (persisted and fenced) before the
/// superblock is rewritten, so that a crash in the middle leaves one of them whole.
pub const SUPERBLOCK_COPY_OFF: u64 = 512;

/// Byte offsets of the superblock's fields (the table in the module doc).
pub mod sb_off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const BLOCK_SIZE: usize = 12;
    pub const TOTAL_BLOCKS: usize = 16;
    pub const LOG_SLOTS: usize = 24;
    pub const RESERVED0: usize = 28;
    /// Version 3's `log_start`; zero since the logs are files of their own.
    pub const RESERVED_LOG_START: usize = 32;
    pub const LOG_BLOCKS: usize = 40;
    pub const ITABLE_START: usize = 48;
    pub const INODE_COUNT: usize = 56;
    pub const DATA_START: usize = 64;
    pub const DATA_BLOCKS: usize = 72;
    pub const UUID: usize = 80;
    pub const FORMAT_TIME: usize = 96;
    pub const RESERVED1: usize = 104;
    /// crc32c over bytes `0..CRC`.
    pub const CRC: usize = 252;
    const _: () =
        assert!(RESERVED0 + 4 == RESERVED_LOG_START && UUID + 16 == FORMAT_TIME && FORMAT_TIME + 8 == RESERVED1);
    const _: () = assert!(CRC + 4 == super::SUPERBLOCK_SIZE);
}

/// Errors of the persisted format: what is wrong with a PM image, said plainly.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("not a linefs PM file (bad magic)")]
    BadMagic,
    #[error("PM file has format version {found}, this build reads version {expected}")]
    Version { found: u32, expected: u32 },
    #[error(
        "PM file has format version {found}, this build reads version {expected}: `linefs upgrade` (or `linefs up`) converts it in place"
    )]
    NeedsUpgrade { found: u32, expected: u32 },
    #[error("superblock checksum mismatch (stored {stored:#010x}, computed {computed:#010x}): PM file is corrupt")]
    SuperblockChecksum { stored: u32, computed: u32 },
    #[error("PM file is truncated or resized: superblock says {expected} bytes, file has {found}")]
    SizeMismatch { expected: u64, found: u64 },
    #[error("superblock geometry is inconsistent: {0}")]
    Geometry(String),
    #[error("invalid format options: {0}")]
    Options(String),
    #[error("{0} exists and is not empty: refusing to format over it")]
    Exists(String),
    #[error("corrupt {what}: {detail}")]
    Corrupt { what: String, detail: String },
    #[error(transparent)]
    Pm(#[from] PmError),
}

/// Where everything lives in a node's PM files. Derived at format time and stored in the
/// superblock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Blocks of the public file.
    pub total_blocks: u64,
    /// Log files (client slots).
    pub log_slots: u32,
    /// Blocks of each log file, header block included.
    pub log_blocks: u64,
    pub itable_start: u64,
    pub inode_count: u64,
    pub data_start: u64,
    pub data_blocks: u64,
}

/// The parameters of `format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatParams {
    /// Bytes of PM for the whole node, public file and log files together (multiple of
    /// 4096).
    pub size: u64,
    /// Bytes per client log file, header block included.
    pub log_size: u64,
    pub log_slots: u32,
    pub inodes: u64,
}

impl FormatParams {
    /// Defaults scaled to `size`: 4 log slots of size/32 each (at least 256 KiB, at most
    /// 256 MiB), one inode per 16 KiB.
    pub fn for_size(size: u64) -> FormatParams {
        let log_size = (size / 32).clamp(256 << 10, 256 << 20) / BLOCK_SIZE * BLOCK_SIZE;
        FormatParams { size, log_size, log_slots: 4, inodes: (size / 16384).clamp(1024, 1 << 24) }
    }
}

impl Geometry {
    /// Lay out a node of `p.size` bytes: `p.log_slots` log files of `p.log_size` bytes and a
    /// public file of the rest.
    pub fn compute(p: &FormatParams) -> Result<Geometry, FormatError> {
        if !p.size.is_multiple_of(BLOCK_SIZE) {
            return Err(FormatError::Options(format!("size {} is not a multiple of 4096", p.size)));
        }
        if !p.log_size.is_multiple_of(BLOCK_SIZE) || p.log_size < 64 * BLOCK_SIZE {
            return Err(FormatError::Options(format!(
                "log size {} must be a multiple of 4096 and at least 256 KiB",
                p.log_size
            )));
        }
        if p.log_slots == 0 || p.log_slots > 64 {
            return Err(FormatError::Options(format!("log slots {} not in 1..=64", p.log_slots)));
        }
        if p.inodes < 16 {
            return Err(FormatError::Options("at least 16 inodes".into()));
        }
        let log_blocks = p.log_size / BLOCK_SIZE;
        let total_blocks = (p.size / BLOCK_SIZE).saturating_sub(log_blocks * p.log_slots as u64);
        let itable_start = 1;
        let per_block = BLOCK_SIZE / INODE_SIZE;
        let itable_blocks = p.inodes.div_ceil(per_block);
        let inode_count = itable_blocks * per_block;
        let data_start = itable_start + itable_blocks;
        if data_start + 64 > total_blocks {
            return Err(FormatError::Options(format!(
                "{} bytes is too small for {} logs of {} bytes and {} inodes",
                p.size, p.log_slots, p.log_size, p.inodes
            )));
        }
        Ok(Geometry {
            total_blocks,
            log_slots: p.log_slots,
            log_blocks,
            itable_start,
            inode_count,
            data_start,
            data_blocks: total_blocks - data_start,
        })
    }

    /// Bytes of the public file.
    pub fn public_size(&self) -> u64 {
        self.total_blocks * BLOCK_SIZE
    }

    /// Bytes of each log file.
    pub fn log_size(&self) -> u64 {
        self.log_blocks * BLOCK_SIZE
    }

    /// Bytes of the whole node (all files).
    pub fn node_size(&self) -> u64 {
        self.public_size() + self.log_slots as u64 * self.log_size()
    }

    /// Offset of log file `slot` in a packed node (public file, then the logs in order).
    pub fn packed_log_off(&self, slot: u32) -> u64 {
        self.public_size() + slot as u64 * self.log_size()
    }

    /// Byte offset of inode `ino` in the table.
    pub fn inode_off(&self, ino: u64) -> u64 {
        self.itable_start * BLOCK_SIZE + ino * INODE_SIZE
    }

    /// Whether `block` is a data block.
    pub fn is_data_block(&self, block: u64) -> bool {
        block >= self.data_start && block < self.total_blocks
    }

    fn check(&self, file_len: u64) -> Result<(), FormatError> {
        let bad = |m: &str| Err(FormatError::Geometry(m.to_string()));
        if self.total_blocks * BLOCK_SIZE != file_len {
            return Err(FormatError::SizeMismatch {
                expected: self.total_blocks.saturating_mul(BLOCK_SIZE),
                found: file_len,
            });
        }
        if self.log_slots == 0 || self.log_slots > 64 || self.log_blocks < 64 {
            return bad("log area");
        }
        if self.itable_start != 1 {
            return bad("inode table start");
        }
        let per_block = BLOCK_SIZE / INODE_SIZE;
        if !self.inode_count.is_multiple_of(per_block)
            || self.itable_start.checked_add(self.inode_count / per_block) != Some(self.data_start)
        {
            return bad("inode table size");
        }
        if self.data_start.checked_add(self.data_blocks) != Some(self.total_blocks) {
            return bad("data area");
        }
        Ok(())
    }
}

/// The decoded superblock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub geometry: Geometry,
    pub uuid: [u8; 16],
    pub format_time_ns: u64,
}

impl Superblock {
    /// Encode to the 256-byte on-PM form.
    pub fn encode(&self) -> [u8; SUPERBLOCK_SIZE] {
        self.encode_version(FORMAT_VERSION)
    }

    /// Encode as format version `version` (an upgrade's; tests making old images).
    pub fn encode_version(&self, version: u32) -> [u8; SUPERBLOCK_SIZE] {
        use sb_off as o;
        let g = &self.geometry;
        let mut b = FixedOut::<SUPERBLOCK_SIZE>::new();
        b.array::<{ o::MAGIC }, 8>(*MAGIC)
            .u32::<{ o::VERSION }>(version)
            .u32::<{ o::BLOCK_SIZE }>(BLOCK_SIZE as u32)
            .u64::<{ o::TOTAL_BLOCKS }>(g.total_blocks)
            .u32::<{ o::LOG_SLOTS }>(g.log_slots)
            .u64::<{ o::LOG_BLOCKS }>(g.log_blocks)
            .u64::<{ o::ITABLE_START }>(g.itable_start)
            .u64::<{ o::INODE_COUNT }>(g.inode_count)
            .u64::<{ o::DATA_START }>(g.data_start)
            .u64::<{ o::DATA_BLOCKS }>(g.data_blocks)
            .array::<{ o::UUID }, 16>(self.uuid)
            .u64::<{ o::FORMAT_TIME }>(self.format_time_ns);
        let crc = crc32c::crc32c(&b.bytes()[..o::CRC]);
        *b.u32::<{ o::CRC }>(crc).bytes()
    }

    /// Decode and check a superblock read from a file of `file_len` bytes.
    pub fn decode(b: &[u8; SUPERBLOCK_SIZE], file_len: u64) -> Result<Superblock, FormatError> {
        let (version, sb) = Superblock::decode_any_version(b, file_len)?;
        Superblock::current(version, sb)
    }

    /// Decode and check a superblock of any version whose superblock has this layout (3 to
    /// 7: the fields never moved), and say which version it is. A version 3 superblock has
    /// `log_start` where this one is reserved; its geometry check fails on the file size.
    pub fn decode_any_version(b: &[u8; SUPERBLOCK_SIZE], file_len: u64) -> Result<(u32, Superblock), FormatError> {
        use sb_off as o;
        let f = Fixed::new(b);
        if f.array::<{ o::MAGIC }, 8>() != *MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = f.u32::<{ o::VERSION }>();
        if !(UPGRADABLE_FROM..=FORMAT_VERSION).contains(&version) {
            return Err(FormatError::Version { found: version, expected: FORMAT_VERSION });
        }
        let stored = f.u32::<{ o::CRC }>();
        let computed = crc32c::crc32c(&b[..o::CRC]);
        if stored != computed {
            return Err(FormatError::SuperblockChecksum { stored, computed });
        }
        let block_size = f.u32::<{ o::BLOCK_SIZE }>();
        if block_size as u64 != BLOCK_SIZE {
            return Err(FormatError::Geometry(format!("block size {block_size}")));
        }
        let geometry = Geometry {
            total_blocks: f.u64::<{ o::TOTAL_BLOCKS }>(),
            log_slots: f.u32::<{ o::LOG_SLOTS }>(),
            log_blocks: f.u64::<{ o::LOG_BLOCKS }>(),
            itable_start: f.u64::<{ o::ITABLE_START }>(),
            inode_count: f.u64::<{ o::INODE_COUNT }>(),
            data_start: f.u64::<{ o::DATA_START }>(),
            data_blocks: f.u64::<{ o::DATA_BLOCKS }>(),
        };
        geometry.check(file_len)?;
        let uuid = f.array::<{ o::UUID }, 16>();
        Ok((version, Superblock { geometry, uuid, format_time_ns: f.u64::<{ o::FORMAT_TIME }>() }))
    }

    /// Read and check the superblock of the public file `region` (of this format version).
    pub fn read(region: &PmRegion) -> Result<Superblock, FormatError> {
        let (version, sb, _) = Superblock::read_any_version(region, false)?;
        Superblock::current(version, sb)
    }

    /// `sb` if `version` is this build's, else why not.
    fn current(version: u32, sb: Superblock) -> Result<Superblock, FormatError> {
        match version {
            FORMAT_VERSION => Ok(sb),
            v if (UPGRADABLE_FROM..FORMAT_VERSION).contains(&v) => {
                Err(FormatError::NeedsUpgrade { found: v, expected: FORMAT_VERSION })
            }
            v => Err(FormatError::Version { found: v, expected: FORMAT_VERSION }),
        }
    }

    /// The superblock of `region` of any version [`Superblock::decode_any_version`] reads,
    /// and whether it came from the copy: a superblock whose checksum fails is replaced by
    /// its copy at [`SUPERBLOCK_COPY_OFF`] when that
    /// one is whole (a crash while the superblock was rewritten). `packed`: the region is a
    /// packed node (public file, then the logs), and must be exactly the node's size;
    /// otherwise it is the public file.
    pub fn read_any_version(region: &PmRegion, packed: bool) -> Result<(u32, Superblock, bool), FormatError> {
        if region.len() < BLOCK_SIZE {
            return Err(FormatError::SizeMismatch { expected: BLOCK_SIZE, found: region.len() });
        }
        let decode = |off: u64| -> Result<(u32, Superblock), FormatError> {
            let mut b = [0u8; SUPERBLOCK_SIZE];
            region.read(off, &mut b)?;
            let public = if packed {
                Fixed::new(&b).u64::<{ sb_off::TOTAL_BLOCKS }>().saturating_mul(BLOCK_SIZE)
            } else {
                region.len()
            };
            let (v, sb) = Superblock::decode_any_version(&b, public)?;
            if packed && sb.geometry.node_size() != region.len() {
                return Err(FormatError::SizeMismatch { expected: sb.geometry.node_size(), found: region.len() });
            }
            Ok((v, sb))
        };
        match decode(0) {
            Err(e @ FormatError::SuperblockChecksum { .. }) => match decode(SUPERBLOCK_COPY_OFF) {
                Ok((v, sb)) => Ok((v, sb, true)),
                Err(_) => Err(e),
            },
            other => other.map(|(v, sb)| (v, sb, false)),
        }
    }

    /// Rewrite the superblock of `region` as `self` at `version`: the copy first (persisted
    /// and fenced), then the superblock (persisted and fenced). A crash between leaves one of
    /// them whole, and [`Superblock::read`] finds it.
    pub fn rewrite(&self, region: &PmRegion, version: u32) -> Result<(), FormatError> {
        let b = self.encode_version(version);
        let copy = SUPERBLOCK_COPY_OFF;
        region.write(copy, &b)?;
        region.persist_now(copy, SUPERBLOCK_SIZE as u64)?;
        region.write(0, &b)?;
        region.persist_now(0, SUPERBLOCK_SIZE as u64)?;
        Ok(())
    }

    /// Read and check the superblock at the start of a packed node (public file, then the
    /// log files): the region must be exactly as large as the node it describes.
    pub fn read_packed(region: &PmRegion) -> Result<Superblock, FormatError> {
        let (version, sb, _) = Superblock::read_any_version(region, true)?;
        Superblock::current(version, sb)
    }
}

/// The little-endian integers of the persisted formats (shared with nicfs's own PM file).
/// The little-endian u32 at `off` of a buffer the caller sized (a buffer too short is the
/// caller's bug, and panics). pm's formats are read and built through linefs-bytes; these
/// four stay for nicfs's lease file and for tests that forge bytes.
pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

pub fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

pub fn put_le32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub fn put_le64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Superblock {
        let geometry = Geometry::compute(&FormatParams::for_size(64 << 20)).unwrap();
        Superblock { geometry, uuid: [7; 16], format_time_ns: 42 }
    }

    #[test]
    fn superblock_roundtrip() {
        let sb = sample();
        let b = sb.encode();
        assert_eq!(Superblock::decode(&b, sb.geometry.public_size()).unwrap(), sb);
        // The node's files add up to what was asked for.
        assert_eq!(sb.geometry.node_size(), 64 << 20);
        assert_eq!(sb.geometry.packed_log_off(1), sb.geometry.public_size() + sb.geometry.log_size());
    }

    #[test]
    fn superblock_rejects_corruption() {
        let sb = sample();
        let mut b = sb.encode();
        let size = sb.geometry.public_size();
        b[17] ^= 1;
        assert!(matches!(Superblock::decode(&b, size), Err(FormatError::SuperblockChecksum { .. })));
        let b = sb.encode();
        assert!(matches!(Superblock::decode(&b, 32 << 20), Err(FormatError::SizeMismatch { .. })));
        let mut b = sb.encode();
        b[0] = b'X';
        assert!(matches!(Superblock::decode(&b, size), Err(FormatError::BadMagic)));
        let mut b = sb.encode();
        b[sb_off::VERSION] = 9;
        assert!(matches!(Superblock::decode(&b, size), Err(FormatError::Version { found: 9, .. })));
    }

    #[test]
    fn geometry_rejects_bad_options() {
        assert!(Geometry::compute(&FormatParams { size: 4097, ..FormatParams::for_size(1 << 30) }).is_err());
        assert!(Geometry::compute(&FormatParams::for_size(1 << 20)).is_err());
        let g = Geometry::compute(&FormatParams::for_size(1 << 30)).unwrap();
        assert_eq!(g.data_start + g.data_blocks, g.total_blocks);
        assert_eq!(g.inode_count, 65536);
    }
}
