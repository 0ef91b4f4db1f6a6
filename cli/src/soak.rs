//! `linefs soak [--minutes N]`: the kill -9 soak.
//!
//! A one-node cluster of its own (in DIR/soak-PID, PM file in the PM directory) is mounted;
//! a writer creates files of known content under `soak/` on the mount, fsyncs each (a third
//! of them written under a temporary name, fsynced and renamed into place), and only then
//! records it in a manifest kept outside the mount (appended and fsynced). Once the live files
//! hold more than 256 MiB it deletes the oldest (unlink, directory fsync, recorded too), so a
//! soak of any length keeps writing into a 1 GiB node. Meanwhile the
//! host is killed at random moments — `linefs kill-host 0`: SIGKILL of the mount daemon, the
//! mount detached — and restarted with `linefs restart-host 0`, which runs recovery. After
//! every restart and at the end, every live manifest entry must be there with its content and
//! the latest 2,000 acknowledged deletions must still be gone. A call that fails while the
//! mount is up (ENOSPC, EIO, …) ends the soak with that error. At the very end the cluster
//! goes down and pm's fsck checks the node at rest (`linefs fsck`): any problem fails the
//! soak.
//!
//! With offload on (the default) the node's nicfs publishes the mount's log, and each kill
//! is one of three, at random: the host (the mount and kworker, as above), the kworker alone
//! (nicfs goes isolated and publishes by itself; the writer goes on, and the kworker is
//! restarted at the next event), or the NIC and the host together (`kill-nic`, then
//! `kill-host`; `restart-nic` recovers the node from the PM — the mount's log included —
//! before `restart-host` remounts). Every acknowledged file must survive each of them.
//!
//! With `--nodes N` (N > 1) the cluster is a replicated one as `linefs up --nodes N` brings
//! up (ZooKeeper, chain replication); the writer stays on node 0, and a third of the events
//! kill a replica node's nicfs, kworker or both (`kill-nic`, and restarted with
//! `restart-nic` / `restart-host`) while the writer goes on. After each failure in the chain
//! the soak waits for node 0's logs to be replicated ([`replicas`]). At the end every
//! acknowledged file is read back through node 0, then — node 0 unmounted, each other node
//! caught up with its copies published — through a mount of each other node, and every node
//! passes fsck.
//!
//! The writer works in a subdirectory of the mount so that, once the dead mount is detached,
//! its calls fail (the directory does not exist underneath) instead of landing in the empty
//! mount point.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use linefs_ops::cluster;
use linefs_ops::clusterdir::{ClusterDir, Offload};
use linefs_ops::mounts;
use linefs_ops::nodes;
use linefs_ops::tempcluster::TempCluster;
use linefs_ops::util::{fail, CliResult, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

mod replicas;

pub struct Args {
    pub minutes: f64,
    pub pm_dir: Option<PathBuf>,
    pub seed: u64,
    pub offload: Offload,
    /// Nodes of the soak's cluster: 1 (its own node, no ZooKeeper), or a replicated cluster
    /// brought up as `linefs up --nodes N` does (ZooKeeper, chain replication).
    pub nodes: usize,
}

/// What one kill event of the soak kills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kill {
    /// The mount daemon (and with offload the kworker): `kill-host`.
    Host,
    /// The kworker alone: nicfs publishes by itself meanwhile.
    Kworker,
    /// nicfs, then the host: the node comes back from its PM alone.
    NicAndHost,
    /// A replica node's daemons (several nodes): its nicfs, its kworker or both; the
    /// writer on node 0 goes on (its fsyncs wait for the replica), and they are restarted
    /// (`restart-nic`, `restart-host`) before the event ends.
    Replica { node: usize, nic: bool, kworker: bool },
}

/// Counts of each kind of kill.
#[derive(Default)]
struct Kills {
    host: u64,
    kworker: u64,
    nic: u64,
    replica_nic: u64,
    replica_kworker: u64,
}

/// The content of file `i`: size and bytes derived from `i` (up to 256 KiB).
fn content(i: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(i ^ 0x5eed);
    let len = rng.random_range(1..256 * 1024);
    (0..len).map(|k| (k as u64).wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) as u8).collect()
}

/// Live files are deleted, oldest first, once their contents add up to more than this, so
/// that a soak of any length keeps writing instead of filling the file system (1 GiB PM).
const LIVE_BYTES: u64 = 256 << 20;
/// How many of the most recent acknowledged deletions every check looks for (must be gone).
const GONE_CHECKED: usize = 2000;

/// What the writer has had acknowledged, in order.
#[derive(Default)]
struct Acked {
    /// Files whose creation was fsynced (file and directory): (index, length). Must be there.
    live: VecDeque<(u64, u64)>,
    live_bytes: u64,
    /// The latest files whose unlink was fsynced (directory). Must stay gone.
    gone: VecDeque<u64>,
    created: u64,
    deleted: u64,
    /// One past the highest index whose creation was acknowledged.
    next: u64,
}

type Manifest = Arc<Mutex<Acked>>;

fn lock(m: &Manifest) -> std::sync::MutexGuard<'_, Acked> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The writer's shared state with the soak's main loop.
struct Writer {
    dir: PathBuf,
    manifest: Manifest,
    log: Arc<Mutex<File>>,
    /// Set at the end of the soak: return after the current file.
    stop: Arc<AtomicBool>,
    /// Set just before the mount is killed: from then on failing calls are expected.
    killing: Arc<AtomicBool>,
}

/// Records `line` durably in the manifest file outside the mount.
fn record(log: &Mutex<File>, line: std::fmt::Arguments) -> std::io::Result<()> {
    let mut l = log.lock().unwrap_or_else(|p| p.into_inner());
    l.write_fmt(line)?;
    l.sync_data()
}

/// Creates files `first..` and deletes the oldest ones beyond [`LIVE_BYTES`], each step
/// acknowledged (fsynced) before it is recorded, until `stop` is set or a call fails.
/// A failure is an error of the soak unless it came after `killing` was set.
fn writer(w: Writer, first: u64) -> Result<(), String> {
    let fsync_dir = |dir: &Path| File::open(dir)?.sync_all();
    for i in first.. {
        if w.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let data = content(i);
        let name = w.dir.join(format!("f{i}"));
        let created = (|| -> std::io::Result<()> {
            if i % 3 == 0 {
                let tmp = w.dir.join(format!("tmp{i}"));
                let mut f = File::create(&tmp)?;
                f.write_all(&data)?;
                f.sync_all()?;
                std::fs::rename(&tmp, &name)?;
            } else {
                let mut f = File::create(&name)?;
                f.write_all(&data)?;
                f.sync_all()?;
            }
            // The new name is durable once the directory is synced.
            fsync_dir(&w.dir)
        })();
        let acked = created.and_then(|()| record(&w.log, format_args!("+f{i} {}\n", data.len())));
        if let Err(e) = acked {
            return failed(&w, format!("create f{i}"), e);
        }
        {
            let mut m = lock(&w.manifest);
            m.live.push_back((i, data.len() as u64));
            m.live_bytes += data.len() as u64;
            m.created += 1;
            m.next = i + 1;
        }
        loop {
            // Out of the live set before the unlink: if the mount dies half-way, the file may
            // or may not be there and neither list claims it.
            let (old, len) = {
                let mut m = lock(&w.manifest);
                if m.live_bytes <= LIVE_BYTES {
                    break;
                }
                let Some((old, len)) = m.live.pop_front() else { break };
                m.live_bytes -= len;
                (old, len)
            };
            let deleted = std::fs::remove_file(w.dir.join(format!("f{old}")))
                .and_then(|()| fsync_dir(&w.dir))
                .and_then(|()| record(&w.log, format_args!("-f{old} {len}\n")));
            if let Err(e) = deleted {
                return failed(&w, format!("delete f{old}"), e);
            }
            let mut m = lock(&w.manifest);
            m.gone.push_back(old);
            if m.gone.len() > GONE_CHECKED {
                m.gone.pop_front();
            }
            m.deleted += 1;
        }
    }
    Ok(())
}

/// The writer's end after a failing call: expected once the mount is being killed.
fn failed(w: &Writer, what: String, e: std::io::Error) -> Result<(), String> {
    if w.killing.load(Ordering::SeqCst) {
        Ok(()) // the mount is gone
    } else {
        Err(format!("{what} failed while the mount was up: {e}"))
    }
}

/// Every acknowledged file is on the mount with its content, and the latest acknowledged
/// deletions stayed deleted; returns how many files were checked.
fn verify(dir: &Path, manifest: &Manifest, when: &str) -> CliResult<usize> {
    let (live, gone) = {
        let m = lock(manifest);
        (m.live.iter().map(|&(i, _)| i).collect::<Vec<_>>(), m.gone.iter().copied().collect::<Vec<_>>())
    };
    for &i in &live {
        let path = dir.join(format!("f{i}"));
        let got = std::fs::read(&path)
            .map_err(|e| fail(format!("{when}: acknowledged file {} lost: {e}", path.display())))?;
        if got != content(i) {
            return Err(fail(format!("{when}: acknowledged file {} corrupt ({} bytes)", path.display(), got.len())));
        }
    }
    for &i in &gone {
        let path = dir.join(format!("f{i}"));
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(format!("{when}: {}: {e}", path.display()))),
            Ok(_) => {
                return Err(fail(format!(
                    "{when}: file {} came back after its deletion was acknowledged",
                    path.display()
                )))
            }
        }
    }
    Ok(live.len() + gone.len())
}

pub fn run(dir: &ClusterDir, a: &Args) -> CliResult<String> {
    if a.minutes.is_nan() || a.minutes <= 0.0 {
        return Err(fail("--minutes must be positive"));
    }
    let pid = std::process::id();
    let pm_dir = a.pm_dir.clone().unwrap_or_else(|| dir.root.join("pm"));
    std::fs::create_dir_all(&pm_dir).ctx(|| format!("{}: create", pm_dir.display()))?;
    let pm_dir = linefs_ops::procs::absolute(&pm_dir)?;
    if a.nodes == 0 || a.nodes > cluster::MAX_NODES {
        return Err(fail(format!("--nodes {}: 1 to {}", a.nodes, cluster::MAX_NODES)));
    }
    let offload = a.offload == Offload::On;
    if a.nodes > 1 && !offload {
        return Err(fail("--nodes above 1 needs --offload on: nicfs replicates the client logs"));
    }
    let soak = ClusterDir::new(&dir.root.join(format!("soak-{pid}")))?;
    // One node: its PM file in the PM directory. Several: a directory of nodes there, as
    // `up` lays them out (node0, node1, ...).
    let pm_file = pm_dir.join(format!("soak-{pid}"));
    if pm_file.exists() {
        return Err(fail(format!("{}: exists; remove it first", pm_file.display())));
    }
    let _teardown = TempCluster::new(soak.clone(), vec![pm_file.clone()], "soak");
    let node_paths: Vec<PathBuf> = match a.nodes {
        1 => vec![pm_file.clone()],
        n => (0..n).map(|i| pm_file.join(format!("node{i}"))).collect(),
    };
    if a.nodes > 1 {
        let up = cluster::UpArgs {
            nodes: a.nodes,
            pm_dir: Some(pm_file.clone()),
            pm_size: Some(cluster::DEFAULT_PM_SIZE),
            zk: None,
            zk_servers: Some(1),
            offload: Some(Offload::On),
            cpus: None,
            metrics_port: None,
            trusted_group: None,
            nicfs_limits: None,
        };
        cluster::up(&soak, &up)?;
    } else if offload {
        cluster::create_offload(&soak, &pm_dir, std::slice::from_ref(&pm_file), cluster::DEFAULT_PM_SIZE)?;
    } else {
        cluster::create(&soak, &pm_dir, std::slice::from_ref(&pm_file), cluster::DEFAULT_PM_SIZE, None, None)?;
    }
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
    let manifest: Manifest = Arc::default();
    let mut rng = StdRng::seed_from_u64(a.seed);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let (mut kills, mut checks, mut next) = (0u64, 0usize, 0u64);
    let mut by_kind = Kills::default();
    let mut kworker_down = false;
    let mut recovery = Duration::ZERO;
    let mut recovery_replica = Duration::ZERO;
    // Time spent waiting for node 0's logs to be replicated after a failure in the chain.
    let mut catch_up = Duration::ZERO;
    let writer_failed = |r: std::thread::Result<Result<(), String>>| match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(fail(format!("soak writer: {e}"))),
        Err(_) => Err(fail("writer thread panicked")),
    };
    while start.elapsed() < budget {
        let (stop, killing) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let w = Writer {
            dir: work.clone(),
            manifest: manifest.clone(),
            log: log.clone(),
            stop: stop.clone(),
            killing: killing.clone(),
        };
        let w = std::thread::spawn(move || writer(w, next));
        let left = budget.saturating_sub(start.elapsed());
        std::thread::sleep(Duration::from_millis(rng.random_range(200..2000)).min(left));
        if start.elapsed() >= budget {
            stop.store(true, Ordering::SeqCst);
            writer_failed(w.join())?;
            break;
        }
        // With replicas, a third of the events kill a replica node's daemons.
        let replica = a.nodes > 1 && rng.random_range(0..3) == 0;
        let kind = match (offload, rng.random_range(0..4)) {
            _ if replica => {
                let node = rng.random_range(1..a.nodes);
                match rng.random_range(0..3) {
                    0 => Kill::Replica { node, nic: true, kworker: false },
                    1 => Kill::Replica { node, nic: false, kworker: true },
                    _ => Kill::Replica { node, nic: true, kworker: true },
                }
            }
            (false, _) | (true, 0 | 1) => Kill::Host,
            (true, 2) if !kworker_down => Kill::Kworker,
            (true, _) => Kill::NicAndHost,
        };
        kills += 1;
        if let Kill::Replica { node, nic, kworker } = kind {
            // The writer goes on through node 0: its fsyncs wait for the replica (or for the
            // view without it). Both come back before the event ends.
            if kworker {
                linefs_ops::daemons::kill(&soak, linefs_ops::daemons::Role::Kworker, node)?;
                by_kind.replica_kworker += 1;
            }
            if nic {
                nodes::kill_nic(&soak, node)?;
                by_kind.replica_nic += 1;
            }
            std::thread::sleep(Duration::from_millis(rng.random_range(200..1500)));
            let t = Instant::now();
            if nic {
                nodes::restart_nic(&soak, node)?;
            }
            if kworker {
                nodes::restart_host(&soak, node)?;
            }
            recovery_replica += t.elapsed();
            std::thread::sleep(Duration::from_millis(rng.random_range(200..1000)));
            stop.store(true, Ordering::SeqCst);
            writer_failed(w.join())?;
            let when = format!("after kill {kills} ({kind:?})");
            catch_up += replicas::wait_replicated(&soak, a.nodes, &when)?;
            checks += verify(&work, &manifest, &when)?;
            next = lock(&manifest).next.max(next) + 1000;
            continue;
        }
        if kind == Kill::Kworker {
            // The mount goes on: nicfs notices the missing heartbeats and publishes alone.
            linefs_ops::daemons::kill(&soak, linefs_ops::daemons::Role::Kworker, 0)?;
            kworker_down = true;
            by_kind.kworker += 1;
            std::thread::sleep(Duration::from_millis(rng.random_range(200..1500)));
            stop.store(true, Ordering::SeqCst);
            writer_failed(w.join())?;
            checks += verify(&work, &manifest, &format!("after kill {kills} (kworker)"))?;
            next = lock(&manifest).next.max(next) + 1000;
            continue;
        }
        killing.store(true, Ordering::SeqCst);
        if kind == Kill::NicAndHost {
            nodes::kill_nic(&soak, 0)?;
            by_kind.nic += 1;
        } else {
            by_kind.host += 1;
        }
        nodes::kill_host(&soak, 0)?;
        writer_failed(w.join())?;
        let t = Instant::now();
        if kind == Kill::NicAndHost {
            nodes::restart_nic(&soak, 0)?;
        }
        nodes::restart_host(&soak, 0)?;
        kworker_down = false;
        recovery += t.elapsed();
        if kind == Kill::NicAndHost && a.nodes > 1 {
            // The restarted primary ships what its replicas lack (from the log as it found
            // it) once it is back in the view.
            catch_up += replicas::wait_replicated(&soak, a.nodes, &format!("after kill {kills} ({kind:?})"))?;
        }
        checks += verify(&work, &manifest, &format!("after kill {kills} ({kind:?})"))?;
        let m = lock(&manifest);
        // Skip past whatever the killed writer may have left half-created.
        next = m.next.max(next) + 1000;
        eprint!(
            "\r  {:>4.0} s: {kills} kills, {} files created and {} deleted, all as acknowledged ",
            start.elapsed().as_secs_f64(),
            m.created,
            m.deleted
        );
        drop(m);
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    // A clean unmount and mount too, then the final check.
    mounts::umount(&soak, &mnt)?;
    mounts::mount(&soak, 0, "linefs", Vec::new(), &mnt)?;
    checks += verify(&work, &manifest, "final")?;
    // Every other node holds the same files, from replication alone: node 0's mount goes
    // (it settles its log: published and replicated), each replica publishes its copies,
    // and a mount of it must show every acknowledged file with its bytes. (One mount at a
    // time: cross-node leases are not wired, so a mount reads its node's public area as
    // it stands when it attaches.)
    mounts::umount(&soak, &mnt)?;
    let wait = Instant::now();
    for node in 1..a.nodes {
        replicas::wait_caught_up(&soak, a.nodes, node)?;
        let m = soak.root.join(format!("mnt{node}"));
        std::fs::create_dir_all(&m).ctx(|| format!("{}: create", m.display()))?;
        mounts::mount(&soak, node, "linefs", Vec::new(), &m)?;
        let checked = verify(&m.join("soak"), &manifest, &format!("final, through node {node}"));
        mounts::umount(&soak, &m)?;
        checks += checked?;
    }
    let caught_up = wait.elapsed();
    let (files, deleted) = {
        let m = lock(&manifest);
        (m.created, m.deleted)
    };
    // Every node at rest after everything: down (a clean stop publishes every log and
    // copy), then pm's fsck of each public area (and replica copies); any problem fails
    // the soak.
    cluster::down(&soak)?;
    let mut inodes = Vec::new();
    for (node, path) in node_paths.iter().enumerate() {
        let report = crate::fsck::check(path, false)?;
        if !report.is_clean() {
            let lines: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
            return Err(fail(format!("fsck of node {node} after the soak: {}", lines.join("; "))));
        }
        inodes.push(report.inodes.to_string());
    }
    if kills == 0 {
        return Err(fail("the soak ended before any kill; give it more time"));
    }
    if files == 0 {
        return Err(fail("no file was acknowledged: the soak tested nothing"));
    }
    let restarts = (by_kind.host + by_kind.nic).max(1);
    let replicas = if a.nodes > 1 {
        let events = (by_kind.replica_nic + by_kind.replica_kworker).max(1);
        format!(
            "; on replica nodes 1..{}: {} kills of nicfs and {} of the kworker, restarted in {:.0} ms on average; \
             {:.1} s waiting for the chain to catch up after failures in it; {} nodes read back every file \
             ({:.1} s to catch up and check)",
            a.nodes - 1,
            by_kind.replica_nic,
            by_kind.replica_kworker,
            recovery_replica.as_secs_f64() * 1000.0 / events as f64,
            catch_up.as_secs_f64(),
            a.nodes,
            caught_up.as_secs_f64()
        )
    } else {
        String::new()
    };
    let what = if offload {
        format!(
            "offload on: {} of the host (mount + kworker), {} of the kworker alone, {} of nicfs and the host; \
             recovery {:.0} ms per restart on average",
            by_kind.host,
            by_kind.kworker,
            by_kind.nic,
            recovery.as_secs_f64() * 1000.0 / restarts as f64
        )
    } else {
        format!(
            "host-only: kill -9 of the mount + recovery, {:.0} ms per restart on average",
            recovery.as_secs_f64() * 1000.0 / restarts as f64
        )
    };
    Ok(format!(
        "soak: {:.0} s, {} node{}, {kills} kills ({what}{replicas}), {files} fsynced files, {deleted} fsynced \
         deletions, {checks} file checks, 0 lost, fsck clean ({} inodes)",
        start.elapsed().as_secs_f64(),
        a.nodes,
        if a.nodes == 1 { "" } else { "s" },
        inodes.join(" / "),
    ))
}
