//! Sessions: one per attached client, from its control Hello to the end of its control
//! connection. A session owns a claimed log slot, the client's credentials as the kernel
//! reported them (SO_PEERCRED, not what the client says), the writing halves of its two
//! connections, and the queue of its publisher thread ([`crate::pipeline::sequencer`]), which keeps
//! the client's publications in order.
//!
//! Writes to one connection come from several threads (the connection's reader answers
//! requests, the publisher sends notices, the outbox thread sends lease frames), so each
//! writing half sits behind a mutex that is held for one whole frame.
//!
//! The **outbox** carries the frames that other threads decide to send to this client —
//! lease grants and revokes ([`crate::lease::manager`]) — to a thread of the session's own
//! ([`run_outbox`]), so that a client that reads slowly holds up nobody but itself. A
//! frame that cannot be written within the write timeout hangs the session up: a client
//! that does not read its revokes loses its session (and so its leases), rather than
//! keeping others waiting.
//!
//! A session ends badly in one of two ways. It **fails** ([`Session::fail`]) when an entry
//! of its log is refused: nothing more of its log is published, and its leases end at once
//! (everything before the refused entry is published already). It **expires**
//! ([`Session::expire`]) when it leaves a revoke unanswered past the lease timeout: its calls
//! are refused from then on, and its sequencer *fences* it — the end of its committed log
//! as it stands becomes the session's [`fence`](Session::fence), the log is published up to
//! there and never beyond, the client is told why and hung up, and then the session fails,
//! which ends its leases ([`crate::pipeline::sequencer`]).

use linefs_proto::RemoteError;
use linefs_proto::{Codec, Control, Frame, PeerCred, Role, SendError};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

/// What is told when a session fails: the lease manager ([`crate::lease::manager`]), which
/// sits above sessions (it delivers its decisions to them), so a session knows it only as
/// this.
pub trait Ended: Send + Sync {
    /// The session `id` failed: nothing more of its log will be published.
    fn session_ended(&self, id: u64);
}

/// One attached client.
pub struct Session {
    pub id: u64,
    pub slot: u32,
    pub cred: PeerCred,
    /// The client process's supplementary groups when it attached ([`crate::lease::perms`]).
    pub groups: Vec<u32>,
    pub role: Role,
    control: Mutex<UnixStream>,
    bulk: Mutex<Option<UnixStream>>,
    pub jobs: crossbeam_channel::Sender<Job>,
    /// Highest LSN the client said was committed (ChunkReady, Fsync).
    pub committed: AtomicU64,
    /// The slot's durable checkpoint as of the last publication.
    pub published: AtomicU64,
    /// Set once an entry was refused, or a fenced session's log is published up to its
    /// fence: nothing more is published for this session.
    failed: AtomicBool,
    /// Where an expired session's publication stops (`u64::MAX`: it has not been fenced).
    fence: AtomicU64,
    /// Set once the client is gone (its control connection ended or it detached): the
    /// session is being settled.
    ending: AtomicBool,
    /// When the attaching process was first seen dead ([`Session::attacher_just_died`]).
    attacher_seen_dead: Mutex<Option<std::time::Instant>>,
    failure: Mutex<Option<String>>,
    /// Ids of the frames nicfs starts (notices), per session.
    next_id: AtomicU64,
    /// Told when the session fails, so that its leases end at once (the lease manager).
    ended: Arc<dyn Ended>,
    /// Frames for the control connection, written by the outbox thread.
    outbox: crossbeam_channel::Sender<Frame<Control>>,
}

impl Session {
    /// A session and the receiving ends of its two queues: its publisher's jobs, and its
    /// outbox (for [`run_outbox`]).
    pub fn new(
        id: u64,
        slot: u32,
        (cred, groups): (PeerCred, Vec<u32>),
        role: Role,
        control: UnixStream,
        published: u64,
        ended: Arc<dyn Ended>,
    ) -> (Session, crossbeam_channel::Receiver<Job>, crossbeam_channel::Receiver<Frame<Control>>) {
        let (jobs, jobs_rx) = crossbeam_channel::unbounded();
        let (outbox, outbox_rx) = crossbeam_channel::unbounded();
        let session = Session {
            id,
            slot,
            groups,
            cred,
            role,
            control: Mutex::new(control),
            bulk: Mutex::new(None),
            jobs,
            committed: AtomicU64::new(published),
            published: AtomicU64::new(published),
            failed: AtomicBool::new(false),
            fence: AtomicU64::new(u64::MAX),
            ending: AtomicBool::new(false),
            attacher_seen_dead: Mutex::new(None),
            failure: Mutex::new(None),
            next_id: AtomicU64::new(1),
            ended,
            outbox,
        };
        (session, jobs_rx, outbox_rx)
    }

    /// Queues a frame for the control connection, written by the outbox thread in order.
    pub fn notify(&self, frame: Frame<Control>) {
        if self.outbox.send(frame).is_err() {
            tracing::debug!(session = self.id, "outbox closed: frame dropped");
        }
    }

    /// A fresh id for a frame nicfs starts.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a frame on the control connection.
    pub fn send_control<M: Codec>(&self, frame: &Frame<M>) -> Result<(), SendError> {
        linefs_proto::write_frame(&self.control.lock(), frame)
    }

    /// Sends an Error reply on the control connection.
    pub fn control_error(&self, id: u64, code: RemoteError, message: &str) -> Result<(), SendError> {
        linefs_proto::write_error(&self.control.lock(), id, code, message)
    }

    /// Sends a frame on the bulk connection; false if there is none.
    pub fn send_bulk<M: Codec>(&self, frame: &Frame<M>) -> Result<bool, SendError> {
        match &*self.bulk.lock() {
            Some(s) => linefs_proto::write_frame(s, frame).map(|_| true),
            None => Ok(false),
        }
    }

    /// Sends an Error reply on the bulk connection, if there is one.
    pub fn bulk_error(&self, id: u64, code: RemoteError, message: &str) {
        if let Some(s) = &*self.bulk.lock() {
            if let Err(e) = linefs_proto::write_error(s, id, code, message) {
                tracing::debug!(session = self.id, error = %e, "cannot send an Error on the bulk connection");
            }
        }
    }

    /// Records the writing half of the session's bulk connection; false if it has one.
    pub fn set_bulk(&self, stream: UnixStream) -> bool {
        let mut bulk = self.bulk.lock();
        if bulk.is_some() {
            return false;
        }
        *bulk = Some(stream);
        true
    }

    pub fn clear_bulk(&self) {
        *self.bulk.lock() = None;
    }

    pub fn has_bulk(&self) -> bool {
        self.bulk.lock().is_some()
    }

    /// The client is gone; the publisher settles the slot next.
    pub fn set_ending(&self) {
        self.ending.store(true, Ordering::Release);
    }

    /// Whether the client's connection has ended and the session is not yet settled.
    pub fn ending(&self) -> bool {
        self.ending.load(Ordering::Acquire)
    }

    /// Whether the process that attached has died within the last `grace`. Its connection
    /// may live on in a child it forked (or a process it passed it to), so a dead attacher
    /// alone does not mean the session is ending: it is a hint that its end is about to be
    /// noticed, for `grace` from the first time it is seen dead, and no longer.
    pub fn attacher_just_died(&self, grace: std::time::Duration) -> bool {
        let dead = rustix::process::Pid::from_raw(self.cred.pid)
            .is_some_and(|pid| rustix::process::test_kill_process(pid).is_err_and(|e| e == rustix::io::Errno::SRCH));
        if !dead {
            return false;
        }
        let seen = *self.attacher_seen_dead.lock().get_or_insert_with(std::time::Instant::now);
        seen.elapsed() < grace
    }

    /// Marks the session failed (an entry refused) with why — the first reason given stays.
    /// Its log will not be published any further, so its leases end now: nobody waits for
    /// it.
    pub fn fail(&self, why: String) {
        self.failure.lock().get_or_insert(why);
        self.failed.store(true, Ordering::Release);
        self.ended.session_ended(self.id);
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Why the session failed or expired, if it did: its calls are refused with this.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }

    /// The session did not answer a revoke in time (`why`): its calls are refused from now
    /// on, and its sequencer fences it ([`crate::pipeline::sequencer`]). False if the sequencer has
    /// stopped (the log is settled already).
    pub fn expire(&self, why: String) -> bool {
        self.failure.lock().get_or_insert(why);
        self.jobs.send(Job::Fence).is_ok()
    }

    /// Sets where the session's publication stops.
    pub fn set_fence(&self, lsn: u64) {
        self.fence.store(lsn, Ordering::Release);
    }

    /// Where the session's publication stops: no entry ending beyond this is published
    /// (`u64::MAX` until the session is fenced).
    pub fn fence(&self) -> u64 {
        self.fence.load(Ordering::Acquire)
    }

    /// Closes both connections (their readers see the end and the session ends).
    pub fn hang_up(&self) {
        let _ = self.control.lock().shutdown(std::net::Shutdown::Both);
        if let Some(b) = &*self.bulk.lock() {
            let _ = b.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The outbox thread of a session: writes its queued frames until the session is gone (the
/// queue closes with it). A frame that cannot be written hangs the session up.
pub fn run_outbox(session: Weak<Session>, frames: crossbeam_channel::Receiver<Frame<Control>>) {
    while let Ok(frame) = frames.recv() {
        let Some(s) = session.upgrade() else { return };
        if let Err(e) = s.send_control(&frame) {
            tracing::warn!(session = s.id, error = %e, "cannot write to the client; hanging up");
            s.hang_up();
            return;
        }
    }
}

/// The attached sessions, by id.
#[derive(Default)]
pub struct Sessions {
    map: Mutex<BTreeMap<u64, Arc<Session>>>,
    last_id: AtomicU64,
    /// The uids whose sessions were fenced lately, backed off ([`crate::limits::Fenced`]).
    pub fenced: crate::limits::Fenced,
}

impl Sessions {
    /// A session id never handed out before in this process.
    pub fn new_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn insert(&self, s: Arc<Session>) {
        self.map.lock().insert(s.id, s);
    }

    pub fn remove(&self, id: u64) -> Option<Arc<Session>> {
        self.map.lock().remove(&id)
    }

    pub fn get(&self, id: u64) -> Option<Arc<Session>> {
        self.map.lock().get(&id).cloned()
    }

    /// Every session now, in id order.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.map.lock().values().cloned().collect()
    }
}

/// What a session's sequencer does next.
#[derive(Debug)]
pub enum Job {
    /// A `ChunkReady` for `lsn`, read at `at`.
    Chunk {
        lsn: u64,
        at: Instant,
    },
    /// The client's Fsync request `id` for `lsn`, read at `at`.
    Fsync {
        id: u64,
        lsn: u64,
        at: Instant,
    },
    End,
    /// The client's Detach request `id`: [`Job::End`], then Ok.
    Detach {
        id: u64,
    },
    /// Publish up to `lsn` for the lease table, then feed it what is published.
    PublishTo {
        lsn: u64,
    },
    /// Publish everything committed (dropping a refused suffix), then answer.
    Settle(crossbeam_channel::Sender<()>),
    /// The session's lease expired: fence it (see [`crate::pipeline::sequencer`]).
    Fence,
}
