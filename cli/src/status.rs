//! `linefs status`: the cluster, its nodes and their mode, every process of the cluster
//! (each node's nicfs and kworker, every mount daemon) with its pid and liveness, nicfs's
//! status as it last wrote it to `run/nicfs-<i>.status.json` (every second and at each mode
//! switch), and each mount's libfs status as the mount daemon last wrote it (every second) to
//! `run/mount-<id>.status.json`. What a status file holds is shown whole, whatever fields it
//! has; in the human form, nicfs's stages and latencies as a table (queue, threads, items,
//! and the p50/p99/p99.9/max of each stage's queue wait and service time, and of the
//! end-to-end chunk and fsync latencies), its metrics address as a URL, and the rest as
//! `key value` lines.
//!
//! No PM is opened to answer: a node's PM backing and persist method are known only from a
//! live mount's status; an unmounted node says "not mounted". The only probe is a connection
//! to a live nicfs's socket (does it serve), which sends nothing.

use linefs_ops::clusterdir::{Backend, ClusterDesc, ClusterDir, MountRec, MountState, Offload};
use linefs_ops::daemons::{self, Role};
use linefs_ops::procs;
use linefs_ops::util::{human_size, unix_now, CliResult};
use linefs_ops::zookeeper;
use serde_json::{json, Value};

/// A status file older than this is reported as stale.
const STALE_SECS: u64 = 5;

fn read_status(rec: &MountRec) -> Option<Value> {
    let text = std::fs::read_to_string(&rec.status_file).ok()?;
    serde_json::from_str(&text).ok()
}

/// nicfs and kworker of every node that runs them, or once ran them (a pid file is left).
fn node_processes(dir: &ClusterDir, desc: &ClusterDesc) -> Vec<Value> {
    let mut out = Vec::new();
    for n in &desc.nodes {
        let node = n.index;
        let nicfs_pid = daemons::running(dir, Role::Nicfs, node);
        for role in [Role::Nicfs, Role::Kworker] {
            let recorded = daemons::recorded_pid(dir, role, node);
            if recorded.is_none() && desc.offload() == Offload::Off {
                continue;
            }
            let alive = daemons::running(dir, role, node).is_some();
            let mut p = json!({
                "role": role.name(),
                "node": node,
                "pid": recorded,
                "alive": alive,
                "log": daemons::log_file(dir, role, node),
            });
            match role {
                Role::Nicfs => {
                    let socket = daemons::socket(dir, node);
                    let serving = alive && daemons::serves(&socket);
                    p["state"] = json!(match (recorded, alive, serving) {
                        (None, _, _) => "not started",
                        (_, false, _) => "dead",
                        (_, true, true) => "serving",
                        (_, true, false) => "not serving",
                    });
                    p["socket"] = json!(socket);
                    // The address nicfs bound, from its status (the port resolved).
                    p["metrics_addr"] = Value::Null;
                    let status = if alive { daemons::nicfs_status(dir, node) } else { None };
                    // A file written by an earlier nicfs is not this one's.
                    let status = status.filter(|(v, _)| v["pid"].as_i64() == recorded.map(i64::from));
                    p["mode"] = status.as_ref().map_or(Value::Null, |(v, _)| v["host"]["mode"].clone());
                    p["status_age_ms"] = status.as_ref().map_or(Value::Null, |(_, age)| json!(age.as_millis() as u64));
                    p["status_stale"] =
                        json!(alive && status.as_ref().is_none_or(|(_, age)| age.as_secs() > STALE_SECS));
                    if let Some((v, _)) = &status {
                        p["metrics_addr"] = v["metrics_addr"].clone();
                    }
                    p["status"] = status.map_or(Value::Null, |(v, _)| v);
                }
                Role::Kworker => {
                    p["state"] = json!(match (recorded, alive) {
                        (None, _) => "not started",
                        (_, false) => "dead",
                        (_, true) => "running",
                    });
                    let attached = match (nicfs_pid, recorded) {
                        (Some(n), Some(k)) if alive => daemons::attached(dir, node, n, k),
                        _ => false,
                    };
                    p["attached"] = json!(attached);
                }
            }
            out.push(p);
        }
    }
    out
}

/// A node's mode: nicfs's (normal, isolated), or why there is none.
fn node_mode(desc: &ClusterDesc, node: usize, processes: &[Value]) -> String {
    if desc.offload() == Offload::Off {
        return "host-only".to_string();
    }
    let nicfs = processes.iter().find(|p| p["role"] == json!("nicfs") && p["node"] == json!(node));
    match nicfs {
        Some(p) if p["alive"] == json!(true) => p["mode"].as_str().unwrap_or("unknown").to_string(),
        _ => "nicfs down".to_string(),
    }
}

/// The cluster as its members see it: ZooKeeper (connection string, reachable, the local
/// servers' pids), the newest view any live nicfs reports (epoch, chain head first, members)
/// and each node's session. Null without offload (no nicfs: no member, no ZooKeeper).
fn cluster_view(dir: &ClusterDir, desc: &ClusterDesc, processes: &[Value]) -> Value {
    if desc.offload() == Offload::Off {
        return Value::Null;
    }
    let connect = zookeeper::connect(dir, desc);
    let local = zookeeper::is_local(desc);
    let zk = json!({
        "connect": connect,
        "reachable": connect.as_deref().is_some_and(zookeeper::reachable),
        "started_by_up": local,
        "server_pids": if local { json!(zookeeper::local_pids(dir)) } else { Value::Null },
    });
    let mut nodes = Vec::new();
    let mut newest: Option<&Value> = None;
    for n in &desc.nodes {
        let nicfs = processes.iter().find(|p| p["role"] == json!("nicfs") && p["node"] == json!(n.index));
        let c = nicfs.map(|p| &p["status"]["cluster"]).filter(|c| c.is_object());
        let alive = nicfs.is_some_and(|p| p["alive"] == json!(true));
        let peers = nicfs.map(|p| &p["status"]["peers"]).filter(|p| alive && p.is_object());
        let session = match c {
            Some(c) if alive => c["session"].clone(),
            _ if alive => json!("no member (nicfs without --zk)"),
            _ => json!("nicfs down"),
        };
        if let Some(c) = c.filter(|_| alive) {
            if newest.is_none_or(|b| c["epoch"].as_u64() > b["epoch"].as_u64()) {
                newest = Some(c);
            }
        }
        nodes.push(json!({
            "node": n.index,
            "mode": node_mode(desc, n.index, processes),
            "session": session,
            "may_be_expired": c.map_or(Value::Null, |c| c["may_be_expired"].clone()),
            "epoch": c.map_or(Value::Null, |c| c["epoch"].clone()),
            "persisted_epoch": c.map_or(Value::Null, |c| c["persisted_epoch"].clone()),
            "chain_pos": c.map_or(Value::Null, |c| c["chain_pos"].clone()),
            "joins": c.map_or(Value::Null, |c| c["joins"].clone()),
            "session_timeout_ms": c.map_or(Value::Null, |c| c["session_timeout_ms"].clone()),
            "last_error": c.map_or(Value::Null, |c| c["last_error"].clone()),
            "peers": peers.map_or(Value::Null, peer_links),
            // Per client slot, how far each member of the chain holds it (repl-driver's
            // `replication` object of nicfs's status file, as it is; null while absent).
            "replication": nicfs
                .map(|p| &p["status"]["replication"])
                .filter(|r| alive && r.is_object())
                .cloned()
                .unwrap_or(Value::Null),
        }));
    }
    let chain = newest.map_or(json!([]), |c| c["chain"].clone());
    let mut members: Vec<u64> = chain.as_array().into_iter().flatten().filter_map(Value::as_u64).collect();
    members.sort_unstable();
    json!({
        "zookeeper": zk,
        "epoch": newest.map_or(Value::Null, |c| c["epoch"].clone()),
        "chain": chain,
        "members": members,
        "nodes": nodes,
    })
}

/// A node's peer links as `status` shows them: its listening addresses and, per peer, each
/// class's state, the epoch the peer's messages carry and the last round trip.
fn peer_links(p: &Value) -> Value {
    let peers: Vec<Value> = p["peers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|q| {
            json!({
                "node": q["node"],
                "low_latency": q["low_latency"]["state"],
                "bulk": q["bulk"]["state"],
                "epoch_seen": q["epoch_seen"],
                "rtt_us": q["rtt_us"],
                "last_error": q["low_latency"]["last_error"].as_str().or(q["bulk"]["last_error"].as_str()),
            })
        })
        .collect();
    json!({
        "low_latency_addr": p["low_latency_addr"],
        "bulk_addr": p["bulk_addr"],
        "refused": p["refused"],
        "stale_dropped": p["stale_dropped"],
        "links": peers,
    })
}

/// The status of the cluster in `dir`, as one JSON value.
pub fn collect(dir: &ClusterDir) -> CliResult<Value> {
    let desc = dir.load_up()?;
    let reg = dir.registry()?;
    let mut processes = node_processes(dir, &desc);
    let now_ms = unix_now() * 1000;
    let mut mounts = Vec::new();
    for rec in &reg.mounts {
        let alive = rec.state == MountState::Mounted && procs::is_our_daemon(rec.pid);
        let state = match (rec.state, alive) {
            (MountState::Killed, _) => "killed",
            (MountState::Mounted, true) => "serving",
            (MountState::Mounted, false) => "dead",
        };
        let status = if alive { read_status(rec) } else { None };
        let updated = status.as_ref().and_then(|s| s["updated_unix_ms"].as_u64());
        let stale = match updated {
            Some(t) => now_ms.saturating_sub(t) > STALE_SECS * 1000,
            None => true,
        };
        mounts.push(json!({
            "id": rec.id,
            "node": rec.node,
            "backend": rec.backend,
            "mountpoint": rec.mountpoint,
            "pid": rec.pid,
            "alive": alive,
            "state": state,
            "options": rec.options,
            "consistency": rec.consistency,
            "attach": if rec.nicfs.is_some() { "nicfs" } else { "host-only" },
            "nicfs_socket": rec.nicfs,
            "log": rec.log,
            "status_stale": alive && stale,
            "libfs": status.as_ref().map_or(Value::Null, |s| s["libfs"].clone()),
        }));
        processes.push(json!({
            "role": "mount",
            "node": rec.node,
            "pid": rec.pid,
            "alive": alive,
            "state": state,
            "log": rec.log,
            "mount_id": rec.id,
            "backend": rec.backend,
            "mountpoint": rec.mountpoint,
            "attach": if rec.nicfs.is_some() { "nicfs" } else { "host-only" },
        }));
    }
    let nodes: Vec<Value> = desc
        .nodes
        .iter()
        .map(|n| {
            let live = mounts.iter().find(|m| {
                m["node"] == json!(n.index) && m["backend"] == json!(Backend::Linefs) && m["alive"] == json!(true)
            });
            let libfs = live.map(|m| &m["libfs"]);
            let field = |k: &str| libfs.and_then(|l| l[k].as_str()).map(str::to_string);
            json!({
                "index": n.index,
                "pm_path": n.pm_path,
                "pm_size": n.pm_size,
                "mounted": live.is_some(),
                "pm_backing": field("backing").unwrap_or_else(|| "not mounted".to_string()),
                "persist_method": field("persist_method").unwrap_or_else(|| "not mounted".to_string()),
                "mode": node_mode(&desc, n.index, &processes),
            })
        })
        .collect();
    let cluster = cluster_view(dir, &desc, &processes);
    Ok(json!({
        "dir": dir.root,
        "up": true,
        "created": desc.created,
        "pm_dir": desc.pm_dir,
        "zk": desc.zk,
        "cluster": cluster,
        "offload": desc.offload().name(),
        "nic_cpus": desc.nic_cpus,
        "metrics_port": desc.metrics_port,
        "nodes": nodes,
        "processes": processes,
        "mounts": mounts,
    }))
}

/// The leaves of a JSON value as `(dotted.path, value)` pairs, in the value's order:
/// `host.mode`, `sessions[0].slot`. An empty object or array is one leaf.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    let join = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
    match v {
        Value::Object(m) if !m.is_empty() => m.iter().for_each(|(k, x)| flatten(&join(k), x, out)),
        Value::Array(a) if !a.is_empty() => {
            a.iter().enumerate().for_each(|(i, x)| flatten(&format!("{prefix}[{i}]"), x, out))
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

/// One line about a process for the table: what its role's status says in brief.
fn process_detail(p: &Value) -> String {
    match p["role"].as_str() {
        Some("nicfs") => {
            let st = &p["status"];
            if st.is_null() {
                return if p["alive"] == json!(true) { "no status yet".to_string() } else { "-".to_string() };
            }
            let mut d = vec![format!("mode {}", p["mode"].as_str().unwrap_or("?"))];
            if let Some(n) = st["sessions"].as_array().map(Vec::len) {
                d.push(format!("{n} session{}", if n == 1 { "" } else { "s" }));
            }
            let c = &st["counters"];
            if let (Some(e), Some(b)) = (c["entries_published"].as_u64(), c["bytes_published"].as_u64()) {
                d.push(format!("{e} entries / {} published", human_size(b)));
            }
            if let Some(r) = c["rejections"].as_u64() {
                d.push(format!("{r} rejection{}", if r == 1 { "" } else { "s" }));
            }
            if let Some(a) = p["metrics_addr"].as_str() {
                d.push(format!("metrics http://{a}/metrics"));
            }
            d.join(", ")
        }
        Some("kworker") if p["alive"] == json!(true) => {
            if p["attached"] == json!(true) { "attached to nicfs" } else { "not attached" }.to_string()
        }
        Some("mount") => {
            format!("{} ({})", p["mountpoint"].as_str().unwrap_or("?"), p["attach"].as_str().unwrap_or("?"))
        }
        _ => "-".to_string(),
    }
}

/// A latency in µs, in the unit that suits it: `850µs`, `12.3ms`, `1.20s`.
fn duration_us(us: u64) -> String {
    match us {
        0..=999 => format!("{us}µs"),
        1_000..=999_999 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

/// `p50 p99 p99.9 max` of a latency summary (`{count, p50_us, …}`), each 8 wide; dashes when
/// nothing was recorded.
fn quantiles(q: &Value) -> String {
    let keys = ["p50_us", "p99_us", "p999_us", "max_us"];
    if q["count"].as_u64().unwrap_or(0) == 0 {
        return keys.iter().map(|_| format!("{:>8}", "-")).collect::<Vec<_>>().join(" ");
    }
    keys.iter().map(|k| format!("{:>8}", duration_us(q[*k].as_u64().unwrap_or(0)))).collect::<Vec<_>>().join(" ")
}

/// nicfs's stages and end-to-end latencies (from its status file) as a compact table; empty
/// if the status has neither (an older nicfs).
fn latency_table(st: &Value) -> String {
    let mut out = String::new();
    let stages = st["stages"].as_array().cloned().unwrap_or_default();
    let heading = "     p50      p99    p99.9      max";
    if !stages.is_empty() {
        out.push_str(&format!(
            "  {:<9} {:>5} {:>7} {:>8}  WAIT{heading}  SERVICE{heading}\n",
            "STAGE", "QUEUE", "THREADS", "ITEMS"
        ));
        for t in &stages {
            let threads = format!("{}/{}", t["threads"].as_u64().unwrap_or(0), t["max_threads"].as_u64().unwrap_or(0));
            // Aligned under the headings: "WAIT" and "SERVICE" stand before the first column.
            out.push_str(&format!(
                "  {:<9} {:>5} {:>7} {:>8}      {}         {}\n",
                t["stage"].as_str().unwrap_or("?"),
                t["queue"].as_u64().unwrap_or(0),
                threads,
                t["handled"].as_u64().unwrap_or(0),
                quantiles(&t["wait"]),
                quantiles(&t["service"]),
            ));
        }
    }
    let lat = &st["latency"];
    if lat.is_object() {
        out.push_str(&format!("  {:<33} {:>8}  {heading}\n", "END TO END", "COUNT"));
        for (key, what) in [("chunk", "chunk (ChunkReady → Published)"), ("fsync", "fsync (Fsync → FsyncDone)")] {
            let q = &lat[key];
            out.push_str(&format!("  {what:<33} {:>8}  {}\n", q["count"].as_u64().unwrap_or(0), quantiles(q)));
        }
    }
    out
}

/// `v` as text: a string as it is, null as `-`, anything else as JSON.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    }
}

/// One node of the cluster view (an entry of `cluster.nodes`): its session, epoch, chain
/// position and mode on one line, then its peer links, one compact line per peer, then how
/// far each client slot is replicated.
fn cluster_node_lines(n: &Value) -> String {
    let s = text;
    let epoch = |e: &Value| if e.as_u64() == Some(0) { "none yet".to_string() } else { s(e) };
    let mut out = String::new();
    let expiring = if n["may_be_expired"] == json!(true) { ", may be expired" } else { "" };
    let head = if n["chain_pos"].as_u64() == Some(0) { " (head)" } else { "" };
    let timeout = n["session_timeout_ms"].as_u64().map(|ms| format!(", session timeout {ms} ms")).unwrap_or_default();
    let mode = n["mode"].as_str().map(|m| format!(", mode {m}")).unwrap_or_default();
    out.push_str(&format!(
        "  node {}: session {}{expiring}, epoch {} (persisted {}), chain position {}{head}{mode}{timeout}{}\n",
        s(&n["node"]),
        s(&n["session"]),
        epoch(&n["epoch"]),
        s(&n["persisted_epoch"]),
        s(&n["chain_pos"]),
        n["last_error"].as_str().map(|e| format!(", last error: {e}")).unwrap_or_default()
    ));
    let p = &n["peers"];
    if p.is_object() {
        out.push_str(&format!(
            "    peers on {} (low-latency) and {} (bulk), {} refused, {} stale dropped\n",
            s(&p["low_latency_addr"]),
            s(&p["bulk_addr"]),
            s(&p["refused"]),
            s(&p["stale_dropped"])
        ));
        for l in p["links"].as_array().into_iter().flatten() {
            let rtt = l["rtt_us"].as_u64().map_or("-".to_string(), |us| format!("{us} us"));
            let error = l["last_error"].as_str().map(|e| format!(", last error: {e}")).unwrap_or_default();
            out.push_str(&format!(
                "      node {}: low-latency {}, bulk {}, epoch seen {}, rtt {rtt}{error}\n",
                s(&l["node"]),
                s(&l["low_latency"]),
                s(&l["bulk"]),
                s(&l["epoch_seen"])
            ));
        }
    }
    // ---- Replication lag (repl-driver's `replication` object of nicfs's status file) ----
    out.push_str(&replication_lines(&n["replication"]));
    out
}

/// Renders the status as a human-readable report.
pub fn render(v: &Value) -> String {
    let s = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    let mut out = String::new();
    out.push_str(&format!("cluster  {}  (up, created {})\n", s(&v["dir"]), s(&v["created"])));
    let c = &v["cluster"];
    if c.is_object() {
        let zk = &c["zookeeper"];
        let started = match zk["started_by_up"].as_bool() {
            Some(true) => {
                let pids: Vec<String> = zk["server_pids"].as_array().into_iter().flatten().map(s).collect();
                match pids.is_empty() {
                    true => "started by up, not running".to_string(),
                    false => format!("started by up, pid {}", pids.join(" ")),
                }
            }
            _ => "--zk ensemble".to_string(),
        };
        let reach = if zk["reachable"] == json!(true) { "reachable" } else { "UNREACHABLE" };
        out.push_str(&format!("zk       {} ({reach}; {started})\n", s(&zk["connect"])));
        let ids = |a: &Value| match a.as_array().map(|a| a.iter().map(s).collect::<Vec<_>>().join(" ")) {
            Some(list) if !list.is_empty() => list,
            _ => "-".to_string(),
        };
        let epoch = |e: &Value| if e.as_u64() == Some(0) { "none yet".to_string() } else { s(e) };
        out.push_str(&format!(
            "cluster  epoch {}, chain {} (head first), members {}\n",
            epoch(&c["epoch"]),
            ids(&c["chain"]),
            ids(&c["members"])
        ));
        for n in c["nodes"].as_array().into_iter().flatten() {
            out.push_str(&cluster_node_lines(n));
        }
    } else if !v["zk"].is_null() {
        out.push_str(&format!("zk       {} (recorded)\n", s(&v["zk"])));
    }
    match v["offload"].as_str() {
        Some("on") => out.push_str(&format!(
            "offload  on: nicfs and kworker on every node, mounts attach to nicfs{}\n",
            v["nic_cpus"].as_str().map(|c| format!(" (nicfs on CPUs {c})")).unwrap_or_default()
        )),
        _ => out.push_str("offload  off: host-only, each mount opens its node's PM\n"),
    }
    out.push_str(
        "\nNODE  PM (node directory)                       SIZE       BACKING          PERSIST          MODE\n",
    );
    for n in v["nodes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<5} {:<41} {:<10} {:<16} {:<16} {}\n",
            s(&n["index"]),
            s(&n["pm_path"]),
            human_size(n["pm_size"].as_u64().unwrap_or(0)),
            s(&n["pm_backing"]),
            s(&n["persist_method"]),
            s(&n["mode"]),
        ));
    }
    let procs = v["processes"].as_array().cloned().unwrap_or_default();
    if procs.is_empty() {
        out.push_str("\nno processes\n");
    } else {
        out.push_str("\nROLE     NODE  PID      STATE        DETAIL\n");
        for p in &procs {
            out.push_str(&format!(
                "{:<8} {:<5} {:<8} {:<12} {}\n",
                s(&p["role"]),
                s(&p["node"]),
                s(&p["pid"]),
                s(&p["state"]),
                process_detail(p),
            ));
        }
    }
    for p in procs.iter().filter(|p| p["role"] == json!("nicfs") && !p["status"].is_null()) {
        let stale = if p["status_stale"] == json!(true) { " (stale)" } else { "" };
        let age = p["status_age_ms"].as_u64().map(|ms| format!(", written {:.1} s ago", ms as f64 / 1000.0));
        out.push_str(&format!("\nnicfs of node {}{}{stale}\n", s(&p["node"]), age.unwrap_or_default()));
        out.push_str(&latency_table(&p["status"]));
        let mut rest = p["status"].clone();
        if let Some(m) = rest.as_object_mut() {
            // Shown by the table above.
            m.remove("stages");
            m.remove("latency");
        }
        let mut leaves = Vec::new();
        flatten("", &rest, &mut leaves);
        for (k, val) in leaves {
            out.push_str(&format!("  {k:<30} {}\n", s(&val)));
        }
    }
    let mounts = v["mounts"].as_array().cloned().unwrap_or_default();
    if mounts.is_empty() {
        out.push_str("\nno mounts\n");
        return out;
    }
    out.push_str("\nID  NODE  MOUNTPOINT                           PID      STATE    OPTIONS\n");
    for m in &mounts {
        let opts = m["options"].as_array().map(|o| o.iter().map(s).collect::<Vec<_>>().join(","));
        out.push_str(&format!(
            "{:<3} {:<5} {:<36} {:<8} {:<8} {}\n",
            s(&m["id"]),
            s(&m["node"]),
            s(&m["mountpoint"]),
            s(&m["pid"]),
            s(&m["state"]),
            opts.filter(|o| !o.is_empty()).unwrap_or_else(|| "-".to_string()),
        ));
    }
    for m in &mounts {
        let Some(l) = m["libfs"].as_object() else { continue };
        let stale = if m["status_stale"] == json!(true) { " (stale)" } else { "" };
        out.push_str(&format!("\nlibfs of mount {} ({}){stale}\n", s(&m["id"]), s(&m["mountpoint"])));
        for (k, val) in l {
            out.push_str(&format!("  {k:<22} {}\n", s(val)));
        }
    }
    out
}

/// A node's chain replication (its nicfs status's `replication`) as `status` lines: the
/// counters, the stages (compression, flow, per peer queues and latencies), per own log each chain member's acknowledged LSN and lag, per replica copy how
/// far it is durable and published; empty without one.
fn replication_lines(r: &Value) -> String {
    if !r.is_object() {
        return String::new();
    }
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let c = &r["counters"];
    let mut out = format!(
        "    replication: {} chunks sent ({} bytes on the wire), {} retransmitted, {} acks in, {} bytes in, {} stale dropped, {} refused, {} fsyncs waiting, {} bytes held\n",
        n(&c["chunks_sent"]),
        n(&c["bytes_sent"]),
        n(&c["retransmits"]),
        n(&c["acks_received"]),
        n(&c["bytes_received"]),
        n(&c["stale_dropped"]),
        n(&c["refused_entries"]),
        n(&r["fsyncs_waiting"]),
        n(&r["memory_bytes"]),
    );
    let (z, f) = (&r["compression"], &r["flow"]);
    // A nicfs without replication stages (older) reports neither object: no line.
    if z.is_object() || f.is_object() {
        out.push_str(&format!(
        "      stages: {} raw bytes, {} saved by lz4 ({} chunks compressed, {} not), lz4 {} ({} switches), flow {} ({} pauses)\n",
        n(&c["raw_bytes_sent"]),
        n(&c["saved_bytes"]),
        n(&c["chunks_compressed"]),
        n(&c["chunks_uncompressed"]),
        if z["on"].as_bool().unwrap_or(false) { "on" } else { "off" },
        n(&z["switches_on"]) + n(&z["switches_off"]),
        if f["paused"].as_bool().unwrap_or(false) { "paused" } else { "running" },
        n(&f["pauses"]),
        ));
    }
    for p in r["peers"].as_array().into_iter().flatten() {
        let (a, k) = (&p["append_to_send"], &p["send_to_ack"]);
        out.push_str(&format!(
            "      to node {}: queues {} lz4, {} send; append→send p50 {} µs p99 {} µs; send→ack p50 {} µs p99 {} µs\n",
            n(&p["node"]),
            n(&p["compress_queue"]),
            n(&p["send_queue"]),
            n(&a["p50_us"]),
            n(&a["p99_us"]),
            n(&k["p50_us"]),
            n(&k["p99_us"]),
        ));
    }
    for l in r["logs"].as_array().into_iter().flatten() {
        let members: Vec<String> = l["members"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let acked = m["acked_lsn"].as_u64().map_or("-".to_string(), |a| a.to_string());
                format!(
                    "node {} acked {acked} (lag {} bytes, {} ms)",
                    n(&m["node"]),
                    n(&m["lag_bytes"]),
                    n(&m["lag_ms"])
                )
            })
            .collect();
        out.push_str(&format!(
            "      slot {}: appended {}, replicated {}; {}\n",
            n(&l["slot"]),
            n(&l["appended_lsn"]),
            n(&l["replicated_lsn"]),
            if members.is_empty() { "no other member".to_string() } else { members.join(", ") }
        ));
    }
    for c in r["copies"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "      copy of node {} slot {}: durable {}, published {}\n",
            n(&c["origin"]),
            n(&c["slot"]),
            n(&c["durable_lsn"]),
            n(&c["published_lsn"])
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real `status --json` of a three-node cluster (node 1's host killed: isolated), with a
    /// `replication` object added to node 0 as the replication driver reports it.
    const THREE_NODES: &str = include_str!("../tests/data/status-3-nodes.json");

    #[test]
    fn the_cluster_view_shows_members_epoch_chain_modes_peers_and_replication() {
        let v: Value = serde_json::from_str(THREE_NODES).unwrap();
        let text = render(&v);
        let lines: Vec<&str> = text.lines().collect();
        let at = |prefix: &str| {
            lines.iter().position(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix:?} in\n{text}"))
        };
        assert_eq!(lines[at("cluster  epoch")], "cluster  epoch 3, chain 0 1 2 (head first), members 0 1 2");
        assert!(lines[at("zk ")].contains("(reachable; started by up, pid 30987)"), "{text}");
        let n0 = at("  node 0: ");
        assert_eq!(
            lines[n0],
            "  node 0: session connected, epoch 3 (persisted 3), chain position 0 (head), mode normal, session \
             timeout 1500 ms"
        );
        assert!(lines[n0 + 1].starts_with("    peers on 127.0.0.1:45603 (low-latency) and 127.0.0.1:44711 (bulk)"));
        assert_eq!(
            lines[n0 + 2],
            "      node 1: low-latency connected, bulk connected, epoch seen 3, rtt 580 us",
            "{text}"
        );
        assert!(lines[n0 + 3].starts_with("      node 2: "), "{text}");
        // Node 0's replication: the counters, per own log slot each member's acked LSN and
        // lag, per replica copy how far it is durable and published.
        assert!(lines[n0 + 4].starts_with("    replication: 4 chunks sent (9000 bytes on the wire)"), "{text}");
        assert_eq!(
            lines[n0 + 5],
            "      slot 0: appended 8192, replicated 4096; node 1 acked 8192 (lag 0 bytes, 0 ms), node 2 acked 4096 \
             (lag 4096 bytes, 3 ms)"
        );
        assert_eq!(lines[n0 + 6], "      copy of node 2 slot 1: durable 640, published 576", "{text}");
        let n1 = at("  node 1: ");
        assert_eq!(n1, n0 + 7, "{text}");
        assert!(lines[n1].contains("chain position 1, mode isolated"), "{text}");
        // No replication object (node 1's; node 2's null): no lines.
        let n2 = at("  node 2: ");
        assert_eq!(n2, n1 + 4, "peers and two links only: {text}");
        assert!(lines[n2 + 4].starts_with("offload "), "{text}");
        // The nodes table and the process table say the same modes.
        assert!(lines[at("1     ")].ends_with("isolated"), "{text}");
        assert!(lines[at("nicfs    1")].contains("mode isolated"), "{text}");
    }

    #[test]
    fn replication_lines_show_each_member_and_copy() {
        assert_eq!(replication_lines(&Value::Null), "");
        let r = json!({
            "counters": {"chunks_sent": 4, "bytes_sent": 900, "retransmits": 1, "acks_received": 8, "bytes_received": 10, "stale_dropped": 0, "refused_entries": 0},
            "fsyncs_waiting": 1,
            "memory_bytes": 4096,
            "logs": [{"slot": 0, "appended_lsn": 4096, "replicated_lsn": 2048, "members": [
                {"node": 1, "acked_lsn": 4096, "lag_bytes": 0, "lag_ms": 0},
                {"node": 2, "acked_lsn": null, "lag_bytes": 2048, "lag_ms": 35}]}],
            "copies": [{"origin": 1, "slot": 3, "durable_lsn": 640, "published_lsn": 576}],
        });
        let text = replication_lines(&r);
        assert!(text.contains("4 chunks sent (900 bytes on the wire), 1 retransmitted"), "{text}");
        assert!(text.contains("slot 0: appended 4096, replicated 2048; node 1 acked 4096 (lag 0 bytes, 0 ms), node 2 acked - (lag 2048 bytes, 35 ms)"), "{text}");
        assert!(text.contains("copy of node 1 slot 3: durable 640, published 576"), "{text}");
    }

    #[test]
    fn replication_lines_show_the_stages() {
        let r = json!({
            "counters": {"raw_bytes_sent": 9000, "saved_bytes": 7000, "chunks_compressed": 4, "chunks_uncompressed": 2},
            "compression": {"on": true, "switches_on": 1, "switches_off": 2},
            "flow": {"paused": false, "pauses": 3},
            "peers": [{"node": 1, "compress_queue": 5, "send_queue": 2,
                "append_to_send": {"p50_us": 40, "p99_us": 90}, "send_to_ack": {"p50_us": 250, "p99_us": 1500}}],
        });
        let text = replication_lines(&r);
        assert!(text.contains("stages: 9000 raw bytes, 7000 saved by lz4 (4 chunks compressed, 2 not), lz4 on (3 switches), flow running (3 pauses)"), "{text}");
        assert!(
            text.contains(
                "to node 1: queues 5 lz4, 2 send; append→send p50 40 µs p99 90 µs; send→ack p50 250 µs p99 1500 µs"
            ),
            "{text}"
        );
    }

    #[test]
    fn durations_take_the_unit_that_suits_them() {
        assert_eq!(
            [0, 850, 1_000, 12_345, 999_999, 1_000_000, 61_234_567].map(duration_us),
            ["0µs", "850µs", "1.0ms", "12.3ms", "1000.0ms", "1.00s", "61.23s"]
        );
    }

    #[test]
    fn the_latency_table_has_a_row_per_stage_and_the_end_to_end_rows() {
        let q = |n: u64| json!({"count": n, "p50_us": 40, "p99_us": 900, "p999_us": 2_500, "max_us": 3_000_000});
        let st = json!({
            "stages": [
                {"stage": "fetch", "queue": 3, "threads": 2, "max_threads": 4, "handled": 17, "wait": q(17), "service": q(17)},
                {"stage": "publish", "queue": 0, "threads": 1, "max_threads": 1, "handled": 0, "wait": q(0), "service": q(0)},
            ],
            "latency": {"chunk": q(5), "fsync": q(0)},
        });
        let t = latency_table(&st);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "{t}");
        assert!(lines[0].contains("STAGE") && lines[0].contains("WAIT") && lines[0].contains("SERVICE"), "{t}");
        let fetch: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(fetch[..4], ["fetch", "3", "2/4", "17"], "{t}");
        assert_eq!(fetch[4..], ["40µs", "900µs", "2.5ms", "3.00s", "40µs", "900µs", "2.5ms", "3.00s"], "{t}");
        assert_eq!(lines[2].split_whitespace().filter(|w| *w == "-").count(), 8, "nothing recorded: {t}");
        assert!(lines[4].contains("chunk") && lines[4].contains(" 5 ") && lines[4].contains("3.00s"), "{t}");
        assert!(lines[5].contains("fsync") && lines[5].trim_end().ends_with('-'), "{t}");
        // A status without them (an older nicfs) has no table.
        assert_eq!(latency_table(&json!({"pid": 1})), "");
    }
}
