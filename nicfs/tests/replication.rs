//! Chain replication between three real nicfs daemons over a real ZooKeeper (clustermgr's
//! `ZkServer`) and their authenticated peer links: a client of node 0 writes files and
//! fsyncs; once the fsync returns, the bytes are in node 1's and node 2's copies of its log,
//! and once published there the files are in their public areas. An fsync does not return
//! while a replica is stopped (SIGSTOP), and does once it runs again (SIGCONT). A chunk
//! forged by a process that holds the cluster key — entries creating a file in the root
//! directory, with the credentials of uid 65534 — is refused by the replica's admission and
//! logged, and the replica serves on. Highly compressible data is shipped lz4-compressed,
//! and the replication stages' counters (bytes saved, compression on, flow, per-peer queues
//! and latencies) are in the status file.
//!
//! Needs java and the `zookeeper` package (scripts/install-deps.sh), as the cli cluster
//! tests do.

mod support;

use clustermgr::ZkServer;
use linefs_peer::repl::{self, Creds, ReplFrame};
use linefs_peer::{Class, ClusterKey, LinkConfig, TcpLink};
use linefs_pm::layout::{Superblock, BLOCK_SIZE};
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::PublicReader;
use linefs_pm::replica::ReplicaLog;
use linefs_pm::PmRegion;
use linefs_proto::frame::{Header, CHECK_NONE, HEADER_LEN};
use linefs_proto::{Control, FrameLink, Fsync, PROTOCOL_VERSION};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;

/// Log slots per node; the forged chunk names node 0's last one, which no client uses.
const SLOTS: u32 = 4;

fn key_file(dir: &std::path::Path) -> String {
    let path = dir.join("cluster.key");
    ClusterKey::generate(&path).unwrap();
    path.display().to_string()
}

/// Waits (up to 20 s) until `f` holds.
fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn public(d: &Daemon) -> PublicReader {
    let region = PmRegion::open_read_only(&d.node.join(linefs_pm::node::PUBLIC_FILE)).unwrap();
    let geo = Superblock::read(&region).unwrap().geometry;
    PublicReader::new(Arc::new(region), geo)
}

/// Node `d`'s copy of node 0's log `slot`, if it exists.
fn copy(d: &Daemon, slot: u32) -> Option<ReplicaLog> {
    let region = PmRegion::open_read_only(&d.node.join(linefs_pm::node::PUBLIC_FILE)).unwrap();
    let geo = Superblock::read(&region).unwrap().geometry;
    ReplicaLog::open(&d.node, &geo, 0, slot).ok()
}

/// Node `d`'s copy of node 0's log `slot` is published up to `lsn` (status).
fn published_to(d: &Daemon, slot: u32, lsn: u64) -> bool {
    let st = d.status();
    let copies = st["replication"]["copies"].as_array().cloned().unwrap_or_default();
    copies.iter().any(|c| c["origin"] == 0 && c["slot"] == slot && c["published_lsn"].as_u64() >= Some(lsn))
}

/// The log bytes `[from, to)` of `log` (no wrap: the tests write less than a ring).
fn log_bytes(log: &LogSlot, from: u64, to: u64) -> Vec<u8> {
    let mut buf = vec![0u8; (to - from) as usize];
    log.region().read(BLOCK_SIZE + from % log.ring_bytes(), &mut buf).unwrap();
    buf
}

fn fsync(c: &mut Client) -> u64 {
    match c.request(Control::Fsync(Fsync { lsn: c.tail })) {
        Control::FsyncDone(d) => d.durable_lsn,
        other => panic!("expected FsyncDone, got {other:?}"),
    }
}

fn replication(st: &Value) -> &Value {
    &st["replication"]
}

#[test]
fn fsynced_bytes_are_on_every_replica_a_stopped_one_holds_fsync_and_forged_chunks_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let zk =
        ZkServer::start(tmp.path(), 1, Duration::from_secs(20)).expect("a ZooKeeper server (java, zookeeper package)");
    let key = key_file(tmp.path());
    let connect = zk.connect_string();
    let mut nodes: Vec<Daemon> = (0..3)
        .map(|n| {
            let id = n.to_string();
            Daemon::start_with(SLOTS, &["--node-id", &id, "--zk", &connect, "--cluster-key", &key])
        })
        .collect();
    // Every node's replication has the three-node view, and the links are up.
    until("a view of three nodes on every node's replication, links up", || {
        let sts: Vec<Value> = nodes.iter().map(|d| d.status()).collect();
        let epoch = replication(&sts[0])["epoch"].clone();
        sts.iter().all(|st| {
            replication(st)["epoch"] == epoch
                && replication(st)["chain"].as_array().is_some_and(|c| c.len() == 3)
                && st["peers"]["peers"].as_array().is_some_and(|p| {
                    p.len() == 2
                        && p.iter()
                            .all(|l| l["low_latency"]["state"] == "connected" && l["bulk"]["state"] == "connected")
                })
        })
    });

    // A client of node 0 writes two files and fsyncs: the bytes are then durable in both
    // copies, as node 0's log holds them.
    let mut c = Client::attach(&nodes[0].socket);
    let slot = c.attached.slot;
    let first = c.attached.inodes.first;
    let start = c.tail;
    c.append(&create_file(first, b"alpha", b"replicated bytes, alpha"));
    c.append(&create_file(first + 1, b"beta", b"and beta"));
    let end = c.tail;
    let durable = fsync(&mut c);
    assert!(durable >= end, "FsyncDone at {durable}, the log ends at {end}");
    let written = log_bytes(&c.log, start, end);
    for n in [1, 2] {
        let copy = copy(&nodes[n], slot).unwrap_or_else(|| panic!("node {n} has no copy of node 0's slot {slot}"));
        assert!(copy.durable_end().unwrap() >= end, "node {n}'s copy is durable to {end} when the fsync returns");
        assert_eq!(log_bytes(copy.log(), start, end), written, "node {n}'s copy holds node 0's bytes");
    }
    // Published on the replicas too: the files are in their public areas.
    for n in [1, 2] {
        until(&format!("node {n} to publish the files"), || published_to(&nodes[n], slot, end));
        let p = public(&nodes[n]);
        assert_eq!(lookup(&p, b"alpha"), Some(first));
        assert_eq!(read_file(&p, first, 23), b"replicated bytes, alpha");
        assert_eq!(read_file(&p, first + 1, 8), b"and beta");
    }
    // Acknowledged by both and published here: the bytes are let go.
    until("node 0 to reclaim what both replicas hold", || {
        let st = nodes[0].status();
        let logs = replication(&st)["logs"].as_array().cloned().unwrap_or_default();
        logs.iter().any(|l| l["slot"] == slot && l["reclaimed_lsn"].as_u64() >= Some(end))
            && replication(&st)["memory_bytes"] == 0
    });
    let st = nodes[0].status();
    let log = replication(&st)["logs"].as_array().unwrap().iter().find(|l| l["slot"] == slot).cloned().unwrap();
    assert!(log["replicated_lsn"].as_u64().unwrap() >= end, "{st:#}");
    for m in log["members"].as_array().unwrap() {
        assert!(m["acked_lsn"].as_u64().unwrap() >= end && m["lag_bytes"] == 0, "{st:#}");
    }
    assert!(replication(&st)["counters"]["chunks_sent"].as_u64().unwrap() >= 1, "{st:#}");
    let st2 = nodes[2].status();
    let copies = &replication(&st2)["copies"];
    assert!(copies.as_array().unwrap().iter().any(|c| c["origin"] == 0 && c["durable_lsn"].as_u64() >= Some(end)));

    // Highly compressible data published without an fsync, more than a chunk: the proactive
    // chunk goes through the bulk link's compress stage, which the controller keeps on (it
    // decides nothing before its dwell), and the stages' counters show the saving in the
    // status file.
    let text = b"replicated and compressible text. ".repeat(3 << 10);
    for i in 0..3u64 {
        c.append(&create_file(first + 10 + i, format!("text{i}").as_bytes(), &text));
    }
    c.chunk_ready();
    let _ = expect_published(&c);
    let tail = c.tail;
    for n in [1, 2] {
        until(&format!("node {n} to publish the compressible files"), || published_to(&nodes[n], slot, tail));
    }
    assert_eq!(read_file(&public(&nodes[2]), first + 12, text.len()), text);
    until("node 0 to count a compressed chunk and its ack", || {
        let st = nodes[0].status();
        let r = replication(&st);
        r["counters"]["saved_bytes"].as_u64() > Some(0)
            && r["peers"].as_array().is_some_and(|p| p.iter().any(|p| p["send_to_ack"]["samples"].as_u64() > Some(0)))
    });
    let st = nodes[0].status();
    let r = replication(&st);
    let counters = &r["counters"];
    assert_eq!(r["compression"]["on"], true, "{st:#}");
    assert!(counters["chunks_compressed"].as_u64() >= Some(1), "{st:#}");
    assert!(counters["chunks_uncompressed"].as_u64() >= Some(1), "the fsynced chunks are not compressed: {st:#}");
    let (raw, wire, saved) = (&counters["raw_bytes_sent"], &counters["bytes_sent"], &counters["saved_bytes"]);
    assert_eq!(raw.as_u64().unwrap() - wire.as_u64().unwrap(), saved.as_u64().unwrap(), "{st:#}");
    assert!(saved.as_u64().unwrap() > 100 << 10, "most of the text is saved on the wire: {st:#}");
    assert_eq!((&r["flow"]["paused"], &r["flow"]["high_bytes"]), (&Value::Bool(false), &Value::from(64u64 << 20)));
    assert!(r["flow"]["pauses"].is_u64(), "{st:#}");
    let peers = r["peers"].as_array().unwrap();
    assert!(peers.iter().any(|p| p["append_to_send"]["samples"].as_u64() > Some(0)), "{st:#}");
    assert!(peers.iter().all(|p| p["compress_queue"].is_u64() && p["send_to_ack"]["p99_us"].is_u64()), "{st:#}");

    // Node 2 stopped: an fsync does not return (well within ZooKeeper's session timeout,
    // so node 2 stays in the view); once it runs again, the fsync returns.
    let pid2 = nodes[2].child.as_ref().unwrap().id() as i32;
    // SAFETY: kill(2) on the pid of a child we started and have not reaped.
    assert_eq!(unsafe { libc::kill(pid2, libc::SIGSTOP) }, 0);
    c.append(&create_file(first + 2, b"gamma", b"held back"));
    let asked = c.send(Control::Fsync(Fsync { lsn: c.tail }));
    let early = c.try_recv(Duration::from_millis(800));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid2, libc::SIGCONT) }, 0);
    assert!(early.is_none(), "an fsync returned while a replica was stopped: {early:?}");
    let f = c.recv_frame();
    assert_eq!(f.id, asked);
    assert!(matches!(f.msg, Control::FsyncDone(d) if d.durable_lsn >= c.tail), "{:?}", f.msg);
    let gamma_end = c.tail;
    assert!(copy(&nodes[2], slot).unwrap().durable_end().unwrap() >= gamma_end);

    // A forged chunk: a process with the key says it is node 0 and sends node 1 an entry
    // creating a file in the root directory (root's), as uid 65534.
    let epoch = replication(&nodes[1].status())["epoch"].as_u64().unwrap();
    let geo = Superblock::read(&PmRegion::open_read_only(&nodes[1].node.join(linefs_pm::node::PUBLIC_FILE)).unwrap())
        .unwrap()
        .geometry;
    let scratch =
        LogSlot::new(Arc::new(PmRegion::traced_from_image(vec![0u8; geo.log_size() as usize])), &geo, SLOTS - 1);
    scratch.format().unwrap();
    let forged_ino = first + 50;
    let loc = scratch.append(0, 0, create_file(forged_ino, b"forged", b"not yours").payload()).unwrap();
    let data = log_bytes(&scratch, 0, loc.end);
    let nobody = Creds { uid: 65534, gid: 65534, groups: vec![], trusted: false };
    let frame = ReplFrame::Chunk { stream: (0, SLOTS - 1), epoch, start: 0, urgent: true, creds: nobody, data };
    let (kind, payload, _) = repl::encode(&frame, false).unwrap();
    let header = Header {
        version: PROTOCOL_VERSION,
        kind,
        payload_len: payload.len() as u32,
        fd_count: 0,
        check: CHECK_NONE,
        id: 1,
    };
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(&header.encode());
    bytes.extend_from_slice(&payload);
    let ll1: std::net::SocketAddr = nodes[1].status()["peers"]["low_latency_addr"].as_str().unwrap().parse().unwrap();
    let k = ClusterKey::load(std::path::Path::new(&key)).unwrap();
    let link = TcpLink::connect(ll1, &k, 0, Class::LowLatency, Some(1), &LinkConfig::default()).unwrap();
    link.send_raw(&bytes).unwrap();
    until("node 1 to count the refused entry", || {
        replication(&nodes[1].status())["counters"]["refused_entries"].as_u64() >= Some(1)
    });
    link.close();
    assert!(nodes[1].alive(), "node 1 serves on");
    assert_eq!(lookup(&public(&nodes[1]), b"forged"), None, "the forged file is not published");
    // Node 0's own replication goes on (its link to node 1 is dialled again).
    c.append(&create_file(first + 3, b"delta", b"after the forgery"));
    assert!(fsync(&mut c) >= c.tail);
    for n in [1, 2] {
        until(&format!("node {n} to publish delta"), || published_to(&nodes[n], slot, c.tail));
        assert_eq!(read_file(&public(&nodes[n]), first + 3, 17), b"after the forgery");
    }

    // A client of node 0 logs an entry it holds no lease for: refused, its session fails
    // and the slot's unpublished suffix is dropped. The slot's next client is replicated on
    // (the dropped range goes down the chain as entries without records).
    let mut bad = Client::attach(&nodes[0].socket);
    let bad_slot = bad.attached.slot;
    bad.append_unleased(&create_file(bad.attached.inodes.first, b"unleased", b"refused"));
    bad.send(Control::Fsync(Fsync { lsn: bad.tail }));
    let r = bad.recv_frame().msg;
    assert!(matches!(r, Control::Rejected(_)), "{r:?}");
    drop(bad);
    until("the refused client's slot to be free", || {
        let st = nodes[0].status();
        !st["sessions"].as_array().unwrap().iter().any(|s| s["slot"] == bad_slot)
    });
    let mut next = Client::attach(&nodes[0].socket);
    assert_eq!(next.attached.slot, bad_slot);
    let ino = next.attached.inodes.first;
    next.append(&create_file(ino, b"epsilon", b"after a gap"));
    assert!(fsync(&mut next) >= next.tail);
    for n in [1, 2] {
        until(&format!("node {n} to publish epsilon"), || published_to(&nodes[n], bad_slot, next.tail));
        assert_eq!(read_file(&public(&nodes[n]), ino, 11), b"after a gap");
        assert_eq!(lookup(&public(&nodes[n]), b"unleased"), None);
    }
    // The refused entry is discarded one of two ways, by timing: the checkpoint moved past it
    // (a gap, replicated as empty entries: 1) or the slot's fresh log file starting at its LSN
    // (the next client overwrites it: no gap, 0). Either way the replicas hold the next
    // client's entries and never the refused one (checked above).
    let gaps = replication(&nodes[0].status())["counters"]["gaps_filled"].as_u64();
    assert!(matches!(gaps, Some(0 | 1)), "{gaps:?}");
    until("node 0 to let go of everything both replicas hold", || replication(&nodes[0].status())["memory_bytes"] == 0);
    // A tail shorter than a chunk, published and never fsynced, still reaches the replicas.
    next.append(&create_file(ino + 1, b"zeta", b"no fsync"));
    next.chunk_ready();
    let _ = expect_published(&next);
    let tail = next.tail;
    for n in [1, 2] {
        until(&format!("node {n} to hold the unfsynced tail"), || published_to(&nodes[n], bad_slot, tail));
    }
    drop(next);
    drop(c);

    let mut logs = Vec::new();
    for d in nodes.iter_mut() {
        let (status, err) = d.stop(libc::SIGTERM);
        assert!(status.success(), "{status}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        logs.push(err);
    }
    assert!(logs[1].contains("replicated entry refused"), "node 1 logs the refusal:\n{}", logs[1]);
    drop(zk);
}
