//! One accepted connection: read its Hello (within [`HELLO_TIMEOUT`]), then serve it as a
//! control connection (a new session, [`crate::control`]), as the bulk connection of an
//! existing one ([`crate::bulk`]), or as the kworker's link ([`crate::hostlink`]). Also the policy for frames that do not decode.

use crate::daemon::Ctx;
use linefs_proto::RemoteError;
use linefs_proto::{
    answer_bad_frame, peer_credentials, recv_frame, Channel, Control, Party, PeerCred, ReadError, Received,
};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

/// How long a new connection may take to say Hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a write to a client may block (a client that stops reading is cut off).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Frames that fail to decode before a connection is closed.
pub const MAX_BAD_FRAMES: u32 = 8;

/// Serves one accepted connection to its end.
pub fn serve(ctx: Arc<Ctx>, stream: UnixStream) {
    let cred = match peer_credentials(&stream) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the peer's credentials; closing");
            return;
        }
    };
    let peer = describe(&cred);
    if let Err(e) = stream.set_write_timeout(Some(WRITE_TIMEOUT)) {
        tracing::warn!(%peer, error = %e, "cannot set a write timeout; closing");
        return;
    }
    let first: Received<Control> = match recv_frame(&stream, Party::Client, Some(HELLO_TIMEOUT)) {
        Ok(r) => r,
        Err(e) => {
            answer_bad_frame(&stream, &peer, &e);
            return;
        }
    };
    let id = first.frame.id;
    let Control::Hello(hello) = first.frame.msg else {
        tracing::warn!(%peer, kind = ?first.frame.msg, "first frame is not Hello; closing");
        let _ = linefs_proto::write_error(&stream, id, RemoteError::Protocol, "the first frame must be Hello");
        return;
    };
    match hello.channel {
        Channel::Control => crate::control::serve(&ctx, stream, cred, id, hello),
        Channel::Bulk => crate::bulk::serve(&ctx, stream, cred, id, hello),
        Channel::Kworker => {
            if let Err(why) = kworker_allowed(cred.uid, rustix::process::geteuid().as_raw(), ctx.kworker_uid) {
                ctx.refusals.refused(crate::limits::Refusal::Kworker, &peer, &why);
                let _ = linefs_proto::write_error(&stream, id, RemoteError::NotPermitted, &why);
                return;
            }
            ctx.host.serve(stream, cred, id, hello)
        }
    }
}

/// Whether a process of `uid` may be the node's kworker, when nicfs runs as `euid`: it must
/// run as nicfs's own user or as the one the operator named (`--kworker-uid`). Being root
/// does not let nicfs take anyone: a kworker executes every copy list, so a process that
/// answered them without copying would lose what clients wrote.
pub fn kworker_allowed(uid: u32, euid: u32, named: Option<u32>) -> Result<(), String> {
    if uid == euid || Some(uid) == named {
        return Ok(());
    }
    Err(match named {
        Some(n) => format!("a kworker must run as uid {euid} (nicfs's) or {n} (--kworker-uid), not {uid}"),
        None => format!("a kworker must run as uid {euid} (nicfs's), not {uid}"),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_nicfs_s_uid_or_the_named_one_is_a_kworker() {
        use super::kworker_allowed as ok;
        assert!(ok(0, 0, None).is_ok());
        assert!(ok(65534, 0, None).is_err(), "root nicfs takes no other uid");
        assert!(ok(1000, 0, Some(1000)).is_ok());
        assert!(ok(65534, 0, Some(1000)).is_err());
        assert!(ok(1000, 1000, None).is_ok());
    }
}

/// A peer as logs name it.
pub fn describe(cred: &PeerCred) -> String {
    format!("pid {} uid {} gid {}", cred.pid, cred.uid, cred.gid)
}

/// Counts the frames of one connection that did not decode.
#[derive(Default)]
pub struct BadFrames(u32);

impl BadFrames {
    /// Answers a failed read (see [`answer_bad_frame`]) and says whether to keep reading:
    /// not after the end of the connection, a frame not consumed whole, or too many bad
    /// frames.
    pub fn go_on(&mut self, stream: &UnixStream, peer: &str, err: &ReadError) -> bool {
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
