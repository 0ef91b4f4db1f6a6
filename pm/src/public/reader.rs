//! The read-only view of a public area: inodes, block maps, file data, directory entries
//! and extended attributes as persisted. It holds no allocation state and never writes, so
//! any process that can map the public area (a client, nicfs, a checker) can use it; the
//! publisher ([`super::PublicArea`]) reads through the same code.
//!
//! Load ([`PublicReader::load`]) walks the whole inode table; a caller that also has to
//! rebuild allocation state (the publisher) passes a [`LoadVisitor`] that sees every block
//! an inode owns and every directory slot.

use super::format::{
    decode_dirent, map_path, root_span, PmInode, XattrBlock, DIRENTS_PER_BLOCK, DIRENT_SIZE, XATTR_HEADER,
    XATTR_MAX_BLOCKS,
};
use super::{corrupt, XattrList};
use crate::layout::{FormatError, Geometry, BLOCK_SIZE, INODE_SIZE};
use crate::record::{get_xattrs, InodeImage};
use crate::region::PmRegion;
use std::collections::HashMap;
use std::sync::Arc;

/// One inode found by [`PublicReader::load`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedInode {
    pub img: InodeImage,
    pub xattrs: XattrList,
    /// Data blocks mapped (for `st_blocks`).
    pub blocks: u64,
}

/// A directory entry found by [`PublicReader::load`].
/// One inode re-read by itself ([`PublicReader::load_inode`]): as a full load gives it, and
/// its entries if it is a directory.
pub type InodeReload = (LoadedInode, Option<Vec<LoadedDirent>>);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedDirent {
    pub name: Vec<u8>,
    pub ino: u64,
    pub dtype: u8,
}

/// What [`PublicReader::load`] found: every live inode and every directory's entries (in
/// slot order).
#[derive(Debug, Default)]
pub struct Loaded {
    pub inodes: HashMap<u64, LoadedInode>,
    pub dirs: HashMap<u64, Vec<LoadedDirent>>,
}

/// Sees what a load finds beyond the inodes and entries themselves.
pub trait LoadVisitor {
    /// `block` (already checked to lie in the data area) belongs to inode `ino`.
    fn block(&mut self, ino: u64, block: u64) -> Result<(), FormatError>;
    /// Inode `ino`'s checksum failed, or its slot is a torn free.
    fn suspect_inode(&mut self, ino: u64);
    /// Inode `ino`'s xattr chain failed its checks.
    fn suspect_xattrs(&mut self, ino: u64);
    /// Directory `dir` has `nslots` slots; `slot` holds `name` (Some) or is free (None).
    fn dir_slot(&mut self, dir: u64, slot: u64, name: Option<&[u8]>);
}

/// A visitor that wants nothing but the inodes and entries.
struct NoVisitor;

impl LoadVisitor for NoVisitor {
    fn block(&mut self, _: u64, _: u64) -> Result<(), FormatError> {
        Ok(())
    }
    fn suspect_inode(&mut self, _: u64) {}
    fn suspect_xattrs(&mut self, _: u64) {}
    fn dir_slot(&mut self, _: u64, _: u64, _: Option<&[u8]>) {}
}

/// Read-only access to the public area of one PM region.
#[derive(Clone)]
pub struct PublicReader {
    region: Arc<PmRegion>,
    geo: Geometry,
    /// Another process publishes into this area while we read (see [`PublicReader::shared`]).
    shared: bool,
}

/// How often [`PublicReader::read_inode`] of a shared reader re-reads an inode whose
/// checksum does not match before it calls the inode corrupt.
const TORN_READ_RETRIES: u32 = 1000;

impl PublicReader {
    /// A reader of a public area that nothing else changes while it reads (the publisher's
    /// own, or one at rest).
    pub fn new(region: Arc<PmRegion>, geo: Geometry) -> PublicReader {
        PublicReader { region, geo, shared: false }
    }

    /// A reader of a public area that another process (nicfs) publishes into while this one
    /// reads — a client's view through its read-only mapping. Block pointers are single
    /// aligned 8-byte words, read atomically; an inode (256 bytes) is rewritten in place, so
    /// a read can see half of an update: its checksum then fails, and the read is retried
    /// until it matches (the publisher's store of an inode is short). An inode whose checksum
    /// never matches is corrupt. File data is not re-checked: a client only reads bytes of a
    /// file that nobody is rewriting — its own unpublished ranges come from its log, and no
    /// other client may write a file it holds a lease on (docs/ARCHITECTURE.md).
    pub fn shared(region: Arc<PmRegion>, geo: Geometry) -> PublicReader {
        PublicReader { region, geo, shared: true }
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn region(&self) -> &Arc<PmRegion> {
        &self.region
    }

    /// Every live inode and directory entry.
    pub fn load(&self) -> Result<Loaded, FormatError> {
        self.load_with(&mut NoVisitor)
    }

    /// [`PublicReader::load`], telling `v` every owned block, suspect structure and
    /// directory slot. Block pointers out of the data area are corruption and refuse the
    /// load; checksum failures are only reported to `v` (a crash may tear them).
    pub fn load_with(&self, v: &mut dyn LoadVisitor) -> Result<Loaded, FormatError> {
        let geo = self.geo;
        let mut loaded = Loaded::default();
        let table = geo.itable_start * BLOCK_SIZE;
        let mut block = vec![0u8; BLOCK_SIZE as usize];
        let per = (BLOCK_SIZE / INODE_SIZE) as usize;
        for tb in 0..(geo.data_start - geo.itable_start) {
            self.region.read(table + tb * BLOCK_SIZE, &mut block)?;
            for k in 0..per {
                let ino = tb * per as u64 + k as u64;
                let raw: &[u8; INODE_SIZE as usize] =
                    block[k * INODE_SIZE as usize..(k + 1) * INODE_SIZE as usize].try_into().expect("inode size");
                if ino == 0 || raw.iter().all(|&b| b == 0) {
                    continue;
                }
                let (mut inode, ok) = PmInode::decode(raw);
                if !ok {
                    v.suspect_inode(ino);
                }
                if inode.img.mode == 0 {
                    // A free slot that is not all-zero: only a torn free leaves that.
                    v.suspect_inode(ino);
                    continue;
                }
                if inode.img.ino != ino && ok {
                    return Err(corrupt(ino, format!("inode records number {}", inode.img.ino)));
                }
                inode.img.ino = ino;
                let blocks = self.walk_tree(&inode, v)?;
                let mut xattrs = Vec::new();
                if inode.xattr != 0 {
                    if !geo.is_data_block(inode.xattr) {
                        return Err(corrupt(ino, format!("xattr block pointer {} outside the data area", inode.xattr)));
                    }
                    let (chain, attrs) = self.read_xattrs(inode.xattr)?;
                    for b in chain {
                        v.block(ino, b)?;
                    }
                    match attrs {
                        Some(x) => xattrs = x,
                        None => v.suspect_xattrs(ino),
                    }
                }
                if inode.is_dir() {
                    let ents = self.load_dir(&inode, v)?;
                    loaded.dirs.insert(ino, ents);
                }
                loaded.inodes.insert(ino, LoadedInode { img: inode.img, xattrs, blocks });
            }
        }
        Ok(loaded)
    }

    /// Report every block of an inode's map to `v`; returns its data-block count.
    fn walk_tree(&self, inode: &PmInode, v: &mut dyn LoadVisitor) -> Result<u64, FormatError> {
        let ino = inode.img.ino;
        let mut data = 0;
        for (r, &p) in inode.roots.iter().enumerate() {
            if p == 0 {
                continue;
            }
            self.owned(ino, p, v)?;
            let (_, level) = root_span(r);
            data += if level == 0 { 1 } else { self.walk_indirect(ino, p, level, v)? };
        }
        Ok(data)
    }

    fn walk_indirect(&self, ino: u64, block: u64, level: u32, v: &mut dyn LoadVisitor) -> Result<u64, FormatError> {
        let ptrs = self.read_ptrs(block)?;
        let mut data = 0;
        for &p in ptrs.iter().filter(|&&p| p != 0) {
            self.owned(ino, p, v)?;
            data += if level == 1 { 1 } else { self.walk_indirect(ino, p, level - 1, v)? };
        }
        Ok(data)
    }

    fn owned(&self, ino: u64, block: u64, v: &mut dyn LoadVisitor) -> Result<(), FormatError> {
        if !self.geo.is_data_block(block) {
            return Err(corrupt(ino, format!("block pointer {block} outside the data area")));
        }
        v.block(ino, block)
    }

    /// The block pointers of an indirect block.
    pub fn read_ptrs(&self, block: u64) -> Result<Vec<u64>, FormatError> {
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        self.region.read(block * BLOCK_SIZE, &mut b)?;
        Ok(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8"))).collect())
    }

    /// The entries of a directory, in slot order; a name found twice counts once (the
    /// later slot is reported free).
    fn load_dir(&self, inode: &PmInode, v: &mut dyn LoadVisitor) -> Result<Vec<LoadedDirent>, FormatError> {
        let dir = inode.img.ino;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        let mut idx = 0u64;
        while let Some(block) = self.lookup(inode, idx)? {
            self.region.read(block * BLOCK_SIZE, &mut b)?;
            for k in 0..DIRENTS_PER_BLOCK {
                let slot = idx * DIRENTS_PER_BLOCK + k;
                let s = &b[(k * DIRENT_SIZE) as usize..((k + 1) * DIRENT_SIZE) as usize];
                match decode_dirent(s, self.geo.inode_count) {
                    Some((child, dt, name)) if seen.insert(name.to_vec()) => {
                        v.dir_slot(dir, slot, Some(name));
                        out.push(LoadedDirent { name: name.to_vec(), ino: child, dtype: dt });
                    }
                    _ => v.dir_slot(dir, slot, None),
                }
            }
            idx += 1;
        }
        Ok(out)
    }

    /// Follow the xattr chain from `first`: the blocks it is made of (up to and including
    /// the first that fails its checks, whose `next` is not followed) and the attributes, or
    /// `None` if a block or the stream fails its checks (torn by a crash, or corrupt).
    pub fn read_xattrs(&self, first: u64) -> Result<(Vec<u64>, Option<XattrList>), FormatError> {
        let mut chain = Vec::new();
        let mut stream = Vec::new();
        let mut head = None;
        let mut b = vec![0u8; BLOCK_SIZE as usize];
        let mut blk = first;
        loop {
            chain.push(blk);
            self.region.read(blk * BLOCK_SIZE, &mut b)?;
            let Some(x) = XattrBlock::decode(&b) else { return Ok((chain, None)) };
            head.get_or_insert(x);
            stream.extend_from_slice(&b[XATTR_HEADER..XATTR_HEADER + x.used]);
            if x.next == 0 {
                break;
            }
            // A pointer that passed the checksum but leads nowhere sensible: corrupt.
            if !self.geo.is_data_block(x.next) || chain.len() >= XATTR_MAX_BLOCKS || chain.contains(&x.next) {
                return Ok((chain, None));
            }
            blk = x.next;
        }
        let head = head.expect("one block read");
        if stream.len() != head.total || crc32c::crc32c(&stream) != head.stream_crc {
            return Ok((chain, None));
        }
        Ok((chain, get_xattrs(&stream, head.count)))
    }

    /// Read inode `ino` from the table. The publisher's own reader does not require the
    /// checksum (recovery rewrites torn inodes through it); a [shared](Self::shared) reader
    /// re-reads an inode caught mid-update until its checksum matches.
    pub fn read_inode(&self, ino: u64) -> Result<PmInode, FormatError> {
        if ino == 0 || ino >= self.geo.inode_count {
            return Err(corrupt(ino, "inode number out of range".into()));
        }
        let mut b = [0u8; INODE_SIZE as usize];
        let mut tries = 0;
        loop {
            self.region.read(self.geo.inode_off(ino), &mut b)?;
            let (inode, ok) = PmInode::decode(&b);
            if ok || !self.shared || b.iter().all(|&x| x == 0) {
                return Ok(inode);
            }
            tries += 1;
            if tries >= TORN_READ_RETRIES {
                return Err(corrupt(ino, "inode checksum mismatch".into()));
            }
            std::thread::yield_now();
        }
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

    /// One inode as a full load would give it — image, extended attributes, mapped data
    /// blocks, and its entries if it is a directory — or None if the public area has no
    /// such inode (a client re-reading an inode another client changed; the caller holds a
    /// lease on it, so nothing publishes to it meanwhile).
    pub fn load_inode(&self, ino: u64) -> Result<Option<InodeReload>, FormatError> {
        let inode = self.read_inode(ino)?;
        if inode.img.mode == 0 {
            return Ok(None);
        }
        let blocks = self.walk_tree(&inode, &mut NoVisitor)?;
        let mut xattrs = Vec::new();
        if inode.xattr != 0 {
            if !self.geo.is_data_block(inode.xattr) {
                return Err(corrupt(ino, format!("xattr block pointer {} outside the data area", inode.xattr)));
            }
            match self.read_xattrs(inode.xattr)?.1 {
                Some(x) => xattrs = x,
                None => return Err(corrupt(ino, "extended attributes fail their checksum".to_string())),
            }
        }
        let dir = if inode.is_dir() { Some(self.load_dir(&inode, &mut NoVisitor)?) } else { None };
        let mut img = inode.img;
        img.ino = ino;
        Ok(Some((LoadedInode { img, xattrs, blocks }, dir)))
    }

    /// Mapped data blocks of `ino` (a walk of its block map; 0 for a free inode).
    pub fn file_blocks(&self, ino: u64) -> Result<u64, FormatError> {
        let inode = self.read_inode(ino)?;
        if inode.img.mode == 0 {
            return Ok(0);
        }
        self.walk_tree(&inode, &mut NoVisitor)
    }
}
