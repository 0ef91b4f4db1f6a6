//! Deterministic simulation: many nodes, thousands of random concurrent client operations,
//! messages and persists delayed and reordered by a seeded scheduler.
//!
//! The same [`Engine`] as in production runs on every node. At each step the scheduler,
//! drawing from one seeded generator, either lets an idle client start its next random
//! operation (write, read, in lin-scope a scope end) or picks one pending event — a message
//! in flight or a persist under way — uniformly at random and carries it out. Picking
//! uniformly among everything pending delays some events for long and reorders messages on
//! every channel. Nothing else is random, so a seed replays the same run exactly.
//!
//! The run records the history (invocation and return times from the step counter) and
//! checks at the end: linearizability per record ([`crate::linearizability`]), each mode's
//! durability point over each node's persistent memory at the moment a client is answered
//! (as the model check does), no stall (clients waiting with nothing pending), and a final
//! state where every node agrees on every record and has persisted it.

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
    pub seed: u64,
    /// Only the mutation tests set this.
    pub mutation: Mutation,
}

impl SimCfg {
    pub fn new(mode: Mode, nodes: u32, ops: usize, seed: u64) -> SimCfg {
        SimCfg { mode, nodes, clients_per_node: 2, keys: 4, ops, read_percent: 40, seed, mutation: Mutation::None }
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
    Persist(NodeId, u32, Ts),
}

/// Run one simulation; `Err` describes the first violation.
pub fn simulate(cfg: &SimCfg) -> Result<SimReport, String> {
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut nodes: Vec<Engine<u32>> = (0..cfg.nodes)
        .map(|i| Engine::new(Config { mutation: cfg.mutation, ..Config::new(i, cfg.nodes, cfg.mode) }))
        .collect();
    let mut pm: Vec<BTreeMap<u32, Ts>> = vec![BTreeMap::new(); cfg.nodes as usize];
    let mut clients: Vec<Client> = (0..cfg.nodes * cfg.clients_per_node)
        .map(|i| Client {
            node: i % cfg.nodes,
            pending: None,
            scope: u64::from(i) << 32,
            scope_writes: vec![],
            scope_pending: false,
        })
        .collect();
    let mut pending: Vec<Event> = vec![];
    let mut history: Vec<(u32, HistOp)> = vec![];
    let mut report = SimReport::default();
    let (mut started, mut time, mut next_value, mut next_op) = (0usize, 0u64, 1u64, 1u64);
    // Which client an op id belongs to.
    let mut owner: BTreeMap<OpId, usize> = BTreeMap::new();
    let mode = cfg.mode;
    let fail = |msg: String| Err(format!("{msg} (mode {mode}, {} nodes, seed {})", cfg.nodes, cfg.seed));

    loop {
        report.steps += 1;
        time += 1;
        let idle: Vec<usize> =
            (0..clients.len()).filter(|&c| clients[c].pending.is_none() && !clients[c].scope_pending).collect();
        let can_start = started < cfg.ops && !idle.is_empty();
        if !can_start && pending.is_empty() {
            break;
        }
        // Start an operation with probability 1/4 when possible (or when nothing else can
        // happen): keeps many operations concurrent while events pile up.
        let (node, input) = if can_start && (pending.is_empty() || rng.random_range(0..4) == 0) {
            let c = idle[rng.random_range(0..idle.len())];
            let op = next_op;
            next_op += 1;
            owner.insert(op, c);
            started += 1;
            let client = &mut clients[c];
            let key = rng.random_range(0..cfg.keys);
            let roll = rng.random_range(0..100);
            let input = if mode == Mode::Scope && roll < 10 && !client.scope_writes.is_empty() {
                client.scope_pending = true;
                report.scope_ends += 1;
                Input::ScopeEnd { op, scope: client.scope }
            } else if roll < cfg.read_percent {
                client.pending = Some((op, key, time, None));
                report.reads += 1;
                Input::Read { op, key }
            } else {
                let v = next_value;
                next_value += 1;
                client.pending = Some((op, key, time, Some(v)));
                report.writes += 1;
                let scope = (mode == Mode::Scope).then_some(client.scope);
                Input::Write { op, key, value: Value::from(&v.to_le_bytes()[..]), scope }
            };
            (client.node, input)
        } else {
            let i = rng.random_range(0..pending.len());
            match pending.swap_remove(i) {
                Event::Message(from, to, msg) => (to, Input::Receive { from, msg }),
                Event::Persist(node, key, ts) => {
                    let slot = pm[node as usize].entry(key).or_default();
                    *slot = (*slot).max(ts);
                    (node, Input::Persisted { key, ts })
                }
            }
        };
        let spins_before = nodes[node as usize].spins().count();
        let outputs = nodes[node as usize].on_input(input);
        if nodes[node as usize].spins().count() > spins_before {
            report.obsolete_skips += 1;
        }
        time += 1;
        let durable_everywhere = |pm: &Vec<BTreeMap<u32, Ts>>, key: u32, ts: Ts| {
            pm.iter().all(|m| m.get(&key).copied().unwrap_or_default() >= ts)
        };
        for o in outputs {
            match o {
                Output::Send { to, msg } => {
                    report.messages += 1;
                    pending.push(Event::Message(node, to, msg));
                }
                Output::Apply { .. } => {}
                Output::Persist { key, ts, .. } => {
                    report.persists += 1;
                    pending.push(Event::Persist(node, key, ts));
                }
                Output::WriteDone { op, key, ts } => {
                    let client = &mut clients[owner[&op]];
                    let (_, k, invoked, v) = client.pending.take().expect("a write in flight");
                    assert_eq!(k, key);
                    if mode.write_returns_durable() && !durable_everywhere(&pm, key, ts) {
                        return fail(format!("write {ts} of record {key} returned before it was persisted everywhere"));
                    }
                    if mode == Mode::Scope {
                        client.scope_writes.push((key, ts));
                    }
                    let kind = OpKind::Write(v.expect("a write"));
                    history.push((key, HistOp { kind, invoked, returned: time }));
                }
                Output::ReadDone { op, key, ts, value } => {
                    let client = &mut clients[owner[&op]];
                    let (_, k, invoked, _) = client.pending.take().expect("a read in flight");
                    assert_eq!(k, key);
                    if mode.reads_see_only_durable() && !durable_everywhere(&pm, key, ts) {
                        return fail(format!("read of record {key} returned {ts}, not yet persisted everywhere"));
                    }
                    let v =
                        if value.is_empty() { 0 } else { u64::from_le_bytes(value[..8].try_into().expect("8 bytes")) };
                    history.push((key, HistOp { kind: OpKind::Read(v), invoked, returned: time }));
                }
                Output::ScopeDone { op, scope } => {
                    let client = &mut clients[owner[&op]];
                    assert_eq!(client.scope, scope);
                    for &(k, ts) in &client.scope_writes {
                        if !durable_everywhere(&pm, k, ts) {
                            return fail(format!(
                                "scope {scope:#x} ended before its write {ts} of record {k} was persisted everywhere"
                            ));
                        }
                    }
                    client.scope_writes.clear();
                    client.scope += 1;
                    client.scope_pending = false;
                }
            }
        }
    }
    if let Some(c) = clients.iter().position(|c| c.pending.is_some() || c.scope_pending) {
        return fail(format!("stalled: client {c} waits and nothing is pending"));
    }
    for key in 0..cfg.keys {
        let first = nodes[0].record(&key);
        for (i, n) in nodes.iter().enumerate() {
            let r = n.record(&key);
            let persisted = pm[i].get(&key).copied().unwrap_or_default();
            if r.volatile_ts != first.volatile_ts
                || r.value != first.value
                || r.rdlock.is_some()
                || persisted != r.volatile_ts
            {
                return fail(format!(
                    "final state of record {key} differs on node {i}: {r:?} vs node 0 {first:?}, persisted {persisted}"
                ));
            }
        }
    }
    if let Some(i) = nodes.iter().position(|n| !n.is_idle()) {
        return fail(format!("node {i} still waits at the end: {:?}", nodes[i]));
    }
    if let Err(e) = linearizability::check(&history) {
        return fail(format!("not linearizable: {e}"));
    }
    Ok(report)
}
