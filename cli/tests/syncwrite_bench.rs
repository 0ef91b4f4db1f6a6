//! Runs the built `linefs` binary's `bench fsync` and `bench seqwrite` small (`--runs 2`,
//! `--json`) and checks that every target — the local directory, the fuser passthrough,
//! linefs host-only and linefs with nicfs offload (the default mount), and bindfs unless the
//! report says why not — has positive figures, each round kept, the latency percentiles up
//! to p99.99, and both linefs modes' ratios. Nothing may stay mounted afterwards.
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
const REQUIRED: [&str; 4] = ["local", "fuse-passthrough", "linefs", "linefs-offload"];

fn run(name: &str, args: &[&str]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let pm = tmp.path().join("pm");
    let mut all: Vec<&OsStr> = vec![OsStr::new(name)];
    all.extend(args.iter().map(OsStr::new));
    all.extend(["--runs", "2", "--json"].map(OsStr::new));
    all.extend([OsStr::new("--pm-dir"), pm.as_os_str(), OsStr::new("--dir"), dir.as_os_str()]);
    let report = bench::run(all, RUN_LIMIT);
    assert_eq!(report["bench"], name);
    assert_eq!(report["rounds"], 2);
    let results = report["results"].as_array().unwrap_or_else(|| panic!("no results\n{report}"));
    let keys: Vec<&str> = results.iter().map(|r| r["target"].as_str().unwrap_or("?")).collect();
    for t in REQUIRED {
        assert!(keys.contains(&t), "{name}: no row for {t}: {keys:?}");
    }
    if !keys.contains(&"bindfs") {
        let why = report["skipped"][0]["why"].as_str().unwrap_or("");
        assert!(why.contains("not installed"), "{name}: bindfs neither measured nor skipped\n{report}");
    }
    let stats: &[&str] = match name {
        "fsync" => &["avg_us", "p50_us", "p99_us", "p999_us", "p9999_us", "max_us", "ops_per_s"],
        _ => &["mb_per_s"],
    };
    for r in results {
        let what = format!("{name} on {}", r["target"]);
        for k in stats {
            positive(r, k, &what);
        }
        positive(r, "offload_ratio", &what);
        positive(r, "host_only_ratio", &what);
        assert_eq!(r["rounds"].as_array().map(Vec::len), Some(2), "{what}");
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!info.contains(tmp.path().to_str().unwrap()), "a bench mount was left behind");
}

#[test]
fn fsync_and_seqwrite_report_every_target_with_offload() {
    if !fuse_available() {
        return;
    }
    run("fsync", &["--count", "200"]);
    run("seqwrite", &["--size", "8M"]);
}
