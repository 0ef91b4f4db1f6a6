//! The model check: a small cluster of [`Engine`](crate::Engine)s explored exhaustively by
//! stateright, through the same [`World`] (drivers and checks) as the simulation.
//!
//! One client, on node 0, runs a script of appends and fsyncs to its log (slot 1); every
//! node replicates it (3 nodes, chains of 3). From a state, the enabled actions are:
//!
//! - the client's next operation (an fsync blocks the script until it completes);
//! - any pending event is carried out: a message delivered (the network is an unordered
//!   multiset: every reordering is explored), a persist, a state transfer or a view
//!   notification completing (in any order);
//! - a message delivered and kept for a second delivery, or lost, while those budgets last;
//! - a node crashes and restarts (its PM kept, its volatile state lost), while the crash
//!   budget lasts;
//! - the cluster manager removes a replica from the view, or adds a removed one back,
//!   while the view-change budget lasts;
//! - when nothing is pending, a node's timeout fires if it would act (a budget per node, so
//!   that a protocol retransmitting without progress ends in a state the liveness property
//!   sees instead of a cycle).
//!
//! Publication is eager (node 0 publishes what it appended at once, replicas' publications
//! complete at once): its interleavings would multiply the states without touching the
//! replication rules; the simulation interleaves it.
//!
//! Properties: every check of [`World`] (as "no violation": a state where a check failed
//! records its message and has no successor); liveness — a terminal state has no fsync
//! waiting and, if the script's last fsync completed, the final state of
//! [`World::final_state`]; and coverage ("sometimes") showing each check's premise reached.

use crate::engine::Mutation;
use crate::msg::Input;
use crate::types::{Lsn, NodeId};
use crate::world::{stream, Event, Params, World};
use stateright::{Checker, Expectation, Model, Property};
use std::fmt;
use std::time::{Duration, Instant};

/// A client operation of the script.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Append(u8),
    Fsync,
}

/// What to explore.
#[derive(Clone, Debug)]
pub struct ModelCfg {
    pub nodes: u32,
    pub replicas: usize,
    pub chunk: Lsn,
    pub script: Vec<Op>,
    pub duplicates: u8,
    pub drops: u8,
    pub crashes: u8,
    /// View changes (a removal or an addition each).
    pub views: u8,
    pub mutation: Mutation,
}

impl ModelCfg {
    /// 3 nodes, chunks of 2 bytes, a client appending 2 bytes (a full chunk, shipped
    /// proactively) and calling fsync. [`ModelCfg::two_chunks`] adds an fsync remainder.
    pub fn small() -> ModelCfg {
        ModelCfg {
            nodes: 3,
            replicas: 2,
            chunk: 2,
            script: vec![Op::Append(2), Op::Fsync],
            duplicates: 0,
            drops: 0,
            crashes: 0,
            views: 0,
            mutation: Mutation::None,
        }
    }

    /// Like [`ModelCfg::small`] with 3 bytes: a chunk shipped proactively and the last
    /// byte shipped by the fsync.
    pub fn two_chunks() -> ModelCfg {
        ModelCfg::small().with_script(vec![Op::Append(3), Op::Fsync])
    }

    pub fn with_duplicates(mut self, n: u8) -> ModelCfg {
        self.duplicates = n;
        self
    }

    pub fn with_drops(mut self, n: u8) -> ModelCfg {
        self.drops = n;
        self
    }

    pub fn with_crashes(mut self, n: u8) -> ModelCfg {
        self.crashes = n;
        self
    }

    /// Chains of 2 on 3 nodes: removing the replica brings a new member into the chain.
    pub fn short_chains(mut self) -> ModelCfg {
        self.replicas = 1;
        self
    }

    pub fn with_views(mut self, n: u8) -> ModelCfg {
        self.views = n;
        self
    }

    pub fn with_script(mut self, script: Vec<Op>) -> ModelCfg {
        self.script = script;
        self
    }

    pub fn with_mutation(mut self, m: Mutation) -> ModelCfg {
        self.mutation = m;
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub w: World,
    /// The script's next operation.
    pub next: usize,
    pub duplicates_left: u8,
    pub drops_left: u8,
    pub crashes_left: u8,
    pub views_left: u8,
    pub ticks_left: Vec<u8>,
    /// The first check that failed.
    pub broken: Option<String>,
    /// Fsyncs completed, and whether the script's last one did.
    pub fsyncs_done: u8,
    pub last_fsync_done: bool,
    /// Coverage flags ([`seen`]).
    pub seen: u16,
}

/// Things seen happen, for the coverage properties (bit flags).
pub mod seen {
    pub const STALE_DELIVERED: u16 = 1;
    pub const REBASED: u16 = 2;
    pub const LOST: u16 = 4;
    pub const DUPLICATED: u16 = 8;
    pub const CRASHED: u16 = 16;
    pub const VIEW_CHANGED: u16 = 32;
    pub const RECLAIMED: u16 = 64;
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Client(Op),
    CarryOut(Event),
    Duplicate(Event),
    Lose(Event),
    Crash(NodeId),
    Remove(NodeId),
    Add(NodeId),
    Tick(NodeId),
}

pub struct ChainModel {
    pub cfg: ModelCfg,
}

/// The client's log.
const SLOT: u32 = 1;

impl ChainModel {
    fn terminal(&self, s: &State) -> bool {
        let mut actions = vec![];
        self.actions(s, &mut actions);
        actions.is_empty()
    }

    fn publish_eagerly(w: &mut World) -> Result<(), String> {
        loop {
            if let Some(i) = w.pending.iter().position(|e| matches!(e, Event::Publish(..))) {
                w.carry_out(i, false)?;
                continue;
            }
            let published = w.logs[0].get(&SLOT).map_or(0, |l| l.published);
            if published < w.durable(0, stream(0, SLOT)) {
                w.publish_primary(0, SLOT, true)?;
                continue;
            }
            return Ok(());
        }
    }
}

impl Model for ChainModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let c = &self.cfg;
        let params = Params { nodes: c.nodes, replicas: c.replicas, chunk: c.chunk, mutation: c.mutation };
        let mut w = World::new(params);
        // The first view reaches every node before the run starts.
        while !w.pending.is_empty() {
            w.carry_out(0, false).expect("a view");
        }
        let budget = c.drops + c.crashes + c.views;
        vec![State {
            w,
            next: 0,
            duplicates_left: c.duplicates,
            drops_left: c.drops,
            crashes_left: c.crashes,
            views_left: c.views,
            ticks_left: vec![1 + 3 * budget; c.nodes as usize],
            broken: None,
            fsyncs_done: 0,
            last_fsync_done: false,
            seen: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.broken.is_some() {
            return;
        }
        if let Some(&op) = self.cfg.script.get(s.next) {
            if s.w.fsync[0].is_none() {
                actions.push(Action::Client(op));
            }
        }
        for (i, e) in s.w.pending.iter().enumerate() {
            if i > 0 && s.w.pending[i - 1] == *e {
                continue; // the same copy again: the same successor
            }
            actions.push(Action::CarryOut(e.clone()));
            if matches!(e, Event::Msg(..)) {
                if s.duplicates_left > 0 {
                    actions.push(Action::Duplicate(e.clone()));
                }
                if s.drops_left > 0 {
                    actions.push(Action::Lose(e.clone()));
                }
            }
        }
        if s.crashes_left > 0 {
            for n in 0..self.cfg.nodes {
                actions.push(Action::Crash(n));
            }
        }
        if s.views_left > 0 {
            for n in 1..self.cfg.nodes {
                actions.push(if s.w.view.contains(n) { Action::Remove(n) } else { Action::Add(n) });
            }
        }
        if s.w.pending.is_empty() {
            for n in 0..self.cfg.nodes {
                if s.ticks_left[n as usize] > 0 && s.w.engines[n as usize].tick_would_act() {
                    actions.push(Action::Tick(n));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let before = s.w.report.0.clone();
        let r = match action {
            Action::Client(Op::Append(n)) => {
                s.next += 1;
                let base = s.w.durable(0, stream(0, SLOT)) as u8;
                let bytes: Vec<u8> = (0..n).map(|i| base.wrapping_add(i).wrapping_add(1)).collect();
                s.w.append(0, SLOT, &bytes)
            }
            Action::Client(Op::Fsync) => {
                s.next += 1;
                s.w.start_fsync(0, &[SLOT])
            }
            Action::CarryOut(e) | Action::Duplicate(e) | Action::Lose(e) if !s.w.pending.contains(&e) => {
                return None;
            }
            Action::CarryOut(e) => {
                let i = s.w.pending.iter().position(|x| *x == e).expect("pending");
                s.w.carry_out(i, false)
            }
            Action::Duplicate(e) => {
                s.duplicates_left -= 1;
                s.seen |= seen::DUPLICATED;
                let i = s.w.pending.iter().position(|x| *x == e).expect("pending");
                s.w.carry_out(i, true)
            }
            Action::Lose(e) => {
                s.drops_left -= 1;
                s.seen |= seen::LOST;
                let i = s.w.pending.iter().position(|x| *x == e).expect("pending");
                s.w.lose(i);
                Ok(())
            }
            Action::Crash(n) => {
                s.crashes_left -= 1;
                s.seen |= seen::CRASHED;
                s.w.crash(n)
            }
            Action::Remove(n) | Action::Add(n) => {
                s.views_left -= 1;
                s.seen |= seen::VIEW_CHANGED;
                let mut nodes = s.w.view.nodes.clone();
                if let Some(at) = nodes.iter().position(|&x| x == n) {
                    nodes.remove(at);
                } else {
                    nodes.push(n);
                    nodes.sort();
                }
                s.w.new_view(nodes);
                Ok(())
            }
            Action::Tick(n) => {
                s.ticks_left[n as usize] -= 1;
                s.w.step(n, Input::Tick)
            }
        };
        if let Err(e) = r {
            s.broken = Some(e);
        }
        // Publication is not what is checked here, and its interleavings would multiply the
        // states: the primary publishes at once, and replicas' publications complete at once.
        if s.broken.is_none() {
            if let Err(e) = ChainModel::publish_eagerly(&mut s.w) {
                s.broken = Some(e);
            }
        }
        let after = &s.w.report.0;
        if after.fsyncs_done > before.fsyncs_done {
            s.fsyncs_done += 1;
            let fsyncs = self.cfg.script.iter().filter(|o| **o == Op::Fsync).count();
            s.last_fsync_done = s.next >= self.cfg.script.len() && fsyncs > 0;
        }
        if after.stale_delivered > before.stale_delivered {
            s.seen |= seen::STALE_DELIVERED;
        }
        if after.rebases > before.rebases {
            s.seen |= seen::REBASED;
        }
        if after.reclaims > before.reclaims {
            s.seen |= seen::RECLAIMED;
        }
        // The counters are not part of the state's identity; keep them from growing apart.
        s.w.report.0 = Default::default();
        s.w.pending.sort();
        Some(s)
    }

    fn format_action(&self, action: &Action) -> String {
        match action {
            Action::CarryOut(Event::Msg(f, t, m)) => format!("deliver {f}->{t} {m:?}"),
            Action::Duplicate(Event::Msg(f, t, m)) => format!("deliver a copy {f}->{t} {m:?}"),
            Action::Lose(Event::Msg(f, t, m)) => format!("LOSE {f}->{t} {m:?}"),
            other => format!("{other:?}"),
        }
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut p = vec![
            Property::always("no violation of the world's checks", |_, s: &State| s.broken.is_none()),
            Property::always("liveness: a run ends with no fsync waiting, and settled", |m: &ChainModel, s: &State| {
                if s.broken.is_some() || !m.terminal(s) {
                    return true;
                }
                s.w.fsync.iter().all(Option::is_none) && (!s.last_fsync_done || s.w.final_state().is_ok())
            }),
            Property::sometimes("a run ends settled after its last fsync", |m: &ChainModel, s: &State| {
                s.broken.is_none() && s.last_fsync_done && m.terminal(s) && s.w.final_state().is_ok()
            }),
            Property::sometimes("an fsync completed (its durability checked)", |_, s: &State| s.fsyncs_done > 0),
            Property::sometimes("log space reclaimed (checked against every member)", |_, s: &State| {
                s.seen & seen::RECLAIMED != 0
            }),
        ];
        let c = &self.cfg;
        if c.drops > 0 {
            p.push(Property::sometimes("a message lost, then every fsync completed", |_, s: &State| {
                s.seen & seen::LOST != 0 && s.last_fsync_done
            }));
        }
        if c.duplicates > 0 {
            p.push(Property::sometimes("a copy delivered, then every fsync completed", |_, s: &State| {
                s.seen & seen::DUPLICATED != 0 && s.last_fsync_done
            }));
        }
        if c.crashes > 0 {
            p.push(Property::sometimes("a crash, then every fsync completed", |_, s: &State| {
                s.seen & seen::CRASHED != 0 && s.last_fsync_done
            }));
        }
        if c.views > 0 {
            p.push(Property::sometimes("a view change, then every fsync completed", |_, s: &State| {
                s.seen & seen::VIEW_CHANGED != 0 && s.last_fsync_done
            }));
            p.push(Property::sometimes("a message of another epoch delivered (changing nothing)", |_, s: &State| {
                s.seen & seen::STALE_DELIVERED != 0
            }));
        }
        if c.views > 0 && c.replicas + 1 < c.nodes as usize {
            // A removal brings a new member into the chain, behind the reclaimed point.
            p.push(Property::sometimes("a joining replica rebased", |_, s: &State| s.seen & seen::REBASED != 0));
        }
        p
    }
}

/// The result of one exploration.
#[derive(Debug)]
pub struct Outcome {
    pub states: usize,
    pub unique: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Broken properties, each with the trace that breaks it.
    pub violations: Vec<(&'static str, String)>,
    /// Coverage properties no explored state showed.
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
            "{} states ({} distinct), max depth {}, {:.1}s, {}",
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

/// Explore `cfg` breadth-first on `threads` threads; stop at the first violation.
pub fn run(cfg: ModelCfg, threads: usize) -> Outcome {
    let model = ChainModel { cfg };
    let props = model.properties();
    let start = Instant::now();
    let checker =
        model.checker().threads(threads).finish_when(stateright::HasDiscoveries::AnyFailures).spawn_bfs().join();
    let elapsed = start.elapsed();
    let mut violations = vec![];
    let mut unseen = vec![];
    for p in &props {
        match (p.expectation.clone(), checker.discovery(p.name)) {
            (Expectation::Sometimes, None) => unseen.push(p.name),
            (Expectation::Sometimes, Some(_)) => {}
            (_, Some(path)) => {
                let mut trace = String::new();
                let steps = path.into_vec();
                for (i, (_, a)) in steps.iter().enumerate() {
                    if let Some(a) = a {
                        trace.push_str(&format!("    {:>2}. {}\n", i + 1, checker.model().format_action(a)));
                    }
                }
                if let Some((last, _)) = steps.last() {
                    trace.push_str(&format!("    broken: {:?}\n", last.broken));
                }
                violations.push((p.name, trace));
            }
            (_, None) => {}
        }
    }
    Outcome {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        violations,
        unseen,
    }
}
