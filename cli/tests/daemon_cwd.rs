//! A mount daemon must not keep the directory it was started from busy: xfstests mounts one
//! file system while its shell sits inside another, and then could not unmount that one
//! ("target is busy"). `linefs mount` starts its daemon in `/`.
//!
//! Needs `/dev/fuse` and `fusermount3`; without them it prints why it is skipped and passes.

use std::fs;
use std::path::Path;
use std::process::Command;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;

const LINEFS: &str = env!("CARGO_BIN_EXE_linefs");

fn linefs(cwd: &Path, dir: &Path, args: &[&str]) -> String {
    let out = Command::new(LINEFS)
        .env("LINEFS_FUSE", "self")
        .current_dir(cwd)
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run linefs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "linefs {args:?}: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

#[test]
fn mount_daemon_runs_in_the_root_directory() {
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let mnt = tmp.path().join("mnt");
    let start = tmp.path().join("started-here");
    fs::create_dir(&mnt).unwrap();
    fs::create_dir(&start).unwrap();
    linefs(&start, &dir, &["up", "--nodes", "1", "--pm-size", "64M", "--offload", "off"]);
    let out = linefs(&start, &dir, &["mount", mnt.to_str().unwrap()]);
    // "node 0 mounted at MNT, host-only (mount daemon pid N)"
    let pid: i32 = out
        .rsplit_once("(mount daemon pid ")
        .and_then(|(_, rest)| rest.trim_end().trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no pid in {out:?}"));
    let cwd = fs::read_link(format!("/proc/{pid}/cwd"));
    linefs(&start, &dir, &["down"]);
    assert_eq!(cwd.unwrap(), Path::new("/"), "the daemon pins the directory it was started from");
}
