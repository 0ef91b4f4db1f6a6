//! The persisted structures of the public area and their byte layouts (all little-endian).
//! Readers ([`super::reader`]) and the publisher ([`super::PublicArea`]) encode and decode them
//! only through this module.
//!
//! Inode (256 bytes, in the inode table at index `ino`; all-zero = free):
//!
//! ```text
//! off len field
//!   0 120 attributes, encoded as crate::record::InodeImage (ino, size, parent, mode, …)
//! 120   8 first xattr block (0 = no extended attributes)
//! 128 120 block-map roots: 12 direct block pointers, then single, double and triple
//!         indirect pointers (0 = hole)
//! 248   4 reserved 0
//! 252   4 crc32c over bytes 0..252
//! ```
//!
//! Indirect block: 512 little-endian u64 block pointers (0 = hole). File block `i` maps
//! through `direct[i]` for i < 12, then the single (512 blocks), double (512²) and triple
//! (512³) indirect trees.
//!
//! Directory data (the directory's own file blocks, through its block map): 15 slots of
//! 272 bytes per block, slot `s` in file block `s / 15` at `(s % 15) * 272`:
//!
//! ```text
//!   0   8 ino       0 = free slot
//!   8   1 dtype     DT_* value
//!   9   1 name_len  1..=255
//!  10 255 name
//! 265   3 reserved
//! 268   4 crc32c over bytes 0..268 (a slot that fails it is free)
//! ```
//!
//! Extended attributes: the inode's attributes encoded as one *stream* (the entries of an
//! XATTRS record, see [`crate::record`]: name_len u8 | reserved \[3\] | value_len u32 | name |
//! value), at most [`XATTR_SPACE`] bytes, cut into a chain of xattr blocks:
//!
//! ```text
//!   0   4 magic       b"LFX2"
//!   4   4 used        stream bytes in this block (1..=4064)
//!   8   8 next        next block of the chain (0 = last)
//!  16   4 total       first block: stream bytes in the whole chain (else 0)
//!  20   4 count       first block: number of attributes (else 0)
//!  24   4 stream_crc  first block: crc32c of the whole stream (else 0)
//!  28   4 crc32c      over bytes 0..28, then this block's stream bytes
//!  32   … stream bytes
//! ```
//!
//! The offsets are the constants of [`inode_off`], [`dirent_off`] and [`xattr_block_off`],
//! used by the encoders and the decoders alike; `pm/tests/format_bytes.rs` pins the bytes
//! against these tables.

use crate::layout::{BLOCK_SIZE, INODE_SIZE};
use crate::record::{dtype, valid_name, InodeImage, INODE_IMAGE_LEN, NAME_MAX};
use linefs_bytes::{Fixed, FixedOut, Reader};

/// Block pointers per indirect block.
pub const PTRS_PER_BLOCK: u64 = BLOCK_SIZE / 8;
/// Block-map roots per inode: 12 direct, single, double, triple indirect.
pub const NROOTS: usize = 15;
/// Direct block pointers per inode.
pub const NDIRECT: u64 = 12;
/// Directory slot size and slots per block.
pub const DIRENT_SIZE: u64 = 272;
pub const DIRENTS_PER_BLOCK: u64 = 15;
const XATTR_MAGIC: &[u8; 4] = b"LFX2";
/// Header bytes of an xattr block.
pub const XATTR_HEADER: usize = xattr_block_off::STREAM;

/// Byte offsets of an on-PM inode's fields (the table in the module doc).
pub mod inode_off {
    /// [`crate::record::InodeImage`], laid out as [`crate::record::inode_off`].
    pub const IMAGE: usize = 0;
    pub const XATTR: usize = 120;
    /// [`super::NROOTS`] block pointers of 8 bytes.
    pub const ROOTS: usize = 128;
    pub const RESERVED: usize = 248;
    /// crc32c over bytes `0..CRC`.
    pub const CRC: usize = 252;
    const _: () = assert!(IMAGE + crate::record::INODE_IMAGE_LEN == XATTR && XATTR + 8 == ROOTS);
    const _: () = assert!(ROOTS + super::NROOTS * 8 == RESERVED && CRC + 4 == crate::layout::INODE_SIZE as usize);
}

/// Byte offsets of a directory slot's fields (the table in the module doc).
pub mod dirent_off {
    pub const INO: usize = 0;
    pub const DTYPE: usize = 8;
    pub const NAME_LEN: usize = 9;
    pub const NAME: usize = 10;
    pub const RESERVED: usize = 265;
    /// crc32c over bytes `0..CRC`.
    pub const CRC: usize = 268;
    const _: () = assert!(NAME + crate::record::NAME_MAX == RESERVED && CRC + 4 == super::DIRENT_SIZE as usize);
}

/// Byte offsets of an xattr block's header fields (the table in the module doc).
pub mod xattr_block_off {
    pub const MAGIC: usize = 0;
    pub const USED: usize = 4;
    pub const NEXT: usize = 8;
    pub const TOTAL: usize = 16;
    pub const COUNT: usize = 20;
    pub const STREAM_CRC: usize = 24;
    /// crc32c over bytes `0..CRC`, then this block's stream bytes.
    pub const CRC: usize = 28;
    pub const STREAM: usize = 32;
    const _: () = assert!(CRC + 4 == STREAM);
}
/// Stream bytes one xattr block holds.
pub const XATTR_PAYLOAD: usize = BLOCK_SIZE as usize - XATTR_HEADER;
/// Longest xattr chain.
pub const XATTR_MAX_BLOCKS: usize = 64;
/// Most bytes the encoded extended attributes of one inode may take (64 blocks, 254 KiB:
/// room for e.g. three values of Linux's maximum 64 KiB, or thousands of small ones).
pub const XATTR_SPACE: usize = XATTR_MAX_BLOCKS * XATTR_PAYLOAD;

/// Blocks of the xattr chain that holds `len` bytes of encoded attributes.
pub fn xattr_chain_blocks(len: usize) -> u64 {
    len.div_ceil(XATTR_PAYLOAD) as u64
}

/// An inode as stored in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PmInode {
    pub img: InodeImage,
    pub xattr: u64,
    pub roots: [u64; NROOTS],
}

impl PmInode {
    pub fn encode(&self) -> [u8; INODE_SIZE as usize] {
        use inode_off as o;
        let mut b = FixedOut::<{ INODE_SIZE as usize }>::new();
        b.array::<{ o::IMAGE }, INODE_IMAGE_LEN>(self.img.encode()).u64::<{ o::XATTR }>(self.xattr);
        let mut roots = [0u8; NROOTS * 8];
        for (chunk, r) in roots.chunks_exact_mut(8).zip(&self.roots) {
            chunk.copy_from_slice(&r.to_le_bytes());
        }
        b.array::<{ o::ROOTS }, { NROOTS * 8 }>(roots);
        let crc = crc32c::crc32c(&b.bytes()[..o::CRC]);
        *b.u32::<{ o::CRC }>(crc).bytes()
    }

    /// Decode; returns the inode and whether its checksum matched.
    pub fn decode(b: &[u8; INODE_SIZE as usize]) -> (PmInode, bool) {
        use inode_off as o;
        let f = Fixed::new(b);
        let mut roots = [0u64; NROOTS];
        let raw = f.array::<{ o::ROOTS }, { NROOTS * 8 }>();
        for (r, chunk) in roots.iter_mut().zip(raw.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            *r = u64::from_le_bytes(w);
        }
        let img = InodeImage::read(&f.array::<{ o::IMAGE }, INODE_IMAGE_LEN>());
        let ino = PmInode { img, xattr: f.u64::<{ o::XATTR }>(), roots };
        (ino, f.u32::<{ o::CRC }>() == crc32c::crc32c(&b[..o::CRC]))
    }

    pub fn is_dir(&self) -> bool {
        self.img.mode & libc::S_IFMT == libc::S_IFDIR
    }

    /// The file type bits of the mode (0 for a free inode).
    pub fn kind(&self) -> u32 {
        self.img.mode & libc::S_IFMT
    }
}

/// Encode a directory slot naming `ino` (of type `dt`) as `name` (1..=255 bytes).
pub fn encode_dirent(ino: u64, dt: u8, name: &[u8]) -> [u8; DIRENT_SIZE as usize] {
    use dirent_off as o;
    let mut padded = [0u8; NAME_MAX];
    padded[..name.len()].copy_from_slice(name);
    let mut b = FixedOut::<{ DIRENT_SIZE as usize }>::new();
    b.u64::<{ o::INO }>(ino)
        .u8::<{ o::DTYPE }>(dt)
        .u8::<{ o::NAME_LEN }>(name.len() as u8)
        .array::<{ o::NAME }, NAME_MAX>(padded);
    let crc = crc32c::crc32c(&b.bytes()[..o::CRC]);
    *b.u32::<{ o::CRC }>(crc).bytes()
}

/// Decode a directory slot: `(ino, dtype, name)` if it holds a valid entry for an inode
/// below `inode_count`; None for a free, torn or corrupt slot (or fewer bytes than a slot).
pub fn decode_dirent(s: &[u8], inode_count: u64) -> Option<(u64, u8, &[u8])> {
    use dirent_off as o;
    let s = s.first_chunk::<{ DIRENT_SIZE as usize }>()?;
    let f = Fixed::new(s);
    let child = f.u64::<{ o::INO }>();
    let nl = f.u8::<{ o::NAME_LEN }>() as usize;
    // At most NAME_MAX bytes from NAME: always inside the slot.
    let name = Reader::new(&s[o::NAME..o::RESERVED]).bytes("directory slot name", nl).ok()?;
    let dt = f.u8::<{ o::DTYPE }>();
    let valid = child != 0
        && f.u32::<{ o::CRC }>() == crc32c::crc32c(&s[..o::CRC])
        && (1..=NAME_MAX).contains(&nl)
        && dtype::valid(dt)
        && valid_name(name)
        && child < inode_count;
    valid.then_some((child, dt, name))
}

/// The header of one xattr block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XattrBlock {
    /// Stream bytes in this block.
    pub used: usize,
    /// Next block of the chain (0 = last).
    pub next: u64,
    /// First block only (else 0): stream bytes of the whole chain, number of attributes,
    /// crc32c of the whole stream.
    pub total: usize,
    pub count: usize,
    pub stream_crc: u32,
}

impl XattrBlock {
    /// Encode the block into `img` (one block): header, then `part` (its stream bytes).
    pub fn encode(&self, part: &[u8], img: &mut [u8]) {
        use xattr_block_off as o;
        let mut h = FixedOut::<{ o::STREAM }>::new();
        h.array::<{ o::MAGIC }, 4>(*XATTR_MAGIC)
            .u32::<{ o::USED }>(part.len() as u32)
            .u64::<{ o::NEXT }>(self.next)
            .u32::<{ o::TOTAL }>(self.total as u32)
            .u32::<{ o::COUNT }>(self.count as u32)
            .u32::<{ o::STREAM_CRC }>(self.stream_crc);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h.bytes()[..o::CRC]), part);
        h.u32::<{ o::CRC }>(crc);
        img.fill(0);
        img[..o::STREAM].copy_from_slice(h.bytes());
        img[o::STREAM..o::STREAM + part.len()].copy_from_slice(part);
    }

    /// Decode a block; None if its magic, length or checksum is wrong (torn or corrupt).
    /// The stream bytes are `img[XATTR_HEADER..XATTR_HEADER + used]`.
    pub fn decode(img: &[u8]) -> Option<XattrBlock> {
        use xattr_block_off as o;
        let mut r = Reader::new(img);
        let h: Fixed<'_, { o::STREAM }> = r.fixed("xattr block header").ok()?;
        let used = h.u32::<{ o::USED }>() as usize;
        if h.array::<{ o::MAGIC }, 4>() != *XATTR_MAGIC || used == 0 || used > XATTR_PAYLOAD {
            return None;
        }
        let stream = r.bytes("xattr block stream", used).ok()?;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&h.bytes()[..o::CRC]), stream);
        if crc != h.u32::<{ o::CRC }>() {
            return None;
        }
        Some(XattrBlock {
            used,
            next: h.u64::<{ o::NEXT }>(),
            total: h.u32::<{ o::TOTAL }>() as usize,
            count: h.u32::<{ o::COUNT }>() as usize,
            stream_crc: h.u32::<{ o::STREAM_CRC }>(),
        })
    }
}

/// Position of file block `idx` in the block map: root slot, then indices per level.
pub fn map_path(idx: u64) -> Option<(usize, [u64; 3], usize)> {
    const PPB: u64 = PTRS_PER_BLOCK;
    if idx < NDIRECT {
        return Some((idx as usize, [0; 3], 0));
    }
    let mut i = idx - NDIRECT;
    if i < PPB {
        return Some((12, [i, 0, 0], 1));
    }
    i -= PPB;
    if i < PPB * PPB {
        return Some((13, [i / PPB, i % PPB, 0], 2));
    }
    i -= PPB * PPB;
    if i < PPB * PPB * PPB {
        return Some((14, [i / (PPB * PPB), (i / PPB) % PPB, i % PPB], 3));
    }
    None
}

/// First file block covered by root slot `r` and the levels of indirection below it.
pub fn root_span(r: usize) -> (u64, u32) {
    const PPB: u64 = PTRS_PER_BLOCK;
    match r {
        0..=11 => (r as u64, 0),
        12 => (NDIRECT, 1),
        13 => (NDIRECT + PPB, 2),
        _ => (NDIRECT + PPB + PPB * PPB, 3),
    }
}

/// File blocks one pointer at `level` levels of indirection spans.
pub fn span_of(level: u32) -> u64 {
    PTRS_PER_BLOCK.pow(level)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary bytes where a directory slot, an xattr block or an inode should be never
        /// panic the decoders, and whatever decodes encodes back to the same structure.
        #[test]
        fn decoders_take_arbitrary_bytes(slot in prop::collection::vec(any::<u8>(), DIRENT_SIZE as usize),
                                         block in prop::collection::vec(any::<u8>(), BLOCK_SIZE as usize),
                                         inode in prop::collection::vec(any::<u8>(), INODE_SIZE as usize),
                                         inode_count in 0u64..1 << 20) {
            if let Some((ino, dt, name)) = decode_dirent(&slot, inode_count) {
                prop_assert!(ino != 0 && ino < inode_count && dtype::valid(dt) && !name.is_empty());
                prop_assert_eq!(&encode_dirent(ino, dt, name)[..], &slot[..]);
            }
            if let Some(x) = XattrBlock::decode(&block) {
                let mut again = vec![0u8; BLOCK_SIZE as usize];
                x.encode(&block[XATTR_HEADER..XATTR_HEADER + x.used], &mut again);
                prop_assert_eq!(XattrBlock::decode(&again), Some(x));
            }
            let raw: [u8; INODE_SIZE as usize] = inode.try_into().unwrap();
            let (i, ok) = PmInode::decode(&raw);
            if ok {
                prop_assert_eq!(&i.encode()[..], &raw[..]);
            }
        }
    }

    #[test]
    fn valid_structures_decode() {
        let s = encode_dirent(7, dtype::REG, b"name");
        assert_eq!(decode_dirent(&s, 100), Some((7, dtype::REG, &b"name"[..])));
        assert_eq!(decode_dirent(&s, 7), None, "inode beyond the table");
        let x = XattrBlock { used: 3, next: 9, total: 3, count: 1, stream_crc: 5 };
        let mut img = vec![0u8; BLOCK_SIZE as usize];
        x.encode(b"abc", &mut img);
        assert_eq!(XattrBlock::decode(&img), Some(x));
        img[XATTR_HEADER] ^= 1;
        assert_eq!(XattrBlock::decode(&img), None, "a changed stream byte fails the checksum");
    }
}
