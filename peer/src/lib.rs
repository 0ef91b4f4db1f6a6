//! linefs-peer: the link between the nicfs daemons of a cluster — the cluster key, the
//! handshake that proves it, and proto's [`FrameLink`](linefs_proto::FrameLink) over TCP
//! with every frame MACed and numbered.
//!
//! * [`key`]: the cluster key, 32 random bytes in a 0600 file (`linefs up` makes it).
//! * [`handshake`]: mutual HMAC-SHA256 challenge–response, bound to both nonces, both
//!   node ids, the connection class and the protocol version; derives the session's two
//!   frame keys. A pure state machine, byte layout in its docs.
//! * [`seal`]: the frame trailer of header byte 13's scheme `CHECK_MAC` (proto version 7):
//!   a per-direction sequence number and a truncated HMAC over it, header and payload.
//! * [`repl`]: the replication frames' payloads (Chunk, Ack, Probe, Rebase; kinds
//!   `0x7F10..=0x7F13`), versioned, byte tables in its docs; a Chunk's log bytes lz4-compressed
//!   on the wire when that makes them smaller.
//! * [`tcp`]: [`TcpLink`] (dial, accept, send, receive, deadlines, `TCP_NODELAY` on the
//!   low-latency class) and [`PeerListener`].
//!
//! A crate of its own rather than a module of proto: proto is linked into every client
//! (libfs, the mount daemon) and kworker, none of which speaks to peers; the crypto crates
//! and the key file stay out of them. proto keeps what every link shares — the frame, the
//! `check` byte's schemes, the [`FrameLink`](linefs_proto::FrameLink) trait — and this crate
//! implements the trait, as proto's own Unix and in-process links do, so nothing above
//! `send_raw`/`recv_raw` knows which link it holds. Nothing here knows of chains or
//! epochs: a later layer (nicfs's replication) says what travels.
#![forbid(unsafe_code)]

pub mod handshake;
pub mod key;
pub mod lease;
mod mac;
pub mod repl;
pub mod seal;
pub mod tcp;

pub use handshake::{Class, HandshakeError, NodeId, ReplayGuard};
pub use key::{ClusterKey, KeyError, KEY_LEN};
pub use tcp::{LinkConfig, LinkError, PeerListener, TcpLink};

/// Fills `buf` from the operating system's random source.
pub(crate) fn random_bytes(buf: &mut [u8]) -> Result<(), String> {
    getrandom::fill(buf).map_err(|e| e.to_string())
}
