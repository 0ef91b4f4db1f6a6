//! What goes in and out of the engine: wire messages, inputs and outputs.
//!
//! The engine never sends, persists or waits by itself. A driver (the nicfs daemon, the
//! model checker, the simulation) feeds it [`Input`]s one at a time and carries out the
//! [`Output`]s: it sends messages, applies or persists data, answers clients, and later feeds
//! back what completed (a received message, a finished persist). Anything the paper's
//! algorithms "spin" on is a state the engine stays in until an input changes it.
//!
//! Messages are plain enums; their wire encoding belongs to the transport. Every message of a
//! write names its record and the write's timestamp `TS_WR`; only INV carries the data.
//! In lin-scope an INV carries the scope of its write ([INV]sc); the ACK_C/VAL_C of that
//! write belong to the same scope through the write's timestamp, so they carry no tag.

use crate::ts::{NodeId, Ts};
use std::sync::Arc;

/// A record's contents (a file block, later). Cheap to clone: an INV to n-1 followers shares
/// one buffer.
pub type Value = Arc<[u8]>;

/// A client request, numbered by the driver; replies name it.
pub type OpId = u64;

/// A scope of lin-scope, named by the coordinator's client (unique at that node).
pub type ScopeId = u64;

/// A protocol message between nodes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Message<K> {
    /// Invalidation carrying the new data ([INV]sc when `scope` is set).
    Inv { key: K, ts: Ts, value: Value, scope: Option<ScopeId> },
    /// lin-synch: the follower updated and persisted the record.
    Ack { key: K, ts: Ts },
    /// The follower updated its volatile record (or skipped an obsolete write after
    /// ConsistencySpin).
    AckC { key: K, ts: Ts },
    /// The follower persisted the update (or skipped it after PersistencySpin).
    AckP { key: K, ts: Ts },
    /// lin-synch / lin-renf: the write is complete on every node, in volatile and durable
    /// memory.
    Val { key: K, ts: Ts },
    /// The write is complete consistency-wise on every node.
    ValC { key: K, ts: Ts },
    /// lin-strict: the write is persisted on every node.
    ValP { key: K, ts: Ts },
    /// [PERSIST]sc: persist every write of the scope; lists them (record, timestamp).
    Persist { scope: ScopeId, writes: Vec<(K, Ts)> },
    /// [ACK_P]sc: every listed write (or a newer one of its record) is persisted here.
    AckPScope { scope: ScopeId },
    /// [VAL_P]sc: every write of the scope is persisted on every node.
    ValPScope { scope: ScopeId, writes: Vec<(K, Ts)> },
    /// Recovery: a restarted node asks a peer for its records (docs/MINOS.md, "Crashes,
    /// recovery and rejoin"). The peer forgets the sender's acks of its writes in progress
    /// (they came from the lost incarnation) and answers with [`Message::Catchup`].
    Rejoin,
    /// Recovery: the answer to [`Message::Rejoin`], every record the peer holds (record,
    /// volatileTS, value).
    Catchup { records: Vec<(K, Ts, Value)> },
}

impl<K> Message<K> {
    /// The record a per-write message concerns (None for the scope messages).
    pub fn key(&self) -> Option<&K> {
        match self {
            Message::Inv { key, .. }
            | Message::Ack { key, .. }
            | Message::AckC { key, .. }
            | Message::AckP { key, .. }
            | Message::Val { key, .. }
            | Message::ValC { key, .. }
            | Message::ValP { key, .. } => Some(key),
            Message::Persist { .. }
            | Message::AckPScope { .. }
            | Message::ValPScope { .. }
            | Message::Rejoin
            | Message::Catchup { .. } => None,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Message::Inv { .. } => "INV",
            Message::Ack { .. } => "ACK",
            Message::AckC { .. } => "ACK_C",
            Message::AckP { .. } => "ACK_P",
            Message::Val { .. } => "VAL",
            Message::ValC { .. } => "VAL_C",
            Message::ValP { .. } => "VAL_P",
            Message::Persist { .. } => "[PERSIST]sc",
            Message::AckPScope { .. } => "[ACK_P]sc",
            Message::ValPScope { .. } => "[VAL_P]sc",
            Message::Rejoin => "REJOIN",
            Message::Catchup { .. } => "CATCHUP",
        }
    }
}

/// One event for the engine of a node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Input<K> {
    /// A local client writes `value` to `key`; in lin-scope, as part of `scope`.
    Write { op: OpId, key: K, value: Value, scope: Option<ScopeId> },
    /// A local client reads `key`.
    Read { op: OpId, key: K },
    /// A message from another node.
    Receive { from: NodeId, msg: Message<K> },
    /// A persist this engine asked for ([`Output::Persist`]) has completed: the update of
    /// `key` with timestamp `ts` is in this node's persistent memory.
    Persisted { key: K, ts: Ts },
    /// lin-scope: the client ends `scope` (its fsync); answered by [`Output::ScopeDone`].
    ScopeEnd { op: OpId, scope: ScopeId },
    /// A timeout of the driver: retransmit what is still unacknowledged (INVs, [PERSIST]sc,
    /// REJOIN) and complete writes this node holds unvalidated (a VAL lost, or a coordinator
    /// that crashed). Messages may be lost or duplicated; ticks make the protocol finish.
    Tick,
}

/// One effect the driver must carry out.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Output<K> {
    Send {
        to: NodeId,
        msg: Message<K>,
    },
    /// The local volatile record now holds `value` at `ts` (the engine keeps its own copy for
    /// reads; a driver with its own store applies it there).
    Apply {
        key: K,
        ts: Ts,
        value: Value,
    },
    /// Start persisting this update; report [`Input::Persisted`] when it is durable. Persists
    /// may complete in any order: the persistent log keeps, per record, the newest timestamp.
    Persist {
        key: K,
        ts: Ts,
        value: Value,
    },
    /// The client write `op` returns. `ts` is the write's timestamp.
    WriteDone {
        op: OpId,
        key: K,
        ts: Ts,
    },
    /// The client read `op` returns `value`, written by the write with timestamp `ts`.
    ReadDone {
        op: OpId,
        key: K,
        ts: Ts,
        value: Value,
    },
    /// The scope end `op` returns: every write of the scope is persisted on every node.
    ScopeDone {
        op: OpId,
        scope: ScopeId,
    },
}
