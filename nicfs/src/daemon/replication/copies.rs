//! The replica side: this node's copies of other nodes' client logs (pm's [`ReplicaLog`],
//! `DIR/replicas/`), the persists into them, and their publication into this node's public
//! area by the `repl-publish` thread.
//!
//! * **Persist** ([`Copies::persist`], on the engine thread): the bytes are written at their
//!   ring positions, persisted and fenced before the engine hears `Persisted` — so an ack
//!   means durable. The writer's credentials that came with the chunk are kept for the
//!   range (in memory).
//! * **Publish** ([`Publisher`]): the copy is published from its checkpoint through
//!   [`Node::publish_copy`] — the same validation, permission checks and checkpoint as a
//!   local session's batch, under the same mutex of the public area — each range checked for
//!   the credentials of the client that wrote it on the primary (a client running as root
//!   states its callers and is believed, anyone else is held to its uid: the rule of
//!   `crate::lease::perms`). An entry refused here (structure or meaning) is logged and
//!   skipped with the rest of its batch — nothing a correct primary sends, since it
//!   published them itself — and the copy's checkpoint moves past it, so the stream goes
//!   on. Only whole entries are published: a range that ends inside an entry waits for the
//!   rest.
//! * **Node-level leases**: [`admit_remote`] is the hook where the cluster's node-level
//!   lease table judges each replicated batch by the origin's leases; until that table
//!   exists it admits everything, and structure and meaning are all that is checked.
//! * **After a restart** pm's recovery (at the node's open) has published what each copy
//!   held durable, admitted structurally; the credentials of ranges received since are kept
//!   in memory only, so a range whose credentials are not known (none should be left) is
//!   published as from a client that states its callers (as root's are).

use crate::daemon::replication::status::{add, CopyStatus, Counters};
use crate::daemon::replication::Msg;
use crate::node::Node;
use linefs_chain::StreamId;
use linefs_peer::repl::Creds;
use linefs_pm::layout::FormatError;
use linefs_pm::public::Permissions;
use linefs_pm::publish::{Batch, SlotError};
use linefs_pm::record::Caller;
use linefs_pm::replica::ReplicaLog;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// One copy: its file and the writers' credentials of the ranges received since start.
pub(crate) struct Copy {
    pub(crate) log: ReplicaLog,
    creds: Writers,
}

/// Range start → (range end, credentials): who wrote which range of a copy. Ranges do not
/// overlap; adjacent ones of the same credentials are merged.
#[derive(Default)]
struct Writers(Mutex<BTreeMap<u64, (u64, Arc<Creds>)>>);

impl Writers {
    fn note(&self, start: u64, end: u64, creds: &Arc<Creds>) {
        let mut m = self.0.lock();
        // Extend the range that ends at `start` if it has the same credentials.
        if let Some((_, (e, c))) = m.range_mut(..start).next_back() {
            if *e == start && **c == **creds {
                *e = end;
                return;
            }
        }
        m.insert(start, (end, creds.clone()));
    }

    /// The credentials at `lsn` and where their range ends (None: not known, the range
    /// came before a restart; it ends at the next known range).
    fn at(&self, lsn: u64) -> (Option<Arc<Creds>>, u64) {
        let m = self.0.lock();
        if let Some((_, (e, c))) = m.range(..=lsn).next_back() {
            if *e > lsn {
                return (Some(c.clone()), *e);
            }
        }
        (None, m.range(lsn.saturating_add(1)..).next().map_or(u64::MAX, |(&s, _)| s))
    }

    /// Forgets the credentials of what is published.
    fn trim(&self, upto: u64) {
        let mut m = self.0.lock();
        while let Some((&s, &(e, _))) = m.first_key_value() {
            if e > upto {
                break;
            }
            m.remove(&s);
        }
    }
}

/// The node's copies, opened (or created) on first use.
pub(crate) struct Copies {
    node: Arc<Node>,
    copies: HashMap<StreamId, Arc<Copy>>,
}

impl Copies {
    /// Opens every copy the node holds; returns them with (durable end, published LSN).
    pub(crate) fn open(node: Arc<Node>, me: u32) -> (Copies, Vec<(StreamId, u64, u64)>) {
        let mut copies = Copies { node: node.clone(), copies: HashMap::new() };
        let mut found = Vec::new();
        for (origin, slot) in linefs_pm::replica::list_replicas(&node.dir) {
            let stream = StreamId { primary: origin, slot };
            if origin == me {
                tracing::warn!(%stream, "a replica copy of this node's own log: ignored");
                continue;
            }
            let opened = copies.get(stream).and_then(|c| {
                let durable = c.log.durable_end()?;
                let published = c.log.log().published_lsn()?;
                Ok((durable, published))
            });
            match opened {
                Ok((durable, published)) => {
                    tracing::info!(%stream, durable, published, "replica copy recovered");
                    found.push((stream, durable, published));
                }
                Err(e) => tracing::error!(%stream, error = %e, "cannot open a replica copy; it is left out"),
            }
        }
        (copies, found)
    }

    /// The copy of `stream`, opened or created.
    pub(crate) fn get(&mut self, stream: StreamId) -> Result<Arc<Copy>, FormatError> {
        if let Some(c) = self.copies.get(&stream) {
            return Ok(c.clone());
        }
        let log = ReplicaLog::open_or_create(&self.node.dir, &self.node.geometry, stream.primary, stream.slot)?;
        let c = Arc::new(Copy { log, creds: Writers::default() });
        self.copies.insert(stream, c.clone());
        Ok(c)
    }

    /// Writes `data` at `start` of the copy of `stream`, persisted and fenced, and keeps
    /// `creds` for the range.
    pub(crate) fn persist(
        &mut self,
        stream: StreamId,
        start: u64,
        data: &[u8],
        creds: &Arc<Creds>,
    ) -> Result<(), FormatError> {
        let c = self.get(stream)?;
        c.log.write(start, data)?;
        c.creds.note(start, start + data.len() as u64, creds);
        Ok(())
    }

    /// The copies as the status shows them.
    pub(crate) fn status(&self, engine: &linefs_chain::Engine) -> Vec<CopyStatus> {
        let mut v: Vec<CopyStatus> = self
            .copies
            .keys()
            .map(|&s| {
                let c = engine.copy(s);
                CopyStatus {
                    origin: s.primary,
                    slot: s.slot,
                    durable_lsn: c.map_or(0, |c| c.durable.end()),
                    published_lsn: c.map_or(0, |c| c.published.end()),
                }
            })
            .collect();
        v.sort_by_key(|c| (c.origin, c.slot));
        v
    }
}

/// A publication the engine asked for: the copy up to `target`.
pub(crate) struct Job {
    pub(crate) stream: StreamId,
    pub(crate) copy: Arc<Copy>,
    pub(crate) target: u64,
}

/// The `repl-publish` thread: publishes copies in order, reports each published range to
/// the engine thread.
pub(crate) struct Publisher {
    pub(crate) node: Arc<Node>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) report: crossbeam_channel::Sender<Msg>,
    /// What each stream's writers were granted (creates, opens for writing) by the entries
    /// published so far: what they may write whatever the modes say now.
    grants: HashMap<StreamId, HashSet<u64>>,
    /// The highest publication target asked per stream.
    targets: HashMap<StreamId, u64>,
}

impl Publisher {
    pub(crate) fn new(node: Arc<Node>, counters: Arc<Counters>, report: crossbeam_channel::Sender<Msg>) -> Publisher {
        Publisher { node, counters, report, grants: HashMap::new(), targets: HashMap::new() }
    }

    pub(crate) fn run(mut self, jobs: crossbeam_channel::Receiver<Job>) {
        for job in jobs {
            let t = self.targets.entry(job.stream).or_default();
            *t = (*t).max(job.target);
            let target = *t;
            self.publish(job.stream, &job.copy, target);
        }
    }

    /// Publishes the copy of `stream` from its checkpoint towards `target`, range by range
    /// of one writer's credentials.
    fn publish(&mut self, stream: StreamId, copy: &Copy, target: u64) {
        loop {
            let from = match copy.log.log().published_lsn() {
                Ok(l) => l,
                Err(e) => {
                    tracing::error!(%stream, error = %e, "cannot read a replica copy's checkpoint");
                    return;
                }
            };
            if from >= target {
                return;
            }
            let (creds, range_end) = copy.creds.at(from);
            let until = target.min(range_end);
            let grants = self.grants.entry(stream).or_default();
            let mut perms = RemotePerms { creds: creds.as_deref(), grants };
            let (r, batch_end) = self.node.publish_copy(copy.log.log(), until, &mut perms, |b| admit_remote(stream, b));
            match r {
                Ok(p) if p.upto > from => self.published(stream, copy, from, p.upto),
                // Nothing whole to publish yet: the rest of an entry is not durable here.
                Ok(_) => return,
                Err(SlotError::Rejected { lsn, why, published, .. }) => {
                    // Past the batch's last whole entry, and at least past the refused one
                    // (a first entry that does not decode ends the batch before it).
                    let refused_end = copy
                        .log
                        .log()
                        .scan_bounded(from, until, u64::MAX)
                        .ok()
                        .and_then(|scan| scan.entries.iter().find(|e| e.lsn >= lsn).map(|e| e.end))
                        .unwrap_or(0);
                    let skip_to = batch_end.max(published.upto).max(refused_end);
                    if skip_to <= from {
                        tracing::error!(%stream, lsn, reason = %why, "a refused replicated entry cannot be skipped; the copy waits");
                        return;
                    }
                    add(&self.counters.refused_entries, 1);
                    tracing::error!(
                        %stream,
                        lsn,
                        uid = creds.as_ref().map(|c| c.uid),
                        reason = %why,
                        skipped_to = skip_to,
                        "replicated entry refused by this node's admission: it and the rest of its batch are skipped"
                    );
                    if let Err(e) = copy.log.log().set_published_lsn(skip_to) {
                        tracing::error!(%stream, error = %e, "cannot move a replica copy's checkpoint past refused entries");
                        return;
                    }
                    self.published(stream, copy, from, skip_to);
                }
                // Only this thread publishes copies: a checkpoint that moved under the batch
                // is retried with the next job, not in a loop.
                Err(e @ SlotError::Stale { .. }) => {
                    tracing::debug!(%stream, error = %e, "stale replica batch");
                    return;
                }
                Err(e) => {
                    tracing::error!(%stream, error = %e, "publishing a replica copy failed; retried with its next chunk");
                    return;
                }
            }
        }
    }

    fn published(&self, stream: StreamId, copy: &Copy, start: u64, end: u64) {
        copy.creds.trim(end);
        let _ = self.report.send(Msg::Published { stream, start, end });
    }
}

/// The node-level lease admission of a replicated batch of `stream` (its origin's leases):
/// `Err((n, lsn, why))` refuses entry `n` (at `lsn`) and the rest. The hook for the
/// cluster's node-level lease table; until it exists every batch is admitted here and
/// only structure and meaning are checked.
fn admit_remote(stream: StreamId, batch: &Batch) -> Result<(), (usize, u64, String)> {
    let _ = (stream, batch);
    Ok(())
}

/// The permission side of a replicated batch: the primary's client's credentials.
struct RemotePerms<'a> {
    /// None: not known (published before a restart): treated as a client stating callers.
    creds: Option<&'a Creds>,
    grants: &'a mut HashSet<u64>,
}

impl Permissions for RemotePerms<'_> {
    fn caller(&self, stated: Option<&Caller>) -> Result<Caller, String> {
        let stated = stated.map(|c| (c.uid, c.gid, &c.groups[..]));
        match self.creds {
            Some(c) => crate::node::caller::resolve_for(c.trusted, c.uid, c.gid, &c.groups, stated),
            None => crate::node::caller::resolve_for(true, 0, 0, &[], stated),
        }
    }

    fn may_write(&self, ino: u64) -> bool {
        self.grants.contains(&ino)
    }

    fn granted(&mut self, ino: u64) {
        self.grants.insert(ino);
    }

    fn freed(&mut self, ino: u64) {
        self.grants.remove(&ino);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writers_of_ranges_are_merged_found_and_forgotten() {
        let w = Writers::default();
        let a = Arc::new(Creds { uid: 1, ..Creds::default() });
        let b = Arc::new(Creds { uid: 2, ..Creds::default() });
        w.note(0, 100, &a);
        w.note(100, 200, &a);
        w.note(200, 300, &b);
        w.note(400, 500, &a);
        assert_eq!(w.0.lock().len(), 3, "the two adjacent ranges of one writer are one");
        assert_eq!(w.at(150), (Some(a.clone()), 200));
        assert_eq!(w.at(250), (Some(b.clone()), 300));
        assert_eq!(w.at(300), (None, 400), "unknown up to the next known range");
        assert_eq!(w.at(600), (None, u64::MAX));
        assert_eq!(w.at(u64::MAX), (None, u64::MAX));
        w.trim(300);
        assert_eq!(w.at(150), (None, 400));
        assert_eq!(w.at(450), (Some(a), 500));
    }
}
