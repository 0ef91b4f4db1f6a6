//! Frames over real Unix socket pairs: exchange, descriptors that work, peer credentials,
//! a huge header refused unread, garbage and stalls, version refusal.

use linefs_proto::*;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

/// A file in the temp directory, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> TempFile {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        TempFile(std::env::temp_dir().join(format!("linefs-proto-{tag}-{}-{nanos}", std::process::id())))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn attached() -> Control {
    Control::Attached(Attached {
        session: 1,
        slot: 2,
        public: true,
        log: LogGeometry { ring_offset: 4096, ring_bytes: 1 << 20, start_lsn: 0, chunk_bytes: 1 << 18 },
        inodes: InodeRange { first: 100, count: 10 },
    })
}

#[test]
fn attach_exchange_passes_descriptors_that_work() {
    let (client, nicfs) = UnixStream::pair().unwrap();
    let log_path = TempFile::new("log");
    let public_path = TempFile::new("public");
    let log = OpenOptions::new().read(true).write(true).create_new(true).open(&log_path.0).unwrap();
    log.set_len(8192).unwrap();
    std::fs::write(&public_path.0, b"public area").unwrap();
    let public = File::open(&public_path.0).unwrap();

    let hello = Control::Hello(Hello { channel: Channel::Control, role: Role::DirectApi, session: 0 });
    write_frame(&client, &Frame { id: 1, msg: hello.clone() }).unwrap();
    let got: Frame<Control> = read_frame(&nicfs, Party::Client, WAIT).unwrap();
    assert_eq!(got, Frame { id: 1, msg: hello });

    send_frame(&nicfs, &Frame { id: 1, msg: attached() }, &[log.as_fd(), public.as_fd()]).unwrap();
    // A second frame right behind, so the reader must not let the descriptors of one frame
    // run into the next.
    write_frame(&nicfs, &Frame { id: 7, msg: Control::Ping }).unwrap();
    let r: Received<Control> = recv_frame(&client, Party::Nicfs, WAIT).unwrap();
    assert_eq!(r.frame, Frame { id: 1, msg: attached() });
    assert_eq!(r.fds.len(), 2);
    let [log_fd, public_fd]: [_; 2] = r.fds.try_into().unwrap();
    let (log_rw, public_ro) = (File::from(log_fd), File::from(public_fd));

    // The client writes its log through the passed descriptor; nicfs sees it in its own.
    log_rw.write_all_at(b"entry", 4096).unwrap();
    let mut back = [0u8; 5];
    log.read_exact_at(&mut back, 4096).unwrap();
    assert_eq!(&back, b"entry");
    // The public file reads, and refuses writes: the descriptor was opened read-only.
    let mut s = String::new();
    (&public_ro).read_to_string(&mut s).unwrap();
    assert_eq!(s, "public area");
    let err = (&public_ro).write(b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(9), "EBADF expected, got {err}");

    let ping: Frame<Control> = read_frame(&client, Party::Nicfs, WAIT).unwrap();
    assert_eq!(ping, Frame { id: 7, msg: Control::Ping });
}

#[test]
fn descriptors_must_match_the_kind() {
    let (a, b) = UnixStream::pair().unwrap();
    let f = TempFile::new("fds");
    std::fs::write(&f.0, b"").unwrap();
    let file = File::open(&f.0).unwrap();
    assert!(matches!(
        send_frame(&a, &Frame { id: 1, msg: attached() }, &[file.as_fd()]),
        Err(SendError::FdCount { kind: Kind::Attached, expected: 2, given: 1 })
    ));
    assert!(matches!(
        send_frame(&a, &Frame { id: 1, msg: Control::Ping }, &[file.as_fd()]),
        Err(SendError::FdCount { .. })
    ));

    // A peer that declares two descriptors and passes none.
    let bytes = encode(&Frame { id: 3, msg: attached() }).unwrap();
    send_bytes(&a, &bytes, &[]).unwrap();
    match recv_frame::<Control>(&b, Party::Nicfs, WAIT) {
        Err(ReadError::Decode { error: DecodeError::FdCount { expected: 2, found: 0, .. }, id: 3, in_step: true }) => {}
        other => panic!("unexpected {other:?}"),
    }
    // A peer that passes a descriptor with a frame that declares none: refused (and closed).
    let bytes = encode(&Frame { id: 4, msg: Control::Ping }).unwrap();
    send_bytes(&a, &bytes, &[file.as_fd()]).unwrap();
    match recv_frame::<Control>(&b, Party::Client, WAIT) {
        Err(ReadError::Decode { error: DecodeError::FdCount { expected: 0, found: 1, .. }, id: 4, in_step: true }) => {}
        other => panic!("unexpected {other:?}"),
    }
    // The stream is still in step.
    write_frame(&a, &Frame { id: 5, msg: Control::Pong }).unwrap();
    assert_eq!(read_frame::<Control>(&b, Party::Client, WAIT).unwrap().id, 5);

    // An Attached without the public file carries the log file's descriptor alone; one
    // whose header declares two (and passes two) while its payload says "no public file"
    // is refused, so a client never takes a stray descriptor for the public file.
    let Control::Attached(mut no_public) = attached() else { unreachable!() };
    no_public.public = false;
    let msg = Control::Attached(no_public);
    assert!(matches!(
        send_frame(&a, &Frame { id: 6, msg: msg.clone() }, &[file.as_fd(), file.as_fd()]),
        Err(SendError::FdCount { kind: Kind::Attached, expected: 1, given: 2 })
    ));
    send_frame(&a, &Frame { id: 6, msg: msg.clone() }, &[file.as_fd()]).unwrap();
    let r = recv_frame::<Control>(&b, Party::Nicfs, WAIT).unwrap();
    assert_eq!((r.frame.msg, r.fds.len()), (msg.clone(), 1));
    let mut bytes = encode(&Frame { id: 7, msg }).unwrap();
    bytes[12] = 2;
    send_bytes(&a, &bytes, &[file.as_fd(), file.as_fd()]).unwrap();
    match recv_frame::<Control>(&b, Party::Nicfs, WAIT) {
        Err(ReadError::Decode { error: DecodeError::FdCount { expected: 1, found: 2, .. }, id: 7, in_step: true }) => {}
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn peer_credentials_are_the_peer_process() {
    let (a, b) = UnixStream::pair().unwrap();
    let cred = peer_credentials(&a).unwrap();
    assert_eq!(cred.pid as u32, std::process::id());
    assert_eq!(cred.uid, rustix::process::getuid().as_raw());
    assert_eq!(cred.gid, rustix::process::getgid().as_raw());
    assert_eq!(peer_credentials(&b).unwrap(), cred);
}

#[test]
fn an_oversized_header_is_refused_without_reading_the_payload() {
    let (mut peer, nicfs) = UnixStream::pair().unwrap();
    let mut header = Header::new(Kind::ChunkReady, 8, 1).encode();
    header[8..12].copy_from_slice(&(2u32 << 20).to_le_bytes());
    peer.write_all(&header).unwrap();
    peer.write_all(b"not read by the frame reader").unwrap();
    match read_frame::<Bulk>(&nicfs, Party::Client, WAIT) {
        Err(ReadError::Decode { error: DecodeError::Oversized { declared, max }, id: 0, in_step: false }) => {
            assert_eq!(declared, (2 << 20) + HEADER_LEN as u64);
            assert_eq!(max, MAX_FRAME);
        }
        other => panic!("unexpected {other:?}"),
    }
    // What followed the header is still in the socket.
    let mut rest = [0u8; 28];
    (&nicfs).read_exact(&mut rest).unwrap();
    assert_eq!(&rest, b"not read by the frame reader");
}

#[test]
fn garbage_gets_an_error_reply_and_the_connection_ends() {
    let (mut peer, nicfs) = UnixStream::pair().unwrap();
    peer.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let err = read_frame::<Control>(&nicfs, Party::Client, WAIT).unwrap_err();
    assert!(matches!(
        err,
        ReadError::Decode { error: DecodeError::BadMagic { found: [b'G', b'E', b'T', b' '] }, in_step: false, .. }
    ));
    assert!(!answer_bad_frame(&nicfs, "test peer", &err));
    let reply: Frame<Control> = read_frame(&peer, Party::Nicfs, WAIT).unwrap();
    assert_eq!(reply.id, 0);
    match reply.msg {
        Control::Error(e) => {
            assert_eq!(e.code, RemoteError::Protocol);
            assert!(e.message.contains("magic"), "{}", e.message);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn an_unknown_kind_is_skipped_and_the_connection_goes_on() {
    let (mut peer, nicfs) = UnixStream::pair().unwrap();
    let mut frame = Header::new(Kind::Ping, 5, 42).encode().to_vec();
    frame[6..8].copy_from_slice(&0x01ffu16.to_le_bytes());
    frame.extend_from_slice(b"hello");
    peer.write_all(&frame).unwrap();
    write_frame(&peer, &Frame { id: 43, msg: Control::Ping }).unwrap();

    let err = read_frame::<Control>(&nicfs, Party::Client, WAIT).unwrap_err();
    assert!(matches!(
        err,
        ReadError::Decode { error: DecodeError::UnknownKind { kind: 0x01ff }, id: 42, in_step: true }
    ));
    assert!(answer_bad_frame(&nicfs, "test peer", &err));
    let next: Frame<Control> = read_frame(&nicfs, Party::Client, WAIT).unwrap();
    assert_eq!(next, Frame { id: 43, msg: Control::Ping });
    let reply: Frame<Control> = read_frame(&peer, Party::Nicfs, WAIT).unwrap();
    assert_eq!(reply.id, 42);
    assert!(matches!(reply.msg, Control::Error(ErrorReply { code: RemoteError::Unsupported, .. })));
}

#[test]
fn a_stalled_peer_times_out() {
    let (mut peer, nicfs) = UnixStream::pair().unwrap();
    let bytes = encode(&Frame { id: 1, msg: Control::Fsync(Fsync { lsn: 9 }) }).unwrap();
    // Half a header, then nothing.
    peer.write_all(&bytes[..10]).unwrap();
    let t = Instant::now();
    let err = read_frame::<Control>(&nicfs, Party::Client, Some(Duration::from_millis(100))).unwrap_err();
    assert!(matches!(err, ReadError::TimedOut(_)), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(5));

    // A peer that trickles bytes is held to one deadline for the whole frame.
    let (mut peer, nicfs) = UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        for b in bytes {
            if peer.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(30));
        }
    });
    let t = Instant::now();
    let err = read_frame::<Control>(&nicfs, Party::Client, Some(Duration::from_millis(200))).unwrap_err();
    assert!(matches!(err, ReadError::TimedOut(_)), "{err:?}");
    assert!(t.elapsed() < Duration::from_millis(600), "took {:?}", t.elapsed());
    drop(nicfs);
    writer.join().unwrap();
}

#[test]
fn closed_between_frames_and_inside_one() {
    let (peer, nicfs) = UnixStream::pair().unwrap();
    drop(peer);
    assert!(matches!(read_frame::<Control>(&nicfs, Party::Client, WAIT), Err(ReadError::Closed)));

    let (mut peer, nicfs) = UnixStream::pair().unwrap();
    let bytes = encode(&Frame { id: 1, msg: Control::Fsync(Fsync { lsn: 9 }) }).unwrap();
    peer.write_all(&bytes[..HEADER_LEN + 3]).unwrap();
    drop(peer);
    assert!(matches!(
        read_frame::<Control>(&nicfs, Party::Client, WAIT),
        Err(ReadError::Decode { error: DecodeError::Truncated { need: 8, have: 3, .. }, id: 1, in_step: false })
    ));
}

#[test]
fn another_version_is_refused_in_our_version_and_a_refusal_is_understood() {
    // A client of version 1 (before StatFs) says hello to us.
    let (mut client, nicfs) = UnixStream::pair().unwrap();
    let mut hello = encode(&Frame {
        id: 1,
        msg: Control::Hello(Hello { channel: Channel::Control, role: Role::DirectApi, session: 0 }),
    })
    .unwrap();
    hello[4..6].copy_from_slice(&1u16.to_le_bytes());
    client.write_all(&hello).unwrap();
    let err = read_frame::<Control>(&nicfs, Party::Client, WAIT).unwrap_err();
    assert!(matches!(
        err,
        ReadError::Decode { error: DecodeError::UnsupportedVersion { version: 1, supported: PROTOCOL_VERSION }, .. }
    ));
    // We answer in our version, naming both versions, and the connection must close.
    assert!(!answer_bad_frame(&nicfs, "test peer", &err));
    let mut reply = vec![0u8; HEADER_LEN];
    client.read_exact(&mut reply).unwrap();
    let header = Header::decode(reply[..].try_into().unwrap()).unwrap();
    assert_eq!((header.version, header.kind, header.id), (PROTOCOL_VERSION, Kind::Error as u16, 1));

    // A server of a later version refuses us: its Error frame (frozen layout) still reads.
    let future = PROTOCOL_VERSION + 1;
    let said = format!("I speak version {future}");
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut refusal = encode(&Frame {
        id: 1,
        msg: Control::Error(ErrorReply { code: RemoteError::VersionMismatch, message: said.clone() }),
    })
    .unwrap();
    refusal[4..6].copy_from_slice(&future.to_le_bytes());
    (&theirs).write_all(&refusal).unwrap();
    match read_frame::<Control>(&ours, Party::Nicfs, WAIT) {
        Err(ReadError::Decode { error: DecodeError::VersionRefused { version, errno, message }, .. }) => {
            assert_eq!(version, future);
            assert_eq!(errno, errno::EPROTONOSUPPORT);
            assert_eq!(message, said);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_full_size_frame_crosses_the_socket() {
    let (a, b) = UnixStream::pair().unwrap();
    let entries =
        vec![CopyEntry { source: CopySource::Slot(1), src_offset: 64, dst_offset: 8192, len: 4096 }; MAX_COPY_ENTRIES];
    let frame = Frame { id: 9, msg: Kworker::CopyList(CopyList { list_id: 3, entries }) };
    let sent = frame.clone();
    let writer = std::thread::spawn(move || write_frame(&a, &sent).unwrap());
    let got: Frame<Kworker> = read_frame(&b, Party::Nicfs, WAIT).unwrap();
    writer.join().unwrap();
    assert_eq!(got, frame);
}
