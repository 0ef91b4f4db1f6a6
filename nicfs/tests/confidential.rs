//! Confidentiality of the node (issue 21, class B; docs/SECURITY.md): an unprivileged
//! process — the test binary re-run as uid and gid 65534 with no other group, speaking the
//! protocol itself — tries every way to the bytes of root's mode-0600 file and of root's
//! unpublished log, and never sees them; a member of the trusted group is handed the public
//! file and does (which also shows the search would find the bytes if they leaked).
//!
//! Ways tried: attach and look for a public descriptor; the one descriptor it gets (its own
//! log), read and reopened through /proc/self/fd; attaching in the mount daemon's or the
//! kworker's role; joining root's session as its bulk connection; `public.pm`, `leases.pm`,
//! every log file and the node directory by path; the status file; nicfs's /proc/PID/fd
//! (each descriptor), mem, map_files and environ.

mod support;

use linefs_pm::record::{dtype, EntryBuilder, InodeImage};
use linefs_proto::*;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use support::*;

const NOBODY: u32 = 65534;
/// The group `--trusted-group` names in this test.
const TRUSTED_GID: u32 = 4242;
/// In root's 0600 file, published.
const SECRET: &[u8] = b"published-secret:9f1c2a7e-only-root-reads-this";
/// In root's log, never published while the others look.
const UNPUBLISHED: &[u8] = b"unpublished-secret:4b8d01c3-still-in-roots-log";

fn has(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Runs the ignored test `name` of this binary as `uid`/`gid` with exactly the
/// supplementary groups `groups`; returns its stdout (asserting it passed).
fn run_as(name: &str, uid: u32, gid: u32, groups: &[u32], env: &[(&str, String)]) -> String {
    let groups = groups.to_vec();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--include-ignored"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (setgroups, setgid, setuid) on data it owns.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{name} failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn an_unprivileged_process_never_reads_roots_bytes_and_the_trusted_group_does() {
    let d = Daemon::start_with(3, &["--trusted-group", &TRUSTED_GID.to_string()]);
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let node_mode = std::fs::metadata(&d.node).unwrap().permissions().mode() & 0o7777;
    assert_eq!(node_mode, 0o700, "nicfs keeps the node directory to itself");
    for f in std::fs::read_dir(&d.node).unwrap() {
        let f = f.unwrap();
        let mode = f.metadata().unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o600, "{}", f.path().display());
    }

    // Root's /secret, 0600, published; then more of it in root's log, not published.
    let mut root = Client::attach(&d.socket);
    assert!(root.attached.public, "root is trusted");
    let ino = root.attached.inodes.first;
    let mut e = EntryBuilder::new();
    let img = InodeImage {
        ino,
        parent: 1,
        mode: libc::S_IFREG | 0o600,
        nlink: 1,
        size: SECRET.len() as u64,
        ..Default::default()
    };
    e.inode(&img, true);
    e.dirent(1, b"secret", ino, dtype::REG);
    e.write(ino, 0, SECRET);
    root.append(&e);
    root.chunk_ready();
    assert_eq!(expect_published(&root).published_lsn, root.tail);
    assert_eq!(read_file(&root.public(), ino, SECRET.len()), SECRET);
    let mut later = EntryBuilder::new();
    later.write(ino, 0, UNPUBLISHED);
    root.append(&later);

    let status_mode = std::fs::metadata(&d.status).unwrap().permissions().mode() & 0o777;
    assert_eq!(status_mode & 0o007, 0, "the status file is not world-readable ({status_mode:o})");
    let pid = d.child.as_ref().unwrap().id();
    let env = [
        ("NICFS_TEST_SOCKET", d.socket.display().to_string()),
        ("NICFS_TEST_NODE", d.node.display().to_string()),
        ("NICFS_TEST_STATUS", d.status.display().to_string()),
        ("NICFS_TEST_PID", pid.to_string()),
        ("NICFS_TEST_ROOT_SESSION", root.attached.session.to_string()),
    ];
    let out = run_as("peeker", NOBODY, NOBODY, &[], &env);
    println!("{out}");
    assert!(out.contains("peeker done"), "{out}");

    // A member of the trusted group (a supplementary group) is handed the public file.
    let out = run_as("trusted_reader", NOBODY, NOBODY, &[TRUSTED_GID], &env);
    assert!(out.contains("trusted reader read the secret"), "{out}");
    // ... and by its primary group too.
    let out = run_as("trusted_reader", NOBODY, TRUSTED_GID, &[], &env);
    assert!(out.contains("trusted reader read the secret"), "{out}");
    assert!(d.child.as_ref().is_some(), "nicfs still runs");
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap())
}

/// What came of one attempt: the bytes read, or why not.
fn attempt(what: &str, r: std::io::Result<Vec<u8>>) -> Option<Vec<u8>> {
    match r {
        Ok(bytes) => {
            println!("tried {what}: read {} bytes", bytes.len());
            assert!(!has(&bytes, SECRET), "{what}: root's published bytes leaked");
            assert!(!has(&bytes, UNPUBLISHED), "{what}: root's unpublished bytes leaked");
            Some(bytes)
        }
        Err(e) => {
            println!("tried {what}: {e}");
            None
        }
    }
}

fn read_path(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn list(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut names = Vec::new();
    for e in std::fs::read_dir(path)? {
        names.extend_from_slice(e?.file_name().as_encoded_bytes());
        names.push(b'\n');
    }
    Ok(names)
}

/// The unprivileged process: every way it might reach root's bytes.
#[test]
#[ignore = "run by an_unprivileged_process_never_reads_roots_bytes_and_the_trusted_group_does"]
fn peeker() {
    let Some(socket) = std::env::var_os("NICFS_TEST_SOCKET") else { return };
    let socket = PathBuf::from(socket);
    let (node, status, pid) =
        (env_path("NICFS_TEST_NODE"), env_path("NICFS_TEST_STATUS"), std::env::var("NICFS_TEST_PID").unwrap());
    assert_eq!(rustix::process::geteuid().as_raw(), NOBODY, "run as an unprivileged user");

    // Attach, speaking the protocol itself: the answer says no public file follows, and
    // only one descriptor (the log) comes.
    let (control, r) = hello_control(&socket);
    let Control::Attached(a) = r.frame.msg else { panic!("not attached: {:?}", r.frame.msg) };
    assert!(!a.public, "an unprivileged client is not handed the public file");
    assert_eq!(r.fds.len(), 1, "one descriptor, the log file's");
    let log = std::fs::File::from(r.fds.into_iter().next().unwrap());
    let mut own = Vec::new();
    (&log).read_to_end(&mut own).unwrap();
    attempt("its own log descriptor", Ok(own));
    let fd = std::os::fd::AsRawFd::as_raw_fd(&log);
    attempt("its own log reopened through /proc/self/fd", read_path(Path::new(&format!("/proc/self/fd/{fd}"))));
    drop((control, log));

    // Claiming to be a mount daemon (root's role), or a kworker, on the control channel;
    // joining root's session as its bulk connection.
    for role in [Role::MountDaemon, Role::Kworker] {
        let control = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        let hello = Hello { channel: Channel::Control, role, session: 0 };
        write_frame(&control, &Frame { id: 1, msg: Control::Hello(hello) }).unwrap();
        let r: Received<Control> =
            recv_frame(&control, Party::Nicfs, Some(std::time::Duration::from_secs(10))).unwrap();
        assert!(r.fds.is_empty(), "{role:?}: descriptors came");
        let Control::Error(e) = r.frame.msg else { panic!("{role:?} attached: {:?}", r.frame.msg) };
        println!("tried the {role:?} role: {} ({})", e.message, e.errno());
    }
    let session: u64 = std::env::var("NICFS_TEST_ROOT_SESSION").unwrap().parse().unwrap();
    let bulk = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let hello = Hello { channel: Channel::Bulk, role: Role::DirectApi, session };
    write_frame(&bulk, &Frame { id: 1, msg: Bulk::Hello(hello) }).unwrap();
    let r: Frame<Bulk> = read_frame(&bulk, Party::Nicfs, Some(std::time::Duration::from_secs(10))).unwrap();
    let Bulk::Error(e) = r.msg else { panic!("joined root's session: {:?}", r.msg) };
    assert_eq!(e.errno(), libc::EACCES, "{}", e.message);
    println!("tried root's session as its bulk connection: {}", e.message);

    // The node's files by path.
    let mut denied = 0;
    let mut paths = vec![node.join("public.pm"), node.join("leases.pm")];
    paths.extend((0..3).map(|s| node.join(linefs_pm::node::log_file_name(s))));
    for p in &paths {
        denied += attempt(&p.display().to_string(), read_path(p)).is_none() as usize;
    }
    assert_eq!(denied, paths.len(), "every PM file refused");
    assert!(attempt("list the node directory", list(&node)).is_none());
    assert!(attempt("the status file", read_path(&status)).is_none());

    // nicfs's own process: its descriptors (it holds the PM files open), memory, mappings.
    let proc = PathBuf::from(format!("/proc/{pid}"));
    assert!(attempt("list nicfs's /proc fd", list(&proc.join("fd"))).is_none());
    for n in 0..64 {
        attempt(&format!("nicfs's /proc fd/{n}"), read_path(&proc.join(format!("fd/{n}"))));
    }
    attempt("list nicfs's map_files", list(&proc.join("map_files")));
    attempt("nicfs's mem", read_path(&proc.join("mem")));
    attempt("nicfs's environ", read_path(&proc.join("environ")));

    // The test support client (the same protocol) writes its log all the same.
    let c = wait_for("a slot", || Client::try_attach(&socket).ok());
    assert!(c.public_fd.is_none());
    println!("peeker done");
}

/// A member of the trusted group: handed the public file, it reads root's bytes from it.
#[test]
#[ignore = "run by an_unprivileged_process_never_reads_roots_bytes_and_the_trusted_group_does"]
fn trusted_reader() {
    let Some(socket) = std::env::var_os("NICFS_TEST_SOCKET") else { return };
    let (_control, r) = hello_control(Path::new(&socket));
    let Control::Attached(a) = r.frame.msg else { panic!("not attached: {:?}", r.frame.msg) };
    assert!(a.public, "the trusted group is handed the public file");
    assert_eq!(r.fds.len(), 2);
    let public = std::fs::File::from(r.fds.into_iter().nth(1).unwrap());
    let mut bytes = Vec::new();
    (&public).read_to_end(&mut bytes).unwrap();
    assert!(has(&bytes, SECRET), "the public file holds root's published bytes");
    println!("trusted reader read the secret");
}
