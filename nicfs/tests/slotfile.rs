//! A client whose session has ended keeps the descriptor and the mapping of the log file it
//! was handed; the slot goes to the next client that attaches. nicfs gives that client a
//! fresh file, so whatever the old one writes — well-formed entries at the new session's
//! LSNs, over its committed entries or just past them — reaches nothing: the new session
//! publishes exactly its own entries and is never failed, and no forged entry appears in
//! the public area. One test per way a session ends: detached, failed (a refused entry),
//! fenced (its lease expired), and cut off by a restart of nicfs.

mod support;

use linefs_pm::oplog::LogSlot;
use linefs_proto::*;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use support::*;

/// What an old client keeps once its session is over: its log descriptor and mapping.
struct Kept {
    fd: OwnedFd,
    log: LogSlot,
    slot: u32,
}

impl Kept {
    /// Keeps `c`'s descriptor and mapping; its connections close with it.
    fn from(c: Client) -> Kept {
        let log = LogSlot::new(c.log.region().clone(), &c.geometry, c.attached.slot);
        Kept { fd: c.log_fd.try_clone().unwrap(), log, slot: c.attached.slot }
    }

    /// Writes a well-formed entry (its LSN, its checksum) at `lsn` through the old mapping.
    fn forge(&self, lsn: u64, ino: u64, name: &[u8]) {
        self.log.append(lsn, lsn, create_file(ino, name, b"written by a session that has ended").payload()).unwrap();
    }
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// The next client gets `old`'s slot; `old` forges entries into it as the module notes say;
/// the new session must publish its own entries only and never fail.
fn the_next_session_is_untouched(d: &Daemon, old: Kept) {
    let mut b = wait_for("the slot to be free", || Client::try_attach(&d.socket).ok());
    assert_eq!(b.attached.slot, old.slot, "the next client gets the old client's slot");
    let path = d.node.join(linefs_pm::node::log_file_name(old.slot));
    let old_ino = std::fs::File::from(old.fd.try_clone().unwrap()).metadata().unwrap().ino();
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), old_ino, "the slot has a fresh file");
    let r = b.attached.inodes;
    assert!(r.count >= 4, "{r:?}");
    let (one, two) = (data(9000, 1), data(5000, 2));

    // Over an entry B has committed but not announced yet...
    let start = b.tail;
    b.append(&create_file(r.first, b"b-one", &one));
    old.forge(start, r.first + 1, b"forged-1");
    b.chunk_ready();
    assert_eq!(expect_published(&b).published_lsn, b.tail, "B's own entry published");
    // ...and at B's next LSN, where only the end of B's session would look.
    b.append(&create_file(r.first + 3, b"b-two", &two));
    old.forge(b.tail, r.first + 2, b"forged-2");
    let lsn = b.tail;
    assert_eq!(b.request(Control::Fsync(Fsync { lsn })), Control::FsyncDone(FsyncDone { durable_lsn: lsn }));
    assert_eq!(expect_published(&b).published_lsn, lsn);
    // B detaches: nicfs publishes everything B's log holds; B is told nothing but Ok (a
    // refusal would come first, as a Rejected).
    let id = b.send(Control::Detach);
    let f = b.recv_frame();
    assert_eq!((f.id, f.msg), (id, Control::Ok), "B's session ended cleanly");

    let c = wait_for("the slot to be free again", || Client::try_attach(&d.socket).ok());
    let public = c.public();
    assert_eq!(lookup(&public, b"b-one"), Some(r.first));
    assert_eq!(lookup(&public, b"b-two"), Some(r.first + 3));
    // The data too: copied from B's file, not from the one the old client writes.
    assert!(read_file(&public, r.first, one.len()) == one, "b-one's bytes are B's");
    assert!(read_file(&public, r.first + 3, two.len()) == two, "b-two's bytes are B's");
    assert_eq!(lookup(&public, b"forged-1"), None);
    assert_eq!(lookup(&public, b"forged-2"), None);
}

/// The old client publishes a file of its own first, so that nicfs has read its slot.
fn publish_something(a: &mut Client, name: &[u8]) {
    a.append(&create_file(a.attached.inodes.first, name, b"legitimate"));
    a.chunk_ready();
    assert_eq!(expect_published(a).published_lsn, a.tail);
}

#[test]
fn a_detached_client_cannot_write_into_the_next_session_s_log() {
    let d = Daemon::start(1);
    let mut a = Client::attach(&d.socket);
    publish_something(&mut a, b"a-file");
    assert_eq!(a.request(Control::Detach), Control::Ok);
    the_next_session_is_untouched(&d, Kept::from(a));
}

#[test]
fn a_failed_client_cannot_write_into_the_next_session_s_log() {
    let d = Daemon::start(1);
    let mut a = Client::attach(&d.socket);
    publish_something(&mut a, b"a-file");
    // A name for an inode that was never allocated: refused, the session fails.
    let mut bad = linefs_pm::record::EntryBuilder::new();
    bad.dirent(1, b"ghost", 77, linefs_pm::record::dtype::REG);
    let refused = a.append_unleased(&bad);
    a.chunk_ready();
    match a.recv_control() {
        Control::Rejected(r) => assert_eq!(r.lsn, refused),
        other => panic!("expected Rejected, got {other:?}"),
    }
    // The failed client goes (its connections close) but keeps its log.
    the_next_session_is_untouched(&d, Kept::from(a));
}

#[test]
fn a_fenced_client_cannot_write_into_the_next_session_s_log() {
    let d = Daemon::start_with(2, &["--lease-timeout-ms", "300"]);
    let mut a = Client::attach(&d.socket);
    let mut w = Client::attach(&d.socket);
    publish_something(&mut a, b"a-file");
    // W wants A's file; A reads the revoke and never answers: it is fenced and hung up.
    let ino = a.attached.inodes.first;
    let creds =
        Creds { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw(), groups: vec![] };
    let asked =
        w.send(Control::LeaseRequest(LeaseRequest { inode: ino, mode: LeaseMode::Write, log_tail: w.tail, creds }));
    assert!(matches!(a.recv_control(), Control::Revoke(r) if r.inode == ino));
    let g = w.recv_frame();
    assert!(matches!(g.msg, Control::LeaseGranted(_)) && g.id == asked, "{g:?}");
    loop {
        match read_frame::<Control>(&a.control, Party::Nicfs, Some(WAIT)) {
            Ok(f) => assert!(matches!(f.msg, Control::Rejected(_)), "A got {f:?}"),
            Err(ReadError::Closed) => break,
            Err(e) => panic!("reading A's control connection: {e}"),
        }
    }
    the_next_session_is_untouched(&d, Kept::from(a));
    drop(w);
}

#[test]
fn a_client_from_before_a_restart_cannot_write_into_the_next_session_s_log() {
    let mut d = Daemon::start(1);
    let mut a = Client::attach(&d.socket);
    publish_something(&mut a, b"a-file");
    // A commits one more entry and nicfs dies: the restart's recovery publishes it.
    a.append(&create_file(a.attached.inodes.first + 1, b"a-late", b"committed"));
    let _ = d.stop(libc::SIGKILL);
    d.launch();
    the_next_session_is_untouched(&d, Kept::from(a));
    let c = wait_for("the slot", || Client::try_attach(&d.socket).ok());
    assert!(lookup(&c.public(), b"a-late").is_some(), "recovered before the slot was replaced");
    // At least slot 0 at the restart and at the end of B's session.
    let st = d.wait_status("the status", |s| s["log_files_replaced"].as_u64().is_some_and(|n| n >= 2));
    assert_eq!(st["log_slots"], 1);
}
