//! The model check: a cluster of [`Engine`]s explored by stateright.
//!
//! The model drives the very engine nicfs will run; nothing of the protocol is re-written
//! here. A [`ModelCfg`] names the mode, the cluster size and a script of client operations
//! per node (one client per node, one operation at a time, so several nodes' writes run
//! concurrently). From a state, the enabled actions are:
//!
//! - a node's client invokes its next operation (write, read or scope end);
//! - any message in flight is delivered (the network is an unordered multiset: every
//!   reordering is explored);
//! - any message in flight is delivered *and kept* for a second delivery, while the
//!   duplication budget lasts;
//! - any persist in flight completes (persists complete in any order, as PM flushes do).
//!
//! Crashes. A node crash loses its volatile state and keeps what it persisted. The model
//! keeps each node's persistent memory itself (`pm`: per record, the newest persisted
//! timestamp, written only when a persist completes), so a crash of any set of nodes at any
//! state leaves exactly `pm`. The durability properties are stated over `pm` at the moment
//! a client is answered: they hold for a crash at every point of every explored run. The
//! paper leaves recovery and rejoin as future work, so restarted nodes are not modelled.
//!
//! The properties are in `check/properties.rs`; [`run`] explores and reports counts.

mod properties;

use crate::engine::{Config, Engine};
use crate::mode::{Mode, Mutation};
use crate::msg::{Input, Message, Output, ScopeId, Value};
use crate::ts::{NodeId, Ts};
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};
use stateright::{Checker, Expectation, Model, Property};
use std::fmt;
use std::time::{Duration, Instant};

pub use properties::property_names;

/// A client operation of a script. Values are small integers; 0 is the initial value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Write {
        key: u8,
        value: u8,
    },
    Read {
        key: u8,
    },
    /// lin-scope: end the client's scope (its fsync).
    ScopeEnd,
}

/// What to explore.
#[derive(Clone, Debug)]
pub struct ModelCfg {
    pub mode: Mode,
    pub nodes: u32,
    pub keys: u8,
    /// One script per node.
    pub scripts: Vec<Vec<Op>>,
    /// How many deliveries may keep their message for another delivery.
    pub duplicates: u8,
    /// The network: `false` delivers any message in flight next (every reordering);
    /// `true` keeps each (sender, receiver) channel in order, as the TCP connections between
    /// nicfs daemons do, and reorders only across channels.
    pub fifo: bool,
    pub mutation: Mutation,
}

/// The scope every lin-scope write of a node's client belongs to.
const SCOPE: ScopeId = 1;

impl ModelCfg {
    /// 3 nodes, 2 records, 3 concurrent writes (two to the same record), a read on every
    /// node; in lin-scope every write is in its client's scope, which ends after the read.
    pub fn standard(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts = vec![
            vec![Write { key: 0, value: 1 }, Read { key: 1 }],
            vec![Write { key: 0, value: 2 }, Read { key: 0 }],
            vec![Write { key: 1, value: 3 }, Read { key: 0 }],
        ];
        if mode == Mode::Scope {
            for s in &mut scripts {
                s.push(ScopeEnd);
            }
        }
        ModelCfg { mode, nodes: 3, keys: 2, scripts, duplicates: 0, fifo: false, mutation: Mutation::None }
    }

    /// 3 nodes, 3 concurrent writes to one record: the most snatching and obsolete skipping.
    pub fn contended(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts = vec![
            vec![Write { key: 0, value: 1 }, Read { key: 0 }],
            vec![Write { key: 0, value: 2 }],
            vec![Write { key: 0, value: 3 }, Read { key: 0 }],
        ];
        if mode == Mode::Scope {
            for s in &mut scripts {
                s.push(ScopeEnd);
            }
        }
        ModelCfg { mode, nodes: 3, keys: 2, scripts, duplicates: 0, fifo: false, mutation: Mutation::None }
    }

    /// The bounded workload CI explores to the end in every mode: 3 nodes, 2 records, 3
    /// concurrent writes (two to the same record), one read, racing the writes.
    pub fn small(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts = vec![
            vec![Write { key: 0, value: 1 }],
            vec![Write { key: 0, value: 2 }, Read { key: 0 }],
            vec![Write { key: 1, value: 3 }],
        ];
        if mode == Mode::Scope {
            for s in &mut scripts {
                s.push(ScopeEnd);
            }
        }
        ModelCfg { mode, nodes: 3, keys: 2, scripts, duplicates: 0, fifo: false, mutation: Mutation::None }
    }

    /// 3 nodes, 2 concurrent writes to one record, a read racing them on the third node; in
    /// lin-scope node 0 then ends its scope.
    pub fn pair(mode: Mode) -> ModelCfg {
        use Op::*;
        let mut scripts =
            vec![vec![Write { key: 0, value: 1 }], vec![Write { key: 0, value: 2 }], vec![Read { key: 0 }]];
        if mode == Mode::Scope {
            scripts[0].push(ScopeEnd);
        }
        ModelCfg { mode, nodes: 3, keys: 2, scripts, duplicates: 0, fifo: false, mutation: Mutation::None }
    }

    /// A workload by name: `pair`, `small`, `standard` or `contended`.
    pub fn named(name: &str, mode: Mode) -> Option<ModelCfg> {
        match name {
            "pair" => Some(ModelCfg::pair(mode)),
            "small" => Some(ModelCfg::small(mode)),
            "standard" => Some(ModelCfg::standard(mode)),
            "contended" => Some(ModelCfg::contended(mode)),
            _ => None,
        }
    }

    pub fn with_duplicates(mut self, n: u8) -> ModelCfg {
        self.duplicates = n;
        self
    }

    pub fn with_fifo(mut self, fifo: bool) -> ModelCfg {
        self.fifo = fifo;
        self
    }

    pub fn with_mutation(mut self, m: Mutation) -> ModelCfg {
        self.mutation = m;
        self
    }
}

/// The sequential specification the history must be linearizable to: one register per
/// record.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Registers(Vec<u8>);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegOp {
    Write(u8, u8),
    Read(u8),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegRet {
    WriteOk,
    ReadOk(u8),
}

impl SequentialSpec for Registers {
    type Op = RegOp;
    type Ret = RegRet;

    fn invoke(&mut self, op: &RegOp) -> RegRet {
        match *op {
            RegOp::Write(k, v) => {
                self.0[k as usize] = v;
                RegRet::WriteOk
            }
            RegOp::Read(k) => RegRet::ReadOk(self.0[k as usize]),
        }
    }
}

/// A node's client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// Index of the next operation of the script.
    pub next: usize,
    pub pending: bool,
    /// lin-scope: the (record, TS_WR) of the writes of its scope that returned.
    pub scope_writes: Vec<(u8, Ts)>,
}

/// Durability promises found broken when a client was answered (bit flags).
pub mod broken {
    pub const WRITE_NOT_DURABLE: u8 = 1;
    pub const READ_NOT_DURABLE: u8 = 2;
    pub const SCOPE_NOT_DURABLE: u8 = 4;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: Vec<Engine<u8>>,
    /// Messages in flight (from, to, message): sorted (a multiset) on an unordered network;
    /// on a FIFO network grouped by channel, in sending order within each.
    pub net: Vec<(NodeId, NodeId, Message<u8>)>,
    /// Persists in flight (node, record, timestamp), sorted.
    pub persists: Vec<(NodeId, u8, Ts)>,
    /// Each node's persistent memory: per record, the newest persisted timestamp.
    pub pm: Vec<Vec<Ts>>,
    pub clients: Vec<Client>,
    pub history: LinearizabilityTester<NodeId, Registers>,
    pub duplicates_left: u8,
    pub broken: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Invoke { node: NodeId, op: Op },
    Deliver { from: NodeId, to: NodeId, msg: Message<u8> },
    Duplicate { from: NodeId, to: NodeId, msg: Message<u8> },
    Persisted { node: NodeId, key: u8, ts: Ts },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Invoke { node, op } => write!(f, "client@{node} {op:?}"),
            Action::Deliver { from, to, msg } => write!(f, "deliver {from}->{to} {}", show(msg)),
            Action::Duplicate { from, to, msg } => write!(f, "deliver a copy {from}->{to} {}", show(msg)),
            Action::Persisted { node, key, ts } => write!(f, "persisted @{node} key {key} {ts}"),
        }
    }
}

fn show(msg: &Message<u8>) -> String {
    match msg {
        Message::Inv { key, ts, value, scope } => {
            format!(
                "INV key {key} {ts} value {:?}{}",
                value.first().copied().unwrap_or(0),
                scope.map(|s| format!(" sc{s}")).unwrap_or_default()
            )
        }
        Message::Persist { scope, writes } | Message::ValPScope { scope, writes } => {
            format!("{} sc{scope} {writes:?}", msg.kind())
        }
        Message::AckPScope { scope } => format!("[ACK_P]sc{scope}"),
        other => {
            let (key, ts) = match other {
                Message::Ack { key, ts }
                | Message::AckC { key, ts }
                | Message::AckP { key, ts }
                | Message::Val { key, ts }
                | Message::ValC { key, ts }
                | Message::ValP { key, ts } => (key, ts),
                _ => unreachable!(),
            };
            format!("{} key {key} {ts}", other.kind())
        }
    }
}

/// The model: a configuration; [`Model`] explores it.
pub struct MinosModel {
    pub cfg: ModelCfg,
}

fn value_byte(v: &Value) -> u8 {
    v.first().copied().unwrap_or(0)
}

impl MinosModel {
    pub fn new(cfg: ModelCfg) -> MinosModel {
        assert_eq!(cfg.scripts.len(), cfg.nodes as usize, "one script per node");
        MinosModel { cfg }
    }

    fn input(&self, s: &mut State, node: NodeId, input: Input<u8>) {
        let outputs = s.nodes[node as usize].on_input(input);
        for o in outputs {
            self.output(s, node, o);
        }
        if self.cfg.fifo {
            s.net.sort_by_key(|m| (m.0, m.1));
        } else {
            s.net.sort();
        }
        s.persists.sort();
    }

    fn everywhere_durable(&self, s: &State, key: u8, ts: Ts) -> bool {
        s.pm.iter().all(|pm| pm[key as usize] >= ts)
    }

    fn output(&self, s: &mut State, node: NodeId, o: Output<u8>) {
        let mode = self.cfg.mode;
        let n = node as usize;
        match o {
            Output::Send { to, msg } => s.net.push((node, to, msg)),
            Output::Apply { .. } => {}
            Output::Persist { key, ts, .. } => s.persists.push((node, key, ts)),
            Output::WriteDone { key, ts, .. } => {
                if mode.write_returns_durable() && !self.everywhere_durable(s, key, ts) {
                    s.broken |= broken::WRITE_NOT_DURABLE;
                }
                if mode == Mode::Scope {
                    s.clients[n].scope_writes.push((key, ts));
                }
                s.clients[n].pending = false;
                let _ = s.history.on_return(node, RegRet::WriteOk);
            }
            Output::ReadDone { key, ts, value, .. } => {
                if mode.reads_see_only_durable() && !self.everywhere_durable(s, key, ts) {
                    s.broken |= broken::READ_NOT_DURABLE;
                }
                s.clients[n].pending = false;
                let _ = s.history.on_return(node, RegRet::ReadOk(value_byte(&value)));
            }
            Output::ScopeDone { .. } => {
                let writes = std::mem::take(&mut s.clients[n].scope_writes);
                if !writes.iter().all(|&(k, ts)| self.everywhere_durable(s, k, ts)) {
                    s.broken |= broken::SCOPE_NOT_DURABLE;
                }
                s.clients[n].pending = false;
            }
        }
    }
}

impl Model for MinosModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.cfg;
        let nodes = (0..c.nodes)
            .map(|id| {
                let mut cfg = Config::new(id, c.nodes, c.mode);
                cfg.mutation = c.mutation;
                Engine::new(cfg)
            })
            .collect();
        vec![State {
            nodes,
            net: vec![],
            persists: vec![],
            pm: vec![vec![Ts::ZERO; c.keys as usize]; c.nodes as usize],
            clients: vec![Client { next: 0, pending: false, scope_writes: vec![] }; c.nodes as usize],
            history: LinearizabilityTester::new(Registers(vec![0; c.keys as usize])),
            duplicates_left: c.duplicates,
            broken: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (node, c) in s.clients.iter().enumerate() {
            if !c.pending {
                if let Some(&op) = self.cfg.scripts[node].get(c.next) {
                    actions.push(Action::Invoke { node: node as NodeId, op });
                }
            }
        }
        for (i, (from, to, msg)) in s.net.iter().enumerate() {
            if i > 0 && self.cfg.fifo && (s.net[i - 1].0, s.net[i - 1].1) == (*from, *to) {
                continue; // not the head of its channel
            }
            if i > 0 && s.net[i - 1] == s.net[i] {
                continue; // the same copy again: the same successor
            }
            actions.push(Action::Deliver { from: *from, to: *to, msg: msg.clone() });
            if s.duplicates_left > 0 {
                actions.push(Action::Duplicate { from: *from, to: *to, msg: msg.clone() });
            }
        }
        for (i, &(node, key, ts)) in s.persists.iter().enumerate() {
            if i > 0 && s.persists[i - 1] == s.persists[i] {
                continue;
            }
            actions.push(Action::Persisted { node, key, ts });
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Invoke { node, op } => {
                let n = node as usize;
                s.clients[n].next += 1;
                s.clients[n].pending = true;
                let id = s.clients[n].next as u64;
                let input = match op {
                    Op::Write { key, value } => {
                        let _ = s.history.on_invoke(node, RegOp::Write(key, value));
                        let scope = (self.cfg.mode == Mode::Scope).then_some(SCOPE);
                        Input::Write { op: id, key, value: Value::from(&[value][..]), scope }
                    }
                    Op::Read { key } => {
                        let _ = s.history.on_invoke(node, RegOp::Read(key));
                        Input::Read { op: id, key }
                    }
                    Op::ScopeEnd => Input::ScopeEnd { op: id, scope: SCOPE },
                };
                self.input(&mut s, node, input);
            }
            Action::Deliver { from, to, msg } => {
                let i = s.net.iter().position(|m| m.0 == from && m.1 == to && m.2 == msg)?;
                s.net.remove(i);
                self.input(&mut s, to, Input::Receive { from, msg });
            }
            Action::Duplicate { from, to, msg } => {
                s.duplicates_left -= 1;
                self.input(&mut s, to, Input::Receive { from, msg });
            }
            Action::Persisted { node, key, ts } => {
                let i = s.persists.iter().position(|p| *p == (node, key, ts))?;
                s.persists.remove(i);
                let slot = &mut s.pm[node as usize][key as usize];
                *slot = (*slot).max(ts);
                self.input(&mut s, node, Input::Persisted { key, ts });
            }
        }
        Some(s)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}

/// The result of one exploration.
#[derive(Debug)]
pub struct Outcome {
    pub mode: Mode,
    /// States visited (with repeats) and distinct states.
    pub states: usize,
    pub unique: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Broken properties, each with the trace that breaks it.
    pub violations: Vec<(&'static str, String)>,
    /// Coverage properties ("sometimes") that no explored state showed.
    pub unseen: Vec<&'static str>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} states ({} distinct), max depth {}, {:.1}s, {}",
            self.mode,
            self.states,
            self.unique,
            self.max_depth,
            self.elapsed.as_secs_f64(),
            if self.ok() { "no violation".to_string() } else { format!("{} violation(s)", self.violations.len()) }
        )?;
        for (name, trace) in &self.violations {
            write!(f, "\n  VIOLATED \"{name}\":\n{trace}")?;
        }
        Ok(())
    }
}

/// Explore `cfg` breadth-first, to `max_depth` steps if given, on `threads` threads; stop at
/// the first violation.
pub fn run(cfg: ModelCfg, max_depth: Option<usize>, threads: usize) -> Outcome {
    let mode = cfg.mode;
    let model = MinosModel::new(cfg);
    let props = model.properties();
    let start = Instant::now();
    let mut builder = model.checker().threads(threads).finish_when(stateright::HasDiscoveries::AnyFailures);
    if let Some(d) = max_depth {
        builder = builder.target_max_depth(d);
    }
    let checker = builder.spawn_bfs().join();
    let elapsed = start.elapsed();
    let mut violations = vec![];
    let mut unseen = vec![];
    for p in &props {
        let found = checker.discovery(p.name);
        match (p.expectation.clone(), found) {
            (Expectation::Sometimes, None) => unseen.push(p.name),
            (Expectation::Sometimes, Some(_)) => {}
            (_, Some(path)) => violations.push((p.name, trace(checker.model(), path))),
            (_, None) => {}
        }
    }
    Outcome {
        mode,
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        violations,
        unseen,
    }
}

fn trace(model: &MinosModel, path: stateright::Path<State, Action>) -> String {
    let mut out = String::new();
    let steps = path.into_vec();
    for (i, (_, action)) in steps.iter().enumerate() {
        if let Some(a) = action {
            out.push_str(&format!("    {:>2}. {}\n", i + 1, model.format_action(a)));
        }
    }
    if let Some((last, _)) = steps.last() {
        out.push_str(&properties::describe(model, last));
    }
    out
}
