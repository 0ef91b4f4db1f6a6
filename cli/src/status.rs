//! `linefs status`: the cluster, its nodes and mounts, and each mount's libfs status as the
//! mount daemon last wrote it (every second) to `run/mount-<id>.status.json`.
//!
//! Nothing is opened to answer: a node's PM backing and persist method are known only from
//! a live mount's status; an unmounted node says "not mounted".

use serde_json::{json, Value};

use crate::clusterdir::{Backend, ClusterDir, MountRec, MountState};
use crate::procs;
use crate::util::{human_size, unix_now, CliResult};

/// A status file older than this is reported as stale.
const STALE_SECS: u64 = 5;

fn read_status(rec: &MountRec) -> Option<Value> {
    let text = std::fs::read_to_string(&rec.status_file).ok()?;
    serde_json::from_str(&text).ok()
}

/// The status of the cluster in `dir`, as one JSON value.
pub fn collect(dir: &ClusterDir) -> CliResult<Value> {
    let desc = dir.load_up()?;
    let reg = dir.registry()?;
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
            "log": rec.log,
            "status_stale": alive && stale,
            "libfs": status.as_ref().map_or(Value::Null, |s| s["libfs"].clone()),
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
            })
        })
        .collect();
    Ok(json!({
        "dir": dir.root,
        "up": true,
        "created": desc.created,
        "pm_dir": desc.pm_dir,
        "zk": desc.zk,
        "nodes": nodes,
        "mounts": mounts,
    }))
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
    if !v["zk"].is_null() {
        out.push_str(&format!("zk       {} (recorded; clustermgr not built yet)\n", s(&v["zk"])));
    }
    out.push_str("\nNODE  PM (node directory)                       SIZE       BACKING          PERSIST\n");
    for n in v["nodes"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<5} {:<41} {:<10} {:<16} {}\n",
            s(&n["index"]),
            s(&n["pm_path"]),
            human_size(n["pm_size"].as_u64().unwrap_or(0)),
            s(&n["pm_backing"]),
            s(&n["persist_method"]),
        ));
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
