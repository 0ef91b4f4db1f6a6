//! The cluster's ZooKeeper as the verbs see it: the servers `up` starts on loopback (clustermgr's
//! [`ZkServer`], standalone or a 3-server ensemble, under `DIR/zk/`), or the ensemble `up --zk`
//! names (recorded in the description; never started or stopped by linefs). Owns the
//! connection string every nicfs is given, the reachability probe, stopping what `up`
//! started (`down`), and `linefs zk stop|start`: an outage of the local servers on demand
//! while the cluster stays up (the members' sessions are suspended, nicfs serves on; started
//! again on the same ports and data directory, the members reconnect or join again). Depends
//! on `clusterdir`, `procs` and `util` only.
//!
//! `DIR/zk/` holds `zookeeper.connect` (the connection string, `127.0.0.1:P,…`) and one
//! `zk<i>/` per server (`zoo.cfg`, `data/`, `zookeeper.log`, `zookeeper.pid`). Its data
//! directory is kept by `down`, so the epochs and the inode counter go on across `up`s.

use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use clustermgr::server::{free_ports, CONNECT_FILE};
use clustermgr::ZkServer;

use crate::clusterdir::{ClusterDesc, ClusterDir};
use crate::procs;
use crate::util::{fail, CliResult};

/// How long the servers `up` starts may take to serve.
pub const READY_WAIT: Duration = Duration::from_secs(30);
/// How long `down` gives a server after SIGTERM.
pub const STOP_WAIT: Duration = Duration::from_secs(5);
/// How long the reachability probe waits for one server.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// Where the servers `up` starts live.
pub fn dir(cdir: &ClusterDir) -> PathBuf {
    cdir.root.join("zk")
}

/// The connection string of the cluster's ZooKeeper: the ensemble `up --zk` named, else the
/// one the local servers recorded; None when there is neither (no ZooKeeper: nicfs runs on
/// its own).
pub fn connect(cdir: &ClusterDir, desc: &ClusterDesc) -> Option<String> {
    desc.zk.clone().or_else(|| ZkServer::recorded_connect(&dir(cdir)))
}

/// Whether the connection string names local servers `up` started.
pub fn is_local(desc: &ClusterDesc) -> bool {
    desc.zk.is_none()
}

/// The pids of the local servers still running (recorded pid files of live processes).
pub fn local_pids(cdir: &ClusterDir) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(dir(cdir)) else { return Vec::new() };
    let mut pids: Vec<i32> = entries
        .flatten()
        .filter_map(|e| procs::read_pid_file(&e.path().join("zookeeper.pid")))
        .filter(|&pid| procs::alive(pid))
        .collect();
    pids.sort_unstable();
    pids
}

/// Whether a server of `connect` accepts a connection (the session itself is nicfs's).
pub fn reachable(connect: &str) -> bool {
    connect.split(',').any(|hp| {
        let Ok(mut addrs) = hp.to_socket_addrs() else { return false };
        addrs.any(|a| TcpStream::connect_timeout(&a, PROBE_WAIT).is_ok())
    })
}

/// `up`: the ensemble `--zk` named must answer; otherwise starts `servers` local servers
/// (the ones an earlier `up` left are stopped first). Returns the connection string.
pub fn start(cdir: &ClusterDir, desc: &ClusterDesc, servers: usize) -> CliResult<String> {
    if let Some(zk) = &desc.zk {
        if !reachable(zk) {
            return Err(fail(format!(
                "ZooKeeper at {zk} (--zk) is unreachable: start it, or drop --zk and let up start one"
            )));
        }
        return Ok(zk.clone());
    }
    let zdir = dir(cdir);
    let _ = ZkServer::stop_recorded(&zdir, STOP_WAIT);
    let server =
        ZkServer::start(&zdir, servers, READY_WAIT).map_err(|e| fail(format!("cannot start ZooKeeper: {e}")))?;
    let connect = server.connect_string();
    let pids = server.detach();
    tracing::info!(?pids, %connect, "ZooKeeper started");
    Ok(connect)
}

/// Starts the local servers again on the ports recorded when none of them runs (one was
/// killed, or the machine restarted): a second `up` of a running cluster does this. Returns
/// the connection string if it started them.
pub fn restart_if_down(cdir: &ClusterDir, desc: &ClusterDesc) -> CliResult<Option<String>> {
    if !is_local(desc) || !local_pids(cdir).is_empty() {
        return Ok(None);
    }
    let zdir = dir(cdir);
    let Some(connect) = ZkServer::recorded_connect(&zdir) else { return Ok(None) };
    let ports: Vec<u16> = connect.split(',').filter_map(|hp| hp.rsplit_once(':')?.1.parse().ok()).collect();
    let peers = free_ports(2 * ports.len()).map_err(|e| fail(format!("cannot restart ZooKeeper: {e}")))?;
    let server = ZkServer::start_on(&zdir, &ports, &peers, READY_WAIT)
        .map_err(|e| fail(format!("cannot restart ZooKeeper: {e}")))?;
    server.detach();
    Ok(Some(connect))
}

/// `down`: stops the local servers `up` started (only those: a `--zk` ensemble is left
/// alone). Returns how many were running.
pub fn stop(cdir: &ClusterDir) -> CliResult<usize> {
    let zdir = dir(cdir);
    if !zdir.join(CONNECT_FILE).exists() {
        return Ok(0);
    }
    ZkServer::stop_recorded(&zdir, STOP_WAIT).map_err(|e| fail(format!("cannot stop ZooKeeper: {e}")))
}

/// `linefs zk stop [--kill]` and `linefs zk start`: what they act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outage {
    /// SIGTERM (SIGKILL past [`STOP_WAIT`]): ZooKeeper shuts down cleanly.
    Stop,
    /// SIGKILL: ZooKeeper crashes.
    Kill,
}

/// Refuses the `zk` verbs on a cluster whose ZooKeeper `up` did not start.
fn need_local(cdir: &ClusterDir, desc: &ClusterDesc) -> CliResult<()> {
    if desc.offload.is_none_or(|o| o == crate::clusterdir::Offload::Off) {
        return Err(fail(format!(
            "the cluster in {} runs host-only (up --offload off): it has no ZooKeeper",
            cdir.root.display()
        )));
    }
    if let Some(zk) = &desc.zk {
        return Err(fail(format!(
            "the cluster's ZooKeeper is the ensemble {zk} (up --zk): not linefs's to stop or start"
        )));
    }
    if ZkServer::recorded_connect(&dir(cdir)).is_none() {
        return Err(fail(format!("no ZooKeeper was started under {}", dir(cdir).display())));
    }
    Ok(())
}

/// `linefs zk stop`: stops (or kills) the local ZooKeeper servers of an up cluster, which
/// stays up: its members' sessions are suspended and each nicfs serves on, retrying. Their
/// data directory stays; `linefs zk start` (or a second `up`) starts them again.
pub fn outage(cdir: &ClusterDir, how: Outage) -> CliResult<String> {
    let desc = cdir.load_up()?;
    need_local(cdir, &desc)?;
    let _lock = cdir.lock()?;
    let n = match how {
        Outage::Stop => ZkServer::stop_recorded(&dir(cdir), STOP_WAIT),
        Outage::Kill => ZkServer::kill_recorded(&dir(cdir)),
    }
    .map_err(|e| fail(format!("cannot stop ZooKeeper: {e}")))?;
    if n == 0 {
        return Ok("ZooKeeper was not running; nothing stopped".to_string());
    }
    let verb = match how {
        Outage::Stop => "stopped",
        Outage::Kill => "killed",
    };
    Ok(format!(
        "ZooKeeper {verb} ({n} server{}); the cluster stays up, its members suspended until linefs zk start",
        if n == 1 { "" } else { "s" }
    ))
}

/// `linefs zk start`: starts the local servers of an up cluster again, on the ports and
/// data directory they had, once none of them runs; returns once they serve.
pub fn start_again(cdir: &ClusterDir) -> CliResult<String> {
    let desc = cdir.load_up()?;
    need_local(cdir, &desc)?;
    let _lock = cdir.lock()?;
    let running = local_pids(cdir);
    if !running.is_empty() {
        let pids: Vec<String> = running.iter().map(i32::to_string).collect();
        return Ok(format!("ZooKeeper is running (pid {}); nothing started", pids.join(" ")));
    }
    match restart_if_down(cdir, &desc)? {
        Some(connect) => Ok(format!("ZooKeeper started again on {connect}; the members reconnect or join again")),
        None => Err(fail("ZooKeeper could not be started again (no connection string recorded)")),
    }
}
