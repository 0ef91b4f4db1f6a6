//! The lease table: single writer, many readers, per inode (files and directories alike),
//! as a pure state machine — inputs in, outputs out, no threads, sockets or clocks (time is
//! an input, [`Input::Tick`]) — so that it can be simulated and checked ([`Input`],
//! [`Output`], [`LeaseTable::step`]). The daemon runs it behind a mutex and carries out its
//! outputs ([`crate::lease::manager`]).
//!
//! # State, per inode
//!
//! * **holders**: one writer `(session, lease)`, or readers `session → lease` — never both
//!   (a session holds at most one lease on an inode; an upgrade replaces its read lease);
//! * **queue**: requests waiting, first come first served;
//! * **revokes in flight**: `session → (lease, keep_read, deadline)`, at most one per
//!   holder; the deadline (with a revoke timeout) is when the holder's answer is overdue;
//! * **publications awaited**: `session → covered LSN`, left by a writer that handed its
//!   lease back: nobody else is granted the inode until that session's log is published up
//!   to there.
//!
//! An inode with none of these has no entry. Per session, an index of the inodes it appears
//! in, its implicit ranges (below), the highest LSN it is known to have published and
//! whether it has *expired*; a session appearing nowhere and not expired has no entry
//! either. So the table holds what live sessions hold or wait for, and nothing after they
//! end. Besides: the clock (the last tick's time), the revoke timeout (0: revokes never
//! expire) and an index of the deadlines of the revokes in flight (`lease/expiry.rs`).
//!
//! # Transitions
//!
//! * `Request{S, mode}`: if S holds a lease at least as strong and is not being revoked,
//!   it is granted again at once (the same lease id; the mode held). Else it joins the
//!   queue (at most `max_waiting` waiting requests per session: beyond, [`Output::TooMany`]).
//!   An expired session's request is ignored (the daemon refuses its calls).
//! * The queue is served from its head ([`LeaseTable::step`] runs it after every change):
//!   the head is granted, with a fresh lease id, when no holder of another session
//!   conflicts (a writer conflicts with everything, readers with a write), no revoke of
//!   the head's own session is in flight, and no publication of another session is
//!   awaited. Otherwise each conflicting holder not yet being revoked gets a `Revoke` —
//!   `keep_read` when it is the writer and the head wants to read (it downgrades), due by
//!   now + the timeout unless the holder has expired — and the queue waits: later requests
//!   never overtake the head, so a writer is not starved by a stream of readers. Several
//!   readers in a row are granted together. A write request of a reader (upgrade) waits
//!   for the other readers to go, and its new lease replaces the read one.
//! * `Release{S, lease, covered}` (the client's initiative) and `RevokeDone{S, lease,
//!   covered}` (the answer to a revoke) hand a lease back. A writer's hand-back with
//!   `covered` beyond what S is known to have published leaves an awaited publication and
//!   emits `Publish{S, covered}`; a reader has nothing to publish. `RevokeDone` of a
//!   `keep_read` revoke turns the writer into a reader under the same lease id. Either
//!   naming a lease S does not hold (for `RevokeDone`: one not being revoked) is stale —
//!   a release crossing a revoke, an answer repeated, an id from before a re-grant — and
//!   is ignored with a log line; so is every hand-back of an expired session.
//! * `Published{S, lsn}` clears S's awaited publications up to `lsn`.
//! * `SessionEnded{S}`: S's log is settled (published to its end — or, if S expired, to
//!   where it stood when fenced — or its refused suffix dropped), so everything of S goes:
//!   holdings, waiting requests, revokes in flight, awaited publications, implicit ranges,
//!   its expiry.
//! * `Tick{now}`: the clock moves on (never back). A revoke whose deadline is before `now`
//!   expires its holder S: [`Output::Expire`] once (S's other deadlines are disarmed), S's
//!   waiting requests are dropped (the queues move on), and S keeps what it holds until
//!   `SessionEnded` — which the daemon feeds once it has fenced S and published its log up
//!   to the fence (`lease/expiry.rs`).
//! * `Forget{S, ino}`: S freed `ino` and its free is published: S's lease on it (held,
//!   being revoked, or implicit) ends without a hand-back; publications awaited stay.
//! * `GrantNew{S, first, count}`: nicfs handed those inode numbers to S to create inodes
//!   with. S holds the write lease of each *implicitly*: the table keeps the range, not an
//!   entry per number, and turns a number into a real writer entry (with a fresh lease id,
//!   which S learns from the `Revoke` or by asking) only when a request names it. The
//!   daemon hands out only numbers the table does not know ([`LeaseTable::busy`]); a
//!   number that is known anyway is left out of the range, with a log line.
//!
//! # Invariants (checked by `LeaseTable::check` and the simulation in the tests)
//!
//! Never two writers; never a writer and a reader of another session; a grant to S of an
//! inode whose last writer T handed back at `covered` comes only after T's log is
//! published up to `covered` (or T's session ended); lease ids are unique and never
//! reused; the queue is served in order; every request of a live session is eventually
//! granted once every revoke is answered and every publication done (no request waits
//! for anything but a holder's answer or a publication, and both come without waiting on
//! any request) — and, with a revoke timeout, even if a holder never answers: it expires,
//! and the daemon ends its session after publishing its log up to the fence. With a
//! timeout, every revoke in flight to a session that has not expired has a deadline, no
//! deadline has passed after a step, an expired session has no request waiting, and it
//! expires once; an expired session is granted nothing.

use expiry::Deadlines;
pub(crate) use expiry::Expiry;
use linefs_proto::LeaseMode;
use serde::Serialize;
use std::collections::{btree_map, BTreeMap, BTreeSet, HashMap, VecDeque};

pub(crate) type SessionId = u64;
pub(crate) type Ino = u64;
pub(crate) type LeaseId = u64;
pub(crate) type Lsn = u64;
/// A holder of an inode's lease.
pub(crate) type Holder = (SessionId, LeaseId);

/// Requests one session may have waiting (over every inode) by default.
pub(crate) const MAX_WAITING: usize = 1024;

/// What happens to the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input {
    /// The client's LeaseRequest (`req_id`: the frame id, for the reply).
    Request { session: SessionId, req_id: u64, ino: Ino, mode: LeaseMode },
    /// The client's LeaseRelease.
    Release { session: SessionId, ino: Ino, lease: LeaseId, covered_lsn: Lsn },
    /// The client's answer to a Revoke.
    RevokeDone { session: SessionId, ino: Ino, lease: LeaseId, covered_lsn: Lsn },
    /// The session's log is published up to `lsn`.
    Published { session: SessionId, lsn: Lsn },
    /// The session's log is settled (published, or its unpublished suffix discarded).
    SessionEnded { session: SessionId },
    /// Inode numbers `first .. first + count` were handed to the session for creation.
    GrantNew { session: SessionId, first: Ino, count: u64 },
    /// The session freed `ino` (its FreeInode is published): its lease on it, explicit or
    /// implicit, ends without a hand-back, so that the number can be handed out again.
    Forget { session: SessionId, ino: Ino },
    /// The time is `now_ms` (milliseconds on a monotonic clock; a time before the last one
    /// counts as the last one). Revokes in flight past their deadline expire their holder.
    Tick { now_ms: u64 },
}

/// What the table asks its caller to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Answer request `req_id`: the session holds `lease` in `mode` (the mode it holds,
    /// which may be stronger than it asked).
    Grant { session: SessionId, req_id: u64, ino: Ino, mode: LeaseMode, lease: LeaseId },
    /// Ask the session to hand `lease` back (`keep_read`: it may keep reading).
    Revoke { session: SessionId, ino: Ino, lease: LeaseId, keep_read: bool },
    /// Publish the session's log up to `lsn`, then feed `Published`.
    Publish { session: SessionId, lsn: Lsn },
    /// Refuse request `req_id`: the session has too many requests waiting.
    TooMany { session: SessionId, req_id: u64, ino: Ino },
    /// The session did not answer a revoke in time: fence it — fail it, publish its log up
    /// to where it stands and nothing after — then feed `SessionEnded`, which passes its
    /// leases on. Once per session.
    Expire { session: SessionId, reason: Expiry },
}

/// Sizes and counters, for the status file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Counts {
    /// Inodes with an entry (held, waited for, or awaiting a publication).
    pub(crate) inodes: u64,
    pub(crate) readers: u64,
    pub(crate) writers: u64,
    pub(crate) waiting: u64,
    pub(crate) revokes_in_flight: u64,
    pub(crate) publications_awaited: u64,
    /// Ranges of inode numbers held implicitly by the session they were handed to.
    pub(crate) implicit_ranges: u64,
    /// Sessions with an entry.
    pub(crate) sessions: u64,
    /// Since start: grants, revokes sent, stale hand-backs ignored, requests refused,
    /// sessions expired (a revoke not answered in time).
    pub(crate) grants: u64,
    pub(crate) revokes: u64,
    pub(crate) stale: u64,
    pub(crate) refused: u64,
    pub(crate) expired: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Waiter {
    session: SessionId,
    req_id: u64,
    mode: LeaseMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Revoking {
    lease: LeaseId,
    keep_read: bool,
    /// When the holder's answer is overdue (None: revokes do not expire, or the holder has
    /// expired already).
    deadline: Option<u64>,
}

#[derive(Debug, Default)]
struct InodeLeases {
    writer: Option<Holder>,
    readers: BTreeMap<SessionId, LeaseId>,
    queue: VecDeque<Waiter>,
    revoking: BTreeMap<SessionId, Revoking>,
    awaiting: BTreeMap<SessionId, Lsn>,
}

impl InodeLeases {
    fn is_empty(&self) -> bool {
        self.writer.is_none()
            && self.readers.is_empty()
            && self.queue.is_empty()
            && self.revoking.is_empty()
            && self.awaiting.is_empty()
    }

    /// The lease `s` holds, and its mode.
    fn held(&self, s: SessionId) -> Option<(LeaseId, LeaseMode)> {
        match self.writer {
            Some((w, lease)) if w == s => Some((lease, LeaseMode::Write)),
            _ => self.readers.get(&s).map(|&lease| (lease, LeaseMode::Read)),
        }
    }

    /// The lease `s` holds if it satisfies `mode` and is not being revoked.
    fn satisfies(&self, s: SessionId, mode: LeaseMode) -> Option<(LeaseId, LeaseMode)> {
        if self.revoking.contains_key(&s) {
            return None;
        }
        self.held(s).filter(|&(_, held)| held == LeaseMode::Write || mode == LeaseMode::Read)
    }

    fn mentions(&self, s: SessionId) -> bool {
        self.held(s).is_some()
            || self.revoking.contains_key(&s)
            || self.awaiting.contains_key(&s)
            || self.queue.iter().any(|w| w.session == s)
    }
}

#[derive(Debug, Default)]
struct SessionInfo {
    /// Inodes whose entry mentions the session.
    inodes: BTreeSet<Ino>,
    /// Of those, the ones awaiting a publication of the session.
    awaits: BTreeSet<Ino>,
    /// First numbers of its implicit ranges.
    ranges: BTreeSet<Ino>,
    /// Its requests waiting, over every inode.
    waiting: usize,
    /// The highest LSN it is known to have published.
    published: Lsn,
    /// The end of the entries the publisher was last allowed to publish
    /// ([`LeaseTable::admit`]): a write lease handed back meanwhile awaits at least this far,
    /// so that an inode never moves while a change of it is being published.
    publishing: Lsn,
    /// It left a revoke unanswered past its deadline ([`Output::Expire`]): kept until the
    /// session ends, so that it expires once and its requests and hand-backs are ignored.
    expired: bool,
}

impl SessionInfo {
    fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.ranges.is_empty() && !self.expired
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    grants: u64,
    revokes: u64,
    stale: u64,
    refused: u64,
    expired: u64,
}

/// The node's leases. See the module docs.
#[derive(Debug)]
pub(crate) struct LeaseTable {
    inodes: BTreeMap<Ino, InodeLeases>,
    sessions: HashMap<SessionId, SessionInfo>,
    /// Implicit write leases: first number → (end, session), disjoint.
    implicit: BTreeMap<Ino, (Ino, SessionId)>,
    last_lease: LeaseId,
    max_waiting: usize,
    counters: Counters,
    /// The clock, the revoke timeout and the revokes' deadlines ([`expiry`]).
    deadlines: Deadlines,
}

impl Default for LeaseTable {
    fn default() -> Self {
        LeaseTable::new(MAX_WAITING)
    }
}

impl LeaseTable {
    /// An empty table allowing `max_waiting` (at least 1) waiting requests per session.
    pub(crate) fn new(max_waiting: usize) -> LeaseTable {
        LeaseTable {
            inodes: BTreeMap::new(),
            sessions: HashMap::new(),
            implicit: BTreeMap::new(),
            last_lease: 0,
            max_waiting: max_waiting.max(1),
            counters: Counters::default(),
            deadlines: Deadlines::default(),
        }
    }

    /// Applies one input; returns what to do, in order.
    pub(crate) fn step(&mut self, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        match input {
            Input::Request { session, req_id, ino, mode } => self.request(session, req_id, ino, mode, &mut out),
            Input::Release { session, ino, lease, covered_lsn } => {
                self.hand_back(session, ino, lease, covered_lsn, false, &mut out)
            }
            Input::RevokeDone { session, ino, lease, covered_lsn } => {
                self.hand_back(session, ino, lease, covered_lsn, true, &mut out)
            }
            Input::Published { session, lsn } => self.published(session, lsn, &mut out),
            Input::SessionEnded { session } => self.session_ended(session, &mut out),
            Input::GrantNew { session, first, count } => self.grant_new(session, first, count),
            Input::Forget { session, ino } => self.forget(session, ino, &mut out),
            Input::Tick { now_ms } => self.tick(now_ms, &mut out),
        }
        self.counters.revokes += out.iter().filter(|o| matches!(o, Output::Revoke { .. })).count() as u64;
        out
    }

    /// Whether the table knows inode number `ino` (an entry, or in an implicit range): such
    /// a number must not be handed out for creation.
    pub(crate) fn busy(&self, ino: Ino) -> bool {
        self.inodes.contains_key(&ino) || self.implicit_owner(ino).is_some()
    }

    fn implicit_owner(&self, ino: Ino) -> Option<(Ino, Ino, SessionId)> {
        let (&first, &(end, s)) = self.implicit.range(..=ino).next_back()?;
        (ino < end).then_some((first, end, s))
    }

    fn new_lease(last: &mut LeaseId) -> LeaseId {
        *last += 1;
        *last
    }

    fn request(&mut self, s: SessionId, req_id: u64, ino: Ino, mode: LeaseMode, out: &mut Vec<Output>) {
        if self.expired(s) {
            tracing::debug!(session = s, ino, req_id, "lease request of an expired session ignored");
            return;
        }
        self.materialize(ino);
        if let Some((lease, held)) = self.inodes.get(&ino).and_then(|st| st.satisfies(s, mode)) {
            self.counters.grants += 1;
            out.push(Output::Grant { session: s, req_id, ino, mode: held, lease });
            return;
        }
        let info = self.sessions.entry(s).or_default();
        if info.waiting >= self.max_waiting {
            tracing::debug!(session = s, ino, waiting = info.waiting, "too many lease requests waiting; refused");
            if info.is_empty() {
                self.sessions.remove(&s);
            }
            self.counters.refused += 1;
            out.push(Output::TooMany { session: s, req_id, ino });
            return;
        }
        info.waiting += 1;
        info.inodes.insert(ino);
        self.inodes.entry(ino).or_default().queue.push_back(Waiter { session: s, req_id, mode });
        self.pump(ino, out);
    }

    /// A Release (`revoked` false) or RevokeDone (true).
    fn hand_back(
        &mut self,
        s: SessionId,
        ino: Ino,
        lease: LeaseId,
        covered: Lsn,
        revoked: bool,
        out: &mut Vec<Output>,
    ) {
        let what = if revoked { "RevokeDone" } else { "LeaseRelease" };
        // An expired session is being fenced: its leases end with the session, after its
        // log is published up to the fence, whatever it says now.
        if self.expired(s) {
            return self.stale(what, s, ino, lease);
        }
        let Some(st) = self.inodes.get_mut(&ino) else { return self.stale(what, s, ino, lease) };
        let keep_read = match st.revoking.get(&s) {
            Some(r) if r.lease == lease => r.keep_read,
            _ if revoked => return self.stale(what, s, ino, lease),
            _ => false,
        };
        if st.writer == Some((s, lease)) {
            st.writer = None;
            unrevoke(&mut st.revoking, &mut self.deadlines, s, ino);
            if revoked && keep_read {
                st.readers.insert(s, lease);
            }
            self.await_publication(ino, s, covered, out);
        } else if st.readers.get(&s) == Some(&lease) {
            st.readers.remove(&s);
            unrevoke(&mut st.revoking, &mut self.deadlines, s, ino);
        } else {
            return self.stale(what, s, ino, lease);
        }
        self.pump(ino, out);
        self.tidy(ino, s);
    }

    fn stale(&mut self, what: &str, s: SessionId, ino: Ino, lease: LeaseId) {
        self.counters.stale += 1;
        tracing::info!(session = s, ino, lease, "stale {what} ignored (not a lease the session holds)");
    }

    /// `s` handed back a write lease of `ino` covering its log up to `covered`.
    fn await_publication(&mut self, ino: Ino, s: SessionId, covered: Lsn, out: &mut Vec<Output>) {
        let info = self.sessions.entry(s).or_default();
        let covered = covered.max(info.publishing);
        if covered <= info.published {
            return;
        }
        let Some(st) = self.inodes.get_mut(&ino) else { return };
        let lsn = st.awaiting.entry(s).or_insert(0);
        *lsn = (*lsn).max(covered);
        info.inodes.insert(ino);
        info.awaits.insert(ino);
        out.push(Output::Publish { session: s, lsn: covered });
    }

    fn published(&mut self, s: SessionId, lsn: Lsn, out: &mut Vec<Output>) {
        let Some(info) = self.sessions.get_mut(&s) else { return };
        info.published = info.published.max(lsn);
        let done: Vec<Ino> = info
            .awaits
            .iter()
            .copied()
            .filter(|ino| self.inodes.get(ino).and_then(|st| st.awaiting.get(&s)).is_none_or(|&c| c <= lsn))
            .collect();
        for ino in done {
            if let Some(info) = self.sessions.get_mut(&s) {
                info.awaits.remove(&ino);
            }
            if let Some(st) = self.inodes.get_mut(&ino) {
                st.awaiting.remove(&s);
            }
            self.pump(ino, out);
            self.tidy(ino, s);
        }
    }

    fn session_ended(&mut self, s: SessionId, out: &mut Vec<Output>) {
        let Some(info) = self.sessions.remove(&s) else { return };
        for first in &info.ranges {
            self.implicit.remove(first);
        }
        for ino in info.inodes {
            if let Some(st) = self.inodes.get_mut(&ino) {
                if st.writer.is_some_and(|(w, _)| w == s) {
                    st.writer = None;
                }
                st.readers.remove(&s);
                st.queue.retain(|w| w.session != s);
                unrevoke(&mut st.revoking, &mut self.deadlines, s, ino);
                st.awaiting.remove(&s);
            }
            self.pump(ino, out);
            self.remove_if_empty(ino);
        }
    }

    fn grant_new(&mut self, s: SessionId, first: Ino, count: u64) {
        if count == 0 {
            return;
        }
        let end = first.saturating_add(count);
        // Numbers the table knows already are left out.
        let mut known: Vec<(Ino, Ino)> = self.inodes.range(first..end).map(|(&i, _)| (i, i + 1)).collect();
        if let Some((&a, &(b, _))) = self.implicit.range(..first).next_back() {
            if b > first {
                known.push((a.max(first), b.min(end)));
            }
        }
        known.extend(self.implicit.range(first..end).map(|(&a, &(b, _))| (a, b.min(end))));
        if !known.is_empty() {
            tracing::warn!(
                session = s,
                first,
                count,
                known = known.len(),
                "inode numbers handed out while leased; left out"
            );
        }
        known.sort_unstable();
        let info = self.sessions.entry(s).or_default();
        let mut at = first;
        for (a, b) in known {
            if a > at {
                self.implicit.insert(at, (a, s));
                info.ranges.insert(at);
            }
            at = at.max(b);
        }
        if at < end {
            self.implicit.insert(at, (end, s));
            info.ranges.insert(at);
        }
        if info.is_empty() {
            self.sessions.remove(&s);
        }
    }

    fn forget(&mut self, s: SessionId, ino: Ino, out: &mut Vec<Output>) {
        if self.implicit_owner(ino).is_some_and(|(_, _, o)| o == s) {
            self.materialize(ino);
        }
        let Some(st) = self.inodes.get_mut(&ino) else { return };
        if st.writer.is_some_and(|(w, _)| w == s) {
            st.writer = None;
        }
        st.readers.remove(&s);
        unrevoke(&mut st.revoking, &mut self.deadlines, s, ino);
        self.pump(ino, out);
        self.tidy(ino, s);
    }

    /// Turns `ino`, if it lies in an implicit range and has no entry, into an entry whose
    /// writer is the range's session.
    fn materialize(&mut self, ino: Ino) {
        if self.inodes.contains_key(&ino) {
            return;
        }
        let Some((first, end, s)) = self.implicit_owner(ino) else { return };
        self.implicit.remove(&first);
        let info = self.sessions.entry(s).or_default();
        info.ranges.remove(&first);
        if first < ino {
            self.implicit.insert(first, (ino, s));
            info.ranges.insert(first);
        }
        if ino + 1 < end {
            self.implicit.insert(ino + 1, (end, s));
            info.ranges.insert(ino + 1);
        }
        info.inodes.insert(ino);
        let lease = Self::new_lease(&mut self.last_lease);
        self.inodes.insert(ino, InodeLeases { writer: Some((s, lease)), ..Default::default() });
        tracing::debug!(session = s, ino, lease, "implicit write lease made explicit");
    }

    /// Serves the queue of `ino` from its head (see the module docs).
    fn pump(&mut self, ino: Ino, out: &mut Vec<Output>) {
        let LeaseTable { inodes, sessions, last_lease, counters, deadlines, .. } = self;
        let Some(st) = inodes.get_mut(&ino) else { return };
        while let Some(&head) = st.queue.front() {
            let s = head.session;
            let granted = if let Some((lease, held)) = st.satisfies(s, head.mode) {
                (lease, held)
            } else {
                let mut blocked = false;
                if let Some((w, lease)) = st.writer.filter(|&(w, _)| w != s) {
                    blocked = true;
                    let keep_read = head.mode == LeaseMode::Read;
                    revoke(&mut st.revoking, deadlines, expired(sessions, w), out, ino, (w, lease), keep_read);
                }
                if head.mode == LeaseMode::Write {
                    for (&r, &lease) in st.readers.iter().filter(|&(&r, _)| r != s) {
                        blocked = true;
                        revoke(&mut st.revoking, deadlines, expired(sessions, r), out, ino, (r, lease), false);
                    }
                }
                if blocked || st.revoking.contains_key(&s) || st.awaiting.keys().any(|&t| t != s) {
                    break;
                }
                // Nothing in the way: `s` holds nothing here, or a read lease it upgrades.
                let lease = Self::new_lease(last_lease);
                match head.mode {
                    LeaseMode::Write => {
                        st.readers.remove(&s);
                        st.writer = Some((s, lease));
                    }
                    LeaseMode::Read => {
                        st.readers.insert(s, lease);
                    }
                }
                (lease, head.mode)
            };
            st.queue.pop_front();
            if let Some(info) = sessions.get_mut(&s) {
                info.waiting = info.waiting.saturating_sub(1);
            }
            counters.grants += 1;
            out.push(Output::Grant { session: s, req_id: head.req_id, ino, mode: granted.1, lease: granted.0 });
        }
    }

    /// After a change of `ino` that concerned `s`: drops `ino` from `s`'s index if it no
    /// longer mentions `s`, and empty entries.
    fn tidy(&mut self, ino: Ino, s: SessionId) {
        if !self.inodes.get(&ino).is_some_and(|st| st.mentions(s)) {
            if let Some(info) = self.sessions.get_mut(&s) {
                info.inodes.remove(&ino);
                info.awaits.remove(&ino);
                if info.is_empty() {
                    self.sessions.remove(&s);
                }
            }
        }
        self.remove_if_empty(ino);
    }

    fn remove_if_empty(&mut self, ino: Ino) {
        if self.inodes.get(&ino).is_some_and(InodeLeases::is_empty) {
            self.inodes.remove(&ino);
        }
    }

    /// The session in one of whose implicit ranges `ino` lies.
    pub(crate) fn implicit_session(&self, ino: Ino) -> Option<SessionId> {
        self.implicit_owner(ino).map(|(_, _, s)| s)
    }

    /// Whether `ino` lies in one of `s`'s implicit ranges.
    pub(crate) fn owns_implicitly(&self, s: SessionId, ino: Ino) -> bool {
        self.implicit_owner(ino).is_some_and(|(_, _, o)| o == s)
    }

    /// Whether session `s` may publish a change of `ino` logged at `lsn`: it is the
    /// inode's writer (being revoked or not; its answer will cover what it logged), or the
    /// number is in one of its implicit ranges, or it handed its write lease back covering
    /// `lsn` and that publication is still awaited (nobody else holds the inode until then).
    /// Anything else — no lease, a read lease, an entry logged after the lease was handed
    /// back, another session's inode — is a change the session had no right to make.
    pub(crate) fn may_change(&self, s: SessionId, ino: Ino, lsn: Lsn) -> bool {
        match self.inodes.get(&ino) {
            Some(st) => st.writer.is_some_and(|(w, _)| w == s) || st.awaiting.get(&s).is_some_and(|&c| lsn < c),
            None => self.implicit_owner(ino).is_some_and(|(_, _, o)| o == s),
        }
    }

    /// Admits `s`'s entries for publication, in order, each given as its LSN, the LSN just
    /// past it, and the inodes it changes: stops at the first entry changing an inode `s`
    /// may not change ([`LeaseTable::may_change`]). Records that `s` is publishing up to the
    /// end of the admitted ones, so that a lease handed back before that publication is
    /// done waits for it. Returns how many entries are admitted and why the next is not.
    pub(crate) fn admit<'a>(
        &mut self,
        s: SessionId,
        entries: impl IntoIterator<Item = (Lsn, Lsn, &'a [Ino])>,
    ) -> (usize, Option<(Lsn, String)>) {
        let mut n = 0;
        let mut end = None;
        let mut refused = None;
        for (lsn, next, inos) in entries {
            if let Some(&ino) = inos.iter().find(|&&ino| !self.may_change(s, ino, lsn)) {
                refused = Some((lsn, format!("changes inode {ino}, for which the session holds no write lease")));
                break;
            }
            n += 1;
            end = Some(next);
        }
        if let (Some(end), Some(info)) = (end, self.sessions.get_mut(&s)) {
            info.publishing = info.publishing.max(end);
        }
        (n, refused)
    }

    /// Sizes and counters now.
    pub(crate) fn counts(&self) -> Counts {
        let mut c = Counts {
            inodes: self.inodes.len() as u64,
            implicit_ranges: self.implicit.len() as u64,
            sessions: self.sessions.len() as u64,
            grants: self.counters.grants,
            revokes: self.counters.revokes,
            stale: self.counters.stale,
            refused: self.counters.refused,
            expired: self.counters.expired,
            ..Counts::default()
        };
        for st in self.inodes.values() {
            c.writers += u64::from(st.writer.is_some());
            c.readers += st.readers.len() as u64;
            c.waiting += st.queue.len() as u64;
            c.revokes_in_flight += st.revoking.len() as u64;
            c.publications_awaited += st.awaiting.len() as u64;
        }
        c
    }

    /// The holders of `ino`: its writer and its readers.
    #[cfg(test)]
    pub(crate) fn holders(&self, ino: Ino) -> (Option<Holder>, Vec<Holder>) {
        match self.inodes.get(&ino) {
            Some(st) => (st.writer, st.readers.iter().map(|(&s, &l)| (s, l)).collect()),
            None => (None, Vec::new()),
        }
    }

    /// The inodes session `s` holds the write lease of.
    pub(crate) fn written_by(&self, s: SessionId) -> Vec<Ino> {
        let Some(info) = self.sessions.get(&s) else { return Vec::new() };
        info.inodes
            .iter()
            .copied()
            .filter(|i| self.inodes.get(i).and_then(|st| st.writer).is_some_and(|w| w.0 == s))
            .collect()
    }

    /// Whether nothing at all is recorded.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.inodes.is_empty() && self.sessions.is_empty() && self.implicit.is_empty()
    }
}

/// Whether session `s` has expired (for [`LeaseTable::pump`], which holds the fields apart).
fn expired(sessions: &HashMap<SessionId, SessionInfo>, s: SessionId) -> bool {
    sessions.get(&s).is_some_and(|i| i.expired)
}

/// Asks the holder `(session, lease)` of `ino` for it back, unless a revoke is in flight
/// already; the revoke's deadline is armed unless the session has `expired` already.
fn revoke(
    revoking: &mut BTreeMap<SessionId, Revoking>,
    deadlines: &mut Deadlines,
    expired: bool,
    out: &mut Vec<Output>,
    ino: Ino,
    (session, lease): Holder,
    keep_read: bool,
) {
    if let btree_map::Entry::Vacant(e) = revoking.entry(session) {
        let deadline = deadlines.arm(session, ino, expired);
        e.insert(Revoking { lease, keep_read, deadline });
        out.push(Output::Revoke { session, ino, lease, keep_read });
    }
}

/// Ends the revoke of `ino` in flight to `session`, if any, and its deadline.
fn unrevoke(revoking: &mut BTreeMap<SessionId, Revoking>, deadlines: &mut Deadlines, session: SessionId, ino: Ino) {
    if let Some(r) = revoking.remove(&session) {
        deadlines.disarm(session, ino, &r);
    }
}

#[cfg(test)]
mod check;
mod expiry;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
