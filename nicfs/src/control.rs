//! The control connection: attach (claim a slot, start the session and its publisher,
//! answer `Attached` with the two descriptors), then serve requests until the connection
//! ends — which ends the session.
//!
//! Served today: `Ping`, `Fsync` (through the publisher, so in order with the chunks),
//! `Detach`. Leases, open checks, inode and block allocation are not built yet and are
//! answered with ENOSYS.

use crate::conn::{describe, BadFrames};
use crate::daemon::Ctx;
use crate::publisher::{self, Job};
use crate::session::Session;
use linefs_pm::layout::BLOCK_SIZE;
use linefs_proto::{
    recv_frame, send_frame, Attached, Control, Frame, Hello, InodeRange, LinkMessage, LogGeometry, Party, PeerCred,
    Received, Role,
};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

/// Attaches a client and serves its control connection.
pub fn serve(ctx: &Arc<Ctx>, stream: UnixStream, cred: PeerCred, hello_id: u64, hello: Hello) {
    let peer = describe(&cred);
    let Some(session) = attach(ctx, &stream, &cred, hello_id, hello) else { return };
    let _span = tracing::info_span!("session", id = session.id, slot = session.slot).entered();
    let mut bad = BadFrames::default();
    loop {
        let r: Received<Control> = match recv_frame(&stream, Party::Client, None) {
            Ok(r) => r,
            Err(e) => {
                if bad.go_on(&stream, &peer, &e) {
                    continue;
                }
                tracing::info!(%peer, reason = %e, "control connection ended");
                break;
            }
        };
        let id = r.frame.id;
        match r.frame.msg {
            Control::Ping => {
                let _ = session.send_control(&Frame { id, msg: Control::Pong });
            }
            Control::Fsync(f) => {
                let _ = session.jobs.send(Job::Fsync { id, lsn: f.lsn });
            }
            Control::Detach => {
                tracing::info!(%peer, "client detaches");
                let _ = session.send_control(&Frame { id, msg: Control::Ok });
                break;
            }
            // Replies to requests nicfs never sends yet.
            Control::Pong | Control::Ok | Control::Error(_) | Control::RevokeDone(_) => {
                tracing::debug!(%peer, id, "unexpected reply ignored");
            }
            other => {
                tracing::debug!(%peer, id, kind = ?other.kind(), "request not served yet");
                let _ = session.control_error(id, libc::ENOSYS, "not served by this nicfs yet");
            }
        }
    }
    // The publisher settles the slot, frees it and removes the session.
    let _ = session.jobs.send(Job::End);
}

/// Claims a slot, starts the session, sends Attached. None (after an Error reply) if the
/// client cannot be attached.
fn attach(ctx: &Arc<Ctx>, stream: &UnixStream, cred: &PeerCred, id: u64, hello: Hello) -> Option<Arc<Session>> {
    let peer = describe(cred);
    let refuse = |errno: i32, why: &str| {
        tracing::warn!(%peer, errno, "attach refused: {why}");
        let _ = linefs_proto::write_error(stream, id, errno, why);
        None
    };
    match hello.role {
        Role::Kworker => return refuse(libc::EINVAL, "a kworker does not attach on the control channel"),
        Role::MountDaemon if cred.uid != 0 => return refuse(libc::EPERM, "a mount daemon must run as root"),
        _ => {}
    }
    if hello.session != 0 {
        return refuse(libc::EINVAL, "a control Hello names no session");
    }
    if ctx.stopping() {
        return refuse(libc::ESHUTDOWN, "nicfs is shutting down");
    }
    let node = &ctx.node;
    let Some(claim) = node.claim() else { return refuse(libc::EBUSY, "every log slot is in use") };
    let slot = claim.slot;
    let files = node.client_files(slot).and_then(|f| Ok((f, stream.try_clone()?)));
    let checkpoint = node.checkpoint(slot);
    let ((log, public), writer, start) = match (files, checkpoint) {
        (Ok((f, w)), Ok(c)) => (f, w, c),
        (Err(e), _) => {
            node.release(claim);
            return refuse(libc::EIO, &format!("cannot open the slot's files: {e}"));
        }
        (_, Err(e)) => {
            node.release(claim);
            return refuse(libc::EIO, &format!("log slot {slot} is unreadable: {e}"));
        }
    };
    let (tx, rx) = crossbeam_channel::unbounded();
    let session = Arc::new(Session::new(ctx.sessions.new_id(), slot, *cred, hello.role, writer, tx, start));
    let attached = Attached {
        session: session.id,
        slot,
        log: LogGeometry {
            ring_offset: BLOCK_SIZE,
            ring_bytes: node.ring_bytes(),
            start_lsn: start,
            chunk_bytes: crate::node::CHUNK_BYTES.min(node.ring_bytes() / 4),
        },
        // Inode allocation is not built yet: no range is handed out.
        inodes: InodeRange { first: 0, count: 0 },
    };
    let (c, sess) = (ctx.clone(), session.clone());
    std::thread::Builder::new()
        .name(format!("publish-{}", session.id))
        .spawn(move || publisher::run(c, sess, claim, rx))
        .map_err(|e| tracing::error!(error = %e, "cannot start a publisher thread"))
        .ok()?;
    // Nothing else writes to the connection yet: the publisher acts on jobs, and they come
    // from this connection's requests, or from a bulk connection naming the session, which
    // can find it only once it is registered below.
    let sent = send_frame(stream, &Frame { id, msg: Control::Attached(attached) }, &[log.as_fd(), public.as_fd()]);
    if let Err(e) = sent {
        tracing::warn!(%peer, error = %e, "cannot send Attached; ending the session");
        let _ = session.jobs.send(Job::End);
        return None;
    }
    ctx.sessions.insert(session.clone());
    tracing::info!(session = session.id, slot, pid = cred.pid, uid = cred.uid, gid = cred.gid, role = ?hello.role, start_lsn = start, "client attached");
    Some(session)
}
