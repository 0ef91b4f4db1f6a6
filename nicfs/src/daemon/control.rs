//! The control connection: attach (claim a slot, start the session and its publisher,
//! answer `Attached` with the log file's descriptor, and the public file's for a trusted
//! client, [`crate::daemon::trust`]), then serve requests until the connection ends — which ends
//! the session.
//!
//! Served today: `Ping`, `Fsync` (through the publisher, so in order with the chunks),
//! `AllocInodes`, `ReserveBlocks`, `ReleaseBlocks`, `StatFs` (the node's allocation state,
//! [`crate::node::alloc`]), `Detach`, and the leases ([`crate::lease::manager`]): `LeaseRequest` is fed
//! to the lease table and answered `LeaseGranted` later, from the session's outbox, when
//! the table grants it (the reader never waits for a grant); `LeaseRelease` is fed and
//! answered `Ok`; `RevokeDone`, the answer to nicfs's `Revoke`, is fed. (Opens for writing
//! are not requests: a client logs them, and they are checked with its entries,
//! [`crate::lease::perms`].)
//!
//! A lease request must name an inode number of the node (EINVAL) and, from a direct API
//! user, state the uid and gid SO_PEERCRED gave (EPERM); a failed or expired session gets
//! EIO with the reason.
//! Permission checks against the stated credentials come later.

use crate::daemon::ctx::Ctx;
use crate::lease::table::Input;
use crate::limits::Refusal;
use crate::peer::{describe, BadFrames};
use crate::pipeline::sequencer;
use crate::session::Job;
use crate::session::{run_outbox, Session};
use linefs_pm::layout::BLOCK_SIZE;
use linefs_proto::RemoteError;
use linefs_proto::{
    recv_frame, send_frame, Attached, Control, ErrorReply, Frame, Hello, InodeRange, LeaseRequest, LinkMessage,
    LogGeometry, Party, PeerCred, Received, Role, Space,
};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;

/// Attaches a client and serves its control connection.
pub(super) fn serve(ctx: &Arc<Ctx>, stream: UnixStream, cred: PeerCred, hello_id: u64, hello: Hello) {
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
                let at = std::time::Instant::now();
                let _ = session.jobs.send(Job::Fsync { id, lsn: f.lsn, at });
            }
            Control::LeaseRequest(r) => {
                if let Some(left) = ctx.sessions.fenced.backoff(session.cred.uid) {
                    let why = format!(
                        "a session of uid {} was fenced for leaving a revoke unanswered: no lease for {} ms",
                        session.cred.uid,
                        left.as_millis()
                    );
                    ctx.refusals.refused(Refusal::Fenced, &peer, &why);
                    let _ = session.control_error(id, RemoteError::TryAgain, &why);
                } else if let Err((code, why)) = check_request(ctx, &session, &r) {
                    tracing::debug!(%peer, id, inode = r.inode, ?code, "lease request refused: {why}");
                    let _ = session.control_error(id, code, why);
                } else if !ctx.leases.request(&session, id, r.inode, r.mode) {
                    let _ = session.control_error(id, RemoteError::SessionFailed, &failed(&session));
                }
            }
            Control::LeaseRelease(h) => {
                let reply = if valid_inode(ctx, h.inode) {
                    let input = Input::Release {
                        session: session.id,
                        ino: h.inode,
                        lease: h.lease,
                        covered_lsn: h.covered_lsn,
                    };
                    ctx.leases.feed(input);
                    Control::Ok
                } else {
                    Control::Error(ErrorReply::new(RemoteError::Invalid, "no such inode number"))
                };
                let _ = session.send_control(&Frame { id, msg: reply });
            }
            Control::RevokeDone(h) => {
                let input =
                    Input::RevokeDone { session: session.id, ino: h.inode, lease: h.lease, covered_lsn: h.covered_lsn };
                ctx.leases.feed(input);
            }
            Control::AllocInodes(a) => {
                // In a cluster with no number left: a new range, waited for (bounded) here,
                // never under the lease table's mutex.
                ctx.node.alloc.await_numbers(crate::node::alloc::AWAIT_NUMBERS);
                let grant = ctx.leases.grant_inodes(session.id, |busy| {
                    ctx.node.alloc.grant_inodes_avoiding(session.slot, u64::from(a.count), busy)
                });
                let reply = match grant {
                    Ok((first, count)) => Control::InodeRange(InodeRange { first, count }),
                    Err(e) => {
                        ctx.refusals.refused(Refusal::Inodes, &peer, &e.to_string());
                        Control::Error(ErrorReply::new(e.remote(), e.to_string()))
                    }
                };
                let _ = session.send_control(&Frame { id, msg: reply });
            }
            Control::ReserveBlocks(b) => {
                let reply = if session.failure().is_some() {
                    Control::Error(ErrorReply::new(RemoteError::SessionFailed, failed(&session)))
                } else {
                    match ctx.node.alloc.reserve(session.slot, b.count, ctx.node.free_blocks()) {
                        Ok(()) => Control::Ok,
                        Err(e) => {
                            ctx.refusals.refused(Refusal::Blocks, &peer, &e.to_string());
                            Control::Error(ErrorReply::new(e.remote(), e.to_string()))
                        }
                    }
                };
                let _ = session.send_control(&Frame { id, msg: reply });
            }
            Control::ReleaseBlocks(b) => {
                ctx.node.alloc.release(session.slot, b.count);
                let _ = session.send_control(&Frame { id, msg: Control::Ok });
            }
            Control::StatFs => {
                let (free_blocks, free_inodes) = ctx.node.alloc.space(ctx.node.free_blocks());
                let _ = session.send_control(&Frame { id, msg: Control::Space(Space { free_blocks, free_inodes }) });
            }
            Control::Detach => {
                // The publisher answers once the log is settled and the slot free, so that a
                // client that detaches and attaches again (a remount) finds its slot.
                tracing::info!(%peer, "client detaches");
                session.set_ending();
                let _ = session.jobs.send(Job::Detach { id });
                return;
            }
            Control::Error(e) => {
                tracing::info!(%peer, id, errno = e.errno(), message = %e.message, "the client answered an Error; ignored");
            }
            Control::Pong | Control::Ok => {
                tracing::debug!(%peer, id, "unexpected reply ignored");
            }
            Control::Opened(r) => {
                if valid_inode(ctx, r.inode) {
                    ctx.node.opens.opened(session.id, r.inode);
                }
            }
            Control::Closed(r) => ctx.node.opens.closed(session.id, r.inode),
            other => {
                // Hello again, or what only nicfs sends (grants, revokes, replies).
                tracing::debug!(%peer, id, kind = ?other.kind(), "not a request a client sends");
                let _ = session.control_error(id, RemoteError::Invalid, "not a request a client sends");
            }
        }
    }
    // The publisher settles the slot, frees it and removes the session.
    session.set_ending();
    let _ = session.jobs.send(Job::End);
}

/// How long an attach waits for departed clients' logs to be published.
const DEPARTED_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// How long attaches wait for the end of the connection of a session whose attaching
/// process has died, counted from the first time it is seen dead: if nothing else holds the
/// connection its end is noticed at once; if a child it forked holds it, the session is not
/// departing at all, and no later attach waits for it.
const DEAD_ATTACHER_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits until every client that has gone (its connection ended) has had its committed log
/// published: a new client builds its view from the public area, so it must find there
/// everything the departed ones committed (a remount after a crash of the mount would
/// otherwise see a file without the data its fsync acknowledged). A session whose
/// attaching process died but whose connection lives on — a child forked before the
/// parent exited — is waited for only [`DEAD_ATTACHER_WAIT`] once: it is not departing.
fn wait_for_departed(ctx: &Ctx) {
    let start = std::time::Instant::now();
    loop {
        let pending = ctx.sessions.all().iter().any(|s| s.ending() || s.attacher_just_died(DEAD_ATTACHER_WAIT));
        if !pending {
            return;
        }
        if start.elapsed() > DEPARTED_WAIT {
            tracing::warn!("departed clients are still being settled after 30 s; attaching anyway");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The message refusing a call of a failed or expired session.
fn failed(session: &Session) -> String {
    match session.failure() {
        Some(why) => format!("session failed: {why}"),
        None => "session failed".into(),
    }
}

fn valid_inode(ctx: &Ctx, ino: u64) -> bool {
    (1..ctx.node.geometry.inode_count).contains(&ino)
}

/// Why a lease request is refused before it reaches the table, if it is.
fn check_request(ctx: &Ctx, session: &Session, r: &LeaseRequest) -> Result<(), (RemoteError, &'static str)> {
    if !valid_inode(ctx, r.inode) {
        return Err((RemoteError::Invalid, "no such inode number"));
    }
    if session.role == Role::DirectApi && (r.creds.uid != session.cred.uid || r.creds.gid != session.cred.gid) {
        return Err((RemoteError::NotPermitted, "stated credentials are not the caller's"));
    }
    if r.mode == linefs_proto::LeaseMode::Write {
        let (public, grants) = (ctx.node.public_reader(), &ctx.node.grants);
        crate::lease::perms::may_lease_write(&public, grants, &ctx.leases, session, r.inode)
            .map_err(|why| (RemoteError::AccessDenied, why))?;
    }
    Ok(())
}

/// Claims a slot for a client of `cred` within the limits ([`crate::limits`]): an
/// unprivileged uid holds at most `--max-slots-per-uid` slots and never one of the
/// `--root-reserved-slots` last free ones. Called under `ctx.attaching`.
fn claim_within_limits(ctx: &Ctx, cred: &PeerCred) -> Result<crate::node::Claim, (RemoteError, String)> {
    let l = &ctx.limits;
    let keep_free = if cred.uid == 0 {
        0
    } else {
        let held = ctx.sessions.all().iter().filter(|s| s.cred.uid == cred.uid).count();
        if held >= l.max_slots_per_uid as usize {
            return Err((
                RemoteError::TooManyClients,
                format!("uid {} holds {held} log slots (--max-slots-per-uid {})", cred.uid, l.max_slots_per_uid),
            ));
        }
        l.root_reserved_slots as usize
    };
    ctx.node.claim_keeping(keep_free).ok_or_else(|| {
        let why = if keep_free > 0 {
            format!("every log slot is in use but the {keep_free} kept for root (--root-reserved-slots)")
        } else {
            "every log slot is in use".to_string()
        };
        (RemoteError::Busy, why)
    })
}

/// Claims a slot, starts the session, sends Attached. None (after an Error reply) if the
/// client cannot be attached.
fn attach(ctx: &Arc<Ctx>, stream: &UnixStream, cred: &PeerCred, id: u64, hello: Hello) -> Option<Arc<Session>> {
    let peer = describe(cred);
    let refuse = |code: RemoteError, why: &str| {
        tracing::warn!(%peer, ?code, "attach refused: {why}");
        let _ = linefs_proto::write_error(stream, id, code, why);
        None
    };
    match hello.role {
        Role::Kworker => return refuse(RemoteError::Invalid, "a kworker does not attach on the control channel"),
        Role::MountDaemon if cred.uid != 0 => {
            return refuse(RemoteError::NotPermitted, "a mount daemon must run as root")
        }
        _ => {}
    }
    if hello.session != 0 {
        return refuse(RemoteError::Invalid, "a control Hello names no session");
    }
    if ctx.stopping() {
        return refuse(RemoteError::ShuttingDown, "nicfs is shutting down");
    }
    let node = &ctx.node;
    // Only a trusted client is handed the public file (crate::daemon::trust): the groups are the
    // kernel's, recorded at connect. Groups that cannot be read trust the uid alone.
    let groups = crate::lease::perms::peer_groups(stream).unwrap_or_else(|e| {
        tracing::warn!(%peer, error = %e, "cannot read the peer's groups (SO_PEERGROUPS); none assumed");
        Vec::new()
    });
    let trusted = ctx.trust.trusted(cred, &groups);
    wait_for_departed(ctx);
    // Held until the session is registered: the limit counts registered sessions.
    let one_at_a_time = ctx.attaching.lock();
    let claimed = claim_within_limits(ctx, cred);
    let claim = match claimed {
        Ok(c) => c,
        Err((code, why)) => {
            if code != RemoteError::Busy || cred.uid != 0 {
                ctx.refusals.refused(Refusal::Slot, &peer, &why);
            }
            let _ = linefs_proto::write_error(stream, id, code, &why);
            return None;
        }
    };
    let slot = claim.slot;
    let files = node.client_files(slot, trusted).and_then(|f| Ok((f, stream.try_clone()?)));
    let start = node.checkpoint(slot);
    let ((log, public), writer) = match files {
        Ok(f) => f,
        Err(e) => {
            node.release(claim);
            return refuse(RemoteError::Io, &format!("cannot open the slot's files: {e}"));
        }
    };
    let sid = ctx.sessions.new_id();
    node.alloc.begin_session(slot, cred.uid);
    ctx.leases.attach(sid, slot);
    // Recorded before Attached, so before the client can log: a restart's recovery judges
    // what it logged and nicfs did not apply by these credentials (crate::node::lease_record).
    if groups.len() > crate::node::lease_record::MAX_GROUPS {
        tracing::warn!(%peer, groups = groups.len(), "more supplementary groups than recovery records; it judges with the first {}", crate::node::lease_record::MAX_GROUPS);
    }
    let creds = crate::node::lease_record::SlotCreds {
        uid: cred.uid,
        gid: cred.gid,
        groups: groups.clone(),
        states_callers: cred.uid == 0,
    };
    node.leases.session_attached(slot, &creds, groups.len(), start);
    let (session, rx, out_rx) = Session::new(sid, slot, (*cred, groups), hello.role, writer, start, ctx.leases.clone());
    let session = Arc::new(session);
    let (parts, sess, leases) = (ctx.sequencing.clone(), session.clone(), ctx.leases.clone());
    std::thread::Builder::new()
        .name(format!("publish-{sid}"))
        .spawn(move || {
            let node = parts.node.clone();
            sequencer::run(parts, sess, claim, rx);
            // The log is settled and the publisher gone: whatever the session held is free,
            // and orphans kept only for it go.
            leases.session_ended(sid);
            node.grants.session_ended(sid);
            for ino in node.opens.session_ended(sid) {
                node.free_orphan(ino);
            }
        })
        .map_err(|e| tracing::error!(error = %e, "cannot start a publisher thread"))
        .ok()?;
    // Registered before Attached goes out: the client opens its bulk connection as soon as
    // it has the answer, and that connection must find the session. Registered before any
    // lease input names it, too (the lease manager takes an output for an unregistered
    // session as the end of the session). Nothing else writes to the control connection
    // before Attached: the publisher answers there only to this connection's requests, and
    // lease frames (a revoke of a number granted below) wait in the outbox, whose thread
    // starts once Attached is written.
    ctx.sessions.insert(session.clone());
    drop(one_at_a_time);
    // A first range of inode numbers; a node with none left still attaches (reads work).
    node.alloc.await_numbers(crate::node::alloc::AWAIT_NUMBERS);
    let grant = ctx
        .leases
        .grant_inodes(sid, |busy| node.alloc.grant_inodes_avoiding(slot, crate::node::alloc::FIRST_GRANT, busy));
    let inodes = match grant {
        Ok((first, count)) => InodeRange { first, count },
        Err(_) => InodeRange { first: 0, count: 0 },
    };
    let attached = Attached {
        session: sid,
        slot,
        public: public.is_some(),
        log: LogGeometry {
            ring_offset: BLOCK_SIZE,
            ring_bytes: node.ring_bytes(),
            start_lsn: start,
            chunk_bytes: crate::node::CHUNK_BYTES.min(node.ring_bytes() / 4),
        },
        inodes,
    };
    let fds: Vec<_> = std::iter::once(log.as_fd()).chain(public.as_ref().map(|p| p.as_fd())).collect();
    let sent = send_frame(stream, &Frame { id, msg: Control::Attached(attached) }, &fds);
    if let Err(e) = sent {
        tracing::warn!(%peer, error = %e, "cannot send Attached; ending the session");
        // The publisher removes the session once the slot is settled.
        let _ = session.jobs.send(Job::End);
        return None;
    }
    let weak = Arc::downgrade(&session);
    if let Err(e) = std::thread::Builder::new().name(format!("outbox-{sid}")).spawn(move || run_outbox(weak, out_rx)) {
        tracing::error!(error = %e, "cannot start an outbox thread; ending the session");
        session.hang_up();
        let _ = session.jobs.send(Job::End);
        return None;
    }
    tracing::info!(session = session.id, slot, pid = cred.pid, uid = cred.uid, gid = cred.gid, role = ?hello.role, start_lsn = start, trusted, "client attached");
    Some(session)
}
