//! The daemon's lease manager: the [`LeaseTable`] behind a mutex, and the execution of its
//! outputs, in the order the table decided them.
//!
//! * Inputs come from the sessions' control connections (`LeaseRequest`, `LeaseRelease`,
//!   `RevokeDone`), from inode grants ([`Leases::grant_inodes`]), from the publishers
//!   (`Published` after a `PublishTo` job, [`Leases::published`]) and from the end of a
//!   session: `SessionEnded` is fed when the session fails (its unpublished suffix will
//!   never be published, [`crate::session::Session::fail`]) and once its publisher has
//!   settled its log and stopped.
//! * `Grant`, `Revoke` and `TooMany` become frames queued on the target session's outbox
//!   ([`crate::session::Session::notify`]): a thread per session writes them, so that the
//!   thread that fed the input — often another client's control reader — never waits on
//!   this client's socket. `Publish` becomes a `PublishTo` job of the session's publisher,
//!   or at once `Published` when the session has published that far already.
//! * An output for a session that is gone (no longer registered: its log is settled) or
//!   failed is turned into `SessionEnded` (a failed session's grant is answered EIO), so a
//!   session that cannot answer does not hold others up.
//! * **Expiry** (`--lease-timeout-ms`, [`crate::lease::table`]'s `expiry`): the table is told the
//!   time by a `Tick` before every input and from a timer thread ([`Leases::tick`]), so a
//!   revoke's deadline is counted from when it was sent. `Expire` fences the session
//!   ([`Session::expire`]): its calls are refused from then on with the reason, and its
//!   sequencer publishes its log up to where it stands, tells the client why (`Rejected`),
//!   hangs up, and only then fails the session — which feeds `SessionEnded`, so its leases
//!   pass on after that publication, as a dead client's do ([`crate::pipeline::sequencer`]).
//!
//! * Admission ([`Leases::admit`]): the publish stage asks, under this mutex, which of a
//!   chunk's entries the session had the right to log (a write lease on every inode they
//!   change); a chunk is published only up to the first entry that is not.
//!
//! Lock order: this mutex, then the allocator's ([`Leases::grant_inodes`]), the session
//! registry's and the slot map's (each held only for a lookup). Outputs are carried out
//! under this mutex (so a client hears of a lease before it hears it revoked): the lease
//! record's writes and fences in PM, frames pushed to outboxes and jobs to publishers —
//! nothing that waits for a client or a publisher.

use crate::lease::table::{Counts, Input, LeaseTable, Lsn, Output, SessionId};
use crate::node::lease_record::LeaseFile;
use crate::session::Job;
use crate::session::{Ended, Session, Sessions};
use linefs_pm::publish::Batch;
use linefs_pm::record::Record;
use linefs_proto::RemoteError;
use linefs_proto::{Control, ErrorReply, Frame, LeaseGranted, LeaseMode, Revoke};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// The lease table and what carries out its decisions.
pub struct Leases {
    table: Mutex<LeaseTable>,
    sessions: Weak<Sessions>,
    /// The write leases recorded in PM ([`crate::node::lease_record`]), and each live session's slot.
    file: Option<Arc<LeaseFile>>,
    slots: Mutex<HashMap<SessionId, u32>>,
    /// The table's clock counts from here.
    origin: Instant,
}

impl Leases {
    /// The lease manager of `sessions`, recording write leases in `file` if given; a holder
    /// that leaves a revoke unanswered for `revoke_timeout_ms` expires (0: never).
    pub fn new(sessions: &Arc<Sessions>, file: Option<Arc<LeaseFile>>, revoke_timeout_ms: u64) -> Leases {
        Leases {
            table: Mutex::new(LeaseTable::default().with_revoke_timeout(revoke_timeout_ms)),
            sessions: Arc::downgrade(sessions),
            file,
            slots: Mutex::new(HashMap::new()),
            origin: Instant::now(),
        }
    }

    /// The revoke timeout in ms (0: revokes never expire).
    pub fn revoke_timeout_ms(&self) -> u64 {
        self.table.lock().revoke_timeout_ms()
    }

    /// How often the timer thread should [`tick`](Leases::tick): a tenth of the timeout,
    /// within 5..=100 ms (a revoke expires at most that late); None when revokes never expire.
    pub fn tick_interval(&self) -> Option<Duration> {
        match self.revoke_timeout_ms() {
            0 => None,
            t => Some(Duration::from_millis((t / 10).clamp(5, 100))),
        }
    }

    /// Moves the table's clock to now: holders of overdue revokes expire.
    pub fn tick(&self) {
        let mut table = self.table.lock();
        let outs = self.step(&mut table, None);
        self.run(&mut table, outs);
    }

    /// Steps `table` through `input`, after a tick that brings its clock to now (when revokes
    /// expire), so that a revoke the input starts is timed from now.
    fn step(&self, table: &mut LeaseTable, input: Option<Input>) -> Vec<Output> {
        let mut outs = Vec::new();
        if table.revoke_timeout_ms() != 0 {
            let now_ms = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
            outs = table.step(Input::Tick { now_ms });
        }
        if let Some(input) = input {
            outs.extend(table.step(input));
        }
        outs
    }

    /// `session` writes log slot `slot` (recorded leases name slots).
    pub fn attach(&self, session: SessionId, slot: u32) {
        self.slots.lock().insert(session, slot);
    }

    fn slot_of(&self, session: SessionId) -> Option<u32> {
        self.slots.lock().get(&session).copied()
    }

    /// Feeds one input and carries out what follows. A hand-back is recorded first, so
    /// that it is durable before anyone else can be granted the inode; a session's end
    /// drops its recorded leases (its log is settled).
    pub fn feed(&self, input: Input) {
        if let Some(file) = &self.file {
            match input {
                Input::Release { session, ino, covered_lsn, .. }
                | Input::RevokeDone { session, ino, covered_lsn, .. } => {
                    if let Some(slot) = self.slot_of(session) {
                        file.handed_back(slot, ino, covered_lsn);
                    }
                }
                Input::Forget { session, ino } => {
                    if let Some(slot) = self.slot_of(session) {
                        file.forget(slot, ino);
                    }
                }
                Input::SessionEnded { session } => {
                    if let Some(slot) = self.slots.lock().remove(&session) {
                        file.slot_ended(slot);
                    }
                }
                _ => {}
            }
        }
        let mut table = self.table.lock();
        let outs = self.step(&mut table, Some(input));
        self.run(&mut table, outs);
    }

    /// `session`'s LeaseRequest `req_id`; false (nothing fed) if the session has failed or
    /// expired. The answer goes out when the table grants it.
    pub fn request(&self, session: &Session, req_id: u64, ino: u64, mode: LeaseMode) -> bool {
        let mut table = self.table.lock();
        // Checked under the mutex: a failure sets the flag before it feeds SessionEnded,
        // so a failed session never re-enters the table after it was dropped; an expired
        // one is known to the table from the step that expired it.
        if session.failure().is_some() || table.expired(session.id) {
            return false;
        }
        let outs = self.step(&mut table, Some(Input::Request { session: session.id, req_id, ino, mode }));
        self.run(&mut table, outs);
        true
    }

    /// The session `ino` was handed to, to create with (one of its implicit ranges).
    pub fn implicit_session(&self, ino: u64) -> Option<SessionId> {
        self.table.lock().implicit_session(ino)
    }

    /// The inodes `session` holds the write lease of.
    pub fn written_by(&self, session: SessionId) -> Vec<u64> {
        self.table.lock().written_by(session)
    }

    /// The session's log is settled (or will never be published further).
    pub fn session_ended(&self, session: SessionId) {
        self.feed(Input::SessionEnded { session });
    }

    /// After a `PublishTo{asked}` job of `session`'s publisher: feeds what is published
    /// now. A failed session ends instead. A client that named as covered more than its
    /// committed log holds has had all of it published: that is taken as far enough.
    pub fn published(&self, session: &Session, asked: Lsn) {
        if session.failed() {
            return self.session_ended(session.id);
        }
        let mut lsn = session.published.load(Ordering::Acquire);
        if lsn < asked {
            tracing::warn!(
                session = session.id,
                asked,
                published = lsn,
                "a lease was handed back covering more than the committed log"
            );
            lsn = asked;
        }
        self.feed(Input::Published { session: session.id, lsn });
    }

    /// Runs `grant` (an allocation of inode numbers for `session`, told which numbers the
    /// table still knows, so as to skip them) and records the numbers granted as held
    /// implicitly by the session — under the table's mutex, so that no request can name a
    /// number between its grant and its record.
    pub fn grant_inodes<E>(
        &self,
        session: SessionId,
        grant: impl FnOnce(&dyn Fn(u64) -> bool) -> Result<(u64, u64), E>,
    ) -> Result<(u64, u64), E> {
        let mut table = self.table.lock();
        let (first, count) = grant(&|ino| table.busy(ino))?;
        let outs = self.step(&mut table, Some(Input::GrantNew { session, first, count }));
        if let (Some(file), Some(slot)) = (&self.file, self.slot_of(session)) {
            file.hold(slot, (first..first.saturating_add(count)).filter(|&i| table.owns_implicitly(session, i)));
        }
        self.run(&mut table, outs);
        Ok((first, count))
    }

    pub fn counts(&self) -> Counts {
        self.table.lock().counts()
    }

    /// Admission of `batch`, about to be published for `session`: how many of its entries,
    /// from the first, change only inodes the session may change
    /// ([`LeaseTable::admit`](crate::lease::table::LeaseTable::admit)), and the LSN of the next
    /// one and why it is refused.
    pub fn admit(&self, session: SessionId, batch: &Batch) -> (usize, Option<(Lsn, String)>) {
        let changed: Vec<Vec<u64>> = batch
            .entries
            .iter()
            .map(|(_, records)| {
                // An OPEN_WRITE changes nothing: a client logs it under a read lease.
                let mut inos: Vec<u64> = records.iter().filter_map(Record::changed_inode).collect();
                inos.sort_unstable();
                inos.dedup();
                inos
            })
            .collect();
        let entries = batch.entries.iter().zip(&changed).map(|((loc, _), inos)| (loc.lsn, loc.end, &inos[..]));
        self.table.lock().admit(session, entries)
    }

    /// Carries out `outs`, and the inputs they lead to, still under the table's mutex: the
    /// frames go to each session's outbox in the order the table decided them. (Carried out
    /// after the mutex is released, a grant decided on one thread could reach the client
    /// after the revoke of that very lease, decided later on another — the grant's record
    /// in PM comes first and takes a while — and the client, answering a revoke of a lease
    /// it did not know yet and only then recording the grant, would log under a lease nicfs
    /// considers handed back.) Nothing here waits for a client: frames and publication jobs
    /// go to unbounded queues.
    fn run(&self, table: &mut LeaseTable, mut outs: Vec<Output>) {
        let mut then = VecDeque::new();
        loop {
            for o in outs.drain(..) {
                self.execute(o, &mut then);
            }
            let Some(input) = then.pop_front() else { return };
            outs = self.step(table, Some(input));
        }
    }

    fn execute(&self, o: Output, then: &mut VecDeque<Input>) {
        let (Output::Grant { session: id, .. }
        | Output::Revoke { session: id, .. }
        | Output::Publish { session: id, .. }
        | Output::TooMany { session: id, .. }
        | Output::Expire { session: id, .. }) = o;
        let Some(sessions) = self.sessions.upgrade() else { return };
        let Some(session) = sessions.get(id) else {
            // Unregistered only once its publisher has settled the log and stopped.
            tracing::debug!(session = id, output = ?o, "lease output for a session that has ended");
            then.push_back(Input::SessionEnded { session: id });
            return;
        };
        if session.failed() {
            tracing::debug!(session = id, output = ?o, "lease output for a failed session; its leases end");
            if let Output::Grant { req_id, .. } | Output::TooMany { req_id, .. } = o {
                session.notify(error(req_id, RemoteError::SessionFailed, "session failed"));
            }
            then.push_back(Input::SessionEnded { session: id });
            return;
        }
        match o {
            Output::Grant { req_id, ino, mode, lease, .. } => {
                tracing::debug!(session = id, ino, ?mode, lease, req_id, "lease granted");
                // Durable before the client can log anything under it.
                if let (Some(file), LeaseMode::Write) = (&self.file, mode) {
                    file.hold(session.slot, [ino]);
                }
                session
                    .notify(Frame { id: req_id, msg: Control::LeaseGranted(LeaseGranted { inode: ino, mode, lease }) });
            }
            Output::Revoke { ino, lease, keep_read, .. } => {
                tracing::debug!(session = id, ino, lease, keep_read, "lease revoked");
                let frame =
                    Frame { id: session.next_id(), msg: Control::Revoke(Revoke { inode: ino, lease, keep_read }) };
                session.notify(frame);
            }
            Output::TooMany { req_id, .. } => {
                session.notify(error(req_id, RemoteError::TryAgain, "too many lease requests waiting"));
            }
            Output::Publish { lsn, .. } => {
                let published = session.published.load(Ordering::Acquire);
                if published >= lsn {
                    then.push_back(Input::Published { session: id, lsn: published });
                } else if session.jobs.send(Job::PublishTo { lsn }).is_err() {
                    // The publisher has stopped: the log is settled.
                    then.push_back(Input::SessionEnded { session: id });
                }
            }
            Output::Expire { reason, .. } => {
                tracing::warn!(
                    session = id,
                    slot = session.slot,
                    pid = session.cred.pid,
                    uid = session.cred.uid,
                    ino = reason.ino,
                    lease = reason.lease,
                    "lease expired: the client {reason}; fencing its session"
                );
                // Its uid's sessions get no lease for a while: one that re-attaches at once
                // would otherwise hold up the others again ([`crate::limits::Fenced`]).
                sessions.fenced.fenced(session.cred.uid);
                if !session.expire(reason.to_string()) {
                    // The publisher has stopped: the log is settled.
                    then.push_back(Input::SessionEnded { session: id });
                }
            }
        }
    }
}

fn error(id: u64, code: RemoteError, message: &str) -> Frame<Control> {
    Frame { id, msg: Control::Error(ErrorReply::new(code, message)) }
}

impl Ended for Leases {
    fn session_ended(&self, id: u64) {
        Leases::session_ended(self, id);
    }
}
