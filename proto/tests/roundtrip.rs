//! encode → decode is the identity for every valid message of every link, and every kind
//! is covered.

#[path = "support/strategies.rs"]
mod strategies;

use linefs_proto::*;
use proptest::prelude::*;
use std::collections::HashSet;

fn round_trip<M: Codec + PartialEq + std::fmt::Debug>(frame: &Frame<M>, from: Party) {
    let bytes = encode(frame).expect("a valid message encodes");
    assert!(bytes.len() <= MAX_FRAME);
    let header = Header::decode(bytes[..HEADER_LEN].try_into().unwrap()).unwrap();
    assert_eq!(header.frame_len(), bytes.len());
    assert_eq!(header.kind, frame.msg.kind() as u16);
    assert_eq!(header.fd_count, frame.msg.fds());
    assert!(header.fd_count <= frame.msg.kind().fds());
    let back: Frame<M> = decode(&bytes, from).expect("an encoded frame decodes");
    assert_eq!(&back, frame);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(strategies::cases(2000)))]

    #[test]
    fn control_round_trips((frame, from) in strategies::frame(strategies::control())) {
        round_trip(&frame, from);
    }

    #[test]
    fn bulk_round_trips((frame, from) in strategies::frame(strategies::bulk())) {
        round_trip(&frame, from);
    }

    #[test]
    fn kworker_round_trips((frame, from) in strategies::frame(strategies::kworker())) {
        round_trip(&frame, from);
    }
}

/// One message of every kind, by hand, so that a kind added without a test is noticed.
fn samples() -> (Vec<Control>, Vec<Bulk>, Vec<Kworker>) {
    let creds = Creds { uid: 1000, gid: 100, groups: vec![4, 24, 27] };
    let hello = Hello { channel: Channel::Control, role: Role::DirectApi, session: 0 };
    let error = ErrorReply { code: RemoteError::AccessDenied, message: "permission denied on inode 7".into() };
    let control = vec![
        Control::Hello(hello),
        Control::Attached(Attached {
            session: 9,
            slot: 3,
            public: true,
            log: LogGeometry { ring_offset: 4096, ring_bytes: 64 << 20, start_lsn: 1 << 20, chunk_bytes: 4 << 20 },
            inodes: InodeRange { first: 1000, count: 64 },
        }),
        Control::LeaseRequest(LeaseRequest { inode: 7, mode: LeaseMode::Write, log_tail: 4096, creds }),
        Control::LeaseGranted(LeaseGranted { inode: 7, mode: LeaseMode::Write, lease: 11 }),
        Control::LeaseRelease(LeaseHandback { inode: 7, lease: 11, covered_lsn: 8192 }),
        Control::Revoke(Revoke { inode: 7, lease: 11, keep_read: true }),
        Control::RevokeDone(LeaseHandback { inode: 7, lease: 11, covered_lsn: 8192 }),
        Control::Fsync(Fsync { lsn: 8192 }),
        Control::FsyncDone(FsyncDone { durable_lsn: 8192 }),
        Control::AllocInodes(AllocInodes { count: 64 }),
        Control::InodeRange(InodeRange { first: 1064, count: 64 }),
        Control::ReserveBlocks(Blocks { count: 16 }),
        Control::ReleaseBlocks(Blocks { count: 16 }),
        Control::Rejected(Rejected {
            lsn: 4096,
            code: RemoteError::EntryRefused,
            reason: "no write lease on inode 7".into(),
        }),
        Control::Detach,
        Control::Ping,
        Control::Pong,
        Control::StatFs,
        Control::Space(Space { free_blocks: 1 << 20, free_inodes: 4000 }),
        Control::Opened(InodeRef { inode: 77 }),
        Control::Closed(InodeRef { inode: 77 }),
        Control::Ok,
        Control::Error(error.clone()),
    ];
    let bulk = vec![
        Bulk::Hello(Hello { channel: Channel::Bulk, role: Role::MountDaemon, session: 9 }),
        Bulk::ChunkReady(ChunkReady { committed_lsn: 4 << 20 }),
        Bulk::Published(Published {
            published_lsn: 4 << 20,
            reclaim_lsn: 1 << 20,
            changed: InodeSet::Listed(vec![1, 7]),
        }),
        Bulk::Published(Published { published_lsn: 4 << 20, reclaim_lsn: 4 << 20, changed: InodeSet::All }),
        Bulk::Ok,
        Bulk::Error(error.clone()),
    ];
    let kworker = vec![
        Kworker::Hello(Hello { channel: Channel::Kworker, role: Role::Kworker, session: 0 }),
        Kworker::Heartbeat(Heartbeat { lists_in_flight: 2 }),
        Kworker::CopyList(CopyList {
            list_id: 5,
            entries: vec![
                CopyEntry { source: CopySource::Zero, src_offset: 0, dst_offset: 1 << 30, len: 4096 },
                CopyEntry { source: CopySource::Slot(3), src_offset: 4160, dst_offset: 1 << 30, len: 100 },
            ],
        }),
        Kworker::CopyDone(CopyDone { list_id: 5 }),
        Kworker::CopyFailed(CopyFailed { list_id: 5, entry: 1, errno: errno::EIO }),
        Kworker::Ok,
        Kworker::Error(error),
    ];
    (control, bulk, kworker)
}

#[test]
fn every_kind_has_a_sample_that_round_trips_from_every_sender() {
    let (control, bulk, kworker) = samples();
    let mut seen = HashSet::new();
    fn check<M: Codec + PartialEq + std::fmt::Debug + Clone>(msgs: &[M], seen: &mut HashSet<Kind>) {
        for (i, msg) in msgs.iter().enumerate() {
            let kind = msg.kind();
            assert!(kind.on_link(M::LINK));
            for from in kind.senders() {
                round_trip(&Frame { id: 100 + i as u64, msg: msg.clone() }, from);
            }
            seen.insert(kind);
        }
    }
    check(&control, &mut seen);
    check(&bulk, &mut seen);
    check(&kworker, &mut seen);
    for k in Kind::ALL {
        assert!(seen.contains(k), "{k} has no sample");
    }
}

#[test]
fn a_kind_is_refused_on_the_wrong_link_and_from_the_wrong_party() {
    let bytes = encode(&Frame { id: 1, msg: Kworker::CopyDone(CopyDone { list_id: 1 }) }).unwrap();
    assert_eq!(
        decode::<Control>(&bytes, Party::Kworker),
        Err(DecodeError::WrongLink { kind: Kind::CopyDone, link: Link::Control })
    );
    // A client cannot send what only nicfs sends.
    let attached = samples().0.into_iter().find(|m| m.kind() == Kind::Attached).unwrap();
    let bytes = encode(&Frame { id: 1, msg: attached }).unwrap();
    assert_eq!(
        decode::<Control>(&bytes, Party::Client),
        Err(DecodeError::WrongSender { kind: Kind::Attached, from: Party::Client })
    );
    // Only an Error may carry id 0.
    let bytes = encode(&Frame { id: 0, msg: Control::Ping }).unwrap();
    assert_eq!(decode::<Control>(&bytes, Party::Client), Err(DecodeError::FieldOutOfRange { field: "id", value: 0 }));
}

#[test]
fn encoders_refuse_what_the_wire_cannot_carry() {
    let long = Control::Error(ErrorReply { code: RemoteError::Io, message: "x".repeat(MAX_TEXT + 1) });
    assert!(matches!(encode(&Frame { id: 1, msg: long }), Err(EncodeError::TooLong { .. })));
    let entries =
        vec![CopyEntry { source: CopySource::Zero, src_offset: 0, dst_offset: 0, len: 1 }; MAX_COPY_ENTRIES + 1];
    let list = Kworker::CopyList(CopyList { list_id: 1, entries });
    assert!(matches!(encode(&Frame { id: 1, msg: list }), Err(EncodeError::TooLong { .. })));
    let slot_max = CopyEntry { source: CopySource::Slot(u32::MAX), src_offset: 0, dst_offset: 0, len: 1 };
    let list = Kworker::CopyList(CopyList { list_id: 1, entries: vec![slot_max] });
    assert!(matches!(encode(&Frame { id: 1, msg: list }), Err(EncodeError::Reserved { .. })));
    let groups = Creds { uid: 0, gid: 0, groups: vec![0; MAX_GROUPS + 1] };
    let request = Control::LeaseRequest(LeaseRequest { inode: 1, mode: LeaseMode::Read, log_tail: 0, creds: groups });
    assert!(matches!(encode(&Frame { id: 1, msg: request }), Err(EncodeError::TooLong { .. })));
    // The largest lists fit in a frame.
    let inodes = InodeSet::Listed(vec![u64::MAX; MAX_PUBLISHED_INODES]);
    let full = Bulk::Published(Published { published_lsn: 1, reclaim_lsn: 0, changed: inodes });
    assert!(encode(&Frame { id: 1, msg: full }).unwrap().len() <= MAX_FRAME);
}
