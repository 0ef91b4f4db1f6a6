//! The decoder against hostile input: arbitrary bytes, and valid frames truncated, with
//! bits flipped, with length and count fields set huge. It must return Ok or Err, never
//! panic, and never allocate more than the bytes it was given (a counting allocator
//! watches every allocation made while decoding, on this thread).

#[path = "support/strategies.rs"]
mod strategies;

use linefs_proto::*;
use proptest::prelude::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static WATCHING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the allocator can run while thread-locals are being torn down.
    let _ = WATCHING.try_with(|w| {
        if w.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
            let _ = TOTAL.try_with(|t| t.set(t.get() + size));
        }
    });
}

// SAFETY: forwards every call to the system allocator unchanged; it only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (every allocation goes there).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: as for `dealloc`; the caller's contract for `realloc` is passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Decodes `bytes` as every link from every party; checks the allocation bound, and that
/// what decodes re-encodes to the same bytes.
fn decode_everything(bytes: &[u8]) {
    for from in [Party::Client, Party::Nicfs, Party::Kworker] {
        LARGEST.with(|l| l.set(0));
        TOTAL.with(|t| t.set(0));
        WATCHING.with(|w| w.set(true));
        let c = decode::<Control>(bytes, from);
        let b = decode::<Bulk>(bytes, from);
        let k = decode::<Kworker>(bytes, from);
        WATCHING.with(|w| w.set(false));
        // The encoding is canonical: whatever decodes re-encodes to the same bytes.
        if let Ok(f) = &c {
            assert_eq!(encode(f).unwrap(), bytes);
        }
        if let Ok(f) = &b {
            assert_eq!(encode(f).unwrap(), bytes);
        }
        if let Ok(f) = &k {
            assert_eq!(encode(f).unwrap(), bytes);
        }
        let largest = LARGEST.with(Cell::get);
        let total = TOTAL.with(Cell::get);
        assert!(largest <= bytes.len(), "one allocation of {largest} bytes for {} bytes of input", bytes.len());
        // Three decodes, each of which copies at most its input.
        assert!(total <= 3 * bytes.len(), "{total} bytes allocated for {} bytes of input", bytes.len());
        drop((c, b, k));
    }
}

/// How to spoil a valid frame.
#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    FlipBit(usize, u8),
    SetByte(usize, u8),
    /// Overwrite 4 bytes at an offset with a huge little-endian value.
    Huge(usize, u32),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit(at, bit)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, v)| Mutation::SetByte(at, v)),
        (any::<usize>(), prop_oneof![Just(u32::MAX), Just(u32::MAX / 2), Just(MAX_FRAME as u32), 0x1_0000u32..])
            .prop_map(|(at, v)| Mutation::Huge(at, v)),
        proptest::collection::vec(any::<u8>(), 1..16).prop_map(Mutation::Append),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len();
    match m {
        Mutation::Truncate(at) => bytes.truncate(at % (n + 1)),
        Mutation::FlipBit(at, bit) => bytes[at % n] ^= 1 << bit,
        Mutation::SetByte(at, v) => bytes[at % n] = *v,
        Mutation::Huge(at, v) => {
            // Mostly aimed at the length and count fields: the header's payload_len, and
            // the 4-byte fields of the payload's fixed part.
            let at = if at % 2 == 0 { 8 } else { (at % (n.saturating_sub(4) + 1)) & !3 };
            if at + 4 <= n {
                bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        Mutation::Append(tail) => bytes.extend_from_slice(tail),
    }
}

fn any_valid_frame() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        strategies::frame(strategies::control()).prop_map(|(f, _)| encode(&f).unwrap()),
        strategies::frame(strategies::bulk()).prop_map(|(f, _)| encode(&f).unwrap()),
        strategies::frame(strategies::kworker()).prop_map(|(f, _)| encode(&f).unwrap()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(strategies::cases(4000)))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_everything(&bytes);
    }

    /// Arbitrary payloads behind a well-formed header of every kind: reaches every payload
    /// decoder with garbage, which random bytes alone almost never do (the magic).
    #[test]
    fn arbitrary_payloads_behind_valid_headers_never_panic(
        kind in proptest::sample::select(Kind::ALL),
        id in any::<u64>(),
        payload in proptest::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut bytes = Header::new(kind, payload.len(), id).encode().to_vec();
        bytes.extend_from_slice(&payload);
        decode_everything(&bytes);
    }

    /// Every code an Error or a Rejected may carry: a known one decodes to its variant (with
    /// its own errno only), any other is refused as out of range — never a panic.
    #[test]
    fn every_refusal_code_decodes_or_is_refused(code in any::<u16>(), errno in 0u32..200, on_rejected in any::<bool>()) {
        let (kind, mut payload, at) = if on_rejected {
            (Kind::Rejected, vec![0u8; 16], 8)
        } else {
            let mut p = vec![0u8; 8];
            p[..4].copy_from_slice(&errno.to_le_bytes());
            (Kind::Error, p, 6)
        };
        payload[at..at + 2].copy_from_slice(&code.to_le_bytes());
        let mut bytes = Header::new(kind, payload.len(), 1).encode().to_vec();
        bytes.extend_from_slice(&payload);
        let got = decode::<Control>(&bytes, Party::Nicfs);
        match RemoteError::from_code(code) {
            None if on_rejected => prop_assert_eq!(got, Err(DecodeError::FieldOutOfRange { field: "rejection code", value: u64::from(code) })),
            Some(e) if on_rejected => prop_assert_eq!(got.map(|f| f.msg), Ok(Control::Rejected(Rejected { lsn: 0, code: e, reason: String::new() }))),
            Some(e) if e.errno() as u32 == errno => prop_assert_eq!(got.map(|f| f.msg), Ok(Control::Error(ErrorReply::new(e, "")))),
            _ => prop_assert!(matches!(got, Err(DecodeError::FieldOutOfRange { .. })), "{:?}", got),
        }
    }

    #[test]
    fn mutated_frames_never_panic(
        mut bytes in any_valid_frame(),
        mutations in proptest::collection::vec(mutation(), 1..4),
    ) {
        for m in &mutations {
            if bytes.is_empty() {
                break;
            }
            apply(&mut bytes, m);
        }
        decode_everything(&bytes);
    }

    /// Any 24 bytes as a header, and any 24 that start with the magic and (half the time)
    /// our version with fields in range: no panic; what decodes in our version is canonical (re-encodes to the
    /// same bytes) and names the scheme its link takes. A header of another version is
    /// returned with its frozen prefix checked only (so that a version refusal reads):
    /// its other bytes are not ours to judge, and re-encoding need not give them back
    /// (the fuzz target found such a header: `another_versions_header_is_read_by_its_prefix`).
    #[test]
    fn arbitrary_headers_never_panic(
        mut bytes in proptest::array::uniform24(any::<u8>()),
        framed in any::<bool>(),
        ours in any::<bool>(),
    ) {
        if framed {
            bytes[..4].copy_from_slice(&linefs_proto::frame::MAGIC);
            if ours {
                // Our version, and mostly in range: a size under the limit, a few
                // descriptors, a defined scheme, reserved zero.
                bytes[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
                bytes[10] %= 8;
                bytes[11] = 0;
                bytes[12] %= 5;
                bytes[13] %= 2;
                bytes[14..16].fill(0);
            }
        }
        for scheme in [CHECK_NONE, CHECK_MAC] {
            if let Ok(h) = Header::decode_with_check(&bytes, scheme) {
                prop_assert_eq!(&h.encode()[..12], &bytes[..12]);
                if h.version == PROTOCOL_VERSION {
                    prop_assert_eq!(h.encode(), bytes);
                    prop_assert_eq!(h.check, scheme);
                }
            }
        }
        prop_assert_eq!(Header::decode(&bytes), Header::decode_with_check(&bytes, CHECK_NONE));
    }

    /// A link that keeps frame boundaries (the in-process one) reads whatever bytes are
    /// sent exactly as `decode` judges them (but for descriptors declared and not passed),
    /// and stays in step: the next frame reads.
    #[test]
    fn the_in_process_link_reads_as_decode_does(
        mut bytes in any_valid_frame(),
        mutations in proptest::collection::vec(mutation(), 0..4),
    ) {
        for m in &mutations {
            if bytes.is_empty() {
                break;
            }
            apply(&mut bytes, m);
        }
        let (a, b) = MemoryLink::pair();
        for from in [Party::Client, Party::Nicfs, Party::Kworker] {
            a.send_raw(&bytes).unwrap();
            let got = b.recv::<Control>(from, None);
            let want = decode::<Control>(&bytes, from);
            match (&got, &want) {
                (Ok(g), Ok(w)) => prop_assert_eq!(g, w),
                // `decode` trusts the header's descriptor count; the link checks the
                // descriptors came, and none were sent.
                (Err(ReadError::Decode { error: DecodeError::FdCount { expected, found: 0, .. }, .. }), Ok(w))
                    if *expected == w.msg.fds() && *expected > 0 => {}
                (Err(ReadError::Decode { error, in_step: true, .. }), Err(w)) => prop_assert_eq!(error, w),
                _ => prop_assert!(false, "link read {:?}, decode {:?}", got, want),
            }
            a.send(&Frame { id: 1, msg: Control::Ping }).unwrap();
            prop_assert_eq!(b.recv::<Control>(Party::Client, None).unwrap().msg, Control::Ping);
        }
    }
}

#[test]
fn header_errors_are_precise() {
    let good = encode(&Frame { id: 3, msg: Control::Ping }).unwrap();
    let mut b = good.clone();
    b[0] = b'X';
    assert_eq!(decode::<Control>(&b, Party::Client), Err(DecodeError::BadMagic { found: *b"XFSP" }));
    let mut b = good.clone();
    b[4] = PROTOCOL_VERSION as u8 + 1;
    assert_eq!(
        decode::<Control>(&b, Party::Client),
        Err(DecodeError::UnsupportedVersion { version: PROTOCOL_VERSION + 1, supported: PROTOCOL_VERSION })
    );
    let mut b = good.clone();
    b[6..8].copy_from_slice(&0x0999u16.to_le_bytes());
    assert_eq!(decode::<Control>(&b, Party::Client), Err(DecodeError::UnknownKind { kind: 0x0999 }));
    // OpenCheck's number, retired in version 4.
    let mut b = good.clone();
    b[6..8].copy_from_slice(&0x0107u16.to_le_bytes());
    assert_eq!(decode::<Control>(&b, Party::Client), Err(DecodeError::UnknownKind { kind: 0x0107 }));
    let mut b = good.clone();
    b[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        decode::<Control>(&b, Party::Client),
        Err(DecodeError::Oversized { declared: u32::MAX as u64 + HEADER_LEN as u64, max: MAX_FRAME })
    );
    let mut b = good.clone();
    b[8] = 8;
    assert_eq!(
        decode::<Control>(&b, Party::Client),
        Err(DecodeError::Truncated { what: "frame payload", need: 8, have: 0 })
    );
    let mut b = good.clone();
    b.push(0);
    assert_eq!(decode::<Control>(&b, Party::Client), Err(DecodeError::TrailingBytes { kind: Kind::Ping, extra: 1 }));
    let mut b = good.clone();
    b[12] = 2;
    assert_eq!(
        decode::<Control>(&b, Party::Client),
        Err(DecodeError::FdCount { kind: Kind::Ping, expected: 0, found: 2 })
    );
    let mut b = good.clone();
    b[14] = 1;
    assert_eq!(decode::<Control>(&b, Party::Client), Err(DecodeError::ReservedNonZero { field: "frame header" }));
    // Byte 13 names an integrity check; a frame of the links of one machine says none, so
    // any other value (the peer link's MAC, 1, included) is refused.
    let mut b = good.clone();
    b[13] = 1;
    assert_eq!(decode::<Control>(&b, Party::Client), Err(DecodeError::FieldOutOfRange { field: "check", value: 1 }));
    assert_eq!(
        decode::<Control>(&good[..10], Party::Client),
        Err(DecodeError::Truncated { what: "frame header", need: HEADER_LEN, have: 10 })
    );
}

#[test]
fn payload_errors_are_precise() {
    let frame = |kind: Kind, payload: &[u8]| {
        let mut b = Header::new(kind, payload.len(), 1).encode().to_vec();
        b.extend_from_slice(payload);
        b
    };
    // Error with errno 0, then with a text that is not UTF-8, then a text longer than said.
    let mut p = vec![0u8; 8];
    assert_eq!(
        decode::<Control>(&frame(Kind::Error, &p), Party::Nicfs),
        Err(DecodeError::FieldOutOfRange { field: "errno", value: 0 })
    );
    // A code this version does not know, then an errno that is not its code's.
    p[0] = 5;
    p[6] = 0xff;
    assert_eq!(
        decode::<Control>(&frame(Kind::Error, &p), Party::Nicfs),
        Err(DecodeError::FieldOutOfRange { field: "error code", value: 0xff })
    );
    p[6] = RemoteError::Busy.code() as u8;
    assert_eq!(
        decode::<Control>(&frame(Kind::Error, &p), Party::Nicfs),
        Err(DecodeError::FieldOutOfRange { field: "errno", value: 5 })
    );
    p[6] = RemoteError::Io.code() as u8;
    p[4] = 2;
    p.extend_from_slice(&[0xff, 0xfe]);
    assert_eq!(
        decode::<Control>(&frame(Kind::Error, &p), Party::Nicfs),
        Err(DecodeError::BadUtf8 { field: "error message" })
    );
    p[4] = 200;
    assert_eq!(
        decode::<Control>(&frame(Kind::Error, &p), Party::Nicfs),
        Err(DecodeError::Truncated { what: "error message", need: 200, have: 2 })
    );
    // Credentials claiming a million groups: refused before anything is allocated.
    let mut p = vec![0u8; 24 + 16];
    p[24 + 8..24 + 12].copy_from_slice(&1_000_000u32.to_le_bytes());
    assert_eq!(
        decode::<Control>(&frame(Kind::LeaseRequest, &p), Party::Client),
        Err(DecodeError::ListTooLong { field: "groups", count: 1_000_000, max: MAX_GROUPS as u64 })
    );
    // A lease mode of 2.
    let mut p = vec![0u8; 24 + 16];
    p[16] = 2;
    assert_eq!(
        decode::<Control>(&frame(Kind::LeaseRequest, &p), Party::Client),
        Err(DecodeError::FieldOutOfRange { field: "lease mode", value: 2 })
    );
    // A copy list declaring more entries than it holds.
    let mut p = vec![0u8; 16];
    p[8] = 3;
    assert_eq!(
        decode::<Kworker>(&frame(Kind::CopyList, &p), Party::Nicfs),
        Err(DecodeError::Truncated { what: "copy entries", need: 96, have: 0 })
    );
    // Reclaimable beyond published.
    let mut p = vec![0u8; 24];
    p[8] = 1;
    assert_eq!(
        decode::<Bulk>(&frame(Kind::Published, &p), Party::Nicfs),
        Err(DecodeError::FieldOutOfRange { field: "reclaim_lsn", value: 1 })
    );
}

/// Found by the fuzz target: a header of another version whose bytes after the frozen
/// prefix are not ours (reserved set) is read by its prefix, so its refusal can be answered.
#[test]
fn another_versions_header_is_read_by_its_prefix() {
    let mut b = [0u8; HEADER_LEN];
    b[..4].copy_from_slice(&linefs_proto::frame::MAGIC);
    b[4..6].copy_from_slice(&0xffffu16.to_le_bytes());
    b[6..8].copy_from_slice(&0x000au16.to_le_bytes());
    b[12..16].copy_from_slice(b"LFSP");
    let h = Header::decode(&b).unwrap();
    assert_eq!((h.version, h.kind, h.payload_len), (0xffff, 0x000a, 0));
    assert!(matches!(h.check_version(), Err(DecodeError::UnsupportedVersion { version: 0xffff, .. })));
    b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    assert!(Header::decode(&b).is_err(), "in our version the same bytes are refused");
}
