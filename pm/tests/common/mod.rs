//! What pm's publication tests share: random *valid* entry sequences (a small model of the
//! namespace decides what each raw choice becomes, so proptest shrinks them freely), a
//! traced node with a log writer, and a logical snapshot of a public area to compare two.
#![allow(dead_code)]

use linefs_pm::layout::{FormatParams, Geometry, BLOCK_SIZE};
use linefs_pm::mkfs::format_node;
use linefs_pm::node::NodePm;
use linefs_pm::oplog::{EntryLoc, LogSlot};
use linefs_pm::public::{LoadedDirent, PublicReader, XattrList};
use linefs_pm::record::{dtype, EntryBuilder, InodeImage, ROOT_INO};
use proptest::prelude::*;
use std::collections::BTreeMap;

/// Proptest cases: `PROPTEST_CASES` if set (for a deeper run), else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A small node: cheap to copy as crash images.
pub const PARAMS: FormatParams = FormatParams { size: 4 << 20, log_size: 512 << 10, log_slots: 2, inodes: 64 };

/// Highest inode number the workloads use (a small pool, so that numbers get reused).
pub const MAX_INO: u64 = 14;
/// A file block past the direct pointers, to exercise indirect blocks.
pub const FAR_BLOCK: u64 = 600;

/// A formatted traced node whose free data blocks hold garbage, as blocks freed by earlier
/// publications do: a block linked before its zero fill is durable shows it.
pub fn traced_node() -> (NodePm, Geometry) {
    let geo = Geometry::compute(&PARAMS).unwrap();
    let node = NodePm::traced(&geo);
    format_node(&node).unwrap();
    let start = geo.data_start * BLOCK_SIZE;
    let len = node.public.len() - start;
    node.public.write(start, &vec![0xA5; len as usize]).unwrap();
    node.public.persist(start, len).unwrap();
    node.public.fence();
    (node, geo)
}

/// A log writer as a client is: appends entries after its tail.
pub struct Writer {
    pub log: LogSlot,
    pub tail: u64,
}

impl Writer {
    pub fn new(node: &NodePm, geo: &Geometry, slot: u32) -> Writer {
        let log = LogSlot::new(node.logs[slot as usize].clone(), geo, slot);
        let tail = log.published_lsn().unwrap();
        Writer { log, tail }
    }

    pub fn append(&mut self, b: &EntryBuilder) -> EntryLoc {
        let loc = self.log.append(self.tail, self.log.published_lsn().unwrap(), b.payload()).unwrap();
        self.tail = loc.end;
        loc
    }
}

/// One raw choice of a workload: what it becomes depends on the model's state.
pub type RawOp = (u8, u64, u64, u64, bool);

/// Raw workloads of `1..max` operations.
pub fn raw_ops(max: usize) -> impl Strategy<Value = Vec<RawOp>> {
    proptest::collection::vec((0u8..16, any::<u64>(), any::<u64>(), any::<u64>(), any::<bool>()), 1..max)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reg,
    Dir,
    Lnk,
}

#[derive(Debug, Clone)]
struct File {
    kind: Kind,
    parent: u64,
    name: Vec<u8>,
    size: u64,
    mode_bits: u32,
}

/// The namespace as the entries so far leave it.
#[derive(Default)]
struct Model {
    files: BTreeMap<u64, File>,
    names: u64,
    /// Bumped into a directory's size at each change, as libfs rewrites a parent's
    /// attributes (its times) with every change of its entries.
    dir_changes: u64,
}

fn pick<T: Copy>(v: &[T], r: u64) -> Option<T> {
    (!v.is_empty()).then(|| v[(r % v.len() as u64) as usize])
}

fn data(len: u64, seed: u64) -> Vec<u8> {
    (0..len).map(|i| (seed.wrapping_mul(31).wrapping_add(i * 7) % 251) as u8 + 1).collect()
}

impl Model {
    fn img(&self, ino: u64) -> InodeImage {
        let f = &self.files[&ino];
        let (mode, nlink, parent) = match f.kind {
            Kind::Reg => (libc::S_IFREG, 1, 0),
            Kind::Lnk => (libc::S_IFLNK, 1, 0),
            Kind::Dir => (libc::S_IFDIR, 2, f.parent),
        };
        InodeImage { ino, size: f.size, mode: mode | f.mode_bits, nlink, parent, ..Default::default() }
    }

    /// The Inode record of directory `dir` that accompanies a change of its entries.
    fn touch_dir(&mut self, b: &mut EntryBuilder, dir: u64) {
        self.dir_changes += 1;
        let img = if dir == ROOT_INO {
            let mode = libc::S_IFDIR | 0o755;
            InodeImage { ino: ROOT_INO, size: self.dir_changes, parent: ROOT_INO, mode, nlink: 2, ..Default::default() }
        } else {
            InodeImage { size: self.dir_changes, ..self.img(dir) }
        };
        b.inode(&img, false);
    }

    fn of_kind(&self, k: Kind) -> Vec<u64> {
        self.files.iter().filter(|(_, f)| f.kind == k).map(|(i, _)| *i).collect()
    }

    fn free_ino(&self, r: u64) -> Option<u64> {
        let free: Vec<u64> = (2..=MAX_INO).filter(|i| !self.files.contains_key(i)).collect();
        pick(&free, r)
    }

    fn parent(&self, r: u64) -> u64 {
        let mut dirs = self.of_kind(Kind::Dir);
        dirs.push(ROOT_INO);
        pick(&dirs, r).unwrap()
    }

    fn name(&mut self, ino: u64) -> Vec<u8> {
        self.names += 1;
        format!("n{ino}_{}", self.names).into_bytes()
    }

    fn create(&mut self, b: &mut EntryBuilder, ino: u64, kind: Kind, parent: u64) {
        let name = self.name(ino);
        self.files.insert(ino, File { kind, parent, name: name.clone(), size: 0, mode_bits: 0o644 });
        b.inode(&self.img(ino), true);
        let dt = match kind {
            Kind::Reg => dtype::REG,
            Kind::Dir => dtype::DIR,
            Kind::Lnk => dtype::LNK,
        };
        b.dirent(parent, &name, ino, dt);
        self.touch_dir(b, parent);
    }

    fn remove(&mut self, b: &mut EntryBuilder, ino: u64) {
        let f = self.files.remove(&ino).unwrap();
        b.dirent(f.parent, &f.name, 0, 0);
        self.touch_dir(b, f.parent);
        b.free_inode(ino);
    }

    /// An offset for data operations: mostly in the first blocks, sometimes far out.
    fn offset(r: u64) -> u64 {
        match r % 8 {
            0 => FAR_BLOCK * BLOCK_SIZE + r / 8 % 5000,
            1 => (r / 8 % 12) * BLOCK_SIZE,
            _ => r / 8 % (40 * 1024),
        }
    }

    /// Appends the records of one raw op to `b` (nothing if it does not apply now).
    fn op(&mut self, b: &mut EntryBuilder, (k, r1, r2, r3, _): RawOp) {
        let regs = self.of_kind(Kind::Reg);
        match k {
            0 | 1 => {
                if let Some(ino) = self.free_ino(r1) {
                    let parent = self.parent(r2);
                    self.create(b, ino, Kind::Reg, parent);
                }
            }
            2 => {
                if let Some(ino) = self.free_ino(r1) {
                    let parent = self.parent(r2);
                    self.create(b, ino, Kind::Dir, parent);
                }
            }
            3 => {
                if let Some(ino) = self.free_ino(r1) {
                    let parent = self.parent(r2);
                    self.create(b, ino, Kind::Lnk, parent);
                    let target = data(1 + r3 % 300, r3);
                    b.write(ino, 0, &target);
                    self.files.get_mut(&ino).unwrap().size = target.len() as u64;
                    b.inode(&self.img(ino), false);
                }
            }
            4..=6 => {
                // Writes, often over the same few blocks.
                if let Some(ino) = pick(&regs, r1) {
                    // Sometimes through an open for writing logged first (changes nothing).
                    if k == 5 && r3 % 2 == 0 {
                        b.open_write(ino);
                    }
                    let off = if k == 6 { r2 % (3 * BLOCK_SIZE) } else { Self::offset(r2) };
                    let len = 1 + r3 % (3 * BLOCK_SIZE);
                    b.write(ino, off, &data(len, r3));
                    let f = self.files.get_mut(&ino).unwrap();
                    f.size = f.size.max(off + len);
                    b.inode(&self.img(ino), false);
                }
            }
            7 => {
                if let Some(ino) = pick(&regs, r1) {
                    let size = match r2 % 4 {
                        0 => 0,
                        1 => Self::offset(r3),
                        _ => r3 % (4 * BLOCK_SIZE),
                    };
                    b.truncate(ino, size);
                    self.files.get_mut(&ino).unwrap().size = size;
                    b.inode(&self.img(ino), false);
                }
            }
            8 => {
                if let Some(ino) = pick(&regs, r1) {
                    b.punch(ino, Self::offset(r2), 1 + r3 % (3 * BLOCK_SIZE));
                }
            }
            9 => {
                if let Some(ino) = pick(&regs, r1) {
                    let (off, len) = (Self::offset(r2), 1 + r3 % (3 * BLOCK_SIZE));
                    b.alloc(ino, off, len);
                    if r3 % 2 == 0 {
                        let f = self.files.get_mut(&ino).unwrap();
                        f.size = f.size.max(off + len);
                        b.inode(&self.img(ino), false);
                    }
                }
            }
            10 => {
                let live: Vec<u64> = self.files.keys().copied().collect();
                if let Some(ino) = pick(&live, r1) {
                    let n = r2 % 3;
                    let attrs: XattrList = (0..n)
                        .map(|i| {
                            (format!("user.a{i}").into_bytes(), data(r3 % (if i == 0 { 6000 } else { 40 }), r3 + i))
                        })
                        .collect();
                    b.xattrs(ino, attrs.iter().map(|(n, v)| (&n[..], &v[..])));
                }
            }
            11 | 12 => {
                // Remove a file, a symlink or an empty directory.
                let removable: Vec<u64> = self
                    .files
                    .iter()
                    .filter(|(i, f)| f.kind != Kind::Dir || !self.files.values().any(|c| c.parent == **i))
                    .map(|(i, _)| *i)
                    .collect();
                if let Some(ino) = pick(&removable, r1) {
                    self.remove(b, ino);
                }
            }
            13 => {
                // Rename a file or symlink (same inode, new name and maybe a new parent).
                let movable: Vec<u64> =
                    self.files.iter().filter(|(_, f)| f.kind != Kind::Dir).map(|(i, _)| *i).collect();
                if let Some(ino) = pick(&movable, r1) {
                    let parent = self.parent(r2);
                    let name = self.name(ino);
                    let f = self.files.get_mut(&ino).unwrap();
                    let dt = if f.kind == Kind::Reg { dtype::REG } else { dtype::LNK };
                    b.dirent(parent, &name, ino, dt);
                    b.dirent(f.parent, &f.name.clone(), 0, 0);
                    let old = f.parent;
                    f.parent = parent;
                    f.name = name;
                    self.touch_dir(b, parent);
                    if old != parent {
                        self.touch_dir(b, old);
                    }
                }
            }
            14 => {
                let live: Vec<u64> = self.files.keys().copied().collect();
                if let Some(ino) = pick(&live, r1) {
                    self.files.get_mut(&ino).unwrap().mode_bits = 0o600 | (r2 % 0o100) as u32;
                    b.inode(&self.img(ino), false);
                }
            }
            _ => {
                // Unlink a regular file and create another one under the same number.
                if let Some(ino) = pick(&regs, r1) {
                    self.remove(b, ino);
                    let parent = self.parent(r2);
                    self.create(b, ino, Kind::Reg, parent);
                    b.write(ino, r3 % BLOCK_SIZE, &data(1 + r3 % 5000, r3));
                    let f = self.files.get_mut(&ino).unwrap();
                    f.size = r3 % BLOCK_SIZE + 1 + r3 % 5000;
                    b.inode(&self.img(ino), false);
                }
            }
        }
    }
}

/// Turns raw ops into entries (an op whose flag is set joins the previous op's entry).
/// Every entry is valid applied in order to a freshly formatted node.
pub fn entries(raw: &[RawOp]) -> Vec<EntryBuilder> {
    let mut m = Model::default();
    let mut out: Vec<EntryBuilder> = Vec::new();
    for &op in raw {
        let mut b = EntryBuilder::new();
        m.op(&mut b, op);
        if b.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if op.4 && last.payload().len() + b.payload().len() < 60_000 => {
                // Append b's records to the previous entry by rebuilding it.
                let mut joined = last.clone();
                join(&mut joined, &b);
                *last = joined;
            }
            _ => out.push(b),
        }
    }
    out
}

/// `a` followed by `b`'s records, as one entry.
fn join(a: &mut EntryBuilder, b: &EntryBuilder) {
    use linefs_pm::record::{decode_records, Record};
    for r in decode_records(b.payload(), 0).unwrap() {
        match r {
            Record::Inode { fresh, img } => a.inode(&img, fresh),
            Record::Dirent { dir, ino, dtype, name } => a.dirent(dir, &name, ino, dtype),
            Record::Write { ino, off, len, data_off } => {
                a.write(ino, off, &b.payload()[data_off as usize..(data_off + len) as usize])
            }
            Record::Truncate { ino, size } => a.truncate(ino, size),
            Record::Punch { ino, off, len } => a.punch(ino, off, len),
            Record::Alloc { ino, off, len } => a.alloc(ino, off, len),
            Record::Xattrs { ino, attrs } => a.xattrs(ino, attrs.iter().map(|(n, v)| (&n[..], &v[..]))),
            Record::FreeInode { ino } => a.free_inode(ino),
            Record::OpenWrite { ino } => a.open_write(ino),
        }
    }
}

/// One live inode as a client can observe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileState {
    pub img: InodeImage,
    pub xattrs: XattrList,
    pub blocks: u64,
    /// File blocks mapped in the public area.
    pub mapped: Vec<u64>,
    /// Every mapped block's bytes, in file-block order.
    pub data: Vec<u8>,
}

/// A public area as clients can observe it: inodes (attributes, xattrs, which blocks are
/// mapped and what they hold) and every directory's entries in slot order. Which physical
/// blocks hold what is not part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub files: BTreeMap<u64, FileState>,
    pub dirs: BTreeMap<u64, Vec<LoadedDirent>>,
}

pub fn snapshot(reader: &PublicReader) -> Snapshot {
    let loaded = reader.load().unwrap();
    let mut files = BTreeMap::new();
    for (ino, li) in &loaded.inodes {
        let inode = reader.read_inode(*ino).unwrap();
        let mut mapped = Vec::new();
        let mut data = Vec::new();
        for idx in 0..FAR_BLOCK + 8 {
            if let Some(b) = reader.lookup(&inode, idx).unwrap() {
                mapped.push(idx);
                if inode.is_dir() {
                    // A directory's contents are its entries (below); the bytes of a free
                    // slot are nobody's business.
                    continue;
                }
                let mut buf = vec![0u8; BLOCK_SIZE as usize];
                reader.region().read(b * BLOCK_SIZE, &mut buf).unwrap();
                data.extend_from_slice(&buf);
            }
        }
        let mut img = li.img;
        if *ino == ROOT_INO {
            // mkfs stamps the root with the time of formatting.
            let t = Default::default();
            (img.atime, img.mtime, img.ctime, img.crtime) = (t, t, t, t);
        }
        let state = FileState { img, xattrs: li.xattrs.clone(), blocks: li.blocks, mapped, data };
        files.insert(*ino, state);
    }
    Snapshot { files, dirs: loaded.dirs.into_iter().collect() }
}

impl Snapshot {
    /// The same with every directory's entries sorted by name: which slot a name landed in
    /// (readdir order) may differ after a crash and recovery.
    pub fn sorted(mut self) -> Snapshot {
        for d in self.dirs.values_mut() {
            d.sort_by(|a, b| a.name.cmp(&b.name));
        }
        self
    }
}
