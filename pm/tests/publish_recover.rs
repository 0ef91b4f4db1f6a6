//! pm's publisher and recovery, driven through the public API only (as nicfs will): a slot
//! is published from its checkpoint in bounded batches; a rejected entry stops publication
//! there with everything before it checkpointed; recovery replays every slot of a node.

use linefs_pm::layout::{FormatParams, Geometry, Superblock};
use linefs_pm::mkfs::format_node;
use linefs_pm::node::NodePm;
use linefs_pm::oplog::{EntryLoc, LogSlot};
use linefs_pm::public::{execute_moves, Collector, Move};
use linefs_pm::public::{PublicArea, PublicReader};
use linefs_pm::publish::{publish_batch, publish_slot, read_batch, Batch, Bounds, SlotError};
use linefs_pm::record::{dtype, EntryBuilder, InodeImage, ROOT_INO};
use linefs_pm::recovery::{recover, RecoveryError};

fn node(slots: u32) -> (NodePm, Geometry) {
    let params = FormatParams { size: 16 << 20, log_size: 1 << 20, log_slots: slots, inodes: 256 };
    let geo = Geometry::compute(&params).unwrap();
    let node = NodePm::traced(&geo);
    format_node(&node).unwrap();
    assert_eq!(Superblock::read(&node.public).unwrap().geometry, geo);
    (node, geo)
}

/// A log writer as a client is: appends entries after the tail.
struct Writer {
    log: LogSlot,
    tail: u64,
}

impl Writer {
    fn new(node: &NodePm, geo: &Geometry, slot: u32) -> Writer {
        Writer { log: LogSlot::new(node.logs[slot as usize].clone(), geo, slot), tail: 0 }
    }

    fn append(&mut self, b: &EntryBuilder) -> EntryLoc {
        let loc = self.log.append(self.tail, self.log.published_lsn().unwrap(), b.payload()).unwrap();
        self.tail = loc.end;
        loc
    }

    /// A new file `name` in the root holding `data`.
    fn create(&mut self, ino: u64, name: &[u8], data: &[u8]) -> EntryLoc {
        let mut b = EntryBuilder::new();
        let img =
            InodeImage { ino, size: data.len() as u64, mode: libc::S_IFREG | 0o644, nlink: 1, ..Default::default() };
        b.inode(&img, true);
        b.dirent(ROOT_INO, name, ino, dtype::REG);
        b.write(ino, 0, data);
        self.append(&b)
    }
}

fn names(reader: &PublicReader) -> Vec<Vec<u8>> {
    let mut n: Vec<_> = reader.load().unwrap().dirs[&ROOT_INO].iter().map(|e| e.name.clone()).collect();
    n.sort();
    n
}

#[test]
fn a_slot_is_published_in_bounded_batches_from_its_checkpoint() {
    let (node, geo) = node(1);
    let mut w = Writer::new(&node, &geo, 0);
    let locs: Vec<_> = (0..6).map(|i| w.create(10 + i, format!("f{i}").as_bytes(), &[i as u8; 5000])).collect();
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
    // Only what the writer declared durable (up to the 4th entry) is published, two at a time.
    let until = locs[3].end;
    let one = locs[0].end - locs[0].lsn;
    let p = publish_slot(&mut area, &w.log, Bounds { until, max_bytes: 2 * one }).unwrap();
    assert_eq!((p.from, p.upto, p.entries), (0, locs[1].end, 2));
    assert_eq!(p.touched, vec![ROOT_INO, 10, 11]);
    assert_eq!(w.log.published_lsn().unwrap(), locs[1].end, "checkpoint is durable");
    let p = publish_slot(&mut area, &w.log, Bounds { until, max_bytes: 2 * one }).unwrap();
    assert_eq!((p.from, p.upto, p.entries), (locs[1].end, locs[3].end, 2));
    let p = publish_slot(&mut area, &w.log, Bounds::until(until)).unwrap();
    assert_eq!(p.entries, 0, "nothing past `until`");
    assert_eq!(names(area.reader()), [b"f0", b"f1", b"f2", b"f3"].map(|n| n.to_vec()));
    let mut buf = vec![0u8; 5000];
    area.reader().read_file(13, 0, &mut buf).unwrap();
    assert_eq!(buf, vec![3u8; 5000]);
    // The rest, once declared.
    let p = publish_slot(&mut area, &w.log, Bounds::until(w.tail)).unwrap();
    assert_eq!((p.upto, p.entries), (w.tail, 2));
}

#[test]
fn a_rejected_entry_and_what_follows_stay_unpublished() {
    let (node, geo) = node(1);
    let mut w = Writer::new(&node, &geo, 0);
    let good = w.create(10, b"good", b"kept");
    // A well-formed entry the public area must refuse: a name for an unallocated inode.
    let mut b = EntryBuilder::new();
    b.dirent(ROOT_INO, b"ghost", 200, dtype::REG);
    let bad = w.append(&b);
    w.create(11, b"after", b"depends on the refused entry, maybe");
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
    let free = area.free_blocks();
    match publish_slot(&mut area, &w.log, Bounds::until(w.tail)) {
        Err(SlotError::Rejected { slot: 0, lsn, why, published }) => {
            assert_eq!(lsn, bad.lsn);
            assert!(why.contains("not allocated"), "{why}");
            assert_eq!((published.upto, published.entries), (good.end, 1));
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(w.log.published_lsn().unwrap(), good.end);
    assert_eq!(names(area.reader()), vec![b"good".to_vec()]);
    assert_eq!(area.free_blocks(), free - 2, "the root directory block and the good file's data block");
    // Asked again, the same entry is refused again and nothing else changes.
    assert!(matches!(publish_slot(&mut area, &w.log, Bounds::until(w.tail)), Err(SlotError::Rejected { .. })));
    assert_eq!(w.log.published_lsn().unwrap(), good.end);
}

#[test]
fn recovery_replays_every_slot_and_frees_orphans() {
    let (node, geo) = node(3);
    let mut a = Writer::new(&node, &geo, 0);
    let mut c = Writer::new(&node, &geo, 2);
    a.create(10, b"from-slot-0", b"zero");
    c.create(20, b"from-slot-2", b"two");
    // An inode that lost its last name while open: an orphan after a crash.
    let mut b = EntryBuilder::new();
    b.inode(&InodeImage { ino: 21, mode: libc::S_IFREG | 0o600, nlink: 0, ..Default::default() }, true);
    b.write(21, 0, b"unlinked but open");
    c.append(&b);
    // Half of slot 0 was published before the "crash".
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
    publish_slot(&mut area, &a.log, Bounds::until(a.tail)).unwrap();
    a.create(11, b"late", b"only in the log");
    drop(area);
    let rec = recover(&node).unwrap();
    assert_eq!(rec.replayed(), 3);
    assert_eq!(rec.orphans_freed, 1);
    assert_eq!(rec.slots.iter().map(|s| s.published).collect::<Vec<_>>(), vec![a.tail, 0, c.tail]);
    assert_eq!(rec.slots[0].replayed, 1, "slot 0 replays only what follows its checkpoint");
    let mut got: Vec<_> = rec.loaded.dirs[&ROOT_INO].iter().map(|e| e.name.clone()).collect();
    got.sort();
    assert_eq!(got, [&b"from-slot-0"[..], b"from-slot-2", b"late"].map(|n| n.to_vec()));
    assert!(!rec.loaded.inodes.contains_key(&21), "the orphan is freed");
    // Recovery is idempotent: a second run finds nothing to do.
    let again = recover(&node).unwrap();
    assert_eq!((again.replayed(), again.orphans_freed), (0, 0));
    assert_eq!(again.area.free_blocks(), rec.area.free_blocks());
}

#[test]
fn recovery_refuses_a_forged_entry_before_changing_it() {
    let (node, geo) = node(2);
    let mut w = Writer::new(&node, &geo, 1);
    let mut b = EntryBuilder::new();
    b.free_inode(ROOT_INO);
    w.append(&b);
    match recover(&node) {
        Err(RecoveryError::InvalidEntry { slot: 1, lsn: 0, .. }) => {}
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a forged entry must stop recovery"),
    }
    let root = PublicReader::new(node.public.clone(), geo).read_inode(ROOT_INO).unwrap();
    assert_eq!(root.kind(), libc::S_IFDIR, "the root is untouched");
}

/// [`publish_batch`] with file data executed in process at the end of the batch.
fn publish_batch_here(
    area: &mut PublicArea,
    w: &Writer,
    batch: &Batch,
    public: &linefs_pm::PmRegion,
) -> Result<linefs_pm::publish::Published, SlotError> {
    let log = w.log.region().clone();
    let mut mover = Collector::new(log.len(), |m: &[Move]| execute_moves(m, &log, public));
    publish_batch(area, &w.log, batch, None, &mut mover)
}

#[test]
fn a_batch_is_validated_whole_against_the_state_its_own_entries_leave() {
    let (node, geo) = node(1);
    let mut w = Writer::new(&node, &geo, 0);
    w.create(10, b"a", b"first");
    // Depends on the entry before it in the same batch: a write to inode 10.
    let mut b = EntryBuilder::new();
    b.write(10, 5, b" and more");
    w.append(&b);
    // Frees inode 10; the entry after it writes to it: refused, though inode 10 is
    // allocated in the public area when the batch is validated.
    let mut b = EntryBuilder::new();
    b.dirent(ROOT_INO, b"a", 0, 0);
    b.free_inode(10);
    let freed = w.append(&b);
    let mut b = EntryBuilder::new();
    b.write(10, 0, b"too late");
    let late = w.append(&b);
    w.create(11, b"after", b"never published");
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
    let batch = read_batch(&w.log, Bounds::until(w.tail)).unwrap();
    assert_eq!((batch.from, batch.entries.len(), batch.end()), (0, 5, w.tail));
    match publish_batch_here(&mut area, &w, &batch, &node.public) {
        Err(SlotError::Rejected { lsn, why, published, .. }) => {
            assert_eq!(lsn, late.lsn);
            assert!(why.contains("not allocated"), "{why}");
            assert_eq!((published.from, published.upto, published.entries), (0, freed.end, 3));
            assert_eq!(published.touched, vec![ROOT_INO, 10]);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(w.log.published_lsn().unwrap(), freed.end);
    assert!(names(area.reader()).is_empty());
    // The same batch again is stale: the checkpoint moved.
    match publish_batch_here(&mut area, &w, &batch, &node.public) {
        Err(SlotError::Stale { from: 0, checkpoint, .. }) => assert_eq!(checkpoint, freed.end),
        other => panic!("expected a stale batch, got {other:?}"),
    }
}

#[test]
fn a_malformed_entry_ends_a_batch() {
    let (node, geo) = node(1);
    let mut w = Writer::new(&node, &geo, 0);
    let good = w.create(10, b"good", b"kept");
    // A record kind that does not exist, under a valid checksum: the entry does not decode.
    let mut b = EntryBuilder::new();
    b.dirent(ROOT_INO, b"x", 10, dtype::REG);
    let mut payload = b.payload().to_vec();
    payload[0] = 99;
    let bad = w.log.append(w.tail, 0, &payload).unwrap();
    w.tail = bad.end;
    w.create(11, b"after", b"never");
    let batch = read_batch(&w.log, Bounds::until(w.tail)).unwrap();
    assert_eq!(batch.entries.len(), 1);
    assert!(matches!(&batch.malformed, Some((lsn, why)) if *lsn == bad.lsn && why.contains("unknown record kind")));
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
    match publish_batch_here(&mut area, &w, &batch, &node.public) {
        Err(SlotError::Rejected { lsn, published, .. }) => {
            assert_eq!(lsn, bad.lsn);
            assert_eq!(published.upto, good.end);
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(names(area.reader()), vec![b"good".to_vec()]);
}
