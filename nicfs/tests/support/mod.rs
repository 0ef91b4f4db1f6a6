//! What the nicfs integration tests share: a formatted node in a temp directory with the
//! real `nicfs` binary serving it, and a test client that speaks the protocol and writes its
//! log through the descriptor nicfs hands it. Every wait has a deadline.
#![allow(dead_code)]

use linefs_pm::layout::{FormatParams, Geometry, Superblock};
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::PublicReader;
use linefs_pm::record::{dtype, EntryBuilder, InodeImage};
use linefs_pm::PmRegion;
use linefs_proto::*;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const WAIT: Duration = Duration::from_secs(10);

pub fn nicfs_bin() -> &'static str {
    env!("CARGO_BIN_EXE_nicfs")
}

/// The kworker binary cargo builds next to nicfs's.
pub fn kworker_bin() -> PathBuf {
    let p = std::path::Path::new(nicfs_bin()).with_file_name("kworker");
    assert!(
        p.exists(),
        "{} is missing: run `cargo test -p kworker -p nicfs` (or `cargo build -p kworker`)",
        p.display()
    );
    p
}

/// A kworker process, killed when dropped (so that a test that fails leaves none behind).
pub struct KworkerProcess(pub Child);

impl std::ops::Deref for KworkerProcess {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for KworkerProcess {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KworkerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a kworker for `node` at `socket`, optionally slowed down before each entry.
pub fn spawn_kworker(node: &std::path::Path, socket: &std::path::Path, entry_delay_ms: Option<u64>) -> KworkerProcess {
    spawn_kworker_logged(node, socket, entry_delay_ms, None)
}

/// [`spawn_kworker`], its debug log written to `log` when given.
pub fn spawn_kworker_logged(
    node: &std::path::Path,
    socket: &std::path::Path,
    entry_delay_ms: Option<u64>,
    log: Option<&std::path::Path>,
) -> KworkerProcess {
    let mut c = Command::new(kworker_bin());
    c.arg("--node").arg(node).arg("--socket").arg(socket).stdin(Stdio::null()).stdout(Stdio::null());
    match log {
        Some(path) => {
            c.env("RUST_LOG", "debug").stderr(File::create(path).unwrap());
        }
        None => {
            c.stderr(Stdio::null());
        }
    }
    if let Some(ms) = entry_delay_ms {
        c.env(kworker::daemon::ENTRY_DELAY_ENV, ms.to_string());
    }
    KworkerProcess(c.spawn().expect("start kworker"))
}

pub fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) on the pid of a child we started and have not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// Polls `f` until it gives Some, or panics with `what` after [`WAIT`].
pub fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + WAIT;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A formatted node and the nicfs serving it (killed on drop if still running).
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub node: PathBuf,
    pub socket: PathBuf,
    pub status: PathBuf,
    /// Extra arguments nicfs is started with.
    pub args: Vec<String>,
    pub child: Option<Child>,
    /// Reads nicfs's stderr as it comes (a pipe nobody read would fill and stall nicfs);
    /// gives it whole at the end.
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Daemon {
    /// A node with `slots` log slots, served by a new nicfs.
    pub fn start(slots: u32) -> Daemon {
        Daemon::start_with(slots, &[])
    }

    /// [`Daemon::start`], nicfs given `args` too.
    pub fn start_with(slots: u32, args: &[&str]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let node = dir.path().join("node0");
        let params = FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: slots, inodes: 256 };
        linefs_pm::mkfs::format_dir(&node, &params).unwrap();
        let socket = dir.path().join("nicfs.sock");
        let status = dir.path().join("status.json");
        let mut d = Daemon {
            dir,
            node,
            socket,
            status,
            args: args.iter().map(|a| a.to_string()).collect(),
            child: None,
            stderr: None,
        };
        d.launch();
        d
    }

    /// Starts nicfs on the node (again, after [`Daemon::stop`]: it recovers the node) and
    /// waits until it serves.
    pub fn launch(&mut self) {
        let _ = std::fs::remove_file(&self.status);
        let mut child = self.spawn(&self.socket.clone());
        let mut err = child.stderr.take().unwrap();
        self.stderr = Some(std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = std::io::Read::read_to_end(&mut err, &mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        }));
        self.child = Some(child);
        let child = self.child.as_mut().unwrap();
        let (socket, status) = (&self.socket, &self.status);
        wait_for("the socket and status file", || {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("nicfs exited at start: {st}");
            }
            (std::os::unix::net::UnixStream::connect(socket).is_ok() && status.exists()).then_some(())
        });
    }

    /// Starts a nicfs on this node with its output captured.
    pub fn spawn(&self, socket: &std::path::Path) -> Child {
        Command::new(nicfs_bin())
            .arg("--node")
            .arg(&self.node)
            .arg("--socket")
            .arg(socket)
            .arg("--status-file")
            .arg(&self.status)
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start nicfs")
    }

    /// The status file, parsed (it is replaced atomically, so always whole).
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(&self.status).unwrap()).unwrap()
    }

    /// Waits until the status file satisfies `pred`.
    pub fn wait_status(&self, what: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        wait_for(what, || Some(self.status()).filter(|s| pred(s)))
    }

    /// Whether nicfs is still running.
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_none()
    }

    /// Sends `sig` and waits (bounded) for the exit; returns it and what nicfs wrote to stderr.
    pub fn stop(&mut self, sig: i32) -> (ExitStatus, String) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on the pid of a child we started and have not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
        let status = wait_for("nicfs to exit", || child.try_wait().unwrap());
        let err = self.stderr.take().map(|t| t.join().unwrap()).unwrap_or_default();
        (status, err)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A client attached through the protocol, writing its log through the descriptor it was
/// given.
pub struct Client {
    pub control: UnixStream,
    pub bulk: UnixStream,
    pub attached: Attached,
    pub log_fd: OwnedFd,
    /// The public file, read-only: only a trusted client (root, the trusted group) has it.
    pub public_fd: Option<OwnedFd>,
    pub log: LogSlot,
    pub geometry: Geometry,
    /// Where the next entry goes.
    pub tail: u64,
    next_id: u64,
    /// Write leases held: inode → lease id.
    pub leases: std::collections::BTreeMap<u64, u64>,
}

/// Sends a control Hello and reads the answer.
pub fn hello_control(socket: &std::path::Path) -> (UnixStream, Received<Control>) {
    let control = UnixStream::connect(socket).unwrap();
    let hello = Hello { channel: Channel::Control, role: Role::DirectApi, session: 0 };
    write_frame(&control, &Frame { id: 1, msg: Control::Hello(hello) }).unwrap();
    let r = recv_frame(&control, Party::Nicfs, Some(WAIT)).unwrap();
    (control, r)
}

impl Client {
    /// Attaches (panics on an Error reply).
    pub fn attach(socket: &std::path::Path) -> Client {
        Client::try_attach(socket).unwrap_or_else(|e| panic!("attach refused: {e:?}"))
    }

    /// Attaches, or returns the Error nicfs answered.
    pub fn try_attach(socket: &std::path::Path) -> Result<Client, ErrorReply> {
        let (control, r) = hello_control(socket);
        let attached = match r.frame.msg {
            Control::Attached(a) => a,
            Control::Error(e) => return Err(e),
            other => panic!("unexpected answer to Hello: {other:?}"),
        };
        let mut fds = r.fds.into_iter();
        let log_fd = fds.next().unwrap();
        let public_fd = fds.next();
        assert_eq!(public_fd.is_some(), attached.public);
        // An untrusted client knows the node's geometry only as far as its log file tells.
        let geometry = match &public_fd {
            Some(fd) => Superblock::read(&read_public(fd)).unwrap().geometry,
            None => {
                let len = File::from(log_fd.try_clone().unwrap()).metadata().unwrap().len();
                Geometry {
                    total_blocks: 0,
                    log_slots: 0,
                    log_blocks: len / linefs_pm::layout::BLOCK_SIZE,
                    itable_start: 0,
                    inode_count: 0,
                    data_start: 0,
                    data_blocks: 0,
                }
            }
        };
        // Mapped from the descriptor itself: the file need not be openable by this process.
        let name = PathBuf::from(format!("/proc/self/fd/{}", log_fd.as_raw_fd()));
        let region = PmRegion::from_file(File::from(log_fd.try_clone().unwrap()), &name, true).unwrap();
        let log = LogSlot::new(Arc::new(region), &geometry, attached.slot);
        let bulk = UnixStream::connect(socket).unwrap();
        let hello = Hello { channel: Channel::Bulk, role: Role::DirectApi, session: attached.session };
        write_frame(&bulk, &Frame { id: 1, msg: Bulk::Hello(hello) }).unwrap();
        let ok: Frame<Bulk> = read_frame(&bulk, Party::Nicfs, Some(WAIT)).unwrap();
        assert_eq!(ok.msg, Bulk::Ok);
        let tail = attached.log.start_lsn;
        Ok(Client {
            control,
            bulk,
            attached,
            log_fd,
            public_fd,
            log,
            geometry,
            tail,
            next_id: 2,
            leases: Default::default(),
        })
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Asks for a write lease on `ino` and waits for it (nothing else may arrive meanwhile:
    /// another client holding the inode must have released it).
    pub fn write_lease(&mut self, ino: u64) -> u64 {
        let creds = Creds { uid: euid(), gid: egid(), groups: Vec::new() };
        let r = LeaseRequest { inode: ino, mode: LeaseMode::Write, log_tail: self.tail, creds };
        match self.request(Control::LeaseRequest(r)) {
            Control::LeaseGranted(g) if g.inode == ino && g.mode == LeaseMode::Write => {
                self.leases.insert(ino, g.lease);
                g.lease
            }
            other => panic!("expected a write lease on {ino}, got {other:?}"),
        }
    }

    /// Hands every write lease taken by [`Client::append`] back, covering the log up to its tail.
    pub fn release_all(&mut self) {
        for ino in self.leases.keys().copied().collect::<Vec<_>>() {
            self.release(ino);
        }
    }

    /// Hands the write lease on `ino` taken by [`Client::append`] back, covering the log up
    /// to its tail.
    pub fn release(&mut self, inode: u64) {
        let lease = self.leases.remove(&inode).expect("a write lease taken by append");
        let h = LeaseHandback { inode, lease, covered_lsn: self.tail };
        assert_eq!(self.request(Control::LeaseRelease(h)), Control::Ok);
    }

    /// Appends an entry as a client following the protocol does: first takes a write lease
    /// on every inode it changes (see [`Client::write_lease`]); returns its LSN.
    pub fn append(&mut self, b: &EntryBuilder) -> u64 {
        let records = linefs_pm::record::decode_records(b.payload(), 0).unwrap();
        for r in records {
            let ino = r.target();
            if !self.leases.contains_key(&ino) {
                self.write_lease(ino);
            }
        }
        self.append_unleased(b)
    }

    /// Appends an entry (persisted and fenced: committed) without taking any lease;
    /// returns its LSN.
    pub fn append_unleased(&mut self, b: &EntryBuilder) -> u64 {
        self.append_at(b).lsn
    }

    /// [`Client::append_unleased`], returning where the entry is.
    pub fn append_at(&mut self, b: &EntryBuilder) -> linefs_pm::oplog::EntryLoc {
        let published = self.log.published_lsn().unwrap();
        let loc = self.log.append(self.tail, published, b.payload()).unwrap();
        self.tail = loc.end;
        loc
    }

    pub fn chunk_ready(&mut self) {
        let id = self.id();
        write_frame(&self.bulk, &Frame { id, msg: Bulk::ChunkReady(ChunkReady { committed_lsn: self.tail }) }).unwrap();
    }

    pub fn recv_bulk(&self) -> Bulk {
        read_frame::<Bulk>(&self.bulk, Party::Nicfs, Some(WAIT)).unwrap().msg
    }

    pub fn recv_control(&self) -> Control {
        read_frame::<Control>(&self.control, Party::Nicfs, Some(WAIT)).unwrap().msg
    }

    /// A control request and its answer.
    pub fn request(&mut self, msg: Control) -> Control {
        let id = self.id();
        write_frame(&self.control, &Frame { id, msg }).unwrap();
        let f = read_frame::<Control>(&self.control, Party::Nicfs, Some(WAIT)).unwrap();
        assert_eq!(f.id, id);
        f.msg
    }

    /// Sends a control notice (nothing answers it).
    pub fn send_notice(&self, msg: Control) {
        write_frame(&self.control, &Frame { id: 1, msg }).unwrap();
    }

    /// Sends a control frame without waiting for anything; returns its id.
    pub fn send(&mut self, msg: Control) -> u64 {
        let id = self.id();
        write_frame(&self.control, &Frame { id, msg }).unwrap();
        id
    }

    /// The next control frame, if one comes within `wait`.
    pub fn try_recv(&self, wait: Duration) -> Option<Frame<Control>> {
        match read_frame::<Control>(&self.control, Party::Nicfs, Some(wait)) {
            Ok(f) => Some(f),
            Err(ReadError::TimedOut(_)) => None,
            Err(e) => panic!("reading the control connection: {e}"),
        }
    }

    /// The next control frame (within [`WAIT`]).
    pub fn recv_frame(&self) -> Frame<Control> {
        self.try_recv(WAIT).expect("a control frame within the deadline")
    }

    /// The public area as read now through the read-only descriptor.
    pub fn public(&self) -> PublicReader {
        let fd = self.public_fd.as_ref().expect("an untrusted client has no public descriptor");
        PublicReader::new(Arc::new(read_public(fd)), self.geometry)
    }
}

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn egid() -> u32 {
    rustix::process::getegid().as_raw()
}

/// The public file's bytes, read through `fd`, as an in-memory region.
pub fn read_public(fd: &OwnedFd) -> PmRegion {
    let file = File::from(fd.try_clone().unwrap());
    let len = file.metadata().unwrap().len() as usize;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0).unwrap();
    PmRegion::traced_from_image(buf)
}

/// Entries creating a file in the root or a directory (pm's, shared with its tests).
#[allow(unused_imports)] // not every test binary that includes this module uses both
pub use linefs_pm::testing::{create_file, create_file_in};

/// An entry creating directory `name` (inode `ino`, mode 0755) in directory `dir`.
pub fn mkdir(dir: u64, ino: u64, name: &[u8]) -> EntryBuilder {
    let mut b = EntryBuilder::new();
    let img = InodeImage { ino, parent: dir, mode: libc::S_IFDIR | 0o755, nlink: 2, ..Default::default() };
    b.inode(&img, true);
    b.dirent(dir, name, ino, dtype::DIR);
    b
}

/// `ino` of `name` in the root directory of `public`, if there.
pub fn lookup(public: &PublicReader, name: &[u8]) -> Option<u64> {
    let loaded = public.load().unwrap();
    loaded.dirs.get(&1)?.iter().find(|d| d.name == name).map(|d| d.ino)
}

/// The first `len` bytes of file `ino`.
pub fn read_file(public: &PublicReader, ino: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    public.read_file(ino, 0, &mut buf).unwrap();
    buf
}

/// Expects a Published notice; returns it.
pub fn expect_published(c: &Client) -> Published {
    match c.recv_bulk() {
        Bulk::Published(p) => p,
        other => panic!("expected Published, got {other:?}"),
    }
}

// Lease requests and their answers, as the lease tests speak them.

/// The credentials this test process states in lease requests.
pub fn creds() -> Creds {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    Creds { uid, gid, groups: vec![] }
}

/// Sends a LeaseRequest; returns its id (the answer comes later).
pub fn ask(c: &mut Client, inode: u64, mode: LeaseMode) -> u64 {
    let log_tail = c.tail;
    c.send(Control::LeaseRequest(LeaseRequest { inode, mode, log_tail, creds: creds() }))
}

/// The next frame is the grant answering request `id`.
pub fn granted(c: &Client, id: u64) -> LeaseGranted {
    let f = c.recv_frame();
    match f.msg {
        Control::LeaseGranted(g) if f.id == id => g,
        other => panic!("expected LeaseGranted for request {id}, got {other:?} (id {})", f.id),
    }
}

/// The next frame is a Revoke; returns its frame id and it.
pub fn revoked(c: &Client) -> (u64, Revoke) {
    let f = c.recv_frame();
    match f.msg {
        Control::Revoke(r) => (f.id, r),
        other => panic!("expected Revoke, got {other:?}"),
    }
}

/// Answers the Revoke frame `id`.
pub fn revoke_done(c: &Client, id: u64, inode: u64, lease: u64, covered_lsn: u64) {
    let msg = Control::RevokeDone(LeaseHandback { inode, lease, covered_lsn });
    write_frame(&c.control, &Frame { id, msg }).unwrap();
}
