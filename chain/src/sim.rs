//! Deterministic simulation: a cluster of engines, clients appending to their logs and
//! calling fsync, the cluster manager changing the view, messages lost, duplicated and
//! reordered, persists and publications completing in any order, nodes crashing and
//! restarting — all drawn from one seeded generator, so a seed replays a run exactly.
//!
//! At each step the scheduler either lets a client act (append bytes to its log or to its
//! node's lease stream, or start an fsync of both), lets a primary's publishing pipeline
//! publish, changes the view (removes a node, or adds a removed one back), crashes and
//! restarts a node, fires a node's timeout, or carries out one pending event picked
//! uniformly at random (which reorders everything). A delivered message is sometimes kept
//! for a second delivery or lost instead. A crash loses the node's engine, its messages in
//! flight, its persists and publications under way and its client's fsync; its PM keeps its
//! logs, the valid prefix of each copy, what it published and its slot headers; it restarts
//! at once from them ([`Engine::recover`]) and asks the cluster manager for the view.
//!
//! The driver ([`Sim`]) carries out every output and checks, after every step:
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
//! - liveness: after the last operation, every node is put back in the view and the network
//!   goes quiet (no more faults, timeouts until nothing is left to do); then every fsync
//!   must have completed, a last fsync of every log must complete, every copy must hold and
//!   have published the whole log, and every primary must have reclaimed it all.
//!
//! [`SimReport`] counts what happened, so tests can show each check was reached.

use crate::engine::{Config, Engine, Mutation};
use crate::msg::{Class, Input, Message, Output, Recovered};
use crate::ranges::Prefix;
use crate::types::{Data, Epoch, Lsn, NodeId, OpId, StreamId, View};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// The lease records of a node are the log in this slot.
pub const LEASE_SLOT: u32 = 0;

#[derive(Clone, Debug)]
pub struct SimCfg {
    pub nodes: u32,
    /// Replicas per log besides the primary.
    pub replicas: usize,
    /// Proactive shipping unit, in bytes.
    pub chunk: Lsn,
    /// Client logs per node (slots 1..=logs; slot 0 holds the lease records).
    pub logs: u32,
    /// Client operations (appends and fsyncs) in all.
    pub ops: usize,
    /// Share of fsyncs among client operations, in percent.
    pub fsync_percent: u32,
    /// Per mille of deliveries that keep a copy for a second delivery.
    pub dup_permille: u32,
    /// Per mille of messages lost.
    pub drop_permille: u32,
    /// Per mille of deliveries that may overtake earlier messages of their connection (the
    /// rest deliver the oldest message of the connection picked, as TCP does; connections
    /// reorder freely among themselves).
    pub reorder_permille: u32,
    /// Per 100,000 steps: timeouts of a random node (also whenever nothing is pending).
    /// Timeouts are long: a few per thousand deliveries.
    pub tick_per_100k: u32,
    /// Per 100,000 steps: crashes (with restart) and view changes.
    pub crash_per_100k: u32,
    pub view_change_per_100k: u32,
    pub seed: u64,
    pub mutation: Mutation,
}

impl SimCfg {
    /// The CI mix: 5 nodes, chains of 3, 2 % duplicates, 2 % losses, 5 % of deliveries
    /// overtaking their connection, a crash every ~1,000 steps, a view change every ~700.
    pub fn new(ops: usize, seed: u64) -> SimCfg {
        SimCfg {
            nodes: 5,
            replicas: 2,
            chunk: 64,
            logs: 2,
            ops,
            fsync_percent: 15,
            dup_permille: 20,
            drop_permille: 20,
            reorder_permille: 50,
            tick_per_100k: 200,
            crash_per_100k: 100,
            view_change_per_100k: 150,
            seed,
            mutation: Mutation::None,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
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

/// What a node's PM holds of another node's log.
#[derive(Clone, Debug, Default)]
struct CopyPm {
    bytes: Vec<u8>,
    /// The persisted ranges; a crash keeps only the contiguous prefix (a log's valid prefix).
    persisted: Prefix,
    published: Prefix,
    /// The end of the last publication asked (checks the order).
    asked: Lsn,
}

/// What a node's PM holds of its own log (the bytes are `Sim::truth`).
#[derive(Clone, Copy, Debug, Default)]
struct LogPm {
    published: Lsn,
    replicated: Lsn,
    reclaimed: Lsn,
}

enum Event {
    Msg(NodeId, NodeId, Message),
    Persist(NodeId, StreamId, Lsn, Data),
    Publish(NodeId, StreamId, Lsn, Lsn),
    Rebase(NodeId, StreamId, Lsn),
    View(NodeId, View),
}

impl Event {
    fn node(&self) -> NodeId {
        match self {
            Event::Msg(_, to, _) => *to,
            Event::Persist(n, ..) | Event::Publish(n, ..) | Event::Rebase(n, ..) | Event::View(n, _) => *n,
        }
    }
}

/// A client's fsync in flight: its op, its targets, the epoch it started in.
type Fsync = (OpId, Vec<(StreamId, Lsn)>, Epoch);

struct Sim<'a> {
    cfg: &'a SimCfg,
    engines: Vec<Engine>,
    /// The cluster manager's view.
    view: View,
    /// Every log's bytes (the primary's log; it never loses them).
    truth: BTreeMap<StreamId, Vec<u8>>,
    logs: Vec<BTreeMap<u32, LogPm>>,
    copies: Vec<BTreeMap<StreamId, CopyPm>>,
    fsync: Vec<Option<Fsync>>,
    /// Per (log, node): the highest LSN a completed fsync promised durable on that node.
    promised: BTreeMap<(StreamId, NodeId), Lsn>,
    pending: Vec<Event>,
    report: SimReport,
    next_op: OpId,
}

fn stream(node: NodeId, slot: u32) -> StreamId {
    StreamId { primary: node, slot }
}

impl Sim<'_> {
    fn engine_cfg(&self, id: NodeId) -> Config {
        Config { mutation: self.cfg.mutation, ..Config::new(id, self.cfg.replicas, self.cfg.chunk) }
    }

    fn durable(&self, node: NodeId, s: StreamId) -> Lsn {
        if s.primary == node {
            return self.truth.get(&s).map_or(0, |t| t.len() as Lsn);
        }
        self.copies[node as usize].get(&s).map_or(0, |c| c.persisted.end())
    }

    /// The other members of `s`'s chain in `node`'s engine's view.
    fn members(&self, node: NodeId, s: StreamId) -> Vec<NodeId> {
        let Some(v) = self.engines[node as usize].view() else { return vec![] };
        v.chain(s, self.cfg.replicas).into_iter().skip(1).collect()
    }

    /// Feed `input` to `node` and carry out its outputs.
    fn step(&mut self, node: NodeId, input: Input) -> Result<(), String> {
        let stale = match &input {
            Input::Receive { msg, .. } => msg.epoch() != self.engines[node as usize].epoch(),
            _ => false,
        };
        let before = stale.then(|| self.engines[node as usize].clone());
        let outputs = self.engines[node as usize].on_input(input);
        if let Some(before) = before {
            self.report.stale_delivered += 1;
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
                self.report.persists += 1;
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
                self.report.publishes += 1;
                self.pending.push(Event::Publish(node, s, start, end));
            }
            Output::Rebase { stream: s, lsn } => {
                self.report.rebases += 1;
                self.pending.push(Event::Rebase(node, s, lsn));
            }
            Output::Replicated { slot, lsn } => {
                let s = stream(node, slot);
                for m in self.members(node, s) {
                    if self.durable(m, s) < lsn {
                        return Err(format!("{s} replicated up to {lsn}, member {m} holds {}", self.durable(m, s)));
                    }
                }
                self.report.replicated_raised += 1;
                self.logs[n].entry(slot).or_default().replicated = lsn;
            }
            Output::Reclaim { stream: s, upto } => {
                self.report.reclaims += 1;
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
                self.report.fsyncs_done += 1;
                if self.engines[n].epoch() > epoch {
                    self.report.fsyncs_across_views += 1;
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
                self.report.newer_epoch_reported += 1;
                if self.view.epoch >= epoch {
                    self.pending.push(Event::View(node, self.view.clone()));
                }
            }
        }
        Ok(())
    }

    fn send(&mut self, from: NodeId, to: NodeId, msg: Message) {
        self.report.messages += 1;
        if msg.class() == Class::Latency {
            self.report.latency_messages += 1;
        }
        self.pending.push(Event::Msg(from, to, msg));
    }

    /// Promised durability holds on every node still in the cluster manager's view.
    fn check_promises(&self) -> Result<(), String> {
        for (&(s, m), &lsn) in &self.promised {
            if self.view.contains(m) && self.durable(m, s) < lsn {
                return Err(format!("node {m} lost {s} below {lsn}, promised by an fsync"));
            }
        }
        Ok(())
    }

    fn event(&mut self, rng: &mut StdRng, mut i: usize, faults: bool) -> Result<(), String> {
        if let Event::Msg(from, to, msg) = &self.pending[i] {
            if rng.random_range(0..1000) >= self.cfg.reorder_permille {
                let (from, to, class) = (*from, *to, msg.class());
                i = self
                    .pending
                    .iter()
                    .position(|e| matches!(e, Event::Msg(f, t, m) if (*f, *t, m.class()) == (from, to, class)))
                    .expect("the picked message itself");
            }
        }
        match self.pending.remove(i) {
            Event::Msg(from, to, msg) => {
                let roll = rng.random_range(0..1000);
                if faults && roll < self.cfg.drop_permille {
                    self.report.lost += 1;
                    return Ok(());
                }
                if faults && roll < self.cfg.drop_permille + self.cfg.dup_permille {
                    self.report.duplicated += 1;
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
    fn new_view(&mut self, nodes: Vec<NodeId>) {
        self.report.view_changes += 1;
        self.view = View { epoch: self.view.epoch + 1, nodes };
        // Promises to nodes that left are void: they are out of the chains.
        let view = self.view.clone();
        self.promised.retain(|(_, m), _| view.contains(*m));
        for n in 0..self.cfg.nodes {
            self.pending.push(Event::View(n, view.clone()));
        }
    }

    fn change_view(&mut self, rng: &mut StdRng) {
        let all = self.cfg.nodes;
        let out: Vec<NodeId> = (0..all).filter(|n| !self.view.contains(*n)).collect();
        let mut nodes = self.view.nodes.clone();
        if !out.is_empty() && (nodes.len() <= 2 || rng.random_bool(0.5)) {
            nodes.push(out[rng.random_range(0..out.len())]);
            nodes.sort();
        } else if nodes.len() > 1 {
            nodes.remove(rng.random_range(0..nodes.len()));
        }
        self.new_view(nodes);
    }

    fn crash(&mut self, node: NodeId) -> Result<(), String> {
        let n = node as usize;
        self.report.crashes += 1;
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
            self.report.abandoned += 1;
        }
        // Restarted, it registers with the cluster manager and learns the view.
        self.pending.push(Event::View(node, self.view.clone()));
        Ok(())
    }

    /// A client of `node` appends `len` random bytes to log `slot`.
    fn append(&mut self, rng: &mut StdRng, node: NodeId, slot: u32, len: usize) -> Result<(), String> {
        let t = self.truth.entry(stream(node, slot)).or_default();
        t.extend((0..len).map(|_| rng.random::<u8>()));
        let end = t.len() as Lsn;
        self.report.appended += len as u64;
        self.step(node, Input::Append { slot, end })
    }

    /// A client of `node` calls fsync: its log `slot` and the lease records to their ends.
    fn start_fsync(&mut self, node: NodeId, slots: &[u32]) -> Result<(), String> {
        let targets: Vec<(StreamId, Lsn)> =
            slots.iter().map(|&slot| (stream(node, slot), self.durable(node, stream(node, slot)))).collect();
        self.next_op += 1;
        let op = self.next_op;
        self.fsync[node as usize] = Some((op, targets.clone(), self.engines[node as usize].epoch()));
        self.report.fsyncs += 1;
        self.step(node, Input::Fsync { op, targets })
    }

    /// The publishing pipeline of `node` publishes some of its log `slot`.
    fn publish_primary(&mut self, node: NodeId, slot: u32, all: bool) -> Result<(), String> {
        let s = stream(node, slot);
        let len = self.durable(node, s);
        let chunk = self.cfg.chunk;
        let log = self.logs[node as usize].entry(slot).or_default();
        let start = log.published;
        let end = if all { len } else { len.min(start + chunk) };
        if end <= start {
            return Ok(());
        }
        log.published = end;
        self.step(node, Input::Published { stream: s, start, end })
    }

    /// No more faults: deliver everything, time out until nothing is left to do.
    fn quiesce(&mut self, rng: &mut StdRng) -> Result<(), String> {
        for _round in 0..200 {
            while !self.pending.is_empty() {
                let i = rng.random_range(0..self.pending.len());
                self.event(rng, i, false)?;
            }
            let acting: Vec<NodeId> =
                (0..self.cfg.nodes).filter(|&i| self.engines[i as usize].tick_would_act()).collect();
            if acting.is_empty() {
                return Ok(());
            }
            for i in acting {
                self.report.ticks += 1;
                self.step(i, Input::Tick)?;
            }
        }
        Err("the quiet network does not settle: timeouts keep acting".into())
    }
}

/// Run one simulation; `Err` describes the first violation, with the seed.
pub fn simulate(cfg: &SimCfg) -> Result<SimReport, String> {
    run(cfg).map_err(|e| format!("{e} (seed {}, {} nodes, mutation {:?})", cfg.seed, cfg.nodes, cfg.mutation))
}

fn run(cfg: &SimCfg) -> Result<SimReport, String> {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let n = cfg.nodes as usize;
    let mut sim = Sim {
        cfg,
        engines: vec![],
        view: View { epoch: 0, nodes: vec![] },
        truth: BTreeMap::new(),
        logs: vec![BTreeMap::new(); n],
        copies: vec![BTreeMap::new(); n],
        fsync: vec![None; n],
        promised: BTreeMap::new(),
        pending: vec![],
        report: SimReport::default(),
        next_op: 0,
    };
    sim.engines = (0..cfg.nodes).map(|i| Engine::new(sim.engine_cfg(i))).collect();
    sim.new_view((0..cfg.nodes).collect());
    sim.report.view_changes = 0;
    let mut started = 0usize;
    let step_cap = 400 * cfg.ops + 10_000;
    while started < cfg.ops || !sim.pending.is_empty() {
        sim.report.steps += 1;
        if sim.report.steps > step_cap {
            let logs: Vec<String> = sim
                .engines
                .iter()
                .map(|e| {
                    format!(
                        "node {} epoch {} logs {:?} fsyncs {:?}",
                        e.id(),
                        e.epoch(),
                        (0..=cfg.logs).map(|s| e.log(s).cloned()).collect::<Vec<_>>(),
                        e.pending_fsyncs().collect::<Vec<_>>()
                    )
                })
                .collect();
            return Err(format!(
                "the run does not end: view {:?}, {} pending\n{}",
                sim.view,
                sim.pending.len(),
                logs.join("\n")
            ));
        }
        let roll = rng.random_range(0..100_000u32);
        let node = rng.random_range(0..cfg.nodes);
        let slot = rng.random_range(1..=cfg.logs);
        // Cumulative thresholds per 100,000 steps: client operations, publication, crashes,
        // view changes, timeouts; the rest deliver pending events.
        let client = 8_000;
        let publish = client + 4_000;
        let crash = publish + cfg.crash_per_100k;
        let view = crash + cfg.view_change_per_100k;
        let tick = view + cfg.tick_per_100k;
        if started < cfg.ops && roll < client {
            started += 1;
            if sim.fsync[node as usize].is_none() && rng.random_range(0..100) < cfg.fsync_percent {
                sim.start_fsync(node, &[slot, LEASE_SLOT])?;
            } else if rng.random_range(0..10) == 0 {
                // A lease granted: its record goes to the node's lease stream.
                sim.append(&mut rng, node, LEASE_SLOT, 8)?;
            } else {
                let len = rng.random_range(1..=cfg.chunk as usize);
                sim.append(&mut rng, node, slot, len)?;
            }
        } else if roll < publish {
            let all = rng.random_bool(0.1);
            let slot = if rng.random_bool(0.2) { LEASE_SLOT } else { slot };
            sim.publish_primary(node, slot, all)?;
        } else if started < cfg.ops && roll < crash {
            sim.crash(node)?;
        } else if started < cfg.ops && roll < view {
            sim.change_view(&mut rng);
        } else if roll < tick || sim.pending.is_empty() {
            sim.report.ticks += 1;
            sim.step(node, Input::Tick)?;
        } else {
            let i = rng.random_range(0..sim.pending.len());
            sim.event(&mut rng, i, true)?;
        }
    }
    // Liveness: every node back in the view, a quiet network, everything published.
    if sim.view.nodes.len() < n {
        sim.new_view((0..cfg.nodes).collect());
    }
    sim.quiesce(&mut rng)?;
    if let Some(i) = sim.fsync.iter().position(Option::is_some) {
        return Err(format!("stalled: the fsync of node {i} never completed on a quiet network"));
    }
    for node in 0..cfg.nodes {
        let slots: Vec<u32> = (0..=cfg.logs).collect();
        for &slot in &slots {
            sim.publish_primary(node, slot, true)?;
        }
        sim.start_fsync(node, &slots)?;
    }
    sim.quiesce(&mut rng)?;
    if let Some(i) = sim.fsync.iter().position(Option::is_some) {
        return Err(format!("stalled: the final fsync of node {i} never completed on a quiet network"));
    }
    for (s, t) in &sim.truth {
        let chain = sim.view.chain(*s, cfg.replicas);
        for &m in &chain[1..] {
            let c = sim.copies[m as usize].get(s).cloned().unwrap_or_default();
            let len = t.len() as Lsn;
            if c.persisted.end() != len || c.published.end() != len || c.bytes[..] != t[..] {
                return Err(format!(
                    "final state: node {m}'s copy of {s} is durable to {}, published to {}, the log has {len} bytes",
                    c.persisted.end(),
                    c.published.end()
                ));
            }
        }
        let reclaimed = sim.logs[s.primary as usize].get(&s.slot).map_or(0, |l| l.reclaimed);
        if reclaimed != t.len() as Lsn {
            return Err(format!("final state: {s} reclaimed to {reclaimed} of {} bytes", t.len()));
        }
    }
    Ok(sim.report)
}
