//! The replication wire format: the payloads of the frames nicfs's chain replication sends
//! over the peer link — log chunks down the chain, acknowledgements up it, probes and rebases.
//! Nothing else: what they mean and when they are sent is the chain core's
//! (`linefs-chain`) and nicfs's replication driver's.
//!
//! They travel in proto's frame (header, payload, the MAC trailer of [`crate::seal`]) with a
//! kind of the range `0x7F00..=0x7FFF`, which proto's kind table leaves to the peer link's own
//! messages:
//!
//! ```text
//! kind    message  owner
//! 0x7F01  Ping     nicfs daemon/peers/ping.rs (liveness, epoch, RTT)
//! 0x7F02  Pong     nicfs daemon/peers/ping.rs
//! 0x7F10  Chunk    here: log bytes of one stream, primary -> down the chain (bulk class)
//! 0x7F11  Ack      here: what a replica holds durable and has published (low-latency class)
//! 0x7F12  Probe    here: "where are you?" for a stream (answered by an Ack)
//! 0x7F13  Rebase   here: "your copy of the stream starts at this LSN"
//! ```
//!
//! A *stream* is one client log: `(primary, slot)`, the node whose client writes it and the
//! slot on that node. Positions are the primary's LSNs.
//!
//! Every payload (every integer little-endian) starts with the same 24 bytes, version 1:
//!
//! ```text
//! off len field
//!   0   1 version   REPL_VERSION (1); another is refused
//!   1   1 flags     Chunk: bit 0 urgent (an fsync waits for it), bit 1 compressed (the data
//!                   is an lz4 block), bit 2 trusted (the writer's creds are trusted);
//!                   other bits, and every bit of the other kinds, 0
//!   2   2 reserved  0
//!   4   4 primary   the stream's primary node
//!   8   4 slot      the stream's log slot on the primary
//!  12   4 reserved  0
//!  16   8 epoch     the sender's view epoch (stale epochs are dropped by the chain core)
//! ```
//!
//! Then, by kind:
//!
//! ```text
//! Chunk (0x7F10), 48 + 4*ngroups + data bytes:
//!  24   8 start     LSN of the chunk's first byte
//!  32   4 raw_len   bytes of log the chunk carries (after decompression), <= MAX_CHUNK
//!  36   4 uid       the writer's credentials (a replica checks the chunk's records against
//!  40   4 gid         them as the primary did)
//!  44   2 ngroups   supplementary groups, <= MAX_GROUPS (64)
//!  46   2 reserved  0
//!  48   4*ngroups   groups, u32 each
//!   …   rest        data: raw_len log bytes (flag bit 1 clear), or an lz4 block (lz4_flex's
//!                   block format, no size prefix) that decompresses to exactly raw_len bytes
//!                   and is shorter than raw_len (bit 1 set)
//! Ack (0x7F11), 40 bytes:
//!  24   8 durable   the replica holds the stream's log durable up to here
//!  32   8 published the replica has published the stream up to here
//! Probe (0x7F12), 24 bytes: nothing more.
//! Rebase (0x7F13), 32 bytes:
//!  24   8 lsn       the receiver's copy of the stream starts at this LSN
//! ```
//!
//! The decoder is total (never panics on any bytes, never allocates more than
//! [`MAX_CHUNK`] plus the payload's own length) and canonical: it refuses trailing bytes,
//! nonzero reserved bits, a compressed block that is not smaller than its data, so that a
//! decoded uncompressed frame re-encodes to exactly its bytes.
//!
//! [`MAX_CHUNK`] is chosen so that a chunk always fits in one frame *uncompressed*
//! (`linefs_proto::MAX_PAYLOAD` less the largest Chunk header): a sender never depends on
//! compression to send a chunk, and a receiver never decompresses more than that.

use linefs_bytes::{FixedOut, Reader, Truncated};
use linefs_proto::MAX_PAYLOAD;

/// A log chunk of one stream.
pub const KIND_CHUNK: u16 = 0x7F10;
/// A replica's progress on one stream.
pub const KIND_ACK: u16 = 0x7F11;
/// A request for a stream's Ack.
pub const KIND_PROBE: u16 = 0x7F12;
/// Where a stream's copy starts.
pub const KIND_REBASE: u16 = 0x7F13;
/// The payloads' layout version.
pub const REPL_VERSION: u8 = 1;
/// Most supplementary groups a Chunk's creds carry.
pub const MAX_GROUPS: usize = 64;
/// Bytes of the part every payload starts with.
pub const COMMON_LEN: usize = 24;
/// Bytes of a Chunk's fixed part (before its groups).
pub const CHUNK_FIXED_LEN: usize = 48;
/// Bytes of an Ack.
pub const ACK_LEN: usize = 40;
/// Bytes of a Probe.
pub const PROBE_LEN: usize = COMMON_LEN;
/// Bytes of a Rebase.
pub const REBASE_LEN: usize = 32;
/// Most log bytes one Chunk carries: what fits in one frame uncompressed with the largest
/// header, rounded down to a 4 KiB block (1 MiB less 4 KiB).
pub const MAX_CHUNK: usize = ((MAX_PAYLOAD - CHUNK_FIXED_LEN - 4 * MAX_GROUPS) / 4096) * 4096;
const _: () = assert!(MAX_CHUNK + CHUNK_FIXED_LEN + 4 * MAX_GROUPS <= MAX_PAYLOAD && MAX_CHUNK == (1 << 20) - 4096);

/// Flag bits of a Chunk.
pub mod flags {
    pub const URGENT: u8 = 1 << 0;
    pub const COMPRESSED: u8 = 1 << 1;
    pub const TRUSTED: u8 = 1 << 2;
    /// Every bit a Chunk may set.
    pub const CHUNK_ALL: u8 = URGENT | COMPRESSED | TRUSTED;
}

/// Byte offsets of the common part and the kinds' fixed parts (the tables in the module doc).
pub mod off {
    pub const VERSION: usize = 0;
    pub const FLAGS: usize = 1;
    pub const RESERVED0: usize = 2;
    pub const PRIMARY: usize = 4;
    pub const SLOT: usize = 8;
    pub const RESERVED1: usize = 12;
    pub const EPOCH: usize = 16;
    /// Chunk.
    pub const START: usize = 24;
    pub const RAW_LEN: usize = 32;
    pub const UID: usize = 36;
    pub const GID: usize = 40;
    pub const NGROUPS: usize = 44;
    pub const RESERVED2: usize = 46;
    pub const GROUPS: usize = 48;
    /// Ack.
    pub const DURABLE: usize = 24;
    pub const PUBLISHED: usize = 32;
    /// Rebase.
    pub const LSN: usize = 24;
    const _: () = assert!(
        RESERVED0 + 2 == PRIMARY
            && RESERVED1 + 4 == EPOCH
            && EPOCH + 8 == super::COMMON_LEN
            && RESERVED2 + 2 == GROUPS
            && GROUPS == super::CHUNK_FIXED_LEN
            && PUBLISHED + 8 == super::ACK_LEN
            && LSN + 8 == super::REBASE_LEN
    );
}

/// The credentials of the client that wrote a chunk's log (the primary's view of it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, at most [`MAX_GROUPS`].
    pub groups: Vec<u32>,
    /// The writer is trusted (its records are not checked against its creds).
    pub trusted: bool,
}

/// One replication message (one chain message variant plus the driver's fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplFrame {
    /// Log bytes `[start, start + data.len())` of stream `(primary, slot)`.
    Chunk {
        stream: (u32, u32),
        epoch: u64,
        start: u64,
        /// An fsync waits for it: send and persist it before background chunks.
        urgent: bool,
        creds: Creds,
        /// Log bytes, uncompressed here; lz4 on the wire when smaller.
        data: Vec<u8>,
    },
    /// A replica holds the stream durable up to `durable` and has published up to
    /// `published`.
    Ack { stream: (u32, u32), epoch: u64, durable: u64, published: u64 },
    /// Asks for the stream's Ack.
    Probe { stream: (u32, u32), epoch: u64 },
    /// The receiver's copy of the stream starts at `lsn`.
    Rebase { stream: (u32, u32), epoch: u64, lsn: u64 },
}

impl ReplFrame {
    /// The frame's kind.
    pub fn kind(&self) -> u16 {
        match self {
            ReplFrame::Chunk { .. } => KIND_CHUNK,
            ReplFrame::Ack { .. } => KIND_ACK,
            ReplFrame::Probe { .. } => KIND_PROBE,
            ReplFrame::Rebase { .. } => KIND_REBASE,
        }
    }

    /// The stream `(primary, slot)` the frame is about.
    pub fn stream(&self) -> (u32, u32) {
        match self {
            ReplFrame::Chunk { stream, .. }
            | ReplFrame::Ack { stream, .. }
            | ReplFrame::Probe { stream, .. }
            | ReplFrame::Rebase { stream, .. } => *stream,
        }
    }

    /// The sender's epoch.
    pub fn epoch(&self) -> u64 {
        match self {
            ReplFrame::Chunk { epoch, .. }
            | ReplFrame::Ack { epoch, .. }
            | ReplFrame::Probe { epoch, .. }
            | ReplFrame::Rebase { epoch, .. } => *epoch,
        }
    }
}

/// Whether `kind` is one of this module's.
pub fn is_repl_kind(kind: u16) -> bool {
    (KIND_CHUNK..=KIND_REBASE).contains(&kind)
}

/// What an encoding cost: payload bytes without compression, and as sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EncodeStats {
    /// Bytes of the payload had its data not been compressed.
    pub raw: u64,
    /// Bytes of the payload as encoded (`raw - wire` is what compression saved).
    pub wire: u64,
}

/// Why a payload was refused (decoding), or a frame cannot be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplError {
    #[error("kind {0:#06x} is not a replication message")]
    UnknownKind(u16),
    #[error("replication payload: {0}")]
    Truncated(#[from] Truncated),
    #[error("replication payload version {found}, this node speaks {REPL_VERSION}")]
    Version { found: u8 },
    #[error("replication payload flags {found:#04x} set bits this kind does not define")]
    Flags { found: u8 },
    #[error("reserved bytes of the replication payload ({0}) are not zero")]
    Reserved(&'static str),
    #[error("a chunk's creds carry {found} groups, at most {MAX_GROUPS} allowed")]
    TooManyGroups { found: usize },
    #[error("a chunk of {declared} log bytes is over the {MAX_CHUNK}-byte limit")]
    Oversized { declared: u64 },
    #[error("replication payload of kind {kind:#06x} is {found} bytes, expected {expected}")]
    Length { kind: u16, expected: usize, found: usize },
    #[error("a chunk's lz4 data does not decompress: {0}")]
    Lz4(String),
    #[error("a chunk's lz4 data decompresses to {found} bytes, it declares {declared}")]
    RawMismatch { declared: u64, found: u64 },
    #[error("a chunk's compressed data ({wire} bytes) is not smaller than its log bytes ({raw})")]
    NotSmaller { raw: u64, wire: u64 },
}

fn common(stream: (u32, u32), epoch: u64, fl: u8) -> FixedOut<COMMON_LEN> {
    let mut c = FixedOut::<COMMON_LEN>::new();
    c.u8::<{ off::VERSION }>(REPL_VERSION)
        .u8::<{ off::FLAGS }>(fl)
        .u32::<{ off::PRIMARY }>(stream.0)
        .u32::<{ off::SLOT }>(stream.1)
        .u64::<{ off::EPOCH }>(epoch);
    c
}

/// Encodes `f`: its kind, payload, and what it cost. A Chunk's data is lz4-compressed when
/// `compress` is set and that makes it shorter. Refused: a Chunk with more than
/// [`MAX_CHUNK`] bytes of data or more than [`MAX_GROUPS`] groups (the decoder would refuse
/// it).
pub fn encode(f: &ReplFrame, compress: bool) -> Result<(u16, Vec<u8>, EncodeStats), ReplError> {
    let kind = f.kind();
    let out = match f {
        ReplFrame::Chunk { stream, epoch, start, urgent, creds, data } => {
            if data.len() > MAX_CHUNK {
                return Err(ReplError::Oversized { declared: data.len() as u64 });
            }
            if creds.groups.len() > MAX_GROUPS {
                return Err(ReplError::TooManyGroups { found: creds.groups.len() });
            }
            let packed = if compress && !data.is_empty() {
                Some(lz4_flex::block::compress(data)).filter(|c| c.len() < data.len())
            } else {
                None
            };
            let mut fl = 0;
            if *urgent {
                fl |= flags::URGENT;
            }
            if creds.trusted {
                fl |= flags::TRUSTED;
            }
            if packed.is_some() {
                fl |= flags::COMPRESSED;
            }
            let head = CHUNK_FIXED_LEN + 4 * creds.groups.len();
            let body = packed.as_deref().unwrap_or(data);
            let mut out = Vec::with_capacity(head + body.len());
            let mut fixed = FixedOut::<CHUNK_FIXED_LEN>::new();
            fixed
                .array::<0, COMMON_LEN>(*common(*stream, *epoch, fl).bytes())
                .u64::<{ off::START }>(*start)
                .u32::<{ off::RAW_LEN }>(data.len() as u32)
                .u32::<{ off::UID }>(creds.uid)
                .u32::<{ off::GID }>(creds.gid)
                .u16::<{ off::NGROUPS }>(creds.groups.len() as u16);
            fixed.put(&mut out);
            for g in &creds.groups {
                linefs_bytes::put_u32(&mut out, *g);
            }
            out.extend_from_slice(body);
            let stats = EncodeStats { raw: (head + data.len()) as u64, wire: out.len() as u64 };
            return Ok((kind, out, stats));
        }
        ReplFrame::Ack { stream, epoch, durable, published } => {
            let mut p = FixedOut::<ACK_LEN>::new();
            p.array::<0, COMMON_LEN>(*common(*stream, *epoch, 0).bytes()).u64::<{ off::DURABLE }>(*durable).u64::<{
                off::PUBLISHED
            }>(
                *published
            );
            p.bytes().to_vec()
        }
        ReplFrame::Probe { stream, epoch } => common(*stream, *epoch, 0).bytes().to_vec(),
        ReplFrame::Rebase { stream, epoch, lsn } => {
            let mut p = FixedOut::<REBASE_LEN>::new();
            p.array::<0, COMMON_LEN>(*common(*stream, *epoch, 0).bytes()).u64::<{ off::LSN }>(*lsn);
            p.bytes().to_vec()
        }
    };
    let n = out.len() as u64;
    Ok((kind, out, EncodeStats { raw: n, wire: n }))
}

/// Decodes a verified frame's kind and payload. Total: any bytes give a frame or a reason,
/// never a panic; at most [`MAX_CHUNK`] bytes are allocated for a chunk's data.
pub fn decode(kind: u16, payload: &[u8]) -> Result<ReplFrame, ReplError> {
    let exact = |expected: usize| {
        if payload.len() == expected || (kind == KIND_CHUNK && payload.len() >= expected) {
            Ok(())
        } else {
            Err(ReplError::Length { kind, expected, found: payload.len() })
        }
    };
    if !is_repl_kind(kind) {
        return Err(ReplError::UnknownKind(kind));
    }
    let mut r = Reader::new(payload);
    let c = r.fixed::<COMMON_LEN>("common part")?;
    if c.u8::<{ off::VERSION }>() != REPL_VERSION {
        return Err(ReplError::Version { found: c.u8::<{ off::VERSION }>() });
    }
    if !c.is_zero::<{ off::RESERVED0 }, { off::PRIMARY }>() || !c.is_zero::<{ off::RESERVED1 }, { off::EPOCH }>() {
        return Err(ReplError::Reserved("common part"));
    }
    let fl = c.u8::<{ off::FLAGS }>();
    let allowed = if kind == KIND_CHUNK { flags::CHUNK_ALL } else { 0 };
    if fl & !allowed != 0 {
        return Err(ReplError::Flags { found: fl });
    }
    let stream = (c.u32::<{ off::PRIMARY }>(), c.u32::<{ off::SLOT }>());
    let epoch = c.u64::<{ off::EPOCH }>();
    match kind {
        KIND_PROBE => {
            exact(PROBE_LEN)?;
            Ok(ReplFrame::Probe { stream, epoch })
        }
        KIND_ACK => {
            exact(ACK_LEN)?;
            let durable = r.u64("durable")?;
            let published = r.u64("published")?;
            Ok(ReplFrame::Ack { stream, epoch, durable, published })
        }
        KIND_REBASE => {
            exact(REBASE_LEN)?;
            Ok(ReplFrame::Rebase { stream, epoch, lsn: r.u64("lsn")? })
        }
        _ => {
            exact(CHUNK_FIXED_LEN)?;
            decode_chunk(&mut r, stream, epoch, fl)
        }
    }
}

fn decode_chunk(r: &mut Reader<'_>, stream: (u32, u32), epoch: u64, fl: u8) -> Result<ReplFrame, ReplError> {
    let start = r.u64("start")?;
    let raw_len = r.u32("raw_len")?;
    let uid = r.u32("uid")?;
    let gid = r.u32("gid")?;
    let ngroups = r.u16("ngroups")?;
    if r.u16("reserved")? != 0 {
        return Err(ReplError::Reserved("chunk"));
    }
    if raw_len as usize > MAX_CHUNK {
        return Err(ReplError::Oversized { declared: u64::from(raw_len) });
    }
    let n = r.check_count("groups", u64::from(ngroups), 4, MAX_GROUPS).map_err(|e| match e {
        linefs_bytes::CountError::TooMany => ReplError::TooManyGroups { found: ngroups as usize },
        linefs_bytes::CountError::Short(t) => ReplError::Truncated(t),
    })?;
    let mut groups = Vec::with_capacity(n);
    for _ in 0..n {
        groups.push(r.u32("group")?);
    }
    let creds = Creds { uid, gid, groups, trusted: fl & flags::TRUSTED != 0 };
    let body = r.rest();
    let raw = raw_len as usize;
    let data = if fl & flags::COMPRESSED != 0 {
        if body.len() >= raw {
            return Err(ReplError::NotSmaller { raw: raw as u64, wire: body.len() as u64 });
        }
        let mut out = vec![0u8; raw];
        let got = lz4_flex::block::decompress_into(body, &mut out).map_err(|e| ReplError::Lz4(e.to_string()))?;
        if got != raw {
            return Err(ReplError::RawMismatch { declared: raw as u64, found: got as u64 });
        }
        out
    } else {
        if body.len() != raw {
            return Err(ReplError::RawMismatch { declared: raw as u64, found: body.len() as u64 });
        }
        body.to_vec()
    };
    Ok(ReplFrame::Chunk { stream, epoch, start, urgent: fl & flags::URGENT != 0, creds, data })
}
