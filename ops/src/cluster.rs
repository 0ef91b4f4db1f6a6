//! The verbs that create and retire clusters: `up` (format each node's PM once, write the
//! description, start ZooKeeper ([`crate::zookeeper`]) and then each node's nicfs and kworker
//! unless `--offload off`, mark the cluster up) and `down` (stop every mount, then every
//! kworker, then every nicfs, then the ZooKeeper `up` started; mark it down), and
//! [`create`], which `bench` and `soak` use for their temporary, host-only clusters. The
//! directory's layout and files belong to [`crate::clusterdir`]; starting and stopping mount
//! daemons to [`crate::mounts`], nicfs and kworker to [`crate::daemons`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use linefs_pm::layout::FormatParams;
use linefs_pm::{mkfs, upgrade};

use crate::clusterdir::{write_atomic, ClusterDesc, ClusterDir, NodeDesc, Offload};
use crate::daemons::{self, Role, Stopped};
use crate::procs;
use crate::util::{fail, human_size, unix_now, utc_date, CliResult, Context};
use crate::zookeeper;

pub const DEFAULT_PM_SIZE: u64 = 1 << 30;
/// How many nodes `up` brings up when neither `--nodes` nor an earlier `up` says: the one
/// place the default lives (issue 23 wants 3 once replication lands; every test and script
/// passes `--nodes` explicitly, so changing it changes nothing else).
pub const DEFAULT_NODES: usize = 3;
/// Most nodes `up` brings up (the node record's member set is 64 bits).
pub const MAX_NODES: usize = 64;

/// Formats a node in the directory `path` (its public file and log files, see
/// `linefs_pm::node`) unless it already holds a valid node (kept as it is). Returns the
/// node's PM size and whether it was formatted.
pub fn ensure_node(path: &Path, size: u64) -> CliResult<(u64, bool)> {
    if path.exists() {
        if linefs_pm::node::is_node_dir(path) {
            // A node of an older format version is upgraded in place (nothing is up: the
            // upgrade takes the node's lock, refused while anything holds it).
            let done = upgrade::upgrade_dir(path).ctx(|| format!("{}: upgrade", path.display()))?;
            if done.from != done.to {
                eprintln!("linefs: {}: PM format upgraded from version {} to {}", path.display(), done.from, done.to);
            }
        }
        let geo = mkfs::check_dir(path)
            .ctx(|| format!("{}: not a valid linefs node (remove it to reformat)", path.display()))?;
        return Ok((geo.node_size(), false));
    }
    let node = mkfs::format_dir(path, &FormatParams::for_size(size)).ctx(|| format!("{}: format", path.display()))?;
    Ok((node.geometry.node_size(), true))
}

/// How many nodes `up` without `--nodes` brings up in `dir`: as many as an earlier `up`
/// recorded, else [`DEFAULT_NODES`].
pub fn default_nodes(dir: &ClusterDir) -> usize {
    match dir.desc_path().exists() {
        true => dir.load().map_or(DEFAULT_NODES, |d| d.nodes.len().max(1)),
        false => DEFAULT_NODES,
    }
}

/// `up --nodes`'s help: the default named from [`DEFAULT_NODES`].
pub fn nodes_help() -> String {
    format!(
        "Number of nodes, 1 to {MAX_NODES} (default: as many as an earlier up recorded, else {DEFAULT_NODES}). The nodes \
         are members of one cluster (ZooKeeper, epoch, chain) and nicfs replicates every client log to every \
         member"
    )
}

/// How long `up` waits for every nicfs to be a member of the cluster's view.
const JOIN_WAIT: Duration = Duration::from_secs(30);

/// Waits (at most `within`) until the status file of each of the `nodes` nicfs shows its
/// session connected in a view that holds every node; returns the nodes that are not.
fn wait_joined(dir: &ClusterDir, nodes: usize, within: Duration) -> Vec<usize> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let missing: Vec<usize> = (0..nodes)
            .filter(|&node| {
                let st = std::fs::read(daemons::status_file(dir, node))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
                let c = st.as_ref().map(|v| &v["cluster"]);
                let joined = c.is_some_and(|c| {
                    c["session"] == "connected" && c["chain"].as_array().is_some_and(|m| m.len() == nodes)
                });
                !joined
            })
            .collect();
        if missing.is_empty() || std::time::Instant::now() >= deadline {
            return missing;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The options of `up`.
#[derive(Debug, Clone)]
pub struct UpArgs {
    pub nodes: usize,
    pub pm_dir: Option<PathBuf>,
    pub pm_size: Option<u64>,
    pub zk: Option<String>,
    /// `--zk-servers`: local ZooKeeper servers to start (1 or 3); none: as recorded, else 1.
    pub zk_servers: Option<usize>,
    /// None: as recorded, else on.
    pub offload: Option<Offload>,
    /// `--cpus` for every nicfs; none: as recorded.
    pub cpus: Option<String>,
    /// `--metrics-port`; none: as recorded.
    pub metrics_port: Option<MetricsPort>,
    /// `--trusted-group` (`none` clears it); none: as recorded.
    pub trusted_group: Option<String>,
    /// nicfs's limit flags ([`LimitFlags::to_args`]); none: as recorded.
    pub nicfs_limits: Option<Vec<String>>,
}

/// `up`'s flags for the limits nicfs holds unprivileged users to (see nicfs's `limits`
/// module for what each bounds and its default); passed on to every nicfs as given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitFlags {
    /// Connections of all unprivileged users together (nicfs default 1024).
    #[arg(long, value_name = "N")]
    pub max_connections: Option<u32>,
    /// Connections per unprivileged uid (nicfs default 64).
    #[arg(long, value_name = "N")]
    pub max_connections_per_uid: Option<u32>,
    /// Log slots per unprivileged uid (nicfs default: half the slots not kept for root, at
    /// least 2).
    #[arg(long, value_name = "N")]
    pub max_slots_per_uid: Option<u32>,
    /// Log slots only root may claim (nicfs default 1).
    #[arg(long, value_name = "N")]
    pub root_reserved_slots: Option<u32>,
    /// Inode numbers granted and not yet used per unprivileged uid (nicfs default: half the
    /// inode table).
    #[arg(long, value_name = "N")]
    pub max_inodes_per_uid: Option<u64>,
    /// Data blocks reserved per unprivileged uid (nicfs default: half the data blocks).
    #[arg(long, value_name = "N")]
    pub max_blocks_per_uid: Option<u64>,
    /// No lease for a uid whose session was fenced, for this long, doubled for each
    /// further fencing (nicfs default 10000).
    #[arg(long, value_name = "MS")]
    pub fenced_backoff_ms: Option<u64>,
    /// The uid a kworker may run as besides nicfs's own.
    #[arg(long, value_name = "UID")]
    pub kworker_uid: Option<u32>,
}

impl LimitFlags {
    /// The nicfs flags for the limits given; None if none was.
    pub fn to_args(&self) -> Option<Vec<String>> {
        let flags: [(&str, Option<u64>); 8] = [
            ("--max-connections", self.max_connections.map(u64::from)),
            ("--max-connections-per-uid", self.max_connections_per_uid.map(u64::from)),
            ("--max-slots-per-uid", self.max_slots_per_uid.map(u64::from)),
            ("--root-reserved-slots", self.root_reserved_slots.map(u64::from)),
            ("--max-inodes-per-uid", self.max_inodes_per_uid),
            ("--max-blocks-per-uid", self.max_blocks_per_uid),
            ("--fenced-backoff-ms", self.fenced_backoff_ms),
            ("--kworker-uid", self.kworker_uid.map(u64::from)),
        ];
        let args: Vec<String> =
            flags.iter().filter_map(|(f, v)| v.map(|v| [f.to_string(), v.to_string()])).flatten().collect();
        (!args.is_empty()).then_some(args)
    }
}

/// `up --metrics-port`: a base port (node i's nicfs serves `/metrics` on
/// 127.0.0.1:BASE+i; 0 lets each nicfs pick a free port, told by `status`), or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsPort {
    Off,
    Base(u16),
}

impl MetricsPort {
    /// What the description records.
    pub fn recorded(self) -> Option<u16> {
        match self {
            MetricsPort::Off => None,
            MetricsPort::Base(p) => Some(p),
        }
    }
}

/// Parses `--metrics-port`: a port number or `off`.
pub fn parse_metrics_port(s: &str) -> Result<MetricsPort, String> {
    if s == "off" {
        return Ok(MetricsPort::Off);
    }
    s.parse::<u16>().map(MetricsPort::Base).map_err(|_| format!("{s:?} is not a port number (0-65535) or off"))
}

/// Refuses a base port whose last node's port would not exist.
fn check_metrics_port(base: u16, nodes: usize) -> CliResult<()> {
    let last = usize::from(base) + nodes.saturating_sub(1);
    if base != 0 && last > usize::from(u16::MAX) {
        return Err(fail(format!("--metrics-port {base}: node {} would need port {last}, past 65535", nodes - 1)));
    }
    Ok(())
}

/// Checks a CPU list with nicfs's own parser (`2,3`, `0-1,4`), so that a typo is refused
/// before anything starts rather than by the first nicfs.
fn check_cpus(list: &str) -> CliResult<()> {
    linefs_pm::cpus::parse(list)
        .map(|_| ())
        .map_err(|e| fail(format!("--cpus {list:?}: {e} (expected CPU numbers and ranges, e.g. 2,3 or 0-1,4)")))
}

/// `linefs up`: formats the PM once, writes the description, starts every node's nicfs and
/// kworker (with offload) and marks the cluster up once each nicfs serves with its kworker
/// attached. If a node's daemons fail to start, those already started are stopped again.
pub fn up(dir: &ClusterDir, args: &UpArgs) -> CliResult<String> {
    // Each node is its own file system until replication lands: several nodes come up as
    // members of one cluster (ZooKeeper, epochs, chain) but share no files yet. At most 64:
    // the node record keeps a view's members as 64 bits.
    if args.nodes == 0 || args.nodes > MAX_NODES {
        return Err(fail(format!("--nodes {}: 1 to {MAX_NODES}", args.nodes)));
    }
    if let Some(cpus) = &args.cpus {
        check_cpus(cpus)?;
    }
    if let Some(MetricsPort::Base(base)) = args.metrics_port {
        check_metrics_port(base, args.nodes)?;
    }
    if let Some(n) = args.zk_servers {
        if n != 1 && n != 3 {
            return Err(fail(format!("--zk-servers {n}: 1 (standalone) or 3 (an ensemble)")));
        }
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
    // Refuse what cannot start before anything is created (the description read here
    // unlocked is only a hint; it is read again under the lock).
    let hint = dir.desc_path().exists().then(|| dir.load().ok()).flatten();
    let recorded = hint.as_ref().and_then(|d| d.offload);
    if args.offload.or(recorded).unwrap_or(Offload::On) == Offload::On {
        daemons::check_socket_paths(dir, args.nodes)?;
        daemons::check_executables()?;
        // An ensemble nobody answers is refused before any node is formatted (and again by
        // zookeeper::start, under the lock).
        if let Some(zk) = args.zk.as_ref().or(hint.as_ref().and_then(|d| d.zk.as_ref())) {
            if !zookeeper::reachable(zk) {
                return Err(fail(format!(
                    "ZooKeeper at {zk} (--zk) is unreachable: start it, or drop --zk and let up start one"
                )));
            }
        }
    }
    std::fs::create_dir_all(&dir.root).ctx(|| format!("{}: create", dir.root.display()))?;
    let _lock = dir.lock()?;
    let existing = match dir.desc_path().exists() {
        true => Some(dir.load()?),
        false => None,
    };
    if dir.is_up() {
        return Ok(already_up(dir, existing.as_ref()));
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
    let offload = args.offload.or(existing.as_ref().and_then(|d| d.offload)).unwrap_or(Offload::On);
    let cpus = args.cpus.clone().or_else(|| existing.as_ref().and_then(|d| d.nic_cpus.clone()));
    let metrics_port = match args.metrics_port {
        Some(m) => m.recorded(),
        None => existing.as_ref().and_then(|d| d.metrics_port),
    };
    if let Some(base) = metrics_port {
        check_metrics_port(base, args.nodes)?;
    }
    let trusted_group = match args.trusted_group.as_deref() {
        Some("none") => None,
        Some(g) => Some(g.to_string()),
        None => existing.as_ref().and_then(|d| d.trusted_group.clone()),
    };
    if offload == Offload::On {
        for node in 0..args.nodes {
            for role in [Role::Nicfs, Role::Kworker] {
                if let Some(pid) = daemons::running(dir, role, node) {
                    return Err(fail(format!(
                        "node {node}'s {} (pid {pid}) still runs from an earlier up; run linefs down first",
                        role.name()
                    )));
                }
            }
        }
    }
    let size = args.pm_size.unwrap_or(DEFAULT_PM_SIZE);
    let pm_files: Vec<PathBuf> = (0..args.nodes).map(|i| pm_dir.join(format!("node{i}"))).collect();
    let nicfs_limits = match &args.nicfs_limits {
        Some(l) => l.clone(),
        None => existing.as_ref().map(|d| d.nicfs_limits.clone()).unwrap_or_default(),
    };
    let settings = Settings {
        zk: args.zk.clone(),
        zk_servers: args.zk_servers,
        offload,
        nic_cpus: cpus,
        metrics_port,
        trusted_group,
        nicfs_limits,
    };
    let desc = describe(dir, &pm_dir, &pm_files, size, settings, existing.as_ref())?;
    // A failed up records nothing: the next one starts from the old settings.
    let undo_desc = || {
        let _ = match &existing {
            Some(d) => write_desc(dir, d),
            None => std::fs::remove_file(dir.desc_path()).ctx(|| "remove the description"),
        };
    };
    let mut started = Vec::new();
    // With offload, every nicfs is a member of the cluster: its key and ZooKeeper first.
    if offload == Offload::On {
        if let Err(e) = ensure_key(dir) {
            undo_desc();
            return Err(e);
        }
    }
    let zk = match offload {
        Offload::On => match zookeeper::start(dir, &desc, desc.zk_servers.unwrap_or(1)) {
            Ok(connect) => Some(connect),
            Err(e) => {
                undo_desc();
                return Err(e);
            }
        },
        Offload::Off => None,
    };
    if offload == Offload::On {
        for n in &desc.nodes {
            match daemons::start_node(dir, &desc, n.index) {
                Ok(pids) => started.push(pids),
                Err(e) => {
                    for node in 0..started.len() {
                        let _ = daemons::stop(dir, Role::Kworker, node);
                        let _ = daemons::stop(dir, Role::Nicfs, node);
                    }
                    let _ = zookeeper::stop(dir);
                    undo_desc();
                    return Err(e);
                }
            }
        }
    }
    // Serving is not yet joined: a mount made at once would find a node with no view and no
    // inode range yet (its first creates wait for one, and on a loaded machine the join can
    // take longer than that wait: the 3-node soak's first create failed so in CI). `up`
    // returns once every nicfs is a member of one view, or says which are not.
    let unjoined = match offload == Offload::On && !started.is_empty() {
        true => wait_joined(dir, desc.nodes.len(), JOIN_WAIT),
        false => Vec::new(),
    };
    mark_up(dir)?;
    let n = desc.nodes.len();
    let mut msg = format!("cluster in {} is up: {n} node{}", dir.root.display(), if n == 1 { "" } else { "s" });
    if !unjoined.is_empty() {
        msg.push_str(&format!(
            "\n  warning: nicfs of node(s) {unjoined:?} not yet in the cluster's view after {} s (see linefs status)",
            JOIN_WAIT.as_secs()
        ));
    }
    for n in &desc.nodes {
        msg.push_str(&format!("\n  node {}: {} ({})", n.index, n.pm_path.display(), human_size(n.pm_size)));
        if let Some((nicfs, kworker)) = started.get(n.index) {
            msg.push_str(&format!(
                "; nicfs pid {nicfs} serves on {}, kworker pid {kworker} attached",
                daemons::socket(dir, n.index).display()
            ));
            if let Some(addr) = daemons::metrics_addr_served(dir, n.index, *nicfs) {
                msg.push_str(&format!("; metrics at http://{addr}/metrics"));
            }
        }
    }
    match (offload, &desc.nic_cpus) {
        (Offload::On, None) => msg.push_str("\n  offload on: mounts attach to their node's nicfs"),
        (Offload::On, Some(c)) => {
            msg.push_str(&format!("\n  offload on: mounts attach to their node's nicfs (nicfs on CPUs {c})"))
        }
        (Offload::Off, _) => {
            msg.push_str("\n  offload off (host-only): no nicfs or kworker; each mount opens its node's PM")
        }
    }
    if let Some(zk) = zk {
        match zookeeper::is_local(&desc) {
            true => msg.push_str(&format!(
                "\n  ZooKeeper on {zk} ({} server{} under {}; stopped by linefs down)",
                desc.zk_servers.unwrap_or(1),
                if desc.zk_servers.unwrap_or(1) == 1 { "" } else { "s" },
                zookeeper::dir(dir).display()
            )),
            false => msg.push_str(&format!("\n  ZooKeeper ensemble {zk} (--zk)")),
        }
        msg.push_str("; every nicfs joins the cluster as its node id (see linefs status)");
    }
    if desc.nodes.len() > 1 && desc.offload() == Offload::Off {
        msg.push_str("\n  host-only nodes replicate nothing: each is a file system of its own");
    }
    Ok(msg)
}

/// What a second `up` on a running cluster says: that nothing changed, and which of its
/// daemons are not running (killed, or dead) and how to bring them back.
fn already_up(dir: &ClusterDir, desc: Option<&ClusterDesc>) -> String {
    let n = desc.map_or(0, |d| d.nodes.len());
    let mut msg = format!(
        "cluster in {} is already up ({n} node{}, offload {}); nothing changed",
        dir.root.display(),
        if n == 1 { "" } else { "s" },
        desc.map_or(Offload::Off, |d| d.offload()).name()
    );
    if let Some(d) = desc.filter(|d| d.offload() == Offload::On) {
        match zookeeper::restart_if_down(dir, d) {
            Ok(Some(connect)) => msg.push_str(&format!("\n  ZooKeeper was not running: started again on {connect}")),
            Ok(None) => {}
            Err(e) => msg.push_str(&format!("\n  ZooKeeper is not running and {e}")),
        }
        for node in 0..n {
            if daemons::running(dir, Role::Nicfs, node).is_none() {
                msg.push_str(&format!("\n  node {node}'s nicfs is not running (linefs restart-nic {node})"));
            }
            if daemons::running(dir, Role::Kworker, node).is_none() {
                msg.push_str(&format!("\n  node {node}'s kworker is not running (linefs restart-host {node})"));
            }
        }
    }
    msg
}

/// What a cluster's description records beside its nodes.
pub struct Settings {
    pub zk: Option<String>,
    pub zk_servers: Option<usize>,
    pub offload: Offload,
    pub nic_cpus: Option<String>,
    pub metrics_port: Option<u16>,
    pub trusted_group: Option<String>,
    /// nicfs's limit flags, as given to `up`.
    pub nicfs_limits: Vec<String>,
}

/// Creates (or re-ups) a host-only cluster in `dir` with the given PM files and marks it up:
/// the temporary clusters of `bench` and `soak`.
pub fn create(
    dir: &ClusterDir,
    pm_dir: &Path,
    pm_files: &[PathBuf],
    size: u64,
    zk: Option<String>,
    existing: Option<&ClusterDesc>,
) -> CliResult<ClusterDesc> {
    let settings = Settings {
        zk,
        zk_servers: None,
        offload: Offload::Off,
        nic_cpus: None,
        metrics_port: None,
        trusted_group: None,
        nicfs_limits: Vec::new(),
    };
    let desc = describe(dir, pm_dir, pm_files, size, settings, existing)?;
    mark_up(dir)?;
    Ok(desc)
}

/// [`create`] with offload on: the node's nicfs and kworker are started too (the soak's
/// cluster, which kills them).
pub fn create_offload(dir: &ClusterDir, pm_dir: &Path, pm_files: &[PathBuf], size: u64) -> CliResult<ClusterDesc> {
    daemons::check_executables()?;
    daemons::check_socket_paths(dir, pm_files.len())?;
    let settings = Settings {
        zk: None,
        zk_servers: None,
        offload: Offload::On,
        nic_cpus: None,
        metrics_port: None,
        trusted_group: None,
        nicfs_limits: Vec::new(),
    };
    let desc = describe(dir, pm_dir, pm_files, size, settings, None)?;
    mark_up(dir)?;
    for node in 0..desc.nodes.len() {
        daemons::start_node(dir, &desc, node)?;
    }
    Ok(desc)
}

/// Marks the cluster in `dir` up.
fn mark_up(dir: &ClusterDir) -> CliResult<()> {
    crate::util::write_private(&dir.up_marker(), format!("{}\n", unix_now()).as_bytes())
        .ctx(|| format!("{}: write", dir.up_marker().display()))
}

/// Formats the nodes that need it and writes the description (`cluster.json`).
fn describe(
    dir: &ClusterDir,
    pm_dir: &Path,
    pm_files: &[PathBuf],
    size: u64,
    settings: Settings,
    existing: Option<&ClusterDesc>,
) -> CliResult<ClusterDesc> {
    for sub in [dir.logs(), dir.run(), pm_dir.to_path_buf()] {
        std::fs::create_dir_all(&sub).ctx(|| format!("{}: create", sub.display()))?;
    }
    // The daemons' logs name sessions, uids and paths: not for everyone (docs/SECURITY.md).
    // run/ stays searchable: nicfs's socket, there, is the interface.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.logs(), std::fs::Permissions::from_mode(0o750))
            .ctx(|| format!("{}: chmod 750", dir.logs().display()))?;
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
        zk: settings.zk.or_else(|| existing.and_then(|d| d.zk.clone())),
        nodes,
        offload: Some(settings.offload),
        nic_cpus: settings.nic_cpus,
        metrics_port: settings.metrics_port,
        trusted_group: settings.trusted_group,
        nicfs_limits: settings.nicfs_limits,
        zk_servers: settings.zk_servers.or_else(|| existing.and_then(|d| d.zk_servers)),
    };
    write_desc(dir, &desc)?;
    Ok(desc)
}

fn write_desc(dir: &ClusterDir, desc: &ClusterDesc) -> CliResult<()> {
    write_atomic(&dir.desc_path(), &serde_json::to_string_pretty(desc).unwrap_or_default())
}

/// `linefs down`: stops every mount (SIGTERM: each publishes and unmounts), then each node's
/// kworker, then its nicfs (SIGTERM: it settles its sessions and exits; SIGKILL after a
/// timeout), removes their pid files, sockets and status files, and marks the cluster down.
/// The data stays.
/// `upgrade`: every node of the stopped cluster in `dir` to this build's PM format version,
/// in place ([`linefs_pm::upgrade`]); one line per node.
pub fn upgrade(dir: &ClusterDir) -> CliResult<String> {
    let desc = dir.load()?;
    let _lock = dir.lock()?;
    if dir.is_up() {
        return Err(fail(format!("the cluster in {} is up: stop it first (linefs down)", dir.root.display())));
    }
    let mut lines = Vec::new();
    for node in &desc.nodes {
        let done =
            upgrade::upgrade_dir(&node.pm_path).ctx(|| format!("node {}: {}", node.index, node.pm_path.display()))?;
        lines.push(match (done.from == done.to, done.superblock_restored) {
            (false, _) => format!("node {}: PM format upgraded from version {} to {}", node.index, done.from, done.to),
            (true, true) => format!(
                "node {}: PM format version {}; superblock restored from its copy (an upgrade had been cut short)",
                node.index, done.to
            ),
            (true, false) => format!("node {}: PM format version {}, nothing to do", node.index, done.to),
        });
    }
    Ok(lines.join("\n"))
}

pub fn down(dir: &ClusterDir) -> CliResult<String> {
    let desc = dir.load()?;
    let _lock = dir.lock()?;
    let mut reg = dir.registry()?;
    let nodes = desc.nodes.len();
    let daemons_left =
        (0..nodes).any(|n| [Role::Nicfs, Role::Kworker].iter().any(|&r| daemons::recorded_pid(dir, r, n).is_some()));
    if !dir.is_up() && reg.mounts.is_empty() && !daemons_left && zookeeper::local_pids(dir).is_empty() {
        return Ok(format!("cluster in {} is already down", dir.root.display()));
    }
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut stopped = 0;
    for rec in std::mem::take(&mut reg.mounts) {
        match crate::mounts::stop_mount(&rec, true) {
            Ok(()) => stopped += 1,
            Err(e) => problems.push(e.to_string()),
        }
    }
    let mut counts = [0usize; 2];
    for (k, role) in [Role::Kworker, Role::Nicfs].into_iter().enumerate() {
        for node in 0..nodes {
            match daemons::stop(dir, role, node) {
                Ok(Stopped::NotRunning) => {}
                Ok(Stopped::Exited(_)) => counts[k] += 1,
                Ok(Stopped::Killed(pid)) => {
                    counts[k] += 1;
                    notes.push(format!(
                        "node {node}'s {} (pid {pid}) did not exit after SIGTERM and was killed (see {})",
                        role.name(),
                        daemons::log_file(dir, role, node).display()
                    ));
                }
                Err(e) => problems.push(e.to_string()),
            }
        }
    }
    // ZooKeeper last: the members have left (a --zk ensemble is not ours to stop).
    let zk_stopped = match zookeeper::stop(dir) {
        Ok(n) => n,
        Err(e) => {
            problems.push(e.to_string());
            0
        }
    };
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
    let mounts = format!("{stopped} mount{}", if stopped == 1 { "" } else { "s" });
    let what = if desc.offload() == Offload::On || counts != [0, 0] {
        format!("{mounts}, {} kworker{} and {} nicfs", counts[0], if counts[0] == 1 { "" } else { "s" }, counts[1])
    } else {
        mounts
    };
    let zk = match zk_stopped {
        0 => String::new(),
        n => format!("; ZooKeeper stopped ({n} server{})", if n == 1 { "" } else { "s" }),
    };
    let mut msg = format!(
        "cluster in {} is down ({what} stopped{zk}; data kept in {})",
        dir.root.display(),
        desc.pm_dir.display()
    );
    for n in notes {
        msg.push_str(&format!("\n  {n}"));
    }
    Ok(msg)
}

/// Makes the cluster key if there is none (a key that is there is kept, never overwritten;
/// nicfs checks its size and mode when it loads it).
fn ensure_key(dir: &ClusterDir) -> CliResult<()> {
    let path = dir.key_path();
    match linefs_peer::ClusterKey::generate(&path) {
        Ok(_) => {
            tracing::info!(path = %path.display(), "cluster key made");
            Ok(())
        }
        Err(linefs_peer::KeyError::Exists { .. }) => Ok(()),
        Err(e) => Err(fail(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clusterdir::NodeDesc;

    #[test]
    fn metrics_ports_are_a_base_or_off() {
        assert_eq!(parse_metrics_port("9100"), Ok(MetricsPort::Base(9100)));
        assert_eq!(parse_metrics_port("0"), Ok(MetricsPort::Base(0)));
        assert_eq!(parse_metrics_port("off"), Ok(MetricsPort::Off));
        for bad in ["65536", "-1", "", "on", "9100x"] {
            assert!(parse_metrics_port(bad).is_err(), "{bad}");
        }
        assert!(check_metrics_port(65535, 1).is_ok());
        assert!(check_metrics_port(0, 3).is_ok(), "port 0: every node picks one");
        let e = check_metrics_port(65534, 3).unwrap_err().to_string();
        assert!(e.contains("node 2 would need port 65536"), "{e}");
    }

    #[test]
    fn up_without_nodes_takes_the_recorded_count_else_the_default() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = ClusterDir::new(&tmp.path().join("c")).unwrap();
        assert_eq!(default_nodes(&dir), DEFAULT_NODES, "no cluster yet");
        std::fs::create_dir_all(&dir.root).unwrap();
        let node = |index| NodeDesc { index, pm_path: PathBuf::from("/pm"), pm_size: 1 };
        let desc = ClusterDesc {
            version: 1,
            created: String::new(),
            created_unix: 0,
            pm_dir: PathBuf::from("/pm"),
            zk: None,
            nodes: (0..5).map(node).collect(),
            offload: Some(Offload::On),
            nic_cpus: None,
            metrics_port: None,
            trusted_group: None,
            nicfs_limits: Vec::new(),
            zk_servers: None,
        };
        write_desc(&dir, &desc).unwrap();
        assert_eq!(default_nodes(&dir), 5);
        std::fs::write(dir.desc_path(), "not json").unwrap();
        assert_eq!(default_nodes(&dir), DEFAULT_NODES, "an unreadable description: the default");
        assert!(nodes_help().contains(&format!("else {DEFAULT_NODES})")), "{}", nodes_help());
    }

    #[test]
    fn limit_flags_become_nicfs_flags() {
        assert_eq!(LimitFlags::default().to_args(), None);
        let l = LimitFlags { max_slots_per_uid: Some(2), kworker_uid: Some(1000), ..Default::default() };
        assert_eq!(l.to_args().unwrap(), ["--max-slots-per-uid", "2", "--kworker-uid", "1000"]);
    }

    #[test]
    fn node_i_serves_metrics_on_base_plus_i() {
        let node = |index| NodeDesc { index, pm_path: PathBuf::from("/pm"), pm_size: 1 };
        let mut desc = ClusterDesc {
            version: 1,
            created: String::new(),
            created_unix: 0,
            pm_dir: PathBuf::from("/pm"),
            zk: None,
            nodes: vec![node(0), node(1)],
            offload: Some(Offload::On),
            nic_cpus: None,
            metrics_port: None,
            trusted_group: None,
            nicfs_limits: Vec::new(),
            zk_servers: None,
        };
        assert_eq!(daemons::metrics_addr(&desc, 1).unwrap(), None);
        desc.metrics_port = Some(9100);
        assert_eq!(daemons::metrics_addr(&desc, 0).unwrap().as_deref(), Some("127.0.0.1:9100"));
        assert_eq!(daemons::metrics_addr(&desc, 1).unwrap().as_deref(), Some("127.0.0.1:9101"));
        desc.metrics_port = Some(0);
        assert_eq!(daemons::metrics_addr(&desc, 1).unwrap().as_deref(), Some("127.0.0.1:0"));
        desc.metrics_port = Some(u16::MAX);
        assert!(daemons::metrics_addr(&desc, 1).is_err());
        // Descriptions written before the option read as "no metrics port".
        let old = r#"{"version":1,"created":"","created_unix":0,"pm_dir":"/pm","zk":null,"nodes":[]}"#;
        assert_eq!(serde_json::from_str::<ClusterDesc>(old).unwrap().metrics_port, None);
    }
}
