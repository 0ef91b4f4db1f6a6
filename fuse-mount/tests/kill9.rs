//! kill -9 of the mount: a writer creates files on a real linefs mount, fsyncs each one (and
//! atomically renames some into place), and records it in a manifest only once that
//! returned. The mount daemon is killed with SIGKILL at a random moment, mounted again —
//! which runs recovery — and every file in the manifest must be there, intact. Several
//! rounds on the same PM file, so later rounds also recover over earlier recoveries.
//!
//! Needs root, /dev/fuse and fusermount3; skipped with a message otherwise.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "support/fuse.rs"]
mod support;
use support::fuse_available_as_root;
#[path = "support/daemon.rs"]
mod daemon;
use daemon::start_linefs_fuse;

/// The content of manifest entry `i`: a size and pattern derived from `i`.
fn content(i: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(i);
    let len = rng.random_range(1..300_000);
    (0..len).map(|k| (k as u64).wrapping_mul(31).wrapping_add(i) as u8).collect()
}

fn writer(mnt: PathBuf, first: u64, manifest: Arc<Mutex<Vec<(String, u64)>>>) {
    for i in first.. {
        let data = content(i);
        let name = format!("f{i}");
        let res = (|| -> std::io::Result<()> {
            if i % 3 == 0 {
                // write a temporary name, fsync, rename into place
                let tmp = mnt.join(format!("tmp{i}"));
                let mut f = std::fs::File::create(&tmp)?;
                f.write_all(&data)?;
                f.sync_all()?;
                std::fs::rename(&tmp, mnt.join(&name))?;
            } else {
                let mut f = std::fs::File::create(mnt.join(&name))?;
                f.write_all(&data)?;
                f.sync_all()?;
            }
            Ok(())
        })();
        match res {
            Ok(()) => manifest.lock().unwrap().push((name, i)),
            Err(_) => return, // the mount is gone
        }
    }
}

#[test]
fn every_fsynced_file_survives_kill_9() {
    if !fuse_available_as_root() {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let pm = work.path().join("node.pm");
    linefs_pm::mkfs::format_dir(&pm, &linefs_pm::layout::FormatParams::for_size(512 << 20)).expect("format");
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let manifest = Arc::new(Mutex::new(Vec::new()));
    let mut rng = StdRng::seed_from_u64(42);
    let rounds = std::env::var("LINEFS_KILL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let mut next = 0u64;
    for round in 0..rounds {
        let mut child = start_linefs_fuse(&pm, &mnt);
        // Everything acknowledged in earlier rounds is still there.
        for (name, i) in manifest.lock().unwrap().iter() {
            let got = std::fs::read(mnt.join(name)).unwrap_or_else(|e| panic!("round {round}: {name}: {e}"));
            assert!(got == content(*i), "round {round}: {name} corrupt ({} bytes)", got.len());
        }
        let m = manifest.clone();
        let dir = mnt.clone();
        let first = next;
        let w = std::thread::spawn(move || writer(dir, first, m));
        std::thread::sleep(Duration::from_millis(rng.random_range(100..600)));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        // Detach the dead mount so that the writer's calls fail instead of hanging.
        let _ = Command::new("fusermount3").arg("-u").arg("-z").arg(&mnt).status();
        w.join().expect("writer");
        next = manifest.lock().unwrap().iter().map(|(_, i)| i + 1).max().unwrap_or(0) + 1000;
    }
    let mut child = start_linefs_fuse(&pm, &mnt);
    let n = manifest.lock().unwrap().len();
    for (name, i) in manifest.lock().unwrap().iter() {
        let got = std::fs::read(mnt.join(name)).unwrap_or_else(|e| panic!("final: {name}: {e}"));
        assert!(got == content(*i), "final: {name} corrupt");
    }
    // SAFETY: kill(2) on our child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().expect("wait");
    let _ = Command::new("fusermount3").arg("-u").arg("-q").arg(&mnt).status();
    assert!(n > rounds, "the writer acknowledged too few files ({n}) for the test to mean anything");
    println!("kill -9: {rounds} kills, {n} fsynced files, all intact");
}
