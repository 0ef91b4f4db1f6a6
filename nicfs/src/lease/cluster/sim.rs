//! A seeded simulation of node-level leases: a cluster of [`ClusterLeases`] cores, each
//! with a model of its local lease table (what its clients may do with each inode), its log
//! stream and what every member has published of every stream; messages lost, duplicated
//! and reordered; nodes crashing and restarting (a new incarnation, a new epoch, a shard it
//! managed delegated to it again), removed from the view and added back (a removed
//! manager's shards taken over by a live member); timers. One seed replays a run exactly.
//!
//! Checks, after every step: no two nodes whose clients may write one inode, nor a writer
//! and a reader of another node; a local grant of an inode last written by another live
//! node comes only after that write is published on every live member (writes of a node
//! that crashed or left since are issue 24's recovery, and not checked). At the end the
//! network goes quiet (no faults, removed nodes back, everything published, timers firing):
//! every request made must have been granted.

use super::core::{ClusterLeases, Input, Mutation, Output, RETRY_MS};
use super::{Ino, Mode, NodeId};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy)]
pub(crate) struct SimCfg {
    pub(crate) nodes: u32,
    pub(crate) shards: u32,
    pub(crate) inodes: u64,
    pub(crate) steps: usize,
    pub(crate) drop_permille: u32,
    pub(crate) dup_permille: u32,
    /// Per mille of deliveries that overtake older messages of their connection (the rest
    /// deliver the oldest of the connection picked, as TCP does).
    pub(crate) reorder_permille: u32,
    pub(crate) crash_permille: u32,
    pub(crate) view_permille: u32,
    pub(crate) seed: u64,
    pub(crate) mutation: Mutation,
}

impl SimCfg {
    pub(crate) fn new(steps: usize, seed: u64) -> SimCfg {
        SimCfg {
            nodes: 4,
            shards: 2,
            inodes: 5,
            steps,
            drop_permille: 30,
            dup_permille: 30,
            reorder_permille: 100,
            crash_permille: 3,
            view_permille: 3,
            seed,
            mutation: Mutation::None,
        }
    }
}

/// What happened, to show each check was reached.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct SimReport {
    pub(crate) grants: u64,
    pub(crate) remote_grants_checked: u64,
    pub(crate) recalls: u64,
    pub(crate) writes: u64,
    pub(crate) crashes: u64,
    pub(crate) view_changes: u64,
    pub(crate) takeovers: u64,
    pub(crate) lost: u64,
    pub(crate) duplicated: u64,
}

enum Event {
    Msg {
        to: NodeId,
        env: super::core::Envelope,
    },
    /// The local table of `node` finishes revoking `ino` (its clients flushed).
    LocalRevoke {
        node: NodeId,
        inc: u64,
        ino: Ino,
        keep_read: bool,
    },
}

struct World {
    cfg: SimCfg,
    rng: StdRng,
    cores: Vec<ClusterLeases>,
    /// Up and in the view.
    live: BTreeSet<NodeId>,
    inc: Vec<u64>,
    epoch: u64,
    now: u64,
    /// Each shard's manager and the epoch it was delegated in.
    managers: BTreeMap<u32, (NodeId, u64)>,
    /// What each node's clients may do: node → inode → mode.
    local: Vec<BTreeMap<Ino, Mode>>,
    /// Each node's log stream end; what member m published of origin o.
    log_end: Vec<u64>,
    published: BTreeMap<(NodeId, NodeId), u64>,
    /// The last write of each inode: origin, LSN, whether it is exempt (the origin crashed or
    /// left since).
    last_write: BTreeMap<Ino, (NodeId, u64, bool)>,
    outstanding: BTreeSet<(NodeId, Ino, u8)>,
    pending: Vec<Event>,
    report: SimReport,
    /// Every input fed and output given, for a failed run's message (SIM_TRACE=ino).
    trace: Vec<String>,
    trace_ino: Option<String>,
}

fn mode_bit(m: Mode) -> u8 {
    match m {
        Mode::Read => 0,
        Mode::Write => 1,
    }
}

impl World {
    fn new(cfg: SimCfg) -> World {
        let mut w = World {
            cfg,
            rng: StdRng::seed_from_u64(cfg.seed),
            cores: Vec::new(),
            live: (0..cfg.nodes).collect(),
            inc: vec![0; cfg.nodes as usize],
            epoch: 1,
            now: 0,
            managers: (0..cfg.shards).map(|s| (s, (s % cfg.nodes, 1))).collect(),
            local: vec![BTreeMap::new(); cfg.nodes as usize],
            log_end: vec![0; cfg.nodes as usize],
            published: BTreeMap::new(),
            last_write: BTreeMap::new(),
            outstanding: BTreeSet::new(),
            pending: Vec::new(),
            report: SimReport::default(),
            trace: Vec::new(),
            trace_ino: std::env::var("SIM_TRACE").ok().map(|i| format!("ino: {i},")),
        };
        w.cores = (0..cfg.nodes).map(|n| w.fresh_core(n)).collect();
        for n in 0..cfg.nodes {
            w.boot(n).expect("a first boot checks nothing that can fail");
        }
        w
    }

    fn fresh_core(&self, n: NodeId) -> ClusterLeases {
        ClusterLeases::new(n, self.cfg.shards, 5 * RETRY_MS).with_mutation(self.cfg.mutation)
    }

    /// Tells a (re)started node the view and the delegations.
    fn boot(&mut self, n: NodeId) -> Result<(), String> {
        let members = self.live.clone();
        self.feed(n, Input::Tick { now_ms: self.now })?;
        self.feed(n, Input::View { epoch: self.epoch, members })?;
        for (&shard, &(manager, epoch)) in &self.managers.clone() {
            self.feed(n, Input::Delegated { shard, manager, epoch })?;
        }
        self.feed(n, Input::Logged { stream: (n, 0), end: self.log_end[n as usize] })?;
        for m in self.live.clone() {
            let lsn = self.published.get(&(m, n)).copied().unwrap_or(0);
            self.feed(n, Input::Published { member: m, stream: (n, 0), lsn })?;
        }
        Ok(())
    }

    fn feed(&mut self, n: NodeId, input: Input) -> Result<(), String> {
        if !self.live.contains(&n) {
            return Ok(());
        }
        let t = self.trace_ino.as_ref().map(|_| format!("t={} node {n} <- {input:?}", self.now));
        let outs = self.cores[n as usize].step(input);
        if let (Some(want), Some(t)) = (&self.trace_ino, t) {
            let line = format!("{t} => {outs:?}");
            if line.contains(want.as_str())
                || line.contains("View")
                || line.contains("Delegated")
                || line.contains("Holdings")
            {
                self.trace.push(line);
            }
        }
        for o in outs {
            match o {
                Output::Send { to, env } => {
                    if matches!(env.msg, super::core::Msg::Recall { .. }) {
                        self.report.recalls += 1;
                    }
                    self.pending.push(Event::Msg { to, env });
                }
                Output::GrantLocal { ino, mode } => self.grant_local(n, ino, mode)?,
                Output::RevokeLocal { ino, keep_read } => {
                    self.pending.push(Event::LocalRevoke { node: n, inc: self.inc[n as usize], ino, keep_read });
                }
            }
        }
        self.check()
    }

    fn grant_local(&mut self, n: NodeId, ino: Ino, mode: Mode) -> Result<(), String> {
        self.report.grants += 1;
        if let Some(&(origin, lsn, exempt)) = self.last_write.get(&ino) {
            if origin != n && !exempt {
                self.report.remote_grants_checked += 1;
                for &m in &self.live {
                    let p = self.published.get(&(m, origin)).copied().unwrap_or(0);
                    if p < lsn {
                        return Err(format!(
                            "grant before publication: node {n} granted inode {ino} ({mode:?}) while node {origin}'s write at LSN {lsn} is published on node {m} only up to {p}"
                        ));
                    }
                }
            }
        }
        let held = self.local[n as usize].entry(ino).or_insert(mode);
        if mode == Mode::Write {
            *held = Mode::Write;
        }
        self.outstanding.remove(&(n, ino, mode_bit(mode)));
        if mode == Mode::Write {
            self.outstanding.remove(&(n, ino, 0));
        }
        Ok(())
    }

    fn check(&self) -> Result<(), String> {
        for ino in 0..self.cfg.inodes {
            let writers: Vec<NodeId> = (0..self.cfg.nodes)
                .filter(|&n| self.live.contains(&n) && self.local[n as usize].get(&ino) == Some(&Mode::Write))
                .collect();
            let readers: Vec<NodeId> = (0..self.cfg.nodes)
                .filter(|&n| self.live.contains(&n) && self.local[n as usize].get(&ino) == Some(&Mode::Read))
                .collect();
            let states = || self.cores.iter().map(|c| c.describe(ino)).collect::<Vec<_>>().join("\n");
            if writers.len() > 1 {
                return Err(format!("two writers of inode {ino}: nodes {writers:?}\n{}", states()));
            }
            if let (Some(w), Some(r)) = (writers.first(), readers.first()) {
                return Err(format!("inode {ino}: node {w} writes while node {r} reads\n{}", states()));
            }
        }
        Ok(())
    }

    fn deliver(&mut self, mut i: usize, faults: bool) -> Result<(), String> {
        if let Event::Msg { to, env } = &self.pending[i] {
            if !faults || self.rng.random_range(0..1000) >= self.cfg.reorder_permille {
                let (from, to) = (env.from, *to);
                i = self
                    .pending
                    .iter()
                    .position(|e| matches!(e, Event::Msg { to: t, env } if (env.from, *t) == (from, to)))
                    .expect("the picked message itself");
            }
        }
        // Only messages are lost or duplicated; a local revocation always completes.
        let faults = faults && matches!(self.pending[i], Event::Msg { .. });
        let roll = self.rng.random_range(0..1000);
        if faults && roll < self.cfg.drop_permille {
            self.pending.remove(i);
            self.report.lost += 1;
            return Ok(());
        }
        let keep = faults && roll < self.cfg.drop_permille + self.cfg.dup_permille;
        let ev = if keep {
            self.report.duplicated += 1;
            match &self.pending[i] {
                Event::Msg { to, env } => Event::Msg { to: *to, env: env.clone() },
                Event::LocalRevoke { .. } => self.pending.remove(i),
            }
        } else {
            self.pending.remove(i)
        };
        match ev {
            Event::Msg { to, env } => self.feed(to, Input::Receive(env)),
            Event::LocalRevoke { node, inc, ino, keep_read } => {
                if inc != self.inc[node as usize] || !self.live.contains(&node) {
                    return Ok(());
                }
                let l = &mut self.local[node as usize];
                if keep_read {
                    l.insert(ino, Mode::Read);
                } else {
                    l.remove(&ino);
                }
                let end = self.log_end[node as usize];
                self.feed(node, Input::LocalRevoked { ino, covered: vec![((node, 0), end)] })
            }
        }
    }

    fn publish(&mut self, m: NodeId, o: NodeId, lsn: u64) -> Result<(), String> {
        let p = self.published.entry((m, o)).or_default();
        *p = (*p).max(lsn.min(self.log_end[o as usize]));
        let lsn = *p;
        self.feed(o, Input::Published { member: m, stream: (o, 0), lsn })
    }

    /// A node's writes so far are recovery's business from now on.
    fn exempt(&mut self, n: NodeId) {
        for w in self.last_write.values_mut() {
            if w.0 == n {
                w.2 = true;
            }
        }
    }

    fn new_view(&mut self) -> Result<(), String> {
        self.epoch += 1;
        self.report.view_changes += 1;
        let members = self.live.clone();
        for n in members.clone() {
            self.feed(n, Input::View { epoch: self.epoch, members: members.clone() })?;
        }
        Ok(())
    }

    fn delegate(&mut self, shard: u32, manager: NodeId) -> Result<(), String> {
        self.managers.insert(shard, (manager, self.epoch));
        for n in self.live.clone() {
            self.feed(n, Input::Delegated { shard, manager, epoch: self.epoch })?;
        }
        Ok(())
    }

    fn crash(&mut self, n: NodeId) -> Result<(), String> {
        self.report.crashes += 1;
        self.inc[n as usize] += 1;
        self.local[n as usize].clear();
        self.outstanding.retain(|o| o.0 != n);
        self.exempt(n);
        self.cores[n as usize] = self.fresh_core(n);
        // A restart is a new incarnation: a new view; the shards it managed are delegated to
        // it again (clustermgr's take-over of its old incarnation's delegation).
        self.new_view()?;
        self.boot(n)?;
        for (shard, (m, _)) in self.managers.clone() {
            if m == n {
                self.report.takeovers += 1;
                self.delegate(shard, n)?;
            }
        }
        Ok(())
    }

    fn remove(&mut self, n: NodeId) -> Result<(), String> {
        self.live.remove(&n);
        self.inc[n as usize] += 1;
        self.local[n as usize].clear();
        self.outstanding.retain(|o| o.0 != n);
        self.exempt(n);
        self.new_view()?;
        let first = *self.live.first().expect("a live node");
        for (shard, (m, _)) in self.managers.clone() {
            if m == n {
                self.report.takeovers += 1;
                self.delegate(shard, first)?;
            }
        }
        Ok(())
    }

    /// A node joins again; as a new member it is first brought up to what every member has
    /// published (the state transfer of issue 24), so what was released before is there.
    fn add(&mut self, n: NodeId) -> Result<(), String> {
        for o in 0..self.cfg.nodes {
            let have = self.live.iter().map(|&m| self.published.get(&(m, o)).copied().unwrap_or(0)).min().unwrap_or(0);
            let p = self.published.entry((n, o)).or_default();
            *p = (*p).max(have);
        }
        self.live.insert(n);
        self.cores[n as usize] = self.fresh_core(n);
        self.new_view()?;
        self.boot(n)
    }

    fn random_live(&mut self) -> NodeId {
        let v: Vec<NodeId> = self.live.iter().copied().collect();
        v[self.rng.random_range(0..v.len())]
    }

    fn step(&mut self) -> Result<(), String> {
        self.now += 5;
        let roll = self.rng.random_range(0..1000u32);
        let c = self.cfg;
        if roll < c.crash_permille {
            let n = self.random_live();
            return self.crash(n);
        }
        if roll < c.crash_permille + c.view_permille {
            let gone: Vec<NodeId> = (0..c.nodes).filter(|n| !self.live.contains(n)).collect();
            if let Some(&n) = gone.first() {
                return self.add(n);
            }
            if self.live.len() > 2 {
                let n = self.random_live();
                return self.remove(n);
            }
            return Ok(());
        }
        match self.rng.random_range(0..100u32) {
            0..20 => {
                let n = self.random_live();
                let ino = self.rng.random_range(0..c.inodes);
                let mode = if self.rng.random_bool(0.5) { Mode::Write } else { Mode::Read };
                self.outstanding.insert((n, ino, mode_bit(mode)));
                self.feed(n, Input::Request { ino, mode })
            }
            20..35 => {
                let n = self.random_live();
                let ino = self.rng.random_range(0..c.inodes);
                if self.local[n as usize].get(&ino) == Some(&Mode::Write) {
                    self.report.writes += 1;
                    self.log_end[n as usize] += self.rng.random_range(1..50);
                    let end = self.log_end[n as usize];
                    self.last_write.insert(ino, (n, end, false));
                    self.feed(n, Input::Logged { stream: (n, 0), end })?;
                }
                Ok(())
            }
            35..50 => {
                let m = self.random_live();
                let o = self.rng.random_range(0..c.nodes);
                let lsn = self.rng.random_range(0..=self.log_end[o as usize]);
                self.publish(m, o, lsn)
            }
            50..55 => {
                let n = self.random_live();
                self.feed(n, Input::Tick { now_ms: self.now })
            }
            _ => {
                if self.pending.is_empty() {
                    return Ok(());
                }
                let i = self.rng.random_range(0..self.pending.len());
                self.deliver(i, true)
            }
        }
    }

    /// No more faults: every node back, everything delivered and published, timers firing.
    fn quiesce(&mut self) -> Result<(), String> {
        let gone: Vec<NodeId> = (0..self.cfg.nodes).filter(|n| !self.live.contains(n)).collect();
        for n in gone {
            self.add(n)?;
        }
        for _round in 0..200 {
            let mut delivered = 0;
            while !self.pending.is_empty() {
                self.deliver(0, false)?;
                delivered += 1;
                if delivered > 100_000 {
                    let last: Vec<String> = self
                        .pending
                        .iter()
                        .rev()
                        .take(6)
                        .map(|e| match e {
                            Event::Msg { to, env } => format!("{} -> {to}: {:?}", env.from, env.msg),
                            Event::LocalRevoke { node, ino, .. } => format!("local revoke {node} {ino}"),
                        })
                        .collect();
                    return Err(format!("messages without end once quiet: {last:?}"));
                }
            }
            for m in self.live.clone() {
                for o in self.live.clone() {
                    self.publish(m, o, u64::MAX)?;
                }
            }
            if self.outstanding.is_empty() && self.pending.is_empty() {
                return Ok(());
            }
            self.now += RETRY_MS;
            for n in self.live.clone() {
                self.feed(n, Input::Tick { now_ms: self.now })?;
            }
        }
        let stuck: Vec<String> = self
            .outstanding
            .iter()
            .map(|(n, i, m)| format!("node {n} inode {i} {}", if *m == 1 { "write" } else { "read" }))
            .collect();
        let waiting: Vec<usize> = self.cores.iter().map(|c| c.pending()).collect();
        let inos: BTreeSet<Ino> = self.outstanding.iter().map(|o| o.1).collect();
        let states: Vec<String> = inos.iter().flat_map(|&i| self.cores.iter().map(move |c| c.describe(i))).collect();
        Err(format!(
            "no progress once quiet: still waiting {stuck:?} (pending per node {waiting:?}); live {:?}; {}",
            self.live,
            states.join("\n")
        ))
    }
}

/// Runs one seeded simulation; the first failed check, with the step it failed at.
pub(crate) fn run(cfg: SimCfg) -> Result<SimReport, String> {
    let mut w = World::new(cfg);
    for i in 0..cfg.steps {
        w.step().map_err(|e| {
            if w.trace_ino.is_some() {
                eprintln!("{}", w.trace.join("\n"));
            }
            format!("seed {} step {i}: {e}", cfg.seed)
        })?;
        if w.pending.len() > 100_000 {
            return Err(format!("seed {} step {i}: messages pile up", cfg.seed));
        }
    }
    w.quiesce().map_err(|e| format!("seed {}: {e}", cfg.seed))?;
    Ok(w.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_runs_keep_one_writer_publish_before_moving_and_make_progress() {
        let mut total = SimReport::default();
        for seed in 0..500 {
            let t = std::time::Instant::now();
            let seed = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(seed);
            let r = run(SimCfg::new(3000, seed)).unwrap_or_else(|e| panic!("{e}"));
            assert!(t.elapsed() < std::time::Duration::from_secs(20), "seed {seed} took {:?}", t.elapsed());
            total.grants += r.grants;
            total.remote_grants_checked += r.remote_grants_checked;
            total.recalls += r.recalls;
            total.writes += r.writes;
            total.crashes += r.crashes;
            total.view_changes += r.view_changes;
            total.takeovers += r.takeovers;
            total.lost += r.lost;
            total.duplicated += r.duplicated;
        }
        // Every check and fault was reached.
        assert!(total.remote_grants_checked > 100, "{total:?}");
        assert!(total.recalls > 100 && total.writes > 100, "{total:?}");
        assert!(total.crashes > 10 && total.takeovers > 10 && total.view_changes > 20, "{total:?}");
        assert!(total.lost > 100 && total.duplicated > 100, "{total:?}");
    }

    fn caught(mutation: Mutation, what: &str) {
        for seed in 0..200 {
            let cfg = SimCfg { mutation, ..SimCfg::new(3000, seed) };
            if let Err(e) = run(cfg) {
                assert!(e.contains(what), "{mutation:?} failed otherwise: {e}");
                return;
            }
        }
        panic!("{mutation:?} was not caught in 200 seeds");
    }

    #[test]
    fn releasing_before_publication_is_caught() {
        caught(Mutation::ReleaseBeforePublication, "grant before publication");
    }

    #[test]
    fn granting_without_recalling_is_caught() {
        caught(Mutation::NoRecall, "writ");
    }

    #[test]
    fn taking_a_stale_grant_is_caught() {
        caught(Mutation::AcceptStaleGrant, "writ");
    }

    #[test]
    fn granting_before_the_new_manager_synced_is_caught() {
        caught(Mutation::SkipSync, "writ");
    }
}
