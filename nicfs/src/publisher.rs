//! The publisher of one session: a thread that takes the session's jobs in order (chunks
//! committed, fsyncs, the end of the session), publishes the slot with pm's
//! [`publish_slot`](linefs_pm::publish::publish_slot) (through [`Node::publish`]) and
//! answers the client.
//!
//! * `Chunk(lsn)`: publish up to `lsn`, then a `Published` notice on the bulk connection.
//! * `Fsync{id, lsn}`: publish up to `lsn`, then `FsyncDone` on the control connection
//!   (replication comes later: published on this node is all "durable" means today).
//! * `End`: the client is gone (or nicfs stops): publish everything the slot has
//!   committed, drop a refused suffix if the session failed, free the slot.
//!
//! A refused entry sends `Rejected` on the control connection, marks the session failed
//! (later requests get an Error) and logs it; nicfs and the other sessions carry on.

use crate::daemon::Ctx;
use crate::node::Claim;
use crate::session::Session;
use linefs_pm::public::PublishError;
use linefs_pm::publish::{Published, SlotError};
use linefs_proto::{Bulk, Control, Frame, FsyncDone, InodeSet, Rejected, MAX_PUBLISHED_INODES};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What a session's publisher does next.
#[derive(Debug)]
pub enum Job {
    Chunk(u64),
    Fsync { id: u64, lsn: u64 },
    End,
}

/// Runs the publisher of `session` until its `End` job (or its queue closes).
pub fn run(ctx: Arc<Ctx>, session: Arc<Session>, claim: Claim, jobs: crossbeam_channel::Receiver<Job>) {
    let _span = tracing::info_span!("session", id = session.id, slot = session.slot).entered();
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Chunk(lsn) => {
                if session.failed() {
                    continue;
                }
                if let Some(p) = publish(&ctx, &session, lsn) {
                    notify_published(&session, &p);
                }
            }
            Job::Fsync { id, lsn } => fsync(&ctx, &session, id, lsn),
            Job::End => break,
        }
    }
    end(&ctx, &session, claim);
    ctx.sessions.remove(session.id);
}

/// Publishes the session's slot up to `until`; on a refusal tells the client and fails
/// the session. Returns what was published when anything was.
fn publish(ctx: &Ctx, session: &Session, until: u64) -> Option<Published> {
    let node = &ctx.node;
    match node.publish(session.slot, until, &ctx.host) {
        Ok(p) => {
            session.published.store(p.upto, Ordering::Release);
            (p.entries > 0).then_some(p)
        }
        Err(e) => {
            let (lsn, errno, published) = match &e {
                SlotError::Rejected { lsn, published, .. } => (*lsn, libc::EINVAL, Some(published.clone())),
                SlotError::Failed { lsn, source: PublishError::NoSpace, .. } => (*lsn, libc::ENOSPC, None),
                SlotError::Failed { lsn, .. } => (*lsn, libc::EIO, None),
                SlotError::Log { .. } | SlotError::Stale { .. } => {
                    (session.published.load(Ordering::Acquire), libc::EIO, None)
                }
            };
            let reason = e.to_string();
            tracing::error!(lsn, errno, %reason, pid = session.cred.pid, uid = session.cred.uid, "publication refused; session failed");
            node.counters.rejections.fetch_add(1, Ordering::Relaxed);
            if let Some(p) = published.as_ref().filter(|p| p.entries > 0) {
                session.published.store(p.upto, Ordering::Release);
                notify_published(session, p);
            }
            session.fail(reason.clone());
            let frame = Frame { id: session.next_id(), msg: Control::Rejected(Rejected { lsn, errno, reason }) };
            if let Err(e) = session.send_control(&frame) {
                tracing::debug!(error = %e, "cannot send Rejected");
            }
            None
        }
    }
}

fn notify_published(session: &Session, p: &Published) {
    let changed =
        if p.touched.len() <= MAX_PUBLISHED_INODES { InodeSet::Listed(p.touched.clone()) } else { InodeSet::All };
    // No replication yet: what is published is also reclaimable.
    let msg = Bulk::Published(linefs_proto::Published { published_lsn: p.upto, reclaim_lsn: p.upto, changed });
    match session.send_bulk(&Frame { id: session.next_id(), msg }) {
        Ok(true) => {}
        Ok(false) => tracing::debug!("no bulk connection: Published not sent"),
        Err(e) => tracing::debug!(error = %e, "cannot send Published"),
    }
}

fn fsync(ctx: &Ctx, session: &Session, id: u64, lsn: u64) {
    if let Some(why) = session.failure() {
        let _ = session.control_error(id, libc::EIO, &format!("session failed: {why}"));
        return;
    }
    session.committed.fetch_max(lsn, Ordering::AcqRel);
    if let Some(p) = publish(ctx, session, lsn) {
        notify_published(session, &p);
    }
    if session.failed() {
        let _ = session.control_error(id, libc::EIO, "an entry before the fsync point was refused");
        return;
    }
    let done = session.published.load(Ordering::Acquire);
    let reply = if done >= lsn {
        session.send_control(&Frame { id, msg: Control::FsyncDone(FsyncDone { durable_lsn: done }) })
    } else {
        let why = format!("the log is committed only up to {done}, not {lsn}");
        session.control_error(id, libc::EINVAL, &why)
    };
    if let Err(e) = reply {
        tracing::debug!(error = %e, "cannot answer Fsync");
    }
}

/// The end of a session: settle its slot, hang up, free the slot.
fn end(ctx: &Ctx, session: &Session, claim: Claim) {
    settle(ctx, session);
    session.hang_up();
    tracing::info!(
        pid = session.cred.pid,
        published = session.published.load(Ordering::Acquire),
        failed = session.failed(),
        "session ended; slot released"
    );
    ctx.node.release(claim);
}

/// Publishes what the session's slot has committed — its writer is gone or nicfs stops, so
/// up to the end of the log — or, if the session failed, drops the refused suffix.
/// Idempotent: shutdown may settle a session whose publisher is settling it too.
pub fn settle(ctx: &Ctx, session: &Session) {
    let node = &ctx.node;
    if !session.failed() {
        match node.publish(session.slot, u64::MAX, &ctx.host) {
            Ok(p) => {
                session.published.store(p.upto, Ordering::Release);
                if p.entries > 0 {
                    notify_published(session, &p);
                }
            }
            Err(e) => {
                node.counters.rejections.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "publishing the committed log of a departed client failed");
                session.fail(e.to_string());
            }
        }
    }
    if session.failed() {
        match node.discard_unpublished(session.slot) {
            Ok((from, to)) if to > from => {
                tracing::warn!(from, to, "dropped the refused suffix of the log");
                session.published.store(to, Ordering::Release);
            }
            Ok(_) => {}
            Err(e) => tracing::error!(error = %e, "cannot drop the refused suffix; the slot keeps it"),
        }
    }
}
