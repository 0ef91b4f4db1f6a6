//! The host link: nicfs's side of the kworker connection, the node's **mode**, and the
//! copy-list API through which publication moves file data (LineFS §3.7, "isolated
//! NICFS"; the caller is [`crate::host::copylist`]).
//!
//! * **One kworker per node.** A `Hello{channel: kworker, role: kworker, session: 0}` from a
//!   process of nicfs's own uid (any uid if nicfs is root; SO_PEERCRED) is answered `Ok`
//!   and becomes *the* kworker; while one is connected a second gets EBUSY. Another role or
//!   a session id: EINVAL; another uid: EPERM (a stranger that answered CopyDone without
//!   copying would lose data, and nicfs must be able to stop the process: see the fence).
//! * **Modes.** `normal` while a kworker is connected and heartbeating; `isolated`
//!   otherwise — at start, when its connection ends (kill -9 closes it at once), and when no
//!   heartbeat came for more than [`MISSED_BEATS`] intervals (a stopped or wedged host: the
//!   watchdog checks every [`WATCH_PERIOD`] and then closes the connection). The interval is
//!   nicfs's `--kworker-heartbeat-ms`, at most 300 ms, so a dead host is noticed within a
//!   second. Every switch is logged with its reason, counted, and wakes the status writer.
//! * **Copy lists** ([`HostLink::copy`], [`HostLink::copy_list`]). In normal mode a list is
//!   sent to the kworker and nicfs waits for `CopyDone`/`CopyFailed` (with a timeout); in
//!   isolated mode nicfs executes it itself with the same executor (`linefs-copier`)
//!   ([`linefs_copier::NodeFiles`] — one piece of code for both). If the kworker dies, or the
//!   timeout passes, while a list is in flight, nicfs redoes the whole list itself: lists
//!   are idempotent, so what part of it the dead kworker copied does not matter. A
//!   `CopyFailed` is returned to the caller, not redone (the same list would fail the same
//!   way).
//! * **The fence.** A kworker nicfs gives up on while it has lists in flight — its
//!   connection ended, its heartbeats stopped (a stopped or wedged host), or it did not
//!   answer in time — is killed (SIGKILL through a pidfd opened when it said Hello, so a
//!   reused pid is never hit) and nicfs waits until it is gone before it redoes its lists.
//!   Otherwise a kworker that resumed later would finish its old list *late*: after the
//!   batch's checkpoint, when the client may already have reused the log range it copies
//!   from and a later batch may have freed and reused the blocks it copies to. kworker is
//!   stateless; a new one connects as any first one does.

use crate::peer::{describe, BadFrames};
use linefs_copier::NodeFiles;
use linefs_proto::RemoteError;
use linefs_proto::{
    recv_frame, write_frame, CopyEntry, CopyList, Frame, Hello, Kworker, Party, PeerCred, ReadError, Received, Role,
    MAX_COPY_ENTRIES,
};
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Heartbeat intervals without a heartbeat after which the kworker is taken for dead.
pub const MISSED_BEATS: u32 = 3;
/// How often the watchdog looks at the last heartbeat.
pub const WATCH_PERIOD: Duration = Duration::from_millis(50);
/// How long the link waits on the kworker: set from nicfs's `Config` (its `Timeouts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostTimeouts {
    /// How long a copy list's answer is awaited before nicfs redoes the list itself.
    pub copy: Duration,
    /// How long nicfs waits for a kworker it killed to be gone.
    pub fence: Duration,
}

impl Default for HostTimeouts {
    fn default() -> HostTimeouts {
        HostTimeouts { copy: Duration::from_secs(5), fence: Duration::from_secs(5) }
    }
}

/// Who publishes: the kworker (normal) or nicfs alone (isolated).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Normal,
    Isolated,
}

/// Who executed a copy list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Executor {
    Kworker,
    Nicfs,
}

/// A copy list that failed: who ran it, at which entry of the caller's entries, the errno.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    #[error("copy entry {entry} failed in {by:?} (errno {errno}): {why}")]
    Failed { by: Executor, entry: u32, errno: i32, why: String },
    #[error("nicfs cannot open the node's files to copy: {0}")]
    Open(String),
}

/// What a caller of [`HostLink::copy`] learns: lists and bytes (of the entries, zero fills
/// included) by who executed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Lists sent to the kworker (those it did, and those nicfs then redid).
    pub sent: u32,
    pub by_kworker: u32,
    pub by_nicfs: u32,
    /// Lists that were in flight at a kworker that died or timed out, redone by nicfs.
    pub redone: u32,
    pub bytes_by_kworker: u64,
    pub bytes_by_nicfs: u64,
}

impl Copied {
    pub fn add(&mut self, o: Copied) {
        self.sent += o.sent;
        self.by_kworker += o.by_kworker;
        self.by_nicfs += o.by_nicfs;
        self.redone += o.redone;
        self.bytes_by_kworker += o.bytes_by_kworker;
        self.bytes_by_nicfs += o.bytes_by_nicfs;
    }
}

enum Answer {
    Done,
    Failed { entry: u32, errno: i32 },
}

/// The connected kworker.
struct Kw {
    conn: u64,
    pid: i32,
    /// The kworker process, to kill it if nicfs gives up on it with lists in flight.
    pidfd: OwnedFd,
    writer: Arc<Mutex<UnixStream>>,
    last_beat: Instant,
    in_flight: u32,
    /// Lists sent and not answered, by list id; dropping a sender tells its waiter the
    /// kworker is gone.
    pending: HashMap<u64, crossbeam_channel::Sender<Answer>>,
}

struct State {
    mode: Mode,
    reason: String,
    switches: u64,
    kworker: Option<Kw>,
    next_conn: u64,
}

/// The mode and the kworker as the status file shows them.
#[derive(Debug, Clone, Serialize)]
pub struct HostStatus {
    pub mode: Mode,
    pub mode_reason: String,
    pub mode_switches: u64,
    pub heartbeat_ms: u64,
    pub kworker_pid: Option<i32>,
    pub last_heartbeat_age_ms: Option<u64>,
    pub lists_in_flight: Option<u32>,
    pub lists_by_kworker: u64,
    pub lists_by_nicfs: u64,
    pub lists_redone: u64,
    /// Bytes of the entries of those lists (a redone list counts for nicfs).
    pub bytes_by_kworker: u64,
    pub bytes_by_nicfs: u64,
}

/// nicfs's end of the host link.
pub struct HostLink {
    dir: PathBuf,
    interval: Duration,
    timeouts: HostTimeouts,
    state: Mutex<State>,
    /// nicfs's own executor, opened at first use.
    local: Mutex<Option<NodeFiles>>,
    next_list: AtomicU64,
    next_frame: AtomicU64,
    kick: Mutex<Option<crossbeam_channel::Sender<()>>>,
    by_kworker: AtomicU64,
    by_nicfs: AtomicU64,
    redone: AtomicU64,
    bytes_by_kworker: AtomicU64,
    bytes_by_nicfs: AtomicU64,
}

impl HostLink {
    /// The link of the node in `dir`, expecting a heartbeat every `interval`, with the
    /// default timeouts. Starts isolated.
    pub fn new(dir: PathBuf, interval: Duration) -> HostLink {
        HostLink::with_timeouts(dir, interval, HostTimeouts::default())
    }

    /// The link of the node in `dir`, expecting a heartbeat every `interval`, waiting on the
    /// kworker as `timeouts` say. Starts isolated.
    pub fn with_timeouts(dir: PathBuf, interval: Duration, timeouts: HostTimeouts) -> HostLink {
        HostLink {
            dir,
            interval,
            timeouts,
            state: Mutex::new(State {
                mode: Mode::Isolated,
                reason: "no kworker has connected".into(),
                switches: 0,
                kworker: None,
                next_conn: 1,
            }),
            local: Mutex::new(None),
            next_list: AtomicU64::new(1),
            next_frame: AtomicU64::new(1),
            kick: Mutex::new(None),
            by_kworker: AtomicU64::new(0),
            by_nicfs: AtomicU64::new(0),
            redone: AtomicU64::new(0),
            bytes_by_kworker: AtomicU64::new(0),
            bytes_by_nicfs: AtomicU64::new(0),
        }
    }

    /// How long a copy list's answer is awaited before nicfs redoes it.
    pub fn copy_timeout(&self) -> Duration {
        self.timeouts.copy
    }

    /// Where to signal a mode switch (the status writer rewrites the file at once).
    pub fn on_switch(&self, tx: crossbeam_channel::Sender<()>) {
        *self.kick.lock() = Some(tx);
    }

    pub fn mode(&self) -> Mode {
        self.state.lock().mode
    }

    fn switch(&self, state: &mut State, mode: Mode, reason: String) {
        if state.mode != mode {
            state.switches += 1;
            tracing::info!(from = ?state.mode, to = ?mode, switches = state.switches, %reason, "mode switch");
            state.mode = mode;
            state.reason = reason;
            if let Some(tx) = &*self.kick.lock() {
                let _ = tx.try_send(());
            }
        }
    }

    /// Serves a kworker connection whose Hello (frame `hello_id`) was read, to its end.
    pub fn serve(&self, stream: UnixStream, cred: PeerCred, hello_id: u64, hello: Hello) {
        let peer = describe(&cred);
        let refuse = |code: RemoteError, why: &str| {
            tracing::warn!(%peer, ?code, "kworker refused: {why}");
            let _ = linefs_proto::write_error(&stream, hello_id, code, why);
        };
        if hello.role != Role::Kworker || hello.session != 0 {
            return refuse(RemoteError::Invalid, "the kworker channel takes role kworker and session 0");
        }
        let me = rustix::process::geteuid().as_raw();
        if cred.uid != me && me != 0 {
            return refuse(RemoteError::NotPermitted, "a kworker must run as nicfs's user (or nicfs as root)");
        }
        let pidfd = rustix::process::Pid::from_raw(cred.pid)
            .ok_or(rustix::io::Errno::SRCH)
            .and_then(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()));
        let pidfd = match pidfd {
            Ok(fd) => fd,
            Err(e) => return refuse(RemoteError::NotPermitted, &format!("cannot watch the kworker process: {e}")),
        };
        let writer = match stream.try_clone() {
            Ok(w) => Arc::new(Mutex::new(w)),
            Err(e) => return refuse(RemoteError::Io, &format!("cannot clone the socket: {e}")),
        };
        let conn = {
            // The writer is locked until Ok is sent, so no CopyList overtakes it.
            let w = writer.lock();
            let mut state = self.state.lock();
            if let Some(kw) = &state.kworker {
                let why = format!("a kworker (pid {}) is already connected", kw.pid);
                drop(state);
                drop(w);
                return refuse(RemoteError::Busy, &why);
            }
            let conn = state.next_conn;
            state.next_conn += 1;
            state.kworker = Some(Kw {
                conn,
                pid: cred.pid,
                pidfd,
                writer: writer.clone(),
                last_beat: Instant::now(),
                in_flight: 0,
                pending: HashMap::new(),
            });
            self.switch(&mut state, Mode::Normal, format!("kworker pid {} connected", cred.pid));
            drop(state);
            if let Err(e) = write_frame(&w, &Frame { id: hello_id, msg: Kworker::Ok }) {
                drop(w);
                self.detach(conn, format!("cannot answer the kworker's Hello: {e}"));
                return;
            }
            conn
        };
        tracing::info!(%peer, conn, "kworker connected");
        let reason = self.read_loop(&stream, &peer, conn);
        self.detach(conn, reason);
    }

    /// Reads the kworker's frames until the connection ends; returns why it ended.
    fn read_loop(&self, stream: &UnixStream, peer: &str, conn: u64) -> String {
        let mut bad = BadFrames::default();
        loop {
            let r: Received<Kworker> = match recv_frame(stream, Party::Kworker, None) {
                Ok(r) => r,
                Err(ReadError::Closed) => return format!("kworker ({peer}) closed its connection"),
                Err(e) => {
                    if bad.go_on(stream, peer, &e) {
                        continue;
                    }
                    return format!("kworker connection ({peer}) ended: {e}");
                }
            };
            let id = r.frame.id;
            let mut state = self.state.lock();
            let Some(kw) = state.kworker.as_mut().filter(|k| k.conn == conn) else {
                return "kworker connection superseded".into();
            };
            match r.frame.msg {
                Kworker::Heartbeat(h) => {
                    kw.last_beat = Instant::now();
                    kw.in_flight = h.lists_in_flight;
                }
                Kworker::CopyDone(d) => answer(kw, d.list_id, Answer::Done),
                Kworker::CopyFailed(f) => answer(kw, f.list_id, Answer::Failed { entry: f.entry, errno: f.errno }),
                Kworker::Hello(_) => {
                    let w = kw.writer.clone();
                    drop(state);
                    let _ = linefs_proto::write_error(&w.lock(), id, RemoteError::Protocol, "Hello was already said");
                }
                Kworker::Error(e) => tracing::warn!(peer, id, errno = e.errno(), "kworker reports: {}", e.message),
                Kworker::Ok | Kworker::CopyList(_) => tracing::debug!(peer, id, "unexpected frame ignored"),
            }
        }
    }

    /// Forgets connection `conn` if it is the kworker's: closes it, switches to isolated,
    /// and wakes the waiters of its lists in flight (they redo them).
    fn detach(&self, conn: u64, reason: String) {
        let kw = {
            let mut state = self.state.lock();
            if state.kworker.as_ref().is_none_or(|k| k.conn != conn) {
                return;
            }
            let kw = state.kworker.take().expect("checked above");
            self.switch(&mut state, Mode::Isolated, reason);
            kw
        };
        let _ = kw.writer.lock().shutdown(std::net::Shutdown::Both);
        if !kw.pending.is_empty() {
            tracing::warn!(
                lists = kw.pending.len(),
                pid = kw.pid,
                "kworker given up with copy lists in flight: killed; nicfs redoes them"
            );
            fence(&kw, self.timeouts.fence);
        }
        // Dropping its lists' senders wakes their waiters, which redo them.
    }

    /// Watches the heartbeats until `stopping` says so: a kworker silent for more than
    /// [`MISSED_BEATS`] intervals is disconnected (and the node isolated).
    pub fn watchdog(&self, stopping: impl Fn() -> bool) {
        let limit = self.interval * MISSED_BEATS;
        while !stopping() {
            std::thread::sleep(WATCH_PERIOD);
            let silent = {
                let state = self.state.lock();
                state.kworker.as_ref().map(|k| (k.conn, k.last_beat.elapsed())).filter(|(_, age)| *age > limit)
            };
            if let Some((conn, age)) = silent {
                self.detach(conn, format!("no kworker heartbeat for {} ms", age.as_millis()));
            }
        }
    }

    /// Copies `entries` in order, in lists of at most [`MAX_COPY_ENTRIES`], through the
    /// kworker in normal mode or by nicfs in isolated mode (see the module notes). Each
    /// list's answer is awaited at most `timeout`. A failure names the entry's index in
    /// `entries`; the lists before it were done.
    pub fn copy(&self, entries: &[CopyEntry], timeout: Duration) -> Result<Copied, CopyError> {
        let mut copied = Copied::default();
        for (n, chunk) in entries.chunks(MAX_COPY_ENTRIES).enumerate() {
            let list = CopyList { list_id: self.next_list.fetch_add(1, Ordering::Relaxed), entries: chunk.to_vec() };
            let base = (n * MAX_COPY_ENTRIES) as u32;
            let bytes: u64 = chunk.iter().map(|e| e.len).sum();
            match self.copy_list(&list, timeout) {
                Ok((Executor::Kworker, _)) => {
                    copied.sent += 1;
                    copied.by_kworker += 1;
                    copied.bytes_by_kworker += bytes;
                }
                Ok((Executor::Nicfs, redone)) => {
                    copied.sent += u32::from(redone);
                    copied.by_nicfs += 1;
                    copied.bytes_by_nicfs += bytes;
                    copied.redone += u32::from(redone);
                }
                Err(CopyError::Failed { by, entry, errno, why }) => {
                    return Err(CopyError::Failed { by, entry: base + entry, errno, why })
                }
                Err(e) => return Err(e),
            }
        }
        Ok(copied)
    }

    /// Executes one list (its id must not be in flight already); returns who did and
    /// whether nicfs redid it after the kworker failed to answer.
    pub fn copy_list(&self, list: &CopyList, timeout: Duration) -> Result<(Executor, bool), CopyError> {
        let sent = self.send_to_kworker(list);
        let Some((conn, rx)) = sent else { return self.run_locally(list, false) };
        match rx.recv_timeout(timeout) {
            Ok(Answer::Done) => {
                self.by_kworker.fetch_add(1, Ordering::Relaxed);
                self.bytes_by_kworker.fetch_add(list_bytes(list), Ordering::Relaxed);
                Ok((Executor::Kworker, false))
            }
            Ok(Answer::Failed { entry, errno }) => {
                Err(CopyError::Failed { by: Executor::Kworker, entry, errno, why: "refused by the kworker".into() })
            }
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                tracing::warn!(list = list.list_id, "kworker gone before answering; nicfs redoes the list");
                self.run_locally(list, true)
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                tracing::warn!(list = list.list_id, ?timeout, "kworker did not answer in time; nicfs redoes the list");
                self.detach(conn, format!("the kworker did not answer copy list {} within {timeout:?}", list.list_id));
                self.run_locally(list, true)
            }
        }
    }

    /// Sends `list` to the kworker if there is one; the receiver gets its answer.
    fn send_to_kworker(&self, list: &CopyList) -> Option<(u64, crossbeam_channel::Receiver<Answer>)> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let (conn, writer) = {
            let mut state = self.state.lock();
            let kw = state.kworker.as_mut()?;
            kw.pending.insert(list.list_id, tx);
            (kw.conn, kw.writer.clone())
        };
        let frame = Frame { id: self.next_frame.fetch_add(1, Ordering::Relaxed), msg: Kworker::CopyList(list.clone()) };
        // The writer's guard must be gone before `detach`, which locks the writer to shut it
        // down: a guard in the `if let` itself would live through the block (a self-deadlock
        // of the publish thread when a killed kworker's socket refuses the write; the soak hit it).
        let sent = write_frame(&writer.lock(), &frame);
        if let Err(e) = sent {
            tracing::warn!(list = list.list_id, error = %e, "cannot send the copy list to the kworker");
            self.detach(conn, format!("cannot send to the kworker: {e}"));
            return None;
        }
        Some((conn, rx))
    }

    /// Executes `list` in nicfs with the shared executor.
    fn run_locally(&self, list: &CopyList, redone: bool) -> Result<(Executor, bool), CopyError> {
        let mut local = self.local.lock();
        if local.is_none() {
            *local = Some(NodeFiles::open(&self.dir).map_err(|e| CopyError::Open(e.to_string()))?);
        }
        let files = local.as_ref().expect("opened above");
        files.execute(list).map_err(|f| CopyError::Failed {
            by: Executor::Nicfs,
            entry: f.entry,
            errno: f.errno,
            why: f.why,
        })?;
        self.by_nicfs.fetch_add(1, Ordering::Relaxed);
        self.bytes_by_nicfs.fetch_add(list_bytes(list), Ordering::Relaxed);
        if redone {
            self.redone.fetch_add(1, Ordering::Relaxed);
        }
        Ok((Executor::Nicfs, redone))
    }

    /// Closes the kworker's connection (nicfs is stopping).
    pub fn hang_up(&self) {
        if let Some(kw) = &self.state.lock().kworker {
            let _ = kw.writer.lock().shutdown(std::net::Shutdown::Both);
        }
    }

    pub fn status(&self) -> HostStatus {
        let state = self.state.lock();
        let kw = state.kworker.as_ref();
        HostStatus {
            mode: state.mode,
            mode_reason: state.reason.clone(),
            mode_switches: state.switches,
            heartbeat_ms: self.interval.as_millis() as u64,
            kworker_pid: kw.map(|k| k.pid),
            last_heartbeat_age_ms: kw.map(|k| k.last_beat.elapsed().as_millis() as u64),
            lists_in_flight: kw.map(|k| k.in_flight),
            lists_by_kworker: self.by_kworker.load(Ordering::Relaxed),
            lists_by_nicfs: self.by_nicfs.load(Ordering::Relaxed),
            lists_redone: self.redone.load(Ordering::Relaxed),
            bytes_by_kworker: self.bytes_by_kworker.load(Ordering::Relaxed),
            bytes_by_nicfs: self.bytes_by_nicfs.load(Ordering::Relaxed),
        }
    }
}

/// Kills the kworker `kw` and waits (at most `wait`) until it is gone, so that nothing of a
/// list it had in flight can be written after nicfs redid it.
fn fence(kw: &Kw, wait: Duration) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    match rustix::process::pidfd_send_signal(&kw.pidfd, rustix::process::Signal::KILL) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => {}
        Err(e) => tracing::error!(pid = kw.pid, error = %e, "cannot kill the kworker"),
    }
    let timeout = Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: i64::from(wait.subsec_nanos()) };
    let mut fds = [PollFd::new(&kw.pidfd, PollFlags::IN)];
    match poll(&mut fds, Some(&timeout)) {
        Ok(n) if n > 0 => tracing::info!(pid = kw.pid, "the kworker given up is gone"),
        Ok(_) => tracing::error!(pid = kw.pid, "the kworker given up is still there; redoing its lists all the same"),
        Err(e) => tracing::error!(pid = kw.pid, error = %e, "cannot wait for the kworker given up"),
    }
}

fn list_bytes(list: &CopyList) -> u64 {
    list.entries.iter().map(|e| e.len).sum()
}

fn answer(kw: &mut Kw, list_id: u64, a: Answer) {
    match kw.pending.remove(&list_id) {
        Some(tx) => {
            let _ = tx.send(a);
        }
        None => tracing::debug!(list = list_id, "answer to a list no longer awaited (redone by nicfs)"),
    }
}
