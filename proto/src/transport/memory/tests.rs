use super::*;
use crate::error::DecodeError;
use crate::kind::{Kind, Party};
use crate::messages::*;
use crate::transport::{FrameLinkExt, LocalLinkExt};
use crate::{encode, Header};
use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::time::Instant;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn fsync(id: u64) -> Frame<Control> {
    Frame { id, msg: Control::Fsync(Fsync { lsn: id * 64 }) }
}

fn ids(link: &MemoryLink, n: usize) -> Vec<u64> {
    (0..n).map(|_| link.recv::<Control>(Party::Client, WAIT).unwrap().id).collect()
}

#[test]
fn frames_cross_both_ways_in_order() {
    let (client, nicfs) = MemoryLink::pair();
    for id in 1..=3 {
        client.send(&fsync(id)).unwrap();
    }
    assert_eq!(ids(&nicfs, 3), [1, 2, 3]);
    nicfs.send(&Frame { id: 2, msg: Control::FsyncDone(FsyncDone { durable_lsn: 128 }) }).unwrap();
    let got: Frame<Control> = client.recv(Party::Nicfs, WAIT).unwrap();
    assert_eq!(got, Frame { id: 2, msg: Control::FsyncDone(FsyncDone { durable_lsn: 128 }) });
}

#[test]
fn descriptors_pass_and_work() {
    let (client, nicfs) = MemoryLink::pair();
    let mut file = tempfile();
    file.write_all(b"log").unwrap();
    let attached = Control::Attached(Attached {
        session: 1,
        slot: 0,
        public: false,
        log: LogGeometry { ring_offset: 0, ring_bytes: 4096, start_lsn: 0, chunk_bytes: 1024 },
        inodes: InodeRange { first: 2, count: 8 },
    });
    assert!(matches!(
        nicfs.send(&Frame { id: 1, msg: attached.clone() }),
        Err(crate::SendError::FdCount { kind: Kind::Attached, expected: 1, given: 0 })
    ));
    nicfs.send_with_fds(&Frame { id: 1, msg: attached.clone() }, &[file.as_fd()]).unwrap();
    let r: crate::Received<Control> = client.recv_with_fds(Party::Nicfs, WAIT).unwrap();
    assert_eq!((r.frame.msg, r.fds.len()), (attached.clone(), 1));
    // The passed descriptor is the same open file.
    let mut passed = std::fs::File::from(r.fds.into_iter().next().unwrap());
    passed.rewind().unwrap();
    let mut s = String::new();
    passed.read_to_string(&mut s).unwrap();
    assert_eq!(s, "log");

    // A frame that comes with descriptors, read where none are taken: refused, closed, and
    // the link goes on.
    nicfs.send_with_fds(&Frame { id: 2, msg: attached }, &[file.as_fd()]).unwrap();
    nicfs.send(&Frame { id: 3, msg: Control::Ping }).unwrap();
    match client.recv::<Control>(Party::Nicfs, WAIT) {
        Err(ReadError::Decode { error: DecodeError::FdCount { expected: 0, found: 1, .. }, id: 2, in_step: true }) => {}
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(client.recv::<Control>(Party::Nicfs, WAIT).unwrap().id, 3);
}

fn tempfile() -> std::fs::File {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let path = std::env::temp_dir().join(format!("linefs-proto-memlink-{}-{nanos}", std::process::id()));
    let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    f
}

#[test]
fn each_end_sees_the_credentials_stated_for_the_other() {
    let a = PeerCred { pid: 10, uid: 1000, gid: 100 };
    let b = PeerCred { pid: 20, uid: 0, gid: 0 };
    let (client, nicfs) = MemoryLink::pair_as(a, b);
    assert_eq!(nicfs.peer_credentials().unwrap(), a);
    assert_eq!(client.peer_credentials().unwrap(), b);
    let (x, _y) = MemoryLink::pair();
    assert_eq!(x.peer_credentials().unwrap().pid as u32, std::process::id());
}

#[test]
fn bad_bytes_are_refused_in_step_and_answered() {
    let (peer, nicfs) = MemoryLink::pair();
    peer.send_raw(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    // A header declaring more than MAX_FRAME.
    let mut huge = Header::new(Kind::ChunkReady, 8, 4).encode().to_vec();
    huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    peer.send_raw(&huge).unwrap();
    // A frame with a byte too many, and one cut short.
    let mut long = encode(&fsync(5)).unwrap();
    long.push(0);
    peer.send_raw(&long).unwrap();
    let short = encode(&fsync(6)).unwrap();
    peer.send_raw(&short[..short.len() - 1]).unwrap();
    peer.send(&fsync(7)).unwrap();

    let err = nicfs.recv::<Control>(Party::Client, WAIT).unwrap_err();
    assert!(matches!(err, ReadError::Decode { error: DecodeError::BadMagic { .. }, id: 0, in_step: true }), "{err:?}");
    assert!(nicfs.answer_bad_frame("test peer", &err), "a whole bad frame does not end the link");
    let reply: Frame<Control> = peer.recv(Party::Nicfs, WAIT).unwrap();
    assert!(matches!(reply.msg, Control::Error(ErrorReply { code: crate::RemoteError::Protocol, .. })), "{reply:?}");

    let err = nicfs.recv::<Control>(Party::Client, WAIT).unwrap_err();
    assert!(matches!(err, ReadError::Decode { error: DecodeError::Oversized { .. }, in_step: true, .. }), "{err:?}");
    let err = nicfs.recv::<Control>(Party::Client, WAIT).unwrap_err();
    assert!(
        matches!(err, ReadError::Decode { error: DecodeError::TrailingBytes { extra: 1, .. }, id: 5, in_step: true }),
        "{err:?}"
    );
    let err = nicfs.recv::<Control>(Party::Client, WAIT).unwrap_err();
    assert!(
        matches!(err, ReadError::Decode { error: DecodeError::Truncated { need: 8, have: 7, .. }, id: 6, .. }),
        "{err:?}"
    );
    assert_eq!(nicfs.recv::<Control>(Party::Client, WAIT).unwrap(), fsync(7));
}

#[test]
fn a_dropped_end_closes_the_link_and_reads_time_out() {
    let (a, b) = MemoryLink::pair();
    let t = Instant::now();
    assert!(matches!(b.recv::<Control>(Party::Client, Some(Duration::from_millis(50))), Err(ReadError::TimedOut(_))));
    assert!(t.elapsed() >= Duration::from_millis(50));
    a.send(&fsync(1)).unwrap();
    drop(a);
    // What was sent is still read, then the link is closed.
    assert_eq!(b.recv::<Control>(Party::Client, WAIT).unwrap(), fsync(1));
    assert!(matches!(b.recv::<Control>(Party::Client, WAIT), Err(ReadError::Closed)));
    match b.send(&fsync(2)) {
        Err(crate::SendError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn faults_drop_hold_and_delay_frames() {
    let (a, b) = MemoryLink::pair();
    // Every odd frame lost.
    a.set_faults(|n, _| if n % 2 == 1 { Fault::Drop } else { Fault::Deliver });
    for id in 1..=4 {
        a.send(&fsync(id)).unwrap();
    }
    assert_eq!(ids(&b, 2), [1, 3]);

    // Frame 5 held back: 6 overtakes it.
    a.set_faults(|_, bytes| if bytes[16] == 5 { Fault::Hold } else { Fault::Deliver });
    for id in 5..=7 {
        a.send(&fsync(id)).unwrap();
    }
    assert_eq!(ids(&b, 3), [6, 5, 7]);

    // Frame 8 delayed: 9 arrives first, 8 a while later.
    a.set_faults(|_, bytes| if bytes[16] == 8 { Fault::Delay(Duration::from_millis(100)) } else { Fault::Deliver });
    let t = Instant::now();
    a.send(&fsync(8)).unwrap();
    a.send(&fsync(9)).unwrap();
    assert_eq!(ids(&b, 2), [9, 8]);
    assert!(t.elapsed() >= Duration::from_millis(100));

    a.clear_faults();
    a.send(&fsync(10)).unwrap();
    assert_eq!(ids(&b, 1), [10]);
    assert!(matches!(b.recv::<Control>(Party::Client, Some(Duration::from_millis(20))), Err(ReadError::TimedOut(_))));
}

#[test]
fn corrupted_frames_reach_the_decoder_and_only_it_defends() {
    let (a, b) = MemoryLink::pair();
    // The version byte: refused, in step.
    a.set_faults(|n, _| if n == 0 { Fault::Corrupt(4) } else { Fault::Deliver });
    a.send(&fsync(1)).unwrap();
    a.send(&fsync(2)).unwrap();
    assert!(matches!(
        b.recv::<Control>(Party::Client, WAIT),
        Err(ReadError::Decode { error: DecodeError::UnsupportedVersion { .. }, in_step: true, .. })
    ));
    assert_eq!(ids(&b, 1), [2]);
    // A byte of the LSN: nothing on a link without a check can tell (why a link that leaves
    // the machine carries one).
    a.set_faults(|_, _| Fault::Corrupt(crate::HEADER_LEN));
    a.send(&fsync(3)).unwrap();
    let got: Frame<Control> = b.recv(Party::Client, WAIT).unwrap();
    assert_eq!(got.id, 3);
    assert_ne!(got, fsync(3));
}
