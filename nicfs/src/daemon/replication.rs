//! Chain replication of the node's client logs (with `--zk`): the pure core `linefs_chain`'s
//! [`Engine`](linefs_chain::Engine) driven over the peer links ([`crate::daemon::peers`]).
//! docs/ARCHITECTURE.md, "Replication in nicfs (daemon/replication)", argues the design.
//!
//! * **One thread owns the engine** (`repl`, [`driver`]). Its inputs come through channels:
//!   each view the membership persisted ([`Feed::view`], from [`crate::daemon::cluster`]),
//!   what the pipeline published ([`Replicate::append`]), fsyncs ([`Replicate::fsync`]),
//!   the replication frames [`crate::daemon::peers`] let through (decoded, stale epochs
//!   dropped there, at the one entry point), completed publications of replica copies, and
//!   a tick. It carries out the engine's outputs: frames to peers through [`outbox`] (one
//!   sender thread per peer and class, so a slow peer never holds the engine), log ranges
//!   from memory ([`streams`]), persists into the node's replica copies (pm's
//!   `ReplicaLog`, inline: the engine forwards a chunk before it asks for its persist),
//!   publications of copies on the `repl-publish` thread ([`copies`]), the replicated LSN
//!   into the slot header and the sessions' reclaim, and fsync completions.
//! * **What is shipped** is what the pipeline validated and published here
//!   ([`crate::pipeline::replicate`]), kept in memory until every chain member acknowledged
//!   it durable (the engine's reclaim point); the bytes in memory are bounded by a high and
//!   a low watermark (`linefs_chain::flow::Watermark` in [`streams::Flow`]): above the high
//!   one the publish stage waits, until at or under the low one.
//! * **Classes**: acks, probes, rebases and urgent chunks (an fsync's remainder) go on the
//!   low-latency link, proactive chunks on the bulk one. Proactive chunks go through a
//!   compress stage per bulk link ([`outbox`]) that lz4s them while the controller
//!   (`linefs_chain::compress::Adaptive`, [`stages`]) finds it pays, and when that makes
//!   them smaller; urgent ones are never compressed.
//! * **Fsync**: [`Replicate::fsync`] is the engine's fsync of `(node, slot)` up to an LSN;
//!   its completion wakes the session's sequencer.
//! * **Start**: every own log slot (at its checkpoint: the node replaces its log files at
//!   start) and every replica copy found (its durable end and published LSN) is handed to
//!   `Engine::recover`; the first view publishes what copies hold durable but unpublished.
//!
//! Not built here: state transfer (a member behind the primary's reclaimed point is told to
//! rebase; the replica logs it and waits), the node-level lease admission of replicated
//! chunks (a named hook in [`copies`], `admit_remote`, for the node-level lease table).

mod copies;
mod driver;
mod outbox;
mod stages;
pub(crate) mod status;
mod streams;

use crate::daemon::peers::{Inbound, Peers};
use crate::node::Node;
use crate::pipeline::chunk::Event;
use crate::pipeline::replicate::{Replicate, Writer};
use linefs_chain::StreamId;
use parking_lot::Mutex;
use status::{Counters, ReplicationStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Replicas of every log besides its primary: a chain of three nodes (LineFS's default).
pub(crate) const REPLICAS: usize = 2;
/// A proactive chunk leaves once this many bytes are unshipped (at most peer's
/// `repl::MAX_CHUNK`).
pub(crate) const CHUNK: u64 = 256 << 10;

/// What the engine thread is told besides peer frames.
pub(crate) enum Msg {
    /// A view the membership persisted: its epoch and the nodes in chain order.
    View {
        epoch: u64,
        nodes: Vec<u32>,
    },
    /// Published log bytes of an own slot ([`Replicate::append`]).
    Append {
        slot: u32,
        from: u64,
        bytes: Arc<[u8]>,
        writer: Arc<Writer>,
    },
    /// An fsync of an own slot ([`Replicate::fsync`]).
    Fsync {
        slot: u32,
        lsn: u64,
        wake: crossbeam_channel::Sender<Event>,
    },
    /// `[start, end)` of a replica copy is published here (the `repl-publish` thread).
    Published {
        stream: StreamId,
        start: u64,
        end: u64,
    },
    Stop,
}

/// Where the membership and the peer links send what replication needs; made before them
/// ([`channels`]), read by the engine thread once it starts.
#[derive(Clone)]
pub(crate) struct Feed {
    msgs: crossbeam_channel::Sender<Msg>,
    inbox: crossbeam_channel::Sender<Inbound>,
}

impl Feed {
    /// A view persisted by the membership.
    pub(crate) fn view(&self, epoch: u64, nodes: Vec<u32>) {
        let _ = self.msgs.send(Msg::View { epoch, nodes });
    }

    /// Where the peer links hand replication frames.
    pub(crate) fn inbox(&self) -> crossbeam_channel::Sender<Inbound> {
        self.inbox.clone()
    }
}

/// The receiving ends of a [`Feed`].
pub(crate) struct Receivers {
    msgs: crossbeam_channel::Receiver<Msg>,
    inbox: crossbeam_channel::Receiver<Inbound>,
}

/// A feed and its receivers.
pub(crate) fn channels() -> (Feed, Receivers) {
    let (msgs, mrx) = crossbeam_channel::unbounded();
    let (inbox, irx) = crossbeam_channel::unbounded();
    (Feed { msgs, inbox }, Receivers { msgs: mrx, inbox: irx })
}

/// What the engine thread and the rest of the daemon share.
pub(crate) struct Shared {
    /// Per own slot, the replicated LSN (every chain member holds the log durable below).
    replicated: Vec<AtomicU64>,
    pub(crate) flow: streams::Flow,
    pub(crate) counters: Arc<Counters>,
    /// The compression controller and the stages' latencies.
    pub(crate) stages: Arc<stages::Stages>,
    /// The last snapshot the engine thread made (every tick).
    status: Mutex<ReplicationStatus>,
    stopping: AtomicBool,
}

/// The node's replication: the engine thread and the handle the pipeline and the status use.
pub(crate) struct Replication {
    feed: Feed,
    shared: Arc<Shared>,
    /// The engine thread's end (joined at stop).
    done: crossbeam_channel::Receiver<()>,
}

impl Replication {
    /// Recovers the engine from the node's log slots and replica copies and starts the
    /// engine and publishing threads.
    pub(crate) fn start(
        me: u32,
        node: Arc<Node>,
        peers: Peers,
        feed: Feed,
        receivers: Receivers,
    ) -> Result<Arc<Replication>, String> {
        let slots = node.geometry.log_slots;
        let shared = Arc::new(Shared {
            replicated: (0..slots).map(|s| AtomicU64::new(node.checkpoint(s))).collect(),
            flow: streams::Flow::default(),
            counters: Arc::new(Counters::default()),
            stages: Arc::new(stages::Stages::default()),
            status: Mutex::new(ReplicationStatus::default()),
            stopping: AtomicBool::new(false),
        });
        let (done_tx, done) = crossbeam_channel::bounded(1);
        let driver = driver::Driver::recover(me, node, peers, shared.clone(), feed.msgs.clone())?;
        let recv = receivers;
        std::thread::Builder::new()
            .name("repl".into())
            .spawn(move || {
                driver.run(recv.msgs, recv.inbox);
                let _ = done_tx.send(());
            })
            .map_err(|e| format!("cannot start the replication thread: {e}"))?;
        tracing::info!(node = me, replicas = REPLICAS, chunk = CHUNK, "replicating the node's client logs");
        Ok(Arc::new(Replication { feed, shared, done }))
    }

    /// The last snapshot of replication's state (status file, `/metrics`).
    pub(crate) fn status(&self) -> ReplicationStatus {
        let mut st = self.shared.status.lock().clone();
        st.counters = self.shared.counters.snapshot();
        st.compression = self.shared.stages.compression();
        st.flow = self.shared.flow.status();
        st.memory_bytes = st.flow.bytes;
        st.paused = st.flow.paused;
        st
    }

    /// The daemon is stopping: nothing waits for memory any more (shutdown publishes what
    /// is committed).
    pub(crate) fn stopping(&self) {
        self.shared.stopping.store(true, Ordering::Release);
        self.shared.flow.wake_all();
    }

    /// Stops the engine thread (bounded wait).
    pub(crate) fn stop(&self) {
        self.stopping();
        let _ = self.feed.msgs.send(Msg::Stop);
        if self.done.recv_timeout(std::time::Duration::from_secs(2)).is_err() {
            tracing::warn!("the replication thread did not stop in time");
        }
    }
}

impl Replicate for Replication {
    fn append(&self, slot: u32, from: u64, bytes: Arc<[u8]>, writer: &Writer) {
        let len = bytes.len() as u64;
        self.shared.flow.admit(len, || self.shared.stopping.load(Ordering::Acquire));
        let writer = Arc::new(writer.clone());
        let _ = self.feed.msgs.send(Msg::Append { slot, from, bytes, writer });
    }

    fn fsync(&self, slot: u32, lsn: u64, wake: crossbeam_channel::Sender<Event>) {
        let _ = self.feed.msgs.send(Msg::Fsync { slot, lsn, wake });
    }

    fn replicated(&self, slot: u32) -> u64 {
        self.shared.replicated.get(slot as usize).map_or(0, |r| r.load(Ordering::Acquire))
    }
}
