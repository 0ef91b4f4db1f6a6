//! The peer link over real TCP on 127.0.0.1: the handshake between two library peers, and
//! against a peer written from the documented bytes (`support/raw.rs`) that plays every
//! kind of intruder — no key, a wrong key, a replayed transcript, a truncated handshake,
//! garbage, a flipped bit, replayed and reordered frames, an oversized frame.

#[path = "support/raw.rs"]
mod raw;

use linefs_peer::handshake::HandshakeError;
use linefs_peer::{Class, ClusterKey, LinkConfig, LinkError, PeerListener, TcpLink};
use linefs_proto::{encode, Control, DecodeError, Frame, FrameLink, FrameLinkExt, Party, ReadError};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::Duration;

const KEY: [u8; 32] = [0x5a; 32];
const ACCEPTOR: u32 = 2;
const INITIATOR: u32 = 1;

fn config() -> LinkConfig {
    LinkConfig { handshake_timeout: Duration::from_secs(5), ..LinkConfig::default() }
}

fn listener(key: [u8; 32]) -> (PeerListener, SocketAddr) {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let l = PeerListener::bind("127.0.0.1:0", ClusterKey::from_bytes(key), ACCEPTOR, config()).unwrap();
    let addr = l.local_addr().unwrap();
    (l, addr)
}

/// Accepts one connection on another thread; its outcome comes back from the join.
fn accept_one(l: PeerListener) -> thread::JoinHandle<(PeerListener, Result<TcpLink, LinkError>)> {
    thread::spawn(move || {
        let r = l.accept();
        (l, r)
    })
}

fn ping(id: u64) -> Vec<u8> {
    encode(&Frame { id, msg: Control::Ping }).unwrap()
}

#[test]
fn handshake_with_the_key_then_frames_both_ways() {
    for class in [Class::LowLatency, Class::Bulk] {
        let (l, addr) = listener(KEY);
        let server = accept_one(l);
        let client =
            TcpLink::connect(addr, &ClusterKey::from_bytes(KEY), INITIATOR, class, Some(ACCEPTOR), &config()).unwrap();
        let (_l, server) = server.join().unwrap();
        let server = server.unwrap();
        assert_eq!((client.peer(), server.peer()), (ACCEPTOR, INITIATOR));
        assert_eq!((client.class(), server.class()), (class, class));
        assert_eq!(client.nodelay().unwrap(), class == Class::LowLatency);
        assert_eq!(server.nodelay().unwrap(), class == Class::LowLatency);

        // Typed frames through proto's FrameLinkExt, as over any link.
        for id in 1..=3 {
            client.send(&Frame { id, msg: Control::Ping }).unwrap();
            let got: Frame<Control> = server.recv(Party::Client, Some(Duration::from_secs(5))).unwrap();
            assert_eq!(got, Frame { id, msg: Control::Ping });
            server.send(&Frame { id, msg: Control::Pong }).unwrap();
            let got: Frame<Control> = client.recv(Party::Nicfs, Some(Duration::from_secs(5))).unwrap();
            assert_eq!(got, Frame { id, msg: Control::Pong });
        }
        // Nothing sent: a timeout, and the link is still good after it.
        assert!(matches!(server.recv_raw(Some(Duration::from_millis(50))), Err(ReadError::TimedOut(_))));
        client.send_raw(&ping(9)).unwrap();
        assert_eq!(server.recv_raw(Some(Duration::from_secs(5))).unwrap().header.id, 9);
        // Closing one end: the other reads Closed.
        client.close();
        assert!(matches!(server.recv_raw(Some(Duration::from_secs(5))), Err(ReadError::Closed)));
    }
}

#[test]
fn a_wrong_key_is_refused_on_both_sides() {
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let e =
        TcpLink::connect(addr, &ClusterKey::from_bytes([1; 32]), INITIATOR, Class::Bulk, None, &config()).unwrap_err();
    // The dialler finds the acceptor's proof wrong under its key and stops there.
    assert!(matches!(e.handshake(), Some(HandshakeError::BadProof)), "{e}");
    assert!(e.to_string().contains("does not hold the cluster key"), "{e}");
    let (_l, r) = server.join().unwrap();
    let e = r.unwrap_err();
    assert!(matches!(e, LinkError::Closed { during: "awaiting the proof", .. }), "{e}");
}

#[test]
fn the_dialler_checks_whom_it_reached() {
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let e =
        TcpLink::connect(addr, &ClusterKey::from_bytes(KEY), INITIATOR, Class::Bulk, Some(7), &config()).unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::UnexpectedPeer { expected: 7, found: ACCEPTOR })), "{e}");
    assert!(server.join().unwrap().1.is_err());
}

#[test]
fn a_peer_without_the_key_is_refused_with_a_verdict() {
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw::hello(raw::VERSION, 1, 40, &[3; 32])).unwrap();
    let challenge = raw::read_n(&mut s, 80);
    assert_eq!(&challenge[..8], &raw::prefix(raw::VERSION, 2, 1)[..]);
    // Without the key, the best it can send is a guess.
    s.write_all(&raw::proof(1, &[0xee; 32])).unwrap();
    assert_eq!(raw::read_n(&mut s, 16), raw::verdict(raw::VERSION, 1), "verdict: bad proof");
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0, "then the acceptor closes");
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::BadProof)), "{e}");
}

#[test]
fn a_handshake_by_hand_from_the_documented_bytes_works_and_frames_verify() {
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    let hs = raw::initiate(&mut s, &KEY, INITIATOR, 1, [4; 32]);
    assert_eq!(hs.verdict, raw::verdict(raw::VERSION, 0), "accepted");
    let link = server.join().unwrap().1.unwrap();
    assert_eq!(link.peer(), INITIATOR);
    // Frames sealed by hand are taken.
    s.write_all(&raw::seal(&hs.send_key, 0, &ping(1))).unwrap();
    s.write_all(&raw::seal(&hs.send_key, 1, &ping(2))).unwrap();
    assert_eq!(link.recv_raw(Some(Duration::from_secs(5))).unwrap().header.id, 1);
    assert_eq!(link.recv_raw(Some(Duration::from_secs(5))).unwrap().header.id, 2);
    // And the library's frames are what the docs say.
    link.send_raw(&ping(3)).unwrap();
    let got = raw::read_n(&mut s, ping(3).len() + 24);
    assert_eq!(got, raw::seal(&hs.recv_key, 0, &ping(3)));
}

#[test]
fn a_replayed_handshake_is_refused() {
    // A real handshake, recorded.
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    let recorded = raw::initiate(&mut s, &KEY, INITIATOR, 1, [5; 32]);
    assert_eq!(recorded.verdict, raw::verdict(raw::VERSION, 0));
    let (l, first) = server.join().unwrap();
    first.unwrap();

    // Replayed to the same acceptor: the nonce was seen, refused at once.
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&recorded.hello).unwrap();
    assert_eq!(raw::read_n(&mut s, 16), raw::verdict(raw::VERSION, 3), "verdict: refused");
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::ReplayedNonce)), "{e}");

    // Replayed to an acceptor that never saw it (restarted, same key): its fresh nonce is in
    // the proof it expects, so the recorded proof does not verify.
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&recorded.hello).unwrap();
    let _challenge = raw::read_n(&mut s, 80);
    s.write_all(&recorded.proof).unwrap();
    assert_eq!(raw::read_n(&mut s, 16), raw::verdict(raw::VERSION, 1), "verdict: bad proof");
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::BadProof)), "{e}");
}

#[test]
fn a_replayed_challenge_is_refused_by_the_dialler() {
    // A fake acceptor that answers any Hello with a Challenge recorded from a real one.
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw::hello(raw::VERSION, 1, INITIATOR, &[6; 32])).unwrap();
    let recorded = raw::read_n(&mut s, 80);
    drop(s);
    let _ = server.join();

    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake_addr = fake.local_addr().unwrap();
    let t = thread::spawn(move || {
        let (mut c, _) = fake.accept().unwrap();
        let _hello = raw::read_n(&mut c, 48);
        c.write_all(&recorded).unwrap();
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        rest
    });
    let e = TcpLink::connect(fake_addr, &ClusterKey::from_bytes(KEY), INITIATOR, Class::LowLatency, None, &config())
        .unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::BadProof)), "{e}");
    assert!(t.join().unwrap().is_empty(), "the dialler sent no proof to a replayed challenge");
}

#[test]
fn truncated_handshakes_are_refused() {
    // Half a Hello, then the connection closes.
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw::hello(raw::VERSION, 1, INITIATOR, &[7; 32])[..20]).unwrap();
    drop(s);
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e, LinkError::Closed { during: "awaiting the hello", .. }), "{e}");

    // Half a Hello, then silence: the handshake's deadline ends it.
    let quick = LinkConfig { handshake_timeout: Duration::from_millis(200), ..config() };
    let l = PeerListener::bind("127.0.0.1:0", ClusterKey::from_bytes(KEY), ACCEPTOR, quick).unwrap();
    let addr = l.local_addr().unwrap();
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw::hello(raw::VERSION, 1, INITIATOR, &[7; 32])[..20]).unwrap();
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e, LinkError::TimedOut { .. }), "{e}");

    // A whole Hello and Challenge, then half a Proof and silence.
    let l = PeerListener::bind("127.0.0.1:0", ClusterKey::from_bytes(KEY), ACCEPTOR, quick).unwrap();
    let addr = l.local_addr().unwrap();
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw::hello(raw::VERSION, 1, INITIATOR, &[8; 32])).unwrap();
    let _challenge = raw::read_n(&mut s, 80);
    s.write_all(&raw::proof(1, &[0; 32])[..10]).unwrap();
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e, LinkError::TimedOut { .. }), "{e}");
}

#[test]
fn garbage_and_other_versions_are_refused() {
    // Not our protocol at all: refused without an answer, the connection closed.
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
    let (l, r) = server.join().unwrap();
    let e = r.unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::BadMagic { .. })), "{e}");
    assert!(e.to_string().contains("not a linefs peer"), "{e}");

    // Our magic, an unknown message type.
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw::prefix(raw::VERSION, 9, 1)).unwrap();
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::UnknownType { found: 9 })), "{e}");
    drop(s);

    // Another version: the Verdict says which one the acceptor speaks.
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&raw::hello(6, 1, INITIATOR, &[8; 32])).unwrap();
    assert_eq!(raw::read_n(&mut s, 16), raw::verdict(raw::VERSION, 2), "verdict: version refused");
    let e = server.join().unwrap().1.unwrap_err();
    assert!(matches!(e.handshake(), Some(HandshakeError::Version { ours: 7, theirs: 6 })), "{e}");
}

/// An accepted link, and the by-hand peer's socket and keys.
fn by_hand_link() -> (TcpLink, TcpStream, raw::ByHand) {
    by_hand_link_with(config())
}

fn by_hand_link_with(config: LinkConfig) -> (TcpLink, TcpStream, raw::ByHand) {
    let l = PeerListener::bind("127.0.0.1:0", ClusterKey::from_bytes(KEY), ACCEPTOR, config).unwrap();
    let addr = l.local_addr().unwrap();
    let server = accept_one(l);
    let mut s = TcpStream::connect(addr).unwrap();
    let hs = raw::initiate(&mut s, &KEY, INITIATOR, 2, rand_nonce());
    let link = server.join().unwrap().1.unwrap();
    (link, s, hs)
}

fn rand_nonce() -> [u8; 32] {
    let mut n = [0u8; 32];
    getrandom::fill(&mut n).unwrap();
    n
}

fn assert_refused_and_closed(link: &TcpLink, want: impl Fn(&DecodeError) -> bool) {
    match link.recv_raw(Some(Duration::from_secs(5))) {
        Err(ReadError::Decode { error, in_step: false, .. }) => assert!(want(&error), "{error}"),
        other => panic!("expected a refused frame, got {other:?}"),
    }
    assert!(link.is_broken());
    assert!(link.recv_raw(Some(Duration::from_millis(10))).is_err(), "the link stays closed");
    assert!(link.send_raw(&ping(1)).is_err());
}

#[test]
fn a_flipped_bit_fails_the_mac_and_closes_the_link() {
    let good = ping(1);
    // A bit in the payload's id, in the trailer's sequence, in the tag.
    for byte in [16, good.len(), good.len() + 8, good.len() + 23] {
        let (link, mut s, hs) = by_hand_link();
        let mut bytes = raw::seal(&hs.send_key, 0, &good);
        bytes[byte] ^= 0x10;
        s.write_all(&bytes).unwrap();
        assert_refused_and_closed(&link, |e| matches!(e, DecodeError::BadCheck { scheme: 1 }));
        // The by-hand peer sees the connection end.
        let mut rest = Vec::new();
        assert_eq!(s.read_to_end(&mut rest).unwrap_or(0), 0);
    }
}

#[test]
fn a_frame_under_another_sessions_key_is_refused() {
    let (_first, _s1, old) = by_hand_link();
    let (link, mut s, _hs) = by_hand_link();
    // A frame recorded from another session, replayed into this one.
    s.write_all(&raw::seal(&old.send_key, 0, &ping(1))).unwrap();
    assert_refused_and_closed(&link, |e| matches!(e, DecodeError::BadCheck { .. }));
}

#[test]
fn replayed_frames_are_refused() {
    let (link, mut s, hs) = by_hand_link();
    let first = raw::seal(&hs.send_key, 0, &ping(1));
    s.write_all(&first).unwrap();
    assert_eq!(link.recv_raw(Some(Duration::from_secs(5))).unwrap().header.id, 1);
    s.write_all(&first).unwrap();
    assert_refused_and_closed(&link, |e| *e == DecodeError::OutOfSequence { expected: 1, found: 0 });
}

#[test]
fn reordered_and_dropped_frames_are_refused() {
    let (link, mut s, hs) = by_hand_link();
    // The second frame arrives first (or the first was lost).
    s.write_all(&raw::seal(&hs.send_key, 1, &ping(2))).unwrap();
    s.write_all(&raw::seal(&hs.send_key, 0, &ping(1))).unwrap();
    assert_refused_and_closed(&link, |e| *e == DecodeError::OutOfSequence { expected: 0, found: 1 });
}

#[test]
fn a_frame_the_link_would_not_check_is_refused() {
    // check = 0: a frame that would skip the MAC.
    let (link, mut s, _hs) = by_hand_link();
    s.write_all(&ping(1)).unwrap();
    assert_refused_and_closed(&link, |e| matches!(e, DecodeError::FieldOutOfRange { field: "check", value: 0 }));
}

#[test]
fn an_oversized_or_truncated_frame_closes_the_link() {
    let (link, mut s, hs) = by_hand_link();
    let mut head = raw::seal(&hs.send_key, 0, &ping(1))[..24].to_vec();
    head[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    s.write_all(&head).unwrap();
    assert_refused_and_closed(&link, |e| matches!(e, DecodeError::Oversized { .. }));

    let (link, mut s, hs) = by_hand_link();
    let sealed = raw::seal(&hs.send_key, 0, &ping(1));
    s.write_all(&sealed[..sealed.len() - 5]).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    assert_refused_and_closed(&link, |e| matches!(e, DecodeError::Truncated { .. }));
}

#[test]
fn a_frame_that_stops_half_way_times_out_and_closes() {
    let (link, mut s, hs) = by_hand_link();
    let sealed = raw::seal(&hs.send_key, 0, &ping(1));
    s.write_all(&sealed[..30]).unwrap();
    assert!(matches!(link.recv_raw(Some(Duration::from_millis(200))), Err(ReadError::TimedOut(_))));
    assert!(link.is_broken(), "part of a frame read: the stream is out of step");

    // Waiting without a deadline: a frame that starts still has `frame_timeout` to finish.
    let quick = LinkConfig { frame_timeout: Duration::from_millis(200), ..config() };
    let (link, mut s, hs) = by_hand_link_with(quick);
    let sealed = raw::seal(&hs.send_key, 0, &ping(1));
    s.write_all(&sealed[..10]).unwrap();
    let started = std::time::Instant::now();
    assert!(matches!(link.recv_raw(None), Err(ReadError::TimedOut(t)) if t == Duration::from_millis(200)));
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(link.is_broken());
    // And a frame that does finish in time is taken, however long the wait before it.
    let (link, mut s, hs) = by_hand_link_with(quick);
    let sender = thread::spawn(move || {
        thread::sleep(Duration::from_millis(400));
        s.write_all(&raw::seal(&hs.send_key, 0, &ping(1))).unwrap();
        s
    });
    assert_eq!(link.recv_raw(None).unwrap().header.id, 1);
    drop(sender.join());
}

#[test]
fn a_stalled_handshake_does_not_hold_up_another_peer() {
    let (l, addr) = listener(KEY);
    let l = std::sync::Arc::new(l);
    // An intruder connects first and says nothing.
    let stalled = TcpStream::connect(addr).unwrap();
    let first = l.accept_tcp().unwrap();
    let l2 = l.clone();
    let intruder = thread::spawn(move || l2.handshake(first));
    // A real peer is served meanwhile, on a thread of its own.
    let l3 = l.clone();
    let server = thread::spawn(move || {
        let s = l3.accept_tcp().unwrap();
        l3.handshake(s)
    });
    let started = std::time::Instant::now();
    let client =
        TcpLink::connect(addr, &ClusterKey::from_bytes(KEY), INITIATOR, Class::LowLatency, None, &config()).unwrap();
    let server = server.join().unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(4), "served before the intruder's deadline");
    client.send_raw(&ping(1)).unwrap();
    assert_eq!(server.recv_raw(Some(Duration::from_secs(5))).unwrap().header.id, 1);
    drop(stalled);
    assert!(intruder.join().unwrap().is_err());
}

#[test]
fn writers_on_several_threads_keep_the_sequence() {
    let (l, addr) = listener(KEY);
    let server = accept_one(l);
    let client = std::sync::Arc::new(
        TcpLink::connect(addr, &ClusterKey::from_bytes(KEY), INITIATOR, Class::Bulk, None, &config()).unwrap(),
    );
    let server = server.join().unwrap().1.unwrap();
    let writers: Vec<_> = (0..4u64)
        .map(|t| {
            let c = client.clone();
            thread::spawn(move || {
                for i in 0..50 {
                    c.send_raw(&ping(1 + t * 1000 + i)).unwrap();
                }
            })
        })
        .collect();
    let mut ids = Vec::new();
    for _ in 0..200 {
        ids.push(server.recv_raw(Some(Duration::from_secs(5))).unwrap().header.id);
    }
    for w in writers {
        w.join().unwrap();
    }
    ids.sort_unstable();
    let mut want: Vec<u64> = (0..4u64).flat_map(|t| (0..50).map(move |i| 1 + t * 1000 + i)).collect();
    want.sort_unstable();
    assert_eq!(ids, want);
    assert!(!server.is_broken());
}

/// A log sink: what `tracing` writes on the thread that runs `f`.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let sink = Sink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&sink.0.lock().unwrap()).into_owned();
    (out, text)
}

#[test]
fn refusals_are_logged_with_the_peer_and_the_reason() {
    // A refused handshake.
    let (l, addr) = listener(KEY);
    let server = thread::spawn(move || logged(|| l.accept()));
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"garbage, not a hello, forty-eight bytes of it..").unwrap();
    let (r, log) = server.join().unwrap();
    assert!(r.is_err());
    assert!(
        log.contains("WARN") && log.contains("peer handshake refused") && log.contains("not a linefs peer"),
        "{log}"
    );
    assert!(log.contains(&s.local_addr().unwrap().to_string()), "the log names the peer's address: {log}");

    // A garbled frame.
    let (link, mut s, hs) = by_hand_link();
    let mut bytes = raw::seal(&hs.send_key, 0, &ping(1));
    bytes[20] ^= 1;
    s.write_all(&bytes).unwrap();
    let (r, log) = logged(|| link.recv_raw(Some(Duration::from_secs(5))));
    assert!(r.is_err());
    assert!(log.contains("WARN") && log.contains("closing the peer link") && log.contains("integrity check"), "{log}");
    assert!(log.contains(&format!("peer={INITIATOR}")), "the log names the peer node: {log}");
}
