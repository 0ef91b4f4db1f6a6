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
use std::time::{Duration, Instant};

use linefs_pm::noderecord::NodeRecord;
use serde_json::Value;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;
#[path = "common/cli.rs"]
mod common;
use common::{err, linefs, need_daemons, ok, status, wait_for, Down, LINEFS};

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
    assert!(
        human.contains("node 0: session connected, epoch ")
            && human.contains("chain position 0 (head), mode normal, session timeout 1500 ms"),
        "{human}"
    );
    assert_eq!((&c["nodes"][0]["mode"], &c["nodes"][0]["session_timeout_ms"]), (&"normal".into(), &1500.into()));
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
    let third = c["epoch"].as_u64().unwrap();
    assert!(third > second, "{c:#}");
    // ZooKeeper crashed on demand (`zk stop --kill`) and started again (`zk start`) at once:
    // nicfs is connected again (its session resumed, or it joined again above its epoch); the
    // verbs refuse what is not theirs to do.
    assert!(ok(&dir, &["zk", "stop", "--kill"]).contains("ZooKeeper killed (1 server)"));
    assert!(zk_javas(&dir).is_empty(), "the server is gone");
    assert!(ok(&dir, &["zk", "stop"]).contains("not running; nothing stopped"));
    assert!(ok(&dir, &["zk", "start"]).contains("ZooKeeper started again"));
    assert!(ok(&dir, &["zk", "start"]).contains("is running"), "a second start changes nothing");
    settled(&dir, third - 1);
    ok(&dir, &["down"]);
    assert!(zk_javas(&dir).is_empty());
    assert!(err(&dir, &["zk", "start"]).contains("no cluster"), "zk start needs an up cluster");
}

/// When a nicfs log first says, at or after `after`, that it persisted a view whose line holds
/// `chain`: that line's timestamp.
fn view_persisted_at(log: &str, chain: &str, after: std::time::SystemTime) -> Option<std::time::SystemTime> {
    log.lines()
        .filter(|l| l.contains("new view persisted") && l.contains(chain))
        .filter_map(log_time)
        .find(|&t| t >= after)
}

/// A log line's timestamp (`2026-11-26T07:13:12.123456Z`, UTC) as a system time.
fn log_time(line: &str) -> Option<std::time::SystemTime> {
    let stamp = line.split_whitespace().next()?;
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let d: Vec<i64> = date.split('-').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<u64> = hms.split(':').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    let (&[y, m, day], &[hh, mm, ss]) = (&d[..], &t[..]) else { return None };
    // Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    let nanos: u64 = format!("{frac:0<9}")[..9].parse().ok()?;
    let secs = u64::try_from(days).ok()? * 86_400 + hh * 3600 + mm * 60 + ss;
    Some(std::time::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_nanos(nanos))
}

#[test]
fn log_timestamps_read_as_system_times() {
    let log = "2026-11-26T07:13:12.250000Z  INFO nicfs::daemon::cluster: new view persisted epoch=5 chain=[0, 2]";
    let t = view_persisted_at(log, "chain=[0, 2]", std::time::UNIX_EPOCH).unwrap();
    assert_eq!(t.duration_since(std::time::UNIX_EPOCH).unwrap(), Duration::from_millis(1_795_677_192_250));
    assert_eq!(view_persisted_at(log, "chain=[0, 1]", std::time::UNIX_EPOCH), None);
    assert_eq!(view_persisted_at(log, "chain=[0, 2]", t + Duration::from_micros(1)), None, "only after");
}

/// Node ids of a JSON array.
fn ids(v: &Value) -> Vec<u64> {
    v.as_array().unwrap_or_else(|| panic!("not an array: {v}")).iter().filter_map(Value::as_u64).collect()
}

/// Several nodes come up as members of one cluster: a
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
    for n in c["nodes"].as_array().unwrap() {
        assert_eq!(n["session_timeout_ms"], 1500, "the default session timeout is granted: {c:#}");
    }
    // A crash of node 1 (SIGKILL) is detected by both others within 2 s (issue 24): from the
    // kill to the moment each persisted the view without it (their logs' timestamps).
    let pid: i32 = fs::read_to_string(dir.join("run").join("nicfs-1.pid")).unwrap().trim().parse().unwrap();
    let killed_at = std::time::SystemTime::now();
    // SAFETY: kill(2) on node 1's nicfs, started by this test's `up` (its recorded pid).
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    wait_for("node 1's nicfs gone", Duration::from_secs(10), || {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        stat.rsplit_once(')').is_none_or(|(_, r)| r.trim_start().starts_with('Z'))
    });
    wait_for("node 1 to leave the view", Duration::from_secs(20), || {
        c = status(&dir)["cluster"].clone();
        ids(&c["chain"]) == [0, 2] && c["epoch"].as_u64() > Some(before)
    });
    for peer in [0, 2] {
        let log = fs::read_to_string(dir.join("logs").join(format!("nicfs-{peer}.log"))).unwrap();
        let seen = view_persisted_at(&log, "chain=[0, 2]", killed_at)
            .unwrap_or_else(|| panic!("node {peer}: no view [0, 2] after the kill"));
        let took = seen.duration_since(killed_at).unwrap_or_default();
        eprintln!("node {peer} persisted the view without node 1 {took:?} after the kill");
        assert!(took <= Duration::from_secs(2), "node {peer} detected the crash after {took:?}");
    }
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
        (&["up", "--nodes", "3", "--pm-size", "64M", "--zk", "127.0.0.1:1"][..], "unreachable"),
        (&["up", "--nodes", "1", "--pm-size", "64M", "--zk-servers", "2"][..], "--zk-servers 2"),
    ] {
        let out = linefs(&dir, args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr:?}");
        assert!(stderr.contains(why), "{stderr}");
        assert!(!dir.exists(), "nothing is created");
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
    // A ZooKeeper that exits during start-up (its data directory is garbage): up names the
    // reason from its log in one line.
    let data = dir.join("zk").join("zk1").join("data").join("version-2");
    fs::create_dir_all(&data).unwrap();
    fs::write(data.join("log.1"), [0x5a; 4096]).unwrap();
    let stderr = err(&dir, &["up", "--nodes", "3", "--pm-size", "64M"]);
    assert!(stderr.contains("cannot start ZooKeeper: ZooKeeper server 1 exited during start-up"), "{stderr}");
    assert!(stderr.contains("Exception: ") && stderr.contains("zookeeper.log"), "the reason and the log: {stderr}");
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

/// What [`pool_writer`] had acknowledged.
#[derive(Default)]
struct Load {
    /// Per pool file, every append acknowledged (fsynced), in order, and when.
    appends: Vec<Vec<(Vec<u8>, Instant)>>,
    /// New files acknowledged (created, written, fsynced): name, bytes.
    created: Vec<(String, Vec<u8>)>,
    /// Creations refused (the file is then not acknowledged).
    create_errors: Vec<std::io::Error>,
}

/// The pool of files [`pool_writer`] appends to.
const POOL: usize = 16;

/// A write load through `mnt` until `stop`: appends of 4–8 KiB to the pool files `p00..`
/// (created first), each fsynced before it counts as acknowledged, and every tenth step a new
/// file, created, written and fsynced (a creation may be refused while ZooKeeper is away and
/// the node out of inode numbers: it is counted, never acknowledged).
fn pool_writer(mnt: &Path, stop: &std::sync::atomic::AtomicBool) -> Load {
    let mut load = Load { appends: vec![Vec::new(); POOL], ..Load::default() };
    let mut pool: Vec<fs::File> = (0..POOL)
        .map(|k| fs::OpenOptions::new().create(true).append(true).open(mnt.join(format!("p{k:02}"))).unwrap())
        .collect();
    let mut i = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Acquire) {
        let data: Vec<u8> = (0..4096 + i as usize % 4096).map(|b| (b as u64 * 31 + i) as u8).collect();
        if i.is_multiple_of(10) {
            let name = format!("n{i:05}");
            let created = fs::File::create(mnt.join(&name)).and_then(|mut f| {
                f.write_all(&data)?;
                f.sync_all()
            });
            match created {
                Ok(()) => load.created.push((name, data)),
                Err(e) => load.create_errors.push(e),
            }
        } else {
            let k = i as usize % POOL;
            pool[k].write_all(&data).unwrap();
            pool[k].sync_all().unwrap();
            load.appends[k].push((data, Instant::now()));
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    load
}

/// Checks that every file of `load` reads back through `mnt` as acknowledged: each pool file
/// exactly its appends, each new file its bytes.
fn check_load(mnt: &Path, load: &Load, when: &str) {
    for (k, appends) in load.appends.iter().enumerate() {
        let want: Vec<u8> = appends.iter().flat_map(|(d, _)| d.iter().copied()).collect();
        let got = fs::read(mnt.join(format!("p{k:02}"))).unwrap_or_default();
        assert!(got == want, "p{k:02} {when}: {} bytes, {} acknowledged", got.len(), want.len());
    }
    for (name, data) in &load.created {
        assert_eq!(fs::read(mnt.join(name)).unwrap_or_default(), *data, "{name} {when}");
    }
}

/// Each node's (epoch, persisted epoch) in a cluster view, None where a node reports none
/// (an epoch of 0: no view yet since its nicfs started).
fn epochs(c: &Value) -> Vec<(Option<u64>, Option<u64>)> {
    let nodes = c["nodes"].as_array().cloned().unwrap_or_default();
    nodes.iter().map(|n| (n["epoch"].as_u64().filter(|&e| e > 0), n["persisted_epoch"].as_u64())).collect()
}

/// Whether all three nodes are connected members of one view, each having persisted it.
fn three_connected(c: &Value) -> bool {
    ids(&c["members"]) == [0, 1, 2]
        && c["nodes"].as_array().is_some_and(|ns| {
            ns.len() == 3
                && ns.iter().all(|n| {
                    n["session"] == "connected" && n["epoch"] == c["epoch"] && n["persisted_epoch"] == c["epoch"]
                })
        })
}

/// ZooKeeper stopped (`linefs zk stop`) under an fsyncing write load through node 0 of a
/// three-node cluster, then started again (`linefs zk start`, same ports and data): the load
/// goes on throughout (nicfs serves; the sessions are suspended, and status says so), no
/// daemon exits, the members come back in one view, no node's epoch or persisted epoch ever
/// goes back, and every acknowledged file reads back with its bytes through node 0 — live,
/// and after `down` and `up`.
#[test]
fn zookeeper_stopped_under_a_write_load_on_three_nodes_loses_nothing_and_the_members_come_back() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "3", "--pm-size", "128M"]);
    let mut c = Value::Null;
    wait_for("three connected members", Duration::from_secs(20), || {
        c = status(&dir)["cluster"].clone();
        three_connected(&c)
    });
    let before = c["epoch"].as_u64().unwrap();
    let pids: Vec<String> =
        (0..3).map(|n| fs::read_to_string(dir.join("run").join(format!("nicfs-{n}.pid"))).unwrap()).collect();
    ok(&dir, &["mount", "--node", "0", mnt.to_str().unwrap()]);
    // Every status read checks that no node's epochs went back since the last.
    let mut last = epochs(&c);
    let mut watch = |c: &Value| {
        let now = epochs(c);
        for (n, (was, is)) in last.iter().zip(&now).enumerate() {
            assert!(is.0.is_none() || is.0 >= was.0, "node {n}'s epoch went back: {was:?} -> {is:?}");
            assert!(is.1.is_none() || is.1 >= was.1, "node {n}'s persisted epoch went back: {was:?} -> {is:?}");
        }
        last = now.iter().zip(&last).map(|(i, w)| (i.0.or(w.0), i.1.or(w.1))).collect();
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut back = None;
    let (load, outage) = std::thread::scope(|s| {
        let w = s.spawn(|| pool_writer(&mnt, &stop));
        std::thread::sleep(Duration::from_millis(500));
        let out = ok(&dir, &["zk", "stop"]);
        assert!(out.contains("ZooKeeper stopped (1 server)"), "{out}");
        let stopped = Instant::now();
        assert!(zk_javas(&dir).is_empty(), "zk stop leaves no java of the cluster");
        // The sessions are suspended (until the client gives them up, 7/5 of the timeout
        // later, and nicfs tries to join again): status says so, for every node.
        let mut suspended = [false; 3];
        wait_for("every session reported suspended", Duration::from_secs(5), || {
            let st = status(&dir);
            let c = &st["cluster"];
            watch(c);
            assert_eq!(c["zookeeper"]["reachable"], false);
            for (n, seen) in suspended.iter_mut().enumerate() {
                *seen |= c["nodes"][n]["session"] == "suspended";
            }
            suspended.iter().all(|&s| s)
        });
        let text = ok(&dir, &["status"]);
        assert!(text.contains("UNREACHABLE") && text.contains("started by up, not running"), "{text}");
        // Past the session timeout: the members give their sessions up and retry joining.
        while stopped.elapsed() < Duration::from_secs(3) {
            watch(&status(&dir)["cluster"]);
            std::thread::sleep(Duration::from_millis(200));
        }
        let out = ok(&dir, &["zk", "start"]);
        assert!(out.contains("ZooKeeper started again"), "{out}");
        let outage = (stopped, Instant::now());
        wait_for("the members back in one view", Duration::from_secs(20), || {
            let c = status(&dir)["cluster"].clone();
            watch(&c);
            back = c["epoch"].as_u64();
            three_connected(&c) && back > Some(before)
        });
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, std::sync::atomic::Ordering::Release);
        (w.join().unwrap(), outage)
    });
    let during = load.appends.iter().flatten().filter(|(_, t)| *t > outage.0 && *t < outage.1).count();
    let appends: usize = load.appends.iter().map(Vec::len).sum();
    eprintln!(
        "{appends} appends and {} new files acknowledged, {during} appends while ZooKeeper was down; {} creations \
         refused",
        load.created.len(),
        load.create_errors.len()
    );
    assert!(during > 10, "the load went on while ZooKeeper was down: {during} appends");
    for e in &load.create_errors {
        // Only a clear ENOSPC (no inode numbers to be had without ZooKeeper), never EIO.
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "a creation failed: {e}");
    }
    for (n, was) in pids.iter().enumerate() {
        let pid = fs::read_to_string(dir.join("run").join(format!("nicfs-{n}.pid"))).unwrap();
        assert_eq!(pid, *was, "node {n}'s nicfs is the same process");
        let log = fs::read_to_string(dir.join("logs").join(format!("nicfs-{n}.log"))).unwrap();
        assert!(log.contains("retrying"), "nicfs {n} logs its retries");
        assert!(!log.contains("panicked"), "nicfs {n} never panics");
    }
    check_load(&mnt, &load, "through the live mount");
    ok(&dir, &["down"]);
    assert!(zk_javas(&dir).is_empty(), "down leaves no java of the cluster");
    ok(&dir, &["up", "--nodes", "3"]);
    ok(&dir, &["mount", "--node", "0", mnt.to_str().unwrap()]);
    check_load(&mnt, &load, "after down and up");
    wait_for("the members in one view again after up", Duration::from_secs(20), || {
        let c = status(&dir)["cluster"].clone();
        watch(&c);
        three_connected(&c) && c["epoch"].as_u64() > back
    });
    ok(&dir, &["down"]);
}
