//! The verbs that start and stop mount daemons: `mount`, `umount`, and what `kill-host`,
//! `restart-host` ([`crate::nodes`]), `down` and `bench` do to a node's mounts. The registry's
//! files belong to [`crate::clusterdir`]; this module decides what goes into them.
//!
//! A linefs mount of a cluster with offload attaches to its node's nicfs
//! (`linefs-fuse --pm NODEDIR --nicfs SOCKET`); in a host-only cluster it opens the node's PM
//! itself (`--pm NODEDIR`). The record keeps which (`nicfs`), so a remount does the same.
//!
//! Invariants kept in the registry (`run/mounts.json`, changed only under `run/lock`):
//! - host-only: at most one linefs mount per node (the mount owns the node's PM); offload:
//!   any number, each a client of the node's nicfs with a log slot of its own;
//! - a record is `mounted` while its daemon serves, `killed` after `kill-host` (the mount is
//!   detached, the record keeps everything `restart-host` needs to mount it again);
//! - a record leaves the registry only once its daemon is gone and its mount detached.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fuse_mount::MountConfig;

use crate::clusterdir::{Backend, ClusterDesc, ClusterDir, MountRec, MountState, Offload, Registry};
use crate::daemons;
use crate::procs;
use crate::util::{fail, unix_now, CliResult};

/// How long a mount daemon may take to start serving.
pub const READY_WAIT: Duration = Duration::from_secs(30);

/// How long a daemon gets to flush and unmount after SIGTERM.
pub const STOP_WAIT: Duration = Duration::from_secs(30);

/// Consistency modes of DESIGN section 4; only `linefs` exists so far.
const MINOS_MODES: [&str; 5] = ["lin-synch", "lin-strict", "lin-renf", "lin-event", "lin-scope"];

pub fn check_consistency(mode: &str) -> CliResult<()> {
    match mode {
        "linefs" => Ok(()),
        m if MINOS_MODES.contains(&m) => {
            Err(fail(format!("--consistency {m}: the MINOS modes are not built yet (only linefs for now)")))
        }
        m => Err(fail(format!("--consistency {m}: unknown mode (linefs, {})", MINOS_MODES.join(", ")))),
    }
}

/// Checks that `mountpoint` exists, is a directory and is not a mount point; returns its
/// canonical path.
fn check_mountpoint(mountpoint: &Path) -> CliResult<PathBuf> {
    let meta = std::fs::metadata(mountpoint).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::NotFound => "no such directory".to_string(),
            _ => e.to_string(),
        };
        fail(format!("{}: {why}", mountpoint.display()))
    })?;
    if !meta.is_dir() {
        return Err(fail(format!("{}: not a directory", mountpoint.display())));
    }
    let abs = procs::absolute(mountpoint)?;
    if let Some(m) = procs::mount_at(&abs) {
        return Err(fail(format!("{}: already mounted ({})", abs.display(), m.fs_type)));
    }
    Ok(abs)
}

/// The daemon that serves a record's backend.
fn daemon_of(rec: &MountRec) -> procs::MountDaemon {
    match rec.backend {
        Backend::Linefs => procs::MountDaemon::Linefs,
        Backend::Passthrough => procs::MountDaemon::Passthrough,
    }
}

/// The daemon's arguments for a record: `linefs-fuse --pm NODEDIR [--nicfs SOCKET]
/// MOUNTPOINT ...` or `linefs-passthrough SRCDIR MOUNTPOINT ...`.
fn daemon_args(rec: &MountRec) -> Vec<String> {
    let mut a = Vec::new();
    if rec.backend == Backend::Linefs {
        a.push("--pm".to_string());
    }
    a.push(rec.source.display().to_string());
    if let Some(socket) = &rec.nicfs {
        a.push("--nicfs".to_string());
        a.push(socket.display().to_string());
        if rec.replicated {
            a.push("--replicated".to_string());
        }
    }
    a.push(rec.mountpoint.display().to_string());
    for o in &rec.options {
        a.push("-o".to_string());
        a.push(o.clone());
    }
    a.push("--status-file".to_string());
    a.push(rec.status_file.display().to_string());
    a
}

/// Starts the daemon of `rec` and records its pid.
fn start(rec: &mut MountRec) -> CliResult<()> {
    if let Some(socket) = &rec.nicfs {
        if !daemons::serves(socket) {
            return Err(fail(format!(
                "node {}'s nicfs does not serve on {} (linefs restart-nic {} restarts it)",
                rec.node,
                socket.display(),
                rec.node
            )));
        }
    }
    let exe = procs::daemon_exe(daemon_of(rec))?;
    let spawned = procs::spawn_daemon(&exe, &daemon_args(rec), &rec.log, READY_WAIT)?;
    rec.pid = spawned.pid;
    rec.state = MountState::Mounted;
    rec.started_unix = unix_now();
    procs::write_pid_file(&rec.pid_file, rec.pid)
}

/// What to mount.
pub struct MountRequest {
    pub node: usize,
    pub backend: Backend,
    pub source: PathBuf,
    /// The nicfs socket to attach to (offload), or none (host-only).
    pub nicfs: Option<PathBuf>,
    pub mountpoint: PathBuf,
    pub options: Vec<String>,
    pub consistency: String,
}

/// Mounts under the registry lock (held by the caller); returns the new record.
pub fn mount_locked(dir: &ClusterDir, reg: &mut Registry, req: MountRequest) -> CliResult<MountRec> {
    // Validate options here for a clear message (the daemon would also refuse them).
    let mut cfg = MountConfig::default();
    cfg.apply_options(&req.options).map_err(|e| fail(format!("-o: {e}")))?;
    if cfg.writeback_cache == Some(true) && req.nicfs.is_some() {
        return Err(fail(
            "-o writeback_cache: only for host-only clusters (linefs up --offload off); with offload, \
             another mount of the node could not see the data this mount's kernel still holds",
        ));
    }
    let mountpoint = check_mountpoint(&req.mountpoint)?;
    prune_unmounted(dir, reg)?;
    if req.backend == Backend::Linefs {
        // Host-only: the mount owns the node's PM, so one per node. Offload: nicfs gives
        // each mount a log slot of its own and leases keep them coherent; a killed host's
        // mounts come back with restart-host, not one by one.
        let conflict = |m: &&MountRec| {
            m.node == req.node
                && m.backend == Backend::Linefs
                && (m.state == MountState::Killed || req.nicfs.is_none() || m.nicfs.is_none())
        };
        if let Some(other) = reg.mounts.iter().find(conflict) {
            return Err(match other.state {
                MountState::Mounted => fail(format!(
                    "node {} is already mounted at {} (host-only: one mount per node; \
                     linefs up --offload on lets several mounts share a node)",
                    req.node,
                    other.mountpoint.display()
                )),
                MountState::Killed => fail(format!(
                    "node {} was killed; run linefs restart-host {} to bring its mount back",
                    req.node, req.node
                )),
            });
        }
    }
    let id = reg.next_id;
    reg.next_id += 1;
    let mut rec = MountRec {
        id,
        node: req.node,
        backend: req.backend,
        source: req.source,
        // A nicfs with ZooKeeper and other members replicates its clients' logs: fsync must
        // wait for the chain. A node alone holds an fsynced entry durable once it is in the
        // log, as before (no round trip to nicfs on its fsync path).
        replicated: req.nicfs.is_some()
            && dir.load().ok().is_some_and(|d| d.nodes.len() > 1 && crate::zookeeper::connect(dir, &d).is_some()),
        nicfs: req.nicfs,
        mountpoint,
        pid: 0,
        options: req.options,
        consistency: req.consistency,
        log: dir.logs().join(format!("mount-{}-{id}.log", req.node)),
        status_file: dir.run().join(format!("mount-{id}.status.json")),
        pid_file: dir.run().join(format!("mount-{id}.pid")),
        state: MountState::Mounted,
        started_unix: 0,
    };
    start(&mut rec)?;
    reg.mounts.push(rec.clone());
    dir.save_registry(reg)?;
    Ok(rec)
}

/// Drops the records of mounts that were unmounted from outside (`umount MOUNTPOINT`, as
/// xfstests does): the daemon noticed, is publishing its log and exits. Waits for it, because
/// the node's PM file stays locked until it has; the next mount of the node can then open it.
/// A record whose mount is still attached (a live daemon, or a dead one that left an
/// unreachable mount for `restart-host`) is kept.
fn prune_unmounted(dir: &ClusterDir, reg: &mut Registry) -> CliResult<()> {
    let stale = |rec: &MountRec| rec.state == MountState::Mounted && !procs::fuse_mounted_at(&rec.mountpoint);
    if !reg.mounts.iter().any(stale) {
        return Ok(());
    }
    for rec in reg.mounts.iter().filter(|r| stale(r)) {
        if procs::is_our_daemon(rec.pid) && !procs::wait_exit(rec.pid, STOP_WAIT) {
            return Err(fail(format!(
                "daemon pid {} of the unmounted {} did not exit within {} s (see {})",
                rec.pid,
                rec.mountpoint.display(),
                STOP_WAIT.as_secs(),
                rec.log.display()
            )));
        }
        let _ = std::fs::remove_file(&rec.pid_file);
        let _ = std::fs::remove_file(&rec.status_file);
    }
    reg.mounts.retain(|r| !stale(r));
    dir.save_registry(reg)
}

/// `linefs mount`.
pub fn mount(
    dir: &ClusterDir,
    node: usize,
    consistency: &str,
    options: Vec<String>,
    mountpoint: &Path,
) -> CliResult<String> {
    let desc = dir.load_up()?;
    let pm = node_pm(&desc, node)?;
    check_consistency(consistency)?;
    let _lock = dir.lock()?;
    let mut reg = dir.registry()?;
    let nicfs = match desc.offload() {
        Offload::On => Some(daemons::socket(dir, node)),
        Offload::Off => None,
    };
    let req = MountRequest {
        node,
        backend: Backend::Linefs,
        source: pm,
        nicfs,
        mountpoint: mountpoint.to_path_buf(),
        options,
        consistency: consistency.to_string(),
    };
    let rec = mount_locked(dir, &mut reg, req)?;
    let how = if rec.nicfs.is_some() { "attached to nicfs" } else { "host-only" };
    Ok(format!("node {node} mounted at {}, {how} (mount daemon pid {})", rec.mountpoint.display(), rec.pid))
}

/// The directory of node `node`, or why there is none.
pub fn node_pm(desc: &ClusterDesc, node: usize) -> CliResult<PathBuf> {
    match desc.nodes.get(node) {
        Some(n) => Ok(n.pm_path.clone()),
        None => Err(fail(format!(
            "node {node} out of range (the cluster has {} node{})",
            desc.nodes.len(),
            if desc.nodes.len() == 1 { "" } else { "s" }
        ))),
    }
}

/// Stops a mount's daemon (SIGTERM: it flushes and unmounts) and makes sure nothing is left
/// mounted. With `force`, a daemon that does not exit in time is killed.
pub fn stop_mount(rec: &MountRec, force: bool) -> CliResult<()> {
    if rec.state == MountState::Mounted && procs::is_our_daemon(rec.pid) {
        procs::kill(rec.pid, libc::SIGTERM);
        if !procs::wait_exit(rec.pid, STOP_WAIT) {
            if !force {
                return Err(fail(format!(
                    "{}: daemon pid {} did not exit within {} s (see {})",
                    rec.mountpoint.display(),
                    rec.pid,
                    STOP_WAIT.as_secs(),
                    rec.log.display()
                )));
            }
            procs::kill(rec.pid, libc::SIGKILL);
            procs::wait_exit(rec.pid, Duration::from_secs(5));
        }
    }
    // The daemon is gone; a mount left behind (it was killed) must not linger as
    // "transport endpoint is not connected".
    procs::detach(&rec.mountpoint)?;
    let _ = std::fs::remove_file(&rec.pid_file);
    let _ = std::fs::remove_file(&rec.status_file);
    Ok(())
}

/// `linefs umount`.
pub fn umount(dir: &ClusterDir, mountpoint: &Path) -> CliResult<String> {
    dir.load()?;
    let abs = procs::absolute(mountpoint)?;
    let _lock = dir.lock()?;
    let mut reg = dir.registry()?;
    let Some(i) = reg.mounts.iter().position(|m| m.mountpoint == abs) else {
        return Err(match procs::mount_at(&abs) {
            Some(m) if m.fs_type.starts_with("fuse") => {
                fail(format!("{}: not mounted by the cluster in {}", abs.display(), dir.root.display()))
            }
            _ => fail(format!("{}: not a linefs mount", abs.display())),
        });
    };
    stop_mount(&reg.mounts[i], false)?;
    let rec = reg.mounts.remove(i);
    dir.save_registry(&reg)?;
    Ok(format!("unmounted {} (node {})", rec.mountpoint.display(), rec.node))
}

/// SIGKILLs the daemons of node `node`'s mounts, detaches the mounts and marks them killed
/// (a host crash, for `kill-host`); returns how many daemons were killed and mounts detached.
/// The caller saves the registry.
pub fn kill_node_mounts(reg: &mut Registry, node: usize) -> CliResult<(usize, usize)> {
    let mut killed = 0;
    let mut detached = 0;
    for rec in reg.mounts.iter_mut().filter(|m| m.node == node) {
        if rec.state == MountState::Mounted && procs::is_our_daemon(rec.pid) {
            procs::kill(rec.pid, libc::SIGKILL);
            if !procs::wait_exit(rec.pid, Duration::from_secs(10)) {
                return Err(fail(format!("pid {} survived SIGKILL for 10 s", rec.pid)));
            }
            killed += 1;
        }
        if procs::fuse_mounted_at(&rec.mountpoint) {
            procs::detach(&rec.mountpoint)?;
            detached += 1;
        }
        rec.state = MountState::Killed;
        let _ = std::fs::remove_file(&rec.pid_file);
        let _ = std::fs::remove_file(&rec.status_file);
    }
    Ok((killed, detached))
}

/// Remounts every killed mount of node `node` (and any whose daemon died on its own) with
/// its options and mode; recovery replays the node's log. Returns what was remounted, and
/// the first failure, after which nothing more is tried. The caller saves the registry.
pub fn remount_node(reg: &mut Registry, node: usize) -> (Vec<String>, CliResult<()>) {
    let mut restarted = Vec::new();
    for rec in reg.mounts.iter_mut().filter(|m| m.node == node) {
        if rec.state == MountState::Mounted && procs::is_our_daemon(rec.pid) {
            continue;
        }
        let res = procs::detach(&rec.mountpoint).and_then(|()| start(rec));
        match res {
            Ok(()) => restarted.push(format!("{} (pid {})", rec.mountpoint.display(), rec.pid)),
            Err(e) => return (restarted, Err(fail(format!("{}: {e}", rec.mountpoint.display())))),
        }
    }
    (restarted, Ok(()))
}
