//! nicfs as a member of a cluster, without a ZooKeeper to reach: with `--node-id` and `--zk`
//! it serves its clients while it keeps trying to join, and stops promptly; a node record
//! naming another node refuses the start in one line; without the flags there is no cluster.
//! (With a real ZooKeeper: `cli/tests/membership.rs`.)

mod support;

use linefs_pm::noderecord::NodeRecord;
use linefs_pm::PmRegion;
use std::time::{Duration, Instant};
use support::*;

fn public(d: &Daemon) -> PmRegion {
    PmRegion::open(&d.node.join(linefs_pm::node::PUBLIC_FILE)).unwrap()
}

/// A cluster key file in a directory of its own (kept while the test runs).
fn key_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.key");
    linefs_peer::ClusterKey::generate(&path).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

#[test]
fn with_zookeeper_unreachable_nicfs_serves_while_it_keeps_joining() {
    let (_k, key) = key_file();
    let mut d = Daemon::start_with(2, &["--node-id", "3", "--zk", "127.0.0.1:1", "--cluster-key", &key]);
    let st = d.wait_status("the cluster in the status", |s| s["cluster"]["session"] == "joining");
    // It listens for peers on two loopback ports of the kernel's choice, linked to nobody.
    let peers = &st["peers"];
    for class in ["low_latency_addr", "bulk_addr"] {
        let addr: std::net::SocketAddr = peers[class].as_str().unwrap().parse().unwrap();
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{st:#}");
    }
    assert_eq!(peers["peers"], serde_json::json!([]), "{st:#}");
    assert_eq!((&st["cluster"]["node_id"], &st["cluster"]["zk"]), (&3.into(), &"127.0.0.1:1".into()), "{st:#}");
    assert_eq!(st["cluster"]["epoch"], 0, "no view: {st:#}");
    // Its clients are served meanwhile. It has no inode range from the cluster yet, so the
    // client attaches with no numbers and asking for some is a prompt, clear ENOSPC.
    let mut c = Client::attach(&d.socket);
    assert_eq!(c.attached.inodes.count, 0, "{:?}", c.attached.inodes);
    c.write_lease(linefs_pm::record::ROOT_INO);
    c.release_all();
    let asked = Instant::now();
    match c.request(linefs_proto::Control::AllocInodes(linefs_proto::AllocInodes { count: 4 })) {
        linefs_proto::Control::Error(e) => {
            assert_eq!(e.code, linefs_proto::RemoteError::NoSpace, "{e:?}");
            assert!(e.message.contains("not joined to the cluster"), "{e:?}");
        }
        other => panic!("AllocInodes without a range answered {other:?}"),
    }
    // Bounded: the join is waited for 3 s at most (nicfs's RANGE_WITHIN and AWAIT_NUMBERS).
    assert!(asked.elapsed() < Duration::from_secs(5), "answered in {:?}", asked.elapsed());
    drop(c);
    assert!(d.alive());
    let asked = Instant::now();
    let (status, err) = d.stop(libc::SIGTERM);
    assert!(status.success(), "{status}: {err}");
    assert!(asked.elapsed() < Duration::from_secs(5), "stopping took {:?}", asked.elapsed());
    assert!(err.contains("ZooKeeper unreachable; retrying"), "the retries are logged: {err}");
    assert!(!err.contains("panicked"), "{err}");
    // Nothing was persisted: no view was ever seen.
    assert_eq!(NodeRecord::load(&public(&d)).unwrap().epoch, 0);
}

#[test]
fn a_node_record_naming_another_node_refuses_the_start_and_no_flags_means_no_cluster() {
    let mut d = Daemon::start(2);
    assert!(d.status()["cluster"].is_null(), "without --zk nicfs is a node on its own");
    let (status, _) = d.stop(libc::SIGTERM);
    assert!(status.success());
    let region = public(&d);
    let rec = NodeRecord::load(&region).unwrap();
    NodeRecord::store(&region, &NodeRecord { node_id: Some(5), ..rec }).unwrap();
    drop(region);
    let (_k, key) = key_file();
    d.args = ["--node-id", "0", "--zk", "127.0.0.1:1", "--cluster-key", &key].iter().map(|s| s.to_string()).collect();
    let out = d.spawn(&d.socket.clone()).wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("nicfs: ") && last.contains("the node record says this is node 5, not node 0"), "{err}");
}

#[test]
fn a_missing_or_too_open_cluster_key_refuses_the_start_in_one_line() {
    let (k, key) = key_file();
    let mut d = Daemon::start(2);
    let (status, _) = d.stop(libc::SIGTERM);
    assert!(status.success());
    let missing = k.path().join("none").display().to_string();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    for (path, want) in [(&missing, "does not exist"), (&key, "has mode 0644")] {
        d.args =
            ["--node-id", "0", "--zk", "127.0.0.1:1", "--cluster-key", path].iter().map(|s| s.to_string()).collect();
        let out = d.spawn(&d.socket.clone()).wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert!(last.starts_with("nicfs: ") && last.contains(want), "{err}");
    }
}
