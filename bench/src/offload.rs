//! `linefs bench offload` (issue 12 item 11): what offloading publication to nicfs saves the
//! host. 1, 2 and 4 clients (`--clients`) each write `--bytes` in 16 KiB sequential writes,
//! with offload and host-only, alone and beside a CPU-bound co-runner; throughput and the CPU
//! seconds per GiB written of the clients, of kworker and of nicfs, side by side with the
//! ratios the goals name ([`report`] prints them).
//!
//! A client is one `linefs-loadgen write` process (libfs used directly, no FUSE; found beside
//! `linefs`): it mounts, creates a directory of its own, says it is ready, waits for the go,
//! writes one file, shuts down (everything published) and reports its own CPU time
//! (getrusage: every thread, the write phase and the drain) — see `loadgen/`.
//!
//! Every case runs on a fresh temporary cluster (DIR/bench-offload-PID-K, PM in
//! `--pm-dir`, default /dev/shm, in `linefs-bench-offload-PID-K`), torn down after it:
//! - **offload**: one node with its nicfs and kworker (`linefs up`), nicfs pinned to the
//!   last CPU this process may use (`up --cpus`: the SmartNIC's core), the N clients attached
//!   to it, nicfs publishing their logs;
//! - **host-only**, the fair analog: N nodes (`up --offload off`: no daemons), one client
//!   each — a host-only client owns its node (an exclusive lock), so this is how N host-only
//!   clients run at once — each publishing its own log on the host CPUs, as LineFS's
//!   host-only baseline (Assise) does.
//!
//! Every node has the same format in both modes: log files of `--log-size` (default
//! [`DEFAULT_LOG_SIZE`]), at least 4 slots,
//! room for twice the data it receives. The clients, kworker and the co-runner are pinned to
//! the other CPUs (the host's); the last CPU runs only nicfs, so host-only never uses it — on
//! a real machine the SmartNIC's cores are not the host's to use.
//!
//! The co-runner (`linefs-loadgen spin`) has one busy thread per host CPU, pinned to them, in
//! a session of its own (the scheduler's autogroup treats it as a separate application, as a
//! co-tenant would be; nicfs and kworker run in sessions of their own too, the clients in the
//! bench's), at the default priority; it starts before the go and stops after the last
//! client exits. Its CPU time over the timed phase is reported as a share of the host CPUs.
//!
//! Measured: wall time from the go to the last client's exit; MB/s = all clients' bytes over
//! it. CPU: the clients' own (they report it), nicfs's, kworker's and the co-runner's from
//! `/proc/PID/stat` (utime + stime, every thread, clock ticks) read just before the go and
//! after the last client exits — per GiB written by all clients.
//!
//! Cases are interleaved within each of `--runs` runs (clients, then alone/co-runner, then
//! offload/host-only); the report gives the median of each figure.

mod report;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use linefs_ops::cluster::{self, UpArgs};
use linefs_ops::clusterdir::{ClusterDir, Offload};
use linefs_ops::daemons::{self, Role};
use linefs_ops::interrupt;
use linefs_ops::procs;
use linefs_ops::tempcluster::TempCluster;
use linefs_ops::util::{fail, human_size, CliResult, Context};
use linefs_pm::layout::FormatParams;
use linefs_pm::mkfs;
use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};
use serde_json::Value;

use self::report::Report;
use crate::BenchArgs;

/// Size of each write.
pub(super) const IO: u64 = 16 << 10;
/// Each log file (client slot) of every node, both modes, unless `--log-size` (`linefs up`'s
/// 1 GiB node has these).
pub(super) const DEFAULT_LOG_SIZE: u64 = 32 << 20;
/// Per client, unless `--bytes`.
pub(super) const DEFAULT_BYTES: u64 = 1 << 30;
pub(super) const DEFAULT_CLIENTS: [usize; 3] = [1, 2, 4];
pub(crate) const INODES: u64 = 4096;
pub(crate) const LOADGEN: &str = "linefs-loadgen";
/// How long a client may take to mount and create its directory.
pub(crate) const READY_WAIT: Duration = Duration::from_secs(60);
/// How long a client may take to write and publish once told to go.
pub(crate) const RESULT_WAIT: Duration = Duration::from_secs(1800);
/// The co-runner's threads are all spinning by then.
pub(crate) const CORUNNER_SETTLE: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Offload,
    HostOnly,
}

impl Mode {
    pub(super) fn key(self) -> &'static str {
        match self {
            Mode::Offload => "offload",
            Mode::HostOnly => "host-only",
        }
    }
}

/// One configuration measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Case {
    pub clients: usize,
    pub corunner: bool,
    pub mode: Mode,
}

/// One run of a case.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    /// From the go to the last client's exit.
    pub wall_s: f64,
    /// Written by all clients.
    pub bytes: u64,
    pub client_cpu_s: f64,
    /// The clients' mean write phase and drain (shutdown: publication of the rest).
    pub write_s: f64,
    pub drain_s: f64,
    pub nicfs_cpu_s: Option<f64>,
    pub kworker_cpu_s: Option<f64>,
    pub corunner_cpu_s: Option<f64>,
    /// Each client's own report (loadgen's result line).
    pub clients: Vec<Value>,
}

impl Sample {
    pub(super) fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.wall_s.max(1e-9)
    }
    /// CPU seconds per GiB written.
    pub(super) fn per_gib(&self, cpu_s: f64) -> f64 {
        crate::cpu_per_gib(cpu_s, self.bytes)
    }
}

/// The CPUs: the host's (clients, kworker, co-runner) and the SmartNIC's (nicfs).
#[derive(Debug, Clone)]
pub(crate) struct Cpus {
    pub host: Vec<usize>,
    pub nic: usize,
}

impl Cpus {
    /// The CPUs this process may run on: the last for nicfs, the others for the host.
    pub(crate) fn detect() -> CliResult<Cpus> {
        let set = sched_getaffinity(None).map_err(|e| fail(format!("sched_getaffinity: {e}")))?;
        let all: Vec<usize> = (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect();
        match all.split_last() {
            Some((&nic, host)) if !host.is_empty() => Ok(Cpus { host: host.to_vec(), nic }),
            _ => Err(fail(format!(
                "needs at least 2 CPUs (one for nicfs, as the SmartNIC's, the others for the host); \
                 this process may use {all:?}"
            ))),
        }
    }
}

/// `0,2,3`.
pub(crate) fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
}

/// Pins every thread `pid` has now to `cpus` (threads it starts later inherit their
/// creator's affinity). A thread that exits meanwhile is skipped.
pub(crate) fn pin_process(pid: i32, cpus: &[usize]) -> CliResult<()> {
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ctx(|| format!("pid {pid}: list its threads"))?;
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|s| s.parse::<i32>().ok()).and_then(Pid::from_raw) else {
            continue;
        };
        match sched_setaffinity(Some(tid), &set) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(e) => return Err(fail(format!("pin thread {} of pid {pid} to CPUs {cpus:?}: {e}", tid.as_raw_pid()))),
        }
    }
    Ok(())
}

/// The CPU time (user + system, every thread, the dead ones included) of `pid` so far, from
/// `/proc/PID/stat`; None if it is gone.
pub(crate) fn cpu_seconds(pid: i32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised name start with the state (field 3); utime and stime
    // are fields 14 and 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
}

/// A process the bench started (a client or the co-runner): its stdin, its stdout's lines
/// (read by a thread of their own), its log (stderr).
pub(crate) struct Kid {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    log: PathBuf,
    what: String,
}

impl Kid {
    /// Sends it the go byte.
    pub(crate) fn go(&mut self) -> CliResult<()> {
        let what = &self.what;
        let stdin = self.stdin.as_mut().ok_or_else(|| fail(format!("{what}: no stdin")))?;
        stdin.write_all(b"g").and_then(|()| stdin.flush()).ctx(|| format!("{what}: send the go"))
    }

    /// The next line it prints, within `wait`; its log's reason if it exits first.
    pub(crate) fn line(&mut self, wait: Duration) -> CliResult<String> {
        match self.lines.recv_timeout(wait) {
            Ok(l) => Ok(l),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(fail(format!(
                "{} printed nothing within {} s (log {})",
                self.what,
                wait.as_secs(),
                self.log.display()
            ))),
            // Its stdout closed: it exited (its error line is in its log); reaped on drop.
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(fail(format!("{} exited: {}", self.what, procs::failure_reason(&self.log, 0))))
            }
        }
    }
}

/// Set when a signal's teardown has started; from then on the bench creates nothing more
/// ([`step`] parks). The teardown sets it under the lock, which every setup step holds: a
/// step in progress finishes first, so the cluster's teardown (registered after the case's
/// [`Kids`], so run after them) finds everything the case made.
static STOPPING: Mutex<bool> = Mutex::new(false);

/// Waits for the signal thread, which tears down and exits the process.
fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// Runs a setup step of a case (creating PM files, starting daemons or processes) unless a
/// signal's teardown has started.
pub(crate) fn step<T>(f: impl FnOnce() -> T) -> T {
    let stopping = STOPPING.lock().unwrap_or_else(|p| p.into_inner());
    if *stopping {
        drop(stopping);
        park_forever();
    }
    f()
}

/// Every process a case started. Dropped (on error paths too), it SIGKILLs those still
/// running and reaps them; on Ctrl-C or SIGTERM [`interrupt`] kills them (first, then the
/// cluster is torn down).
pub(crate) struct Kids {
    pub(crate) kids: Vec<Kid>,
    /// Pids not reaped yet, for the signal thread.
    live: Arc<Mutex<Vec<i32>>>,
    reg: u64,
}

impl Kids {
    pub(crate) fn new() -> Kids {
        let live: Arc<Mutex<Vec<i32>>> = Arc::default();
        let l = live.clone();
        let reg = interrupt::register(Box::new(move || {
            *STOPPING.lock().unwrap_or_else(|p| p.into_inner()) = true;
            for &pid in l.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                procs::kill(pid, libc::SIGKILL);
            }
        }));
        Kids { kids: Vec::new(), live, reg }
    }

    /// Starts `exe args…` with piped stdin and stdout, stderr to `log`; returns its index.
    pub(crate) fn spawn(&mut self, exe: &Path, args: &[String], log: &Path, what: String) -> CliResult<usize> {
        step(|| self.start(exe, args, log, what))
    }

    fn start(&mut self, exe: &Path, args: &[String], log: &Path, what: String) -> CliResult<usize> {
        let err = std::fs::File::create(log).ctx(|| format!("{}: create", log.display()))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err)
            .env("NO_COLOR", "1")
            .spawn()
            .ctx(|| format!("{}: cannot start", exe.display()))?;
        self.live.lock().unwrap_or_else(|p| p.into_inner()).push(child.id() as i32);
        let (tx, lines) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        let what = format!("{what} (pid {})", child.id());
        self.kids.push(Kid { child, stdin, lines, log: log.to_path_buf(), what });
        Ok(self.kids.len() - 1)
    }

    pub(crate) fn pid(&self, i: usize) -> i32 {
        self.kids[i].child.id() as i32
    }

    /// Closes its stdin (the co-runner stops; a client that has not had its go exits) and
    /// waits for it; its exit status must be success.
    pub(crate) fn finish(&mut self, i: usize) -> CliResult<()> {
        let pid = self.pid(i);
        let k = &mut self.kids[i];
        k.stdin = None;
        // Forgotten before the wait: once reaped, its pid may be reused.
        self.live.lock().unwrap_or_else(|p| p.into_inner()).retain(|&p| p != pid);
        let status = k.child.wait().ctx(|| format!("wait for {}", k.what))?;
        if !status.success() {
            return Err(fail(format!("{} exited with {status}: {}", k.what, procs::failure_reason(&k.log, 0))));
        }
        Ok(())
    }
}

impl Drop for Kids {
    fn drop(&mut self) {
        if interrupt::unregister(self.reg).is_none() {
            // A signal's teardown took this registration, and with it the cluster's: it kills
            // these processes, tears the cluster down and exits the process. Returning (say
            // with the error of a client that nicfs's stop cut short) could end the process
            // before that teardown is done and leave the PM files behind.
            park_forever();
        }
        for k in &mut self.kids {
            if matches!(k.child.try_wait(), Ok(None)) {
                let _ = k.child.kill();
                let _ = k.child.wait();
            }
        }
    }
}

/// What every case shares.
pub(super) struct Plan {
    pub bytes: u64,
    pub clients: Vec<usize>,
    pub runs: u64,
    pub log_size: u64,
    pub cpus: Cpus,
    pub pm_parent: PathBuf,
    exe: PathBuf,
}

impl Plan {
    pub(super) fn corunner_threads(&self) -> usize {
        self.cpus.host.len()
    }
}

/// A node's format: `clients` clients of `bytes` each write into it; `slots` log slots of
/// `log_size`.
fn node_params(bytes: u64, clients: usize, slots: usize, log_size: u64) -> FormatParams {
    let data = bytes.saturating_mul(clients as u64);
    let size = data.saturating_mul(2).saturating_add(slots as u64 * log_size).saturating_add(128 << 20);
    FormatParams { size: size.div_ceil(4096) * 4096, log_size, log_slots: slots as u32, inodes: INODES }
}

/// Runs one case on a temporary cluster of its own (number `seq` in this bench).
fn run_case(dir: &ClusterDir, plan: &Plan, case: Case, seq: usize) -> CliResult<Sample> {
    let tag = format!("offload-{}-{seq}", std::process::id());
    let cd = ClusterDir::new(&dir.root.join(format!("bench-{tag}")))?;
    let pm_dir = plan.pm_parent.join(format!("linefs-bench-{tag}"));
    if pm_dir.exists() {
        return Err(fail(format!("{}: exists; remove it first", pm_dir.display())));
    }
    // Registered in this order, so that a signal kills the processes before the cluster goes
    // down; dropped in the reverse order.
    let mut kids = Kids::new();
    let _cluster = TempCluster::new(cd.clone(), vec![pm_dir.clone()], "bench");
    let (nodes, per_node) = match case.mode {
        Mode::Offload => (1, case.clients),
        Mode::HostOnly => (case.clients, 1),
    };
    let params = node_params(plan.bytes, per_node, case.clients.max(4), plan.log_size);
    let pm_files: Vec<PathBuf> = (0..nodes).map(|i| pm_dir.join(format!("node{i}"))).collect();
    step(|| -> CliResult<()> {
        std::fs::create_dir_all(&pm_dir).ctx(|| format!("{}: create", pm_dir.display()))?;
        for f in &pm_files {
            mkfs::format_dir(f, &params).ctx(|| format!("{}: format", f.display()))?;
        }
        Ok(())
    })?;
    let host = cpu_list(&plan.cpus.host);
    let (nicfs, kworker) = match case.mode {
        Mode::Offload => {
            let up = UpArgs {
                nodes: 1,
                pm_dir: Some(pm_dir.clone()),
                pm_size: Some(params.size),
                zk: None,
                zk_servers: None,
                offload: Some(Offload::On),
                cpus: Some(plan.cpus.nic.to_string()),
                metrics_port: None,
                nicfs_limits: None,
                trusted_group: None,
            };
            step(|| cluster::up(&cd, &up))?;
            let gone = |r: Role| fail(format!("{}'s {} is not running after up", cd.root.display(), r.name()));
            let nicfs = daemons::running(&cd, Role::Nicfs, 0).ok_or_else(|| gone(Role::Nicfs))?;
            let kworker = daemons::running(&cd, Role::Kworker, 0).ok_or_else(|| gone(Role::Kworker))?;
            pin_process(kworker, &plan.cpus.host)?;
            (Some(nicfs), Some(kworker))
        }
        Mode::HostOnly => {
            step(|| cluster::create(&cd, &pm_dir, &pm_files, params.size, None, None))?;
            (None, None)
        }
    };

    for k in 0..case.clients {
        let node = &pm_files[if case.mode == Mode::Offload { 0 } else { k }];
        let mut args: Vec<String> = vec!["write".into(), "--node".into(), node.display().to_string()];
        if case.mode == Mode::Offload {
            args.extend(["--nicfs".into(), daemons::socket(&cd, 0).display().to_string()]);
        }
        args.extend(
            [
                "--dir",
                &format!("client{k}"),
                "--bytes",
                &plan.bytes.to_string(),
                "--io",
                &IO.to_string(),
                "--cpus",
                &host,
                "--wait-go",
            ]
            .map(String::from),
        );
        let log = cd.logs().join(format!("loadgen-{k}.log"));
        kids.spawn(&plan.exe, &args, &log, format!("client {k} ({LOADGEN})"))?;
    }
    for k in 0..case.clients {
        let line = kids.kids[k].line(READY_WAIT)?;
        let v: Value = serde_json::from_str(&line).ctx(|| format!("client {k}: bad ready line {line:?}"))?;
        if v["ready"] != Value::Bool(true) || v["offload"] != Value::Bool(case.mode == Mode::Offload) {
            return Err(fail(format!("client {k}: unexpected ready line {line}")));
        }
    }
    let corunner = if case.corunner {
        let args: Vec<String> =
            ["spin", "--threads", &plan.corunner_threads().to_string(), "--cpus", &host, "--session"]
                .map(String::from)
                .into();
        let i = kids.spawn(&plan.exe, &args, &cd.logs().join("corunner.log"), "the co-runner".into())?;
        std::thread::sleep(CORUNNER_SETTLE);
        Some(kids.pid(i))
    } else {
        None
    };

    let cpu = |pid: Option<i32>| pid.and_then(cpu_seconds);
    let before = [cpu(nicfs), cpu(kworker), cpu(corunner)];
    let t0 = Instant::now();
    for (k, kid) in kids.kids.iter_mut().take(case.clients).enumerate() {
        let stdin = kid.stdin.as_mut().ok_or_else(|| fail("no stdin"))?;
        stdin.write_all(b"g").and_then(|()| stdin.flush()).ctx(|| format!("client {k}: send the go"))?;
    }
    let mut clients = Vec::new();
    for k in 0..case.clients {
        let line = kids.kids[k].line(RESULT_WAIT)?;
        let v: Value = serde_json::from_str(&line).ctx(|| format!("client {k}: bad result line {line:?}"))?;
        kids.finish(k)?;
        clients.push(v);
    }
    let wall_s = t0.elapsed().as_secs_f64();
    let after = [cpu(nicfs), cpu(kworker), cpu(corunner)];
    if corunner.is_some() {
        kids.finish(case.clients)?;
    }
    let delta = |i: usize| match (before[i], after[i]) {
        (Some(b), Some(a)) => Some(a - b),
        _ => None,
    };
    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    for (k, v) in clients.iter().enumerate() {
        if v["published_all"] != Value::Bool(true) || v["bytes"].as_u64() != Some(plan.bytes) {
            return Err(fail(format!("client {k} did not write and publish all it should have: {v}")));
        }
    }
    let n = clients.len().max(1) as f64;
    Ok(Sample {
        wall_s,
        bytes: clients.iter().filter_map(|v| v["bytes"].as_u64()).sum(),
        client_cpu_s: clients.iter().map(|v| f(v, "cpu_s")).sum(),
        write_s: clients.iter().map(|v| f(v, "write_seconds")).sum::<f64>() / n,
        drain_s: clients.iter().map(|v| f(v, "drain_seconds")).sum::<f64>() / n,
        nicfs_cpu_s: delta(0),
        kworker_cpu_s: delta(1),
        corunner_cpu_s: delta(2),
        clients,
    })
}

/// The 1-minute load average (`/proc/loadavg`), to say how busy the machine was.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// Where the PM goes: `--pm-dir`, else /dev/shm (memory speed), else DIR/pm.
pub(crate) fn pm_parent(dir: &ClusterDir, args: &BenchArgs) -> CliResult<PathBuf> {
    let p = match &args.pm_dir {
        Some(p) => p.clone(),
        None if Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => dir.root.join("pm"),
    };
    std::fs::create_dir_all(&p).ctx(|| format!("{}: create", p.display()))?;
    procs::absolute(&p)
}

pub(super) fn run(dir: &ClusterDir, args: &BenchArgs) -> CliResult<String> {
    let bytes = args.bytes.unwrap_or(DEFAULT_BYTES);
    let clients = if args.clients.is_empty() { DEFAULT_CLIENTS.to_vec() } else { args.clients.clone() };
    if bytes == 0 || args.runs == 0 || clients.iter().any(|&c| c == 0 || c > 64) {
        return Err(fail("--bytes and --runs must be positive, --clients between 1 and 64"));
    }
    let exe = procs::sibling_exe(LOADGEN)?;
    daemons::check_executables()?;
    let log_size = args.log_size.unwrap_or(DEFAULT_LOG_SIZE);
    if !log_size.is_multiple_of(4096) || log_size < 256 << 10 {
        return Err(fail("--log-size must be a multiple of 4K and at least 256K"));
    }
    let plan = Plan {
        bytes,
        clients,
        runs: args.runs,
        log_size,
        cpus: Cpus::detect()?,
        pm_parent: pm_parent(dir, args)?,
        exe,
    };
    let say = |m: String| {
        if !args.json {
            eprintln!("linefs: bench offload: {m}");
        }
    };
    let mut cases = Vec::new();
    for &n in &plan.clients {
        for corunner in [false, true] {
            for mode in [Mode::Offload, Mode::HostOnly] {
                cases.push(Case { clients: n, corunner, mode });
            }
        }
    }
    let mut samples: Vec<(Case, Vec<Sample>)> = cases.iter().map(|&c| (c, Vec::new())).collect();
    let load_before = load_average();
    let mut seq = 0;
    for run in 0..plan.runs {
        for (case, ss) in samples.iter_mut() {
            seq += 1;
            let s = run_case(dir, &plan, *case, seq)?;
            say(format!(
                "run {}/{}: {} client(s), {}{}: {:.1} MB/s, client CPU {:.3} s/GiB ({} each)",
                run + 1,
                plan.runs,
                case.clients,
                case.mode.key(),
                if case.corunner { " + co-runner" } else { "" },
                s.mb_s(),
                s.per_gib(s.client_cpu_s),
                human_size(plan.bytes)
            ));
            ss.push(s);
        }
    }
    let report = Report::new(&plan, samples, [load_before, load_average()]);
    Ok(if args.json { report.json().to_string() } else { report.table() })
}
