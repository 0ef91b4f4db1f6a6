//! Every counter of nicfs's publication in one place: [`Counters`] (atomics, bumped where the
//! work happens) and its [`CounterSnapshot`] (plain numbers, serde), which the status file
//! shows as `counters` and which an exporter (Prometheus, later) can publish field by field.
//! The pipeline's gauges — each stage's queue length and threads — are the stages'
//! own ([`crate::pipeline::stage::StageStatus`]).

use crate::host::link::Copied;
use linefs_pm::coalesce::Saved;
use linefs_pm::publish::Published;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// The counters, bumped as work is done.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    chunks_ready: AtomicU64,
    rejections: AtomicU64,
    bytes_fetched: AtomicU64,
    chunks_fetched: AtomicU64,
    batches_published: AtomicU64,
    entries_published: AtomicU64,
    log_bytes_published: AtomicU64,
    lists_to_kworker: AtomicU64,
    lists_by_kworker: AtomicU64,
    lists_by_nicfs: AtomicU64,
    lists_redone: AtomicU64,
    bytes_by_kworker: AtomicU64,
    bytes_by_nicfs: AtomicU64,
    saved_bytes: AtomicU64,
    saved_blocks: AtomicU64,
    saved_records: AtomicU64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct CounterSnapshot {
    /// ChunkReady notices received.
    pub(crate) chunks: u64,
    /// Entries refused, and publications that failed.
    pub(crate) rejections: u64,
    /// Bytes copied out of clients' log files into nicfs (the PCIe crossing): the chunks,
    /// and the entry headers read to find where each chunk ends.
    pub(crate) bytes_fetched: u64,
    pub(crate) chunks_fetched: u64,
    /// Chunks published (each one batch, one checkpoint).
    pub(crate) batches_published: u64,
    pub(crate) entries_published: u64,
    /// Log bytes the published entries span.
    pub(crate) bytes_published: u64,
    /// Copy lists sent to the kworker (including the ones nicfs then redid).
    pub(crate) copy_lists_sent: u64,
    pub(crate) copy_lists_by_kworker: u64,
    pub(crate) copy_lists_by_nicfs: u64,
    /// Lists a kworker died (or was too slow) with, redone by nicfs.
    pub(crate) copy_lists_redone: u64,
    /// Bytes of the copy lists' entries (data and zero fills) by who executed them.
    pub(crate) bytes_copied_by_kworker: u64,
    pub(crate) bytes_copied_by_nicfs: u64,
    /// What coalescing left out: WRITE bytes not copied, blocks not allocated, records
    /// dropped whole.
    pub(crate) bytes_saved_by_coalescing: u64,
    pub(crate) blocks_saved_by_coalescing: u64,
    pub(crate) records_dropped_by_coalescing: u64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn chunk_ready(&self) {
        add(&self.chunks_ready, 1);
    }

    pub(crate) fn rejection(&self) {
        add(&self.rejections, 1);
    }

    /// A chunk fetched, `read` bytes read from the log for it.
    pub(crate) fn fetched(&self, read: u64) {
        add(&self.bytes_fetched, read);
        add(&self.chunks_fetched, 1);
    }

    /// A batch published (entirely or up to a refused entry).
    pub(crate) fn published(&self, p: &Published) {
        if p.entries > 0 {
            add(&self.batches_published, 1);
        }
        add(&self.entries_published, p.entries);
        add(&self.log_bytes_published, p.upto - p.from);
        self.saved(&p.saved);
    }

    fn saved(&self, s: &Saved) {
        add(&self.saved_bytes, s.data_bytes);
        add(&self.saved_blocks, s.blocks);
        add(&self.saved_records, s.records);
    }

    /// What a batch's copy lists took.
    pub(crate) fn copied(&self, c: &Copied) {
        add(&self.lists_to_kworker, u64::from(c.sent));
        add(&self.lists_by_kworker, u64::from(c.by_kworker));
        add(&self.lists_by_nicfs, u64::from(c.by_nicfs));
        add(&self.lists_redone, u64::from(c.redone));
        add(&self.bytes_by_kworker, c.bytes_by_kworker);
        add(&self.bytes_by_nicfs, c.bytes_by_nicfs);
    }

    pub(crate) fn snapshot(&self) -> CounterSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            chunks: get(&self.chunks_ready),
            rejections: get(&self.rejections),
            bytes_fetched: get(&self.bytes_fetched),
            chunks_fetched: get(&self.chunks_fetched),
            batches_published: get(&self.batches_published),
            entries_published: get(&self.entries_published),
            bytes_published: get(&self.log_bytes_published),
            copy_lists_sent: get(&self.lists_to_kworker),
            copy_lists_by_kworker: get(&self.lists_by_kworker),
            copy_lists_by_nicfs: get(&self.lists_by_nicfs),
            copy_lists_redone: get(&self.lists_redone),
            bytes_copied_by_kworker: get(&self.bytes_by_kworker),
            bytes_copied_by_nicfs: get(&self.bytes_by_nicfs),
            bytes_saved_by_coalescing: get(&self.saved_bytes),
            blocks_saved_by_coalescing: get(&self.saved_blocks),
            records_dropped_by_coalescing: get(&self.saved_records),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_adds_up_what_was_counted() {
        let c = Counters::default();
        c.chunk_ready();
        c.fetched(4096 + 32);
        let saved = Saved { data_bytes: 100, blocks: 2, records: 3 };
        c.published(&Published { from: 0, upto: 4096, entries: 5, touched: vec![1], saved });
        c.published(&Published { from: 4096, upto: 4096, ..Published::default() });
        let copied =
            Copied { sent: 2, by_kworker: 1, by_nicfs: 1, redone: 1, bytes_by_kworker: 10, bytes_by_nicfs: 20 };
        c.copied(&copied);
        c.rejection();
        let s = c.snapshot();
        assert_eq!(
            s,
            CounterSnapshot {
                chunks: 1,
                rejections: 1,
                bytes_fetched: 4128,
                chunks_fetched: 1,
                batches_published: 1,
                entries_published: 5,
                bytes_published: 4096,
                copy_lists_sent: 2,
                copy_lists_by_kworker: 1,
                copy_lists_by_nicfs: 1,
                copy_lists_redone: 1,
                bytes_copied_by_kworker: 10,
                bytes_copied_by_nicfs: 20,
                bytes_saved_by_coalescing: 100,
                blocks_saved_by_coalescing: 2,
                records_dropped_by_coalescing: 3,
            }
        );
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["bytes_copied_by_nicfs"], 20);
    }
}
