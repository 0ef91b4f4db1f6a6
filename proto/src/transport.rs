//! Frames over a blocking Unix stream socket: writing and reading with the size bound and
//! an optional deadline, descriptors passed with a frame (SCM_RIGHTS), the peer's
//! credentials (SO_PEERCRED), and what a server answers to a frame it cannot read.
//!
//! Descriptors ride on the frame's first bytes: the sender passes them with the `sendmsg`
//! that starts the frame, so Linux attaches them to the frame's first byte, and the
//! receiver takes the header with `recvmsg`. This reader never reads past the end of a
//! frame, so every frame's first receive starts exactly there and the descriptors arrive
//! with the header of their own frame, never with the previous one (the attach test sends
//! two frames back to back to hold this). Descriptors a peer attaches anywhere else reach
//! a read without a control buffer and are closed by the kernel. Every received descriptor
//! is close-on-exec, and more than [`MAX_FDS`] in one frame is an error.
//!
//! A read first takes the 24-byte header into a stack buffer and checks it (magic, size
//! against [`MAX_FRAME`](crate::MAX_FRAME)) before it reads or allocates anything of the payload: a peer that
//! declares a huge frame is refused with its payload left unread. With a timeout, each read
//! waits in `poll` for what is left of one deadline for the whole frame, so a peer that
//! stops half-way, or trickles bytes, cannot hold the reader longer than that.
//!
//! All sends use `MSG_NOSIGNAL`: a peer that has gone away gives `EPIPE`, not SIGPIPE.

use crate::codec::{self, Codec, EncodeError};
use crate::error::{DecodeError, RemoteError};
use crate::frame::{Header, HEADER_LEN, MAX_FDS};
use crate::kind::{Kind, Party};
use crate::messages::{Control, ErrorReply, Frame, MAX_TEXT};
use rustix::event::{poll, PollFd, PollFlags};
use rustix::fd::{BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::net::{
    recvmsg, send, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::mem::MaybeUninit;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

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

/// The peer's pid, uid and gid (SO_PEERCRED): what nicfs holds a direct API user to.
pub fn peer_credentials(stream: &UnixStream) -> io::Result<PeerCred> {
    let c = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(PeerCred { pid: c.pid.as_raw_nonzero().get(), uid: c.uid.as_raw(), gid: c.gid.as_raw() })
}

/// Writes a frame of a kind that carries no descriptors.
pub fn write_frame<M: Codec>(stream: &UnixStream, frame: &Frame<M>) -> Result<(), SendError> {
    send_frame(stream, frame, &[])
}

/// Writes a frame with the descriptors its kind carries (exactly that many).
pub fn send_frame<M: Codec>(stream: &UnixStream, frame: &Frame<M>, fds: &[BorrowedFd<'_>]) -> Result<(), SendError> {
    let kind = frame.msg.kind();
    if fds.len() != frame.msg.fds() as usize {
        return Err(SendError::FdCount { kind, expected: frame.msg.fds(), given: fds.len() });
    }
    let bytes = codec::encode(frame)?;
    send_bytes(stream, &bytes, fds)?;
    Ok(())
}

/// Writes raw bytes, the descriptors (if any) with the first of them. For tests that play
/// a misbehaving peer, and for the frames built by [`codec::encode`].
pub fn send_bytes(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut sent = 0;
    if !fds.is_empty() {
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many file descriptors for one frame"));
        }
        sent = loop {
            match sendmsg(stream, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL) {
                Ok(n) => break n,
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        };
    }
    while sent < bytes.len() {
        match send(stream, &bytes[sent..], SendFlags::NOSIGNAL) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Reads one frame of a kind that carries no descriptors (a frame that comes with some is
/// refused and its descriptors closed). `timeout` bounds the whole frame; `None` waits as
/// long as the socket's own read timeout lets it.
pub fn read_frame<M: Codec>(
    stream: &UnixStream,
    from: Party,
    timeout: Option<Duration>,
) -> Result<Frame<M>, ReadError> {
    let r: Received<M> = recv_frame(stream, from, timeout)?;
    if !r.fds.is_empty() {
        let kind = r.frame.msg.kind();
        return Err(ReadError::Decode {
            error: DecodeError::FdCount { kind, expected: 0, found: r.fds.len() },
            id: r.frame.id,
            in_step: true,
        });
    }
    Ok(r.frame)
}

/// Reads one frame of link `M` sent by `from`, with the descriptors it carries.
pub fn recv_frame<M: Codec>(
    stream: &UnixStream,
    from: Party,
    timeout: Option<Duration>,
) -> Result<Received<M>, ReadError> {
    let deadline = timeout.map(|t| (Instant::now() + t, t));
    let mut head = [0u8; HEADER_LEN];
    let mut fds = Vec::new();
    let mut fds_truncated = false;
    let mut got = 0;
    while got < HEADER_LEN {
        wait_readable(stream, deadline)?;
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r = match recvmsg(stream, &mut [IoSliceMut::new(&mut head[got..])], &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(r) => r,
            Err(Errno::INTR) => continue,
            Err(e) => return Err(ReadError::Io(e.into())),
        };
        for msg in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = msg {
                fds.extend(received);
            }
        }
        fds_truncated |= r.flags.contains(ReturnFlags::CTRUNC);
        if r.bytes == 0 {
            if got == 0 {
                return Err(ReadError::Closed);
            }
            let error = DecodeError::Truncated { what: "frame header", need: HEADER_LEN, have: got };
            return Err(ReadError::Decode { error, id: 0, in_step: false });
        }
        got += r.bytes;
    }
    let header = Header::decode(&head).map_err(|error| ReadError::Decode { error, id: 0, in_step: false })?;
    // The size was checked against MAX_FRAME by Header::decode: this allocation is bounded.
    let mut payload = vec![0u8; header.payload_len as usize];
    let mut got = 0;
    while got < payload.len() {
        wait_readable(stream, deadline)?;
        match (&*stream).read(&mut payload[got..]) {
            Ok(0) => {
                let error = DecodeError::Truncated { what: "frame payload", need: payload.len(), have: got };
                return Err(ReadError::Decode { error, id: header.id, in_step: false });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::Io(e)),
        }
    }
    let in_step = |error| ReadError::Decode { error, id: header.id, in_step: true };
    let frame = codec::decode_payload::<M>(&header, &payload, from).map_err(in_step)?;
    if fds_truncated || fds.len() != header.fd_count as usize {
        let kind = frame.msg.kind();
        let found = if fds_truncated { MAX_FDS + 1 } else { fds.len() };
        return Err(in_step(DecodeError::FdCount { kind, expected: header.fd_count, found }));
    }
    Ok(Received { frame, fds })
}

/// Waits until the socket is readable or the deadline has passed.
fn wait_readable(stream: &UnixStream, deadline: Option<(Instant, Duration)>) -> Result<(), ReadError> {
    let Some((end, total)) = deadline else { return Ok(()) };
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadError::TimedOut(total));
        }
        let ts =
            rustix::event::Timespec::try_from(left).unwrap_or(rustix::event::Timespec { tv_sec: i64::MAX, tv_nsec: 0 });
        let mut pfd = [PollFd::new(stream, PollFlags::IN)];
        match poll(&mut pfd, Some(&ts)) {
            // Readable, or hung up / in error: the read that follows reports which.
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(Errno::INTR) => continue,
            Err(e) => return Err(ReadError::Io(e.into())),
        }
    }
}

/// Writes an Error reply to request `id` (the Error kind is the same on every link).
pub fn write_error(stream: &UnixStream, id: u64, code: RemoteError, message: &str) -> Result<(), SendError> {
    let msg = Control::Error(ErrorReply { code, message: clip(message, MAX_TEXT).to_owned() });
    write_frame(stream, &Frame { id, msg })
}

/// What a server does with a frame it could not read: log it, answer with an Error that
/// names the frame's id (0 if its header was unreadable) and says what was wrong — in this
/// side's own protocol version, like every frame it writes, so a peer of another version
/// learns which version we speak — and say whether the connection may go on. It may not
/// after a version mismatch (the peer should reconnect speaking ours), nor when the frame
/// was not consumed whole (the stream is out of step). Nothing is sent when the connection
/// is closed, timed out or failed.
pub fn answer_bad_frame(stream: &UnixStream, peer: &str, err: &ReadError) -> bool {
    let ReadError::Decode { error, id, in_step } = err else {
        tracing::debug!(peer, %err, "connection ends");
        return false;
    };
    let version_mismatch = matches!(error, DecodeError::UnsupportedVersion { .. } | DecodeError::VersionRefused { .. });
    let go_on = *in_step && !version_mismatch;
    tracing::warn!(peer, id, errno = error.errno(), go_on, "refusing a frame: {error}");
    if let Err(e) = write_error(stream, *id, error.remote(), &error.to_string()) {
        tracing::debug!(peer, "could not send the Error reply: {e}");
        return false;
    }
    go_on
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
