//! What the kworker tests share: a formatted node with known bytes in its log files.
#![allow(dead_code)]

use linefs_pm::layout::{FormatParams, Superblock, BLOCK_SIZE};
use linefs_pm::node::{log_file_name, PUBLIC_FILE};
use linefs_proto::{CopyEntry, CopySource};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(10);

/// A formatted two-slot node in a temp directory.
pub struct TestNode {
    pub dir: tempfile::TempDir,
    pub node: PathBuf,
    /// Byte offset of the public file's first data block.
    pub data_start: u64,
    pub public_len: u64,
    pub log_len: u64,
}

impl TestNode {
    pub fn new() -> TestNode {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("node0");
        let params = FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 2, inodes: 256 };
        linefs_pm::mkfs::format_dir(&node, &params).unwrap();
        let public = linefs_pm::PmRegion::open(&node.join(PUBLIC_FILE)).unwrap();
        let g = Superblock::read(&public).unwrap().geometry;
        let t = TestNode {
            dir,
            node,
            data_start: g.data_start * BLOCK_SIZE,
            public_len: public.len(),
            log_len: g.log_size(),
        };
        // Known, slot-distinct bytes in each log file past its header block.
        for slot in 0..2u32 {
            let bytes: Vec<u8> = (0..(t.log_len - BLOCK_SIZE)).map(|i| pattern(slot, BLOCK_SIZE + i)).collect();
            t.log_file(slot).write_all_at(&bytes, BLOCK_SIZE).unwrap();
        }
        t
    }

    pub fn log_file(&self, slot: u32) -> std::fs::File {
        std::fs::OpenOptions::new().write(true).open(self.node.join(log_file_name(slot))).unwrap()
    }

    pub fn public_path(&self) -> PathBuf {
        self.node.join(PUBLIC_FILE)
    }

    /// The whole public file as it is now.
    pub fn public_bytes(&self) -> Vec<u8> {
        std::fs::read(self.public_path()).unwrap()
    }

    /// Scribbles `byte` over the data area, so that zero fills are visible.
    pub fn scribble(&self, byte: u8) {
        let f = std::fs::OpenOptions::new().write(true).open(self.public_path()).unwrap();
        f.write_all_at(&vec![byte; (self.public_len - self.data_start) as usize], self.data_start).unwrap();
    }
}

/// The byte at `off` of slot `slot`'s log file (past the header).
pub fn pattern(slot: u32, off: u64) -> u8 {
    (off.wrapping_mul(31) ^ (off >> 8) ^ (u64::from(slot) * 97)) as u8
}

pub fn data(slot: u32, src: u64, dst: u64, len: u64) -> CopyEntry {
    CopyEntry { source: CopySource::Slot(slot), src_offset: src, dst_offset: dst, len }
}

pub fn zeros(dst: u64, len: u64) -> CopyEntry {
    CopyEntry { source: CopySource::Zero, src_offset: 0, dst_offset: dst, len }
}

/// What `entries` must leave in a public file that held `before`.
pub fn expected(before: &[u8], entries: &[CopyEntry]) -> Vec<u8> {
    let mut img = before.to_vec();
    for e in entries {
        for i in 0..e.len {
            img[(e.dst_offset + i) as usize] = match e.source {
                CopySource::Zero => 0,
                CopySource::Slot(s) => pattern(s, e.src_offset + i),
            };
        }
    }
    img
}

/// Polls `f` until Some, panicking with `what` after [`WAIT`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn node_path(t: &TestNode) -> &Path {
    &t.node
}
