//! The status file: a JSON snapshot of the daemon (its pid, node, sessions, mode and
//! kworker, publication counters, stages with their latency quantiles, end-to-end
//! latencies, lease counts, the metrics address), rewritten every [`INTERVAL`], at each
//! mode switch and at exit. Written to a temporary file in the same directory and renamed
//! over the old one, so a reader never sees half a file.

use crate::daemon::ctx::Ctx;
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, Serialize)]
pub(crate) struct Status {
    pub(crate) pid: u32,
    pub(crate) node_dir: String,
    pub(crate) socket: String,
    /// Where `GET /metrics` is served (`--metrics-addr`, its port resolved), if anywhere.
    pub(crate) metrics_addr: Option<String>,
    pub(crate) log_slots: u32,
    /// Log files replaced by fresh ones since start: every slot at start, then one per
    /// session ended ([`crate::node::slots`]).
    pub(crate) log_files_replaced: u64,
    pub(crate) stopping: bool,
    pub(crate) sessions: Vec<SessionStatus>,
    /// The mode (normal / isolated) and the kworker.
    pub(crate) host: crate::host::link::HostStatus,
    /// The publication counters ([`crate::observe::counters`]).
    pub(crate) counters: crate::observe::counters::CounterSnapshot,
    /// The pipeline's stages: queue lengths, threads, work done, wait and service latency.
    pub(crate) stages: Vec<crate::pipeline::stage::StageStatus>,
    /// End-to-end latencies: ChunkReady → Published, Fsync → FsyncDone.
    pub(crate) latency: crate::observe::latency::EndToEndStatus,
    /// The lease table: inodes leased, readers, writers, waiting requests, revokes in
    /// flight, publications awaited, implicit ranges, sessions, and counters since start.
    pub(crate) leases: crate::lease::table::Counts,
    /// Orphans kept because a client holds them open ([`crate::node::opens`]).
    pub(crate) orphans_kept: u64,
    /// Inodes some client holds open.
    pub(crate) inodes_open: u64,
    /// The per-user limits in force ([`crate::limits`]).
    pub(crate) limits: crate::limits::Limits,
    /// Connections of unprivileged users open now.
    pub(crate) unprivileged_connections: u32,
    /// What the limits refused since start, by kind.
    pub(crate) refusals: crate::limits::RefusalCounts,
    /// The node's cluster: ZooKeeper, the session, epoch and chain, the persisted epoch
    /// (null for a node on its own, without `--zk`).
    pub(crate) cluster: Option<crate::daemon::cluster::ClusterStatus>,
    /// The node's peer links (with `--zk`): its listening addresses and, per other member of
    /// the view, each class's connection state, the epoch the peer's messages carry and the
    /// last round trip.
    pub(crate) peers: Option<crate::daemon::peers::PeersStatus>,
    /// Chain replication (with `--zk`): per own log slot and chain member the acknowledged
    /// LSN and the lag (bytes, ms), per replica copy the durable and published LSNs, the
    /// counters.
    pub(crate) replication: Option<crate::daemon::replication::status::ReplicationStatus>,
}

#[derive(Debug, Serialize)]
pub(crate) struct SessionStatus {
    pub(crate) session: u64,
    pub(crate) slot: u32,
    pub(crate) pid: i32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) role: String,
    pub(crate) bulk: bool,
    pub(crate) committed_lsn: u64,
    pub(crate) published_lsn: u64,
    /// Why the session failed (an entry refused) or expired (a revoke not answered in
    /// time), if it did.
    pub(crate) failed: Option<String>,
}

/// The daemon's state now.
pub(super) fn snapshot(ctx: &Ctx) -> Status {
    let (orphans_kept, inodes_open) = ctx.node.opens.counts();
    Status {
        pid: std::process::id(),
        node_dir: ctx.node.dir.display().to_string(),
        socket: ctx.socket.display().to_string(),
        metrics_addr: ctx.metrics_addr.map(|a| a.to_string()),
        log_slots: ctx.node.geometry.log_slots,
        log_files_replaced: ctx.node.log_files_replaced(),
        stopping: ctx.stopping(),
        sessions: ctx
            .sessions
            .all()
            .iter()
            .map(|s| SessionStatus {
                session: s.id,
                slot: s.slot,
                pid: s.cred.pid,
                uid: s.cred.uid,
                gid: s.cred.gid,
                role: format!("{:?}", s.role),
                bulk: s.has_bulk(),
                committed_lsn: s.committed.load(Ordering::Acquire),
                published_lsn: s.published.load(Ordering::Acquire),
                failed: s.failure(),
            })
            .collect(),
        host: ctx.host.status(),
        counters: ctx.node.counters.snapshot(),
        stages: ctx.pipeline.stages(),
        latency: ctx.latency.status(),
        leases: ctx.leases.counts(),
        orphans_kept,
        inodes_open,
        limits: ctx.limits,
        unprivileged_connections: ctx.conns.open(),
        refusals: refusals(ctx),
        cluster: ctx.cluster.as_ref().map(|c| c.status()),
        peers: ctx.cluster.as_ref().map(|c| c.peers()),
        replication: ctx.replication.as_ref().map(|r| r.status()),
    }
}

/// What the per-user limits refused since start, and the resized log files found.
pub(super) fn refusals(ctx: &Ctx) -> crate::limits::RefusalCounts {
    crate::limits::RefusalCounts { log_resized: ctx.node.log_files_resized(), ..ctx.refusals.counts() }
}

/// Writes the status to `path` atomically.
pub(super) fn write(ctx: &Ctx, path: &Path) -> std::io::Result<()> {
    let json = serde_json::to_vec_pretty(&snapshot(ctx)).map_err(std::io::Error::other)?;
    // A name of its own per write: the status thread and the exit may write at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", WRITES.fetch_add(1, Ordering::Relaxed)));
    write_private(Path::new(&tmp), &json)?;
    std::fs::rename(&tmp, path)
}

/// Writes `bytes` to a file of mode 0640 (not world-readable: the status names every
/// session's pid and uid; docs/SECURITY.md), whatever mode an old file there had.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o640).open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o640))?;
    f.write_all(bytes)
}

/// Rewrites the status file every [`INTERVAL`], and at once when `kicked` (a mode switch),
/// until the daemon stops.
pub(super) fn run(ctx: std::sync::Arc<Ctx>, path: std::path::PathBuf, kicked: crossbeam_channel::Receiver<()>) {
    while !ctx.stopping() {
        if let Err(e) = write(&ctx, &path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot write the status file");
        }
        if let Err(crossbeam_channel::RecvTimeoutError::Disconnected) = kicked.recv_timeout(INTERVAL) {
            std::thread::sleep(INTERVAL);
        }
    }
}
