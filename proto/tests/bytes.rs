//! The wire format held still: frames compared with bytes written by hand from the tables
//! in `src/frame.rs` and `src/codec/payloads.rs`. A change that moves a byte fails here;
//! if it is meant, it is a new protocol version (see the crate docs, *Versioning*).

use linefs_proto::*;

/// Bytes from hex pairs, spaces and `|` (field separators) ignored.
fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

fn pin<M: Codec + PartialEq + std::fmt::Debug>(frame: Frame<M>, from: Party, expected: &str) {
    let expected = hex(expected);
    assert_eq!(encode(&frame).unwrap(), expected, "encoding of {:?}", frame.msg);
    assert_eq!(decode::<M>(&expected, from).unwrap(), frame);
}

#[test]
fn header_bytes() {
    // magic | version | kind | payload_len | fd_count | reserved | id
    pin(
        Frame { id: 0x0102_0304_0506_0708, msg: Control::Ping },
        Party::Client,
        "4c465350 | 0700 | 1001 | 00000000 | 00 | 000000 | 0807060504030201",
    );
    let h = Header { version: 1, kind: 0x0302, payload_len: 0x50, fd_count: 0, check: CHECK_NONE, id: 5 };
    assert_eq!(h.encode().to_vec(), hex("4c465350 0100 0203 50000000 00 000000 0500000000000000"));
    assert_eq!(Header::decode(&h.encode()), Ok(h));
    // The check scheme is byte 13 (0 on the links of one machine: the bytes above).
    let c = Header { check: 0xa5, ..h };
    assert_eq!(c.encode().to_vec(), hex("4c465350 0100 0203 50000000 00 a5 0000 0500000000000000"));
}

#[test]
fn check_schemes_and_version() {
    // Version 7 defined the MAC scheme (the peer link's): 1, with a 24-byte trailer.
    assert_eq!((PROTOCOL_VERSION, CHECK_NONE, CHECK_MAC, CHECK_MAC_LEN), (7, 0, 1, 24));
    let none = Header::new(Kind::Ping, 0, 3);
    let mac = Header { check: CHECK_MAC, ..none };
    assert_eq!(mac.encode().to_vec(), hex("4c465350 0700 1001 00000000 00 01 0000 0300000000000000"));
    // Each link takes its own scheme only.
    assert_eq!(Header::decode(&none.encode()), Ok(none));
    assert_eq!(Header::decode_with_check(&mac.encode(), CHECK_MAC), Ok(mac));
    assert_eq!(Header::decode(&mac.encode()), Err(DecodeError::FieldOutOfRange { field: "check", value: 1 }));
    assert_eq!(
        Header::decode_with_check(&none.encode(), CHECK_MAC),
        Err(DecodeError::FieldOutOfRange { field: "check", value: 0 })
    );
    // What a peer is told of a frame that fails its check or its place in the sequence.
    assert_eq!(DecodeError::BadCheck { scheme: 1 }.remote(), RemoteError::Malformed);
    assert_eq!(DecodeError::OutOfSequence { expected: 1, found: 0 }.remote(), RemoteError::Protocol);
}

#[test]
fn hello_bytes() {
    pin(
        Frame {
            id: 5,
            msg: Bulk::Hello(Hello { channel: Channel::Bulk, role: Role::MountDaemon, session: 0x1122_3344_5566_7788 }),
        },
        Party::Client,
        "4c465350 0700 0100 10000000 00 000000 0500000000000000
         01 | 00 | 000000000000 | 8877665544332211",
    );
}

#[test]
fn lease_request_bytes() {
    pin(
        Frame {
            id: 9,
            msg: Control::LeaseRequest(LeaseRequest {
                inode: 7,
                mode: LeaseMode::Write,
                log_tail: 0x1000,
                creds: Creds { uid: 1000, gid: 100, groups: vec![4, 27] },
            }),
        },
        Party::Client,
        "4c465350 0700 0201 30000000 00 000000 0900000000000000
         0700000000000000 | 0010000000000000 | 01 | 00000000000000
         e8030000 | 64000000 | 02000000 | 00000000 | 04000000 1b000000",
    );
}

#[test]
fn attached_bytes_declare_two_descriptors() {
    pin(
        Frame {
            id: 1,
            msg: Control::Attached(Attached {
                session: 2,
                slot: 3,
                public: true,
                log: LogGeometry {
                    ring_offset: 0x1000,
                    ring_bytes: 0x0400_0000,
                    start_lsn: 0x40,
                    chunk_bytes: 0x0040_0000,
                },
                inodes: InodeRange { first: 0x100, count: 0x40 },
            }),
        },
        Party::Nicfs,
        "4c465350 0700 0101 40000000 02 000000 0100000000000000
         0200000000000000 | 03000000 | 01 | 000000 | 0010000000000000 | 0000000400000000
         4000000000000000 | 0000400000000000 | 0001000000000000 | 4000000000000000",
    );
}

#[test]
fn attached_without_the_public_file_declares_one_descriptor() {
    pin(
        Frame {
            id: 1,
            msg: Control::Attached(Attached {
                session: 2,
                slot: 3,
                public: false,
                log: LogGeometry {
                    ring_offset: 0x1000,
                    ring_bytes: 0x0400_0000,
                    start_lsn: 0x40,
                    chunk_bytes: 0x0040_0000,
                },
                inodes: InodeRange { first: 0x100, count: 0x40 },
            }),
        },
        Party::Nicfs,
        "4c465350 0700 0101 40000000 01 000000 0100000000000000
         0200000000000000 | 03000000 | 00 | 000000 | 0010000000000000 | 0000000400000000
         4000000000000000 | 0000400000000000 | 0001000000000000 | 4000000000000000",
    );
}

#[test]
fn copy_list_bytes() {
    pin(
        Frame {
            id: 5,
            msg: Kworker::CopyList(CopyList {
                list_id: 5,
                entries: vec![
                    CopyEntry { source: CopySource::Zero, src_offset: 0, dst_offset: 0x4000_0000, len: 4096 },
                    CopyEntry { source: CopySource::Slot(3), src_offset: 0x1040, dst_offset: 0x4000_0000, len: 100 },
                ],
            }),
        },
        Party::Nicfs,
        "4c465350 0700 0203 50000000 00 000000 0500000000000000
         0500000000000000 | 02000000 | 00000000
         ffffffff | 00000000 | 0000000000000000 | 0000004000000000 | 0010000000000000
         03000000 | 00000000 | 4010000000000000 | 0000004000000000 | 6400000000000000",
    );
}

#[test]
fn error_bytes() {
    pin(
        Frame { id: 0, msg: Control::Error(ErrorReply { code: RemoteError::AccessDenied, message: "no".into() }) },
        Party::Nicfs,
        "4c465350 0700 0300 0a000000 00 000000 0000000000000000
         0d000000 | 0200 | 0700 | 6e6f",
    );
    // The version refusal: code 0, so bytes 6..8 are the zeros version 5 had there.
    pin(
        Frame { id: 0, msg: Control::Error(ErrorReply { code: RemoteError::VersionMismatch, message: "v".into() }) },
        Party::Nicfs,
        "4c465350 0700 0300 09000000 00 000000 0000000000000000
         5d000000 | 0100 | 0000 | 76",
    );
}

#[test]
fn rejected_bytes() {
    pin(
        Frame {
            id: 3,
            msg: Control::Rejected(Rejected { lsn: 0x1000, code: RemoteError::Fenced, reason: "t".into() }),
        },
        Party::Nicfs,
        "4c465350 0700 0e01 11000000 00 000000 0300000000000000
         0010000000000000 | 0f00 | 0000 | 0100 | 0000 | 74",
    );
}

/// The codes and the errnos they stand for are part of the wire: neither may change.
#[test]
fn remote_error_codes_and_errnos_are_fixed() {
    let expected: &[(RemoteError, u16, i32)] = &[
        (RemoteError::VersionMismatch, 0, 93),
        (RemoteError::Protocol, 1, 71),
        (RemoteError::Malformed, 2, 74),
        (RemoteError::TooLarge, 3, 90),
        (RemoteError::Unsupported, 4, 95),
        (RemoteError::Invalid, 5, 22),
        (RemoteError::NotPermitted, 6, 1),
        (RemoteError::AccessDenied, 7, 13),
        (RemoteError::NoSuchSession, 8, 2),
        (RemoteError::Busy, 9, 16),
        (RemoteError::TooManyClients, 10, 87),
        (RemoteError::TryAgain, 11, 11),
        (RemoteError::NoSpace, 12, 28),
        (RemoteError::QuotaExceeded, 13, 122),
        (RemoteError::ShuttingDown, 14, 108),
        (RemoteError::Fenced, 15, 110),
        (RemoteError::SessionFailed, 16, 5),
        (RemoteError::EntryRefused, 17, 22),
        (RemoteError::Io, 18, 5),
    ];
    assert_eq!(expected.len(), RemoteError::ALL.len());
    for (i, &(e, code, errno)) in expected.iter().enumerate() {
        assert_eq!((e, e.code(), e.errno()), (RemoteError::ALL[i], code, errno), "{e:?}");
        assert_eq!(RemoteError::from_code(code), Some(e));
    }
    assert_eq!(RemoteError::from_code(expected.len() as u16), None);
    assert_eq!(RemoteError::from_code(u16::MAX), None);
}

#[test]
fn kind_numbers_are_fixed() {
    let expected: &[(Kind, u16)] = &[
        (Kind::Hello, 0x0001),
        (Kind::Ok, 0x0002),
        (Kind::Error, 0x0003),
        (Kind::Attached, 0x0101),
        (Kind::LeaseRequest, 0x0102),
        (Kind::LeaseGranted, 0x0103),
        (Kind::LeaseRelease, 0x0104),
        (Kind::Revoke, 0x0105),
        (Kind::RevokeDone, 0x0106),
        (Kind::Fsync, 0x0108),
        (Kind::FsyncDone, 0x0109),
        (Kind::AllocInodes, 0x010a),
        (Kind::InodeRange, 0x010b),
        (Kind::ReserveBlocks, 0x010c),
        (Kind::ReleaseBlocks, 0x010d),
        (Kind::Rejected, 0x010e),
        (Kind::Detach, 0x010f),
        (Kind::Ping, 0x0110),
        (Kind::Pong, 0x0111),
        (Kind::StatFs, 0x0112),
        (Kind::Space, 0x0113),
        (Kind::Opened, 0x0114),
        (Kind::Closed, 0x0115),
        (Kind::ChunkReady, 0x0201),
        (Kind::Published, 0x0202),
        (Kind::Heartbeat, 0x0301),
        (Kind::CopyList, 0x0302),
        (Kind::CopyDone, 0x0303),
        (Kind::CopyFailed, 0x0304),
    ];
    assert_eq!(expected.len(), Kind::ALL.len());
    for &(k, n) in expected {
        assert_eq!(k as u16, n, "{k}");
    }
}

#[test]
fn space_bytes() {
    pin(
        Frame { id: 9, msg: Control::Space(Space { free_blocks: 0x0102_0304, free_inodes: 0x0a0b }) },
        Party::Nicfs,
        "4c465350 | 0700 | 1301 | 10000000 | 00 | 000000 | 0900000000000000 |
         0403020100000000 | 0b0a000000000000",
    );
    pin(
        Frame { id: 4, msg: Control::Opened(InodeRef { inode: 0x0102 }) },
        Party::Client,
        "4c465350 | 0700 | 1401 | 08000000 | 00 | 000000 | 0400000000000000 | 0201000000000000",
    );
    pin(
        Frame { id: 3, msg: Control::StatFs },
        Party::Client,
        "4c465350 | 0700 | 1201 | 00000000 | 00 | 000000 | 0300000000000000",
    );
}
