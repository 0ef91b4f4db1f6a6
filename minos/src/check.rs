//! The model check: a cluster of [`Engine`]s explored by stateright.
//!
//! The model drives the very engine nicfs will run; nothing of the protocol is re-written
//! here. A [`ModelCfg`] names the mode, the cluster size, a script of client operations per
//! node (one client per node, one operation at a time, so several nodes' writes run
//! concurrently; `check/workloads.rs`) and fault budgets. From a state, the enabled actions
//! are:
//!
//! - a node's client invokes its next operation (write, read or scope end);
//! - any message in flight is delivered (the network is an unordered multiset: every
//!   reordering is explored);
//! - any message in flight is delivered *and kept* for a second delivery, while the
//!   duplication budget lasts;
//! - any message in flight is lost, while the loss budget lasts;
//! - any persist in flight completes (persists complete in any order, as PM flushes do);
//! - any node crashes, while the crash budget lasts: its volatile state (engine, the driver's
//!   store, persists under way, messages in flight to and from it, its client's request) is
//!   lost, its persistent memory kept, and it restarts at once with [`Engine::recover`];
//! - when nothing is in flight (no message, no persist), a node's timeout ([`Input::Tick`])
//!   fires if it would do something: timeouts are long, so they fire only once the network
//!   is quiet. Without faults a quiet state has nothing left to retransmit. Timeouts have a
//!   budget too (3 per node per loss or crash allowed), so that a protocol that retransmits forever
//!   without progress ends in a state the deadlock check sees, instead of a cycle.
//!
//! The model keeps, besides the engines, what the driver of each node holds: its store of
//! applied values (from `Apply`) and its persistent memory (per record, the newest persisted
//! timestamp and value, written when a persist completes), and the value of every write by
//! timestamp. Every `Apply` and `Persist` is checked against the value the write wrote, the
//! store must only move forward, and the engine's copy must equal the store and the PM. The
//! durability properties are stated over the PM at the moment a client is answered.
//!
//! The properties are in `check/properties.rs`; [`run`] explores and reports counts.

mod properties;
mod workloads;

use crate::engine::{Config, Engine};
use crate::mode::{Mode, Mutation};
use crate::msg::{Input, Message, OpId, Output, ScopeId, Value};
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
    /// How many messages may be lost.
    pub drops: u8,
    /// How many node crashes (with restart) may happen.
    pub crashes: u8,
    /// The network: `false` delivers any message in flight next (every reordering);
    /// `true` keeps each (sender, receiver) channel in order, as the TCP connections between
    /// nicfs daemons do, and reorders only across channels.
    pub fifo: bool,
    pub mutation: Mutation,
}

/// The scope every lin-scope write of a node's client belongs to.
const SCOPE: ScopeId = 1;

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
    /// Its thread in the history: the node id, plus the cluster size per crash of its node
    /// (a crash abandons the request in flight, which may or may not take effect).
    pub thread: u32,
    /// The write in flight (record, value) until its timestamp is known.
    pub writing: Option<(u8, u8)>,
    /// lin-scope: the (record, TS_WR) of the writes of its scope that returned.
    pub scope_writes: Vec<(u8, Ts)>,
}

/// Promises found broken when the driver carried out an output (bit flags).
pub mod broken {
    pub const WRITE_NOT_DURABLE: u16 = 1;
    pub const READ_NOT_DURABLE: u16 = 2;
    pub const SCOPE_NOT_DURABLE: u16 = 4;
    /// An Apply, Persist or read answer carried a value other than the one its write wrote.
    pub const WRONG_VALUE: u16 = 8;
    /// An Apply moved the driver's store back to an older write.
    pub const STORE_BACKWARDS: u16 = 16;
    /// A validation (VAL, VAL_C) was sent while a node's volatile record is older.
    pub const VALIDATED_EARLY: u16 = 32;
}

/// Things seen happen, for the coverage ("sometimes") properties (bit flags).
pub mod seen {
    pub const WRITE_RETURNED_DURABLE: u16 = 1;
    pub const READ_RETURNED_WRITTEN: u16 = 2;
    pub const SCOPE_OF_TWO_ENDED: u16 = 4;
    pub const VALIDATION_SENT: u16 = 8;
    pub const REDRIVEN: u16 = 16;
    pub const CAUGHT_UP: u16 = 32;
    pub const READ_AFTER_RESTART: u16 = 64;
    pub const FOLLOWER_PERSISTED: u16 = 128;
    pub const RETRANSMITTED: u16 = 256;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub nodes: Vec<Engine<u8>>,
    /// Messages in flight (from, to, message): sorted (a multiset) on an unordered network;
    /// on a FIFO network grouped by channel, in sending order within each.
    pub net: Vec<(NodeId, NodeId, Message<u8>)>,
    /// Persists in flight (node, record, timestamp, value), sorted.
    pub persists: Vec<(NodeId, u8, Ts, u8)>,
    /// Each node's persistent memory: per record, the newest persisted timestamp and value.
    pub pm: Vec<Vec<(Ts, u8)>>,
    /// Each node's driver store: per record, the timestamp and value last applied.
    pub store: Vec<Vec<(Ts, u8)>>,
    /// Every write's (record, timestamp, value), sorted.
    pub written: Vec<(u8, Ts, u8)>,
    pub clients: Vec<Client>,
    pub history: LinearizabilityTester<u32, Registers>,
    pub duplicates_left: u8,
    pub drops_left: u8,
    pub crashes_left: u8,
    /// Timeouts left, per node.
    pub ticks_left: Vec<u8>,
    /// Messages lost and crashes so far.
    pub faults: u8,
    /// Nodes that restarted (bit per node).
    pub restarted: u8,
    pub broken: u16,
    pub seen: u16,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Invoke { node: NodeId, op: Op },
    Deliver { from: NodeId, to: NodeId, msg: Message<u8> },
    Duplicate { from: NodeId, to: NodeId, msg: Message<u8> },
    Drop { from: NodeId, to: NodeId, msg: Message<u8> },
    Persisted { node: NodeId, key: u8, ts: Ts, value: u8 },
    Crash { node: NodeId },
    Tick { node: NodeId },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Invoke { node, op } => write!(f, "client@{node} {op:?}"),
            Action::Deliver { from, to, msg } => write!(f, "deliver {from}->{to} {}", show(msg)),
            Action::Duplicate { from, to, msg } => write!(f, "deliver a copy {from}->{to} {}", show(msg)),
            Action::Drop { from, to, msg } => write!(f, "LOSE {from}->{to} {}", show(msg)),
            Action::Persisted { node, key, ts, value } => write!(f, "persisted @{node} key {key} {ts} value {value}"),
            Action::Crash { node } => write!(f, "CRASH and restart node {node}"),
            Action::Tick { node } => write!(f, "timeout @{node}"),
        }
    }
}

fn show(msg: &Message<u8>) -> String {
    match msg {
        Message::Inv { key, ts, value, scope } => {
            format!(
                "INV key {key} {ts} value {:?}{}",
                value_byte(value),
                scope.map(|s| format!(" sc{s}")).unwrap_or_default()
            )
        }
        Message::Persist { scope, writes } | Message::ValPScope { scope, writes } => {
            format!("{} sc{scope} {writes:?}", msg.kind())
        }
        Message::AckPScope { scope } => format!("[ACK_P]sc{scope}"),
        Message::Rejoin => "REJOIN".to_string(),
        Message::Catchup { records } => {
            let r: Vec<String> =
                records.iter().map(|(k, ts, v)| format!("key {k} {ts} value {}", value_byte(v))).collect();
            format!("CATCHUP [{}]", r.join(", "))
        }
        Message::Ack { key, ts }
        | Message::AckC { key, ts }
        | Message::AckP { key, ts }
        | Message::Val { key, ts }
        | Message::ValC { key, ts }
        | Message::ValP { key, ts } => format!("{} key {key} {ts}", msg.kind()),
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

    fn engine_cfg(&self, id: NodeId) -> Config {
        let mut cfg = Config::new(id, self.cfg.nodes, self.cfg.mode);
        cfg.mutation = self.cfg.mutation;
        cfg
    }

    /// The value the write (key, ts) wrote; 0 for the initial value (`Ts::ZERO`).
    fn written(s: &State, key: u8, ts: Ts) -> Option<u8> {
        if ts == Ts::ZERO {
            return Some(0);
        }
        s.written.iter().find(|w| w.0 == key && w.1 == ts).map(|w| w.2)
    }

    fn input(&self, s: &mut State, node: NodeId, input: Input<u8>) {
        let outputs = s.nodes[node as usize].on_input(input);
        self.register_write(s, node);
        for o in outputs {
            self.output(s, node, o);
        }
        self.sort(s);
    }

    fn sort(&self, s: &mut State) {
        if self.cfg.fifo {
            s.net.sort_by_key(|m| (m.0, m.1));
        } else {
            s.net.sort();
        }
        s.persists.sort();
    }

    /// Once the engine of `node` coordinates its client's write, the write's timestamp is
    /// known: record the value it writes.
    fn register_write(&self, s: &mut State, node: NodeId) {
        let n = node as usize;
        let Some((key, value)) = s.clients[n].writing else { return };
        let op = s.clients[n].next as OpId;
        let ts = s.nodes[n].coordinating().find(|(_, _, w)| w.op == Some(op)).map(|(_, ts, _)| ts);
        if let Some(ts) = ts {
            s.written.push((key, ts, value));
            s.written.sort();
            s.clients[n].writing = None;
        }
    }

    fn everywhere_durable(&self, s: &State, key: u8, ts: Ts) -> bool {
        s.pm.iter().all(|pm| pm[key as usize].0 >= ts)
    }

    fn check_value(&self, s: &mut State, key: u8, ts: Ts, value: &Value) {
        if Self::written(s, key, ts) != Some(value_byte(value)) {
            s.broken |= broken::WRONG_VALUE;
        }
    }

    fn output(&self, s: &mut State, node: NodeId, o: Output<u8>) {
        let mode = self.cfg.mode;
        let n = node as usize;
        match o {
            Output::Send { to, msg } => {
                if let Message::Val { key, ts } | Message::ValC { key, ts } = &msg {
                    s.seen |= seen::VALIDATION_SENT;
                    let behind = s.nodes.iter().any(|e| !e.is_rejoining() && e.record(key).volatile_ts < *ts);
                    if behind {
                        s.broken |= broken::VALIDATED_EARLY;
                    }
                }
                s.net.push((node, to, msg));
            }
            Output::Apply { key, ts, value } => {
                self.check_value(s, key, ts, &value);
                let slot = &mut s.store[n][key as usize];
                if ts < slot.0 {
                    s.broken |= broken::STORE_BACKWARDS;
                }
                *slot = (ts, value_byte(&value));
            }
            Output::Persist { key, ts, value } => {
                self.check_value(s, key, ts, &value);
                s.persists.push((node, key, ts, value_byte(&value)));
            }
            Output::WriteDone { key, ts, .. } => {
                if mode.write_returns_durable() {
                    if !self.everywhere_durable(s, key, ts) {
                        s.broken |= broken::WRITE_NOT_DURABLE;
                    }
                    s.seen |= seen::WRITE_RETURNED_DURABLE;
                }
                if mode == Mode::Scope {
                    s.clients[n].scope_writes.push((key, ts));
                }
                s.clients[n].pending = false;
                let _ = s.history.on_return(s.clients[n].thread, RegRet::WriteOk);
            }
            Output::ReadDone { key, ts, value, .. } => {
                self.check_value(s, key, ts, &value);
                if mode.reads_see_only_durable() && !self.everywhere_durable(s, key, ts) {
                    s.broken |= broken::READ_NOT_DURABLE;
                }
                if ts > Ts::ZERO {
                    s.seen |= seen::READ_RETURNED_WRITTEN;
                }
                if s.restarted & (1 << n) != 0 {
                    s.seen |= seen::READ_AFTER_RESTART;
                }
                s.clients[n].pending = false;
                let _ = s.history.on_return(s.clients[n].thread, RegRet::ReadOk(value_byte(&value)));
            }
            Output::ScopeDone { .. } => {
                let writes = std::mem::take(&mut s.clients[n].scope_writes);
                if !writes.iter().all(|&(k, ts)| self.everywhere_durable(s, k, ts)) {
                    s.broken |= broken::SCOPE_NOT_DURABLE;
                }
                if writes.len() >= 2 {
                    s.seen |= seen::SCOPE_OF_TWO_ENDED;
                }
                s.clients[n].pending = false;
            }
        }
    }

    /// The network and the persists are quiet: timeouts may fire.
    fn quiet(s: &State) -> bool {
        s.net.is_empty() && s.persists.is_empty()
    }

    fn crash(&self, s: &mut State, node: NodeId) {
        let n = node as usize;
        s.crashes_left -= 1;
        s.faults += 1;
        s.restarted |= 1 << n;
        let persisted: Vec<(u8, Ts, Value)> =
            s.pm[n].iter().enumerate().map(|(k, &(ts, v))| (k as u8, ts, Value::from(&[v][..]))).collect();
        let (engine, outputs) = Engine::recover(self.engine_cfg(node), persisted);
        s.nodes[n] = engine;
        s.store[n] = s.pm[n].clone();
        s.net.retain(|m| m.0 != node && m.1 != node);
        s.persists.retain(|p| p.0 != node);
        let c = &mut s.clients[n];
        c.pending = false;
        c.writing = None;
        c.scope_writes.clear();
        c.thread += self.cfg.nodes;
        for o in outputs {
            self.output(s, node, o);
        }
        self.sort(s);
    }
}

impl Model for MinosModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.cfg;
        let nodes = (0..c.nodes).map(|id| Engine::new(self.engine_cfg(id))).collect();
        let empty = vec![vec![(Ts::ZERO, 0u8); c.keys as usize]; c.nodes as usize];
        vec![State {
            nodes,
            net: vec![],
            persists: vec![],
            pm: empty.clone(),
            store: empty,
            written: vec![],
            clients: (0..c.nodes)
                .map(|i| Client { next: 0, pending: false, thread: i, writing: None, scope_writes: vec![] })
                .collect(),
            history: LinearizabilityTester::new(Registers(vec![0; c.keys as usize])),
            duplicates_left: c.duplicates,
            drops_left: c.drops,
            crashes_left: c.crashes,
            ticks_left: vec![3 * (c.drops + c.crashes); c.nodes as usize],
            faults: 0,
            restarted: 0,
            broken: 0,
            seen: 0,
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
            if s.drops_left > 0 {
                actions.push(Action::Drop { from: *from, to: *to, msg: msg.clone() });
            }
        }
        for (i, &(node, key, ts, value)) in s.persists.iter().enumerate() {
            if i > 0 && s.persists[i - 1] == s.persists[i] {
                continue;
            }
            actions.push(Action::Persisted { node, key, ts, value });
        }
        if s.crashes_left > 0 {
            for node in 0..self.cfg.nodes {
                actions.push(Action::Crash { node });
            }
        }
        if MinosModel::quiet(s) {
            for (node, e) in s.nodes.iter().enumerate() {
                if s.ticks_left[node] > 0 && e.tick_would_act() {
                    actions.push(Action::Tick { node: node as NodeId });
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Invoke { node, op } => {
                let n = node as usize;
                s.clients[n].next += 1;
                s.clients[n].pending = true;
                let id = s.clients[n].next as OpId;
                let thread = s.clients[n].thread;
                let input = match op {
                    Op::Write { key, value } => {
                        let _ = s.history.on_invoke(thread, RegOp::Write(key, value));
                        s.clients[n].writing = Some((key, value));
                        let scope = (self.cfg.mode == Mode::Scope).then_some(SCOPE);
                        Input::Write { op: id, key, value: Value::from(&[value][..]), scope }
                    }
                    Op::Read { key } => {
                        let _ = s.history.on_invoke(thread, RegOp::Read(key));
                        Input::Read { op: id, key }
                    }
                    Op::ScopeEnd => Input::ScopeEnd { op: id, scope: SCOPE },
                };
                self.input(&mut s, node, input);
            }
            Action::Deliver { from, to, msg } => {
                let i = s.net.iter().position(|m| m.0 == from && m.1 == to && m.2 == msg)?;
                s.net.remove(i);
                let was_rejoining = s.nodes[to as usize].is_rejoining();
                self.input(&mut s, to, Input::Receive { from, msg });
                if was_rejoining && !s.nodes[to as usize].is_rejoining() {
                    s.seen |= seen::CAUGHT_UP;
                }
            }
            Action::Duplicate { from, to, msg } => {
                s.duplicates_left -= 1;
                self.input(&mut s, to, Input::Receive { from, msg });
            }
            Action::Drop { from, to, msg } => {
                let i = s.net.iter().position(|m| m.0 == from && m.1 == to && m.2 == msg)?;
                s.net.remove(i);
                s.drops_left -= 1;
                s.faults += 1;
            }
            Action::Persisted { node, key, ts, value } => {
                let i = s.persists.iter().position(|p| *p == (node, key, ts, value))?;
                s.persists.remove(i);
                let slot = &mut s.pm[node as usize][key as usize];
                if ts > slot.0 {
                    *slot = (ts, value);
                }
                if ts.node != node {
                    s.seen |= seen::FOLLOWER_PERSISTED;
                }
                self.input(&mut s, node, Input::Persisted { key, ts });
            }
            Action::Crash { node } => self.crash(&mut s, node),
            Action::Tick { node } => {
                s.ticks_left[node as usize] -= 1;
                let before: usize = s.nodes[node as usize].coordinating().filter(|(_, _, w)| w.op.is_none()).count();
                let sent = s.net.len();
                self.input(&mut s, node, Input::Tick);
                let after: usize = s.nodes[node as usize].coordinating().filter(|(_, _, w)| w.op.is_none()).count();
                if after > before {
                    s.seen |= seen::REDRIVEN;
                } else if s.net.len() > sent {
                    s.seen |= seen::RETRANSMITTED;
                }
            }
        }
        Some(s)
    }

    fn format_action(&self, action: &Action) -> String {
        action.to_string()
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::for_cfg(&self.cfg)
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
