//! `linefs bench replication` (issue 23 item 7): linefs's replicated write path beside its
//! baselines, measured in one run, with the goals next to the measured ratios
//! ([`report`] prints them).
//!
//! One environment serves the whole run (DIR/bench-repl-PID, PM in `--pm-dir`, default
//! /dev/shm, in `linefs-bench-repl-PID`), torn down afterwards, on error and on Ctrl-C too:
//! - a **3-node cluster** brought up as `linefs up --nodes 3` does (ZooKeeper, the cluster
//!   key, nicfs and kworker per node, nicfs pinned to the last CPU: the SmartNIC's core), with
//!   node 0 mounted through FUSE (`linefs-fuse`, attached to its nicfs). Whether this build's
//!   nicfs replicates is read from node 0's status file (a `replication` section) and printed
//!   with the rows: until the replication driver lands each node is its own file system and
//!   these rows measure the unreplicated offload path, clearly labelled;
//! - the **FUSE passthrough** of a directory beside the PM (no replication);
//! - a **bare 3-hop chain**: three `linefs-loadgen hop` processes on loopback TCP, each storing
//!   every message in a PM file of its own, persisting it, forwarding it and acknowledging it
//!   once durable there and below (pinned, as the replica nodes' nicfs are, to the NIC CPU).
//!
//! Workloads, each case with its own `linefs-loadgen` processes (pinned to the host CPUs):
//! - **sequential writes**: 1, 2 and 4 clients (`--clients`), each writing `--bytes` in 16 KiB
//!   writes to a file of its own with an fsync at the end, on: node 0's FUSE mount (offload),
//!   libfs clients attached to node 0's nicfs (offload, no FUSE), host-only libfs clients
//!   that replicate their own log down the bare chain on fsync (`write --chain`: Assise's
//!   way; one fresh host-only node per client, as host-only clients own their node), the
//!   passthrough, and the bare chain itself moving the same bytes (`push`). The offload
//!   libfs clients and the host-only ones run again beside a CPU-bound co-runner on the host
//!   CPUs. MB/s = all bytes / the slowest writer's time from the go to its last fsync; CPU
//!   seconds per GiB of the clients (getrusage, every thread) and of the three nicfs
//!   (/proc/PID/stat);
//! - **write+fsync latency**: one client, `--count` pairs of a 16 KiB write and an fsync, on
//!   the same systems (the bare chain: one message and its ack); avg, p50, p99, p99.9;
//! - **compression**: the bare chain moving `--bytes` of data 0, 40, 60 and 80 %
//!   lz4-compressible (loadgen's generator, checked with lz4_flex) with lz4 off, on, and
//!   adaptive (the chain crate's controller): bytes on the network (3 hops) and MB/s.
//!
//! The default is short (64 MiB per client; `--bytes 1G --runs 3` for the full length);
//! cases are interleaved within each of `--runs` runs and the report gives medians. A progress
//! bar (indicatif, on a terminal) counts the cases.

mod report;

use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use linefs_ops::cluster::{self, UpArgs};
use linefs_ops::clusterdir::{Backend, ClusterDir, Offload};
use linefs_ops::daemons::{self, Role};
use linefs_ops::mounts::{self, MountRequest};
use linefs_ops::procs;
use linefs_ops::tempcluster::TempCluster;
use linefs_ops::util::{fail, CliResult, Context};
use linefs_pm::mkfs;
use serde_json::Value;

use self::report::Report;
use crate::offload::{
    cpu_list, cpu_seconds, pin_process, pm_parent, step, Cpus, Kids, CORUNNER_SETTLE, INODES, LOADGEN, READY_WAIT,
    RESULT_WAIT,
};
use crate::BenchArgs;

/// Size of each write.
pub(super) const IO: u64 = 16 << 10;
/// Per client, unless `--bytes`: a short run.
pub(super) const DEFAULT_BYTES: u64 = 64 << 20;
pub(super) const DEFAULT_CLIENTS: [usize; 3] = [1, 2, 4];
/// Data compressibility of the compression rows, in percent.
pub(super) const PCTS: [u8; 4] = [0, 40, 60, 80];
/// Hops of the bare chain.
pub(super) const HOPS: u64 = 3;
/// Each host-only node's log files.
const LOG_SIZE: u64 = 32 << 20;
/// Each hop's PM file (a ring per connection).
const HOP_PM: &str = "64M";

/// A system measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sys {
    OffloadFuse,
    OffloadLibfs,
    HostChain,
    Passthrough,
    BareChain,
}

impl Sys {
    pub(super) fn key(self) -> &'static str {
        match self {
            Sys::OffloadFuse => "offload-fuse",
            Sys::OffloadLibfs => "offload-libfs",
            Sys::HostChain => "host-only-chain",
            Sys::Passthrough => "fuse-passthrough",
            Sys::BareChain => "bare-chain",
        }
    }
    pub(super) fn label(self) -> &'static str {
        match self {
            Sys::OffloadFuse => "linefs 3 nodes, FUSE mount of node 0",
            Sys::OffloadLibfs => "linefs 3 nodes, libfs on node 0",
            Sys::HostChain => "host-only + client chain (Assise)",
            Sys::Passthrough => "FUSE passthrough (no replication)",
            Sys::BareChain => "bare 3-hop TCP chain (no FS)",
        }
    }
}

/// One sequential-write configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct SeqCase {
    pub sys: Sys,
    pub clients: usize,
    pub corunner: bool,
}

/// One run of a sequential-write case.
#[derive(Debug, Clone)]
pub(super) struct SeqSample {
    pub bytes: u64,
    /// The slowest writer's go → last fsync.
    pub write_s: f64,
    pub client_cpu_s: f64,
    /// The three nicfs together (offload rows).
    pub nicfs_cpu_s: Option<f64>,
    /// Bytes the clients sent down a chain (host-only and bare chain rows).
    pub wire_bytes: Option<u64>,
}

impl SeqSample {
    pub(super) fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.write_s.max(1e-9)
    }
    pub(super) fn per_gib(&self, cpu: f64) -> f64 {
        crate::cpu_per_gib(cpu, self.bytes)
    }
}

/// One compression case's run.
#[derive(Debug, Clone)]
pub(super) struct CompSample {
    pub bytes: u64,
    /// Bytes on the network over the 3 hops (each forwards what it got), headers included.
    pub net_bytes: u64,
    pub mb_s: f64,
    pub cpu_s: f64,
    pub adaptive: Value,
}

/// What every case shares.
pub(super) struct Plan {
    pub bytes: u64,
    pub clients: Vec<usize>,
    pub count: u64,
    pub runs: u64,
    pub cpus: Cpus,
    pub pm_dir: PathBuf,
    exe: PathBuf,
}

/// The environment of the whole run (see the module note). Fields drop in order: the
/// processes first, then the cluster.
struct Env {
    /// The hops.
    _kids: Kids,
    chain: String,
    cd: ClusterDir,
    node0: PathBuf,
    socket: PathBuf,
    mnt_linefs: PathBuf,
    mnt_passthrough: PathBuf,
    nicfs: Vec<i32>,
    _cluster: TempCluster,
}

impl Env {
    fn new(dir: &ClusterDir, plan: &Plan) -> CliResult<Env> {
        let pid = std::process::id();
        let cd = ClusterDir::new(&dir.root.join(format!("bench-repl-{pid}")))?;
        let mut kids = Kids::new();
        let cluster = TempCluster::new(cd.clone(), vec![plan.pm_dir.clone()], "bench");
        let (hops, nodes, local) = (plan.pm_dir.join("hops"), plan.pm_dir.join("cluster"), plan.pm_dir.join("local"));
        step(|| -> CliResult<()> {
            for d in [&hops, &nodes, &local] {
                std::fs::create_dir_all(d).ctx(|| format!("{}: create", d.display()))?;
            }
            Ok(())
        })?;
        std::fs::create_dir_all(cd.logs()).ctx(|| format!("{}: create", cd.logs().display()))?;
        // The chain, last hop first: each hop learns its successor's address.
        let mut next: Option<String> = None;
        for k in (0..HOPS).rev() {
            let mut args: Vec<String> =
                ["hop", "--pm-dir", &hops.display().to_string(), "--pm-size", HOP_PM].map(String::from).into();
            if let Some(n) = &next {
                args.extend(["--next".to_string(), n.clone()]);
            }
            let i = kids.spawn(&plan.exe, &args, &cd.logs().join(format!("hop-{k}.log")), format!("hop {k}"))?;
            pin_process(kids.pid(i), &[plan.cpus.nic])?;
            let line = kids.kids[i].line(READY_WAIT)?;
            let v: Value = serde_json::from_str(&line).ctx(|| format!("hop {k}: bad line {line:?}"))?;
            next = Some(v["listening"].as_str().ok_or_else(|| fail(format!("hop {k}: {line}")))?.to_string());
        }
        let chain = next.ok_or_else(|| fail("no hop"))?;
        // Room for the biggest case at once, one and a half times over, the latency rows and
        // the logs.
        let most = plan.clients.iter().copied().max().unwrap_or(1);
        let slots = (most + 1).max(4) as u64;
        let size = (plan.bytes.saturating_mul(most as u64 * 3) / 2)
            .saturating_add(plan.count * IO * 2)
            .saturating_add(slots * LOG_SIZE)
            .saturating_add(512 << 20)
            .div_ceil(4096)
            * 4096;
        // Formatted here rather than by `up`, which gives a node 4 log slots: the FUSE mount
        // and up to 16 clients each need one on node 0.
        let params =
            linefs_pm::layout::FormatParams { size, log_size: LOG_SIZE, log_slots: slots as u32, inodes: INODES };
        step(|| -> CliResult<()> {
            for n in 0..3 {
                let f = nodes.join(format!("node{n}"));
                mkfs::format_dir(&f, &params).ctx(|| format!("{}: format", f.display()))?;
            }
            Ok(())
        })?;
        let up = UpArgs {
            nodes: 3,
            pm_dir: Some(nodes.clone()),
            pm_size: Some(size),
            zk: None,
            zk_servers: None,
            offload: Some(Offload::On),
            cpus: Some(plan.cpus.nic.to_string()),
            metrics_port: None,
            nicfs_limits: None,
            trusted_group: None,
        };
        step(|| cluster::up(&cd, &up))?;
        let mut nicfs = Vec::new();
        for n in 0..3 {
            let pid = daemons::running(&cd, Role::Nicfs, n)
                .ok_or_else(|| fail(format!("node {n}'s nicfs is not running after up")))?;
            nicfs.push(pid);
            if let Some(kw) = daemons::running(&cd, Role::Kworker, n) {
                pin_process(kw, &plan.cpus.host)?;
            }
        }
        let node0 = nodes.join("node0");
        let socket = daemons::socket(&cd, 0);
        let (mnt_linefs, mnt_passthrough) = (cd.root.join("mnt-linefs"), cd.root.join("mnt-passthrough"));
        step(|| -> CliResult<()> {
            for m in [&mnt_linefs, &mnt_passthrough] {
                std::fs::create_dir_all(m).ctx(|| format!("{}: create", m.display()))?;
            }
            let _lock = cd.lock()?;
            let mut reg = cd.registry()?;
            let req = |backend, source: &Path, nicfs: Option<PathBuf>, mountpoint: &Path| MountRequest {
                node: 0,
                backend,
                source: source.to_path_buf(),
                nicfs,
                mountpoint: mountpoint.to_path_buf(),
                options: Vec::new(),
                consistency: "linefs".to_string(),
            };
            mounts::mount_locked(&cd, &mut reg, req(Backend::Linefs, &node0, Some(socket.clone()), &mnt_linefs))?;
            mounts::mount_locked(&cd, &mut reg, req(Backend::Passthrough, &local, None, &mnt_passthrough))?;
            Ok(())
        })?;
        Ok(Env { _kids: kids, chain, cd, node0, socket, mnt_linefs, mnt_passthrough, nicfs, _cluster: cluster })
    }

    /// Node 0's nicfs status section `replication`, if this build has one.
    fn replication_status(&self) -> Option<Value> {
        let text = std::fs::read_to_string(daemons::status_file(&self.cd, 0)).ok()?;
        let v: Value = serde_json::from_str(&text).ok()?;
        v.get("replication").filter(|r| !r.is_null()).cloned()
    }

    fn nicfs_cpu(&self) -> Option<f64> {
        self.nicfs.iter().map(|&p| cpu_seconds(p)).sum()
    }
}

/// What a client process is told to do.
enum Work {
    /// Sequential: `bytes`, fsync at the end.
    Seq(u64),
    /// `n` write+fsync pairs, timed.
    Latency(u64),
    /// The bare chain streaming `bytes` of data `pct` % compressible, lz4 `mode`.
    Compress { bytes: u64, pct: u8, mode: &'static str },
}

/// Runs `clients` loadgen processes of `sys` doing `work` (with the co-runner if asked);
/// returns their result lines, the co-runner's... and the nicfs CPU over the timed phase.
fn run_clients(
    env: &Env,
    plan: &Plan,
    sys: Sys,
    clients: usize,
    corunner: bool,
    work: &Work,
    seq: usize,
) -> CliResult<(Vec<Value>, Option<f64>)> {
    let mut kids = Kids::new();
    let host = cpu_list(&plan.cpus.host);
    let tag = format!("repl-{}-{seq}", std::process::id());
    // Host-only clients each own a fresh node of their own, removed after the case.
    let host_dir = plan.pm_dir.join(format!("host-{seq}"));
    let _hosts = (sys == Sys::HostChain)
        .then(|| -> CliResult<TempCluster> {
            let t = TempCluster::new(
                ClusterDir::new(&env.cd.root.join(format!("host-{seq}")))?,
                vec![host_dir.clone()],
                "bench",
            );
            let bytes = match work {
                Work::Seq(b) => *b,
                Work::Latency(n) => n * IO,
                Work::Compress { bytes, .. } => *bytes,
            };
            let data = bytes.saturating_mul(2);
            let size = data.saturating_add(4 * LOG_SIZE).saturating_add(128 << 20).div_ceil(4096) * 4096;
            let params = linefs_pm::layout::FormatParams { size, log_size: LOG_SIZE, log_slots: 4, inodes: INODES };
            step(|| -> CliResult<()> {
                for k in 0..clients {
                    let f = host_dir.join(format!("node{k}"));
                    std::fs::create_dir_all(&host_dir).ctx(|| format!("{}: create", host_dir.display()))?;
                    mkfs::format_dir(&f, &params).ctx(|| format!("{}: format", f.display()))?;
                }
                Ok(())
            })?;
            Ok(t)
        })
        .transpose()?;
    let (bytes, latency) = match work {
        Work::Seq(b) => (*b, false),
        Work::Latency(n) => (n * IO, true),
        Work::Compress { bytes, .. } => (*bytes, false),
    };
    for k in 0..clients {
        let mut args: Vec<String> = Vec::new();
        if let Work::Compress { pct, mode, .. } = work {
            args.extend(["push", "--to", &env.chain, "--bytes", &bytes.to_string()].map(String::from));
            args.extend(["--compressible".into(), pct.to_string(), "--compress".into(), mode.to_string()]);
        } else if sys == Sys::BareChain {
            args.extend(["push", "--to", &env.chain, "--bytes", &bytes.to_string()].map(String::from));
            if latency {
                args.push("--sync".into());
            }
        } else {
            args.push("write".into());
            match sys {
                Sys::OffloadFuse => args.extend(["--path".into(), env.mnt_linefs.display().to_string()]),
                Sys::Passthrough => args.extend(["--path".into(), env.mnt_passthrough.display().to_string()]),
                Sys::OffloadLibfs => args.extend([
                    "--node".into(),
                    env.node0.display().to_string(),
                    "--nicfs".into(),
                    env.socket.display().to_string(),
                ]),
                Sys::HostChain => args.extend([
                    "--node".into(),
                    host_dir.join(format!("node{k}")).display().to_string(),
                    "--chain".into(),
                    env.chain.clone(),
                ]),
                Sys::BareChain => return Err(fail("the bare chain has no file system to write to")),
            }
            args.extend(["--dir".into(), format!("{tag}-{k}"), "--remove".into(), "--bytes".into(), bytes.to_string()]);
            if latency {
                args.extend(["--fsync-every", "1", "--latency"].map(String::from));
            } else {
                args.push("--fsync-end".into());
            }
        }
        args.extend(["--io".into(), IO.to_string(), "--cpus".into(), host.clone(), "--wait-go".into()]);
        let log = env.cd.logs().join(format!("loadgen-{seq}-{k}.log"));
        kids.spawn(&plan.exe, &args, &log, format!("{} client {k} ({LOADGEN})", sys.key()))?;
    }
    for k in 0..clients {
        let line = kids.kids[k].line(READY_WAIT)?;
        let v: Value = serde_json::from_str(&line).ctx(|| format!("client {k}: bad ready line {line:?}"))?;
        if v["ready"] != Value::Bool(true) {
            return Err(fail(format!("client {k}: unexpected ready line {line}")));
        }
    }
    let co = if corunner {
        let args: Vec<String> = ["spin", "--threads", &plan.cpus.host.len().to_string(), "--cpus", &host, "--session"]
            .map(String::from)
            .into();
        let i =
            kids.spawn(&plan.exe, &args, &env.cd.logs().join(format!("corunner-{seq}.log")), "the co-runner".into())?;
        std::thread::sleep(CORUNNER_SETTLE);
        Some(i)
    } else {
        None
    };
    let nicfs0 = env.nicfs_cpu();
    for k in 0..clients {
        kids.kids[k].go()?;
    }
    let mut out = Vec::new();
    for k in 0..clients {
        let line = kids.kids[k].line(RESULT_WAIT)?;
        let v: Value = serde_json::from_str(&line).ctx(|| format!("client {k}: bad result line {line:?}"))?;
        kids.finish(k)?;
        out.push(v);
    }
    let nicfs = match (nicfs0, env.nicfs_cpu()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    if let Some(i) = co {
        kids.finish(i)?;
    }
    Ok((out, nicfs))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn seq_case(env: &Env, plan: &Plan, c: SeqCase, seq: usize) -> CliResult<SeqSample> {
    let (clients, nicfs) = run_clients(env, plan, c.sys, c.clients, c.corunner, &Work::Seq(plan.bytes), seq)?;
    let offload = matches!(c.sys, Sys::OffloadFuse | Sys::OffloadLibfs);
    for (k, v) in clients.iter().enumerate() {
        let done = v["bytes"].as_u64() == Some(plan.bytes) && v["published_all"] != Value::Bool(false);
        if !done {
            return Err(fail(format!("{} client {k} did not write all it should have: {v}", c.sys.key())));
        }
    }
    let write_s = clients
        .iter()
        .map(|v| if c.sys == Sys::BareChain { f(v, "seconds") } else { f(v, "write_seconds") })
        .fold(0.0, f64::max);
    let wire: Vec<u64> =
        clients.iter().filter_map(|v| v["wire_bytes"].as_u64().or_else(|| v["chain"]["wire_bytes"].as_u64())).collect();
    Ok(SeqSample {
        bytes: clients.iter().filter_map(|v| v["bytes"].as_u64()).sum(),
        write_s,
        client_cpu_s: clients.iter().map(|v| f(v, "cpu_s")).sum(),
        nicfs_cpu_s: if offload { nicfs } else { None },
        wire_bytes: (!wire.is_empty()).then(|| wire.iter().sum()),
    })
}

fn latency_case(env: &Env, plan: &Plan, sys: Sys, seq: usize) -> CliResult<Value> {
    let (clients, _) = run_clients(env, plan, sys, 1, false, &Work::Latency(plan.count), seq)?;
    let v = clients.into_iter().next().ok_or_else(|| fail("no client"))?;
    let lat = v["latency_us"].clone();
    if lat.is_null() {
        return Err(fail(format!("{}: no latency in {v}", sys.key())));
    }
    Ok(lat)
}

fn compress_case(env: &Env, plan: &Plan, pct: u8, mode: &'static str, seq: usize) -> CliResult<CompSample> {
    let work = Work::Compress { bytes: plan.bytes, pct, mode };
    let (clients, _) = run_clients(env, plan, Sys::BareChain, 1, false, &work, seq)?;
    let v = clients.into_iter().next().ok_or_else(|| fail("no client"))?;
    let wire = v["wire_bytes"].as_u64().ok_or_else(|| fail(format!("push: no wire_bytes in {v}")))?;
    Ok(CompSample {
        bytes: v["bytes"].as_u64().unwrap_or(0),
        net_bytes: wire * HOPS,
        mb_s: f(&v, "mb_per_s"),
        cpu_s: f(&v, "cpu_s"),
        adaptive: v["adaptive"].clone(),
    })
}

/// The sequential-write cases, in run order.
fn seq_cases(plan: &Plan) -> Vec<SeqCase> {
    let mut v = Vec::new();
    for &n in &plan.clients {
        for sys in [Sys::OffloadFuse, Sys::OffloadLibfs, Sys::HostChain, Sys::Passthrough, Sys::BareChain] {
            v.push(SeqCase { sys, clients: n, corunner: false });
        }
        for sys in [Sys::OffloadLibfs, Sys::HostChain] {
            v.push(SeqCase { sys, clients: n, corunner: true });
        }
    }
    v
}

pub(super) const LAT_SYSTEMS: [Sys; 5] =
    [Sys::OffloadFuse, Sys::OffloadLibfs, Sys::HostChain, Sys::Passthrough, Sys::BareChain];
pub(super) const MODES: [&str; 3] = ["off", "on", "adaptive"];

pub(super) fn run(dir: &ClusterDir, args: &BenchArgs) -> CliResult<String> {
    let bytes = args.bytes.unwrap_or(DEFAULT_BYTES);
    let clients = if args.clients.is_empty() { DEFAULT_CLIENTS.to_vec() } else { args.clients.clone() };
    if bytes < IO || args.runs == 0 || args.count == 0 || clients.iter().any(|&c| c == 0 || c > 16) {
        return Err(fail("--bytes must be at least 16K, --runs and --count positive, --clients between 1 and 16"));
    }
    let exe = procs::sibling_exe(LOADGEN)?;
    daemons::check_executables()?;
    let pm_dir = pm_parent(dir, args)?.join(format!("linefs-bench-repl-{}", std::process::id()));
    if pm_dir.exists() {
        return Err(fail(format!("{}: exists; remove it first", pm_dir.display())));
    }
    let plan = Plan { bytes, clients, count: args.count, runs: args.runs, cpus: Cpus::detect()?, pm_dir, exe };
    let cases = seq_cases(&plan);
    let total = plan.runs * (cases.len() + LAT_SYSTEMS.len() + PCTS.len() * MODES.len()) as u64;
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}") {
            b.set_style(style.progress_chars("=> "));
        }
        b.enable_steady_tick(Duration::from_millis(500));
        b
    };
    bar.set_message("setting up the 3-node cluster, the passthrough and the chain");
    let env = Env::new(dir, &plan)?;
    let replication = env.replication_status();
    let mut seqs: Vec<(SeqCase, Vec<SeqSample>)> = cases.iter().map(|&c| (c, Vec::new())).collect();
    let mut lats: Vec<(Sys, Vec<Value>)> = LAT_SYSTEMS.iter().map(|&s| (s, Vec::new())).collect();
    let mut comps: Vec<((u8, &'static str), Vec<CompSample>)> =
        PCTS.iter().flat_map(|&p| MODES.iter().map(move |&m| ((p, m), Vec::new()))).collect();
    let mut seq = 0;
    for run in 0..plan.runs {
        for (c, ss) in seqs.iter_mut() {
            seq += 1;
            bar.set_message(format!(
                "run {}: seq write, {} client(s), {}{}",
                run + 1,
                c.clients,
                c.sys.key(),
                if c.corunner { " + co-runner" } else { "" }
            ));
            ss.push(seq_case(&env, &plan, *c, seq)?);
            bar.inc(1);
        }
        for (s, ls) in lats.iter_mut() {
            seq += 1;
            bar.set_message(format!("run {}: write+fsync latency, {}", run + 1, s.key()));
            ls.push(latency_case(&env, &plan, *s, seq)?);
            bar.inc(1);
        }
        for ((pct, mode), cs) in comps.iter_mut() {
            seq += 1;
            bar.set_message(format!("run {}: compression {mode}, {pct}% compressible", run + 1));
            cs.push(compress_case(&env, &plan, *pct, mode, seq)?);
            bar.inc(1);
        }
    }
    let replication_after = env.replication_status().or(replication);
    drop(env);
    bar.finish_and_clear();
    let report = Report::new(&plan, seqs, lats, comps, replication_after);
    Ok(if args.json { report.json().to_string() } else { report.table() })
}
