//! The node's links to the other members of its cluster (with `--zk`): two listening ports
//! (the peer link's low-latency and bulk classes, [`linefs_peer`]), one authenticated
//! connection of each class to every other member of the current view, and a heartbeat on
//! the low-latency class ([`ping`]). No replication traffic yet.
//!
//! * **Who dials**: the lower node id dials the higher, so two nodes never hold two
//!   connections of one class between them. A connection from a higher id is refused (it
//!   should have waited for ours). A connection dropped (the peer gone, a bad frame, no beat
//!   on the low-latency class for [`DEAD_AFTER`], which closes both) is dialled again after
//!   a backoff (from [`BACKOFF_MIN`], doubling to [`BACKOFF_MAX`]); a new view with other addresses for a peer redials at once; a peer that
//!   leaves the view has its connections closed.
//! * **Handshakes** run on threads of their own (at most [`MAX_HANDSHAKES`] at once; more
//!   connections are closed unanswered), so a stalled intruder holds up nobody. A failed
//!   handshake is logged with the address and the reason by the link ([`linefs_peer::tcp`]).
//! * **Beats**: every [`BEAT_EVERY`] each side sends a Ping on each low-latency link; a Ping is
//!   answered by a Pong, and a Pong gives the round trip. Every message carries the sender's
//!   epoch; [`Peers::receive`] is the one entry point for what arrives, and it drops (and
//!   logs) a message of an epoch below this node's.
//!
//! Threads: `peer-accept-ll` and `peer-accept-bulk` (accepting), `peer-hs` (one per
//! handshake), `peer-dial` (one per dial), `peer-read` (one per link), `peers` (dials, beats
//! and checks liveness). Imports nothing of nicfs's daemon: the membership ([`super::cluster`])
//! hands it each view.
//!
//! **Replication frames** (kinds `0x7F10..`, peer's `repl`) enter through the same
//! [`Peers::receive`]: decoded there (a frame that does not decode closes the link, as an
//! unknown kind does), the epoch recorded, a stale one dropped and counted, and the rest
//! handed to the inbox given at start ([`Inbound`], read by `super::replication`).
//! [`Peers::send`] sends a frame of any kind on a peer's link of a class.

mod ping;

use linefs_peer::repl::{self, ReplFrame};
use linefs_peer::{Class, ClusterKey, LinkConfig, PeerListener, TcpLink};
use linefs_proto::{FrameLink, ReadError};
use parking_lot::Mutex;
use ping::Beat;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often each side pings each low-latency link.
const BEAT_EVERY: Duration = Duration::from_millis(500);
/// A low-latency link that has carried nothing for this long is closed with the peer's bulk
/// link (and both are dialled again).
const DEAD_AFTER: Duration = Duration::from_secs(3);
/// The first pause before dialling a peer again.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest pause between dials.
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Handshakes in flight at once; connections past it are closed unanswered.
const MAX_HANDSHAKES: usize = 16;
/// How often the `peers` thread looks for work.
const TICK: Duration = Duration::from_millis(50);

const CLASSES: [Class; 2] = [Class::LowLatency, Class::Bulk];

fn index(class: Class) -> usize {
    match class {
        Class::LowLatency => 0,
        Class::Bulk => 1,
    }
}

fn class_name(class: Class) -> &'static str {
    match class {
        Class::LowLatency => "low_latency",
        Class::Bulk => "bulk",
    }
}

/// A replication frame that passed [`Peers::receive`]: from a member, of an epoch not below
/// this node's.
#[derive(Debug)]
pub(crate) struct Inbound {
    pub(crate) from: u32,
    pub(crate) frame: ReplFrame,
    /// The payload's bytes as received (before decompression).
    pub(crate) wire_bytes: u64,
}

/// One connection of one class to one peer, as the status file shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct ClassStatus {
    /// `connected`, `dialling`, `waiting` (for the peer to dial, or for the backoff), `down`.
    pub(crate) state: &'static str,
    /// Connections made since start.
    pub(crate) connects: u64,
    /// Why the last connection ended or the last dial failed.
    pub(crate) last_error: Option<String>,
}

/// One peer as the status file shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct PeerStatus {
    pub(crate) node: u32,
    pub(crate) low_latency_addr: String,
    pub(crate) bulk_addr: String,
    pub(crate) low_latency: ClassStatus,
    pub(crate) bulk: ClassStatus,
    /// The last epoch the peer's messages carried (0: none heard).
    pub(crate) epoch_seen: u64,
    /// The last round trip of a Ping, in microseconds.
    pub(crate) rtt_us: Option<u64>,
}

/// The peer links as the status file shows them.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct PeersStatus {
    pub(crate) low_latency_addr: String,
    pub(crate) bulk_addr: String,
    /// Messages dropped for a stale epoch.
    pub(crate) stale_dropped: u64,
    /// Handshakes refused (or connections closed unanswered) since start.
    pub(crate) refused: u64,
    pub(crate) peers: Vec<PeerStatus>,
}

#[derive(Default)]
struct Slot {
    link: Option<Arc<TcpLink>>,
    /// Which link `link` is: a reader that ends clears the slot only if it still holds its own.
    gen: u64,
    dialing: bool,
    next_dial: Option<Instant>,
    backoff: Duration,
    connects: u64,
    last_error: Option<String>,
    last_heard: Option<Instant>,
}

struct Peer {
    addrs: [SocketAddr; 2],
    slots: [Slot; 2],
    epoch_seen: u64,
    rtt_us: Option<u64>,
}

struct Inner {
    me: u32,
    key: ClusterKey,
    config: LinkConfig,
    addrs: [SocketAddr; 2],
    epoch: AtomicU64,
    peers: Mutex<BTreeMap<u32, Peer>>,
    gens: AtomicU64,
    handshakes: AtomicUsize,
    refused: AtomicU64,
    stale: AtomicU64,
    beats: AtomicU64,
    /// Where replication frames go (None: nobody replicates; they are dropped).
    inbox: Option<crossbeam_channel::Sender<Inbound>>,
    /// Header ids of frames sent by [`Peers::send`].
    sent: AtomicU64,
    stopping: AtomicBool,
    origin: Instant,
}

/// The node's peer links; [`Peers::start`] listens, [`Peers::set_view`] says whom to link to.
#[derive(Clone)]
pub(crate) struct Peers {
    inner: Arc<Inner>,
}

impl Peers {
    /// Loads the key, binds both classes' ports and starts the threads. The error is one line
    /// (a missing, unreadable or too open key file; a port that cannot be bound).
    pub(crate) fn start(
        me: u32,
        key: &Path,
        ll: SocketAddr,
        bulk: SocketAddr,
        inbox: Option<crossbeam_channel::Sender<Inbound>>,
    ) -> Result<Peers, String> {
        let key = ClusterKey::load(key).map_err(|e| e.to_string())?;
        let config = LinkConfig { handshake_timeout: Duration::from_secs(2), ..LinkConfig::default() };
        let mut listeners = Vec::new();
        let mut addrs = Vec::new();
        for (class, at) in [(Class::LowLatency, ll), (Class::Bulk, bulk)] {
            let l = PeerListener::bind(at, key.clone(), me, config)
                .map_err(|e| format!("cannot listen for peers ({}) on {at}: {e}", class_name(class)))?;
            addrs.push(l.local_addr().map_err(|e| format!("cannot read the peer listener's address: {e}"))?);
            listeners.push((class, Arc::new(l)));
        }
        let inner = Arc::new(Inner {
            me,
            key,
            config,
            addrs: [addrs[0], addrs[1]],
            epoch: AtomicU64::new(0),
            peers: Mutex::new(BTreeMap::new()),
            gens: AtomicU64::new(1),
            handshakes: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            beats: AtomicU64::new(1),
            inbox,
            sent: AtomicU64::new(1),
            stopping: AtomicBool::new(false),
            origin: Instant::now(),
        });
        let peers = Peers { inner };
        for (class, l) in listeners {
            let p = peers.clone();
            let name = format!("peer-accept-{}", if class == Class::LowLatency { "ll" } else { "bulk" });
            spawn(&name, move || p.accept_loop(class, l))?;
        }
        let p = peers.clone();
        spawn("peers", move || p.tick_loop())?;
        tracing::info!(low_latency = %addrs[0], bulk = %addrs[1], "listening for peers");
        Ok(peers)
    }

    /// The addresses the two classes listen on (registered in the member's znode).
    pub(crate) fn addrs(&self) -> (SocketAddr, SocketAddr) {
        (self.inner.addrs[0], self.inner.addrs[1])
    }

    /// A new view: its epoch, and every member (id, low-latency and bulk addresses).
    /// Members that are gone lose their links; new ones are dialled (by the lower id).
    pub(crate) fn set_view(&self, epoch: u64, members: &[(u32, String, String)]) {
        let inner = &self.inner;
        inner.epoch.fetch_max(epoch, Ordering::AcqRel);
        let mut peers = inner.peers.lock();
        let wanted: BTreeMap<u32, [SocketAddr; 2]> = members
            .iter()
            .filter(|m| m.0 != inner.me)
            .filter_map(|(id, ll, bulk)| match (ll.parse(), bulk.parse()) {
                (Ok(a), Ok(b)) => Some((*id, [a, b])),
                _ => {
                    tracing::warn!(node = id, ll, bulk, "a member's peer addresses do not parse: not linked");
                    None
                }
            })
            .collect();
        peers.retain(|id, p| {
            let keep = wanted.contains_key(id);
            if !keep {
                tracing::info!(node = id, epoch, "peer left the view: closing its links");
                for s in &mut p.slots {
                    if let Some(l) = s.link.take() {
                        l.close();
                    }
                }
            }
            keep
        });
        for (id, addrs) in wanted {
            let p = peers.entry(id).or_insert_with(|| Peer {
                addrs,
                slots: Default::default(),
                epoch_seen: 0,
                rtt_us: None,
            });
            if p.addrs != addrs {
                tracing::info!(node = id, ?addrs, "peer's addresses changed: redialling");
                p.addrs = addrs;
                for s in &mut p.slots {
                    if let Some(l) = s.link.take() {
                        l.close();
                    }
                    s.next_dial = None;
                    s.backoff = Duration::ZERO;
                }
            }
        }
    }

    pub(crate) fn status(&self) -> PeersStatus {
        let inner = &self.inner;
        let me = inner.me;
        let peers = inner.peers.lock();
        let class = |id: u32, s: &Slot| ClassStatus {
            state: if s.link.is_some() {
                "connected"
            } else if s.dialing {
                "dialling"
            } else if me < id || s.next_dial.is_some() {
                "down"
            } else {
                "waiting"
            },
            connects: s.connects,
            last_error: s.last_error.clone(),
        };
        PeersStatus {
            low_latency_addr: inner.addrs[0].to_string(),
            bulk_addr: inner.addrs[1].to_string(),
            stale_dropped: inner.stale.load(Ordering::Relaxed),
            refused: inner.refused.load(Ordering::Relaxed),
            peers: peers
                .iter()
                .map(|(&id, p)| PeerStatus {
                    node: id,
                    low_latency_addr: p.addrs[0].to_string(),
                    bulk_addr: p.addrs[1].to_string(),
                    low_latency: class(id, &p.slots[0]),
                    bulk: class(id, &p.slots[1]),
                    epoch_seen: p.epoch_seen,
                    rtt_us: p.rtt_us,
                })
                .collect(),
        }
    }

    /// Closes every link and stops dialling (the daemon is stopping).
    pub(crate) fn stop(&self) {
        self.inner.stopping.store(true, Ordering::Release);
        let mut peers = self.inner.peers.lock();
        for p in peers.values_mut() {
            for s in &mut p.slots {
                if let Some(l) = s.link.take() {
                    l.close();
                }
            }
        }
    }

    fn stopping(&self) -> bool {
        self.inner.stopping.load(Ordering::Acquire)
    }

    fn accept_loop(&self, class: Class, listener: Arc<PeerListener>) {
        while !self.stopping() {
            let stream = match listener.accept_tcp() {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(class = class_name(class), "cannot accept a peer connection: {e}");
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            let addr = stream.peer_addr().map(|a| a.to_string()).unwrap_or_else(|_| "unknown".into());
            if self.inner.handshakes.fetch_add(1, Ordering::AcqRel) >= MAX_HANDSHAKES {
                self.inner.handshakes.fetch_sub(1, Ordering::AcqRel);
                self.inner.refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %addr, "too many peer handshakes in flight: connection closed");
                continue;
            }
            let p = self.clone();
            let l = listener.clone();
            let spawned = spawn("peer-hs", move || {
                let result = l.handshake(stream);
                p.inner.handshakes.fetch_sub(1, Ordering::AcqRel);
                match result {
                    // Logged by the link with the address and the reason.
                    Err(_) => {
                        p.inner.refused.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(link) => p.accepted(class, link),
                }
            });
            if let Err(e) = spawned {
                self.inner.handshakes.fetch_sub(1, Ordering::AcqRel);
                tracing::warn!(peer = %addr, "{e}: connection closed");
            }
        }
    }

    /// A connection that passed the handshake on the listener of `class`.
    fn accepted(&self, class: Class, link: TcpLink) {
        let peer = link.peer();
        let refuse = |why: &str| {
            self.inner.refused.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                node = peer,
                addr = link.addr(),
                class = class_name(class),
                "peer connection refused: {why}"
            );
            link.close();
        };
        if link.class() != class {
            return refuse("its class is not this port's");
        }
        if peer == self.inner.me {
            return refuse("it says it is this node");
        }
        if peer > self.inner.me {
            return refuse("the lower node id dials, and this node's is lower");
        }
        self.install(link, None);
    }

    /// Puts `link` in its slot (closing one that was there) and starts its reader; a link to a
    /// node not in the view is closed. `dialled`: the peer's addresses the dial that made it
    /// used (a link dialled to addresses the view has since changed is closed); None: accepted.
    fn install(&self, link: TcpLink, dialled: Option<[SocketAddr; 2]>) {
        let (id, class) = (link.peer(), link.class());
        let link = Arc::new(link);
        let gen = self.inner.gens.fetch_add(1, Ordering::Relaxed);
        {
            let mut peers = self.inner.peers.lock();
            let Some(p) = peers.get_mut(&id) else {
                tracing::info!(node = id, class = class_name(class), "peer not in the view: link closed");
                link.close();
                return;
            };
            if dialled.is_some() {
                // Cleared under the same lock as the link is installed: no second dial between.
                p.slots[index(class)].dialing = false;
            }
            if dialled.is_some_and(|a| a != p.addrs) || self.stopping() {
                link.close();
                return;
            }
            let s = &mut p.slots[index(class)];
            if let Some(old) = s.link.replace(link.clone()) {
                old.close();
            }
            s.gen = gen;
            s.connects += 1;
            s.backoff = Duration::ZERO;
            s.next_dial = None;
            s.last_heard = Some(Instant::now());
        }
        tracing::info!(node = id, addr = link.addr(), class = class_name(class), "peer link up");
        let p = self.clone();
        if let Err(e) = spawn("peer-read", move || p.read_loop(link, gen)) {
            tracing::warn!(node = id, "{e}");
        }
    }

    fn read_loop(&self, link: Arc<TcpLink>, gen: u64) {
        let why = loop {
            match link.recv_raw(None) {
                Ok(frame) => {
                    if let Err(why) = self.receive(&link, frame.header.kind, frame.header.id, &frame.payload) {
                        link.close();
                        break why;
                    }
                }
                Err(ReadError::TimedOut(_)) => continue,
                Err(ReadError::Closed) => break "closed by the peer".to_string(),
                Err(e) => break e.to_string(),
            }
        };
        link.close();
        self.lost(link.peer(), link.class(), gen, why);
    }

    /// The one entry point for what a peer sends: decodes, records the epoch it carries,
    /// drops a message of an epoch below this node's, and acts on the rest (beats answered
    /// here, replication frames handed to the inbox). `Err`: the link must close (a message
    /// this node does not know, or one that does not decode).
    fn receive(&self, link: &TcpLink, kind: u16, _id: u64, payload: &[u8]) -> Result<(), String> {
        let (id, class) = (link.peer(), link.class());
        let (epoch, what) = if repl::is_repl_kind(kind) {
            let frame = repl::decode(kind, payload).map_err(|e| e.to_string())?;
            (frame.epoch(), Err(frame))
        } else {
            let beat = Beat::decode(kind, payload)?;
            (beat.epoch, Ok(beat))
        };
        let mine = self.inner.epoch.load(Ordering::Acquire);
        let now = Instant::now();
        {
            let mut peers = self.inner.peers.lock();
            if let Some(p) = peers.get_mut(&id) {
                p.epoch_seen = p.epoch_seen.max(epoch);
                p.slots[index(class)].last_heard = Some(now);
            }
        }
        if epoch < mine {
            self.inner.stale.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                node = id,
                epoch,
                mine,
                kind = format_args!("{kind:#06x}"),
                "stale-epoch peer message dropped"
            );
            return Ok(());
        }
        let beat = match what {
            Ok(beat) => beat,
            Err(frame) => {
                if let Some(inbox) = &self.inner.inbox {
                    let _ = inbox.send(Inbound { from: id, frame, wire_bytes: payload.len() as u64 });
                }
                return Ok(());
            }
        };
        if beat.pong {
            let sent = self.inner.origin + Duration::from_nanos(beat.sent_ns);
            let rtt = now.saturating_duration_since(sent);
            if let Some(p) = self.inner.peers.lock().get_mut(&id) {
                p.rtt_us = Some(u64::try_from(rtt.as_micros()).unwrap_or(u64::MAX));
            }
        } else {
            let pong = Beat { pong: true, epoch: mine, ..beat };
            // A failed send closes the link; its reader sees it.
            let _ = link.send_raw(&pong.encode());
        }
        Ok(())
    }

    /// Sends a frame of `kind` with `payload` to `to` on its link of `class`. `Err`: no link
    /// (the peer is not linked now) or the send failed (the link is closed; it is dialled
    /// again).
    pub(crate) fn send(&self, to: u32, class: Class, kind: u16, payload: &[u8]) -> Result<(), String> {
        let link = {
            let peers = self.inner.peers.lock();
            peers.get(&to).and_then(|p| p.slots[index(class)].link.clone())
        };
        let Some(link) = link else { return Err(format!("no {} link to node {to}", class_name(class))) };
        let header = linefs_proto::frame::Header {
            version: linefs_proto::PROTOCOL_VERSION,
            kind,
            payload_len: u32::try_from(payload.len()).map_err(|_| "payload too long".to_string())?,
            fd_count: 0,
            check: linefs_proto::frame::CHECK_NONE,
            id: self.inner.sent.fetch_add(1, Ordering::Relaxed),
        };
        let mut frame = Vec::with_capacity(linefs_proto::frame::HEADER_LEN + payload.len());
        frame.extend_from_slice(&header.encode());
        frame.extend_from_slice(payload);
        link.send_raw(&frame).map_err(|e| e.to_string())
    }

    /// A link's reader ended: its slot is cleared (if the link is still the slot's) and the
    /// dialler backs off.
    fn lost(&self, id: u32, class: Class, gen: u64, why: String) {
        let mut peers = self.inner.peers.lock();
        let Some(p) = peers.get_mut(&id) else { return };
        let s = &mut p.slots[index(class)];
        if s.gen != gen || s.link.is_none() {
            return;
        }
        s.link = None;
        if !self.stopping() {
            tracing::warn!(node = id, class = class_name(class), "peer link down: {why}");
        }
        s.last_error = Some(why);
        s.backoff = BACKOFF_MIN;
        s.next_dial = Some(Instant::now() + BACKOFF_MIN);
    }

    fn tick_loop(&self) {
        let mut next_beat = Instant::now();
        while !self.stopping() {
            std::thread::sleep(TICK);
            let now = Instant::now();
            self.dial_due(now);
            if now >= next_beat {
                next_beat = now + BEAT_EVERY;
                self.beat(now);
            }
        }
    }

    /// Dials each higher peer's empty slots whose backoff has passed.
    fn dial_due(&self, now: Instant) {
        let me = self.inner.me;
        let mut peers = self.inner.peers.lock();
        for (&id, p) in peers.iter_mut().filter(|(&id, _)| id > me) {
            for class in CLASSES {
                let s = &mut p.slots[index(class)];
                if s.link.is_some() || s.dialing || s.next_dial.is_some_and(|t| now < t) {
                    continue;
                }
                s.dialing = true;
                let addrs = p.addrs;
                let me = self.clone();
                let spawned = spawn("peer-dial", move || me.dial(id, class, addrs));
                if let Err(e) = spawned {
                    tracing::warn!(node = id, "{e}");
                    s.dialing = false;
                }
            }
        }
    }

    fn dial(&self, id: u32, class: Class, addrs: [SocketAddr; 2]) {
        let inner = &self.inner;
        let result = TcpLink::connect(addrs[index(class)], &inner.key, inner.me, class, Some(id), &inner.config);
        let failed = match result {
            Ok(link) => {
                self.install(link, Some(addrs));
                return;
            }
            Err(e) => e.to_string(),
        };
        let mut peers = inner.peers.lock();
        let Some(p) = peers.get_mut(&id) else { return };
        let s = &mut p.slots[index(class)];
        s.dialing = false;
        s.backoff = (s.backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
        s.next_dial = Some(Instant::now() + s.backoff);
        tracing::debug!(node = id, class = class_name(class), backoff = ?s.backoff, "dial failed: {failed}");
        s.last_error = Some(failed);
    }

    /// Pings every low-latency link, and closes a peer's links when its low-latency one has
    /// been silent past [`DEAD_AFTER`].
    fn beat(&self, now: Instant) {
        let epoch = self.inner.epoch.load(Ordering::Acquire);
        let mut out = Vec::new();
        {
            let peers = self.inner.peers.lock();
            for (&id, p) in peers.iter() {
                let s = &p.slots[0];
                let Some(link) = &s.link else { continue };
                if s.last_heard.is_some_and(|t| now.duration_since(t) > DEAD_AFTER) {
                    // Silent, not closed: the peer (or the path to it) hangs; its bulk link
                    // is no better, so both are closed and dialled again.
                    tracing::warn!(node = id, "peer silent for {DEAD_AFTER:?}: closing its links");
                    for l in p.slots.iter().filter_map(|s| s.link.as_ref()) {
                        l.close();
                    }
                    continue;
                }
                out.push(link.clone());
            }
        }
        for link in out {
            let seq = self.inner.beats.fetch_add(1, Ordering::Relaxed);
            let sent_ns = u64::try_from(now.duration_since(self.inner.origin).as_nanos()).unwrap_or(u64::MAX);
            let _ = link.send_raw(&Beat { pong: false, epoch, seq, sent_ns }.encode());
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .map(|_| ())
        .map_err(|e| format!("cannot start thread {name}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use linefs_proto::HEADER_LEN;

    /// Node 1's links, a key, and node 0 (this test) in a view of epoch 5.
    fn node1() -> (tempfile::TempDir, ClusterKey, Peers) {
        let (d, k, p, _) = node1_with_inbox();
        (d, k, p)
    }

    /// [`node1`], and where its replication frames go.
    fn node1_with_inbox() -> (tempfile::TempDir, ClusterKey, Peers, crossbeam_channel::Receiver<Inbound>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        let key = ClusterKey::generate(&path).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (tx, inbox) = crossbeam_channel::unbounded();
        let peers = Peers::start(1, &path, any, any, Some(tx)).unwrap();
        let (ll, bulk) = peers.addrs();
        let nowhere = "127.0.0.1:1".to_string();
        peers.set_view(5, &[(0, nowhere.clone(), nowhere), (1, ll.to_string(), bulk.to_string())]);
        (dir, key, peers, inbox)
    }

    #[test]
    fn replication_frames_enter_at_the_one_entry_point_and_stale_ones_are_dropped_there() {
        let (_d, key, peers, inbox) = node1_with_inbox();
        let cfg = LinkConfig::default();
        let link = TcpLink::connect(peers.addrs().0, &key, 0, Class::LowLatency, Some(1), &cfg).unwrap();
        let send = |frame: &ReplFrame| {
            let (kind, payload, _) = repl::encode(frame, false).unwrap();
            let header = linefs_proto::frame::Header {
                version: linefs_proto::PROTOCOL_VERSION,
                kind,
                payload_len: payload.len() as u32,
                fd_count: 0,
                check: linefs_proto::frame::CHECK_NONE,
                id: 1,
            };
            let mut f = header.encode().to_vec();
            f.extend_from_slice(&payload);
            link.send_raw(&f).unwrap();
        };
        send(&ReplFrame::Probe { stream: (0, 2), epoch: 4 });
        send(&ReplFrame::Ack { stream: (1, 2), epoch: 5, durable: 64, published: 0 });
        let got = inbox.recv_timeout(Duration::from_secs(5)).expect("the current epoch's frame");
        assert_eq!(got.from, 0);
        assert_eq!(got.frame, ReplFrame::Ack { stream: (1, 2), epoch: 5, durable: 64, published: 0 });
        assert!(inbox.try_recv().is_err(), "the stale Probe never reached the inbox");
        assert_eq!(peers.status().stale_dropped, 1);
        // A payload that does not decode closes the link.
        let (kind, mut payload, _) = repl::encode(&ReplFrame::Probe { stream: (0, 2), epoch: 5 }, false).unwrap();
        payload[0] = 9;
        let header = linefs_proto::frame::Header {
            version: linefs_proto::PROTOCOL_VERSION,
            kind,
            payload_len: payload.len() as u32,
            fd_count: 0,
            check: linefs_proto::frame::CHECK_NONE,
            id: 2,
        };
        let mut f = header.encode().to_vec();
        f.extend_from_slice(&payload);
        link.send_raw(&f).unwrap();
        let end = Instant::now() + Duration::from_secs(2);
        while peers.status().peers[0].low_latency.state == "connected" {
            assert!(Instant::now() < end, "the link was not closed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(inbox.try_recv().is_err());
        peers.stop();
    }

    fn beat(link: &TcpLink, timeout: Duration) -> Option<Beat> {
        let f = link.recv_raw(Some(timeout)).ok()?;
        Beat::decode(f.header.kind, &f.payload).ok()
    }

    #[test]
    fn a_ping_is_answered_at_the_current_epoch_and_a_stale_one_is_dropped() {
        let (_d, key, peers) = node1();
        let cfg = LinkConfig::default();
        let link = TcpLink::connect(peers.addrs().0, &key, 0, Class::LowLatency, Some(1), &cfg).unwrap();
        let st = || peers.status();
        // Node 1 pings too: skip its Pings, look for the Pong to ours.
        let pong_to = |seq: u64| {
            let end = Instant::now() + Duration::from_secs(2);
            while Instant::now() < end {
                match beat(&link, Duration::from_millis(200)) {
                    Some(b) if b.pong && b.seq == seq => return Some(b),
                    _ => {}
                }
            }
            None
        };
        link.send_raw(&Beat { pong: false, epoch: 4, seq: 9, sent_ns: 1 }.encode()).unwrap();
        assert_eq!(pong_to(9), None, "a Ping of epoch 4 in epoch 5 is dropped");
        assert_eq!(st().stale_dropped, 1);
        link.send_raw(&Beat { pong: false, epoch: 5, seq: 10, sent_ns: 77 }.encode()).unwrap();
        let pong = pong_to(10).expect("a Ping of the current epoch is answered");
        assert_eq!((pong.epoch, pong.sent_ns), (5, 77));
        let s = st();
        assert_eq!((s.peers[0].node, s.peers[0].low_latency.state, s.peers[0].epoch_seen), (0, "connected", 5));
        // A kind node 1 does not know closes the link.
        let mut unknown = Beat { pong: false, epoch: 5, seq: 11, sent_ns: 0 }.encode();
        unknown[6] = 0x55;
        link.send_raw(&unknown).unwrap();
        let end = Instant::now() + Duration::from_secs(2);
        while st().peers[0].low_latency.state == "connected" {
            assert!(Instant::now() < end, "the link was not closed");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(st().peers[0].low_latency.last_error.clone().unwrap_or_default().contains("0x7f55"), "{:?}", st());
        assert_eq!(unknown.len(), HEADER_LEN + ping::PAYLOAD_LEN);
        peers.stop();
    }

    #[test]
    fn a_link_from_the_higher_id_or_of_the_wrong_class_for_the_port_is_refused() {
        let (_d, key, peers) = node1();
        let cfg = LinkConfig::default();
        // Node 2 is higher than 1: node 1 dials it, not the other way round.
        let from2 = TcpLink::connect(peers.addrs().0, &key, 2, Class::LowLatency, Some(1), &cfg).unwrap();
        assert!(from2.recv_raw(Some(Duration::from_secs(2))).is_err(), "closed by node 1");
        // Node 0 on the bulk port with a low-latency link: the wrong class for the port.
        let wrong = TcpLink::connect(peers.addrs().1, &key, 0, Class::LowLatency, Some(1), &cfg).unwrap();
        assert!(wrong.recv_raw(Some(Duration::from_secs(2))).is_err(), "closed by node 1");
        let end = Instant::now() + Duration::from_secs(2);
        while peers.status().refused < 2 {
            assert!(Instant::now() < end, "refusals not counted: {:?}", peers.status());
            std::thread::sleep(Duration::from_millis(20));
        }
        peers.stop();
    }
}
