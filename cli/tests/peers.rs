//! The peer links of a cluster through the built `linefs` binary, over a real ZooKeeper and
//! real nicfs daemons on loopback TCP: `up --nodes 3` makes the cluster key (0600, kept across
//! `up`s) and every node links both classes to both others, with beats (epoch seen, round
//! trip); `kill-nic 1` makes the others drop it and `restart-nic 1` brings the links back;
//! an intruder with the wrong key, one speaking garbage and one that says nothing are refused
//! and logged while the daemon goes on linking and serving.
//!
//! Needs `nicfs` and `kworker` built beside `linefs` (`cargo build --bins`), java and the
//! `zookeeper` package (scripts/install-deps.sh).

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use linefs_peer::{Class, ClusterKey, LinkConfig, TcpLink};
use serde_json::Value;
#[path = "common/cli.rs"]
mod common;
use common::{ok, status, wait_for, Down};

/// Node `n`'s links as `status --json` shows them.
fn links(st: &Value, n: usize) -> Vec<Value> {
    st["cluster"]["nodes"][n]["peers"]["links"].as_array().cloned().unwrap_or_default()
}

/// Whether node `n` has both classes connected to exactly `others`, each heard at the
/// cluster's epoch with a round trip measured.
fn linked(st: &Value, n: usize, others: &[u64]) -> bool {
    let epoch = st["cluster"]["epoch"].as_u64();
    let l = links(st, n);
    l.len() == others.len()
        && l.iter().zip(others).all(|(p, &o)| {
            p["node"] == o
                && p["low_latency"] == "connected"
                && p["bulk"] == "connected"
                && p["epoch_seen"].as_u64() == epoch
                && p["rtt_us"].is_u64()
        })
}

fn nicfs_log(dir: &Path, n: usize) -> String {
    fs::read_to_string(dir.join("logs").join(format!("nicfs-{n}.log"))).unwrap_or_default()
}

#[test]
fn three_nodes_link_both_classes_drop_a_killed_peer_relink_it_and_refuse_intruders() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "3", "--pm-size", "64M"]);
    let key_path = dir.join("cluster.key");
    let meta = fs::metadata(&key_path).expect("up makes the cluster key");
    assert_eq!((meta.permissions().mode() & 0o777, meta.len()), (0o600, 32));
    let key = fs::read(&key_path).unwrap();

    let mut st = Value::Null;
    wait_for("every node linked to both others", Duration::from_secs(20), || {
        st = status(&dir);
        linked(&st, 0, &[1, 2]) && linked(&st, 1, &[0, 2]) && linked(&st, 2, &[0, 1])
    });
    let text = ok(&dir, &["status"]);
    assert!(text.contains("node 1: low-latency connected, bulk connected, epoch seen"), "{text}");
    let port = |n: usize, class: &str| -> SocketAddr {
        st["cluster"]["nodes"][n]["peers"][class].as_str().unwrap().parse().unwrap()
    };
    let (ll2, bulk2) = (port(2, "low_latency_addr"), port(2, "bulk_addr"));

    // Intruders at node 2: the wrong key, garbage, and one that says nothing.
    let pid2 = fs::read_to_string(dir.join("run").join("nicfs-2.pid")).unwrap();
    let silent = TcpStream::connect(ll2).unwrap();
    let wrong = ClusterKey::from_bytes([7; 32]);
    let cfg = LinkConfig { handshake_timeout: Duration::from_secs(5), ..LinkConfig::default() };
    for (addr, class) in [(ll2, Class::LowLatency), (bulk2, Class::Bulk)] {
        let r = TcpLink::connect(addr, &wrong, 0, class, Some(2), &cfg);
        assert!(r.is_err(), "a wrong key is refused");
    }
    let mut garbage = TcpStream::connect(bulk2).unwrap();
    garbage.write_all(&[0xAB; 300]).unwrap();
    garbage.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut sink = Vec::new();
    let _ = garbage.read_to_end(&mut sink);
    // The connection was closed by node 2, nothing of ours accepted.
    wait_for("node 2 to log the refusals", Duration::from_secs(5), || {
        let log = nicfs_log(&dir, 2);
        log.matches("peer handshake refused").count() >= 3
    });
    let log = nicfs_log(&dir, 2);
    assert!(log.contains(&format!("peer={}", garbage.local_addr().unwrap())), "the address is logged:\n{log}");
    drop(silent);

    // Node 1 killed: the others drop it; restarted: the links come back, node 2 still serving
    // while intruders that say nothing hold handshakes on both its ports.
    ok(&dir, &["kill-nic", "1"]);
    wait_for("nodes 0 and 2 to drop node 1", Duration::from_secs(20), || {
        st = status(&dir);
        linked(&st, 0, &[2]) && linked(&st, 2, &[0])
    });
    let stalled: Vec<TcpStream> = [ll2, bulk2, ll2, bulk2].iter().map(|a| TcpStream::connect(a).unwrap()).collect();
    ok(&dir, &["restart-nic", "1"]);
    wait_for("the links to node 1 back", Duration::from_secs(20), || {
        st = status(&dir);
        linked(&st, 0, &[1, 2]) && linked(&st, 1, &[0, 2]) && linked(&st, 2, &[0, 1])
    });
    drop(stalled);
    assert_eq!(fs::read_to_string(dir.join("run").join("nicfs-2.pid")).unwrap(), pid2, "the same nicfs 2");
    let refused = st["cluster"]["nodes"][2]["peers"]["refused"].as_u64().unwrap();
    assert!(refused >= 3, "node 2 counted the intruders: {refused}");
    for n in 0..3 {
        assert!(!nicfs_log(&dir, n).contains("panicked"), "nicfs {n} never panics");
    }

    // The key is kept across `up`s.
    ok(&dir, &["down"]);
    ok(&dir, &["up", "--nodes", "3"]);
    assert_eq!(fs::read(&key_path).unwrap(), key, "up never overwrites the key");
    ok(&dir, &["down"]);
}
