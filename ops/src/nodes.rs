//! The verbs that crash and restart one side of a node (DESIGN section 9): `kill-host` /
//! `restart-host` (the host: its kworker and its mounts) and `kill-nic` / `restart-nic` (the
//! SmartNIC: its nicfs). Kills are SIGKILL, as a crash; restarts recover. The processes
//! themselves are started and stopped by [`crate::daemons`] (nicfs, kworker) and
//! [`crate::mounts`] (mount daemons); every verb here holds `run/lock`.

use crate::clusterdir::{ClusterDesc, ClusterDir, Offload};
use crate::daemons::{self, Role};
use crate::mounts;
use crate::procs;
use crate::util::{fail, CliResult};

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Refuses the nicfs verbs on a host-only cluster.
fn need_nicfs(dir: &ClusterDir, desc: &ClusterDesc, node: usize) -> CliResult<()> {
    mounts::node_pm(desc, node)?;
    if desc.offload() == Offload::Off {
        return Err(fail(format!(
            "the cluster in {} runs host-only (up --offload off): node {node} has no nicfs",
            dir.root.display()
        )));
    }
    Ok(())
}

/// `linefs kill-host I`: SIGKILL node I's kworker and mount daemons (a host crash), detach
/// the mounts and keep them in the registry as killed.
pub fn kill_host(dir: &ClusterDir, node: usize) -> CliResult<String> {
    let desc = dir.load()?;
    mounts::node_pm(&desc, node)?;
    let _lock = dir.lock()?;
    let mut reg = dir.registry()?;
    let res = mounts::kill_node_mounts(&mut reg, node);
    dir.save_registry(&reg)?;
    let (mut killed, detached) = res?;
    let kworker = daemons::kill(dir, Role::Kworker, node)?;
    killed += usize::from(kworker.is_some());
    let what = match kworker {
        Some(pid) => format!(" (kworker pid {pid} among them)"),
        None => String::new(),
    };
    Ok(format!(
        "node {node}: killed {}{what}, detached {} (linefs restart-host {node} restarts them)",
        plural(killed, "host process", "host processes"),
        plural(detached, "mount", "mounts"),
    ))
}

/// `linefs restart-host I`: restart node I's kworker (with offload; it attaches to nicfs if
/// nicfs serves) and remount its killed mounts (recovery replays the node's log).
pub fn restart_host(dir: &ClusterDir, node: usize) -> CliResult<String> {
    let desc = dir.load_up()?;
    mounts::node_pm(&desc, node)?;
    let _lock = dir.lock()?;
    let mut done = Vec::new();
    if desc.offload() == Offload::On && daemons::running(dir, Role::Kworker, node).is_none() {
        let nicfs = daemons::running(dir, Role::Nicfs, node);
        let pid = daemons::start_kworker(dir, &desc, node, nicfs)?;
        done.push(match nicfs {
            Some(_) => format!("restarted kworker (pid {pid}, attached to nicfs)"),
            None => format!(
                "restarted kworker (pid {pid}; nicfs is not running: it attaches once linefs restart-nic {node} \
                 brings nicfs back)"
            ),
        });
    }
    let mut reg = dir.registry()?;
    let (remounted, res) = mounts::remount_node(&mut reg, node);
    dir.save_registry(&reg)?;
    res?;
    if !remounted.is_empty() {
        done.push(format!("remounted {}", remounted.join(", ")));
    }
    if done.is_empty() {
        return Ok(format!("node {node}: nothing to restart"));
    }
    Ok(format!("node {node}: {}", done.join("; ")))
}

/// `linefs kill-nic I`: SIGKILL node I's nicfs (a SmartNIC crash). Its socket and status file
/// stay as the crash leaves them; its kworker keeps trying to reconnect.
pub fn kill_nic(dir: &ClusterDir, node: usize) -> CliResult<String> {
    let desc = dir.load()?;
    need_nicfs(dir, &desc, node)?;
    let _lock = dir.lock()?;
    Ok(match daemons::kill(dir, Role::Nicfs, node)? {
        Some(pid) => format!("node {node}: killed nicfs (pid {pid}) (linefs restart-nic {node} restarts it)"),
        None => format!("node {node}: nicfs was not running; nothing killed"),
    })
}

/// `linefs restart-nic I`: start node I's nicfs again — it recovers the node — and return
/// once it serves and, if the node's kworker runs, once that kworker has attached again.
pub fn restart_nic(dir: &ClusterDir, node: usize) -> CliResult<String> {
    let desc = dir.load_up()?;
    need_nicfs(dir, &desc, node)?;
    let _lock = dir.lock()?;
    if let Some(pid) = daemons::running(dir, Role::Nicfs, node) {
        return Ok(format!("node {node}: nicfs is already running (pid {pid}); nothing changed"));
    }
    let kworker = daemons::running(dir, Role::Kworker, node);
    let from = procs::log_len(&daemons::log_file(dir, Role::Kworker, node));
    let pid = daemons::start_nicfs(dir, &desc, node)?;
    let socket = daemons::socket(dir, node);
    let mut msg =
        format!("node {node}: restarted nicfs (pid {pid}): it recovered the node and serves on {}", socket.display());
    match kworker {
        Some(k) => {
            daemons::wait_attached(dir, node, pid, k, from)?;
            msg.push_str(&format!("; kworker pid {k} attached again"));
        }
        None => msg.push_str(&format!("; no kworker runs (linefs restart-host {node} starts it)")),
    }
    Ok(msg)
}
