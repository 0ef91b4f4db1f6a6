//! Process handling: finding the daemons' executables, spawning them detached, waiting for a
//! mount daemon's readiness, pid files, liveness checks that survive pid reuse, signalling,
//! and the mounts they leave (read with [`linefs_pm::mountinfo`]).
//!
//! Readiness protocol of a mount daemon: the CLI creates a pipe, the daemon inherits its write
//! end as `--ready-fd N` and writes one byte once its mount serves. EOF before that byte means
//! the daemon died; its log says why ([`failure_reason`]). nicfs and kworker have no such
//! descriptor: [`crate::daemons`] watches their socket and status file instead.
//!
//! A pid recorded in DIR/run is only signalled if `/proc/PID/cmdline` still names one of our
//! daemons, so a pid reused by an unrelated process after a reboot is never killed.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use linefs_pm::mountinfo::{self, MountInfo};
use rustix::fs::FlockOperation;
use rustix::io::Errno;
use rustix::mount::UnmountFlags;

use crate::util::{fail, CliResult, Context};

/// Where the FUSE daemon comes from.
#[derive(Debug, Clone)]
pub struct DaemonExe {
    pub program: PathBuf,
    /// Arguments that select the daemon (the hidden `fuse-daemon` verb when we run ourselves).
    pub prefix: Vec<String>,
}

/// Marks in a command line that identify our mount daemons.
const DAEMON_MARKS: [&str; 4] = ["linefs-fuse", "fuse-daemon", "linefs-passthrough", "passthrough-daemon"];

/// The executables of a node's own daemons, recognised by their program name.
pub const NODE_DAEMONS: [&str; 2] = ["nicfs", "kworker"];

/// The two mount daemons: linefs's (`linefs-fuse`, fuse-mount) and the benchmarks' FUSE
/// passthrough (`linefs-passthrough`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MountDaemon {
    Linefs,
    Passthrough,
}

impl MountDaemon {
    /// The program's name, looked for beside `linefs`.
    pub fn program(self) -> &'static str {
        match self {
            MountDaemon::Linefs => "linefs-fuse",
            MountDaemon::Passthrough => "linefs-passthrough",
        }
    }

    /// The hidden verb of `linefs` that runs the same code.
    pub fn verb(self) -> &'static str {
        match self {
            MountDaemon::Linefs => "fuse-daemon",
            MountDaemon::Passthrough => "passthrough-daemon",
        }
    }

    /// The variable that names the program (a path, or `self`).
    fn env(self) -> &'static str {
        match self {
            MountDaemon::Linefs => "LINEFS_FUSE",
            MountDaemon::Passthrough => "LINEFS_PASSTHROUGH",
        }
    }
}

/// Finds the mount daemon `which`: its variable (`$LINEFS_FUSE`, `$LINEFS_PASSTHROUGH`: a
/// path, or `self`; `LINEFS_FUSE=self` also means `self` for the passthrough), else the
/// program beside the current executable, else this executable's hidden verb (the same code,
/// linked into `linefs`).
pub fn daemon_exe(which: MountDaemon) -> CliResult<DaemonExe> {
    let me = std::env::current_exe().ctx(|| "cannot find the linefs executable")?;
    let myself = DaemonExe { program: me.clone(), prefix: vec![which.verb().to_string()] };
    let fuse_self = std::env::var_os("LINEFS_FUSE").is_some_and(|p| p == "self");
    match std::env::var_os(which.env()) {
        Some(p) if p == "self" => return Ok(myself),
        Some(p) => return Ok(DaemonExe { program: PathBuf::from(p), prefix: Vec::new() }),
        None if fuse_self => return Ok(myself),
        None => {}
    }
    if let Some(dir) = me.parent() {
        let beside = dir.join(which.program());
        if beside.is_file() {
            return Ok(DaemonExe { program: beside, prefix: Vec::new() });
        }
    }
    Ok(myself)
}

/// Finds the executable `name` (`nicfs`, `kworker`) beside the current one, where
/// `cargo build --bins` puts every binary of the workspace.
pub fn sibling_exe(name: &str) -> CliResult<PathBuf> {
    let me = std::env::current_exe().ctx(|| "cannot find the linefs executable")?;
    let dir = me.parent().unwrap_or(Path::new("/"));
    let exe = dir.join(name);
    if exe.is_file() {
        return Ok(exe);
    }
    Err(fail(format!(
        "{name} not found beside linefs in {} (build it with cargo build --bins, or run the cluster \
         host-only with linefs up --offload off)",
        dir.display()
    )))
}

/// A daemon that has signalled readiness.
#[derive(Debug)]
pub struct Spawned {
    pub pid: i32,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both descriptors are new and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Waits until `fd` is readable or `timeout` passes; true if readable (or hung up).
fn poll_readable(fd: &OwnedFd, timeout: Duration) -> io::Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: pfd is one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(n > 0);
    }
}

/// The length of a log file: where the output of a daemon started now will begin.
pub fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

/// Why a daemon failed, from what it wrote to `log` after byte `from`: the last line that
/// mentions an error (clap's `error: …` comes before its usage lines, tracing's `ERROR`
/// before the exit), else the last line.
pub fn failure_reason(log: &Path, from: u64) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let text = String::from_utf8_lossy(text.get(from as usize..).unwrap_or_default());
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines
        .iter()
        .rev()
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or(lines.last())
        .map(|l| l.to_string())
        .unwrap_or_else(|| "(nothing in its log)".to_string())
}

/// Spawns `program args…` detached from our session (own session and process group,
/// working directory `/`, stdin `/dev/null`, stdout and stderr appended to `log`); `keep_fd`
/// is a descriptor the daemon inherits across exec. Returns its pid; the caller waits for
/// readiness. The working directory matters: a daemon started from inside a mount (xfstests
/// mounts SCRATCH while its shell sits in TEST) would keep that mount busy for its lifetime.
/// Every path handed to a daemon is absolute.
pub fn spawn_detached(program: &Path, args: &[String], log: &Path, keep_fd: Option<RawFd>) -> CliResult<i32> {
    let out = crate::util::open_private_append(log).ctx(|| format!("{}: open log", log.display()))?;
    let err = out.try_clone().ctx(|| format!("{}: open log", log.display()))?;
    let mut cmd = Command::new(program);
    // The output goes to a file: no colour codes (tracing-subscriber honours NO_COLOR).
    cmd.args(args).current_dir("/").env("NO_COLOR", "1").stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: the closure runs in the child between fork and exec and only makes the
    // async-signal-safe calls setsid and fcntl.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(fd) = keep_fd {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let child = cmd.spawn().ctx(|| format!("{}: cannot start", program.display()))?;
    // Not waited for here: the daemon outlives us; alive() reaps it if it dies first.
    Ok(child.id() as i32)
}

/// Spawns a mount daemon (see [`spawn_detached`]) with `--ready-fd` and waits up to
/// `timeout` for its readiness byte.
pub fn spawn_daemon(exe: &DaemonExe, args: &[String], log: &Path, timeout: Duration) -> CliResult<Spawned> {
    let (rd, wr) = pipe().ctx(|| "creating the readiness pipe")?;
    let from = log_len(log);
    let wfd = wr.as_raw_fd();
    let mut all = exe.prefix.clone();
    all.extend_from_slice(args);
    all.extend(["--ready-fd".to_string(), wfd.to_string()]);
    let pid = spawn_detached(&exe.program, &all, log, Some(wfd))?;
    drop(wr);
    let ready = poll_readable(&rd, timeout).ctx(|| "waiting for the daemon")?;
    if !ready {
        kill(pid, libc::SIGKILL);
        wait_exit(pid, Duration::from_secs(5));
        return Err(fail(format!(
            "daemon (pid {pid}) did not become ready within {} s; killed it; its log {} says: {}",
            timeout.as_secs(),
            log.display(),
            failure_reason(log, from)
        )));
    }
    let mut byte = [0u8; 1];
    let n = File::from(rd).read(&mut byte).unwrap_or(0);
    if n == 1 {
        return Ok(Spawned { pid });
    }
    wait_exit(pid, Duration::from_secs(5));
    Err(fail(format!("daemon (pid {pid}) exited: {}", failure_reason(log, from))))
}

/// Sends `sig` to `pid`; false if there is no such process.
pub fn kill(pid: i32, sig: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill only sends a signal to a positive pid.
    unsafe { libc::kill(pid, sig) == 0 }
}

/// Reaps `pid` if it is our exited child; harmless otherwise.
fn reap(pid: i32) {
    let mut status = 0;
    // SAFETY: status is a valid int; WNOHANG never blocks. ECHILD for non-children is ignored.
    unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
}

/// Whether `pid` is a live process: not a zombie, or a zombie thread-group leader whose other
/// threads are still exiting. After SIGKILL the leader turns zombie first; the files of the
/// process (the PM file and its lock among them) are closed only when the last thread is gone.
pub fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    reap(pid);
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let Some(i) = stat.rfind(')') else {
        return false;
    };
    if !matches!(stat[i + 1..].trim_start().chars().next(), Some('Z') | Some('X')) {
        return true;
    }
    // A zombie leader lists its exiting threads (and itself) under task/.
    std::fs::read_dir(format!("/proc/{pid}/task")).map(|d| d.count() > 1).unwrap_or(false)
}

/// The command line of `pid`, its arguments joined by spaces.
fn cmdline(pid: i32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    String::from_utf8_lossy(&raw).replace('\0', " ")
}

/// The file name of the program `pid` runs (its argv\[0\]).
fn program_name(pid: i32) -> String {
    let line = cmdline(pid);
    let argv0 = line.split(' ').next().unwrap_or_default();
    Path::new(argv0).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Whether `pid` is alive and is one of our daemons (guards against pid reuse): a mount
/// daemon, nicfs or kworker.
pub fn is_our_daemon(pid: i32) -> bool {
    if !alive(pid) {
        return false;
    }
    let line = cmdline(pid);
    DAEMON_MARKS.iter().any(|m| line.contains(m)) || NODE_DAEMONS.contains(&program_name(pid).as_str())
}

/// Whether `pid` is alive and runs the program `name` (`nicfs`, `kworker`).
pub fn is_program(pid: i32, name: &str) -> bool {
    alive(pid) && program_name(pid) == name
}

/// Waits up to `timeout` for `pid` to exit; true if it did.
pub fn wait_exit(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !alive(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn write_pid_file(path: &Path, pid: i32) -> CliResult<()> {
    crate::util::write_private(path, format!("{pid}\n").as_bytes())
        .ctx(|| format!("{}: write pid file", path.display()))
}

pub fn read_pid_file(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The topmost mount at `path`, if `path` is a mount point (an unreadable mount table
/// counts as no mounts).
pub fn mount_at(path: &Path) -> Option<MountInfo> {
    mountinfo::mounted_at(&mountinfo::read().unwrap_or_default(), path).cloned()
}

/// Whether a FUSE file system is mounted at `path`.
pub fn fuse_mounted_at(path: &Path) -> bool {
    mount_at(path).is_some_and(|m| m.is_fuse())
}

/// Detaches a FUSE mount whose daemon is gone (`fusermount3 -u -z`, else `umount2(DETACH)`).
pub fn detach(path: &Path) -> CliResult<()> {
    if !fuse_mounted_at(path) {
        return Ok(());
    }
    let ok = Command::new("fusermount3")
        .args(["-u", "-z"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok || !fuse_mounted_at(path) {
        return Ok(());
    }
    rustix::mount::unmount(path, UnmountFlags::DETACH)
        .map_err(|e| fail(format!("{}: cannot detach the dead mount: {e}", path.display())))
}

/// An absolute, lexically normalised form of `path` that does not touch the file system at
/// its last component (a dead FUSE mount fails every stat).
pub fn absolute(path: &Path) -> CliResult<PathBuf> {
    if let Ok(p) = std::fs::canonicalize(path) {
        return Ok(p);
    }
    let abs = std::path::absolute(path).ctx(|| format!("{}: cannot make absolute", path.display()))?;
    let mut out = PathBuf::new();
    for c in abs.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Holds an exclusive `flock` on a file for as long as it lives.
pub struct Lock {
    _file: File,
}

impl Lock {
    pub fn acquire(path: &Path) -> CliResult<Lock> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .ctx(|| format!("{}: open lock file", path.display()))?;
        loop {
            match rustix::fs::flock(&file, FlockOperation::LockExclusive) {
                Ok(()) => return Ok(Lock { _file: file }),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(fail(format!("{}: lock: {e}", path.display()))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mount_daemon_is_recognised_by_its_command_line() {
        // A pid is only signalled if its command line carries one of these marks: each mount
        // daemon, run as its program or as linefs's hidden verb, must have one.
        for d in [MountDaemon::Linefs, MountDaemon::Passthrough] {
            assert!(DAEMON_MARKS.contains(&d.program()), "{d:?}");
            assert!(DAEMON_MARKS.contains(&d.verb()), "{d:?}");
        }
        assert_ne!(MountDaemon::Linefs.verb(), MountDaemon::Passthrough.verb());
    }

    #[test]
    fn own_process_is_alive() {
        assert!(alive(std::process::id() as i32));
        assert!(!alive(-1));
        assert!(!is_our_daemon(std::process::id() as i32));
    }

    #[test]
    fn absolute_normalises() {
        let p = absolute(Path::new("/nonexistent-linefs/a/../b/./c")).unwrap();
        assert_eq!(p, PathBuf::from("/nonexistent-linefs/b/c"));
    }
}
