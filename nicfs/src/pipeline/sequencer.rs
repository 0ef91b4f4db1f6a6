//! The sequencer of one session: a thread that takes the session's jobs in the client's
//! order (chunks committed, fsyncs, the end; shutdown's settle), asks the pipeline
//! ([`crate::pipeline`]) to fetch what the client committed, and is the pipeline's
//! **acknowledgment** stage for the session: it receives each chunk's outcome in log order
//! and answers the client. It holds no lock and does no publishing itself, so a session
//! waiting for the public area never holds up another's fetching and checking.
//!
//! * `Chunk(lsn)`: publish up to `lsn`; each chunk published sends a `Published` notice on
//!   the bulk connection (after its checkpoint is durable).
//! * `Fsync{id, lsn}`: publish up to `lsn`, then `FsyncDone` on the control connection;
//!   EINVAL if the committed log ends before `lsn`. On a node of a cluster
//!   ([`crate::pipeline::replicate`]), once `lsn` is published here the replication driver
//!   is asked, and `FsyncDone` waits until it reports every live chain member durable up to
//!   `lsn` (`Event::Replicated`); its `durable_lsn` is then what is both published and
//!   replicated. On a node on its own, published here is what "durable" means.
//! * `End`: the client is gone: publish everything the slot has committed, drop a refused
//!   suffix if the session failed, free the slot. `Settle` (nicfs stops) does the same but
//!   for freeing the slot, and answers when done.
//! * `Detach{id}`: `End`, then `Ok` to the client's Detach once the slot is free (so that a
//!   client attaching again at once finds a slot).
//! * `PublishTo{lsn}`: the lease table waits for this session's log up to `lsn` (a write
//!   lease handed back): publish up to there, then tell the lease manager what is
//!   published ([`crate::lease::manager::Leases::published`]).
//! * `Fence`: the session's lease expired ([`Session::expire`]). Its committed log as it
//!   stands now (a scan of the slot from its checkpoint, under the public area's mutex)
//!   ends at the *fence*: the sequencer publishes up to there — whatever the client
//!   announced — and never beyond (the target is capped at the fence from then on, and the
//!   publish stage refuses an entry ending past it, in case the client rewrites its log).
//!   It tells the client why (`Rejected{lsn: fence, ETIMEDOUT, reason}`), logs it, hangs up
//!   and ends the session as for a client that died: once what precedes the fence is
//!   published, the session fails — its leases pass on — and the suffix the client logged
//!   after the fence is dropped with the slot's release.
//!
//! A refused entry sends `Rejected` on the control connection, marks the session failed
//! (later requests get an Error, its chunks in flight are dropped) and logs it; nicfs and
//! the other sessions carry on.
//!
//! **End-to-end timings** ([`crate::observe::latency::EndToEnd`]): a `ChunkReady` is stamped when its
//! frame is read and recorded when a publication reaches its LSN, just before the
//! `Published` that covers it is written; an `Fsync` is stamped when read and recorded just
//! before its `FsyncDone` is written (so a client that has the answer finds it counted). A
//! `ChunkReady` for what is published already, one whose LSN is not beyond the last one
//! waiting, those of a failed session and fsyncs answered with an error are not timed.

use crate::lease::manager::Leases;
use crate::node::{Claim, Node};
use crate::observe::latency::EndToEnd;
use crate::pipeline::chunk::{Event, FetchReq, Flow};
use crate::pipeline::Pipeline;
use crate::session::{Job, Session, Sessions};
use linefs_pm::public::PublishError;
use linefs_pm::publish::{Published, SlotError};
use linefs_proto::RemoteError;
use linefs_proto::{Bulk, Control, Frame, FsyncDone, InodeSet, Rejected, MAX_PUBLISHED_INODES};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most `ChunkReady` notices of one session timed at once (a client that announces LSNs it
/// never commits cannot grow the list beyond this).
pub const MAX_TIMED_CHUNKS: usize = 1024;

/// What every session's sequencer works with, handed over by the daemon: the node, the
/// pipeline it asks for fetches, the registry it leaves at the end, the lease manager it
/// tells what is published, and the end-to-end latencies it records.
pub struct Parts {
    pub node: Arc<Node>,
    pub pipeline: Arc<Pipeline>,
    pub sessions: Arc<Sessions>,
    pub leases: Arc<Leases>,
    pub latency: Arc<EndToEnd>,
}

/// Where a session's publication stands.
struct Sequencer<'a> {
    parts: &'a Parts,
    session: &'a Session,
    flow: Arc<Flow>,
    /// Publish up to here (what the client declared committed; everything at the end).
    target: u64,
    /// The next fetch starts here.
    cursor: u64,
    /// Bumped when the cursor goes back (a chunk ended short): fetches of an older generation
    /// do not move it.
    generation: u64,
    fetching: bool,
    /// The `until` of the fetch in flight: a fetch that ends before it found the end of
    /// the log (the target may have risen meanwhile: that is no reason to stop).
    asked: u64,
    /// The log (as checked) ends before `target`: nothing more to fetch until the client
    /// declares more.
    exhausted: bool,
    /// Chunks numbered so far, and those whose outcome came back (in order).
    next_seq: u64,
    done: u64,
    /// Fsyncs waiting: (request id, lsn, when it was read, replication asked).
    waiters: Vec<(u64, u64, Instant, bool)>,
    /// The highest LSN replication reported durable on every chain member.
    replicated: u64,
    /// ChunkReady notices waiting for their LSN to be published, LSNs increasing: (lsn,
    /// when it was read).
    chunks_timed: VecDeque<(u64, Instant)>,
    settles: Vec<crossbeam_channel::Sender<()>>,
    ending: bool,
    /// The id of the client's Detach, answered at the end.
    detach: Option<u64>,
    /// Publications the lease table waits for (lsns).
    lease_waits: Vec<u64>,
    /// No entry ending past this is published (`u64::MAX` until the session is fenced).
    fence: u64,
}

/// Runs the sequencer of `session` until its `End` job (or its queue closes) is done.
pub fn run(parts: Arc<Parts>, session: Arc<Session>, claim: Claim, jobs: crossbeam_channel::Receiver<Job>) {
    let _span = tracing::info_span!("session", id = session.id, slot = session.slot).entered();
    let (tx, events) = crossbeam_channel::unbounded();
    let start = session.published.load(Ordering::Acquire);
    let mut s = Sequencer {
        parts: &parts,
        session: &session,
        flow: Arc::new(Flow { session: session.clone(), events: tx }),
        target: start,
        cursor: start,
        generation: 0,
        fetching: false,
        asked: start,
        exhausted: false,
        next_seq: 0,
        done: 0,
        waiters: Vec::new(),
        replicated: 0,
        chunks_timed: VecDeque::new(),
        settles: Vec::new(),
        ending: false,
        detach: None,
        lease_waits: Vec::new(),
        fence: u64::MAX,
    };
    let mut jobs = Some(jobs);
    let never = crossbeam_channel::never();
    loop {
        crossbeam_channel::select! {
            recv(jobs.as_ref().unwrap_or(&never)) -> job => match job {
                Ok(job) => s.job(job),
                Err(_) => {
                    jobs = None;
                    s.job(Job::End);
                }
            },
            recv(events) -> event => {
                if let Ok(e) = event {
                    s.event(e);
                }
            }
        }
        s.kick();
        s.answer();
        if s.ending && s.idle() {
            break;
        }
    }
    let detach = s.detach;
    end(&parts, &session, claim, detach);
    parts.pipeline.forget(session.id);
    parts.sessions.remove(session.id);
}

impl Sequencer<'_> {
    fn job(&mut self, job: Job) {
        let more = |s: &mut Self, lsn: u64| {
            s.target = s.target.max(lsn).min(s.fence);
            s.exhausted = false;
        };
        match job {
            Job::Chunk { lsn, at } => {
                if !self.session.failed() {
                    more(self, lsn);
                    self.time_chunk(lsn, at);
                }
            }
            Job::Fsync { id, lsn, at } => {
                if let Some(why) = self.session.failure() {
                    let _ =
                        self.session.control_error(id, RemoteError::SessionFailed, &format!("session failed: {why}"));
                    return;
                }
                self.session.committed.fetch_max(lsn, Ordering::AcqRel);
                more(self, lsn);
                self.waiters.push((id, lsn, at, false));
            }
            Job::End => {
                self.ending = true;
                more(self, u64::MAX);
            }
            Job::Detach { id } => {
                self.ending = true;
                self.detach = Some(id);
                more(self, u64::MAX);
            }
            Job::PublishTo { lsn } => {
                more(self, lsn);
                self.lease_waits.push(lsn);
            }
            Job::Settle(done) => {
                self.settles.push(done);
                more(self, u64::MAX);
            }
            Job::Fence => self.fence(),
        }
    }

    /// The session's lease expired: publish its log up to where it stands and nothing
    /// after, tell the client why, hang up, end the session (see the module docs).
    fn fence(&mut self) {
        let session = self.session;
        if session.failed() || self.fence != u64::MAX {
            return;
        }
        let why = session.failure().unwrap_or_else(|| "its lease expired".into());
        let published = session.published.load(Ordering::Acquire);
        let fence = match self.parts.node.committed_end(session.slot) {
            Ok(end) => end.max(published),
            Err(e) => {
                tracing::error!(error = %e, "cannot read the log's end: fenced where it is published");
                published
            }
        };
        self.fence = fence;
        session.set_fence(fence);
        self.target = fence;
        self.exhausted = false;
        self.ending = true;
        session.set_ending();
        self.waiters.retain(|&(id, lsn, _, _)| {
            if lsn <= fence {
                return true;
            }
            let _ = session.control_error(id, RemoteError::SessionFailed, &format!("session failed: {why}"));
            false
        });
        tracing::error!(
            fence,
            published,
            pid = session.cred.pid,
            uid = session.cred.uid,
            reason = %why,
            "lease expired: session fenced; its log is published up to the fence, nothing after, and it is hung up"
        );
        let frame = Frame {
            id: session.next_id(),
            msg: Control::Rejected(Rejected { lsn: fence, code: RemoteError::Fenced, reason: why }),
        };
        if let Err(e) = session.send_control(&frame) {
            tracing::debug!(error = %e, "cannot send Rejected");
        }
        session.hang_up();
    }

    /// Starts timing a ChunkReady for `lsn` (see the module's notes on what is not timed).
    fn time_chunk(&mut self, lsn: u64, at: Instant) {
        let published = self.session.published.load(Ordering::Acquire);
        let beyond_last = self.chunks_timed.back().is_none_or(|&(last, _)| lsn > last);
        if lsn > published && beyond_last && self.chunks_timed.len() < MAX_TIMED_CHUNKS {
            self.chunks_timed.push_back((lsn, at));
        }
    }

    /// `p` is published (and durable): moves the session's published LSN, records the
    /// ChunkReady notices it covers, then tells the client — in that order, so that a
    /// client that has its `Published` finds it counted.
    fn published(&mut self, p: &Published) {
        self.session.published.store(p.upto, Ordering::Release);
        while let Some(&(lsn, at)) = self.chunks_timed.front() {
            if lsn > p.upto {
                break;
            }
            self.parts.latency.chunk.since(at);
            self.chunks_timed.pop_front();
        }
        let mut reclaim = self.parts.node.reclaim_lsn(self.session.slot).unwrap_or(0).min(p.upto);
        if let Some(r) = self.parts.pipeline.replication() {
            reclaim = reclaim.min(r.replicated(self.session.slot));
        }
        notify_published(self.session, p, reclaim);
    }

    /// Nothing fetched is unanswered and no fetch runs.
    fn idle(&self) -> bool {
        !self.fetching && self.done == self.next_seq
    }

    /// Asks for the next fetch, if there is something to fetch and none runs.
    fn kick(&mut self) {
        if self.fetching || self.exhausted || self.session.failed() || self.cursor >= self.target {
            return;
        }
        self.fetching = true;
        self.asked = self.target;
        self.parts.pipeline.fetch(FetchReq {
            flow: self.flow.clone(),
            generation: self.generation,
            from: self.cursor,
            until: self.target,
            seq: self.next_seq,
        });
    }

    fn event(&mut self, e: Event) {
        match e {
            Event::Fetched { generation, end, next_seq, error } => {
                self.fetching = false;
                self.next_seq = next_seq;
                if generation == self.generation {
                    self.cursor = end;
                    if end < self.asked {
                        self.exhausted = true;
                    }
                }
                if let Some(e) = error {
                    self.refused(e);
                }
            }
            Event::Dropped { seq } => self.done = seq + 1,
            Event::Replicated { lsn } => self.replicated = self.replicated.max(lsn),
            Event::Published { seq, end, result, .. } => {
                self.done = seq + 1;
                match result {
                    Ok(p) => {
                        if p.entries > 0 {
                            self.published(&p);
                        }
                        if p.upto < end {
                            // The chunk held less than was fetched (an entry failed its
                            // checks on the copy): the log ends there for now; later chunks
                            // in flight are stale.
                            self.generation += 1;
                            self.cursor = p.upto;
                            self.exhausted = true;
                        }
                    }
                    Err(e) => self.refused(e),
                }
            }
        }
    }

    /// A chunk was refused, or its publication failed: tell the client, fail the session.
    fn refused(&mut self, e: SlotError) {
        let session = self.session;
        let (lsn, code, published) = match &e {
            SlotError::Rejected { lsn, published, .. } => (*lsn, RemoteError::EntryRefused, Some(published.clone())),
            SlotError::Failed { lsn, source: PublishError::NoSpace, .. } => (*lsn, RemoteError::NoSpace, None),
            SlotError::Failed { lsn, .. } => (*lsn, RemoteError::Io, None),
            SlotError::Log { .. } | SlotError::Stale { .. } => {
                (session.published.load(Ordering::Acquire), RemoteError::Io, None)
            }
        };
        let reason = e.to_string();
        tracing::error!(lsn, ?code, %reason, pid = session.cred.pid, uid = session.cred.uid, "publication refused; session failed");
        self.parts.node.counters.rejection();
        if let Some(p) = published.as_ref().filter(|p| p.entries > 0) {
            self.published(p);
        }
        // What is not published now never will be: those notices are not timed.
        self.chunks_timed.clear();
        session.fail(reason.clone());
        let frame = Frame { id: session.next_id(), msg: Control::Rejected(Rejected { lsn, code, reason }) };
        if let Err(e) = session.send_control(&frame) {
            tracing::debug!(error = %e, "cannot send Rejected");
        }
    }

    /// Answers the fsyncs that can be answered, and the settles once nothing is left to do.
    fn answer(&mut self) {
        let session = self.session;
        let published = session.published.load(Ordering::Acquire);
        let idle = self.idle();
        let fsync_latency = &self.parts.latency.fsync;
        let replication = self.parts.pipeline.replication();
        let replicated = self.replicated;
        let (slot, wake) = (session.slot, &self.flow.events);
        self.waiters.retain_mut(|(id, lsn, at, asked)| {
            let (id, lsn) = (*id, *lsn);
            let reply = if session.failed() {
                session.control_error(id, RemoteError::SessionFailed, "an entry before the fsync point was refused")
            } else if published >= lsn {
                let durable = match replication {
                    None => published,
                    Some(_) if replicated >= lsn => published.min(replicated),
                    Some(r) => {
                        if !*asked {
                            *asked = true;
                            r.fsync(slot, lsn, wake.clone());
                        }
                        return true;
                    }
                };
                // Recorded before it is sent: a client that has its FsyncDone finds it counted.
                fsync_latency.since(*at);
                session.send_control(&Frame { id, msg: Control::FsyncDone(FsyncDone { durable_lsn: durable }) })
            } else if idle {
                let why = format!("the log is committed only up to {published}, not {lsn}");
                session.control_error(id, RemoteError::Invalid, &why)
            } else {
                return true;
            };
            if let Err(e) = reply {
                tracing::debug!(error = %e, "cannot answer Fsync");
            }
            false
        });
        // The lease table learns what is published once it reaches what it waits for, or
        // once nothing more can be (the log ends short: the lease manager warns and takes
        // that as far enough; a failed session ends its leases).
        self.lease_waits.retain(|&lsn| {
            if session.failed() || published >= lsn || idle {
                self.parts.leases.published(session, lsn);
                false
            } else {
                true
            }
        });
        if idle && (self.ending || !self.settles.is_empty()) {
            if self.fence != u64::MAX && !session.failed() {
                // Published up to the fence: the fenced session fails now, and its leases
                // pass on.
                session.fail(session.failure().unwrap_or_else(|| "fenced".into()));
            }
            drop_refused_suffix(self.parts, session);
            for done in self.settles.drain(..) {
                let _ = done.send(());
            }
        }
    }
}

/// Tells the client what is published, and up to where it may reuse its log (published
/// and replicated: the slot's reclaim LSN).
fn notify_published(session: &Session, p: &Published, reclaim_lsn: u64) {
    let changed =
        if p.touched.len() <= MAX_PUBLISHED_INODES { InodeSet::Listed(p.touched.clone()) } else { InodeSet::All };
    let msg = Bulk::Published(linefs_proto::Published { published_lsn: p.upto, reclaim_lsn, changed });
    match session.send_bulk(&Frame { id: session.next_id(), msg }) {
        Ok(true) => {}
        Ok(false) => tracing::debug!("no bulk connection: Published not sent"),
        Err(e) => tracing::debug!(error = %e, "cannot send Published"),
    }
}

/// The end of a session (its committed log published): free the slot, answer a Detach,
/// hang up.
fn end(parts: &Parts, session: &Session, claim: Claim, detach: Option<u64>) {
    parts.node.release(claim);
    if let Some(id) = detach {
        if let Err(e) = session.send_control(&Frame { id, msg: Control::Ok }) {
            tracing::debug!(error = %e, "cannot answer Detach");
        }
    }
    session.hang_up();
    tracing::info!(
        pid = session.cred.pid,
        published = session.published.load(Ordering::Acquire),
        failed = session.failed(),
        "session ended; slot released"
    );
}

/// If the session failed, drops its refused suffix: its writer is gone or nicfs stops, and
/// the slot's next client must start clean. Idempotent.
fn drop_refused_suffix(parts: &Parts, session: &Session) {
    if !session.failed() {
        return;
    }
    match parts.node.discard_unpublished(session.slot) {
        Ok((from, to)) if to > from => {
            tracing::warn!(from, to, "dropped the refused suffix of the log");
            session.published.store(to, Ordering::Release);
        }
        Ok(_) => {}
        Err(e) => tracing::error!(error = %e, "cannot drop the refused suffix; the slot keeps it"),
    }
}

/// Has the session's sequencer publish everything its slot has committed (or drop its
/// refused suffix) and waits for it, at most `timeout` (nicfs stops). Nothing to
/// do if the session has ended already.
pub fn settle(session: &Session, timeout: Duration) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    if session.jobs.send(Job::Settle(tx)).is_err() {
        return;
    }
    match rx.recv_timeout(timeout) {
        Ok(()) | Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {}
        Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
            tracing::warn!(session = session.id, "session did not settle in time");
        }
    }
}
