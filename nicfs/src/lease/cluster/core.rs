//! One node's node-level lease state machine ([`ClusterLeases`]): its inputs, outputs and
//! transitions. The protocol is described in [`crate::lease::cluster`].

use super::{Ino, LeaseId, Lsn, Mode, NodeId, StreamId};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// How often unanswered requests, recalls and syncs are sent again (ms).
pub(crate) const RETRY_MS: u64 = 100;

/// A message between two nodes' cores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Msg {
    /// To the manager: the sender wants `ino` in `mode` (`req` names the request).
    Acquire { ino: Ino, mode: Mode, req: u64 },
    /// From the manager: the sender's request `req` is granted, as `lease`.
    Granted { ino: Ino, mode: Mode, lease: LeaseId, req: u64 },
    /// From the manager: hand `lease` back (`keep_read`: keep it as a read lease).
    Recall { ino: Ino, lease: LeaseId, keep_read: bool },
    /// To the manager: `lease` is handed back (or downgraded), every update made under it
    /// published on every member.
    Released { ino: Ino, lease: LeaseId, keep_read: bool },
    /// From a new manager of `shard` (its epoch): what do you hold?
    Sync { shard: u32, epoch: u64 },
    /// The answer: the sender's leases in `shard`.
    Holdings { shard: u32, epoch: u64, held: Vec<(Ino, Mode, LeaseId)> },
}

/// A message as it travels: who sent it, in which view epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    pub(crate) from: NodeId,
    pub(crate) epoch: u64,
    pub(crate) msg: Msg,
}

/// What happens to a node's core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    /// The local lease table needs `ino` in `mode` for a client.
    Request { ino: Ino, mode: Mode },
    /// A peer's message.
    Receive(Envelope),
    /// The local table revoked `ino` (its clients flushed): their updates are in these
    /// streams up to these LSNs.
    LocalRevoked { ino: Ino, covered: Vec<(StreamId, Lsn)> },
    /// This node's stream `stream` is durable up to `end` (what a recall of a lease the node
    /// does not know must see published).
    Logged { stream: StreamId, end: Lsn },
    /// The replication driver: `member` has published `stream` up to `lsn`.
    Published { member: NodeId, stream: StreamId, lsn: Lsn },
    /// A new view (clustermgr): its epoch and members.
    View { epoch: u64, members: BTreeSet<NodeId> },
    /// clustermgr delegated `shard` to `manager` in `epoch`.
    Delegated { shard: u32, manager: NodeId, epoch: u64 },
    /// The time (ms, monotonic).
    Tick { now_ms: u64 },
}

/// What the core asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    Send {
        to: NodeId,
        env: Envelope,
    },
    /// The local table may grant clients `ino` in `mode` (at most).
    GrantLocal {
        ino: Ino,
        mode: Mode,
    },
    /// Revoke the local clients' leases on `ino` (keep reading if `keep_read`), then feed
    /// `LocalRevoked`.
    RevokeLocal {
        ino: Ino,
        keep_read: bool,
    },
}

/// Seeded faults the simulation shows its checks catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mutation {
    #[default]
    None,
    /// A holder answers `Released` without waiting for publication.
    ReleaseBeforePublication,
    /// The manager grants without recalling conflicting holders.
    NoRecall,
    /// A node takes a `Granted` it retired or from an older manager.
    AcceptStaleGrant,
    /// A new manager grants before every member told it what it holds.
    SkipSync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    mode: Mode,
    lease: LeaseId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Waiting for the local table's `LocalRevoked`.
    Local,
    /// Waiting for these LSNs to be published on every member.
    Publishing(Vec<(StreamId, Lsn)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Releasing {
    lease: LeaseId,
    keep_read: bool,
    stage: Stage,
    /// The node held the lease (false: a recall of a lease it does not know).
    held: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    mode: Mode,
    req: u64,
    sent_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waiter {
    node: NodeId,
    mode: Mode,
    req: u64,
}

/// The manager's state of one inode.
#[derive(Debug, Default, Clone)]
struct Managed {
    writer: Option<(NodeId, LeaseId)>,
    readers: BTreeMap<NodeId, LeaseId>,
    queue: VecDeque<Waiter>,
    /// Recalls in flight: holder → (lease, keep_read, last sent).
    recalling: BTreeMap<NodeId, (LeaseId, bool, u64)>,
}

impl Managed {
    fn held_by(&self, n: NodeId) -> Option<(Mode, LeaseId)> {
        match self.writer {
            Some((w, l)) if w == n => Some((Mode::Write, l)),
            _ => self.readers.get(&n).map(|&l| (Mode::Read, l)),
        }
    }
    fn drop_node(&mut self, n: NodeId) {
        if self.writer.is_some_and(|(w, _)| w == n) {
            self.writer = None;
        }
        self.readers.remove(&n);
        self.recalling.remove(&n);
        self.queue.retain(|w| w.node != n);
    }
}

/// A shard this node manages.
#[derive(Debug, Clone)]
struct Shard {
    epoch: u64,
    next: u64,
    /// Members that have not yet said what they hold (with when `Sync` was last sent).
    syncing: BTreeMap<NodeId, u64>,
    inodes: BTreeMap<Ino, Managed>,
}

/// One node's node-level leases: as holder and as manager of its delegated shards.
#[derive(Debug, Clone)]
pub(crate) struct ClusterLeases {
    me: NodeId,
    shards: u32,
    lease_timeout_ms: u64,
    mutation: Mutation,
    now_ms: u64,
    epoch: u64,
    members: BTreeSet<NodeId>,
    /// Nodes removed from the view and when.
    removed: BTreeMap<NodeId, u64>,
    /// Each shard's manager (node, epoch delegated).
    managers: BTreeMap<u32, (NodeId, u64)>,
    /// The newest manager epoch per shard this node answered a `Sync` of.
    synced: BTreeMap<u32, u64>,
    held: BTreeMap<Ino, Held>,
    /// The highest lease id handed back per inode.
    retired: BTreeMap<Ino, LeaseId>,
    pending: BTreeMap<Ino, Pending>,
    releasing: BTreeMap<Ino, Releasing>,
    /// What each member has published of each stream.
    published: BTreeMap<(NodeId, StreamId), Lsn>,
    /// This node's own streams, durable up to.
    logged: BTreeMap<StreamId, Lsn>,
    managed: BTreeMap<u32, Shard>,
    next_req: u64,
}

impl ClusterLeases {
    pub(crate) fn new(me: NodeId, shards: u32, lease_timeout_ms: u64) -> ClusterLeases {
        ClusterLeases {
            me,
            shards: shards.max(1),
            lease_timeout_ms,
            mutation: Mutation::None,
            now_ms: 0,
            epoch: 0,
            members: BTreeSet::new(),
            removed: BTreeMap::new(),
            managers: BTreeMap::new(),
            synced: BTreeMap::new(),
            held: BTreeMap::new(),
            retired: BTreeMap::new(),
            pending: BTreeMap::new(),
            releasing: BTreeMap::new(),
            published: BTreeMap::new(),
            logged: BTreeMap::new(),
            managed: BTreeMap::new(),
            next_req: 1,
        }
    }

    #[cfg(test)]
    pub(crate) fn with_mutation(mut self, m: Mutation) -> ClusterLeases {
        self.mutation = m;
        self
    }

    pub(crate) fn shard_of(&self, ino: Ino) -> u32 {
        (ino % u64::from(self.shards)) as u32
    }

    /// The node-level lease this node holds on `ino` (mode, id), if any.
    pub(crate) fn holds(&self, ino: Ino) -> Option<(Mode, LeaseId)> {
        self.held.get(&ino).map(|h| (h.mode, h.lease))
    }

    /// Whether a request of this node is outstanding.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// What this node knows of `ino` (for a failed simulation's message).
    #[cfg(test)]
    pub(crate) fn describe(&self, ino: Ino) -> String {
        let shard = self.shard_of(ino);
        format!(
            "node {}: held {:?} pending {:?} releasing {:?} retired {:?} manager {:?} synced {:?}; manages {:?}",
            self.me,
            self.held.get(&ino),
            self.pending.get(&ino),
            self.releasing.get(&ino),
            self.retired.get(&ino),
            self.managers.get(&shard),
            self.synced.get(&shard),
            self.managed.get(&shard).map(|sh| (sh.epoch, sh.syncing.clone(), sh.inodes.get(&ino).cloned())),
        )
    }

    /// As manager: who holds the write lease of `ino`, if this node manages its shard.
    pub(crate) fn managed_writer(&self, ino: Ino) -> Option<NodeId> {
        self.managed.get(&self.shard_of(ino))?.inodes.get(&ino)?.writer.map(|(n, _)| n)
    }

    fn send(&self, out: &mut Vec<Output>, to: NodeId, msg: Msg) {
        out.push(Output::Send { to, env: Envelope { from: self.me, epoch: self.epoch, msg } });
    }

    /// Feeds one input; returns what to do, in order.
    pub(crate) fn step(&mut self, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Request { ino, mode } => self.request(ino, mode, &mut out),
            Input::Receive(env) => {
                // The one entry point for peers' messages: a stale epoch is dropped here.
                if env.epoch < self.epoch {
                    return out;
                }
                self.receive(env, &mut out);
            }
            Input::LocalRevoked { ino, covered } => {
                if let Some(r) = self.releasing.get_mut(&ino) {
                    if r.stage == Stage::Local {
                        r.stage = Stage::Publishing(covered);
                    }
                }
                self.check_published(&mut out);
            }
            Input::Logged { stream, end } => {
                let e = self.logged.entry(stream).or_default();
                *e = (*e).max(end);
            }
            Input::Published { member, stream, lsn } => {
                let e = self.published.entry((member, stream)).or_default();
                *e = (*e).max(lsn);
                self.check_published(&mut out);
            }
            Input::View { epoch, members } => self.view(epoch, members, &mut out),
            Input::Delegated { shard, manager, epoch } => self.delegated(shard, manager, epoch, &mut out),
            Input::Tick { now_ms } => {
                self.now_ms = self.now_ms.max(now_ms);
                self.tick(&mut out);
            }
        }
        out
    }

    fn request(&mut self, ino: Ino, mode: Mode, out: &mut Vec<Output>) {
        if let Some(h) = self.held.get(&ino) {
            if covers(h.mode, mode) && !self.releasing.contains_key(&ino) {
                out.push(Output::GrantLocal { ino, mode: h.mode });
                return;
            }
        }
        let req = match self.pending.get(&ino) {
            Some(p) if covers(p.mode, mode) => return,
            _ => {
                self.next_req += 1;
                self.next_req
            }
        };
        let mode = if self.pending.get(&ino).is_some_and(|p| p.mode == Mode::Write) { Mode::Write } else { mode };
        self.pending.insert(ino, Pending { mode, req, sent_ms: self.now_ms });
        if !self.releasing.contains_key(&ino) {
            self.send_acquire(ino, out);
        }
    }

    fn send_acquire(&mut self, ino: Ino, out: &mut Vec<Output>) {
        let Some(p) = self.pending.get_mut(&ino) else { return };
        p.sent_ms = self.now_ms;
        let p = *p;
        if let Some(&(m, _)) = self.managers.get(&self.shard_of(ino)) {
            self.send(out, m, Msg::Acquire { ino, mode: p.mode, req: p.req });
        }
    }

    fn receive(&mut self, env: Envelope, out: &mut Vec<Output>) {
        let from = env.from;
        match env.msg {
            Msg::Acquire { ino, mode, req } => self.m_acquire(from, ino, mode, req, out),
            Msg::Released { ino, lease, keep_read } => self.m_released(from, ino, lease, keep_read, out),
            Msg::Holdings { shard, epoch, held } => self.m_holdings(from, shard, epoch, held, out),
            Msg::Granted { ino, mode, lease, req } => self.granted(from, ino, mode, lease, req, out),
            Msg::Recall { ino, lease, keep_read } => self.recalled(ino, lease, keep_read, out),
            Msg::Sync { shard, epoch } => {
                // Only from the shard's current manager, at its current epoch.
                if self.managers.get(&shard) != Some(&(from, epoch)) {
                    return;
                }
                let s = self.synced.entry(shard).or_default();
                *s = (*s).max(epoch);
                let held: Vec<(Ino, Mode, LeaseId)> = self
                    .held
                    .iter()
                    .filter(|(&i, _)| self.shard_of(i) == shard)
                    .map(|(&i, h)| (i, h.mode, h.lease))
                    .collect();
                self.send(out, from, Msg::Holdings { shard, epoch, held });
                // Requests the old manager may have lost go to the new one.
                let mine: Vec<Ino> = self.pending.keys().copied().filter(|&i| self.shard_of(i) == shard).collect();
                for ino in mine {
                    if !self.releasing.contains_key(&ino) {
                        self.send_acquire(ino, out);
                    }
                }
            }
        }
    }

    // ---- as holder ----

    fn granted(&mut self, from: NodeId, ino: Ino, mode: Mode, lease: LeaseId, req: u64, out: &mut Vec<Output>) {
        if let Some(h) = self.held.get(&ino).copied().filter(|h| h.lease == lease) {
            // The lease held (perhaps carried over from an earlier manager): a confirmation.
            if self.pending.get(&ino).is_some_and(|p| covers(h.mode, p.mode)) && !self.releasing.contains_key(&ino) {
                self.pending.remove(&ino);
                out.push(Output::GrantLocal { ino, mode: h.mode });
            }
            return;
        }
        let shard = self.shard_of(ino);
        let stale = lease <= self.retired.get(&ino).copied().unwrap_or(0)
            || (lease >> 32) < self.synced.get(&shard).copied().unwrap_or(0)
            || self.managers.get(&shard).is_none_or(|&(m, _)| m != from);
        if stale && self.mutation != Mutation::AcceptStaleGrant {
            return;
        }
        match self.pending.get(&ino) {
            Some(p) if p.req == req && covers(mode, p.mode) && !self.releasing.contains_key(&ino) => {
                self.pending.remove(&ino);
                self.held.insert(ino, Held { mode, lease });
                out.push(Output::GrantLocal { ino, mode });
            }
            _ => {
                // Not wanted (any more): handed back at once; nothing was done under it.
                if !self.held.contains_key(&ino) {
                    let r = self.retired.entry(ino).or_default();
                    *r = (*r).max(lease);
                    self.send(out, from, Msg::Released { ino, lease, keep_read: false });
                }
            }
        }
    }

    fn recalled(&mut self, ino: Ino, lease: LeaseId, keep_read: bool, out: &mut Vec<Output>) {
        if self.releasing.get(&ino).is_some_and(|r| r.lease >= lease) {
            return; // under way
        }
        match self.held.get(&ino).copied() {
            Some(h) if h.lease > lease => {} // a recall of an older lease: stale
            Some(h) => {
                // The lease held, or an older one while the newer grant was lost: the local
                // clients give it up first.
                let keep_read = keep_read && h.mode == Mode::Write && h.lease == lease;
                self.releasing.insert(ino, Releasing { lease, keep_read, stage: Stage::Local, held: true });
                out.push(Output::RevokeLocal { ino, keep_read });
            }
            None => {
                // Not held (a lost grant, a restart, or handed back already): answered once
                // everything this node logged is published everywhere; the id is retired.
                let r = self.retired.entry(ino).or_default();
                *r = (*r).max(lease);
                let all: Vec<(StreamId, Lsn)> = self.logged.iter().map(|(&s, &l)| (s, l)).collect();
                let stage = Stage::Publishing(all);
                self.releasing.insert(ino, Releasing { lease, keep_read: false, stage, held: false });
                self.check_published(out);
            }
        }
    }

    fn check_published(&mut self, out: &mut Vec<Output>) {
        let done: Vec<Ino> =
            self.releasing
                .iter()
                .filter(|(_, r)| match &r.stage {
                    Stage::Local => false,
                    Stage::Publishing(need) => {
                        self.mutation == Mutation::ReleaseBeforePublication
                            || self.members.iter().all(|&m| {
                                need.iter().all(|&(s, l)| self.published.get(&(m, s)).copied().unwrap_or(0) >= l)
                            })
                    }
                })
                .map(|(&i, _)| i)
                .collect();
        for ino in done {
            let Some(r) = self.releasing.remove(&ino) else { continue };
            match self.held.get(&ino).copied() {
                Some(h) if h.lease == r.lease && r.keep_read => {
                    self.held.insert(ino, Held { mode: Mode::Read, lease: r.lease });
                }
                Some(h) if h.lease <= r.lease => {
                    self.held.remove(&ino);
                }
                _ => {}
            }
            if !r.keep_read {
                let e = self.retired.entry(ino).or_default();
                *e = (*e).max(r.lease);
            }
            if let Some(&(m, _)) = self.managers.get(&self.shard_of(ino)) {
                self.send(out, m, Msg::Released { ino, lease: r.lease, keep_read: r.keep_read });
            }
            // A request waiting behind a real hand-back goes out now; one behind the answer to
            // a recall of an unknown lease (its grant may still be on the way) at the next
            // retry, so that a recall overtaking grants cannot keep a queue turning.
            if r.held && self.pending.contains_key(&ino) {
                self.send_acquire(ino, out);
            }
        }
    }

    // ---- as manager ----

    fn shard_mut(&mut self, ino: Ino) -> Option<&mut Shard> {
        let s = self.shard_of(ino);
        self.managed.get_mut(&s)
    }

    fn m_acquire(&mut self, from: NodeId, ino: Ino, mode: Mode, req: u64, out: &mut Vec<Output>) {
        let Some(sh) = self.shard_mut(ino) else { return };
        let m = sh.inodes.entry(ino).or_default();
        if let Some((held, lease)) = m.held_by(from) {
            if covers(held, mode) && !m.recalling.contains_key(&from) {
                self.send(out, from, Msg::Granted { ino, mode: held, lease, req });
                return;
            }
        }
        if let Some(w) = m.queue.iter_mut().find(|w| w.node == from) {
            w.req = req;
            if mode == Mode::Write {
                w.mode = Mode::Write;
            }
        } else {
            m.queue.push_back(Waiter { node: from, mode, req });
        }
        self.serve(ino, out);
    }

    fn m_released(&mut self, from: NodeId, ino: Ino, lease: LeaseId, keep_read: bool, out: &mut Vec<Output>) {
        let Some(sh) = self.shard_mut(ino) else { return };
        let Some(m) = sh.inodes.get_mut(&ino) else { return };
        let recalled = m.recalling.get(&from).is_some_and(|&(l, _, _)| l <= lease);
        match m.held_by(from) {
            Some((Mode::Write, l)) if l == lease => {
                m.writer = None;
                if keep_read {
                    m.readers.insert(from, l);
                }
            }
            // A downgrade keeps the id: a repeated `Released{keep_read}` names the read lease
            // it left, and must not end it.
            Some((Mode::Read, l)) if l == lease && !keep_read => {
                m.readers.remove(&from);
            }
            _ if recalled => {}
            _ => return, // stale
        }
        if recalled {
            m.recalling.remove(&from);
        }
        self.serve(ino, out);
    }

    fn m_holdings(
        &mut self,
        from: NodeId,
        shard: u32,
        epoch: u64,
        held: Vec<(Ino, Mode, LeaseId)>,
        out: &mut Vec<Output>,
    ) {
        let Some(sh) = self.managed.get_mut(&shard) else { return };
        if sh.epoch != epoch || sh.syncing.remove(&from).is_none() {
            return;
        }
        for (ino, mode, lease) in held {
            let m = sh.inodes.entry(ino).or_default();
            match mode {
                Mode::Write => m.writer = Some((from, lease)),
                Mode::Read => {
                    m.readers.insert(from, lease);
                }
            }
        }
        if sh.syncing.is_empty() {
            let inos: Vec<Ino> = sh.inodes.keys().copied().collect();
            for ino in inos {
                self.serve(ino, out);
            }
        }
    }

    /// Grants from the head of `ino`'s queue while nothing conflicts; recalls what does.
    fn serve(&mut self, ino: Ino, out: &mut Vec<Output>) {
        let now = self.now_ms;
        let skip_sync = self.mutation == Mutation::SkipSync;
        let no_recall = self.mutation == Mutation::NoRecall;
        let Some(sh) = self.shard_mut(ino) else { return };
        if !sh.syncing.is_empty() && !skip_sync {
            return;
        }
        let base = sh.epoch << 32;
        let mut sends = Vec::new();
        let m = sh.inodes.entry(ino).or_default();
        while let Some(&head) = m.queue.front() {
            if m.recalling.contains_key(&head.node) && !no_recall {
                break; // its own recall first
            }
            let conflicts: Vec<(NodeId, LeaseId, bool)> = match head.mode {
                Mode::Write => m
                    .writer
                    .iter()
                    .filter(|(w, _)| *w != head.node)
                    .map(|&(w, l)| (w, l, false))
                    .chain(m.readers.iter().filter(|(&r, _)| r != head.node).map(|(&r, &l)| (r, l, false)))
                    .collect(),
                Mode::Read => m.writer.iter().filter(|(w, _)| *w != head.node).map(|&(w, l)| (w, l, true)).collect(),
            };
            if conflicts.is_empty() || no_recall {
                m.queue.pop_front();
                sh.next += 1;
                let lease = base | (sh.next & 0xFFFF_FFFF);
                if no_recall {
                    m.writer = None;
                    m.readers.clear();
                }
                match head.mode {
                    Mode::Write => {
                        m.readers.remove(&head.node);
                        m.writer = Some((head.node, lease));
                    }
                    Mode::Read => {
                        if let Some((w, l)) = m.writer.filter(|(w, _)| *w == head.node) {
                            // Holds the write lease already: that is the answer.
                            sends.push((w, Msg::Granted { ino, mode: Mode::Write, lease: l, req: head.req }));
                            continue;
                        }
                        m.readers.insert(head.node, lease);
                    }
                }
                sends.push((head.node, Msg::Granted { ino, mode: head.mode, lease, req: head.req }));
                continue;
            }
            for (n, lease, keep_read) in conflicts {
                if m.recalling.get(&n).is_none_or(|&(l, _, _)| l != lease) {
                    m.recalling.insert(n, (lease, keep_read, now));
                    sends.push((n, Msg::Recall { ino, lease, keep_read }));
                }
            }
            break;
        }
        if m.writer.is_none() && m.readers.is_empty() && m.queue.is_empty() && m.recalling.is_empty() {
            sh.inodes.remove(&ino);
        }
        for (to, msg) in sends {
            self.send(out, to, msg);
        }
    }

    fn view(&mut self, epoch: u64, members: BTreeSet<NodeId>, out: &mut Vec<Output>) {
        if epoch <= self.epoch {
            return;
        }
        for &gone in self.members.difference(&members) {
            self.removed.entry(gone).or_insert(self.now_ms);
        }
        for m in &members {
            self.removed.remove(m);
        }
        self.epoch = epoch;
        self.members = members;
        // Fewer members may complete a publication wait.
        self.check_published(out);
    }

    fn delegated(&mut self, shard: u32, manager: NodeId, epoch: u64, out: &mut Vec<Output>) {
        if self.managers.get(&shard).is_some_and(|&(_, e)| e >= epoch) {
            return;
        }
        self.managers.insert(shard, (manager, epoch));
        if manager != self.me {
            self.managed.remove(&shard);
            // Outstanding requests go to the new manager.
            let mine: Vec<Ino> = self.pending.keys().copied().filter(|&i| self.shard_of(i) == shard).collect();
            for ino in mine {
                if !self.releasing.contains_key(&ino) {
                    self.send_acquire(ino, out);
                }
            }
            return;
        }
        // This node manages the shard from now on: first every member says what it holds.
        let mut sh = Shard { epoch, next: 0, syncing: BTreeMap::new(), inodes: BTreeMap::new() };
        for (&ino, h) in self.held.iter().filter(|(&i, _)| self.shard_of(i) == shard) {
            let m = sh.inodes.entry(ino).or_default();
            match h.mode {
                Mode::Write => m.writer = Some((self.me, h.lease)),
                Mode::Read => {
                    m.readers.insert(self.me, h.lease);
                }
            }
        }
        let s = self.synced.entry(shard).or_default();
        *s = (*s).max(epoch);
        let others: Vec<NodeId> =
            self.members.iter().copied().chain(self.removed.keys().copied()).filter(|&n| n != self.me).collect();
        for n in others {
            sh.syncing.insert(n, self.now_ms);
            self.send(out, n, Msg::Sync { shard, epoch });
        }
        self.managed.insert(shard, sh);
        let mine: Vec<Ino> = self.pending.keys().copied().filter(|&i| self.shard_of(i) == shard).collect();
        for ino in mine {
            if !self.releasing.contains_key(&ino) {
                self.send_acquire(ino, out);
            }
        }
    }

    fn tick(&mut self, out: &mut Vec<Output>) {
        let now = self.now_ms;
        // Nodes gone past their lease timeout lose everything they held.
        let expired: Vec<NodeId> =
            self.removed.iter().filter(|(_, &at)| now >= at + self.lease_timeout_ms).map(|(&n, _)| n).collect();
        for n in &expired {
            self.removed.remove(n);
        }
        let shards: Vec<u32> = self.managed.keys().copied().collect();
        for shard in shards {
            let mut resend = Vec::new();
            let mut serve = Vec::new();
            let epoch;
            {
                let sh = self.managed.get_mut(&shard).expect("listed");
                epoch = sh.epoch;
                for n in &expired {
                    sh.syncing.remove(n);
                    for (&ino, m) in sh.inodes.iter_mut() {
                        if m.held_by(*n).is_some()
                            || m.recalling.contains_key(n)
                            || m.queue.iter().any(|w| w.node == *n)
                        {
                            m.drop_node(*n);
                            serve.push(ino);
                        }
                    }
                }
                for (n, sent) in sh.syncing.iter_mut() {
                    if now >= *sent + RETRY_MS {
                        *sent = now;
                        resend.push((*n, Msg::Sync { shard, epoch }));
                    }
                }
                for (&ino, m) in sh.inodes.iter_mut() {
                    for (&n, (lease, keep_read, sent)) in m.recalling.iter_mut() {
                        if now >= *sent + RETRY_MS {
                            *sent = now;
                            resend.push((n, Msg::Recall { ino, lease: *lease, keep_read: *keep_read }));
                        }
                    }
                }
                if sh.syncing.is_empty() {
                    serve.extend(sh.inodes.keys().copied());
                }
            }
            for (to, msg) in resend {
                self.send(out, to, msg);
            }
            serve.sort_unstable();
            serve.dedup();
            for ino in serve {
                self.serve(ino, out);
            }
        }
        let due: Vec<Ino> = self
            .pending
            .iter()
            .filter(|(i, p)| now >= p.sent_ms + RETRY_MS && !self.releasing.contains_key(i))
            .map(|(&i, _)| i)
            .collect();
        for ino in due {
            self.send_acquire(ino, out);
        }
    }
}

/// Whether holding `held` allows `want`.
fn covers(held: Mode, want: Mode) -> bool {
    held == Mode::Write || want == Mode::Read
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deliver(nodes: &mut [ClusterLeases], outs: Vec<Output>, local: &mut Vec<(NodeId, Output)>, from: NodeId) {
        let mut q: VecDeque<(NodeId, Output)> = outs.into_iter().map(|o| (from, o)).collect();
        while let Some((at, o)) = q.pop_front() {
            match o {
                Output::Send { to, env } => {
                    let outs = nodes[to as usize].step(Input::Receive(env));
                    q.extend(outs.into_iter().map(|o| (to, o)));
                }
                other => local.push((at, other)),
            }
        }
    }

    /// Three nodes, node 0 manages the one shard: 1 writes, 2's read recalls 1 (keep_read),
    /// and 1 answers only once its covered LSN is published on every member.
    #[test]
    fn a_recall_waits_for_publication_on_every_member() {
        let members: BTreeSet<NodeId> = [0, 1, 2].into();
        let mut nodes: Vec<ClusterLeases> = (0..3).map(|n| ClusterLeases::new(n, 1, 1000)).collect();
        let mut local = Vec::new();
        for n in 0..3u32 {
            let o = nodes[n as usize].step(Input::View { epoch: 1, members: members.clone() });
            deliver(&mut nodes, o, &mut local, n);
        }
        // The members learn of the delegation before the manager's Sync reaches them.
        for n in [1, 2, 0u32] {
            let o = nodes[n as usize].step(Input::Delegated { shard: 0, manager: 0, epoch: 1 });
            deliver(&mut nodes, o, &mut local, n);
        }
        let o = nodes[1].step(Input::Request { ino: 7, mode: Mode::Write });
        deliver(&mut nodes, o, &mut local, 1);
        assert_eq!(local.pop(), Some((1, Output::GrantLocal { ino: 7, mode: Mode::Write })));
        assert_eq!(nodes[0].managed_writer(7), Some(1));
        let o = nodes[2].step(Input::Request { ino: 7, mode: Mode::Read });
        deliver(&mut nodes, o, &mut local, 2);
        assert_eq!(local.pop(), Some((1, Output::RevokeLocal { ino: 7, keep_read: true })));
        let o = nodes[1].step(Input::LocalRevoked { ino: 7, covered: vec![((1, 0), 500)] });
        deliver(&mut nodes, o, &mut local, 1);
        for m in [1, 0] {
            let o = nodes[1].step(Input::Published { member: m, stream: (1, 0), lsn: 500 });
            deliver(&mut nodes, o, &mut local, 1);
            assert!(local.is_empty(), "not yet published on node 2: {local:?}");
        }
        let o = nodes[1].step(Input::Published { member: 2, stream: (1, 0), lsn: 499 });
        deliver(&mut nodes, o, &mut local, 1);
        assert!(local.is_empty());
        let o = nodes[1].step(Input::Published { member: 2, stream: (1, 0), lsn: 500 });
        deliver(&mut nodes, o, &mut local, 1);
        assert_eq!(local, vec![(2, Output::GrantLocal { ino: 7, mode: Mode::Read })]);
        assert_eq!(nodes[1].holds(7).map(|h| h.0), Some(Mode::Read), "1 kept reading");
        assert_eq!(nodes[0].managed_writer(7), None);
    }

    /// Stale epochs are dropped at the entry point; a retired lease's late grant is refused.
    #[test]
    fn a_stale_epoch_and_a_retired_grant_are_dropped() {
        let mut n = ClusterLeases::new(1, 1, 1000);
        n.step(Input::View { epoch: 5, members: [0, 1].into() });
        n.step(Input::Delegated { shard: 0, manager: 0, epoch: 5 });
        let o = n.step(Input::Request { ino: 3, mode: Mode::Write });
        let Some(Output::Send { env: Envelope { msg: Msg::Acquire { req, .. }, .. }, .. }) = o.first() else {
            panic!("{o:?}")
        };
        let req = *req;
        let old =
            Envelope { from: 0, epoch: 4, msg: Msg::Granted { ino: 3, mode: Mode::Write, lease: 5 << 32 | 1, req } };
        assert!(n.step(Input::Receive(old)).is_empty());
        assert_eq!(n.holds(3), None);
        // A recall of a lease it never got retires that id; its late grant is refused.
        let lease = 5 << 32 | 2;
        let recall = Envelope { from: 0, epoch: 5, msg: Msg::Recall { ino: 3, lease, keep_read: false } };
        let o = n.step(Input::Receive(recall));
        assert!(matches!(&o[..], [Output::Send { env: Envelope { msg: Msg::Released { .. }, .. }, .. }]), "{o:?}");
        let late = Envelope { from: 0, epoch: 5, msg: Msg::Granted { ino: 3, mode: Mode::Write, lease, req } };
        n.step(Input::Receive(late));
        assert_eq!(n.holds(3), None);
    }
}
