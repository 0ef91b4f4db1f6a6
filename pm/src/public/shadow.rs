//! The shadow state a checking publisher judges entries on ([`super::policy`]): the public
//! area overlaid, record by record, with what the records checked so far — the earlier
//! entries of the batch *and the earlier records of the same entry* — leave it
//! ([`Overlay`]), and, per entry, what the entry does to names, from which every value a
//! publisher can derive itself is derived and compared with what the entry says
//! ([`EntryShadow`]).
//!
//! Derived values (refused, for root too, when an entry's differ — the publisher never
//! takes them from a client):
//!
//! * **Link counts.** A non-directory has one link per name. A directory has two (its name
//!   and its ".") plus one per subdirectory (their ".."), and none once its name is gone
//!   (rmdir, as Linux shows it). An entry that changes names must write the new counts of
//!   every inode whose count changes; an entry that changes a count without the names to
//!   match is refused.
//! * **Parents.** A directory's parent is the directory that names it: it changes only
//!   with a name in another directory, to that directory. A non-directory's parent is
//!   kept as created (0, or the directory its entry names it in).
//! * **The shape of the tree.** A directory has at most one name (no hard links to
//!   directories, and none to a removed one), the root none; a directory losing its name
//!   must be empty; every directory given a name is reached from the root by parents
//!   (no cycles).
//! * **Frees.** An inode is freed only if the entry (or an earlier one) removes its last
//!   name — judged on the names as the whole entry leaves them: a free of an inode that
//!   still has one is refused.
//!
//! Hard links to existing non-directories are judged as Linux's `protected_hardlinks`
//! judges them (the caller owns the file, or may read and write it, and it is a regular
//! file that is not set-user-ID nor executable set-group-ID).

use super::area::PublicArea;
use super::format::{decode_dirent, DIRENT_SIZE};
use super::XattrList;
use crate::record::{Caller, InodeImage, Record, ROOT_INO};
use std::collections::{HashMap, HashSet};

const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;

pub(super) fn is_dir(img: &InodeImage) -> bool {
    img.mode & S_IFMT == S_IFDIR
}

/// The public state as the records checked so far leave it: inode images and names they
/// changed, over the public area.
pub(super) struct Overlay<'a> {
    pub(super) area: &'a PublicArea,
    /// ino → its image (None: freed).
    inodes: HashMap<u64, Option<InodeImage>>,
    /// (dir, name) → ino (0: removed).
    names: HashMap<(u64, Vec<u8>), u64>,
    /// ino → its extended attributes.
    xattrs: HashMap<u64, XattrList>,
}

impl<'a> Overlay<'a> {
    pub(super) fn new(area: &'a PublicArea) -> Overlay<'a> {
        Overlay { area, inodes: HashMap::new(), names: HashMap::new(), xattrs: HashMap::new() }
    }

    /// A live inode's image.
    pub(super) fn inode(&self, ino: u64) -> Option<InodeImage> {
        if let Some(i) = self.inodes.get(&ino) {
            return *i;
        }
        if ino == 0 || ino >= self.area.geometry().inode_count {
            return None;
        }
        let img = self.area.read_inode(ino).ok()?.img;
        (img.mode != 0).then_some(img)
    }

    pub(super) fn xattrs(&self, ino: u64) -> XattrList {
        if let Some(x) = self.xattrs.get(&ino) {
            return x.clone();
        }
        let Ok(inode) = self.area.read_inode(ino) else { return Vec::new() };
        if inode.xattr == 0 {
            return Vec::new();
        }
        self.area.read_xattrs(inode.xattr).ok().and_then(|(_, list)| list).unwrap_or_default()
    }

    /// The inode `name` holds in directory `dir`.
    pub(super) fn name(&self, dir: u64, name: &[u8]) -> Option<u64> {
        if let Some(&ino) = self.names.get(&(dir, name.to_vec())) {
            return (ino != 0).then_some(ino);
        }
        self.area.name_target(dir, name)
    }

    /// Whether directory `dir` holds no name.
    fn dir_empty(&self, dir: u64) -> bool {
        let published = self.area.dirs.get(&dir).is_some_and(|s| s.by_name.keys().any(|n| self.name(dir, n).is_some()));
        let added = self.names.iter().any(|((d, _), &ino)| *d == dir && ino != 0);
        !published && !added
    }

    /// Whether `ino` is `dir` or one of its ancestors (following parents up to the root).
    pub(super) fn is_ancestor(&self, ino: u64, dir: u64) -> bool {
        let mut at = dir;
        for _ in 0..=self.area.geometry().inode_count {
            if at == ino {
                return true;
            }
            if at == ROOT_INO || at == 0 {
                return false;
            }
            match self.inode(at) {
                Some(img) if img.parent != at => at = img.parent,
                _ => return false,
            }
        }
        // A parent chain longer than the inode table loops: take it as a cycle.
        true
    }

    /// Whether following parents from directory `dir` reaches the root, through live
    /// directories only, without a loop.
    fn reaches_root(&self, dir: u64) -> bool {
        let mut at = dir;
        for _ in 0..=self.area.geometry().inode_count {
            if at == ROOT_INO {
                return true;
            }
            match self.inode(at) {
                Some(img) if is_dir(&img) && img.parent != at => at = img.parent,
                _ => return false,
            }
        }
        false
    }

    /// Applies one (checked) record to the shadow state.
    pub(super) fn absorb(&mut self, r: &Record) {
        match r {
            Record::Inode { img, .. } => {
                self.inodes.insert(img.ino, Some(*img));
                if let Record::Inode { fresh: true, .. } = r {
                    self.xattrs.insert(img.ino, Vec::new());
                }
            }
            Record::Dirent { dir, ino, name, .. } => {
                self.names.insert((*dir, name.clone()), *ino);
            }
            Record::FreeInode { ino } => {
                self.inodes.insert(*ino, None);
                self.xattrs.insert(*ino, Vec::new());
            }
            Record::Xattrs { ino, attrs } => {
                self.xattrs.insert(*ino, attrs.clone());
            }
            _ => {}
        }
    }
}

impl PublicArea {
    /// The inode `name` names in directory `dir`, as published.
    pub(super) fn name_target(&self, dir: u64, name: &[u8]) -> Option<u64> {
        let slot = *self.dirs.get(&dir)?.by_name.get(name)?;
        let d = self.read_inode(dir).ok()?;
        let off = self.dir_slot_off(&d, slot).ok()?;
        let mut b = [0u8; DIRENT_SIZE as usize];
        self.region.read(off, &mut b).ok()?;
        decode_dirent(&b, self.geo.inode_count).map(|(ino, _, _)| ino)
    }
}

/// What one entry has done so far to an inode it touches.
#[derive(Clone, Copy, Debug)]
struct Touched {
    /// Its image when the entry first touched it (None: made by the entry).
    before: Option<InodeImage>,
    /// Names gained minus names lost in this entry.
    names: i64,
    /// For a directory: subdirectories gained minus lost in this entry.
    subdirs: i64,
}

/// One entry's effect on names, and the checks of what it derives (module docs).
#[derive(Default)]
pub(super) struct EntryShadow {
    touched: HashMap<u64, Touched>,
    /// Inodes the entry frees, with what it did to them: judged when the entry ends (or
    /// the number is made again), on the names as the whole entry leaves them — libfs
    /// frees a file a rename replaces before the record that takes its name.
    freed: HashMap<u64, (InodeImage, Touched)>,
    /// Names the entry set: (dir, name) → ino (0: removed), last record wins.
    set: HashMap<(u64, Vec<u8>), u64>,
}

impl EntryShadow {
    /// Whether the entry made `ino` (and has not freed it since).
    pub(super) fn born(&self, ino: u64) -> bool {
        self.touched.get(&ino).is_some_and(|t| t.before.is_none())
    }

    fn touch(&mut self, st: &Overlay, ino: u64) -> &mut Touched {
        self.touched.entry(ino).or_insert_with(|| Touched { before: st.inode(ino), names: 0, subdirs: 0 })
    }

    /// Notes record `r` (checked, not yet absorbed into `st`); a free is judged here, on
    /// the names as the records before it leave them.
    pub(super) fn note(&mut self, st: &Overlay, r: &Record) -> Result<(), String> {
        match r {
            Record::Inode { fresh: true, img } => {
                if let Some((old, t)) = self.freed.remove(&img.ino) {
                    self.judge_free(st, img.ino, &old, &t)?;
                }
                self.touched.insert(img.ino, Touched { before: None, names: 0, subdirs: 0 });
            }
            Record::Inode { fresh: false, img } => {
                self.touch(st, img.ino);
            }
            Record::Dirent { dir, ino, name, .. } => {
                self.touch(st, *dir);
                let old = st.name(*dir, name).unwrap_or(0);
                if old != *ino {
                    for (i, d) in [(old, -1), (*ino, 1)] {
                        if i == 0 {
                            continue;
                        }
                        if let Some((img, t)) = self.freed.get_mut(&i) {
                            t.names += d;
                            if is_dir(img) {
                                self.touch(st, *dir).subdirs += d;
                            }
                            continue;
                        }
                        let sub = st.inode(i).is_some_and(|img| is_dir(&img));
                        self.touch(st, i).names += d;
                        if sub {
                            self.touch(st, *dir).subdirs += d;
                        }
                    }
                }
                self.set.insert((*dir, name.clone()), *ino);
            }
            Record::FreeInode { ino } => {
                let Some(img) = st.inode(*ino) else { return Ok(()) };
                let t = *self.touch(st, *ino);
                self.touched.remove(ino);
                self.freed.insert(*ino, (img, t));
            }
            _ => {}
        }
        Ok(())
    }

    /// A free: the inode has no name left, and (a directory) holds none.
    fn judge_free(&self, st: &Overlay, ino: u64, img: &InodeImage, t: &Touched) -> Result<(), String> {
        let (names, subdirs) = self.counts(ino, t);
        if names != 0 {
            return Err(format!("inode {ino} is freed while it still has {names} name(s)"));
        }
        if is_dir(img) && (subdirs != 0 || !st.dir_empty(ino)) {
            return Err(format!("directory {ino} is freed while it is not empty"));
        }
        Ok(())
    }

    /// How many names and (a directory) subdirectories `ino` has as the entry leaves it.
    fn counts(&self, ino: u64, t: &Touched) -> (i64, i64) {
        let (names, subdirs) = match &t.before {
            None => (0, 0),
            Some(b) if is_dir(b) => {
                let named = ino == ROOT_INO || b.nlink > 0;
                let n = i64::from(b.nlink);
                (named as i64, if named { n - 2 } else { n })
            }
            Some(b) => (i64::from(b.nlink), 0),
        };
        (names + t.names, subdirs + t.subdirs)
    }

    /// The checks of the entry as a whole, on the state `st` it leaves (module docs).
    pub(super) fn finish(&self, st: &Overlay, caller: &Caller) -> Result<(), String> {
        // In number order: the same entry is always refused for the same reason.
        let mut freed: Vec<_> = self.freed.iter().collect();
        freed.sort_unstable_by_key(|(i, _)| **i);
        for (&ino, (img, t)) in freed {
            self.judge_free(st, ino, img, t)?;
        }
        let mut touched: Vec<_> = self.touched.iter().collect();
        touched.sort_unstable_by_key(|(i, _)| **i);
        for (&ino, t) in touched {
            let Some(img) = st.inode(ino) else { continue };
            let (names, subdirs) = self.counts(ino, t);
            // The directories that name it by a name this entry set.
            let naming: HashSet<u64> = self.set.iter().filter(|(_, &i)| i == ino).map(|((d, _), _)| *d).collect();
            if t.before.is_none() && !caller.is_root() {
                check_new_group(st, caller, &img, &naming)?;
            }
            if is_dir(&img) {
                self.finish_dir(st, ino, &img, t, names, subdirs, &naming)?;
                continue;
            }
            if names < 0 || i64::from(img.nlink) != names {
                return Err(format!("inode {ino} has {names} name(s), but its link count says {}", img.nlink));
            }
            let parent_ok = match &t.before {
                Some(b) => img.parent == b.parent,
                None => img.parent == 0 || naming.contains(&img.parent),
            };
            if !parent_ok {
                return Err(format!("inode {ino}: parent {} is not one nicfs derives", img.parent));
            }
            if let Some(b) = &t.before {
                if t.names > 0 && !may_hard_link(caller, b) {
                    return Err(format!("uid {} may not make a hard link to inode {ino}", caller.uid));
                }
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_dir(
        &self,
        st: &Overlay,
        ino: u64,
        img: &InodeImage,
        t: &Touched,
        names: i64,
        subdirs: i64,
        naming: &HashSet<u64>,
    ) -> Result<(), String> {
        let named_before = match &t.before {
            None => 0,
            Some(b) => (ino == ROOT_INO || b.nlink > 0) as i64,
        };
        if ino == ROOT_INO && t.names != 0 {
            return Err("the root directory cannot be named".into());
        }
        if names > 1 || (t.before.is_some() && names > named_before) || (t.before.is_none() && names != 1) {
            return Err(format!("directory {ino} would have {names} names (a hard link to a directory)"));
        }
        if names < 0 || subdirs < 0 {
            return Err(format!("directory {ino}: names do not add up"));
        }
        if names == 0 && ino != ROOT_INO && !st.dir_empty(ino) {
            return Err(format!("directory {ino} loses its name but is not empty"));
        }
        let named = ino == ROOT_INO || names == 1;
        let want = if named { 2 + subdirs } else { subdirs };
        if i64::from(img.nlink) != want {
            return Err(format!("directory {ino}: link count {} where nicfs derives {want}", img.nlink));
        }
        let parent = match (naming.len(), &t.before) {
            (1, _) if named => naming.iter().next().copied(),
            (0, Some(b)) => Some(b.parent),
            _ => None,
        };
        if parent != Some(img.parent) {
            return Err(format!("directory {ino}: parent {} is not the directory that names it", img.parent));
        }
        if !naming.is_empty() && !st.reaches_root(ino) {
            return Err(format!("directory {ino} would not be reached from the root (a cycle)"));
        }
        Ok(())
    }
}

/// Whether `caller` has the permission bits of `want` (r=4, w=2, x=1) on `img`.
pub fn allows(caller: &Caller, img: &InodeImage, want: u32) -> bool {
    if caller.is_root() {
        return true;
    }
    let class = if caller.uid == img.uid {
        (img.mode >> 6) & 7
    } else if caller.in_group(img.gid) {
        (img.mode >> 3) & 7
    } else {
        img.mode & 7
    };
    class & want == want
}

/// Whether `caller` may make another name for `file` (Linux's `protected_hardlinks`).
fn may_hard_link(caller: &Caller, file: &InodeImage) -> bool {
    if caller.is_root() || caller.uid == file.uid {
        return true;
    }
    file.mode & S_IFMT == S_IFREG
        && file.mode & S_ISUID == 0
        && file.mode & (S_ISGID | 0o010) != (S_ISGID | 0o010)
        && allows(caller, file, 6)
}

/// A new inode's group is the caller's (one of its groups) or, in a set-group-ID directory
/// that names it, that directory's; set-group-ID on a new non-directory needs the group.
pub(super) fn check_new_group(
    st: &Overlay,
    caller: &Caller,
    img: &InodeImage,
    naming: &HashSet<u64>,
) -> Result<(), String> {
    let inherited = naming.iter().any(|&d| st.inode(d).is_some_and(|d| d.mode & S_ISGID != 0 && d.gid == img.gid));
    if !caller.in_group(img.gid) && !inherited {
        return Err(format!("uid {} may not create inode {} in group {}", caller.uid, img.ino, img.gid));
    }
    if !is_dir(img) && img.mode & S_ISGID != 0 && !caller.in_group(img.gid) {
        return Err(format!("uid {} may not create set-group-ID inode {} in group {}", caller.uid, img.ino, img.gid));
    }
    Ok(())
}
