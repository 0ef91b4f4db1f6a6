//! The cluster directory: its layout, the cluster description, the mount registry, and the
//! `up` and `down` verbs.
//!
//! Layout of DIR:
//! - `cluster.json` — the description written by `up`: nodes, their PM files and sizes.
//! - `pm/` — the PM files, unless `--pm-dir` put them elsewhere (recorded in the description).
//! - `logs/` — one log per daemon (`mount-<node>-<id>.log`).
//! - `run/up` — present while the cluster is up; `run/lock` — serialises the verbs that
//!   change `run/`; `run/mounts.json` — the mount registry; `run/mount-<id>.pid` and
//!   `run/mount-<id>.status.json` — each mount daemon's pid and status.
//!
//! Only single-node clusters exist until nicfs is built; the layout already has a node list.

use std::path::{Path, PathBuf};
use std::time::Duration;

use linefs_pm::layout::FormatParams;
use linefs_pm::mkfs;
use serde::{Deserialize, Serialize};

use crate::procs::{self, Lock};
use crate::util::{fail, human_size, unix_now, utc_date, CliResult, Context};

pub const DEFAULT_PM_SIZE: u64 = 1 << 30;

/// The cluster description (`cluster.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterDesc {
    pub version: u32,
    pub created: String,
    pub created_unix: u64,
    pub pm_dir: PathBuf,
    pub zk: Option<String>,
    pub nodes: Vec<NodeDesc>,
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
    /// The PM file (linefs) or source directory (passthrough).
    pub source: PathBuf,
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
    std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)).ctx(|| format!("{}: write", path.display()))
}

/// Formats `path` with linefs unless it already holds a valid image (kept as it is).
/// Returns whether it was formatted.
pub fn ensure_pm_file(path: &Path, size: u64) -> CliResult<bool> {
    if path.exists() {
        mkfs::check_file(path)
            .ctx(|| format!("{}: not a valid linefs PM file (remove it to reformat)", path.display()))?;
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).ctx(|| format!("{}: create", dir.display()))?;
    }
    mkfs::format_file(path, &FormatParams::for_size(size)).ctx(|| format!("{}: format", path.display()))?;
    Ok(true)
}

/// The options of `up`.
#[derive(Debug, Clone)]
pub struct UpArgs {
    pub nodes: usize,
    pub pm_dir: Option<PathBuf>,
    pub pm_size: Option<u64>,
    pub zk: Option<String>,
}

/// `linefs up`: formats the PM files once, writes the description, marks the cluster up.
pub fn up(dir: &ClusterDir, args: &UpArgs) -> CliResult<String> {
    if args.nodes != 1 {
        return Err(fail("multi-node clusters need nicfs, which is not built yet; use --nodes 1"));
    }
    if let Some(zk) = &args.zk {
        let bad = |hp: &str| match hp.rsplit_once(':') {
            Some((host, port)) => host.is_empty() || port.parse::<u16>().is_err(),
            None => true,
        };
        if zk.split(',').any(bad) {
            return Err(fail(format!("--zk {zk:?}: expected HOST:PORT[,HOST:PORT...]")));
        }
    }
    std::fs::create_dir_all(&dir.root).ctx(|| format!("{}: create", dir.root.display()))?;
    let _lock = dir.lock()?;
    let existing = match dir.desc_path().exists() {
        true => Some(dir.load()?),
        false => None,
    };
    if dir.is_up() {
        let n = existing.as_ref().map_or(0, |d| d.nodes.len());
        return Ok(format!(
            "cluster in {} is already up ({n} node{}); nothing changed",
            dir.root.display(),
            if n == 1 { "" } else { "s" }
        ));
    }
    let pm_dir = match (&args.pm_dir, &existing) {
        (Some(p), Some(d)) => {
            let p = procs::absolute(p)?;
            if p != d.pm_dir {
                return Err(fail(format!(
                    "the cluster in {} keeps its PM files in {}, not {}",
                    dir.root.display(),
                    d.pm_dir.display(),
                    p.display()
                )));
            }
            p
        }
        (Some(p), None) => {
            std::fs::create_dir_all(p).ctx(|| format!("{}: create", p.display()))?;
            procs::absolute(p)?
        }
        (None, Some(d)) => d.pm_dir.clone(),
        (None, None) => dir.root.join("pm"),
    };
    let size = args.pm_size.unwrap_or(DEFAULT_PM_SIZE);
    let pm_files: Vec<PathBuf> = (0..args.nodes).map(|i| pm_dir.join(format!("node{i}.pm"))).collect();
    let desc = create(dir, &pm_dir, &pm_files, size, args.zk.clone(), existing.as_ref())?;
    let mut msg = format!("cluster in {} is up: {} node", dir.root.display(), desc.nodes.len());
    for n in &desc.nodes {
        msg.push_str(&format!("\n  node {}: {} ({})", n.index, n.pm_path.display(), human_size(n.pm_size)));
    }
    if args.zk.is_some() {
        msg.push_str("\n  --zk recorded; ZooKeeper is used once clustermgr is built");
    }
    Ok(msg)
}

/// Creates (or re-ups) a cluster in `dir` with the given PM files.
pub fn create(
    dir: &ClusterDir,
    pm_dir: &Path,
    pm_files: &[PathBuf],
    size: u64,
    zk: Option<String>,
    existing: Option<&ClusterDesc>,
) -> CliResult<ClusterDesc> {
    for sub in [dir.logs(), dir.run(), pm_dir.to_path_buf()] {
        std::fs::create_dir_all(&sub).ctx(|| format!("{}: create", sub.display()))?;
    }
    let mut nodes = Vec::new();
    for (index, pm_path) in pm_files.iter().enumerate() {
        ensure_pm_file(pm_path, size)?;
        let pm_size = std::fs::metadata(pm_path).map(|m| m.len()).unwrap_or(size);
        nodes.push(NodeDesc { index, pm_path: pm_path.clone(), pm_size });
    }
    let now = unix_now();
    let desc = ClusterDesc {
        version: 1,
        created: existing.map_or_else(|| utc_date(now), |d| d.created.clone()),
        created_unix: existing.map_or(now, |d| d.created_unix),
        pm_dir: pm_dir.to_path_buf(),
        zk: zk.or_else(|| existing.and_then(|d| d.zk.clone())),
        nodes,
    };
    let text = serde_json::to_string_pretty(&desc).unwrap_or_default();
    write_atomic(&dir.desc_path(), &text)?;
    std::fs::write(dir.up_marker(), format!("{now}\n")).ctx(|| format!("{}: write", dir.up_marker().display()))?;
    Ok(desc)
}

/// How long a daemon gets to flush and unmount after SIGTERM.
pub const STOP_WAIT: Duration = Duration::from_secs(30);

/// `linefs down`: unmounts every mount, kills what is left, marks the cluster down.
pub fn down(dir: &ClusterDir) -> CliResult<String> {
    let desc = dir.load()?;
    let _lock = dir.lock()?;
    let mut reg = dir.registry()?;
    if !dir.is_up() && reg.mounts.is_empty() {
        return Ok(format!("cluster in {} is already down", dir.root.display()));
    }
    let mut problems = Vec::new();
    let mut stopped = 0;
    for rec in std::mem::take(&mut reg.mounts) {
        match crate::mounts::stop_mount(&rec, true) {
            Ok(()) => stopped += 1,
            Err(e) => problems.push(e.to_string()),
        }
    }
    // Anything else that left a pid file behind.
    if let Ok(entries) = std::fs::read_dir(dir.run()) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pid") {
                if let Some(pid) = procs::read_pid_file(&p) {
                    if procs::is_our_daemon(pid) {
                        procs::kill(pid, libc::SIGKILL);
                        procs::wait_exit(pid, Duration::from_secs(5));
                    }
                }
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    dir.save_registry(&reg)?;
    if !problems.is_empty() {
        return Err(fail(problems.join("; ")));
    }
    match std::fs::remove_file(dir.up_marker()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(format!("{}: {e}", dir.up_marker().display()))),
    }
    Ok(format!(
        "cluster in {} is down ({stopped} mount{} stopped; data kept in {})",
        dir.root.display(),
        if stopped == 1 { "" } else { "s" },
        desc.pm_dir.display()
    ))
}

/// A cluster that lives only as long as a command (a benchmark, the soak): on drop it is
/// brought down and its directory removed, with the extra `paths` (PM files, local
/// directories), on error paths too, and on Ctrl-C or SIGTERM when the command installed
/// [`crate::interrupt`]. `what` names the command in the messages.
pub struct TempCluster {
    /// Its registration with [`crate::interrupt`], which keeps what teardown needs.
    id: u64,
}

impl TempCluster {
    pub fn new(dir: ClusterDir, paths: Vec<PathBuf>, what: &'static str) -> TempCluster {
        TempCluster { id: crate::interrupt::register(dir, paths, what) }
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        // None: a signal has taken it and is tearing it down.
        if let Some(t) = crate::interrupt::unregister(self.id) {
            teardown(&t.dir, &t.paths, t.what);
        }
    }
}

/// Brings a temporary cluster down and removes its directory and `paths`; problems are
/// reported, not returned (this runs on drop and on signals).
pub fn teardown(dir: &ClusterDir, paths: &[PathBuf], what: &str) {
    if dir.desc_path().exists() {
        if let Err(e) = down(dir) {
            eprintln!("linefs: {what}: teardown: {e}");
        }
    }
    for p in paths.iter().chain(std::iter::once(&dir.root)) {
        let res = if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
        if let Err(e) = res {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("linefs: {what}: teardown: {}: {e}", p.display());
            }
        }
    }
}
