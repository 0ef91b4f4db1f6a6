//! Encoding and decoding of whole frames, over the per-kind layouts of [`payloads`] (and
//! `links`, which maps each link's enum onto them).
//!
//! Decoding is total: any byte string gives `Ok` or a precise [`DecodeError`], never a panic.
//! Every read goes through `Reader` (over linefs-bytes's, the codec pm's records use too),
//! which checks the bytes are there before it takes them; every list and text is bounded
//! twice before anything is allocated (by its own maximum, and by the bytes actually left
//! in the payload), so the decoder never allocates more than the input's length. Fixed
//! parts are read and built through linefs-bytes's `Fixed` and `FixedOut`, whose offsets
//! are checked against the part's size at compile time.

mod links;
pub mod payloads;

use crate::error::DecodeError;
use crate::frame::{Header, HEADER_LEN, MAX_FRAME, MAX_PAYLOAD};
use crate::kind::{Kind, Party};
use crate::messages::{Frame, LinkMessage};

/// A message that cannot be put on the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("{kind} frame of {len} bytes is over the {max}-byte limit", max = MAX_FRAME)]
    Oversized { kind: Kind, len: usize },
    #[error("{field}: {len} is over the limit of {max}")]
    TooLong { field: &'static str, len: usize, max: usize },
    /// A value the layout reserves for another meaning.
    #[error("{field} = {value} is reserved")]
    Reserved { field: &'static str, value: u64 },
}

/// A link's message enum, encodable and decodable. Implemented for
/// [`Control`](crate::Control), [`Bulk`](crate::Bulk) and [`Kworker`](crate::Kworker).
pub trait Codec: LinkMessage {
    /// Appends this message's payload (its layout in [`payloads`]).
    fn encode_payload(&self, out: &mut Vec<u8>) -> Result<(), EncodeError>;
    /// Decodes a payload of `kind`, which the caller has checked belongs to this link.
    fn decode_payload(kind: Kind, payload: &[u8]) -> Result<Self, DecodeError>;
}

/// Encodes a frame (header and payload).
pub fn encode<M: Codec>(frame: &Frame<M>) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::with_capacity(HEADER_LEN + 64);
    encode_into(frame, &mut out)?;
    Ok(out)
}

/// Appends an encoded frame to `out` (which is left as it was on error).
pub fn encode_into<M: Codec>(frame: &Frame<M>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let start = out.len();
    out.extend_from_slice(&[0u8; HEADER_LEN]);
    let kind = frame.msg.kind();
    if let Err(e) = frame.msg.encode_payload(out) {
        out.truncate(start);
        return Err(e);
    }
    let payload_len = out.len() - start - HEADER_LEN;
    if payload_len > MAX_PAYLOAD {
        out.truncate(start);
        return Err(EncodeError::Oversized { kind, len: payload_len + HEADER_LEN });
    }
    let mut header = Header::new(kind, payload_len, frame.id);
    header.fd_count = frame.msg.fds();
    out[start..start + HEADER_LEN].copy_from_slice(&header.encode());
    Ok(())
}

/// Decodes one whole frame (exactly: bytes after it are an error) of link `M`, sent by
/// `from`. A frame that carries file descriptors is checked against its header's count;
/// the transport checks that the descriptors really came.
pub fn decode<M: Codec>(bytes: &[u8], from: Party) -> Result<Frame<M>, DecodeError> {
    let (header, payload) = split_frame(bytes).map_err(|(e, _id)| e)?;
    decode_payload(&header, payload, from)
}

/// Splits the bytes of exactly one frame into its checked header and its payload (for a
/// link that keeps frame boundaries). On error, also the frame's id if the header could
/// be read, else 0.
pub fn split_frame(bytes: &[u8]) -> Result<(Header, &[u8]), (DecodeError, u64)> {
    let head: &[u8; HEADER_LEN] = bytes
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or((DecodeError::Truncated { what: "frame header", need: HEADER_LEN, have: bytes.len() }, 0))?;
    let header = Header::decode(head).map_err(|e| (e, 0))?;
    let rest = &bytes[HEADER_LEN..];
    let need = header.payload_len as usize;
    if rest.len() < need {
        return Err((DecodeError::Truncated { what: "frame payload", need, have: rest.len() }, header.id));
    }
    if rest.len() > need {
        let Some(kind) = Kind::from_u16(header.kind) else {
            return Err((DecodeError::UnknownKind { kind: header.kind }, header.id));
        };
        return Err((DecodeError::TrailingBytes { kind, extra: rest.len() - need }, header.id));
    }
    Ok((header, rest))
}

/// Decodes the payload that follows `header` (already read and size-checked): the version,
/// the kind against the link and the sender, the descriptor count, the id, then the
/// kind's layout.
pub fn decode_payload<M: Codec>(header: &Header, payload: &[u8], from: Party) -> Result<Frame<M>, DecodeError> {
    if let Err(e) = header.check_version() {
        return Err(version_refusal(header, payload).unwrap_or(e));
    }
    let kind = Kind::from_u16(header.kind).ok_or(DecodeError::UnknownKind { kind: header.kind })?;
    if !kind.on_link(M::LINK) {
        return Err(DecodeError::WrongLink { kind, link: M::LINK });
    }
    if !kind.sent_by(from) {
        return Err(DecodeError::WrongSender { kind, from });
    }
    if header.fd_count > kind.fds() {
        return Err(DecodeError::FdCount { kind, expected: kind.fds(), found: header.fd_count as usize });
    }
    if header.id == 0 && kind != Kind::Error {
        return Err(DecodeError::FieldOutOfRange { field: "id", value: 0 });
    }
    let msg = M::decode_payload(kind, payload)?;
    // The payload says how many descriptors came (an Attached without the public file's
    // carries one); the header must agree.
    if header.fd_count != msg.fds() {
        return Err(DecodeError::FdCount { kind, expected: msg.fds(), found: header.fd_count as usize });
    }
    Ok(Frame { id: header.id, msg })
}

/// A frame of another version that is an Error (whose layout is frozen): the peer's refusal.
fn version_refusal(header: &Header, payload: &[u8]) -> Option<DecodeError> {
    if header.kind != Kind::Error as u16 {
        return None;
    }
    let (errno, message) = payloads::decode_frozen_error(payload).ok()?;
    Some(DecodeError::VersionRefused { version: header.version, errno, message })
}

/// A cursor over a payload that checks every take: linefs-bytes's [`linefs_bytes::Reader`]
/// with this crate's errors, and the payload's kind for the trailing-bytes one.
pub(crate) struct Reader<'a> {
    inner: linefs_bytes::Reader<'a>,
    kind: Kind,
}

fn truncated(t: linefs_bytes::Truncated) -> DecodeError {
    DecodeError::Truncated { what: t.what, need: t.need, have: t.have }
}

impl<'a> Reader<'a> {
    pub(crate) fn new(kind: Kind, buf: &'a [u8]) -> Reader<'a> {
        Reader { inner: linefs_bytes::Reader::new(buf), kind }
    }

    /// Takes `n` bytes.
    pub(crate) fn bytes(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], DecodeError> {
        self.inner.bytes(what, n).map_err(truncated)
    }

    /// Takes a fixed part of `N` bytes.
    pub(crate) fn fixed<const N: usize>(&mut self, what: &'static str) -> Result<Fixed<'a, N>, DecodeError> {
        self.inner.fixed(what).map_err(truncated)
    }

    /// Takes a little-endian u32 (an element of a list).
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.inner.u32(what).map_err(truncated)
    }

    /// Takes a little-endian u64 (an element of a list).
    pub(crate) fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.inner.u64(what).map_err(truncated)
    }

    /// Checks that `count` elements of `size` bytes may be taken: at most `max`, and no more
    /// than the bytes left. Called before any allocation sized by `count`.
    pub(crate) fn check_count(
        &self,
        field: &'static str,
        count: u64,
        size: usize,
        max: usize,
    ) -> Result<usize, DecodeError> {
        self.inner.check_count(field, count, size, max).map_err(|e| match e {
            linefs_bytes::CountError::TooMany => DecodeError::ListTooLong { field, count, max: max as u64 },
            linefs_bytes::CountError::Short(t) => truncated(t),
        })
    }

    /// A UTF-8 text of `len` bytes (length already read from the fixed part).
    pub(crate) fn text(&mut self, field: &'static str, len: u64, max: usize) -> Result<String, DecodeError> {
        let n = self.check_count(field, len, 1, max)?;
        let b = self.bytes(field, n)?;
        std::str::from_utf8(b).map(str::to_owned).map_err(|_| DecodeError::BadUtf8 { field })
    }

    /// The payload must end here.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        match self.inner.remaining() {
            0 => Ok(()),
            extra => Err(DecodeError::TrailingBytes { kind: self.kind, extra }),
        }
    }
}

/// Fixed parts are linefs-bytes's: offsets checked against the part's size at compile
/// time.
pub(crate) use linefs_bytes::{Fixed, FixedOut};

/// Reserved bytes of a fixed part, refused unless zero.
pub(crate) trait Reserved {
    /// Bytes `O..E` must be zero.
    fn reserved<const O: usize, const E: usize>(&self, field: &'static str) -> Result<(), DecodeError>;
}

impl<const N: usize> Reserved for Fixed<'_, N> {
    fn reserved<const O: usize, const E: usize>(&self, field: &'static str) -> Result<(), DecodeError> {
        if self.is_zero::<O, E>() {
            Ok(())
        } else {
            Err(DecodeError::ReservedNonZero { field })
        }
    }
}
