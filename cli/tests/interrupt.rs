//! Ctrl-C of a command that owns a temporary cluster: `linefs soak` is interrupted with
//! SIGINT once its mount serves, and must exit with 130 having unmounted, stopped its daemon
//! and removed its cluster directory and PM file (the daemons run in sessions of their own,
//! so the signal reaches only the CLI).
//!
//! Needs `/dev/fuse` and `fusermount3`; without them it prints why it is skipped and passes.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available_as_root;

const LINEFS: &str = env!("CARGO_BIN_EXE_linefs");

/// FUSE mounts whose mount point lies under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let dir = dir.to_str().expect("utf-8 path");
    info.lines().filter_map(|l| l.split(' ').nth(4)).filter(|m| m.starts_with(dir)).map(str::to_string).collect()
}

/// Processes whose command line mentions `dir` (a zombie's command line is empty).
fn processes_mentioning(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().expect("utf-8 path");
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(dir) {
            found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    found
}

#[test]
fn ctrl_c_of_the_soak_tears_its_cluster_down() {
    if !fuse_available_as_root() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (dir, pm) = (tmp.path().join("c"), tmp.path().join("pm"));
    let mut child = Command::new(LINEFS)
        .env("LINEFS_FUSE", "self")
        .args(["soak", "--minutes", "5", "--dir"])
        .arg(&dir)
        .arg("--pm-dir")
        .arg(&pm)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn linefs soak");
    let deadline = Instant::now() + Duration::from_secs(60);
    while mounts_under(&dir).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "soak ended before it mounted");
        assert!(Instant::now() < deadline, "soak did not mount within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the writer and a kill cycle run.
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().expect("wait for soak");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(130),
        "exit {:?} (signal {:?}); stderr:\n{stderr}",
        out.status,
        out.status.signal()
    );
    assert!(stderr.contains("tearing down"), "stderr:\n{stderr}");
    assert_eq!(mounts_under(&dir), Vec::<String>::new(), "mounts left behind");
    assert_eq!(processes_mentioning(&dir), Vec::<String>::new(), "processes left behind");
    let left: Vec<_> = std::fs::read_dir(&dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.iter().all(|p| !p.file_name().unwrap().to_string_lossy().starts_with("soak-")), "left: {left:?}");
    let pm_left: Vec<_> = std::fs::read_dir(&pm).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(pm_left.is_empty(), "PM files left: {pm_left:?}");
}
