//! What goes in and out of the engine: wire messages, inputs and outputs.
//!
//! The engine never sends, persists, publishes or waits by itself. A driver (the nicfs
//! daemon, the simulation) feeds it [`Input`]s one at a time and carries out the
//! [`Output`]s, later feeding back what completed. Messages are plain enums; their byte
//! encoding belongs to the transport. Every message carries the sender's epoch, and the
//! engine drops a message of another epoch before any handler sees it.

use crate::types::{Data, Epoch, Lsn, NodeId, OpId, StreamId, View};

/// The two connection classes between daemons (LineFS §3.3.2): a low-latency one for fsync
/// traffic, acknowledgements and handshakes, a bulk one for proactive chunks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    Latency,
    Bulk,
}

/// A message between the daemons of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Message {
    /// Log bytes `[start, start + data.len())` of `stream`, flowing down its chain from the
    /// primary. `urgent` chunks (an fsync's remainder, and retransmissions an fsync waits
    /// for) travel, and are forwarded, on the low-latency class.
    Chunk { stream: StreamId, epoch: Epoch, start: Lsn, data: Data, urgent: bool },
    /// A replica tells the stream's primary that its copy is durable up to `durable`
    /// (persisted, not merely received).
    Ack { stream: StreamId, epoch: Epoch, durable: Lsn },
    /// The primary asks a chain member how far its copy is durable (the handshake with a new
    /// member, and the retry when its answer is missing); answered by [`Message::Ack`].
    Probe { stream: StreamId, epoch: Epoch },
    /// The primary tells a member whose copy ends below the primary's reclaimed log start
    /// that its copy must be brought to `lsn` by a state transfer (the bytes below are gone
    /// from the primary's log).
    Rebase { stream: StreamId, epoch: Epoch, lsn: Lsn },
}

impl Message {
    pub fn epoch(&self) -> Epoch {
        match self {
            Message::Chunk { epoch, .. }
            | Message::Ack { epoch, .. }
            | Message::Probe { epoch, .. }
            | Message::Rebase { epoch, .. } => *epoch,
        }
    }

    pub fn stream(&self) -> StreamId {
        match self {
            Message::Chunk { stream, .. }
            | Message::Ack { stream, .. }
            | Message::Probe { stream, .. }
            | Message::Rebase { stream, .. } => *stream,
        }
    }

    /// The connection class the message travels on.
    pub fn class(&self) -> Class {
        match self {
            Message::Chunk { urgent: false, .. } => Class::Bulk,
            _ => Class::Latency,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Message::Chunk { .. } => "CHUNK",
            Message::Ack { .. } => "ACK",
            Message::Probe { .. } => "PROBE",
            Message::Rebase { .. } => "REBASE",
        }
    }
}

/// What a restarted node finds in its PM for one stream ([`crate::Engine::recover`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Recovered {
    /// A log of this node: its end (everything appended is durable locally), how far it is
    /// published, the replicated LSN of its slot header, and where its space is reclaimed up
    /// to (the log's start).
    Primary { slot: u32, appended: Lsn, published: Lsn, replicated: Lsn, reclaimed: Lsn },
    /// This node's copy of another node's log: the valid prefix of the copy and how far it
    /// is published here.
    Replica { stream: StreamId, durable: Lsn, published: Lsn },
}

/// One event for the engine of a node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Input {
    /// The cluster manager's view (ignored unless its epoch is newer than the engine's).
    View(View),
    /// A log of this node (slot `slot`) now ends at `end`: everything before is durable in
    /// the local log (libfs persisted it before telling). A log the engine does not know
    /// starts at LSN 0; the driver hands the engine every existing log at start
    /// ([`crate::Engine::recover`]) with the LSN its space is reclaimed up to.
    Append { slot: u32, end: Lsn },
    /// Publication of a stream reached further on this node: on a primary the publishing
    /// pipeline reports `[start, end)` of its own log published; on a replica the
    /// completion of an [`Output::Publish`].
    Published { stream: StreamId, start: Lsn, end: Lsn },
    /// An fsync: complete once every `(stream, lsn)` target (the client's log, and the lease
    /// records granted since the last fsync, which are a stream of their own) is durable on
    /// every member of the stream's chain. Every stream must be one of this node's.
    Fsync { op: OpId, targets: Vec<(StreamId, Lsn)> },
    /// A message from another node.
    Receive { from: NodeId, msg: Message },
    /// An [`Output::Persist`] completed: `[start, end)` of this node's copy of `stream` is in
    /// its PM. Persists may complete in any order.
    Persisted { stream: StreamId, start: Lsn, end: Lsn },
    /// An [`Output::Rebase`] completed: this node's copy of `stream` now holds, durable and
    /// published, everything below `lsn`.
    Rebased { stream: StreamId, lsn: Lsn },
    /// A driver timeout: retransmit what is unacknowledged, probe members that did not
    /// answer. Messages may be lost; ticks make the protocol finish.
    Tick,
}

/// One effect the driver must carry out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Send `msg` to `to` on the connection of its class ([`Message::class`]).
    Send { to: NodeId, msg: Message },
    /// Primary: send a [`Message::Chunk`] to `to` carrying bytes `[start, end)` of this
    /// node's log `slot`, read from the local log (never below the reclaimed point).
    SendLog { to: NodeId, slot: u32, epoch: Epoch, start: Lsn, end: Lsn, urgent: bool },
    /// Replica: write `data` at `start` of this node's copy of `stream`; report
    /// [`Input::Persisted`] once it is durable.
    Persist { stream: StreamId, start: Lsn, data: Data },
    /// Replica: publish `[start, end)` of this node's copy of `stream` into its public area
    /// through the publishing stages; report [`Input::Published`]. Only durable bytes, in
    /// order.
    Publish { stream: StreamId, start: Lsn, end: Lsn },
    /// Replica: the primary no longer holds this node's missing part of `stream`: bring the
    /// copy to `lsn` by a state transfer (recovery from a live replica); report
    /// [`Input::Rebased`].
    Rebase { stream: StreamId, lsn: Lsn },
    /// Primary: every member of the log's current chain has it durable up to `lsn`: the
    /// slot header's replicated LSN. Not monotone: a member that joins behind lowers it
    /// until it catches up (space already reclaimed stays reclaimed).
    Replicated { slot: u32, lsn: Lsn },
    /// The log space of `stream` below `upto` may be reused: it is published here and (on a
    /// primary) replicated. Monotone.
    Reclaim { stream: StreamId, upto: Lsn },
    /// The fsync `op` returns: its targets are durable on every member of their chains.
    FsyncDone { op: OpId },
    /// The fsync `op` names a stream this node is not the primary of.
    FsyncRefused { op: OpId, stream: StreamId },
    /// A peer spoke from a newer epoch than this node's view: the daemon should fetch the
    /// current view from the cluster manager (and feed it as [`Input::View`]).
    NewerEpoch { epoch: Epoch, from: NodeId },
}
