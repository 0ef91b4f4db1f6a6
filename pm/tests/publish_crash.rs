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
use linefs_pm::public::Permissions;
use linefs_pm::public::{execute_moves, Collector, MoveStats, PublicArea};
use linefs_pm::publish::{publish_batch, publish_slot, read_batch, Bounds};
use linefs_pm::record::{Caller, Record};
use linefs_pm::recovery::{recover, recover_judged, RecoveryPolicy};
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
            // As nicfs recovers: the batch passed every check, and its end was recorded as
            // admitted before it was applied. Below it nothing is judged again (a judge that
            // refuses everything refuses nothing), so a half-applied batch — numbers the
            // area already shows in use — is replayed fully.
            let judged = Arc::new(PmRegion::traced_from_image(img.image.clone()));
            let crashed = NodePm::packed(judged).unwrap();
            let rec = recover_judged(&crashed, &mut Judge { admitted: w.tail, root: false })
                .unwrap_or_else(|e| panic!("{point:?} {}: judged recovery failed: {e}", img.description));
            let judged_slot = rec.slots[0].clone();
            let got = snapshot(rec.area.reader()).sorted();
            assert!(got == want, "{point:?} {}: judged recovery differs: {}", img.description, diff(&got, &want));
            let region = Arc::new(PmRegion::traced_from_image(img.image));
            let crashed = NodePm::packed(region).unwrap();
            let rec =
                recover(&crashed).unwrap_or_else(|e| panic!("{point:?} {}: recovery failed: {e}", img.description));
            assert_eq!(rec.slots[0].published, w.tail);
            assert_eq!(
                judged_slot, rec.slots[0],
                "{point:?} {}: judged and lease-only recovery differ",
                img.description
            );
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

/// A recovery policy judging slot 0 from `admitted`, for root (who passes every permission
/// rule, not the structure) or for nobody (every entry judged is refused).
struct Judge {
    admitted: u64,
    root: bool,
}

impl RecoveryPolicy for Judge {
    fn admit(&mut self, _slot: u32, _lsn: u64, _records: &[Record]) -> Result<(), String> {
        Ok(())
    }

    fn judge(&mut self, slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)> {
        (slot == 0).then(|| (self.admitted, Box::new(Judged(self.root)) as Box<dyn Permissions>))
    }
}

struct Judged(bool);

impl Permissions for Judged {
    fn caller(&self, _stated: Option<&Caller>) -> Result<Caller, String> {
        if self.0 {
            Ok(Caller::default())
        } else {
            Err("nobody may do anything".into())
        }
    }
    fn may_write(&self, _ino: u64) -> bool {
        self.0
    }
    fn granted(&mut self, _ino: u64) {}
    fn freed(&mut self, _ino: u64) {}
}

/// Entries at or past the admitted LSN were never applied: judged strictly (no number
/// "unsettled"), in order, each against the state the ones before leave, they pass for a
/// caller who may do them all — a number freed and made again in the suffix included —
/// and are replayed to the state publication leaves; judged for a caller who may do
/// nothing, the first is refused and the whole suffix dropped: the area is left as it was,
/// the checkpoint moves past the suffix, and recovery does not fail.
#[test]
fn entries_past_the_admitted_lsn_are_judged_and_a_refusal_drops_the_suffix() {
    use linefs_pm::record::{dtype, EntryBuilder, InodeImage};
    let (dir, file) = (2, 3);
    let img = |ino, parent, mode, nlink| InodeImage { ino, parent, mode, nlink, ..Default::default() };
    let mut e2 = EntryBuilder::new();
    e2.dirent(dir, b"f", 0, 0);
    e2.free_inode(file);
    let mut e3 = EntryBuilder::new();
    e3.inode(&img(file, dir, libc::S_IFREG | 0o600, 1), true);
    e3.dirent(dir, b"g", file, dtype::REG);
    e3.write(file, 0, b"second");
    let log = |root_nlink: u32| {
        let (node, geo) = traced_node();
        let mut w = Writer::new(&node, &geo, 0);
        let (area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
        let mut top = area.read_inode(1).unwrap().img;
        top.nlink += root_nlink;
        let mut e1 = EntryBuilder::new();
        e1.inode(&img(dir, 1, libc::S_IFDIR | 0o755, 2), true);
        e1.dirent(1, b"d", dir, dtype::DIR);
        e1.inode(&top, false);
        e1.inode(&img(file, dir, libc::S_IFREG | 0o644, 1), true);
        e1.dirent(dir, b"f", file, dtype::REG);
        e1.write(file, 0, b"first");
        let empty = snapshot(area.reader()).sorted();
        drop(area);
        for e in [&e1, &e2, &e3] {
            w.append(e);
        }
        (node, w, empty)
    };
    let (node, w, empty) = log(1);
    let (mut area, _) = PublicArea::load(node.public.clone(), node.geometry).unwrap();
    publish_slot(&mut area, &w.log, Bounds::until(w.tail)).unwrap();
    let want = snapshot(area.reader()).sorted();
    drop(area);
    assert!(want != empty);

    let (node, w, _) = log(1);
    let rec = recover_judged(&node, &mut Judge { admitted: 0, root: true }).unwrap();
    assert_eq!((rec.slots[0].published, rec.slots[0].replayed), (w.tail, 3), "{:?}", rec.slots[0].stop);
    assert!(snapshot(rec.area.reader()).sorted() == want);

    let (node, w, _) = log(1);
    let rec = recover_judged(&node, &mut Judge { admitted: 0, root: false }).unwrap();
    assert_eq!((rec.slots[0].published, rec.slots[0].replayed), (w.tail, 0));
    assert!(snapshot(rec.area.reader()).sorted() == empty, "nothing of a refused suffix is applied");

    // Judged from the third entry: the first two are replayed as they stand (f made and
    // freed), the third dropped.
    let (node, w, _) = log(1);
    let third = {
        let mut lsns = Vec::new();
        w.log.scan_with(0, u64::MAX, u64::MAX, |loc, _| lsns.push(loc.lsn)).unwrap();
        lsns[2]
    };
    let rec = recover_judged(&node, &mut Judge { admitted: third, root: false }).unwrap();
    assert_eq!((rec.slots[0].published, rec.slots[0].replayed), (w.tail, 2));
    let loaded = rec.area.reader().load().unwrap();
    assert!(loaded.dirs[&dir].is_empty() && !loaded.inodes.contains_key(&file));

    // A derived value wrong (the root's link count): refused even for root, where the lease
    // rule alone would have replayed it.
    let (node, _, _) = log(5);
    let rec = recover_judged(&node, &mut Judge { admitted: 0, root: true }).unwrap();
    assert_eq!(rec.slots[0].replayed, 0, "{:?}", rec.slots[0].stop);
    let (node, _, _) = log(5);
    assert_eq!(recover_judged(&node, &mut Judge { admitted: u64::MAX, root: false }).unwrap().slots[0].replayed, 3);
}
