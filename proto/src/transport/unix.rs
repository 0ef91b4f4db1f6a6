//! The Unix link: frames over a blocking Unix stream socket, implemented on `UnixStream`
//! itself, so every caller that holds one holds a [`LocalLink`]. Writing and reading with
//! the size bound and an optional deadline, descriptors passed with a frame (SCM_RIGHTS),
//! the peer's credentials (SO_PEERCRED). The free functions ([`read_frame`],
//! [`write_frame`], …) are the names the callers have always used, kept over the trait.
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
//! against [`MAX_FRAME`](crate::MAX_FRAME)) before it reads or allocates anything of the
//! payload: a peer that declares a huge frame is refused with its payload left unread.
//! With a timeout, each read waits in `poll` for what is left of one deadline for the
//! whole frame, so a peer that stops half-way, or trickles bytes, cannot hold the reader
//! longer than that.
//!
//! The socket neither loses, reorders nor corrupts bytes: frames carry no check
//! ([`CHECK_NONE`](crate::frame::CHECK_NONE)).
//!
//! All sends use `MSG_NOSIGNAL`: a peer that has gone away gives `EPIPE`, not SIGPIPE.

use super::{FrameLink, FrameLinkExt, LocalLink, LocalLinkExt, PeerCred, RawFrame, ReadError, Received, SendError};
use crate::codec::Codec;
use crate::error::DecodeError;
use crate::frame::{Header, HEADER_LEN, MAX_FDS};
use crate::kind::Party;
use crate::messages::Frame;
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

impl FrameLink for UnixStream {
    fn send_raw(&self, frame: &[u8]) -> io::Result<()> {
        send_bytes(self, frame, &[])
    }

    fn recv_raw(&self, timeout: Option<Duration>) -> Result<RawFrame, ReadError> {
        // Descriptors that came are closed here; their count stays in the frame.
        self.recv_raw_with_fds(timeout).map(|(raw, _fds)| raw)
    }
}

impl LocalLink for UnixStream {
    fn send_raw_with_fds(&self, frame: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        send_bytes(self, frame, fds)
    }

    fn recv_raw_with_fds(&self, timeout: Option<Duration>) -> Result<(RawFrame, Vec<OwnedFd>), ReadError> {
        recv_raw(self, timeout)
    }

    fn peer_credentials(&self) -> io::Result<PeerCred> {
        peer_credentials(self)
    }
}

/// The peer's pid, uid and gid (SO_PEERCRED): what nicfs holds a direct API user to.
pub fn peer_credentials(stream: &UnixStream) -> io::Result<PeerCred> {
    let c = rustix::net::sockopt::socket_peercred(stream)?;
    Ok(PeerCred { pid: c.pid.as_raw_nonzero().get(), uid: c.uid.as_raw(), gid: c.gid.as_raw() })
}

/// Writes a frame of a kind that carries no descriptors.
pub fn write_frame<M: Codec>(stream: &UnixStream, frame: &Frame<M>) -> Result<(), SendError> {
    stream.send(frame)
}

/// Writes a frame with the descriptors its kind carries (exactly that many).
pub fn send_frame<M: Codec>(stream: &UnixStream, frame: &Frame<M>, fds: &[BorrowedFd<'_>]) -> Result<(), SendError> {
    stream.send_with_fds(frame, fds)
}

/// Writes raw bytes, the descriptors (if any) with the first of them. For tests that play
/// a misbehaving peer, and for the frames built by [`crate::codec::encode`].
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
    stream.recv(from, timeout)
}

/// Reads one frame of link `M` sent by `from`, with the descriptors it carries.
pub fn recv_frame<M: Codec>(
    stream: &UnixStream,
    from: Party,
    timeout: Option<Duration>,
) -> Result<Received<M>, ReadError> {
    stream.recv_with_fds(from, timeout)
}

/// Reads one frame's header (with the descriptors that came with it) and payload.
fn recv_raw(stream: &UnixStream, timeout: Option<Duration>) -> Result<(RawFrame, Vec<OwnedFd>), ReadError> {
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
    let fds_found = if fds_truncated { MAX_FDS + 1 } else { fds.len() };
    Ok((RawFrame { header, payload, fds_found }, fds))
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
