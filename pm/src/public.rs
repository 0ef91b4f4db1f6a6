//! The public area: inode table, directories, per-file block maps and block allocation,
//! and the idempotent publication of log records into it.
//!
//! # Persisted structures (little-endian)
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
//! through direct[i] for i < 12, then the single (512 blocks), double (512²) and triple
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
//! XATTRS record, see [`crate::record`]: name_len u8 | reserved [3] | value_len u32 | name |
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
//! Publication rewrites a chain in place, appending newly allocated blocks (written and
//! fenced before the pointer to them) and freeing the surplus; a crash in the middle leaves
//! blocks of two versions, which the per-block and whole-stream checksums reveal, and
//! recovery's replay of the log rewrites it.
//!
//! # Idempotent publication
//!
//! Records are blind post-images (see [`crate::record`]), and every structure is updated
//! by key (a name's slot is found by name, a block through the block map), so applying a
//! log suffix again over a public area that already holds any part of it converges to the
//! same state. Recovery relies on this: it re-publishes from the last checkpoint.
//!
//! Ordering rules that make a crash mid-publication safe:
//! * a newly allocated block (data, indirect, directory, xattr) is fully written — zero
//!   fill included — persisted and fenced *before* a pointer to it is persisted, so no
//!   crash state links a block with stale content;
//! * a freed block goes to a pending list and is reused only after the caller's checkpoint
//!   (the log's published LSN) is durable, so no crash state has two owners of one block;
//! * the block allocator is not persisted: it is rebuilt at load from the block maps.

use crate::layout::{le32, le64, FormatError, Geometry, BLOCK_SIZE, INODE_SIZE};
use crate::record::{
    dtype, get_xattrs, put_xattr, xattrs_len, InodeImage, Record, INODE_IMAGE_LEN, NAME_MAX, XATTR_VALUE_MAX,
};
use crate::region::PmRegion;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

const PPB: u64 = BLOCK_SIZE / 8;
const NROOTS: usize = 15;
const NDIRECT: u64 = 12;
/// Directory slot size and slots per block.
pub const DIRENT_SIZE: u64 = 272;
pub const DIRENTS_PER_BLOCK: u64 = 15;
const XATTR_MAGIC: &[u8; 4] = b"LFX2";
const XATTR_HEADER: usize = 32;
/// Stream bytes one xattr block holds.
const XATTR_PAYLOAD: usize = BLOCK_SIZE as usize - XATTR_HEADER;
/// Longest xattr chain.
const XATTR_MAX_BLOCKS: usize = 64;
/// Most bytes the encoded extended attributes of one inode may take (64 blocks, 254 KiB:
/// room for e.g. three values of Linux's maximum 64 KiB, or thousands of small ones).
pub const XATTR_SPACE: usize = XATTR_MAX_BLOCKS * XATTR_PAYLOAD;

/// Blocks of the xattr chain that holds `len` bytes of encoded attributes.
pub fn xattr_chain_blocks(len: usize) -> u64 {
    len.div_ceil(XATTR_PAYLOAD) as u64
}

/// Errors while publishing a record: the record is invalid for the current public state
/// (only possible with a buggy or hostile log writer), the public area is full, or PM
/// access failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("invalid record for inode {ino}: {why}")]
    Invalid { ino: u64, why: String },
    #[error("public area full: no free data block")]
    NoSpace,
    #[error(transparent)]
    Format(#[from] FormatError),
}

impl From<crate::region::PmError> for PublishError {
    fn from(e: crate::region::PmError) -> Self {
        PublishError::Format(e.into())
    }
}

type Result<T, E = PublishError> = std::result::Result<T, E>;

/// Extended attributes as (name, value) pairs.
pub type XattrList = Vec<(Vec<u8>, Vec<u8>)>;

/// An inode as stored in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PmInode {
    pub img: InodeImage,
    pub xattr: u64,
    pub roots: [u64; NROOTS],
}

impl PmInode {
    fn encode(&self) -> [u8; INODE_SIZE as usize] {
        let mut b = [0u8; INODE_SIZE as usize];
        self.img.encode_into(&mut b[..INODE_IMAGE_LEN]);
        b[120..128].copy_from_slice(&self.xattr.to_le_bytes());
        for (i, r) in self.roots.iter().enumerate() {
            b[128 + i * 8..136 + i * 8].copy_from_slice(&r.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b[..252]);
        b[252..256].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode; returns the inode and whether its checksum matched.
    fn decode(b: &[u8; INODE_SIZE as usize]) -> (PmInode, bool) {
        let mut roots = [0u64; NROOTS];
        for (i, r) in roots.iter_mut().enumerate() {
            *r = le64(b, 128 + i * 8);
        }
        let ino = PmInode { img: InodeImage::decode(&b[..INODE_IMAGE_LEN]), xattr: le64(b, 120), roots };
        (ino, le32(b, 252) == crc32c::crc32c(&b[..252]))
    }

    fn is_dir(&self) -> bool {
        self.img.mode & libc::S_IFMT == libc::S_IFDIR
    }
}

/// One inode found by [`PublicArea::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedInode {
    pub img: InodeImage,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Data blocks mapped (for `st_blocks`).
    pub blocks: u64,
}

/// A directory entry found by [`PublicArea::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedDirent {
    pub name: Vec<u8>,
    pub ino: u64,
    pub dtype: u8,
}

/// What [`PublicArea::load`] found: every live inode and every directory's entries (in
/// slot order).
#[derive(Debug, Default)]
pub struct Loaded {
    pub inodes: HashMap<u64, LoadedInode>,
    pub dirs: HashMap<u64, Vec<LoadedDirent>>,
}

#[derive(Debug, Default)]
struct DirSlots {
    by_name: HashMap<Vec<u8>, u64>,
    free: BTreeSet<u64>,
    nslots: u64,
}

/// The DRAM allocator of data blocks, rebuilt from the block maps at load.
#[derive(Debug)]
struct Allocator {
    first: u64,
    /// Number of data blocks.
    total: u64,
    used: Vec<u64>,
    free: u64,
    next: u64,
    pending: Vec<u64>,
}

impl Allocator {
    fn new(geo: &Geometry) -> Allocator {
        Allocator {
            first: geo.data_start,
            total: geo.data_blocks,
            used: vec![0; geo.data_blocks.div_ceil(64) as usize],
            free: geo.data_blocks,
            next: 0,
            pending: Vec::new(),
        }
    }

    fn test(&self, i: u64) -> bool {
        self.used[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Mark `block` used at load; false if it already was (two owners).
    fn claim(&mut self, block: u64) -> bool {
        let i = block - self.first;
        if self.test(i) {
            return false;
        }
        self.used[(i / 64) as usize] |= 1 << (i % 64);
        self.free -= 1;
        true
    }

    fn alloc(&mut self, goal: Option<u64>) -> Option<u64> {
        if self.free == 0 {
            return None;
        }
        let total = self.total;
        let start = goal.map(|g| g.saturating_sub(self.first)).filter(|&g| g < total).unwrap_or(self.next);
        let mut i = start;
        loop {
            let w = self.used[(i / 64) as usize];
            if w == u64::MAX {
                i = (i / 64 + 1) * 64;
            } else if w & (1 << (i % 64)) == 0 {
                break;
            } else {
                i += 1;
            }
            if i >= total {
                i = 0;
            }
            if i == start {
                return None;
            }
        }
        self.used[(i / 64) as usize] |= 1 << (i % 64);
        self.free -= 1;
        self.next = i + 1;
        if self.next >= self.total {
            self.next = 0;
        }
        Some(self.first + i)
    }

    /// Give back a block just allocated that nothing persisted points to.
    fn unclaim(&mut self, block: u64) {
        let i = block - self.first;
        if self.test(i) {
            self.used[(i / 64) as usize] &= !(1 << (i % 64));
            self.free += 1;
        }
    }

    fn release(&mut self) {
        for b in std::mem::take(&mut self.pending) {
            let i = b - self.first;
            self.used[(i / 64) as usize] &= !(1 << (i % 64));
            self.free += 1;
        }
    }
}

/// The public area of one PM region and the publisher's DRAM state for it.
pub struct PublicArea {
    region: Arc<PmRegion>,
    geo: Geometry,
    alloc: Allocator,
    dirs: HashMap<u64, DirSlots>,
    /// Mapped data blocks per inode.
    nblocks: HashMap<u64, u64>,
    /// Inodes (or their xattr blocks) that failed their checksum at load: torn by a crash
    /// during publication, to be rewritten by recovery; any left afterwards are corrupt.
    suspect_inodes: HashSet<u64>,
    suspect_xattrs: HashSet<u64>,
}

/// Whether a set of extended attributes can be published: names of 1..=255 bytes, values of
/// at most [`XATTR_VALUE_MAX`], at most [`XATTR_SPACE`] bytes encoded.
fn check_xattrs(ino: u64, attrs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
    if attrs.iter().any(|(n, v)| n.is_empty() || n.len() > NAME_MAX || v.len() > XATTR_VALUE_MAX) {
        return Err(invalid(ino, "extended attribute name or value of invalid length"));
    }
    if xattrs_len(attrs.iter().map(|(n, v)| (&n[..], &v[..]))) > XATTR_SPACE {
        return Err(invalid(ino, "extended attributes exceed the xattr space of an inode"));
    }
    Ok(())
}

fn invalid(ino: u64, why: impl Into<String>) -> PublishError {
    PublishError::Invalid { ino, why: why.into() }
}

/// Position of file block `idx` in the block map: root slot, then indices per level.
fn map_path(idx: u64) -> Option<(usize, [u64; 3], usize)> {
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

/// First file block covered by root slot `r` and the blocks each of its pointers spans
/// at the top level.
fn root_span(r: usize) -> (u64, u32) {
    match r {
        0..=11 => (r as u64, 0),
        12 => (NDIRECT, 1),
        13 => (NDIRECT + PPB, 2),
        _ => (NDIRECT + PPB + PPB * PPB, 3),
    }
}

fn span_of(level: u32) -> u64 {
    PPB.pow(level)
}

fn dirent_crc(b: &[u8]) -> u32 {
    crc32c::crc32c(&b[..268])
}

impl PublicArea {
    /// Write an empty public area: zeroed inode table and a root directory (inode 1) owned
    /// by `uid`/`gid` with `mode` permissions.
    pub fn format(region: &PmRegion, geo: &Geometry, root: &InodeImage) -> Result<(), FormatError> {
        let start = geo.itable_start * BLOCK_SIZE;
        let len = (geo.data_start - geo.itable_start) * BLOCK_SIZE;
        region.zero(start, len)?;
        region.persist(start, len)?;
        let ino = PmInode { img: *root, ..Default::default() };
        region.write(geo.inode_off(root.ino), &ino.encode())?;
        region.persist(geo.inode_off(root.ino), INODE_SIZE)?;
        region.fence();
        Ok(())
    }

    /// Read the public area: rebuild the allocator and directory slot maps, and return every
    /// live inode and directory entry. Checksum failures of inodes and xattr blocks are
    /// remembered as suspect (see [`PublicArea::check_suspects`]); block pointers out of range
    /// or shared by two owners are corruption and refuse the load.
    pub fn load(region: Arc<PmRegion>, geo: Geometry) -> Result<(PublicArea, Loaded), FormatError> {
        let mut pa = PublicArea {
            alloc: Allocator::new(&geo),
            region,
            geo,
            dirs: HashMap::new(),
            nblocks: HashMap::new(),
            suspect_inodes: HashSet::new(),
            suspect_xattrs: HashSet::new(),
        };
        let mut loaded = Loaded::default();
        let table = geo.itable_start * BLOCK_SIZE;
        let mut block = vec![0u8; BLOCK_SIZE as usize];
        let per = (BLOCK_SIZE / INODE_SIZE) as usize;
        for tb in 0..(geo.data_start - geo.itable_start) {
            pa.region.read(table + tb * BLOCK_SIZE, &mut block)?;
            for k in 0..per {
                let ino = tb * per as u64 + k as u64;
                let raw: &[u8; INODE_SIZE as usize] =
                    block[k * INODE_SIZE as usize..(k + 1) * INODE_SIZE as usize].try_into().expect("inode size");
                if ino == 0 || raw.iter().all(|&b| b == 0) {
                    continue;
                }
                let (inode, ok) = PmInode::decode(raw);
                if !ok {
                    pa.suspect_inodes.insert(ino);
                }
                if inode.img.mode == 0 {
                    // A free slot that is not all-zero: only a torn free leaves that.
                    pa.suspect_inodes.insert(ino);
                    continue;
                }
                if inode.img.ino != ino && ok {
                    return Err(corrupt(ino, format!("inode records number {}", inode.img.ino)));
                }
                let mut inode = inode;
                inode.img.ino = ino;
                let blocks = pa.claim_tree(ino, &inode)?;
                pa.nblocks.insert(ino, blocks);
                let mut xattrs = Vec::new();
                if inode.xattr != 0 {
                    if !pa.geo.is_data_block(inode.xattr) {
                        return Err(corrupt(ino, format!("xattr block pointer {} outside the data area", inode.xattr)));
                    }
                    let (chain, attrs) = pa.read_xattrs(inode.xattr)?;
                    for b in chain {
                        pa.claim(ino, b)?;
                    }
                    match attrs {
                        Some(x) => xattrs = x,
                        None => {
                            pa.suspect_xattrs.insert(ino);
                        }
                    }
                }
                if inode.is_dir() {
                    let ents = pa.load_dir(ino, &inode)?;
                    loaded.dirs.insert(ino, ents);
                }
                loaded.inodes.insert(ino, LoadedInode { img: inode.img, xattrs, blocks });
            }
        }
        Ok((pa, loaded))
    }

    /// After recovery has re-published the log: fail if an inode or xattr block that was
    /// torn at load was not rewritten (then it was not a crash artefact but corruption).
    pub fn check_suspects(&self) -> Result<(), FormatError> {
        if let Some(ino) = self.suspect_inodes.iter().min() {
            return Err(corrupt(*ino, "inode checksum mismatch".into()));
        }
        if let Some(ino) = self.suspect_xattrs.iter().min() {
            return Err(corrupt(*ino, "xattr block checksum mismatch".into()));
        }
        Ok(())
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn region(&self) -> &Arc<PmRegion> {
        &self.region
    }

    /// Data blocks free now (pending frees not counted).
    pub fn free_blocks(&self) -> u64 {
        self.alloc.free
    }

    /// Data blocks freed by publication and waiting for the checkpoint.
    pub fn pending_free_blocks(&self) -> u64 {
        self.alloc.pending.len() as u64
    }

    /// Mapped data blocks of `ino`.
    pub fn file_blocks(&self, ino: u64) -> u64 {
        self.nblocks.get(&ino).copied().unwrap_or(0)
    }

    fn claim(&mut self, ino: u64, block: u64) -> Result<(), FormatError> {
        if !self.geo.is_data_block(block) {
            return Err(corrupt(ino, format!("block pointer {block} outside the data area")));
        }
        if !self.alloc.claim(block) {
            return Err(corrupt(ino, format!("block {block} has two owners")));
        }
        Ok(())
    }

    /// Claim every block of an inode's map; returns its data-block count.
    fn claim_tree(&mut self, ino: u64, inode: &PmInode) -> Result<u64, FormatError> {
        let mut data = 0;
        for (r, &p) in inode.roots.iter().enumerate() {
            if p == 0 {
                continue;
            }
            self.claim(ino, p)?;
            let (_, level) = root_span(r);
            data += if level == 0 { 1 } else { self.claim_indirect(ino, p, level)? };
        }
        Ok(data)
    }

    fn claim_indirect(&mut self, ino: u64, block: u64, level: u32) -> Result<u64, FormatError> {
        let ptrs = self.read_ptrs(block)?;
        let mut data = 0;
        for &p in ptrs.iter().filter(|&&p| p != 0) {
            self.claim(ino, p)?;
            data += if level == 1 { 1 } else { self.claim_indirect(ino, p, level - 1)? };
        }
        Ok(data)
    }

    fn read_ptrs(&self, block: u64) -> Result<Vec<u64>, FormatError> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        self.region.read(block * BLOCK_SIZE, &mut b)?;
        Ok(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).collect())
    }

    fn load_dir(&mut self, ino: u64, inode: &PmInode) -> Result<Vec<LoadedDirent>, FormatError> {
        let mut slots = DirSlots::default();
        let mut out = Vec::new();
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        let mut idx = 0u64;
        while let Some(block) = self.lookup(inode, idx)? {
            self.region.read(block * BLOCK_SIZE, &mut b)?;
            for k in 0..DIRENTS_PER_BLOCK {
                let slot = idx * DIRENTS_PER_BLOCK + k;
                let s = &b[(k * DIRENT_SIZE) as usize..((k + 1) * DIRENT_SIZE) as usize];
                let child = le64(s, 0);
                let nl = s[9] as usize;
                let valid = child != 0
                    && le32(s, 268) == dirent_crc(s)
                    && (1..=NAME_MAX).contains(&nl)
                    && dtype::valid(s[8])
                    && crate::record::valid_name(&s[10..10 + nl])
                    && child < self.geo.inode_count;
                if valid && !slots.by_name.contains_key(&s[10..10 + nl]) {
                    slots.by_name.insert(s[10..10 + nl].to_vec(), slot);
                    out.push(LoadedDirent { name: s[10..10 + nl].to_vec(), ino: child, dtype: s[8] });
                } else {
                    slots.free.insert(slot);
                }
            }
            idx += 1;
            slots.nslots = idx * DIRENTS_PER_BLOCK;
        }
        self.dirs.insert(ino, slots);
        Ok(out)
    }

    /// Follow the xattr chain from `first`: the blocks it is made of (up to and including
    /// the first that fails its checks, whose `next` is not followed) and the attributes, or
    /// `None` if a block or the stream fails its checks (torn by a crash, or corrupt).
    fn read_xattrs(&self, first: u64) -> Result<(Vec<u64>, Option<XattrList>), FormatError> {
        let mut chain = Vec::new();
        let mut stream = Vec::new();
        let (mut total, mut count, mut stream_crc) = (0, 0, 0);
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        let mut blk = first;
        loop {
            chain.push(blk);
            self.region.read(blk * BLOCK_SIZE, &mut b)?;
            let used = le32(&b, 4) as usize;
            if &b[0..4] != XATTR_MAGIC || used == 0 || used > XATTR_PAYLOAD {
                return Ok((chain, None));
            }
            let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..28]), &b[XATTR_HEADER..XATTR_HEADER + used]);
            if crc != le32(&b, 28) {
                return Ok((chain, None));
            }
            if chain.len() == 1 {
                (total, count, stream_crc) = (le32(&b, 16) as usize, le32(&b, 20) as usize, le32(&b, 24));
            }
            stream.extend_from_slice(&b[XATTR_HEADER..XATTR_HEADER + used]);
            let next = le64(&b, 8);
            if next == 0 {
                break;
            }
            // A pointer that passed the checksum but leads nowhere sensible: corrupt.
            if !self.geo.is_data_block(next) || chain.len() >= XATTR_MAX_BLOCKS || chain.contains(&next) {
                return Ok((chain, None));
            }
            blk = next;
        }
        if stream.len() != total || crc32c::crc32c(&stream) != stream_crc {
            return Ok((chain, None));
        }
        Ok((chain, get_xattrs(&stream, count)))
    }

    /// Read inode `ino` from the table (checksum not required: callers hold it live).
    pub fn read_inode(&self, ino: u64) -> Result<PmInode, FormatError> {
        if ino == 0 || ino >= self.geo.inode_count {
            return Err(corrupt(ino, "inode number out of range".into()));
        }
        let mut b = [0u8; INODE_SIZE as usize];
        self.region.read(self.geo.inode_off(ino), &mut b)?;
        Ok(PmInode::decode(&b).0)
    }

    fn write_inode(&mut self, inode: &PmInode) -> Result<()> {
        let off = self.geo.inode_off(inode.img.ino);
        self.region.write(off, &inode.encode())?;
        self.region.persist(off, INODE_SIZE)?;
        self.suspect_inodes.remove(&inode.img.ino);
        Ok(())
    }

    /// The block holding file block `idx` of `inode`, if mapped.
    pub fn lookup(&self, inode: &PmInode, idx: u64) -> Result<Option<u64>, FormatError> {
        let Some((root, sub, levels)) = map_path(idx) else { return Ok(None) };
        let mut p = inode.roots[root];
        for &s in &sub[..levels] {
            if p == 0 {
                return Ok(None);
            }
            if !self.geo.is_data_block(p) {
                return Err(corrupt(inode.img.ino, format!("block pointer {p} outside the data area")));
            }
            p = self.region.read_u64(p * BLOCK_SIZE + s * 8)?;
        }
        if p == 0 {
            return Ok(None);
        }
        if !self.geo.is_data_block(p) {
            return Err(corrupt(inode.img.ino, format!("block pointer {p} outside the data area")));
        }
        Ok(Some(p))
    }

    /// Read `buf.len()` bytes of file `ino` from `off`; holes read as zeros. Reads only
    /// published data (no size check: the caller clips to the file size).
    pub fn read_file(&self, ino: u64, off: u64, buf: &mut [u8]) -> Result<(), FormatError> {
        let inode = self.read_inode(ino)?;
        let mut done = 0usize;
        while done < buf.len() {
            let pos = off + done as u64;
            let idx = pos / BLOCK_SIZE;
            let within = pos % BLOCK_SIZE;
            let n = ((BLOCK_SIZE - within) as usize).min(buf.len() - done);
            match self.lookup(&inode, idx)? {
                Some(b) => self.region.read(b * BLOCK_SIZE + within, &mut buf[done..done + n])?,
                None => buf[done..done + n].fill(0),
            }
            done += n;
        }
        Ok(())
    }

    /// Whether file block `idx` of `ino` is mapped in the public area.
    pub fn is_mapped(&self, ino: u64, idx: u64) -> Result<bool, FormatError> {
        Ok(self.lookup(&self.read_inode(ino)?, idx)?.is_some())
    }

    fn alloc_zeroed(&mut self, goal: Option<u64>) -> Result<u64> {
        let b = self.alloc.alloc(goal).ok_or(PublishError::NoSpace)?;
        self.region.zero(b * BLOCK_SIZE, BLOCK_SIZE)?;
        self.region.persist(b * BLOCK_SIZE, BLOCK_SIZE)?;
        Ok(b)
    }

    /// Link `block` as file block `idx` of `inode` (in DRAM copy; indirect blocks are
    /// allocated, zeroed and fenced before being linked). The inode itself is written by
    /// the caller.
    fn link(&mut self, inode: &mut PmInode, idx: u64, block: u64) -> Result<()> {
        let ino = inode.img.ino;
        let (root, sub, levels) = map_path(idx).ok_or_else(|| invalid(ino, "offset beyond the block map"))?;
        if levels == 0 {
            inode.roots[root] = block;
            return Ok(());
        }
        if inode.roots[root] == 0 {
            let nb = self.alloc_zeroed(None)?;
            self.region.fence();
            inode.roots[root] = nb;
        }
        let mut p = inode.roots[root];
        for (l, &s) in sub[..levels].iter().enumerate() {
            let slot = p * BLOCK_SIZE + s * 8;
            if l + 1 == levels {
                self.region.write_u64(slot, block)?;
                self.region.persist(slot, 8)?;
                break;
            }
            let mut next = self.region.read_u64(slot)?;
            if next == 0 {
                next = self.alloc_zeroed(None)?;
                self.region.fence();
                self.region.write_u64(slot, next)?;
                self.region.persist(slot, 8)?;
            }
            p = next;
        }
        Ok(())
    }

    fn free_block(&mut self, ino: u64, block: u64, data: bool) {
        self.alloc.pending.push(block);
        if data {
            if let Some(n) = self.nblocks.get_mut(&ino) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Unmap and free file blocks in [from, to); indirect blocks wholly inside the range are
    /// freed too.
    fn free_range(&mut self, inode: &mut PmInode, from: u64, to: u64) -> Result<()> {
        let ino = inode.img.ino;
        for r in 0..NROOTS {
            let p = inode.roots[r];
            if p == 0 {
                continue;
            }
            let (base, level) = root_span(r);
            let span = if level == 0 { 1 } else { span_of(level) };
            if base >= to || base + span <= from {
                continue;
            }
            if level > 0 {
                self.free_indirect(ino, p, level, base, from, to)?;
            }
            if from <= base && base + span <= to {
                self.free_block(ino, p, level == 0);
                inode.roots[r] = 0;
            }
        }
        Ok(())
    }

    fn free_indirect(&mut self, ino: u64, block: u64, level: u32, base: u64, from: u64, to: u64) -> Result<()> {
        let ptrs = self.read_ptrs(block)?;
        let child_span = span_of(level - 1);
        for (i, &c) in ptrs.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let cb = base + i as u64 * child_span;
            if cb >= to || cb + child_span <= from {
                continue;
            }
            if !self.geo.is_data_block(c) {
                return Err(invalid(ino, format!("block pointer {c} outside the data area")));
            }
            if level > 1 {
                self.free_indirect(ino, c, level - 1, cb, from, to)?;
            }
            if from <= cb && cb + child_span <= to {
                let slot = block * BLOCK_SIZE + i as u64 * 8;
                self.region.write_u64(slot, 0)?;
                self.region.persist(slot, 8)?;
                self.free_block(ino, c, level == 1);
            }
        }
        Ok(())
    }

    /// Checks a record against the public state before it is applied. A hostile or buggy
    /// log must not be able to corrupt the public area.
    fn live_inode(&self, ino: u64) -> Result<PmInode> {
        if ino == 0 || ino >= self.geo.inode_count {
            return Err(invalid(ino, "inode number out of range"));
        }
        let inode = self.read_inode(ino)?;
        if inode.img.mode == 0 {
            return Err(invalid(ino, "inode is not allocated"));
        }
        Ok(inode)
    }

    /// Check that every record of one entry can be applied, without changing anything, so
    /// that an entry is published entirely or not at all. Records may depend on earlier
    /// records of the same entry (a file created and written in one entry).
    pub fn validate(&self, records: &[Record]) -> Result<()> {
        self.validate_with(records, &HashSet::new())
    }

    /// [`PublicArea::validate`] for recovery. A crash in the middle of a publication batch
    /// leaves the public area *ahead* of the checkpoint: later entries of the batch may
    /// already have freed an inode, or freed it and created another file in its place, that
    /// an earlier entry still writes to. Replaying the suffix converges all the same (the
    /// records are blind post-images, and a block freed in the batch is not reused before
    /// the checkpoint), so for the inodes in `unsettled` — those the suffix itself frees or
    /// creates — whether they are allocated, and as what, is not held against an entry;
    /// everything else is checked as usual.
    pub fn validate_with(&self, records: &[Record], unsettled: &HashSet<u64>) -> Result<()> {
        // ino -> Some(Some(mode)): allocated; Some(None): free; None: unknown (unsettled).
        let mut local: HashMap<u64, Option<u32>> = HashMap::new();
        let mode_of = |local: &HashMap<u64, Option<u32>>, ino: u64| -> Result<Option<Option<u32>>> {
            if ino == 0 || ino >= self.geo.inode_count {
                return Err(invalid(ino, "inode number out of range"));
            }
            if let Some(m) = local.get(&ino) {
                return Ok(Some(*m));
            }
            if unsettled.contains(&ino) {
                return Ok(None);
            }
            let m = self.read_inode(ino)?.img.mode;
            Ok(Some((m != 0).then_some(m)))
        };
        // The file type of a live inode (None: unsettled, any type is accepted).
        let live = |local: &HashMap<u64, Option<u32>>, ino: u64| -> Result<Option<u32>> {
            match mode_of(local, ino)? {
                None => Ok(None),
                Some(None) => Err(invalid(ino, "inode is not allocated")),
                Some(Some(m)) => Ok(Some(m & libc::S_IFMT)),
            }
        };
        for rec in records {
            match rec {
                Record::Inode { fresh, img } => {
                    if !dtype::valid(dtype_of_mode(img.mode)) {
                        return Err(invalid(img.ino, format!("mode {:o} has no file type", img.mode)));
                    }
                    let cur = mode_of(&local, img.ino)?;
                    if !fresh {
                        match cur {
                            Some(None) => return Err(invalid(img.ino, "attributes for an unallocated inode")),
                            Some(Some(m)) if m & libc::S_IFMT != img.mode & libc::S_IFMT => {
                                return Err(invalid(img.ino, "file type changed"))
                            }
                            _ => {}
                        }
                    }
                    local.insert(img.ino, Some(img.mode));
                }
                Record::Dirent { dir, ino, .. } => {
                    if live(&local, *dir)?.is_some_and(|k| k != libc::S_IFDIR) {
                        return Err(invalid(*dir, "directory entry in a non-directory"));
                    }
                    if *ino != 0 {
                        live(&local, *ino)?;
                    }
                }
                Record::Write { ino, len, data_off, .. } => {
                    let k = live(&local, *ino)?;
                    if k.is_some_and(|k| k != libc::S_IFREG && k != libc::S_IFLNK) {
                        return Err(invalid(*ino, "data write to a non-file"));
                    }
                    if data_off.checked_add(*len).is_none_or(|e| e > self.region.len()) {
                        return Err(invalid(*ino, "write data outside the region"));
                    }
                }
                Record::Truncate { ino, .. } | Record::Punch { ino, .. } => {
                    live(&local, *ino)?;
                }
                Record::Alloc { ino, .. } => {
                    if live(&local, *ino)?.is_some_and(|k| k != libc::S_IFREG) {
                        return Err(invalid(*ino, "allocation for a non-file"));
                    }
                }
                Record::Xattrs { ino, attrs } => {
                    live(&local, *ino)?;
                    check_xattrs(*ino, attrs)?;
                }
                Record::FreeInode { ino } => {
                    if *ino <= 1 || *ino >= self.geo.inode_count {
                        return Err(invalid(*ino, "cannot free this inode"));
                    }
                    local.insert(*ino, None);
                }
            }
        }
        Ok(())
    }

    /// Apply one record of a recovery replay (see [`PublicArea::validate_with`]): a record
    /// for an `unsettled` inode that the public area, being ahead of the checkpoint, has
    /// already freed or recreated as another type is skipped — a later record of the replay
    /// frees or recreates that inode again. Returns whether the record was applied. Records
    /// are refused before anything is written, so a skipped record changed nothing.
    pub fn apply_replayed(&mut self, rec: &Record, unsettled: &HashSet<u64>) -> Result<bool> {
        match self.apply(rec) {
            Ok(()) => Ok(true),
            Err(PublishError::Invalid { ino, why }) if unsettled.contains(&ino) => {
                tracing::debug!(ino, %why, "replay: record for an inode the public area is ahead on; skipped");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Apply one record. Writes are persisted but not fenced; the caller fences and then
    /// durably advances its checkpoint, then calls [`PublicArea::checkpoint_done`].
    pub fn apply(&mut self, rec: &Record) -> Result<()> {
        match rec {
            Record::Inode { fresh, img } => self.apply_inode(img, *fresh),
            Record::Dirent { dir, ino, dtype, name } => self.apply_dirent(*dir, name, *ino, *dtype),
            Record::Write { ino, off, len, data_off } => self.apply_write(*ino, *off, *len, *data_off),
            Record::Truncate { ino, size } => {
                let mut inode = self.live_inode(*ino)?;
                self.truncate_blocks(&mut inode, *size)?;
                self.write_inode(&inode)
            }
            Record::Punch { ino, off, len } => self.apply_punch(*ino, *off, *len),
            Record::Alloc { ino, off, len } => self.apply_alloc(*ino, *off, *len),
            Record::Xattrs { ino, attrs } => self.apply_xattrs(*ino, attrs),
            Record::FreeInode { ino } => self.apply_free(*ino),
        }
    }

    fn apply_inode(&mut self, img: &InodeImage, fresh: bool) -> Result<()> {
        let ino = img.ino;
        if ino == 0 || ino >= self.geo.inode_count {
            return Err(invalid(ino, "inode number out of range"));
        }
        let kind = img.mode & libc::S_IFMT;
        if !dtype::valid(dtype_of_mode(img.mode)) {
            return Err(invalid(ino, format!("mode {:o} has no file type", img.mode)));
        }
        let mut inode = self.read_inode(ino)?;
        if fresh {
            if inode.img.mode != 0 {
                // Reusing a live slot: release what it held first.
                self.release_inode(&mut inode)?;
            }
            inode = PmInode::default();
            self.nblocks.insert(ino, 0);
            self.dirs.remove(&ino);
        } else if inode.img.mode == 0 {
            return Err(invalid(ino, "attributes for an unallocated inode"));
        } else if inode.img.mode & libc::S_IFMT != kind {
            return Err(invalid(ino, "file type changed"));
        }
        inode.img = *img;
        if kind == libc::S_IFDIR {
            self.dirs.entry(ino).or_default();
        }
        self.write_inode(&inode)
    }

    fn dir_slot_off(&self, dir: &PmInode, slot: u64) -> Result<u64> {
        let block = self
            .lookup(dir, slot / DIRENTS_PER_BLOCK)?
            .ok_or_else(|| invalid(dir.img.ino, format!("directory slot {slot} not mapped")))?;
        Ok(block * BLOCK_SIZE + (slot % DIRENTS_PER_BLOCK) * DIRENT_SIZE)
    }

    fn apply_dirent(&mut self, dir: u64, name: &[u8], ino: u64, dt: u8) -> Result<()> {
        let mut d = self.live_inode(dir)?;
        if !d.is_dir() {
            return Err(invalid(dir, "directory entry in a non-directory"));
        }
        if ino >= self.geo.inode_count {
            return Err(invalid(dir, format!("entry names inode {ino} out of range")));
        }
        let slots = self.dirs.entry(dir).or_default();
        if ino == 0 {
            if let Some(slot) = slots.by_name.remove(name) {
                slots.free.insert(slot);
                let off = self.dir_slot_off(&d, slot)?;
                self.region.zero(off, DIRENT_SIZE)?;
                self.region.persist(off, DIRENT_SIZE)?;
            }
            return Ok(());
        }
        let slot = match slots.by_name.get(name) {
            Some(&s) => s,
            None => {
                let s = match slots.free.pop_first() {
                    Some(s) => s,
                    None => {
                        let idx = slots.nslots / DIRENTS_PER_BLOCK;
                        let nb = self.alloc_zeroed(None)?;
                        self.region.fence();
                        self.link(&mut d, idx, nb)?;
                        self.write_inode(&d)?;
                        *self.nblocks.entry(dir).or_default() += 1;
                        let slots = self.dirs.entry(dir).or_default();
                        slots.nslots += DIRENTS_PER_BLOCK;
                        slots.free.extend(idx * DIRENTS_PER_BLOCK + 1..slots.nslots);
                        idx * DIRENTS_PER_BLOCK
                    }
                };
                self.dirs.entry(dir).or_default().by_name.insert(name.to_vec(), s);
                s
            }
        };
        let mut b = [0u8; DIRENT_SIZE as usize];
        b[0..8].copy_from_slice(&ino.to_le_bytes());
        b[8] = dt;
        b[9] = name.len() as u8;
        b[10..10 + name.len()].copy_from_slice(name);
        let crc = dirent_crc(&b);
        b[268..272].copy_from_slice(&crc.to_le_bytes());
        let off = self.dir_slot_off(&d, slot)?;
        self.region.write(off, &b)?;
        self.region.persist(off, DIRENT_SIZE)?;
        Ok(())
    }

    fn apply_write(&mut self, ino: u64, off: u64, len: u64, data_off: u64) -> Result<()> {
        let mut inode = self.live_inode(ino)?;
        let k = inode.img.mode & libc::S_IFMT;
        if k != libc::S_IFREG && k != libc::S_IFLNK {
            return Err(invalid(ino, "data write to a non-file"));
        }
        if data_off.checked_add(len).is_none_or(|e| e > self.region.len()) {
            return Err(invalid(ino, "write data outside the region"));
        }
        let mut buf = vec![0u8; BLOCK_SIZE as usize];
        let mut new_links = Vec::new();
        let mut pos = off;
        let end = off + len;
        let mut prev: Option<u64> = None;
        while pos < end {
            let idx = pos / BLOCK_SIZE;
            let within = pos % BLOCK_SIZE;
            let n = (BLOCK_SIZE - within).min(end - pos);
            let src = data_off + (pos - off);
            match self.lookup(&inode, idx)? {
                Some(b) => {
                    self.region.read(src, &mut buf[..n as usize])?;
                    self.region.write(b * BLOCK_SIZE + within, &buf[..n as usize])?;
                    self.region.persist(b * BLOCK_SIZE + within, n)?;
                    prev = Some(b);
                }
                None => {
                    let b = self.alloc.alloc(prev.map(|p| p + 1)).ok_or(PublishError::NoSpace)?;
                    buf.fill(0);
                    self.region.read(src, &mut buf[within as usize..(within + n) as usize])?;
                    self.region.write(b * BLOCK_SIZE, &buf)?;
                    self.region.persist(b * BLOCK_SIZE, BLOCK_SIZE)?;
                    new_links.push((idx, b));
                    prev = Some(b);
                }
            }
            pos += n;
        }
        if !new_links.is_empty() {
            self.region.fence();
            *self.nblocks.entry(ino).or_default() += new_links.len() as u64;
            for (idx, b) in new_links {
                self.link(&mut inode, idx, b)?;
            }
            self.write_inode(&inode)?;
        }
        Ok(())
    }

    fn truncate_blocks(&mut self, inode: &mut PmInode, size: u64) -> Result<()> {
        let keep = size.div_ceil(BLOCK_SIZE);
        self.free_range(inode, keep, u64::MAX)?;
        if !size.is_multiple_of(BLOCK_SIZE) {
            if let Some(b) = self.lookup(inode, size / BLOCK_SIZE)? {
                let within = size % BLOCK_SIZE;
                self.region.zero(b * BLOCK_SIZE + within, BLOCK_SIZE - within)?;
                self.region.persist(b * BLOCK_SIZE + within, BLOCK_SIZE - within)?;
            }
        }
        Ok(())
    }

    fn apply_punch(&mut self, ino: u64, off: u64, len: u64) -> Result<()> {
        let mut inode = self.live_inode(ino)?;
        let end = off + len;
        let first_full = off.div_ceil(BLOCK_SIZE);
        let last_full = end / BLOCK_SIZE;
        // Partial blocks at the edges are zeroed in place.
        let mut pos = off;
        while pos < end {
            let idx = pos / BLOCK_SIZE;
            let within = pos % BLOCK_SIZE;
            let n = (BLOCK_SIZE - within).min(end - pos);
            if idx >= first_full && idx < last_full {
                pos = last_full * BLOCK_SIZE;
                continue;
            }
            if let Some(b) = self.lookup(&inode, idx)? {
                self.region.zero(b * BLOCK_SIZE + within, n)?;
                self.region.persist(b * BLOCK_SIZE + within, n)?;
            }
            pos += n;
        }
        if first_full < last_full {
            self.free_range(&mut inode, first_full, last_full)?;
            self.write_inode(&inode)?;
        }
        Ok(())
    }

    fn apply_alloc(&mut self, ino: u64, off: u64, len: u64) -> Result<()> {
        let mut inode = self.live_inode(ino)?;
        if inode.img.mode & libc::S_IFMT != libc::S_IFREG {
            return Err(invalid(ino, "allocation for a non-file"));
        }
        let mut new_links = Vec::new();
        let mut prev = None;
        for idx in off / BLOCK_SIZE..(off + len).div_ceil(BLOCK_SIZE) {
            match self.lookup(&inode, idx)? {
                Some(b) => prev = Some(b),
                None => {
                    let b = self.alloc.alloc(prev.map(|p: u64| p + 1)).ok_or(PublishError::NoSpace)?;
                    self.region.zero(b * BLOCK_SIZE, BLOCK_SIZE)?;
                    self.region.persist(b * BLOCK_SIZE, BLOCK_SIZE)?;
                    new_links.push((idx, b));
                    prev = Some(b);
                }
            }
        }
        if !new_links.is_empty() {
            self.region.fence();
            *self.nblocks.entry(ino).or_default() += new_links.len() as u64;
            for (idx, b) in new_links {
                self.link(&mut inode, idx, b)?;
            }
            self.write_inode(&inode)?;
        }
        Ok(())
    }

    fn apply_xattrs(&mut self, ino: u64, attrs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let mut inode = self.live_inode(ino)?;
        check_xattrs(ino, attrs)?;
        self.suspect_xattrs.remove(&ino);
        let old = if inode.xattr != 0 { self.read_xattrs(inode.xattr)?.0 } else { Vec::new() };
        if attrs.is_empty() {
            for b in old {
                self.free_block(ino, b, false);
            }
            if inode.xattr != 0 {
                inode.xattr = 0;
                self.write_inode(&inode)?;
            }
            return Ok(());
        }
        let mut stream = Vec::with_capacity(xattrs_len(attrs.iter().map(|(n, v)| (&n[..], &v[..]))));
        for (n, v) in attrs {
            put_xattr(&mut stream, n, v);
        }
        let need = xattr_chain_blocks(stream.len()) as usize;
        // Reuse the old chain's blocks in place, allocate the rest.
        let reused = need.min(old.len());
        let mut chain = old[..reused].to_vec();
        while chain.len() < need {
            match self.alloc.alloc(chain.last().map(|b| b + 1)) {
                Some(b) => chain.push(b),
                None => {
                    // Give back what this call took; nothing points to it yet.
                    for &b in &chain[reused..] {
                        self.alloc.unclaim(b);
                    }
                    return Err(PublishError::NoSpace);
                }
            }
        }
        let mut img = vec![0u8; BLOCK_SIZE as usize];
        // New blocks first, fenced before any pointer to them; then the reused ones.
        for pass in [reused..need, 0..reused] {
            for i in pass {
                let part = &stream[i * XATTR_PAYLOAD..((i + 1) * XATTR_PAYLOAD).min(stream.len())];
                img.fill(0);
                img[0..4].copy_from_slice(XATTR_MAGIC);
                img[4..8].copy_from_slice(&(part.len() as u32).to_le_bytes());
                img[8..16].copy_from_slice(&chain.get(i + 1).copied().unwrap_or(0).to_le_bytes());
                if i == 0 {
                    img[16..20].copy_from_slice(&(stream.len() as u32).to_le_bytes());
                    img[20..24].copy_from_slice(&(attrs.len() as u32).to_le_bytes());
                    img[24..28].copy_from_slice(&crc32c::crc32c(&stream).to_le_bytes());
                }
                img[XATTR_HEADER..XATTR_HEADER + part.len()].copy_from_slice(part);
                let crc = crc32c::crc32c_append(crc32c::crc32c(&img[..28]), part);
                img[28..32].copy_from_slice(&crc.to_le_bytes());
                self.region.write(chain[i] * BLOCK_SIZE, &img)?;
                self.region.persist(chain[i] * BLOCK_SIZE, BLOCK_SIZE)?;
            }
            self.region.fence();
        }
        for &b in &old[reused..] {
            self.free_block(ino, b, false);
        }
        if inode.xattr != chain[0] {
            inode.xattr = chain[0];
            self.write_inode(&inode)?;
        }
        Ok(())
    }

    fn release_inode(&mut self, inode: &mut PmInode) -> Result<()> {
        let ino = inode.img.ino;
        self.free_range(inode, 0, u64::MAX)?;
        if inode.xattr != 0 {
            for b in self.read_xattrs(inode.xattr)?.0 {
                self.free_block(ino, b, false);
            }
            inode.xattr = 0;
        }
        self.dirs.remove(&ino);
        self.nblocks.remove(&ino);
        Ok(())
    }

    fn apply_free(&mut self, ino: u64) -> Result<()> {
        if ino <= 1 || ino >= self.geo.inode_count {
            return Err(invalid(ino, "cannot free this inode"));
        }
        let mut inode = self.read_inode(ino)?;
        if inode.img.mode != 0 {
            self.release_inode(&mut inode)?;
        }
        let off = self.geo.inode_off(ino);
        self.region.zero(off, INODE_SIZE)?;
        self.region.persist(off, INODE_SIZE)?;
        self.suspect_inodes.remove(&ino);
        self.suspect_xattrs.remove(&ino);
        Ok(())
    }

    /// The caller's checkpoint covering everything applied so far is durable: blocks freed
    /// by it may be reused now.
    pub fn checkpoint_done(&mut self) {
        self.alloc.release();
    }

    /// Fence everything applied so far (call before making a checkpoint durable).
    pub fn fence(&self) {
        self.region.fence();
    }
}

/// `DT_*` type of an `st_mode`.
pub fn dtype_of_mode(mode: u32) -> u8 {
    match mode & libc::S_IFMT {
        libc::S_IFREG => dtype::REG,
        libc::S_IFDIR => dtype::DIR,
        libc::S_IFLNK => dtype::LNK,
        libc::S_IFIFO => dtype::FIFO,
        libc::S_IFSOCK => dtype::SOCK,
        libc::S_IFCHR => dtype::CHR,
        libc::S_IFBLK => dtype::BLK,
        _ => 0,
    }
}

fn corrupt(ino: u64, detail: String) -> FormatError {
    FormatError::Corrupt { what: format!("inode {ino}"), detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::FormatParams;
    use crate::record::{decode_records, EntryBuilder};

    fn setup() -> (Arc<PmRegion>, Geometry) {
        let geo =
            Geometry::compute(&FormatParams { size: 16 << 20, log_size: 1 << 20, log_slots: 1, inodes: 256 }).unwrap();
        let region = Arc::new(PmRegion::traced(16 << 20));
        let root = InodeImage { ino: 1, mode: libc::S_IFDIR | 0o755, nlink: 2, parent: 1, ..Default::default() };
        PublicArea::format(&region, &geo, &root).unwrap();
        (region, geo)
    }

    /// Apply an entry built in DRAM: its payload is placed at the end of the region so that
    /// WRITE records can name their data.
    fn apply(pa: &mut PublicArea, b: &EntryBuilder) {
        let at = pa.region.len() - (2 << 20);
        pa.region.write(at, b.payload()).unwrap();
        for r in decode_records(b.payload(), at).unwrap() {
            pa.apply(&r).unwrap();
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
        pa.read_file(2, 0, &mut got).unwrap();
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
        pa.read_file(3, 600 * 4096, &mut got[..3]).unwrap();
        assert_eq!(&got[..3], b"far");
        pa.read_file(3, 5 * 4096, &mut got).unwrap();
        assert_eq!(&got, b"near");
        // two data blocks, a double-indirect root, one second-level block
        assert_eq!(start_free - pa.free_blocks(), 4);
        let mut b = EntryBuilder::new();
        b.truncate(3, 5 * 4096 + 2);
        apply(&mut pa, &b);
        assert_eq!(start_free - pa.free_blocks(), 1);
        pa.read_file(3, 5 * 4096, &mut got).unwrap();
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
        let loaded =
            |region: &Arc<PmRegion>| PublicArea::load(region.clone(), geo).unwrap().1.inodes[&2].xattrs.clone();
        // A thousand small attributes and one value of the 64 KiB maximum.
        let mut attrs: XattrList = (0..1000)
            .map(|i| (format!("user.attribute_{i}").into_bytes(), format!("value_{i}").into_bytes()))
            .collect();
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
        assert!(pa3.apply(&Record::Xattrs { ino: 2, attrs: huge }).is_err());
        assert!(pa3.apply(&Record::Xattrs { ino: 2, attrs: vec![(b"user.v".to_vec(), vec![0; 65537])] }).is_err());
    }

    #[test]
    fn hostile_records_are_refused() {
        let (region, geo) = setup();
        let (mut pa, _) = PublicArea::load(region, geo).unwrap();
        assert!(pa.apply(&Record::Write { ino: 9, off: 0, len: 1, data_off: 0 }).is_err());
        assert!(pa.apply(&Record::FreeInode { ino: 1 }).is_err());
        assert!(pa.apply(&Record::Dirent { dir: 77, ino: 2, dtype: dtype::REG, name: b"x".to_vec() }).is_err());
        assert!(pa.apply(&Record::Inode { fresh: true, img: InodeImage { ino: 100000, ..file(0) } }).is_err());
        assert!(pa.apply(&Record::Inode { fresh: true, img: InodeImage { mode: 0, ..file(5) } }).is_err());
    }
}
