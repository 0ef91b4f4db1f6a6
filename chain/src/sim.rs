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
//! at once from them ([`crate::Engine::recover`]) and asks the cluster manager for the view.
//!
//! The drivers ([`World`]) carry out every output and make the checks `world.rs` lists after
//! every step. Liveness: after the last operation, every node is put back in the view and
//! the network goes quiet (no more faults; timeouts until nothing is left to do); then no
//! fsync may wait, a last fsync of every log must complete, every copy must hold and have
//! published the whole log, and every primary must have reclaimed it all.
//!
//! [`SimReport`] counts what happened, so tests can show each check was reached.

use crate::engine::Mutation;
use crate::msg::Input;
use crate::types::{Lsn, NodeId};
use crate::world::{Event, Params, World};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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

pub use crate::world::SimReport;

/// The seeded scheduler's moves that need a random choice.
struct Sim<'a> {
    cfg: &'a SimCfg,
    w: World,
    rng: StdRng,
}

impl Sim<'_> {
    /// Carry out a random pending event; faults: may duplicate or lose a message. A message
    /// picked usually yields to the oldest one of its connection (TCP order); sometimes it
    /// overtakes.
    fn event(&mut self, faults: bool) -> Result<(), String> {
        let mut i = self.rng.random_range(0..self.w.pending.len());
        if let Event::Msg(from, to, msg) = &self.w.pending[i] {
            if self.rng.random_range(0..1000) >= self.cfg.reorder_permille {
                let (from, to, class) = (*from, *to, msg.class());
                i = self
                    .w
                    .pending
                    .iter()
                    .position(|e| matches!(e, Event::Msg(f, t, m) if (*f, *t, m.class()) == (from, to, class)))
                    .expect("the picked message itself");
            }
            let roll = self.rng.random_range(0..1000);
            if faults && roll < self.cfg.drop_permille {
                self.w.lose(i);
                return Ok(());
            }
            let copy = faults && roll < self.cfg.drop_permille + self.cfg.dup_permille;
            return self.w.carry_out(i, copy);
        }
        self.w.carry_out(i, false)
    }

    fn change_view(&mut self) {
        let out: Vec<NodeId> = (0..self.cfg.nodes).filter(|n| !self.w.view.contains(*n)).collect();
        let mut nodes = self.w.view.nodes.clone();
        if !out.is_empty() && (nodes.len() <= 2 || self.rng.random_bool(0.5)) {
            nodes.push(out[self.rng.random_range(0..out.len())]);
            nodes.sort();
        } else if nodes.len() > 1 {
            nodes.remove(self.rng.random_range(0..nodes.len()));
        }
        self.w.new_view(nodes);
    }

    fn append(&mut self, node: NodeId, slot: u32, len: usize) -> Result<(), String> {
        let bytes: Vec<u8> = (0..len).map(|_| self.rng.random::<u8>()).collect();
        self.w.append(node, slot, &bytes)
    }

    /// No more faults: deliver everything, time out until nothing is left to do.
    fn quiesce(&mut self) -> Result<(), String> {
        for _round in 0..200 {
            while !self.w.pending.is_empty() {
                self.event(false)?;
            }
            let acting = self.w.ticking();
            if acting.is_empty() {
                return Ok(());
            }
            for i in acting {
                self.w.report.0.ticks += 1;
                self.w.step(i, Input::Tick)?;
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
    let params = Params { nodes: cfg.nodes, replicas: cfg.replicas, chunk: cfg.chunk, mutation: cfg.mutation };
    let mut sim = Sim { cfg, w: World::new(params), rng: StdRng::seed_from_u64(cfg.seed) };
    let mut started = 0usize;
    let step_cap = 400 * cfg.ops + 10_000;
    while started < cfg.ops || !sim.w.pending.is_empty() {
        sim.w.report.0.steps += 1;
        if sim.w.report.0.steps > step_cap {
            return Err(format!("the run does not end: {} events pending", sim.w.pending.len()));
        }
        let roll = sim.rng.random_range(0..100_000u32);
        let node = sim.rng.random_range(0..cfg.nodes);
        let slot = sim.rng.random_range(1..=cfg.logs);
        // Cumulative thresholds per 100,000 steps: client operations, publication, crashes,
        // view changes, timeouts; the rest deliver pending events.
        let client = 8_000;
        let publish = client + 4_000;
        let crash = publish + cfg.crash_per_100k;
        let view = crash + cfg.view_change_per_100k;
        let tick = view + cfg.tick_per_100k;
        if started < cfg.ops && roll < client {
            started += 1;
            if sim.w.fsync[node as usize].is_none() && sim.rng.random_range(0..100) < cfg.fsync_percent {
                sim.w.start_fsync(node, &[slot, LEASE_SLOT])?;
            } else if sim.rng.random_range(0..10) == 0 {
                // A lease granted: its record goes to the node's lease stream.
                sim.append(node, LEASE_SLOT, 8)?;
            } else {
                let len = sim.rng.random_range(1..=cfg.chunk as usize);
                sim.append(node, slot, len)?;
            }
        } else if roll < publish {
            let all = sim.rng.random_bool(0.1);
            let slot = if sim.rng.random_bool(0.2) { LEASE_SLOT } else { slot };
            sim.w.publish_primary(node, slot, all)?;
        } else if started < cfg.ops && roll < crash {
            sim.w.crash(node)?;
        } else if started < cfg.ops && roll < view {
            sim.change_view();
        } else if roll < tick || sim.w.pending.is_empty() {
            sim.w.report.0.ticks += 1;
            sim.w.step(node, Input::Tick)?;
        } else {
            sim.event(true)?;
        }
    }
    // Liveness: every node back in the view, a quiet network, everything published and a
    // last fsync of every log.
    if sim.w.view.nodes.len() < cfg.nodes as usize {
        sim.w.new_view((0..cfg.nodes).collect());
    }
    sim.quiesce()?;
    if let Some(i) = sim.w.fsync.iter().position(Option::is_some) {
        return Err(format!("stalled: the fsync of node {i} never completed on a quiet network"));
    }
    let slots: Vec<u32> = (0..=cfg.logs).collect();
    for node in 0..cfg.nodes {
        for &slot in &slots {
            sim.w.publish_primary(node, slot, true)?;
        }
        sim.w.start_fsync(node, &slots)?;
    }
    sim.quiesce()?;
    sim.w.final_state()?;
    Ok(sim.w.report.0)
}
