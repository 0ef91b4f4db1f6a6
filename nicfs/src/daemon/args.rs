//! The command line, which only parses into a [`Config`] ([`Args::into_config`]): nothing
//! but `main` sees the flags. `--cpus` names the SmartNIC's own cores in the emulation (the
//! list and the pinning are `linefs_pm::cpus`); `--metrics-addr` is checked to be on the
//! loopback here, before anything starts.

use clap::Parser;
use linefs_pm::cpus::{self, CpuList};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use crate::config::{ClusterConfig, Config, LimitRequest, Threads, Timeouts};
use std::time::Duration;

/// nicfs: owns a node's PM, attaches its clients and publishes their logs.
#[derive(Debug, Parser)]
#[command(name = "nicfs", version)]
pub struct Args {
    /// The node's PM directory (public.pm and log-NN.pm, formatted by `linefs up` or mkfs).
    #[arg(long)]
    pub node: PathBuf,
    /// The Unix socket clients connect to (a stale file there is replaced).
    #[arg(long)]
    pub socket: PathBuf,
    /// CPUs to run on, e.g. `2,3` or `0-1,4`.
    #[arg(long, value_parser = cpus::parse)]
    pub cpus: Option<CpuList>,
    /// A JSON status file, rewritten every second and at exit.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// The kworker's heartbeat interval in ms (kworker's `--heartbeat-ms`). Three missed
    /// beats isolate the node; at most 300 so that a dead host is noticed within a second.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=300))]
    pub kworker_heartbeat_ms: u64,
    /// Most bytes of log one fetched chunk (one publication batch) covers; 4 MiB by default
    /// (LineFS's chunk). Smaller chunks pipeline a log in more, smaller steps.
    #[arg(long, default_value_t = crate::node::CHUNK_BYTES, value_parser = clap::value_parser!(u64).range(4096..))]
    pub chunk_bytes: u64,
    /// Publish every record as logged: no coalescing stage.
    #[arg(long)]
    pub no_coalesce: bool,
    /// Serve Prometheus metrics (`GET /metrics`) on this loopback address, e.g.
    /// `127.0.0.1:9100`; port 0 picks a free port (the status file tells which).
    #[arg(long, value_name = "IP:PORT", value_parser = parse_metrics_addr)]
    pub metrics_addr: Option<SocketAddr>,
    /// How long a client may leave a revoke of its lease unanswered, in ms: past that its
    /// session is fenced — its committed log published, then the session failed and its
    /// leases passed on. 0: never (a client holds its leases until its session ends).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_LEASE_TIMEOUT_MS)]
    pub lease_timeout_ms: u64,
    /// The group (number or name) whose members, besides root, are handed the node's public
    /// file when they attach — a privilege equal to reading every file of the node (like
    /// the `disk` group's). None by default: only root reads the node directly.
    #[arg(long, value_name = "GID|NAME", value_parser = crate::daemon::trust::parse_group)]
    pub trusted_group: Option<u32>,
    /// The uid a kworker must run as, besides nicfs's own (when nicfs runs as root, any
    /// other uid is refused the kworker channel).
    #[arg(long, value_name = "UID")]
    pub kworker_uid: Option<u32>,
    /// Most connections open at once from all unprivileged users together (root's are not
    /// counted). See [`crate::limits`].
    #[arg(long, value_name = "N", default_value_t = crate::limits::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: u32,
    /// Most connections open at once per unprivileged uid.
    #[arg(long, value_name = "N", default_value_t = crate::limits::DEFAULT_MAX_CONNECTIONS_PER_UID)]
    pub max_connections_per_uid: u32,
    /// Most log slots one unprivileged uid holds at once; 0: half the slots root does not
    /// keep, at least 2 (at most all of them).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_slots_per_uid: u32,
    /// Log slots only root may claim; 1 by default (0 on a node of one slot).
    #[arg(long, value_name = "N")]
    pub root_reserved_slots: Option<u32>,
    /// Most inode numbers granted and not yet used per unprivileged uid; 0: half the inode
    /// table (at least 256, four first grants).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_inodes_per_uid: u64,
    /// Most data blocks reserved and not yet handed back per unprivileged uid; 0: half the
    /// data blocks.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub max_blocks_per_uid: u64,
    /// After a session is fenced for leaving a revoke unanswered, its uid's sessions get no
    /// lease for this long (doubled for each further fencing within it, at most 10 min);
    /// 0: no backoff. Root is never backed off.
    #[arg(long, value_name = "MS", default_value_t = crate::limits::DEFAULT_FENCED_BACKOFF_MS)]
    pub fenced_backoff_ms: u64,
    /// The node's id in its cluster (with `--zk`): it joins the cluster as this member and
    /// keeps the views in its node record. A node record naming another id is refused.
    #[arg(long, value_name = "N", requires = "zk")]
    pub node_id: Option<u32>,
    /// The ZooKeeper ensemble, `HOST:PORT[,HOST:PORT…]` (with `--node-id`). Without it nicfs
    /// is a node on its own and never talks to ZooKeeper.
    #[arg(long, value_name = "HOST:PORT,…", requires_all = ["node_id", "cluster_key"], value_parser = parse_zk)]
    pub zk: Option<String>,
    /// The cluster key file (with `--zk`; `linefs up` makes it): 32 bytes, mode 0600 or
    /// 0400. The peers of the cluster prove it to each other on the peer link.
    #[arg(long, value_name = "PATH", requires = "zk")]
    pub cluster_key: Option<PathBuf>,
    /// Where the peer link's low-latency class listens (with `--zk`); port 0: one the kernel
    /// chooses. The address is registered in the member's znode.
    #[arg(long, value_name = "ADDR", requires = "zk", default_value = "127.0.0.1:0")]
    pub peer_addr: SocketAddr,
    /// Where the peer link's bulk class listens (with `--zk`), as `--peer-addr`.
    #[arg(long, value_name = "ADDR", requires = "zk", default_value = "127.0.0.1:0")]
    pub bulk_addr: SocketAddr,
    /// The ZooKeeper session timeout asked for (with `--zk`), in ms: a crashed node leaves the
    /// others' view about this long after its last message, rounded up to the server's next
    /// tick. The server clamps it into its bounds (200–10000 ms for the server `linefs up`
    /// starts). Default: detection within 2 s.
    #[arg(long, value_name = "MS", requires = "zk", default_value_t = DEFAULT_ZK_SESSION_MS,
          value_parser = clap::value_parser!(u64).range(200..=60_000))]
    pub zk_session_ms: u64,
}

/// `--zk-session-ms` by default: clustermgr's.
const DEFAULT_ZK_SESSION_MS: u64 = clustermgr::DEFAULT_SESSION_TIMEOUT.as_millis() as u64;

/// `--zk`: one or more `HOST:PORT`, comma-separated.
pub fn parse_zk(s: &str) -> Result<String, String> {
    let bad = |hp: &str| match hp.rsplit_once(':') {
        Some((host, port)) => host.is_empty() || port.parse::<u16>().is_err(),
        None => true,
    };
    if s.is_empty() || s.split(',').any(bad) {
        return Err(format!("expected HOST:PORT[,HOST:PORT...], not {s:?}"));
    }
    Ok(s.to_string())
}

impl Args {
    /// The configuration the flags give (the limits still to be resolved against the
    /// node's geometry, [`LimitRequest::resolve`]).
    pub fn into_config(self) -> Config {
        Config {
            limits: LimitRequest {
                max_connections: self.max_connections,
                max_connections_per_uid: self.max_connections_per_uid,
                max_slots_per_uid: self.max_slots_per_uid,
                root_reserved_slots: self.root_reserved_slots,
                max_inodes_per_uid: self.max_inodes_per_uid,
                max_blocks_per_uid: self.max_blocks_per_uid,
                fenced_backoff_ms: self.fenced_backoff_ms,
            },
            node: self.node,
            socket: self.socket,
            cpus: self.cpus,
            status_file: self.status_file,
            metrics_addr: self.metrics_addr,
            kworker_heartbeat: Duration::from_millis(self.kworker_heartbeat_ms),
            kworker_uid: self.kworker_uid,
            trusted_group: self.trusted_group,
            lease_timeout_ms: self.lease_timeout_ms,
            chunk_bytes: self.chunk_bytes,
            coalesce: !self.no_coalesce,
            threads: Threads::default(),
            timeouts: Timeouts::default(),
            cluster: match (self.node_id, self.zk) {
                (Some(node_id), Some(zk)) => Some(ClusterConfig {
                    node_id,
                    zk,
                    key: self.cluster_key.unwrap_or_default(),
                    peer_addr: self.peer_addr,
                    bulk_addr: self.bulk_addr,
                    session_timeout: Duration::from_millis(self.zk_session_ms),
                }),
                _ => None,
            },
        }
    }
}

/// `--lease-timeout-ms` by default.
pub const DEFAULT_LEASE_TIMEOUT_MS: u64 = 5000;

/// `--metrics-addr`: `IP:PORT` with an IP of the loopback (127.0.0.0/8, `[::1]`), or
/// `localhost:PORT` (127.0.0.1).
pub fn parse_metrics_addr(s: &str) -> Result<SocketAddr, String> {
    let addr = match s.strip_prefix("localhost:") {
        Some(port) => {
            let port = port.parse::<u16>().map_err(|_| format!("{port:?} is not a port number"))?;
            SocketAddr::from((Ipv4Addr::LOCALHOST, port))
        }
        None => s.parse::<SocketAddr>().map_err(|_| format!("expected IP:PORT, e.g. 127.0.0.1:9100, not {s:?}"))?,
    };
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{} is not a loopback address: metrics are served on 127.0.0.0/8 or [::1] only",
            addr.ip()
        ));
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        let a = Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--cpus", "1,0"]).unwrap();
        assert_eq!(a.cpus, Some(CpuList(vec![0, 1])));
        assert_eq!(a.status_file, None);
        assert_eq!(a.kworker_heartbeat_ms, 100);
        assert!(
            Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--kworker-heartbeat-ms", "301"]).is_err()
        );
        assert!(Args::try_parse_from(["nicfs", "--node", "n"]).is_err());
        assert_eq!(a.metrics_addr, None);
        assert_eq!(a.lease_timeout_ms, 5000);
        let a = Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--lease-timeout-ms", "0"]).unwrap();
        assert_eq!(a.lease_timeout_ms, 0, "0 turns expiry off");
        assert!(Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--lease-timeout-ms", "-1"]).is_err());
        assert_eq!(a.trusted_group, None, "nobody but root is trusted by default");
        let a = Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--trusted-group", "6"]).unwrap();
        assert_eq!(a.trusted_group, Some(6));
        assert_eq!((a.kworker_uid, a.max_connections, a.max_connections_per_uid), (None, 1024, 64));
        assert_eq!((a.max_slots_per_uid, a.root_reserved_slots, a.fenced_backoff_ms), (0, None, 10_000));
        let a = Args::try_parse_from([
            "nicfs",
            "--node",
            "n",
            "--socket",
            "s",
            "--kworker-uid",
            "7",
            "--root-reserved-slots",
            "0",
        ])
        .unwrap();
        assert_eq!((a.kworker_uid, a.root_reserved_slots), (Some(7), Some(0)));
        assert_eq!(a.into_config().cluster, None, "no ZooKeeper unless asked for");
        let a = Args::try_parse_from([
            "nicfs",
            "--node",
            "n",
            "--socket",
            "s",
            "--node-id",
            "2",
            "--zk",
            "h:1,k:2",
            "--cluster-key",
            "k",
            "--bulk-addr",
            "127.0.0.1:7001",
        ]);
        let mut want = ClusterConfig {
            node_id: 2,
            zk: "h:1,k:2".into(),
            key: "k".into(),
            peer_addr: "127.0.0.1:0".parse().unwrap(),
            bulk_addr: "127.0.0.1:7001".parse().unwrap(),
            session_timeout: Duration::from_millis(1500),
        };
        assert_eq!(a.unwrap().into_config().cluster, Some(want.clone()));
        let zk = ["nicfs", "--node", "n", "--socket", "s", "--node-id", "2", "--zk", "h:1,k:2", "--cluster-key", "k"];
        let a = Args::try_parse_from(zk.iter().chain(&["--bulk-addr", "127.0.0.1:7001", "--zk-session-ms", "4000"]));
        want.session_timeout = Duration::from_secs(4);
        assert_eq!(a.unwrap().into_config().cluster, Some(want));
        for bad in ["0", "199", "60001", "x"] {
            assert!(Args::try_parse_from(zk.iter().chain(&["--zk-session-ms", bad])).is_err(), "{bad}");
        }
        let no_zk = ["nicfs", "--node", "n", "--socket", "s", "--zk-session-ms", "1000"];
        assert!(Args::try_parse_from(no_zk).is_err(), "--zk-session-ms needs --zk");
        let no_key = ["nicfs", "--node", "n", "--socket", "s", "--node-id", "2", "--zk", "h:1"];
        assert!(Args::try_parse_from(no_key).is_err(), "--zk needs --cluster-key");
        for alone in [["--node-id", "2"], ["--zk", "h:1"], ["--cluster-key", "k"], ["--peer-addr", "127.0.0.1:1"]] {
            let mut argv = vec!["nicfs", "--node", "n", "--socket", "s"];
            argv.extend(alone);
            assert!(Args::try_parse_from(argv).is_err(), "{alone:?} needs the other flag");
        }
        for bad in ["", "h", "h:", ":1", "h:1,", "h:99999"] {
            let argv = ["nicfs", "--node", "n", "--socket", "s", "--node-id", "0", "--cluster-key", "k", "--zk", bad];
            assert!(Args::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_metrics_address_must_be_on_the_loopback() {
        let parse = |s: &str| Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--metrics-addr", s]);
        for (given, want) in [
            ("127.0.0.1:9100", "127.0.0.1:9100"),
            ("127.0.0.2:0", "127.0.0.2:0"),
            ("[::1]:9100", "[::1]:9100"),
            ("localhost:9101", "127.0.0.1:9101"),
        ] {
            assert_eq!(parse(given).unwrap().metrics_addr, Some(want.parse().unwrap()), "{given}");
        }
        for (given, why) in [
            ("0.0.0.0:9100", "not a loopback address"),
            ("192.168.1.5:9100", "not a loopback address"),
            ("[::]:9100", "not a loopback address"),
            ("[::ffff:127.0.0.1]:9100", "not a loopback address"),
            ("127.0.0.1", "expected IP:PORT"),
            ("127.0.0.1:70000", "expected IP:PORT"),
            ("example.com:80", "expected IP:PORT"),
            ("localhost:http", "not a port number"),
        ] {
            let e = parse(given).unwrap_err().to_string();
            assert!(e.contains(why), "{given}: {e}");
        }
    }
}
