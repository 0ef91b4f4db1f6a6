//! Frames on the peer link: proto's frame with header byte 13 (`check`) =
//! [`CHECK_MAC`] and a 24-byte trailer after the payload, not counted in `payload_len`:
//!
//! ```text
//! off                 len field
//!   0                  24 header     proto's frame header (linefs_proto::frame), check = 1
//!  24         payload_len payload    the kind's layout, as on every link
//!  24+payload_len       8 seq        the sender's sequence number for this direction (u64 LE):
//!                                    0 for the first frame after the handshake, then +1
//!  32+payload_len      16 mac        HMAC-SHA256(direction key, seq | header | payload),
//!                                    its first 16 bytes
//! ```
//!
//! The direction key is the session's ([`crate::handshake`]): one for the frames the
//! initiator sends, one for the acceptor's, so a frame cannot be reflected back to its
//! sender. The receiver verifies the MAC (constant-time) before it believes any byte,
//! then that `seq` is the one it expects next: a garbled or forged frame fails the first
//! ([`DecodeError::BadCheck`]), a replayed, reordered, or resent-after-a-loss one the second
//! ([`DecodeError::OutOfSequence`]). Either ends the link: the stream is not to be trusted
//! past it. A 128-bit tag: forging one takes 2^128 tries, each of which ends a connection.
//!
//! The header is checked ([`Header::decode_with_check`]: magic, size against
//! `MAX_FRAME`, scheme) before the payload is read, as on every link, so a declared size
//! bounds the allocation before the MAC can be checked; a header that fails ends the link
//! with nothing more read.

use crate::mac::{keyed, verify, MAC_LEN};
use hmac::Mac;
use linefs_proto::{DecodeError, Header, RawFrame, CHECK_MAC, CHECK_MAC_LEN, HEADER_LEN};

/// Bytes of the trailer.
pub const TRAILER_LEN: usize = CHECK_MAC_LEN;
/// Bytes of the truncated MAC in the trailer.
pub const TAG_LEN: usize = 16;
const _: () = assert!(8 + TAG_LEN == TRAILER_LEN);

/// Why a frame could not be sealed.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("not a whole encoded frame: {0}")]
    NotAFrame(String),
    #[error("this direction's sequence numbers are used up")]
    Exhausted,
}

/// The sending half of a session: seals frames with the direction key and numbers them.
pub struct Sealer {
    key: [u8; MAC_LEN],
    next: u64,
}

impl Sealer {
    pub fn new(key: [u8; MAC_LEN]) -> Sealer {
        Sealer { key, next: 0 }
    }

    /// The bytes to put on the wire for an encoded frame (as `linefs_proto::encode` makes
    /// it: header with check 0, payload): the header's check byte set to [`CHECK_MAC`],
    /// then the trailer. Takes the next sequence number.
    pub fn seal(&mut self, frame: &[u8]) -> Result<Vec<u8>, SealError> {
        let head: &[u8; HEADER_LEN] = frame
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or_else(|| SealError::NotAFrame(format!("{} bytes, shorter than a header", frame.len())))?;
        let header = Header::decode(head).map_err(|e| SealError::NotAFrame(e.to_string()))?;
        if header.frame_len() != frame.len() {
            return Err(SealError::NotAFrame(format!(
                "header says {} bytes, {} given",
                header.frame_len(),
                frame.len()
            )));
        }
        // Never wrap: a wrapped number would let an old frame verify again.
        if self.next == u64::MAX {
            return Err(SealError::Exhausted);
        }
        let seq = self.next;
        let mut out = Vec::with_capacity(frame.len() + TRAILER_LEN);
        out.extend_from_slice(frame);
        out[linefs_proto::frame::header_off::CHECK] = CHECK_MAC;
        let tag = keyed(&self.key, &[&seq.to_le_bytes(), &out]).finalize().into_bytes();
        out.extend_from_slice(&seq.to_le_bytes());
        out.extend_from_slice(&tag[..TAG_LEN]);
        self.next += 1;
        Ok(out)
    }
}

/// The receiving half of a session: verifies each frame and its place in the sequence.
pub struct Opener {
    key: [u8; MAC_LEN],
    next: u64,
}

impl Opener {
    pub fn new(key: [u8; MAC_LEN]) -> Opener {
        Opener { key, next: 0 }
    }

    /// The sequence number the next frame must carry.
    pub fn expected(&self) -> u64 {
        self.next
    }

    /// Checks a header as the peer link reads it, before its payload is read: magic, size,
    /// and that it says [`CHECK_MAC`] (a frame that says none would skip the MAC).
    pub fn header(head: &[u8; HEADER_LEN]) -> Result<Header, DecodeError> {
        Header::decode_with_check(head, CHECK_MAC)
    }

    /// Verifies the frame made of `head` (checked by [`Opener::header`]), `payload` and
    /// `trailer`, and advances the sequence. On error nothing advances (the link closes).
    pub fn open(
        &mut self,
        head: &[u8; HEADER_LEN],
        payload: &[u8],
        trailer: &[u8; TRAILER_LEN],
    ) -> Result<(), DecodeError> {
        let seq_bytes: &[u8] = &trailer[..8];
        if !verify(&self.key, &[seq_bytes, head, payload], &trailer[8..]) {
            return Err(DecodeError::BadCheck { scheme: CHECK_MAC });
        }
        let seq = u64::from_le_bytes([
            trailer[0], trailer[1], trailer[2], trailer[3], trailer[4], trailer[5], trailer[6], trailer[7],
        ]);
        if seq != self.next {
            return Err(DecodeError::OutOfSequence { expected: self.next, found: seq });
        }
        self.next += 1;
        Ok(())
    }

    /// Opens one whole sealed frame held in `bytes` (exactly one): the header checked, the
    /// lengths, the MAC and the sequence. What the TCP link does in steps, for tests and
    /// the fuzz target. Total: never panics, whatever the bytes.
    pub fn open_bytes(&mut self, bytes: &[u8]) -> Result<RawFrame, DecodeError> {
        let head: &[u8; HEADER_LEN] = bytes
            .get(..HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(DecodeError::Truncated { what: "frame header", need: HEADER_LEN, have: bytes.len() })?;
        let header = Opener::header(head)?;
        let need = header.frame_len() + TRAILER_LEN;
        if bytes.len() != need {
            return Err(DecodeError::Truncated { what: "sealed frame", need, have: bytes.len() });
        }
        let payload = &bytes[HEADER_LEN..header.frame_len()];
        let trailer: &[u8; TRAILER_LEN] = bytes[header.frame_len()..].try_into().map_err(|_| {
            DecodeError::Truncated { what: "frame trailer", need: TRAILER_LEN, have: bytes.len() - header.frame_len() }
        })?;
        self.open(head, payload, trailer)?;
        Ok(RawFrame { header, payload: payload.to_vec(), fds_found: 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linefs_proto::{encode, Control, Frame};

    fn frame(id: u64) -> Vec<u8> {
        encode(&Frame { id, msg: Control::Ping }).unwrap()
    }

    #[test]
    fn sealed_frames_open_in_order_and_carry_the_scheme() {
        let (mut s, mut o) = (Sealer::new([1; 32]), Opener::new([1; 32]));
        for id in 1..4 {
            let bytes = s.seal(&frame(id)).unwrap();
            assert_eq!(bytes[13], CHECK_MAC);
            assert_eq!(bytes.len(), frame(id).len() + TRAILER_LEN);
            assert_eq!(&bytes[bytes.len() - 24..bytes.len() - 16], &(id - 1).to_le_bytes());
            let raw = o.open_bytes(&bytes).unwrap();
            assert_eq!(raw.header.id, id);
        }
        assert_eq!(o.expected(), 3);
    }

    #[test]
    fn every_flipped_bit_is_refused() {
        let mut s = Sealer::new([9; 32]);
        let bytes = s.seal(&frame(7)).unwrap();
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let e = Opener::new([9; 32]).open_bytes(&b);
            assert!(e.is_err(), "bit {bit} flipped was accepted");
        }
    }

    #[test]
    fn replayed_reordered_and_wrong_key_frames_are_refused() {
        let mut s = Sealer::new([2; 32]);
        let (a, b, c) = (s.seal(&frame(1)).unwrap(), s.seal(&frame(2)).unwrap(), s.seal(&frame(3)).unwrap());
        let mut o = Opener::new([2; 32]);
        o.open_bytes(&a).unwrap();
        assert_eq!(o.open_bytes(&a), Err(DecodeError::OutOfSequence { expected: 1, found: 0 }));
        assert_eq!(o.open_bytes(&c), Err(DecodeError::OutOfSequence { expected: 1, found: 2 }));
        o.open_bytes(&b).unwrap();
        assert_eq!(Opener::new([3; 32]).open_bytes(&a), Err(DecodeError::BadCheck { scheme: CHECK_MAC }));
        // A frame that says "no check" is refused by the peer link's header check.
        assert!(matches!(
            Opener::new([2; 32]).open_bytes(&frame(1)),
            Err(DecodeError::FieldOutOfRange { field: "check", value: 0 })
        ));
    }

    #[test]
    fn seal_refuses_what_is_not_one_frame() {
        let mut s = Sealer::new([0; 32]);
        assert!(s.seal(&[0; 10]).is_err());
        let mut f = frame(1);
        f.push(0);
        assert!(s.seal(&f).is_err());
    }
}
