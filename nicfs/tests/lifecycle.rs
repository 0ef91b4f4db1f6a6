//! The daemon's life and bad input: garbage and oversized frames, a second nicfs on the
//! same node, SIGTERM.

mod support;

use linefs_pm::node::NodePm;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::PublicReader;
use linefs_proto::*;
use std::io::Write;
use std::os::unix::net::UnixStream;
use support::*;

/// Reads frames until the connection ends; returns the Errors received (bounded).
fn errors_until_closed(s: &UnixStream) -> Vec<ErrorReply> {
    let mut errors = Vec::new();
    loop {
        match read_frame::<Control>(s, Party::Nicfs, Some(WAIT)) {
            Ok(Frame { msg: Control::Error(e), .. }) => errors.push(e),
            Ok(other) => panic!("unexpected frame {other:?}"),
            Err(ReadError::Closed) => return errors,
            Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return errors,
            Err(e) => panic!("expected an Error then the end, got {e}"),
        }
    }
}

#[test]
fn garbage_and_oversized_frames_get_an_error_and_nicfs_stays_up() {
    let mut d = Daemon::start(2);

    // Bytes that are not a frame at all: an Error (EPROTO), then the connection closes.
    let s = UnixStream::connect(&d.socket).unwrap();
    (&s).write_all(b"GET / HTTP/1.1\r\nHost: nicfs\r\n\r\n").unwrap();
    let e = errors_until_closed(&s);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].errno(), errno::EPROTO);

    // A header that declares a frame of 4 GiB: refused from the header alone (EMSGSIZE).
    let s = UnixStream::connect(&d.socket).unwrap();
    let mut head = encode(&Frame { id: 9, msg: Control::Ping }).unwrap();
    head[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    (&s).write_all(&head).unwrap();
    let e = errors_until_closed(&s);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].errno(), errno::EMSGSIZE);

    // A peer that connects and says nothing holds only a thread of its own (its Hello has
    // a deadline); the others are served meanwhile.
    let silent = UnixStream::connect(&d.socket).unwrap();

    // On an attached control connection, a well-framed but wrong frame (a bulk kind) gets
    // an Error and the connection goes on...
    let mut c = Client::attach(&d.socket);
    let wrong = encode(&Frame { id: 5, msg: Bulk::ChunkReady(ChunkReady { committed_lsn: 0 }) }).unwrap();
    (&c.control).write_all(&wrong).unwrap();
    match c.recv_control() {
        Control::Error(e) => assert_eq!(e.errno(), errno::EOPNOTSUPP),
        other => panic!("expected Error, got {other:?}"),
    }
    assert_eq!(c.request(Control::Ping), Control::Pong);
    // ...but a peer that keeps sending them is disconnected.
    for _ in 0..20 {
        if (&c.control).write_all(&wrong).is_err() {
            break;
        }
    }
    let e = errors_until_closed(&c.control);
    assert!(!e.is_empty() && e.len() <= 8, "{} errors before the disconnect", e.len());
    // What only nicfs sends, and a lease request of no inode, get an error, not a crash.
    let mut c2 = Client::attach(&d.socket);
    let creds = Creds { uid: 0, gid: 0, groups: vec![] };
    let request = LeaseRequest { inode: 1 << 40, mode: LeaseMode::Read, log_tail: 0, creds };
    let revoke = Revoke { inode: 1, lease: 1, keep_read: false };
    // (The decoder refuses a message of the wrong direction with EOPNOTSUPP.)
    for (msg, errno) in [(Control::LeaseRequest(request), libc::EINVAL), (Control::Revoke(revoke), libc::EOPNOTSUPP)] {
        match c2.request(msg) {
            Control::Error(e) => assert_eq!(e.errno(), errno, "{e:?}"),
            other => panic!("expected Error, got {other:?}"),
        }
    }

    // nicfs is still up, and the slot of the disconnected client comes back.
    assert!(d.alive());
    let _again = wait_for("a slot", || Client::try_attach(&d.socket).ok());
    drop(silent);
    assert!(d.alive());
}

#[test]
fn a_second_nicfs_on_the_node_is_refused() {
    let mut d = Daemon::start(1);
    let other = d.dir.path().join("other.sock");
    let out = d.spawn(&other).wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    assert!(lines[0].starts_with("nicfs: node ") && lines[0].contains("in use"), "{err}");
    assert!(!other.exists());
    assert!(d.alive());
}

#[test]
fn sigterm_publishes_every_attached_client_and_exits_cleanly() {
    let mut d = Daemon::start(2);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    // Each creates a file with a number of its own, in the root directory A hands on to B.
    let (ia, ib) = (a.attached.inodes.first, b.attached.inodes.first);
    a.append(&create_file(ia, b"from-a", b"aaaa"));
    a.release(1);
    b.append(&create_file(ib, b"from-b", b"bbbb"));
    let (a_end, b_end) = (a.tail, b.tail);

    let (status, stderr) = d.stop(libc::SIGTERM);
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("stopped"), "{stderr}");
    assert!(!d.socket.exists(), "the socket is removed");
    let st = d.status();
    assert_eq!(st["stopping"], true);
    assert_eq!(st["counters"]["entries_published"], 2);

    // Published and checkpointed before the exit (read without recovery).
    let node = NodePm::open(&d.node).unwrap();
    let geo = node.geometry;
    let slot = |s: u32| LogSlot::new(node.log(s).unwrap().clone(), &geo, s).published_lsn().unwrap();
    assert_eq!(slot(a.attached.slot), a_end);
    assert_eq!(slot(b.attached.slot), b_end);
    let public = PublicReader::new(node.public.clone(), geo);
    assert_eq!(lookup(&public, b"from-a"), Some(ia));
    assert_eq!(read_file(&public, ib, 4), b"bbbb");
    // The clients see their connections end.
    assert!(read_frame::<Control>(&a.control, Party::Nicfs, Some(WAIT)).is_err());
}

#[test]
fn cpus_pins_the_daemon() {
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("n");
    let params = linefs_pm::layout::FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 1, inodes: 256 };
    linefs_pm::mkfs::format_dir(&node, &params).unwrap();
    let socket = dir.path().join("s");
    let mut child = std::process::Command::new(nicfs_bin())
        .arg("--node")
        .arg(&node)
        .arg("--socket")
        .arg(&socket)
        .args(["--cpus", "0"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the socket", || {
        if let Some(st) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
            panic!("nicfs exited ({st}): {err}");
        }
        socket.exists().then_some(())
    });
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let allowed = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).unwrap();
    assert_eq!(allowed.split_whitespace().nth(1), Some("0"), "{allowed}");
    child.kill().unwrap();
    child.wait().unwrap();
    // A bad list is refused at the command line.
    let out = std::process::Command::new(nicfs_bin())
        .args(["--node", "x", "--socket", "y", "--cpus", "3-1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
