//! One accepted connection: read its Hello (within the configured hello timeout), then serve it as a
//! control connection (a new session, [`crate::daemon::control`]), as the bulk connection of an
//! existing one ([`crate::daemon::bulk`]), or as the kworker's link ([`crate::host::link`]). Also the policy for frames that do not decode.

use crate::daemon::ctx::Ctx;
use crate::peer::describe;
use linefs_proto::RemoteError;
use linefs_proto::{answer_bad_frame, peer_credentials, recv_frame, Channel, Control, Party, Received};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

/// Serves one accepted connection to its end.
pub(super) fn serve(ctx: Arc<Ctx>, stream: UnixStream) {
    let cred = match peer_credentials(&stream) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the peer's credentials; closing");
            return;
        }
    };
    let peer = describe(&cred);
    if let Err(e) = stream.set_write_timeout(Some(ctx.timeouts.write)) {
        tracing::warn!(%peer, error = %e, "cannot set a write timeout; closing");
        return;
    }
    let first: Received<Control> = match recv_frame(&stream, Party::Client, Some(ctx.timeouts.hello)) {
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
        Channel::Control => crate::daemon::control::serve(&ctx, stream, cred, id, hello),
        Channel::Bulk => crate::daemon::bulk::serve(&ctx, stream, cred, id, hello),
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
