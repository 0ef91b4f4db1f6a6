//! The offload client's link to its node's nicfs: attach (a control connection, which
//! hands back the slot's log file read-write and the public file read-only, then a bulk
//! connection naming the session), requests with their replies, and the two reader threads.
//!
//! * Requests on the control connection may come from any thread (a FUSE worker in a
//!   call, the publisher thread, status): each registers a waiter under a fresh id, writes
//!   its frame whole under the writer's mutex, and waits for the reply the control reader
//!   hands it. Replies to requests nobody waits for (`ReleaseBlocks`, sent without waiting)
//!   are dropped.
//! * The control reader also takes nicfs's notices and requests: `Rejected` fails the
//!   client (its updates are refused with EIO from then on, as after a failed publication
//!   in the host-only mode), `Ping` is answered.
//! * The bulk reader takes `Published` notices: the published LSN moves on and the
//!   publisher thread is woken to catch the view up (it never takes the front-end lock
//!   itself, so a call waiting on a reply with that lock held cannot stall it).
//! * When either connection ends (nicfs died or hung up), every waiter gets an error and
//!   the client is failed: nothing more can be published, the log keeps what was
//!   committed, and nicfs's recovery publishes it.

use crate::error::{FsError, FsResult};
use crate::leases::{Grant, Leases, Need};
use crate::link::{InodePool, NodeLink, Observer, Progress};
use crate::publication::Publication;
use crate::wakeup::Wakeup;
use linefs_pm::bitmap::Bitmap;
use linefs_proto::{
    read_frame, recv_frame, write_frame, Attached, Bulk, Channel, ChunkReady, Control, Creds, Frame, Hello, InodeRange,
    InodeRef, InodeSet, LeaseHandback, LeaseMode, LeaseRequest, Party, ReadError, RemoteError, Revoke, Role, Space,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// How long a request waits for its reply before the client gives up on nicfs.
const REPLY_WAIT: Duration = Duration::from_secs(120);
/// How long attaching retries while every slot is busy.
const BUSY_WAIT: Duration = Duration::from_secs(5);
/// How long attaching may take.
const ATTACH_WAIT: Duration = Duration::from_secs(30);

/// An attached session.
pub(crate) struct Remote {
    control: Mutex<UnixStream>,
    bulk: Mutex<UnixStream>,
    waiters: Mutex<HashMap<u64, mpsc::Sender<Control>>>,
    next_id: AtomicU64,
    pub(crate) attached: Attached,
    pub(crate) progress: Mutex<Progress>,
    failed: AtomicBool,
    /// Set by [`Remote::detach`]: the connections' end is expected, not a failure.
    detaching: AtomicBool,
    /// The node replicates: an fsync asks it ([`NodeLink::fsync_asks_node`]).
    fsync_asks: AtomicBool,
    /// The leases this client holds ([`crate::leases`]).
    pub(crate) leases: Leases,
    /// The inode numbers nicfs granted this client and it has not used.
    pool: InodePool,
    /// The end of the committed log (what a revoke's `covered_lsn` says).
    pub(crate) committed: AtomicU64,
    /// Told of inodes whose lease is gone (the FUSE adapter drops kernel caches).
    observer: Mutex<Option<Observer>>,
    /// nicfs's revokes, for the revoke thread.
    revokes: Mutex<Option<mpsc::Sender<(u64, Revoke)>>>,
}

/// What attaching hands back besides the link: the log file and the public file.
pub(crate) struct Files {
    pub(crate) log: OwnedFd,
    pub(crate) public: OwnedFd,
}

fn io(what: &str, e: impl std::fmt::Display) -> FsError {
    FsError::Io { what: what.to_string(), source: std::io::Error::other(e.to_string()) }
}

fn refused(what: &str, e: &linefs_proto::ErrorReply) -> FsError {
    FsError::Refused { what: what.to_string(), code: e.code, message: e.message.clone() }
}

/// The refusal of a client nicfs does not trust with the public file.
fn not_trusted(what: &str) -> FsError {
    let uid = rustix::process::geteuid().as_raw();
    FsError::Io {
        what: format!(
            "{what}: uid {uid} may not read the node's public area: use a mount, or ask the operator \
             for the node's trusted group (nicfs --trusted-group)"
        ),
        source: std::io::Error::from_raw_os_error(libc::EACCES),
    }
}

impl Remote {
    /// Attaches to the nicfs listening on `socket` as `role`. Every slot busy (EBUSY) is
    /// retried for a few seconds: a client that just died may still be being settled.
    pub(crate) fn attach(socket: &Path, role: Role) -> FsResult<(Arc<Remote>, Files)> {
        let deadline = std::time::Instant::now() + BUSY_WAIT;
        loop {
            match Remote::try_attach(socket, role) {
                Err(FsError::Refused { code: RemoteError::Busy, .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                other => return other,
            }
        }
    }

    fn try_attach(socket: &Path, role: Role) -> FsResult<(Arc<Remote>, Files)> {
        let what = format!("attach to nicfs at {}", socket.display());
        let control = UnixStream::connect(socket).map_err(|e| FsError::Io { what: what.clone(), source: e })?;
        let hello = Hello { channel: Channel::Control, role, session: 0 };
        write_frame(&control, &Frame { id: 1, msg: Control::Hello(hello) }).map_err(|e| io(&what, e))?;
        let r = recv_frame::<Control>(&control, Party::Nicfs, Some(ATTACH_WAIT)).map_err(|e| io(&what, e))?;
        let attached = match r.frame.msg {
            Control::Attached(a) => a,
            Control::Error(e) => return Err(refused(&what, &e)),
            other => return Err(io(&what, format!("unexpected answer {:?}", other))),
        };
        if !attached.public {
            // An untrusted client (docs/SECURITY.md): nicfs gave it its log but not the
            // public file, and libfs reads through the public file. Dropping the control
            // connection ends the session nicfs started.
            return Err(not_trusted(&what));
        }
        let mut fds = r.fds.into_iter();
        let (Some(log), Some(public)) = (fds.next(), fds.next()) else {
            return Err(io(&what, "Attached came without its two descriptors"));
        };
        let bulk = UnixStream::connect(socket).map_err(|e| FsError::Io { what: what.clone(), source: e })?;
        let hello = Hello { channel: Channel::Bulk, role, session: attached.session };
        write_frame(&bulk, &Frame { id: 1, msg: Bulk::Hello(hello) }).map_err(|e| io(&what, e))?;
        match read_frame::<Bulk>(&bulk, Party::Nicfs, Some(ATTACH_WAIT)).map_err(|e| io(&what, e))?.msg {
            Bulk::Ok => {}
            Bulk::Error(e) => return Err(refused(&what, &e)),
            other => return Err(io(&what, format!("unexpected answer {:?}", other))),
        }
        let start = attached.log.start_lsn;
        let remote = Arc::new(Remote {
            control: Mutex::new(control),
            bulk: Mutex::new(bulk),
            waiters: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(2),
            attached,
            progress: Mutex::new(Progress { published: start, reclaim: start, ..Progress::default() }),
            failed: AtomicBool::new(false),
            detaching: AtomicBool::new(false),
            fsync_asks: AtomicBool::new(false),
            leases: Leases::default(),
            pool: InodePool::default(),
            committed: AtomicU64::new(start),
            observer: Mutex::new(None),
            revokes: Mutex::new(None),
        });
        // A first range of free numbers came with Attached.
        remote.pool.grant(&remote.leases, remote.attached.inodes);
        tracing::info!(session = attached.session, slot = attached.slot, start_lsn = start, "attached to nicfs");
        Ok((remote, Files { log, public }))
    }

    /// Starts the two reader threads; `wakeup` is the publisher thread's.
    pub(crate) fn start(self: &Arc<Self>, wakeup: Arc<Wakeup>) -> FsResult<()> {
        let clone = |s: &Mutex<UnixStream>| s.lock().try_clone().map_err(|e| io("clone a nicfs connection", e));
        let (control, bulk) = (clone(&self.control)?, clone(&self.bulk)?);
        let (r, w) = (self.clone(), wakeup.clone());
        std::thread::Builder::new()
            .name("nicfs-control".into())
            .spawn(move || r.control_reader(control, w))
            .map_err(|e| FsError::Io { what: "start the control reader".into(), source: e })?;
        let r = self.clone();
        std::thread::Builder::new()
            .name("nicfs-bulk".into())
            .spawn(move || r.bulk_reader(bulk, wakeup))
            .map_err(|e| FsError::Io { what: "start the bulk reader".into(), source: e })?;
        let (tx, rx) = mpsc::channel();
        *self.revokes.lock() = Some(tx);
        let r = self.clone();
        std::thread::Builder::new()
            .name("nicfs-revoke".into())
            .spawn(move || r.revoker(rx))
            .map_err(|e| FsError::Io { what: "start the revoke thread".into(), source: e })?;
        Ok(())
    }

    /// Sets what is told of inodes whose lease is gone.
    pub(crate) fn set_observer(&self, o: Observer) {
        *self.observer.lock() = Some(o);
    }

    /// Asks nicfs for a lease and records it.
    pub(crate) fn request_lease(&self, n: Need) -> FsResult<()> {
        let mode = if n.write { LeaseMode::Write } else { LeaseMode::Read };
        let creds = Creds {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            groups: Vec::new(),
        };
        let log_tail = self.committed.load(Ordering::Acquire);
        let what = format!("lease on inode {}", n.ino);
        // Recorded by the control reader, in order with the revokes that follow it.
        self.request(&what, Control::LeaseRequest(LeaseRequest { inode: n.ino, mode, log_tail, creds }), |r| match r {
            Control::LeaseGranted(g) if g.inode == n.ino => Some(()),
            _ => None,
        })
    }

    /// A range of free inode numbers for this client (`AllocInodes`).
    pub(crate) fn alloc_inodes(&self, count: u32) -> FsResult<InodeRange> {
        self.request("inode numbers", Control::AllocInodes(linefs_proto::AllocInodes { count }), |r| match r {
            Control::InodeRange(r) => Some(r),
            _ => None,
        })
    }

    /// Reserves `count` data blocks of the node for this client's entries (`ReserveBlocks`).
    pub(crate) fn reserve_blocks(&self, count: u64) -> FsResult<()> {
        self.request("reserve blocks", Control::ReserveBlocks(linefs_proto::Blocks { count }), |r| match r {
            Control::Ok => Some(()),
            _ => None,
        })
    }

    /// Hands `count` reserved blocks back (no answer awaited).
    pub(crate) fn release_blocks(&self, count: u64) {
        self.send(Control::ReleaseBlocks(linefs_proto::Blocks { count }));
    }

    /// Whether an fsync asks nicfs (the cluster replicates; `FsOptions::replicated`).
    pub(crate) fn set_fsync_asks(&self, asks: bool) {
        self.fsync_asks.store(asks, Ordering::Relaxed);
    }

    /// Asks nicfs to publish the log up to `lsn` and waits: the LSN it is durable up to.
    pub(crate) fn fsync(&self, lsn: u64) -> FsResult<u64> {
        self.request("fsync", Control::Fsync(linefs_proto::Fsync { lsn }), |r| match r {
            Control::FsyncDone(d) => Some(d.durable_lsn),
            _ => None,
        })
    }

    /// The node's free blocks and inode numbers (`StatFs`).
    pub(crate) fn statfs(&self) -> FsResult<Space> {
        self.request("statfs", Control::StatFs, |r| match r {
            Control::Space(s) => Some(s),
            _ => None,
        })
    }

    /// This client's first open of `ino` (nicfs keeps an orphan while anyone holds it open).
    pub(crate) fn opened(&self, ino: u64) {
        self.send(Control::Opened(InodeRef { inode: ino }));
    }

    /// This client's last close of `ino`.
    pub(crate) fn closed(&self, ino: u64) {
        self.send(Control::Closed(InodeRef { inode: ino }));
    }

    /// Sends a request and takes its answer: what `pick` takes from the expected reply, a
    /// refusal as [`FsError::Refused`] with nicfs's code, anything else as a protocol
    /// failure. The one place a reply is matched.
    fn request<T>(&self, what: &str, msg: Control, pick: impl FnOnce(Control) -> Option<T>) -> FsResult<T> {
        let kind = linefs_proto::LinkMessage::kind(&msg);
        match self.call(msg)? {
            Control::Error(e) => Err(refused(what, &e)),
            reply => {
                let shown = format!("{reply:?}");
                pick(reply).ok_or_else(|| FsError::PublicationFailed(format!("unexpected answer to {kind}: {shown}")))
            }
        }
    }

    /// The revoke thread: hands leases back as nicfs asks, one at a time, in order.
    fn revoker(self: Arc<Self>, revokes: mpsc::Receiver<(u64, Revoke)>) {
        while let Ok((id, r)) = revokes.recv() {
            let observer = self.observer.lock().clone();
            let before = || {
                if let Some(o) = &observer {
                    (o.before)(r.inode);
                }
            };
            let (covered, gone) =
                self.leases.revoke(r.inode, r.lease, r.keep_read, || self.committed.load(Ordering::Acquire), before);
            let done = LeaseHandback { inode: r.inode, lease: r.lease, covered_lsn: covered };
            tracing::debug!(ino = r.inode, covered, keep_read = r.keep_read, "lease handed back");
            if let Err(e) = write_frame(&self.control.lock(), &Frame { id, msg: Control::RevokeDone(done) }) {
                tracing::debug!(error = %e, "cannot answer a revoke");
            }
            // What may block comes after the answer: it must not hold up the lease's next
            // holder (the kernel may be waiting, with its own locks held, for a call of ours
            // that needs that holder to finish).
            if gone {
                if let Some(o) = &observer {
                    (o.after)(r.inode);
                }
            }
        }
    }

    fn id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Whether the session can no longer publish.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub(crate) fn failure(&self) -> Option<String> {
        self.progress.lock().failed.clone()
    }

    fn fail(&self, why: String, wakeup: &Wakeup) {
        let mut p = self.progress.lock();
        if p.failed.is_none() {
            if self.detaching.load(Ordering::Acquire) {
                tracing::debug!(%why, "detached from nicfs");
            } else {
                tracing::error!(%why, "publication through nicfs failed; updates are refused from now on");
            }
            p.failed = Some(why);
        }
        drop(p);
        self.failed.store(true, Ordering::Release);
        self.drop_leases();
        wakeup.kick();
    }

    /// The session has ended: nicfs passes this client's leases on (after publishing what it
    /// committed), so none is held any more — calls that need one fail from now on — and
    /// the front end's caches of the inodes held go too, as when a lease is revoked: from a
    /// thread of their own, since the front end may wait on the kernel.
    fn drop_leases(&self) {
        let held = self.leases.drop_all();
        if held.is_empty() || self.detaching.load(Ordering::Acquire) {
            return;
        }
        let Some(o) = self.observer.lock().clone() else { return };
        tracing::info!(inodes = held.len(), "the session ended: its leases and the caches of their inodes are dropped");
        let spawned = std::thread::Builder::new().name("drop-leases".into()).spawn(move || {
            for ino in held {
                (o.before)(ino);
                (o.after)(ino);
            }
        });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the thread that drops the kernel's caches");
        }
    }

    /// Sends a request and waits for its reply (an Error reply is returned as such).
    fn call(&self, msg: Control) -> FsResult<Control> {
        let id = self.id();
        let (tx, rx) = mpsc::channel();
        self.waiters.lock().insert(id, tx);
        let kind = format!("{:?}", linefs_proto::LinkMessage::kind(&msg));
        if let Err(e) = write_frame(&self.control.lock(), &Frame { id, msg }) {
            self.waiters.lock().remove(&id);
            return Err(io(&format!("send {kind} to nicfs"), e));
        }
        match rx.recv_timeout(REPLY_WAIT) {
            Ok(reply) => Ok(reply),
            Err(_) => {
                self.waiters.lock().remove(&id);
                Err(io(&format!("{kind} to nicfs"), "no reply (nicfs gone or stuck)"))
            }
        }
    }

    /// Sends a request whose reply nobody waits for.
    fn send(&self, msg: Control) {
        let id = self.id();
        if let Err(e) = write_frame(&self.control.lock(), &Frame { id, msg }) {
            tracing::debug!(error = %e, "cannot send to nicfs");
        }
    }

    /// Tells nicfs the log is committed up to `lsn`.
    pub(crate) fn chunk_ready(&self, lsn: u64) {
        let msg = Bulk::ChunkReady(ChunkReady { committed_lsn: lsn });
        if let Err(e) = write_frame(&self.bulk.lock(), &Frame { id: self.id(), msg }) {
            tracing::debug!(error = %e, "cannot send ChunkReady");
        }
    }

    /// Ends the session: nicfs publishes what the log holds and frees the slot.
    pub(crate) fn detach(&self) {
        self.detaching.store(true, Ordering::Release);
        if !self.failed() {
            match self.call(Control::Detach) {
                Ok(Control::Ok) => {}
                Ok(other) => tracing::warn!(reply = ?other, "unexpected answer to Detach"),
                Err(e) => tracing::warn!(error = %e, "Detach failed"),
            }
        }
        let _ = self.control.lock().shutdown(std::net::Shutdown::Both);
        let _ = self.bulk.lock().shutdown(std::net::Shutdown::Both);
    }

    fn control_reader(self: Arc<Self>, stream: UnixStream, wakeup: Arc<Wakeup>) {
        let why = loop {
            let frame = match read_frame::<Control>(&stream, Party::Nicfs, None) {
                Ok(f) => f,
                Err(ReadError::Closed) => break "nicfs closed the control connection".to_string(),
                Err(e) => break format!("control connection to nicfs: {e}"),
            };
            match frame.msg {
                Control::Rejected(r) => {
                    self.fail(format!("nicfs ended the session at lsn {} ({}): {}", r.lsn, r.code, r.reason), &wakeup);
                }
                Control::Ping => {
                    let _ = write_frame(&self.control.lock(), &Frame { id: frame.id, msg: Control::Pong });
                }
                Control::Revoke(r) => {
                    if let Some(tx) = &*self.revokes.lock() {
                        let _ = tx.send((frame.id, r));
                    }
                }
                Control::LeaseGranted(g) => {
                    // Recorded here, before any frame after it is looked at: nicfs may revoke
                    // the grant at once, and the revoke thread must find it recorded (were it
                    // recorded by the waiting caller, a revoke handled first would leave this
                    // client believing it holds a lease it has handed back).
                    self.leases.granted(Grant { ino: g.inode, write: g.mode == LeaseMode::Write, lease: g.lease });
                    if let Some(tx) = self.waiters.lock().remove(&frame.id) {
                        let _ = tx.send(Control::LeaseGranted(g));
                    }
                }
                reply => match self.waiters.lock().remove(&frame.id) {
                    Some(tx) => {
                        let _ = tx.send(reply);
                    }
                    None => tracing::trace!(id = frame.id, ?reply, "reply nobody waits for"),
                },
            }
        };
        // The leases go with the session ([`Remote::drop_leases`]): a restarted nicfs, or
        // the one that hung up, passes them on to other clients. Then dropping the senders
        // fails every waiting call at once (each finds the session failed and no lease
        // held); the revoke thread ends.
        self.fail(why, &wakeup);
        self.waiters.lock().clear();
        *self.revokes.lock() = None;
    }

    fn bulk_reader(self: Arc<Self>, stream: UnixStream, wakeup: Arc<Wakeup>) {
        let why = loop {
            let frame = match read_frame::<Bulk>(&stream, Party::Nicfs, None) {
                Ok(f) => f,
                Err(ReadError::Closed) => break "nicfs closed the bulk connection".to_string(),
                Err(e) => break format!("bulk connection to nicfs: {e}"),
            };
            match frame.msg {
                Bulk::Published(p) => {
                    let mut prog = self.progress.lock();
                    prog.published = prog.published.max(p.published_lsn);
                    prog.reclaim = prog.reclaim.max(p.reclaim_lsn);
                    match p.changed {
                        InodeSet::Listed(v) => prog.touched.extend(v),
                        InodeSet::All => prog.touched_all = true,
                    }
                    drop(prog);
                    wakeup.kick();
                }
                Bulk::Error(e) => {
                    tracing::warn!(errno = e.errno(), message = %e.message, "nicfs reports an error on the bulk connection")
                }
                other => tracing::debug!(?other, "unexpected frame on the bulk connection"),
            }
        };
        self.fail(why, &wakeup);
    }
}

/// The offload link: every call is a request to nicfs over the control connection (the
/// inherent methods above build the messages; nothing else in libfs does).
impl NodeLink for Remote {
    fn shared(&self) -> bool {
        true
    }

    fn leases(&self) -> &Leases {
        &self.leases
    }

    fn request_lease(&self, need: Need) -> FsResult<()> {
        Remote::request_lease(self, need)
    }

    fn take_inode(&self, in_use: &mut Bitmap) -> FsResult<u64> {
        self.pool.take(&self.leases, in_use, |n| Remote::alloc_inodes(self, n))
    }

    fn give_back_inode(&self, ino: u64) {
        self.pool.give_back(&self.leases, ino)
    }

    fn own_inodes(&self) -> u64 {
        self.pool.len()
    }

    fn space_margin(&self) -> u64 {
        // nicfs keeps the node's margin for publication's metadata.
        0
    }

    fn reserve_blocks(&self, count: u64) -> FsResult<()> {
        Remote::reserve_blocks(self, count)
    }

    fn release_blocks(&self, count: u64) {
        Remote::release_blocks(self, count)
    }

    fn fsync(&self, lsn: u64) -> FsResult<u64> {
        Remote::fsync(self, lsn)
    }

    fn fsync_asks_node(&self) -> bool {
        self.fsync_asks.load(Ordering::Relaxed)
    }

    fn statfs(&self, _in_use: &Bitmap) -> FsResult<Space> {
        Remote::statfs(self)
    }

    fn opened(&self, ino: u64) {
        Remote::opened(self, ino)
    }

    fn closed(&self, ino: u64) {
        Remote::closed(self, ino)
    }

    fn set_committed(&self, lsn: u64) {
        self.committed.store(lsn, Ordering::Release);
    }

    fn chunk_ready(&self, lsn: u64) {
        Remote::chunk_ready(self, lsn)
    }

    fn follow(&self, publication: &Publication) {
        let progress = {
            let mut p = self.progress.lock();
            Progress {
                published: p.published,
                reclaim: p.reclaim,
                touched: std::mem::take(&mut p.touched),
                touched_all: std::mem::take(&mut p.touched_all),
                failed: p.failed.clone(),
            }
        };
        publication.follow(progress);
    }

    fn failed(&self) -> bool {
        Remote::failed(self)
    }

    fn failure(&self) -> Option<String> {
        Remote::failure(self)
    }

    fn set_observer(&self, o: Observer) {
        Remote::set_observer(self, o)
    }

    fn detach(&self) {
        Remote::detach(self)
    }
}
