//! The state the daemon's threads share — the node, the sessions, the leases, the host
//! link, the pipeline, the limits in force — private to the daemon's modules (connections,
//! status, metrics): the working parts below are handed the pieces they use, never this.

use crate::config::Timeouts;
use crate::host::link::HostLink;
use crate::lease::manager::Leases;
use crate::limits::{Connections, Limits, Refusals};
use crate::node::Node;
use crate::observe::latency::EndToEnd;
use crate::pipeline::sequencer::Parts;
use crate::pipeline::Pipeline;
use crate::session::Sessions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// What every thread of the daemon shares.
pub(super) struct Ctx {
    pub(super) node: Arc<Node>,
    pub(super) sessions: Arc<Sessions>,
    /// The node's leases.
    pub(super) leases: Arc<Leases>,
    /// The kworker link and the node's mode.
    pub(super) host: Arc<HostLink>,
    /// The publishing pipeline's stages.
    pub(super) pipeline: Arc<Pipeline>,
    /// The end-to-end chunk and fsync latencies.
    pub(super) latency: Arc<EndToEnd>,
    /// What each session's sequencer is handed (the same node, pipeline, sessions, leases
    /// and latencies).
    pub(super) sequencing: Arc<Parts>,
    pub(super) socket: PathBuf,
    /// Where `/metrics` is served (the bound address: a port 0 asked for is resolved).
    pub(super) metrics_addr: Option<SocketAddr>,
    /// The per-user limits in force ([`crate::limits`]).
    pub(super) limits: Limits,
    /// The open connections of unprivileged users.
    pub(super) conns: Arc<Connections>,
    /// What the limits (and the kworker check) refused.
    pub(super) refusals: Refusals,
    /// The uid a kworker may run as besides nicfs's own (`--kworker-uid`).
    pub(super) kworker_uid: Option<u32>,
    /// Held from the limit checks of an attach to its claim, so that two attaches of one
    /// uid cannot both pass a check only one of them fits.
    pub(super) attaching: parking_lot::Mutex<()>,
    /// Who is handed the public file ([`crate::daemon::trust`]).
    pub(super) trust: crate::daemon::trust::Trust,
    /// How long connections may take (hello, writes) and shutdown waits.
    pub(super) timeouts: Timeouts,
    /// The node's membership of its cluster (`--zk`), if it is in one.
    pub(super) cluster: Option<crate::daemon::cluster::Cluster>,
    /// The chain replication of the node's logs (with `--zk`).
    pub(super) replication: Option<Arc<crate::daemon::replication::Replication>>,
    pub(super) stopping: AtomicBool,
}

impl Ctx {
    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}
