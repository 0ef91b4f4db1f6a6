//! clustermgr against a real ZooKeeper started by `ZkServer` (each test its own directory
//! and free ports; the servers are killed when the test ends).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clustermgr::{Addrs, Config, Error, InodeRange, Member, ServerError, SessionStatus, ZkServer};

const READY: Duration = Duration::from_secs(40);

fn logs() {
    let _ = tracing_subscriber::fmt().with_test_writer().with_env_filter("clustermgr=info").try_init();
}

fn addrs(node: u32) -> Addrs {
    Addrs { low_latency: format!("127.0.0.1:{}", 7100 + node), bulk: format!("127.0.0.1:{}", 7200 + node) }
}

fn config(server: &ZkServer) -> Config {
    let mut c = Config::new(&server.connect_string());
    c.session_timeout = Duration::from_secs(2);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_join_leave_crash_and_leases_follow() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let server = ZkServer::start(dir.path(), 1, READY).unwrap();
    let cfg = config(&server);

    assert_eq!(ZkServer::recorded_connect(dir.path()), Some(server.connect_string()));
    let m1 = Member::join(&cfg, 1, addrs(1)).await.unwrap();
    assert_eq!(m1.session_timeout(), Duration::from_secs(2));
    let m2 = Member::join(&cfg, 2, addrs(2)).await.unwrap();
    let mut crash_cfg = cfg.clone();
    crash_cfg.close_on_drop = false;
    let m3 = Member::join(&crash_cfg, 3, addrs(3)).await.unwrap();
    let v = m1.wait_view(Duration::from_secs(5), |v| v.chain.len() == 3).await.unwrap();
    assert_eq!(v.epoch, 3, "one epoch per join");
    assert_eq!(v.nodes(), [1, 2, 3], "chain in join order");
    assert_eq!(v.member(2).unwrap().addrs, addrs(2));
    assert_eq!(m3.view().unwrap().epoch, 3);

    // Root-lease delegation: node 3 claims the root subtree, the others see it as owner.
    let d = m3.delegate(1).await.unwrap();
    assert_eq!((d.owner, d.epoch), (3, 3));
    assert_eq!(m1.delegate(1).await.unwrap(), d);

    // A clean leave: the view follows at once.
    let t = Instant::now();
    m2.leave().await;
    let v = m1.wait_view(Duration::from_secs(5), |v| v.epoch == 4).await.unwrap();
    assert_eq!(v.nodes(), [1, 3]);
    println!("clean leave seen after {:?}", t.elapsed());

    // A crash: the session is left to expire (2 s).
    let t = Instant::now();
    drop(m3);
    let v = m1.wait_view(Duration::from_secs(6), |v| v.epoch == 5).await.unwrap();
    let detected = t.elapsed();
    println!("crash detected after {detected:?} (session timeout 2 s)");
    assert_eq!(v.nodes(), [1]);
    assert!(detected < Duration::from_millis(4500), "detection took {detected:?}");

    // Its leases expire with it: node 1 takes the root lease over, in epoch 5.
    let d = m1.delegate(1).await.unwrap();
    assert_eq!((d.owner, d.epoch), (1, 5));

    // A restart of node 2 is a new incarnation at the tail.
    let m2 = Member::join(&cfg, 2, addrs(2)).await.unwrap();
    let v = m2.view().unwrap();
    assert_eq!((v.epoch, v.nodes()), (6, vec![1, 2]));
    assert!(v.member(2).unwrap().seq > 1);
    drop(m2);
    drop(m1);

    // `linefs down`: the recorded pid is stopped.
    let pids = server.detach();
    assert_eq!(pids.len(), 1);
    assert_eq!(ZkServer::stop_recorded(dir.path(), Duration::from_secs(5)).unwrap(), 1);
    assert!(!std::path::Path::new(&format!("/proc/{}", pids[0])).exists() || is_zombie_or_gone(pids[0]));
    assert_eq!(ZkServer::stop_recorded(dir.path(), Duration::from_secs(1)).unwrap(), 0);
}

fn is_zombie_or_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s.split_whitespace().nth(2) == Some("Z"),
        Err(_) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_restart_under_allocation_loses_nothing() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let mut server = ZkServer::start(dir.path(), 1, READY).unwrap();
    let mut cfg = config(&server);
    cfg.session_timeout = Duration::from_secs(4);
    let members: Vec<Arc<Member>> = vec![
        Arc::new(Member::join(&cfg, 1, addrs(1)).await.unwrap()),
        Arc::new(Member::join(&cfg, 2, addrs(2)).await.unwrap()),
    ];
    let stop = Arc::new(AtomicBool::new(false));
    let mut allocators = Vec::new();
    for m in &members {
        let (m, stop) = (m.clone(), stop.clone());
        allocators.push(tokio::spawn(async move {
            let mut acked: Vec<InodeRange> = Vec::new();
            let mut epochs = vec![m.view().unwrap().epoch];
            let mut views = m.views();
            while !stop.load(Ordering::Relaxed) {
                acked.push(m.alloc_inode_range(8).await.expect("allocation survives the outage"));
                if views.has_changed().unwrap_or(false) {
                    epochs.push(views.borrow_and_update().as_ref().unwrap().epoch);
                }
            }
            (acked, epochs)
        }));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.kill(0);
    let down = Instant::now();
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.restart(0).unwrap();
    server.wait_ready(READY).unwrap();
    println!("ZooKeeper down for {:?}", down.elapsed());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut owned = Vec::new();
    for (a, node) in allocators.into_iter().zip([1u32, 2]) {
        let (acked, epochs) = a.await.unwrap();
        assert!(epochs.windows(2).all(|w| w[0] <= w[1]), "epochs went backwards: {epochs:?}");
        owned.extend(acked.iter().map(|&r| (node, r)));
        all.extend(acked);
    }
    // Every acknowledged range is recorded with the node it went to (a range whose answer
    // was lost in the outage may be recorded too, never handed out); the records are disjoint.
    let listed = members[1].inode_ranges().await.unwrap();
    for o in &owned {
        assert!(listed.contains(o), "{o:?} not recorded in {listed:?}");
    }
    assert!(listed.windows(2).all(|w| w[0].1.end <= w[1].1.start), "{listed:?}");
    all.sort();
    assert!(all.len() > 10, "only {} ranges", all.len());
    for w in all.windows(2) {
        assert!(w[0].end <= w[1].start, "overlap: {:?} {:?}", w[0], w[1]);
    }
    // Nothing acknowledged lost: the counter, read after the restart, is past every range.
    let next = members[0].alloc_inode_range(1).await.unwrap();
    assert!(next.start >= all.last().unwrap().end);
    for m in &members {
        assert_eq!(m.status(), SessionStatus::Connected);
        let v = m.view().unwrap();
        assert_eq!(v.epoch, 2, "the sessions survived: no membership change");
    }
    println!("{} ranges handed out, none twice", all.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_zookeeper_is_a_clear_error_in_bounded_time() {
    logs();
    let port = clustermgr::server::free_ports(1).unwrap()[0];
    let mut cfg = Config::new(&format!("127.0.0.1:{port}"));
    cfg.connect_within = Duration::from_secs(2);
    let t = Instant::now();
    let err = match Member::join(&cfg, 1, addrs(1)).await {
        Err(e) => e,
        Ok(_) => panic!("joined a ZooKeeper that is not there"),
    };
    let took = t.elapsed();
    assert!(matches!(err, Error::Unreachable { .. }), "{err}");
    let line = err.to_string();
    assert!(!line.contains('\n') && line.contains(&format!("127.0.0.1:{port}")), "{line}");
    assert!(took < Duration::from_secs(4), "took {took:?}");
    println!("{line} (after {took:?})");
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let err = ZkServer::start_on(dir.path(), &[port], &[], READY).unwrap_err();
    assert!(matches!(err, ServerError::PortInUse(p) if p == port), "{err}");
    assert_eq!(err.to_string(), format!("ZooKeeper port 127.0.0.1:{port} is already in use"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensemble_leader_killed_changes_nothing_visible() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let mut server = ZkServer::start(dir.path(), 3, READY).unwrap();
    let cfg = config(&server);
    let m1 = Member::join(&cfg, 1, addrs(1)).await.unwrap();
    let m2 = Member::join(&cfg, 2, addrs(2)).await.unwrap();
    let before = m1.wait_view(Duration::from_secs(5), |v| v.chain.len() == 2).await.unwrap();
    let leader = server.leader().expect("an ensemble has a leader");
    let mut ranges = BTreeSet::new();
    ranges.insert(m1.alloc_inode_range(4).await.unwrap());
    server.kill(leader);
    let t = Instant::now();
    for i in 0..20u32 {
        let m = if i % 2 == 0 { &m1 } else { &m2 };
        assert!(ranges.insert(m.alloc_inode_range(4).await.unwrap()));
    }
    println!("20 allocations across the leader's death in {:?}", t.elapsed());
    // No session was lost, so no membership change.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for m in [&m1, &m2] {
        assert_eq!(m.view().unwrap(), before);
        assert_eq!(m.status(), SessionStatus::Connected);
    }
    let v: Vec<InodeRange> = ranges.into_iter().collect();
    assert!(v.windows(2).all(|w| w[0].end <= w[1].start));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_lost_past_the_session_timeout_expires_and_members_rejoin_above_their_epoch() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let mut server = ZkServer::start(dir.path(), 1, READY).unwrap();
    let cfg = config(&server);
    let m1 = Member::join(&cfg, 1, addrs(1)).await.unwrap();
    let m2 = Member::join(&cfg, 2, addrs(2)).await.unwrap();
    let before = m1.wait_view(Duration::from_secs(5), |v| v.chain.len() == 2).await.unwrap();
    let mut st = m1.statuses();
    server.kill(0);
    let t = Instant::now();
    assert!(!m1.may_be_expired());
    let mut seen = vec![*st.borrow_and_update()];
    let mut fenced_after = None;
    while *seen.last().unwrap() != SessionStatus::Expired {
        if let Ok(r) = tokio::time::timeout(Duration::from_millis(50), st.changed()).await {
            r.unwrap();
            seen.push(*st.borrow_and_update());
        }
        if fenced_after.is_none() && m1.may_be_expired() {
            fenced_after = Some(t.elapsed());
            assert_eq!(m1.status(), SessionStatus::Suspended, "fenced before the client says expired");
        }
        assert!(t.elapsed() < Duration::from_secs(8), "expiry is reported: {seen:?}");
    }
    let fenced_after = fenced_after.expect("may_be_expired before Expired");
    println!("session states {seen:?}; may be expired after {fenced_after:?}, expired after {:?}", t.elapsed());
    // The server cannot expire a session before 3/5 of its timeout after the last answer.
    assert!(fenced_after < Duration::from_millis(1200), "{fenced_after:?}");
    assert!(seen.contains(&SessionStatus::Suspended), "{seen:?}");
    // An expired member refuses at once, and keeps its last view.
    let t = Instant::now();
    assert!(matches!(m1.alloc_inode_range(1).await, Err(Error::SessionExpired)));
    assert!(t.elapsed() < Duration::from_millis(500));
    assert_eq!(m1.view().unwrap(), before);

    server.restart(0).unwrap();
    server.wait_ready(READY).unwrap();
    // Rejoin as nicfs will: from the epoch it persisted, as new incarnations.
    let mut again = cfg.clone();
    again.epoch_floor = before.epoch;
    let t = Instant::now();
    let n1 = Member::join(&again, 1, addrs(1)).await.unwrap();
    let n2 = Member::join(&again, 2, addrs(2)).await.unwrap();
    let seqs = (n1.me().seq, n2.me().seq);
    let v = n1.wait_view(Duration::from_secs(8), |v| v.contains(1, seqs.0) && v.contains(2, seqs.1)).await.unwrap();
    println!("rejoined in {:?}: epoch {} → {}", t.elapsed(), before.epoch, v.epoch);
    assert!(v.epoch > before.epoch);
    assert_eq!(v.nodes(), [1, 2]);
    drop((m1, m2));
}
