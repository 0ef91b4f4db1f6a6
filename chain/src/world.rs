//! The simulated cluster and its drivers: engines, the cluster manager's view, every node's
//! PM, the network and the work under way — and the checks its drivers make as they carry
//! out the engines' outputs. The seeded simulation ([`crate::sim`]) and the model checker
//! ([`crate::check`]) both drive a [`World`]; it draws no random number itself.
//!
//! The checks, made after every step (each returns the violation as an `Err`):
//!
//! - a persisted chunk carries the primary's bytes at its position, so every copy's durable
//!   prefix is a prefix of the primary's log;
//! - a completed fsync's targets are durable (in PM) on every member of the chain in the
//!   primary's view at completion, and stay durable on each of them while it remains in the
//!   cluster manager's view;
//! - the replicated LSN and the reclaim point never pass what every member of the primary's
//!   chain has persisted, and the reclaim point never passes what is published locally; the
//!   primary never ships bytes from reclaimed space;
//! - a replica publishes only what its PM holds durable, in order;
//! - a message of another epoch than the receiver's changes nothing in the engine (its only
//!   possible output is the newer-epoch report);
//! - [`World::final_state`], once the network is quiet: no fsync waits, every copy holds and
//!   published the whole log, every primary reclaimed it.

use crate::engine::{Config, Engine, Mutation};
use crate::msg::{Class, Input, Message, Output, Recovered};
use crate::ranges::Prefix;
use crate::types::{Data, Epoch, Lsn, NodeId, OpId, StreamId, View};
use std::collections::BTreeMap;

/// What a node's PM holds of another node's log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CopyPm {
    pub bytes: Vec<u8>,
    /// The persisted ranges; a crash keeps only the contiguous prefix (a log's valid prefix).
    pub persisted: Prefix,
    pub published: Prefix,
    /// The end of the last publication asked (checks the order).
    pub asked: Lsn,
}

/// What a node's PM holds of its own log (the bytes are `Sim::truth`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LogPm {
    pub published: Lsn,
    pub replicated: Lsn,
    pub reclaimed: Lsn,
}

/// Something under way in the cluster, carried out when the scheduler picks it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    Msg(NodeId, NodeId, Message),
    Persist(NodeId, StreamId, Lsn, Data),
    Publish(NodeId, StreamId, Lsn, Lsn),
    Rebase(NodeId, StreamId, Lsn),
    View(NodeId, View),
}

impl Event {
    /// The node that carries it out.
    pub fn node(&self) -> NodeId {
        match self {
            Event::Msg(_, to, _) => *to,
            Event::Persist(n, ..) | Event::Publish(n, ..) | Event::Rebase(n, ..) | Event::View(n, _) => *n,
        }
    }
}

/// A client's fsync in flight: its op, its targets, the epoch it started in.
pub type Fsync = (OpId, Vec<(StreamId, Lsn)>, Epoch);

/// What a run did (the drivers count it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SimReport {
    pub steps: usize,
    pub appended: u64,
    pub fsyncs: usize,
    pub fsyncs_done: usize,
    /// Fsyncs that completed in a later epoch than they started in.
    pub fsyncs_across_views: usize,
    /// Fsyncs abandoned by a crash of their node.
    pub abandoned: usize,
    pub messages: usize,
    pub latency_messages: usize,
    pub persists: usize,
    pub publishes: usize,
    pub duplicated: usize,
    pub lost: usize,
    pub crashes: usize,
    pub view_changes: usize,
    pub ticks: usize,
    /// Messages of another epoch delivered (and checked to change nothing).
    pub stale_delivered: usize,
    pub newer_epoch_reported: usize,
    pub rebases: usize,
    pub reclaims: usize,
    /// Replicated LSNs raised (checked against every member's PM).
    pub replicated_raised: usize,
}

/// The static parameters of a world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Params {
    pub nodes: u32,
    pub replicas: usize,
    pub chunk: Lsn,
    pub mutation: Mutation,
}

/// Counters, kept out of the world's identity (the model checker compares worlds).
#[derive(Clone, Debug, Default)]
pub struct Counters(pub SimReport);

impl PartialEq for Counters {
    fn eq(&self, _: &Counters) -> bool {
        true
    }
}

impl Eq for Counters {}

impl std::hash::Hash for Counters {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// The cluster and what its drivers hold.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    pub params: Params,
    pub engines: Vec<Engine>,
    /// The cluster manager's view.
    pub view: View,
    /// Every log's bytes (the primary's log; it never loses them).
    pub truth: BTreeMap<StreamId, Vec<u8>>,
    pub logs: Vec<BTreeMap<u32, LogPm>>,
    pub copies: Vec<BTreeMap<StreamId, CopyPm>>,
    /// Each node's client's fsync in flight.
    pub fsync: Vec<Option<Fsync>>,
    /// Per (log, node): the highest LSN a completed fsync promised durable on that node.
    pub promised: BTreeMap<(StreamId, NodeId), Lsn>,
    pub pending: Vec<Event>,
    pub report: Counters,
    pub next_op: OpId,
}

pub fn stream(node: NodeId, slot: u32) -> StreamId {
    StreamId { primary: node, slot }
}

impl World {
    /// A cluster of `params.nodes` fresh nodes; the first view (every node) is on its way.
    pub fn new(params: Params) -> World {
        let n = params.nodes as usize;
        let mut w = World {
            params,
            engines: vec![],
            view: View { epoch: 0, nodes: vec![] },
            truth: BTreeMap::new(),
            logs: vec![BTreeMap::new(); n],
            copies: vec![BTreeMap::new(); n],
            fsync: vec![None; n],
            promised: BTreeMap::new(),
            pending: vec![],
            report: Counters::default(),
            next_op: 0,
        };
        w.engines = (0..params.nodes).map(|i| Engine::new(w.engine_cfg(i))).collect();
        w.new_view((0..params.nodes).collect());
        w.report.0.view_changes = 0;
        w
    }

    fn engine_cfg(&self, id: NodeId) -> Config {
        let p = &self.params;
        Config { mutation: p.mutation, ..Config::new(id, p.replicas, p.chunk) }
    }

    /// How far `node` holds `s` durable: its PM's copy (or, on the primary, the log).
    pub fn durable(&self, node: NodeId, s: StreamId) -> Lsn {
        if s.primary == node {
            return self.truth.get(&s).map_or(0, |t| t.len() as Lsn);
        }
        self.copies[node as usize].get(&s).map_or(0, |c| c.persisted.end())
    }

    /// The other members of `s`'s chain in `node`'s engine's view.
    fn members(&self, node: NodeId, s: StreamId) -> Vec<NodeId> {
        let Some(v) = self.engines[node as usize].view() else { return vec![] };
        v.chain(s, self.params.replicas).into_iter().skip(1).collect()
    }

    /// Feed `input` to `node` and carry out its outputs.
    pub fn step(&mut self, node: NodeId, input: Input) -> Result<(), String> {
        let stale = match &input {
            Input::Receive { msg, .. } => msg.epoch() != self.engines[node as usize].epoch(),
            _ => false,
        };
        let before = stale.then(|| self.engines[node as usize].clone());
        let outputs = self.engines[node as usize].on_input(input);
        if let Some(before) = before {
            self.report.0.stale_delivered += 1;
            if before != self.engines[node as usize] || outputs.iter().any(|o| !matches!(o, Output::NewerEpoch { .. }))
            {
                return Err(format!("a message of another epoch changed node {node}: {outputs:?}"));
            }
        }
        for o in outputs {
            self.output(node, o)?;
        }
        self.check_promises()
    }

    fn output(&mut self, node: NodeId, o: Output) -> Result<(), String> {
        let n = node as usize;
        match o {
            Output::Send { to, msg } => self.send(node, to, msg),
            Output::SendLog { to, slot, epoch, start, end, urgent } => {
                let s = stream(node, slot);
                let log = self.truth.get(&s).map(Vec::as_slice).unwrap_or_default();
                let reclaimed = self.logs[n].get(&slot).map_or(0, |l| l.reclaimed);
                if start < reclaimed || end > log.len() as Lsn || start >= end {
                    return Err(format!(
                        "node {node} ships [{start}, {end}) of {s}: log is {} bytes, reclaimed up to {reclaimed}",
                        log.len()
                    ));
                }
                let data = Data::new(log[start as usize..end as usize].to_vec());
                self.send(node, to, Message::Chunk { stream: s, epoch, start, data, urgent });
            }
            Output::Persist { stream: s, start, data } => {
                let t = self.truth.get(&s).map(Vec::as_slice).unwrap_or_default();
                let end = start as usize + data.len();
                if end > t.len() || t[start as usize..end] != *data.as_slice() {
                    return Err(format!("node {node} persists bytes of {s} at {start} that are not the primary's"));
                }
                self.report.0.persists += 1;
                self.pending.push(Event::Persist(node, s, start, data));
            }
            Output::Publish { stream: s, start, end } => {
                let c = self.copies[n].entry(s).or_default();
                if end > c.persisted.end() {
                    return Err(format!(
                        "node {node} publishes {s} up to {end}, its PM holds it durable up to {}",
                        c.persisted.end()
                    ));
                }
                if start != c.asked {
                    return Err(format!("node {node} publishes {s} from {start}, out of order (asked {})", c.asked));
                }
                c.asked = end;
                self.report.0.publishes += 1;
                self.pending.push(Event::Publish(node, s, start, end));
            }
            Output::Rebase { stream: s, lsn } => {
                self.report.0.rebases += 1;
                self.pending.push(Event::Rebase(node, s, lsn));
            }
            Output::Replicated { slot, lsn } => {
                let s = stream(node, slot);
                for m in self.members(node, s) {
                    if self.durable(m, s) < lsn {
                        return Err(format!("{s} replicated up to {lsn}, member {m} holds {}", self.durable(m, s)));
                    }
                }
                self.report.0.replicated_raised += 1;
                self.logs[n].entry(slot).or_default().replicated = lsn;
            }
            Output::Reclaim { stream: s, upto } => {
                self.report.0.reclaims += 1;
                if s.primary == node {
                    let log = self.logs[n].entry(s.slot).or_default();
                    if upto > log.published {
                        return Err(format!("node {node} reclaims {s} to {upto}, published {}", log.published));
                    }
                    log.reclaimed = upto;
                    for m in self.members(node, s) {
                        if self.durable(m, s) < upto {
                            return Err(format!(
                                "node {node} reclaims {s} to {upto}, member {m} holds it durable to {}",
                                self.durable(m, s)
                            ));
                        }
                    }
                } else {
                    let c = self.copies[n].entry(s).or_default();
                    if upto > c.published.end() || upto > c.persisted.end() {
                        return Err(format!("node {node} reclaims its copy of {s} to {upto} beyond what it published"));
                    }
                }
            }
            Output::FsyncDone { op } => {
                let Some((mine, targets, epoch)) = self.fsync[n].take() else {
                    return Err(format!("node {node} completes fsync {op}, none in flight"));
                };
                if mine != op {
                    return Err(format!("node {node} completes fsync {op}, {mine} is in flight"));
                }
                self.report.0.fsyncs_done += 1;
                if self.engines[n].epoch() > epoch {
                    self.report.0.fsyncs_across_views += 1;
                }
                for (s, lsn) in targets {
                    for m in self.members(node, s) {
                        if self.durable(m, s) < lsn {
                            return Err(format!(
                                "fsync {op} of node {node} completed with {s} at {lsn} durable on member {m} only to {}",
                                self.durable(m, s)
                            ));
                        }
                        let p = self.promised.entry((s, m)).or_default();
                        *p = (*p).max(lsn);
                    }
                }
            }
            Output::FsyncRefused { op, stream: s } => {
                return Err(format!("fsync {op} of node {node} refused for {s}"));
            }
            Output::NewerEpoch { epoch, .. } => {
                self.report.0.newer_epoch_reported += 1;
                if self.view.epoch >= epoch {
                    self.pending.push(Event::View(node, self.view.clone()));
                }
            }
        }
        Ok(())
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: Message) {
        self.report.0.messages += 1;
        if msg.class() == Class::Latency {
            self.report.0.latency_messages += 1;
        }
        self.pending.push(Event::Msg(from, to, msg));
    }

    /// Promised durability holds on every node still in the cluster manager's view.
    pub fn check_promises(&self) -> Result<(), String> {
        for (&(s, m), &lsn) in &self.promised {
            if self.view.contains(m) && self.durable(m, s) < lsn {
                return Err(format!("node {m} lost {s} below {lsn}, promised by an fsync"));
            }
        }
        Ok(())
    }

    /// Lose pending message `i`.
    pub fn lose(&mut self, i: usize) {
        self.pending.remove(i);
        self.report.0.lost += 1;
    }

    /// Carry out pending event `i`; a message is delivered, and kept for a second delivery
    /// if `keep_copy`.
    pub fn carry_out(&mut self, i: usize, keep_copy: bool) -> Result<(), String> {
        match self.pending.remove(i) {
            Event::Msg(from, to, msg) => {
                if keep_copy {
                    self.report.0.duplicated += 1;
                    self.pending.push(Event::Msg(from, to, msg.clone()));
                }
                self.step(to, Input::Receive { from, msg })
            }
            Event::Persist(node, s, start, data) => {
                let c = self.copies[node as usize].entry(s).or_default();
                let end = start as usize + data.len();
                if c.bytes.len() < end {
                    c.bytes.resize(end, 0);
                }
                c.bytes[start as usize..end].copy_from_slice(data.as_slice());
                c.persisted.complete(start, end as Lsn);
                self.step(node, Input::Persisted { stream: s, start, end: end as Lsn })
            }
            Event::Publish(node, s, start, end) => {
                self.copies[node as usize].entry(s).or_default().published.complete(start, end);
                self.step(node, Input::Published { stream: s, start, end })
            }
            Event::Rebase(node, s, lsn) => {
                // The state transfer: the copy becomes the log's first `lsn` bytes, published.
                let t = self.truth.get(&s).map(Vec::as_slice).unwrap_or_default();
                if lsn as usize > t.len() {
                    return Err(format!("node {node} rebases {s} to {lsn} beyond the log's {} bytes", t.len()));
                }
                let c = self.copies[node as usize].entry(s).or_default();
                if c.bytes.len() < lsn as usize {
                    c.bytes.resize(lsn as usize, 0);
                }
                c.bytes[..lsn as usize].copy_from_slice(&t[..lsn as usize]);
                c.persisted.raise(lsn);
                c.published.raise(lsn);
                c.asked = c.asked.max(lsn);
                self.step(node, Input::Rebased { stream: s, lsn })
            }
            Event::View(node, v) => self.step(node, Input::View(v)),
        }
    }

    /// A new view from the cluster manager, announced to every node.
    pub fn new_view(&mut self, nodes: Vec<NodeId>) {
        self.report.0.view_changes += 1;
        self.view = View { epoch: self.view.epoch + 1, nodes };
        // Promises to nodes that left are void: they are out of the chains.
        let view = self.view.clone();
        self.promised.retain(|(_, m), _| view.contains(*m));
        for n in 0..self.params.nodes {
            self.pending.push(Event::View(n, view.clone()));
        }
    }

    pub fn crash(&mut self, node: NodeId) -> Result<(), String> {
        let n = node as usize;
        self.report.0.crashes += 1;
        for c in self.copies[n].values_mut() {
            // The log's valid prefix survives; what was persisted beyond a hole does not.
            c.persisted = Prefix::at(c.persisted.end());
            c.bytes.truncate(c.persisted.end() as usize);
            c.published = Prefix::at(c.published.end());
            c.asked = c.published.end();
        }
        let mut recovered = vec![];
        for (s, t) in &self.truth {
            if s.primary == node {
                let l = self.logs[n].get(&s.slot).copied().unwrap_or_default();
                recovered.push(Recovered::Primary {
                    slot: s.slot,
                    appended: t.len() as Lsn,
                    published: l.published,
                    replicated: l.replicated,
                    reclaimed: l.reclaimed,
                });
            }
        }
        for (s, c) in &self.copies[n] {
            recovered.push(Recovered::Replica { stream: *s, durable: c.persisted.end(), published: c.published.end() });
        }
        self.engines[n] = Engine::recover(self.engine_cfg(node), recovered);
        self.pending.retain(|e| e.node() != node && !matches!(e, Event::Msg(from, ..) if *from == node));
        if self.fsync[n].take().is_some() {
            self.report.0.abandoned += 1;
        }
        // Restarted, it registers with the cluster manager and learns the view.
        self.pending.push(Event::View(node, self.view.clone()));
        Ok(())
    }

    /// A client of `node` appends `bytes` to log `slot`.
    pub fn append(&mut self, node: NodeId, slot: u32, bytes: &[u8]) -> Result<(), String> {
        let t = self.truth.entry(stream(node, slot)).or_default();
        t.extend_from_slice(bytes);
        let end = t.len() as Lsn;
        self.report.0.appended += bytes.len() as u64;
        self.step(node, Input::Append { slot, end })
    }

    /// A client of `node` calls fsync: its log `slot` and the lease records to their ends.
    pub fn start_fsync(&mut self, node: NodeId, slots: &[u32]) -> Result<(), String> {
        let targets: Vec<(StreamId, Lsn)> =
            slots.iter().map(|&slot| (stream(node, slot), self.durable(node, stream(node, slot)))).collect();
        self.next_op += 1;
        let op = self.next_op;
        self.fsync[node as usize] = Some((op, targets.clone(), self.engines[node as usize].epoch()));
        self.report.0.fsyncs += 1;
        self.step(node, Input::Fsync { op, targets })
    }

    /// The publishing pipeline of `node` publishes some of its log `slot`.
    pub fn publish_primary(&mut self, node: NodeId, slot: u32, all: bool) -> Result<(), String> {
        let s = stream(node, slot);
        let len = self.durable(node, s);
        let chunk = self.params.chunk;
        let log = self.logs[node as usize].entry(slot).or_default();
        let start = log.published;
        let end = if all { len } else { len.min(start + chunk) };
        if end <= start {
            return Ok(());
        }
        log.published = end;
        self.step(node, Input::Published { stream: s, start, end })
    }

    /// The nodes whose timeout would act.
    pub fn ticking(&self) -> Vec<NodeId> {
        (0..self.params.nodes).filter(|&i| self.engines[i as usize].tick_would_act()).collect()
    }

    /// Liveness, once every node is in the view and the network went quiet: no fsync
    /// waits, every member of each log's chain holds and has published the whole log, and
    /// every primary has reclaimed it all.
    pub fn final_state(&self) -> Result<(), String> {
        if let Some(i) = self.fsync.iter().position(Option::is_some) {
            return Err(format!("stalled: the fsync of node {i} never completed on a quiet network"));
        }
        for (s, t) in &self.truth {
            let chain = self.view.chain(*s, self.params.replicas);
            for &m in chain.iter().skip(1) {
                let c = self.copies[m as usize].get(s).cloned().unwrap_or_default();
                let len = t.len() as Lsn;
                if c.persisted.end() != len || c.published.end() != len || c.bytes[..] != t[..] {
                    return Err(format!(
                        "final state: node {m}'s copy of {s} is durable to {}, published to {}, the log has {len} bytes",
                        c.persisted.end(),
                        c.published.end()
                    ));
                }
            }
            let reclaimed = self.logs[s.primary as usize].get(&s.slot).map_or(0, |l| l.reclaimed);
            if reclaimed != t.len() as Lsn {
                return Err(format!("final state: {s} reclaimed to {reclaimed} of {} bytes", t.len()));
            }
        }
        Ok(())
    }
}
