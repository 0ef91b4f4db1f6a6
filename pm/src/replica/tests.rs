//! The copy's own behaviour: bytes land at their ring positions (also across the end of the
//! ring), out-of-window writes are refused without a byte written, the durable end after a
//! torn write, and the files (names, modes, listing, reopening).

use super::*;
use crate::layout::FormatParams;
use crate::oplog::{EntryLoc, ScanStop};
use std::os::unix::fs::MetadataExt;

fn geo() -> Geometry {
    Geometry::compute(&FormatParams { size: 8 << 20, log_size: 256 << 10, log_slots: 2, inodes: 64 }).unwrap()
}

/// A primary's slot and a replica's copy of it, both in traced regions.
fn pair() -> (LogSlot, ReplicaLog, Geometry) {
    let geo = geo();
    let primary = LogSlot::new(Arc::new(PmRegion::traced(geo.log_size())), &geo, 1);
    primary.format().unwrap();
    let copy = ReplicaLog::format(Arc::new(PmRegion::traced(geo.log_size())), &geo, 3, 1).unwrap();
    (primary, copy, geo)
}

/// Appends entries of the given payload sizes to the primary; returns them with payloads.
fn fill(s: &LogSlot, tail: &mut u64, sizes: &[usize]) -> Vec<(EntryLoc, Vec<u8>)> {
    let published = s.published_lsn().unwrap();
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let payload: Vec<u8> = (0..n).map(|k| (k * 13 + i * 7 + *tail as usize) as u8).collect();
            let loc = s.append(*tail, published, &payload).unwrap();
            *tail = loc.end;
            (loc, payload)
        })
        .collect()
}

/// Copies the primary's log `[from, until)` into the copy (one write).
fn ship(primary: &LogSlot, copy: &ReplicaLog, from: u64, until: u64) -> u64 {
    let (c, _) = primary.fetch(from, until, u64::MAX).unwrap();
    copy.write(c.from, &c.bytes).unwrap();
    c.end()
}

#[test]
fn copied_bytes_scan_to_the_primary_s_entries() {
    let (primary, copy, _) = pair();
    let mut tail = 0;
    let all = fill(&primary, &mut tail, &[10, 3000, 200, 9000]);
    assert_eq!(copy.durable_end().unwrap(), 0, "a fresh copy is empty");
    // Two chunks, split at an entry boundary.
    let mid = all[2].0.lsn;
    ship(&primary, &copy, 0, mid);
    assert_eq!(copy.durable_end().unwrap(), mid);
    ship(&primary, &copy, mid, tail);
    assert_eq!(copy.durable_end().unwrap(), tail);
    let scan = copy.log().scan(0).unwrap();
    assert_eq!(scan.stop, ScanStop::End);
    // Same LSNs, same ring offsets, same payloads: publication reads the copy as the log.
    assert_eq!(scan.entries, all.iter().map(|(l, _)| *l).collect::<Vec<_>>());
    for (loc, payload) in &all {
        assert_eq!(&copy.log().read_payload(loc).unwrap(), payload);
    }
    assert_eq!((copy.origin(), copy.slot()), (3, 1));
}

#[test]
fn the_copy_wraps_the_ring_with_the_primary() {
    let (primary, copy, _) = pair();
    let ring = primary.ring_bytes();
    let mut tail = 0;
    let mut shipped = 0;
    let mut laps_seen = false;
    for round in 0..12 {
        let sizes: Vec<usize> = (0..5).map(|i| 1000 + (round * 5 + i) * 1777 % 9000).collect();
        let published = primary.published_lsn().unwrap();
        if tail - published + 60_000 > ring {
            // Both sides publish (the replica from its copy) before the ring fills.
            primary.set_published_lsn(tail).unwrap();
            copy.log().set_published_lsn(shipped).unwrap();
        }
        fill(&primary, &mut tail, &sizes);
        shipped = ship(&primary, &copy, shipped, tail);
        assert_eq!(copy.durable_end().unwrap(), tail);
        laps_seen |= tail / ring > 0;
    }
    assert!(laps_seen, "the ring wrapped");
    let from = copy.log().published_lsn().unwrap();
    let want = primary.scan(from).unwrap();
    let got = copy.log().scan(from).unwrap();
    assert_eq!(got.entries, want.entries);
    for loc in &got.entries {
        assert_eq!(copy.log().read_payload(loc).unwrap(), primary.read_payload(loc).unwrap());
    }
}

#[test]
fn a_write_across_the_end_of_the_ring_is_split() {
    let (_, copy, _) = pair();
    let ring = copy.ring_bytes();
    copy.rebase(ring - 64).unwrap();
    let bytes: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
    copy.write(ring - 64, &bytes).unwrap();
    let mut first = vec![0u8; 64];
    copy.region().read(BLOCK + ring - 64, &mut first).unwrap();
    let mut rest = vec![0u8; 136];
    copy.region().read(BLOCK, &mut rest).unwrap();
    assert_eq!([first, rest].concat(), bytes);
}

const BLOCK: u64 = crate::layout::BLOCK_SIZE;

#[test]
fn writes_outside_the_window_are_refused_and_write_nothing() {
    let (primary, copy, _) = pair();
    let ring = copy.ring_bytes();
    let mut tail = 0;
    fill(&primary, &mut tail, &[500, 500]);
    ship(&primary, &copy, 0, tail);
    copy.log().set_published_lsn(640).unwrap();
    let before = copy.region().tracer().unwrap().live_image();
    // Below the published LSN.
    assert!(copy.write(0, &[1u8; 64]).is_err());
    assert!(copy.write(639, &[1u8; 1]).is_err());
    // Beyond published + ring (the unpublished part would be overwritten).
    assert!(copy.write(640 + ring - 63, &[1u8; 64]).is_err());
    assert!(copy.write(640, &vec![1u8; ring as usize + 1]).is_err());
    assert!(copy.write(u64::MAX - 10, &[1u8; 64]).is_err(), "overflow");
    assert_eq!(copy.region().tracer().unwrap().live_image(), before, "nothing written");
    // Exactly the window is fine.
    copy.write(640 + ring - 64, &[0u8; 64]).unwrap();
    copy.write(640, &[]).unwrap();
}

#[test]
fn the_durable_end_stops_at_a_torn_write() {
    let (primary, copy, _) = pair();
    let mut tail = 0;
    let all = fill(&primary, &mut tail, &[100, 4000, 100]);
    let (c, _) = primary.fetch(0, tail, u64::MAX).unwrap();
    // Only part of the second entry arrived (a crash in the middle of the write).
    let cut = (all[1].0.lsn + 2000) as usize;
    copy.write(0, &c.bytes[..cut]).unwrap();
    assert_eq!(copy.durable_end().unwrap(), all[0].0.end);
    // A byte of the second entry garbled, the rest whole: the end is still before it.
    let mut bad = c.bytes.clone();
    bad[all[1].0.lsn as usize + 100] ^= 0x40;
    copy.write(0, &bad).unwrap();
    assert_eq!(copy.durable_end().unwrap(), all[0].0.end);
    assert!(matches!(copy.log().scan(0).unwrap().stop, ScanStop::Invalid(_)));
    // Resent whole: everything is durable.
    copy.write(all[1].0.lsn, &c.bytes[all[1].0.lsn as usize..]).unwrap();
    assert_eq!(copy.durable_end().unwrap(), tail);
}

#[test]
fn rebase_restarts_the_copy_at_an_lsn() {
    let (primary, copy, _) = pair();
    let mut tail = 0;
    fill(&primary, &mut tail, &[100, 100, 100]);
    ship(&primary, &copy, 0, tail);
    copy.rebase(10 * 64).unwrap();
    assert_eq!(copy.log().published_lsn().unwrap(), 640);
    assert_eq!(copy.log().replicated_lsn().unwrap(), 640);
    assert_eq!(copy.durable_end().unwrap(), 640, "nothing held past the new start");
    copy.rebase(0).unwrap();
    assert_eq!(copy.durable_end().unwrap(), 0, "the ring was cleared: nothing of the old copy is taken");
}

#[test]
fn files_are_private_listed_and_reopened() {
    let d = tempfile::tempdir().unwrap();
    let geo = geo();
    assert!(list_replicas(d.path()).is_empty(), "no replicas directory: no copies");
    let a = ReplicaLog::open_or_create(d.path(), &geo, 2, 0).unwrap();
    let b = ReplicaLog::open_or_create(d.path(), &geo, 1, 7).unwrap();
    let dir = d.path().join(REPLICAS_DIR);
    assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
    let path = replica_path(d.path(), 2, 0);
    assert!(path.ends_with("replicas/n2-log-00.pm"));
    assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), geo.log_size());
    // The slot format unchanged: the header is what LogSlot writes for that slot, the ring
    // all zeros.
    let fresh = LogSlot::new(Arc::new(PmRegion::traced(geo.log_size())), &geo, 0);
    fresh.format().unwrap();
    let mut want = vec![0u8; geo.log_size() as usize];
    fresh.region().read(0, &mut want).unwrap();
    assert!(std::fs::read(&path).unwrap() == want, "a new copy is a formatted empty slot 0, byte for byte");
    // Stray and foreign files are not copies.
    std::fs::write(dir.join("n4-log-01.pm.new"), b"torn").unwrap();
    std::fs::write(dir.join("n04-log-01.pm"), b"").unwrap();
    std::fs::write(dir.join("notes"), b"").unwrap();
    assert_eq!(list_replicas(d.path()), vec![(1, 7), (2, 0)]);
    // What was written is there when reopened.
    let (primary, _, _) = pair();
    let mut tail = 0;
    fill(&primary, &mut tail, &[300]);
    ship(&primary, &a, 0, tail);
    a.log().set_published_lsn(64).unwrap();
    drop((a, b));
    let a = ReplicaLog::open_or_create(d.path(), &geo, 2, 0).unwrap();
    assert_eq!(a.log().published_lsn().unwrap(), 64);
    // A stray temporary file of a copy being created is replaced.
    let mut tmp = replica_path(d.path(), 5, 1).into_os_string();
    tmp.push(NEW_SUFFIX);
    std::fs::write(&tmp, b"torn").unwrap();
    let c = ReplicaLog::open_or_create(d.path(), &geo, 5, 1).unwrap();
    assert_eq!(c.durable_end().unwrap(), 0);
    assert!(!std::path::Path::new(&tmp).exists());
}

#[test]
fn a_copy_of_the_wrong_size_or_slot_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let geo = geo();
    drop(ReplicaLog::open_or_create(d.path(), &geo, 2, 0).unwrap());
    // The header records slot 0: opened as slot 1's file, it does not match.
    std::fs::rename(replica_path(d.path(), 2, 0), replica_path(d.path(), 2, 1)).unwrap();
    assert!(ReplicaLog::open(d.path(), &geo, 2, 1).is_err());
    assert!(ReplicaLog::open_or_create(d.path(), &geo, 2, 1).is_err());
    std::fs::OpenOptions::new().write(true).open(replica_path(d.path(), 2, 1)).unwrap().set_len(1 << 20).unwrap();
    assert!(matches!(ReplicaLog::open(d.path(), &geo, 2, 1), Err(FormatError::SizeMismatch { .. })));
}

#[test]
fn file_names_parse_only_in_their_canonical_spelling() {
    assert_eq!(parse_replica_file_name("n0-log-00.pm"), Some((0, 0)));
    assert_eq!(parse_replica_file_name("n12-log-07.pm"), Some((12, 7)));
    assert_eq!(parse_replica_file_name("n12-log-123.pm"), Some((12, 123)));
    for bad in [
        "n012-log-07.pm",
        "n12-log-7.pm",
        "n-log-01.pm",
        "n1-log-.pm",
        "n1-log-01.pm.new",
        "log-01.pm",
        "n+1-log-01.pm",
    ] {
        assert_eq!(parse_replica_file_name(bad), None, "{bad}");
    }
    for (o, s) in [(0, 0), (3, 9), (4_000_000_000, 99), (7, 1000)] {
        assert_eq!(parse_replica_file_name(&replica_file_name(o, s)), Some((o, s)));
    }
}
