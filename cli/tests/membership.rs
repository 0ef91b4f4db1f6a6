//! The cluster's ZooKeeper and membership through the built `linefs` binary, over a real
//! ZooKeeper (the Debian package) and the real daemons: `up` starts ZooKeeper and every nicfs
//! joins (status shows the epoch, chain and members); `kill-nic` + `restart-nic` raise the
//! epoch and the node record (read with pm's reader) follows; ZooKeeper killed (kill -9) under
//! an fsyncing write load through a mount and started again by a second `up` loses nothing
//! acknowledged while nicfs logs its retries and keeps its pid; `down` leaves no java; a
//! `--zk` nobody answers, a missing java and a server count other than 1 or 3 are refused in
//! one line; several nodes come up as members and a restarted one rejoins at the tail.
//!
//! Needs `nicfs` and `kworker` built beside `linefs` (`cargo build --bins`), java and the
//! `zookeeper` package (scripts/install-deps.sh); the mount test needs `/dev/fuse`.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use linefs_pm::noderecord::NodeRecord;
use serde_json::Value;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;
#[path = "common/cli.rs"]
mod common;
use common::{linefs, need_daemons, ok, status, wait_for, Down, LINEFS};

/// The cluster's view once node 0 is connected in it and has persisted it.
fn settled(dir: &Path, above: u64) -> Value {
    let mut last = Value::Null;
    wait_for(&format!("node 0 connected in an epoch above {above}"), Duration::from_secs(20), || {
        last = status(dir)["cluster"].clone();
        let n = &last["nodes"][0];
        n["session"] == "connected"
            && n["epoch"].as_u64().is_some_and(|e| e > above)
            && n["persisted_epoch"] == n["epoch"]
    });
    last
}

/// Live processes whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmd) = fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let zombie = stat.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z'));
        if !zombie && String::from_utf8_lossy(&cmd).contains(needle) {
            out.push(pid);
        }
    }
    out
}

/// Java processes of this cluster's ZooKeeper (their config is under DIR/zk).
fn zk_javas(dir: &Path) -> Vec<i32> {
    processes_with(&dir.join("zk").display().to_string())
}

fn node_record(dir: &Path) -> NodeRecord {
    let public = dir.join("pm").join("node0").join(linefs_pm::node::PUBLIC_FILE);
    NodeRecord::load(&linefs_pm::PmRegion::open_read_only(&public).unwrap()).unwrap()
}

#[test]
fn up_joins_nicfs_and_a_restarted_nicfs_raises_the_persisted_epoch() {
    need_daemons();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    let out = ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    assert!(out.contains("ZooKeeper on 127.0.0.1:"), "{out}");
    let c = settled(&dir, 0);
    assert_eq!(c["zookeeper"]["reachable"], true, "{c:#}");
    assert_eq!(c["zookeeper"]["started_by_up"], true, "{c:#}");
    assert_eq!((&c["chain"], &c["members"]), (&serde_json::json!([0]), &serde_json::json!([0])), "{c:#}");
    assert_eq!(c["nodes"][0]["chain_pos"], 0, "{c:#}");
    let first = c["epoch"].as_u64().unwrap();
    assert!(first >= 1);
    let human = ok(&dir, &["status"]);
    assert!(human.contains(&format!("cluster  epoch {first}, chain 0")), "{human}");
    assert!(human.contains("node 0: session connected"), "{human}");
    let javas = zk_javas(&dir);
    assert_eq!(javas.len(), 1, "one ZooKeeper server: {javas:?}");

    ok(&dir, &["kill-nic", "0"]);
    ok(&dir, &["restart-nic", "0"]);
    let c = settled(&dir, first);
    let second = c["epoch"].as_u64().unwrap();
    assert!(second > first, "{c:#}");
    assert_eq!(c["nodes"][0]["persisted_epoch"], second, "{c:#}");

    let out = ok(&dir, &["down"]);
    assert!(out.contains("ZooKeeper stopped (1 server)"), "{out}");
    assert!(zk_javas(&dir).is_empty(), "down leaves no java of the cluster");
    let rec = node_record(&dir);
    assert_eq!((rec.node_id, rec.chain_pos, rec.epoch, rec.members), (Some(0), Some(0), second, 1), "{rec:?}");
    assert!(rec.history.iter().any(|h| h.epoch == first), "the first epoch is in the history: {rec:?}");

    // A second up goes on above the persisted epoch (ZooKeeper keeps its data under DIR/zk).
    ok(&dir, &["up", "--nodes", "1"]);
    let c = settled(&dir, second);
    assert!(c["epoch"].as_u64().unwrap() > second, "{c:#}");
    ok(&dir, &["down"]);
    assert!(zk_javas(&dir).is_empty());
}

/// Node ids of a JSON array.
fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().filter_map(Value::as_u64).collect()
}

/// Several nodes come up as members of one cluster (each still a file system of its own): a
/// killed nicfs leaves the view, a restarted one joins again at the tail, each node's record
/// holds the view it last saw.
#[test]
fn several_nodes_are_members_and_a_restarted_one_rejoins_at_the_tail() {
    need_daemons();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "3", "--pm-size", "64M"]);
    let all_in =
        |c: &Value, want: &[u64]| {
            ids(&c["members"]) == want
                && c["nodes"].as_array().unwrap().iter().all(|n| {
                    n["session"] == "connected" && n["epoch"] == c["epoch"] && n["persisted_epoch"] == c["epoch"]
                })
        };
    let mut c = Value::Null;
    wait_for("three members", Duration::from_secs(20), || {
        c = status(&dir)["cluster"].clone();
        all_in(&c, &[0, 1, 2])
    });
    let before = c["epoch"].as_u64().unwrap();
    ok(&dir, &["kill-nic", "1"]);
    wait_for("node 1 to leave the view", Duration::from_secs(20), || {
        c = status(&dir)["cluster"].clone();
        ids(&c["chain"]) == [0, 2] && c["epoch"].as_u64() > Some(before)
    });
    ok(&dir, &["restart-nic", "1"]);
    wait_for("node 1 back at the tail", Duration::from_secs(20), || {
        c = status(&dir)["cluster"].clone();
        ids(&c["chain"]) == [0, 2, 1] && all_in(&c, &[0, 1, 2])
    });
    assert_eq!(c["nodes"][1]["chain_pos"], 2, "{c:#}");
    let epoch = c["epoch"].as_u64().unwrap();
    assert!(epoch >= before + 2, "{c:#}");
    ok(&dir, &["down"]);
    let public = |i: usize| dir.join("pm").join(format!("node{i}")).join(linefs_pm::node::PUBLIC_FILE);
    for i in 0..3 {
        let rec = NodeRecord::load(&linefs_pm::PmRegion::open_read_only(&public(i)).unwrap()).unwrap();
        assert_eq!((rec.node_id, rec.epoch, rec.members), (Some(i as u32), epoch, 0b111), "node {i}: {rec:?}");
    }
    assert!(zk_javas(&dir).is_empty());
}

#[test]
fn a_zookeeper_nobody_answers_no_java_or_a_wrong_server_count_is_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    for (args, why) in [
        (&["up", "--nodes", "1", "--pm-size", "64M", "--zk", "127.0.0.1:1"][..], "unreachable"),
        (&["up", "--nodes", "1", "--pm-size", "64M", "--zk-servers", "2"][..], "--zk-servers 2"),
    ] {
        let out = linefs(&dir, args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr:?}");
        assert!(stderr.contains(why), "{stderr}");
    }
    // No java on the PATH: ZooKeeper cannot start, and up says so in one line.
    need_daemons();
    let out = Command::new(LINEFS)
        .env("PATH", "/nonexistent")
        .args(["up", "--nodes", "1", "--pm-size", "64M", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr:?}");
    assert!(stderr.contains("cannot start ZooKeeper: java not found"), "{stderr}");
    assert!(!dir.join("run").join("up").exists(), "nothing is up");
    assert!(!dir.join("cluster.json").exists(), "nothing recorded");
    assert!(processes_with(&dir.display().to_string()).is_empty(), "nothing left running");
}

/// Writes files through `mnt` (at most ~200 a second), each fsynced before it counts as
/// acknowledged, until `stop`.
fn writer(mnt: &Path, stop: &std::sync::atomic::AtomicBool) -> Vec<(String, Vec<u8>)> {
    let mut acked = Vec::new();
    let mut i = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        let name = format!("f{i:05}");
        let data: Vec<u8> = (0..16 * 1024 + i as usize % 4096).map(|b| (b as u64 * 31 + i) as u8).collect();
        let mut f = fs::File::create(mnt.join(&name)).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        acked.push((name, data));
        i += 1;
        // Paced: a steady load for as long as the outage lasts, well within the node's space.
        std::thread::sleep(Duration::from_millis(5));
    }
    acked
}

#[test]
fn zookeeper_killed_under_a_write_load_loses_nothing_acknowledged() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "256M"]);
    let first = settled(&dir, 0)["epoch"].as_u64().unwrap();
    let nicfs = fs::read_to_string(dir.join("run").join("nicfs-0.pid")).unwrap();
    ok(&dir, &["mount", mnt.to_str().unwrap()]);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let acked = std::thread::scope(|s| {
        let w = s.spawn(|| writer(&mnt, &stop));
        std::thread::sleep(Duration::from_millis(500));
        let pid_file = dir.join("zk").join("zk1").join("zookeeper.pid");
        let pid: i32 = fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        assert_eq!(zk_javas(&dir), [pid], "the recorded pid is the running server");
        // SAFETY: kill(2) on the ZooKeeper this test's `up` started (its recorded pid).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        // Past the session timeout (2 s): the session expires, nicfs retries.
        wait_for("nicfs to notice", Duration::from_secs(10), || {
            status(&dir)["cluster"]["nodes"][0]["session"] != "connected"
        });
        std::thread::sleep(Duration::from_secs(3));
        assert_eq!(status(&dir)["cluster"]["zookeeper"]["reachable"], false);
        let out = ok(&dir, &["up", "--nodes", "1"]);
        assert!(out.contains("ZooKeeper was not running: started again"), "{out}");
        settled(&dir, first);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Release);
        w.join().unwrap()
    });
    assert!(acked.len() > 10, "the load ran throughout: {} files", acked.len());
    let log = fs::read_to_string(dir.join("logs").join("nicfs-0.log")).unwrap();
    assert!(log.contains("retrying"), "nicfs logs its retries");
    assert!(!log.contains("panicked"), "nicfs never panics");
    assert_eq!(fs::read_to_string(dir.join("run").join("nicfs-0.pid")).unwrap(), nicfs, "the same nicfs");
    // Everything acknowledged is there, through a fresh mount of a restarted cluster.
    ok(&dir, &["down"]);
    assert!(zk_javas(&dir).is_empty(), "down leaves no java of the cluster");
    ok(&dir, &["up", "--nodes", "1"]);
    ok(&dir, &["mount", mnt.to_str().unwrap()]);
    for (name, data) in &acked {
        assert_eq!(fs::read(mnt.join(name)).unwrap_or_default(), *data, "{name}");
    }
    ok(&dir, &["down"]);
}
