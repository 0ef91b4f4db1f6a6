//! Drives the built `linefs` binary through a cluster's life: up, status, mount, write/read,
//! umount, remount, kill-host, restart-host (the fsynced file survives), down — host-only
//! (`--offload off`) and with each node's nicfs and kworker (`linefs up`'s default): their
//! processes, files and modes through up, a second up, kill-host/restart-host,
//! kill-nic/restart-nic and down; nicfs's metrics port (`up --metrics-port`).
//!
//! The mount tests need `/dev/fuse` and `fusermount3`; without them they print why they are
//! skipped and pass. The offload tests need `nicfs` and `kworker` built beside `linefs`
//! (`cargo build --bins`).

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;
#[path = "common/cli.rs"]
mod common;
use common::{err, need_daemons, ok, status, wait_for, Down, LINEFS};

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
    assert!(err(&dir, &["up", "--nodes", "0"]).contains("--nodes 0: 1 to 64"));
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

// ---- with offload: each node's nicfs and kworker ----

fn pid_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("run").join(format!("{name}.pid"))
}

fn pid_of(dir: &Path, name: &str) -> i32 {
    let path = pid_file(dir, name);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.trim().parse().unwrap()
}

/// A live process: it exists and is not a zombie.
fn alive(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z') | Some('X') | None)
}

/// The fields of /proc/PID/stat after the command name (state is [0], session [3]).
fn stat_fields(pid: i32) -> Vec<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit_once(')').unwrap().1.split_whitespace().map(str::to_string).collect()
}

fn process<'a>(st: &'a Value, role: &str, node: usize) -> &'a Value {
    st["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["role"] == role && p["node"] == node))
        .unwrap_or_else(|| panic!("no {role} of node {node} in {st:#}"))
}

fn mode(dir: &Path) -> String {
    status(dir)["nodes"][0]["mode"].as_str().unwrap_or_default().to_string()
}

/// The names in DIR/run.
fn run_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir.join("run"))
        .map(|d| d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn offload_daemons_life_cycle() {
    need_daemons();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);

    // up: nicfs serves, kworker is attached; both detached in sessions of their own, in /.
    let out = ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    assert!(out.contains("offload on"), "{out}");
    let desc: Value = serde_json::from_str(&fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(desc["offload"], "on");
    let (nicfs, kworker) = (pid_of(&dir, "nicfs-0"), pid_of(&dir, "kworker-0"));
    for (pid, name) in [(nicfs, "nicfs"), (kworker, "kworker")] {
        assert!(alive(pid), "{name} pid {pid} is not running");
        assert_eq!(fs::read_link(format!("/proc/{pid}/cwd")).unwrap(), Path::new("/"), "{name}'s cwd");
        assert_eq!(stat_fields(pid)[3], pid.to_string(), "{name} leads a session of its own");
        assert!(dir.join("logs").join(format!("{name}-0.log")).is_file(), "{name}'s log");
    }
    assert!(run_files(&dir).contains(&"nicfs-0.sock".to_string()), "{:?}", run_files(&dir));
    let st = status(&dir);
    assert_eq!(st["offload"], "on");
    assert_eq!(st["nodes"][0]["mode"], "normal");
    let p = process(&st, "nicfs", 0);
    assert_eq!((p["pid"].as_i64(), &p["state"], &p["mode"]), (Some(nicfs.into()), &"serving".into(), &"normal".into()));
    assert_eq!(p["status"]["host"]["kworker_pid"].as_i64(), Some(kworker.into()), "{p:#}");
    let p = process(&st, "kworker", 0);
    assert_eq!((p["pid"].as_i64(), &p["alive"], &p["attached"]), (Some(kworker.into()), &true.into(), &true.into()));
    let text = ok(&dir, &["status"]);
    assert!(text.contains("nicfs") && text.contains("kworker") && text.contains("host.mode"), "{text}");

    // A second up changes nothing.
    assert!(ok(&dir, &["up", "--nodes", "1"]).contains("already up"));
    assert_eq!((pid_of(&dir, "nicfs-0"), pid_of(&dir, "kworker-0")), (nicfs, kworker));
    assert!(alive(nicfs) && alive(kworker));

    // kill-host kills the kworker: nicfs goes isolated; restart-host brings a kworker back.
    let out = ok(&dir, &["kill-host", "0"]);
    assert!(out.contains(&format!("kworker pid {kworker}")), "{out}");
    assert!(!alive(kworker) && alive(nicfs));
    wait_for("nicfs to go isolated", Duration::from_secs(3), || mode(&dir) == "isolated");
    assert_eq!(process(&status(&dir), "kworker", 0)["state"], "dead");
    assert!(ok(&dir, &["restart-host", "0"]).contains("restarted kworker"));
    let kworker = pid_of(&dir, "kworker-0");
    assert!(alive(kworker));
    assert_eq!(mode(&dir), "normal", "restart-host returns once the kworker is attached");

    // kill-nic kills nicfs (the kworker keeps trying); restart-nic recovers and serves again.
    let out = ok(&dir, &["kill-nic", "0"]);
    assert!(out.contains(&format!("killed nicfs (pid {nicfs})")), "{out}");
    assert!(!alive(nicfs) && alive(kworker));
    let st = status(&dir);
    assert_eq!((&process(&st, "nicfs", 0)["state"], &st["nodes"][0]["mode"]), (&"dead".into(), &"nicfs down".into()));
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    assert!(err(&dir, &["mount", mnt.to_str().unwrap()]).contains("restart-nic 0"));
    assert!(ok(&dir, &["up", "--nodes", "1"]).contains("nicfs is not running"));
    assert!(ok(&dir, &["restart-nic", "0"]).contains(&format!("kworker pid {kworker} attached again")));
    let nicfs = pid_of(&dir, "nicfs-0");
    assert!(alive(nicfs));
    assert_eq!(mode(&dir), "normal");
    assert!(ok(&dir, &["restart-nic", "0"]).contains("already running"));

    // down stops both and leaves no pid file, socket or status file.
    let out = ok(&dir, &["down"]);
    assert!(out.contains("1 kworker and 1 nicfs stopped"), "{out}");
    assert!(!alive(nicfs) && !alive(kworker));
    assert_eq!(run_files(&dir), ["lock", "mounts.json"]);
    assert!(ok(&dir, &["down"]).contains("already down"));

    // A re-up keeps the recorded mode; --cpus pins every nicfs.
    let out = ok(&dir, &["up", "--nodes", "1", "--cpus", "0"]);
    assert!(out.contains("offload on") && out.contains("CPUs 0"), "{out}");
    let nicfs = pid_of(&dir, "nicfs-0");
    let allowed = fs::read_to_string(format!("/proc/{nicfs}/status")).unwrap();
    assert!(allowed.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Cpus_allowed_list:", "0"]));
    let kworker = pid_of(&dir, "kworker-0");
    ok(&dir, &["down"]);
    assert!(!alive(nicfs) && !alive(kworker));
    assert_eq!(run_files(&dir), ["lock", "mounts.json"]);
}

#[test]
fn host_only_cluster_starts_no_daemons() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    assert!(ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M", "--offload", "off"]).contains("host-only"));
    assert!(!pid_file(&dir, "nicfs-0").exists() && !pid_file(&dir, "kworker-0").exists());
    let st = status(&dir);
    assert_eq!((&st["offload"], &st["nodes"][0]["mode"]), (&"off".into(), &"host-only".into()));
    assert_eq!(st["processes"], serde_json::json!([]));
    for verb in ["kill-nic", "restart-nic"] {
        assert!(err(&dir, &[verb, "0"]).contains("has no nicfs"));
    }
    assert!(ok(&dir, &["kill-host", "0"]).contains("killed 0 host processes"));
    ok(&dir, &["down"]);
    // A re-up without --offload keeps host-only.
    ok(&dir, &["up", "--nodes", "1"]);
    assert_eq!(status(&dir)["offload"], "off");
    assert!(!pid_file(&dir, "nicfs-0").exists());
    ok(&dir, &["down"]);
}

#[test]
fn nicfs_serves_metrics_on_the_port_up_was_given() {
    need_daemons();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    // Port 0: nicfs picks a free one and status tells which.
    let out = ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M", "--metrics-port", "0"]);
    assert!(out.contains("metrics at http://127.0.0.1:"), "{out}");
    let st = status(&dir);
    assert_eq!(st["metrics_port"], 0);
    let addr = process(&st, "nicfs", 0)["metrics_addr"].as_str().unwrap_or_else(|| panic!("{st:#}")).to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut s, &mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("# EOF\n"), "{answer}");
    for name in ["linefs_nicfs_fetched_bytes_total 0", "linefs_nicfs_stage_wait_seconds_count{stage=\"publish\"}"] {
        assert!(answer.contains(name), "{name} missing from {answer}");
    }
    let text = ok(&dir, &["status"]);
    assert!(text.contains(&format!("metrics http://{addr}/metrics")), "{text}");
    assert!(text.contains("STAGE") && text.contains("END TO END") && text.contains("publish"), "{text}");
    // Recorded: a re-up serves metrics again; `off` stops that.
    ok(&dir, &["down"]);
    assert!(ok(&dir, &["up", "--nodes", "1"]).contains("metrics at"));
    ok(&dir, &["down"]);
    assert!(!ok(&dir, &["up", "--nodes", "1", "--metrics-port", "off"]).contains("metrics at"));
    assert!(process(&status(&dir), "nicfs", 0)["metrics_addr"].is_null());
    ok(&dir, &["down"]);
}

/// The files up writes and the daemons' files are not world-readable, the node's PM is
/// nicfs's alone, `--trusted-group` is recorded and given to nicfs, and `fsck` finds the node
/// clean, live and at rest (docs/SECURITY.md).
#[test]
fn files_are_private_the_trusted_group_reaches_nicfs_and_fsck_is_clean() {
    use std::os::unix::fs::PermissionsExt;
    need_daemons();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M", "--trusted-group", "4242"]);
    let desc: Value = serde_json::from_str(&fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap();
    assert_eq!(desc["trusted_group"], "4242");
    let nicfs = pid_of(&dir, "nicfs-0");
    let cmdline = fs::read_to_string(format!("/proc/{nicfs}/cmdline")).unwrap().replace('\0', " ");
    assert!(cmdline.contains("--trusted-group 4242"), "{cmdline}");
    let mode =
        |p: &Path| fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777;
    let node = PathBuf::from(desc["nodes"][0]["pm_path"].as_str().unwrap());
    assert_eq!(mode(&node), 0o700, "{}", node.display());
    for f in fs::read_dir(&node).unwrap() {
        assert_eq!(mode(&f.unwrap().path()), 0o600);
    }
    assert_eq!(mode(&dir.join("logs")), 0o750);
    let mut private = vec![dir.join("cluster.json"), dir.join("run/nicfs-0.status.json")];
    private.extend(["nicfs-0", "kworker-0"].map(|n| pid_file(&dir, n)));
    private.extend(fs::read_dir(dir.join("logs")).unwrap().map(|f| f.unwrap().path()));
    for p in &private {
        assert_eq!(mode(p) & 0o007, 0, "{} is world-readable", p.display());
    }
    // Live: nicfs holds the node.
    let out = ok(&dir, &["fsck"]);
    assert!(out.trim_end().ends_with(": clean") && out.contains(", live)"), "{out}");
    let json: Value = serde_json::from_str(&ok(&dir, &["fsck", "--json"])).unwrap();
    assert_eq!((&json["clean"], &json["live"]), (&true.into(), &true.into()), "{json:#}");
    ok(&dir, &["down"]);
    let out = ok(&dir, &["fsck"]);
    assert!(out.trim_end().ends_with(": clean") && !out.contains("live"), "{out}");
    assert!(err(&dir, &["fsck", "--node", "3"]).contains("node 3 out of range"));
    // `none` clears the recorded group.
    ok(&dir, &["up", "--nodes", "1", "--trusted-group", "none"]);
    let desc: Value = serde_json::from_str(&fs::read_to_string(dir.join("cluster.json")).unwrap()).unwrap();
    assert!(desc["trusted_group"].is_null(), "{desc:#}");
    ok(&dir, &["down"]);
}

#[test]
fn too_deep_a_directory_for_the_socket_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d".repeat(100));
    let msg = err(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    assert!(msg.contains("longer than the 107"), "{msg}");
    assert!(!dir.exists(), "nothing is created");
}

#[test]
fn offload_mount_attaches_to_nicfs() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    assert!(ok(&dir, &["mount", m]).contains("attached to nicfs"));
    assert!(mounted(&mnt));
    assert!(err(&dir, &["mount", m]).contains("already mounted"));
    let st = status(&dir);
    assert_eq!(st["mounts"][0]["attach"], "nicfs");
    assert_eq!(process(&st, "mount", 0)["alive"], true);
    wait_for("nicfs to list the mount's session", Duration::from_secs(3), || {
        process(&status(&dir), "nicfs", 0)["status"]["sessions"].as_array().is_some_and(|s| !s.is_empty())
    });
    {
        let mut f = fs::File::create(mnt.join("synced")).unwrap();
        f.write_all(b"durable through nicfs").unwrap();
        f.sync_all().unwrap();
    }
    // The mount's status shows the node's free space as nicfs counts it (was the client's
    // unspent reservation: 0).
    wait_for("the mount's status to show the node's free blocks", Duration::from_secs(5), || {
        status(&dir)["mounts"][0]["libfs"]["free_blocks"].as_u64().is_some_and(|b| b > 1000)
    });
    // A reader that stops early (`linefs status | head -1`): no panic, exit 0.
    {
        use std::process::Stdio;
        let mut child = Command::new(LINEFS)
            .args(["status", "--dir"])
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !stderr.contains("panicked"), "{:?}: {stderr}", out.status);
    }
    // A host crash: the mount and the kworker die; nicfs stays and goes isolated.
    let kworker = pid_of(&dir, "kworker-0");
    ok(&dir, &["kill-host", "0"]);
    assert!(!mounted(&mnt) && !alive(kworker));
    wait_for("nicfs to go isolated", Duration::from_secs(3), || mode(&dir) == "isolated");
    ok(&dir, &["restart-host", "0"]);
    assert!(mounted(&mnt) && alive(pid_of(&dir, "kworker-0")));
    assert_eq!(mode(&dir), "normal");
    assert_eq!(fs::read(mnt.join("synced")).unwrap(), b"durable through nicfs");
    ok(&dir, &["umount", m]);
    let nicfs = pid_of(&dir, "nicfs-0");
    ok(&dir, &["down"]);
    assert!(!mounted(&mnt) && !alive(nicfs));
    assert_eq!(run_files(&dir), ["lock", "mounts.json"]);
}

/// Two FUSE mounts of one node (offload: each a client of the node's nicfs) share files: what
/// one writes, creates, renames or removes, the other sees at its next call — through the
/// kernel's caches, which the lease machinery invalidates.
#[test]
fn two_mounts_of_one_node_share_files() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (m1, m2) = (tmp.path().join("m1"), tmp.path().join("m2"));
    fs::create_dir(&m1).unwrap();
    fs::create_dir(&m2).unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    ok(&dir, &["mount", m1.to_str().unwrap()]);
    ok(&dir, &["mount", m2.to_str().unwrap()]);
    assert!(mounted(&m1) && mounted(&m2));

    fs::write(m1.join("a"), b"one").unwrap();
    assert_eq!(fs::read(m2.join("a")).unwrap(), b"one");
    {
        let mut f = fs::OpenOptions::new().append(true).open(m2.join("a")).unwrap();
        f.write_all(b" two").unwrap();
    }
    assert_eq!(fs::read(m1.join("a")).unwrap(), b"one two");
    assert_eq!(fs::metadata(m1.join("a")).unwrap().len(), 7);

    fs::create_dir(m2.join("d")).unwrap();
    fs::rename(m1.join("a"), m1.join("d").join("b")).unwrap();
    assert!(!m2.join("a").exists());
    assert_eq!(fs::read(m2.join("d").join("b")).unwrap(), b"one two");
    fs::remove_file(m2.join("d").join("b")).unwrap();
    assert!(!m1.join("d").join("b").exists());
    assert_eq!(fs::read_dir(m1.join("d")).unwrap().count(), 0);

    // Alternating writers and readers of one file and one directory.
    for i in 0..40u32 {
        let (w, r) = if i % 2 == 0 { (&m1, &m2) } else { (&m2, &m1) };
        let body = format!("round {i}").repeat(i as usize + 1);
        fs::write(w.join("d").join(format!("f{}", i % 5)), &body).unwrap();
        assert_eq!(fs::read_to_string(r.join("d").join(format!("f{}", i % 5))).unwrap(), body, "round {i}");
        let names: std::collections::BTreeSet<String> =
            fs::read_dir(r.join("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert_eq!(names.len(), (i as usize + 1).min(5), "round {i}: {names:?}");
    }
    ok(&dir, &["umount", m1.to_str().unwrap()]);
    ok(&dir, &["umount", m2.to_str().unwrap()]);
    ok(&dir, &["down"]);
}

/// Resident bytes of `path` in the page cache of its mount (util-linux `fincore`), or `None`
/// without fincore.
fn resident(path: &Path) -> Option<u64> {
    let out = Command::new("fincore").args(["--bytes", "--noheadings", "--output", "RES"]).arg(path).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The kernel caches of two mounts of one node (offload) with caching on: pages kept across
/// opens, attributes and names cached for long. Each mount first has what it reads in its
/// kernel's caches (a file's pages, checked with fincore where installed; a stat; names);
/// then the other mount changes it — overwrites of the same size (the page cache alone would
/// hide those), chmod, truncate, rename, unlink, create — and the first must see the change
/// at once, through a new open and through a descriptor it kept open, in both directions and
/// over many rounds.
#[test]
fn two_mounts_see_changes_behind_their_kernel_caches() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    use std::os::unix::fs::{FileExt, PermissionsExt};
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (m1, m2) = (tmp.path().join("m1"), tmp.path().join("m2"));
    fs::create_dir(&m1).unwrap();
    fs::create_dir(&m2).unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    // The writeback cache would keep data from the other mount: refused with offload.
    let why = err(&dir, &["mount", "-o", "writeback_cache", m1.to_str().unwrap()]);
    assert!(why.contains("writeback_cache") && why.contains("--offload off"), "{why}");
    ok(&dir, &["mount", m1.to_str().unwrap()]);
    ok(&dir, &["mount", m2.to_str().unwrap()]);

    const LEN: usize = 64 << 10;
    let body = |round: usize, who: u8| -> Vec<u8> { (0..LEN).map(|i| (i + round) as u8 ^ who).collect() };
    fs::write(m1.join("f"), body(0, 1)).unwrap();
    fs::create_dir(m1.join("d")).unwrap();
    for round in 1..=30usize {
        // The reader gets everything into its kernel's caches, keeps the file open.
        let (w, r) = if round % 2 == 0 { (&m1, &m2) } else { (&m2, &m1) };
        let before = fs::read(r.join("f")).unwrap();
        assert_eq!(fs::read(r.join("f")).unwrap(), before, "round {round}");
        if round == 1 {
            if let Some(res) = resident(&r.join("f")) {
                assert_eq!(res, LEN as u64, "the reader's pages are not cached: no kernel cache to test");
            }
        }
        let kept = fs::File::open(r.join("f")).unwrap();
        let mut buf = vec![0u8; LEN];
        kept.read_exact_at(&mut buf, 0).unwrap();
        let meta = fs::metadata(r.join("f")).unwrap();
        assert!(r.join("d").join(format!("n{}", round - 1)).exists() || round == 1);
        assert!(!r.join("d").join(format!("n{round}")).exists());

        // The writer overwrites in place (same size), chmods, renames, creates.
        let new = body(round, if w == &m1 { 1 } else { 2 });
        fs::OpenOptions::new().write(true).open(w.join("f")).unwrap().write_all_at(&new, 0).unwrap();
        let mode = 0o600 | ((round as u32 % 2) * 0o040);
        fs::set_permissions(w.join("f"), fs::Permissions::from_mode(mode)).unwrap();
        if round > 1 {
            fs::rename(w.join("d").join(format!("n{}", round - 1)), w.join("d").join(format!("n{round}"))).unwrap();
        } else {
            fs::write(w.join("d").join("n1"), b"x").unwrap();
        }

        // The reader sees all of it at once: a new open, the descriptor it kept, stat, names.
        assert_eq!(fs::read(r.join("f")).unwrap(), new, "round {round}: a new open read stale data");
        kept.read_exact_at(&mut buf, 0).unwrap();
        assert!(buf == new, "round {round}: a descriptor kept open read stale data");
        let m = fs::metadata(r.join("f")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, mode, "round {round}: stale mode");
        assert!(m.modified().unwrap() >= meta.modified().unwrap());
        assert!(r.join("d").join(format!("n{round}")).exists(), "round {round}: the new name is missing");
        if round > 1 {
            assert!(
                !r.join("d").join(format!("n{}", round - 1)).exists(),
                "round {round}: the old name is still there"
            );
        }
    }

    // An overwrite that puts the modification time back (as `cp -p` or tar do): size and
    // mtime are as the reader's kernel cached them, the content is not; a new open sees it.
    let cached = fs::read(m1.join("f")).unwrap();
    let mtime = fs::metadata(m1.join("f")).unwrap().modified().unwrap();
    let restored: Vec<u8> = cached.iter().map(|b| !b).collect();
    let f = fs::OpenOptions::new().write(true).open(m2.join("f")).unwrap();
    f.write_all_at(&restored, 0).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(fs::metadata(m1.join("f")).unwrap().modified().unwrap(), mtime);
    assert!(fs::read(m1.join("f")).unwrap() == restored, "an overwrite with its mtime put back stayed hidden");

    // Sizes and removals: the writer truncates and unlinks what the reader has cached.
    assert_eq!(fs::metadata(m1.join("f")).unwrap().len(), LEN as u64);
    let kept = fs::File::open(m1.join("f")).unwrap();
    fs::OpenOptions::new().write(true).open(m2.join("f")).unwrap().set_len(100).unwrap();
    assert_eq!(fs::metadata(m1.join("f")).unwrap().len(), 100);
    assert_eq!(kept.metadata().unwrap().len(), 100);
    assert_eq!(fs::read(m1.join("f")).unwrap().len(), 100);
    assert!(m1.join("d").join("n30").exists());
    fs::remove_file(m2.join("d").join("n30")).unwrap();
    assert!(!m1.join("d").join("n30").exists());
    assert_eq!(fs::read_dir(m1.join("d")).unwrap().count(), 0);
    drop(kept);
    ok(&dir, &["umount", m1.to_str().unwrap()]);
    ok(&dir, &["umount", m2.to_str().unwrap()]);
    ok(&dir, &["down"]);
}

/// Two mounts of one node hammering the same few files and one directory from several
/// threads each (reads that fill the page cache, in-place writes, appends, truncates, stats,
/// renames, creates and unlinks): leases move back and forth all the time, and each move
/// expires the loser's kernel caches while the kernel may hold that file's page locks or
/// that directory's lock for a request waiting on the lease. Nothing may hang: every thread
/// must finish its rounds within the deadline.
#[test]
fn two_mounts_under_concurrent_load_do_not_deadlock() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (m1, m2) = (tmp.path().join("m1"), tmp.path().join("m2"));
    fs::create_dir(&m1).unwrap();
    fs::create_dir(&m2).unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "128M"]);
    ok(&dir, &["mount", m1.to_str().unwrap()]);
    ok(&dir, &["mount", m2.to_str().unwrap()]);
    fs::create_dir(m1.join("d")).unwrap();
    for i in 0..3 {
        fs::write(m1.join("d").join(format!("f{i}")), vec![7u8; 256 << 10]).unwrap();
    }
    let (tx, rx) = std::sync::mpsc::channel();
    for t in 0..6u64 {
        let m = if t % 2 == 0 { m1.clone() } else { m2.clone() };
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut x = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut next = |n: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % n
            };
            let d = m.join("d");
            for _ in 0..400 {
                let f = d.join(format!("f{}", next(3)));
                // Errors are expected (a name renamed or unlinked by the other side); hangs are not.
                let _ = match next(8) {
                    0 | 1 => fs::read(&f).map(|_| ()),
                    2 => fs::OpenOptions::new()
                        .write(true)
                        .open(&f)
                        .and_then(|h| h.write_all_at(&[next(256) as u8; 8192], next(32) * 8192)),
                    3 => fs::OpenOptions::new().append(true).open(&f).and_then(|mut h| h.write_all(&[1u8; 4096])),
                    4 => fs::OpenOptions::new().write(true).open(&f).and_then(|h| h.set_len(next(256 << 10))),
                    5 => fs::metadata(&f).map(|_| ()),
                    6 => fs::rename(&f, d.join(format!("f{}", next(3)))),
                    _ => fs::read_dir(&d).map(|r| r.count()).map(|_| ()).and_then(|_| {
                        let g = d.join(format!("f{}", next(3)));
                        if next(2) == 0 {
                            fs::remove_file(&g)
                        } else {
                            fs::write(&g, [3u8; 1000])
                        }
                    }),
                };
            }
            let _ = tx.send(t);
        });
    }
    drop(tx);
    let deadline = Instant::now() + Duration::from_secs(240);
    for _ in 0..6 {
        let left = deadline.saturating_duration_since(Instant::now());
        rx.recv_timeout(left).expect("a thread hung: two mounts under load deadlocked");
    }
    // Both mounts still serve, and agree.
    let names = |m: &Path| {
        let mut v: Vec<String> =
            fs::read_dir(m.join("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        v.sort();
        v
    };
    assert_eq!(names(&m1), names(&m2));
    for n in names(&m1) {
        let (a, b) = (fs::read(m1.join("d").join(&n)), fs::read(m2.join("d").join(&n)));
        assert_eq!(a.unwrap(), b.unwrap(), "{n} differs, or is missing on one mount");
    }
    ok(&dir, &["umount", m1.to_str().unwrap()]);
    ok(&dir, &["umount", m2.to_str().unwrap()]);
    ok(&dir, &["down"]);
}

/// Host failure under load (issue 12 item 9): a process using the libfs API directly (a
/// client that is not a mount, so `kill-host` leaves it running) writes and fsyncs while the
/// host side is killed; nicfs goes isolated within a second and goes on publishing by itself
/// (it copies the data then), returns to normal on `restart-host`, and the client ends with
/// everything it wrote published.
#[test]
fn kill_host_under_a_write_load_from_a_second_client() {
    need_daemons();
    let loadgen = Path::new(LINEFS).with_file_name("linefs-loadgen");
    assert!(loadgen.is_file(), "{} is missing: cargo build --bins", loadgen.display());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "512M"]);
    let node = dir.join("pm").join("node0");
    let socket = dir.join("run").join("nicfs-0.sock");
    let writer = Command::new(&loadgen)
        .args(["write", "--dir", "load", "--bytes", "192M", "--fsync-every", "64", "--node"])
        .arg(&node)
        .arg("--nicfs")
        .arg(&socket)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let counters = |dir: &Path| process(&status(dir), "nicfs", 0)["status"]["counters"].clone();
    wait_for("the writer to be published from", Duration::from_secs(20), || {
        counters(&dir)["bytes_published"].as_u64().unwrap_or(0) > (4 << 20)
    });
    ok(&dir, &["kill-host", "0"]);
    let killed = Instant::now();
    wait_for("nicfs to go isolated", Duration::from_secs(3), || mode(&dir) == "isolated");
    assert!(killed.elapsed() < Duration::from_secs(2), "isolated only after {:?}", killed.elapsed());
    let before = counters(&dir);
    wait_for("nicfs to publish by itself", Duration::from_secs(20), || {
        let now = counters(&dir);
        now["bytes_published"].as_u64() > before["bytes_published"].as_u64()
            && now["bytes_copied_by_nicfs"].as_u64() > before["bytes_copied_by_nicfs"].as_u64()
    });
    ok(&dir, &["restart-host", "0"]);
    assert_eq!(mode(&dir), "normal");
    let out = writer.wait_with_output().unwrap();
    assert!(out.status.success(), "the writer failed: {}", String::from_utf8_lossy(&out.stdout));
    let line = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(line.lines().last().unwrap_or("")).expect("the writer's JSON line");
    assert_eq!(result["published_all"], true, "{result}");
    assert_eq!(result["bytes"].as_u64(), Some(192 << 20), "{result}");
    ok(&dir, &["down"]);
}

/// Through two FUSE mounts of one node: a file unlinked on one while open on the other
/// stays readable whole there (nicfs keeps it), and is freed once closed; no session fails
/// on the way (an access time logged on the last reads must not outlive the inode).
#[test]
fn a_file_unlinked_on_one_mount_stays_readable_where_it_is_open() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (m1, m2) = (tmp.path().join("m1"), tmp.path().join("m2"));
    fs::create_dir(&m1).unwrap();
    fs::create_dir(&m2).unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    ok(&dir, &["mount", m1.to_str().unwrap()]);
    ok(&dir, &["mount", m2.to_str().unwrap()]);
    let nicfs = || -> Value {
        serde_json::from_slice(&fs::read(dir.join("run").join("nicfs-0.status.json")).unwrap()).unwrap()
    };
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(m1.join("big"), &data).unwrap();
    let mut held = fs::File::open(m2.join("big")).unwrap();
    fs::remove_file(m1.join("big")).unwrap();
    assert!(!m2.join("big").exists());
    wait_for("the orphan kept", Duration::from_secs(10), || nicfs()["orphans_kept"] == 1);
    let mut back = Vec::new();
    std::io::Read::read_to_end(&mut held, &mut back).unwrap();
    assert!(back == data, "the unlinked file read whole through the other mount");
    drop(held);
    // The kernel forgets the inode when its caches are dropped (or the mount goes); then
    // mount 2 frees it.
    if fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
        ok(&dir, &["umount", m2.to_str().unwrap()]);
        ok(&dir, &["mount", m2.to_str().unwrap()]);
    }
    wait_for("the orphan freed", Duration::from_secs(20), || {
        let st = nicfs();
        st["orphans_kept"] == 0 && st["inodes_open"] == 0
    });
    let st = nicfs();
    assert_eq!(st["counters"]["rejections"], 0, "{st}");
    fs::write(m2.join("after"), b"fine").unwrap();
    assert_eq!(fs::read(m1.join("after")).unwrap(), b"fine");
    ok(&dir, &["umount", m1.to_str().unwrap()]);
    ok(&dir, &["umount", m2.to_str().unwrap()]);
    ok(&dir, &["down"]);
}

/// A mount whose session ends (here: its nicfs crashed and a new one runs) holds no lease
/// any more, so it must not serve what it cached: a file kept open there, read through the
/// kernel's page cache before, is changed through another mount of the restarted nicfs;
/// reading it again through the old descriptor gives an error or the new bytes, never the
/// old ones.
#[test]
fn a_mount_whose_session_ended_serves_nothing_stale() {
    need_daemons();
    if !fuse_available() {
        return;
    }
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let (m1, m2) = (tmp.path().join("m1"), tmp.path().join("m2"));
    fs::create_dir(&m1).unwrap();
    fs::create_dir(&m2).unwrap();
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "1", "--pm-size", "64M"]);
    ok(&dir, &["mount", m1.to_str().unwrap()]);
    let old = vec![b'o'; 64 << 10];
    fs::write(m1.join("f"), &old).unwrap();
    let f = fs::File::open(m1.join("f")).unwrap();
    let mut buf = vec![0u8; old.len()];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(buf, old);
    ok(&dir, &["kill-nic", "0"]);
    ok(&dir, &["restart-nic", "0"]);
    ok(&dir, &["mount", m2.to_str().unwrap()]);
    let new = vec![b'n'; 64 << 10];
    fs::write(m2.join("f"), &new).unwrap();
    assert_eq!(fs::read(m2.join("f")).unwrap(), new);
    // The old mount's caches are dropped from a thread of their own: give it a moment.
    std::thread::sleep(Duration::from_millis(500));
    let mut buf = vec![0u8; old.len()];
    match f.read_exact_at(&mut buf, 0) {
        Ok(()) => assert!(buf == new, "the old mount served stale bytes ({:?}...)", &buf[..8]),
        Err(e) => eprintln!("the old mount refuses the read: {e}"),
    }
    match fs::metadata(m1.join("f")) {
        Ok(m) => assert_eq!(m.len(), new.len() as u64),
        Err(e) => eprintln!("the old mount refuses the stat: {e}"),
    }
    drop(f);
    ok(&dir, &["down"]);
}
