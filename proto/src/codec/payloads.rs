//! Byte layouts of the payloads, one table per kind (all integers little-endian; offsets
//! from the start of the payload, i.e. frame offset 24). Each table's offsets are the
//! constants of the `*_off` module next to it, used by the encoder and the decoder alike.
//! Reserved bytes are written as zero and refused unless zero, so that a later version can
//! give them a meaning. Variable parts (texts, lists) come last; their lengths sit in the
//! fixed part and are bounded before anything is read or allocated.
//!
//! Ok, Detach, Ping, Pong, StatFs: empty payload.
//!
//! ```text
//! Hello                                  Error (bytes 0..6 and 8.. frozen across versions)
//!  0 1 channel  0 control 1 bulk 2 kworker  0 4 errno     the code's errno (RemoteError::errno)
//!  1 1 role     0 mount 1 direct 2 kworker  4 2 text_len  <= 4096
//!  2 6 reserved                             6 2 code      RemoteError (v6; reserved zero
//!  8 8 session  0 on control                              before: 0 = version refusal)
//!                                           8 … message   UTF-8, text_len bytes
//!
//! Attached (1 or 2 fds: log rw[, public ro]) Creds (embedded; 16 bytes + groups)
//!  0 8 session                              0 4 uid
//!  8 4 slot                                 4 4 gid
//! 12 1 public   0 or 1 (v5): 1 = the public 8 4 ngroups   <= 65536
//!               file's descriptor follows
//! 13 3 reserved
//! 16 8 ring_offset                         12 4 reserved
//! 24 8 ring_bytes                          16 … groups    ngroups × u32
//! 32 8 start_lsn
//! 40 8 chunk_bytes                         LeaseRequest
//! 48 8 ino_first                            0 8 inode
//! 56 8 ino_count                            8 8 log_tail
//!                                          16 1 mode      0 read 1 write
//! LeaseGranted                             17 7 reserved
//!  0 8 inode                               24 … creds
//!  8 8 lease
//! 16 1 mode                                Revoke
//! 17 7 reserved                             0 8 inode
//!                                           8 8 lease
//! LeaseRelease, RevokeDone                 16 1 keep_read 0 or 1
//!  0 8 inode                               17 7 reserved
//!  8 8 lease
//! 16 8 covered_lsn                         Fsync, FsyncDone, ChunkReady
//!                                           0 8 lsn
//! AllocInodes
//!  0 4 count    1..=2^20                   InodeRange
//!  4 4 reserved                             0 8 first
//!                                           8 8 count     first + count fits in u64
//! ReserveBlocks, ReleaseBlocks, Opened, Closed (version 3: inode)
//!  0 8 count                               Rejected
//!                                           0 8 lsn
//! Published                                 8 2 code      RemoteError (v6; was errno)
//!  0 8 published_lsn                       10 2 reserved
//!  8 8 reclaim_lsn  <= published_lsn       12 2 text_len  <= 4096
//!                                          14 2 reserved
//! 16 1 scope    0 listed 1 all             16 … reason    UTF-8
//! 17 3 reserved
//! 20 4 count    0 when scope is all        Heartbeat
//! 24 … inodes   count × u64                 0 4 lists_in_flight
//!                                           4 4 reserved
//! CopyList
//!  0 8 list_id                             CopyDone
//!  8 4 count    <= MAX_COPY_ENTRIES         0 8 list_id
//! 12 4 reserved
//! 16 … entries  count × 32 bytes:          CopyFailed
//!      0 4 source  slot index, or           0 8 list_id
//!                  0xffffffff = zeros       8 4 entry     index of the failed entry
//!      4 4 reserved                        12 4 errno     1..=4095
//!      8 8 src_offset  0 for zeros
//!     16 8 dst_offset  offset+len fit in u64
//!     24 8 len
//!
//! Space (version 2)
//!  0 8 free_blocks
//!  8 8 free_inodes
//! ```

use super::{EncodeError, Fixed, FixedOut, Reader, Reserved};
use crate::error::{errno, DecodeError, RemoteError};
use crate::kind::Kind;
use crate::messages::*;

pub mod hello_off {
    pub const CHANNEL: usize = 0;
    pub const ROLE: usize = 1;
    pub const RESERVED: usize = 2;
    pub const SESSION: usize = 8;
    pub const END: usize = 16;
}

pub mod error_off {
    pub const ERRNO: usize = 0;
    pub const TEXT_LEN: usize = 4;
    /// Version 6: the [`crate::RemoteError`] code (reserved, zero, before).
    pub const CODE: usize = 6;
    pub const END: usize = 8;
}

pub mod attached_off {
    pub const SESSION: usize = 0;
    pub const SLOT: usize = 8;
    pub const PUBLIC: usize = 12;
    pub const RESERVED: usize = 13;
    pub const RING_OFFSET: usize = 16;
    pub const RING_BYTES: usize = 24;
    pub const START_LSN: usize = 32;
    pub const CHUNK_BYTES: usize = 40;
    pub const INO_FIRST: usize = 48;
    pub const INO_COUNT: usize = 56;
    pub const END: usize = 64;
}

pub mod creds_off {
    pub const UID: usize = 0;
    pub const GID: usize = 4;
    pub const NGROUPS: usize = 8;
    pub const RESERVED: usize = 12;
    pub const END: usize = 16;
}

pub mod lease_request_off {
    pub const INODE: usize = 0;
    pub const LOG_TAIL: usize = 8;
    pub const MODE: usize = 16;
    pub const RESERVED: usize = 17;
    /// The credentials block starts here.
    pub const END: usize = 24;
}

pub mod lease_granted_off {
    pub const INODE: usize = 0;
    pub const LEASE: usize = 8;
    pub const MODE: usize = 16;
    pub const RESERVED: usize = 17;
    pub const END: usize = 24;
}

pub mod handback_off {
    pub const INODE: usize = 0;
    pub const LEASE: usize = 8;
    pub const COVERED_LSN: usize = 16;
    pub const END: usize = 24;
}

pub mod revoke_off {
    pub const INODE: usize = 0;
    pub const LEASE: usize = 8;
    pub const KEEP_READ: usize = 16;
    pub const RESERVED: usize = 17;
    pub const END: usize = 24;
}

/// Fsync, FsyncDone, ChunkReady, ReserveBlocks, ReleaseBlocks, Opened, Closed, CopyDone: one u64.
pub mod word_off {
    pub const VALUE: usize = 0;
    pub const END: usize = 8;
}

pub mod space_off {
    pub const FREE_BLOCKS: usize = 0;
    pub const FREE_INODES: usize = 8;
    pub const END: usize = 16;
}

pub mod alloc_inodes_off {
    pub const COUNT: usize = 0;
    pub const RESERVED: usize = 4;
    pub const END: usize = 8;
}

pub mod inode_range_off {
    pub const FIRST: usize = 0;
    pub const COUNT: usize = 8;
    pub const END: usize = 16;
}

pub mod rejected_off {
    pub const LSN: usize = 0;
    /// Version 6: the [`crate::RemoteError`] code (an errno, 4 bytes, before).
    pub const CODE: usize = 8;
    pub const RESERVED_CODE: usize = 10;
    pub const TEXT_LEN: usize = 12;
    pub const RESERVED: usize = 14;
    pub const END: usize = 16;
}

pub mod published_off {
    pub const PUBLISHED_LSN: usize = 0;
    pub const RECLAIM_LSN: usize = 8;
    pub const SCOPE: usize = 16;
    pub const RESERVED: usize = 17;
    pub const COUNT: usize = 20;
    pub const END: usize = 24;
}

pub mod heartbeat_off {
    pub const LISTS_IN_FLIGHT: usize = 0;
    pub const RESERVED: usize = 4;
    pub const END: usize = 8;
}

pub mod copy_list_off {
    pub const LIST_ID: usize = 0;
    pub const COUNT: usize = 8;
    pub const RESERVED: usize = 12;
    pub const END: usize = 16;
}

pub mod copy_entry_off {
    pub const SOURCE: usize = 0;
    pub const RESERVED: usize = 4;
    pub const SRC_OFFSET: usize = 8;
    pub const DST_OFFSET: usize = 16;
    pub const LEN: usize = 24;
    pub const END: usize = 32;
}

pub mod copy_failed_off {
    pub const LIST_ID: usize = 0;
    pub const ENTRY: usize = 8;
    pub const ERRNO: usize = 12;
    pub const END: usize = 16;
}

/// The source value meaning "zeros" in a copy entry.
pub const SOURCE_ZERO: u32 = u32::MAX;

const _: () = assert!(
    crate::messages::MAX_PUBLISHED_INODES * 8 + published_off::END <= crate::frame::MAX_PAYLOAD
        && crate::messages::MAX_COPY_ENTRIES * copy_entry_off::END + copy_list_off::END <= crate::frame::MAX_PAYLOAD
);

/// One payload layout.
pub(super) trait Payload: Sized {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError>;
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

fn get_errno(field: &'static str, v: u32) -> Result<i32, DecodeError> {
    match i32::try_from(v) {
        Ok(e) if (1..=errno::MAX).contains(&e) => Ok(e),
        _ => Err(DecodeError::FieldOutOfRange { field, value: v as u64 }),
    }
}

fn get_code(field: &'static str, v: u16) -> Result<RemoteError, DecodeError> {
    RemoteError::from_code(v).ok_or(DecodeError::FieldOutOfRange { field, value: u64::from(v) })
}

fn get_bool(field: &'static str, v: u8) -> Result<bool, DecodeError> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::FieldOutOfRange { field, value: v as u64 }),
    }
}

fn get_mode(v: u8) -> Result<LeaseMode, DecodeError> {
    match v {
        0 => Ok(LeaseMode::Read),
        1 => Ok(LeaseMode::Write),
        _ => Err(DecodeError::FieldOutOfRange { field: "lease mode", value: v as u64 }),
    }
}

/// `a + b` must fit in a u64 (ranges and copy extents).
fn no_overflow(field: &'static str, a: u64, b: u64) -> Result<(), DecodeError> {
    a.checked_add(b).map(|_| ()).ok_or(DecodeError::FieldOutOfRange { field, value: b })
}

fn text_len(field: &'static str, s: &str) -> Result<u16, EncodeError> {
    if s.len() > MAX_TEXT {
        return Err(EncodeError::TooLong { field, len: s.len(), max: MAX_TEXT });
    }
    // MAX_TEXT fits in a u16.
    Ok(s.len() as u16)
}

fn list_len(field: &'static str, n: usize, max: usize) -> Result<u32, EncodeError> {
    if n > max {
        return Err(EncodeError::TooLong { field, len: n, max });
    }
    u32::try_from(n).map_err(|_| EncodeError::TooLong { field, len: n, max })
}

impl Payload for Hello {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use hello_off as o;
        FixedOut::<{ o::END }>::new()
            .u8::<{ o::CHANNEL }>(self.channel as u8)
            .u8::<{ o::ROLE }>(self.role as u8)
            .u64::<{ o::SESSION }>(self.session)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use hello_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Hello")?;
        f.reserved::<{ o::RESERVED }, { o::SESSION }>("Hello")?;
        let channel = match f.u8::<{ o::CHANNEL }>() {
            0 => Channel::Control,
            1 => Channel::Bulk,
            2 => Channel::Kworker,
            v => return Err(DecodeError::FieldOutOfRange { field: "channel", value: v as u64 }),
        };
        let role = match f.u8::<{ o::ROLE }>() {
            0 => Role::MountDaemon,
            1 => Role::DirectApi,
            2 => Role::Kworker,
            v => return Err(DecodeError::FieldOutOfRange { field: "role", value: v as u64 }),
        };
        Ok(Hello { channel, role, session: f.u64::<{ o::SESSION }>() })
    }
}

impl Payload for ErrorReply {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use error_off as o;
        FixedOut::<{ o::END }>::new()
            .u32::<{ o::ERRNO }>(self.code.errno() as u32)
            .u16::<{ o::TEXT_LEN }>(text_len("error message", &self.message)?)
            .u16::<{ o::CODE }>(self.code.code())
            .put(out);
        out.extend_from_slice(self.message.as_bytes());
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use error_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Error")?;
        let errno = get_errno("errno", f.u32::<{ o::ERRNO }>())?;
        let code = get_code("error code", f.u16::<{ o::CODE }>())?;
        // The errno is the code's, never a second opinion (the encoding stays canonical).
        if errno != code.errno() {
            return Err(DecodeError::FieldOutOfRange { field: "errno", value: errno as u64 });
        }
        let message = r.text("error message", f.u16::<{ o::TEXT_LEN }>() as u64, MAX_TEXT)?;
        Ok(ErrorReply { code, message })
    }
}

/// Decodes the frozen part of an Error payload of another version — errno and message; the
/// code is this version's — whole (used for a peer's version refusal).
pub(crate) fn decode_frozen_error(payload: &[u8]) -> Result<(i32, String), DecodeError> {
    use error_off as o;
    let mut r = Reader::new(Kind::Error, payload);
    let f: Fixed<'_, { o::END }> = r.fixed("Error")?;
    let errno = get_errno("errno", f.u32::<{ o::ERRNO }>())?;
    let message = r.text("error message", f.u16::<{ o::TEXT_LEN }>() as u64, MAX_TEXT)?;
    r.finish()?;
    Ok((errno, message))
}

impl Payload for Attached {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use attached_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::SESSION }>(self.session)
            .u32::<{ o::SLOT }>(self.slot)
            .u8::<{ o::PUBLIC }>(self.public as u8)
            .u64::<{ o::RING_OFFSET }>(self.log.ring_offset)
            .u64::<{ o::RING_BYTES }>(self.log.ring_bytes)
            .u64::<{ o::START_LSN }>(self.log.start_lsn)
            .u64::<{ o::CHUNK_BYTES }>(self.log.chunk_bytes)
            .u64::<{ o::INO_FIRST }>(self.inodes.first)
            .u64::<{ o::INO_COUNT }>(self.inodes.count)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use attached_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Attached")?;
        f.reserved::<{ o::RESERVED }, { o::RING_OFFSET }>("Attached")?;
        let log = LogGeometry {
            ring_offset: f.u64::<{ o::RING_OFFSET }>(),
            ring_bytes: f.u64::<{ o::RING_BYTES }>(),
            start_lsn: f.u64::<{ o::START_LSN }>(),
            chunk_bytes: f.u64::<{ o::CHUNK_BYTES }>(),
        };
        no_overflow("ring_bytes", log.ring_offset, log.ring_bytes)?;
        let inodes = InodeRange { first: f.u64::<{ o::INO_FIRST }>(), count: f.u64::<{ o::INO_COUNT }>() };
        no_overflow("ino_count", inodes.first, inodes.count)?;
        let public = get_bool("public", f.u8::<{ o::PUBLIC }>())?;
        Ok(Attached { session: f.u64::<{ o::SESSION }>(), slot: f.u32::<{ o::SLOT }>(), public, log, inodes })
    }
}

impl Payload for Creds {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use creds_off as o;
        FixedOut::<{ o::END }>::new()
            .u32::<{ o::UID }>(self.uid)
            .u32::<{ o::GID }>(self.gid)
            .u32::<{ o::NGROUPS }>(list_len("groups", self.groups.len(), MAX_GROUPS)?)
            .put(out);
        for g in &self.groups {
            linefs_bytes::put_u32(out, *g);
        }
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use creds_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("credentials")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("credentials")?;
        let n = r.check_count("groups", f.u32::<{ o::NGROUPS }>() as u64, 4, MAX_GROUPS)?;
        let mut groups = Vec::with_capacity(n);
        for _ in 0..n {
            groups.push(r.u32("groups")?);
        }
        Ok(Creds { uid: f.u32::<{ o::UID }>(), gid: f.u32::<{ o::GID }>(), groups })
    }
}

impl Payload for LeaseRequest {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use lease_request_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::INODE }>(self.inode)
            .u64::<{ o::LOG_TAIL }>(self.log_tail)
            .u8::<{ o::MODE }>(self.mode as u8)
            .put(out);
        self.creds.put(out)
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use lease_request_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("LeaseRequest")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("LeaseRequest")?;
        Ok(LeaseRequest {
            inode: f.u64::<{ o::INODE }>(),
            mode: get_mode(f.u8::<{ o::MODE }>())?,
            log_tail: f.u64::<{ o::LOG_TAIL }>(),
            creds: Creds::get(r)?,
        })
    }
}

impl Payload for LeaseGranted {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use lease_granted_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::INODE }>(self.inode)
            .u64::<{ o::LEASE }>(self.lease)
            .u8::<{ o::MODE }>(self.mode as u8)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use lease_granted_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("LeaseGranted")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("LeaseGranted")?;
        Ok(LeaseGranted {
            inode: f.u64::<{ o::INODE }>(),
            mode: get_mode(f.u8::<{ o::MODE }>())?,
            lease: f.u64::<{ o::LEASE }>(),
        })
    }
}

impl Payload for LeaseHandback {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use handback_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::INODE }>(self.inode)
            .u64::<{ o::LEASE }>(self.lease)
            .u64::<{ o::COVERED_LSN }>(self.covered_lsn)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use handback_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("lease handback")?;
        Ok(LeaseHandback {
            inode: f.u64::<{ o::INODE }>(),
            lease: f.u64::<{ o::LEASE }>(),
            covered_lsn: f.u64::<{ o::COVERED_LSN }>(),
        })
    }
}

impl Payload for Revoke {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use revoke_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::INODE }>(self.inode)
            .u64::<{ o::LEASE }>(self.lease)
            .u8::<{ o::KEEP_READ }>(self.keep_read as u8)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use revoke_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Revoke")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("Revoke")?;
        Ok(Revoke {
            inode: f.u64::<{ o::INODE }>(),
            lease: f.u64::<{ o::LEASE }>(),
            keep_read: get_bool("keep_read", f.u8::<{ o::KEEP_READ }>())?,
        })
    }
}

pub(super) fn put_word(out: &mut Vec<u8>, v: u64) -> Result<(), EncodeError> {
    FixedOut::<{ word_off::END }>::new().u64::<{ word_off::VALUE }>(v).put(out);
    Ok(())
}

pub(super) fn get_word(r: &mut Reader<'_>, what: &'static str) -> Result<u64, DecodeError> {
    let f: Fixed<'_, { word_off::END }> = r.fixed(what)?;
    Ok(f.u64::<{ word_off::VALUE }>())
}

impl Payload for AllocInodes {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use alloc_inodes_off as o;
        FixedOut::<{ o::END }>::new().u32::<{ o::COUNT }>(self.count).put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use alloc_inodes_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("AllocInodes")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("AllocInodes")?;
        let count = f.u32::<{ o::COUNT }>();
        if count == 0 || count > MAX_INODE_BATCH {
            return Err(DecodeError::FieldOutOfRange { field: "inode count", value: count as u64 });
        }
        Ok(AllocInodes { count })
    }
}

impl Payload for InodeRange {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use inode_range_off as o;
        FixedOut::<{ o::END }>::new().u64::<{ o::FIRST }>(self.first).u64::<{ o::COUNT }>(self.count).put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use inode_range_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("InodeRange")?;
        let range = InodeRange { first: f.u64::<{ o::FIRST }>(), count: f.u64::<{ o::COUNT }>() };
        no_overflow("inode range", range.first, range.count)?;
        Ok(range)
    }
}

impl Payload for Space {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use space_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::FREE_BLOCKS }>(self.free_blocks)
            .u64::<{ o::FREE_INODES }>(self.free_inodes)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use space_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Space")?;
        Ok(Space { free_blocks: f.u64::<{ o::FREE_BLOCKS }>(), free_inodes: f.u64::<{ o::FREE_INODES }>() })
    }
}

impl Payload for Rejected {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use rejected_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::LSN }>(self.lsn)
            .u16::<{ o::CODE }>(self.code.code())
            .u16::<{ o::TEXT_LEN }>(text_len("rejection reason", &self.reason)?)
            .put(out);
        out.extend_from_slice(self.reason.as_bytes());
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use rejected_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Rejected")?;
        f.reserved::<{ o::RESERVED_CODE }, { o::TEXT_LEN }>("Rejected")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("Rejected")?;
        Ok(Rejected {
            lsn: f.u64::<{ o::LSN }>(),
            code: get_code("rejection code", f.u16::<{ o::CODE }>())?,
            reason: r.text("rejection reason", f.u16::<{ o::TEXT_LEN }>() as u64, MAX_TEXT)?,
        })
    }
}

impl Payload for Published {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use published_off as o;
        let (scope, inodes): (u8, &[u64]) = match &self.changed {
            InodeSet::Listed(v) => (0, v),
            InodeSet::All => (1, &[]),
        };
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::PUBLISHED_LSN }>(self.published_lsn)
            .u64::<{ o::RECLAIM_LSN }>(self.reclaim_lsn)
            .u8::<{ o::SCOPE }>(scope)
            .u32::<{ o::COUNT }>(list_len("published inodes", inodes.len(), MAX_PUBLISHED_INODES)?)
            .put(out);
        for i in inodes {
            linefs_bytes::put_u64(out, *i);
        }
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use published_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Published")?;
        f.reserved::<{ o::RESERVED }, { o::COUNT }>("Published")?;
        let published_lsn = f.u64::<{ o::PUBLISHED_LSN }>();
        let reclaim_lsn = f.u64::<{ o::RECLAIM_LSN }>();
        if reclaim_lsn > published_lsn {
            return Err(DecodeError::FieldOutOfRange { field: "reclaim_lsn", value: reclaim_lsn });
        }
        let count = f.u32::<{ o::COUNT }>() as u64;
        let changed = match f.u8::<{ o::SCOPE }>() {
            0 => {
                let n = r.check_count("published inodes", count, 8, MAX_PUBLISHED_INODES)?;
                let mut inodes = Vec::with_capacity(n);
                for _ in 0..n {
                    inodes.push(r.u64("published inodes")?);
                }
                InodeSet::Listed(inodes)
            }
            1 if count == 0 => InodeSet::All,
            1 => return Err(DecodeError::FieldOutOfRange { field: "published inode count", value: count }),
            v => return Err(DecodeError::FieldOutOfRange { field: "scope", value: v as u64 }),
        };
        Ok(Published { published_lsn, reclaim_lsn, changed })
    }
}

impl Payload for Heartbeat {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use heartbeat_off as o;
        FixedOut::<{ o::END }>::new().u32::<{ o::LISTS_IN_FLIGHT }>(self.lists_in_flight).put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use heartbeat_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("Heartbeat")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("Heartbeat")?;
        Ok(Heartbeat { lists_in_flight: f.u32::<{ o::LISTS_IN_FLIGHT }>() })
    }
}

impl Payload for CopyEntry {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use copy_entry_off as o;
        let source = match self.source {
            CopySource::Slot(SOURCE_ZERO) => {
                return Err(EncodeError::Reserved { field: "copy source slot", value: SOURCE_ZERO as u64 })
            }
            CopySource::Slot(s) => s,
            CopySource::Zero => SOURCE_ZERO,
        };
        FixedOut::<{ o::END }>::new()
            .u32::<{ o::SOURCE }>(source)
            .u64::<{ o::SRC_OFFSET }>(self.src_offset)
            .u64::<{ o::DST_OFFSET }>(self.dst_offset)
            .u64::<{ o::LEN }>(self.len)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use copy_entry_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("copy entry")?;
        f.reserved::<{ o::RESERVED }, { o::SRC_OFFSET }>("copy entry")?;
        let e = CopyEntry {
            source: match f.u32::<{ o::SOURCE }>() {
                SOURCE_ZERO => CopySource::Zero,
                s => CopySource::Slot(s),
            },
            src_offset: f.u64::<{ o::SRC_OFFSET }>(),
            dst_offset: f.u64::<{ o::DST_OFFSET }>(),
            len: f.u64::<{ o::LEN }>(),
        };
        if e.source == CopySource::Zero && e.src_offset != 0 {
            return Err(DecodeError::FieldOutOfRange { field: "src_offset of a zero fill", value: e.src_offset });
        }
        no_overflow("copy len", e.src_offset, e.len)?;
        no_overflow("copy len", e.dst_offset, e.len)?;
        Ok(e)
    }
}

impl Payload for CopyList {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use copy_list_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::LIST_ID }>(self.list_id)
            .u32::<{ o::COUNT }>(list_len("copy entries", self.entries.len(), MAX_COPY_ENTRIES)?)
            .put(out);
        self.entries.iter().try_for_each(|e| e.put(out))
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use copy_list_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("CopyList")?;
        f.reserved::<{ o::RESERVED }, { o::END }>("CopyList")?;
        let n = r.check_count("copy entries", f.u32::<{ o::COUNT }>() as u64, copy_entry_off::END, MAX_COPY_ENTRIES)?;
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            entries.push(CopyEntry::get(r)?);
        }
        Ok(CopyList { list_id: f.u64::<{ o::LIST_ID }>(), entries })
    }
}

impl Payload for CopyFailed {
    fn put(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        use copy_failed_off as o;
        FixedOut::<{ o::END }>::new()
            .u64::<{ o::LIST_ID }>(self.list_id)
            .u32::<{ o::ENTRY }>(self.entry)
            .u32::<{ o::ERRNO }>(self.errno as u32)
            .put(out);
        Ok(())
    }

    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        use copy_failed_off as o;
        let f: Fixed<'_, { o::END }> = r.fixed("CopyFailed")?;
        Ok(CopyFailed {
            list_id: f.u64::<{ o::LIST_ID }>(),
            entry: f.u32::<{ o::ENTRY }>(),
            errno: get_errno("errno", f.u32::<{ o::ERRNO }>())?,
        })
    }
}
