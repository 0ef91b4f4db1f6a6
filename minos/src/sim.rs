//! Deterministic simulation: many nodes, thousands of random concurrent client operations,
//! messages and persists delayed, reordered, duplicated and lost, and nodes crashed and
//! restarted, by a seeded scheduler.
//!
//! The same [`Engine`] as in production runs on every node. At each step the scheduler,
//! drawing from one seeded generator, either lets an idle client start its next random
//! operation (write, read, in lin-scope a scope end) or picks one pending event — a message
//! in flight or a persist under way — uniformly at random and carries it out. Picking
//! uniformly among everything pending delays some events for long and reorders messages on
//! every channel. A delivered message is sometimes kept for a second delivery (a duplicate)
//! or lost instead; now and then a random node times out ([`Input::Tick`]); and now and then
//! a random node crashes — its engine, driver store, persists under way, messages to and from
//! it and its clients' requests are lost, its persistent memory kept — and restarts at once
//! with [`Engine::recover`]. Nothing else is random, so a seed replays the same run exactly.
//!
//! The run records the history (invocation and return times from the step counter) and
//! checks at the end: linearizability per record ([`crate::linearizability`]), each mode's
//! durability point over each node's persistent memory at the moment a client is answered
//! (as the model check does), no stall (clients waiting with nothing pending), and a final
//! state where every node agrees on every record and has persisted it. Values are checked
//! throughout: every `Apply`, `Persist` and read answer must carry the value its write
//! wrote, a node's store must never move back to an older write, and at the end every
//! node's engine, store and persistent memory hold the final write's value. After the last
//! operation, the nodes time out until nothing is left to do (no more faults then); a run
//! that does not settle fails. A request abandoned by a crash enters the history as a write
//! that may take effect at any time after its invocation (or a read that never returned).

use crate::engine::{Config, Engine};
use crate::linearizability::{self, HistOp, OpKind};
use crate::mode::{Mode, Mutation};
use crate::msg::{Input, Message, OpId, Output, ScopeId, Value};
use crate::ts::{NodeId, Ts};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
pub struct SimCfg {
    pub mode: Mode,
    pub nodes: u32,
    pub clients_per_node: u32,
    pub keys: u32,
    /// Client operations to run in all.
    pub ops: usize,
    /// Share of reads among client operations, in percent.
    pub read_percent: u32,
    /// Per mille of message deliveries that keep a copy for a second delivery.
    pub dup_permille: u32,
    /// Per mille of messages lost instead of delivered.
    pub drop_permille: u32,
    /// Per mille of steps where a random node times out.
    pub tick_permille: u32,
    /// Per 100,000 steps, how often a random node crashes and restarts.
    pub crash_per_100k: u32,
    pub seed: u64,
    /// Only the mutation tests set this.
    pub mutation: Mutation,
}

impl SimCfg {
    /// The CI mix: 2 % duplicates, 2 % losses, 1 % timeouts, a crash every ~2,000 steps.
    pub fn new(mode: Mode, nodes: u32, ops: usize, seed: u64) -> SimCfg {
        SimCfg {
            mode,
            nodes,
            clients_per_node: 2,
            keys: 4,
            ops,
            read_percent: 40,
            dup_permille: 20,
            drop_permille: 20,
            tick_permille: 10,
            crash_per_100k: 50,
            seed,
            mutation: Mutation::None,
        }
    }

    /// No duplicate, loss, timeout or crash: the reliable network of the first version.
    pub fn reliable(mut self) -> SimCfg {
        self.dup_permille = 0;
        self.drop_permille = 0;
        self.tick_permille = 0;
        self.crash_per_100k = 0;
        self
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct SimReport {
    pub writes: usize,
    pub reads: usize,
    pub scope_ends: usize,
    pub messages: usize,
    pub persists: usize,
    pub steps: usize,
    /// Writes a follower skipped as obsolete at least once (a spin was entered).
    pub obsolete_skips: usize,
    pub duplicated: usize,
    pub lost: usize,
    pub crashes: usize,
    pub ticks: usize,
    /// Client requests abandoned by a crash of their node.
    pub abandoned: usize,
}

struct Client {
    node: NodeId,
    /// The operation in flight: (op id, record, invocation time, written value or None).
    pending: Option<(OpId, u32, u64, Option<u64>)>,
    scope: ScopeId,
    scope_writes: Vec<(u32, Ts)>,
    scope_pending: bool,
}

enum Event {
    Message(NodeId, NodeId, Message<u32>),
    Persist(NodeId, u32, Ts, u64),
}

fn value_of(v: &Value) -> u64 {
    if v.is_empty() {
        0
    } else {
        u64::from_le_bytes(v[..8].try_into().expect("8 bytes"))
    }
}

/// The whole simulated cluster and what its drivers hold.
struct Sim<'a> {
    cfg: &'a SimCfg,
    nodes: Vec<Engine<u32>>,
    /// Per node, per record: the newest persisted (timestamp, value).
    pm: Vec<BTreeMap<u32, (Ts, u64)>>,
    /// Per node, per record: the (timestamp, value) last applied by the driver.
    store: Vec<BTreeMap<u32, (Ts, u64)>>,
    /// The value of every write, by (record, timestamp).
    written: BTreeMap<(u32, Ts), u64>,
    /// Client writes whose timestamp is not known yet: op -> (record, value).
    unregistered: BTreeMap<OpId, (u32, u64)>,
    clients: Vec<Client>,
    pending: Vec<Event>,
    history: Vec<(u32, HistOp)>,
    report: SimReport,
    owner: BTreeMap<OpId, usize>,
    time: u64,
}

impl Sim<'_> {
    fn engine_cfg(&self, i: NodeId) -> Config {
        Config { mutation: self.cfg.mutation, ..Config::new(i, self.cfg.nodes, self.cfg.mode) }
    }

    fn durable_everywhere(&self, key: u32, ts: Ts) -> bool {
        self.pm.iter().all(|m| m.get(&key).map(|p| p.0).unwrap_or_default() >= ts)
    }

    fn check_value(&self, what: &str, node: NodeId, key: u32, ts: Ts, value: u64) -> Result<(), String> {
        let expected = if ts == Ts::ZERO { Some(0) } else { self.written.get(&(key, ts)).copied() };
        if expected != Some(value) {
            return Err(format!(
                "{what} on node {node}: record {key} {ts} carries value {value}, the write wrote {expected:?}"
            ));
        }
        Ok(())
    }

    /// Feed `input` to `node` and carry out its outputs.
    fn step(&mut self, node: NodeId, input: Input<u32>) -> Result<(), String> {
        let n = node as usize;
        let spins_before = self.nodes[n].spins().count();
        let outputs = self.nodes[n].on_input(input);
        if self.nodes[n].spins().count() > spins_before {
            self.report.obsolete_skips += 1;
        }
        if !self.unregistered.is_empty() {
            let found: Vec<(OpId, u32, Ts)> = self.nodes[n]
                .coordinating()
                .filter_map(|(k, ts, w)| w.op.filter(|op| self.unregistered.contains_key(op)).map(|op| (op, *k, ts)))
                .collect();
            for (op, key, ts) in found {
                let (_, v) = self.unregistered.remove(&op).expect("listed");
                self.written.insert((key, ts), v);
            }
        }
        self.time += 1;
        let mode = self.cfg.mode;
        for o in outputs {
            match o {
                Output::Send { to, msg } => {
                    self.report.messages += 1;
                    self.pending.push(Event::Message(node, to, msg));
                }
                Output::Apply { key, ts, value } => {
                    let v = value_of(&value);
                    self.check_value("apply", node, key, ts, v)?;
                    let slot = self.store[n].entry(key).or_default();
                    if ts < slot.0 {
                        return Err(format!("node {node}'s store of record {key} moved back from {} to {ts}", slot.0));
                    }
                    *slot = (ts, v);
                }
                Output::Persist { key, ts, value } => {
                    let v = value_of(&value);
                    self.check_value("persist", node, key, ts, v)?;
                    self.report.persists += 1;
                    self.pending.push(Event::Persist(node, key, ts, v));
                }
                Output::WriteDone { op, key, ts } => {
                    let client = &mut self.clients[self.owner[&op]];
                    let (_, k, invoked, v) = client.pending.take().expect("a write in flight");
                    assert_eq!(k, key);
                    if mode == Mode::Scope {
                        client.scope_writes.push((key, ts));
                    }
                    if mode.write_returns_durable() && !self.durable_everywhere(key, ts) {
                        return Err(format!("write {ts} of record {key} returned before it was persisted everywhere"));
                    }
                    let kind = OpKind::Write(v.expect("a write"));
                    self.history.push((key, HistOp { kind, invoked, returned: self.time }));
                }
                Output::ReadDone { op, key, ts, value } => {
                    let v = value_of(&value);
                    self.check_value("read", node, key, ts, v)?;
                    let client = &mut self.clients[self.owner[&op]];
                    let (_, k, invoked, _) = client.pending.take().expect("a read in flight");
                    assert_eq!(k, key);
                    if mode.reads_see_only_durable() && !self.durable_everywhere(key, ts) {
                        return Err(format!("read of record {key} returned {ts}, not yet persisted everywhere"));
                    }
                    self.history.push((key, HistOp { kind: OpKind::Read(v), invoked, returned: self.time }));
                }
                Output::ScopeDone { op, scope } => {
                    let c = self.owner[&op];
                    assert_eq!(self.clients[c].scope, scope);
                    for &(k, ts) in &self.clients[c].scope_writes {
                        if !self.durable_everywhere(k, ts) {
                            return Err(format!(
                                "scope {scope:#x} ended before its write {ts} of record {k} was persisted everywhere"
                            ));
                        }
                    }
                    let client = &mut self.clients[c];
                    client.scope_writes.clear();
                    client.scope += 1;
                    client.scope_pending = false;
                }
            }
        }
        Ok(())
    }

    /// `node` crashes and restarts from its persistent memory.
    fn crash(&mut self, node: NodeId) -> Result<(), String> {
        let n = node as usize;
        self.report.crashes += 1;
        let persisted: Vec<(u32, Ts, Value)> =
            self.pm[n].iter().map(|(k, &(ts, v))| (*k, ts, Value::from(&v.to_le_bytes()[..]))).collect();
        let (engine, outputs) = Engine::recover(self.engine_cfg(node), persisted);
        self.nodes[n] = engine;
        self.store[n] = self.pm[n].clone();
        self.pending.retain(|e| match e {
            Event::Message(from, to, _) => *from != node && *to != node,
            Event::Persist(at, ..) => *at != node,
        });
        for c in self.clients.iter_mut().filter(|c| c.node == node) {
            if let Some((op, key, invoked, v)) = c.pending.take() {
                self.report.abandoned += 1;
                self.unregistered.remove(&op);
                if let Some(v) = v {
                    // May take effect at any time after its invocation, or never.
                    let returned = u64::MAX - self.report.abandoned as u64;
                    self.history.push((key, HistOp { kind: OpKind::Write(v), invoked, returned }));
                }
            }
            c.scope_writes.clear();
            c.scope_pending = false;
            c.scope += 1;
        }
        for o in outputs {
            if let Output::Send { to, msg } = o {
                self.report.messages += 1;
                self.pending.push(Event::Message(node, to, msg));
            }
        }
        Ok(())
    }

    /// Carry out pending event `i`; `faults`: may duplicate or lose a message.
    fn event(&mut self, rng: &mut StdRng, i: usize, faults: bool) -> Result<(), String> {
        let cfg = self.cfg;
        match self.pending.swap_remove(i) {
            Event::Message(from, to, msg) => {
                let roll = rng.random_range(0..1000);
                if faults && roll < cfg.drop_permille {
                    self.report.lost += 1;
                    return Ok(());
                }
                if faults && roll < cfg.drop_permille + cfg.dup_permille {
                    self.report.duplicated += 1;
                    self.pending.push(Event::Message(from, to, msg.clone()));
                }
                self.step(to, Input::Receive { from, msg })
            }
            Event::Persist(node, key, ts, v) => {
                let slot = self.pm[node as usize].entry(key).or_default();
                if ts > slot.0 {
                    *slot = (ts, v);
                }
                self.step(node, Input::Persisted { key, ts })
            }
        }
    }
}

/// Run one simulation; `Err` describes the first violation.
pub fn simulate(cfg: &SimCfg) -> Result<SimReport, String> {
    let mode = cfg.mode;
    run(cfg).map_err(|msg| format!("{msg} (mode {mode}, {} nodes, seed {})", cfg.nodes, cfg.seed))
}

fn run(cfg: &SimCfg) -> Result<SimReport, String> {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let n = cfg.nodes as usize;
    let mut sim = Sim {
        cfg,
        nodes: vec![],
        pm: vec![BTreeMap::new(); n],
        store: vec![BTreeMap::new(); n],
        written: BTreeMap::new(),
        unregistered: BTreeMap::new(),
        clients: (0..cfg.nodes * cfg.clients_per_node)
            .map(|i| Client {
                node: i % cfg.nodes,
                pending: None,
                scope: u64::from(i) << 32,
                scope_writes: vec![],
                scope_pending: false,
            })
            .collect(),
        pending: vec![],
        history: vec![],
        report: SimReport::default(),
        owner: BTreeMap::new(),
        time: 0,
    };
    sim.nodes = (0..cfg.nodes).map(|i| Engine::new(sim.engine_cfg(i))).collect();
    let mode = cfg.mode;
    let (mut started, mut next_value, mut next_op) = (0usize, 1u64, 1u64);

    loop {
        sim.report.steps += 1;
        sim.time += 1;
        let idle: Vec<usize> = (0..sim.clients.len())
            .filter(|&c| sim.clients[c].pending.is_none() && !sim.clients[c].scope_pending)
            .collect();
        let can_start = started < cfg.ops && !idle.is_empty();
        if started >= cfg.ops && sim.pending.is_empty() {
            break; // the rest settles below
        }
        if started < cfg.ops && rng.random_range(0..100_000) < cfg.crash_per_100k {
            sim.crash(rng.random_range(0..cfg.nodes))?;
            continue;
        }
        if rng.random_range(0..1000) < cfg.tick_permille {
            sim.report.ticks += 1;
            sim.step(rng.random_range(0..cfg.nodes), Input::Tick)?;
            continue;
        }
        // Start an operation with probability 1/4 when possible (or when nothing else can
        // happen): keeps many operations concurrent while events pile up.
        if can_start && (sim.pending.is_empty() || rng.random_range(0..4) == 0) {
            let c = idle[rng.random_range(0..idle.len())];
            let op = next_op;
            next_op += 1;
            sim.owner.insert(op, c);
            started += 1;
            let time = sim.time;
            let client = &mut sim.clients[c];
            let key = rng.random_range(0..cfg.keys);
            let roll = rng.random_range(0..100);
            let input = if mode == Mode::Scope && roll < 10 && !client.scope_writes.is_empty() {
                client.scope_pending = true;
                sim.report.scope_ends += 1;
                Input::ScopeEnd { op, scope: client.scope }
            } else if roll < cfg.read_percent {
                client.pending = Some((op, key, time, None));
                sim.report.reads += 1;
                Input::Read { op, key }
            } else {
                let v = next_value;
                next_value += 1;
                client.pending = Some((op, key, time, Some(v)));
                sim.report.writes += 1;
                sim.unregistered.insert(op, (key, v));
                let scope = (mode == Mode::Scope).then_some(client.scope);
                Input::Write { op, key, value: Value::from(&v.to_le_bytes()[..]), scope }
            };
            let node = client.node;
            sim.step(node, input)?;
        } else if !sim.pending.is_empty() {
            let i = rng.random_range(0..sim.pending.len());
            sim.event(&mut rng, i, true)?;
        } else {
            // Clients wait and nothing is in flight: only a timeout can help.
            sim.report.ticks += 1;
            sim.step(rng.random_range(0..cfg.nodes), Input::Tick)?;
            if sim.report.ticks > 100 * cfg.ops + 1000 {
                return Err("clients wait and timeouts do not help".into());
            }
        }
    }
    // Settle: timeouts on every node until nothing is in flight and no timeout would act.
    for _round in 0..1000 {
        while !sim.pending.is_empty() {
            let i = rng.random_range(0..sim.pending.len());
            sim.event(&mut rng, i, false)?;
        }
        let acting: Vec<NodeId> = (0..cfg.nodes).filter(|&i| sim.nodes[i as usize].tick_would_act()).collect();
        if acting.is_empty() {
            break;
        }
        for i in acting {
            sim.report.ticks += 1;
            sim.step(i, Input::Tick)?;
        }
    }
    if let Some(c) = sim.clients.iter().position(|c| c.pending.is_some() || c.scope_pending) {
        return Err(format!("stalled: client {c} waits and nothing is pending"));
    }
    for key in 0..cfg.keys {
        let first = sim.nodes[0].record(&key);
        let value =
            if first.volatile_ts == Ts::ZERO { Some(0) } else { sim.written.get(&(key, first.volatile_ts)).copied() };
        for (i, e) in sim.nodes.iter().enumerate() {
            let r = e.record(&key);
            let persisted = sim.pm[i].get(&key).copied().unwrap_or_default();
            let stored = sim.store[i].get(&key).copied().unwrap_or_default();
            if r.volatile_ts != first.volatile_ts
                || Some(value_of(&r.value)) != value
                || r.rdlock.is_some()
                || persisted != (r.volatile_ts, value_of(&r.value))
                || stored != persisted
            {
                return Err(format!(
                    "final state of record {key} differs on node {i}: {r:?} vs node 0 {first:?}, persisted {persisted:?}, stored {stored:?}, written {value:?}"
                ));
            }
        }
    }
    if let Some(i) = sim.nodes.iter().position(|n| !n.is_idle()) {
        return Err(format!("node {i} still waits at the end: {:?}", sim.nodes[i]));
    }
    if let Err(e) = linearizability::check(&sim.history) {
        return Err(format!("not linearizable: {e}"));
    }
    Ok(sim.report)
}
