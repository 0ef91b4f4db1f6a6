//! What an application sees when nicfs refuses: the errno nicfs decided (its
//! `RemoteError`), through libfs's public API against a real nicfs — not EIO. Each case
//! provokes one refusal: a mount daemon that is not root (EPERM), every log slot in use
//! (EBUSY), a uid over its share of the node's blocks (EDQUOT), and the node full (ENOSPC,
//! with `offload.rs`'s space tests). The unprivileged cases re-run this test binary as
//! uid 65534 (`refusal_child`, one case per run), in the group nicfs trusts with the
//! public file, and read the errno it prints.

#[path = "support/nicfs.rs"]
mod nicfs;

use libfs::*;
use linefs_pm::layout::FormatParams;
use nicfs::Nicfs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::time::Duration;

const NOBODY: u32 = 65534;
/// The group nicfs's `--trusted-group` names here: its members get the public file.
const TRUSTED_GID: u32 = 4243;

fn small() -> FormatParams {
    FormatParams { size: 32 << 20, log_size: 4 << 20, log_slots: 2, inodes: 1024 }
}

/// Runs `refusal_child` as uid 65534 (in the trusted group) with `case`; the errno it
/// printed, or 0 when the case succeeded where a refusal was expected.
fn errno_as_nobody(n: &Nicfs, case: &str) -> i32 {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "refusal_child", "--nocapture", "--include-ignored", "--test-threads", "1"])
        .env("REFUSAL_CASE", case)
        .env("REFUSAL_SOCKET", &n.socket)
        .env("REFUSAL_NODE", &n.node)
        .stdin(std::process::Stdio::null());
    let groups = [TRUSTED_GID as libc::gid_t];
    // SAFETY: only async-signal-safe calls between fork and exec: the groups, then the gid
    // and uid (std's `uid()` would clear the groups).
    unsafe {
        cmd.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(NOBODY) != 0
                || libc::setuid(NOBODY) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split("refusal-errno ").nth(1))
        .unwrap_or_else(|| panic!("case {case} printed no errno:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    line.trim().parse().unwrap()
}

/// A node whose socket uid 65534 can reach, with a directory it may create in.
fn open_to_nobody(args: &[&str]) -> Nicfs {
    let mut all = vec!["--trusted-group", "4243"];
    all.extend_from_slice(args);
    let n = Nicfs::start_with_args(&small(), &all);
    std::fs::set_permissions(n.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let fs = n.attach(FsOptions::default());
    let d = fs.mkdir(&Cred::root(), ROOT_INO, b"shared", 0o777, 0).unwrap();
    fs.forget(d.ino, 1);
    fs.sync_all().unwrap();
    drop(fs);
    n
}

#[test]
fn a_mount_daemon_that_is_not_root_is_told_eperm() {
    let n = open_to_nobody(&[]);
    assert_eq!(errno_as_nobody(&n, "mount-daemon"), libc::EPERM);
}

#[test]
fn a_uid_over_its_share_of_blocks_is_told_edquot() {
    // 64 blocks: a small write fits (libfs asks for exactly what it lacks when its usual
    // grant is over the share), 1 MiB does not.
    let n = open_to_nobody(&["--max-blocks-per-uid", "64"]);
    assert_eq!(errno_as_nobody(&n, "over-quota"), libc::EDQUOT);
}

#[test]
fn every_log_slot_in_use_is_ebusy() {
    let n = Nicfs::start_with(&small());
    let (_a, _b) = (n.attach(FsOptions::default()), n.attach(FsOptions::default()));
    let e = Fs::mount(FsOptions { pm_path: n.node.clone(), nicfs: Some(n.socket.clone()), ..Default::default() })
        .err()
        .expect("a third client of a two-slot node");
    assert_eq!(e.errno(), libc::EBUSY, "{e}");
}

/// The unprivileged side of the cases above (run by [`errno_as_nobody`]; ignored in a
/// plain run). Prints `refusal-errno N`: the errno the case's call failed with, 0 if none.
#[test]
#[ignore]
fn refusal_child() {
    let Ok(case) = std::env::var("REFUSAL_CASE") else { return };
    let opts = FsOptions {
        pm_path: std::env::var("REFUSAL_NODE").unwrap().into(),
        nicfs: Some(std::env::var("REFUSAL_SOCKET").unwrap().into()),
        publish_interval: Duration::from_millis(50),
        ..Default::default()
    };
    let me = Cred { uid: NOBODY, gid: NOBODY, groups: vec![TRUSTED_GID] };
    let result: FsResult<()> = match case.as_str() {
        "mount-daemon" => Fs::mount(FsOptions { mount_daemon: true, ..opts }).map(drop),
        "over-quota" => (|| {
            let fs = Fs::mount(opts)?;
            let dir = fs.lookup(&me, ROOT_INO, b"shared")?;
            let (f, fh) = fs.create(&me, dir.ino, b"f", 0o644, 0o022, libc::O_RDWR)?;
            fs.write(&me, f.ino, 0, &[1u8; 4096])?;
            let r = fs.write(&me, f.ino, 4096, &vec![2u8; 1 << 20]).map(drop);
            fs.release(f.ino, fh);
            r
        })(),
        other => panic!("no case {other}"),
    };
    let errno = match &result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{case}: {e}");
            e.errno()
        }
    };
    println!("refusal-errno {errno}");
}
