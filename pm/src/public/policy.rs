//! Permission checks of log entries against the public state, for a publisher that does not
//! trust the client that logged them (nicfs): what the entry changes must be allowed to the
//! caller it was logged for, by the modes and owners the public area (and the entries of
//! the batch before it) give, as POSIX file systems allow it.
//!
//! The rules are deliberately the *necessary* ones — a client applying POSIX checks itself
//! (libfs does) never logs an entry they refuse — so that a refusal means a forged or buggy
//! client, never a correct one:
//!
//! * a name added, replaced or removed in a directory needs write and search permission on
//!   it; in a sticky directory, replacing or removing a name also needs to own the
//!   directory or the inode the name held;
//! * a name that puts a directory inside one of its own descendants (a rename cycle) is
//!   refused, for root too;
//! * a new inode belongs to the caller, with its group or the parent directory's;
//! * an owner changes only for root; a group, for root or an owner in the new group;
//! * mode bits change for root or the owner — anyone who may write the file may only clear
//!   set-user-ID and set-group-ID (as the kernel does on a write);
//! * file data (writes, truncation, holes, allocation) and the size change for whoever may
//!   write the file *or* holds an open for writing that the publisher checked when it was
//!   made, or created the file ([`Permissions::may_write`]: a file opened for writing stays
//!   writable through that open after a chmod); the modification time, for those or the
//!   owner;
//! * extended attributes change for root, the owner or whoever may write the file; those
//!   in the `trusted.` namespace only for root.
//!
//! Access time, change time, link counts and parents change with the operations above and
//! are not checked on their own. Root (uid 0) passes every rule but the cycle. Inodes an
//! entry creates are not held against the rest of it.

use super::area::PublicArea;
use super::format::{decode_dirent, DIRENT_SIZE};
use super::XattrList;
use crate::publish::Batch;
use crate::record::{Caller, InodeImage, Record, ROOT_INO};
use std::collections::{HashMap, HashSet};

/// What a publisher knows of the session that logged a batch.
pub trait Permissions {
    /// The caller an entry is checked for, given the one it states (None: the client
    /// process's own); an error refuses the entry (a stated caller the session may not
    /// speak for).
    fn caller(&self, stated: Option<&Caller>) -> Result<Caller, String>;
    /// Whether the session may write `ino`'s data whatever its mode says now: it opened it
    /// for writing (checked then) or created it.
    fn may_write(&self, ino: u64) -> bool;
    /// The session created `ino` in an admitted entry.
    fn created(&mut self, ino: u64);
}

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;

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

/// The public state as the entries already checked in this batch leave it: inode images
/// and names they changed, over the public area.
struct Overlay<'a> {
    area: &'a PublicArea,
    /// ino → its image (None: freed).
    inodes: HashMap<u64, Option<InodeImage>>,
    /// (dir, name) → ino (0: removed).
    names: HashMap<(u64, Vec<u8>), u64>,
    /// ino → its extended attributes.
    xattrs: HashMap<u64, XattrList>,
}

impl Overlay<'_> {
    fn inode(&self, ino: u64) -> Option<InodeImage> {
        if let Some(i) = self.inodes.get(&ino) {
            return *i;
        }
        let img = self.area.read_inode(ino).ok()?.img;
        (img.mode != 0).then_some(img)
    }

    fn xattrs(&self, ino: u64) -> XattrList {
        if let Some(x) = self.xattrs.get(&ino) {
            return x.clone();
        }
        let Ok(inode) = self.area.read_inode(ino) else { return Vec::new() };
        if inode.xattr == 0 {
            return Vec::new();
        }
        self.area.read_xattrs(inode.xattr).ok().and_then(|(_, list)| list).unwrap_or_default()
    }

    fn name(&self, dir: u64, name: &[u8]) -> Option<u64> {
        if let Some(&ino) = self.names.get(&(dir, name.to_vec())) {
            return (ino != 0).then_some(ino);
        }
        self.area.name_target(dir, name)
    }

    /// Whether `ino` is `dir` or one of its ancestors (following parents up to the root).
    fn is_ancestor(&self, ino: u64, dir: u64) -> bool {
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

    fn absorb(&mut self, records: &[Record]) {
        for r in records {
            match r {
                Record::Inode { img, .. } => {
                    self.inodes.insert(img.ino, Some(*img));
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
}

impl PublicArea {
    /// The inode `name` names in directory `dir`, as published.
    fn name_target(&self, dir: u64, name: &[u8]) -> Option<u64> {
        let slot = *self.dirs.get(&dir)?.by_name.get(name)?;
        let d = self.read_inode(dir).ok()?;
        let off = self.dir_slot_off(&d, slot).ok()?;
        let mut b = [0u8; DIRENT_SIZE as usize];
        self.region.read(off, &mut b).ok()?;
        decode_dirent(&b, self.geo.inode_count).map(|(ino, _, _)| ino)
    }

    /// Checks the first `n` entries of `batch` (structurally valid already) against
    /// the permission rules (module docs), each for the caller `who` resolves, as the
    /// entries before it leave the public state. Returns how many, from the first, pass,
    /// and why the next does not.
    pub fn check_permissions(&self, batch: &Batch, n: usize, who: &mut dyn Permissions) -> (usize, Option<String>) {
        let mut st = Overlay { area: self, inodes: HashMap::new(), names: HashMap::new(), xattrs: HashMap::new() };
        for (i, (loc, records)) in batch.entries.iter().take(n).enumerate() {
            let stated = batch.callers.get(i).and_then(Option::as_ref);
            let verdict = who.caller(stated).and_then(|caller| check_entry(&st, &caller, records, &*who));
            if let Err(why) = verdict {
                return (i, Some(format!("entry at LSN {}: {why}", loc.lsn)));
            }
            st.absorb(records);
            for r in records {
                if let Record::Inode { fresh: true, img } = r {
                    who.created(img.ino);
                }
            }
        }
        (n, None)
    }
}

fn check_entry(st: &Overlay, caller: &Caller, records: &[Record], who: &dyn Permissions) -> Result<(), String> {
    let fresh: HashSet<u64> =
        records.iter().filter(|r| matches!(r, Record::Inode { fresh: true, .. })).map(Record::target).collect();
    let root = caller.is_root();
    let owner = |img: &InodeImage| root || caller.uid == img.uid;
    let writable = |ino: u64, img: &InodeImage| allows(caller, img, 2) || who.may_write(ino);
    for r in records {
        match r {
            Record::Dirent { dir, ino, dtype, name } => {
                if *ino != 0 && *dtype == crate::record::dtype::DIR && st.is_ancestor(*ino, *dir) {
                    return Err(format!("directory {ino} would be put inside itself (in directory {dir})"));
                }
                let Some(d) = st.inode(*dir) else { continue };
                if root || fresh.contains(dir) {
                    continue;
                }
                if !allows(caller, &d, 3) {
                    return Err(format!("uid {} may not change names in directory {dir}", caller.uid));
                }
                if d.mode & S_ISVTX != 0 && caller.uid != d.uid {
                    if let Some(old) = st.name(*dir, name).filter(|&old| old != *ino) {
                        if st.inode(old).is_some_and(|o| o.uid != caller.uid) {
                            return Err(format!(
                                "uid {} may not replace or remove another user's name in sticky directory {dir}",
                                caller.uid
                            ));
                        }
                    }
                }
            }
            Record::Inode { fresh: true, img } => {
                if root {
                    continue;
                }
                if img.uid != caller.uid {
                    return Err(format!(
                        "uid {} may not create inode {} owned by uid {}",
                        caller.uid, img.ino, img.uid
                    ));
                }
                let parent_gid = st.inode(img.parent).map(|p| p.gid);
                if !caller.in_group(img.gid) && parent_gid != Some(img.gid) {
                    return Err(format!("uid {} may not create inode {} in group {}", caller.uid, img.ino, img.gid));
                }
            }
            Record::Inode { fresh: false, img } => {
                if root || fresh.contains(&img.ino) {
                    continue;
                }
                let Some(old) = st.inode(img.ino) else { continue };
                let ino = img.ino;
                if img.uid != old.uid {
                    return Err(format!("uid {} may not change the owner of inode {ino}", caller.uid));
                }
                if img.gid != old.gid && !(caller.uid == old.uid && caller.in_group(img.gid)) {
                    return Err(format!("uid {} may not change the group of inode {ino} to {}", caller.uid, img.gid));
                }
                let (was, now) = (old.mode & !S_IFMT, img.mode & !S_IFMT);
                if was != now && !owner(&old) && !(now == was & !(S_ISUID | S_ISGID) && writable(ino, &old)) {
                    return Err(format!("uid {} may not change the mode of inode {ino}", caller.uid));
                }
                if (img.rdev != old.rdev || img.flags != old.flags) && !owner(&old) {
                    return Err(format!("uid {} may not change the device or flags of inode {ino}", caller.uid));
                }
                if img.size != old.size && old.mode & S_IFMT != S_IFDIR && !writable(ino, &old) {
                    return Err(format!("uid {} may not change the size of inode {ino}", caller.uid));
                }
                if img.mtime != old.mtime && !owner(&old) && !writable(ino, &old) {
                    return Err(format!("uid {} may not change the modification time of inode {ino}", caller.uid));
                }
            }
            Record::Write { ino, .. }
            | Record::Truncate { ino, .. }
            | Record::Punch { ino, .. }
            | Record::Alloc { ino, .. } => {
                if root || fresh.contains(ino) {
                    continue;
                }
                if let Some(old) = st.inode(*ino) {
                    if !writable(*ino, &old) {
                        return Err(format!("uid {} may not write inode {ino}", caller.uid));
                    }
                }
            }
            Record::Xattrs { ino, attrs } => {
                if root || fresh.contains(ino) {
                    continue;
                }
                let Some(old) = st.inode(*ino) else { continue };
                if !owner(&old) && !writable(*ino, &old) {
                    return Err(format!("uid {} may not change extended attributes of inode {ino}", caller.uid));
                }
                let trusted = |list: &[(Vec<u8>, Vec<u8>)]| {
                    let mut t: Vec<(Vec<u8>, Vec<u8>)> =
                        list.iter().filter(|(n, _)| n.starts_with(b"trusted.")).cloned().collect();
                    t.sort();
                    t
                };
                if trusted(attrs) != trusted(&st.xattrs(*ino)) {
                    return Err(format!("uid {} may not change trusted.* attributes of inode {ino}", caller.uid));
                }
            }
            Record::FreeInode { .. } | Record::OpenWrite { .. } => {}
        }
    }
    Ok(())
}
