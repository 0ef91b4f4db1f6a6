//! The same exchanges over every [`LocalLink`]: a Unix socket pair and the in-process
//! pair. What is written against the trait (attach with descriptors, requests and
//! replies, a refused frame answered) behaves the same on both.

use linefs_proto::*;
use std::io::{Read, Seek, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

const WAIT: Option<Duration> = Some(Duration::from_secs(10));

fn attached() -> Control {
    Control::Attached(Attached {
        session: 1,
        slot: 2,
        public: true,
        log: LogGeometry { ring_offset: 4096, ring_bytes: 1 << 20, start_lsn: 0, chunk_bytes: 1 << 18 },
        inodes: InodeRange { first: 100, count: 10 },
    })
}

fn file_with(text: &[u8]) -> std::fs::File {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let path = std::env::temp_dir().join(format!("linefs-proto-links-{}-{nanos}", std::process::id()));
    let mut f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    f.write_all(text).unwrap();
    f
}

/// Attach, a request answered, a bad frame refused and the link going on, a close.
fn exchange<L: LocalLink>(client: L, nicfs: L) {
    let me = nicfs.peer_credentials().unwrap();
    assert_eq!(me.uid, rustix::process::getuid().as_raw());

    let hello = Control::Hello(Hello { channel: Channel::Control, role: Role::DirectApi, session: 0 });
    client.send(&Frame { id: 1, msg: hello.clone() }).unwrap();
    assert_eq!(nicfs.recv::<Control>(Party::Client, WAIT).unwrap(), Frame { id: 1, msg: hello });

    let (log, public) = (file_with(b"log"), file_with(b"public"));
    nicfs.send_with_fds(&Frame { id: 1, msg: attached() }, &[log.as_fd(), public.as_fd()]).unwrap();
    let r: Received<Control> = client.recv_with_fds(Party::Nicfs, WAIT).unwrap();
    assert_eq!(r.frame, Frame { id: 1, msg: attached() });
    let texts: Vec<String> = r
        .fds
        .into_iter()
        .map(|fd| {
            let mut f = std::fs::File::from(fd);
            f.rewind().unwrap();
            let mut s = String::new();
            f.read_to_string(&mut s).unwrap();
            s
        })
        .collect();
    assert_eq!(texts, ["log", "public"]);

    client.send(&Frame { id: 2, msg: Control::StatFs }).unwrap();
    let req: Frame<Control> = nicfs.recv(Party::Client, WAIT).unwrap();
    assert_eq!(req.msg, Control::StatFs);
    nicfs.send(&Frame { id: req.id, msg: Control::Space(Space { free_blocks: 7, free_inodes: 8 }) }).unwrap();
    let reply: Frame<Control> = client.recv(Party::Nicfs, WAIT).unwrap();
    assert_eq!(reply, Frame { id: 2, msg: Control::Space(Space { free_blocks: 7, free_inodes: 8 }) });

    // A client forging a nicfs reply: refused in step, answered, and the link goes on.
    client.send_raw(&encode(&Frame { id: 3, msg: Control::Pong }).unwrap()).unwrap();
    client
        .send_raw(&encode(&Frame { id: 4, msg: Control::Space(Space { free_blocks: 0, free_inodes: 0 }) }).unwrap())
        .unwrap();
    client.send(&Frame { id: 5, msg: Control::Ping }).unwrap();
    assert_eq!(nicfs.recv::<Control>(Party::Client, WAIT).unwrap().msg, Control::Pong);
    let err = nicfs.recv::<Control>(Party::Client, WAIT).unwrap_err();
    assert!(
        matches!(err, ReadError::Decode { error: DecodeError::WrongSender { .. }, id: 4, in_step: true }),
        "{err:?}"
    );
    assert!(nicfs.answer_bad_frame("client", &err));
    assert_eq!(nicfs.recv::<Control>(Party::Client, WAIT).unwrap().id, 5);
    match client.recv::<Control>(Party::Nicfs, WAIT).unwrap() {
        Frame { id: 4, msg: Control::Error(e) } => assert_eq!(e.errno(), errno::EOPNOTSUPP),
        other => panic!("unexpected {other:?}"),
    }

    drop(client);
    assert!(matches!(nicfs.recv::<Control>(Party::Client, WAIT), Err(ReadError::Closed)));
}

#[test]
fn the_unix_link() {
    let (client, nicfs) = UnixStream::pair().unwrap();
    exchange(client, nicfs);
}

#[test]
fn the_in_process_link() {
    let (client, nicfs) = MemoryLink::pair();
    exchange(client, nicfs);
}

/// Callers may hold a link as a trait object (the cluster issue's TCP link joins here).
#[test]
fn a_link_as_a_trait_object() {
    let (a, b) = UnixStream::pair().unwrap();
    let (c, d) = MemoryLink::pair();
    let links: Vec<(Box<dyn FrameLink>, Box<dyn FrameLink>)> =
        vec![(Box::new(a), Box::new(b)), (Box::new(c), Box::new(d))];
    for (x, y) in &links {
        x.send(&Frame { id: 9, msg: Bulk::ChunkReady(ChunkReady { committed_lsn: 4096 }) }).unwrap();
        let f: Frame<Bulk> = y.recv(Party::Client, WAIT).unwrap();
        assert_eq!(f, Frame { id: 9, msg: Bulk::ChunkReady(ChunkReady { committed_lsn: 4096 }) });
    }
}
