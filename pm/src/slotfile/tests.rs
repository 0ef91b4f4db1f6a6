//! The replacement of a slot's log file and the states a crash can leave it in.

use super::*;
use crate::layout::FormatParams;
use crate::node::NodePm;
use crate::oplog::ScanStop;
use crate::public::Loaded;
use crate::record::ROOT_INO;
use crate::recovery::{recover, recover_with, Recovered};
use crate::testing::create_file;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

/// A formatted node of two slots in a temp directory.
fn node() -> (tempfile::TempDir, Geometry) {
    let dir = tempfile::tempdir().unwrap();
    let params = FormatParams { size: 8 << 20, log_size: 256 << 10, log_slots: 2, inodes: 64 };
    let geo = crate::mkfs::format_dir(dir.path(), &params).unwrap().geometry;
    (dir, geo)
}

/// Slot `slot`'s log file as a writer maps it (by path: whatever file is there now).
fn writer(dir: &Path, geo: &Geometry, slot: u32) -> LogSlot {
    let region = PmRegion::open(&dir.join(log_file_name(slot))).unwrap();
    LogSlot::new(Arc::new(region), geo, slot)
}

fn recovered(dir: &Path) -> Recovered {
    recover(&NodePm::open(dir).unwrap()).unwrap()
}

/// The names in the root directory, sorted.
fn names(loaded: &Loaded) -> Vec<Vec<u8>> {
    let mut n: Vec<_> = loaded.dirs[&ROOT_INO].iter().map(|d| d.name.clone()).collect();
    n.sort();
    n
}

fn ino_of(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

#[test]
fn a_fresh_file_keeps_the_lsns_and_cuts_the_old_writer_off() {
    let (dir, geo) = node();
    let dir = dir.path();
    let path = dir.join(log_file_name(0));
    let old = writer(dir, &geo, 0);
    let end = old.append(0, 0, create_file(2, b"one", b"first").payload()).unwrap().end;
    assert_eq!(recovered(dir).slots[0].published, end, "published by recovery");
    let old_ino = ino_of(&path);

    let lsns = SlotLsns { published: end, replicated: end };
    let region = replace(dir, &geo, 0, lsns).unwrap();
    assert_ne!(ino_of(&path), old_ino, "another file under the slot's name");
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!dir.join(new_log_file_name(0)).exists(), "nothing left under the temporary name");
    // The mapping returned and the file now under the name are the same, empty from the
    // checkpoint on.
    for log in [LogSlot::new(region, &geo, 0), writer(dir, &geo, 0)] {
        assert_eq!((log.published_lsn().unwrap(), log.replicated_lsn().unwrap()), (end, end));
        let scan = log.scan(end).unwrap();
        assert_eq!((scan.entries.len(), scan.end, scan.stop), (0, end, ScanStop::End));
    }

    // The old writer's mapping still writes — into the unlinked file: a well-formed entry
    // at the next LSN is nowhere to be seen.
    old.append(end, end, create_file(3, b"forged", b"from the old writer").payload()).unwrap();
    assert!(writer(dir, &geo, 0).scan(end).unwrap().entries.is_empty());
    let rec = recovered(dir);
    assert_eq!((rec.slots[0].replayed, rec.slots[0].published), (0, end));
    assert_eq!(names(&rec.loaded), vec![b"one".to_vec()]);

    // The slot's next writer appends from the checkpoint in the new file.
    let next = writer(dir, &geo, 0);
    let end2 = next.append(end, end, create_file(4, b"two", b"second").payload()).unwrap().end;
    let rec = recovered(dir);
    assert_eq!((rec.slots[0].replayed, rec.slots[0].published), (1, end2));
    assert_eq!(names(&rec.loaded), vec![b"one".to_vec(), b"two".to_vec()]);
}

#[test]
fn a_crash_before_the_rename_leaves_the_old_file_and_a_stray_that_is_removed() {
    let (dir, geo) = node();
    let dir = dir.path();
    let path = dir.join(log_file_name(0));
    let old_ino = ino_of(&path);
    let w = writer(dir, &geo, 0);
    let end = w.append(0, 0, create_file(2, b"kept", b"unpublished").payload()).unwrap().end;
    // Slot 0: a whole fresh file that was never renamed (the process died before); slot 1:
    // a torn one (it died while creating it).
    let fresh = prepare(dir, &geo, 0, SlotLsns::default()).unwrap();
    drop(fresh);
    std::fs::write(dir.join(new_log_file_name(1)), b"torn").unwrap();

    // The old files are the logs: recovery replays the unpublished entry from slot 0's.
    assert_eq!(ino_of(&path), old_ino);
    let rec = recovered(dir);
    assert_eq!((rec.slots[0].replayed, rec.slots[0].published), (1, end));
    assert_eq!(names(&rec.loaded), vec![b"kept".to_vec()]);

    assert_eq!(remove_stray(dir, &geo), vec![0, 1]);
    assert!(!dir.join(new_log_file_name(0)).exists() && !dir.join(new_log_file_name(1)).exists());
    assert!(remove_stray(dir, &geo).is_empty());

    // A stray does not stop the next replacement either.
    std::fs::write(dir.join(new_log_file_name(0)), b"torn").unwrap();
    replace(dir, &geo, 0, SlotLsns { published: end, replicated: end }).unwrap();
    assert_eq!(writer(dir, &geo, 0).published_lsn().unwrap(), end);
    assert!(!dir.join(new_log_file_name(0)).exists());
    // A slot the node does not have is refused, with nothing created.
    assert!(prepare(dir, &geo, 2, SlotLsns::default()).is_err());
    assert!(!dir.join(new_log_file_name(2)).exists());
}

/// Copies every file of `from` into a new directory.
fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.path().join(e.file_name())).unwrap();
    }
    to
}

#[test]
fn after_the_rename_either_file_recovers_to_the_same_tree() {
    let (dir, geo) = node();
    let dir = dir.path();
    let path = dir.join(log_file_name(0));
    let w = writer(dir, &geo, 0);
    let end = w.append(0, 0, create_file(2, b"one", b"published").payload()).unwrap().end;
    recovered(dir);
    let settled_bytes = std::fs::read(&path).unwrap();
    // The writer's session ended here; it goes on logging past the checkpoint, and the slot
    // is replaced. A crash before the directory's fsync may bring either file back.
    w.append(end, end, create_file(3, b"late", b"after its session").payload()).unwrap();
    let old_bytes = std::fs::read(&path).unwrap();
    replace(dir, &geo, 0, SlotLsns { published: end, replicated: end }).unwrap();
    let with_new = copy_dir(dir);
    let with_old = copy_dir(dir);
    std::fs::write(with_old.path().join(log_file_name(0)), &old_bytes).unwrap();

    // A publisher that checks leases refuses what the gone writer logged past the
    // checkpoint (its leases ended with its session): both files recover to one tree.
    let ended = |slot: u32, lsn: u64, _: &[crate::record::Record]| {
        if slot == 0 && lsn >= end {
            Err("the writer's session has ended".to_string())
        } else {
            Ok(())
        }
    };
    let mut trees = Vec::new();
    for d in [&with_new, &with_old] {
        let node = NodePm::open(d.path()).unwrap();
        let rec = recover_with(&node, &mut ended.clone()).unwrap();
        assert_eq!(rec.slots[0].replayed, 0);
        assert!(rec.slots[0].published >= end, "the next writer starts at or after the checkpoint");
        let log = LogSlot::new(node.logs[0].clone(), &geo, 0);
        assert!(log.scan(rec.slots[0].published).unwrap().entries.is_empty(), "nothing left to publish");
        trees.push((rec.loaded.inodes, rec.loaded.dirs));
    }
    assert_eq!(trees[0], trees[1]);
    assert!(!trees[0].0.contains_key(&3), "the late entry is in neither");

    // A settled old file — nothing past the checkpoint — differs from the new one only in
    // the published entries of its ring: the same header, the same recovery, with or
    // without leases.
    let settled = copy_dir(with_new.path());
    std::fs::write(settled.path().join(log_file_name(0)), &settled_bytes).unwrap();
    let a = recovered(with_new.path());
    let b = recovered(settled.path());
    assert_eq!((a.slots[0].published, b.slots[0].published), (end, end));
    assert_eq!((a.loaded.inodes, a.loaded.dirs), (b.loaded.inodes, b.loaded.dirs));
}
