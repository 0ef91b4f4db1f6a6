//! The publisher's side of the public area: the DRAM allocation state rebuilt at load (block
//! bitmap with its pending frees, directory slot maps, per-inode block counts, structures
//! that failed their checksums) and the primitives that change persisted structures in the
//! safe order — a block fully written and fenced before a pointer to it is persisted, a
//! freed block reused only after the caller's checkpoint — and, for a deferred
//! [`DataMover`], the *pending links*: pointers to data blocks whose contents are recorded
//! moves not yet executed, persisted only by [`PublicArea::settle`] after the moves are.
//! Validation and the records' effects are in [`super::validate`] and [`super::apply`].

use super::format::{root_span, span_of, PmInode, NROOTS};
use super::mover::DataMover;
use super::reader::{LoadVisitor, Loaded, PublicReader};
use super::{corrupt, invalid, PublishError, Result, XattrList};
use crate::bitmap::Bitmap;
use crate::layout::{FormatError, Geometry, BLOCK_SIZE, INODE_SIZE};
use crate::record::InodeImage;
use crate::region::PmRegion;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// The slots of one directory: where each name is, which slots are free.
#[derive(Debug, Default)]
pub(super) struct DirSlots {
    pub(super) by_name: HashMap<Vec<u8>, u64>,
    pub(super) free: BTreeSet<u64>,
    pub(super) nslots: u64,
}

/// Data blocks: a bitmap over the data area plus the blocks freed since the last
/// checkpoint, which stay used until it is durable.
#[derive(Debug)]
pub(super) struct BlockAlloc {
    first: u64,
    used: Bitmap,
    pending: Vec<u64>,
    /// Free blocks no allocation may take ([`PublicArea::set_alloc_floor`]).
    floor: u64,
}

impl BlockAlloc {
    fn new(geo: &Geometry) -> BlockAlloc {
        BlockAlloc { first: geo.data_start, used: Bitmap::new(geo.data_blocks), pending: Vec::new(), floor: 0 }
    }

    /// Mark `block` used at load; false if it already was (two owners).
    fn claim(&mut self, block: u64) -> bool {
        self.used.set(block - self.first)
    }

    /// A free block, near `goal` if possible.
    pub(super) fn alloc(&mut self, goal: Option<u64>) -> Option<u64> {
        if self.used.free() <= self.floor {
            return None;
        }
        self.used.alloc(goal.map(|g| g.saturating_sub(self.first))).map(|i| self.first + i)
    }

    /// Give back a block just allocated that nothing persisted points to.
    pub(super) fn unclaim(&mut self, block: u64) {
        self.used.clear(block - self.first);
    }

    fn release(&mut self) {
        for b in std::mem::take(&mut self.pending) {
            self.used.clear(b - self.first);
        }
    }
}

/// The public area of one PM region and the publisher's DRAM state for it.
pub struct PublicArea {
    pub(super) reader: PublicReader,
    pub(super) region: Arc<PmRegion>,
    pub(super) geo: Geometry,
    pub(super) alloc: BlockAlloc,
    pub(super) dirs: HashMap<u64, DirSlots>,
    /// Mapped data blocks per inode.
    pub(super) nblocks: HashMap<u64, u64>,
    /// Inodes (or their xattr blocks) that failed their checksum at load: torn by a crash
    /// during publication, to be rewritten by recovery; any left afterwards are corrupt.
    pub(super) suspect_inodes: HashSet<u64>,
    pub(super) suspect_xattrs: HashSet<u64>,
    /// Data blocks allocated under a deferred mover and not linked yet: inode -> file block
    /// -> block. Their contents are moves the mover has recorded; [`PublicArea::settle`]
    /// links them once the moves are durable.
    pub(super) pending_links: BTreeMap<u64, BTreeMap<u64, u64>>,
}

/// Rebuilds the publisher's state while the reader walks the public area.
impl LoadVisitor for PublicArea {
    fn block(&mut self, ino: u64, block: u64) -> Result<(), FormatError> {
        if !self.alloc.claim(block) {
            return Err(corrupt(ino, format!("block {block} has two owners")));
        }
        Ok(())
    }

    fn suspect_inode(&mut self, ino: u64) {
        self.suspect_inodes.insert(ino);
    }

    fn suspect_xattrs(&mut self, ino: u64) {
        self.suspect_xattrs.insert(ino);
    }

    fn dir_slot(&mut self, dir: u64, slot: u64, name: Option<&[u8]>) {
        let slots = self.dirs.entry(dir).or_default();
        match name {
            Some(n) => {
                slots.by_name.insert(n.to_vec(), slot);
            }
            None => {
                slots.free.insert(slot);
            }
        }
        slots.nslots = slots.nslots.max(slot + 1);
    }
}

impl PublicArea {
    /// Write an empty public area: zeroed inode table and the root directory `root`.
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
        let reader = PublicReader::new(region.clone(), geo);
        let mut pa = PublicArea {
            reader: reader.clone(),
            alloc: BlockAlloc::new(&geo),
            region,
            geo,
            dirs: HashMap::new(),
            nblocks: HashMap::new(),
            suspect_inodes: HashSet::new(),
            suspect_xattrs: HashSet::new(),
            pending_links: BTreeMap::new(),
        };
        let loaded = reader.load_with(&mut pa)?;
        for (ino, li) in &loaded.inodes {
            pa.nblocks.insert(*ino, li.blocks);
        }
        for dir in loaded.dirs.keys() {
            pa.dirs.entry(*dir).or_default();
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

    /// The read-only view of the same public area.
    pub fn reader(&self) -> &PublicReader {
        &self.reader
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn region(&self) -> &Arc<PmRegion> {
        &self.region
    }

    /// Data blocks free now (pending frees not counted).
    pub fn free_blocks(&self) -> u64 {
        self.alloc.used.free()
    }

    /// Keeps `blocks` free blocks out of every allocation until set again (0: none kept): a
    /// publisher serving several writers sets it, for each writer's batch, to the space the
    /// others have reserved, so that one writer's entries cannot use it up.
    pub fn set_alloc_floor(&mut self, blocks: u64) {
        self.alloc.floor = blocks;
    }

    /// Data blocks freed by publication and waiting for the checkpoint.
    pub fn pending_free_blocks(&self) -> u64 {
        self.alloc.pending.len() as u64
    }

    /// Mapped data blocks of `ino`.
    pub fn file_blocks(&self, ino: u64) -> u64 {
        self.nblocks.get(&ino).copied().unwrap_or(0)
    }

    /// Read inode `ino` (see [`PublicReader::read_inode`]).
    pub fn read_inode(&self, ino: u64) -> Result<PmInode, FormatError> {
        self.reader.read_inode(ino)
    }

    /// The attributes of an xattr chain (see [`PublicReader::read_xattrs`]).
    pub fn read_xattrs(&self, first: u64) -> Result<(Vec<u64>, Option<XattrList>), FormatError> {
        self.reader.read_xattrs(first)
    }

    pub(super) fn lookup(&self, inode: &PmInode, idx: u64) -> Result<Option<u64>, FormatError> {
        self.reader.lookup(inode, idx)
    }

    /// The block holding file block `idx` of a file: a pending link first, then the
    /// persisted block map.
    pub(super) fn data_block(&self, inode: &PmInode, idx: u64) -> Result<Option<u64>, FormatError> {
        if let Some(&b) = self.pending_links.get(&inode.img.ino).and_then(|m| m.get(&idx)) {
            return Ok(Some(b));
        }
        self.lookup(inode, idx)
    }

    /// Link freshly filled data blocks `(file block, block)` into `inode`. Their contents
    /// must be durable before any pointer to them is: with a direct mover they were stored
    /// and persisted already, so one fence and the pointers follow; with a deferred one they
    /// are only recorded, so the links wait in DRAM for [`PublicArea::settle`].
    pub(super) fn link_new_blocks(
        &mut self,
        inode: &mut PmInode,
        new_links: Vec<(u64, u64)>,
        mover: &mut dyn DataMover,
    ) -> Result<()> {
        if new_links.is_empty() {
            return Ok(());
        }
        *self.nblocks.entry(inode.img.ino).or_default() += new_links.len() as u64;
        if mover.deferred() {
            self.pending_links.entry(inode.img.ino).or_default().extend(new_links);
            return Ok(());
        }
        self.region.fence();
        self.link_all(inode, new_links)?;
        self.write_inode(inode)
    }

    /// Executes what `mover` recorded (durable when its flush returns), then persists the
    /// pending links — the pointers to the blocks those moves filled, and the inodes that
    /// hold them. A publisher with a deferred mover calls this before its checkpoint. (A
    /// record that frees blocks of a file with pending links drops those links and frees
    /// their blocks: see `free_range`.)
    /// With a direct mover there is never anything pending, and this is a fence. On an
    /// error nothing pending is linked: see [`PublicArea::abandon_pending`].
    pub fn settle(&mut self, mover: &mut dyn DataMover) -> Result<()> {
        mover.flush(&self.region)?;
        while let Some((ino, links)) = self.pending_links.pop_first() {
            let mut inode = self.read_inode(ino)?;
            self.link_all(&mut inode, links)?;
            self.write_inode(&inode)?;
        }
        Ok(())
    }

    /// Forgets the pending links after a failed publication (the moves that would have
    /// filled their blocks may not have happened): nothing persisted points to those
    /// blocks, and they become reusable at the next checkpoint like any freed block (not at
    /// once: an interrupted copy list may still be writing to them).
    pub fn abandon_pending(&mut self) {
        while let Some((ino, links)) = self.pending_links.pop_first() {
            for (_, b) in links {
                self.free_block(ino, b, true);
            }
        }
    }

    pub(super) fn write_inode(&mut self, inode: &PmInode) -> Result<()> {
        let off = self.geo.inode_off(inode.img.ino);
        self.region.write(off, &inode.encode())?;
        self.region.persist(off, INODE_SIZE)?;
        self.suspect_inodes.remove(&inode.img.ino);
        Ok(())
    }

    pub(super) fn alloc_zeroed(&mut self, goal: Option<u64>) -> Result<u64> {
        let b = self.alloc.alloc(goal).ok_or(PublishError::NoSpace)?;
        self.region.zero_persist(b * BLOCK_SIZE, BLOCK_SIZE)?;
        Ok(b)
    }

    /// Link `block` as file block `idx` of `inode` (in DRAM copy; indirect blocks are
    /// allocated, zeroed and fenced before being linked). The inode itself is written by
    /// the caller.
    pub(super) fn link(&mut self, inode: &mut PmInode, idx: u64, block: u64) -> Result<()> {
        self.link_all(inode, [(idx, block)])
    }

    /// [`PublicArea::link`] for each `(idx, block)`, the pointers stored first and written
    /// back after, each run of adjacent ones at once: a file's consecutive blocks have their
    /// pointers side by side, eight to a cache line, and writing one back evicts the line
    /// on many CPUs, so a write-back per pointer made the next store miss. Not durable
    /// before the next fence either way.
    pub(super) fn link_all(&mut self, inode: &mut PmInode, links: impl IntoIterator<Item = (u64, u64)>) -> Result<()> {
        let mut run: Option<(u64, u64)> = None;
        for (idx, block) in links {
            let Some(slot) = self.link_slot(inode, idx, block)? else { continue };
            run = match run {
                Some((a, b)) if slot == b => Some((a, b + 8)),
                Some((a, b)) => {
                    self.region.persist(a, b - a)?;
                    Some((slot, slot + 8))
                }
                None => Some((slot, slot + 8)),
            };
        }
        if let Some((a, b)) = run {
            self.region.persist(a, b - a)?;
        }
        Ok(())
    }

    /// Stores the pointer linking `block` as file block `idx` of `inode` (indirect blocks
    /// made as needed, persisted and fenced); returns where it is in PM, for the caller to
    /// write back (None: a root pointer, in the DRAM copy of the inode).
    fn link_slot(&mut self, inode: &mut PmInode, idx: u64, block: u64) -> Result<Option<u64>> {
        let ino = inode.img.ino;
        let (root, sub, levels) =
            super::format::map_path(idx).ok_or_else(|| invalid(ino, "offset beyond the block map"))?;
        if levels == 0 {
            inode.roots[root] = block;
            return Ok(None);
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
                return Ok(Some(slot));
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
        Ok(None)
    }

    pub(super) fn free_block(&mut self, ino: u64, block: u64, data: bool) {
        self.alloc.pending.push(block);
        if data {
            if let Some(n) = self.nblocks.get_mut(&ino) {
                *n = n.saturating_sub(1);
            }
        }
    }

    /// Unmap and free file blocks in [from, to); indirect blocks wholly inside the range are
    /// freed too.
    pub(super) fn free_range(&mut self, inode: &mut PmInode, from: u64, to: u64) -> Result<()> {
        let ino = inode.img.ino;
        // Pending links in the range are dropped: nothing persisted points to their blocks,
        // and the moves recorded for them may still run, so they are freed like any block
        // (reusable after the checkpoint, once those moves are over).
        if let Some(links) = self.pending_links.get_mut(&ino) {
            let gone: Vec<(u64, u64)> = links.range(from..to).map(|(i, b)| (*i, *b)).collect();
            for (idx, _) in &gone {
                links.remove(idx);
            }
            if links.is_empty() {
                self.pending_links.remove(&ino);
            }
            for (_, b) in gone {
                self.free_block(ino, b, true);
            }
        }
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
        let ptrs = self.reader.read_ptrs(block)?;
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

    /// Free everything an inode holds (blocks, xattr chain) and forget its DRAM state.
    pub(super) fn release_inode(&mut self, inode: &mut PmInode) -> Result<()> {
        let ino = inode.img.ino;
        self.free_range(inode, 0, u64::MAX)?;
        if inode.xattr != 0 {
            for b in self.reader.read_xattrs(inode.xattr)?.0 {
                self.free_block(ino, b, false);
            }
            inode.xattr = 0;
        }
        self.dirs.remove(&ino);
        self.nblocks.remove(&ino);
        Ok(())
    }

    /// The caller's checkpoint covering everything applied so far is durable: blocks freed
    /// by it may be reused now.
    pub fn checkpoint_done(&mut self) {
        debug_assert!(self.pending_links.is_empty(), "a checkpoint with links still pending");
        self.alloc.release();
    }

    /// Fence everything applied so far (call before making a checkpoint durable).
    pub fn fence(&self) {
        self.region.fence();
    }
}
