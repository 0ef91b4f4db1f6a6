//! The permission rules and the derived values, entry by entry.

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
    let geo = Geometry::compute(&FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 1, inodes: 64 }).unwrap();
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

// Derived values and the meaning of a whole entry (issue 21, class A).

/// Publishes `entries` unchecked (a test's setup).
fn publish(pa: &mut PublicArea, entries: &[EntryBuilder]) {
    let log = PmRegion::traced(1 << 20);
    for e in entries {
        for r in decode_entry(e.payload(), 0).unwrap().1 {
            pa.apply(&r, &log).unwrap();
        }
    }
    pa.fence();
    pa.checkpoint_done();
}

fn root_img(pa: &PublicArea) -> InodeImage {
    pa.read_inode(ROOT_INO).unwrap().img
}

fn dir(ino: u64, parent: u64, mode: u32, uid: u32) -> InodeImage {
    InodeImage { ino, parent, mode: libc::S_IFDIR | mode, uid, gid: uid, nlink: 2, ..Default::default() }
}

/// OWNER's directory 3 ("d", 0755) in the root, holding OWNER's directory 4 ("sub").
fn area_with_dirs() -> PublicArea {
    let mut pa = area();
    let mut e = by(0);
    e.inode(&dir(3, ROOT_INO, 0o755, OWNER), true);
    e.dirent(ROOT_INO, b"d", 3, crate::record::dtype::DIR);
    e.inode(&dir(4, 3, 0o755, OWNER), true);
    e.dirent(3, b"sub", 4, crate::record::dtype::DIR);
    e.inode(&InodeImage { nlink: 3, ..dir(3, ROOT_INO, 0o755, OWNER) }, false);
    e.inode(&InodeImage { nlink: 3, ..root_img(&pa) }, false);
    publish(&mut pa, &[e]);
    pa
}

fn refusal(pa: &PublicArea, e: EntryBuilder) -> String {
    let (n, why) = check(pa, &mut Session::default(), &[e]);
    assert_eq!(n, 0, "expected a refusal");
    why
}

fn passes(pa: &PublicArea, e: EntryBuilder) {
    assert_eq!(check(pa, &mut Session::default(), &[e]), (1, String::new()));
}

#[test]
fn a_free_needs_the_last_name_gone() {
    let pa = area();
    for uid in [OTHER, OWNER, 0] {
        let mut free = by(uid);
        free.free_inode(FILE);
        assert!(refusal(&pa, free).contains("inode 2 is freed while it still has 1 name"));
    }
    // Unlinked and freed in one entry: by its owner, or by anyone who may write the
    // (non-sticky) directory, as unlink(2) allows.
    for uid in [OWNER, OTHER] {
        let mut unlink = by(uid);
        unlink.dirent(ROOT_INO, b"file", 0, 0);
        unlink.free_inode(FILE);
        passes(&pa, unlink);
    }
}

#[test]
fn records_are_judged_on_the_records_before_them_in_the_entry() {
    let pa = area();
    // Freed and made again in one entry while it still has its name.
    let mut e = by(OTHER);
    e.free_inode(FILE);
    e.inode(&InodeImage { parent: ROOT_INO, ..file(FILE, 0o755, OTHER) }, true);
    assert!(refusal(&pa, e).contains("still has 1 name"));
    // Made, then given to root and made set-user-ID, in one entry.
    let mut e = by(OTHER);
    e.inode(&file(5, 0o755, OTHER), true);
    e.dirent(ROOT_INO, b"suid", 5, crate::record::dtype::REG);
    e.inode(&file(5, 0o4755, 0), false);
    assert!(refusal(&pa, e).contains("may not change the owner of inode 5"));
    // Set-user-ID on one's own new file is one's own business.
    let mut e = by(OTHER);
    e.inode(&file(5, 0o755, OTHER), true);
    e.dirent(ROOT_INO, b"suid", 5, crate::record::dtype::REG);
    e.inode(&file(5, 0o4755, OTHER), false);
    passes(&pa, e);
    // Set-group-ID in a group the caller is not in.
    let mut e = by(OTHER);
    e.inode(&InodeImage { gid: 77, ..file(5, 0o755, OTHER) }, true);
    e.dirent(ROOT_INO, b"g", 5, crate::record::dtype::REG);
    assert!(refusal(&pa, e).contains("in group 77"));
}

#[test]
fn link_counts_are_derived_for_every_caller() {
    let pa = area();
    for uid in [OTHER, OWNER, 0] {
        let mut e = by(uid);
        e.inode(&file(FILE, 0o644, OWNER), false);
        let mut zero = file(FILE, 0o644, OWNER);
        zero.nlink = 0;
        e.inode(&zero, false);
        assert!(refusal(&pa, e).contains("has 1 name(s), but its link count says 0"));
    }
    // A name without its count, then with it.
    let mut e = by(OWNER);
    e.dirent(ROOT_INO, b"again", FILE, crate::record::dtype::REG);
    assert!(refusal(&pa, e).contains("has 2 name(s), but its link count says 1"));
    let mut e = by(OWNER);
    e.dirent(ROOT_INO, b"again", FILE, crate::record::dtype::REG);
    e.inode(&InodeImage { nlink: 2, ..file(FILE, 0o644, OWNER) }, false);
    passes(&pa, e);
}

#[test]
fn hard_links_follow_protected_hardlinks() {
    let mut pa = area();
    let link = |uid: u32, ino: u64, img: InodeImage| {
        let mut e = by(uid);
        e.dirent(ROOT_INO, b"link", ino, crate::record::dtype::REG);
        e.inode(&InodeImage { nlink: 2, ..img }, false);
        e
    };
    // OWNER's 0644 file: OTHER may read, not write it.
    assert!(refusal(&pa, link(OTHER, FILE, file(FILE, 0o644, OWNER))).contains("may not make a hard link to inode 2"));
    // Readable and writable by anyone: allowed; set-user-ID: not.
    publish(&mut pa, &[chmod(OWNER, FILE, 0o666)]);
    passes(&pa, link(OTHER, FILE, file(FILE, 0o666, OWNER)));
    publish(&mut pa, &[chmod(OWNER, FILE, 0o4777)]);
    assert!(refusal(&pa, link(OTHER, FILE, file(FILE, 0o4777, OWNER))).contains("hard link"));
    passes(&pa, link(OWNER, FILE, file(FILE, 0o4777, OWNER)));
}

#[test]
fn directories_have_one_name_their_parent_and_derived_counts() {
    let pa = area_with_dirs();
    let root = root_img(&pa);
    let d = InodeImage { nlink: 3, ..dir(3, ROOT_INO, 0o755, OWNER) };
    // mkdir without the parent's new count, then with it.
    let mut e = by(OWNER);
    e.inode(&dir(5, 3, 0o755, OWNER), true);
    e.dirent(3, b"new", 5, crate::record::dtype::DIR);
    assert!(refusal(&pa, e.clone()).contains("directory 3: link count 3 where nicfs derives 4"));
    e.inode(&InodeImage { nlink: 4, ..d }, false);
    passes(&pa, e);
    // A second name for a directory, by root too.
    for uid in [OWNER, 0] {
        let mut e = by(uid);
        e.dirent(ROOT_INO, b"alias", 4, crate::record::dtype::DIR);
        e.inode(&InodeImage { nlink: root.nlink + 1, ..root }, false);
        assert!(refusal(&pa, e).contains("hard link to a directory"), "uid {uid}");
    }
    // A parent pointer that is not where the name is.
    let mut e = by(0);
    e.inode(&InodeImage { parent: ROOT_INO, ..dir(4, 3, 0o755, OWNER) }, false);
    assert!(refusal(&pa, e).contains("parent 1 is not the directory that names it"));
    // rmdir of a directory that is not empty.
    let mut e = by(0);
    e.dirent(ROOT_INO, b"d", 0, 0);
    e.inode(&InodeImage { nlink: root.nlink - 1, ..root }, false);
    e.inode(&InodeImage { nlink: 1, ..d }, false);
    assert!(refusal(&pa, e).contains("not empty"));
    // A rename cycle behind a forged parent (sub's parent set to the root first), by root.
    let mut e = by(0);
    e.inode(&InodeImage { parent: ROOT_INO, nlink: 3, ..dir(4, 3, 0o755, OWNER) }, false);
    e.dirent(4, b"d", 3, crate::record::dtype::DIR);
    e.dirent(ROOT_INO, b"d", 0, 0);
    e.inode(&InodeImage { parent: 4, ..d }, false);
    e.inode(&InodeImage { nlink: root.nlink - 1, ..root }, false);
    let why = refusal(&pa, e);
    assert!(why.contains("not the directory that names it") || why.contains("cycle"), "{why}");
    // rmdir and a rename of a directory as libfs logs them pass.
    let mut e = by(OWNER);
    e.dirent(3, b"sub", 0, 0);
    e.free_inode(4);
    e.inode(&InodeImage { nlink: 2, ..d }, false);
    passes(&pa, e);
    let mut e = by(OWNER);
    e.dirent(ROOT_INO, b"moved", 4, crate::record::dtype::DIR);
    e.dirent(3, b"sub", 0, 0);
    e.inode(&InodeImage { parent: ROOT_INO, ..dir(4, 3, 0o755, OWNER) }, false);
    e.inode(&InodeImage { nlink: 2, ..d }, false);
    e.inode(&InodeImage { nlink: root.nlink + 1, ..root }, false);
    passes(&pa, e);
}

#[test]
fn fsck_finds_nothing_in_what_passes_and_names_what_breaks() {
    use crate::fsck::{check, Kind, Options};
    let mut pa = area_with_dirs();
    assert_eq!(check(pa.reader(), &Options { live: true }).problems, Vec::new());
    // What the checks refuse, published unchecked, is found.
    let mut zero = file(FILE, 0o644, OWNER);
    zero.nlink = 0;
    let mut e = by(0);
    e.inode(&zero, false);
    e.dirent(ROOT_INO, b"alias", 4, crate::record::dtype::DIR);
    publish(&mut pa, &[e]);
    let problems = check(pa.reader(), &Options { live: true }).problems;
    let has = |ino: u64, kind: Kind| problems.iter().any(|p| p.ino == ino && p.kind == kind);
    assert!(has(FILE, Kind::LinkCount), "{problems:?}");
    assert!(has(4, Kind::DirectoryNames), "{problems:?}");
    assert!(has(ROOT_INO, Kind::LinkCount), "{problems:?}");
}

#[test]
fn extended_attributes_follow_xattr_permission() {
    let mut pa = area();
    // A sticky, world-writable directory of root's, and OWNER's file with capabilities.
    let mut e = by(0);
    e.inode(&dir(3, ROOT_INO, 0o1777, 0), true);
    e.dirent(ROOT_INO, b"tmp", 3, crate::record::dtype::DIR);
    e.inode(&InodeImage { nlink: 3, ..root_img(&pa) }, false);
    e.xattrs(FILE, [(&b"security.capability"[..], &b"caps"[..])]);
    publish(&mut pa, &[e]);
    let set = |uid: u32, ino: u64, attrs: &[(&[u8], &[u8])]| {
        let mut e = by(uid);
        e.xattrs(ino, attrs.iter().copied());
        e
    };
    assert!(refusal(&pa, set(OTHER, 3, &[(b"user.x", b"v")])).contains("may not change extended attribute \"user.x\""));
    passes(&pa, set(0, 3, &[(b"user.x", b"v")]));
    // Capabilities: set by root only, removed by the owner.
    assert!(refusal(&pa, set(OWNER, FILE, &[(b"security.capability", b"more")])).contains("security.capability"));
    passes(&pa, set(OWNER, FILE, &[]));
    assert!(refusal(&pa, set(OTHER, FILE, &[])).contains("security.capability"));
    assert!(refusal(&pa, set(OWNER, FILE, &[(b"security.capability", b"caps"), (b"trusted.t", b"1")]))
        .contains("trusted.t"));
}

#[test]
fn only_root_makes_device_nodes() {
    let pa = area();
    let node = |uid: u32, mode: u32, rdev: u32| {
        let mut e = by(uid);
        e.inode(&InodeImage { ino: 5, mode, uid, gid: uid, nlink: 1, rdev, ..Default::default() }, true);
        e.dirent(ROOT_INO, b"dev", 5, crate::record::dtype::of_mode(mode));
        e
    };
    assert!(refusal(&pa, node(OTHER, libc::S_IFBLK | 0o666, 0x801)).contains("may not create device node 5"));
    assert!(refusal(&pa, node(OTHER, libc::S_IFCHR | 0o666, 0x101)).contains("device node"));
    passes(&pa, node(OTHER, libc::S_IFCHR, 0)); // a whiteout
    passes(&pa, node(0, libc::S_IFBLK | 0o600, 0x801));
}

#[test]
fn a_symbolic_link_is_written_only_when_made() {
    let mut pa = area();
    let link = InodeImage { ino: 5, mode: libc::S_IFLNK | 0o777, nlink: 1, size: 4, ..Default::default() };
    let mut e = by(0);
    e.inode(&link, true);
    e.dirent(ROOT_INO, b"link", 5, crate::record::dtype::LNK);
    e.write(5, 0, b"file");
    publish(&mut pa, &[e]);
    // Root's link, mode 0777: another user may not retarget it.
    let mut e = by(OTHER);
    e.write(5, 0, b"/etc");
    assert!(refusal(&pa, e).contains("may not write inode 5"));
    let mut e = by(OTHER);
    e.inode(&InodeImage { size: 11, ..link }, false);
    assert!(refusal(&pa, e).contains("may not change the size of inode 5"));
    // Its own, made in the entry, written there.
    let mut e = by(OTHER);
    e.inode(&InodeImage { ino: 6, uid: OTHER, gid: OTHER, ..link }, true);
    e.dirent(ROOT_INO, b"mine", 6, crate::record::dtype::LNK);
    e.write(6, 0, b"file");
    passes(&pa, e);
}

/// Found by libfs's reftest through nicfs: a rename over a file logs the free of the file
/// it replaces before the name that takes its place; the free is judged on the names as
/// the whole entry leaves them.
#[test]
fn a_rename_over_a_file_frees_it_before_taking_its_name() {
    let mut pa = area();
    let mut e = by(0);
    e.inode(&file(3, 0o644, OWNER), true);
    e.dirent(ROOT_INO, b"src", 3, crate::record::dtype::REG);
    publish(&mut pa, &[e]);
    let mut e = by(OWNER);
    e.dirent(ROOT_INO, b"src", 0, 0);
    e.free_inode(FILE);
    e.dirent(ROOT_INO, b"file", 3, crate::record::dtype::REG);
    e.inode(&file(3, 0o644, OWNER), false);
    passes(&pa, e);
    // Without the name taken, the free is refused.
    let mut e = by(OWNER);
    e.free_inode(FILE);
    e.dirent(ROOT_INO, b"other", 3, crate::record::dtype::REG);
    e.inode(&InodeImage { nlink: 2, ..file(3, 0o644, OWNER) }, false);
    assert!(refusal(&pa, e).contains("inode 2 is freed while it still has 1 name"));
}
