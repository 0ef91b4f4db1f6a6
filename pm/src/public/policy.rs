//! Permission checks of log entries against the public state, for a publisher that does not
//! trust the client that logged them (nicfs): what the entry changes must be allowed to the
//! caller it was logged for, by the modes and owners the public area (and the entries of
//! the batch before it) give, as POSIX file systems allow it.
//!
//! An entry is judged by its POSIX meaning — would this caller be allowed to do this
//! through the system calls? — on a shadow state ([`super::shadow`]): each record is checked
//! against the public state as the records before it leave it, the earlier entries of the
//! batch *and the earlier records of the same entry* (an inode the entry made is the
//! caller's from then on, and later records are judged as changes of the caller's own
//! file), then the entry as a whole against what the publisher derives itself — link
//! counts, parents, the shape of the tree, frees only of inodes without names
//! ([`super::shadow`]'s docs; refused for root too).
//!
//! The rules are deliberately the *necessary* ones — a client applying POSIX checks itself
//! (libfs does) never logs an entry they refuse — so that a refusal means a forged or buggy
//! client, never a correct one:
//!
//! * a name added, replaced or removed in a directory needs write and search permission on
//!   it; in a sticky directory, replacing or removing a name also needs to own the
//!   directory or the inode the name held; a directory moved to another directory must be
//!   writable (its ".." changes);
//! * a name that puts a directory inside one of its own descendants (a rename cycle) is
//!   refused, for root too, and so is a name whose type is not its inode's (validation);
//! * a new inode takes a free number (as the records before it leave the numbers: never
//!   one in use, which would replace another user's file under its names), for root too,
//!   and belongs to the caller, in one of its groups or that of a set-group-ID directory
//!   naming it; set-group-ID on a new or changed non-directory needs its group;
//! * an owner changes only for root; a group, for root or an owner in the new group; the
//!   generation, birth time and device number only for root, and only root makes device
//!   nodes (but whiteouts, character devices 0:0);
//! * mode bits change for root or the owner — anyone who may write the file may only clear
//!   set-user-ID and set-group-ID (as the kernel does on a write);
//! * file data (writes, truncation, holes, allocation) and the size change for whoever may
//!   write the file *or* belongs to a session holding a write grant of it
//!   ([`Permissions::may_write`]: a file opened for writing stays writable through that
//!   open after a chmod, as POSIX has it) or made it in this entry; the modification time,
//!   for those or the owner; a symbolic link's target only in the entry that makes it; a
//!   directory's size for those who may change its names;
//! * an open for writing (an OPEN_WRITE record) is allowed if the caller may write the file
//!   by its mode, as the public area and the records before it leave it, or the session
//!   holds a grant of it already;
//! * extended attributes as Linux's `xattr_permission` allows: `user.*` on regular files
//!   and directories for the owner or whoever may write them (a sticky directory's, for its
//!   owner), the other namespaces for the owner, `trusted.*` for root; file capabilities
//!   (`security.capability`) are set by root only, removed by whoever may write the file;
//! * a hard link to an existing file needs what Linux's `protected_hardlinks` needs;
//!   a free, that the inode has no name left (whoever removed the last one was allowed to).
//!
//! Access and change times are not checked on their own. Root (uid 0) passes every
//! permission rule, not the derived values nor the shape of the tree.
//!
//! **Write grants.** A session is granted an inode when one of its admitted entries creates
//! it (a fresh INODE record) or opens it for writing (an OPEN_WRITE record, which a client
//! logs for every open for writing, root's included, in an entry committed before the open
//! returns). Because the open is checked here, in log order, against the overlay of the
//! session's own earlier entries, it is judged on exactly the state the client judged it
//! on — a chmod the same client logged and has not published yet included — and a grant
//! comes before any write through that open. The grant lasts until the number is freed:
//! an admitted FREE_INODE, of any session, ends every session's grant of it
//! ([`Permissions::freed`]), so a file made later under the same number starts with none.
//! The publisher is told of grants and frees entry by entry, after each entry is admitted
//! and before the next is checked.

use super::area::PublicArea;
use super::shadow::{is_dir, EntryShadow, Overlay};
use crate::publish::Batch;
use crate::record::{Caller, InodeImage, Record};

/// What a publisher knows of the session that logged a batch.
pub trait Permissions {
    /// The caller an entry is checked for, given the one it states (None: the client
    /// process's own); an error refuses the entry (a stated caller the session may not
    /// speak for).
    fn caller(&self, stated: Option<&Caller>) -> Result<Caller, String>;
    /// Whether the session may write `ino`'s data whatever its mode says now: it holds a
    /// grant of it (it created the file, or opened it for writing, since the number was
    /// last freed).
    fn may_write(&self, ino: u64) -> bool;
    /// An admitted entry of the session created `ino` or opened it for writing: the session
    /// holds a grant of it from now on.
    fn granted(&mut self, ino: u64);
    /// An admitted entry frees `ino`: no session's grant of the number survives.
    fn freed(&mut self, ino: u64);
    /// The batch's entries up to `upto` (an LSN) passed every check and are about to be
    /// applied: a publisher that recovers by meaning records it durably here, so that after
    /// a crash it knows which entries were judged before (the public area may be ahead for
    /// them) and which were never applied (judged at recovery). Nothing by default.
    fn admitting(&mut self, _upto: u64) {}
}

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;
const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

// The permission-bit check lives with the overlay (its hard-link rule needs it too), so that
// shadow does not import this module back.
pub use super::shadow::allows;

impl PublicArea {
    /// Checks the first `n` entries of `batch` (structurally valid already) against
    /// the permission rules (module docs), each for the caller `who` resolves, as the
    /// records before it — earlier entries of the batch and earlier records of the same
    /// entry — leave the public state. Returns how many, from the first, pass, and why the
    /// next does not.
    pub fn check_permissions(&self, batch: &Batch, n: usize, who: &mut dyn Permissions) -> (usize, Option<String>) {
        let mut st = Overlay::new(self);
        for (i, (loc, records)) in batch.entries.iter().take(n).enumerate() {
            let stated = batch.callers.get(i).and_then(Option::as_ref);
            let verdict = who.caller(stated).and_then(|caller| check_entry(&mut st, &caller, records, &*who));
            if let Err(why) = verdict {
                return (i, Some(format!("entry at LSN {}: {why}", loc.lsn)));
            }
            for r in records {
                match r {
                    Record::Inode { fresh: true, img } => who.granted(img.ino),
                    Record::OpenWrite { ino } => who.granted(*ino),
                    Record::FreeInode { ino } => who.freed(*ino),
                    _ => {}
                }
            }
        }
        (n, None)
    }
}

/// Judges one entry record by record, each against the state the records before it leave
/// (`st`, which it updates), then as a whole ([`EntryShadow::finish`]). A refused entry
/// leaves `st` part-updated: the batch stops there.
fn check_entry(st: &mut Overlay, caller: &Caller, records: &[Record], who: &dyn Permissions) -> Result<(), String> {
    let mut shadow = EntryShadow::default();
    for r in records {
        check_record(st, &shadow, caller, r, who)?;
        shadow.note(st, r)?;
        st.absorb(r);
    }
    shadow.finish(st, caller)
}

fn check_record(
    st: &Overlay,
    shadow: &EntryShadow,
    caller: &Caller,
    r: &Record,
    who: &dyn Permissions,
) -> Result<(), String> {
    let root = caller.is_root();
    let owner = |img: &InodeImage| root || caller.uid == img.uid;
    // A file the entry made is written through the open that made it. A symbolic link's
    // mode says nothing (0777): its target is written when it is made, never after.
    let writable = |ino: u64, img: &InodeImage| {
        shadow.born(ino) || (img.mode & S_IFMT != S_IFLNK && (allows(caller, img, 2) || who.may_write(ino)))
    };
    match r {
        Record::OpenWrite { ino } => {
            if root {
                return Ok(());
            }
            if let Some(old) = st.inode(*ino) {
                if !writable(*ino, &old) {
                    return Err(format!("uid {} may not open inode {ino} for writing", caller.uid));
                }
            }
        }
        Record::Dirent { dir, ino, name, .. } => {
            let moved = st.inode(*ino).filter(|_| *ino != 0).filter(is_dir);
            if moved.is_some() && st.is_ancestor(*ino, *dir) {
                return Err(format!("directory {ino} would be put inside itself (in directory {dir})"));
            }
            let Some(d) = st.inode(*dir) else { return Ok(()) };
            if root {
                return Ok(());
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
            // Moving a directory to another parent rewrites its "..": it must be writable.
            if let Some(m) = moved {
                if m.parent != *dir && !shadow.born(*ino) && !allows(caller, &m, 2) {
                    return Err(format!("uid {} may not move directory {ino} to another directory", caller.uid));
                }
            }
        }
        Record::Inode { fresh: true, img } => {
            if st.inode(img.ino).is_some() {
                return Err(format!("uid {} may not create inode {} over one in use", caller.uid, img.ino));
            }
            if !root && img.uid != caller.uid {
                return Err(format!("uid {} may not create inode {} owned by uid {}", caller.uid, img.ino, img.uid));
            }
            // Device nodes need CAP_MKNOD, but for a whiteout (a character device 0:0).
            let device = matches!(img.mode & S_IFMT, 0o020000 | 0o060000);
            if !root && device && !(img.mode & S_IFMT == 0o020000 && img.rdev == 0) {
                return Err(format!("uid {} may not create device node {}", caller.uid, img.ino));
            }
        }
        Record::Inode { fresh: false, img } => {
            let Some(old) = st.inode(img.ino) else { return Ok(()) };
            if root {
                return Ok(());
            }
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
            let gains_sgid = now & S_ISGID != 0 && was & S_ISGID == 0;
            if gains_sgid && img.mode & S_IFMT != S_IFDIR && !caller.in_group(img.gid) {
                return Err(format!("uid {} may not set set-group-ID on inode {ino} outside its group", caller.uid));
            }
            if img.rdev != old.rdev {
                return Err(format!("uid {} may not change the device number of inode {ino}", caller.uid));
            }
            if img.flags != old.flags && !owner(&old) {
                return Err(format!("uid {} may not change the flags of inode {ino}", caller.uid));
            }
            if img.generation != old.generation || img.crtime != old.crtime {
                return Err(format!("uid {} may not change the generation or birth time of inode {ino}", caller.uid));
            }
            if img.size != old.size && old.mode & S_IFMT != S_IFDIR && !writable(ino, &old) {
                return Err(format!("uid {} may not change the size of inode {ino}", caller.uid));
            }
            // A directory's size moves with its names: for those who may change them.
            if img.size != old.size && old.mode & S_IFMT == S_IFDIR && !allows(caller, &old, 3) {
                return Err(format!("uid {} may not change the size of directory {ino}", caller.uid));
            }
            if img.mtime != old.mtime && !owner(&old) && !writable(ino, &old) {
                return Err(format!("uid {} may not change the modification time of inode {ino}", caller.uid));
            }
        }
        Record::Write { ino, .. }
        | Record::Truncate { ino, .. }
        | Record::Punch { ino, .. }
        | Record::Alloc { ino, .. } => {
            if root {
                return Ok(());
            }
            if let Some(old) = st.inode(*ino) {
                if !writable(*ino, &old) {
                    return Err(format!("uid {} may not write inode {ino}", caller.uid));
                }
            }
        }
        Record::Xattrs { ino, attrs } => {
            if root {
                return Ok(());
            }
            let Some(old) = st.inode(*ino) else { return Ok(()) };
            let before = st.xattrs(*ino);
            let value =
                |list: &[(Vec<u8>, Vec<u8>)], n: &[u8]| list.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
            let kind = old.mode & S_IFMT;
            for (name, _) in attrs.iter().chain(before.iter()) {
                if value(attrs, name) == value(&before, name) {
                    continue;
                }
                // As Linux's xattr_permission: user.* on regular files and directories for
                // whoever may write them (a sticky directory's, for its owner); the other
                // namespaces for the owner, trusted.* for root only.
                let allowed = if name.starts_with(b"trusted.") {
                    false
                } else if name.as_slice() == b"security.capability" {
                    // File capabilities are set by root only (CAP_SETFCAP); whoever may
                    // write the file removes them (every write does).
                    value(attrs, name).is_none() && (owner(&old) || writable(*ino, &old))
                } else if name.starts_with(b"user.") {
                    let sticky_dir = kind == S_IFDIR && old.mode & S_ISVTX != 0;
                    (kind == S_IFREG || kind == S_IFDIR) && (owner(&old) || (!sticky_dir && writable(*ino, &old)))
                } else {
                    owner(&old)
                };
                if !allowed {
                    return Err(format!(
                        "uid {} may not change extended attribute {:?} of inode {ino}",
                        caller.uid,
                        String::from_utf8_lossy(name)
                    ));
                }
            }
        }
        // Judged by what the entry did to names ([`EntryShadow::note`]).
        Record::FreeInode { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests;
