//! Every node of a three-node cluster through the built `linefs` binary: `mount --node 1` and
//! `--node 2` attach to their own node's nicfs and keep what is fsynced through them;
//! `kill-host N` / `restart-host N` (the node goes isolated and back to normal, status says so
//! in its cluster view too), `kill-nic N` / `restart-nic N` and `fsck --node N`, live and at
//! rest, act on node N and no other. (Until replication lands each node is a file system of
//! its own; nothing here depends on whether a node sees the others' files.)
//!
//! Needs `nicfs` and `kworker` built beside `linefs` (`cargo build --bins`), java and the
//! `zookeeper` package (scripts/install-deps.sh), and `/dev/fuse`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;
#[path = "common/cli.rs"]
mod common;
use common::{need_daemons, ok, status, wait_for, Down};

fn mounted(path: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let path = path.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(path))
}

fn pid(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join("run").join(format!("{name}.pid"))).unwrap_or_default()
}

/// Writes `name` through `mnt` and fsyncs it.
fn write_synced(mnt: &Path, name: &str, data: &[u8]) {
    let mut f = fs::File::create(mnt.join(name)).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// Node `n`'s mode as the cluster view of `status --json` shows it.
fn cluster_mode(st: &Value, n: usize) -> String {
    st["cluster"]["nodes"][n]["mode"].as_str().unwrap_or_default().to_string()
}

#[test]
fn mounts_and_node_verbs_act_on_every_node_of_three() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let mnts: Vec<PathBuf> = (0..3).map(|n| tmp.path().join(format!("m{n}"))).collect();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "3", "--pm-size", "64M"]);
    let data = |n: usize| format!("fsynced through node {n}'s mount").into_bytes();
    for (n, m) in mnts.iter().enumerate() {
        fs::create_dir(m).unwrap();
        let out = ok(&dir, &["mount", "--node", &n.to_string(), m.to_str().unwrap()]);
        assert!(out.contains("attached to nicfs"), "{out}");
        write_synced(m, &format!("from-{n}"), &data(n));
    }
    let mut st = Value::Null;
    wait_for("three connected members", Duration::from_secs(20), || {
        st = status(&dir);
        (0..3).all(|n| st["cluster"]["nodes"][n]["session"] == "connected")
    });
    for n in 0..3 {
        let m = &st["mounts"][n];
        assert_eq!((&m["node"], &m["attach"]), (&Value::from(n), &Value::from("nicfs")), "{m:#}");
        let socket = m["nicfs_socket"].as_str().unwrap();
        assert!(socket.ends_with(&format!("nicfs-{n}.sock")), "mount {n} attaches to node {n}'s nicfs: {socket}");
        assert_eq!(cluster_mode(&st, n), "normal", "{:#}", st["cluster"]);
    }
    let text = ok(&dir, &["status"]);
    assert!(text.contains("node 2: session connected") && text.contains("mode normal"), "{text}");

    // A host crash of node 1: its mount and kworker die, its nicfs goes isolated (status says so
    // in the cluster view), nodes 0 and 2 are untouched; restart-host remounts it.
    let others = [pid(&dir, "kworker-0"), pid(&dir, "kworker-2")];
    ok(&dir, &["kill-host", "1"]);
    assert!(!mounted(&mnts[1]) && mounted(&mnts[0]) && mounted(&mnts[2]));
    wait_for("node 1 isolated", Duration::from_secs(5), || cluster_mode(&status(&dir), 1) == "isolated");
    let text = ok(&dir, &["status"]);
    assert!(text.contains("chain position 1, mode isolated"), "{text}");
    assert_eq!([pid(&dir, "kworker-0"), pid(&dir, "kworker-2")], others, "only node 1's host");
    ok(&dir, &["restart-host", "1"]);
    wait_for("node 1 normal again", Duration::from_secs(5), || cluster_mode(&status(&dir), 1) == "normal");
    assert_eq!(fs::read(mnts[1].join("from-1")).unwrap(), data(1));

    // A crash of node 2's NIC and host: restart-nic recovers node 2 from its PM (the mount's
    // log with it), restart-host remounts; node 0's and 1's nicfs are the same processes.
    let nicfs = [pid(&dir, "nicfs-0"), pid(&dir, "nicfs-1")];
    ok(&dir, &["kill-nic", "2"]);
    ok(&dir, &["kill-host", "2"]);
    assert!(!mounted(&mnts[2]));
    ok(&dir, &["restart-nic", "2"]);
    ok(&dir, &["restart-host", "2"]);
    assert_eq!(fs::read(mnts[2].join("from-2")).unwrap(), data(2));
    assert_eq!([pid(&dir, "nicfs-0"), pid(&dir, "nicfs-1")], nicfs, "only node 2's nicfs");
    for (n, m) in mnts.iter().enumerate() {
        assert_eq!(fs::read(m.join(format!("from-{n}"))).unwrap(), data(n), "node {n}");
    }

    // fsck of each node, live and at rest.
    for n in ["0", "1", "2"] {
        let out = ok(&dir, &["fsck", "--node", n]);
        assert!(out.contains("live"), "{out}");
    }
    ok(&dir, &["down"]);
    for n in ["0", "1", "2"] {
        ok(&dir, &["fsck", "--node", n]);
    }
    assert!(common::linefs(&dir, &["fsck", "--node", "3"]).status.code() != Some(0), "node 3 does not exist");
    // `up` without --nodes brings back as many nodes as were recorded, whatever the default.
    let out = ok(&dir, &["up"]);
    assert!(out.contains("is up: 3 nodes"), "{out}");
    assert_eq!(status(&dir)["nodes"].as_array().map(Vec::len), Some(3));
    ok(&dir, &["down"]);
}
