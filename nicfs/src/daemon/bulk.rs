//! The bulk connection of a session: `ChunkReady` from the client goes to the session's
//! publisher; `Published` goes back from the publisher ([`crate::pipeline::sequencer`]).
//!
//! The bulk Hello names a session, and the peer must be the process that attached it
//! (same pid and uid, by SO_PEERCRED): a session id is not a secret. One bulk connection
//! per session; its end does not end the session (the control connection's does).

use crate::daemon::ctx::Ctx;
use crate::peer::{describe, BadFrames};
use crate::session::Job;
use linefs_proto::RemoteError;
use linefs_proto::{read_frame, Bulk, Frame, Hello, Party, PeerCred};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Serves the bulk connection of the session `hello` names.
pub(super) fn serve(ctx: &Arc<Ctx>, stream: UnixStream, cred: PeerCred, hello_id: u64, hello: Hello) {
    let peer = describe(&cred);
    let refuse = |code: RemoteError, why: &str| {
        tracing::warn!(%peer, session = hello.session, ?code, "bulk connection refused: {why}");
        let _ = linefs_proto::write_error(&stream, hello_id, code, why);
    };
    let Some(session) = ctx.sessions.get(hello.session) else {
        return refuse(RemoteError::NoSuchSession, "no such session");
    };
    if session.cred.pid != cred.pid || session.cred.uid != cred.uid {
        return refuse(RemoteError::AccessDenied, "the session belongs to another process");
    }
    let writer = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => return refuse(RemoteError::Io, &format!("cannot clone the socket: {e}")),
    };
    if !session.set_bulk(writer) {
        return refuse(RemoteError::Busy, "the session has a bulk connection already");
    }
    if session.send_bulk(&Frame { id: hello_id, msg: Bulk::Ok }).is_err() {
        session.clear_bulk();
        return;
    }
    let _span = tracing::info_span!("bulk", session = session.id, slot = session.slot).entered();
    tracing::info!(%peer, "bulk connection open");
    let mut bad = BadFrames::default();
    loop {
        let frame: Frame<Bulk> = match read_frame(&stream, Party::Client, None) {
            Ok(f) => f,
            Err(e) => {
                if bad.go_on(&stream, &peer, &e) {
                    continue;
                }
                tracing::info!(%peer, reason = %e, "bulk connection ended");
                break;
            }
        };
        match frame.msg {
            Bulk::ChunkReady(c) => {
                ctx.node.counters.chunk_ready();
                if let Some(why) = session.failure() {
                    session.bulk_error(frame.id, RemoteError::SessionFailed, &format!("session failed: {why}"));
                    continue;
                }
                session.committed.fetch_max(c.committed_lsn, Ordering::AcqRel);
                let job = Job::Chunk { lsn: c.committed_lsn, at: std::time::Instant::now() };
                if session.jobs.send(job).is_err() {
                    break; // the session has ended
                }
            }
            Bulk::Ok | Bulk::Error(_) => tracing::debug!(%peer, id = frame.id, "unexpected reply ignored"),
            other => {
                tracing::debug!(%peer, id = frame.id, msg = ?other, "unexpected bulk frame");
                session.bulk_error(frame.id, RemoteError::Protocol, "not expected on the bulk channel");
            }
        }
    }
    session.clear_bulk();
}
