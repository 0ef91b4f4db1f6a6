//! The framed link: what carries frames between two parties, behind a trait, so that the
//! callers (libfs, nicfs, kworker) do not depend on what is under it.
//!
//! * [`FrameLink`] moves whole frames: [`send_raw`](FrameLink::send_raw) takes an encoded
//!   frame ([`crate::encode`]), [`recv_raw`](FrameLink::recv_raw) gives the next one as a
//!   [`RawFrame`] — its header read and checked (magic, size against
//!   [`MAX_FRAME`](crate::MAX_FRAME), check scheme) before any byte of the payload is read or
//!   allocated, its payload whole. Typed sending and receiving ([`FrameLinkExt`]: encode,
//!   decode against the link and the sender, the descriptor count) is written once over it.
//! * [`LocalLink`] is the capability of a link to a process of the same machine: file
//!   descriptors travel with a frame, and the kernel vouches for the peer's credentials.
//!   Attach needs it (the slot's log file is handed over as a descriptor), so the control
//!   link's server and client ask for a `LocalLink`; a link that leaves the machine has no
//!   such thing to offer and cannot be passed where it is needed.
//!
//! Implementations: a Unix stream socket (`unix`, implemented on `UnixStream` itself, with
//! the free functions [`read_frame`], [`write_frame`], … the callers have always used), and
//! an in-process pair over channels ([`memory::MemoryLink`]) for simulation and tests,
//! which keeps frame boundaries, passes descriptors, states the peer's credentials, and can
//! drop, delay or reorder frames on purpose.
//!
//! # The link that leaves the machine
//!
//! The cluster's TCP link (crate `linefs-peer`, `TcpLink`) implements [`FrameLink`] and
//! nothing else: its `send_raw` sets the header's `check` byte to
//! [`CHECK_MAC`](crate::CHECK_MAC) and appends a trailer (a per-direction sequence number
//! and a MAC of it, header and payload under the session key) after the payload; its
//! `recv_raw` checks the header with [`Header::decode_with_check`], reads and verifies the
//! trailer, and returns the frame without it (a frame that fails is a
//! [`ReadError::Decode`] that is not `in_step`, and the link closes: the stream cannot be
//! trusted past it). Its handshake (the cluster key) happens when the link is made, before
//! the first frame. Nothing above `recv_raw` and `send_raw` changes: [`FrameLinkExt`],
//! [`answer_bad_frame`] and every caller stay as they are.
//!
//! # Timeouts and errors
//!
//! `recv_raw` with a timeout bounds the whole frame, so a peer that stops half-way, or
//! trickles bytes, cannot hold the reader longer than that. [`ReadError::Decode`] says
//! whether the frame was consumed whole (`in_step`): after one that was, the link may go
//! on once the Error reply is sent ([`answer_bad_frame`]).

pub mod memory;
mod unix;

pub use unix::{peer_credentials, read_frame, recv_frame, send_bytes, send_frame, write_frame};

use crate::codec::{self, Codec, EncodeError};
use crate::error::{DecodeError, RemoteError};
use crate::frame::Header;
use crate::kind::{Kind, Party};
use crate::messages::{Control, ErrorReply, Frame, MAX_TEXT};
use rustix::fd::{BorrowedFd, OwnedFd};
use std::io;
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The peer closed the connection between frames.
    #[error("peer closed the connection")]
    Closed,
    #[error("no whole frame within {0:?}")]
    TimedOut(Duration),
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    /// The bytes are not an acceptable frame. `id` is the frame's id if its header could be
    /// read (else 0); `in_step` says whether the whole frame was consumed, so that the
    /// connection may go on after an Error reply.
    #[error("{error}")]
    Decode { error: DecodeError, id: u64, in_step: bool },
}

/// Why a frame could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error("{kind} is sent with {expected} file descriptors, {given} given")]
    FdCount { kind: Kind, expected: u8, given: usize },
    #[error("socket: {0}")]
    Io(#[from] io::Error),
}

/// A frame and the descriptors that came with it (as many as its kind carries, in order).
#[derive(Debug)]
pub struct Received<M> {
    pub frame: Frame<M>,
    pub fds: Vec<OwnedFd>,
}

/// The credentials the kernel recorded for the peer when the connection was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

/// One frame as a link delivers it: the header (checked by [`Header::decode`]) and the
/// payload, not yet decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawFrame {
    pub header: Header,
    pub payload: Vec<u8>,
    /// How many descriptors arrived with the frame (more than [`MAX_FDS`](crate::MAX_FDS)
    /// when the kernel had to cut them off). [`FrameLink::recv_raw`] closes them unread, so
    /// this is their count only: the receiver refuses a frame whose count disagrees with
    /// its header and its kind. Always 0 on a link that cannot pass descriptors.
    pub fds_found: usize,
}

/// A link that carries whole frames, in order, between two parties.
///
/// Implementations take `&self` and may be shared by threads: one reads while others
/// write, each side serialising its own writers (a frame is sent by one `send_raw`).
pub trait FrameLink {
    /// Sends one encoded frame (header and payload), whole.
    fn send_raw(&self, frame: &[u8]) -> io::Result<()>;

    /// Receives the next frame. Its header is read and checked before its payload;
    /// `timeout` bounds the whole frame (`None`: as long as the link itself lets it wait).
    /// Descriptors that came with it are closed (their count is in the [`RawFrame`]).
    fn recv_raw(&self, timeout: Option<Duration>) -> Result<RawFrame, ReadError>;
}

/// A link to a process of this machine: descriptors pass with frames, and the peer's
/// credentials are known. The Unix socket and the in-process link have it; a network link
/// does not.
pub trait LocalLink: FrameLink {
    /// Sends one encoded frame with `fds`, which arrive with that frame and no other.
    fn send_raw_with_fds(&self, frame: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()>;

    /// [`FrameLink::recv_raw`], keeping the descriptors that came with the frame
    /// (close-on-exec, at most [`MAX_FDS`](crate::MAX_FDS)).
    fn recv_raw_with_fds(&self, timeout: Option<Duration>) -> Result<(RawFrame, Vec<OwnedFd>), ReadError>;

    /// Who the peer is: pid, uid and gid as the kernel (or the in-process pair's maker)
    /// records them.
    fn peer_credentials(&self) -> io::Result<PeerCred>;
}

/// Typed frames over any [`FrameLink`]: encoding and decoding are written once, here.
pub trait FrameLinkExt: FrameLink {
    /// Sends a frame of a kind that carries no descriptors.
    fn send<M: Codec>(&self, frame: &Frame<M>) -> Result<(), SendError> {
        let expected = frame.msg.fds();
        if expected != 0 {
            return Err(SendError::FdCount { kind: frame.msg.kind(), expected, given: 0 });
        }
        self.send_raw(&codec::encode(frame)?)?;
        Ok(())
    }

    /// Receives one frame of link `M` sent by `from`, of a kind that carries no descriptors
    /// (a frame that comes with some is refused and its descriptors closed).
    fn recv<M: Codec>(&self, from: Party, timeout: Option<Duration>) -> Result<Frame<M>, ReadError> {
        let raw = self.recv_raw(timeout)?;
        let found = raw.fds_found;
        let frame = decode_raw::<M>(&raw, from)?;
        if found != 0 {
            let kind = frame.msg.kind();
            let error = DecodeError::FdCount { kind, expected: 0, found };
            return Err(ReadError::Decode { error, id: frame.id, in_step: true });
        }
        Ok(frame)
    }

    /// Sends an Error reply to request `id` (the Error kind is the same on every link).
    fn send_error(&self, id: u64, code: RemoteError, message: &str) -> Result<(), SendError> {
        self.send(&error_frame(id, code, message))
    }

    /// What a server does with a frame it could not read (see [`answer_bad_frame`]).
    fn answer_bad_frame(&self, peer: &str, err: &ReadError) -> bool {
        let ReadError::Decode { error, id, in_step } = err else {
            tracing::debug!(peer, %err, "connection ends");
            return false;
        };
        let version_mismatch =
            matches!(error, DecodeError::UnsupportedVersion { .. } | DecodeError::VersionRefused { .. });
        let go_on = *in_step && !version_mismatch;
        tracing::warn!(peer, id, errno = error.errno(), go_on, "refusing a frame: {error}");
        if let Err(e) = self.send_error(*id, error.remote(), &error.to_string()) {
            tracing::debug!(peer, "could not send the Error reply: {e}");
            return false;
        }
        go_on
    }
}

impl<L: FrameLink + ?Sized> FrameLinkExt for L {}

/// Typed frames with descriptors over any [`LocalLink`].
pub trait LocalLinkExt: LocalLink {
    /// Sends a frame with the descriptors its kind carries (exactly that many).
    fn send_with_fds<M: Codec>(&self, frame: &Frame<M>, fds: &[BorrowedFd<'_>]) -> Result<(), SendError> {
        let kind = frame.msg.kind();
        if fds.len() != frame.msg.fds() as usize {
            return Err(SendError::FdCount { kind, expected: frame.msg.fds(), given: fds.len() });
        }
        let bytes = codec::encode(frame)?;
        self.send_raw_with_fds(&bytes, fds)?;
        Ok(())
    }

    /// Receives one frame of link `M` sent by `from`, with the descriptors it carries.
    fn recv_with_fds<M: Codec>(&self, from: Party, timeout: Option<Duration>) -> Result<Received<M>, ReadError> {
        let (raw, fds) = self.recv_raw_with_fds(timeout)?;
        let frame = decode_raw::<M>(&raw, from)?;
        Ok(Received { frame, fds })
    }
}

impl<L: LocalLink + ?Sized> LocalLinkExt for L {}

/// Decodes a raw frame's payload (the header was checked by the link), and checks that the
/// descriptors that came are as many as the header declares. Errors name the frame's id
/// and are in step: the link delivered the frame whole.
fn decode_raw<M: Codec>(raw: &RawFrame, from: Party) -> Result<Frame<M>, ReadError> {
    let header = &raw.header;
    let in_step = |error| ReadError::Decode { error, id: header.id, in_step: true };
    let frame = codec::decode_payload::<M>(header, &raw.payload, from).map_err(in_step)?;
    if raw.fds_found != header.fd_count as usize {
        let kind = frame.msg.kind();
        return Err(in_step(DecodeError::FdCount { kind, expected: header.fd_count, found: raw.fds_found }));
    }
    Ok(frame)
}

/// The Error reply to request `id`, its message cut to [`MAX_TEXT`].
fn error_frame(id: u64, code: RemoteError, message: &str) -> Frame<Control> {
    let msg = Control::Error(ErrorReply { code, message: clip(message, MAX_TEXT).to_owned() });
    Frame { id, msg }
}

/// Writes an Error reply to request `id` (the Error kind is the same on every link).
pub fn write_error(stream: &UnixStream, id: u64, code: RemoteError, message: &str) -> Result<(), SendError> {
    stream.send_error(id, code, message)
}

/// What a server does with a frame it could not read: log it, answer with an Error that
/// names the frame's id (0 if its header was unreadable) and says what was wrong — in this
/// side's own protocol version, like every frame it writes, so a peer of another version
/// learns which version we speak — and say whether the connection may go on. It may not
/// after a version mismatch (the peer should reconnect speaking ours), nor when the frame
/// was not consumed whole (the stream is out of step). Nothing is sent when the connection
/// is closed, timed out or failed. [`FrameLinkExt::answer_bad_frame`] for any link.
pub fn answer_bad_frame(stream: &UnixStream, peer: &str, err: &ReadError) -> bool {
    FrameLinkExt::answer_bad_frame(stream, peer, err)
}

/// `s` cut to at most `max` bytes at a character boundary.
fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
