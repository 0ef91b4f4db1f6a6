//! Runs the built `linefs bench offload --bytes 4M --clients 1,2 --runs 1 --json` and checks
//! the report's shape: every case (1 and 2 clients × alone/co-runner × offload/host-only)
//! with positive throughput and client CPU, nicfs and kworker figures exactly with offload,
//! the co-runner's share exactly with the co-runner; every client wrote and published its
//! 4 MiB (bytes, writes, log bytes, published_all, distinct slots on the offload node); the
//! ratios and goal verdicts of each pair. Afterwards no client, co-runner or daemon of the
//! run may be alive and nothing of it may be left in the PM directory or the cluster
//! directory. The run is killed (and the test fails) after [`RUN_LIMIT`].
//!
//! Needs `nicfs`, `kworker` and `linefs-loadgen` built beside `linefs` (`cargo build --bins`;
//! `cargo test` builds only this package's binary) and at least 2 CPUs.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

#[path = "common/bench.rs"]
mod bench;
use bench::{positive, LINEFS};

const RUN_LIMIT: Duration = Duration::from_secs(60);
const BYTES: u64 = 4 << 20;

fn non_negative(v: &Value, key: &str, what: &str) {
    let x = v[key].as_f64().unwrap_or(f64::NAN);
    assert!(x >= 0.0 && x.is_finite(), "{what}: {key} = {x} (should be a figure)\n{v}");
}

fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

#[test]
fn offload_bench_reports_every_case_with_real_writes() {
    for name in ["nicfs", "kworker", "linefs-loadgen"] {
        let exe = Path::new(LINEFS).with_file_name(name);
        assert!(exe.is_file(), "{} is missing: build the binaries first (cargo build --bins)", exe.display());
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    // Memory speed where there is /dev/shm, as the bench's default; removed with the guard.
    let shm = Path::new("/dev/shm");
    let pm = if shm.is_dir() { tempfile::tempdir_in(shm).unwrap() } else { tempfile::tempdir().unwrap() };
    let mut args: Vec<&OsStr> =
        ["offload", "--bytes", "4M", "--clients", "1,2", "--runs", "1", "--json"].map(OsStr::new).to_vec();
    args.extend([OsStr::new("--pm-dir"), pm.path().as_os_str(), OsStr::new("--dir"), dir.as_os_str()]);
    let report = bench::run(args, RUN_LIMIT);
    assert_eq!(report["bench"], "offload");
    assert_eq!(report["bytes_per_client"], BYTES);
    assert_eq!(report["io"], 16384);
    let host = report["cpus"]["host"].as_array().expect("host CPUs");
    assert!(!host.is_empty() && report["cpus"]["nic"].is_u64(), "{}", report["cpus"]);

    let cases = report["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 8, "1 and 2 clients x alone/co-runner x offload/host-only");
    let mut pids = Vec::new();
    for c in cases {
        let n = c["clients"].as_u64().unwrap();
        let corunner = c["corunner"].as_bool().unwrap();
        let offload = match c["mode"].as_str() {
            Some("offload") => true,
            Some("host-only") => false,
            m => panic!("mode {m:?}"),
        };
        let what = format!("{n} client(s), {}, co-runner {corunner}", c["mode"]);
        assert_eq!(c["bytes"], n * BYTES, "{what}");
        for k in ["mb_per_s", "wall_s", "write_s", "client_cpu_s_per_gib", "host_cpu_s_per_gib"] {
            positive(c, k, &what);
        }
        non_negative(c, "drain_s", &what);
        // CPU time from /proc is in clock ticks: a daemon's share of 4 MiB may be 0.
        for k in ["nicfs_cpu_s_per_gib", "kworker_cpu_s_per_gib"] {
            if offload {
                non_negative(c, k, &what);
            } else {
                assert!(c[k].is_null(), "{what}: {k} without daemons\n{c}");
            }
        }
        if corunner {
            non_negative(c, "corunner_host_share", &what);
        } else {
            assert!(c["corunner_host_share"].is_null(), "{what}\n{c}");
        }
        let runs = c["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 1, "{what}");
        let clients = runs[0]["clients"].as_array().expect("clients");
        assert_eq!(clients.len() as u64, n, "{what}");
        let mut slots = Vec::new();
        let mut sum = 0;
        for cl in clients {
            let b = cl["bytes"].as_u64().unwrap();
            sum += b;
            assert_eq!(cl["writes"], BYTES / 16384, "{what}\n{cl}");
            assert!(cl["log_bytes"].as_u64().unwrap() >= b, "{what}: the log holds the data\n{cl}");
            assert_eq!(cl["published_all"], true, "{what}\n{cl}");
            assert_eq!(cl["offload"], offload, "{what}\n{cl}");
            positive(cl, "cpu_s", &what);
            slots.push(cl["slot"].as_u64().unwrap());
            pids.push(cl["pid"].as_i64().unwrap());
        }
        assert_eq!(sum, n * BYTES, "{what}");
        assert_eq!(runs[0]["bytes"], sum, "{what}");
        slots.sort_unstable();
        slots.dedup();
        // On the offload node every client has a log slot of its own; host-only nodes have
        // one client each, all in slot 0.
        assert_eq!(slots.len() as u64, if offload { n } else { 1 }, "{what}: slots {slots:?}");
    }
    let pairs = report["comparisons"].as_array().expect("comparisons");
    assert_eq!(pairs.len(), 4);
    for p in pairs {
        for k in ["mb_per_s_ratio", "client_cpu_per_gib_ratio", "host_cpu_per_gib_ratio"] {
            positive(p, k, "comparison");
        }
        assert!(p["client_cpu_goal_met"].is_boolean(), "{p}");
        assert_eq!(p["corunner_mb_per_s_goal_met"].is_boolean(), p["corunner"] == true, "{p}");
    }
    assert_eq!(report["verdict"].as_array().map(Vec::len), Some(2));

    // Nothing left: processes, PM, cluster directories.
    for pid in pids {
        assert!(!alive(pid), "client pid {pid} still runs");
    }
    // nicfs, kworker and every client name a node in the PM directory on their command line.
    let mark = pm.path().to_str().unwrap();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i64>() else { continue };
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmd).contains(mark) && alive(pid) {
            panic!("pid {pid} of the run still runs: {}", String::from_utf8_lossy(&cmd).replace('\0', " "));
        }
    }
    let left: Vec<_> = std::fs::read_dir(pm.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(left.is_empty(), "left in the PM directory: {left:?}");
    let left: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "left in the cluster directory: {left:?}");
}
