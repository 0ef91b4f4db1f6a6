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
//!   generation and birth time only for root;
//! * mode bits change for root or the owner — anyone who may write the file may only clear
//!   set-user-ID and set-group-ID (as the kernel does on a write);
//! * file data (writes, truncation, holes, allocation) and the size change for whoever may
//!   write the file *or* belongs to a session holding a write grant of it
//!   ([`Permissions::may_write`]: a file opened for writing stays writable through that
//!   open after a chmod, as POSIX has it) or made it in this entry; the modification time,
//!   for those or the owner;
//! * an open for writing (an OPEN_WRITE record) is allowed if the caller may write the file
//!   by its mode, as the public area and the records before it leave it, or the session
//!   holds a grant of it already;
//! * extended attributes change for root, the owner or whoever may write the file; those
//!   in the `trusted.` namespace only for root;
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
    // A file the entry made is written through the open that made it.
    let writable = |ino: u64, img: &InodeImage| allows(caller, img, 2) || who.may_write(ino) || shadow.born(ino);
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
            if (img.rdev != old.rdev || img.flags != old.flags) && !owner(&old) {
                return Err(format!("uid {} may not change the device or flags of inode {ino}", caller.uid));
            }
            if img.generation != old.generation || img.crtime != old.crtime {
                return Err(format!("uid {} may not change the generation or birth time of inode {ino}", caller.uid));
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
        // Judged by what the entry did to names ([`EntryShadow::note`]).
        Record::FreeInode { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{FormatParams, Geometry};
    use crate::oplog::EntryLoc;
    use crate::record::{decode_entry, EntryBuilder, ROOT_INO};
    use crate::region::PmRegion;
    use std::collections::HashSet;
    use std::sync::Arc;

    const OWNER: u32 = 1000;
    const OTHER: u32 = 2000;
    /// A file of OWNER's, mode 0644, published.
    const FILE: u64 = 2;

    fn file(ino: u64, mode: u32, uid: u32) -> InodeImage {
        InodeImage { ino, parent: 0, mode: libc::S_IFREG | mode, uid, gid: uid, nlink: 1, ..Default::default() }
    }

    /// A public area with a root directory (root's, 0777: anyone may create in it) and FILE.
    fn area() -> PublicArea {
        let geo =
            Geometry::compute(&FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 1, inodes: 64 }).unwrap();
        let region = Arc::new(PmRegion::traced(8 << 20));
        let root = InodeImage { ino: 1, mode: libc::S_IFDIR | 0o777, nlink: 2, parent: 1, ..Default::default() };
        PublicArea::format(&region, &geo, &root).unwrap();
        let (mut pa, _) = PublicArea::load(region, geo).unwrap();
        let mut b = EntryBuilder::new();
        b.inode(&file(FILE, 0o644, OWNER), true);
        b.dirent(ROOT_INO, b"file", FILE, crate::record::dtype::REG);
        let log = PmRegion::traced(1 << 20);
        for r in decode_entry(b.payload(), 0).unwrap().1 {
            pa.apply(&r, &log).unwrap();
        }
        pa.fence();
        pa.checkpoint_done();
        pa
    }

    fn by(uid: u32) -> EntryBuilder {
        EntryBuilder::by(&Caller { uid, gid: uid, groups: Vec::new() })
    }

    /// A batch of these entries, in order (LSNs 0, 1, …).
    fn batch(entries: &[EntryBuilder]) -> Batch {
        let mut batch = Batch::new(0, 0);
        for (i, e) in entries.iter().enumerate() {
            let loc = EntryLoc { lsn: i as u64, end: i as u64 + 1, payload_off: 0, payload_len: 0 };
            batch.push(&loc, e.payload());
        }
        batch
    }

    /// A session of a root client (every stated caller believed): its grants, and the
    /// calls it was told of, in order.
    #[derive(Default)]
    struct Session {
        grants: HashSet<u64>,
        told: Vec<(&'static str, u64)>,
    }

    impl Permissions for Session {
        fn caller(&self, stated: Option<&Caller>) -> Result<Caller, String> {
            Ok(stated.cloned().unwrap_or_default())
        }
        fn may_write(&self, ino: u64) -> bool {
            self.grants.contains(&ino)
        }
        fn granted(&mut self, ino: u64) {
            self.grants.insert(ino);
            self.told.push(("granted", ino));
        }
        fn freed(&mut self, ino: u64) {
            self.grants.remove(&ino);
            self.told.push(("freed", ino));
        }
    }

    /// How many entries pass, and the refusal's reason (empty if none).
    fn check(pa: &PublicArea, s: &mut Session, entries: &[EntryBuilder]) -> (usize, String) {
        let b = batch(entries);
        let (n, why) = pa.check_permissions(&b, b.entries.len(), s);
        (n, why.unwrap_or_default())
    }

    fn open_write(uid: u32, ino: u64) -> EntryBuilder {
        let mut e = by(uid);
        e.open_write(ino);
        e
    }

    fn write(uid: u32, ino: u64) -> EntryBuilder {
        let mut e = by(uid);
        e.write(ino, 0, b"data");
        e
    }

    fn chmod(uid: u32, ino: u64, mode: u32) -> EntryBuilder {
        let mut e = by(uid);
        e.inode(&file(ino, mode, OWNER), false);
        e
    }

    #[test]
    fn an_open_for_writing_needs_write_permission_and_grants_nothing_when_refused() {
        let pa = area();
        let mut s = Session::default();
        let (n, why) = check(&pa, &mut s, &[open_write(OTHER, FILE), write(OTHER, FILE)]);
        assert_eq!(n, 0);
        assert!(why.contains("uid 2000 may not open inode 2 for writing"), "{why}");
        assert!(s.told.is_empty() && s.grants.is_empty());
    }

    #[test]
    fn an_open_for_writing_by_root_lets_the_session_write_whatever_the_caller() {
        let pa = area();
        // Without the open, the other user's write is refused ...
        let (n, why) = check(&pa, &mut Session::default(), &[write(OTHER, FILE)]);
        assert_eq!(n, 0);
        assert!(why.contains("may not write inode 2"), "{why}");
        // ... after root's open of the file for writing (the descriptor passed on), allowed.
        let mut s = Session::default();
        assert_eq!(check(&pa, &mut s, &[open_write(0, FILE), write(OTHER, FILE)]), (2, String::new()));
        assert_eq!(s.told, vec![("granted", FILE)]);
        // The grant outlives the batch.
        assert_eq!(check(&pa, &mut s, &[write(OTHER, FILE)]), (1, String::new()));
    }

    #[test]
    fn an_open_is_judged_on_the_entries_before_it() {
        let pa = area();
        // The owner's own chmod a-w, not published yet, comes first: the owner's open for
        // writing after it is refused ...
        let mut s = Session::default();
        let (n, why) = check(&pa, &mut s, &[chmod(OWNER, FILE, 0o444), open_write(OWNER, FILE)]);
        assert_eq!(n, 1);
        assert!(why.contains("entry at LSN 1") && why.contains("may not open inode 2"), "{why}");
        assert!(s.grants.is_empty());
        // ... while an open made before it stays good for writes after it.
        let mut s = Session::default();
        let entries = [open_write(OWNER, FILE), chmod(OWNER, FILE, 0o444), write(OWNER, FILE)];
        assert_eq!(check(&pa, &mut s, &entries), (3, String::new()));
        // The owner's chmod a+w lets another user open it, though the public area says 0644.
        let mut s = Session::default();
        let entries = [chmod(OWNER, FILE, 0o666), open_write(OTHER, FILE)];
        assert_eq!(check(&pa, &mut s, &entries), (2, String::new()));
        assert_eq!(s.told, vec![("granted", FILE)]);
    }

    #[test]
    fn a_file_created_in_the_entry_may_be_opened_whatever_its_mode() {
        let pa = area();
        let mut s = Session::default();
        let mut e = by(OTHER);
        e.inode(&InodeImage { parent: ROOT_INO, ..file(3, 0o444, OTHER) }, true);
        e.dirent(ROOT_INO, b"new", 3, crate::record::dtype::REG);
        e.open_write(3);
        assert_eq!(check(&pa, &mut s, &[e, write(OTHER, 3)]), (2, String::new()));
        assert_eq!(s.told, vec![("granted", 3), ("granted", 3)]);
    }

    #[test]
    fn the_publisher_is_told_of_grants_and_frees_in_log_order() {
        let pa = area();
        let mut s = Session::default();
        let mut unlink = by(OWNER);
        unlink.dirent(ROOT_INO, b"file", 0, 0);
        unlink.free_inode(FILE);
        // A new file under the same number, made in the same batch.
        let mut recreate = by(OWNER);
        recreate.inode(&InodeImage { parent: ROOT_INO, ..file(FILE, 0o644, OWNER) }, true);
        recreate.dirent(ROOT_INO, b"again", FILE, crate::record::dtype::REG);
        assert_eq!(check(&pa, &mut s, &[open_write(0, FILE), unlink.clone()]), (2, String::new()));
        assert_eq!(s.told, vec![("granted", FILE), ("freed", FILE)]);
        assert!(s.grants.is_empty());
        let mut s = Session::default();
        assert_eq!(check(&pa, &mut s, &[open_write(0, FILE), unlink, recreate]), (3, String::new()));
        assert_eq!(s.told, vec![("granted", FILE), ("freed", FILE), ("granted", FILE)]);
        // Nothing is told of an entry that is refused, nor of those after it.
        let mut s = Session::default();
        let (n, _) = check(&pa, &mut s, &[write(OTHER, FILE), open_write(0, FILE)]);
        assert_eq!((n, s.told.len()), (0, 0));
    }

    #[test]
    fn a_new_inode_needs_a_free_number() {
        let pa = area();
        // Another user's file "created" again under its own number: its names would then
        // lead to the creator's file.
        let mut over = by(OTHER);
        over.inode(&InodeImage { parent: ROOT_INO, ..file(FILE, 0o644, OTHER) }, true);
        over.write(FILE, 0, b"mine");
        let (n, why) = check(&pa, &mut Session::default(), &[over]);
        assert_eq!(n, 0);
        assert!(why.contains("may not create inode 2 over one in use"), "{why}");
        // Once freed — by an earlier entry or earlier in the same one — the number is free.
        let mut unlink = by(OWNER);
        unlink.dirent(ROOT_INO, b"file", 0, 0);
        unlink.free_inode(FILE);
        let mut create = by(OTHER);
        create.inode(&InodeImage { parent: ROOT_INO, ..file(FILE, 0o644, OTHER) }, true);
        create.dirent(ROOT_INO, b"again", FILE, crate::record::dtype::REG);
        assert_eq!(check(&pa, &mut Session::default(), &[unlink.clone(), create]), (2, String::new()));
        let mut both = by(OWNER);
        both.dirent(ROOT_INO, b"file", 0, 0);
        both.free_inode(FILE);
        both.inode(&InodeImage { parent: ROOT_INO, ..file(FILE, 0o644, OWNER) }, true);
        both.dirent(ROOT_INO, b"again", FILE, crate::record::dtype::REG);
        assert_eq!(check(&pa, &mut Session::default(), &[both]), (1, String::new()));
    }

    #[test]
    fn an_open_of_a_file_the_session_holds_a_grant_of_is_allowed() {
        let pa = area();
        let mut s = Session { grants: [FILE].into(), ..Session::default() };
        assert_eq!(check(&pa, &mut s, &[open_write(OTHER, FILE)]), (1, String::new()));
    }
}
