//! The async driver over `zookeeper-client` (tokio): joins a node, keeps its view current,
//! cuts inode ranges, delegates root leases, and reports the session's state.
//!
//! One task runs membership rounds (read the view with a watch, list the members with a
//! watch, let [`Membership`] decide, write by compare-and-set) and waits for either watch,
//! a reconnection or a periodic resync; another follows the session state. ZooKeeper
//! unreachable: every call retries with a logged, capped exponential backoff until its
//! deadline and then answers a one-line [`Error`]; nothing panics and no view goes
//! backwards. Only one-shot watches are used (ZOOKEEPER-4466: mixing modes on one path
//! in one session breaks child watches).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use zookeeper_client as zk;

use crate::error::Error;
use crate::format::{
    decode_range_owner, encode_member, encode_range_owner, Addrs, Delegation, MemberEntry, NodeId, Paths, View,
};
use crate::inodes::{cut, CutError, InodeRange};
use crate::lease::{step, Step};
use crate::membership::{MemberRead, Membership, ViewRead, Write};

/// How a node reaches and uses ZooKeeper.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port,host:port,…`
    pub connect: String,
    /// The cluster's root znode (`/linefs`).
    pub root: String,
    /// The session timeout: a crashed node leaves the view this long after its last
    /// message, rounded up to the server's next tick (the server clamps it into its bounds,
    /// 0.2–10 s for the loopback server, [`crate::server::MAX_SESSION_MS`]). Default
    /// [`DEFAULT_SESSION_TIMEOUT`].
    pub session_timeout: Duration,
    /// How long `join` tries to reach ZooKeeper before it gives up.
    pub connect_within: Duration,
    /// How long one operation retries through a ZooKeeper outage before it gives up.
    pub op_within: Duration,
    /// The first inode number the cluster hands out (used when the counter is created).
    pub first_inode: u64,
    /// The epoch this node last persisted (0: none): no view at or below it is delivered,
    /// and views this node writes are above it, even over a ZooKeeper whose data was lost.
    pub epoch_floor: u64,
    /// Close the session when the member is dropped (`false` leaves it to expire, as a
    /// crash would: for tests).
    pub close_on_drop: bool,
}

/// The session timeout members ask for unless told otherwise. A crashed member leaves the
/// others' view within 2 s (issue 24): the client sends something at least every 3/20 of the
/// timeout (its pings), the server expires the session at the first tick past its last
/// message + the timeout, and the others' next round takes milliseconds — so detection lies
/// in (timeout − 3/20 timeout, timeout + tick], 1.3–1.6 s with 1.5 s and the loopback
/// server's 100 ms tick ([`crate::server::TICK_MS`]).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_millis(1500);

impl Config {
    pub fn new(connect: &str) -> Config {
        Config {
            connect: connect.to_string(),
            root: "/linefs".to_string(),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            connect_within: Duration::from_secs(10),
            op_within: Duration::from_secs(30),
            first_inode: 2,
            epoch_floor: 0,
            close_on_drop: true,
        }
    }
}

/// The ZooKeeper session as the daemon sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionStatus {
    /// Connected: the view is being kept current.
    Connected,
    /// Disconnected, the session maybe still alive (ZooKeeper lost or being failed over):
    /// membership changes wait, the last view stands.
    Suspended,
    /// The session expired: this node is no longer a member (go read-only, join again).
    Expired,
    /// Closed by us.
    Closed,
}

fn status_of(s: zk::SessionState) -> SessionStatus {
    match s {
        zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => SessionStatus::Connected,
        zk::SessionState::Disconnected => SessionStatus::Suspended,
        zk::SessionState::Expired | zk::SessionState::AuthFailed => SessionStatus::Expired,
        zk::SessionState::Closed => SessionStatus::Closed,
    }
}

const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// A round runs at least this often even without a watch firing.
const RESYNC: Duration = Duration::from_secs(2);

struct Shared {
    client: zk::Client,
    paths: Paths,
    cfg: Config,
    me: MemberEntry,
    views: watch::Sender<Option<View>>,
    status: watch::Sender<SessionStatus>,
    membership: Mutex<Membership>,
    kick: Notify,
    /// When the session last went from connected to suspended (None while connected).
    suspended_at: Mutex<Option<Instant>>,
}

/// A joined node.
pub struct Member {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

fn persistent() -> zk::CreateOptions<'static> {
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all())
}

/// Errors after which the same request may succeed later (a lost or reset connection, a
/// server busy or between leaders). A write whose answer was lost is read back by the
/// retry, never assumed done or undone.
fn transient(e: &zk::Error) -> bool {
    matches!(
        e,
        zk::Error::ConnectionLoss
            | zk::Error::Timeout
            | zk::Error::NoHosts
            | zk::Error::ClientClosed
            | zk::Error::Throttled
            | zk::Error::SessionMoved
            | zk::Error::NotReadOnly
            | zk::Error::UnexpectedError(_)
            | zk::Error::UnexpectedErrorCode(_)
            | zk::Error::RuntimeInconsistent
            | zk::Error::Custom(_)
    )
}

async fn connect(cfg: &Config) -> Result<zk::Client, Error> {
    let start = Instant::now();
    let mut backoff = BACKOFF_MIN;
    let mut last = String::from("no attempt");
    loop {
        let left = cfg.connect_within.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(Error::Unreachable { connect: cfg.connect.clone(), waited: cfg.connect_within, last });
        }
        let mut c = zk::Client::connector()
            .with_session_timeout(cfg.session_timeout)
            // Above 3/5 of the session timeout, so the client counts a connection dead
            // after 2/5 of it without an answer (`may_be_expired` relies on it); `left`
            // bounds the whole attempt below.
            .with_connection_timeout(cfg.session_timeout)
            .with_fail_eagerly();
        if !cfg.close_on_drop {
            c = c.with_detached();
        }
        match tokio::time::timeout(left, c.connect(&cfg.connect)).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(e)) => last = e.to_string(),
            Err(_) => last = "timed out".to_string(),
        }
        tracing::warn!(connect = %cfg.connect, error = %last, "ZooKeeper unreachable; retrying in {backoff:?}");
        tokio::time::sleep(backoff.min(cfg.connect_within.saturating_sub(start.elapsed()))).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

async fn ensure(client: &zk::Client, path: &str) -> Result<(), Error> {
    match client.create(path, &[], &persistent()).await {
        Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
        Err(err) => Err(Error::Zk { op: "create", path: path.to_string(), err }),
    }
}

impl Member {
    /// Joins the cluster as `node` reachable at `addrs`: connects (retrying until
    /// `connect_within`), registers the member znode, and returns once a view holding this
    /// node is published (within `op_within`).
    pub async fn join(cfg: &Config, node: NodeId, addrs: Addrs) -> Result<Member, Error> {
        let data = encode_member(node, &addrs).map_err(|_| Error::Invalid("address longer than 255 bytes"))?;
        let paths = Paths::new(&cfg.root);
        if !paths.root.starts_with('/') || paths.root.len() < 2 {
            return Err(Error::Invalid("the root znode must be an absolute path below /"));
        }
        let client = connect(cfg).await?;
        let mut prefix = String::new();
        for part in paths.root.split('/').skip(1) {
            prefix.push('/');
            prefix.push_str(part);
            ensure(&client, &prefix).await?;
        }
        ensure(&client, &paths.members()).await?;
        ensure(&client, &paths.leases()).await?;
        ensure(&client, &paths.inode_ranges()).await?;
        let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let (_, seq) = client.create(&paths.member_prefix(), &data, &opts).await.map_err(|err| Error::Zk {
            op: "create",
            path: paths.member_prefix(),
            err,
        })?;
        let seq = u64::try_from(seq.into_i64()).map_err(|_| Error::Invalid("negative znode sequence"))?;
        let me = MemberEntry { node, seq, addrs };
        tracing::info!(node, seq, session = %client.session_id(), "joined");
        let (views, _) = watch::channel(None);
        let (status, _) = watch::channel(SessionStatus::Connected);
        let shared = Arc::new(Shared {
            client,
            paths,
            cfg: cfg.clone(),
            me,
            views,
            status,
            membership: Mutex::new(Membership::with_floor(cfg.epoch_floor)),
            kick: Notify::new(),
            suspended_at: Mutex::new(None),
        });
        let tasks = vec![tokio::spawn(follow_state(shared.clone())), tokio::spawn(run_rounds(shared.clone()))];
        let member = Member { shared, tasks };
        match member.wait_view(cfg.op_within, |v| v.contains(node, seq)).await {
            Ok(_) => Ok(member),
            Err(Error::Timeout { waited, last, .. }) => Err(Error::Timeout {
                op: "a view holding this node (an earlier session of the same node id not yet expired?)",
                waited,
                last,
            }),
            Err(e) => Err(e),
        }
    }

    /// This node as registered (its incarnation is `seq`).
    pub fn me(&self) -> &MemberEntry {
        &self.shared.me
    }

    /// The session timeout ZooKeeper granted (a crashed node leaves the view this long
    /// after its last heartbeat).
    pub fn session_timeout(&self) -> Duration {
        self.shared.client.session_timeout()
    }

    /// The newest view delivered.
    pub fn view(&self) -> Option<View> {
        self.shared.views.borrow().clone()
    }

    /// Every newer view as it is delivered.
    pub fn views(&self) -> watch::Receiver<Option<View>> {
        self.shared.views.subscribe()
    }

    /// The session's state now.
    pub fn status(&self) -> SessionStatus {
        *self.shared.status.borrow()
    }

    /// Whether ZooKeeper may already have expired this node's session, so that the others
    /// may have a view without it: the session expired or closed, or it has been suspended
    /// for half the session timeout or more. The client counts a connection dead after
    /// 2/5 of the timeout without an answer, so the server last heard it at most that long
    /// before the suspension began and cannot expire it before 3/5 of the timeout after; half
    /// leaves a margin. A node for which this holds must accept no write it cannot
    /// replicate (issue 24) — the client itself says `Expired` only at 7/5 of the timeout.
    pub fn may_be_expired(&self) -> bool {
        match self.status() {
            SessionStatus::Connected => false,
            SessionStatus::Expired | SessionStatus::Closed => true,
            SessionStatus::Suspended => {
                let since = *self.shared.suspended_at.lock().unwrap_or_else(|p| p.into_inner());
                since.is_none_or(|t| t.elapsed() >= self.session_timeout() / 2)
            }
        }
    }

    /// The session's state as it changes.
    pub fn statuses(&self) -> watch::Receiver<SessionStatus> {
        self.shared.status.subscribe()
    }

    /// Waits (at most `within`) for a view satisfying `pred`; an expired or closed session
    /// ends the wait at once.
    pub async fn wait_view(&self, within: Duration, pred: impl Fn(&View) -> bool) -> Result<View, Error> {
        let mut rx = self.views();
        let mut st = self.statuses();
        let wait = async {
            loop {
                if let Some(v) = rx.borrow_and_update().clone() {
                    if pred(&v) {
                        return Ok(v);
                    }
                }
                match *st.borrow_and_update() {
                    SessionStatus::Expired => return Err(Error::SessionExpired),
                    SessionStatus::Closed => return Err(Error::Closed),
                    _ => {}
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { return Err(Error::Closed) },
                    r = st.changed() => if r.is_err() { return Err(Error::Closed) },
                }
            }
        };
        match tokio::time::timeout(within, wait).await {
            Ok(r) => r,
            Err(_) => Err(Error::Timeout { op: "a view", waited: within, last: format!("{:?}", self.view()) }),
        }
    }

    /// Retries `attempt` through transient ZooKeeper errors until `op_within`.
    async fn retry<T, F, Fut>(&self, op: &'static str, mut attempt: F) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, Error>>,
    {
        let within = self.shared.cfg.op_within;
        let start = Instant::now();
        let mut backoff = BACKOFF_MIN;
        let mut last = String::from("no attempt");
        loop {
            match self.status() {
                SessionStatus::Expired => return Err(Error::SessionExpired),
                SessionStatus::Closed => return Err(Error::Closed),
                _ => {}
            }
            let left = within.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(Error::Timeout { op, waited: within, last });
            }
            match tokio::time::timeout(left, attempt()).await {
                Ok(Ok(Some(v))) => return Ok(v),
                // A compare-and-set lost a race: read again at once.
                Ok(Ok(None)) => continue,
                Ok(Err(Error::Zk { err: zk::Error::SessionExpired, .. })) => return Err(Error::SessionExpired),
                Ok(Err(Error::Zk { op: zop, path, err })) if transient(&err) => {
                    last = format!("{zop} {path}: {err}");
                    tracing::warn!(op, error = %last, "ZooKeeper unavailable; retrying in {backoff:?}");
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => last = "timed out".to_string(),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Cuts `n` cluster-wide unique inode numbers for this node. A range returned is never
    /// returned again to anyone, across ZooKeeper restarts of the same data directory; it is
    /// recorded with this node as its owner (`inode-ranges/<start>`) in the same
    /// multi-operation as the counter's write, so [`Member::inode_ranges`] lists it.
    pub async fn alloc_inode_range(&self, n: u64) -> Result<InodeRange, Error> {
        if n == 0 {
            return Err(Error::Invalid("an inode range of 0 numbers"));
        }
        let s = &self.shared;
        let path = s.paths.inodes();
        let range = self
            .retry("alloc_inode_range", || async {
                let zk_err = |op, err| Error::Zk { op, path: path.clone(), err };
                let (current, version) = match s.client.get_data(&path).await {
                    Ok((d, stat)) => (Some(d), Some(stat.version)),
                    Err(zk::Error::NoNode) => (None, None),
                    Err(e) => return Err(zk_err("get", e)),
                };
                let (range, next) = cut(current.as_deref(), n, s.cfg.first_inode).map_err(|e| match e {
                    CutError::Empty => Error::Invalid("an inode range of 0 numbers"),
                    CutError::Exhausted => Error::Exhausted,
                    CutError::Format(err) => Error::Format { path: path.clone(), err },
                })?;
                let owner = encode_range_owner(s.me.node, range.start, range.end);
                let mut w = s.client.new_multi_writer();
                let added = match version {
                    Some(v) => w.add_set_data(&path, &next, Some(v)),
                    None => w.add_create(&path, &next, &persistent()),
                }
                .and_then(|()| w.add_create(&s.paths.inode_range(range.start), &owner, &persistent()));
                added.map_err(|e| zk_err("multi", e))?;
                match w.commit().await {
                    Ok(_) => Ok(Some(range)),
                    Err(zk::MultiWriteError::OperationFailed {
                        source: zk::Error::BadVersion | zk::Error::NodeExists,
                        ..
                    }) => Ok(None),
                    Err(zk::MultiWriteError::OperationFailed { source, .. })
                    | Err(zk::MultiWriteError::RequestFailed { source }) => Err(zk_err("write", source)),
                }
            })
            .await?;
        tracing::debug!(start = range.start, end = range.end, "inode range");
        Ok(range)
    }

    /// Every inode range cut so far and the node it went to, by start (an owner record that
    /// does not decode is logged and left out).
    pub async fn inode_ranges(&self) -> Result<Vec<(NodeId, InodeRange)>, Error> {
        let s = &self.shared;
        let dir = s.paths.inode_ranges();
        self.retry("inode_ranges", || async {
            let zk_err = |op, path: &str, err| Error::Zk { op, path: path.to_string(), err };
            let names = match s.client.list_children(&dir).await {
                Ok(n) => n,
                Err(zk::Error::NoNode) => return Ok(Some(Vec::new())),
                Err(e) => return Err(zk_err("list", &dir, e)),
            };
            let mut out = Vec::with_capacity(names.len());
            for name in names {
                let path = format!("{dir}/{name}");
                match s.client.get_data(&path).await {
                    Ok((d, _)) => match decode_range_owner(&d) {
                        Ok((owner, start, end)) => out.push((owner, InodeRange { start, end })),
                        Err(err) => tracing::warn!(znode = %path, %err, "ignoring an undecodable inode range record"),
                    },
                    Err(zk::Error::NoNode) => {}
                    Err(e) => return Err(zk_err("get", &path, e)),
                }
            }
            out.sort_by_key(|(_, r)| r.start);
            Ok(Some(out))
        })
        .await
    }

    /// The lease manager that owns the root lease of the subtree rooted at `subtree`:
    /// this node claims it if nobody holds it, or takes it over from a node gone from the
    /// view (paper §3.5).
    pub async fn delegate(&self, subtree: u64) -> Result<Delegation, Error> {
        let s = &self.shared;
        let path = s.paths.lease(subtree);
        self.retry("delegate", || async {
            let zk_err = |op, err| Error::Zk { op, path: path.clone(), err };
            let Some(view) = self.view() else { return Ok(None) };
            let existing = match s.client.get_data(&path).await {
                Ok((d, stat)) => Some((d, stat.version)),
                Err(zk::Error::NoNode) => None,
                Err(e) => return Err(zk_err("get", e)),
            };
            let decided = step(existing.as_ref().map(|(d, v)| (d.as_slice(), *v)), subtree, &view, &s.me)
                .map_err(|err| Error::Format { path: path.clone(), err })?;
            let written = match decided {
                Step::Owned(d) => return Ok(Some(d)),
                Step::NotMember => return Err(Error::NotMember(s.me.node)),
                Step::Stale { granted_epoch } => {
                    let _ = self.wait_view(s.cfg.op_within, |v| v.epoch >= granted_epoch).await;
                    return Ok(None);
                }
                Step::Claim { record, data } => s.client.create(&path, &data, &persistent()).await.map(|_| record),
                Step::TakeOver { record, data, expected_version } => {
                    tracing::info!(subtree, from = ?existing.as_ref().map(|e| e.1), "taking over a root lease");
                    s.client.set_data(&path, &data, Some(expected_version)).await.map(|_| record)
                }
            };
            match written {
                Ok(d) => Ok(Some(d)),
                Err(zk::Error::BadVersion | zk::Error::NodeExists) => Ok(None),
                Err(e) => Err(zk_err("write", e)),
            }
        })
        .await
    }

    /// Leaves the cluster: closes the session (its member znode goes at once).
    pub async fn leave(mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        self.shared.status.send_replace(SessionStatus::Closed);
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn follow_state(s: Arc<Shared>) {
    let mut w = s.client.state_watcher();
    let mut last = status_of(w.peek_state());
    s.status.send_replace(last);
    loop {
        let state = w.changed().await;
        let now = status_of(state);
        if now != last {
            match now {
                SessionStatus::Connected => tracing::info!(node = s.me.node, "ZooKeeper session connected"),
                SessionStatus::Suspended => {
                    tracing::warn!(node = s.me.node, "ZooKeeper disconnected; membership changes wait, retrying")
                }
                SessionStatus::Expired => {
                    tracing::error!(node = s.me.node, "ZooKeeper session expired: this node left the view")
                }
                SessionStatus::Closed => tracing::info!(node = s.me.node, "ZooKeeper session closed"),
            }
        }
        {
            let mut at = s.suspended_at.lock().unwrap_or_else(|p| p.into_inner());
            match now {
                SessionStatus::Suspended => {
                    at.get_or_insert_with(Instant::now);
                }
                SessionStatus::Connected => *at = None,
                _ => {}
            }
        }
        last = now;
        s.status.send_replace(now);
        s.kick.notify_one();
        if state.is_terminated() {
            return;
        }
    }
}

/// What a round leaves to wait on.
enum Round {
    /// Wait for either watch.
    Wait(zk::OneshotWatcher, zk::OneshotWatcher),
    /// Something was written or raced: run again at once.
    Again,
}

async fn run_rounds(s: Arc<Shared>) {
    let mut cache: HashMap<String, Vec<u8>> = HashMap::new();
    let mut backoff = BACKOFF_MIN;
    loop {
        if matches!(*s.status.borrow(), SessionStatus::Expired | SessionStatus::Closed) {
            return;
        }
        match round(&s, &mut cache).await {
            Ok(Round::Again) => backoff = BACKOFF_MIN,
            Ok(Round::Wait(vw, cw)) => {
                backoff = BACKOFF_MIN;
                tokio::select! {
                    _ = vw.changed() => {}
                    _ = cw.changed() => {}
                    _ = s.kick.notified() => {}
                    _ = tokio::time::sleep(RESYNC) => {}
                }
            }
            Err(zk::Error::SessionExpired) => {
                s.status.send_replace(SessionStatus::Expired);
                tracing::error!(node = s.me.node, "ZooKeeper session expired: this node left the view");
                return;
            }
            Err(e) => {
                tracing::warn!(node = s.me.node, error = %e, "membership round failed; retrying in {backoff:?}");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = s.kick.notified() => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

async fn round(s: &Shared, cache: &mut HashMap<String, Vec<u8>>) -> Result<Round, zk::Error> {
    let vpath = s.paths.view();
    // The view first, then the members (see the membership module).
    let (read, vw) = match s.client.get_and_watch_data(&vpath).await {
        Ok((data, stat, w)) => (ViewRead::Present { data, version: stat.version }, w),
        Err(zk::Error::NoNode) => match s.client.check_and_watch_stat(&vpath).await? {
            (Some(_), _) => return Ok(Round::Again),
            (None, w) => (ViewRead::Absent, w),
        },
        Err(e) => return Err(e),
    };
    let (names, _, cw) = s.client.get_and_watch_children(&s.paths.members()).await?;
    cache.retain(|k, _| names.contains(k));
    let mut reads = Vec::with_capacity(names.len());
    for name in names {
        let data = match cache.get(&name) {
            Some(d) => d.clone(),
            None => match s.client.get_data(&format!("{}/{name}", s.paths.members())).await {
                Ok((d, _)) => {
                    cache.insert(name.clone(), d.clone());
                    d
                }
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(e),
            },
        };
        reads.push(MemberRead { name, data });
    }
    let decision = {
        let mut m = s.membership.lock().unwrap_or_else(|p| p.into_inner());
        match m.round(&read, &reads) {
            Ok(d) => d,
            Err(err) => {
                tracing::error!(path = %vpath, %err, "the view znode holds data this build refuses; not writing over it");
                return Ok(Round::Wait(vw, cw));
            }
        }
    };
    for (name, err) in &decision.skipped {
        tracing::warn!(znode = %name, %err, "ignoring an undecodable member znode");
    }
    if let Some(v) = decision.deliver {
        deliver(s, v);
    }
    let Some((next, write)) = decision.write else { return Ok(Round::Wait(vw, cw)) };
    let written = match &write {
        Write::Create { data } => s.client.create(&vpath, data, &persistent()).await.map(|_| ()),
        Write::Replace { data, expected_version } => {
            s.client.set_data(&vpath, data, Some(*expected_version)).await.map(|_| ())
        }
    };
    match written {
        Ok(()) => {
            tracing::info!(node = s.me.node, epoch = next.epoch, chain = ?next.nodes(), "published a view");
            let newer = s.membership.lock().unwrap_or_else(|p| p.into_inner()).observe(&next);
            if let Some(v) = newer {
                deliver(s, v);
            }
            Ok(Round::Again)
        }
        Err(zk::Error::BadVersion | zk::Error::NodeExists) => Ok(Round::Again),
        Err(e) => Err(e),
    }
}

fn deliver(s: &Shared, v: View) {
    tracing::info!(node = s.me.node, epoch = v.epoch, chain = ?v.nodes(), "view");
    s.views.send_replace(Some(v));
}
