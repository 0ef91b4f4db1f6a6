//! The real kworker process against a test that plays nicfs: Hello, heartbeats, copy lists
//! answered CopyDone / CopyFailed with exact bytes, reconnection after nicfs goes away, and
//! exit 0 on SIGTERM.

mod common;

use common::*;
use linefs_proto::*;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(t: &TestNode, socket: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kworker"))
        .arg("--node")
        .arg(&t.node)
        .arg("--socket")
        .arg(socket)
        .arg("--heartbeat-ms")
        .arg("20")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Accepts a kworker and answers its Hello.
fn accept(listener: &UnixListener) -> UnixStream {
    let (s, _) = listener.accept().unwrap();
    let hello = read_frame::<Kworker>(&s, Party::Kworker, Some(WAIT)).unwrap();
    assert_eq!(hello.msg, Kworker::Hello(Hello { channel: Channel::Kworker, role: Role::Kworker, session: 0 }));
    write_frame(&s, &Frame { id: hello.id, msg: Kworker::Ok }).unwrap();
    s
}

/// Sends a copy list and returns the answer, skipping heartbeats.
fn copy(s: &UnixStream, id: u64, list: CopyList) -> Kworker {
    write_frame(s, &Frame { id, msg: Kworker::CopyList(list) }).unwrap();
    loop {
        let f = read_frame::<Kworker>(s, Party::Kworker, Some(WAIT)).unwrap();
        match f.msg {
            Kworker::Heartbeat(_) => continue,
            other => {
                assert_eq!(f.id, id);
                return other;
            }
        }
    }
}

#[test]
fn executes_lists_heartbeats_reconnects_and_stops() {
    let t = TestNode::new();
    t.scribble(0xEE);
    let socket = t.dir.path().join("nicfs.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let mut child = spawn(&t, &socket);
    let s = accept(&listener);

    // Heartbeats arrive at about the interval.
    let start = Instant::now();
    for _ in 0..5 {
        let f = read_frame::<Kworker>(&s, Party::Kworker, Some(Duration::from_secs(1))).unwrap();
        assert_eq!(f.msg, Kworker::Heartbeat(Heartbeat { lists_in_flight: 0 }));
    }
    assert!(start.elapsed() < Duration::from_secs(2));

    let d = t.data_start;
    let entries = vec![data(0, 4096, d, 9000), zeros(d + 4096, 100), data(1, 8192, d + 50_000, 3)];
    let before = t.public_bytes();
    let answer = copy(&s, 7, CopyList { list_id: 42, entries: entries.clone() });
    assert_eq!(answer, Kworker::CopyDone(CopyDone { list_id: 42 }));
    let want = expected(&before, &entries);
    assert!(t.public_bytes() == want);

    // Out of range: refused at the entry, nothing else written.
    let bad = vec![data(1, 4096, t.public_len - 1, 2), data(0, 4096, d + 90_000, 10)];
    let answer = copy(&s, 8, CopyList { list_id: 43, entries: bad });
    assert_eq!(answer, Kworker::CopyFailed(CopyFailed { list_id: 43, entry: 0, errno: libc::ERANGE }));
    assert!(t.public_bytes() == want);

    // The same list again: done, same bytes.
    let answer = copy(&s, 9, CopyList { list_id: 42, entries });
    assert_eq!(answer, Kworker::CopyDone(CopyDone { list_id: 42 }));
    assert!(t.public_bytes() == want);

    // nicfs goes away: kworker comes back.
    drop(s);
    let s = accept(&listener);
    let answer = copy(&s, 1, CopyList { list_id: 44, entries: vec![zeros(d, 10)] });
    assert_eq!(answer, Kworker::CopyDone(CopyDone { list_id: 44 }));

    // SIGTERM: exit 0, promptly.
    // SAFETY: kill(2) on our own child, not yet reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = wait_for("kworker to exit", || child.try_wait().unwrap());
    assert!(status.success(), "{status}");
}

#[test]
fn keeps_retrying_until_nicfs_appears() {
    let t = TestNode::new();
    let socket = t.dir.path().join("later.sock");
    let mut child = spawn(&t, &socket);
    std::thread::sleep(Duration::from_millis(300));
    assert!(child.try_wait().unwrap().is_none(), "kworker gave up without nicfs");
    let listener = UnixListener::bind(&socket).unwrap();
    let _s = accept(&listener);
    let _ = child.kill();
    let _ = child.wait();
}
