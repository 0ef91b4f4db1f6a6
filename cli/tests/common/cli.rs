//! What the tests of the `linefs` command share: running the built binary against a cluster
//! directory (the mount daemon from this very build: `LINEFS_FUSE=self`), its output shown
//! either way, the one-line error contract, `status --json`, waiting for a condition, the
//! check that the daemons are built, and a guard that brings a test's cluster down.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const LINEFS: &str = env!("CARGO_BIN_EXE_linefs");

/// Runs `linefs ARGS --dir DIR`; shows what it printed.
pub fn linefs(dir: &Path, args: &[&str]) -> Output {
    // LINEFS_FUSE=self: run the daemon from this very build of `linefs` (its hidden
    // fuse-daemon verb), never from a stale linefs-fuse left in the target directory.
    let out =
        Command::new(LINEFS).env("LINEFS_FUSE", "self").args(args).arg("--dir").arg(dir).output().expect("run linefs");
    eprintln!(
        "linefs {args:?} -> {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `linefs ARGS`, which must succeed; its stdout.
pub fn ok(dir: &Path, args: &[&str]) -> String {
    let out = linefs(dir, args);
    assert!(out.status.success(), "linefs {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `linefs ARGS`, which must fail with one line `linefs: …` on stderr; that line.
pub fn err(dir: &Path, args: &[&str]) -> String {
    let out = linefs(dir, args);
    assert!(!out.status.success(), "linefs {args:?} should fail");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one-line reason expected: {stderr:?}");
    assert!(stderr.starts_with("linefs: "), "{stderr:?}");
    stderr
}

/// `linefs status --json`.
pub fn status(dir: &Path) -> Value {
    serde_json::from_str(&ok(dir, &["status", "--json"])).expect("status --json")
}

/// Waits until `f` holds, at most `timeout` (the test fails naming `what` past it).
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Panics unless nicfs and kworker were built beside `linefs` (`linefs up` starts them from
/// there; `cargo test` builds only this package's binary).
pub fn need_daemons() {
    for name in ["nicfs", "kworker"] {
        let exe = Path::new(LINEFS).with_file_name(name);
        assert!(exe.is_file(), "{} is missing: build the daemons first (cargo build --bins)", exe.display());
    }
}

/// Brings the cluster in its directory down when dropped, even when the test fails.
pub struct Down<'a>(pub &'a Path);

impl Drop for Down<'_> {
    fn drop(&mut self) {
        if self.0.join("cluster.json").exists() {
            linefs(self.0, &["down"]);
        }
    }
}
