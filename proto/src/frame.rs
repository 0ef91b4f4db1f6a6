//! The frame: a fixed 24-byte header, then the message's payload.
//!
//! Frame header, byte by byte (every integer little-endian):
//!
//! ```text
//! off len field
//!   0   4 magic        b"LFSP" (linefs socket protocol)
//!   4   2 version      protocol version of this frame's encoding (PROTOCOL_VERSION, now 7)
//!   6   2 kind         the message kind (crate::kind::Kind)
//!   8   4 payload_len  bytes that follow the header; HEADER_LEN + payload_len <= MAX_FRAME
//!  12   1 fd_count     file descriptors passed with this frame (SCM_RIGHTS); must equal
//!                      what the message carries (Attached: 2, or 1 when its `public`
//!                      byte is 0; 0 for every other kind)
//!  13   1 check        how the frame's integrity is checked: 0 none (the Unix and the
//!                      in-process links, whose bytes never leave the machine); 1 a MAC
//!                      trailer after the payload (the peer link over TCP, version 7);
//!                      a link accepts only its own scheme (see below)
//!  14   2 reserved     0
//!  16   8 id           a request or notice: the sender's own id for it (never 0);
//!                      a reply: the id of the request it answers (an Error reply may say 0
//!                      when the frame it answers had no readable id)
//!  24   … payload      the kind's layout (crate::codec::payloads)
//! ```
//!
//! Ids are per sender: each side numbers the requests and notices it originates (a client
//! its lease requests, nicfs its revokes and publication notices), and a reply carries the
//! id its peer chose. Whether a frame is a request, a reply or a notice follows from its
//! kind, so there is no direction flag to disagree with it.
//!
//! Frozen across versions: bytes 0..12 of the header (magic, version, kind, payload_len)
//! and the layout of the Error kind. That is what lets a peer of any version read the
//! refusal "I speak version N" (crate docs, *Versioning*).
//!
//! No checksum on the links of one machine: a Unix stream socket neither loses, reorders
//! nor corrupts bytes; what the decoder defends against is a hostile or buggy peer, and it
//! checks every field instead. A link that leaves the machine (the cluster's TCP link) needs
//! a MAC per frame: byte 13 (`check`) names the scheme, and its bytes follow the payload
//! (not counted in `payload_len`, so the payload's layout and its decoder are the same on
//! every link). Two schemes are defined: [`CHECK_NONE`] and, since version 7,
//! [`CHECK_MAC`] — a 24-byte trailer (the sender's sequence number for this direction and
//! a truncated HMAC-SHA256 under the session's key, over the sequence number, this header
//! and the payload), written and verified by crate `linefs-peer`, whose docs have its
//! bytes. Each link accepts exactly one scheme ([`Header::decode_with_check`]): a frame of
//! the Unix link that says [`CHECK_MAC`] is refused as before (its trailer would put the
//! stream out of step), and a frame of the peer link that says none is refused (it would
//! skip the MAC). Version 7 changes no byte of any other field or payload; it is a new
//! version because a version 6 peer would refuse byte 13 = 1.
//!
//! The offsets are the constants of [`header_off`], used by [`Header::encode`] and
//! [`Header::decode`] alike (through linefs-bytes's fixed parts, which check them at
//! compile time); `proto/tests/bytes.rs` pins them against literal bytes.

use crate::error::DecodeError;
use crate::kind::Kind;
use linefs_bytes::{Fixed, FixedOut};

/// `b"LFSP"`: the first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"LFSP";
/// The protocol version this build speaks (and the only one it accepts). 2: StatFs and
/// Space. 3: the Opened and Closed notices. 4: OpenCheck (kind 0x0107) is gone — a client
/// logs its opens for writing instead — so a version 3 client would send a request this
/// version cannot answer. 5: Attached's `public` byte — an untrusted client gets no
/// descriptor of the public file (a version 4 client would take its log file for it).
/// 6: typed refusals — the Error payload's bytes 6..8 and Rejected's errno carry a
/// [`crate::RemoteError`] code (a version 5 peer would read an unknown errno for it).
/// 7: the `check` byte's first scheme, [`CHECK_MAC`] (the peer link between nodes; a
/// version 6 side refuses the byte's value 1).
pub const PROTOCOL_VERSION: u16 = 7;
/// Bytes of the frame header.
pub const HEADER_LEN: usize = 24;
/// Hard maximum of a whole frame, header included (1 MiB). A header declaring more is
/// refused before any payload byte is read or any buffer allocated; senders batch under it
/// (copy lists, published-inode lists).
pub const MAX_FRAME: usize = 1 << 20;
/// Hard maximum of a payload.
pub const MAX_PAYLOAD: usize = MAX_FRAME - HEADER_LEN;
/// Most file descriptors a frame may carry (the receive buffer is sized for this many).
pub const MAX_FDS: usize = 4;
/// Header byte 13: the frame carries no integrity check (the links of one machine).
pub const CHECK_NONE: u8 = 0;
/// Header byte 13: a MAC trailer follows the payload (the peer link over TCP, version 7):
/// the sender's per-direction sequence number (u64) and HMAC-SHA256 truncated to 16 bytes
/// under the session key of that direction, over sequence number, header and payload.
/// Layout, keys and checks are crate `linefs-peer`'s (`seal`).
pub const CHECK_MAC: u8 = 1;
/// Bytes of the [`CHECK_MAC`] trailer: sequence number (8) and truncated MAC (16).
pub const CHECK_MAC_LEN: usize = 24;

/// Byte offsets of the header's fields (the table in the module doc).
pub mod header_off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 4;
    pub const KIND: usize = 6;
    pub const PAYLOAD_LEN: usize = 8;
    pub const FD_COUNT: usize = 12;
    pub const CHECK: usize = 13;
    pub const RESERVED: usize = 14;
    pub const ID: usize = 16;
    pub const END: usize = 24;
    const _: () = assert!(
        MAGIC + 4 == VERSION
            && VERSION + 2 == KIND
            && KIND + 2 == PAYLOAD_LEN
            && PAYLOAD_LEN + 4 == FD_COUNT
            && FD_COUNT + 1 == CHECK
            && CHECK + 1 == RESERVED
            && RESERVED + 2 == ID
            && ID + 8 == END
            && END == super::HEADER_LEN
    );
}

/// A decoded frame header. `kind` is kept raw: [`Header::decode`] checks only what must
/// hold before the payload may be read (magic, version, size); the kind is checked by the
/// payload decoder, so that a frame of an unknown kind can still be skipped whole and the
/// stream stay in step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub version: u16,
    pub kind: u16,
    pub payload_len: u32,
    pub fd_count: u8,
    /// The integrity scheme ([`CHECK_NONE`]: none; [`CHECK_MAC`]: a MAC trailer).
    pub check: u8,
    pub id: u64,
}

impl Header {
    /// A header of this build's version for a message of `kind`.
    pub fn new(kind: Kind, payload_len: usize, id: u64) -> Header {
        Header {
            version: PROTOCOL_VERSION,
            kind: kind as u16,
            // Encoders never build a payload over MAX_PAYLOAD (asserted in codec).
            payload_len: u32::try_from(payload_len).unwrap_or(u32::MAX),
            fd_count: kind.fds(),
            check: CHECK_NONE,
            id,
        }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        use header_off as o;
        *FixedOut::<HEADER_LEN>::new()
            .array::<{ o::MAGIC }, 4>(MAGIC)
            .u16::<{ o::VERSION }>(self.version)
            .u16::<{ o::KIND }>(self.kind)
            .u32::<{ o::PAYLOAD_LEN }>(self.payload_len)
            .u8::<{ o::FD_COUNT }>(self.fd_count)
            .u8::<{ o::CHECK }>(self.check)
            // RESERVED stays zero.
            .u64::<{ o::ID }>(self.id)
            .bytes()
    }

    /// Decodes and checks a header of a link without a check (the links of one machine):
    /// [`Header::decode_with_check`] with [`CHECK_NONE`].
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Header, DecodeError> {
        Header::decode_with_check(b, CHECK_NONE)
    }

    /// Decodes and checks a header: magic, payload length against [`MAX_FRAME`], the check
    /// scheme (exactly `scheme`, the one the link that read it uses), reserved bytes. A
    /// version other than ours is returned, not refused, because the caller may
    /// still read the payload of a version refusal (the Error kind's layout is frozen);
    /// [`Header::check_version`] refuses it.
    pub fn decode_with_check(b: &[u8; HEADER_LEN], scheme: u8) -> Result<Header, DecodeError> {
        use header_off as o;
        let f = Fixed::new(b);
        let magic = f.array::<{ o::MAGIC }, 4>();
        if magic != MAGIC {
            return Err(DecodeError::BadMagic { found: magic });
        }
        let payload_len = f.u32::<{ o::PAYLOAD_LEN }>();
        if payload_len as usize > MAX_PAYLOAD {
            return Err(DecodeError::Oversized { declared: payload_len as u64 + HEADER_LEN as u64, max: MAX_FRAME });
        }
        let header = Header {
            version: f.u16::<{ o::VERSION }>(),
            kind: f.u16::<{ o::KIND }>(),
            payload_len,
            fd_count: f.u8::<{ o::FD_COUNT }>(),
            check: f.u8::<{ o::CHECK }>(),
            id: f.u64::<{ o::ID }>(),
        };
        let version = header.version;
        // Fields after the frozen prefix mean what they say only in our version.
        if version == PROTOCOL_VERSION {
            if !f.is_zero::<{ o::RESERVED }, { o::ID }>() {
                return Err(DecodeError::ReservedNonZero { field: "frame header" });
            }
            if header.check != scheme {
                return Err(DecodeError::FieldOutOfRange { field: "check", value: header.check as u64 });
            }
            if header.fd_count as usize > MAX_FDS {
                return Err(DecodeError::FieldOutOfRange { field: "fd_count", value: header.fd_count as u64 });
            }
        }
        Ok(header)
    }

    /// Refuses a header of another protocol version.
    pub fn check_version(&self) -> Result<(), DecodeError> {
        if self.version == PROTOCOL_VERSION {
            Ok(())
        } else {
            Err(DecodeError::UnsupportedVersion { version: self.version, supported: PROTOCOL_VERSION })
        }
    }

    /// Bytes of the whole frame.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.payload_len as usize
    }
}
