//! Drives the built `linefs` binary through a cluster's life: up, status, mount, write/read,
//! umount, remount, kill-host, restart-host (the fsynced file survives), down — host-only
//! (`--offload off`).
//!
//! Needs `/dev/fuse` and `fusermount3`; without them it prints why it is skipped and passes.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;

const LINEFS: &str = env!("CARGO_BIN_EXE_linefs");

fn linefs(dir: &Path, args: &[&str]) -> Output {
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

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = linefs(dir, args);
    assert!(out.status.success(), "linefs {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn err(dir: &Path, args: &[&str]) -> String {
    let out = linefs(dir, args);
    assert!(!out.status.success(), "linefs {args:?} should fail");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one-line reason expected: {stderr:?}");
    assert!(stderr.starts_with("linefs: "), "{stderr:?}");
    stderr
}

fn mounted(path: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let path = path.to_str().unwrap();
    info.lines().any(|l| l.split(' ').nth(4) == Some(path))
}

#[test]
fn cluster_life_cycle() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();

    assert!(err(&dir, &["status"]).contains("no cluster in"));
    assert!(err(&dir, &["up"]).contains("use --nodes 1"));
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M", "--offload", "off"]);
    assert!(ok(&dir, &["up", "--nodes", "1"]).contains("already up"));
    assert!(ok(&dir, &["status"]).contains("not mounted"));

    // mount, write, read, umount
    assert!(err(&dir, &["mount", "--node", "1", m]).contains("out of range"));
    assert!(ok(&dir, &["mount", m]).contains("host-only"));
    assert!(mounted(&mnt));
    assert!(err(&dir, &["mount", m]).contains("already mounted"));
    fs::write(mnt.join("hello"), b"hello linefs").unwrap();
    assert_eq!(fs::read(mnt.join("hello")).unwrap(), b"hello linefs");
    let status: serde_json::Value = serde_json::from_str(&ok(&dir, &["status", "--json"])).unwrap();
    assert_eq!(status["mounts"][0]["alive"], serde_json::json!(true));
    ok(&dir, &["umount", m]);
    assert!(!mounted(&mnt));

    // remount: the file is there
    ok(&dir, &["mount", m]);
    assert_eq!(fs::read(mnt.join("hello")).unwrap(), b"hello linefs");

    // an fsynced file survives a host crash
    {
        let mut f = fs::File::create(mnt.join("synced")).unwrap();
        f.write_all(b"durable").unwrap();
        f.sync_all().unwrap();
    }
    ok(&dir, &["kill-host", "0"]);
    assert!(!mounted(&mnt), "killed mount must be detached");
    assert!(ok(&dir, &["status"]).contains("killed"));
    ok(&dir, &["restart-host", "0"]);
    assert!(mounted(&mnt));
    assert_eq!(fs::read(mnt.join("synced")).unwrap(), b"durable");
    assert_eq!(fs::read(mnt.join("hello")).unwrap(), b"hello linefs");

    assert!(err(&dir, &["kill-nic", "0"]).contains("host-only"));
    ok(&dir, &["down"]);
    assert!(!mounted(&mnt));
    assert!(ok(&dir, &["down"]).contains("already down"));
    assert!(err(&dir, &["status"]).contains("no cluster in"));
}
