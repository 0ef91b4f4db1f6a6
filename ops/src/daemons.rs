//! A node's own daemons when the cluster runs with offload: `nicfs` (the SmartNIC side: it
//! owns the node's PM, recovers it and serves the node's clients on a Unix socket) and
//! `kworker` (the host's copy worker, attached to nicfs). This module owns their files —
//! `DIR/run/nicfs-<i>.sock`, `DIR/run/nicfs-<i>.status.json`, `DIR/run/{nicfs,kworker}-<i>.pid`
//! and `DIR/logs/{nicfs,kworker}-<i>.log` — nicfs's metrics address (127.0.0.1:BASE+i with
//! `up --metrics-port BASE`), and their life: start (detached, each in a session of its own,
//! like the mount daemons), readiness, stop and kill. The verbs that call it are in
//! [`crate::cluster`] (`up`, `down`) and [`crate::nodes`] (`kill-host` and the like).
//!
//! Readiness. nicfs binds its socket only once it has locked and recovered the node, so it
//! serves as soon as a connection to the socket succeeds (the probe sends nothing: nicfs drops
//! a connection that ends before its Hello without a word). A kworker is attached once the
//! status file written by *that* nicfs (its pid) reports mode `normal` with the kworker's pid;
//! nicfs rewrites the file at every mode switch. A daemon that exits before it is ready is
//! reported with the line of its log that says why.
//!
//! A recorded pid is only acted on while `/proc/PID` runs the role's program
//! ([`procs::is_program`]), so a pid reused by another process is never signalled.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::clusterdir::{ClusterDesc, ClusterDir};
use crate::procs;
use crate::util::{fail, CliResult};

/// The longest path a Unix socket can be bound to: `sun_path` holds 108 bytes with its NUL.
pub const MAX_SOCKET_PATH: usize = 107;
/// How long nicfs may take to lock and recover its node and serve.
pub const NICFS_READY_WAIT: Duration = Duration::from_secs(30);
/// How long a kworker may take to attach to a serving nicfs (it retries at least every second).
pub const ATTACH_WAIT: Duration = Duration::from_secs(10);
/// How long nicfs gets after SIGTERM to publish what its clients committed and exit.
pub const NICFS_STOP_WAIT: Duration = Duration::from_secs(30);
/// How long kworker gets after SIGTERM (it finishes the copy list it is executing).
pub const KWORKER_STOP_WAIT: Duration = Duration::from_secs(10);
/// How long a SIGKILLed daemon may take to be entirely gone.
const KILL_WAIT: Duration = Duration::from_secs(10);

/// Which of a node's daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Nicfs,
    Kworker,
}

impl Role {
    /// Its program's name, which is also the role's name in files, status and messages.
    pub fn name(self) -> &'static str {
        match self {
            Role::Nicfs => "nicfs",
            Role::Kworker => "kworker",
        }
    }
}

/// nicfs's socket on `node`.
pub fn socket(dir: &ClusterDir, node: usize) -> PathBuf {
    dir.run().join(format!("nicfs-{node}.sock"))
}

/// nicfs's status file on `node`.
pub fn status_file(dir: &ClusterDir, node: usize) -> PathBuf {
    dir.run().join(format!("nicfs-{node}.status.json"))
}

pub fn pid_file(dir: &ClusterDir, role: Role, node: usize) -> PathBuf {
    dir.run().join(format!("{}-{node}.pid", role.name()))
}

pub fn log_file(dir: &ClusterDir, role: Role, node: usize) -> PathBuf {
    dir.logs().join(format!("{}-{node}.log", role.name()))
}

/// The address node `node`'s nicfs is told to serve metrics on (`--metrics-addr`), if the
/// cluster has a metrics port: 127.0.0.1:BASE+node, or port 0 (any) for BASE 0.
pub fn metrics_addr(desc: &ClusterDesc, node: usize) -> CliResult<Option<String>> {
    let Some(base) = desc.metrics_port else { return Ok(None) };
    let port = match base {
        0 => 0,
        _ => u16::try_from(usize::from(base) + node)
            .map_err(|_| fail(format!("metrics port {base}+{node} is past 65535 (linefs up --metrics-port)")))?,
    };
    Ok(Some(format!("127.0.0.1:{port}")))
}

/// The metrics address the status file of nicfs `nicfs_pid` on `node` reports (the port it
/// bound), if any.
pub fn metrics_addr_served(dir: &ClusterDir, node: usize, nicfs_pid: i32) -> Option<String> {
    let (v, _) = nicfs_status(dir, node)?;
    if v["pid"].as_i64() != Some(nicfs_pid.into()) {
        return None;
    }
    v["metrics_addr"].as_str().map(str::to_string)
}

/// Refuses a cluster directory so deep that a node's socket path cannot be bound.
pub fn check_socket_paths(dir: &ClusterDir, nodes: usize) -> CliResult<()> {
    for node in 0..nodes {
        let s = socket(dir, node);
        let n = s.as_os_str().len();
        if n > MAX_SOCKET_PATH {
            return Err(fail(format!(
                "{}: {n} bytes, longer than the {MAX_SOCKET_PATH} a Unix socket path may have \
                 (use a shorter --dir, or --offload off)",
                s.display()
            )));
        }
    }
    Ok(())
}

/// Checks that both programs are installed beside `linefs`, before anything is started.
pub fn check_executables() -> CliResult<()> {
    procs::sibling_exe(Role::Nicfs.name())?;
    procs::sibling_exe(Role::Kworker.name())?;
    Ok(())
}

/// The pid recorded for `role` on `node`, whether or not it still runs.
pub fn recorded_pid(dir: &ClusterDir, role: Role, node: usize) -> Option<i32> {
    procs::read_pid_file(&pid_file(dir, role, node))
}

/// The recorded pid of `role` on `node` if that process is alive and runs the role's program.
pub fn running(dir: &ClusterDir, role: Role, node: usize) -> Option<i32> {
    recorded_pid(dir, role, node).filter(|&pid| procs::is_program(pid, role.name()))
}

/// Whether something accepts connections on `socket`.
pub fn serves(socket: &Path) -> bool {
    UnixStream::connect(socket).is_ok()
}

/// nicfs's status file on `node` as it was last written, and how long ago.
pub fn nicfs_status(dir: &ClusterDir, node: usize) -> Option<(Value, Duration)> {
    let path = status_file(dir, node);
    let text = std::fs::read_to_string(&path).ok()?;
    let age = std::fs::metadata(&path).ok()?.modified().ok()?.elapsed().unwrap_or_default();
    Some((serde_json::from_str(&text).ok()?, age))
}

/// Whether the status file written by nicfs `nicfs_pid` reports mode normal with
/// `kworker_pid` as its kworker.
pub fn attached(dir: &ClusterDir, node: usize, nicfs_pid: i32, kworker_pid: i32) -> bool {
    let Some((v, _)) = nicfs_status(dir, node) else {
        return false;
    };
    v["pid"].as_i64() == Some(nicfs_pid.into())
        && v["host"]["mode"].as_str() == Some("normal")
        && v["host"]["kworker_pid"].as_i64() == Some(kworker_pid.into())
}

fn remove(path: &Path) {
    let _ = std::fs::remove_file(path);
}

/// Kills a daemon that failed to become ready and forgets it.
fn abandon(dir: &ClusterDir, role: Role, node: usize, pid: i32) {
    procs::kill(pid, libc::SIGKILL);
    procs::wait_exit(pid, KILL_WAIT);
    remove(&pid_file(dir, role, node));
}

/// Starts node `node`'s nicfs (`--cpus` from the description; `--node-id` and `--zk` when the
/// cluster has a ZooKeeper) and returns its pid once it serves: it has locked the node,
/// recovered every log slot and bound its socket (it joins the cluster in the background).
pub fn start_nicfs(dir: &ClusterDir, desc: &ClusterDesc, node: usize) -> CliResult<i32> {
    let exe = procs::sibling_exe(Role::Nicfs.name())?;
    let node_dir = &desc.nodes.get(node).ok_or_else(|| fail(format!("node {node} out of range")))?.pm_path;
    let sock = socket(dir, node);
    let status = status_file(dir, node);
    // A status file an earlier nicfs left must not be taken for this one's.
    remove(&status);
    let mut args: Vec<String> = vec![
        "--node".into(),
        node_dir.display().to_string(),
        "--socket".into(),
        sock.display().to_string(),
        "--status-file".into(),
        status.display().to_string(),
    ];
    if let Some(cpus) = &desc.nic_cpus {
        args.extend(["--cpus".to_string(), cpus.clone()]);
    }
    if let Some(addr) = metrics_addr(desc, node)? {
        args.extend(["--metrics-addr".to_string(), addr]);
    }
    args.extend(desc.nicfs_limits.iter().cloned());
    if let Some(group) = &desc.trusted_group {
        args.extend(["--trusted-group".to_string(), group.clone()]);
    }
    // A member of the cluster: its id is its index (crate::zookeeper has the ensemble).
    if let Some(zk) = crate::zookeeper::connect(dir, desc) {
        args.extend(["--node-id".to_string(), node.to_string(), "--zk".to_string(), zk]);
        args.extend(["--cluster-key".to_string(), dir.key_path().display().to_string()]);
    }
    let log = log_file(dir, Role::Nicfs, node);
    let from = procs::log_len(&log);
    let pid = procs::spawn_detached(&exe, &args, &log, None)?;
    // Recorded at once, so that `down` finds it even if this command dies while it starts.
    procs::write_pid_file(&pid_file(dir, Role::Nicfs, node), pid)?;
    let deadline = Instant::now() + NICFS_READY_WAIT;
    loop {
        if !procs::alive(pid) {
            remove(&pid_file(dir, Role::Nicfs, node));
            return Err(fail(format!("node {node}: nicfs (pid {pid}) exited: {}", procs::failure_reason(&log, from))));
        }
        if serves(&sock) {
            return Ok(pid);
        }
        if Instant::now() >= deadline {
            abandon(dir, Role::Nicfs, node, pid);
            return Err(fail(format!(
                "node {node}: nicfs (pid {pid}) did not serve on {} within {} s; killed it; its log {} says: {}",
                sock.display(),
                NICFS_READY_WAIT.as_secs(),
                log.display(),
                procs::failure_reason(&log, from)
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts node `node`'s kworker. When `nicfs_pid` names the serving nicfs, returns once the
/// kworker has attached to it (a kworker that does not is killed); without one, kworker keeps
/// trying to connect on its own.
pub fn start_kworker(dir: &ClusterDir, desc: &ClusterDesc, node: usize, nicfs_pid: Option<i32>) -> CliResult<i32> {
    let exe = procs::sibling_exe(Role::Kworker.name())?;
    let node_dir = &desc.nodes.get(node).ok_or_else(|| fail(format!("node {node} out of range")))?.pm_path;
    let args: Vec<String> = vec![
        "--node".into(),
        node_dir.display().to_string(),
        "--socket".into(),
        socket(dir, node).display().to_string(),
    ];
    let log = log_file(dir, Role::Kworker, node);
    let from = procs::log_len(&log);
    let pid = procs::spawn_detached(&exe, &args, &log, None)?;
    procs::write_pid_file(&pid_file(dir, Role::Kworker, node), pid)?;
    if let Some(nicfs_pid) = nicfs_pid {
        if let Err(e) = wait_attached(dir, node, nicfs_pid, pid, from) {
            abandon(dir, Role::Kworker, node, pid);
            return Err(e);
        }
    }
    Ok(pid)
}

/// Waits until kworker `kworker_pid` is attached to nicfs `nicfs_pid` (see [`attached`]);
/// `from` is where the kworker's output of interest begins in its log.
pub fn wait_attached(dir: &ClusterDir, node: usize, nicfs_pid: i32, kworker_pid: i32, from: u64) -> CliResult<()> {
    let log = log_file(dir, Role::Kworker, node);
    let deadline = Instant::now() + ATTACH_WAIT;
    loop {
        if attached(dir, node, nicfs_pid, kworker_pid) {
            return Ok(());
        }
        if !procs::alive(kworker_pid) {
            return Err(fail(format!(
                "node {node}: kworker (pid {kworker_pid}) exited: {}",
                procs::failure_reason(&log, from)
            )));
        }
        if !procs::alive(nicfs_pid) {
            return Err(fail(format!(
                "node {node}: nicfs (pid {nicfs_pid}) exited while kworker attached (see {})",
                log_file(dir, Role::Nicfs, node).display()
            )));
        }
        if Instant::now() >= deadline {
            return Err(fail(format!(
                "node {node}: kworker (pid {kworker_pid}) did not attach to nicfs within {} s; its log {} says: {}",
                ATTACH_WAIT.as_secs(),
                log.display(),
                procs::failure_reason(&log, from)
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts node `node`'s nicfs, then its kworker, and returns their pids once the kworker is
/// attached. If the kworker fails, the nicfs is stopped again.
pub fn start_node(dir: &ClusterDir, desc: &ClusterDesc, node: usize) -> CliResult<(i32, i32)> {
    let nicfs = start_nicfs(dir, desc, node)?;
    match start_kworker(dir, desc, node, Some(nicfs)) {
        Ok(kworker) => Ok((nicfs, kworker)),
        Err(e) => {
            let _ = stop(dir, Role::Nicfs, node);
            Err(e)
        }
    }
}

/// What [`stop`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Nothing of the role ran.
    NotRunning,
    /// It exited after SIGTERM.
    Exited(i32),
    /// It did not exit in time and was SIGKILLed.
    Killed(i32),
}

/// Stops `role` on `node`: SIGTERM, and SIGKILL if it has not exited within its wait (nicfs
/// publishes what its clients committed first; a node left by SIGKILL is recovered at the
/// next start). Then removes its pid file and, for nicfs, its socket and status file.
pub fn stop(dir: &ClusterDir, role: Role, node: usize) -> CliResult<Stopped> {
    let wait = match role {
        Role::Nicfs => NICFS_STOP_WAIT,
        Role::Kworker => KWORKER_STOP_WAIT,
    };
    let mut done = Stopped::NotRunning;
    if let Some(pid) = running(dir, role, node) {
        procs::kill(pid, libc::SIGTERM);
        done = Stopped::Exited(pid);
        if !procs::wait_exit(pid, wait) {
            procs::kill(pid, libc::SIGKILL);
            if !procs::wait_exit(pid, KILL_WAIT) {
                return Err(fail(format!("node {node}: {} pid {pid} survived SIGKILL", role.name())));
            }
            done = Stopped::Killed(pid);
        }
    }
    remove(&pid_file(dir, role, node));
    if role == Role::Nicfs {
        remove(&socket(dir, node));
        remove(&status_file(dir, node));
    }
    Ok(done)
}

/// SIGKILLs `role` on `node` (a crash) and waits until the process is entirely gone; returns
/// its pid, or none if it was not running. Its pid file stays (status reports it dead), and so
/// do a nicfs's socket and status file, as a crash leaves them.
pub fn kill(dir: &ClusterDir, role: Role, node: usize) -> CliResult<Option<i32>> {
    let Some(pid) = running(dir, role, node) else {
        return Ok(None);
    };
    procs::kill(pid, libc::SIGKILL);
    if !procs::wait_exit(pid, KILL_WAIT) {
        return Err(fail(format!(
            "node {node}: {} pid {pid} survived SIGKILL for {} s",
            role.name(),
            KILL_WAIT.as_secs()
        )));
    }
    Ok(Some(pid))
}
