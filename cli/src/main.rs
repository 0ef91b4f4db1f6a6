//! `linefs`: the one command that drives a linefs cluster (DESIGN section 9).
//!
//! Every verb takes `--dir DIR` (default `./linefs-cluster`). Exit status 0 means done;
//! anything else comes with a one-line reason on stderr: `linefs: VERB: REASON`.
//!
//! This crate is the verbs and their flags; the work is done by [`linefs_ops`] (the cluster
//! directory, its daemons and mounts) and, for `bench`, by [`linefs_bench`]. `crash-suite`,
//! `soak`, `fsck` and `status` are thin enough to live here.
#![deny(clippy::undocumented_unsafe_blocks)]

mod crashsuite;
mod fsck;
mod soak;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use linefs_bench as bench;
use linefs_ops::cluster::{self, UpArgs};
use linefs_ops::clusterdir::{self, ClusterDir};
use linefs_ops::util::{fail, parse_size, CliResult};
use linefs_ops::{interrupt, mounts, nodes, zookeeper};

#[derive(Parser)]
#[command(name = "linefs", version, about = "Run a linefs cluster: up, mount, status, bench, down")]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(clap::Args, Clone)]
struct DirArg {
    /// The cluster directory.
    #[arg(long, value_name = "DIR", default_value = "./linefs-cluster", global = true)]
    dir: PathBuf,
}

#[derive(Subcommand)]
enum Verb {
    /// Format each node's PM once, start each node's nicfs and kworker, bring the cluster up.
    Up {
        #[arg(long, value_name = "N", help = cluster::nodes_help())]
        nodes: Option<usize>,
        /// Where the PM files live (default DIR/pm; /dev/shm/... for memory speed).
        #[arg(long, value_name = "PMDIR")]
        pm_dir: Option<PathBuf>,
        /// Size of each PM file (e.g. 1G, 512M).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        pm_size: Option<u64>,
        /// A running ZooKeeper ensemble HOST:PORT,... every nicfs joins (recorded); without
        /// it, up starts ZooKeeper on loopback under DIR/zk and down stops it.
        #[arg(long, value_name = "HOST:PORT,...")]
        zk: Option<String>,
        /// How many ZooKeeper servers up starts on loopback: 1 (standalone) or 3 (an
        /// ensemble). Recorded; default 1. Unused with --zk.
        #[arg(long, value_name = "1|3")]
        zk_servers: Option<usize>,
        /// on: start nicfs and kworker on every node, mounts attach to nicfs; off: host-only
        /// (each mount opens its node's PM). Default: as recorded by an earlier up, else on.
        #[arg(long, value_enum, value_name = "on|off")]
        offload: Option<clusterdir::Offload>,
        /// CPUs every nicfs is pinned to (the SmartNIC's cores), e.g. 2,3 or 0-1 (recorded).
        #[arg(long, value_name = "LIST")]
        cpus: Option<String>,
        /// Node I's nicfs serves Prometheus metrics at http://127.0.0.1:(BASE+I)/metrics; 0:
        /// each picks a free port (see status); off: none (recorded; default: none).
        #[arg(long, value_name = "BASE|off", value_parser = cluster::parse_metrics_port)]
        metrics_port: Option<cluster::MetricsPort>,
        /// Limits every nicfs holds unprivileged users to (recorded; none given: as
        /// recorded, else nicfs's defaults).
        #[command(flatten)]
        limits: cluster::LimitFlags,
        /// A group (name or number) whose members, besides root, nicfs hands the node's
        /// public file: they read every file of the node directly, as the `disk` group reads
        /// a block device. Others read through a mount. `none` clears it; default: as
        /// recorded, none at first.
        #[arg(long, value_name = "GROUP|none")]
        trusted_group: Option<String>,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Mount node I at MOUNTPOINT in the background; returns once the mount serves.
    Mount {
        #[arg(long, default_value_t = 0, value_name = "I")]
        node: usize,
        /// Consistency mode (linefs; the MINOS modes are not built yet).
        #[arg(long, default_value = "linefs", value_name = "MODE")]
        consistency: String,
        /// Mount options, comma-separated.
        #[arg(short = 'o', value_name = "OPT,...")]
        options: Vec<String>,
        mountpoint: PathBuf,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Flush and unmount.
    Umount {
        mountpoint: PathBuf,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Nodes, their mode, every process (nicfs, kworker, mounts) and what each reports.
    Status {
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dir: DirArg,
    },
    /// SIGKILL every host-side process of node I: its kworker and mounts (a host crash).
    KillHost {
        node: usize,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Restart node I's kworker and remount its killed mounts (recovery replays the log).
    RestartHost {
        node: usize,
        #[command(flatten)]
        dir: DirArg,
    },
    /// SIGKILL node I's nicfs (a SmartNIC crash).
    KillNic {
        node: usize,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Restart node I's nicfs (it recovers the node); returns once it serves.
    RestartNic {
        node: usize,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Stop or start the cluster's ZooKeeper (the servers up started) while the cluster stays
    /// up: a ZooKeeper outage on demand. Members are suspended meanwhile, nicfs serves on.
    Zk {
        #[command(subcommand)]
        action: ZkAction,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Stop everything up and mount started; keep the data.
    Down {
        #[command(flatten)]
        dir: DirArg,
    },
    /// Upgrade every node of a stopped cluster to this build's PM format version, in place
    /// (`up` does it too before it starts a node).
    Upgrade {
        #[command(flatten)]
        dir: DirArg,
    },
    /// Run a named benchmark with its baselines.
    Bench {
        name: bench::BenchName,
        #[arg(long)]
        json: bool,
        /// seqwrite: total bytes written; datapath: the size of each target's file (bytes
        /// with an optional K/M/G unit; default 256M).
        #[arg(long, value_name = "SIZE")]
        size: Option<String>,
        /// fsync: number of write+fsync pairs.
        #[arg(long, default_value_t = 2000, value_name = "N")]
        count: u64,
        /// Where the bench's PM file and local directory go (default DIR/pm).
        #[arg(long, value_name = "PMDIR")]
        pm_dir: Option<PathBuf>,
        /// Size of the bench's PM file (default: enough for the workload, at least 1G).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        pm_size: Option<u64>,
        /// leveldb: number of key/value pairs (db_bench's --num; the LineFS paper used 1M).
        #[arg(long, default_value_t = 100_000, value_name = "N")]
        num: u64,
        /// filebench: the personality (workload flow) to run.
        #[arg(long, value_enum, default_value = "varmail")]
        personality: bench::Personality,
        /// filebench: seconds of timed run on each target.
        #[arg(long, default_value_t = 30, value_name = "SECS")]
        duration: u64,
        /// filebench: number of files in the file set (default: the personality's).
        #[arg(long, value_name = "N")]
        nfiles: Option<usize>,
        /// filebench: number of worker threads (default: the personality's).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// datapath: write+fsync pairs timed (the hot 4 KiB reads do 4 times as many).
        #[arg(long, default_value_t = 20_000, value_name = "N")]
        ops: u64,
        /// datapath, offload: interleaved runs over the targets (cases); the report gives medians.
        #[arg(long, default_value_t = 3, value_name = "R")]
        runs: u64,
        /// offload: bytes each client writes (with an optional K/M/G unit; default 1G).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        bytes: Option<u64>,
        /// offload: client counts to measure, comma-separated (default 1,2,4).
        #[arg(long, value_name = "N,...", value_delimiter = ',')]
        clients: Vec<usize>,
        /// offload: size of every node's log files (default 32M, as a 1G node's).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        log_size: Option<u64>,
        /// seqwrite, fsync, datapath, leveldb, filebench: mount options for the linefs
        /// mounts (`-o threads=2`, `-o no_writeback_cache`, ...); the offload mount of
        /// datapath leaves out writeback_cache, which it refuses.
        #[arg(short = 'o', value_name = "OPT,...")]
        options: Vec<String>,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Crash suite: ACE-style workloads on traced PM, every crash state recovered and checked.
    CrashSuite {
        /// The bounded slice CI runs (all single steps, a sample of pairs and triples).
        #[arg(long)]
        quick: bool,
        #[arg(long)]
        json: bool,
        /// Seed of the sampled triples and random crash subsets.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Worker threads (default: the number of CPUs).
        #[arg(long)]
        threads: Option<usize>,
        /// Run only the workload with this id (as printed with a violation).
        #[arg(long, value_name = "ID")]
        only: Option<usize>,
        /// List the workloads instead of running them.
        #[arg(long)]
        list: bool,
    },
    /// kill -9 soak: a writer fsyncs files into a manifest while the mount is killed and
    /// remounted at random moments; every acknowledged file must survive.
    Soak {
        /// How long to run (fractions allowed).
        #[arg(long, default_value_t = 5.0)]
        minutes: f64,
        /// Where the soak's PM file goes (default DIR/pm).
        #[arg(long, value_name = "PMDIR")]
        pm_dir: Option<PathBuf>,
        /// Seed of the kill intervals.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// on: the node's nicfs publishes, and the soak kills nicfs and kworker too; off:
        /// the mount publishes itself (host-only).
        #[arg(long, value_enum, value_name = "on|off", default_value = "on")]
        offload: clusterdir::Offload,
        /// Nodes of the soak's cluster. 1: a node of its own; more: a replicated cluster as
        /// `up --nodes N` brings up (ZooKeeper, chain replication), the writer on node 0,
        /// replica nodes' nicfs and kworker killed too, and every node read back at the end.
        #[arg(long, default_value_t = 1, value_name = "N")]
        nodes: usize,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Check node I's public area (read-only): link counts, parents, the tree, every block
    /// owned once, checksums, orphans. One line per problem; exit 1 if any, 0 if clean.
    Fsck {
        #[arg(long, default_value_t = 0, value_name = "I")]
        node: usize,
        /// The PM directory holding node<I> (default: where the cluster in DIR keeps it).
        #[arg(long, value_name = "PMDIR")]
        pm_dir: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dir: DirArg,
    },
    /// Internal: run the FUSE daemon (used when linefs-fuse is not installed beside linefs).
    #[command(hide = true)]
    FuseDaemon(fuse_mount::daemon::DaemonArgs),
    /// Internal: run the benchmarks' passthrough daemon (used when linefs-passthrough is not
    /// installed beside linefs).
    #[command(hide = true)]
    PassthroughDaemon(bench::passthrough::daemon::PassthroughArgs),
}

#[derive(Subcommand)]
enum ZkAction {
    /// Stop the servers (SIGTERM; --kill: SIGKILL, a crash); their data directory stays.
    Stop {
        #[arg(long)]
        kill: bool,
    },
    /// Start them again on the same ports and data directory; returns once they serve.
    Start,
}

impl Verb {
    fn name(&self) -> &'static str {
        match self {
            Verb::Up { .. } => "up",
            Verb::Mount { .. } => "mount",
            Verb::Umount { .. } => "umount",
            Verb::Status { .. } => "status",
            Verb::KillHost { .. } => "kill-host",
            Verb::RestartHost { .. } => "restart-host",
            Verb::KillNic { .. } => "kill-nic",
            Verb::RestartNic { .. } => "restart-nic",
            Verb::Zk { action: ZkAction::Stop { .. }, .. } => "zk stop",
            Verb::Zk { action: ZkAction::Start, .. } => "zk start",
            Verb::Down { .. } => "down",
            Verb::Upgrade { .. } => "upgrade",
            Verb::Bench { .. } => "bench",
            Verb::CrashSuite { .. } => "crash-suite",
            Verb::Soak { .. } => "soak",
            Verb::Fsck { .. } => "fsck",
            Verb::FuseDaemon(_) => "fuse-daemon",
            Verb::PassthroughDaemon(_) => "passthrough-daemon",
        }
    }
}

fn run(verb: Verb) -> CliResult<String> {
    match verb {
        Verb::Up {
            nodes,
            pm_dir,
            pm_size,
            zk,
            zk_servers,
            offload,
            cpus,
            metrics_port,
            trusted_group,
            limits,
            dir,
        } => {
            let d = ClusterDir::new(&dir.dir)?;
            let nicfs_limits = limits.to_args();
            let up = UpArgs {
                nodes: nodes.unwrap_or_else(|| cluster::default_nodes(&d)),
                pm_dir,
                pm_size,
                zk,
                zk_servers,
                offload,
                cpus,
                metrics_port,
                trusted_group,
                nicfs_limits,
            };
            cluster::up(&d, &up)
        }
        Verb::Mount { node, consistency, options, mountpoint, dir } => {
            mounts::mount(&ClusterDir::new(&dir.dir)?, node, &consistency, options, &mountpoint)
        }
        Verb::Umount { mountpoint, dir } => mounts::umount(&ClusterDir::new(&dir.dir)?, &mountpoint),
        Verb::Status { json, dir } => {
            let v = status::collect(&ClusterDir::new(&dir.dir)?)?;
            Ok(if json { v.to_string() } else { status::render(&v).trim_end().to_string() })
        }
        Verb::KillHost { node, dir } => nodes::kill_host(&ClusterDir::new(&dir.dir)?, node),
        Verb::RestartHost { node, dir } => nodes::restart_host(&ClusterDir::new(&dir.dir)?, node),
        Verb::KillNic { node, dir } => nodes::kill_nic(&ClusterDir::new(&dir.dir)?, node),
        Verb::RestartNic { node, dir } => nodes::restart_nic(&ClusterDir::new(&dir.dir)?, node),
        Verb::Zk { action, dir } => {
            let d = ClusterDir::new(&dir.dir)?;
            match action {
                ZkAction::Stop { kill: false } => zookeeper::outage(&d, zookeeper::Outage::Stop),
                ZkAction::Stop { kill: true } => zookeeper::outage(&d, zookeeper::Outage::Kill),
                ZkAction::Start => zookeeper::start_again(&d),
            }
        }
        Verb::Down { dir } => cluster::down(&ClusterDir::new(&dir.dir)?),
        Verb::Upgrade { dir } => cluster::upgrade(&ClusterDir::new(&dir.dir)?),
        Verb::Bench {
            name,
            json,
            size,
            count,
            pm_dir,
            pm_size,
            num,
            personality,
            duration,
            nfiles,
            threads,
            ops,
            runs,
            bytes,
            clients,
            log_size,
            options,
            dir,
        } => {
            interrupt::install();
            let d = ClusterDir::new(&dir.dir)?;
            let size = match size.as_deref() {
                None => 256 << 20,
                Some(s) => parse_size(s).map_err(fail)?,
            };
            let args = bench::BenchArgs {
                name,
                json,
                size,
                count,
                pm_dir,
                pm_size,
                num,
                personality,
                duration,
                nfiles,
                threads,
                ops,
                runs,
                bytes,
                clients,
                log_size,
                options: options
                    .iter()
                    .flat_map(|o| o.split(','))
                    .filter(|o| !o.is_empty())
                    .map(String::from)
                    .collect(),
            };
            bench::run(&d, &args)
        }
        Verb::CrashSuite { quick, json, seed, threads, only, list } => {
            crashsuite::run(&crashsuite::Args { quick, json, seed, threads, only, list })
        }
        Verb::Soak { minutes, pm_dir, seed, offload, nodes, dir } => {
            interrupt::install();
            soak::run(&ClusterDir::new(&dir.dir)?, &soak::Args { minutes, pm_dir, seed, offload, nodes })
        }
        Verb::Fsck { node, pm_dir, json, dir } => {
            let out = fsck::run(&ClusterDir::new(&dir.dir)?, &fsck::Args { node, pm_dir, json })?;
            if out.problems == 0 {
                return Ok(out.text);
            }
            // The report goes to stdout, the verdict to stderr, and the exit is 1.
            println!("{}", out.text);
            Err(fail(format!("{} problems on node {node}", out.problems)))
        }
        Verb::FuseDaemon(args) => {
            linefs_logging::init("info");
            fuse_mount::daemon::run(args).map(|()| String::new()).map_err(fail)
        }
        Verb::PassthroughDaemon(args) => {
            linefs_logging::init("info");
            bench::passthrough::daemon::run(args).map(|()| String::new()).map_err(fail)
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help, --version: not errors.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // The contract wants one line; clap's first line says what was wrong.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad arguments");
            let first = first.strip_prefix("error: ").unwrap_or(first);
            eprintln!("linefs: {first} (see linefs --help)");
            return ExitCode::from(2);
        }
    };
    let name = cli.verb.name();
    match run(cli.verb) {
        Ok(msg) => {
            if !msg.is_empty() {
                // A reader that stopped early (`linefs status | head`) is not an error: the
                // rest of the output is dropped quietly, as other commands do.
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                match writeln!(out, "{msg}").and_then(|()| out.flush()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                    Err(e) => {
                        eprintln!("linefs: {name}: writing the output: {e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            // One line, whatever the error text holds.
            let reason = e.to_string().replace('\n', " ");
            eprintln!("linefs: {name}: {reason}");
            ExitCode::FAILURE
        }
    }
}
