//! The replication payloads (peer::repl): round trips of every kind, compressed and not; the
//! bytes where the module's tables say; a refusal for every malformed field; and the decoder
//! against arbitrary and mutated bytes (total: never a panic; canonical).

use linefs_peer::repl::{
    decode, encode, flags, is_repl_kind, off, Creds, EncodeStats, ReplError, ReplFrame, ACK_LEN, CHUNK_FIXED_LEN,
    KIND_ACK, KIND_CHUNK, KIND_PROBE, KIND_REBASE, MAX_CHUNK, MAX_GROUPS, PROBE_LEN, REBASE_LEN, REPL_VERSION,
};
use linefs_proto::MAX_PAYLOAD;
use proptest::prelude::*;

fn creds() -> Creds {
    Creds { uid: 1000, gid: 100, groups: vec![4, 27, 1001], trusted: false }
}

/// Log-like bytes that compress well (repeated records), `n` of them.
fn compressible(n: usize) -> Vec<u8> {
    (0..n).map(|i| if i % 64 < 48 { b"LFEN"[i % 4] } else { (i / 64) as u8 }).collect()
}

/// Bytes that do not compress (a xorshift stream).
fn noise(n: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn chunk(data: Vec<u8>) -> ReplFrame {
    ReplFrame::Chunk { stream: (2, 5), epoch: 9, start: 4096, urgent: true, creds: creds(), data }
}

fn enc(f: &ReplFrame, compress: bool) -> (u16, Vec<u8>, EncodeStats) {
    encode(f, compress).unwrap()
}

#[test]
fn every_kind_round_trips() {
    let frames = [
        chunk(compressible(10_000)),
        chunk(noise(3000)),
        chunk(Vec::new()),
        ReplFrame::Chunk {
            stream: (u32::MAX, 0),
            epoch: u64::MAX,
            start: u64::MAX - 64,
            urgent: false,
            creds: Creds { uid: 0, gid: 0, groups: (0..64).collect(), trusted: true },
            data: vec![7; 64],
        },
        ReplFrame::Ack { stream: (1, 2), epoch: 3, durable: 4, published: 5 },
        ReplFrame::Probe { stream: (6, 7), epoch: 8 },
        ReplFrame::Rebase { stream: (9, 10), epoch: 11, lsn: 12 },
    ];
    for f in &frames {
        for compress in [false, true] {
            let (kind, payload, stats) = enc(f, compress);
            assert_eq!(kind, f.kind());
            assert!(is_repl_kind(kind));
            assert_eq!(stats.wire, payload.len() as u64);
            assert!(stats.wire <= stats.raw);
            assert_eq!(&decode(kind, &payload).unwrap(), f, "{kind:#x} compress {compress}");
            if !compress {
                assert_eq!(stats.wire, stats.raw);
            }
        }
    }
}

#[test]
fn compression_is_used_only_when_it_saves_bytes() {
    let (_, packed, stats) = enc(&chunk(compressible(64 << 10)), true);
    assert_ne!(packed[off::FLAGS] & flags::COMPRESSED, 0);
    assert!(stats.wire * 4 < stats.raw, "{stats:?}");
    assert_eq!(stats.raw, (CHUNK_FIXED_LEN + 12 + (64 << 10)) as u64);
    let (_, plain, stats) = enc(&chunk(noise(4096)), true);
    assert_eq!(plain[off::FLAGS] & flags::COMPRESSED, 0, "noise does not compress: sent raw");
    assert_eq!(stats.raw, stats.wire);
    let (_, off_, stats) = enc(&chunk(compressible(4096)), false);
    assert_eq!(off_[off::FLAGS] & flags::COMPRESSED, 0);
    assert_eq!(stats.raw, stats.wire);
}

#[test]
fn the_bytes_are_where_the_tables_say() {
    let (kind, p, _) = enc(&chunk(b"abc".to_vec()), false);
    assert_eq!(kind, 0x7F10);
    assert_eq!(p[0], REPL_VERSION);
    assert_eq!(p[1], flags::URGENT);
    assert_eq!(&p[2..4], &[0, 0]);
    assert_eq!(&p[4..8], &2u32.to_le_bytes());
    assert_eq!(&p[8..12], &5u32.to_le_bytes());
    assert_eq!(&p[12..16], &[0; 4]);
    assert_eq!(&p[16..24], &9u64.to_le_bytes());
    assert_eq!(&p[24..32], &4096u64.to_le_bytes());
    assert_eq!(&p[32..36], &3u32.to_le_bytes());
    assert_eq!(&p[36..40], &1000u32.to_le_bytes());
    assert_eq!(&p[40..44], &100u32.to_le_bytes());
    assert_eq!(&p[44..46], &3u16.to_le_bytes());
    assert_eq!(&p[46..48], &[0, 0]);
    assert_eq!(&p[48..60], &[4, 0, 0, 0, 27, 0, 0, 0, 0xE9, 3, 0, 0]);
    assert_eq!(&p[60..], b"abc");
    let (kind, p, _) = enc(&ReplFrame::Ack { stream: (1, 2), epoch: 3, durable: 0x1122, published: 0x33 }, false);
    assert_eq!((kind, p.len()), (0x7F11, ACK_LEN));
    assert_eq!(&p[24..32], &0x1122u64.to_le_bytes());
    assert_eq!(&p[32..40], &0x33u64.to_le_bytes());
    let (kind, p, _) = enc(&ReplFrame::Probe { stream: (1, 2), epoch: 3 }, false);
    assert_eq!((kind, p.len()), (0x7F12, PROBE_LEN));
    let (kind, p, _) = enc(&ReplFrame::Rebase { stream: (1, 2), epoch: 3, lsn: 77 }, false);
    assert_eq!((kind, p.len()), (0x7F13, REBASE_LEN));
    assert_eq!(&p[24..32], &77u64.to_le_bytes());
    let trusted = ReplFrame::Chunk {
        stream: (0, 0),
        epoch: 0,
        start: 0,
        urgent: false,
        creds: Creds { trusted: true, ..Creds::default() },
        data: vec![],
    };
    assert_eq!(enc(&trusted, false).1[1], flags::TRUSTED);
}

#[test]
fn a_largest_chunk_fits_in_one_frame_uncompressed() {
    let f = ReplFrame::Chunk {
        stream: (1, 1),
        epoch: 1,
        start: 0,
        urgent: false,
        creds: Creds { groups: vec![1; MAX_GROUPS], ..Creds::default() },
        data: noise(MAX_CHUNK),
    };
    let (kind, p, _) = enc(&f, true);
    assert!(p.len() <= MAX_PAYLOAD);
    assert_eq!(decode(kind, &p).unwrap(), f);
}

#[test]
fn what_cannot_be_encoded_is_refused() {
    let big = chunk(vec![0; MAX_CHUNK + 1]);
    assert!(matches!(encode(&big, true), Err(ReplError::Oversized { .. })));
    let groups = ReplFrame::Chunk {
        stream: (1, 1),
        epoch: 1,
        start: 0,
        urgent: false,
        creds: Creds { groups: vec![1; MAX_GROUPS + 1], ..Creds::default() },
        data: vec![],
    };
    assert!(matches!(encode(&groups, false), Err(ReplError::TooManyGroups { found: 65 })));
}

/// `p` with `f` applied.
fn with(p: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = p.to_vec();
    f(&mut v);
    v
}

#[test]
fn every_malformed_field_is_refused() {
    let (_, p, _) = enc(&chunk(b"0123456789".to_vec()), false);
    let (_, z, _) = enc(&chunk(compressible(8192)), true);
    let (_, ack, _) = enc(&ReplFrame::Ack { stream: (1, 2), epoch: 3, durable: 4, published: 5 }, false);
    let (_, probe, _) = enc(&ReplFrame::Probe { stream: (1, 2), epoch: 3 }, false);
    let (_, rebase, _) = enc(&ReplFrame::Rebase { stream: (1, 2), epoch: 3, lsn: 4 }, false);
    assert!(matches!(decode(0x7F01, &p), Err(ReplError::UnknownKind(0x7F01))));
    assert!(matches!(decode(0x7F14, &p), Err(ReplError::UnknownKind(_))));
    assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v[0] = 2)), Err(ReplError::Version { found: 2 })));
    assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v[0] = 0)), Err(ReplError::Version { found: 0 })));
    // Reserved bytes of the common part and of the chunk's fixed part.
    for at in [2, 3, 12, 13, 14, 15, 46, 47] {
        assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v[at] = 1)), Err(ReplError::Reserved(_))), "byte {at}");
    }
    // Flags: an undefined bit on a chunk, any bit on the other kinds.
    assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v[1] |= 0x08)), Err(ReplError::Flags { .. })));
    assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v[1] |= 0x80)), Err(ReplError::Flags { .. })));
    for (kind, q) in [(KIND_ACK, &ack), (KIND_PROBE, &probe), (KIND_REBASE, &rebase)] {
        for bit in 0..8 {
            assert!(matches!(decode(kind, &with(q, |v| v[1] = 1 << bit)), Err(ReplError::Flags { .. })));
        }
        // Fixed lengths: one byte more or less.
        assert!(matches!(decode(kind, &with(q, |v| v.push(0))), Err(ReplError::Length { .. })));
        assert!(decode(kind, &q[..q.len() - 1]).is_err());
    }
    // Too many groups (declared), and more than the payload holds.
    assert!(matches!(
        decode(KIND_CHUNK, &with(&p, |v| v[44..46].copy_from_slice(&65u16.to_le_bytes()))),
        Err(ReplError::TooManyGroups { found: 65 })
    ));
    assert!(matches!(
        decode(KIND_CHUNK, &with(&p[..60], |v| v[44..46].copy_from_slice(&64u16.to_le_bytes()))),
        Err(ReplError::Truncated(_))
    ));
    // A declared raw length over the bound (before any allocation), or not the data's.
    let over = (MAX_CHUNK as u32 + 1).to_le_bytes();
    assert!(matches!(
        decode(KIND_CHUNK, &with(&p, |v| v[32..36].copy_from_slice(&over))),
        Err(ReplError::Oversized { .. })
    ));
    assert!(matches!(
        decode(KIND_CHUNK, &with(&z, |v| v[32..36].copy_from_slice(&u32::MAX.to_le_bytes()))),
        Err(ReplError::Oversized { .. })
    ));
    assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v[32] = 9)), Err(ReplError::RawMismatch { .. })));
    assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v.push(0))), Err(ReplError::RawMismatch { .. })));
    // Compressed: a different declared size, garbage, a block not smaller than its data.
    assert!(matches!(
        decode(KIND_CHUNK, &with(&z, |v| v[32] ^= 1)),
        Err(ReplError::RawMismatch { .. } | ReplError::Lz4(_))
    ));
    assert!(matches!(
        decode(KIND_CHUNK, &with(&z, |v| v[32..36].copy_from_slice(&(8192u32 + 1000).to_le_bytes()))),
        Err(ReplError::RawMismatch { .. } | ReplError::Lz4(_))
    ));
    let garbage = with(&p, |v| {
        v[1] |= flags::COMPRESSED;
        v[32..36].copy_from_slice(&4000u32.to_le_bytes());
        v.truncate(60);
        v.extend_from_slice(&[0xFF; 40]);
    });
    assert!(matches!(decode(KIND_CHUNK, &garbage), Err(ReplError::Lz4(_) | ReplError::RawMismatch { .. })));
    assert!(matches!(decode(KIND_CHUNK, &with(&p, |v| v[1] |= flags::COMPRESSED)), Err(ReplError::NotSmaller { .. })));
    let truncated_block = &z[..z.len() - 3];
    assert!(decode(KIND_CHUNK, truncated_block).is_err());
    // Shorter than the fixed parts.
    assert!(decode(KIND_CHUNK, &p[..47]).is_err());
    assert!(decode(KIND_CHUNK, &[]).is_err());
    assert!(decode(KIND_ACK, &[]).is_err());
}

/// Payloads that start like a replication payload more often than chance.
fn payloads() -> impl Strategy<Value = (u16, Vec<u8>)> {
    prop_oneof![
        (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..200)),
        (0x7F10u16..=0x7F13, any::<u8>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..300)).prop_map(
            |(kind, fl, ngroups, rest)| {
                let mut p = vec![REPL_VERSION, fl & 0x07, 0, 0];
                p.extend_from_slice(&rest[..rest.len().min(20)]);
                p.resize(COMMON, 0);
                p[12..16].fill(0);
                if rest.len() > 20 {
                    p.extend_from_slice(&rest[20..rest.len().min(32)]);
                    p.extend_from_slice(&(ngroups % 70).to_le_bytes());
                    p.extend_from_slice(&[0, 0]);
                    p.extend_from_slice(&rest[rest.len().min(32)..]);
                }
                (kind, p)
            }
        ),
    ]
}

const COMMON: usize = 24;

fn frames() -> impl Strategy<Value = ReplFrame> {
    let stream = (any::<u32>(), any::<u32>());
    prop_oneof![
        (
            stream,
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            (any::<u32>(), any::<u32>(), proptest::collection::vec(any::<u32>(), 0..=MAX_GROUPS), any::<bool>()),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..600),
                (1usize..3000, any::<u8>()).prop_map(|(n, b)| vec![b; n])
            ]
        )
            .prop_map(|(stream, epoch, start, urgent, (uid, gid, groups, trusted), data)| ReplFrame::Chunk {
                stream,
                epoch,
                start,
                urgent,
                creds: Creds { uid, gid, groups, trusted },
                data
            }),
        (stream, any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(stream, epoch, durable, published)| ReplFrame::Ack { stream, epoch, durable, published }),
        (stream, any::<u64>()).prop_map(|(stream, epoch)| ReplFrame::Probe { stream, epoch }),
        (stream, any::<u64>(), any::<u64>()).prop_map(|(stream, epoch, lsn)| ReplFrame::Rebase { stream, epoch, lsn }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Any kind and bytes: a frame or a reason, never a panic; what decodes uncompressed
    /// re-encodes to exactly those bytes, and a compressed one to the same frame.
    #[test]
    fn decode_is_total_and_canonical((kind, payload) in payloads()) {
        if let Ok(f) = decode(kind, &payload) {
            prop_assert_eq!(f.kind(), kind);
            let compressed = kind == KIND_CHUNK && payload[1] & flags::COMPRESSED != 0;
            if !compressed {
                prop_assert_eq!(&encode(&f, false).unwrap().1, &payload);
            }
            let (k, p, _) = encode(&f, true).unwrap();
            prop_assert_eq!(decode(k, &p).unwrap(), f);
        }
    }

    /// Every frame round trips, compressed or not.
    #[test]
    fn frames_round_trip(f in frames(), compress: bool) {
        let (kind, p, stats) = encode(&f, compress).unwrap();
        prop_assert_eq!(stats.wire, p.len() as u64);
        prop_assert_eq!(decode(kind, &p).unwrap(), f);
    }

    /// Valid payloads with a byte changed, truncated or extended: a frame or a reason,
    /// never a panic; a change in the version, flags or reserved bytes is never taken, and
    /// a changed frame is never decoded as the original.
    #[test]
    fn mutated_frames_are_refused_or_differ(f in frames(), compress: bool, at: usize, x in 1u8.., cut: usize, grow in 0usize..3) {
        let (kind, p, _) = encode(&f, compress).unwrap();
        let i = at % p.len();
        let mut m = p.clone();
        m[i] ^= x;
        if let Ok(g) = decode(kind, &m) {
            prop_assert!(g != f || (compress && i >= CHUNK_FIXED_LEN), "a changed byte {i} decoded as the original");
            prop_assert!(i != 0 && !(2..4).contains(&i) && !(12..16).contains(&i));
            if kind != KIND_CHUNK || m[1] & flags::COMPRESSED == 0 {
                prop_assert_eq!(&encode(&g, false).unwrap().1, &m, "canonical");
            }
        }
        let short = &p[..cut % p.len()];
        prop_assert!(decode(kind, short).is_err());
        let mut long = p.clone();
        long.extend(std::iter::repeat_n(0u8, grow + 1));
        prop_assert!(decode(kind, &long).is_err());
    }
}
