//! A seeded simulation of the lease table with clients that follow the protocol: several
//! sessions ask for leases on a few shared inodes and on numbers handed out to them,
//! write their logs while they hold write leases, release, answer revokes late, have
//! their logs published late, fail and die — all in an order drawn from one seeded
//! generator. Messages on a session's control connection keep their order in each
//! direction (as on the socket); everything else interleaves freely.
//!
//! Checked after every step: the table's own invariants ([`LeaseTable::check`]); what the
//! live clients *believe* they hold (from the grants they received to the hand-backs they
//! sent) never has two writers, or a writer and a reader of different sessions; and a
//! grant to S of an inode that T handed back at `covered` after writing comes only once
//! T's log is published up to `covered` (or T's session is over). At the end, with every
//! message delivered, every revoke answered and every publication done, every request of
//! a live session has been answered, nothing is in flight, and once every session ends the
//! table is empty.
//!
//!
//! Publication goes through admission ([`LeaseTable::admit`]): every entry a client logged
//! under a write lease it believed it held is admitted whenever its publisher gets to it
//! (background chunks, publications the table asks for, a dead client's log), and an entry
//! changing [`FOREIGN`] — an inode nobody is ever granted — is refused, failing the session.
//!
//! Clients also free inodes they write (the table forgets their lease).
//!
//! **Expiry.** Most runs have a revoke timeout (10–200 ms of simulated time; a fifth have
//! none), and the clock moves on in random ticks. Some clients are *deaf*: they read their
//! revokes but never answer (from the start, or they turn deaf later); the others answer
//! after random delays, sometimes past the deadline. An `Expire` is checked to come once
//! per session, for a revoke sent more than the timeout ago, and to be followed by no grant
//! to that session. The simulated daemon then fences the session as nicfs does: its
//! publisher publishes its log up to where it stood — the client may go on logging past
//! that, and answering late — and then the session ends. Checked besides: no entry is ever
//! admitted while another session holds the inode it changes; nothing past the fence is
//! published, and once the session has ended admission refuses every entry left in its
//! log. Liveness: with deaf clients, the drain at the end must still answer every request
//! of a live session — which it does only because holders expire (a table that never
//! emits `Expire` fails here).
//!
//! `LEASE_SIM_SEED=N cargo test -p nicfs lease::sim` replays one seed (a failure prints its
//! seed); `LEASE_SIM_SEEDS=N` runs N seeds.

use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Life {
    Live,
    /// An entry was refused: the table was told at once; the client's calls fail.
    Failed,
    /// The process is gone; its last messages may still be on the way to nicfs.
    Dying,
    /// Its lease expired and nicfs fenced it at the end of its log then: its publisher
    /// settles the log up to there, then the session ends. The process lives on.
    Fenced(Lsn),
    Ended,
}

/// Lease ids the table never hands out (it counts from 1): for hand-backs that must be stale.
const BOGUS: LeaseId = 1 << 40;
/// First number handed out for creation (the shared inodes are below).
const NEW_INODES: Ino = 1000;
/// An inode no session ever asks for: an entry changing it is forged.
const FOREIGN: Ino = 900;

struct Client {
    life: Life,
    /// The end of its log.
    tail: Lsn,
    /// How far the simulated publisher has published it.
    published: Lsn,
    /// What it believes it holds: mode and lease id (None: a number handed to it, whose
    /// implicit lease id it has not learnt).
    holds: BTreeMap<Ino, (LeaseMode, Option<LeaseId>)>,
    /// Lease ids it handed back for good: a grant naming one is void.
    handed_back: BTreeSet<LeaseId>,
    pending: BTreeMap<u64, (Ino, LeaseMode)>,
    next_req: u64,
    to_table: VecDeque<Input>,
    to_client: VecDeque<Output>,
    /// Revokes received, not yet answered.
    revokes: Vec<(Ino, LeaseId, bool)>,
    /// Its publisher's queue of publications asked by the table.
    jobs: VecDeque<Lsn>,
    /// Its unpublished entries: LSN, end, the inode changed.
    log: VecDeque<(Lsn, Lsn, Ino)>,
    /// Inodes it freed: it never asks for them again and ignores grants of them still on
    /// the way.
    freed: BTreeSet<Ino>,
    /// It reads its revokes but never answers them.
    deaf: bool,
}

impl Client {
    fn new() -> Client {
        Client {
            life: Life::Live,
            tail: 0,
            published: 0,
            holds: BTreeMap::new(),
            handed_back: BTreeSet::new(),
            pending: BTreeMap::new(),
            next_req: 1,
            to_table: VecDeque::new(),
            to_client: VecDeque::new(),
            revokes: Vec::new(),
            jobs: VecDeque::new(),
            log: VecDeque::new(),
            freed: BTreeSet::new(),
            deaf: false,
        }
    }

    fn forget(&mut self) {
        self.holds.clear();
        self.pending.clear();
        self.revokes.clear();
    }
}

struct Sim {
    rng: StdRng,
    table: LeaseTable,
    clients: Vec<Client>,
    shared: Ino,
    next_new: Ino,
    /// (inode, writer session) → the highest `covered` it handed a write lease back at.
    written: BTreeMap<(Ino, usize), Lsn>,
    steps: usize,
    grants: usize,
    /// The simulated clock (ms) and the revoke timeout (0: none).
    now: u64,
    timeout: u64,
    /// When each revoke was sent: (client, inode, lease) → time.
    revoked_at: BTreeMap<(usize, Ino, LeaseId), u64>,
    /// Clients whose session expired.
    expired: BTreeSet<usize>,
    expiries: usize,
}

fn sid(i: usize) -> SessionId {
    i as SessionId + 1
}

impl Sim {
    /// Client `i`'s publisher publishes its log up to `lsn` through admission: every entry
    /// up to the first forged one must be admitted, that one refused — and then the
    /// session fails.
    fn publish(&mut self, i: usize, lsn: Lsn) -> Result<(), String> {
        let session = sid(i);
        let c = &mut self.clients[i];
        // A fenced session is published up to its fence, never beyond.
        let lsn = match c.life {
            Fenced(fence) => lsn.min(fence),
            _ => lsn,
        };
        let upto = c.log.iter().take_while(|e| e.1 <= lsn).count();
        let entries: Vec<(Lsn, Lsn, [Ino; 1])> = c.log.iter().take(upto).map(|&(a, b, ino)| (a, b, [ino])).collect();
        let forged = entries.iter().position(|e| e.2[0] == FOREIGN);
        let (n, refused) = self.table.admit(session, entries.iter().map(|(a, b, ino)| (*a, *b, &ino[..])));
        self.table.check().map_err(|e| format!("after admitting {entries:?} of session {session}: {e}"))?;
        if n != forged.unwrap_or(entries.len()) || refused.is_some() != forged.is_some() {
            return Err(format!(
                "session {session}: {n} of {entries:?} admitted ({refused:?}); the first forged is {forged:?}\n{:#?}",
                self.table
            ));
        }
        // Nobody else holds an inode while a change of it is published.
        for (lsn, _, [ino]) in &entries[..n] {
            let (w, readers) = self.table.holders(*ino);
            if w.iter().chain(&readers).any(|&(s, _)| s != session) {
                return Err(format!(
                    "session {session}'s entry at {lsn} changing inode {ino} admitted while {w:?} / {readers:?} hold it"
                ));
            }
        }
        let c = &mut self.clients[i];
        c.log.drain(..n);
        match forged {
            None => {
                c.published = c.published.max(lsn);
                Ok(())
            }
            Some(k) => {
                c.published = c.published.max(entries[k].0);
                c.life = Failed;
                c.forget();
                c.jobs.clear();
                c.to_client.clear();
                c.log.clear();
                self.feed(Input::SessionEnded { session })
            }
        }
    }

    fn feed(&mut self, input: Input) -> Result<(), String> {
        let out = self.table.step(input);
        self.table.check().map_err(|e| format!("after {input:?}: {e}"))?;
        for o in out {
            self.route(o)?;
        }
        Ok(())
    }

    /// Carries an output to its session, checking a grant against the publications.
    fn route(&mut self, o: Output) -> Result<(), String> {
        let (Output::Grant { session, .. }
        | Output::Revoke { session, .. }
        | Output::Publish { session, .. }
        | Output::TooMany { session, .. }
        | Output::Expire { session, .. }) = o;
        let i = (session - 1) as usize;
        if let Output::Grant { ino, .. } = o {
            self.grants += 1;
            if self.expired.contains(&i) && !matches!(self.clients[i].life, Ended) {
                return Err(format!("{o:?}: a grant to a session that expired"));
            }
            for (&(wino, t), &covered) in self.written.range((ino, 0)..=(ino, usize::MAX)) {
                debug_assert_eq!(wino, ino);
                let c = &self.clients[t];
                if t != i && matches!(c.life, Live | Dying | Fenced(_)) && c.published < covered {
                    return Err(format!(
                        "{o:?}: session {} handed inode {ino} back at {covered} but is published only to {}",
                        sid(t),
                        c.published
                    ));
                }
            }
        }
        if let Output::Revoke { ino, lease, .. } = o {
            self.revoked_at.insert((i, ino, lease), self.now);
        }
        if let Output::Expire { reason, .. } = o {
            return self.expire(i, reason);
        }
        let c = &mut self.clients[i];
        match o {
            Output::Publish { lsn, .. } => {
                if matches!(c.life, Live | Dying | Fenced(_)) {
                    c.jobs.push_back(lsn);
                }
            }
            _ => {
                if c.life == Live {
                    c.to_client.push_back(o);
                }
            }
        }
        Ok(())
    }

    /// Client `i`'s session expired: checks it is due, then fences it as nicfs does.
    fn expire(&mut self, i: usize, reason: Expiry) -> Result<(), String> {
        self.expiries += 1;
        if !self.expired.insert(i) {
            return Err(format!("session {} expired twice ({reason})", sid(i)));
        }
        let sent = self.revoked_at.get(&(i, reason.ino, reason.lease)).copied();
        if self.timeout == 0 || reason.timeout_ms != self.timeout || sent.is_none_or(|t| self.now - t <= self.timeout) {
            return Err(format!(
                "session {} expired at {} for a revoke sent at {sent:?} ({reason}; timeout {})",
                sid(i),
                self.now,
                self.timeout
            ));
        }
        let c = &mut self.clients[i];
        match c.life {
            // Its calls fail from now on; it is hung up: nothing more reaches it, and what
            // it waits for never comes. Its publisher settles the log up to the fence.
            Live => {
                c.life = Fenced(c.tail);
                c.pending.clear();
                c.to_client.clear();
            }
            // Dead already: its publisher settles its whole log (it can log no more).
            Dying => {}
            Failed | Fenced(_) | Ended => {
                return Err(format!("session {} expired while {:?}", sid(i), c.life));
            }
        }
        Ok(())
    }

    /// The beliefs of the live clients agree with single writer, many readers.
    fn check_beliefs(&self) -> Result<(), String> {
        let mut by_ino: BTreeMap<Ino, Vec<(usize, LeaseMode)>> = BTreeMap::new();
        for (i, c) in self.clients.iter().enumerate().filter(|(_, c)| c.life == Live) {
            for (&ino, &(mode, _)) in &c.holds {
                by_ino.entry(ino).or_default().push((i, mode));
            }
        }
        for (ino, v) in by_ino {
            if let Some(&(w, _)) = v.iter().find(|(_, m)| *m == LeaseMode::Write) {
                if v.len() > 1 {
                    return Err(format!("inode {ino}: session {} writes while others hold it: {v:?}", sid(w)));
                }
            }
        }
        Ok(())
    }

    fn pick_ino(&mut self) -> Ino {
        if self.next_new > NEW_INODES && self.rng.random_ratio(1, 4) {
            self.rng.random_range(NEW_INODES..self.next_new)
        } else {
            self.rng.random_range(1..=self.shared)
        }
    }

    /// A client hands back `lease` of `ino` (Release, or RevokeDone with `keep_read`).
    fn hand_back(&mut self, i: usize, ino: Ino, lease: LeaseId, revoke: Option<bool>) {
        let c = &mut self.clients[i];
        let covered = c.tail;
        if let Some(&(mode, held)) = c.holds.get(&ino) {
            if held.is_none_or(|l| l == lease) {
                if mode == LeaseMode::Write {
                    let w = self.written.entry((ino, i)).or_default();
                    *w = (*w).max(covered);
                }
                if revoke == Some(true) && mode == LeaseMode::Write {
                    c.holds.insert(ino, (LeaseMode::Read, Some(lease)));
                } else {
                    c.holds.remove(&ino);
                    c.handed_back.insert(lease);
                }
            }
        }
        let session = sid(i);
        c.to_table.push_back(match revoke {
            Some(_) => Input::RevokeDone { session, ino, lease, covered_lsn: covered },
            None => Input::Release { session, ino, lease, covered_lsn: covered },
        });
    }

    /// A client receives what nicfs sent it.
    fn receive(&mut self, i: usize, o: Output) {
        let c = &mut self.clients[i];
        match o {
            Output::Grant { req_id, ino, mode, lease, .. } => {
                c.pending.remove(&req_id);
                if !c.handed_back.contains(&lease) && !c.freed.contains(&ino) {
                    c.holds.insert(ino, (mode, Some(lease)));
                }
            }
            Output::TooMany { req_id, .. } => {
                c.pending.remove(&req_id);
            }
            Output::Revoke { ino, lease, keep_read, .. } => c.revokes.push((ino, lease, keep_read)),
            Output::Publish { .. } | Output::Expire { .. } => unreachable!("not for the client"),
        }
    }

    /// One step; `drain` allows only what answers or delivers, no new client initiative.
    /// False when nothing could be done.
    fn step(&mut self, drain: bool) -> Result<bool, String> {
        // Everything that can happen now, as (kind, session).
        let mut can: Vec<(u8, usize)> = Vec::new();
        for (i, c) in self.clients.iter().enumerate() {
            if !c.to_table.is_empty() {
                can.push((0, i));
            }
            if !c.to_client.is_empty() {
                can.push((1, i));
            }
            // A fenced client may still answer, late.
            if !c.revokes.is_empty() && matches!(c.life, Live | Fenced(_)) && !c.deaf {
                can.push((2, i));
            }
            if !c.jobs.is_empty() {
                can.push((3, i));
            }
            if (c.life == Dying && c.to_table.is_empty()) || matches!(c.life, Fenced(_)) {
                can.push((4, i));
            }
            if !drain && matches!(c.life, Fenced(_)) {
                // It goes on logging, past its fence.
                can.push((11, i));
            }
            if !drain && c.life == Live {
                can.push((19, i));
                can.extend([
                    (10, i),
                    (10, i),
                    (10, i),
                    (11, i),
                    (12, i),
                    (12, i),
                    (13, i),
                    (14, i),
                    (15, i),
                    (16, i),
                    (17, i),
                    (18, i),
                ]);
            }
        }
        // Time passes; at the end only while a revoke may still expire.
        if !drain || self.table.next_deadline().is_some() {
            can.extend([(5, 0), (5, 0)]);
        }
        if can.is_empty() {
            return Ok(false);
        }
        self.steps += 1;
        let (kind, i) = can[self.rng.random_range(0..can.len())];
        let session = sid(i);
        match kind {
            0 => {
                let input = self.clients[i].to_table.pop_front().unwrap();
                // A failed or fenced session's requests are answered EIO without reaching
                // the table.
                let refused = matches!(self.clients[i].life, Failed | Fenced(_));
                if !(refused && matches!(input, Input::Request { .. })) {
                    self.feed(input)?;
                }
            }
            1 => {
                let o = self.clients[i].to_client.pop_front().unwrap();
                self.receive(i, o);
            }
            2 => {
                let n = self.clients[i].revokes.len();
                let (ino, lease, keep_read) = self.clients[i].revokes.swap_remove(self.rng.random_range(0..n));
                self.hand_back(i, ino, lease, Some(keep_read));
            }
            3 => {
                let lsn = self.clients[i].jobs.pop_front().unwrap();
                self.publish(i, lsn)?;
                if self.clients[i].life != Failed {
                    let lsn = self.clients[i].published;
                    self.feed(Input::Published { session, lsn })?;
                }
            }
            4 => {
                // The publisher settles the dead (or fenced) client's log, then the session
                // ends. What a fenced client still had on the way is dropped: it was hung up.
                let tail = self.clients[i].tail;
                self.publish(i, tail)?;
                let c = &mut self.clients[i];
                if c.life != Failed {
                    c.life = Ended;
                    c.jobs.clear();
                    c.to_table.clear();
                    self.feed(Input::SessionEnded { session })?;
                }
                // The fence holds: nothing left in the log is admitted once the session is
                // over (for a fenced client, what it logged past the fence).
                let left: Vec<(Lsn, Lsn, Ino)> = self.clients[i].log.iter().copied().collect();
                for (lsn, end, ino) in left {
                    if self.table.admit(session, [(lsn, end, &[ino][..])]).0 != 0 {
                        return Err(format!("session {session} ended, yet its entry at {lsn} on {ino} is admitted"));
                    }
                }
            }
            5 => {
                // Time passes.
                let step = self.rng.random_range(1..=self.timeout.max(10));
                self.now += step;
                let now_ms = self.now;
                self.feed(Input::Tick { now_ms })?;
            }
            10 => {
                let ino = self.pick_ino();
                if self.clients[i].freed.contains(&ino) {
                    return Ok(true);
                }
                let mode = if self.rng.random_bool(0.5) { LeaseMode::Read } else { LeaseMode::Write };
                let c = &mut self.clients[i];
                let req_id = c.next_req;
                c.next_req += 1;
                c.pending.insert(req_id, (ino, mode));
                c.to_table.push_back(Input::Request { session, req_id, ino, mode });
            }
            11 => {
                // Log a change of an inode held (as it believes) for writing; rarely, a
                // forged one.
                let c = &mut self.clients[i];
                let writes: Vec<Ino> =
                    c.holds.iter().filter(|(_, h)| h.0 == LeaseMode::Write).map(|(&ino, _)| ino).collect();
                let ino = if self.rng.random_ratio(1, 40) {
                    Some(FOREIGN)
                } else if writes.is_empty() {
                    None
                } else {
                    Some(writes[self.rng.random_range(0..writes.len())])
                };
                if let Some(ino) = ino {
                    let len = self.rng.random_range(1..100);
                    c.log.push_back((c.tail, c.tail + len, ino));
                    c.tail += len;
                }
            }
            12 => {
                let known: Vec<(Ino, LeaseId)> =
                    self.clients[i].holds.iter().filter_map(|(&ino, h)| h.1.map(|l| (ino, l))).collect();
                if !known.is_empty() {
                    let (ino, lease) = known[self.rng.random_range(0..known.len())];
                    self.hand_back(i, ino, lease, None);
                }
            }
            13 => {
                // Background publication (a chunk), told to the table or not.
                let lsn = self.clients[i].tail;
                self.publish(i, lsn)?;
                if self.clients[i].life != Failed && self.rng.random_bool(0.5) {
                    self.feed(Input::Published { session, lsn })?;
                }
            }
            14 => {
                // nicfs hands the session inode numbers to create.
                let count = self.rng.random_range(1..4);
                let first = self.next_new;
                self.next_new += count;
                for ino in first..first + count {
                    self.clients[i].holds.insert(ino, (LeaseMode::Write, None));
                }
                self.feed(Input::GrantNew { session, first, count })?;
            }
            15 => {
                // Stale hand-backs: ids the table never handed out.
                let ino = self.pick_ino();
                let lease = BOGUS + self.rng.random_range(0..3);
                let covered = self.clients[i].tail;
                let c = &mut self.clients[i];
                c.to_table.push_back(if self.rng.random_bool(0.5) {
                    Input::Release { session, ino, lease, covered_lsn: covered }
                } else {
                    Input::RevokeDone { session, ino, lease, covered_lsn: covered }
                });
            }
            16 => {
                if self.rng.random_ratio(1, 8) {
                    // An entry refused: the table is told at once; its unpublished suffix
                    // will never be published.
                    let c = &mut self.clients[i];
                    c.life = Failed;
                    c.forget();
                    c.jobs.clear();
                    c.to_client.clear();
                    c.log.clear();
                    self.feed(Input::SessionEnded { session })?;
                }
            }
            17 => {
                if self.rng.random_ratio(1, 6) {
                    let c = &mut self.clients[i];
                    c.life = Dying;
                    c.forget();
                    c.to_client.clear();
                }
            }
            18 => {
                // It frees an inode it writes, once every entry of it is published: the
                // table forgets its lease.
                let c = &mut self.clients[i];
                let free: Vec<Ino> = c
                    .holds
                    .iter()
                    .filter(|(&ino, h)| {
                        h.0 == LeaseMode::Write
                            && !c.log.iter().any(|e| e.2 == ino)
                            && !c.pending.values().any(|p| p.0 == ino)
                    })
                    .map(|(&ino, _)| ino)
                    .collect();
                if !free.is_empty() && self.rng.random_ratio(1, 4) {
                    let ino = free[self.rng.random_range(0..free.len())];
                    c.holds.remove(&ino);
                    c.freed.insert(ino);
                    self.feed(Input::Forget { session, ino })?;
                }
            }
            19 => {
                // It stops answering revokes (it still reads them).
                if self.timeout > 0 && self.rng.random_ratio(1, 10) {
                    self.clients[i].deaf = true;
                }
            }
            _ => unreachable!(),
        }
        self.check_beliefs()?;
        Ok(true)
    }
}

use Life::{Dying, Ended, Failed, Fenced, Live};

/// What a run did: steps, grants, sessions expired.
type Stats = (usize, usize, usize);

/// Runs one seed; the first violation, described.
fn run(seed: u64) -> Result<Stats, String> {
    let mut rng = StdRng::seed_from_u64(seed);
    let sessions = rng.random_range(2..=4);
    let shared = rng.random_range(1..=3);
    let max_waiting = rng.random_range(2..=6);
    let steps = rng.random_range(50..400);
    // A fifth of the runs without expiry, and then nobody is deaf (nothing would end it).
    let timeout = if rng.random_ratio(1, 5) { 0 } else { rng.random_range(10..=200) };
    let clients = (0..sessions)
        .map(|_| {
            let mut c = Client::new();
            c.deaf = timeout > 0 && rng.random_ratio(1, 4);
            c
        })
        .collect();
    let mut sim = Sim {
        rng,
        table: LeaseTable::new(max_waiting).with_revoke_timeout(timeout),
        clients,
        shared,
        next_new: NEW_INODES,
        written: BTreeMap::new(),
        steps: 0,
        grants: 0,
        now: 0,
        timeout,
        revoked_at: BTreeMap::new(),
        expired: BTreeSet::new(),
        expiries: 0,
    };
    for _ in 0..steps {
        sim.step(false)?;
    }
    // Deliver and answer everything, with no new request, release or death.
    let mut n = 0;
    while sim.step(true)? {
        n += 1;
        if n > 100_000 {
            return Err("no quiescence".into());
        }
    }
    for (i, c) in sim.clients.iter().enumerate() {
        if c.life == Live && !c.pending.is_empty() {
            return Err(format!("session {}: requests never answered: {:?}\n{:#?}", sid(i), c.pending, sim.table));
        }
    }
    let counts = sim.table.counts();
    if counts.waiting + counts.revokes_in_flight + counts.publications_awaited != 0 {
        return Err(format!("still in flight at the end: {counts:?}\n{:#?}", sim.table));
    }
    // Every session ends: nothing is left.
    for i in 0..sim.clients.len() {
        match sim.clients[i].life {
            Live => sim.clients[i].life = Dying,
            Failed => {
                // Its connection closes: what it still had on the way is dropped.
                sim.clients[i].life = Ended;
                sim.clients[i].to_table.clear();
                sim.feed(Input::SessionEnded { session: sid(i) })?;
            }
            Dying | Fenced(_) | Ended => {}
        }
    }
    while sim.step(true)? {}
    if !sim.table.is_empty() {
        return Err(format!("state left after every session ended: {:#?}", sim.table));
    }
    Ok((sim.steps, sim.grants, sim.expiries))
}

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn seeded_simulation() {
    let seeds: Vec<u64> = match env("LEASE_SIM_SEED") {
        Some(s) => vec![s],
        None => (0..env("LEASE_SIM_SEEDS").unwrap_or(3000)).collect(),
    };
    let (mut steps, mut grants, mut expiries) = (0, 0, 0);
    for &seed in &seeds {
        match std::panic::catch_unwind(|| run(seed)) {
            Ok(Ok((s, g, e))) => {
                steps += s;
                grants += g;
                expiries += e;
            }
            Ok(Err(e)) => panic!("seed {seed} (LEASE_SIM_SEED={seed} to replay): {e}"),
            Err(_) => panic!("seed {seed} panicked (LEASE_SIM_SEED={seed} to replay)"),
        }
    }
    println!("{} seeds, {steps} steps, {grants} grants, {expiries} sessions expired", seeds.len());
    assert!(grants > seeds.len(), "the simulation grants leases");
    assert!(seeds.len() < 100 || expiries > seeds.len() / 10, "the simulation expires sessions");
}
