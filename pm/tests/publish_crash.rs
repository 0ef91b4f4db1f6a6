//! Crash safety of publication, with the direct data mover (libfs's publisher, recovery)
//! and with a *deferred* one (file data recorded as moves and executed at the end of the
//! batch, as nicfs has kworker do it): every state a power loss can leave while a batch of
//! committed entries is published recovers to the state after the whole batch (recovery
//! replays the committed suffix after the checkpoint), also when the batch was coalesced.
//! And without a crash the deferred publisher leaves the direct one's public area. Random valid workloads; the first
//! half is published before the recorded batch, so that the batch also changes files that
//! exist before it, in a node whose free blocks hold garbage (a block linked before its
//! contents are durable shows it).

mod common;

use common::*;
use linefs_pm::node::NodePm;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::{execute_moves, Collector, MoveStats, PublicArea};
use linefs_pm::publish::{publish_batch, publish_slot, read_batch, Bounds};
use linefs_pm::recovery::recover;
use linefs_pm::trace::CrashOpts;
use linefs_pm::PmRegion;
use proptest::prelude::*;
use std::sync::Arc;

/// How the batch under test is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// publish_slot, data moved at once (libfs, recovery).
    Direct,
    /// publish_batch, data moves executed at the end of the batch (nicfs).
    Deferred,
    /// The same, coalesced.
    Coalesced,
}

/// Publishes every committed entry of `log` in one batch ([`publish_batch`]), file data
/// through a collector whose moves are executed in process at the end of the batch.
fn publish_deferred(area: &mut PublicArea, log: &LogSlot, public: &Arc<PmRegion>, coalesce: bool) -> MoveStats {
    let batch = read_batch(log, Bounds::until(u64::MAX)).unwrap();
    let plan = coalesce.then(|| linefs_pm::coalesce::plan(batch.entries.iter().map(|(_, r)| &r[..])));
    let logr = log.region().clone();
    let mut mover = Collector::new(logr.len(), |m: &[_]| execute_moves(m, &logr, public));
    let p = publish_batch(area, log, &batch, plan.as_ref(), &mut mover).unwrap();
    assert_eq!((p.upto, p.entries), (batch.end(), batch.entries.len() as u64));
    mover.stats()
}

/// A traced node whose slot 0 holds `raw`'s entries, all committed, none published.
fn node_with(raw: &[RawOp]) -> (NodePm, Writer) {
    let (node, geo) = traced_node();
    let mut w = Writer::new(&node, &geo, 0);
    for b in entries(raw) {
        w.append(&b);
    }
    (node, w)
}

/// The same log published by the direct publisher.
fn direct_snapshot(raw: &[RawOp]) -> Snapshot {
    let (node, w) = node_with(raw);
    let (mut area, _) = PublicArea::load(node.public.clone(), node.geometry).unwrap();
    publish_slot(&mut area, &w.log, Bounds::until(w.tail)).unwrap();
    snapshot(area.reader())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(48), ..ProptestConfig::default() })]

    #[test]
    fn deferred_publication_leaves_the_direct_publisher_s_public_area(raw in raw_ops(40)) {
        let (node, w) = node_with(&raw);
        let (mut area, _) = PublicArea::load(node.public.clone(), node.geometry).unwrap();
        publish_deferred(&mut area, &w.log, &node.public, false);
        prop_assert_eq!(snapshot(area.reader()), direct_snapshot(&raw));
        // What the area remembers (free blocks) is what a reload finds.
        let free = area.free_blocks();
        drop(area);
        prop_assert_eq!(PublicArea::load(node.public.clone(), node.geometry).unwrap().0.free_blocks(), free);
    }
}

/// Every crash image of every crash point of a publication recovers to the published state.
/// The first half of the entries is published beforehand (so that the recorded batch also
/// changes files that exist before it), the rest is the batch under test.
fn crash_check(raw: &[RawOp], how: How) -> usize {
    let (node, geo) = traced_node();
    let mut w = Writer::new(&node, &geo, 0);
    let all = entries(raw);
    let (first, second) = all.split_at(all.len() / 2);
    for b in first {
        w.append(b);
    }
    let (mut area, _) = PublicArea::load(node.public.clone(), node.geometry).unwrap();
    publish_slot(&mut area, &w.log, Bounds::until(w.tail)).unwrap();
    for b in second {
        w.append(b);
    }
    let tracer = node.public.tracer().unwrap();
    tracer.start_recording();
    match how {
        How::Direct => drop(publish_slot(&mut area, &w.log, Bounds::until(w.tail)).unwrap()),
        How::Deferred => drop(publish_deferred(&mut area, &w.log, &node.public, false)),
        How::Coalesced => drop(publish_deferred(&mut area, &w.log, &node.public, true)),
    }
    let want = snapshot(area.reader()).sorted();
    let opts = CrashOpts { max_exhaustive: 4, samples: 6, seed: 7, torn_words: true, line_cap: 3 };
    let mut images = 0;
    for point in tracer.crash_points() {
        for img in point.images(&opts) {
            let region = Arc::new(PmRegion::traced_from_image(img.image));
            let crashed = NodePm::packed(region).unwrap();
            let rec =
                recover(&crashed).unwrap_or_else(|e| panic!("{point:?} {}: recovery failed: {e}", img.description));
            assert_eq!(rec.slots[0].published, w.tail);
            let got = snapshot(rec.area.reader()).sorted();
            assert!(got == want, "{point:?} {}: recovered state differs: {}", img.description, diff(&got, &want));
            images += 1;
        }
    }
    images
}

/// What differs between two snapshots, briefly.
fn diff(got: &Snapshot, want: &Snapshot) -> String {
    let mut out = Vec::new();
    for ino in got.files.keys().chain(want.files.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (got.files.get(ino), want.files.get(ino)) {
            (Some(g), Some(w)) if g != w => {
                let first = g.data.iter().zip(&w.data).position(|(a, b)| a != b);
                out.push(format!(
                    "inode {ino}: img {} xattrs {} blocks {}/{} mapped {:?}/{:?} data len {}/{} first diff {first:?}",
                    g.img == w.img,
                    g.xattrs == w.xattrs,
                    g.blocks,
                    w.blocks,
                    g.mapped,
                    w.mapped,
                    g.data.len(),
                    w.data.len()
                ));
            }
            (Some(_), None) => out.push(format!("inode {ino} only recovered")),
            (None, Some(_)) => out.push(format!("inode {ino} missing")),
            _ => {}
        }
    }
    if got.dirs != want.dirs {
        out.push(format!("dirs {:?} / {:?}", got.dirs, want.dirs));
    }
    out.join("; ")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(12), ..ProptestConfig::default() })]

    #[test]
    fn a_crash_anywhere_in_a_direct_batch_recovers_to_the_published_state(raw in raw_ops(24)) {
        crash_check(&raw, How::Direct);
    }

    #[test]
    fn a_crash_anywhere_in_a_deferred_batch_recovers_to_the_published_state(raw in raw_ops(24)) {
        crash_check(&raw, How::Deferred);
    }

    #[test]
    fn a_crash_anywhere_in_a_coalesced_batch_recovers_to_the_published_state(raw in raw_ops(24)) {
        crash_check(&raw, How::Coalesced);
    }
}

/// A workload whose batch sets the xattrs of a directory created before it, with no Inode
/// record of its own: a crash that tears the inode's xattr pointer already holding the new
/// chain left the inode torn after replay (the replay found nothing to change), and
/// recovery refused it as corrupt.
#[test]
fn a_torn_inode_that_a_replayed_record_leaves_unchanged_is_rewritten() {
    let raw: Vec<RawOp> = vec![
        (2, 10516759158927773254, 11793845047482328838, 5721869594548405159, true),
        (2, 8705690222521050037, 1464525436300282101, 13802856812805648153, false),
        (1, 14533076791657508509, 3752863628432661340, 12534785106010608252, false),
        (10, 4650714029424123198, 1865930667315400805, 14506435389136523160, true),
        (1, 8431749948982026626, 2413771489422490495, 8544833330626858630, false),
    ];
    for how in [How::Direct, How::Deferred, How::Coalesced] {
        assert!(crash_check(&raw, how) > 0);
    }
}
