//! The verbs that create and retire clusters: `up` (format each node's PM file once, write
//! the description, mark the cluster up) and `down` (stop every mount, mark it down), and
//! [`create`], which `bench` and `soak` use for their temporary clusters. The directory's
//! layout and files belong to [`crate::clusterdir`]; starting and stopping mount daemons to
//! [`crate::mounts`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use linefs_pm::layout::FormatParams;
use linefs_pm::mkfs;

use crate::clusterdir::{write_atomic, ClusterDesc, ClusterDir, NodeDesc};
use crate::procs;
use crate::util::{fail, human_size, unix_now, utc_date, CliResult, Context};

pub const DEFAULT_PM_SIZE: u64 = 1 << 30;

/// Formats a node in the directory `path` (its public file and log files, see
/// `linefs_pm::node`) unless it already holds a valid node (kept as it is). Returns the
/// node's PM size and whether it was formatted.
pub fn ensure_node(path: &Path, size: u64) -> CliResult<(u64, bool)> {
    if path.exists() {
        let geo = mkfs::check_dir(path)
            .ctx(|| format!("{}: not a valid linefs node (remove it to reformat)", path.display()))?;
        return Ok((geo.node_size(), false));
    }
    let node = mkfs::format_dir(path, &FormatParams::for_size(size)).ctx(|| format!("{}: format", path.display()))?;
    Ok((node.geometry.node_size(), true))
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
    let pm_files: Vec<PathBuf> = (0..args.nodes).map(|i| pm_dir.join(format!("node{i}"))).collect();
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
        let (pm_size, _) = ensure_node(pm_path, size)?;
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
