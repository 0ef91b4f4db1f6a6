//! nicfs's configuration as its core sees it: where the node and the socket are, the chunk
//! size, the pipeline's thread counts, the timeouts, the lease timeout and the per-user
//! limits. The command line ([`crate::daemon::args::Args`]) only parses into a [`Config`];
//! nothing below the daemon sees the flags.
//!
//! Imports: [`crate::limits`] (what the limits resolve to) and the node's constants.

use crate::host::link::HostTimeouts;
use crate::limits::Limits;
use linefs_pm::cpus::CpuList;
use linefs_pm::layout::Geometry;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Everything nicfs runs with.
#[derive(Debug, Clone)]
pub struct Config {
    /// The node's PM directory.
    pub node: PathBuf,
    /// The Unix socket clients connect to.
    pub socket: PathBuf,
    /// CPUs to pin the daemon to.
    pub cpus: Option<CpuList>,
    /// The JSON status file, rewritten every second and at exit.
    pub status_file: Option<PathBuf>,
    /// The loopback address `/metrics` is served on.
    pub metrics_addr: Option<SocketAddr>,
    /// The kworker's heartbeat interval (three missed beats isolate the node).
    pub kworker_heartbeat: Duration,
    /// The uid a kworker may run as besides nicfs's own.
    pub kworker_uid: Option<u32>,
    /// The group whose members, besides root, are handed the public file.
    pub trusted_group: Option<u32>,
    /// How long a revoke may stay unanswered, in ms (0: forever).
    pub lease_timeout_ms: u64,
    /// Most bytes of log one fetched chunk covers.
    pub chunk_bytes: u64,
    /// Whether the pipeline has its coalescing stage.
    pub coalesce: bool,
    /// The per-user limits as asked for (resolved against the node's geometry when it is
    /// open, [`LimitRequest::resolve`]).
    pub limits: LimitRequest,
    /// The pipeline's thread pools.
    pub threads: Threads,
    /// How long connections and shutdown may take.
    pub timeouts: Timeouts,
    /// The cluster this node is a member of (`--node-id` and `--zk`); None: a node on its
    /// own, no ZooKeeper (as before the cluster; the tests that start nicfs directly).
    pub cluster: Option<ClusterConfig>,
}

/// How the node joins its cluster ([`crate::daemon`]'s `cluster` module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The node's id in the cluster (its index in `linefs up`'s description).
    pub node_id: u32,
    /// The ZooKeeper connection string, `host:port,host:port,…`.
    pub zk: String,
    /// The cluster key file (`--cluster-key`), loaded at start.
    pub key: std::path::PathBuf,
    /// Where the peer link's low-latency and bulk classes listen (port 0: the kernel's
    /// choice).
    pub peer_addr: std::net::SocketAddr,
    pub bulk_addr: std::net::SocketAddr,
    /// The ZooKeeper session timeout asked for (`--zk-session-ms`).
    pub session_timeout: std::time::Duration,
}

/// How many threads each stage of the pipeline may have (min, max) — the publish stage is
/// serialised by the public area's mutex anyway — and how many extra threads the stages
/// may add together above their minimums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Threads {
    pub fetch: (usize, usize),
    pub validate: (usize, usize),
    pub coalesce: (usize, usize),
    pub publish: (usize, usize),
    pub extra: usize,
}

impl Default for Threads {
    fn default() -> Threads {
        Threads { fetch: (1, 4), validate: (1, 4), coalesce: (1, 4), publish: (1, 1), extra: 8 }
    }
}

/// The daemon's timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long a new connection may take to say Hello.
    pub hello: Duration,
    /// How long a write to a client may block (a client that stops reading is cut off).
    pub write: Duration,
    /// How long shutdown waits for one session to settle.
    pub settle: Duration,
    /// How long the kworker has to answer a copy list, and to be gone once killed.
    pub host: HostTimeouts,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            hello: Duration::from_secs(5),
            write: Duration::from_secs(5),
            settle: Duration::from_secs(60),
            host: HostTimeouts::default(),
        }
    }
}

/// The per-user limits as the operator asked for them: a 0 (or None) takes the default
/// for the node, which depends on its geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitRequest {
    pub max_connections: u32,
    pub max_connections_per_uid: u32,
    pub max_slots_per_uid: u32,
    pub root_reserved_slots: Option<u32>,
    pub max_inodes_per_uid: u64,
    pub max_blocks_per_uid: u64,
    pub fenced_backoff_ms: u64,
}

impl LimitRequest {
    /// The limits in force on a node of geometry `geo` (a 0 takes the default).
    pub(crate) fn resolve(&self, geo: &Geometry) -> Limits {
        let args = self;
        let slots = geo.log_slots;
        let root_reserved_slots = args.root_reserved_slots.unwrap_or(u32::from(slots > 1)).min(slots);
        let open = slots - root_reserved_slots;
        let or = |v: u64, d: u64| if v == 0 { d } else { v };
        Limits {
            max_connections: args.max_connections,
            max_connections_per_uid: args.max_connections_per_uid,
            max_slots_per_uid: if args.max_slots_per_uid == 0 {
                (open / 2).max(2).min(open.max(1))
            } else {
                args.max_slots_per_uid
            },
            root_reserved_slots,
            max_inodes_per_uid: or(
                args.max_inodes_per_uid,
                (geo.inode_count / 2).max(4 * crate::node::alloc::FIRST_GRANT),
            ),
            max_blocks_per_uid: or(args.max_blocks_per_uid, geo.data_blocks / 2),
            fenced_backoff_ms: args.fenced_backoff_ms,
        }
    }
}
