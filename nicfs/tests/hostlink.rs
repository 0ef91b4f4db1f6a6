//! The host link with real processes: nicfs's mode follows the kworker (connect, kill -9,
//! SIGSTOP), one kworker per node, garbage on the link, and a copy list in flight at a
//! kworker killed mid-way completed by nicfs itself.
//!
//! The kworker binary is the one cargo builds next to nicfs's (`cargo test -p kworker -p
//! nicfs` builds both).

/// The kworker tests' node with known log bytes, and what a copy list leaves (one copy of
/// both for the executor's tests and these).
#[path = "../../kworker/tests/common/mod.rs"]
mod kw;
mod support;

use kw::{expected, TestNode};
use linefs_pm::layout::BLOCK_SIZE;
use linefs_proto::*;
use nicfs::host::link::{Copied, HostLink, Mode};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

fn mode(d: &Daemon) -> String {
    d.status()["host"]["mode"].as_str().unwrap().to_owned()
}

/// Waits until the status says `want`; returns how long it took and the status.
fn wait_mode(d: &Daemon, want: &str) -> (Duration, serde_json::Value) {
    let t0 = Instant::now();
    let s = d.wait_status(&format!("mode {want}"), |s| s["host"]["mode"] == want);
    (t0.elapsed(), s)
}

#[test]
fn mode_follows_the_kworker() {
    let mut d = Daemon::start(2);
    assert_eq!(mode(&d), "isolated");
    let mut k = spawn_kworker(&d.node, &d.socket, None);
    let (_, s) = wait_mode(&d, "normal");
    assert_eq!(s["host"]["kworker_pid"], k.id());
    assert_eq!(s["host"]["mode_switches"], 1);
    // Heartbeats keep it normal, and fresh.
    std::thread::sleep(Duration::from_millis(600));
    let s = d.status();
    assert_eq!(s["host"]["mode"], "normal");
    assert!(s["host"]["last_heartbeat_age_ms"].as_u64().unwrap() < 300, "{s}");

    // kill -9: isolated within a second.
    signal(&k, libc::SIGKILL);
    let (took, s) = wait_mode(&d, "isolated");
    assert!(took < Duration::from_secs(1), "isolated after {took:?}");
    assert!(s["host"]["kworker_pid"].is_null());
    assert_eq!(s["host"]["mode_switches"], 2);
    let _ = k.wait();

    // A new kworker: normal again.
    let mut k = spawn_kworker(&d.node, &d.socket, None);
    let (_, s) = wait_mode(&d, "normal");
    assert_eq!(s["host"]["kworker_pid"], k.id());

    // A stopped host (no end of connection, just no heartbeats): isolated within a second.
    signal(&k, libc::SIGSTOP);
    let (took, s) = wait_mode(&d, "isolated");
    assert!(took < Duration::from_secs(1), "isolated after {took:?}");
    assert!(s["host"]["mode_reason"].as_str().unwrap().contains("heartbeat"), "{s}");
    // Continued, it finds its connection closed and comes back.
    signal(&k, libc::SIGCONT);
    let (_, s) = wait_mode(&d, "normal");
    assert_eq!(s["host"]["mode_switches"], 5);

    signal(&k, libc::SIGTERM);
    let st = wait_for("kworker to exit", || k.try_wait().unwrap());
    assert!(st.success());
    wait_mode(&d, "isolated");
    let (st, err) = d.stop(libc::SIGTERM);
    assert!(st.success());
    assert!(err.contains("mode switch"), "switches are logged: {err}");
}

/// Sends a kworker Hello on a new connection; returns it and the answer.
fn hello(socket: &Path, role: Role) -> (UnixStream, Kworker) {
    let s = UnixStream::connect(socket).unwrap();
    let h = Hello { channel: Channel::Kworker, role, session: 0 };
    write_frame(&s, &Frame { id: 1, msg: Kworker::Hello(h) }).unwrap();
    let r = read_frame::<Kworker>(&s, Party::Nicfs, Some(WAIT)).unwrap();
    (s, r.msg)
}

#[test]
fn one_kworker_per_node() {
    let d = Daemon::start(1);
    let (_s, r) = hello(&d.socket, Role::DirectApi);
    assert!(matches!(r, Kworker::Error(ErrorReply { code: RemoteError::Invalid, .. })), "{r:?}");
    let mut k = spawn_kworker(&d.node, &d.socket, None);
    wait_mode(&d, "normal");
    let (_s, r) = hello(&d.socket, Role::Kworker);
    assert!(matches!(r, Kworker::Error(ErrorReply { code: RemoteError::Busy, .. })), "{r:?}");
    // The first one is untouched.
    std::thread::sleep(Duration::from_millis(400));
    let s = d.status();
    assert_eq!((s["host"]["mode"].as_str(), s["host"]["kworker_pid"].as_u64()), (Some("normal"), Some(k.id() as u64)));
    let _ = k.kill();
    let _ = k.wait();
}

#[test]
fn garbage_on_the_kworker_link() {
    let mut d = Daemon::start(1);
    let (s, r) = hello(&d.socket, Role::Kworker);
    assert_eq!(r, Kworker::Ok);
    wait_mode(&d, "normal");
    // A whole frame of a kind kworker may not send: an Error, the link goes on.
    let list = CopyList { list_id: 1, entries: vec![] };
    let bytes = encode(&Frame { id: 5, msg: Kworker::CopyList(list) }).unwrap();
    send_bytes(&s, &bytes, &[]).unwrap();
    let r = read_frame::<Kworker>(&s, Party::Nicfs, Some(WAIT)).unwrap();
    assert!(matches!(r.msg, Kworker::Error(_)), "{r:?}");
    // Bytes that are no frame at all: an Error, and the link is closed.
    send_bytes(&s, &[0xFF; 40], &[]).unwrap();
    let r = read_frame::<Kworker>(&s, Party::Nicfs, Some(WAIT)).unwrap();
    assert!(matches!(r.msg, Kworker::Error(_)), "{r:?}");
    wait_mode(&d, "isolated");
    // nicfs is up and serving.
    assert!(d.alive());
    let _c = Client::attach(&d.socket);
    let (_s, r) = hello(&d.socket, Role::Kworker);
    assert_eq!(r, Kworker::Ok);
}

// ---- the copy-list API, in process, against a real kworker process ----

/// Serves kworker connections on `socket` with `host`, as nicfs's accept loop does.
fn serve(host: Arc<HostLink>, socket: &Path) {
    let listener = UnixListener::bind(socket).unwrap();
    let watch = host.clone();
    std::thread::spawn(move || watch.watchdog(|| false));
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let s = s.unwrap();
            let host = host.clone();
            std::thread::spawn(move || {
                let cred = peer_credentials(&s).unwrap();
                let f = read_frame::<Kworker>(&s, Party::Kworker, Some(WAIT)).unwrap();
                let Kworker::Hello(h) = f.msg else { panic!("no Hello") };
                host.serve(s, cred, f.id, h);
            });
        }
    });
}

fn entries(n: &TestNode, salt: u64) -> Vec<CopyEntry> {
    let d = n.data_start;
    (0..8u64)
        .map(|i| CopyEntry {
            source: if i == 3 { CopySource::Zero } else { CopySource::Slot((i % 2) as u32) },
            src_offset: if i == 3 { 0 } else { BLOCK_SIZE + i * 1000 + salt },
            dst_offset: d + i * 20_000,
            len: 5000 + i * 7,
        })
        .collect()
}

#[test]
fn copy_lists_by_kworker_by_nicfs_and_redone_after_kill() {
    let n = TestNode::new();
    let socket = n.dir.path().join("nicfs.sock");
    let public = n.public_path();
    let host = Arc::new(HostLink::new(n.node.clone(), Duration::from_millis(100)));
    serve(host.clone(), &socket);

    // Isolated: nicfs copies itself.
    let e1 = entries(&n, 0);
    let before = std::fs::read(&public).unwrap();
    let c = host.copy(&e1, Duration::from_secs(5)).unwrap();
    let bytes = |e: &[CopyEntry]| e.iter().map(|e| e.len).sum::<u64>();
    assert_eq!(c, Copied { by_nicfs: 1, bytes_by_nicfs: bytes(&e1), ..Copied::default() });
    let img = expected(&before, &e1);
    assert!(std::fs::read(&public).unwrap() == img);

    // Normal: the kworker copies; a bad entry comes back as its CopyFailed.
    let mut k = spawn_kworker(&n.node, &socket, Some(150));
    wait_for("a kworker", || (host.mode() == Mode::Normal).then_some(()));
    let e2 = entries(&n, 77);
    let c = host.copy(&e2[..2], Duration::from_secs(5)).unwrap();
    assert_eq!(c, Copied { sent: 1, by_kworker: 1, bytes_by_kworker: bytes(&e2[..2]), ..Copied::default() });
    let img = expected(&img, &e2[..2]);
    assert!(std::fs::read(&public).unwrap() == img);
    let bad = [e2[0], CopyEntry { dst_offset: 0, ..e2[1] }];
    let err = host.copy(&bad, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(err, nicfs::host::link::CopyError::Failed { entry: 1, errno: libc::ERANGE, .. }), "{err}");

    // A list in flight when the kworker is killed mid-way: nicfs redoes it, same bytes.
    let e3 = entries(&n, 301);
    let want = expected(&img, &e3);
    let h = host.clone();
    let e3c = e3.clone();
    let copier = std::thread::spawn(move || h.copy(&e3c, Duration::from_secs(20)));
    // Wait until the kworker has done the first entry (and not the last), then kill it.
    let first = e3[0];
    wait_for("the kworker to start the list", || {
        let now = std::fs::read(&public).unwrap();
        let r = first.dst_offset as usize..(first.dst_offset + first.len) as usize;
        (now[r.clone()] == want[r]).then_some(())
    });
    let last = e3[7];
    let r = last.dst_offset as usize..(last.dst_offset + last.len) as usize;
    assert!(std::fs::read(&public).unwrap()[r.clone()] != want[r], "the kworker finished too soon");
    signal(&k, libc::SIGKILL);
    let _ = k.wait();
    let c = copier.join().unwrap().unwrap();
    assert_eq!(c, Copied { sent: 1, by_nicfs: 1, redone: 1, bytes_by_nicfs: bytes(&e3), ..Copied::default() });
    assert!(std::fs::read(&public).unwrap() == want, "the redone list left other bytes");
    assert_eq!(host.mode(), Mode::Isolated);
    let st = host.status();
    assert_eq!((st.lists_redone, st.lists_by_kworker, st.lists_by_nicfs), (1, 1, 2));
    assert_eq!((st.bytes_by_kworker, st.bytes_by_nicfs), (bytes(&e2[..2]), bytes(&e1) + bytes(&e3)));
}

/// A kworker whose socket refuses nicfs's writes (it shut its reading side: nicfs's send
/// fails with EPIPE while its reader has not seen the connection end) is detached on the
/// failed send and the list done by nicfs — the send path once deadlocked on the writer's own
/// lock there (the 1-node soak hung with the publish thread parked in `detach`).
#[test]
fn a_failed_send_to_the_kworker_detaches_it_and_nicfs_copies() {
    let n = TestNode::new();
    let socket = n.dir.path().join("nicfs.sock");
    let public = n.public_path();
    let host = Arc::new(HostLink::new(n.node.clone(), Duration::from_millis(100)));
    serve(host.clone(), &socket);
    // The fake kworker is a child process: nicfs kills a kworker it gives up with lists in
    // flight, and that must not be the test.
    // SAFETY: the child only connects, writes a frame, shuts a socket and sleeps, then exits
    // without unwinding; glibc's allocator is usable after fork.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        let (s, _) = hello(&socket, Role::Kworker);
        let _ = s.shutdown(std::net::Shutdown::Read);
        std::thread::sleep(Duration::from_secs(30));
        // SAFETY: ends the child at once, with no unwinding into the test harness.
        unsafe { libc::_exit(0) };
    }
    wait_for("the kworker attached", || (host.mode() == Mode::Normal).then_some(()));
    // Its reading side shut: the next send to it fails.
    std::thread::sleep(Duration::from_millis(200));

    let e = entries(&n, 5);
    let want = expected(&std::fs::read(&public).unwrap(), &e);
    let h = host.clone();
    let ec = e.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(h.copy(&ec, Duration::from_secs(5))));
    let c = rx.recv_timeout(Duration::from_secs(10)).expect("copy hung after a failed send").unwrap();
    assert_eq!(c.by_nicfs, 1, "{c:?}");
    assert_eq!(c.by_kworker, 0, "{c:?}");
    assert!(std::fs::read(&public).unwrap() == want, "nicfs's copy left other bytes");
    assert_eq!(host.mode(), Mode::Isolated);
    // SAFETY: plain syscalls on the child's pid.
    unsafe {
        libc::kill(child, libc::SIGKILL);
        libc::waitpid(child, std::ptr::null_mut(), 0);
    }
}
