//! The xfstests mount helper (`xfstests/mount.fuse.linefs`), driven the way xfstests drives it
//! with `FSTYP=fuse FUSE_SUBTYP=.linefs`: `mount -t fuse.linefs SOURCE MNT`, the mount reads
//! plain `fuse` in `df -T`, `umount SOURCE`, a new mount of the same SOURCE finds the data, and
//! the fuse "mkfs" (mount, `rm -rf MNT/*`, unmount) leaves an empty file system.
//!
//! util-linux only runs helpers from /sbin, so the test installs the repository's helper there
//! (as `xfstests/run` does). Needs root, `/dev/fuse` and mount(8); without them it prints why
//! it is skipped and passes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LINEFS: &str = env!("CARGO_BIN_EXE_linefs");
const HELPER: &str = "/sbin/mount.fuse.linefs";

fn available() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting through mount(8) helpers needs root");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("skipped: /dev/fuse does not exist");
        return false;
    }
    if Command::new("mount").arg("--version").output().is_err() {
        eprintln!("skipped: mount(8) is not installed");
        return false;
    }
    true
}

/// Installs the repository's helper as /sbin/mount.fuse.linefs (atomically; unchanged if the
/// installed one is the same).
fn install_helper() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../xfstests/mount.fuse.linefs");
    let text = fs::read(&src).expect("read xfstests/mount.fuse.linefs");
    if fs::read(HELPER).ok().as_deref() == Some(&text[..]) {
        return;
    }
    let tmp = format!("{HELPER}.{}.tmp", std::process::id());
    fs::write(&tmp, &text).expect("write the helper");
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755)).expect("chmod the helper");
    fs::rename(&tmp, HELPER).expect("install the helper");
}

/// Runs a command with the helper's settings in its environment (mount(8) passes them on).
fn run(state: &Path, prog: &str, args: &[&str]) -> Output {
    let out = Command::new(prog)
        .args(args)
        .env("LINEFS_XFSTESTS_BIN", LINEFS)
        .env("LINEFS_XFSTESTS_STATE", state)
        .env("LINEFS_XFSTESTS_PM_SIZE", "64M")
        .env("LINEFS_NO_PREFAULT", "1")
        // The daemon is this very build of `linefs` (its fuse-daemon verb).
        .env("LINEFS_FUSE", "self")
        .output()
        .unwrap_or_else(|e| panic!("run {prog}: {e}"));
    eprintln!(
        "{prog} {args:?} -> {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn ok(state: &Path, prog: &str, args: &[&str]) -> String {
    let out = run(state, prog, args);
    assert!(out.status.success(), "{prog} {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The file-system type of the mount whose source is `source`, if it is mounted.
fn mounted_type(source: &str) -> Option<String> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap();
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.first() == Some(&source)).then(|| f[2].to_string())
    })
}

/// Unmounts and stops whatever the test left, even when it fails.
struct Cleanup {
    state: PathBuf,
    source: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        while mounted_type(&self.source).is_some() {
            if !run(&self.state, "umount", &[&self.source]).status.success() {
                let _ = run(&self.state, "umount", &["-l", &self.source]);
                break;
            }
        }
        let dir = self.state.join(&self.source);
        if dir.exists() {
            let _ = run(&self.state, LINEFS, &["down", "--dir", dir.to_str().unwrap()]);
        }
    }
}

#[test]
fn mount_helper_as_xfstests_uses_it() {
    if !available() {
        return;
    }
    install_helper();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let source = format!("lfx-ci-{}", std::process::id());
    let src = source.as_str();
    let _cleanup = Cleanup { state: state.clone(), source: source.clone() };

    // A source that is a path is refused (umount SOURCE would mean the path).
    let out = run(&state, "mount", &["-t", "fuse.linefs", tmp.path().to_str().unwrap(), m]);
    assert!(!out.status.success(), "a path as SOURCE must be refused");
    assert!(mounted_type(tmp.path().to_str().unwrap()).is_none());

    // Mount: plain `fuse` type, in /proc/mounts and in df -T.
    ok(&state, "mount", &["-t", "fuse.linefs", src, m]);
    assert_eq!(mounted_type(src).as_deref(), Some("fuse"));
    let df = ok(&state, "df", &["-T", m]);
    let row = df.lines().nth(1).expect("df row");
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cols[0], cols[1]), (src, "fuse"), "df -T: {df}");
    let total_kib: u64 = cols[2].parse().expect("df size");
    assert!(total_kib > 32 * 1024, "statfs size of a 64 MiB node: {total_kib} KiB");

    // Data survives umount SOURCE + mount of the same SOURCE.
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::create_dir(mnt.join("dir")).unwrap();
    fs::write(mnt.join("dir/file"), &data).unwrap();
    fs::write(mnt.join(".hidden"), b"dot").unwrap();
    ok(&state, "umount", &[src]);
    assert!(mounted_type(src).is_none());
    ok(&state, "mount", &["-t", "fuse.linefs", src, m]);
    assert_eq!(mounted_type(src).as_deref(), Some("fuse"));
    assert_eq!(fs::read(mnt.join("dir/file")).unwrap(), data);
    ok(&state, "umount", &[src]);

    // xfstests' mkfs for fuse: mount, rm -rf SCRATCH_MNT/*, unmount. The next mount is empty.
    ok(&state, "mount", &["-t", "fuse.linefs", src, m]);
    ok(&state, "sh", &["-c", &format!("rm -rf {m}/* {m}/.hidden")]);
    ok(&state, "umount", &[src]);
    ok(&state, "mount", &["-t", "fuse.linefs", src, m]);
    let left: Vec<_> = fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "after mkfs: {left:?}");
    fs::write(mnt.join("new"), b"fresh").unwrap();
    assert_eq!(fs::read(mnt.join("new")).unwrap(), b"fresh");
    ok(&state, "umount", &[src]);
}

/// `xfstests/run --count LOG` on check logs of the three shapes a run leaves: a finished run,
/// one interrupted in the middle of a test (the test is in check's "Ran:" list but must not
/// count as passed), and one killed before check printed its summary.
#[test]
fn run_counts_an_interrupted_test_as_interrupted() {
    let run = Path::new(env!("CARGO_MANIFEST_DIR")).join("../xfstests/run");
    let dir = tempfile::tempdir().expect("tempdir");
    let count = |name: &str, log: &str| -> String {
        let path = dir.path().join(name);
        fs::write(&path, log).expect("write log");
        let out = Command::new("bash").arg(&run).arg("--count").arg(&path).output().expect("run xfstests/run");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let finished = "generic/001 3s ...  2s\ngeneric/002       [not run] no\n\
        generic/003 1s ... - output mismatch (see x)\ngeneric/004        4s\n\
        Ran: generic/001 generic/002 generic/003 generic/004\nNot run: generic/002\n\
        Failures: generic/003\nFailed 1 of 4 tests\n";
    assert_eq!(count("finished", finished), "xfstests: 2 passed, 1 failed, 1 not run, 0 interrupted");
    let interrupted = "generic/001 3s ...  2s\ngeneric/002       [not run] no\ngeneric/003 9s ...\n\
        Ran: generic/001 generic/002 generic/003\nInterrupted!\nNot run: generic/002\nPassed all 3 tests\n";
    assert_eq!(count("interrupted", interrupted), "xfstests: 1 passed, 0 failed, 1 not run, 1 interrupted");
    let killed = "generic/001 3s ...  2s\ngeneric/002 1s ... - output mismatch (see x)\ngeneric/003 9s ...";
    assert_eq!(
        count("killed", killed),
        "xfstests: 1 passed, 1 failed, 0 not run, 1 interrupted (check did not finish: counted from its per-test lines)"
    );
}
