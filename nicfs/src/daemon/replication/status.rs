//! Replication as the status file and `/metrics` show it: per own log slot and chain member
//! how far it is acknowledged and how far behind (bytes, and the age of the oldest append
//! it has not acknowledged), per replica copy how far it is durable and published, the
//! stages (memory watermark, compression controller, per-peer queues and latencies) and the
//! counters since start.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// One chain member of an own log.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub(crate) struct MemberStatus {
    pub(crate) node: u32,
    /// The durable LSN it acknowledged (None: it has not answered in this view yet).
    pub(crate) acked_lsn: Option<u64>,
    /// How far it reported its copy published.
    pub(crate) published_lsn: Option<u64>,
    /// Appended here but not acknowledged by it.
    pub(crate) lag_bytes: u64,
    /// How long ago the oldest append it has not acknowledged was made (0: none).
    pub(crate) lag_ms: u64,
}

/// One of this node's client logs.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub(crate) struct LogStatus {
    pub(crate) slot: u32,
    /// Published here and handed to replication.
    pub(crate) appended_lsn: u64,
    /// Durable on every member of the chain.
    pub(crate) replicated_lsn: u64,
    /// Published here and replicated: the log space below may be reused.
    pub(crate) reclaimed_lsn: u64,
    /// Bytes of the log kept in memory for the members (until acknowledged by all).
    pub(crate) memory_bytes: u64,
    pub(crate) members: Vec<MemberStatus>,
}

/// This node's copy of another node's log.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub(crate) struct CopyStatus {
    pub(crate) origin: u32,
    pub(crate) slot: u32,
    pub(crate) durable_lsn: u64,
    pub(crate) published_lsn: u64,
}

/// Counters since start.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
pub(crate) struct CounterSnapshot {
    pub(crate) chunks_sent: u64,
    /// Chunk payload bytes as sent (after compression: on the wire).
    pub(crate) bytes_sent: u64,
    /// Chunk payload bytes as they would have been sent uncompressed (raw).
    pub(crate) raw_bytes_sent: u64,
    /// `raw_bytes_sent - bytes_sent`: what compression saved.
    pub(crate) saved_bytes: u64,
    /// Chunks sent lz4-compressed, and as they are (urgent, off, or not smaller).
    pub(crate) chunks_compressed: u64,
    pub(crate) chunks_uncompressed: u64,
    /// Log bytes sent in chunks (before compression).
    pub(crate) log_bytes_sent: u64,
    /// Chunks sent again (a range some member had been sent before).
    pub(crate) retransmits: u64,
    pub(crate) acks_sent: u64,
    pub(crate) acks_received: u64,
    pub(crate) chunks_received: u64,
    /// Replication payload bytes received (as on the wire).
    pub(crate) bytes_received: u64,
    /// Frames dropped for another epoch than the engine's (the peer links drop older ones
    /// first: `peers.stale_dropped`).
    pub(crate) stale_dropped: u64,
    /// Frames not sent: the peer's queue was full or it is not linked (resent on a tick).
    pub(crate) send_dropped: u64,
    /// Persists of received chunks that failed (retried).
    pub(crate) persist_errors: u64,
    /// Entries of replicated chunks this node's admission refused (skipped, logged).
    pub(crate) refused_entries: u64,
    /// State transfers asked of this node (not built yet: logged).
    pub(crate) rebases_asked: u64,
    /// Ranges of an own log dropped unpublished (refused suffixes) sent as empty entries.
    pub(crate) gaps_filled: u64,
    pub(crate) fsyncs: u64,
    pub(crate) fsyncs_done: u64,
}

/// The counters, shared by the engine, sender and publishing threads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) chunks_sent: AtomicU64,
    pub(crate) bytes_sent: AtomicU64,
    pub(crate) raw_bytes_sent: AtomicU64,
    pub(crate) saved_bytes: AtomicU64,
    pub(crate) chunks_compressed: AtomicU64,
    pub(crate) chunks_uncompressed: AtomicU64,
    pub(crate) log_bytes_sent: AtomicU64,
    pub(crate) retransmits: AtomicU64,
    pub(crate) acks_sent: AtomicU64,
    pub(crate) acks_received: AtomicU64,
    pub(crate) chunks_received: AtomicU64,
    pub(crate) bytes_received: AtomicU64,
    pub(crate) stale_dropped: AtomicU64,
    pub(crate) send_dropped: AtomicU64,
    pub(crate) persist_errors: AtomicU64,
    pub(crate) refused_entries: AtomicU64,
    pub(crate) rebases_asked: AtomicU64,
    pub(crate) gaps_filled: AtomicU64,
    pub(crate) fsyncs: AtomicU64,
    pub(crate) fsyncs_done: AtomicU64,
}

/// Adds `n` to a counter.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> CounterSnapshot {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            chunks_sent: l(&self.chunks_sent),
            bytes_sent: l(&self.bytes_sent),
            raw_bytes_sent: l(&self.raw_bytes_sent),
            saved_bytes: l(&self.saved_bytes),
            chunks_compressed: l(&self.chunks_compressed),
            chunks_uncompressed: l(&self.chunks_uncompressed),
            log_bytes_sent: l(&self.log_bytes_sent),
            retransmits: l(&self.retransmits),
            acks_sent: l(&self.acks_sent),
            acks_received: l(&self.acks_received),
            chunks_received: l(&self.chunks_received),
            bytes_received: l(&self.bytes_received),
            stale_dropped: l(&self.stale_dropped),
            send_dropped: l(&self.send_dropped),
            persist_errors: l(&self.persist_errors),
            refused_entries: l(&self.refused_entries),
            rebases_asked: l(&self.rebases_asked),
            gaps_filled: l(&self.gaps_filled),
            fsyncs: l(&self.fsyncs),
            fsyncs_done: l(&self.fsyncs_done),
        }
    }
}

/// The memory watermark (`linefs_chain::flow::Watermark`) over the log bytes held for the
/// chain: publication waits while paused.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
pub(crate) struct FlowStatus {
    /// Above the high watermark: publication waits until at or under the low one.
    pub(crate) paused: bool,
    /// Log bytes held, and the pieces they are in.
    pub(crate) bytes: u64,
    pub(crate) pieces: u64,
    pub(crate) high_bytes: u64,
    pub(crate) low_bytes: u64,
    /// Times it paused and resumed since start.
    pub(crate) pauses: u64,
    pub(crate) resumes: u64,
    /// Most bytes held at once.
    pub(crate) peak_bytes: u64,
    /// Releases of more than was held (a driver's mistake; clamped).
    pub(crate) excess_releases: u64,
}

/// The compression controller (`linefs_chain::compress::Adaptive`): lz4 on or off for
/// non-urgent chunks.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub(crate) struct CompressionStatus {
    pub(crate) on: bool,
    /// Switches since start, each way.
    pub(crate) switches_on: u64,
    pub(crate) switches_off: u64,
    /// Chunks it decided on, and those compressed while off to re-measure.
    pub(crate) decided: u64,
    pub(crate) probes: u64,
    /// Why it last switched (no-saving, slower, queue-bottleneck, pays).
    pub(crate) last_reason: Option<String>,
    /// lz4's wire / raw, in thousandths (moving average; None until measured).
    pub(crate) ratio_permille: Option<u64>,
}

/// p50 and p99 of a latency over the most recent samples.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
pub(crate) struct Latency {
    pub(crate) samples: u64,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
}

/// One peer's replication stages as seen from here.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq, Default)]
pub(crate) struct PeerStage {
    pub(crate) node: u32,
    /// Frames waiting for its compress stage, and for its senders.
    pub(crate) compress_queue: u64,
    pub(crate) send_queue: u64,
    /// From the append of a chunk's bytes here to its (first) send to this peer.
    pub(crate) append_to_send: Latency,
    /// From a chunk's first send to this peer's acknowledgement covering it.
    pub(crate) send_to_ack: Latency,
}

/// Replication as the status file shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, Default)]
pub(crate) struct ReplicationStatus {
    /// The engine's view epoch (0: none yet).
    pub(crate) epoch: u64,
    /// The view's nodes in chain order.
    pub(crate) chain: Vec<u32>,
    /// Own logs that have been written or have members.
    pub(crate) logs: Vec<LogStatus>,
    pub(crate) copies: Vec<CopyStatus>,
    /// Fsyncs waiting for the chain.
    pub(crate) fsyncs_waiting: usize,
    /// Log bytes held in memory for the members, all logs together.
    pub(crate) memory_bytes: u64,
    /// Above the high watermark: publication waits until at or under the low one.
    pub(crate) paused: bool,
    /// The watermark in full.
    pub(crate) flow: FlowStatus,
    pub(crate) compression: CompressionStatus,
    /// Per peer: queues and latencies.
    pub(crate) peers: Vec<PeerStage>,
    pub(crate) counters: CounterSnapshot,
}
