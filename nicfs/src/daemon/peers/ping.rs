//! The peer link's liveness messages, Ping and Pong: their kinds and byte layout. Nothing
//! else; [`super`] sends and answers them.
//!
//! They travel in proto's frame (header, payload, the MAC trailer of check scheme 1) with a
//! kind of the range `0x7F00..=0x7FFF`, which proto's kind table leaves to the peer link's
//! own messages (proto's kinds are `0x01xx`–`0x03xx`). The header's `id` is the Ping's
//! number (never 0), the Pong's the Ping's it answers. The range's other kinds so far are
//! replication's, `0x7F10..=0x7F13` (Chunk, Ack, Probe, Rebase: `linefs_peer::repl`).
//!
//! Payload (every integer little-endian), 32 bytes, version 1:
//!
//! ```text
//! off len field
//!   0   1 version   PING_VERSION (1); another is refused
//!   1   7 reserved  0
//!   8   8 epoch     the sender's current view epoch (0: none yet)
//!  16   8 seq       Ping: its number; Pong: the number of the Ping it answers
//!  24   8 sent_ns   Ping: the sender's monotonic clock (ns since its link table began);
//!                   Pong: the Ping's, echoed (the Ping's sender reads its round trip)
//! ```

use linefs_proto::frame::{Header, CHECK_NONE, HEADER_LEN};
use linefs_proto::PROTOCOL_VERSION;

/// A Ping: "I am here at this epoch"; answered by a Pong.
pub(crate) const KIND_PING: u16 = 0x7F01;
/// The answer to a Ping.
pub(crate) const KIND_PONG: u16 = 0x7F02;
/// The payload's layout version.
pub(crate) const PING_VERSION: u8 = 1;
/// The payload's size.
pub(crate) const PAYLOAD_LEN: usize = 32;

/// A Ping or a Pong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Beat {
    pub(crate) pong: bool,
    pub(crate) epoch: u64,
    pub(crate) seq: u64,
    pub(crate) sent_ns: u64,
}

impl Beat {
    /// The frame (header with check 0, payload) the link seals and sends.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let header = Header {
            version: PROTOCOL_VERSION,
            kind: if self.pong { KIND_PONG } else { KIND_PING },
            payload_len: PAYLOAD_LEN as u32,
            fd_count: 0,
            check: CHECK_NONE,
            id: self.seq,
        };
        let mut out = Vec::with_capacity(HEADER_LEN + PAYLOAD_LEN);
        out.extend_from_slice(&header.encode());
        out.push(PING_VERSION);
        out.extend_from_slice(&[0u8; 7]);
        out.extend_from_slice(&self.epoch.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&self.sent_ns.to_le_bytes());
        out
    }

    /// Reads a verified frame's kind and payload; the reason when it is not a Beat.
    pub(crate) fn decode(kind: u16, payload: &[u8]) -> Result<Beat, String> {
        let pong = match kind {
            KIND_PING => false,
            KIND_PONG => true,
            k => return Err(format!("kind {k:#06x} is not a peer message this node knows")),
        };
        if payload.len() != PAYLOAD_LEN {
            return Err(format!("a beat is {PAYLOAD_LEN} bytes, not {}", payload.len()));
        }
        if payload[0] != PING_VERSION {
            return Err(format!("beat version {}, this node speaks {PING_VERSION}", payload[0]));
        }
        if payload[1..8].iter().any(|&b| b != 0) {
            return Err("beat reserved bytes not zero".into());
        }
        let word = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&payload[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let beat = Beat { pong, epoch: word(8), seq: word(16), sent_ns: word(24) };
        if beat.seq == 0 {
            return Err("beat number 0".into());
        }
        Ok(beat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_round_trips_and_its_bytes_are_where_the_docs_say() {
        let b = Beat { pong: true, epoch: 7, seq: 3, sent_ns: 0x0102_0304_0506_0708 };
        let f = b.encode();
        assert_eq!(f.len(), HEADER_LEN + PAYLOAD_LEN);
        let h = Header::decode(f[..HEADER_LEN].try_into().unwrap()).unwrap();
        assert_eq!((h.kind, h.id, h.payload_len), (KIND_PONG, 3, 32));
        let p = &f[HEADER_LEN..];
        assert_eq!(p[0], 1);
        assert_eq!(&p[8..16], &7u64.to_le_bytes());
        assert_eq!(&p[24..32], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(Beat::decode(h.kind, p), Ok(b));
    }

    #[test]
    fn a_bad_beat_is_refused_with_a_reason() {
        let p = Beat { pong: false, epoch: 1, seq: 1, sent_ns: 1 }.encode()[HEADER_LEN..].to_vec();
        assert!(Beat::decode(0x0101, &p).is_err());
        assert!(Beat::decode(KIND_PING, &p[..31]).is_err());
        let mut v = p.clone();
        v[0] = 2;
        assert!(Beat::decode(KIND_PING, &v).is_err());
        let mut r = p.clone();
        r[3] = 1;
        assert!(Beat::decode(KIND_PING, &r).is_err());
        let mut z = p;
        z[16..24].fill(0);
        assert!(Beat::decode(KIND_PING, &z).is_err());
    }

    proptest::proptest! {
        /// Any kind and bytes: decoding never panics, and what it takes is canonical (it
        /// re-encodes to exactly those payload bytes under that kind).
        #[test]
        fn decode_is_total_and_canonical(kind: u16, payload in proptest::collection::vec(proptest::num::u8::ANY, 0..48)) {
            if let Ok(b) = Beat::decode(kind, &payload) {
                let f = b.encode();
                let h = Header::decode(f[..HEADER_LEN].try_into().unwrap()).unwrap();
                proptest::prop_assert_eq!(h.kind, kind);
                proptest::prop_assert_eq!(&f[HEADER_LEN..], &payload[..]);
            }
        }

        /// Valid payloads with bytes flipped: decoded or refused, never a panic; a flip in
        /// the version or the reserved bytes is always refused.
        #[test]
        fn a_flipped_byte_in_the_header_part_is_refused(seq in 1u64.., at in 0usize..8, bit in 0u8..8) {
            let mut p = Beat { pong: false, epoch: 1, seq, sent_ns: 2 }.encode()[HEADER_LEN..].to_vec();
            p[at] ^= 1 << bit;
            proptest::prop_assert!(Beat::decode(KIND_PING, &p).is_err());
        }
    }
}
