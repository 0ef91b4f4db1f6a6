//! The node's membership of its cluster (`--node-id` and `--zk`): joins through clustermgr's
//! [`Member`], keeps every view it is delivered in the node record (pm's `noderecord`, block 0
//! of the public file) and reports the session's state to the status file (rewritten at once
//! on each change of what it reports, [`Cluster::on_change`]).
//!
//! The clustermgr driver is async: it runs on a tokio runtime of its own, on one thread
//! (`cluster`), so the daemon's threads are untouched. What it does:
//!
//! * **start**: the node record is read; one naming another node id is refused (nicfs does
//!   not start). Its epoch is the join's [`Config::epoch_floor`], so a restarted nicfs never
//!   takes a view at or below one it has persisted, even over a ZooKeeper that lost its data.
//! * **join**: retried for as long as the daemon runs (each attempt retries the connection for
//!   [`JOIN_WITHIN`], then a warning is logged and the next begins after a pause). The node
//!   serves its local clients meanwhile: on a single node there is nothing to replicate.
//! * **each new view**: if its epoch is above the record's, the record becomes
//!   `entering_epoch(epoch, members, chain position)` with this node's id, stored (the
//!   two-slot switch, fenced) *before* the view is reported as current. Members are one bit
//!   per node id below 64 (the record's layout); a larger id is logged and left out.
//! * **ZooKeeper lost**: the session is `suspended` and the driver retries (logged); the last
//!   view stands and the data path is untouched. The session `expired` (lost past its
//!   timeout): the member is dropped and the node joins again as a new incarnation, its
//!   persisted epoch as the floor.
//! * **stop** (SIGTERM): the member leaves (its znode removed, a new view for the others),
//!   bounded by [`LEAVE_WITHIN`].
//!
//! * **inode ranges**: before anything attaches, the node's allocator is switched to the
//!   cluster's ranges (those persisted in the node directory; a list granted to another node
//!   id refuses the start). A refill task on this runtime asks clustermgr for a new range
//!   whenever the allocator runs low ([`crate::node::alloc::Alloc::wanted`]), each request
//!   bounded by [`RANGE_WITHIN`] (a node not joined yet waits that long for its join); with
//!   no member by then (ZooKeeper unreachable) or a failed request, the allocator is told at
//!   once so that a client waiting for a number gets a clear ENOSPC instead of waiting.
//!
//! The member's addresses for the two peer connection classes (low-latency and bulk) are
//! those its peer listeners ([`crate::daemon::peers`]) are bound to; each view persisted is
//! then handed to them, so the node links to the view's other members, and to the
//! replication driver ([`crate::daemon::replication`]: its epoch and the chain order), after
//! it is persisted.

use crate::config::ClusterConfig;
use crate::daemon::peers::{Peers, PeersStatus};
use crate::daemon::replication::Feed;
use crate::node::Node;
use clustermgr::{Addrs, Config, Member, SessionStatus, View};
use linefs_pm::noderecord::NodeRecord;
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// How long one join attempt tries to reach ZooKeeper and be in a view.
const JOIN_WITHIN: Duration = Duration::from_secs(10);
/// The pause between join attempts.
const REJOIN_PAUSE: Duration = Duration::from_secs(1);
/// How long a stopping daemon waits for the member to leave.
const LEAVE_WITHIN: Duration = Duration::from_secs(2);
/// How long one inode range request may take before the allocator is told it failed.
const RANGE_WITHIN: Duration = Duration::from_secs(3);

/// The cluster as the status file shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct ClusterStatus {
    pub(crate) node_id: u32,
    /// The ZooKeeper connection string.
    pub(crate) zk: String,
    /// `joining`, `connected`, `suspended` (ZooKeeper lost, the session maybe alive),
    /// `expired`, `closed`.
    pub(crate) session: &'static str,
    /// The session has been suspended long enough that ZooKeeper may have expired it.
    pub(crate) may_be_expired: bool,
    /// The current view's epoch (0: none yet).
    pub(crate) epoch: u64,
    /// Node ids in chain order, head first.
    pub(crate) chain: Vec<u32>,
    /// This node's position in the chain.
    pub(crate) chain_pos: Option<u32>,
    /// The epoch the node record holds.
    pub(crate) persisted_epoch: u64,
    /// Joins completed since start (more than 1: the session expired and the node joined
    /// again).
    pub(crate) joins: u64,
    /// The session timeout asked for (`--zk-session-ms`) until a join, then the one
    /// ZooKeeper granted, in ms: a crashed member leaves the view about this long after it.
    pub(crate) session_timeout_ms: u64,
    /// The last failure (a join that did not complete, a record that could not be stored).
    pub(crate) last_error: Option<String>,
}

/// The status as reported, and who to tell when it changes (the status file's writer, which
/// otherwise rewrites the file once a second: a suspended session shows at once).
struct Reported {
    status: Mutex<ClusterStatus>,
    kick: Mutex<Option<crossbeam_channel::Sender<()>>>,
}

impl Reported {
    fn lock(&self) -> Changes<'_> {
        let guard = self.status.lock();
        let before = guard.clone();
        Changes { kick: &self.kick, guard, before }
    }
}

/// The status held for a change: when dropped, the writer is kicked if anything differs.
struct Changes<'a> {
    kick: &'a Mutex<Option<crossbeam_channel::Sender<()>>>,
    guard: parking_lot::MutexGuard<'a, ClusterStatus>,
    before: ClusterStatus,
}

impl std::ops::Deref for Changes<'_> {
    type Target = ClusterStatus;
    fn deref(&self) -> &ClusterStatus {
        &self.guard
    }
}

impl std::ops::DerefMut for Changes<'_> {
    fn deref_mut(&mut self) -> &mut ClusterStatus {
        &mut self.guard
    }
}

impl Drop for Changes<'_> {
    fn drop(&mut self) {
        if *self.guard != self.before {
            if let Some(tx) = &*self.kick.lock() {
                let _ = tx.try_send(());
            }
        }
    }
}

/// The node's membership; [`start`] runs it, [`Cluster::stop`] ends it.
pub(crate) struct Cluster {
    state: Arc<Reported>,
    peers: Peers,
    stop: tokio::sync::watch::Sender<bool>,
    done: crossbeam_channel::Receiver<()>,
}

fn session_name(s: SessionStatus) -> &'static str {
    match s {
        SessionStatus::Connected => "connected",
        SessionStatus::Suspended => "suspended",
        SessionStatus::Expired => "expired",
        SessionStatus::Closed => "closed",
    }
}

/// Reads the node record, checks it names no other node, starts the peer links (the key
/// loaded, both ports bound) and the `cluster` thread.
pub(crate) fn start(node: Arc<Node>, c: &ClusterConfig, feed: Option<Feed>) -> Result<Cluster, String> {
    let (node_id, zk, session_timeout) = (c.node_id, c.zk.clone(), c.session_timeout);
    let rec = NodeRecord::load(node.public_file()).map_err(|e| format!("cannot read the node record: {e}"))?;
    // Before anything attaches: inode numbers only from this node's cluster ranges.
    node.alloc.use_cluster_ranges(&node.dir, node_id)?;
    if let Some(id) = rec.node_id {
        if id != node_id {
            return Err(format!("the node record says this is node {id}, not node {node_id} (--node-id)"));
        }
    }
    let state = Arc::new(Reported {
        kick: Mutex::new(None),
        status: Mutex::new(ClusterStatus {
            node_id,
            zk: zk.clone(),
            session: "joining",
            may_be_expired: false,
            epoch: 0,
            chain: Vec::new(),
            chain_pos: None,
            persisted_epoch: rec.epoch,
            joins: 0,
            session_timeout_ms: u64::try_from(session_timeout.as_millis()).unwrap_or(u64::MAX),
            last_error: None,
        }),
    });
    let inbox = feed.as_ref().map(Feed::inbox);
    let peers = Peers::start(node_id, &c.key, c.peer_addr, c.bulk_addr, inbox)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build the cluster runtime: {e}"))?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let (done_tx, done) = crossbeam_channel::bounded(1);
    let s = state.clone();
    let p = peers.clone();
    let mut cfg = Config::new(&zk);
    cfg.session_timeout = session_timeout;
    std::thread::Builder::new()
        .name("cluster".into())
        .spawn(move || {
            rt.block_on(membership(node, node_id, cfg, p, feed, s, stopped));
            let _ = done_tx.send(());
        })
        .map_err(|e| format!("cannot start the cluster thread: {e}"))?;
    tracing::info!(node_id, persisted_epoch = rec.epoch, "joining the cluster");
    Ok(Cluster { state, peers, stop, done })
}

impl Cluster {
    pub(crate) fn status(&self) -> ClusterStatus {
        self.state.status.lock().clone()
    }

    /// Sends `()` on `tx` (without blocking) whenever the status changes.
    pub(crate) fn on_change(&self, tx: crossbeam_channel::Sender<()>) {
        *self.state.kick.lock() = Some(tx);
    }

    /// The peer links.
    pub(crate) fn peers(&self) -> PeersStatus {
        self.peers.status()
    }

    /// The peer links themselves (replication sends on them).
    pub(crate) fn links(&self) -> Peers {
        self.peers.clone()
    }

    /// Leaves the cluster (bounded by [`LEAVE_WITHIN`]) and closes the peer links.
    pub(crate) fn stop(&self) {
        let _ = self.stop.send(true);
        if self.done.recv_timeout(LEAVE_WITHIN + Duration::from_millis(500)).is_err() {
            tracing::warn!("the cluster membership did not end in time");
        }
        self.peers.stop();
    }
}

/// Joins and rejoins until stopped.
async fn membership(
    node: Arc<Node>,
    node_id: u32,
    mut cfg: Config,
    peers: Peers,
    feed: Option<Feed>,
    state: Arc<Reported>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    let (ll, bulk) = peers.addrs();
    let addrs = Addrs { low_latency: ll.to_string(), bulk: bulk.to_string() };
    let (current, member_rx) = tokio::sync::watch::channel(None::<Arc<Member>>);
    let refill = tokio::spawn(refill_ranges(node.clone(), member_rx));
    while !*stopped.borrow() {
        cfg.connect_within = JOIN_WITHIN;
        cfg.op_within = JOIN_WITHIN;
        cfg.epoch_floor = state.lock().persisted_epoch;
        // Over a ZooKeeper that lost its data, the counter starts above this node's ranges.
        cfg.first_inode = node.alloc.cluster_ranges().last().map_or(cfg.first_inode, |r| r.end.max(cfg.first_inode));
        let joined = tokio::select! {
            r = Member::join(&cfg, node_id, addrs.clone()) => r,
            _ = stopped.changed() => return,
        };
        let member = match joined {
            Ok(m) => {
                // The refill task asks clustermgr for inode ranges through this member.
                let m = Arc::new(m);
                current.send_replace(Some(m.clone()));
                node.alloc.want_signal().notify_one();
                m
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot join the cluster; retrying in {REJOIN_PAUSE:?}");
                {
                    let mut st = state.lock();
                    st.last_error = Some(e.to_string());
                    st.session = "joining";
                    st.may_be_expired = false;
                }
                tokio::select! {
                    _ = tokio::time::sleep(REJOIN_PAUSE) => continue,
                    _ = stopped.changed() => return,
                }
            }
        };
        {
            let mut st = state.lock();
            st.joins += 1;
            st.session_timeout_ms = u64::try_from(member.session_timeout().as_millis()).unwrap_or(u64::MAX);
        }
        let ended = follow(&node, &member, &peers, feed.as_ref(), &state, &mut stopped).await;
        match ended {
            Ended::Stopped => {
                current.send_replace(None);
                refill.abort();
                let _ = refill.await;
                match Arc::try_unwrap(member) {
                    Ok(member) => {
                        let _ = tokio::time::timeout(LEAVE_WITHIN, member.leave()).await;
                    }
                    Err(member) => drop(member),
                }
                state.lock().session = "closed";
                tracing::info!("left the cluster");
                return;
            }
            Ended::Expired => {
                current.send_replace(None);
                tracing::warn!("ZooKeeper session expired: joining the cluster again");
                drop(member);
                let mut st = state.lock();
                st.session = "joining";
                st.may_be_expired = false;
            }
        }
    }
}

enum Ended {
    Stopped,
    Expired,
}

/// Asks clustermgr for an inode range each time the allocator runs low, for as long as the
/// daemon runs; `member` is the joined member (None between joins).
async fn refill_ranges(node: Arc<Node>, member: tokio::sync::watch::Receiver<Option<Arc<Member>>>) {
    let want = node.alloc.want_signal();
    let len = node.alloc.range_len();
    loop {
        if !node.alloc.wanted() {
            want.notified().await;
            continue;
        }
        // Not joined yet (a node just started): the join is waited for, bounded.
        let now = member.borrow().clone();
        let m = match now {
            Some(m) => Some(m),
            None => {
                let mut rx = member.clone();
                let joined = tokio::time::timeout(RANGE_WITHIN, rx.wait_for(Option::is_some)).await.is_ok();
                if joined {
                    rx.borrow().clone()
                } else {
                    None
                }
            }
        };
        let failed = match m {
            None => Some("not joined to the cluster (ZooKeeper unreachable or joining)".to_string()),
            Some(m) => match tokio::time::timeout(RANGE_WITHIN, m.alloc_inode_range(len)).await {
                Ok(Ok(r)) => node.alloc.add_range(r).err().inspect(|e| {
                    tracing::error!(start = r.start, end = r.end, error = %e, "cannot use an inode range");
                }),
                Ok(Err(e)) => Some(format!("ZooKeeper: {e}")),
                Err(_) => Some(format!("ZooKeeper did not grant an inode range within {RANGE_WITHIN:?}")),
            },
        };
        if let Some(why) = failed {
            tracing::warn!(error = %why, "no new inode range");
            node.alloc.range_failed(why);
            // Asked again only when wanted again (a grant running low, a client waiting, a join).
            want.notified().await;
        }
    }
}

/// Persists and reports every view and session change of `member` until it expires or the
/// daemon stops.
async fn follow(
    node: &Node,
    member: &Member,
    peers: &Peers,
    feed: Option<&Feed>,
    state: &Reported,
    stopped: &mut tokio::sync::watch::Receiver<bool>,
) -> Ended {
    let mut views = member.views();
    let mut statuses = member.statuses();
    let mut was = None;
    loop {
        let view = views.borrow_and_update().clone();
        if let Some(v) = view {
            if persist(node, member.me().node, &v, state) {
                let members: Vec<(u32, String, String)> =
                    v.chain.iter().map(|m| (m.node, m.addrs.low_latency.clone(), m.addrs.bulk.clone())).collect();
                peers.set_view(v.epoch, &members);
                if let Some(feed) = feed {
                    feed.view(v.epoch, v.chain.iter().map(|m| m.node).collect());
                }
            }
        }
        let s = *statuses.borrow_and_update();
        if was != Some(s) {
            match s {
                SessionStatus::Connected => tracing::info!("ZooKeeper session connected"),
                SessionStatus::Suspended => {
                    tracing::warn!("ZooKeeper lost: the session is suspended, the driver retries; serving on")
                }
                _ => {}
            }
            was = Some(s);
        }
        {
            let mut st = state.lock();
            st.session = session_name(s);
            st.may_be_expired = member.may_be_expired();
        }
        if matches!(s, SessionStatus::Expired | SessionStatus::Closed) {
            return Ended::Expired;
        }
        tokio::select! {
            r = views.changed() => if r.is_err() { return Ended::Expired },
            r = statuses.changed() => if r.is_err() { return Ended::Expired },
            // `may_be_expired` turns true with time alone.
            _ = tokio::time::sleep(Duration::from_millis(250)), if s == SessionStatus::Suspended => {}
            _ = stopped.changed() => return Ended::Stopped,
        }
    }
}

/// Stores `view` in the node record if it is newer than what the record holds, then makes it
/// the reported view. False: it could not be stored (and is not the node's view).
fn persist(node: &Node, me: u32, view: &View, state: &Reported) -> bool {
    let chain: Vec<u32> = view.chain.iter().map(|m| m.node).collect();
    let pos = view.position(me).and_then(|p| u32::try_from(p).ok());
    let persisted = state.lock().persisted_epoch;
    if view.epoch > persisted {
        let mut members = 0u64;
        for &id in &chain {
            match 1u64.checked_shl(id) {
                Some(bit) => members |= bit,
                None => tracing::warn!(node = id, "node id past 63: not in the node record's member set"),
            }
        }
        let region = node.public_file();
        let stored = NodeRecord::load(region).and_then(|rec| {
            let now_ns = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            let next = NodeRecord { node_id: Some(me), ..rec.entering_epoch(view.epoch, members, pos, now_ns) };
            NodeRecord::store(region, &next)
        });
        match stored {
            Ok(rec) => {
                tracing::info!(epoch = view.epoch, ?chain, chain_pos = ?pos, seq = rec.seq, "new view persisted");
                state.lock().persisted_epoch = rec.epoch;
            }
            Err(e) => {
                // Not reported as current: the status keeps the last persisted view.
                tracing::error!(epoch = view.epoch, error = %e, "cannot persist the new view in the node record");
                state.lock().last_error = Some(format!("persisting epoch {}: {e}", view.epoch));
                return false;
            }
        }
    }
    let mut st = state.lock();
    st.epoch = view.epoch;
    st.chain = chain;
    st.chain_pos = pos;
    true
}
