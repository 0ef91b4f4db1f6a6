//! The cluster directory and the data kept in it: its layout ([`ClusterDir`]), the cluster
//! description (`cluster.json`), the mount registry (`run/mounts.json`) and its records, and
//! the `run/lock` that serialises the verbs changing `run/`. The verbs live elsewhere
//! (`cluster` brings clusters up and down, `mounts` starts and stops daemons); this module
//! only reads and writes the files, so every other module can depend on it and it depends on
//! none of them but `procs` and `util`.
//!
//! Layout of DIR:
//! - `cluster.json` — the description written by `up`: nodes, their PM directories and sizes,
//!   whether nicfs and kworker run (`offload`), nicfs's `--cpus` and the base port of nicfs's
//!   metrics (`metrics_port`: node i serves on 127.0.0.1:BASE+i).
//! - `cluster.key` — the cluster key (32 random bytes, mode 0600) the nicfs daemons prove to
//!   each other on the peer link; made by the first `up` with offload, kept across `up`s and
//!   never overwritten (delete it to change the key, the cluster down).
//! - `pm/` — the PM files, unless `--pm-dir` put them elsewhere (recorded in the description).
//! - `logs/` — one log per daemon: `nicfs-<node>.log`, `kworker-<node>.log`,
//!   `mount-<node>-<id>.log`.
//! - `run/up` — present while the cluster is up; `run/lock` — serialises the verbs that
//!   change `run/`; `run/mounts.json` — the mount registry; `run/mount-<id>.pid` and
//!   `run/mount-<id>.status.json` — each mount daemon's pid and status; with offload,
//!   `run/nicfs-<node>.{pid,sock,status.json}` and `run/kworker-<node>.pid` (named by
//!   [`crate::daemons`]).
//!
//! - `zk/` — the ZooKeeper servers `up` started on loopback, unless `--zk` named an
//!   ensemble (see [`crate::zookeeper`]).
//!
//! With offload, every nicfs replicates its clients' logs to the other members, so each node's
//! public area holds every node's published files (`up --nodes N`); a host-only cluster
//! (`--offload off`) runs no nicfs, and its nodes share no files.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::procs::{self, Lock};
use crate::util::{fail, CliResult, Context};

/// The cluster description (`cluster.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterDesc {
    pub version: u32,
    pub created: String,
    pub created_unix: u64,
    pub pm_dir: PathBuf,
    pub zk: Option<String>,
    pub nodes: Vec<NodeDesc>,
    /// Whether each node runs nicfs and kworker. Absent from descriptions written before
    /// `up` started them: those clusters ran host-only (see [`ClusterDesc::offload`]).
    #[serde(default)]
    pub offload: Option<Offload>,
    /// The CPUs every nicfs is pinned to (`up --cpus`), as given.
    #[serde(default)]
    pub nic_cpus: Option<String>,
    /// `up --metrics-port BASE`: node i's nicfs serves Prometheus metrics on
    /// 127.0.0.1:BASE+i (BASE 0: each picks a free port); none: no metrics port.
    #[serde(default)]
    pub metrics_port: Option<u16>,
    /// The limit flags `up` was given for nicfs (`--max-slots-per-uid 2 ...`), passed to
    /// every nicfs started for the cluster (`up`, `restart-nic`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nicfs_limits: Vec<String>,
    /// `up --trusted-group`: the group nicfs hands the public file to besides root
    /// (`nicfs --trusted-group`); none: root only.
    #[serde(default)]
    pub trusted_group: Option<String>,
    /// `up --zk-servers`: how many ZooKeeper servers `up` starts on loopback (1 or 3; none
    /// recorded: 1). Unused with `--zk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zk_servers: Option<usize>,
}

impl ClusterDesc {
    /// How the cluster runs: as recorded, host-only when nothing is.
    pub fn offload(&self) -> Offload {
        self.offload.unwrap_or(Offload::Off)
    }
}

/// `up --offload`: `on` starts nicfs and kworker on every node and mounts attach to nicfs;
/// `off` is the host-only baseline (each mount opens its node's PM and publishes itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Offload {
    On,
    Off,
}

impl Offload {
    pub fn name(self) -> &'static str {
        match self {
            Offload::On => "on",
            Offload::Off => "off",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeDesc {
    pub index: usize,
    pub pm_path: PathBuf,
    pub pm_size: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MountState {
    Mounted,
    /// The host was killed (`kill-host`): `restart-host` remounts it.
    Killed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Linefs,
    Passthrough,
}

/// One mount in the registry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MountRec {
    pub id: u64,
    pub node: usize,
    pub backend: Backend,
    /// The node directory (linefs) or source directory (passthrough).
    pub source: PathBuf,
    /// The nicfs socket a linefs mount attaches to; none for a host-only mount, which opens
    /// the node's PM itself.
    #[serde(default)]
    pub nicfs: Option<PathBuf>,
    /// The cluster replicates (offload with ZooKeeper): the daemon runs with `--replicated`,
    /// its fsyncs wait for nicfs and every replica.
    #[serde(default)]
    pub replicated: bool,
    pub mountpoint: PathBuf,
    pub pid: i32,
    pub options: Vec<String>,
    pub consistency: String,
    pub log: PathBuf,
    pub status_file: PathBuf,
    pub pid_file: PathBuf,
    pub state: MountState,
    pub started_unix: u64,
}

/// The mount registry (`run/mounts.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Registry {
    pub next_id: u64,
    pub mounts: Vec<MountRec>,
}

/// A cluster directory.
#[derive(Debug, Clone)]
pub struct ClusterDir {
    pub root: PathBuf,
}

impl ClusterDir {
    pub fn new(dir: &Path) -> CliResult<ClusterDir> {
        Ok(ClusterDir { root: procs::absolute(dir)? })
    }

    pub fn desc_path(&self) -> PathBuf {
        self.root.join("cluster.json")
    }
    pub fn run(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn logs(&self) -> PathBuf {
        self.root.join("logs")
    }
    /// The cluster key (`cluster.key`, 0600): made by the first `up`, kept across `up`s,
    /// never overwritten; every nicfs of the cluster reads it (`--cluster-key`).
    pub fn key_path(&self) -> PathBuf {
        self.root.join("cluster.key")
    }
    pub fn up_marker(&self) -> PathBuf {
        self.run().join("up")
    }
    fn registry_path(&self) -> PathBuf {
        self.run().join("mounts.json")
    }

    pub fn is_up(&self) -> bool {
        self.up_marker().exists()
    }

    /// The description, or the standard "no cluster" error.
    pub fn load(&self) -> CliResult<ClusterDesc> {
        let path = self.desc_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(self.no_cluster()),
            Err(e) => return Err(fail(format!("{}: {e}", path.display()))),
        };
        serde_json::from_str(&text).ctx(|| format!("{}: bad cluster description", path.display()))
    }

    /// The description of a cluster that is up.
    pub fn load_up(&self) -> CliResult<ClusterDesc> {
        let desc = self.load()?;
        if !self.is_up() {
            return Err(self.no_cluster());
        }
        Ok(desc)
    }

    pub fn no_cluster(&self) -> crate::util::CliError {
        fail(format!("no cluster in {} (run linefs up)", self.root.display()))
    }

    /// Locks `run/` against concurrent verbs.
    pub fn lock(&self) -> CliResult<Lock> {
        std::fs::create_dir_all(self.run()).ctx(|| format!("{}: create", self.run().display()))?;
        Lock::acquire(&self.run().join("lock"))
    }

    pub fn registry(&self) -> CliResult<Registry> {
        let path = self.registry_path();
        match std::fs::read_to_string(&path) {
            Ok(t) => serde_json::from_str(&t).ctx(|| format!("{}: bad registry", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Registry::default()),
            Err(e) => Err(fail(format!("{}: {e}", path.display()))),
        }
    }

    pub fn save_registry(&self, reg: &Registry) -> CliResult<()> {
        let path = self.registry_path();
        write_atomic(&path, &serde_json::to_string_pretty(reg).unwrap_or_default())
    }
}

/// Writes a file through a temporary file and a rename.
pub fn write_atomic(path: &Path, text: &str) -> CliResult<()> {
    let tmp = path.with_extension("tmp");
    crate::util::write_private(&tmp, text.as_bytes())
        .and_then(|()| std::fs::rename(&tmp, path))
        .ctx(|| format!("{}: write", path.display()))
}
