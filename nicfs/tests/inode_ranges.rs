//! Cluster-wide unique inode numbers: three nicfs of one cluster over a real ZooKeeper hand
//! out disjoint numbers, each from the ranges clustermgr cut for it; a node restarted with
//! ZooKeeper gone hands out only numbers of the ranges it persisted (none another node got),
//! and a clear ENOSPC once they are exhausted.

mod support;

use clustermgr::ZkServer;
use linefs_pm::layout::FormatParams;
use linefs_proto::{AllocInodes, Control, RemoteError};
use std::collections::BTreeSet;
use std::time::Duration;
use support::*;

/// A cluster key file in a directory of its own (kept while the test runs).
fn key_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.key");
    linefs_peer::ClusterKey::generate(&path).unwrap();
    let path = path.display().to_string();
    (dir, path)
}

/// Every number the client can get: its attach grant, then `AllocInodes` until refused
/// (at most `rounds`); the refusal, if any.
fn take_numbers(c: &mut Client, rounds: usize) -> (BTreeSet<u64>, Option<String>) {
    let a = c.attached.inodes;
    let mut got: BTreeSet<u64> = (a.first..a.first + a.count).collect();
    for _ in 0..rounds {
        match c.request(Control::AllocInodes(AllocInodes { count: 8 })) {
            Control::InodeRange(r) => {
                assert!(r.count > 0, "{r:?}");
                for ino in r.first..r.first + r.count {
                    assert!(got.insert(ino), "number {ino} handed out twice to one client");
                }
            }
            Control::Error(e) => {
                assert_eq!(e.code, RemoteError::NoSpace, "{e:?}");
                return (got, Some(e.message));
            }
            other => panic!("AllocInodes answered {other:?}"),
        }
    }
    (got, None)
}

/// The ranges of a node's `inode-ranges.lfs` (layout in nicfs's `node/alloc/ranges.rs`).
fn persisted_ranges(d: &Daemon) -> Vec<(u64, u64)> {
    let b = std::fs::read(d.node.join("inode-ranges.lfs")).unwrap();
    assert_eq!(&b[..8], b"LFSINOR\0");
    let n = u32::from_le_bytes(b[12..16].try_into().unwrap()) as usize;
    (0..n)
        .map(|i| {
            let at = 24 + 16 * i;
            let word = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
            (word(at), word(at + 8))
        })
        .collect()
}

#[test]
fn three_nodes_hand_out_disjoint_numbers_and_a_restart_repeats_none() {
    let zdir = tempfile::tempdir().unwrap();
    let zk = ZkServer::start(zdir.path(), 1, Duration::from_secs(30)).unwrap();
    let connect = zk.connect_string();
    let (_k, key) = key_file();
    // Nodes of 4096 inodes (ranges of 512), formatted again after a first start on their own.
    let mut nodes: Vec<Daemon> = (0..3)
        .map(|i| {
            let mut d = Daemon::start(2);
            let (status, _) = d.stop(libc::SIGTERM);
            assert!(status.success());
            let params = FormatParams { size: 16 << 20, log_size: 1 << 20, log_slots: 2, inodes: 4096 };
            std::fs::remove_dir_all(&d.node).unwrap();
            linefs_pm::mkfs::format_dir(&d.node, &params).unwrap();
            d.args = ["--node-id", &i.to_string(), "--zk", &connect, "--cluster-key", &key]
                .iter()
                .map(|s| s.to_string())
                .collect();
            d.launch();
            d
        })
        .collect();
    for d in &nodes {
        d.wait_status("the node in a view", |s| s["cluster"]["epoch"].as_u64().unwrap_or(0) >= 1);
    }
    // Each node's client takes numbers in turns, so that the nodes' ranges interleave.
    let mut clients: Vec<Client> = nodes.iter().map(|d| Client::attach(&d.socket)).collect();
    let mut got: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); 3];
    for _ in 0..3 {
        for (i, c) in clients.iter_mut().enumerate() {
            let (numbers, refused) = take_numbers(c, 1);
            assert_eq!(refused, None, "node {i}");
            got[i].extend(numbers);
        }
    }
    for i in 0..3 {
        assert!(got[i].len() >= 16, "node {i} got {:?}", got[i]);
        assert!(got[i].iter().all(|n| (2..4096).contains(n)), "{:?}", got[i]);
        let ranges = persisted_ranges(&nodes[i]);
        assert!(
            got[i].iter().all(|&n| ranges.iter().any(|&(s, e)| (s..e).contains(&n))),
            "node {i}'s numbers {:?} are all in its persisted ranges {ranges:?}",
            got[i]
        );
        for j in 0..i {
            assert!(got[i].is_disjoint(&got[j]), "nodes {i} and {j} share {:?}", got[i].intersection(&got[j]));
        }
    }
    let st = nodes[0].status();
    assert_eq!(st["cluster"]["session"], "connected", "{st:#}");
    drop(clients);

    // Node 0 restarts while ZooKeeper is gone: it hands out numbers of its persisted ranges
    // only, never one of another node, then refuses with the reason.
    let (status, _) = nodes[0].stop(libc::SIGTERM);
    assert!(status.success());
    // Read once it has stopped: a refill may have added a range until then.
    let ranges0 = persisted_ranges(&nodes[0]);
    drop(zk);
    nodes[0].launch();
    let mut c = Client::attach(&nodes[0].socket);
    let (after, refused) = take_numbers(&mut c, 1000);
    let why = refused.expect("the persisted ranges run out");
    assert!(why.contains("no new range") && why.contains("ZooKeeper"), "{why}");
    assert!(!after.is_empty());
    for n in &after {
        assert!(ranges0.iter().any(|&(s, e)| (s..e).contains(n)), "{n} not in node 0's ranges {ranges0:?}");
        assert!(!got[1].contains(n) && !got[2].contains(n), "{n} was another node's");
    }
    drop(c);
    assert_eq!(persisted_ranges(&nodes[0]), ranges0, "no range without ZooKeeper");
    let (status, err) = nodes[0].stop(libc::SIGTERM);
    assert!(status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
