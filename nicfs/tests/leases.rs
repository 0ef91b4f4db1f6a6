//! Leases through the real protocol against the real `nicfs` process: a writer downgraded
//! for a reader once its log is published, an upgrade revoking the other reader, a client
//! dying or failing while it holds a lease, stale lease ids, LeaseRelease, refusals, and a
//! flood of requests that does not hold up another client.

mod support;

use linefs_pm::record::{dtype, EntryBuilder};
use linefs_proto::*;
use std::time::{Duration, Instant};
use support::*;

/// Nothing arrives on the control connection for a while.
fn quiet(c: &Client, what: &str) {
    if let Some(f) = c.try_recv(Duration::from_millis(300)) {
        panic!("{what}: got {f:?}");
    }
}

fn error_of(reply: Control) -> i32 {
    match reply {
        Control::Error(e) => e.errno(),
        other => panic!("expected an Error, got {other:?}"),
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn a_reader_waits_for_the_writer_s_log_to_be_published_and_an_upgrade_revokes_it() {
    let d = Daemon::start(2);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    // A creates a file with a number of its own: it holds the write lease implicitly, and
    // asking for it answers at once with the lease id.
    let ino = a.attached.inodes.first;
    let id = ask(&mut a, ino, LeaseMode::Write);
    let wa = granted(&a, id);
    assert_eq!((wa.inode, wa.mode), (ino, LeaseMode::Write));
    let data = pattern(20_000, 7);
    a.append(&create_file(ino, b"shared", &data));
    let mut more = EntryBuilder::new();
    more.write(ino, 20_000, b"appended later");
    a.append(&more);
    let tail = a.tail;

    // B wants to read: A is asked to downgrade, and B waits for A's log.
    let id = ask(&mut b, ino, LeaseMode::Read);
    let (rid, r) = revoked(&a);
    assert_eq!(r, Revoke { inode: ino, lease: wa.lease, keep_read: true });
    quiet(&b, "B granted before A handed back");
    assert_eq!(lookup(&b.public(), b"shared"), None, "nothing published yet");
    let st = d.wait_status("the revoke in the status", |s| s["leases"]["revokes_in_flight"] == 1);
    assert_eq!(st["leases"]["waiting"], 1);
    // The file and the root directory A created it in.
    assert_eq!(st["leases"]["writers"], 2);

    revoke_done(&a, rid, ino, wa.lease, tail);
    let rb = granted(&b, id);
    assert_eq!((rb.inode, rb.mode), (ino, LeaseMode::Read));
    // At the moment B is granted, the public area holds all of A's entries.
    let public = b.public();
    assert_eq!(lookup(&public, b"shared"), Some(ino));
    assert_eq!(read_file(&public, ino, data.len()), data);
    let mut tail_bytes = vec![0u8; 14];
    public.read_file(ino, 20_000, &mut tail_bytes).unwrap();
    assert_eq!(tail_bytes, b"appended later");
    assert_eq!(expect_published(&a).published_lsn, tail);
    let st = d.wait_status("two readers", |s| s["leases"]["readers"] == 2);
    assert_eq!(st["leases"]["writers"], 1, "A's root directory");
    assert_eq!(st["leases"]["publications_awaited"], 0);

    // A, now a reader, asks to write again: B is revoked (no keep_read), A waits for it.
    let id = ask(&mut a, ino, LeaseMode::Write);
    let (rid, r) = revoked(&b);
    assert_eq!(r, Revoke { inode: ino, lease: rb.lease, keep_read: false });
    quiet(&a, "A granted before B handed back");
    revoke_done(&b, rid, ino, rb.lease, b.tail);
    let wa2 = granted(&a, id);
    assert_eq!(wa2.mode, LeaseMode::Write);
    assert!(wa2.lease > rb.lease, "a fresh lease id: {wa2:?} after {rb:?}");
    let st = d.wait_status("A alone", |s| s["leases"]["writers"] == 2 && s["leases"]["readers"] == 0);
    assert_eq!(st["leases"]["revokes_in_flight"], 0);
}

#[test]
fn a_dead_holder_s_lease_passes_on_once_its_log_is_published() {
    let d = Daemon::start(2);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    let ino = a.attached.inodes.first + 3;
    let id = ask(&mut a, ino, LeaseMode::Write);
    let wa = granted(&a, id);
    let data = pattern(9_000, 3);
    a.append(&create_file(ino, b"last-words", &data));

    let id = ask(&mut b, ino, LeaseMode::Write);
    let (_, r) = revoked(&a);
    assert_eq!(r, Revoke { inode: ino, lease: wa.lease, keep_read: false });
    quiet(&b, "B granted while A lives and holds the lease");
    drop(a); // A dies without answering
    let g = granted(&b, id);
    assert_eq!((g.inode, g.mode), (ino, LeaseMode::Write));
    let public = b.public();
    assert_eq!(lookup(&public, b"last-words"), Some(ino));
    assert_eq!(read_file(&public, ino, data.len()), data);
    d.wait_status("A's session gone from the table", |s| {
        s["sessions"].as_array().is_some_and(|v| v.len() == 1) && s["leases"]["sessions"] == 1
    });
}

#[test]
fn a_failed_holder_loses_its_leases_at_once() {
    let d = Daemon::start(2);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    let ino = a.attached.inodes.first;
    let id = ask(&mut a, ino, LeaseMode::Write);
    granted(&a, id);
    let mut forged = EntryBuilder::new();
    forged.dirent(1, b"ghost", 77, dtype::REG);
    a.append(&forged);
    a.chunk_ready();
    assert!(matches!(a.recv_control(), Control::Rejected(_)));
    // A is still connected and never answers, yet B gets the inode.
    let id = ask(&mut b, ino, LeaseMode::Write);
    assert_eq!(granted(&b, id).mode, LeaseMode::Write);
    // A failed session asks in vain.
    assert_eq!(
        error_of(a.request(Control::LeaseRequest(LeaseRequest {
            inode: ino + 1,
            mode: LeaseMode::Read,
            log_tail: 0,
            creds: creds(),
        }))),
        libc::EIO
    );
}

#[test]
fn stale_lease_ids_are_ignored_and_release_hands_a_lease_back() {
    let d = Daemon::start(2);
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    let ino = a.attached.inodes.first;
    let id = ask(&mut a, ino, LeaseMode::Write);
    let wa = granted(&a, id);

    // A release naming a lease id never granted is answered Ok and changes nothing.
    let bogus = LeaseHandback { inode: ino, lease: wa.lease + 1000, covered_lsn: 0 };
    assert_eq!(a.request(Control::LeaseRelease(bogus)), Control::Ok);
    d.wait_status("the stale release counted", |s| s["leases"]["stale"] == 1 && s["leases"]["writers"] == 1);
    // B's request shows A still holds the real one.
    let id = ask(&mut b, ino, LeaseMode::Write);
    let (rid, r) = revoked(&a);
    assert_eq!(r.lease, wa.lease);
    // An answer naming another lease does not hand it back.
    revoke_done(&a, rid, ino, wa.lease + 1000, 0);
    quiet(&b, "B granted on a stale RevokeDone");
    revoke_done(&a, rid, ino, wa.lease, a.tail);
    let wb = granted(&b, id);
    // The same answer again is stale: B keeps its lease.
    revoke_done(&a, rid, ino, wa.lease, a.tail);
    d.wait_status("three stale hand-backs", |s| s["leases"]["stale"] == 3);
    assert_eq!(d.status()["leases"]["writers"], 1);

    // LeaseRelease of a write lease publishes the writer's log before anyone else gets in.
    let data = pattern(30_000, 11);
    b.append(&create_file(ino, b"released", &data));
    let release = LeaseHandback { inode: ino, lease: wb.lease, covered_lsn: b.tail };
    assert_eq!(b.request(Control::LeaseRelease(release)), Control::Ok);
    b.leases.remove(&ino);
    b.release_all();
    let id = ask(&mut a, ino, LeaseMode::Read);
    let ra = granted(&a, id);
    assert_eq!(ra.mode, LeaseMode::Read);
    assert_eq!(read_file(&a.public(), ino, data.len()), data);
    // And a reader's release leaves nothing behind.
    assert_eq!(
        a.request(Control::LeaseRelease(LeaseHandback { inode: ino, lease: ra.lease, covered_lsn: 0 })),
        Control::Ok
    );
    d.wait_status("no lease left", |s| {
        let l = &s["leases"];
        l["inodes"] == 0 && l["readers"] == 0 && l["writers"] == 0 && l["waiting"] == 0
    });
}

#[test]
fn bad_lease_requests_are_refused() {
    let mut d = Daemon::start(1);
    let mut a = Client::attach(&d.socket);
    for inode in [0, a.geometry.inode_count, u64::MAX] {
        let r = LeaseRequest { inode, mode: LeaseMode::Read, log_tail: 0, creds: creds() };
        assert_eq!(error_of(a.request(Control::LeaseRequest(r))), libc::EINVAL, "inode {inode}");
        let h = LeaseHandback { inode, lease: 1, covered_lsn: 0 };
        assert_eq!(error_of(a.request(Control::LeaseRelease(h))), libc::EINVAL, "inode {inode}");
    }
    // A direct API user states its own credentials.
    let mut other = creds();
    other.uid = other.uid.wrapping_add(1);
    let r = LeaseRequest { inode: 1, mode: LeaseMode::Read, log_tail: 0, creds: other };
    assert_eq!(error_of(a.request(Control::LeaseRequest(r))), libc::EPERM);
    let id = ask(&mut a, 1, LeaseMode::Read);
    assert_eq!(granted(&a, id).mode, LeaseMode::Read);
    assert!(d.alive());
}

/// A client asking for thousands of leases — one reading its answers, one not reading at
/// all — holds up neither another client's control traffic nor its leases; the one that
/// does not read is cut off.
#[test]
fn a_flood_of_requests_does_not_stall_another_client() {
    // B answers its revoke only once the flood has filled A's queue, however long that
    // takes on a loaded machine: no lease expiry here (`expiry.rs` tests it).
    let d = Daemon::start_with(3, &["--lease-timeout-ms", "0"]);
    let a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    let c = Client::attach(&d.socket);
    // Numbers nobody was handed, so that the flood revokes nobody but where it is meant to.
    let ranges: Vec<InodeRange> = [&a, &b, &c].iter().map(|c| c.attached.inodes).collect();
    let inodes: Vec<u64> = (1..a.geometry.inode_count)
        .filter(|i| ranges.iter().all(|r| !(r.first..r.first + r.count).contains(i)))
        .collect();
    assert!(inodes.len() > 10);
    // B holds a write lease on one of its numbers, which half of A's requests queue up for.
    let contested = b.attached.inodes.first;
    let id = ask(&mut b, contested, LeaseMode::Write);
    let wb = granted(&b, id);

    const N: u64 = 6000;
    let send = |ctl: std::os::unix::net::UnixStream, inodes: Vec<u64>, contested: Option<u64>| {
        std::thread::spawn(move || {
            for i in 0..N {
                let inode = match contested {
                    Some(x) if i % 2 == 0 => x,
                    _ => inodes[i as usize % inodes.len()],
                };
                let msg =
                    Control::LeaseRequest(LeaseRequest { inode, mode: LeaseMode::Read, log_tail: 0, creds: creds() });
                if write_frame(&ctl, &Frame { id: 1000 + i, msg }).is_err() {
                    return i;
                }
            }
            N
        })
    };
    // A reads its answers on a thread of its own and counts them.
    let a_reader = {
        let ctl = a.control.try_clone().unwrap();
        std::thread::spawn(move || {
            let (mut grants, mut again, mut revokes) = (0u64, 0u64, Vec::new());
            while grants + again < N {
                let f: Frame<Control> = read_frame(&ctl, Party::Nicfs, Some(Duration::from_secs(30))).unwrap();
                match f.msg {
                    Control::LeaseGranted(_) => grants += 1,
                    Control::Error(e) if e.errno() == libc::EAGAIN => again += 1,
                    Control::Revoke(r) => revokes.push((f.id, r)),
                    other => panic!("A got {other:?}"),
                }
            }
            (grants, again, revokes)
        })
    };
    let a_flood = send(a.control.try_clone().unwrap(), inodes.clone(), Some(contested));
    let c_flood = send(c.control.try_clone().unwrap(), inodes, None);

    // Meanwhile B's control traffic flows: pings, and the revoke of its contested lease.
    let mut worst = Duration::ZERO;
    let mut revoke = None;
    let start = Instant::now();
    let mut pings = 0;
    while pings < 200 || revoke.is_none() {
        assert!(start.elapsed() < WAIT, "B's traffic stalled: {pings} pings");
        let t = Instant::now();
        let id = b.send(Control::Ping);
        loop {
            let f = b.recv_frame();
            match f.msg {
                Control::Pong if f.id == id => break,
                Control::Revoke(r) => revoke = Some((f.id, r)),
                other => panic!("B got {other:?}"),
            }
        }
        worst = worst.max(t.elapsed());
        pings += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(worst < Duration::from_secs(1), "a ping took {worst:?} during the flood");
    // Once A's queue is full (requests refused), B hands back and A's waiting ones go.
    d.wait_status("A refused", |s| s["leases"]["refused"].as_u64().is_some_and(|n| n > 0));
    let (rid, r) = revoke.unwrap();
    assert_eq!(r, Revoke { inode: contested, lease: wb.lease, keep_read: true });
    revoke_done(&b, rid, contested, wb.lease, b.tail);

    assert_eq!(a_flood.join().unwrap(), N);
    let (grants, again, revokes) = a_reader.join().unwrap();
    assert_eq!(grants + again, N);
    assert!(again > 0, "more than MAX_WAITING requests waited: some are refused with EAGAIN");
    assert!(grants >= N / 2, "every request on free inodes granted: {grants}");
    assert!(revokes.is_empty(), "A holds nothing anyone wants: {revokes:?}");

    // C never read its answers: its writes time out and it is cut off, leaving A and B.
    c_flood.join().unwrap();
    let st = d.wait_status("C cut off", |s| s["sessions"].as_array().is_some_and(|v| v.len() == 2));
    assert!(st["leases"]["grants"].as_u64().unwrap() >= grants);
    assert_eq!(b.request(Control::Ping), Control::Pong);
    drop(c);
}

/// Two clients pass the write lease of one inode back and forth as fast as they can: each
/// client must hear of every lease before it hears it revoked. (nicfs decides a grant on
/// one thread and its revoke on another; were they sent in the order they are carried out
/// rather than decided, a client would answer a revoke of a lease it does not know yet,
/// then record the grant and log under a lease nicfs considers handed back.)
#[test]
fn a_client_hears_of_each_lease_before_its_revoke() {
    let d = Daemon::start(2);
    let inode = 1;
    let run = |mut c: Client| {
        move || {
            let mut known = std::collections::HashSet::new();
            let mut grants = 0;
            let mut waiting = Some(ask(&mut c, inode, LeaseMode::Write));
            let mut releasing = None;
            loop {
                let f = c.recv_frame();
                match f.msg {
                    Control::LeaseGranted(g) => {
                        assert_eq!(Some(f.id), waiting, "a grant nobody asked for: {g:?}");
                        known.insert(g.lease);
                        grants += 1;
                        waiting = None;
                        if grants == 300 {
                            // Done: hand it back, so that the other client can finish too.
                            let h = LeaseHandback { inode, lease: g.lease, covered_lsn: c.tail };
                            releasing = Some(c.send(Control::LeaseRelease(h)));
                        }
                    }
                    Control::Revoke(r) => {
                        assert!(known.contains(&r.lease), "lease {} revoked before it was granted", r.lease);
                        revoke_done(&c, f.id, r.inode, r.lease, c.tail);
                        if waiting.is_none() && grants < 300 {
                            waiting = Some(ask(&mut c, inode, LeaseMode::Write));
                        }
                    }
                    Control::Ok if Some(f.id) == releasing => return grants,
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    };
    let (a, b) = (Client::attach(&d.socket), Client::attach(&d.socket));
    let (ta, tb) = (std::thread::spawn(run(a)), std::thread::spawn(run(b)));
    assert_eq!(ta.join().expect("client a"), 300);
    assert_eq!(tb.join().expect("client b"), 300);
}
