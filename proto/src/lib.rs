//! linefs-proto: the wire protocol between a node's clients, its nicfs and its kworker.
//!
//! It depends on nothing of the file system: the messages speak of inodes, LSNs, offsets
//! and refusals (a closed set of codes, [`RemoteError`]) as plain values, so that libfs,
//! nicfs and kworker can all use it without pulling in each other.
//!
//! # Links and who sends what
//!
//! nicfs owns the node's PM and listens on a Unix socket. Three kinds of connection reach it
//! ([`Link`]); each starts with a [`Hello`] naming its channel.
//!
//! * **Control** (client ↔ nicfs, low latency: one request at a time is short). The client
//!   sends `Hello{channel: control, session: 0, role}`; nicfs answers [`Attached`]: a session
//!   id, a log slot, the slot's log geometry, a first range of inode numbers, and two file
//!   descriptors passed with the frame — the slot's log file read-write and the public file
//!   read-only (that is the trust boundary: a client can write only its own log).
//!   Client requests: `LeaseRequest` → `LeaseGranted` | Error; `LeaseRelease` → Ok;
//!   `Fsync` → `FsyncDone`; `AllocInodes` → `InodeRange`;
//!   `ReserveBlocks` → Ok | Error(NoSpace | QuotaExceeded); `ReleaseBlocks` → Ok;
//!   `StatFs` → `Space` (version 2); `Detach` → Ok; `Ping` → `Pong`. Client notices
//!   (version 3): `Opened` / `Closed` (the client's first open of an inode, its last close:
//!   nicfs keeps an orphan while any client holds it open). nicfs requests: `Revoke` →
//!   `RevokeDone`; `Ping` → `Pong`. nicfs notice: `Rejected` (an entry of the client's log
//!   was refused, or it was fenced; the client's calls fail until it attaches again).
//! * **Bulk** (client ↔ nicfs, throughput). `Hello{channel: bulk, session}` → Ok. Client
//!   notice `ChunkReady` (committed up to an LSN); nicfs notice `Published` (published and
//!   reclaimable LSNs, the inodes changed, so the client drops overlay segments, invalidates
//!   caches and reuses log space).
//! * **Kworker** (kworker ↔ nicfs). `Hello{channel: kworker, role: kworker}` → Ok. kworker
//!   notice `Heartbeat` (nicfs switches to isolated mode when they stop); nicfs request
//!   `CopyList` → `CopyDone` | `CopyFailed`.
//!
//! Any request may instead be answered by an Error ([`RemoteError`] code and message). Every request and
//! notice carries an id its sender chose (each side numbers its own, so nicfs's revokes
//! and publication notices have their own ids); every reply carries the id of the request
//! it answers. Whether a frame is a request, reply or notice, which links it may travel on
//! and who may send it are facts of its kind ([`Kind`]); the decoder refuses a kind on the
//! wrong link or from the wrong party.
//!
//! # Frames
//!
//! A frame is a 24-byte header (magic `LFSP`, version, kind, payload length, descriptor
//! count, integrity check scheme, id; [`frame`] has the byte table) and a payload laid out per kind
//! ([`codec::payloads`] has every table). Little-endian throughout; fixed parts first,
//! reserved bytes zero; texts and lists last, length-prefixed in the fixed part and bounded
//! (texts 4096 bytes, groups 65536, lists by the frame). A frame is at most
//! [`MAX_FRAME`] = 1 MiB: senders batch under it (a copy list holds at most
//! [`MAX_COPY_ENTRIES`] entries, a publication notice lists at most
//! [`MAX_PUBLISHED_INODES`] inodes or says "all").
//!
//! # Errors
//!
//! Decoding is total: any bytes give a frame or a precise [`DecodeError`] (truncated, bad
//! magic, unsupported version, oversized, unknown kind, wrong link or sender, descriptor
//! count, field out of range, reserved bytes set, list too long, bad UTF-8, trailing
//! bytes); it never panics and never allocates more than the bytes it was given. The size
//! is checked from the header before the payload is read. A server that cannot read a frame
//! answers an Error naming the frame's id and what was wrong, logs a line, and goes on if
//! the frame was consumed whole, else closes ([`transport::answer_bad_frame`]).
//! [`DecodeError::remote`] picks the refusal told to the peer, and [`RemoteError::errno`]
//! is the one place that decides every refusal's errno: nicfs answers with a variant of the
//! closed [`RemoteError`] (permission, space, fenced, shut down, …), the wire carries its
//! little-endian code (version 6), and a decoder refuses a code it does not know.
//!
//! # Versioning
//!
//! Every frame carries the version it is encoded in, and a side accepts only its own
//! ([`PROTOCOL_VERSION`]). The first 12 header bytes (magic, version, kind, payload length)
//! and the Error payload's errno, text length and message are frozen forever (its code,
//! version 6, sits in bytes that were reserved zero; code 0 is the version refusal, so that
//! refusal's bytes are the same in every version). A side that receives another version answers
//! with an Error frame in *its own* version (errno EPROTONOSUPPORT, a message naming both
//! versions) and closes the connection. The other side, of whatever version, can read that
//! frame (frozen parts) and reports [`DecodeError::VersionRefused`] with the version the
//! server speaks; a client that also speaks that version may reconnect in it. A new
//! version may add kinds and give meaning to reserved bytes; it must not change a frozen
//! part or reuse a kind number.
//!
//! # Field choices
//!
//! * Leases carry an id (`lease`) chosen by nicfs at grant time; release and revoke name it,
//!   so that a revoke crossing a release, or one arriving after a re-grant, is recognised as
//!   stale instead of dropping the wrong lease.
//! * A lease request carries the client's `log_tail` (entries from there on may rely on the
//!   lease) and release/revoke-done carry `covered_lsn` (the client's log holds every
//!   update made under the lease before it): together they bound, in the client's log, the
//!   entries nicfs validates against that lease, and tell nicfs how far to publish before
//!   the inode moves to another client.
//! * Revoke has `keep_read`: a reader arriving at a written file needs the writer's updates
//!   published, not the writer gone.
//! * Credentials (uid, gid, groups) are stated per operation, as FUSE gives them, because a
//!   mount daemon serves many users; nicfs holds a direct API user to its SO_PEERCRED
//!   credentials ([`transport::peer_credentials`]) whatever it states.
//! * `Published` has two LSNs: published (the client may drop overlay segments) and
//!   reclaim (published *and* replicated: the client may reuse log space), and either lists
//!   the changed inodes or says "all" when they do not fit in a frame.
//! * Copy entries name their source as a log slot index (kworker maps the slot files) or
//!   "zeros", since a newly allocated block is fully written, zero fill included, before a
//!   pointer to it is persisted. A copy list has its own `list_id`, apart from the frame
//!   id, so that nicfs can resend a list to a restarted kworker and match the answer; copies
//!   are idempotent. `CopyFailed` names the failed entry: those before it were done.
//! * `Heartbeat` reports the lists in flight, so that nicfs can tell a live but stuck
//!   kworker from a busy one.
//! * No checksums on this machine's links: the socket does not corrupt, and every field is
//!   checked instead. The header's `check` byte is where a link that leaves the machine
//!   names its MAC ([`CHECK_MAC`], version 7: the peer link of crate `linefs-peer`;
//!   [`frame`], [`transport`]).
//!
//! # Transport
//!
//! Frames travel over a [`FrameLink`] (send and receive a whole frame); descriptor passing
//! and peer credentials are the [`LocalLink`] capability of the links of one machine.
//! Implementations: the Unix stream socket (`UnixStream` itself, with the free functions
//! [`read_frame`], [`write_frame`], [`recv_frame`], [`send_frame`]) and the in-process
//! [`MemoryLink`] for simulation and tests; between nodes, crate `linefs-peer`'s `TcpLink`
//! (a [`FrameLink`] only, its frames MACed: [`CHECK_MAC`]). Typed sending and receiving
//! ([`FrameLinkExt`], [`LocalLinkExt`]) is written once over the trait.
// No unsafe here: descriptors and credentials go through rustix's safe wrappers.
#![forbid(unsafe_code)]

pub mod codec;
pub mod error;
pub mod frame;
pub mod kind;
pub mod messages;
pub mod transport;

pub use codec::{decode, decode_payload, encode, encode_into, Codec, EncodeError};
pub use error::{errno, DecodeError, RemoteError};
pub use frame::{
    Header, CHECK_MAC, CHECK_MAC_LEN, CHECK_NONE, HEADER_LEN, MAX_FDS, MAX_FRAME, MAX_PAYLOAD, PROTOCOL_VERSION,
};
pub use kind::{Class, Kind, Link, Party};
pub use messages::*;
pub use transport::memory::{Fault, MemoryLink};
pub use transport::{
    answer_bad_frame, peer_credentials, read_frame, recv_frame, send_bytes, send_frame, write_error, write_frame,
    FrameLink, FrameLinkExt, LocalLink, LocalLinkExt, PeerCred, RawFrame, ReadError, Received, SendError,
};
