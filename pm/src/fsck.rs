//! `fsck`: a read-only consistency check of a node's public area, reporting every problem
//! it finds (never stopping at the first, never writing). `linefs fsck` runs it on a node
//! directory; the crash suite and the soak run it after every recovery.
//!
//! What it checks, and what linefs keeps (so what "consistent" means here):
//!
//! * the superblock and geometry ([`check_dir`]: magic, version, checksum, sizes; every log
//!   file there with the size the superblock names);
//! * replica copies ([`crate::replica`], in `replicas/`): each of the log size the superblock
//!   names, with a valid slot header (magic, checksum, slot, ring size); stray files there
//!   (a `.new` left by a crash while one was created, anything else) are notes;
//! * every inode: its checksum, the number it records, no torn free (a free slot that is
//!   not all zero);
//! * blocks: every block pointer (direct, indirect at each level, xattr chain) inside the
//!   data area, and every block owned exactly once — by one file, once. linefs persists no
//!   allocation bitmap (the allocator is rebuilt from the block maps at load), so "free and
//!   used at once" and "used but unmarked" cannot disagree on disk: a block is used exactly
//!   when a map points at it, and a block two maps point at is the one way allocation can
//!   be inconsistent. Likewise the inode table is the inode bitmap (mode 0 = free);
//! * extended attributes: every xattr chain's blocks and its stream checksum;
//! * names: every directory entry names a live inode of the type the entry says; no name
//!   twice in a directory;
//! * link counts, as linefs keeps them: a non-directory's `nlink` is the number of names
//!   pointing at it; a directory has exactly one name (the root none) and `nlink` 2 + its
//!   subdirectories;
//! * parent pointers: a directory's `parent` is the directory holding its name; the
//!   root's is itself (a non-directory's `parent` is not kept and not checked);
//! * the tree: every named inode reachable from the root, no directory cycle;
//! * orphans (an inode with no name): recovery frees them, so on a node at rest each is a
//!   problem; on a live node one may be open (unlinked but open), so each is a *note*
//!   ("orphan (may be open)"), not a problem.
//!
//! Notes also cover a directory slot that holds no valid entry but is not zero (a torn
//! write of a slot, which linefs treats as free and reuses: harmless).
//!
//! On a live node (nicfs publishing while fsck reads the public file read-only) a snapshot
//! may be mid-publication: `linefs fsck` re-checks and reports only what two checks a moment
//! apart agree on; live fsck is best-effort (docs/ARCHITECTURE.md, *fsck*).

use crate::layout::{FormatError, Geometry, Superblock, BLOCK_SIZE, INODE_SIZE};
use crate::node::{log_file_name, PUBLIC_FILE};
use crate::public::format::{decode_dirent, root_span, PmInode, DIRENTS_PER_BLOCK, DIRENT_SIZE};
use crate::public::{dtype_of_mode, PublicReader};
use crate::record::ROOT_INO;
use crate::region::PmRegion;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// The kind of a problem (its name is what `--json` and the one-line report say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A log file missing or of the wrong size.
    Geometry,
    /// An inode whose checksum does not match.
    InodeChecksum,
    /// A free inode slot that is not all zero.
    TornFree,
    /// An inode that records another number than its slot's.
    InodeNumber,
    /// A block pointer outside the data area.
    BadPointer,
    /// A block owned twice (by two files, or twice by one).
    SharedBlock,
    /// An xattr chain that fails its checks.
    Xattrs,
    /// A name pointing at a free inode.
    DanglingName,
    /// A name whose type is not its inode's.
    WrongType,
    /// A name found twice in one directory.
    DuplicateName,
    /// A link count that is not what the names say.
    LinkCount,
    /// A directory with more than one name (a hard link to a directory), or a named root.
    DirectoryNames,
    /// A directory whose parent pointer is not the directory holding its name.
    Parent,
    /// A directory in a cycle.
    Cycle,
    /// A named inode the root does not reach.
    Unreachable,
    /// An inode with no name (on a live node: a note, it may be open).
    Orphan,
    /// The root missing or not a directory.
    Root,
    /// A directory slot that is not zero but holds no valid entry (a note).
    TornSlot,
    /// A replica copy of the wrong size or with an invalid header (or a stray file in
    /// `replicas/`: a note).
    Replica,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Geometry => "geometry",
            Kind::InodeChecksum => "inode-checksum",
            Kind::TornFree => "torn-free",
            Kind::InodeNumber => "inode-number",
            Kind::BadPointer => "bad-pointer",
            Kind::SharedBlock => "shared-block",
            Kind::Xattrs => "xattrs",
            Kind::DanglingName => "dangling-name",
            Kind::WrongType => "wrong-type",
            Kind::DuplicateName => "duplicate-name",
            Kind::LinkCount => "link-count",
            Kind::DirectoryNames => "directory-names",
            Kind::Parent => "parent",
            Kind::Cycle => "cycle",
            Kind::Unreachable => "unreachable",
            Kind::Orphan => "orphan",
            Kind::Root => "root",
            Kind::TornSlot => "torn-slot",
            Kind::Replica => "replica",
        }
    }
}

/// One problem (or note): of which kind, at which inode (0: the node), and what exactly.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Problem {
    pub kind: Kind,
    pub ino: u64,
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ino == 0 {
            write!(f, "node: {}: {}", self.kind.name(), self.detail)
        } else {
            write!(f, "inode {}: {}: {}", self.ino, self.kind.name(), self.detail)
        }
    }
}

/// How to judge what is found.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// The node is live (nicfs or a mount has it): an orphan may be open, so it is a note.
    pub live: bool,
}

/// What a check found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Each problem, in inode order: none means consistent.
    pub problems: Vec<Problem>,
    /// What is worth saying but not wrong (orphans of a live node, torn free slots).
    pub notes: Vec<Problem>,
    /// Live inodes, directories among them, and data blocks in use / in the data area.
    pub inodes: u64,
    pub dirs: u64,
    pub blocks_used: u64,
    pub data_blocks: u64,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    /// The problems found by both `self` and `other` (two checks of a live node).
    pub fn agreeing_with(mut self, other: &Report) -> Report {
        let again: HashSet<&Problem> = other.problems.iter().collect();
        self.problems.retain(|p| again.contains(p));
        self
    }
}

/// Checks the node in directory `dir` without writing to it: the public file is mapped
/// read-only, the log files are only looked at. Err: the superblock or geometry is not a
/// linefs node's (nothing further can be read).
pub fn check_dir(dir: &Path, opts: &Options) -> Result<Report, FormatError> {
    let public = Arc::new(PmRegion::open_read_only(&dir.join(PUBLIC_FILE))?);
    let geo = Superblock::read(&public)?.geometry;
    let mut report = check(&PublicReader::shared(public, geo), opts);
    for slot in 0..geo.log_slots {
        let path = dir.join(log_file_name(slot));
        let detail = match std::fs::metadata(&path) {
            Ok(m) if m.len() == geo.log_size() => continue,
            Ok(m) => format!("{} is {} bytes, the superblock says {}", path.display(), m.len(), geo.log_size()),
            Err(e) => format!("{}: {e}", path.display()),
        };
        report.problems.insert(0, Problem { kind: Kind::Geometry, ino: 0, detail });
    }
    check_replicas(dir, &geo, &mut report);
    Ok(report)
}

/// The replica copies' part of [`check_dir`]: sizes and headers, read-only.
fn check_replicas(dir: &Path, geo: &Geometry, report: &mut Report) {
    use crate::replica::{parse_replica_file_name, REPLICAS_DIR};
    let rdir = dir.join(REPLICAS_DIR);
    let Ok(entries) = std::fs::read_dir(&rdir) else {
        return;
    };
    let mut names: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    names.sort();
    for name in names {
        let path = rdir.join(&name);
        let Some((origin, slot)) = name.to_str().and_then(parse_replica_file_name) else {
            let detail = format!("{}: not a replica copy (a stray file)", path.display());
            report.notes.push(Problem { kind: Kind::Replica, ino: 0, detail });
            continue;
        };
        let problem = match std::fs::metadata(&path) {
            Ok(m) if !m.is_file() => Some("not a regular file".to_string()),
            Ok(m) if m.len() != geo.log_size() => {
                Some(format!("{} bytes, the superblock says {}", m.len(), geo.log_size()))
            }
            Ok(_) => PmRegion::open_read_only(&path)
                .map_err(FormatError::from)
                .and_then(|r| crate::oplog::LogSlot::new(Arc::new(r), geo, slot).published_lsn())
                .err()
                .map(|e| e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = problem {
            let detail = format!("{} (copy of node {origin}'s slot {slot}): {why}", path.display());
            report.problems.insert(0, Problem { kind: Kind::Replica, ino: 0, detail });
        }
    }
}

/// Checks a node packed in one region (tests and the crash suite: a recovered image).
pub fn check_packed(region: &Arc<PmRegion>, opts: &Options) -> Result<Report, FormatError> {
    let node = crate::node::NodePm::packed(region.clone())?;
    Ok(check(&PublicReader::new(node.public.clone(), node.geometry), opts))
}

/// Checks the public area `reader` reads (its geometry already checked).
pub fn check(reader: &PublicReader, opts: &Options) -> Report {
    let mut c = Checker::new(reader, *opts);
    c.inodes();
    c.names();
    c.links();
    c.tree();
    c.finish()
}

/// An inode as the check keeps it.
struct Seen {
    inode: PmInode,
    /// Its checksum matched: its pointers are followed.
    ok: bool,
}

struct Checker<'a> {
    reader: &'a PublicReader,
    geo: Geometry,
    opts: Options,
    inodes: BTreeMap<u64, Seen>,
    /// Block → the inode that owns it (first seen).
    owner: HashMap<u64, u64>,
    /// Directory → its data blocks, in map order.
    dir_blocks: HashMap<u64, Vec<u64>>,
    /// Directory → its entries (name, inode, type).
    entries: BTreeMap<u64, Vec<(Vec<u8>, u64, u8)>>,
    /// Inode → the directories holding a name of it (once per name).
    names: BTreeMap<u64, Vec<u64>>,
    problems: Vec<Problem>,
    notes: Vec<Problem>,
}

impl<'a> Checker<'a> {
    fn new(reader: &'a PublicReader, opts: Options) -> Checker<'a> {
        Checker {
            reader,
            geo: *reader.geometry(),
            opts,
            inodes: BTreeMap::new(),
            owner: HashMap::new(),
            dir_blocks: HashMap::new(),
            entries: BTreeMap::new(),
            names: BTreeMap::new(),
            problems: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn problem(&mut self, kind: Kind, ino: u64, detail: impl Into<String>) {
        self.problems.push(Problem { kind, ino, detail: detail.into() });
    }

    fn note(&mut self, kind: Kind, ino: u64, detail: impl Into<String>) {
        self.notes.push(Problem { kind, ino, detail: detail.into() });
    }

    fn read(&mut self, ino: u64, off: u64, buf: &mut [u8]) -> bool {
        match self.reader.region().read(off, buf) {
            Ok(()) => true,
            Err(e) => {
                self.problem(Kind::BadPointer, ino, format!("cannot read offset {off}: {e}"));
                false
            }
        }
    }

    /// The inode table: every slot, then each live inode's blocks.
    fn inodes(&mut self) {
        let mut raw = [0u8; INODE_SIZE as usize];
        for ino in 1..self.geo.inode_count {
            if !self.read(ino, self.geo.inode_off(ino), &mut raw) {
                continue;
            }
            if raw.iter().all(|&b| b == 0) {
                continue;
            }
            let (mut inode, mut ok) = PmInode::decode(&raw);
            if !ok && self.opts.live {
                // Caught mid-update: the shared reader re-reads until the checksum matches.
                if let Ok(again) = self.reader.read_inode(ino) {
                    (inode, ok) = (again, true);
                }
            }
            if !ok {
                self.problem(Kind::InodeChecksum, ino, "checksum mismatch (its pointers are not followed)");
            }
            if inode.img.mode == 0 {
                if ok {
                    self.problem(Kind::TornFree, ino, "free (mode 0) but not zeroed");
                }
                continue;
            }
            if ok && inode.img.ino != ino {
                self.problem(Kind::InodeNumber, ino, format!("records number {}", inode.img.ino));
            }
            self.inodes.insert(ino, Seen { inode, ok });
        }
        let live: Vec<u64> = self.inodes.iter().filter(|(_, s)| s.ok).map(|(&i, _)| i).collect();
        for ino in live {
            self.blocks_of(ino);
        }
    }

    /// Claims `block` for `ino` (reporting a second owner); whether to follow it.
    fn claim(&mut self, ino: u64, block: u64, what: &str) -> bool {
        if !self.geo.is_data_block(block) {
            self.problem(Kind::BadPointer, ino, format!("{what} pointer {block} outside the data area"));
            return false;
        }
        match self.owner.insert(block, ino) {
            None => true,
            Some(first) => {
                self.owner.insert(block, first);
                let who = if first == ino { "itself already".to_string() } else { format!("inode {first}") };
                self.problem(Kind::SharedBlock, ino, format!("{what} block {block} is also owned by {who}"));
                false
            }
        }
    }

    fn blocks_of(&mut self, ino: u64) {
        let inode = self.inodes[&ino].inode;
        let is_dir = inode.is_dir();
        let mut data = Vec::new();
        for (r, &p) in inode.roots.iter().enumerate() {
            if p == 0 {
                continue;
            }
            let (_, level) = root_span(r);
            let what = if level == 0 { "data" } else { "indirect" };
            if self.claim(ino, p, what) {
                self.walk(ino, p, level, &mut data);
            }
        }
        if inode.xattr != 0 {
            self.xattrs(ino, inode.xattr);
        }
        if is_dir {
            self.dir_blocks.insert(ino, data);
        }
    }

    /// Walks the subtree of `block` at `level` (0: a data block), collecting data blocks.
    fn walk(&mut self, ino: u64, block: u64, level: u32, data: &mut Vec<u64>) {
        if level == 0 {
            data.push(block);
            return;
        }
        let ptrs = match self.reader.read_ptrs(block) {
            Ok(p) => p,
            Err(e) => return self.problem(Kind::BadPointer, ino, format!("indirect block {block}: {e}")),
        };
        for p in ptrs.into_iter().filter(|&p| p != 0) {
            let what = if level == 1 { "data" } else { "indirect" };
            if self.claim(ino, p, what) {
                self.walk(ino, p, level - 1, data);
            }
        }
    }

    fn xattrs(&mut self, ino: u64, first: u64) {
        if !self.geo.is_data_block(first) {
            return self.problem(Kind::BadPointer, ino, format!("xattr pointer {first} outside the data area"));
        }
        match self.reader.read_xattrs(first) {
            Ok((chain, attrs)) => {
                for b in chain {
                    self.claim(ino, b, "xattr");
                }
                if attrs.is_none() {
                    self.problem(Kind::Xattrs, ino, format!("the xattr chain from block {first} fails its checks"));
                }
            }
            Err(e) => self.problem(Kind::Xattrs, ino, format!("xattr chain from block {first}: {e}")),
        }
    }

    /// Every directory's entries: each names a live inode of its type, once.
    fn names(&mut self) {
        let dirs: Vec<(u64, Vec<u64>)> = self.dir_blocks.iter().map(|(&d, b)| (d, b.clone())).collect();
        let mut block = vec![0u8; BLOCK_SIZE as usize];
        for (dir, blocks) in dirs {
            let mut seen = HashSet::new();
            let mut ents = Vec::new();
            for b in blocks {
                if !self.read(dir, b * BLOCK_SIZE, &mut block) {
                    continue;
                }
                for k in 0..DIRENTS_PER_BLOCK as usize {
                    let s = &block[k * DIRENT_SIZE as usize..(k + 1) * DIRENT_SIZE as usize];
                    match decode_dirent(s, self.geo.inode_count) {
                        Some((child, dt, name)) => {
                            if !seen.insert(name.to_vec()) {
                                let n = String::from_utf8_lossy(name).into_owned();
                                self.problem(Kind::DuplicateName, dir, format!("name {n:?} is there twice"));
                                continue;
                            }
                            ents.push((name.to_vec(), child, dt));
                        }
                        None if s.iter().all(|&x| x == 0) => {}
                        None => self.note(Kind::TornSlot, dir, format!("a slot of block {b} holds no valid entry")),
                    }
                }
            }
            for (name, child, dt) in &ents {
                let n = String::from_utf8_lossy(name).into_owned();
                match self.inodes.get(child) {
                    None => self.problem(Kind::DanglingName, dir, format!("{n:?} names inode {child}, which is free")),
                    Some(s) => {
                        let want = dtype_of_mode(s.inode.img.mode);
                        if *dt != want {
                            self.problem(
                                Kind::WrongType,
                                dir,
                                format!("{n:?} says type {dt}, inode {child} is of type {want}"),
                            );
                        }
                        self.names.entry(*child).or_default().push(dir);
                    }
                }
            }
            self.entries.insert(dir, ents);
        }
    }

    fn is_dir(&self, ino: u64) -> bool {
        self.inodes.get(&ino).is_some_and(|s| s.inode.is_dir())
    }

    /// Link counts, parents, directories' names, orphans.
    fn links(&mut self) {
        match self.inodes.get(&ROOT_INO) {
            Some(s) if s.inode.is_dir() => {}
            Some(_) => self.problem(Kind::Root, ROOT_INO, "the root is not a directory"),
            None => self.problem(Kind::Root, ROOT_INO, "the root inode is free"),
        }
        let all: Vec<u64> = self.inodes.keys().copied().collect();
        for ino in all {
            let img = self.inodes[&ino].inode.img;
            let holders = self.names.get(&ino).cloned().unwrap_or_default();
            if img.mode & libc::S_IFMT == libc::S_IFDIR {
                let subdirs =
                    self.entries.get(&ino).map_or(0, |e| e.iter().filter(|(_, c, _)| self.is_dir(*c)).count());
                let want = 2 + subdirs as u64;
                if ino == ROOT_INO {
                    if !holders.is_empty() {
                        self.problem(Kind::DirectoryNames, ino, format!("the root is named in {holders:?}"));
                    }
                    if img.parent != ROOT_INO {
                        self.problem(Kind::Parent, ino, format!("the root's parent is {}, not itself", img.parent));
                    }
                } else if holders.len() > 1 {
                    self.problem(
                        Kind::DirectoryNames,
                        ino,
                        format!("a directory with {} names (in {holders:?})", holders.len()),
                    );
                } else if let Some(&holder) = holders.first() {
                    if img.parent != holder {
                        self.problem(Kind::Parent, ino, format!("parent {}, but its name is in {holder}", img.parent));
                    }
                }
                if holders.is_empty() && ino != ROOT_INO {
                    self.orphan(ino, img.nlink);
                } else if u64::from(img.nlink) != want {
                    self.problem(
                        Kind::LinkCount,
                        ino,
                        format!("nlink {}, a directory with {subdirs} subdirectories has {want}", img.nlink),
                    );
                }
            } else if holders.is_empty() {
                self.orphan(ino, img.nlink);
            } else if img.nlink as usize != holders.len() {
                self.problem(Kind::LinkCount, ino, format!("nlink {}, but {} names", img.nlink, holders.len()));
            }
        }
    }

    fn orphan(&mut self, ino: u64, nlink: u32) {
        let what = if nlink == 0 { "no name (nlink 0)".to_string() } else { format!("no name, but nlink {nlink}") };
        if self.opts.live && nlink == 0 {
            self.note(Kind::Orphan, ino, format!("orphan (may be open): {what}"));
        } else {
            self.problem(Kind::Orphan, ino, format!("orphan: {what}"));
        }
    }

    /// Reachability from the root; a directory not reached is in a cycle or below a
    /// directory with no name.
    fn tree(&mut self) {
        let mut reached = BTreeSet::new();
        if self.is_dir(ROOT_INO) {
            let mut queue = vec![ROOT_INO];
            reached.insert(ROOT_INO);
            while let Some(d) = queue.pop() {
                for (_, child, _) in self.entries.get(&d).map(Vec::as_slice).unwrap_or(&[]) {
                    if self.inodes.contains_key(child) && reached.insert(*child) && self.is_dir(*child) {
                        queue.push(*child);
                    }
                }
            }
        }
        let named: Vec<u64> = self.names.keys().copied().filter(|i| !reached.contains(i)).collect();
        let mut in_cycle = BTreeSet::new();
        for ino in named {
            if self.is_dir(ino) {
                // Up through the directories holding the names: back to itself is a cycle.
                let mut path = vec![ino];
                let mut at = ino;
                let cycle = loop {
                    let Some(&up) = self.names.get(&at).and_then(|h| h.first()) else { break false };
                    if up == ino {
                        break true;
                    }
                    if path.contains(&up) || reached.contains(&up) {
                        break false;
                    }
                    path.push(up);
                    at = up;
                };
                if cycle {
                    if in_cycle.insert(ino) {
                        self.problem(Kind::Cycle, ino, format!("in a directory cycle: {path:?}"));
                    }
                    continue;
                }
            }
            self.problem(Kind::Unreachable, ino, "named, but not reachable from the root");
        }
    }

    fn finish(mut self) -> Report {
        self.problems.sort();
        self.notes.sort();
        Report {
            inodes: self.inodes.len() as u64,
            dirs: self.inodes.values().filter(|s| s.inode.is_dir()).count() as u64,
            blocks_used: self.owner.len() as u64,
            data_blocks: self.geo.data_blocks,
            problems: self.problems,
            notes: self.notes,
        }
    }
}

#[cfg(test)]
mod tests;
