//! The node record's updates crashed at every fence, every pending line present or absent
//! and torn: the record found afterwards is always the one before the update in flight or
//! the one after it, whole — never an error, never a mix — and the superblock is untouched.

use linefs_pm::layout::{FormatParams, Geometry, Superblock, BLOCK_SIZE};
use linefs_pm::mkfs::format_node;
use linefs_pm::node::NodePm;
use linefs_pm::noderecord::NodeRecord;
use linefs_pm::trace::CrashOpts;
use linefs_pm::PmRegion;
use std::sync::Arc;

#[test]
fn a_node_record_update_crashed_anywhere_leaves_the_old_record_or_the_new() {
    let geo = Geometry::compute(&FormatParams {
        size: 130 * BLOCK_SIZE,
        log_size: 64 * BLOCK_SIZE,
        log_slots: 1,
        inodes: 16,
    })
    .unwrap();
    let node = NodePm::traced(&geo);
    format_node(&node).unwrap();
    let public = node.public.clone();
    let sb = Superblock::read(&public).unwrap();
    // A history of updates: the node gets its id, joins epochs 1..=5 (the chain changes
    // each time), each update the record before it plus one change.
    let mut history = vec![NodeRecord::load(&public).unwrap()];
    let tracer = public.tracer().unwrap();
    let fences_before = tracer.fence_count();
    tracer.start_recording();
    let first = NodeRecord { node_id: Some(2), cluster_id: [7; 16], ..history[0].clone() };
    history.push(NodeRecord::store(&public, &first).unwrap());
    for epoch in 1..=5u64 {
        let next = history.last().unwrap().entering_epoch(epoch, (1 << epoch) - 1, Some(epoch as u32 % 3), epoch);
        history.push(NodeRecord::store(&public, &next).unwrap());
    }
    let opts = CrashOpts { max_exhaustive: 8, samples: 8, seed: 3, torn_words: true, line_cap: 8 };
    let mut seen = vec![0usize; history.len()];
    for point in tracer.crash_points() {
        // Fences completed before this point: update k (1-based) fences once.
        let done = (point.fence_count - fences_before) as usize;
        for img in point.images(&opts) {
            let region = Arc::new(PmRegion::traced_from_image(img.image));
            let crashed = NodePm::packed(region).unwrap_or_else(|e| panic!("{point:?} {}: {e}", img.description));
            assert_eq!(Superblock::read(&crashed.public).unwrap(), sb);
            let got =
                NodeRecord::load(&crashed.public).unwrap_or_else(|e| panic!("{point:?} {}: {e}", img.description));
            let k = history.iter().position(|r| *r == got).unwrap_or_else(|| panic!("{point:?}: {got:?} is no record"));
            assert!(k == done || k == done + 1, "{point:?} {}: record {k} after {done} updates", img.description);
            seen[k] += 1;
        }
    }
    // Every record of the history was found at some crash, and the last one is current.
    assert!(seen.iter().skip(1).all(|&n| n > 0), "{seen:?}");
    assert_eq!(NodeRecord::load(&public).unwrap(), *history.last().unwrap());
}
