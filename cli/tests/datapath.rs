//! Runs the built `linefs` binary's `bench datapath --size 8M --ops 2000 --runs 1 --json` and
//! checks that every workload has positive figures on the local directory, the fuser
//! passthrough and linefs (host-only and with nicfs offload), and on bindfs too unless the report says it is not installed
//! (bindfs is optional: a machine without it passes). The run is killed (and the test fails)
//! if it takes longer than [`RUN_LIMIT`]; afterwards nothing of it may stay mounted.
//!
//! Needs `/dev/fuse` and `fusermount3`; without them it prints why it is skipped and passes.

use std::ffi::OsStr;
use std::time::Duration;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;

#[path = "common/bench.rs"]
mod bench;
use bench::positive;

const RUN_LIMIT: Duration = Duration::from_secs(150);
const WORKLOADS: [&str; 6] = ["seqwrite", "seqread", "randread", "randwrite", "hotread", "fsync"];
const REQUIRED: [&str; 4] = ["local", "fuse-passthrough", "linefs", "linefs-offload"];

#[test]
fn datapath_reports_every_workload_and_target() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let pm = tmp.path().join("pm");
    let args = ["--size", "8M", "--ops", "2000", "--runs", "1", "--json"];
    let mut all: Vec<&OsStr> = vec![OsStr::new("datapath")];
    all.extend(args.iter().map(OsStr::new));
    all.extend([OsStr::new("--pm-dir"), pm.as_os_str(), OsStr::new("--dir"), dir.as_os_str()]);
    let report = bench::run(all, RUN_LIMIT);
    assert_eq!(report["bench"], "datapath");
    assert_eq!(report["size_bytes"], 8 << 20);
    assert_eq!(report["ops"], 2000);

    for w in WORKLOADS {
        let wl = &report["workloads"][w];
        let results = wl["results"].as_array().unwrap_or_else(|| panic!("{w}: no results\n{report}"));
        let keys: Vec<&str> = results.iter().map(|r| r["target"].as_str().unwrap_or("?")).collect();
        for t in REQUIRED.iter().chain(["bindfs"].iter()) {
            assert!(keys.contains(t), "{w}: no row for {t}: {keys:?}");
        }
        for r in results {
            let t = r["target"].as_str().unwrap();
            let what = format!("datapath {w} on {t}");
            if t == "bindfs" && r["status"] != "ok" {
                let why = r["status"].as_str().unwrap_or("");
                assert!(why.contains("not installed"), "{what}: {why}");
                continue;
            }
            assert_eq!(r["status"], "ok", "{what}");
            let keys: &[&str] = match w {
                "fsync" => &["avg_us", "p50_us", "p99_us", "p999_us", "ops_per_s"],
                _ => &["mb_per_s", "iops"],
            };
            for k in keys {
                positive(r, k, &what);
            }
        }
        positive(wl, "linefs_speed_vs_faster_passthrough", w);
        positive(wl, "linefs_offload_speed_vs_faster_passthrough", w);
        // The goals: reads 1.2x, sequential writes 2x, fsync's own tail; none for
        // random writes.
        if w == "randwrite" {
            assert!(wl["goal"].is_null() && wl["goal_reached"].is_null(), "{w}: no goal\n{wl}");
            assert!(wl["goal_reached_offload"].is_null(), "{w}: no goal\n{wl}");
        } else {
            assert!(wl["goal"].is_string() && wl["goal_reached"].is_boolean(), "{w}: goal\n{wl}");
            assert!(wl["goal_reached_offload"].is_boolean(), "{w}: goal\n{wl}");
        }
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!info.contains(tmp.path().to_str().unwrap()), "a bench mount was left behind");
}
