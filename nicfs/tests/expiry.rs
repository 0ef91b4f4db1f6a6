//! Lease expiry against the real `nicfs` process: a client that reads its revokes but never
//! answers them is fenced once the lease timeout has passed — its committed log published
//! up to where it stood, nothing it logs afterwards, its session failed with the reason and
//! hung up — and the client waiting for its inode is granted it; a client that answers in
//! time is left alone.

mod support;

use linefs_proto::*;
use std::time::{Duration, Instant};
use support::*;

/// The lease timeout these tests run nicfs with.
const TIMEOUT_MS: u64 = 300;
/// How much later than the timeout the waiting client may be granted (timer ticks, the
/// publication of the expired client's log, a loaded machine).
const SLACK: Duration = Duration::from_secs(2);

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed)).collect()
}

#[test]
fn a_holder_that_never_answers_a_revoke_is_fenced_and_the_waiting_client_gets_the_inode() {
    let timeout = TIMEOUT_MS.to_string();
    let mut d = Daemon::start_with(2, &["--lease-timeout-ms", &timeout]);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    // A creates a file under its write lease; the entry is committed in its log, and A
    // never announces it (no ChunkReady): nicfs publishes what is committed all the same.
    let ino = a.attached.inodes.first;
    let id = ask(&mut a, ino, LeaseMode::Write);
    let wa = granted(&a, id);
    let data = pattern(12_000, 5);
    a.append(&create_file(ino, b"kept", &data));

    // B asks for the inode: A is revoked, reads the revoke, and never answers.
    let asked = Instant::now();
    let id = ask(&mut b, ino, LeaseMode::Write);
    let (_, r) = revoked(&a);
    assert_eq!(r, Revoke { inode: ino, lease: wa.lease, keep_read: false });
    // While it still holds the lease, A logs more: committed before the fence, published.
    let mut more = linefs_pm::record::EntryBuilder::new();
    more.write(ino, 12_000, b"before the fence");
    a.append(&more);
    let fence = a.tail;
    assert!(b.try_recv(Duration::from_millis(TIMEOUT_MS / 2)).is_none(), "B granted before the timeout");

    // B is granted once A's lease has expired, and not much later.
    let g = granted(&b, id);
    let waited = asked.elapsed();
    assert_eq!((g.inode, g.mode), (ino, LeaseMode::Write));
    assert!(waited >= Duration::from_millis(TIMEOUT_MS), "granted after {waited:?}, before the timeout");
    assert!(waited < Duration::from_millis(TIMEOUT_MS) + SLACK, "granted only after {waited:?}");
    // At that moment the public area holds everything A committed before the fence.
    let public = b.public();
    assert_eq!(lookup(&public, b"kept"), Some(ino));
    assert_eq!(read_file(&public, ino, data.len()), data);
    let mut tail = vec![0u8; 16];
    public.read_file(ino, 12_000, &mut tail).unwrap();
    assert_eq!(tail, b"before the fence");

    // A's next request fails with the reason: nicfs told A why (Rejected, at the fence)
    // before it hung up; a request that still got in is refused with the same reason.
    let why = format!("did not answer the revoke of inode {ino} within {TIMEOUT_MS} ms");
    let _ = write_frame(&a.control, &Frame { id: 900, msg: Control::Fsync(Fsync { lsn: a.tail }) });
    let mut told = None;
    loop {
        match read_frame::<Control>(&a.control, Party::Nicfs, Some(WAIT)) {
            Ok(f) => match f.msg {
                Control::Rejected(r) => {
                    assert_eq!((r.lsn, r.code), (fence, RemoteError::Fenced), "{r:?}");
                    assert!(r.reason.contains(&why), "{r:?}");
                    told = Some(r);
                }
                Control::Error(e) if f.id == 900 => {
                    assert_eq!(e.errno(), libc::EIO);
                    assert!(e.message.contains(&why), "{e:?}");
                }
                other => panic!("A got {other:?}"),
            },
            Err(ReadError::Closed) => break,
            Err(e) => panic!("reading A's control connection: {e}"),
        }
    }
    assert!(told.is_some(), "A was told why before nicfs hung up");

    // A goes on writing its log (it still has the descriptor): nothing of it is published,
    // even after its session is gone and B publishes more.
    a.append_unleased(&create_file(ino + 1, b"too-late", b"never"));
    a.append_unleased(&{
        let mut w = linefs_pm::record::EntryBuilder::new();
        w.write(ino, 0, b"XXXX");
        w
    });
    let st = d.wait_status("A's session gone", |s| {
        s["sessions"].as_array().is_some_and(|v| v.len() == 1) && s["leases"]["expired"] == 1
    });
    assert_eq!(st["sessions"][0]["session"], b.attached.session);
    let mut w = linefs_pm::record::EntryBuilder::new();
    w.write(ino, 0, b"B's bytes");
    b.append(&w);
    assert!(matches!(b.request(Control::Fsync(Fsync { lsn: b.tail })), Control::FsyncDone(_)));
    let public = b.public();
    assert_eq!(lookup(&public, b"too-late"), None);
    let mut head = vec![0u8; 9];
    public.read_file(ino, 0, &mut head).unwrap();
    assert_eq!(head, b"B's bytes");
    assert_eq!(read_file(&public, ino, data.len())[9..], data[9..]);

    // Both logs say so: nicfs's (the client's is the Rejected it read).
    let (status, log) = d.stop(libc::SIGTERM);
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("lease expired") && log.contains(&why), "nicfs's log:\n{log}");

    // Nor does a restart's recovery publish what A logged past its fence: the slot's
    // leases ended with the session, so those entries are refused and dropped.
    d.launch();
    let c = Client::attach(&d.socket);
    let public = c.public();
    assert_eq!(lookup(&public, b"too-late"), None);
    let mut head = vec![0u8; 9];
    public.read_file(ino, 0, &mut head).unwrap();
    assert_eq!(head, b"B's bytes");
}

#[test]
fn a_holder_that_answers_in_time_keeps_its_session() {
    let timeout = TIMEOUT_MS.to_string();
    let d = Daemon::start_with(2, &["--lease-timeout-ms", &timeout]);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    let ino = a.attached.inodes.first;
    let id = ask(&mut a, ino, LeaseMode::Write);
    let wa = granted(&a, id);
    a.append(&create_file(ino, b"answered", b"in time"));
    let id = ask(&mut b, ino, LeaseMode::Read);
    let (rid, _) = revoked(&a);
    // A takes most of the timeout to answer.
    std::thread::sleep(Duration::from_millis(TIMEOUT_MS * 2 / 3));
    let done = LeaseHandback { inode: ino, lease: wa.lease, covered_lsn: a.tail };
    write_frame(&a.control, &Frame { id: rid, msg: Control::RevokeDone(done) }).unwrap();
    assert_eq!(granted(&b, id).mode, LeaseMode::Read);
    // Well past the timeout, A is still attached and served.
    std::thread::sleep(Duration::from_millis(TIMEOUT_MS * 2));
    assert_eq!(a.request(Control::Ping), Control::Pong);
    let st = d.wait_status("a status written after the answer", |s| s["leases"]["readers"] == 2);
    assert_eq!(st["leases"]["expired"], 0);
    assert_eq!(st["sessions"].as_array().map(Vec::len), Some(2));
}

#[test]
fn revokes_never_expire_with_a_zero_timeout() {
    let d = Daemon::start_with(2, &["--lease-timeout-ms", "0"]);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    let ino = a.attached.inodes.first;
    let id = ask(&mut a, ino, LeaseMode::Write);
    granted(&a, id);
    ask(&mut b, ino, LeaseMode::Write);
    revoked(&a);
    // Far past the default timeout's tenth, and past the one above: B waits, A is served.
    assert!(b.try_recv(Duration::from_millis(TIMEOUT_MS * 3)).is_none(), "B granted without a hand-back");
    assert_eq!(a.request(Control::Ping), Control::Pong);
    let st = d.wait_status("the revoke in the status", |s| s["leases"]["revokes_in_flight"] == 1);
    assert_eq!(st["leases"]["expired"], 0);
}
