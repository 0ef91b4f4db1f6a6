//! Recovery of a node from PM alone: load the public area, re-publish the committed suffix
//! of *every* log slot after its checkpoint, free orphans, check that every structure torn
//! by the crash was rewritten, and return the recovered public area with what it holds.
//!
//! A crash in the middle of a publication batch leaves the public area *ahead* of that
//! slot's checkpoint: a later entry of the batch may already have freed an inode (or freed
//! it and created another file in its place) that an earlier entry of the replayed suffix
//! still writes to. Replay therefore validates such *unsettled* inodes — those the suffixes
//! free or create — without holding their current allocation or type against an entry,
//! and skips a record the public area has overtaken ([`PublicArea::apply_replayed`]): a
//! later record of the suffix frees or recreates that inode again, and a block freed in the
//! batch is not reused before the checkpoint, so the replay converges. Everything else is
//! validated as in normal publication; an invalid entry (a bug or a forged log) stops the
//! recovery before anything of it changes.
//!
//! Slots are replayed one after another. Publication runs one batch at a time for the whole
//! node, so at most one slot can have been caught in the middle of a batch, and the entries
//! of different slots that are still unpublished change inodes that only their own writer
//! held (leases hand an inode over only after its holder's updates are published).
//!
//! **Replica copies.** A node of a cluster also holds copies of other nodes' client logs
//! ([`crate::replica`], [`NodePm::replicas`]), published into its own public area from the
//! copy as its own logs are. Recovery re-publishes each copy's committed suffix after its
//! checkpoint exactly as a slot's, after the node's own slots, each entry admitted by
//! [`RecoveryPolicy::admit_replica`] (a refused entry drops the copy's suffix from there, as
//! for a slot) and validated structurally, and from the LSN
//! [`RecoveryPolicy::judge_replica`] names on judged by meaning as a slot's are (by
//! default never: a replica that keeps no durable record of the writers' credentials of
//! what it persisted but had not yet published has nothing to judge them by). The one-batch-at-a-time argument
//! above holds if the node's publisher publishes copies' batches under the same one-batch
//! rule as its own slots'. Inode numbers of different origins never collide (the cluster
//! hands out disjoint ranges); that is not checked here.
//!
//! Orphans — inodes with no name left, unlinked while open — are freed once nobody can hold
//! them any more, which at recovery is always (no client is attached yet).

use crate::batch::Batch;
use crate::layout::{FormatError, Geometry};
use crate::node::NodePm;
use crate::oplog::EntryLoc;
use crate::oplog::{LogSlot, ScanStop};
use crate::public::{Loaded, Permissions, PublicArea, PublishError};
use crate::record::{decode_entry, Caller, Record, ROOT_INO};
use crate::replica::ReplicaLog;
use std::collections::HashSet;

/// What recovery did to one slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRecovery {
    pub slot: u32,
    /// The checkpoint after recovery (durable): where the slot's writer appends next.
    pub published: u64,
    /// Committed entries that were re-published.
    pub replayed: u64,
    /// How the scan of the slot ended (a torn entry is normal after a crash).
    pub stop: ScanStop,
}

/// What recovery did to one replica copy ([`crate::replica`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecovery {
    /// The node whose log it copies, and the slot there.
    pub origin: u32,
    pub slot: u32,
    /// The copy's checkpoint after recovery (durable).
    pub published: u64,
    /// Committed entries that were re-published.
    pub replayed: u64,
    /// How the scan of the copy ended: its end is what the copy holds durable.
    pub stop: ScanStop,
    /// The end of the copy's committed log (what it holds durable).
    pub end: u64,
}

/// A recovered node.
pub struct Recovered {
    pub geometry: Geometry,
    pub area: PublicArea,
    /// Every live inode and directory entry after recovery.
    pub loaded: Loaded,
    /// The node's own slots, by slot index.
    pub slots: Vec<SlotRecovery>,
    /// The node's replica copies, in [`NodePm::replicas`]'s order.
    pub replicas: Vec<ReplicaRecovery>,
    pub orphans_freed: u64,
}

impl Recovered {
    /// Entries re-published over all slots and replica copies.
    pub fn replayed(&self) -> u64 {
        self.slots.iter().map(|s| s.replayed).sum::<u64>() + self.replicas.iter().map(|r| r.replayed).sum::<u64>()
    }
}

/// Why recovery failed.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("log slot {slot} holds an invalid entry at lsn {lsn} ({why}); refusing to recover past it")]
    InvalidEntry { slot: u32, lsn: u64, why: String },
    #[error("re-publishing log slot {slot}: {source}")]
    Publish {
        slot: u32,
        #[source]
        source: PublishError,
    },
    #[error("the copy of node {origin}'s log slot {slot} holds an invalid entry at lsn {lsn} ({why}); refusing to recover past it")]
    InvalidReplicaEntry { origin: u32, slot: u32, lsn: u64, why: String },
    #[error("re-publishing the copy of node {origin}'s log slot {slot}: {source}")]
    ReplicaPublish {
        origin: u32,
        slot: u32,
        #[source]
        source: PublishError,
    },
}

/// A log recovery replays: one of the node's own slots, or a replica copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Own(u32),
    Replica { origin: u32, slot: u32 },
}

impl Source {
    fn invalid(self, lsn: u64, why: String) -> RecoveryError {
        match self {
            Source::Own(slot) => RecoveryError::InvalidEntry { slot, lsn, why },
            Source::Replica { origin, slot } => RecoveryError::InvalidReplicaEntry { origin, slot, lsn, why },
        }
    }

    fn publish(self, source: PublishError) -> RecoveryError {
        match self {
            Source::Own(slot) => RecoveryError::Publish { slot, source },
            Source::Replica { origin, slot } => RecoveryError::ReplicaPublish { origin, slot, source },
        }
    }

    /// Asks `policy` whether the entry may be replayed at all.
    fn admit(self, policy: &mut dyn RecoveryPolicy, lsn: u64, records: &[Record]) -> Result<(), String> {
        match self {
            Source::Own(slot) => policy.admit(slot, lsn, records),
            Source::Replica { origin, slot } => policy.admit_replica(origin, slot, lsn, records),
        }
    }
}

/// Whether a slot's entry (slot, LSN, records) may be replayed; why not.
pub type Admit<'a> = dyn FnMut(u32, u64, &[Record]) -> Result<(), String> + 'a;

/// How a publisher that does not trust its writers has recovery judge their suffixes.
pub trait RecoveryPolicy {
    /// Whether `slot`'s entry at `lsn` may be replayed at all (a publisher checks it by the
    /// write leases it recorded); why not. Asked of every entry of every suffix first.
    fn admit(&mut self, slot: u32, lsn: u64, records: &[Record]) -> Result<(), String>;
    /// How `slot`'s entries are judged by meaning: None, not at all (the lease rule only);
    /// else the LSN from which its entries were never judged nor applied before the crash
    /// (those below it were, and are replayed as they stand: the public area may be ahead
    /// for them), and the session's side of the permission checks for the rest
    /// ([`PublicArea::check_permissions`], against the state recovery has built so far).
    fn judge(&mut self, slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)>;
    /// Whether the entry at `lsn` of the node's copy of node `origin`'s slot `slot` may be
    /// replayed ([`crate::replica`]); why not. Asked of every entry of every copy's suffix.
    /// By default every entry is admitted (each is still validated structurally).
    fn admit_replica(&mut self, origin: u32, slot: u32, lsn: u64, records: &[Record]) -> Result<(), String> {
        let _ = (origin, slot, lsn, records);
        Ok(())
    }
    /// How the entries of the node's copy of node `origin`'s slot `slot` are judged by
    /// meaning, as [`RecoveryPolicy::judge`] says for a slot: None (the default), not at
    /// all; else the LSN from which they were never judged nor applied, and the permission
    /// checks for the writer's credentials.
    fn judge_replica(&mut self, origin: u32, slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)> {
        let _ = (origin, slot);
        None
    }
}

impl Source {
    /// How `policy` judges this log's entries by meaning.
    fn judge(self, policy: &mut dyn RecoveryPolicy) -> Option<(u64, Box<dyn Permissions + '_>)> {
        match self {
            Source::Own(slot) => policy.judge(slot),
            Source::Replica { origin, slot } => policy.judge_replica(origin, slot),
        }
    }
}

/// The lease rule alone (an [`Admit`]), judging nothing by meaning.
struct LeasesOnly<'a, 'b>(&'b mut Admit<'a>);

impl RecoveryPolicy for LeasesOnly<'_, '_> {
    fn admit(&mut self, slot: u32, lsn: u64, records: &[Record]) -> Result<(), String> {
        (self.0)(slot, lsn, records)
    }

    fn judge(&mut self, _slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)> {
        None
    }
}

/// Recover `node`.
pub fn recover(node: &NodePm) -> Result<Recovered, RecoveryError> {
    recover_with(node, &mut |_, _, _| Ok(()))
}

/// Recover `node`, replaying only the entries `admit` admits (slot, LSN, records): a
/// publisher that does not trust its writers checks each by the leases it recorded. A slot's
/// replay stops at the first entry refused, and that entry and everything its writer
/// committed after it are dropped (the checkpoint moves past them), as nicfs drops the
/// refused suffix of a session that failed.
pub fn recover_with(node: &NodePm, admit: &mut Admit<'_>) -> Result<Recovered, RecoveryError> {
    recover_judged(node, &mut LeasesOnly(admit))
}

/// [`recover_with`], and the entries of a slot at or past the LSN `policy` judges it from
/// ([`RecoveryPolicy::judge`]) are judged as publication judges them — structure, then
/// permissions by meaning, each against the state the replay has built so far — before
/// they are replayed. Such an entry that is refused (or does not hold together) is dropped
/// with the rest of its slot's suffix, like a lease refusal; it never stops the recovery.
pub fn recover_judged(node: &NodePm, policy: &mut dyn RecoveryPolicy) -> Result<Recovered, RecoveryError> {
    let geo = node.geometry;
    let (mut area, loaded) = PublicArea::load(node.public.clone(), geo)?;
    let own: Vec<LogSlot> =
        node.logs.iter().enumerate().map(|(s, r)| LogSlot::new(r.clone(), &geo, s as u32)).collect();
    // The node's own slots, then its replica copies.
    let logs: Vec<(Source, &LogSlot)> = own
        .iter()
        .map(|l| (Source::Own(l.slot()), l))
        .chain(
            node.replicas
                .iter()
                .map(|r: &ReplicaLog| (Source::Replica { origin: r.origin(), slot: r.slot() }, r.log())),
        )
        .collect();

    // Every slot's committed suffix, decoded.
    let mut suffixes = Vec::new();
    for &(src, log) in &logs {
        let from = log.published_lsn()?;
        let mut decoded = Vec::new();
        let scan = log.scan_with(from, u64::MAX, u64::MAX, |loc, payload| {
            decoded.push((*loc, decode_entry(payload, loc.payload_off)))
        })?;
        let mut entries = Vec::new();
        let mut stop = scan.stop.clone();
        let mut drop_to = None;
        for (loc, decoded) in decoded {
            match decoded {
                Ok((caller, r)) => {
                    if let Err(why) = src.admit(policy, loc.lsn, &r) {
                        tracing::error!(?src, lsn = loc.lsn, %why, "log entry refused at recovery: it and what follows are dropped");
                        stop = ScanStop::Invalid(format!("entry at lsn {} refused: {why}", loc.lsn));
                        drop_to = Some(scan.end);
                        break;
                    }
                    entries.push((loc, caller, r))
                }
                Err(e) => {
                    tracing::error!(?src, lsn = loc.lsn, error = %e, "malformed log entry: the log ends here");
                    stop = ScanStop::Invalid(format!("entry at lsn {}: {e}", loc.lsn));
                    break;
                }
            }
        }
        suffixes.push(Suffix { from, entries, stop, drop_to, end: scan.end });
    }
    // Where each slot's entries start to be judged (u64::MAX: never).
    let judged_from: Vec<u64> = logs.iter().map(|(src, _)| src.judge(policy).map_or(u64::MAX, |(a, _)| a)).collect();
    // The inodes the public area may be ahead on: those the entries applied before the crash
    // free or create. An entry to be judged was never applied, so its records — possibly a
    // forger's — weaken no validation.
    let unsettled: HashSet<u64> = suffixes
        .iter()
        .zip(&judged_from)
        .flat_map(|(s, &judged)| s.entries.iter().filter(move |(loc, _, _)| loc.lsn < judged))
        .flat_map(|(_, _, recs)| recs.iter())
        .filter_map(|r| match r {
            Record::FreeInode { ino } => Some(*ino),
            Record::Inode { fresh: true, img } => Some(img.ino),
            _ => None,
        })
        .collect();
    let settled = HashSet::new();

    let mut slots = Vec::new();
    let mut replicas = Vec::new();
    for (&(src, log), suffix) in logs.iter().zip(suffixes) {
        let slot = log.slot();
        let Suffix { from, entries, mut stop, mut drop_to, end } = suffix;
        let mut judge = src.judge(policy);
        let mut upto = from;
        let mut replayed = 0u64;
        for (loc, caller, records) in &entries {
            let judged = judge.as_ref().is_some_and(|(a, _)| loc.lsn >= *a);
            let unsettled = if judged { &settled } else { &unsettled };
            // Validate the whole entry first: it is published entirely or not at all.
            let verdict = area.validate_with(records, unsettled, log.region()).map_err(|e| e.to_string());
            let verdict = match (&mut judge, verdict) {
                (Some((_, perms)), Ok(())) if judged => {
                    let batch = Batch {
                        slot,
                        from: loc.lsn,
                        entries: vec![(*loc, records.clone())],
                        callers: vec![caller.clone()],
                        malformed: None,
                    };
                    match area.check_permissions(&batch, 1, perms.as_mut()) {
                        (_, Some(why)) => Err(why),
                        (_, None) => Ok(()),
                    }
                }
                (Some((_, perms)), Ok(())) => {
                    // Judged before the crash: what it granted holds for what follows.
                    note_grants(perms.as_mut(), records);
                    Ok(())
                }
                (_, v) => v,
            };
            if let Err(why) = verdict {
                if !judged {
                    tracing::error!(?src, lsn = loc.lsn, %why, "invalid log entry; refusing to recover");
                    return Err(src.invalid(loc.lsn, why));
                }
                tracing::error!(?src, lsn = loc.lsn, %why, "log entry refused at recovery (judged by meaning): it and what follows are dropped");
                stop = ScanStop::Invalid(format!("entry at lsn {} refused: {why}", loc.lsn));
                drop_to = Some(end);
                break;
            }
            for r in records {
                area.apply_replayed(r, unsettled, log.region()).map_err(|source| src.publish(source))?;
            }
            upto = loc.end;
            replayed += 1;
        }
        drop(judge);
        if upto > from {
            area.fence();
            log.set_published_lsn(upto)?;
            area.checkpoint_done();
        }
        if let Some(end) = drop_to {
            log.set_published_lsn(end)?;
            upto = end;
        }
        if let ScanStop::Invalid(why) = &stop {
            tracing::info!(?src, %why, "log ends at a torn or corrupt entry (expected after a crash)");
        }
        match src {
            Source::Own(slot) => slots.push(SlotRecovery { slot, published: upto, replayed, stop }),
            Source::Replica { origin, slot } => {
                replicas.push(ReplicaRecovery { origin, slot, published: upto, replayed, stop, end })
            }
        }
    }

    let replayed: u64 =
        slots.iter().map(|s| s.replayed).sum::<u64>() + replicas.iter().map(|r| r.replayed).sum::<u64>();
    let (mut area, mut loaded) =
        if replayed > 0 { PublicArea::load(node.public.clone(), geo)? } else { (area, loaded) };
    let orphans: Vec<u64> =
        loaded.inodes.values().filter(|i| i.img.nlink == 0 && i.img.ino != ROOT_INO).map(|i| i.img.ino).collect();
    if !orphans.is_empty() {
        for &ino in &orphans {
            area.apply(&Record::FreeInode { ino }, &node.public)
                .map_err(|source| RecoveryError::Publish { slot: 0, source })?;
        }
        area.fence();
        area.checkpoint_done();
    }
    // Torn structures must have been rewritten by the replay (or freed as orphans).
    area.check_suspects()?;
    if !orphans.is_empty() {
        (area, loaded) = PublicArea::load(node.public.clone(), geo)?;
    }
    Ok(Recovered { geometry: geo, area, loaded, slots, replicas, orphans_freed: orphans.len() as u64 })
}

/// One slot's committed suffix as recovery found it.
struct Suffix {
    from: u64,
    /// The entries admitted by [`RecoveryPolicy::admit`], in log order, with their CALLER.
    entries: Vec<(EntryLoc, Option<Caller>, Vec<Record>)>,
    stop: ScanStop,
    /// Where the slot's checkpoint moves when its suffix is cut by a refusal.
    drop_to: Option<u64>,
    /// The end of the committed log.
    end: u64,
}

/// What an entry judged before the crash granted or ended, told to `perms` (as
/// [`PublicArea::check_permissions`] tells it of the entries it admits).
fn note_grants(perms: &mut dyn Permissions, records: &[Record]) {
    for r in records {
        match r {
            Record::Inode { fresh: true, img } => perms.granted(img.ino),
            Record::OpenWrite { ino } => perms.granted(*ino),
            Record::FreeInode { ino } => perms.freed(*ino),
            _ => {}
        }
    }
}
