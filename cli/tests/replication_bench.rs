//! Runs the built `linefs bench replication --bytes 2M --count 50 --clients 2 --runs 1
//! --json` (a smoke run, under 30 s: the full length is `--bytes 1G --runs 3`; 2 clients, so
//! that several clients share node 0 and several host-only nodes feed the chain) and checks
//! the report's shape: every sequential case (the five systems, and the co-runner pairs)
//! with positive MB/s and client CPU, nicfs CPU exactly on the offload rows, chain bytes at
//! least the data on the chain rows; every latency row with ordered percentiles; every
//! compression case with lz4 on sending fewer network bytes than off on compressible data
//! and about as many on incompressible data; a MET/NOT MET verdict for each goal. Afterwards
//! nothing of the run is alive and nothing is left in the PM or cluster directory. The run
//! is killed (and the test fails) after [`RUN_LIMIT`].
//!
//! Needs `nicfs`, `kworker` and `linefs-loadgen` built beside `linefs` (`cargo build
//! --bins`), java and the `zookeeper` package (a 3-node `up`), `/dev/fuse` and 2 CPUs.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

#[path = "common/bench.rs"]
mod bench;
use bench::{positive, LINEFS};

const RUN_LIMIT: Duration = Duration::from_secs(120);
const BYTES: u64 = 2 << 20;

fn num(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn alive(pid: i64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

#[test]
fn replication_bench_reports_every_row_and_goal() {
    for name in ["nicfs", "kworker", "linefs-loadgen"] {
        let exe = Path::new(LINEFS).with_file_name(name);
        assert!(exe.is_file(), "{} is missing: build the binaries first (cargo build --bins)", exe.display());
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let shm = Path::new("/dev/shm");
    let pm = if shm.is_dir() { tempfile::tempdir_in(shm).unwrap() } else { tempfile::tempdir().unwrap() };
    let mut args: Vec<&OsStr> =
        ["replication", "--bytes", "2M", "--count", "50", "--clients", "2", "--runs", "1", "--json"]
            .map(OsStr::new)
            .to_vec();
    args.extend([OsStr::new("--pm-dir"), pm.path().as_os_str(), OsStr::new("--dir"), dir.as_os_str()]);
    let report = bench::run(args, RUN_LIMIT);
    assert_eq!(report["bench"], "replication");
    assert_eq!(report["bytes_per_client"], BYTES);

    let seq = report["sequential"].as_array().expect("sequential");
    assert_eq!(seq.len(), 7, "5 systems + 2 with the co-runner");
    for r in seq {
        let what = format!("{} ({} clients, co-runner {})", r["system"], r["clients"], r["corunner"]);
        positive(r, "mb_per_s", &what);
        positive(r, "client_cpu_s_per_gib", &what);
        let sys = r["system"].as_str().unwrap();
        let offload = sys.starts_with("offload");
        assert_eq!(r["nicfs_cpu_s_per_gib"].is_number(), offload, "{what}: nicfs CPU exactly with offload\n{r}");
        let chain = matches!(sys, "host-only-chain" | "bare-chain");
        let data = r["clients"].as_u64().unwrap() * BYTES;
        match r["chain_bytes_sent"].as_u64() {
            Some(b) => assert!(chain && b >= data, "{what}: {b} bytes sent for {data}\n{r}"),
            None => assert!(!chain, "{what}: no chain bytes\n{r}"),
        }
        assert_eq!(r["runs"][0]["bytes"], data, "{what}");
    }
    let lat = report["latency"].as_array().expect("latency");
    assert_eq!(lat.len(), 5);
    for l in lat {
        let what = l["system"].to_string();
        let p = [num(l, "p50_us"), num(l, "p99_us"), num(l, "p999_us"), num(l, "max_us")];
        assert!(p[0] > 0.0 && p.windows(2).all(|w| w[0] <= w[1]), "{what}: percentiles {p:?}");
        positive(l, "avg_us", &what);
    }
    let comp = report["compression"].as_array().expect("compression");
    assert_eq!(comp.len(), 4 * 3, "0/40/60/80 % × off/on/adaptive");
    let net = |pct: u64, mode: &str| {
        let c = comp.iter().find(|c| c["compressible_pct"] == pct && c["lz4"] == mode).expect("case");
        positive(c, "mb_per_s", mode);
        num(c, "network_bytes")
    };
    for pct in [0, 40, 60, 80] {
        let (off, on) = (net(pct, "off"), net(pct, "on"));
        assert!(off >= (3 * BYTES) as f64, "{pct}%: 3 hops carry at least the data: {off}");
        let saved = 1.0 - on / off;
        // The generator's data: lz4 removes about pct % (within a few points, headers aside).
        assert!((saved * 100.0 - pct as f64).abs() < 6.0, "{pct}%: lz4 saved {:.1} %", saved * 100.0);
        assert!(net(pct, "adaptive") <= off, "{pct}%: adaptive never sends more than off");
    }
    let goals = report["goals"].as_array().expect("goals");
    // The sequential goal and the co-runner goal (one client count); then avg, p99.9, lz4.
    assert_eq!(goals.len(), 2 + 3, "{goals:?}");
    for g in goals {
        assert!(g["met"].is_boolean() && g["value"].is_number(), "{g}");
    }

    // Nothing left: processes naming the PM directory, PM files, cluster directories.
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
