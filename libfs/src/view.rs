//! The DRAM view: the file system as the client sees it, published state plus everything
//! in its log that is not yet published.
//!
//! The view changes only by applying decoded log records ([`View::apply`]) after their entry
//! is durable, so it is by construction what publication of the log will produce. File
//! contents are not held here: each file has an *overlay*, an interval map of its
//! unpublished bytes (pointing into the log in PM) and of ranges that read as zeros
//! (truncated or punched but not yet published). Reads take the overlay first and fall
//! through to the public area. Once entries up to some LSN are published, overlay segments
//! from those entries are dropped ([`View::trim`]): the public area now holds the same bytes.

use linefs_pm::bitmap::Bitmap;
use linefs_pm::public::InodeReload;
use linefs_pm::record::{InodeImage, Record, MAX_FILE_SIZE};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a range of unpublished file bytes lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Src {
    /// In the log, starting at this region offset.
    Log(u64),
    /// Reads as zeros.
    Zero,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    pub end: u64,
    pub src: Src,
    /// LSN of the entry that wrote it.
    pub lsn: u64,
}

/// Non-overlapping segments keyed by start offset.
#[derive(Debug, Default, Clone)]
pub struct Overlay {
    pub segs: BTreeMap<u64, Seg>,
}

impl Overlay {
    /// Cut [start, end) out of every segment.
    fn clear(&mut self, start: u64, end: u64) {
        // A segment starting before `start` may reach into the range.
        if let Some((&s, &seg)) = self.segs.range(..start).next_back() {
            if seg.end > start {
                self.segs.insert(s, Seg { end: start, ..seg });
                if seg.end > end {
                    self.segs.insert(end, Seg { src: shift(seg.src, end - s), ..seg });
                }
            }
        }
        let inside: Vec<u64> = self.segs.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            let seg = self.segs.remove(&s).expect("present");
            if seg.end > end {
                self.segs.insert(end, Seg { src: shift(seg.src, end - s), ..seg });
            }
        }
    }

    pub fn insert(&mut self, start: u64, end: u64, src: Src, lsn: u64) {
        if start >= end {
            return;
        }
        self.clear(start, end);
        self.segs.insert(start, Seg { end, src, lsn });
    }

    /// Segments overlapping [start, end), clipped to it, in order.
    pub fn overlapping(&self, start: u64, end: u64) -> Vec<(u64, u64, Src)> {
        let mut out = Vec::new();
        let first = self.segs.range(..=start).next_back().map(|(&s, _)| s).unwrap_or(start);
        for (&s, seg) in self.segs.range((Bound::Included(first), Bound::Excluded(end))) {
            if seg.end <= start {
                continue;
            }
            let a = s.max(start);
            let b = seg.end.min(end);
            out.push((a, b, shift(seg.src, a - s)));
        }
        out
    }

    /// Drop segments written by entries before `lsn`.
    pub fn trim(&mut self, lsn: u64) {
        self.segs.retain(|_, seg| seg.lsn >= lsn);
    }
}

/// Block size the file data is mapped in.
const BLOCK: u64 = linefs_pm::layout::BLOCK_SIZE;

/// Unpublished preallocations of one file: block ranges [first, end) with the LSN of the
/// entry that made each. Truncation and hole punching cut them as publication will.
#[derive(Debug, Default, Clone)]
pub struct Allocs {
    pub ranges: Vec<(u64, u64, u64)>,
}

impl Allocs {
    fn add(&mut self, off: u64, end: u64, lsn: u64) {
        if off < end {
            self.ranges.push((off / BLOCK, end.div_ceil(BLOCK), lsn));
        }
    }

    /// Remove blocks [a, b) from every range.
    fn cut(&mut self, a: u64, b: u64) {
        if a >= b {
            return;
        }
        let mut out = Vec::with_capacity(self.ranges.len());
        for &(s, e, lsn) in &self.ranges {
            if e <= a || s >= b {
                out.push((s, e, lsn));
                continue;
            }
            if s < a {
                out.push((s, a, lsn));
            }
            if e > b {
                out.push((b, e, lsn));
            }
        }
        self.ranges = out;
    }

    fn trim(&mut self, lsn: u64) {
        self.ranges.retain(|r| r.2 >= lsn);
    }
}

fn shift(src: Src, by: u64) -> Src {
    match src {
        Src::Log(o) => Src::Log(o + by),
        Src::Zero => Src::Zero,
    }
}

/// A directory's entries with stable readdir cookies.
#[derive(Debug, Default, Clone)]
pub struct Dir {
    pub names: HashMap<Vec<u8>, (u64, u8, u64)>,
    pub order: BTreeMap<u64, Vec<u8>>,
    next_cookie: u64,
}

/// First cookie of a real entry: 1 and 2 are "." and "..".
pub const FIRST_COOKIE: u64 = 3;

impl Dir {
    fn set(&mut self, name: &[u8], ino: u64, dtype: u8) {
        if self.next_cookie < FIRST_COOKIE {
            self.next_cookie = FIRST_COOKIE;
        }
        if let Some(e) = self.names.get_mut(name) {
            e.0 = ino;
            e.1 = dtype;
            return;
        }
        let c = self.next_cookie;
        self.next_cookie += 1;
        self.names.insert(name.to_vec(), (ino, dtype, c));
        self.order.insert(c, name.to_vec());
    }

    fn remove(&mut self, name: &[u8]) {
        if let Some((_, _, c)) = self.names.remove(name) {
            self.order.remove(&c);
        }
    }

    pub fn get(&self, name: &[u8]) -> Option<(u64, u8)> {
        self.names.get(name).map(|&(i, t, _)| (i, t))
    }

    /// The cookie the next entry added will get: every entry present now has a smaller one.
    pub fn next_cookie(&self) -> u64 {
        self.next_cookie.max(FIRST_COOKIE)
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }
}

/// A file's count of data blocks mapped in the public area, or not known since a
/// publication touched the file (counting walks its whole block map, which a client
/// catching up after every published chunk of a large file cannot afford each time).
#[derive(Debug)]
pub struct PubBlocks(AtomicU64);

impl PubBlocks {
    const UNKNOWN: u64 = u64::MAX;

    pub fn known(n: u64) -> PubBlocks {
        PubBlocks(AtomicU64::new(n))
    }

    /// Not known any more: the next [`PubBlocks::get_or`] counts.
    pub fn forget(&self) {
        self.0.store(Self::UNKNOWN, Ordering::Relaxed);
    }

    /// The count, from `count` if it is not known (and kept).
    pub fn get_or(&self, count: impl FnOnce() -> u64) -> u64 {
        match self.0.load(Ordering::Relaxed) {
            Self::UNKNOWN => {
                let n = count();
                self.0.store(n, Ordering::Relaxed);
                n
            }
            n => n,
        }
    }
}

impl Clone for PubBlocks {
    fn clone(&self) -> PubBlocks {
        PubBlocks(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

/// One inode in the view.
#[derive(Debug, Clone)]
pub struct Node {
    pub img: InodeImage,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub dir: Option<Dir>,
    pub overlay: Overlay,
    /// References the kernel holds (FUSE lookup count).
    pub lookups: u64,
    /// Open file handles.
    pub opens: u64,
    /// Data blocks mapped in the public area, for `st_blocks`: known at load, then counted
    /// again on the first stat after a publication touched the file.
    pub pub_blocks: PubBlocks,
    /// Unpublished preallocations (fallocate), for `st_blocks`.
    pub allocs: Allocs,
    /// LSN of the unpublished entry that created this incarnation of the inode number: until
    /// it is published the public area knows nothing of it (or only an earlier file's blocks).
    pub fresh: Option<u64>,
}

impl Node {
    /// The file blocks that unpublished entries write or preallocate, as sorted, disjoint
    /// ranges of block indices: what publication may add to the blocks the file maps.
    pub fn unpublished_blocks(&self) -> Vec<(u64, u64)> {
        let mut r: Vec<(u64, u64)> = self
            .overlay
            .segs
            .iter()
            .filter(|(_, g)| matches!(g.src, Src::Log(_)))
            .map(|(&s, g)| (s / BLOCK, g.end.div_ceil(BLOCK)))
            .chain(self.allocs.ranges.iter().map(|&(a, b, _)| (a, b)))
            .collect();
        r.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(r.len());
        for (a, b) in r {
            match out.last_mut() {
                Some(last) if a <= last.1 => last.1 = last.1.max(b),
                _ => out.push((a, b)),
            }
        }
        out
    }

    pub fn new(img: InodeImage) -> Node {
        let dir = (img.mode & libc::S_IFMT == libc::S_IFDIR).then(Dir::default);
        Node {
            img,
            xattrs: BTreeMap::new(),
            dir,
            overlay: Overlay::default(),
            lookups: 0,
            opens: 0,
            pub_blocks: PubBlocks::known(0),
            allocs: Allocs::default(),
            fresh: None,
        }
    }

    pub fn is_dir(&self) -> bool {
        self.dir.is_some()
    }

    pub fn kind_bits(&self) -> u32 {
        self.img.mode & libc::S_IFMT
    }
}

/// The whole view.
#[derive(Debug)]
pub struct View {
    pub nodes: HashMap<u64, Node>,
    /// Inode numbers in use (0 and the root are never free).
    pub inos: Bitmap,
    /// Inodes whose overlay or unpublished preallocations are non-empty.
    overlaid: HashSet<u64>,
}

impl View {
    pub fn new(inode_count: u64) -> View {
        let mut inos = Bitmap::new(inode_count);
        inos.set(0);
        inos.set(1);
        View { nodes: HashMap::new(), inos, overlaid: HashSet::new() }
    }

    pub fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn node_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino)
    }

    /// Apply the records of one durable entry at `lsn`.
    pub fn apply(&mut self, records: &[Record], lsn: u64) {
        for r in records {
            self.apply_one(r, lsn);
        }
    }

    fn apply_one(&mut self, r: &Record, lsn: u64) {
        match r {
            Record::Inode { fresh, img } => {
                if *fresh {
                    let mut n = Node::new(*img);
                    // A fresh inode replacing an orphan keeps nothing of it.
                    if let Some(old) = self.nodes.remove(&img.ino) {
                        n.lookups = old.lookups;
                    }
                    // The number may have been freed by an entry not yet published: until
                    // this one is, the public area still maps the old incarnation's blocks.
                    // The new file reads as zeros wherever it has not written.
                    n.overlay.insert(0, MAX_FILE_SIZE, Src::Zero, lsn);
                    n.fresh = Some(lsn);
                    self.overlaid.insert(img.ino);
                    self.inos.set(img.ino);
                    self.nodes.insert(img.ino, n);
                } else if let Some(n) = self.nodes.get_mut(&img.ino) {
                    n.img = *img;
                }
            }
            Record::Dirent { dir, ino, dtype, name } => {
                if let Some(d) = self.nodes.get_mut(dir).and_then(|n| n.dir.as_mut()) {
                    if *ino == 0 {
                        d.remove(name);
                    } else {
                        d.set(name, *ino, *dtype);
                    }
                }
            }
            Record::Write { ino, off, len, data_off } => {
                self.overlay(*ino, *off, off + len, Src::Log(*data_off), lsn);
            }
            Record::Truncate { ino, size } => {
                self.overlay(*ino, *size, MAX_FILE_SIZE, Src::Zero, lsn);
                if let Some(n) = self.nodes.get_mut(ino) {
                    // Blocks past the last one holding a byte of the file are freed.
                    n.allocs.cut(size.div_ceil(BLOCK), u64::MAX);
                }
            }
            Record::Punch { ino, off, len } => {
                self.overlay(*ino, *off, off + len, Src::Zero, lsn);
                if let Some(n) = self.nodes.get_mut(ino) {
                    // Blocks wholly inside the hole are freed; partial ones are zeroed.
                    n.allocs.cut(off.div_ceil(BLOCK), off.saturating_add(*len) / BLOCK);
                }
            }
            Record::Alloc { ino, off, len } => {
                if let Some(n) = self.nodes.get_mut(ino) {
                    n.allocs.add(*off, off.saturating_add(*len), lsn);
                    self.overlaid.insert(*ino);
                }
            }
            Record::Xattrs { ino, attrs } => {
                if let Some(n) = self.nodes.get_mut(ino) {
                    n.xattrs = attrs.iter().cloned().collect();
                }
            }
            Record::FreeInode { ino } => {
                self.nodes.remove(ino);
                self.overlaid.remove(ino);
                self.inos.clear(*ino);
            }
            // For nicfs's permission checks; the view is unchanged.
            Record::OpenWrite { .. } => {}
        }
    }

    fn overlay(&mut self, ino: u64, start: u64, end: u64, src: Src, lsn: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.overlay.insert(start, end, src, lsn);
            self.overlaid.insert(ino);
        }
    }

    /// Entries before `lsn` are published: drop their overlay segments and preallocations.
    /// Returns the inodes that had any (their public state changed).
    pub fn trim(&mut self, lsn: u64) -> Vec<u64> {
        let nodes = &mut self.nodes;
        let visited: Vec<u64> = self.overlaid.iter().copied().collect();
        self.overlaid.retain(|ino| match nodes.get_mut(ino) {
            Some(n) => {
                n.overlay.trim(lsn);
                n.allocs.trim(lsn);
                if n.fresh.is_some_and(|f| f < lsn) {
                    n.fresh = None;
                }
                !n.overlay.segs.is_empty() || !n.allocs.ranges.is_empty() || n.fresh.is_some()
            }
            None => false,
        });
        visited
    }

    /// Replaces inode `ino` with what the public area holds now (`None`: it has no such
    /// inode) — offload mode, when a lease on it is newly held: whatever this client had of
    /// it is published (nicfs publishes a lease holder's log before it moves the lease), so
    /// unpublished segments and preallocations are dropped. The kernel's references and open
    /// handles stay, and a directory keeps the cookies of the names it still has (open
    /// directory streams go on where they were).
    pub fn reload(&mut self, ino: u64, loaded: Option<InodeReload>) {
        let old = self.nodes.remove(&ino);
        self.overlaid.remove(&ino);
        let Some((li, ents)) = loaded else {
            self.inos.clear(ino);
            return;
        };
        let mut n = Node::new(li.img);
        n.pub_blocks = PubBlocks::known(li.blocks);
        n.xattrs = li.xattrs.into_iter().collect();
        if let Some(o) = &old {
            n.lookups = o.lookups;
            n.opens = o.opens;
        }
        if let (Some(d), Some(ents)) = (n.dir.as_mut(), ents) {
            if let Some(mut od) = old.and_then(|o| o.dir) {
                let keep: HashSet<&[u8]> = ents.iter().map(|e| e.name.as_slice()).collect();
                let gone: Vec<Vec<u8>> = od.names.keys().filter(|k| !keep.contains(k.as_slice())).cloned().collect();
                for name in gone {
                    od.remove(&name);
                }
                *d = od;
            }
            for e in &ents {
                d.set(&e.name, e.ino, e.dtype);
            }
        }
        self.inos.set(ino);
        self.nodes.insert(ino, n);
    }

    /// Whether `anc` is `ino` or one of its ancestors (following directory parents).
    pub fn is_ancestor(&self, anc: u64, mut ino: u64) -> bool {
        for _ in 0..100_000 {
            if ino == anc {
                return true;
            }
            match self.nodes.get(&ino) {
                Some(n) if n.img.parent != ino && n.img.parent != 0 => ino = n.img.parent,
                _ => return false,
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlay_newest_wins_and_splits() {
        let mut o = Overlay::default();
        o.insert(0, 100, Src::Log(1000), 1);
        o.insert(40, 60, Src::Log(5000), 2);
        assert_eq!(
            o.overlapping(0, 100),
            vec![(0, 40, Src::Log(1000)), (40, 60, Src::Log(5000)), (60, 100, Src::Log(1060))]
        );
        assert_eq!(o.overlapping(50, 70), vec![(50, 60, Src::Log(5010)), (60, 70, Src::Log(1060))]);
        o.insert(10, 200, Src::Zero, 3);
        assert_eq!(o.overlapping(0, 300), vec![(0, 10, Src::Log(1000)), (10, 200, Src::Zero)]);
        o.trim(3);
        assert_eq!(o.overlapping(0, 300), vec![(10, 200, Src::Zero)]);
    }

    proptest::proptest! {
        /// The overlay agrees with a byte-array model after any sequence of inserts.
        #[test]
        fn overlay_matches_model(ops in proptest::collection::vec((0u64..64, 1u64..32, proptest::bool::ANY), 1..40)) {
            let mut o = Overlay::default();
            let mut model: Vec<Option<(Src, u64)>> = vec![None; 128];
            for (i, (start, len, zero)) in ops.iter().enumerate() {
                let end = start + len;
                let src = if *zero { Src::Zero } else { Src::Log(10_000 * (i as u64 + 1)) };
                o.insert(*start, end, src, i as u64);
                for p in *start..end {
                    model[p as usize] = Some((shift(src, p - start), i as u64));
                }
            }
            let mut got: Vec<Option<(Src, u64)>> = vec![None; 128];
            for (a, b, src) in o.overlapping(0, 128) {
                for p in a..b {
                    got[p as usize] = Some((shift(src, p - a), 0));
                }
            }
            for p in 0..128 {
                proptest::prop_assert_eq!(got[p].map(|g| g.0), model[p].map(|m| m.0));
            }
        }
    }
}
