//! Crash safety of a replica's copy of another node's client log ([`linefs_pm::replica`]):
//! a primary's log of random valid entries is shipped to a replica in chunks of random size
//! (each written into the replica's copy, persisted and fenced, then "acknowledged"), and the
//! replica publishes from its copy into its own public area in batches, as nicfs's
//! replication does. The replica's node and its copy live in one traced region, so every
//! fence of the copy writes and of the publications is a crash point, and every image
//! (pending lines present, absent, torn) is recovered with pm's recovery. After recovery:
//!
//! * everything acknowledged before the crash is in the copy (its durable end is at or past
//!   the last acknowledged chunk), and what the copy holds is the primary's bytes;
//! * the replica's public area equals the primary's public state after a prefix of the
//!   primary's entries — exactly the prefix the copy holds, all of it re-published — and
//!   passes fsck.
//!
//! The logs start near the end of the ring, so that chunks and batches cross it. Also here:
//! a node directory with a `replicas/` copy opens, recovers and passes fsck; a recovery
//! policy that refuses a copy's entry drops its suffix.

mod common;

use common::*;
use linefs_pm::batch::Batch;
use linefs_pm::fsck::{self, Kind as FsckKind, Options};
use linefs_pm::layout::{Geometry, BLOCK_SIZE};
use linefs_pm::mkfs::{format_dir, format_node};
use linefs_pm::node::NodePm;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::{execute_moves, Collector, Permissions, PublicArea, PublicReader};
use linefs_pm::publish::{publish_batch, publish_slot, Bounds};
use linefs_pm::record::{EntryBuilder, Record};
use linefs_pm::recovery::{recover, recover_judged, RecoveryPolicy};
use linefs_pm::replica::{replica_path, ReplicaLog, REPLICAS_DIR};
use linefs_pm::trace::CrashOpts;
use linefs_pm::PmRegion;
use proptest::prelude::*;
use std::sync::Arc;

/// The origin node and slot of the copied log.
const ORIGIN: u32 = 1;
const SLOT: u32 = 0;

/// The primary's log: `entries` appended from `start` (its slot formatted to begin there),
/// with each entry's end.
fn primary_log(geo: &Geometry, start: u64, entries: &[EntryBuilder]) -> (LogSlot, Vec<u64>) {
    let log = LogSlot::new(Arc::new(PmRegion::traced(geo.log_size())), geo, SLOT);
    log.format_at(start, start).unwrap();
    let mut tail = start;
    let ends = entries
        .iter()
        .map(|b| {
            tail = log.append(tail, start, b.payload()).unwrap().end;
            tail
        })
        .collect();
    (log, ends)
}

/// The primary's public state after a prefix of its entries, and what fsck finds in it
/// (the workloads' model keeps no parent link counts, so fsck is not clean on them: a
/// replica's area must show exactly the primary's problems).
struct State {
    snapshot: Snapshot,
    problems: Vec<fsck::Problem>,
}

fn problems(reader: &PublicReader) -> Vec<fsck::Problem> {
    fsck::check(reader, &Options::default()).problems
}

/// The primary's states after each prefix of `entries` (index k: the first k).
fn prefix_states(entries: &[EntryBuilder]) -> Vec<State> {
    let (node, geo) = traced_node();
    let mut w = Writer::new(&node, &geo, 0);
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();
    let state =
        |area: &PublicArea| State { snapshot: snapshot(area.reader()).sorted(), problems: problems(area.reader()) };
    let mut out = vec![state(&area)];
    for b in entries {
        w.append(b);
        publish_slot(&mut area, &w.log, Bounds::until(w.tail)).unwrap();
        out.push(state(&area));
    }
    out
}

/// A replica node (formatted, free data blocks holding garbage) and its copy of the
/// primary's log, in one traced region: the node packed first, then the copy.
fn replica_region(geo: &Geometry) -> Arc<PmRegion> {
    Arc::new(PmRegion::traced(geo.node_size() + geo.log_size()))
}

/// The node and the copy in `region`; a `fresh` region's copy is formatted, else its header
/// must be valid.
fn replica_of(region: &Arc<PmRegion>, geo: &Geometry, fresh: bool) -> (NodePm, ReplicaLog) {
    let node_win = Arc::new(PmRegion::window(region.clone(), 0, geo.node_size()).unwrap());
    let copy_win = Arc::new(PmRegion::window(region.clone(), geo.node_size(), geo.log_size()).unwrap());
    let node = NodePm::packed_with(node_win, geo).unwrap();
    let copy = if fresh {
        ReplicaLog::format(copy_win, geo, ORIGIN, SLOT).unwrap()
    } else {
        ReplicaLog::from_region(copy_win, geo, ORIGIN, SLOT).unwrap()
    };
    (node, copy)
}

/// How the replica ships and publishes: per step, the chunk's byte budget and whether a
/// publication follows it (with its own budget).
#[derive(Debug, Clone)]
struct Plan {
    steps: Vec<(u64, Option<u64>)>,
    coalesce: bool,
}

fn plans() -> impl Strategy<Value = Plan> {
    (proptest::collection::vec((1u64..40_000, proptest::option::of(1u64..60_000)), 1..12), any::<bool>())
        .prop_map(|(steps, coalesce)| Plan { steps, coalesce })
}

/// Publishes the copy's entries from its checkpoint up to `durable` (at most `budget` bytes
/// of them) as one batch, file data moved at the end of the batch (as nicfs's pipeline does).
fn publish_from_copy(
    area: &mut PublicArea,
    node: &NodePm,
    copy: &ReplicaLog,
    durable: u64,
    budget: u64,
    coalesce: bool,
) {
    let from = copy.log().published_lsn().unwrap();
    let (fetched, _) = copy.log().fetch(from, durable, budget).unwrap();
    let (batch, _) = Batch::from_copy(&fetched);
    assert!(batch.malformed.is_none());
    let plan = coalesce.then(|| linefs_pm::coalesce::plan(batch.entries.iter().map(|(_, r)| &r[..])));
    let logr = copy.region().clone();
    let public = node.public.clone();
    let mut mover = Collector::new(logr.len(), |m: &[_]| execute_moves(m, &logr, &public));
    let p = publish_batch(area, copy.log(), &batch, plan.as_ref(), &mut mover).unwrap();
    assert_eq!(p.upto, batch.end());
}

/// Runs the replica's side under the tracer and checks every crash image. Returns the number
/// of images checked.
fn crash_check(raw: &[RawOp], plan: &Plan) -> usize {
    let geo = Geometry::compute(&PARAMS).unwrap();
    let all = entries(raw);
    let ring = geo.log_size() - BLOCK_SIZE;
    // Near the end of the ring: the first chunks and batches cross it.
    let start = ring - 8 * 1024;
    let (primary, ends) = primary_log(&geo, start, &all);
    let tail = *ends.last().unwrap_or(&start);
    let states = prefix_states(&all);

    let region = replica_region(&geo);
    let (node, copy) = replica_of(&region, &geo, true);
    format_node(&node).unwrap();
    let data = geo.data_start * BLOCK_SIZE;
    let len = node.public.len() - data;
    node.public.write(data, &vec![0xA5; len as usize]).unwrap();
    node.public.persist(data, len).unwrap();
    copy.rebase(start).unwrap();
    node.public.fence();
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).unwrap();

    let tracer = region.tracer().unwrap();
    tracer.start_recording();
    // (fences completed when the chunk was acknowledged, the copy's end then)
    let mut acks = vec![(0u64, start)];
    let mut shipped = start;
    let mut steps = plan.steps.iter().cycle();
    while shipped < tail {
        let &(chunk, publish) = steps.next().unwrap();
        let (c, _) = primary.fetch(shipped, tail, chunk).unwrap();
        copy.write(c.from, &c.bytes).unwrap();
        shipped = c.end();
        acks.push((tracer.fence_count(), shipped));
        if let Some(budget) = publish {
            publish_from_copy(&mut area, &node, &copy, shipped, budget, plan.coalesce);
        }
    }
    while copy.log().published_lsn().unwrap() < tail {
        publish_from_copy(&mut area, &node, &copy, tail, u64::MAX, plan.coalesce);
    }
    assert!(snapshot(area.reader()).sorted() == states[all.len()].snapshot, "published in full without a crash");

    let opts = CrashOpts { max_exhaustive: 4, samples: 4, seed: 11, torn_words: true, line_cap: 3 };
    let mut images = 0;
    for point in tracer.crash_points() {
        let acked = acks.iter().filter(|(f, _)| *f <= point.fence_count).map(|(_, e)| *e).max().unwrap();
        for img in point.images(&opts) {
            let what = format!("{point:?} {}", img.description);
            let crashed = Arc::new(PmRegion::traced_from_image(img.image));
            let (mut node, copy) = replica_of(&crashed, &geo, false);
            node.replicas.push(copy);
            let rec = recover(&node).unwrap_or_else(|e| panic!("{what}: recovery failed: {e}"));
            let r = &rec.replicas[0];
            assert_eq!((r.origin, r.slot), (ORIGIN, SLOT));
            assert!(r.end >= acked, "{what}: acknowledged up to {acked}, the copy holds up to {}", r.end);
            // The copy's bytes are the primary's.
            let copy = &node.replicas[0];
            assert_eq!(copy.durable_end().unwrap(), r.end, "{what}");
            let (held, _) = copy.log().fetch(start, r.end, u64::MAX).unwrap();
            let (want, _) = primary.fetch(start, r.end, u64::MAX).unwrap();
            assert!(held == want, "{what}: the copy differs from the primary's log");
            // The public area: the primary's state after exactly the entries the copy holds.
            let k = ends.iter().take_while(|&&e| e <= r.end).count();
            // Everything the copy holds is re-published (a pad it ends with waits for the
            // entry after it).
            let last = if k == 0 { start } else { ends[k - 1] };
            assert_eq!(r.published, last, "{what}: the copy's entries are all re-published");
            let got = snapshot(rec.area.reader()).sorted();
            assert!(got == states[k].snapshot, "{what}: the public area is not the primary's after {k} entries");
            let found = problems(rec.area.reader());
            assert_eq!(found, states[k].problems, "{what}: fsck finds other problems than in the primary's");
            images += 1;
        }
    }
    images
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(10), ..ProptestConfig::default() })]

    #[test]
    fn a_crash_anywhere_in_a_replica_s_copy_writes_and_publications_recovers_a_prefix(raw in raw_ops(20), plan in plans()) {
        crash_check(&raw, &plan);
    }
}

/// A fixed workload, so that the crash test always has images to check (also when proptest
/// draws few entries).
#[test]
fn a_fixed_workload_crashes_at_every_fence() {
    let raw: Vec<RawOp> = (0..16u64)
        .map(|i| ((i * 5 % 16) as u8, i.wrapping_mul(0x9E37_79B9_7F4A_7C15), i * 7919, i * 104_729 + 3, i % 3 == 1))
        .collect();
    let plan = Plan { steps: vec![(3000, None), (20_000, Some(10_000)), (1, Some(1))], coalesce: false };
    assert!(crash_check(&raw, &plan) > 50);
    let plan = Plan { steps: vec![(50_000, Some(u64::MAX))], coalesce: true };
    assert!(crash_check(&raw, &plan) > 10);
}

/// A node directory holding a copy in `replicas/`: opened with it, recovered from it (the
/// copy's entries re-published), checked clean by fsck; a stray file there is a note, a copy
/// of the wrong size a problem (and the node does not open).
#[test]
fn a_node_directory_with_a_replica_copy_opens_recovers_and_passes_fsck() {
    let d = tempfile::tempdir().unwrap();
    let geo = format_dir(d.path(), &PARAMS).unwrap().geometry;
    let raw: Vec<RawOp> = (0..10u64).map(|i| ((i % 8) as u8, i * 31, i * 17, i * 1000 + 5, false)).collect();
    let all = entries(&raw);
    let states = prefix_states(&all);
    let (primary, ends) = primary_log(&geo, 0, &all);
    {
        let copy = ReplicaLog::open_or_create(d.path(), &geo, ORIGIN, SLOT).unwrap();
        let (c, _) = primary.fetch(0, *ends.last().unwrap(), u64::MAX).unwrap();
        copy.write(0, &c.bytes).unwrap();
    }
    let node = NodePm::open(d.path()).unwrap();
    assert_eq!(node.replicas.len(), 1);
    let rec = recover(&node).unwrap();
    assert_eq!(rec.replicas[0].replayed, all.len() as u64);
    assert_eq!(rec.replicas[0].published, *ends.last().unwrap());
    assert!(snapshot(rec.area.reader()).sorted() == states[all.len()].snapshot);
    drop((rec, node));
    // Again: nothing more to replay.
    let rec = recover(&NodePm::open(d.path()).unwrap()).unwrap();
    assert_eq!(rec.replicas[0].replayed, 0);
    drop(rec);
    std::fs::write(d.path().join(REPLICAS_DIR).join("n9-log-00.pm.new"), b"torn").unwrap();
    let report = fsck::check_dir(d.path(), &Options::default()).unwrap();
    assert_eq!(report.problems, states[all.len()].problems, "only what the primary's area shows");
    assert!(report.notes.iter().any(|n| n.kind == FsckKind::Replica), "{:?}", report.notes);
    // A copy of the wrong size.
    std::fs::OpenOptions::new()
        .write(true)
        .open(replica_path(d.path(), ORIGIN, SLOT))
        .unwrap()
        .set_len(geo.log_size() / 2)
        .unwrap();
    let report = fsck::check_dir(d.path(), &Options::default()).unwrap();
    assert_eq!(report.problems.iter().filter(|p| p.kind == FsckKind::Replica).count(), 1, "{:?}", report.problems);
    assert!(NodePm::open(d.path()).is_err());
}

/// Refuses every entry of every copy from `from` on.
struct RefuseReplicas {
    from: u64,
}

impl RecoveryPolicy for RefuseReplicas {
    fn admit(&mut self, _slot: u32, _lsn: u64, _records: &[Record]) -> Result<(), String> {
        Ok(())
    }

    fn judge(&mut self, _slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)> {
        None
    }

    fn admit_replica(&mut self, origin: u32, slot: u32, lsn: u64, _records: &[Record]) -> Result<(), String> {
        assert_eq!((origin, slot), (ORIGIN, SLOT));
        if lsn >= self.from {
            Err("not covered".into())
        } else {
            Ok(())
        }
    }
}

/// A copy's entry the policy refuses: it and the rest of the copy's suffix are dropped (the
/// checkpoint moves past them), what came before is replayed, recovery does not fail.
#[test]
fn a_refused_replica_entry_drops_the_copy_s_suffix() {
    let geo = Geometry::compute(&PARAMS).unwrap();
    let raw: Vec<RawOp> = (0..12u64).map(|i| ((i % 3) as u8, i * 13, i * 7, i * 100 + 1, false)).collect();
    let all = entries(&raw);
    let states = prefix_states(&all);
    let (primary, ends) = primary_log(&geo, 0, &all);
    let tail = *ends.last().unwrap();
    let region = replica_region(&geo);
    let (mut node, copy) = replica_of(&region, &geo, true);
    format_node(&node).unwrap();
    let (c, _) = primary.fetch(0, tail, u64::MAX).unwrap();
    copy.write(0, &c.bytes).unwrap();
    node.replicas.push(copy);
    let cut = ends[2];
    let rec = recover_judged(&node, &mut RefuseReplicas { from: cut }).unwrap();
    let r = &rec.replicas[0];
    assert_eq!((r.replayed, r.published), (3, tail));
    assert!(snapshot(rec.area.reader()).sorted() == states[3].snapshot);
    assert_eq!(node.replicas[0].log().published_lsn().unwrap(), tail);
}

/// Judges the copy by meaning from `from`, for a caller who may do everything (`all`) or
/// nothing.
struct JudgeReplicas {
    from: u64,
    all: bool,
}

impl RecoveryPolicy for JudgeReplicas {
    fn admit(&mut self, _slot: u32, _lsn: u64, _records: &[Record]) -> Result<(), String> {
        Ok(())
    }

    fn judge(&mut self, _slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)> {
        None
    }

    fn judge_replica(&mut self, origin: u32, slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)> {
        assert_eq!((origin, slot), (ORIGIN, SLOT));
        Some((self.from, Box::new(Everything(self.all))))
    }
}

struct Everything(bool);

impl Permissions for Everything {
    fn caller(&self, _stated: Option<&linefs_pm::record::Caller>) -> Result<linefs_pm::record::Caller, String> {
        if self.0 {
            Ok(linefs_pm::record::Caller::default())
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

/// A copy judged by meaning at recovery: for a caller who may do everything its entries
/// are replayed to the primary's state; for one who may do nothing, from the judged LSN on
/// they are dropped (those before it replayed as they stand), and recovery does not fail.
#[test]
fn a_copy_judged_by_meaning_at_recovery() {
    let geo = Geometry::compute(&PARAMS).unwrap();
    // Files created in the root and written (no directories: the workloads' model keeps no
    // parent link counts, which judging by meaning checks).
    let raw: Vec<RawOp> =
        (0..12u64).map(|i| ([0u8, 4, 5][i as usize % 3], i * 13, i * 7, i * 100 + 1, false)).collect();
    let all = entries(&raw);
    let states = prefix_states(&all);
    let (primary, ends) = primary_log(&geo, 0, &all);
    let tail = *ends.last().unwrap();
    let fresh = || {
        let region = replica_region(&geo);
        let (mut node, copy) = replica_of(&region, &geo, true);
        format_node(&node).unwrap();
        let (c, _) = primary.fetch(0, tail, u64::MAX).unwrap();
        copy.write(0, &c.bytes).unwrap();
        node.replicas.push(copy);
        node
    };
    let node = fresh();
    let rec = recover_judged(&node, &mut JudgeReplicas { from: 0, all: true }).unwrap();
    assert_eq!((rec.replicas[0].replayed, rec.replicas[0].published), (all.len() as u64, tail));
    assert!(snapshot(rec.area.reader()).sorted() == states[all.len()].snapshot);
    let node = fresh();
    let rec = recover_judged(&node, &mut JudgeReplicas { from: ends[3], all: false }).unwrap();
    assert_eq!((rec.replicas[0].replayed, rec.replicas[0].published), (4, tail));
    assert!(snapshot(rec.area.reader()).sorted() == states[4].snapshot);
}
