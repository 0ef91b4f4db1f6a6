//! `linefs soak [--minutes N]`: the kill -9 soak.
//!
//! A one-node cluster of its own (in DIR/soak-PID, PM file in the PM directory) is mounted;
//! a writer creates files of known content under `soak/` on the mount, fsyncs each (a third
//! of them written under a temporary name, fsynced and renamed into place), and only then
//! records it in a manifest kept outside the mount (appended and fsynced). Meanwhile the
//! host is killed at random moments — `linefs kill-host 0`: SIGKILL of the mount daemon, the
//! mount detached — and restarted with `linefs restart-host 0`, which runs recovery. After
//! every restart and at the end, every manifest entry must be there with its content.
//!
//! The writer works in a subdirectory of the mount so that, once the dead mount is detached,
//! its calls fail (the directory does not exist underneath) instead of landing in the empty
//! mount point.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cluster::{self, ClusterDir, TempCluster};
use crate::mounts;
use crate::util::{fail, CliResult, Context};

pub struct Args {
    pub minutes: f64,
    pub pm_dir: Option<PathBuf>,
    pub seed: u64,
}

/// The content of file `i`: size and bytes derived from `i` (up to 256 KiB).
fn content(i: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(i ^ 0x5eed);
    let len = rng.random_range(1..256 * 1024);
    (0..len).map(|k| (k as u64).wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) as u8).collect()
}

/// Files acknowledged by fsync: (index), in the order they were recorded.
type Manifest = Arc<Mutex<Vec<u64>>>;

/// Write files `first..` until a call fails (the mount was killed) or `stop` is set.
fn writer(dir: PathBuf, first: u64, manifest: Manifest, log: Arc<Mutex<File>>, stop: Arc<AtomicBool>) {
    for i in first.. {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let data = content(i);
        let name = dir.join(format!("f{i}"));
        let res = (|| -> std::io::Result<()> {
            if i % 3 == 0 {
                let tmp = dir.join(format!("tmp{i}"));
                let mut f = File::create(&tmp)?;
                f.write_all(&data)?;
                f.sync_all()?;
                std::fs::rename(&tmp, &name)?;
                // The rename is durable once the directory is synced.
                File::open(&dir)?.sync_all()?;
            } else {
                let mut f = File::create(&name)?;
                f.write_all(&data)?;
                f.sync_all()?;
                File::open(&dir)?.sync_all()?;
            }
            Ok(())
        })();
        if res.is_err() {
            return; // the mount is gone
        }
        // Acknowledged: record it, durably, outside the mount.
        let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
        if writeln!(l, "f{i} {}", data.len()).and_then(|()| l.sync_data()).is_err() {
            return;
        }
        manifest.lock().unwrap_or_else(|p| p.into_inner()).push(i);
    }
}

/// Every manifest entry is on the mount with its content; returns how many were checked.
fn verify(dir: &Path, manifest: &Manifest, when: &str) -> CliResult<usize> {
    let list = manifest.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for &i in &list {
        let path = dir.join(format!("f{i}"));
        let got = std::fs::read(&path)
            .map_err(|e| fail(format!("{when}: acknowledged file {} lost: {e}", path.display())))?;
        if got != content(i) {
            return Err(fail(format!("{when}: acknowledged file {} corrupt ({} bytes)", path.display(), got.len())));
        }
    }
    Ok(list.len())
}

pub fn run(dir: &ClusterDir, a: &Args) -> CliResult<String> {
    if a.minutes.is_nan() || a.minutes <= 0.0 {
        return Err(fail("--minutes must be positive"));
    }
    let pid = std::process::id();
    let pm_dir = a.pm_dir.clone().unwrap_or_else(|| dir.root.join("pm"));
    std::fs::create_dir_all(&pm_dir).ctx(|| format!("{}: create", pm_dir.display()))?;
    let pm_dir = crate::procs::absolute(&pm_dir)?;
    let soak = ClusterDir::new(&dir.root.join(format!("soak-{pid}")))?;
    let pm_file = pm_dir.join(format!("soak-{pid}.pm"));
    if pm_file.exists() {
        return Err(fail(format!("{}: exists; remove it first", pm_file.display())));
    }
    let _teardown = TempCluster { dir: soak.clone(), paths: vec![pm_file.clone()], what: "soak" };
    cluster::create(&soak, &pm_dir, std::slice::from_ref(&pm_file), cluster::DEFAULT_PM_SIZE, None, None)?;
    let mnt = soak.root.join("mnt");
    std::fs::create_dir_all(&mnt).ctx(|| format!("{}: create", mnt.display()))?;
    mounts::mount(&soak, 0, "linefs", Vec::new(), &mnt)?;
    let work = mnt.join("soak");
    std::fs::create_dir(&work).ctx(|| format!("{}: create", work.display()))?;
    File::open(&mnt).and_then(|d| d.sync_all()).ctx(|| format!("{}: fsync", mnt.display()))?;
    let manifest_path = soak.root.join("manifest");
    let log = Arc::new(Mutex::new(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&manifest_path)
            .ctx(|| format!("{}: open", manifest_path.display()))?,
    ));
    let manifest: Manifest = Arc::new(Mutex::new(Vec::new()));
    let mut rng = StdRng::seed_from_u64(a.seed);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let (mut kills, mut checks, mut next) = (0u64, 0usize, 0u64);
    let mut recovery = Duration::ZERO;
    while start.elapsed() < budget {
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let (work, m, log, stop) = (work.clone(), manifest.clone(), log.clone(), stop.clone());
            std::thread::spawn(move || writer(work, next, m, log, stop))
        };
        let left = budget.saturating_sub(start.elapsed());
        std::thread::sleep(Duration::from_millis(rng.random_range(200..2000)).min(left));
        if start.elapsed() >= budget {
            stop.store(true, Ordering::Relaxed);
            w.join().map_err(|_| fail("writer thread panicked"))?;
            break;
        }
        mounts::kill_host(&soak, 0)?;
        kills += 1;
        w.join().map_err(|_| fail("writer thread panicked"))?;
        let t = Instant::now();
        mounts::restart_host(&soak, 0)?;
        recovery += t.elapsed();
        checks += verify(&work, &manifest, &format!("after kill {kills}"))?;
        next = manifest.lock().unwrap_or_else(|p| p.into_inner()).last().map_or(next, |i| i + 1) + 1000;
        eprint!(
            "\r  {:>4.0} s: {kills} kills, {} files acknowledged, all present ",
            start.elapsed().as_secs_f64(),
            manifest.lock().map(|m| m.len()).unwrap_or(0)
        );
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    // A clean unmount and mount too, then the final check.
    mounts::umount(&soak, &mnt)?;
    mounts::mount(&soak, 0, "linefs", Vec::new(), &mnt)?;
    let files = verify(&work, &manifest, "final")?;
    checks += files;
    if kills == 0 {
        return Err(fail("the soak ended before any kill; give it more time"));
    }
    if files == 0 {
        return Err(fail("no file was acknowledged: the soak tested nothing"));
    }
    Ok(format!(
        "soak: {:.0} s, {kills} kills (kill -9 of the mount + recovery, {:.0} ms per restart on average), \
         {files} fsynced files, {checks} file checks, 0 lost",
        start.elapsed().as_secs_f64(),
        recovery.as_secs_f64() * 1000.0 / kills as f64
    ))
}
