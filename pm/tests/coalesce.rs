//! Coalescing leaves the public area publishing entry by entry leaves: random valid
//! workloads, published one entry at a time on one node, and on another with a prefix
//! published one by one (so that the batch also changes files that exist before it) and
//! the rest as one coalesced batch whose data moves are executed at the end, as nicfs does.

mod common;

use common::*;
use linefs_pm::coalesce::plan;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::{execute_moves, Collector, PublicArea};
use linefs_pm::publish::{publish_batch, publish_slot, read_batch, Bounds};
use proptest::prelude::*;

/// Publishes the committed entries of `log` one at a time.
fn one_by_one(area: &mut PublicArea, log: &LogSlot, until: u64) {
    loop {
        let p = publish_slot(area, log, Bounds { until, max_bytes: 1 }).unwrap();
        if p.entries == 0 {
            break;
        }
        assert_eq!(p.entries, 1);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn a_coalesced_batch_leaves_the_state_of_publishing_entry_by_entry(raw in raw_ops(60), split in 0usize..100) {
        let all = entries(&raw);
        let split = split % (all.len() + 1);

        let (reference, geo) = traced_node();
        let mut w = Writer::new(&reference, &geo, 0);
        for b in &all {
            w.append(b);
        }
        let (mut want, _) = PublicArea::load(reference.public.clone(), geo).unwrap();
        one_by_one(&mut want, &w.log, w.tail);

        let (node, geo) = traced_node();
        let mut w = Writer::new(&node, &geo, 0);
        let mut area = PublicArea::load(node.public.clone(), geo).unwrap().0;
        for b in &all[..split] {
            w.append(b);
        }
        one_by_one(&mut area, &w.log, w.tail);
        for b in &all[split..] {
            w.append(b);
        }
        let batch = read_batch(&w.log, Bounds::until(w.tail)).unwrap();
        let p = plan(batch.entries.iter().map(|(_, r)| &r[..]));
        let log = w.log.region().clone();
        let mut mover = Collector::new(log.len(), |m: &[_]| execute_moves(m, &log, &node.public));
        let published = publish_batch(&mut area, &w.log, &batch, Some(&p), &mut mover).unwrap();
        prop_assert_eq!(published.upto, w.tail);
        prop_assert_eq!(published.saved, p.saved);

        prop_assert_eq!(snapshot(area.reader()), snapshot(want.reader()));
        // Coalescing may only need fewer blocks (an indirect block for data freed later).
        prop_assert!(area.free_blocks() >= want.free_blocks());
        // What the area remembers is what a reload finds.
        let free = area.free_blocks();
        drop(area);
        prop_assert_eq!(PublicArea::load(node.public.clone(), geo).unwrap().0.free_blocks(), free);
    }
}

#[test]
fn an_overwrite_heavy_batch_copies_only_the_last_bytes() {
    use linefs_pm::record::{dtype, EntryBuilder, InodeImage, ROOT_INO};
    let (node, geo) = traced_node();
    let mut w = Writer::new(&node, &geo, 0);
    let mut b = EntryBuilder::new();
    let img = InodeImage { ino: 2, mode: libc::S_IFREG | 0o644, nlink: 1, size: 16384, ..Default::default() };
    b.inode(&img, true);
    b.dirent(ROOT_INO, b"hot", 2, dtype::REG);
    w.append(&b);
    for i in 0..16u8 {
        let mut b = EntryBuilder::new();
        b.write(2, 0, &[i; 16384]);
        b.inode(&img, false);
        w.append(&b);
    }
    let batch = read_batch(&w.log, Bounds::until(w.tail)).unwrap();
    let p = plan(batch.entries.iter().map(|(_, r)| &r[..]));
    assert_eq!(p.saved.data_bytes, 15 * 16384);
    assert_eq!(p.saved.records, 30, "the earlier writes (a later one maps their blocks) and attributes");
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
    let log = w.log.region().clone();
    let mut mover = Collector::new(log.len(), |m: &[_]| execute_moves(m, &log, &node.public));
    publish_batch(&mut area, &w.log, &batch, Some(&p), &mut mover).unwrap();
    assert_eq!((mover.stats().copy_bytes, mover.stats().zero_bytes), (16384, 0));
    let mut got = vec![0u8; 16384];
    area.reader().read_file(2, 0, &mut got).unwrap();
    assert_eq!(got, vec![15u8; 16384]);
}
