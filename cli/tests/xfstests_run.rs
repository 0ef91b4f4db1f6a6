//! `xfstests/run` tears down what it started, however the run ends: the TEST and SCRATCH
//! mounts are gone, both clusters are down (no mount record, no daemon) and their PM files
//! removed, whether check finishes, or the run is stopped with SIGTERM or a terminal's Ctrl-C
//! in the middle of a test that keeps TEST busy.
//!
//! xfstests itself is not needed: the runner is pointed at a stand-in checkout whose `check`
//! reads `local.config` and mounts TEST and SCRATCH with `mount -t fuse.linefs SOURCE DIR`,
//! as xfstests does, through the helper that the runner installs in /sbin. The runner takes
//! this build's `linefs` (`--bin`) instead of building release binaries, and a `--name` of
//! its own, so its files (/usr/local/lib/linefs-xfstests/NAME, /mnt/NAME-test,
//! /mnt/NAME-scratch) are not those of a real installation; the test removes them. It does
//! replace /sbin/mount.fuse.linefs with this repository's helper, as `xfstests_helper.rs`
//! does. Needs root, `/dev/fuse`, `fusermount3` and mount(8); without them it prints why it is
//! skipped and passes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available_as_root;

const LINEFS: &str = env!("CARGO_BIN_EXE_linefs");

/// One run at a time: each mounts and formats real nodes, on a machine shared with builds.
static SERIAL: Mutex<()> = Mutex::new(());

/// The stand-in for xfstests' `check`. `finish`: mount TEST and SCRATCH, write a file,
/// unmount SCRATCH (as a test's _scratch_unmount), print a passing summary, exit 0 — TEST
/// stays mounted, as xfstests leaves it. `hang`: mount TEST, start a process that sits in it
/// (a test that keeps TEST busy), wait for a signal, and print check's interrupted summary
/// (leaving the process to whoever stops check's process group).
const CHECK: &str = r#"#!/bin/bash
. ./local.config || exit 1
mount -t fuse$FUSE_SUBTYP "$TEST_DEV" "$TEST_DIR" || exit 1
echo "generic/001 1s ..."
if [ "$(cat mode)" = hang ]; then
    trap 'echo; echo "Ran: generic/001"; echo "Interrupted!"; exit 1' INT TERM HUP
    (cd "$TEST_DIR" && exec sleep 600) &
    echo $! >sleep.pid
    touch started
    wait
    exit 0
fi
mount -t fuse$FUSE_SUBTYP "$SCRATCH_DEV" "$SCRATCH_MNT" || exit 1
echo data >"$TEST_DIR/file" && echo data >"$SCRATCH_MNT/file" || exit 1
umount "$SCRATCH_DEV" || exit 1
echo " 1s"
echo "Ran: generic/001"
echo "Passed all 1 tests"
"#;

fn available() -> bool {
    if !fuse_available_as_root() {
        return false;
    }
    if Command::new("mount").arg("--version").output().is_err() {
        eprintln!("skipped: mount(8) is not installed");
        return false;
    }
    true
}

/// One run's directories and names; dropping it removes whatever the run (or a failed test)
/// left, so that a failure does not leak mounts, daemons or memory into the next test.
struct Setup {
    tmp: tempfile::TempDir,
    name: String,
}

impl Setup {
    fn new(tag: &str, mode: &str) -> Setup {
        let tmp = tempfile::tempdir().expect("tempdir");
        let name = format!("lfxr{}-{tag}", std::process::id());
        let xfstests = tmp.path().join("xfstests");
        fs::create_dir_all(xfstests.join("ltp")).unwrap();
        let exec = |path: PathBuf, text: &str| {
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        };
        exec(xfstests.join("check"), CHECK);
        exec(xfstests.join("ltp/fsx"), "#!/bin/sh\nexit 0\n");
        fs::write(xfstests.join("mode"), mode).unwrap();
        // `linefs`, and the nicfs and kworker that `linefs up` starts (built beside it by
        // `cargo build --bins`); no linefs-fuse: the mount daemon is then linefs's own
        // fuse-daemon verb, this very build.
        fs::create_dir(tmp.path().join("bin")).unwrap();
        std::os::unix::fs::symlink(LINEFS, tmp.path().join("bin/linefs")).unwrap();
        let built = Path::new(LINEFS).parent().unwrap();
        for daemon in ["nicfs", "kworker"] {
            assert!(built.join(daemon).exists(), "{daemon} is not built beside linefs: run cargo build --bins");
            std::os::unix::fs::symlink(built.join(daemon), tmp.path().join("bin").join(daemon)).unwrap();
        }
        Setup { tmp, name }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.tmp.path().join(rel)
    }

    fn sources(&self) -> [String; 2] {
        [format!("{}-test", self.name), format!("{}-scratch", self.name)]
    }

    fn command(&self) -> Command {
        let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("../xfstests/run");
        let mut cmd = Command::new("bash");
        cmd.arg(run)
            .arg("--xfstests")
            .arg(self.path("xfstests"))
            .arg("--results")
            .arg(self.path("results"))
            .arg("--state")
            .arg(self.path("state"))
            .args(["--pm-size", "64M", "--name", &self.name, "--bin"])
            .arg(self.path("bin"))
            .arg("generic/001")
            .env_remove("LINEFS_FUSE")
            .stdin(Stdio::null())
            // Files, not pipes: a process the runner leaves behind could hold a pipe open
            // and hang the test instead of failing it.
            .stdout(fs::File::create(self.path("stdout")).unwrap())
            .stderr(fs::File::create(self.path("stderr")).unwrap());
        // A shell without job control starts its background commands with SIGINT ignored,
        // and bash cannot trap a signal ignored when it starts: under such a parent (a CI
        // runner, `cmd &` in a script) the Ctrl-C below would never reach the runner. Start
        // it with the dispositions a terminal's foreground job has.
        // SAFETY: between fork and exec the closure only calls signal(2), which is
        // async-signal-safe, and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        cmd
    }

    /// Waits until the stand-in check is inside its test with TEST mounted.
    fn wait_started(&self, child: &mut Child) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.path("xfstests/started").exists() {
            assert!(child.try_wait().unwrap().is_none(), "xfstests/run ended before check started its test");
            assert!(Instant::now() < deadline, "check did not start its test within 120 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(mounted(&self.sources()[0]), "TEST is not mounted while check runs");
    }

    /// Waits for the runner with a deadline; its exit status, stdout and stderr.
    fn finish(&self, mut child: Child, secs: u64) -> (ExitStatus, String, String) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("xfstests/run did not end within {secs} s; stderr: {}", self.output().1);
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (stdout, stderr) = self.output();
        (status, stdout, stderr)
    }

    fn output(&self) -> (String, String) {
        let read = |f: &str| fs::read_to_string(self.path(f)).unwrap_or_default();
        (read("stdout"), read("stderr"))
    }

    /// Everything the run started is gone.
    fn assert_torn_down(&self, stdout: &str, stderr: &str) {
        let ctx = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
        let state = self.path("state");
        for src in self.sources() {
            assert!(!mounted(&src), "{src} is still mounted\n{ctx}");
            let dir = state.join(&src);
            if !dir.join("cluster.json").exists() {
                // Every run mounts TEST; SCRATCH only the runs that use it.
                assert!(src.ends_with("-scratch"), "{src}: no cluster was made\n{ctx}");
                continue;
            }
            assert!(!dir.join("run/up").exists(), "{src}: the cluster is still up\n{ctx}");
            let reg = fs::read_to_string(dir.join("run/mounts.json")).unwrap_or_default();
            let reg: serde_json::Value = serde_json::from_str(&reg).unwrap_or_default();
            assert_eq!(reg["mounts"], serde_json::json!([]), "{src}: mount records left\n{ctx}");
            let status = Command::new(LINEFS).args(["status", "--dir"]).arg(&dir).output().unwrap();
            assert!(!status.status.success(), "{src}: linefs status still sees the cluster up\n{ctx}");
        }
        let pm =
            files_under(&state).into_iter().filter(|p| p.extension().is_some_and(|e| e == "pm")).collect::<Vec<_>>();
        assert!(pm.is_empty(), "PM files left: {pm:?}\n{ctx}");
        let procs = processes_mentioning(&state);
        assert!(procs.is_empty(), "processes left: {procs:?}\n{ctx}");
        if let Ok(pid) = fs::read_to_string(self.path("xfstests/sleep.pid")) {
            assert!(!alive(pid.trim()), "the test's process {} in TEST is still alive\n{ctx}", pid.trim());
        }
        assert!(!stderr.contains("detaching it lazily"), "TEST or SCRATCH was busy at the end\n{ctx}");
        let log = self.path("results/check.log");
        assert!(stdout.contains(&format!("check output: {}", log.display())), "{ctx}");
        assert!(stdout.contains(&format!("xfstests results: {}", self.path("results").display())), "{ctx}");
        assert!(stdout.contains("xfstests: "), "no counts\n{ctx}");
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // The stand-in test's process, if a broken runner left it sitting in TEST.
        if let Some(pid) = fs::read_to_string(self.path("xfstests/sleep.pid")).ok().and_then(|p| p.trim().parse().ok())
        {
            // SAFETY: kill sends a signal to the pid of a process this test started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        for src in self.sources() {
            for _ in 0..5 {
                if !mounted(&src) {
                    break;
                }
                let _ = Command::new("umount").arg("-l").arg(&src).status();
            }
            let dir = self.path("state").join(&src);
            if dir.join("cluster.json").exists() {
                let _ = Command::new(LINEFS).args(["down", "--dir"]).arg(&dir).output();
            }
            let _ = fs::remove_dir(Path::new("/mnt").join(&src));
        }
        let lib = Path::new("/usr/local/lib/linefs-xfstests");
        let _ = fs::remove_dir_all(lib.join(&self.name));
        // Its parent too, if this run made it and nothing else is in it.
        let _ = fs::remove_dir(lib);
    }
}

/// Whether a mount with this source exists.
fn mounted(source: &str) -> bool {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    mounts.lines().any(|l| l.split(' ').next() == Some(source))
}

/// Whether a process lives (a zombie does not count).
fn alive(pid: &str) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(") ").map(|(_, rest)| rest.chars().next());
    !matches!(state, Some(Some('Z' | 'X')))
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(dir) else { return out };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Processes whose command line mentions `dir` (the daemons get their PM file's path).
fn processes_mentioning(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().expect("utf-8 path");
    let mut found = Vec::new();
    for e in fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmd) = fs::read(e.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(dir) && !cmd.contains("xfstests/run") {
            found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    found
}

fn signalled(status: ExitStatus, code: i32) -> bool {
    status.code() == Some(code) || status.signal().is_some_and(|s| 128 + s == code)
}

#[test]
fn run_tears_down_when_check_finishes() {
    if !available() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("done", "finish");
    let (status, stdout, stderr) = setup.finish(setup.command().spawn().expect("run xfstests/run"), 300);
    assert!(status.success(), "xfstests/run failed: {stderr}");
    setup.assert_torn_down(&stdout, &stderr);
    assert!(stdout.contains("xfstests: 1 passed, 0 failed, 0 not run, 0 interrupted"), "{stdout}");
}

#[test]
fn run_tears_down_on_sigterm() {
    if !available() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("term", "hang");
    let mut child = setup.command().spawn().expect("run xfstests/run");
    setup.wait_started(&mut child);
    // SIGTERM to the runner alone, as `kill PID` sends it.
    // SAFETY: kill sends a signal to our own child's pid; no memory is involved.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let (status, stdout, stderr) = setup.finish(child, 120);
    assert!(signalled(status, 143), "exit status {status:?}; stderr: {stderr}");
    setup.assert_torn_down(&stdout, &stderr);
    let log = fs::read_to_string(setup.path("results/check.log")).unwrap();
    assert!(log.contains("Interrupted!"), "check did not get to its summary: {log}");
}

#[test]
fn run_tears_down_on_ctrl_c() {
    if !available() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let setup = Setup::new("int", "hang");
    // A terminal's Ctrl-C: SIGINT to the foreground process group, which the runner leads.
    let mut child = setup.command().process_group(0).spawn().expect("run xfstests/run");
    setup.wait_started(&mut child);
    // SAFETY: kill sends a signal to the process group our child leads; no memory is involved.
    assert_eq!(unsafe { libc::kill(-(child.id() as i32), libc::SIGINT) }, 0);
    let (status, stdout, stderr) = setup.finish(child, 120);
    assert!(signalled(status, 130), "exit status {status:?}; stderr: {stderr}");
    setup.assert_torn_down(&stdout, &stderr);
    assert!(stdout.contains("0 passed, 0 failed, 0 not run, 1 interrupted"), "{stdout}");
}
