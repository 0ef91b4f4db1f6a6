//! The node-level lease wire format: the payloads of the frames nicfs's cluster lease
//! managers and holders send each other over the peer link's low-latency class. Nothing
//! else: what they mean is nicfs's `lease/cluster` core.
//!
//! They travel in proto's frame (header, payload, the MAC trailer of [`crate::seal`]) with
//! kinds of the peer link's own range `0x7F00..=0x7FFF` (Ping/Pong `0x7F01/02`, replication
//! `0x7F10..=0x7F13`):
//!
//! ```text
//! kind    message   from → to
//! 0x7F20  Acquire   a node → the shard's manager: "I want this inode in this mode"
//! 0x7F21  Granted   manager → the node: its request, granted as this lease
//! 0x7F22  Recall    manager → a holder: hand this lease back (or keep reading)
//! 0x7F23  Released  holder → manager: handed back, its updates published on every member
//! 0x7F24  Sync      a new manager of a shard → every member: what do you hold?
//! 0x7F25  Holdings  the answer: the sender's leases in the shard
//! ```
//!
//! Every payload (every integer little-endian) starts with the same 16 bytes, version 1:
//!
//! ```text
//! off len field
//!   0   1 version   LEASE_VERSION (1); another is refused
//!   1   3 reserved  0
//!   4   4 from      the sender's node id
//!   8   8 epoch     the sender's view epoch (the receiver drops one older than its own)
//! ```
//!
//! Then, by kind:
//!
//! ```text
//! Acquire (0x7F20), 40 bytes:       Granted (0x7F21), 48 bytes:
//!  16   8 inode                      16   8 inode
//!  24   8 request id                 24   8 request id
//!  32   1 mode (0 read, 1 write)     32   8 lease id (manager epoch << 32 | counter)
//!  33   7 reserved 0                 40   1 mode
//!                                    41   7 reserved 0
//! Recall (0x7F22) and Released (0x7F23), 40 bytes:
//!  16   8 inode
//!  24   8 lease id
//!  32   1 keep_read (0 or 1)
//!  33   7 reserved 0
//! Sync (0x7F24), 32 bytes:          Holdings (0x7F25), 32 + 24·N bytes:
//!  16   4 shard                      16   4 shard
//!  20   4 reserved 0                 20   4 N, at most MAX_HOLDINGS
//!  24   8 the manager's epoch        24   8 the manager's epoch (the Sync's)
//!                                    32  24·N entries: inode u64, lease id u64, mode u8,
//!                                                      7 reserved 0
//! ```
//!
//! The decoder is total (any bytes give a message or a one-line reason, never a panic, and
//! it allocates no more than the payload's own length) and canonical: trailing bytes,
//! nonzero reserved bytes and a mode or flag other than 0 and 1 are refused, so a decoded
//! payload re-encodes to exactly its bytes.

use linefs_bytes::{Fixed, FixedOut, Reader};

pub const KIND_ACQUIRE: u16 = 0x7F20;
pub const KIND_GRANTED: u16 = 0x7F21;
pub const KIND_RECALL: u16 = 0x7F22;
pub const KIND_RELEASED: u16 = 0x7F23;
pub const KIND_SYNC: u16 = 0x7F24;
pub const KIND_HOLDINGS: u16 = 0x7F25;
/// The payloads' layout version.
pub const LEASE_VERSION: u8 = 1;
/// Most entries one Holdings carries (24 bytes each: 1.5 MiB).
pub const MAX_HOLDINGS: usize = 1 << 16;

const HEAD: usize = 16;
const ENTRY: usize = 24;

/// A lease mode on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Read = 0,
    Write = 1,
}

/// One message, without its common header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseMsg {
    Acquire { ino: u64, req: u64, mode: Mode },
    Granted { ino: u64, req: u64, lease: u64, mode: Mode },
    Recall { ino: u64, lease: u64, keep_read: bool },
    Released { ino: u64, lease: u64, keep_read: bool },
    Sync { shard: u32, epoch: u64 },
    Holdings { shard: u32, epoch: u64, held: Vec<(u64, u64, Mode)> },
}

/// A message with its sender and the sender's view epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseFrame {
    pub from: u32,
    pub epoch: u64,
    pub msg: LeaseMsg,
}

/// Why a payload is not a lease message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    #[error("kind {0:#06x} is not a lease message")]
    Kind(u16),
    #[error("lease message version {0}, this node speaks {LEASE_VERSION}")]
    Version(u8),
    #[error("lease message {what}: {why}")]
    Invalid { what: &'static str, why: String },
}

fn invalid(what: &'static str, why: impl Into<String>) -> LeaseError {
    LeaseError::Invalid { what, why: why.into() }
}

fn mode_byte(m: Mode) -> u8 {
    m as u8
}

fn mode_of(b: u8) -> Result<Mode, LeaseError> {
    match b {
        0 => Ok(Mode::Read),
        1 => Ok(Mode::Write),
        b => Err(invalid("mode", format!("{b} is neither 0 (read) nor 1 (write)"))),
    }
}

fn flag_of(b: u8) -> Result<bool, LeaseError> {
    match b {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(invalid("keep_read", format!("{b} is neither 0 nor 1"))),
    }
}

/// The frame kind and payload of `f`.
pub fn encode(f: &LeaseFrame) -> (u16, Vec<u8>) {
    let mut head = FixedOut::<HEAD>::new();
    head.u8::<0>(LEASE_VERSION).u32::<4>(f.from).u64::<8>(f.epoch);
    let mut out = Vec::with_capacity(48);
    head.put(&mut out);
    let kind = match &f.msg {
        LeaseMsg::Acquire { ino, req, mode } => {
            let mut b = FixedOut::<24>::new();
            b.u64::<0>(*ino).u64::<8>(*req).u8::<16>(mode_byte(*mode));
            b.put(&mut out);
            KIND_ACQUIRE
        }
        LeaseMsg::Granted { ino, req, lease, mode } => {
            let mut b = FixedOut::<32>::new();
            b.u64::<0>(*ino).u64::<8>(*req).u64::<16>(*lease).u8::<24>(mode_byte(*mode));
            b.put(&mut out);
            KIND_GRANTED
        }
        LeaseMsg::Recall { ino, lease, keep_read } | LeaseMsg::Released { ino, lease, keep_read } => {
            let mut b = FixedOut::<24>::new();
            b.u64::<0>(*ino).u64::<8>(*lease).u8::<16>(u8::from(*keep_read));
            b.put(&mut out);
            if matches!(f.msg, LeaseMsg::Recall { .. }) {
                KIND_RECALL
            } else {
                KIND_RELEASED
            }
        }
        LeaseMsg::Sync { shard, epoch } => {
            let mut b = FixedOut::<16>::new();
            b.u32::<0>(*shard).u64::<8>(*epoch);
            b.put(&mut out);
            KIND_SYNC
        }
        LeaseMsg::Holdings { shard, epoch, held } => {
            let n = held.len().min(MAX_HOLDINGS);
            let mut b = FixedOut::<16>::new();
            b.u32::<0>(*shard).u32::<4>(n as u32).u64::<8>(*epoch);
            b.put(&mut out);
            for &(ino, lease, mode) in held.iter().take(n) {
                let mut e = FixedOut::<ENTRY>::new();
                e.u64::<0>(ino).u64::<8>(lease).u8::<16>(mode_byte(mode));
                e.put(&mut out);
            }
            KIND_HOLDINGS
        }
    };
    (kind, out)
}

/// The message of a verified frame's kind and payload; the reason when it is not one.
pub fn decode(kind: u16, payload: &[u8]) -> Result<LeaseFrame, LeaseError> {
    if !(KIND_ACQUIRE..=KIND_HOLDINGS).contains(&kind) {
        return Err(LeaseError::Kind(kind));
    }
    let mut r = Reader::new(payload);
    let head: Fixed<'_, HEAD> = r.fixed("header").map_err(|e| invalid("header", e.to_string()))?;
    if head.u8::<0>() != LEASE_VERSION {
        return Err(LeaseError::Version(head.u8::<0>()));
    }
    if !head.is_zero::<1, 4>() {
        return Err(invalid("header", "reserved bytes not zero"));
    }
    let (from, epoch) = (head.u32::<4>(), head.u64::<8>());
    let msg = match kind {
        KIND_ACQUIRE => {
            let b: Fixed<'_, 24> = r.fixed("Acquire").map_err(|e| invalid("Acquire", e.to_string()))?;
            if !b.is_zero::<17, 24>() {
                return Err(invalid("Acquire", "reserved bytes not zero"));
            }
            LeaseMsg::Acquire { ino: b.u64::<0>(), req: b.u64::<8>(), mode: mode_of(b.u8::<16>())? }
        }
        KIND_GRANTED => {
            let b: Fixed<'_, 32> = r.fixed("Granted").map_err(|e| invalid("Granted", e.to_string()))?;
            if !b.is_zero::<25, 32>() {
                return Err(invalid("Granted", "reserved bytes not zero"));
            }
            LeaseMsg::Granted {
                ino: b.u64::<0>(),
                req: b.u64::<8>(),
                lease: b.u64::<16>(),
                mode: mode_of(b.u8::<24>())?,
            }
        }
        KIND_RECALL | KIND_RELEASED => {
            let b: Fixed<'_, 24> = r.fixed("Recall").map_err(|e| invalid("Recall/Released", e.to_string()))?;
            if !b.is_zero::<17, 24>() {
                return Err(invalid("Recall/Released", "reserved bytes not zero"));
            }
            let (ino, lease, keep_read) = (b.u64::<0>(), b.u64::<8>(), flag_of(b.u8::<16>())?);
            if kind == KIND_RECALL {
                LeaseMsg::Recall { ino, lease, keep_read }
            } else {
                LeaseMsg::Released { ino, lease, keep_read }
            }
        }
        KIND_SYNC => {
            let b: Fixed<'_, 16> = r.fixed("Sync").map_err(|e| invalid("Sync", e.to_string()))?;
            if !b.is_zero::<4, 8>() {
                return Err(invalid("Sync", "reserved bytes not zero"));
            }
            LeaseMsg::Sync { shard: b.u32::<0>(), epoch: b.u64::<8>() }
        }
        _ => {
            let b: Fixed<'_, 16> = r.fixed("Holdings").map_err(|e| invalid("Holdings", e.to_string()))?;
            let n = r
                .check_count("holdings", u64::from(b.u32::<4>()), ENTRY, MAX_HOLDINGS)
                .map_err(|e| invalid("Holdings", format!("{e:?}")))?;
            let mut held = Vec::with_capacity(n);
            for _ in 0..n {
                let e: Fixed<'_, ENTRY> = r.fixed("holding").map_err(|e| invalid("Holdings", e.to_string()))?;
                if !e.is_zero::<17, 24>() {
                    return Err(invalid("Holdings", "reserved bytes not zero"));
                }
                held.push((e.u64::<0>(), e.u64::<8>(), mode_of(e.u8::<16>())?));
            }
            LeaseMsg::Holdings { shard: b.u32::<0>(), epoch: b.u64::<8>(), held }
        }
    };
    if !r.is_empty() {
        return Err(invalid("payload", format!("{} trailing bytes", r.remaining())));
    }
    Ok(LeaseFrame { from, epoch, msg })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(msg: LeaseMsg) -> LeaseFrame {
        LeaseFrame { from: 2, epoch: 9, msg }
    }

    #[test]
    fn every_message_round_trips_and_its_bytes_are_where_the_docs_say() {
        let all = [
            (LeaseMsg::Acquire { ino: 7, req: 3, mode: Mode::Write }, KIND_ACQUIRE, 40),
            (LeaseMsg::Granted { ino: 7, req: 3, lease: 5 << 32 | 1, mode: Mode::Read }, KIND_GRANTED, 48),
            (LeaseMsg::Recall { ino: 7, lease: 11, keep_read: true }, KIND_RECALL, 40),
            (LeaseMsg::Released { ino: 7, lease: 11, keep_read: false }, KIND_RELEASED, 40),
            (LeaseMsg::Sync { shard: 1, epoch: 6 }, KIND_SYNC, 32),
            (
                LeaseMsg::Holdings { shard: 1, epoch: 6, held: vec![(7, 11, Mode::Write), (8, 12, Mode::Read)] },
                KIND_HOLDINGS,
                80,
            ),
        ];
        for (msg, kind, len) in all {
            let f = frame(msg);
            let (k, p) = encode(&f);
            assert_eq!((k, p.len()), (kind, len), "{f:?}");
            assert_eq!(p[0], 1);
            assert_eq!(&p[4..8], &2u32.to_le_bytes());
            assert_eq!(&p[8..16], &9u64.to_le_bytes());
            if kind == KIND_SYNC || kind == KIND_HOLDINGS {
                assert_eq!(&p[16..20], &1u32.to_le_bytes(), "the shard");
            } else {
                assert_eq!(&p[16..24], &7u64.to_le_bytes(), "the inode");
            }
            assert_eq!(decode(k, &p), Ok(f));
        }
        let (_, g) = encode(&frame(LeaseMsg::Granted { ino: 7, req: 3, lease: 0x0102, mode: Mode::Write }));
        assert_eq!(&g[32..40], &0x0102u64.to_le_bytes());
        assert_eq!(g[40], 1);
        let (_, h) = encode(&frame(LeaseMsg::Holdings { shard: 1, epoch: 6, held: vec![(7, 11, Mode::Write)] }));
        assert_eq!(&h[20..24], &1u32.to_le_bytes());
        assert_eq!(&h[24..32], &6u64.to_le_bytes());
        assert_eq!(&h[32..40], &7u64.to_le_bytes());
        assert_eq!(&h[40..48], &11u64.to_le_bytes());
        assert_eq!(h[48], 1);
    }

    #[test]
    fn bad_payloads_are_refused_with_a_reason() {
        let (k, p) = encode(&frame(LeaseMsg::Recall { ino: 1, lease: 2, keep_read: false }));
        assert_eq!(decode(0x7F10, &p), Err(LeaseError::Kind(0x7F10)));
        let mut v = p.clone();
        v[0] = 2;
        assert_eq!(decode(k, &v), Err(LeaseError::Version(2)));
        let mut f = p.clone();
        f[32] = 2;
        assert!(decode(k, &f).unwrap_err().to_string().contains("keep_read"));
        let mut t = p.clone();
        t.push(0);
        assert!(decode(k, &t).unwrap_err().to_string().contains("trailing"));
        assert!(decode(k, &p[..39]).is_err());
        let (k, mut h) = encode(&frame(LeaseMsg::Holdings { shard: 0, epoch: 1, held: vec![] }));
        h[20..24].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(k, &h).is_err(), "a count past the bytes present");
    }

    fn mode() -> impl Strategy<Value = Mode> {
        prop_oneof![Just(Mode::Read), Just(Mode::Write)]
    }

    fn msg() -> impl Strategy<Value = LeaseMsg> {
        prop_oneof![
            (any::<u64>(), any::<u64>(), mode()).prop_map(|(ino, req, mode)| LeaseMsg::Acquire { ino, req, mode }),
            (any::<u64>(), any::<u64>(), any::<u64>(), mode()).prop_map(|(ino, req, lease, mode)| LeaseMsg::Granted {
                ino,
                req,
                lease,
                mode
            }),
            (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(ino, lease, keep_read)| LeaseMsg::Recall {
                ino,
                lease,
                keep_read
            }),
            (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(ino, lease, keep_read)| LeaseMsg::Released {
                ino,
                lease,
                keep_read
            }),
            (any::<u32>(), any::<u64>()).prop_map(|(shard, epoch)| LeaseMsg::Sync { shard, epoch }),
            (any::<u32>(), any::<u64>(), proptest::collection::vec((any::<u64>(), any::<u64>(), mode()), 0..8))
                .prop_map(|(shard, epoch, held)| LeaseMsg::Holdings { shard, epoch, held }),
        ]
    }

    proptest! {
        /// Every message round-trips.
        #[test]
        fn round_trip(from: u32, epoch: u64, m in msg()) {
            let f = LeaseFrame { from, epoch, msg: m };
            let (k, p) = encode(&f);
            prop_assert_eq!(decode(k, &p), Ok(f));
        }

        /// Any kind and bytes: never a panic, and what decodes re-encodes to those bytes.
        #[test]
        fn decode_is_total_and_canonical(kind in 0x7F1Eu16..0x7F28, p in proptest::collection::vec(any::<u8>(), 0..120)) {
            if let Ok(f) = decode(kind, &p) {
                prop_assert_eq!(encode(&f), (kind, p));
            }
        }

        /// A valid payload with a byte changed: refused or a different message, never a panic;
        /// a change in the version or reserved header bytes is always refused.
        #[test]
        fn a_changed_header_byte_is_refused(m in msg(), at in 0usize..4, x in 1u8..) {
            let (k, mut p) = encode(&LeaseFrame { from: 1, epoch: 1, msg: m });
            p[at] ^= x;
            prop_assert!(decode(k, &p).is_err());
        }
    }
}
