//! The soak's wait for the replicas: before a replica node is mounted for the final check,
//! node 0's status must show every log it published replicated (acknowledged durable by
//! every chain member), and the node's own status its copies of those logs published up to
//! there — what it holds then comes from replication alone.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use linefs_ops::clusterdir::ClusterDir;
use linefs_ops::daemons;
use linefs_ops::util::{fail, CliResult};
use serde_json::Value;

/// How long the replicas may take to catch up once node 0's mount is gone.
const CATCH_UP: Duration = Duration::from_secs(60);
/// A status file older than this is not taken as the daemon's current state.
const FRESH: Duration = Duration::from_secs(2);

/// Node 0's logs that hold anything: slot → appended LSN, once all `nodes` are in node 0's
/// chain and every other one has acknowledged each log durable as far as it is appended.
fn primary_done(dir: &ClusterDir, nodes: usize) -> Result<BTreeMap<u64, u64>, String> {
    let (st, age) = daemons::nicfs_status(dir, 0).ok_or("node 0 has no status file")?;
    if age > FRESH {
        return Err(format!("node 0's status is {} ms old", age.as_millis()));
    }
    let chain = &st["replication"]["chain"];
    if chain.as_array().map_or(0, |c| c.len()) != nodes {
        return Err(format!("node 0's chain is {chain}, not all {nodes} nodes"));
    }
    let mut out = BTreeMap::new();
    for log in st["replication"]["logs"].as_array().into_iter().flatten() {
        let (slot, appended, replicated) =
            (log["slot"].as_u64(), log["appended_lsn"].as_u64(), log["replicated_lsn"].as_u64());
        let (Some(slot), Some(appended), Some(replicated)) = (slot, appended, replicated) else {
            return Err(format!("node 0's status: a log without its LSNs: {log}"));
        };
        if appended == 0 {
            continue;
        }
        if replicated < appended {
            return Err(format!("node 0's slot {slot}: appended {appended}, replicated {replicated}"));
        }
        let members = log["members"].as_array().map_or(0, |m| m.len());
        let behind = log["members"].as_array().into_iter().flatten().find(|m| m["acked_lsn"].as_u64() < Some(appended));
        if members + 1 != nodes || behind.is_some() {
            return Err(format!("node 0's slot {slot}: appended {appended}, members {}", log["members"]));
        }
        out.insert(slot, appended);
    }
    Ok(out)
}

/// Whether node `node`'s copies of node 0's logs are published up to `targets`.
fn copies_done(dir: &ClusterDir, node: usize, targets: &BTreeMap<u64, u64>) -> Result<(), String> {
    let (st, age) = daemons::nicfs_status(dir, node).ok_or_else(|| format!("node {node} has no status file"))?;
    if age > FRESH {
        return Err(format!("node {node}'s status is {} ms old", age.as_millis()));
    }
    let copies: Vec<&Value> = st["replication"]["copies"].as_array().into_iter().flatten().collect();
    for (&slot, &target) in targets {
        let copy = copies.iter().find(|c| c["origin"].as_u64() == Some(0) && c["slot"].as_u64() == Some(slot));
        let Some(copy) = copy else {
            return Err(format!("node {node} has no copy of node 0's slot {slot} (appended {target})"));
        };
        let (durable, published) = (copy["durable_lsn"].as_u64(), copy["published_lsn"].as_u64());
        if durable.unwrap_or(0) < target || published.unwrap_or(0) < target {
            return Err(format!(
                "node {node}'s copy of node 0's slot {slot}: durable {durable:?}, published {published:?}, \
                 node 0 appended {target}"
            ));
        }
    }
    Ok(())
}

/// Waits until every node is back in node 0's chain and node 0's logs are acknowledged
/// durable by each as far as they are appended, at most [`CATCH_UP`]; `when` names the moment in an error.
/// The soak waits for this after each failure it injects into the chain, so that one
/// failure is over before the next begins: a primary's nicfs that restarts again before its
/// replicas caught up, or a replica out of the view while the primary reclaims past it,
/// needs the state transfer that is not built yet (docs, "Replication in nicfs").
pub(super) fn wait_replicated(dir: &ClusterDir, nodes: usize, when: &str) -> CliResult<Duration> {
    let start = Instant::now();
    loop {
        let why = match primary_done(dir, nodes) {
            Ok(_) => return Ok(start.elapsed()),
            Err(e) => e,
        };
        if start.elapsed() > CATCH_UP {
            return Err(fail(format!("{when}: node 0's logs not replicated within {} s: {why}", CATCH_UP.as_secs())));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until node `node` has published everything node 0 published (see the module
/// notes); an error names what stayed behind.
pub(super) fn wait_caught_up(dir: &ClusterDir, nodes: usize, node: usize) -> CliResult<()> {
    let start = Instant::now();
    loop {
        let why = match primary_done(dir, nodes) {
            Ok(targets) => match copies_done(dir, node, &targets) {
                Ok(()) => return Ok(()),
                Err(e) => e,
            },
            Err(e) => e,
        };
        if start.elapsed() > CATCH_UP {
            return Err(fail(format!(
                "node {node} did not catch up with node 0 within {} s: {why}",
                CATCH_UP.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
