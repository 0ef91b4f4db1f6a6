//! Attacks on the daemon itself from an unprivileged local user (issue 21, classes C and D):
//! the test binary re-run as uid 65534 (`hostile_child`, one case per run) speaks the wire
//! and log formats itself ([`raw`]), against a node whose root client works meanwhile.
//! Each test says what it attacks; together they show that a client cannot crash nicfs
//! (a resized log file), lock it out (a kept descriptor, the kworker's place, connections,
//! log slots, reservations) or starve others (a forked attacher, a fenced lease holder).

#[path = "hostile/raw.rs"]
mod raw;
mod support;

use linefs_pm::record::{dtype, EntryBuilder, InodeImage};
use linefs_proto::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdout, Stdio};
use std::time::{Duration, Instant};
use support::*;

const NOBODY: u32 = 65534;

/// A run of `hostile_child` as `uid`, its lines read as they come.
struct Hostile {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Hostile {
    fn start(uid: u32, case: &str, d: &Daemon, env: &[(&str, String)]) -> Hostile {
        Hostile::start_in_groups(uid, &[], case, d, env)
    }

    /// [`Hostile::start`], the process also in the supplementary groups `groups`.
    fn start_in_groups(uid: u32, groups: &[u32], case: &str, d: &Daemon, env: &[(&str, String)]) -> Hostile {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "hostile_child", "--nocapture", "--include-ignored"])
            .env("HOSTILE_CASE", case)
            .env("HOSTILE_SOCKET", &d.socket)
            .env("HOSTILE_NODE", &d.node)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let groups: Vec<libc::gid_t> = groups.to_vec();
        // SAFETY: only async-signal-safe calls between fork and exec: the groups, then the
        // gid and uid (std's `uid()` would clear the groups).
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(uid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Hostile { child, out }
    }

    /// The next line the case prints (`HOSTILE key: value`), as `value` for `key`.
    fn said(&mut self, key: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.out.read_line(&mut line).unwrap() > 0, "hostile case ended before saying {key:?}");
            if let Some(rest) = line.trim_end().strip_prefix("HOSTILE ") {
                let (k, v) = rest.split_once(": ").unwrap();
                assert_eq!(k, key, "{rest}");
                return v.to_string();
            }
        }
    }

    /// Lets the case go on past its next `wait_parent`.
    fn go_on(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap(), "go").unwrap();
    }

    /// Ends the case (its stdin closes) and checks it passed.
    fn finish(mut self) {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut self.out, &mut rest);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "hostile case failed: {rest}");
    }
}

/// A node the unprivileged user can reach (nicfs makes the socket 0666).
fn daemon(slots: u32, args: &[&str]) -> Daemon {
    let d = Daemon::start_with(slots, args);
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

/// Root creates `/name` holding `data` (inode: the `nth` of its first range) and has it
/// published; returns its inode.
fn root_file(root: &mut Client, nth: u64, name: &[u8], data: &[u8]) -> u64 {
    let ino = root.attached.inodes.first + nth;
    let mut e = EntryBuilder::new();
    let img = InodeImage {
        ino,
        parent: 1,
        mode: libc::S_IFREG | 0o644,
        nlink: 1,
        size: data.len() as u64,
        ..Default::default()
    };
    e.inode(&img, true);
    e.dirent(1, name, ino, dtype::REG);
    e.write(ino, 0, data);
    root.append(&e);
    root.chunk_ready();
    assert_eq!(expect_published(root).published_lsn, root.tail);
    root.release_all();
    ino
}

/// Root creates the directory `/name` (the first inode of its range; mode, owner and group
/// as given), with the root's link count raised as nicfs checks, and has it published;
/// returns its inode.
fn root_dir(root: &mut Client, name: &[u8], mode: u32, uid: u32, gid: u32) -> u64 {
    let ino = root.attached.inodes.first;
    let mut e = EntryBuilder::new();
    let img = InodeImage { ino, parent: 1, mode: libc::S_IFDIR | mode, uid, gid, nlink: 2, ..Default::default() };
    e.inode(&img, true);
    e.dirent(1, name, ino, dtype::DIR);
    let root_img = root.public().load().unwrap().inodes[&1].img;
    e.inode(&InodeImage { nlink: root_img.nlink + 1, ..root_img }, false);
    root.append(&e);
    root.chunk_ready();
    assert_eq!(expect_published(root).published_lsn, root.tail);
    root.release_all();
    ino
}

/// Waits (bounded) until the status file's refusal count of `kind` is at least `n`.
fn refusals_at_least(d: &Daemon, kind: &str, n: u64) {
    d.wait_status(&format!("{n} refusals of {kind}"), |s| s["refusals"][kind].as_u64() >= Some(n));
}

/// C1: a client that truncates or grows its own log file, then announces a chunk, does not
/// kill nicfs (SIGBUS on its mapping): its session fails with the reason, root works on,
/// and a log file left the wrong size does not stop the next start.
#[test]
fn a_client_that_resizes_its_log_fails_alone_and_nicfs_restarts() {
    let mut d = daemon(4, &[]);
    let mut h = Hostile::start(NOBODY, "resize", &d, &[]);
    let grown = h.said("grown");
    let left = h.said("shrunk and left");
    assert!(left.contains("resized"), "{left}");
    let shrunk = h.said("shrunk");
    let slot: u32 = h.said("holding slot").parse().unwrap();
    println!("grown: {grown}\nshrunk: {shrunk}");
    assert!(d.alive(), "nicfs survived: grown {grown}, shrunk {shrunk}");
    assert!(grown.contains("resized") || grown.contains("closed"), "{grown}");
    assert!(shrunk.contains("resized") || shrunk.contains("shrank") || shrunk.contains("closed"), "{shrunk}");
    refusals_at_least(&d, "log_resized", 3);

    let mut root = Client::attach(&d.socket);
    let ino = root_file(&mut root, 0, b"rootfile", b"root's data");
    drop(root);

    // nicfs dies while the attacker's log file is the wrong size; it must start again.
    let log = d.node.join(linefs_pm::node::log_file_name(slot));
    let want = linefs_pm::layout::Superblock::read(&linefs_pm::PmRegion::open(&d.node.join("public.pm")).unwrap())
        .unwrap()
        .geometry
        .log_size();
    assert_ne!(std::fs::metadata(&log).unwrap().len(), want, "the attack left the file resized");
    d.stop(libc::SIGKILL);
    d.launch();
    assert_eq!(std::fs::metadata(&log).unwrap().len(), want, "replaced by a fresh file");
    let root = Client::attach(&d.socket);
    assert_eq!(read_file(&root.public(), ino, 11), b"root's data");
    h.finish();
}

/// C2: descriptors a client kept from an earlier session (locked with flock) do not stop
/// `restart-nic`: the node's lock is a file no client is ever handed, which an
/// unprivileged user cannot open.
#[test]
fn descriptors_kept_from_an_earlier_session_cannot_lock_nicfs_out() {
    let mut d = daemon(4, &[]);
    let mut h = Hostile::start(NOBODY, "lock", &d, &[]);
    let locked = h.said("locked");
    assert!(locked.starts_with("locked "), "the attacker holds locks on what it was given: {locked}");
    assert_eq!(h.said("lock file"), format!("errno {}", libc::EACCES));
    let (st, _) = d.stop(libc::SIGTERM);
    assert!(st.success());
    d.launch();
    let mut root = Client::attach(&d.socket);
    root_file(&mut root, 0, b"after", b"restarted");
    h.finish();
}

/// C3: with nicfs running as root, an unprivileged process is refused the kworker's place
/// (it would be sent every copy list and could answer without copying); root's data is
/// copied and reads back.
#[test]
fn an_unprivileged_process_cannot_register_as_the_kworker() {
    let mut d = daemon(2, &[]);
    let mut h = Hostile::start(NOBODY, "kworker", &d, &[]);
    assert_eq!(h.said("kworker"), format!("errno {}", libc::EPERM));
    h.finish();
    refusals_at_least(&d, "kworker", 1);
    assert!(d.status()["host"]["kworker_pid"].is_null(), "{}", d.status()["host"]);
    let mut root = Client::attach(&d.socket);
    let data = vec![0x5a; 100_000];
    let ino = root_file(&mut root, 0, b"fsynced", &data);
    assert_eq!(read_file(&root.public(), ino, data.len()), data);
    assert!(d.alive());
}

/// C4: thousands of idle connections from one user: nicfs starts no thread for those past
/// the per-uid limit (it answers EUSERS and closes them), stays up, and root attaches and
/// works meanwhile.
#[test]
fn thousands_of_idle_connections_from_one_user_do_not_stop_nicfs() {
    let mut d = daemon(4, &[]);
    let mut h = Hostile::start(NOBODY, "flood", &d, &[("HOSTILE_CONNECTIONS", "2500".into())]);
    let opened: u64 = h.said("opened").parse().unwrap();
    assert!(opened >= 2000, "{opened}");
    assert_eq!(h.said("refused"), format!("errno {}", libc::EUSERS));
    let st = d.wait_status("the refusals counted", |s| s["refusals"]["connections"].as_u64() >= Some(opened - 64));
    assert!(st["unprivileged_connections"].as_u64().unwrap() <= 64, "{st}");
    assert!(d.alive());
    let t = Instant::now();
    let mut root = Client::attach(&d.socket);
    root_file(&mut root, 0, b"still", b"works");
    assert!(t.elapsed() < Duration::from_secs(5), "root waited {:?}", t.elapsed());
    h.finish();
    assert!(d.alive());
}

/// C5: reservations and allocations larger than the free space are refused and take
/// nothing; an allocation logged by one user cannot use the space root reserved, and root
/// then writes within its reservation.
#[test]
fn a_refused_allocation_takes_nothing_and_root_s_reservation_holds() {
    let d = daemon(4, &[]);
    let mut root = Client::attach(&d.socket);
    // /pub, the attacker's own directory.
    let pub_dir = root_dir(&mut root, b"pub", 0o755, NOBODY, NOBODY);
    let Control::Space(before) = root.request(Control::StatFs) else { panic!() };
    // Root reserves all but 40 blocks of what may be reserved.
    let mine = before.free_blocks - 40;
    assert_eq!(root.request(Control::ReserveBlocks(Blocks { count: mine })), Control::Ok);

    let mut h = Hostile::start(NOBODY, "alloc", &d, &[("HOSTILE_DIR", pub_dir.to_string())]);
    assert!(h.said("reserve more than free").starts_with(&format!("errno {}", libc::ENOSPC)));
    assert!(h.said("reserve u64::MAX").starts_with("errno "));
    assert_eq!(h.said("free after refusals"), "40", "refusals took nothing");
    let free: u64 = h.said("free before the allocations").parse().unwrap();
    let alloc = h.said("huge alloc");
    assert!(!alloc.contains("published"), "{alloc}");
    let small = h.said("alloc beyond the unreserved space");
    println!("huge: {alloc}\nbeyond: {small}");
    assert!(!small.contains("published"), "{small}");
    h.finish();
    assert!(d.wait_status("the attacker's session gone", |s| s["sessions"].as_array().unwrap().len() == 1).is_object());
    let Control::Space(after) = root.request(Control::StatFs) else { panic!() };
    assert_eq!(after.free_blocks, free, "the attacker's refused allocations took no block");

    // Root writes within its reservation: 600 KiB, in four entries.
    let part = vec![0xa5u8; 150 << 10];
    let big = root.attached.inodes.first + 1;
    let mut e = EntryBuilder::new();
    let img = InodeImage {
        ino: big,
        parent: 1,
        mode: libc::S_IFREG | 0o644,
        nlink: 1,
        size: 4 * part.len() as u64,
        ..Default::default()
    };
    e.inode(&img, true);
    e.dirent(1, b"big", big, dtype::REG);
    root.append(&e);
    for i in 0..4 {
        let mut e = EntryBuilder::new();
        e.write(big, i * part.len() as u64, &part);
        root.append(&e);
    }
    root.chunk_ready();
    let p = expect_published(&root);
    assert_eq!(p.published_lsn, root.tail, "root's session did not fail");
    assert_eq!(read_file(&root.public(), big, 4 * part.len()), part.repeat(4));
}

/// D (slots): one user cannot take every log slot: it holds at most
/// `--max-slots-per-uid`, and the last free slot is kept for root — also after root
/// unmounts and another user tries to grab it.
#[test]
fn a_user_cannot_take_the_slots_root_needs() {
    let d = daemon(4, &["--max-slots-per-uid", "2"]);
    let mut a = Hostile::start(NOBODY, "slots", &d, &[("HOSTILE_ATTACHES", "3".into())]);
    assert_eq!(a.said("attach 1"), "ok");
    assert_eq!(a.said("attach 2"), "ok");
    assert_eq!(a.said("attach 3"), format!("errno {}", libc::EUSERS));
    let mut b = Hostile::start(NOBODY - 1, "slots", &d, &[("HOSTILE_ATTACHES", "2".into())]);
    assert_eq!(b.said("attach 1"), "ok");
    assert_eq!(b.said("attach 2"), format!("errno {}", libc::EBUSY), "the last slot is root's");
    let root = Client::attach(&d.socket);
    drop(root);
    let mut c = Hostile::start(NOBODY - 2, "slots", &d, &[("HOSTILE_ATTACHES", "1".into())]);
    assert_eq!(c.said("attach 1"), format!("errno {}", libc::EBUSY), "root's slot, freed, stays root's");
    c.finish();
    let root = Client::attach(&d.socket);
    drop(root);
    refusals_at_least(&d, "slots", 3);
    a.finish();
    b.finish();
}

/// D (departed): a client that forks and lets its parent exit keeps its connection in the
/// child; that must not make every later attach wait (it waited 30 s).
#[test]
fn a_client_that_forks_and_exits_does_not_hold_up_attach() {
    let d = daemon(4, &[]);
    let pidfile = d.dir.path().join("grandchild.pid");
    std::fs::write(&pidfile, b"").unwrap();
    std::fs::set_permissions(&pidfile, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut h = Hostile::start(NOBODY, "fork", &d, &[("HOSTILE_PIDFILE", pidfile.display().to_string())]);
    assert_eq!(h.said("forked"), "parent exits");
    drop(h.child.stdin.take());
    assert!(h.child.wait().unwrap().success());
    let pid: i32 =
        wait_for("the grandchild's pid", || std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()));
    let t = Instant::now();
    let mut root = Client::attach(&d.socket);
    let waited = t.elapsed();
    root_file(&mut root, 0, b"quick", b"attach");
    // And no later attach waits for it at all.
    let t = Instant::now();
    let again = Client::attach(&d.socket);
    let waited_again = t.elapsed();
    drop(again);
    // SAFETY: kill(2) of the grandchild this test started (through the hostile case).
    unsafe { libc::kill(pid, libc::SIGKILL) };
    assert!(waited < Duration::from_secs(3), "root's attach waited {waited:?}");
    assert!(waited_again < Duration::from_millis(700), "root's second attach waited {waited_again:?}");
}

/// D (fenced): a session that ignores a revoke is fenced after the lease timeout; its user
/// is not let straight back in (no lease during the backoff), so it cannot freeze root's
/// calls again and again by re-attaching.
#[test]
fn a_fenced_user_is_not_let_straight_back_in() {
    let d = daemon(4, &["--lease-timeout-ms", "2000", "--fenced-backoff-ms", "10000"]);
    let mut root = Client::attach(&d.socket);
    let shared = root_file(&mut root, 0, b"shared", b"root's");
    let mut h = Hostile::start(NOBODY, "fence", &d, &[("HOSTILE_INO", shared.to_string())]);
    assert_eq!(h.said("read lease"), "granted");
    let t = Instant::now();
    root.write_lease(shared);
    let first = t.elapsed();
    assert!(first < Duration::from_secs(6), "{first:?}");
    h.go_on();
    assert_eq!(h.said("after fencing"), format!("errno {}", libc::EAGAIN));
    refusals_at_least(&d, "fenced", 1);
    // The attacker's new session is attached and would ignore a revoke again: it holds
    // nothing, so root's next write lease comes at once, not after another lease timeout.
    root.release(shared);
    let t = Instant::now();
    root.write_lease(shared);
    assert!(t.elapsed() < Duration::from_secs(1), "root is not held up: {:?}", t.elapsed());
    h.finish();
}

/// Credentials from the socket: a process in a supplementary group connects and leaves its
/// connection to a child it forked; by the time the child attaches, the connecting pid is
/// gone (reaped), so `/proc/PID/status` says nothing. Its groups are the kernel's record of
/// the connecting process (SO_PEERGROUPS): the child may create a name in a directory only
/// that group may write.
#[test]
fn supplementary_groups_come_from_the_socket_not_from_a_departed_pid() {
    const GROUP: u32 = 4242;
    let d = daemon(4, &[]);
    let mut root = Client::attach(&d.socket);
    let gdir = root_dir(&mut root, b"gdir", 0o770, 0, GROUP);
    let mut h = Hostile::start_in_groups(NOBODY, &[GROUP], "groups", &d, &[("HOSTILE_DIR", gdir.to_string())]);
    assert_eq!(h.said("connected"), "parent exits");
    assert!(h.child.wait().unwrap().success(), "the connecting process is gone and reaped");
    let created = h.said("created in the group's directory");
    assert_eq!(created, "published");
    drop(h.child.stdin.take());
    let loaded = root.public().load().unwrap();
    assert!(loaded.dirs[&gdir].iter().any(|e| e.name == b"viagroup"));
}

// ---- The hostile side (run as an unprivileged user by the tests above) ----

fn say(key: &str, value: impl std::fmt::Display) {
    println!("HOSTILE {key}: {value}");
}

/// Waits for the parent's `go` (or the end of stdin).
fn wait_parent() {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

/// Attaches, retrying while the slot of an ended session is being released.
fn attach_retry(socket: &std::path::Path) -> raw::Session {
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        match raw::attach(socket) {
            Ok(s) => return s,
            Err(e) if Instant::now() < end => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("cannot attach: {e:?}"),
        }
    }
}

/// What the session hears after announcing a chunk: Rejected, Published, an Error, or the
/// end of the connection.
fn outcome(s: &raw::Session, bulk: &raw::Conn) -> String {
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if let Some(g) = s.control.recv(Duration::from_millis(100)) {
            match g.kind {
                raw::REJECTED => {
                    let n = u16::from_le_bytes([g.payload[12], g.payload[13]]) as usize;
                    return format!("rejected {}", String::from_utf8_lossy(&g.payload[16..16 + n]));
                }
                raw::ERROR => return format!("error {:?}", g.error()),
                _ => {}
            }
        }
        if let Some(g) = bulk.recv(Duration::from_millis(100)) {
            if g.kind == raw::PUBLISHED {
                return "published".into();
            }
        }
    }
    // No answer: ask, and see whether the session is refused.
    "no answer".into()
}

#[test]
#[ignore = "run by the tests above as an unprivileged user"]
fn hostile_child() {
    let Ok(case) = std::env::var("HOSTILE_CASE") else { return };
    let socket = std::path::PathBuf::from(std::env::var_os("HOSTILE_SOCKET").unwrap());
    let node = std::path::PathBuf::from(std::env::var_os("HOSTILE_NODE").unwrap());
    assert_ne!(rustix::process::geteuid().as_raw(), 0, "run as an unprivileged user");
    match case.as_str() {
        "resize" => {
            // Grow the log file, then announce a chunk.
            let s = attach_retry(&socket);
            let len = s.log.metadata().unwrap().len();
            s.log.set_len(len + (1 << 20)).unwrap();
            let mut b = s.bulk(&socket);
            b.send(raw::CHUNK_READY, &(s.start_lsn + 4096).to_le_bytes()).unwrap();
            say("grown", resized_outcome(&s, &b));
            drop((s, b));
            // Shrink it to its header and a page of ring, then announce a chunk past that,
            // and leave: nicfs reads the shrunk mapping as the session ends.
            let mut s = attach_retry(&socket);
            let mut e = EntryBuilder::new();
            e.write(s.ino_first, 0, &[1u8; 64 << 10]);
            s.append(e.payload());
            s.log.set_len(s.ring_offset + 4096).unwrap();
            let mut b = s.bulk(&socket);
            b.send(raw::CHUNK_READY, &s.tail.to_le_bytes()).unwrap();
            say("shrunk and left", resized_outcome(&s, &b));
            drop((s, b));
            // Again, and stay.
            let mut s = attach_retry(&socket);
            let mut e = EntryBuilder::new();
            e.write(s.ino_first, 0, &[1u8; 64 << 10]);
            s.append(e.payload());
            s.log.set_len(s.ring_offset + 4096).unwrap();
            let mut b = s.bulk(&socket);
            b.send(raw::CHUNK_READY, &s.tail.to_le_bytes()).unwrap();
            say("shrunk", resized_outcome(&s, &b));
            say("holding slot", s.slot);
            wait_parent();
        }
        "lock" => {
            let s = attach_retry(&socket);
            let mut held = Vec::new();
            let fds: Vec<std::os::fd::BorrowedFd> = std::iter::once(std::os::fd::AsFd::as_fd(&s.log))
                .chain(s.others.iter().map(std::os::fd::AsFd::as_fd))
                .collect();
            for fd in &fds {
                if rustix::fs::flock(fd, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_ok() {
                    held.push(format!("{fd:?}"));
                }
            }
            say("locked", format!("locked {}", held.len()));
            let lock = node.join(linefs_pm::node::LOCK_FILE);
            let r = std::fs::OpenOptions::new().read(true).open(&lock);
            say("lock file", format!("errno {}", r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)));
            wait_parent();
            drop(s);
        }
        "kworker" => {
            let mut c = raw::Conn::connect(&socket).unwrap();
            c.send(raw::HELLO, &raw::hello(raw::KWORKER, raw::ROLE_KWORKER, 0)).unwrap();
            let g = c.recv(Duration::from_secs(10)).expect("an answer");
            say("kworker", format!("errno {}", g.error().map_or(0, |e| e.0)));
        }
        "flood" => {
            let want: usize = std::env::var("HOSTILE_CONNECTIONS").unwrap().parse().unwrap();
            let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            // SAFETY: get/setrlimit with a live struct.
            unsafe {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
                lim.rlim_cur = lim.rlim_max.min(want as u64 + 256);
                libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            }
            let end = Instant::now() + Duration::from_secs(30);
            let mut conns = Vec::new();
            while conns.len() < want && Instant::now() < end {
                match raw::Conn::connect(&socket) {
                    Ok(c) => conns.push(c),
                    Err(e) => panic!("connect {}: {e}", conns.len()),
                }
            }
            say("opened", conns.len());
            let last = conns.last().unwrap().recv(Duration::from_secs(5)).and_then(|g| g.error());
            say("refused", format!("errno {}", last.map_or(0, |e| e.0)));
            wait_parent();
        }
        "alloc" => {
            let dir: u64 = std::env::var("HOSTILE_DIR").unwrap().parse().unwrap();
            let mut s = attach_retry(&socket);
            let (free, _) = s.statfs();
            say("reserve more than free", format!("errno {}", s.reserve(free + 1).map_or(0, |e| e.0)));
            say("reserve u64::MAX", format!("errno {}", s.reserve(u64::MAX).map_or(0, |e| e.0)));
            say("free after refusals", s.statfs().0);
            // Two files of its own in its own directory, published.
            let mut b = s.bulk(&socket);
            let (one, two) = (s.ino_first, s.ino_first + 1);
            assert!(s.lease(dir, true).is_some_and(|g| g.kind == raw::LEASE_GRANTED), "a write lease on its directory");
            let mut e = EntryBuilder::new();
            let img = InodeImage {
                ino: one,
                parent: dir,
                mode: libc::S_IFREG | 0o644,
                uid: NOBODY,
                gid: NOBODY,
                nlink: 1,
                ..Default::default()
            };
            e.inode(&img, true);
            e.dirent(dir, b"one", one, dtype::REG);
            e.inode(&InodeImage { ino: two, ..img }, true);
            e.dirent(dir, b"two", two, dtype::REG);
            s.append(e.payload());
            b.send(raw::CHUNK_READY, &s.tail.to_le_bytes()).unwrap();
            assert_eq!(outcome(&s, &b), "published");
            say("free before the allocations", s.statfs().0);
            // An ALLOC larger than the node.
            let mut e = EntryBuilder::new();
            // 16 MiB: a file may be that large, the node (8 MiB) cannot hold it.
            e.alloc(one, 0, 16 << 20);
            s.append(e.payload());
            b.send(raw::CHUNK_READY, &s.tail.to_le_bytes()).unwrap();
            say("huge alloc", outcome(&s, &b));
            drop((s, b));
            // Then one that fits the free space but not beside root's reservation.
            let mut s = attach_retry(&socket);
            let mut b = s.bulk(&socket);
            assert!(s.lease(two, true).is_some_and(|g| g.kind == raw::LEASE_GRANTED));
            let mut e = EntryBuilder::new();
            // 40 blocks may be reserved, 104 are not reserved by root (the margin kept for
            // publication's metadata is not a reservation): 200 fit only into root's.
            e.alloc(two, 0, 200 * 4096);
            s.append(e.payload());
            b.send(raw::CHUNK_READY, &s.tail.to_le_bytes()).unwrap();
            say("alloc beyond the unreserved space", outcome(&s, &b));
        }
        "slots" => {
            let n: usize = std::env::var("HOSTILE_ATTACHES").unwrap().parse().unwrap();
            let mut held = Vec::new();
            for i in 1..=n {
                match raw::attach(&socket) {
                    Ok(s) => {
                        say(&format!("attach {i}"), "ok");
                        held.push(s);
                    }
                    Err((e, _)) => say(&format!("attach {i}"), format!("errno {e}")),
                }
            }
            wait_parent();
        }
        "fork" => {
            let s = attach_retry(&socket);
            let pidfile = std::env::var("HOSTILE_PIDFILE").unwrap();
            say("forked", "parent exits");
            std::io::stdout().flush().unwrap();
            // SAFETY: fork in a test process; the child only writes a file, sleeps and exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                let devnull = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
                // SAFETY: dup2 onto the standard descriptors, so that the parent's reader ends.
                unsafe {
                    libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&devnull), 1);
                    libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&devnull), 2);
                }
                std::fs::write(&pidfile, std::process::id().to_string()).unwrap();
                std::thread::sleep(Duration::from_secs(60));
                drop(s);
                // SAFETY: leave without running the test harness's exit path twice.
                unsafe { libc::_exit(0) };
            }
            // SAFETY: the parent leaves at once, its session's connection alive in the child.
            unsafe { libc::_exit(0) };
        }
        "fence" => {
            let ino: u64 = std::env::var("HOSTILE_INO").unwrap().parse().unwrap();
            let mut s = attach_retry(&socket);
            let g = s.lease(ino, false).expect("an answer");
            say(
                "read lease",
                if g.kind == raw::LEASE_GRANTED { "granted".to_string() } else { format!("{:?}", g.error()) },
            );
            // Ignore the revoke that comes; wait until told.
            wait_parent();
            drop(s);
            let mut s = attach_retry(&socket);
            let g = s.lease(ino, false).expect("an answer");
            say("after fencing", format!("errno {}", g.error().map_or(0, |e| e.0)));
            // Stay attached, ignoring any revoke, until told.
            wait_parent();
            drop(s);
        }
        "groups" => {
            let dir: u64 = std::env::var("HOSTILE_DIR").unwrap().parse().unwrap();
            // Connect here, attach from a child once this process is gone and reaped.
            // (Both connections: the bulk one must come from the pid the control one did.)
            let conn = raw::Conn::connect(&socket).unwrap();
            let bulk = raw::Conn::connect(&socket).unwrap();
            say("connected", "parent exits");
            std::io::stdout().flush().unwrap();
            let parent = std::process::id() as i32;
            // SAFETY: fork in a test process; the parent leaves at once.
            if unsafe { libc::fork() } != 0 {
                // SAFETY: leave without the harness's exit path.
                unsafe { libc::_exit(0) };
            }
            // SAFETY: kill(pid, 0) only asks whether the pid exists.
            while unsafe { libc::kill(parent, 0) } == 0 {
                std::thread::sleep(Duration::from_millis(10));
            }
            let mut s = raw::attach_over(conn).expect("attached");
            let mut b = s.bulk_over(bulk);
            let outcome = match s.lease(dir, true) {
                Some(g) if g.kind == raw::LEASE_GRANTED => {
                    let ino = s.ino_first;
                    let mut e = EntryBuilder::new();
                    let img = InodeImage {
                        ino,
                        parent: dir,
                        mode: libc::S_IFREG | 0o644,
                        uid: NOBODY,
                        gid: NOBODY,
                        nlink: 1,
                        ..Default::default()
                    };
                    e.inode(&img, true);
                    e.dirent(dir, b"viagroup", ino, dtype::REG);
                    s.append(e.payload());
                    b.send(raw::CHUNK_READY, &s.tail.to_le_bytes()).unwrap();
                    outcome(&s, &b)
                }
                other => format!("lease refused: {:?}", other.and_then(|g| g.error())),
            };
            say("created in the group's directory", outcome);
            std::io::stdout().flush().unwrap();
            // SAFETY: leave without the harness's exit path (this is a forked child).
            unsafe { libc::_exit(0) };
        }
        other => panic!("unknown case {other}"),
    }
}

/// The outcome of a chunk announced on a resized log: the session's failure as a later
/// call reports it, or what came on the connections.
fn resized_outcome(s: &raw::Session, b: &raw::Conn) -> String {
    let o = outcome(s, b);
    if o != "no answer" {
        return o;
    }
    // The failure is reported to the session's later calls.
    let mut c = raw::Conn::from_stream(s.control.s.try_clone().unwrap());
    c.send(raw::RESERVE_BLOCKS, &1u64.to_le_bytes()).unwrap();
    match c.recv(Duration::from_secs(5)) {
        Some(g) => format!("{:?}", g.error()),
        None => "closed".into(),
    }
}
