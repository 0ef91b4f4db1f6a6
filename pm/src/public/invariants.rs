//! The consistency of a public area, read-only ([`check_invariants`]): what a checking
//! publisher keeps true entry by entry ([`super::shadow`]), checked over the whole area —
//! link counts equal the names, a directory has one name and its parent is the directory
//! that names it, the tree is acyclic and connected, every name leads to a live inode of
//! its type, every block belongs to exactly one file, nothing is left torn, and no inode
//! is left without a name (an orphan: fine only while some client holds it open, which
//! the area cannot tell — reported apart, as [`Problem::Orphan`]).
//!
//! The oracle of nicfs's adversarial test, and the core of a node checker.

use super::reader::{LoadVisitor, PublicReader};
use crate::layout::FormatError;
use crate::record::{dtype, InodeImage, ROOT_INO};
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

/// One thing found wrong with a public area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A live inode no name leads to (its link count 0): fine only while it is open.
    Orphan { ino: u64 },
    /// Anything else: inconsistent or corrupt.
    Broken { ino: u64, why: String },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Orphan { ino } => write!(f, "inode {ino}: no name leads to it (an orphan)"),
            Problem::Broken { ino, why } => write!(f, "inode {ino}: {why}"),
        }
    }
}

/// Collects who owns each block and what is torn, while the reader loads.
#[derive(Default)]
struct Owners {
    owner: HashMap<u64, u64>,
    problems: Vec<Problem>,
}

impl LoadVisitor for Owners {
    fn block(&mut self, ino: u64, block: u64) -> Result<(), FormatError> {
        if let Some(&other) = self.owner.get(&block) {
            let why = format!("block {block} also belongs to inode {other}");
            self.problems.push(Problem::Broken { ino, why });
        } else {
            self.owner.insert(block, ino);
        }
        Ok(())
    }
    fn suspect_inode(&mut self, ino: u64) {
        self.problems.push(Problem::Broken { ino, why: "torn or corrupt inode".into() });
    }
    fn suspect_xattrs(&mut self, ino: u64) {
        self.problems.push(Problem::Broken { ino, why: "torn or corrupt extended attributes".into() });
    }
    fn dir_slot(&mut self, _: u64, _: u64, _: Option<&[u8]>) {}
}

fn is_dir(img: &InodeImage) -> bool {
    img.mode & libc::S_IFMT == libc::S_IFDIR
}

/// Every problem of the public area `public` reads (empty: consistent). Read-only.
pub fn check_invariants(public: &PublicReader) -> Vec<Problem> {
    let mut v = Owners::default();
    let loaded = match public.load_with(&mut v) {
        Ok(l) => l,
        Err(e) => return vec![Problem::Broken { ino: 0, why: format!("the area does not load: {e}") }],
    };
    let mut problems = v.problems;
    let broken = |ino: u64, why: String| Problem::Broken { ino, why };
    // Names per inode, subdirectories per directory, and who names each directory.
    let mut names: HashMap<u64, u64> = HashMap::new();
    let mut subdirs: HashMap<u64, u64> = HashMap::new();
    let mut named_in: HashMap<u64, u64> = HashMap::new();
    let mut dirs: Vec<_> = loaded.dirs.iter().collect();
    dirs.sort_by_key(|(d, _)| **d);
    for (&dir, ents) in dirs {
        let mut seen = HashSet::new();
        for e in ents {
            if !seen.insert(&e.name) {
                problems.push(broken(dir, format!("name {:?} twice", String::from_utf8_lossy(&e.name))));
            }
            let Some(target) = loaded.inodes.get(&e.ino) else {
                problems.push(broken(
                    dir,
                    format!("name {:?} leads to free inode {}", String::from_utf8_lossy(&e.name), e.ino),
                ));
                continue;
            };
            if dtype::of_mode(target.img.mode) != e.dtype {
                problems.push(broken(
                    dir,
                    format!("name {:?} has type {}, its inode another", String::from_utf8_lossy(&e.name), e.dtype),
                ));
            }
            *names.entry(e.ino).or_default() += 1;
            if is_dir(&target.img) {
                *subdirs.entry(dir).or_default() += 1;
                named_in.insert(e.ino, dir);
            }
        }
    }
    let mut inos: Vec<_> = loaded.inodes.keys().copied().collect();
    inos.sort_unstable();
    for ino in inos {
        let img = loaded.inodes[&ino].img;
        let n = names.get(&ino).copied().unwrap_or(0);
        if is_dir(&img) {
            let root = ino == ROOT_INO;
            let named = root || n == 1;
            if root && n > 0 {
                problems.push(broken(ino, "the root directory has a name".into()));
            }
            if n > 1 {
                problems.push(broken(ino, format!("directory with {n} names")));
            }
            let want = if named { 2 } else { 0 } + subdirs.get(&ino).copied().unwrap_or(0);
            if u64::from(img.nlink) != want {
                problems.push(broken(ino, format!("link count {}, names and subdirectories say {want}", img.nlink)));
            }
            let parent = if root { Some(ROOT_INO) } else { named_in.get(&ino).copied() };
            if parent.is_some_and(|p| p != img.parent) {
                problems
                    .push(broken(ino, format!("parent {}, but it is named in {}", img.parent, parent.unwrap_or(0))));
            }
            if !named && n == 0 && !loaded.dirs.get(&ino).is_none_or(|e| e.is_empty()) {
                problems.push(broken(ino, "a directory with no name holds names".into()));
            }
        } else if u64::from(img.nlink) != n {
            problems.push(broken(ino, format!("link count {}, {n} name(s)", img.nlink)));
        }
        if n == 0 && ino != ROOT_INO {
            problems.push(Problem::Orphan { ino });
        }
    }
    // Connected and acyclic: every named inode is reached from the root.
    let mut reached = HashSet::from([ROOT_INO]);
    let mut todo = VecDeque::from([ROOT_INO]);
    while let Some(d) = todo.pop_front() {
        for e in loaded.dirs.get(&d).into_iter().flatten() {
            if loaded.inodes.contains_key(&e.ino) && reached.insert(e.ino) && loaded.dirs.contains_key(&e.ino) {
                todo.push_back(e.ino);
            }
        }
    }
    let mut unreached: Vec<_> =
        names.keys().filter(|i| !reached.contains(i) && loaded.inodes.contains_key(i)).collect();
    unreached.sort_unstable();
    for &ino in unreached {
        problems.push(broken(ino, "named, but not reached from the root (a cycle or a removed directory)".into()));
    }
    problems
}
