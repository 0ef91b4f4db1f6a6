//! The replica pass: one workload's log chain-replicated to a replica, and the *replica*
//! crashed at every fence of its log copy and of its publication.
//!
//! The primary is the workload's file system (libfs on a plain traced region, not recorded).
//! The replica is a second node whose PM — its packed node and its copy of the primary's
//! log slot (pm's `replica`) — is one traced region. Before the steps, the primary's whole
//! log (the starting tree) is shipped and published on the replica. After each step, what
//! the primary's log gained is shipped: written into the copy, persisted and fenced — the
//! moment a replica acknowledges — then published from the copy by nicfs's steps (a fetched
//! copy decoded into a batch, coalesced, file data a deferred copy list executed from the
//! copy into the public file). Crash points: every fence of the replica, and the step's
//! "shipped" and "done" checkpoints.
//!
//! The oracle. Each image is recovered by pm's recovery with the copy (its committed suffix
//! re-published), then mounted through the real mount path and read as a tree. An image
//! taken after step k's chunk was acknowledged (its "shipped" checkpoint) must show exactly
//! Sk (nothing acknowledged lost); one taken while step k's chunk was being written, Sk-1 or
//! Sk (a prefix of the primary's history, nothing half-done). Every image must pass pm's
//! fsck and the consistency check, and its copy must hold the primary's bytes.

use crate::check::{fsck, opts, run_step, setup, Outcome, PM};
use crate::snapshot::{diff, snapshot, Snapshot};
use crate::workload::Workload;
use libfs::Fs;
use linefs_pm::batch::Batch;
use linefs_pm::layout::Geometry;
use linefs_pm::node::NodePm;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::{execute_moves, Collector, PublicArea};
use linefs_pm::publish::publish_batch;
use linefs_pm::replica::ReplicaLog;
use linefs_pm::trace::CrashOpts;
use linefs_pm::PmRegion;
use std::sync::Arc;

/// The copied stream: node 0's slot 0.
const ORIGIN: u32 = 0;
const SLOT: u32 = 0;

/// A deliberately broken replica, to show the oracle catches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// None: the replica as pm's `ReplicaLog` writes it.
    None,
    /// The chunk is stored in the copy but never persisted before it is acknowledged.
    AckBeforePersist,
}

/// The replica's node (packed, first) and its copy (after it) in `region`.
fn replica_of(
    region: &Arc<PmRegion>,
    geo: &Geometry,
    fresh: bool,
) -> Result<(NodePm, Arc<PmRegion>, ReplicaLog), String> {
    let node_win =
        Arc::new(PmRegion::window(region.clone(), 0, geo.node_size()).map_err(|e| format!("node window: {e}"))?);
    let copy_win = Arc::new(
        PmRegion::window(region.clone(), geo.node_size(), geo.log_size()).map_err(|e| format!("copy window: {e}"))?,
    );
    let node = NodePm::packed_with(node_win.clone(), geo).map_err(|e| format!("replica node: {e}"))?;
    let copy = if fresh {
        ReplicaLog::format(copy_win, geo, ORIGIN, SLOT)
    } else {
        ReplicaLog::from_region(copy_win, geo, ORIGIN, SLOT)
    }
    .map_err(|e| format!("replica copy: {e}"))?;
    Ok((node, node_win, copy))
}

/// Ships the primary's log from `from` to its end into the copy; returns the new end.
fn ship(primary: &LogSlot, copy: &ReplicaLog, from: u64, fault: Fault) -> Result<u64, String> {
    let end = primary.scan(from).map_err(|e| format!("scan the primary's log: {e}"))?.end;
    let (c, _) = primary.fetch(from, end, u64::MAX).map_err(|e| format!("fetch the primary's log: {e}"))?;
    match fault {
        Fault::None => copy.write(c.from, &c.bytes).map_err(|e| format!("write the copy: {e}"))?,
        Fault::AckBeforePersist => {
            let ring = copy.ring_bytes();
            for (i, b) in c.bytes.iter().enumerate() {
                let at = linefs_pm::layout::BLOCK_SIZE + (c.from + i as u64) % ring;
                copy.region().write(at, std::slice::from_ref(b)).map_err(|e| e.to_string())?;
            }
        }
    }
    Ok(c.end())
}

/// Publishes everything the copy holds up to `until`, by nicfs's steps, in batches.
fn publish(area: &mut PublicArea, public: &Arc<PmRegion>, copy: &ReplicaLog, until: u64) -> Result<(), String> {
    loop {
        let from = copy.log().published_lsn().map_err(|e| e.to_string())?;
        if from >= until {
            return Ok(());
        }
        let (fetched, _) = copy.log().fetch(from, until, 64 << 10).map_err(|e| format!("fetch the copy: {e}"))?;
        let (batch, _) = Batch::from_copy(&fetched);
        if batch.entries.is_empty() {
            return Ok(());
        }
        let plan = linefs_pm::coalesce::plan(batch.entries.iter().map(|(_, r)| &r[..]));
        let logr = copy.region().clone();
        let mut mover = Collector::new(logr.len(), |m: &[_]| execute_moves(m, &logr, public));
        publish_batch(area, copy.log(), &batch, Some(&plan), &mut mover)
            .map_err(|e| format!("publish from the copy: {e}"))?;
    }
}

/// Checks one workload's replica pass, adding to `out`.
pub fn check_into(w: &Workload, crash: &CrashOpts, fault: Fault, out: &mut Outcome) -> Result<(), String> {
    let geo = Geometry::compute(&PM).map_err(|e| e.to_string())?;
    // The primary.
    let region = Arc::new(PmRegion::traced(PM.size));
    linefs_pm::mkfs::format_region(&region, &geo).map_err(|e| format!("format: {e}"))?;
    let fs = Fs::mount_region(region.clone(), opts()).map_err(|e| format!("mount: {e}"))?;
    setup(&fs).map_err(|e| format!("setup: {e}"))?;
    let plog = NodePm::packed(region.clone()).map_err(|e| e.to_string())?.logs[SLOT as usize].clone();
    let primary = LogSlot::new(plog, &geo, SLOT);
    // The replica, holding the starting tree.
    let rregion = Arc::new(PmRegion::traced(geo.node_size() + geo.log_size()));
    let (node, _, copy) = replica_of(&rregion, &geo, true)?;
    linefs_pm::mkfs::format_node(&node).map_err(|e| format!("format the replica: {e}"))?;
    let (mut area, _) = PublicArea::load(node.public.clone(), geo).map_err(|e| e.to_string())?;
    let mut shipped = ship(&primary, &copy, 0, Fault::None)?;
    publish(&mut area, &node.public, &copy, shipped)?;
    let mut states: Vec<Snapshot> = vec![snapshot(&fs).map_err(|e| format!("before step 0: {e}"))?];
    let tracer = rregion.tracer().ok_or("region is not traced")?;
    tracer.start_recording();
    for (i, step) in w.steps.iter().enumerate() {
        run_step(&fs, step);
        states.push(snapshot(&fs).map_err(|e| format!("live, after step {i}: {e}"))?);
        shipped = ship(&primary, &copy, shipped, fault)?;
        tracer.checkpoint(&format!("step {i} shipped"));
        publish(&mut area, &node.public, &copy, shipped)?;
        tracer.checkpoint(&format!("step {i} done"));
    }
    let points = tracer.crash_points();
    drop((fs, area, node, copy));
    out.points += points.len();
    // Steps whose chunk was acknowledged before the point (its "shipped" checkpoint passed).
    let mut acked = 0usize;
    for point in &points {
        if point.label == format!("step {acked} shipped") {
            acked += 1;
        }
        for img in point.images(crash) {
            out.states += 1;
            let at = || format!("replica crash point {} ({}), image {}", point.index, point.label, img.description);
            let r = Arc::new(PmRegion::traced_from_image(img.image));
            let (mut node, node_win, copy) = replica_of(&r, &geo, false).map_err(|e| format!("{}: {e}", at()))?;
            node.replicas.push(copy);
            let rec = linefs_pm::recovery::recover(&node).map_err(|e| format!("{}: recovery failed: {e}", at()))?;
            let held = rec.replicas[0].end;
            drop(rec);
            let (c, _) = node.replicas[0].log().fetch(0, held, u64::MAX).map_err(|e| e.to_string())?;
            let (p, _) = primary.fetch(0, held, u64::MAX).map_err(|e| e.to_string())?;
            if c != p {
                return Err(format!("{}: the copy differs from the primary's log", at()));
            }
            drop(node);
            let fs = Fs::mount_region(node_win.clone(), opts()).map_err(|e| format!("{}: mount failed: {e}", at()))?;
            fsck(&node_win).map_err(|e| format!("{}: fsck after recovery: {e}", at()))?;
            let got = snapshot(&fs).map_err(|e| format!("{}: inconsistent after recovery: {e}", at()))?;
            // Acknowledged through step `acked`: S(acked), or S(acked+1) if the next chunk
            // is being written and arrived whole.
            let ok = &states[acked..(acked + 2).min(states.len())];
            if !ok.contains(&got) {
                let want = &states[acked];
                return Err(format!(
                    "{}: the replica recovered a state that is neither S{acked} nor S{} (diff against S{acked}: {})",
                    at(),
                    acked + 1,
                    diff(want, &got)
                ));
            }
        }
    }
    Ok(())
}
