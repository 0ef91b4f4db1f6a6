//! The messages, as Rust types: one payload struct per kind (some shared by two kinds of
//! the same shape and meaning), and one enum per link listing what travels on it in either
//! direction. The byte layouts are in [`crate::codec::payloads`]; why the fields are what
//! they are is in the crate docs (*Field choices*).

use crate::error::RemoteError;
use crate::kind::{Kind, Link};

/// A message with the id its frame carries (see [`crate::frame`] for what the id means per
/// class of kind).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<M> {
    pub id: u64,
    pub msg: M,
}

/// Which connection a [`Hello`] opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Control = 0,
    Bulk = 1,
    Kworker = 2,
}

/// What the connecting process says it is. nicfs trusts it only as far as the peer's
/// credentials allow: a mount daemon must be root; a direct API user is held to its own
/// uid/gid whatever credentials it states per operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    MountDaemon = 0,
    DirectApi = 1,
    Kworker = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseMode {
    Read = 0,
    Write = 1,
}

/// Opens a connection. The protocol version is the frame header's (every frame carries and
/// is checked against it, not only this one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub channel: Channel,
    pub role: Role,
    /// 0 on the control channel (nicfs opens a session); on the bulk channel, the session
    /// that the same process's control channel was given.
    pub session: u64,
}

/// Failure: of the request named by the frame's id, or of a frame that did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// Why (the wire carries its code and, in the frozen errno field, its errno).
    pub code: RemoteError,
    /// For logs and messages, at most [`MAX_TEXT`] bytes.
    pub message: String,
}

impl ErrorReply {
    pub fn new(code: RemoteError, message: impl Into<String>) -> ErrorReply {
        ErrorReply { code, message: message.into() }
    }

    /// The errno the refusal stands for ([`RemoteError::errno`]).
    pub fn errno(&self) -> i32 {
        self.code.errno()
    }
}

/// Most bytes of any text field.
pub const MAX_TEXT: usize = 4096;
/// Most supplementary groups in credentials (Linux's NGROUPS_MAX).
pub const MAX_GROUPS: usize = 65536;

/// The geometry of the slot's log file (the first descriptor passed with [`Attached`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogGeometry {
    /// Byte offset of the ring in the log file (after the slot header).
    pub ring_offset: u64,
    pub ring_bytes: u64,
    /// The LSN the client appends at: the end of the slot's log, all of it published.
    pub start_lsn: u64,
    /// The client sends ChunkReady each time this many more bytes are committed.
    pub chunk_bytes: u64,
}

/// Inode numbers `first .. first + count`, handed to one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeRange {
    pub first: u64,
    pub count: u64,
}

/// The reply to a control Hello. One or two descriptors travel with it: `[0]` the slot's
/// log file, read-write; `[1]`, only when `public` is set, the node's public file,
/// read-only. Reading the public file is reading every file of the node, so nicfs hands it
/// only to a trusted client (root, or a member of the operator's trusted group; version 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attached {
    pub session: u64,
    pub slot: u32,
    /// Whether the public file's descriptor follows the log file's.
    pub public: bool,
    pub log: LogGeometry,
    pub inodes: InodeRange,
}

/// Credentials of the caller of one operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creds {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, at most [`MAX_GROUPS`].
    pub groups: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRequest {
    pub inode: u64,
    pub mode: LeaseMode,
    /// The end of the client's log when it asks: entries from here on may rely on the lease.
    pub log_tail: u64,
    pub creds: Creds,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGranted {
    pub inode: u64,
    pub mode: LeaseMode,
    /// nicfs's id for this grant; release and revoke name it, so a stale one is recognised.
    pub lease: u64,
}

/// A lease handed back: by LeaseRelease (client's initiative) or RevokeDone (nicfs's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseHandback {
    pub inode: u64,
    pub lease: u64,
    /// The client's log holds every update of the inode under this lease before this LSN;
    /// nicfs publishes up to it before granting the inode to anyone else.
    pub covered_lsn: u64,
}

/// nicfs takes a lease back (another client wants the inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revoke {
    pub inode: u64,
    pub lease: u64,
    /// The holder of a write lease may keep reading (downgrade) rather than lose the inode.
    pub keep_read: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fsync {
    /// Make the log durable on every replica up to here.
    pub lsn: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsyncDone {
    /// Replicated (and the leases granted so far recorded) up to here, at least the asked LSN.
    pub durable_lsn: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AllocInodes {
    /// 1..=[`MAX_INODE_BATCH`].
    pub count: u32,
}

/// Most inode numbers one AllocInodes may ask for.
pub const MAX_INODE_BATCH: u32 = 1 << 20;

/// Opened and Closed: an inode the client holds open, or no longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InodeRef {
    pub inode: u64,
}

/// ReserveBlocks and ReleaseBlocks: data blocks of the public area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    pub count: u64,
}

/// The answer to StatFs: the node's free data blocks and inode numbers, node-wide (blocks
/// reserved by clients for entries not yet published count as used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub free_blocks: u64,
    pub free_inodes: u64,
}

/// nicfs refused an entry of the client's log, or fenced the client because it left a
/// revoke unanswered past the lease timeout (`code` Fenced; nicfs then hangs up); the
/// client's calls fail until it attaches again (its log from `lsn` on will not be
/// published).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub lsn: u64,
    pub code: RemoteError,
    pub reason: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkReady {
    /// The client's log is committed (persisted, fenced) up to here.
    pub committed_lsn: u64,
}

/// The inodes a publication changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InodeSet {
    /// Exactly these (at most what fits a frame, [`MAX_PUBLISHED_INODES`]).
    Listed(Vec<u64>),
    /// Too many to list: the client drops every overlay segment and invalidates every inode.
    All,
}

/// Most inodes one Published lists (what fits in a frame).
pub const MAX_PUBLISHED_INODES: usize = (crate::frame::MAX_PAYLOAD - 24) / 8;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The public area holds the client's log up to here.
    pub published_lsn: u64,
    /// The log before this is published *and* replicated: the client may reuse its space.
    pub reclaim_lsn: u64,
    pub changed: InodeSet,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat {
    /// Copy lists received and not yet answered.
    pub lists_in_flight: u32,
}

/// Where a copy reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopySource {
    /// The log file of this slot (any index but `u32::MAX`, which is how zeros are encoded).
    Slot(u32),
    /// Zeros (a newly allocated block's fill); the entry's `src_offset` is 0.
    Zero,
}

/// Copy `len` bytes from `source` at `src_offset` to the public file at `dst_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyEntry {
    pub source: CopySource,
    pub src_offset: u64,
    pub dst_offset: u64,
    pub len: u64,
}

/// Ordered copies that kworker executes in order, persists, then answers CopyDone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyList {
    pub list_id: u64,
    pub entries: Vec<CopyEntry>,
}

/// Most entries of one copy list (what fits in a frame); nicfs batches longer lists.
pub const MAX_COPY_ENTRIES: usize = (crate::frame::MAX_PAYLOAD - 16) / 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyDone {
    pub list_id: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFailed {
    pub list_id: u64,
    /// Index of the entry that failed; the entries before it were done and persisted.
    pub entry: u32,
    pub errno: i32,
}

/// Client ↔ nicfs, control channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    Hello(Hello),
    Attached(Attached),
    LeaseRequest(LeaseRequest),
    LeaseGranted(LeaseGranted),
    LeaseRelease(LeaseHandback),
    Revoke(Revoke),
    RevokeDone(LeaseHandback),
    Fsync(Fsync),
    FsyncDone(FsyncDone),
    AllocInodes(AllocInodes),
    InodeRange(InodeRange),
    ReserveBlocks(Blocks),
    ReleaseBlocks(Blocks),
    Rejected(Rejected),
    Detach,
    Ping,
    Pong,
    StatFs,
    Space(Space),
    Opened(InodeRef),
    Closed(InodeRef),
    Ok,
    Error(ErrorReply),
}

/// Client ↔ nicfs, bulk channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bulk {
    Hello(Hello),
    ChunkReady(ChunkReady),
    Published(Published),
    Ok,
    Error(ErrorReply),
}

/// kworker ↔ nicfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kworker {
    Hello(Hello),
    Heartbeat(Heartbeat),
    CopyList(CopyList),
    CopyDone(CopyDone),
    CopyFailed(CopyFailed),
    Ok,
    Error(ErrorReply),
}

/// What the codec needs of a link's enum: which link it is and each message's kind.
pub trait LinkMessage: Sized {
    const LINK: Link;
    fn kind(&self) -> Kind;
    /// The file descriptors that travel with this message: its kind's count, except for an
    /// `Attached` without the public file's (one fewer).
    fn fds(&self) -> u8 {
        self.kind().fds()
    }
}

impl LinkMessage for Control {
    const LINK: Link = Link::Control;
    fn kind(&self) -> Kind {
        match self {
            Control::Hello(_) => Kind::Hello,
            Control::Attached(_) => Kind::Attached,
            Control::LeaseRequest(_) => Kind::LeaseRequest,
            Control::LeaseGranted(_) => Kind::LeaseGranted,
            Control::LeaseRelease(_) => Kind::LeaseRelease,
            Control::Revoke(_) => Kind::Revoke,
            Control::RevokeDone(_) => Kind::RevokeDone,
            Control::Fsync(_) => Kind::Fsync,
            Control::FsyncDone(_) => Kind::FsyncDone,
            Control::AllocInodes(_) => Kind::AllocInodes,
            Control::InodeRange(_) => Kind::InodeRange,
            Control::ReserveBlocks(_) => Kind::ReserveBlocks,
            Control::ReleaseBlocks(_) => Kind::ReleaseBlocks,
            Control::Rejected(_) => Kind::Rejected,
            Control::Detach => Kind::Detach,
            Control::Ping => Kind::Ping,
            Control::Pong => Kind::Pong,
            Control::StatFs => Kind::StatFs,
            Control::Opened(_) => Kind::Opened,
            Control::Closed(_) => Kind::Closed,
            Control::Space(_) => Kind::Space,
            Control::Ok => Kind::Ok,
            Control::Error(_) => Kind::Error,
        }
    }

    fn fds(&self) -> u8 {
        match self {
            Control::Attached(a) if !a.public => self.kind().fds() - 1,
            _ => self.kind().fds(),
        }
    }
}

impl LinkMessage for Bulk {
    const LINK: Link = Link::Bulk;
    fn kind(&self) -> Kind {
        match self {
            Bulk::Hello(_) => Kind::Hello,
            Bulk::ChunkReady(_) => Kind::ChunkReady,
            Bulk::Published(_) => Kind::Published,
            Bulk::Ok => Kind::Ok,
            Bulk::Error(_) => Kind::Error,
        }
    }
}

impl LinkMessage for Kworker {
    const LINK: Link = Link::Kworker;
    fn kind(&self) -> Kind {
        match self {
            Kworker::Hello(_) => Kind::Hello,
            Kworker::Heartbeat(_) => Kind::Heartbeat,
            Kworker::CopyList(_) => Kind::CopyList,
            Kworker::CopyDone(_) => Kind::CopyDone,
            Kworker::CopyFailed(_) => Kind::CopyFailed,
            Kworker::Ok => Kind::Ok,
            Kworker::Error(_) => Kind::Error,
        }
    }
}
