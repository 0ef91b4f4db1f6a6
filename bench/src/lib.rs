//! `linefs bench NAME`: a named workload on linefs and its baselines, measured in the same
//! run (DESIGN section 8). A library of its own, called by the `linefs` command (which owns
//! the verb and its flags, [`BenchArgs`]); the clusters it sets up are made with
//! [`linefs_ops`], as `linefs up` and `linefs mount` make theirs. The LevelDB binding
//! (`leveldb`, the system library's C API) is built only when `build.rs` finds the library.
//!
//! The bench sets up its own temporary cluster in DIR/bench-<pid> with a fresh PM file in the
//! PM directory (default DIR/pm; `--pm-dir /dev/shm/...` for memory speed), mounts linefs and
//! a FUSE passthrough of a directory next to the PM file, and runs the same workload on:
//! 1. the node-local directory itself (no FUSE),
//! 2. the FUSE passthrough of it (FUSE's own cost),
//! 3. Debian's bindfs of the same directory with its best options for throughput
//!    ([`bindfs`]), when installed (else the bench says it skipped it),
//! 4. linefs in host-only mode on one node (libfs publishes its own log; no replication yet),
//! 5. linefs with nicfs offload on a one-node cluster of its own (nicfs and kworker running,
//!    the mount a nicfs client under leases): the default mode of `linefs up`. Every bench
//!    has this row (`Testbed::new`'s `offload`).
//!
//! A row for "linefs host-only, 3 nodes" (libfs publishes and replicates itself, as Assise
//! does) is printed as pending until that mode exists; add it in [`Target`] and [`run`].
//! `linefs bench replication` ([`replication`]) puts a 3-node cluster beside host-only
//! replication, the passthrough and a bare TCP chain. `linefs bench offload` ([`offload`]) compares libfs clients (no FUSE) with and without
//! nicfs on clusters of their own. `seqwrite` and `fsync` ([`syncwrite`]) run `--runs`
//! interleaved rounds and report medians.
//!
//! Everything is torn down afterwards, on error too ([`TempCluster`]).
#![deny(clippy::undocumented_unsafe_blocks)]

mod bindfs;
mod datapath;
mod filebench;
#[cfg(linefs_leveldb)]
mod leveldb;
mod offload;
mod replication;
mod syncwrite;

pub use filebench::Personality;
/// The FUSE passthrough baseline (its daemon is also `linefs`'s hidden `passthrough-daemon`).
pub use linefs_passthrough as passthrough;

use std::path::{Path, PathBuf};

use linefs_ops::cluster;
use linefs_ops::clusterdir::{Backend, ClusterDir};
use linefs_ops::mounts::{self, MountRequest};
use linefs_ops::tempcluster::TempCluster;
use linefs_ops::util::{command_line, fail, unix_now, utc_date, CliResult, Context};
use serde_json::{json, Value};

/// Size of each write, both workloads.
pub(crate) const WRITE_SIZE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchName {
    /// One file, 16 KiB sequential writes, fsync at the end (included); MB/s.
    Seqwrite,
    /// 16 KiB append + fsync, repeated; latency avg/p50/p99/p99.9.
    Fsync,
    /// The real LevelDB (C API), db_bench's workloads; µs/op and MB/s.
    Leveldb,
    /// Filebench's varmail/fileserver/webserver flows (--personality); ops/s and MB/s.
    Filebench,
    /// Data path against both passthroughs: sequential/random 16 KiB, hot 4 KiB reads,
    /// write+fsync latency; medians of interleaved runs.
    Datapath,
    /// 1, 2, 4 libfs clients writing 16 KiB sequentially, offload vs host-only, alone and
    /// beside a CPU-bound co-runner: MB/s and CPU s/GiB of clients, kworker, nicfs.
    Offload,
    /// A 3-node cluster against host-only replication down a client-driven chain, the FUSE
    /// passthrough and a bare 3-hop TCP chain: sequential MB/s (1, 2, 4 clients),
    /// write+fsync latency, lz4 network bytes, client CPU per GiB, the goals met or not.
    Replication,
}

impl BenchName {
    fn as_str(self) -> &'static str {
        match self {
            BenchName::Seqwrite => "seqwrite",
            BenchName::Fsync => "fsync",
            BenchName::Leveldb => "leveldb",
            BenchName::Filebench => "filebench",
            BenchName::Datapath => "datapath",
            BenchName::Offload => "offload",
            BenchName::Replication => "replication",
        }
    }
}

#[derive(Debug, Clone)]
pub struct BenchArgs {
    pub name: BenchName,
    pub json: bool,
    pub size: u64,
    pub count: u64,
    pub pm_dir: Option<PathBuf>,
    pub pm_size: Option<u64>,
    /// leveldb: number of key/value pairs.
    #[cfg_attr(not(linefs_leveldb), allow(dead_code))]
    pub num: u64,
    /// filebench: which flow.
    pub personality: Personality,
    /// filebench: seconds of timed run per target.
    pub duration: u64,
    /// filebench: files in the set (default: the personality's).
    pub nfiles: Option<usize>,
    /// filebench: worker threads (default: the personality's).
    pub threads: Option<usize>,
    /// datapath: write+fsync pairs (and a quarter of the hot 4 KiB reads).
    pub ops: u64,
    /// datapath, offload: interleaved runs (the report gives medians).
    pub runs: u64,
    /// offload: bytes each client writes (default: 1 GiB).
    pub bytes: Option<u64>,
    /// offload: the client counts (default: 1, 2, 4).
    pub clients: Vec<usize>,
    /// offload: each log file's size (default: 32 MiB, as `linefs up`'s 1 GiB node).
    pub log_size: Option<u64>,
    /// Mount options of the linefs mounts (`-o`).
    pub options: Vec<String>,
}

/// The systems measured, in report order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Local,
    Passthrough,
    Bindfs,
    Linefs,
    LinefsOffload,
}

impl Target {
    pub(crate) fn key(self) -> &'static str {
        match self {
            Target::Local => "local",
            Target::Passthrough => "fuse-passthrough",
            Target::Bindfs => "bindfs",
            Target::Linefs => "linefs",
            Target::LinefsOffload => "linefs-offload",
        }
    }
    pub(crate) fn label(self) -> &'static str {
        match self {
            Target::Local => "node-local directory (no FUSE)",
            Target::Passthrough => "FUSE passthrough of it",
            Target::Bindfs => "bindfs of it (Debian)",
            Target::Linefs => "linefs host-only, 1 node",
            Target::LinefsOffload => "linefs + nicfs offload, 1 node",
        }
    }
}

/// Rows that exist in DESIGN section 8 but not yet in the code.
const PENDING: [(&str, &str); 1] =
    [("linefs host-only, 3 nodes", "not built yet (replication arrives with the cluster)")];

/// The bench's temporary one-node cluster with linefs and the passthrough mounted, and the
/// three target directories; dropping it tears everything down.
pub(crate) struct Testbed {
    /// (target, directory to run the workload in), in report order.
    pub targets: Vec<(Target, PathBuf)>,
    pub pm_file: PathBuf,
    /// The linefs mount's status file's "libfs" object (PM backing, persist method).
    pub libfs_status: Value,
    /// Targets left out, and why (bindfs not installed).
    pub skipped: Vec<(Target, String)>,
    /// Declared before the clusters: unmounted first.
    _bindfs: Option<bindfs::Bindfs>,
    /// The offload target's cluster (nicfs, kworker, the mount), when asked for.
    _offload: Option<TempCluster>,
    _teardown: TempCluster,
}

impl Testbed {
    /// Sets up in DIR/bench-<pid>, the PM file and the local directory in `pm_dir`
    /// (default DIR/pm); `pm_size` bytes of PM. With `offload`, also a one-node offload
    /// cluster in DIR/bench-<pid>-off (its node `bench-<pid>-off` in `pm_dir`, as large) and
    /// its mount, the last target.
    pub(crate) fn new(
        dir: &ClusterDir,
        pm_dir: Option<&Path>,
        pm_size: u64,
        offload: bool,
        options: &[String],
    ) -> CliResult<Testbed> {
        let pid = std::process::id();
        let pm_dir = match pm_dir {
            Some(p) => p.to_path_buf(),
            None => dir.root.join("pm"),
        };
        std::fs::create_dir_all(&pm_dir).ctx(|| format!("{}: create", pm_dir.display()))?;
        let pm_dir = linefs_ops::procs::absolute(&pm_dir)?;
        let local = pm_dir.join(format!("bench-{pid}-local"));
        let pm_file = pm_dir.join(format!("bench-{pid}"));
        if pm_file.exists() {
            return Err(fail(format!("{}: exists; remove it first", pm_file.display())));
        }
        let bench = ClusterDir::new(&dir.root.join(format!("bench-{pid}")))?;
        let teardown = TempCluster::new(bench.clone(), vec![local.clone(), pm_file.clone()], "bench");
        std::fs::create_dir_all(&local).ctx(|| format!("{}: create", local.display()))?;
        cluster::create(&bench, &pm_dir, std::slice::from_ref(&pm_file), pm_size, None, None)?;

        let mnt_linefs = bench.root.join("mnt-linefs");
        let mnt_pt = bench.root.join("mnt-passthrough");
        for m in [&mnt_linefs, &mnt_pt] {
            std::fs::create_dir_all(m).ctx(|| format!("{}: create", m.display()))?;
        }
        let (linefs_rec, _pt_rec) = {
            let _lock = bench.lock()?;
            let mut reg = bench.registry()?;
            let req = |backend, source: &Path, mountpoint: &Path| MountRequest {
                node: 0,
                backend,
                source: source.to_path_buf(),
                nicfs: None,
                mountpoint: mountpoint.to_path_buf(),
                options: if backend == Backend::Linefs { options.to_vec() } else { Vec::new() },
                consistency: "linefs".to_string(),
            };
            let l = mounts::mount_locked(&bench, &mut reg, req(Backend::Linefs, &pm_file, &mnt_linefs))?;
            let p = mounts::mount_locked(&bench, &mut reg, req(Backend::Passthrough, &local, &mnt_pt))?;
            (l, p)
        };
        let libfs_status: Value = std::fs::read_to_string(&linefs_rec.status_file)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map(|v| v["libfs"].clone())
            .unwrap_or(Value::Null);
        let mut targets = vec![(Target::Local, local.clone()), (Target::Passthrough, mnt_pt)];
        let mut skipped = Vec::new();
        let bindfs = if bindfs::installed() {
            let b = bindfs::Bindfs::mount(&local, &pm_dir.join(format!("bench-{pid}-bindfs")))
                .map_err(|e| fail(format!("bindfs of {}: {e}", local.display())))?;
            targets.push((Target::Bindfs, b.mountpoint.clone()));
            Some(b)
        } else {
            eprintln!("linefs: bench: bindfs is not installed (apt-get install bindfs): its row is skipped");
            skipped.push((Target::Bindfs, "not installed (apt-get install bindfs)".to_string()));
            None
        };
        targets.push((Target::Linefs, mnt_linefs));
        let offload = if offload {
            let options: Vec<String> = options.iter().filter(|o| !o.ends_with("writeback_cache")).cloned().collect();
            let (mnt, cluster) = offload_target(dir, &pm_dir, pm_size, options)?;
            targets.push((Target::LinefsOffload, mnt));
            Some(cluster)
        } else {
            None
        };
        Ok(Testbed { targets, pm_file, libfs_status, skipped, _bindfs: bindfs, _offload: offload, _teardown: teardown })
    }

    /// A field of the libfs status ("backing", "persist_method").
    pub(crate) fn field(&self, k: &str) -> String {
        self.libfs_status[k].as_str().unwrap_or("unknown").to_string()
    }
}

/// The offload target: a one-node cluster with nicfs and kworker in DIR/bench-<pid>-off, its
/// node in `pm_dir`, mounted at DIR/bench-<pid>-off/mnt. Returns the mount point and the
/// cluster, which tears it all down when dropped.
fn offload_target(
    dir: &ClusterDir,
    pm_dir: &Path,
    pm_size: u64,
    options: Vec<String>,
) -> CliResult<(PathBuf, TempCluster)> {
    let pid = std::process::id();
    let node = pm_dir.join(format!("bench-{pid}-off"));
    if node.exists() {
        return Err(fail(format!("{}: exists; remove it first", node.display())));
    }
    let cd = ClusterDir::new(&dir.root.join(format!("bench-{pid}-off")))?;
    let teardown = TempCluster::new(cd.clone(), vec![node.clone()], "bench");
    cluster::create_offload(&cd, pm_dir, std::slice::from_ref(&node), pm_size)?;
    let mnt = cd.root.join("mnt");
    std::fs::create_dir_all(&mnt).ctx(|| format!("{}: create", mnt.display()))?;
    let _lock = cd.lock()?;
    let mut reg = cd.registry()?;
    let req = MountRequest {
        node: 0,
        backend: Backend::Linefs,
        source: node,
        nicfs: Some(linefs_ops::daemons::socket(&cd, 0)),
        mountpoint: mnt.clone(),
        options,
        consistency: "linefs".to_string(),
    };
    mounts::mount_locked(&cd, &mut reg, req)?;
    Ok((mnt, teardown))
}

/// What every report starts with: when, how, and what PM the linefs target had.
pub(crate) struct Header {
    pub date: String,
    pub command: String,
    pub pm_file: PathBuf,
    pub backing: String,
    pub persist_method: String,
}

impl Header {
    pub(crate) fn new(bed: &Testbed) -> Header {
        Header {
            date: utc_date(unix_now()),
            command: command_line(),
            pm_file: bed.pm_file.clone(),
            backing: bed.field("backing"),
            persist_method: bed.field("persist_method"),
        }
    }

    /// The table's opening lines, ending with a blank line.
    pub(crate) fn table(&self, name: &str, workload: &str) -> String {
        let mut o = String::new();
        o.push_str(&format!("linefs bench {} — {}\n", name, self.date));
        o.push_str(&format!("command:  {}\n", self.command));
        o.push_str(&format!("workload: {}\n", workload));
        o.push_str(&format!(
            "PM:       {} (backing: {}, persist: {})\n\n",
            self.pm_file.display(),
            self.backing,
            self.persist_method
        ));
        o
    }

    pub(crate) fn pm_json(&self) -> Value {
        json!({ "file": self.pm_file, "backing": self.backing, "persist_method": self.persist_method })
    }
}

/// The median of `v` (NaNs left out; NaN if nothing is left): what every bench reports over
/// its interleaved runs.
/// CPU seconds per GiB of `bytes` written (a benchmark's CPU cost figure).
pub(crate) fn cpu_per_gib(cpu_s: f64, bytes: u64) -> f64 {
    cpu_s / (bytes as f64 / (1u64 << 30) as f64).max(1e-12)
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| !x.is_nan());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The pending rows, as table lines.
pub(crate) fn pending_table() -> String {
    PENDING.iter().map(|(k, why)| format!("{k:<34} {why}\n")).collect()
}

pub(crate) fn pending_json() -> Value {
    PENDING.iter().map(|(k, why)| json!({"target": k, "status": why})).collect::<Vec<_>>().into()
}

/// Runs a benchmark; returns the report (table or JSON).
pub fn run(dir: &ClusterDir, args: &BenchArgs) -> CliResult<String> {
    match args.name {
        #[cfg(linefs_leveldb)]
        BenchName::Leveldb => leveldb::run(dir, args),
        #[cfg(not(linefs_leveldb))]
        BenchName::Leveldb => Err(fail(
            "this linefs was built without LevelDB (libleveldb-dev was not found at build time): \
             install it (scripts/install-deps.sh) and rebuild",
        )),
        BenchName::Filebench => filebench::run(dir, args),
        BenchName::Datapath => datapath::run(dir, args),
        BenchName::Offload => offload::run(dir, args),
        BenchName::Replication => replication::run(dir, args),
        BenchName::Seqwrite | BenchName::Fsync => syncwrite::run(dir, args),
    }
}
