//! The copy-list executor on a real formatted node: exact bytes, bounds, idempotence.

mod common;

use common::*;
use kworker::NodeFiles;
use linefs_proto::{CopyEntry, CopyList, CopySource};

fn list(id: u64, entries: Vec<CopyEntry>) -> CopyList {
    CopyList { list_id: id, entries }
}

#[test]
fn copies_data_and_zeros_exactly() {
    let t = TestNode::new();
    t.scribble(0xAB);
    let d = t.data_start;
    let entries = vec![
        data(0, 4096, d, 4096),
        data(1, 5000, d + 10_000, 12_345),
        zeros(d + 8192, 1000),
        data(0, t.log_len - 7, d + 70_000, 7),
        // Later entries win where they overlap earlier ones: order is kept.
        data(1, 4096, d + 9000, 3000),
        zeros(d + 100, 0),
        // A long one, more than the 1 MiB bounce buffer.
        data(1, 4096, d + 200_000, t.log_len - 4096),
    ];
    let before = t.public_bytes();
    let files = NodeFiles::open(&t.node).unwrap();
    files.execute(&list(1, entries.clone())).unwrap();
    let after = t.public_bytes();
    assert!(after == expected(&before, &entries), "public file differs from the model");
    // Idempotent: the same list again changes nothing.
    files.execute(&list(1, entries)).unwrap();
    assert!(t.public_bytes() == after);
}

#[test]
fn refuses_out_of_range_entries_and_writes_nothing_outside() {
    let t = TestNode::new();
    t.scribble(0x5A);
    let d = t.data_start;
    let files = NodeFiles::open(&t.node).unwrap();
    let good = data(0, 4096, d, 100);
    let bad: Vec<(CopyEntry, i32)> = vec![
        (data(0, 4096, t.public_len - 10, 11), libc::ERANGE),
        (data(0, 4096, u64::MAX - 5, 10), libc::ERANGE),
        (zeros(0, 4096), libc::ERANGE),
        (zeros(d - 1, 2), libc::ERANGE),
        (data(0, t.log_len - 10, d, 11), libc::ERANGE),
        (data(1, u64::MAX, d, 2), libc::ERANGE),
        (data(2, 0, d, 1), libc::EINVAL),
        (CopyEntry { source: CopySource::Slot(u32::MAX - 1), src_offset: 0, dst_offset: d, len: 1 }, libc::EINVAL),
        (CopyEntry { source: CopySource::Zero, src_offset: 8, dst_offset: d, len: 1 }, libc::EINVAL),
    ];
    for (i, (entry, errno)) in bad.into_iter().enumerate() {
        let before = t.public_bytes();
        let after_bad = data(1, 4096, d + 5000, 100);
        let err = files.execute(&list(i as u64, vec![good, entry, after_bad])).unwrap_err();
        assert_eq!((err.entry, err.errno), (1, errno), "entry {entry:?}: {err}");
        // The entry before the bad one was done; nothing else changed (not the bad one's
        // target, not the entry after it).
        assert!(t.public_bytes() == expected(&before, &[good]), "entry {entry:?} changed the public file");
    }
}

#[test]
fn open_fails_cleanly_on_a_missing_node() {
    let dir = tempfile::tempdir().unwrap();
    assert!(NodeFiles::open(dir.path()).is_err());
}
