//! The protocol engine of one node: coordinator of its own clients' writes, follower of
//! every other node's.
//!
//! [`Engine::on_input`] takes one [`Input`] and returns the [`Output`]s it causes. The
//! engine keeps, besides the per-record metadata ([`Record`]), the bookkeeping of what it
//! waits for:
//!
//! - writes it coordinates, with the followers that acknowledged them (Table I's
//!   `RcvedACK_SenderID` sets) and how far they got (`coordinator.rs`);
//! - follower acks that wait for a local persist (synch ACK, strict/renf ACK_P);
//! - obsolete writes in `handleObsolete`: ConsistencySpin, then (synch, strict, renf)
//!   PersistencySpin, before the ack or the client's return (`follower.rs`);
//! - reads waiting for a record's RDLock;
//! - lin-scope scope ends and [PERSIST]sc requests waiting for persists and [ACK_P]sc;
//! - after a restart ([`Engine::recover`]), the peers whose catch-up it still waits for and
//!   the client requests held until then (`recovery.rs`).
//!
//! Messages may be lost or duplicated and nodes may crash: [`Input::Tick`] (a driver
//! timeout) retransmits what is unacknowledged and completes writes left unvalidated
//! (`recovery.rs`); every message is idempotent (docs/MINOS.md, "Crashes, recovery and
//! rejoin").
//!
//! After each input the engine re-evaluates every wait ([`Engine::progress`]) until none
//! can advance: a spin of the paper is a wait whose condition is re-checked whenever the
//! state changes. Every wait depends only on newer writes (an obsolete write waits for the
//! write that made it obsolete; acks never wait for older writes), so the newest write in
//! flight can always advance: no wait cycle, no deadlock.
//!
//! Collections are ordered (BTreeMap/BTreeSet) so that the engine's state is deterministic,
//! hashable and comparable, as the model checker needs.

mod coordinator;
mod follower;
mod recovery;

use crate::mode::{Mode, Mutation};
use crate::msg::{Input, Message, OpId, Output, ScopeId};
use crate::record::Record;
use crate::ts::{NodeId, NodeSet, Ts};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::hash::Hash;

/// What a record key must be: a block (inode, index) later, small integers in the checker.
pub trait Key: Clone + Ord + Hash + Debug {}
impl<T: Clone + Ord + Hash + Debug> Key for T {}

/// Static configuration of a node's engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    pub id: NodeId,
    /// Cluster size; the nodes are `0..nodes` and every record is replicated on all of them.
    pub nodes: u32,
    pub mode: Mode,
    /// Only the mutation tests set this.
    pub mutation: Mutation,
}

impl Config {
    pub fn new(id: NodeId, nodes: u32, mode: Mode) -> Config {
        assert!((1..=NodeSet::MAX_NODES).contains(&nodes) && id < nodes, "node {id} of {nodes}");
        Config { id, nodes, mode, mutation: Mutation::None }
    }
}

/// How far a coordinated write got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// Waiting for the consistency acks (ACK / ACK_C) and, in synch and strict, the
    /// coordinator's own persist (step e).
    Consistency,
    /// strict: VAL_C sent, waiting for ACK_P; renf: returned to the client, waiting for
    /// ACK_P and the own persist before VAL.
    Persistency,
}

/// A write this node coordinates, until its last message is sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CoordWrite {
    /// The client write; `None` for a write this node completes on behalf of another
    /// (re-driven on a tick: its VAL was lost or its coordinator crashed).
    pub op: Option<OpId>,
    /// What its INV carries, for retransmissions.
    pub value: crate::msg::Value,
    pub scope: Option<ScopeId>,
    pub acks_c: NodeSet,
    pub acks_p: NodeSet,
    pub stage: Stage,
}

/// Where an obsolete write is in handleObsolete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpinStage {
    Consistency,
    Persistency,
}

/// Who waits for an obsolete write's handleObsolete to finish.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpinFor {
    /// The local client that issued it (coordinator side).
    Client(OpId),
    /// The coordinator that sent the INV (follower side).
    Coordinator(NodeId),
}

/// An obsolete write spinning: `target` is the volatileTS that made it obsolete; the spin
/// ends when glb_volatileTS (then glb_durableTS) reaches it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Spin<K> {
    pub key: K,
    pub ts: Ts,
    pub target: Ts,
    pub stage: SpinStage,
    pub on_behalf: SpinFor,
}

/// A scope end in progress at its coordinator.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ScopeEnd<K> {
    pub op: OpId,
    pub writes: Vec<(K, Ts)>,
    pub acks: NodeSet,
}

/// A [PERSIST]sc a follower received: (coordinator, scope, the scope's writes).
pub(crate) type ScopePersist<K> = (NodeId, ScopeId, Vec<(K, Ts)>);

/// The MINOS engine of one node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Engine<K> {
    cfg: Config,
    records: BTreeMap<K, Record>,
    /// Writes this node coordinates, by (record, TS_WR).
    coord: BTreeMap<(K, Ts), CoordWrite>,
    /// Follower acks waiting for the local persist of (record, ts): (key, ts, coordinator).
    persist_acks: BTreeSet<(K, Ts, NodeId)>,
    spins: BTreeSet<Spin<K>>,
    /// Reads waiting for the RDLock of their record.
    reads: BTreeSet<(K, OpId)>,
    /// lin-scope: the writes of each open scope of the local clients.
    open_scopes: BTreeMap<ScopeId, Vec<(K, Ts)>>,
    scope_ends: BTreeMap<ScopeId, ScopeEnd<K>>,
    /// [PERSIST]sc received: (coordinator, scope, writes) waiting for local persists.
    scope_persists: BTreeSet<ScopePersist<K>>,
    /// After a restart: the peers whose [`Message::Catchup`] is still awaited (`None` once
    /// every peer answered, and on a node that never crashed).
    rejoining: Option<NodeSet>,
    /// Client requests that arrived while rejoining, handled in order once caught up.
    held: Vec<Input<K>>,
}

impl<K: Key> Engine<K> {
    pub fn new(cfg: Config) -> Engine<K> {
        Engine {
            cfg,
            records: BTreeMap::new(),
            coord: BTreeMap::new(),
            persist_acks: BTreeSet::new(),
            spins: BTreeSet::new(),
            reads: BTreeSet::new(),
            open_scopes: BTreeMap::new(),
            scope_ends: BTreeMap::new(),
            scope_persists: BTreeSet::new(),
            rejoining: None,
            held: Vec::new(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    pub fn mode(&self) -> Mode {
        self.cfg.mode
    }

    /// This node's metadata of `key` (the default record if no write reached it).
    pub fn record(&self, key: &K) -> Record {
        self.records.get(key).cloned().unwrap_or_default()
    }

    pub fn records(&self) -> impl Iterator<Item = (&K, &Record)> {
        self.records.iter()
    }

    /// Writes this node coordinates that have not sent their last message.
    pub fn coordinating(&self) -> impl Iterator<Item = (&K, Ts, &CoordWrite)> {
        self.coord.iter().map(|((k, ts), w)| (k, *ts, w))
    }

    /// The followers of this node's writes: every other node.
    pub fn followers(&self) -> NodeSet {
        NodeSet::all_but(self.cfg.nodes, self.cfg.id)
    }

    /// Scope ends in progress (coordinator side).
    pub fn scope_ends(&self) -> impl Iterator<Item = (ScopeId, &ScopeEnd<K>)> {
        self.scope_ends.iter().map(|(s, e)| (*s, e))
    }

    /// Obsolete writes in handleObsolete.
    pub fn spins(&self) -> impl Iterator<Item = &Spin<K>> {
        self.spins.iter()
    }

    /// Nothing waits: no write, spin, read, persist-ack or scope in progress.
    pub fn is_idle(&self) -> bool {
        self.coord.is_empty()
            && self.persist_acks.is_empty()
            && self.spins.is_empty()
            && self.reads.is_empty()
            && self.scope_ends.is_empty()
            && self.scope_persists.is_empty()
            && self.rejoining.is_none()
            && self.held.is_empty()
    }

    /// Restarted and still catching up from its peers: serves no client yet.
    pub fn is_rejoining(&self) -> bool {
        self.rejoining.is_some()
    }

    /// A read of `key` would be answered now: caught up and the record's RDLock free.
    pub fn readable(&self, key: &K) -> bool {
        self.rejoining.is_none() && self.records.get(key).is_none_or(|r| r.rdlock.is_none())
    }

    /// Handle one input; returns what the driver must do.
    pub fn on_input(&mut self, input: Input<K>) -> Vec<Output<K>> {
        let mut out = Vec::new();
        self.handle(input, &mut out);
        out
    }

    /// Like [`Engine::on_input`], appending to a caller's buffer.
    pub fn handle(&mut self, input: Input<K>, out: &mut Vec<Output<K>>) {
        if self.rejoining.is_some()
            && matches!(input, Input::Write { .. } | Input::Read { .. } | Input::ScopeEnd { .. })
        {
            self.held.push(input);
            return;
        }
        match input {
            Input::Write { op, key, value, scope } => self.client_write(op, key, value, scope, out),
            Input::Read { op, key } => {
                self.reads.insert((key, op));
            }
            Input::Receive { from, msg } => self.receive(from, msg, out),
            Input::Persisted { key, ts } => {
                let rec = self.records.entry(key).or_default();
                rec.durable_ts = rec.durable_ts.max(ts);
            }
            Input::ScopeEnd { op, scope } => self.scope_end(op, scope, out),
            Input::Tick => self.tick(out),
        }
        self.progress(out);
        if self.rejoining.is_none() && !self.held.is_empty() {
            for input in std::mem::take(&mut self.held) {
                self.handle(input, out);
            }
        }
    }

    fn receive(&mut self, from: NodeId, msg: Message<K>, out: &mut Vec<Output<K>>) {
        match msg {
            Message::Inv { key, ts, value, scope: _ } => self.on_inv(from, key, ts, value, out),
            Message::Ack { key, ts } => self.on_ack(from, key, ts, true, true),
            Message::AckC { key, ts } => self.on_ack(from, key, ts, true, false),
            Message::AckP { key, ts } => self.on_ack(from, key, ts, false, true),
            Message::Val { key, ts } => self.on_val(key, ts, true, true),
            Message::ValC { key, ts } => self.on_val(key, ts, true, false),
            // VAL_P is sent only after VAL_C, so it implies it: a VAL_P that overtakes its
            // VAL_C on the network does the VAL_C's work too.
            Message::ValP { key, ts } => self.on_val(key, ts, true, true),
            Message::Persist { scope, writes } => {
                self.scope_persists.insert((from, scope, writes));
            }
            Message::AckPScope { scope } => {
                if let Some(end) = self.scope_ends.get_mut(&scope) {
                    end.acks.insert(from);
                }
            }
            Message::ValPScope { scope: _, writes } => {
                for (key, ts) in writes {
                    let rec = self.rec(&key);
                    // As for VAL: not for a write this node lost in a crash.
                    if ts <= rec.volatile_ts {
                        rec.raise_glb_durable(ts);
                    }
                }
            }
            Message::Rejoin => self.on_rejoin(from, out),
            Message::Catchup { records } => self.on_catchup(from, records, out),
        }
    }

    fn send_all(&self, msg: Message<K>, out: &mut Vec<Output<K>>) {
        for to in self.followers().iter() {
            out.push(Output::Send { to, msg: msg.clone() });
        }
    }

    /// The record of `key`, created with its defaults on first use.
    fn rec(&mut self, key: &K) -> &mut Record {
        if !self.records.contains_key(key) {
            self.records.insert(key.clone(), Record::default());
        }
        self.records.get_mut(key).expect("just inserted")
    }

    fn durable_here(&self, key: &K, ts: Ts) -> bool {
        self.records.get(key).is_some_and(|r| r.durable_ts >= ts)
    }

    /// Re-evaluate every wait until none advances.
    fn progress(&mut self, out: &mut Vec<Output<K>>) {
        loop {
            let mut moved = false;
            moved |= self.progress_writes(out);
            moved |= self.progress_spins(out);
            moved |= self.progress_persist_acks(out);
            moved |= self.progress_scopes(out);
            moved |= self.progress_reads(out);
            if !moved {
                break;
            }
        }
    }

    /// Reads proceed once their record's RDLock is free (section III-D).
    fn progress_reads(&mut self, out: &mut Vec<Output<K>>) -> bool {
        let ready: Vec<(K, OpId)> = self
            .reads
            .iter()
            .filter(|(k, _)| self.records.get(k).is_none_or(|r| r.rdlock.is_none()))
            .cloned()
            .collect();
        for (key, op) in &ready {
            self.reads.remove(&(key.clone(), *op));
            let rec = self.record(key);
            out.push(Output::ReadDone { op: *op, key: key.clone(), ts: rec.volatile_ts, value: rec.value });
        }
        !ready.is_empty()
    }
}

#[cfg(test)]
mod tests;
