//! A slot's log file replaced at start and at every release, through the `Node` that owns
//! the slots: the old file's holders cut off, the checkpoint nicfs's own, the locks.

use crate::host::link::HostLink;
use crate::node::Node;
use linefs_pm::layout::FormatParams;
use linefs_pm::node::log_file_name;
use linefs_pm::oplog::LogSlot;
use linefs_pm::publish::Batch;
use linefs_pm::slotfile::new_log_file_name;
use linefs_pm::testing::create_file;
use linefs_pm::PmRegion;
use rustix::fs::{flock, FlockOperation};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn format(slots: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let params = FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: slots, inodes: 256 };
    linefs_pm::mkfs::format_dir(dir.path(), &params).unwrap();
    dir
}

/// Slot `slot`'s log file as a client maps it: whatever file its name gives now.
fn client(dir: &Path, node: &Node, slot: u32) -> LogSlot {
    let region = Arc::new(PmRegion::open(&dir.join(log_file_name(slot))).unwrap());
    LogSlot::new(region, &node.geometry, slot)
}

fn ino(dir: &Path, slot: u32) -> u64 {
    std::fs::metadata(dir.join(log_file_name(slot))).unwrap().ino()
}

/// Whether a descriptor of our own can take slot `slot`'s lock now (and drops it again).
fn lockable(dir: &Path, slot: u32) -> bool {
    let f = std::fs::File::open(dir.join(log_file_name(slot))).unwrap();
    flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok()
}

/// Publishes what `slot` committed from `from` as nicfs's pipeline does (isolated).
fn publish(dir: &Path, node: &Node, slot: u32, from: u64) -> u64 {
    let host = HostLink::new(dir.to_path_buf(), Duration::from_millis(100));
    let copy = node.fetch(slot, from, u64::MAX).unwrap();
    let (batch, _) = Batch::from_copy(&copy);
    node.publish_batch(&batch, None, &host, None).0.unwrap().upto
}

#[test]
fn open_removes_strays_and_cuts_off_every_writer_from_before() {
    let dir = format(2);
    let d = dir.path();
    // A client of an earlier nicfs commits an entry and lives on; that nicfs died while
    // replacing slot 1, leaving a torn fresh file.
    let before = {
        let region = Arc::new(PmRegion::open(&d.join(log_file_name(0))).unwrap());
        let geo = linefs_pm::node::NodePm::open(d).unwrap().geometry;
        LogSlot::new(region, &geo, 0)
    };
    let end = before.append(0, 0, create_file(2, b"before", b"committed").payload()).unwrap().end;
    std::fs::write(d.join(new_log_file_name(1)), b"torn").unwrap();
    let inos = (ino(d, 0), ino(d, 1));

    let node = Node::open(d).unwrap();
    assert!(!d.join(new_log_file_name(1)).exists(), "the stray is removed");
    assert!(ino(d, 0) != inos.0 && ino(d, 1) != inos.1, "every slot has a fresh file");
    assert_eq!(node.log_files_replaced(), 2);
    // Recovery published the committed entry; the fresh file starts at its checkpoint.
    assert_eq!(node.checkpoint(0), end);
    assert_eq!(node.inode(2).unwrap().map(|i| i.size), Some(9));
    assert_eq!(client(d, &node, 0).published_lsn().unwrap(), end);
    // What the earlier client writes now reaches nothing nicfs reads.
    before.append(end, end, create_file(3, b"after", b"too late").payload()).unwrap();
    assert_eq!(node.committed_end(0).unwrap(), end);
    assert!(node.fetch(0, end, u64::MAX).unwrap().bytes.is_empty());
}

#[test]
fn a_released_slot_gets_a_fresh_file_with_nicfs_s_checkpoint_and_its_lock() {
    let dir = format(2);
    let d = dir.path();
    let node = Node::open(d).unwrap();
    assert!(lockable(d, 0), "nothing holds a free slot's lock");
    let claim = node.claim().unwrap();
    assert_eq!(claim.slot, 0);
    assert!(!lockable(d, 0), "a claimed slot's file is locked");
    let first = ino(d, 0);

    // The session: an entry published, one refused and dropped at its end.
    let old = client(d, &node, 0);
    let e1 = old.append(0, 0, create_file(2, b"one", b"published").payload()).unwrap().end;
    assert_eq!(publish(d, &node, 0, 0), e1);
    let e2 = old.append(e1, e1, create_file(3, b"two", b"dropped").payload()).unwrap().end;
    assert_eq!(node.discard_unpublished(0).unwrap(), (e1, e2));
    // The client scribbles over its header's checkpoint before it goes: the next session
    // must not start where it says.
    old.set_published_lsn(u64::MAX - 4095).unwrap();

    node.release(claim);
    assert_ne!(ino(d, 0), first, "a fresh file");
    assert!(!d.join(new_log_file_name(0)).exists());
    assert_eq!(node.checkpoint(0), e2);
    let fresh = client(d, &node, 0);
    assert_eq!((fresh.published_lsn().unwrap(), fresh.replicated_lsn().unwrap()), (e2, e2));
    assert!(lockable(d, 0), "a free slot's file is not locked");

    // The old client's descriptor writes an entry where the next session starts: nicfs
    // finds nothing there, and the next session's own entry is what it publishes.
    old.append(e2, e2, create_file(4, b"forged", b"from the last session").payload()).unwrap();
    let claim = node.claim().unwrap();
    assert_eq!(claim.slot, 0);
    assert!(!lockable(d, 0), "the claim locks the fresh file");
    assert_eq!(node.committed_end(0).unwrap(), e2);
    let e3 = fresh.append(e2, e2, create_file(5, b"three", b"the next session").payload()).unwrap().end;
    assert_eq!(publish(d, &node, 0, e2), e3);
    assert_eq!(node.inode(4).unwrap(), None, "the forged entry is nowhere");
    assert_eq!(node.inode(5).unwrap().map(|i| i.size), Some(16));
    node.release(claim);
    assert_eq!(node.log_files_replaced(), 2 + 2);
}

#[test]
fn a_slot_whose_file_cannot_be_replaced_is_not_claimed_until_it_is() {
    let dir = format(1);
    let d = dir.path();
    let node = Node::open(d).unwrap();
    let claim = node.claim().unwrap();
    let first = ino(d, 0);
    // Something nicfs cannot remove sits where the fresh file goes.
    let blocker = d.join(new_log_file_name(0));
    std::fs::create_dir(&blocker).unwrap();
    std::fs::write(blocker.join("x"), b"x").unwrap();
    node.release(claim);
    assert_eq!(ino(d, 0), first, "not replaced");
    assert!(node.claim().is_none(), "the stale slot is not handed out");
    assert!(node.claim().is_none(), "nor on a second try");
    std::fs::remove_dir_all(&blocker).unwrap();
    let claim = node.claim().expect("replaced at the next claim");
    assert_eq!(claim.slot, 0);
    assert_ne!(ino(d, 0), first);
    assert!(!lockable(d, 0));
}
