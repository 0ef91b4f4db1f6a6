//! Runs the built `linefs` binary's application benches at a small scale: `bench leveldb
//! --num 2000 --json` and `bench filebench` for each personality with `--duration 2
//! --nfiles 50 --threads 4 --json`, and checks that every target (local directory, FUSE
//! passthrough, linefs) has non-zero figures for every workload. Each run is killed (and
//! the test fails) if it takes longer than [`RUN_LIMIT`].
//!
//! Needs `/dev/fuse` and `fusermount3`; without them it prints why it is skipped and passes.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;

use serde_json::Value;

#[path = "common/bench.rs"]
mod common;
use common::positive;

const RUN_LIMIT: Duration = Duration::from_secs(60);
const TARGETS: [&str; 4] = ["local", "fuse-passthrough", "linefs", "linefs-offload"];

/// Runs `linefs bench ARGS --json --dir DIR`, bounded by RUN_LIMIT; returns its JSON report.
fn bench(dir: &Path, args: &[&str]) -> Value {
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.extend([OsStr::new("--json"), OsStr::new("--dir"), dir.as_os_str()]);
    common::run(all, RUN_LIMIT)
}

/// The report's row for each target, in order (bindfs, the second passthrough, is there
/// only when installed).
fn rows(report: &Value) -> Vec<&Value> {
    let results = report["results"].as_array().expect("results array");
    let keys: Vec<&str> =
        results.iter().map(|r| r["target"].as_str().unwrap_or("?")).filter(|k| *k != "bindfs").collect();
    assert_eq!(keys, TARGETS, "targets");
    results.iter().collect()
}

#[test]
fn leveldb_and_filebench_run_on_every_target() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");

    let report = bench(&dir, &["leveldb", "--num", "2000"]);
    assert_eq!(report["bench"], "leveldb");
    for row in rows(&report) {
        let target = row["target"].as_str().unwrap();
        for w in ["fillseq", "fillrandom", "fillsync", "readseq", "readrandom", "readhot"] {
            let f = &row["workloads"][w];
            let what = format!("leveldb {w} on {target}");
            for k in ["ops", "us_per_op", "mb_per_s"] {
                positive(f, k, &what);
            }
        }
        // db_bench's op counts: fillsync does num/1000; readseq sees every key fillrandom wrote.
        assert_eq!(row["workloads"]["fillseq"]["ops"], 2000, "{target}");
        assert_eq!(row["workloads"]["fillsync"]["ops"], 2, "{target}");
        positive(&row["workloads"]["readrandom"], "found", target);
    }

    for p in ["varmail", "fileserver", "webserver"] {
        let report =
            bench(&dir, &["filebench", "--personality", p, "--duration", "2", "--nfiles", "50", "--threads", "4"]);
        assert_eq!(report["bench"], "filebench");
        assert_eq!(report["personality"], p);
        for row in rows(&report) {
            let what = format!("filebench {p} on {}", row["target"]);
            for k in ["ops", "loops", "ops_per_s", "mb_per_s", "bytes_read", "bytes_written"] {
                positive(row, k, &what);
            }
            assert_eq!(row["threads"], 4, "{what}");
            assert_eq!(row["nfiles"], 50, "{what}");
        }
    }
    // The bench tears its cluster down: nothing is left mounted under DIR.
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!info.contains(dir.to_str().unwrap()), "a bench mount was left behind");
}
