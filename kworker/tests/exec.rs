//! The copy-list executor on a real formatted node: exact bytes, bounds, idempotence.

mod common;

use common::*;
use linefs_copier::NodeFiles;
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

/// nicfs replaces a slot's log file between sessions (a new file renamed over the old
/// name): the executor reads the file the name gives at each list, never the old one it
/// had open — whoever still holds the old one may be writing anything into it.
#[test]
fn a_log_file_replaced_between_lists_is_read_from_the_new_file() {
    use linefs_pm::node::log_file_name;
    use std::os::unix::fs::FileExt;
    let t = TestNode::new();
    let d = t.data_start;
    let files = NodeFiles::open(&t.node).unwrap();
    let entries = vec![data(0, 4096, d, 8192), data(1, 4096, d + 8192, 100)];
    let before = t.public_bytes();
    files.execute(&list(1, entries.clone())).unwrap();
    assert!(t.public_bytes() == expected(&before, &entries));

    // Slot 0's file replaced; the old one, still open, rewritten by its holder.
    let old = t.log_file(0);
    let path = t.node.join(log_file_name(0));
    let fresh = t.node.join(format!("{}.new", log_file_name(0)));
    std::fs::write(&fresh, vec![0xC3; t.log_len as usize]).unwrap();
    std::fs::rename(&fresh, &path).unwrap();
    old.write_all_at(&vec![0x11; 8192], 4096).unwrap();
    files.execute(&list(2, vec![data(0, 4096, d, 8192)])).unwrap();
    let after = t.public_bytes();
    // The new file's bytes where list 2 copied, the rest as list 1 left it.
    let mut want = expected(&before, &entries);
    want[d as usize..d as usize + 8192].fill(0xC3);
    assert!(after == want, "slot 0 read from its new file");

    // A slot whose file is gone fails its list at the entry that reads it, with the
    // entries before it done and nothing after.
    std::fs::remove_file(&path).unwrap();
    let err = files.execute(&list(3, vec![zeros(d, 10), data(0, 4096, d + 100, 10), zeros(d + 200, 10)])).unwrap_err();
    assert_eq!((err.entry, err.errno), (1, libc::ENOENT), "{err}");
    let now = t.public_bytes();
    assert!(now[d as usize..d as usize + 10].iter().all(|&b| b == 0));
    assert!(now[d as usize + 200..d as usize + 210] == after[d as usize + 200..d as usize + 210]);
}
