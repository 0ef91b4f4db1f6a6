//! The effect of each log record on the public area. Records are blind post-images applied
//! by key, so applying a suffix again converges (idempotent publication); writes are
//! persisted here but fenced by the caller before it advances its checkpoint. File data
//! moves through the caller's [`DataMover`] (see [`super::mover`]); metadata is written
//! here.

use super::area::PublicArea;
use super::format::{encode_dirent, PmInode, XattrBlock, DIRENTS_PER_BLOCK, DIRENT_SIZE, XATTR_PAYLOAD};
use super::mover::{DataMover, DirectMover};
use super::validate::check_xattrs;
use super::{dtype_of_mode, invalid, xattr_chain_blocks, PublishError, Result};
use crate::coalesce::Step;
use crate::layout::{BLOCK_SIZE, INODE_SIZE};
use crate::record::{dtype, put_xattr, xattrs_len, InodeImage, Record};
use crate::region::PmRegion;
use std::collections::HashSet;

impl PublicArea {
    /// Apply one record of a recovery replay (see [`PublicArea::validate_with`]): a record
    /// for an `unsettled` inode that the public area, being ahead of the checkpoint, has
    /// already freed or recreated as another type is skipped — a later record of the replay
    /// frees or recreates that inode again. Returns whether the record was applied. Records
    /// are refused before anything is written, so a skipped record changed nothing.
    pub fn apply_replayed(&mut self, rec: &Record, unsettled: &HashSet<u64>, log: &PmRegion) -> Result<bool> {
        match self.apply(rec, log) {
            Ok(()) => Ok(true),
            Err(PublishError::Invalid { ino, why }) if unsettled.contains(&ino) => {
                tracing::debug!(ino, %why, "replay: record for an inode the public area is ahead on; skipped");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Apply one record, moving its data directly from `log` (the writer's log file).
    /// Writes are persisted but not fenced; the caller fences and then durably advances its
    /// checkpoint, then calls [`PublicArea::checkpoint_done`].
    pub fn apply(&mut self, rec: &Record, log: &PmRegion) -> Result<()> {
        self.apply_with(rec, &mut DirectMover::new(log))
    }

    /// Apply one record, its file data moved by `mover`. With a deferred mover the caller
    /// calls [`PublicArea::settle`] with the same mover before it fences and checkpoints.
    pub fn apply_with(&mut self, rec: &Record, mover: &mut dyn DataMover) -> Result<()> {
        let applied = match rec {
            // A permission fact for a checking publisher, not a change (validation checked it).
            Record::OpenWrite { .. } => return Ok(()),
            Record::Inode { fresh, img } => self.apply_inode(img, *fresh),
            Record::Dirent { dir, ino, dtype, name } => self.apply_dirent(*dir, name, *ino, *dtype),
            Record::Write { ino, off, len, data_off } => self.apply_write(*ino, *off, *len, *data_off, mover),
            Record::Truncate { ino, size } => {
                let mut inode = self.live_inode(*ino)?;
                self.truncate_blocks(&mut inode, *size, mover)?;
                self.write_inode(&inode)
            }
            Record::Punch { ino, off, len } => self.apply_punch(*ino, *off, *len, mover),
            Record::Alloc { ino, off, len } => self.apply_alloc(*ino, *off, *len, mover),
            Record::Xattrs { ino, attrs } => self.apply_xattrs(*ino, attrs),
            Record::FreeInode { ino } => self.apply_free(*ino),
        };
        applied?;
        // A record rewrites its inode only when the inode changes (a new xattr chain, a new
        // directory block...). In a recovery replay the torn write a crash left may already
        // hold the change, so nothing would rewrite it and the inode would stay torn:
        // rewrite it. Its words are each the old or the new value of that one update, and
        // the replay has just made the fields it changes what they must be.
        let target = rec.target();
        if self.suspect_inodes.contains(&target) {
            let inode = self.read_inode(target)?;
            if inode.img.mode != 0 {
                self.write_inode(&inode)?;
            }
        }
        Ok(())
    }

    /// Apply one step of a coalesced batch ([`crate::coalesce`]).
    pub fn apply_step(&mut self, step: &Step, mover: &mut dyn DataMover) -> Result<()> {
        match step {
            Step::Apply(rec) => self.apply_with(rec, mover),
            Step::Map { ino, off, len } => {
                let mut inode = self.live_inode(*ino)?;
                let k = inode.img.mode & libc::S_IFMT;
                if k != libc::S_IFREG && k != libc::S_IFLNK {
                    return Err(invalid(*ino, "data write to a non-file"));
                }
                self.map_blocks(&mut inode, *off, *len, mover)
            }
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

    pub(super) fn dir_slot_off(&self, dir: &PmInode, slot: u64) -> Result<u64> {
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
        let b = encode_dirent(ino, dt, name);
        let off = self.dir_slot_off(&d, slot)?;
        self.region.write(off, &b)?;
        self.region.persist(off, DIRENT_SIZE)?;
        Ok(())
    }

    fn apply_write(&mut self, ino: u64, off: u64, len: u64, data_off: u64, mover: &mut dyn DataMover) -> Result<()> {
        let mut inode = self.live_inode(ino)?;
        let k = inode.img.mode & libc::S_IFMT;
        if k != libc::S_IFREG && k != libc::S_IFLNK {
            return Err(invalid(ino, "data write to a non-file"));
        }
        if data_off.checked_add(len).is_none_or(|e| e > mover.log_len()) {
            return Err(invalid(ino, "write data outside the writer's log"));
        }
        let mut new_links = Vec::new();
        let mut pos = off;
        let end = off + len;
        let mut prev: Option<u64> = None;
        while pos < end {
            let idx = pos / BLOCK_SIZE;
            let within = pos % BLOCK_SIZE;
            let n = (BLOCK_SIZE - within).min(end - pos);
            let src = data_off + (pos - off);
            match self.data_block(&inode, idx)? {
                Some(b) => {
                    mover.copy(&self.region, b * BLOCK_SIZE + within, src, n)?;
                    prev = Some(b);
                }
                None => {
                    let b = self.alloc_for(prev.map(|p| p + 1), &new_links)?;
                    mover.fill_block(&self.region, b * BLOCK_SIZE, within, src, n)?;
                    new_links.push((idx, b));
                    prev = Some(b);
                }
            }
            pos += n;
        }
        self.link_new_blocks(&mut inode, new_links, mover)
    }

    fn truncate_blocks(&mut self, inode: &mut PmInode, size: u64, mover: &mut dyn DataMover) -> Result<()> {
        let keep = size.div_ceil(BLOCK_SIZE);
        self.free_range(inode, keep, u64::MAX)?;
        if !size.is_multiple_of(BLOCK_SIZE) {
            if let Some(b) = self.data_block(inode, size / BLOCK_SIZE)? {
                let within = size % BLOCK_SIZE;
                mover.zero(&self.region, b * BLOCK_SIZE + within, BLOCK_SIZE - within)?;
            }
        }
        Ok(())
    }

    fn apply_punch(&mut self, ino: u64, off: u64, len: u64, mover: &mut dyn DataMover) -> Result<()> {
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
            if let Some(b) = self.data_block(&inode, idx)? {
                mover.zero(&self.region, b * BLOCK_SIZE + within, n)?;
            }
            pos += n;
        }
        if first_full < last_full {
            self.free_range(&mut inode, first_full, last_full)?;
            self.write_inode(&inode)?;
        }
        Ok(())
    }

    fn apply_alloc(&mut self, ino: u64, off: u64, len: u64, mover: &mut dyn DataMover) -> Result<()> {
        let mut inode = self.live_inode(ino)?;
        if inode.img.mode & libc::S_IFMT != libc::S_IFREG {
            return Err(invalid(ino, "allocation for a non-file"));
        }
        self.map_blocks(&mut inode, off, len, mover)
    }

    /// A new data block for a record that has taken the blocks of `taken` so far; if none is
    /// left, those are given back (nothing points to them yet) and the record fails whole,
    /// so that a refused allocation leaves the free space as it found it.
    fn alloc_for(&mut self, goal: Option<u64>, taken: &[(u64, u64)]) -> Result<u64> {
        match self.alloc.alloc(goal) {
            Some(b) => Ok(b),
            None => {
                for &(_, b) in taken {
                    self.alloc.unclaim(b);
                }
                Err(PublishError::NoSpace)
            }
        }
    }

    /// Maps every unmapped block of [off, off+len) of a file to a new, zero-filled block.
    fn map_blocks(&mut self, inode: &mut PmInode, off: u64, len: u64, mover: &mut dyn DataMover) -> Result<()> {
        let mut new_links = Vec::new();
        let mut prev = None;
        for idx in off / BLOCK_SIZE..(off + len).div_ceil(BLOCK_SIZE) {
            match self.data_block(inode, idx)? {
                Some(b) => prev = Some(b),
                None => {
                    let b = self.alloc_for(prev.map(|p: u64| p + 1), &new_links)?;
                    mover.zero(&self.region, b * BLOCK_SIZE, BLOCK_SIZE)?;
                    new_links.push((idx, b));
                    prev = Some(b);
                }
            }
        }
        self.link_new_blocks(inode, new_links, mover)
    }

    fn apply_xattrs(&mut self, ino: u64, attrs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
        let mut inode = self.live_inode(ino)?;
        check_xattrs(ino, attrs)?;
        self.suspect_xattrs.remove(&ino);
        let old = if inode.xattr != 0 { self.reader.read_xattrs(inode.xattr)?.0 } else { Vec::new() };
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
                let head = i == 0;
                let block = XattrBlock {
                    used: part.len(),
                    next: chain.get(i + 1).copied().unwrap_or(0),
                    total: if head { stream.len() } else { 0 },
                    count: if head { attrs.len() } else { 0 },
                    stream_crc: if head { crc32c::crc32c(&stream) } else { 0 },
                };
                block.encode(part, &mut img);
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
}
