//! The peer at the other end of a connection, whoever it is (a client's control or bulk
//! connection, the kworker's link): how logs name it, and the policy for frames that do
//! not decode — answered with an Error and counted, the connection closed when the stream
//! is out of step or after [`MAX_BAD_FRAMES`]. Nothing a peer sends panics the daemon.
//!
//! Imports nothing of nicfs.

use linefs_proto::{answer_bad_frame, PeerCred, ReadError};
use std::os::unix::net::UnixStream;

/// Frames that fail to decode before a connection is closed.
pub(crate) const MAX_BAD_FRAMES: u32 = 8;

/// A peer as logs name it.
pub(crate) fn describe(cred: &PeerCred) -> String {
    format!("pid {} uid {} gid {}", cred.pid, cred.uid, cred.gid)
}

/// Counts the frames of one connection that did not decode.
#[derive(Default)]
pub(crate) struct BadFrames(u32);

impl BadFrames {
    /// Answers a failed read (see [`answer_bad_frame`]) and says whether to keep reading:
    /// not after the end of the connection, a frame not consumed whole, or too many bad
    /// frames.
    pub(crate) fn go_on(&mut self, stream: &UnixStream, peer: &str, err: &ReadError) -> bool {
        if matches!(err, ReadError::Closed) {
            return false;
        }
        if !answer_bad_frame(stream, peer, err) {
            return false;
        }
        self.0 += 1;
        if self.0 >= MAX_BAD_FRAMES {
            tracing::warn!(peer, bad = self.0, "too many bad frames; disconnecting");
            return false;
        }
        true
    }
}
