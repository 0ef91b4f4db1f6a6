//! The same random operations against a directory of the host file system and against a
//! real linefs FUSE mount: every result (success or errno) and, periodically, the whole tree
//! (names, kinds, sizes, contents, modes, link counts, symlink targets, xattrs) must agree.
//! Then the mount is unmounted and mounted again, and the tree must still agree.
//!
//! Needs root, /dev/fuse and fusermount3; skipped with a message otherwise.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

#[path = "support/fuse.rs"]
mod support;
use support::fuse_available_as_root;
#[path = "support/daemon.rs"]
mod daemon;
use daemon::start_linefs_fuse;

struct Mount {
    child: Child,
    mnt: PathBuf,
}

impl Mount {
    fn start(pm: &Path, mnt: &Path) -> Mount {
        let child = start_linefs_fuse(pm, mnt);
        // The directory must now be a FUSE mount, or the test would compare the host with
        // itself.
        let c = CString::new(mnt.as_os_str().as_bytes()).expect("path");
        // SAFETY: statfs fills the zeroed struct; c is NUL-terminated.
        let mut st: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::statfs(c.as_ptr(), &mut st) }, 0);
        assert_eq!(st.f_type, 0x6573_5546, "{} is not a FUSE mount", mnt.display());
        Mount { child, mnt: mnt.to_path_buf() }
    }

    fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                assert!(st.success(), "linefs-fuse exited with {st}");
                break;
            }
            assert!(Instant::now() < deadline, "linefs-fuse did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = Command::new("fusermount3").arg("-u").arg("-q").arg(&self.mnt).status();
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(&self.mnt).status();
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    kind: &'static str,
    mode: u32,
    nlink: u64,
    size: u64,
    data: Vec<u8>,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn xattrs(p: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let c = CString::new(p.as_os_str().as_bytes()).expect("path");
    let mut buf = vec![0u8; 65536];
    // SAFETY: buf is valid for its length; c is NUL-terminated.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let mut out = BTreeMap::new();
    if n <= 0 {
        return out;
    }
    for name in buf[..n as usize].split(|&b| b == 0).filter(|n| !n.is_empty() && n.starts_with(b"user.")) {
        let cn = CString::new(name).expect("name");
        let mut v = vec![0u8; 65536];
        // SAFETY: as above.
        let m = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        if m >= 0 {
            v.truncate(m as usize);
            out.insert(name.to_vec(), v);
        }
    }
    out
}

fn tree(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let mut ents: Vec<_> = std::fs::read_dir(&dir).expect("read_dir").map(|e| e.expect("entry").path()).collect();
        ents.sort();
        for p in ents {
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let ft = m.file_type();
            let (kind, data) = if ft.is_dir() {
                stack.push(p.clone());
                ("dir", Vec::new())
            } else if ft.is_symlink() {
                ("symlink", std::fs::read_link(&p).expect("readlink").as_os_str().as_bytes().to_vec())
            } else if ft.is_file() {
                ("file", std::fs::read(&p).expect("read"))
            } else {
                ("other", Vec::new())
            };
            let rel = p.strip_prefix(root).expect("prefix").display().to_string();
            let size = if ft.is_dir() { 0 } else { m.size() };
            let xa = if ft.is_symlink() { BTreeMap::new() } else { xattrs(&p) };
            out.insert(rel, Node { kind, mode: m.mode() & 0o7777, nlink: m.nlink(), size, data, xattrs: xa });
        }
    }
    out
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn pick_path(rng: &mut StdRng) -> String {
    let depth = rng.random_range(1..=3);
    (0..depth).map(|_| NAMES[rng.random_range(0..NAMES.len())]).collect::<Vec<_>>().join("/")
}

/// One operation, applied identically under `root`. Returns the errno on failure.
fn apply(root: &Path, op: &Op) -> Result<(), i32> {
    let p = |s: &str| root.join(s);
    let e = |r: std::io::Result<()>| r.map_err(|e| e.raw_os_error().unwrap_or(-1));
    match op {
        Op::Create(a) => e(std::fs::OpenOptions::new().create_new(true).write(true).open(p(a)).map(|_| ())),
        Op::Mkdir(a) => e(std::fs::create_dir(p(a))),
        Op::Write(a, off, len, byte) => {
            let f = std::fs::OpenOptions::new().write(true).open(p(a)).map_err(|e| e.raw_os_error().unwrap_or(-1))?;
            e(f.write_all_at(&vec![*byte; *len], *off))
        }
        Op::Truncate(a, size) => {
            let f = std::fs::OpenOptions::new().write(true).open(p(a)).map_err(|e| e.raw_os_error().unwrap_or(-1))?;
            e(f.set_len(*size))
        }
        Op::Read(a, off, len) => {
            let f = std::fs::File::open(p(a)).map_err(|e| e.raw_os_error().unwrap_or(-1))?;
            let mut buf = vec![0u8; *len];
            f.read_at(&mut buf, *off).map(|_| ()).map_err(|e| e.raw_os_error().unwrap_or(-1))
        }
        Op::Unlink(a) => e(std::fs::remove_file(p(a))),
        Op::Rmdir(a) => e(std::fs::remove_dir(p(a))),
        Op::Rename(a, b) => e(std::fs::rename(p(a), p(b))),
        Op::Link(a, b) => e(std::fs::hard_link(p(a), p(b))),
        Op::Symlink(a, target) => e(std::os::unix::fs::symlink(target, p(a))),
        Op::Chmod(a, mode) => e(std::fs::set_permissions(p(a), std::fs::Permissions::from_mode(*mode))),
        Op::SetXattr(a, name, len) => {
            let c = CString::new(p(a).as_os_str().as_bytes()).expect("path");
            let n = CString::new(*name).expect("name");
            let v = vec![b'v'; *len];
            // SAFETY: valid C strings and buffer.
            let rc = unsafe { libc::setxattr(c.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
            if rc == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1))
            }
        }
        Op::Fsync(a) => {
            let f = std::fs::File::open(p(a)).map_err(|e| e.raw_os_error().unwrap_or(-1))?;
            e(f.sync_all())
        }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Mkdir(String),
    Write(String, u64, usize, u8),
    Truncate(String, u64),
    Read(String, u64, usize),
    Unlink(String),
    Rmdir(String),
    Rename(String, String),
    Link(String, String),
    Symlink(String, String),
    Chmod(String, u32),
    SetXattr(String, &'static str, usize),
    Fsync(String),
}

fn random_op(rng: &mut StdRng) -> Op {
    let a = pick_path(rng);
    match rng.random_range(0..13) {
        0 | 1 => Op::Create(a),
        2 => Op::Mkdir(a),
        3 | 4 => Op::Write(a, rng.random_range(0..200_000), rng.random_range(1..70_000), rng.random()),
        5 => Op::Truncate(a, rng.random_range(0..150_000)),
        6 => Op::Read(a, rng.random_range(0..100_000), rng.random_range(1..50_000)),
        7 => Op::Unlink(a),
        8 => Op::Rmdir(a),
        9 => Op::Rename(a, pick_path(rng)),
        10 => Op::Link(a, pick_path(rng)),
        11 => Op::Symlink(a, pick_path(rng)),
        _ => match rng.random_range(0..3) {
            0 => Op::Chmod(a, [0o600, 0o644, 0o755, 0o4755][rng.random_range(0..4)]),
            1 => Op::SetXattr(a, ["user.x", "user.y"][rng.random_range(0..2)], rng.random_range(0..300)),
            _ => Op::Fsync(a),
        },
    }
}

#[test]
fn random_ops_agree_with_the_host_file_system() {
    if !fuse_available_as_root() {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let pm = work.path().join("node.pm");
    linefs_pm::mkfs::format_dir(&pm, &linefs_pm::layout::FormatParams::for_size(256 << 20)).expect("format");
    let mnt = work.path().join("mnt");
    let reference = work.path().join("ref");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(&reference).unwrap();
    let mount = Mount::start(&pm, &mnt);
    let seeds: u64 = std::env::var("LINEFS_RANDOM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let mut count = 0;
    for seed in 0..seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        for d in [&mnt, &reference] {
            for e in std::fs::read_dir(d).unwrap() {
                let p = e.unwrap().path();
                if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                    std::fs::remove_dir_all(&p).unwrap();
                } else {
                    std::fs::remove_file(&p).unwrap();
                }
            }
        }
        let mut history = Vec::new();
        for step in 0..150 {
            let op = random_op(&mut rng);
            history.push(op.clone());
            let want = apply(&reference, &op);
            let got = apply(&mnt, &op);
            count += 1;
            assert_eq!(got, want, "seed {seed} step {step}: {op:?} differs (linefs vs host); history: {history:?}");
            if step % 25 == 24 {
                assert_eq!(tree(&mnt), tree(&reference), "seed {seed} step {step}: trees differ; history: {history:?}");
            }
        }
        assert_eq!(tree(&mnt), tree(&reference), "seed {seed}: trees differ at the end");
    }
    let before = tree(&mnt);
    mount.stop();
    let mount = Mount::start(&pm, &mnt);
    assert_eq!(tree(&mnt), before, "tree changed across unmount and mount");
    mount.stop();
    println!("random ops: {count} operations over {seeds} seeds agreed with the host file system");
}
