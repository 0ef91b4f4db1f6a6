//! Admission of replicated chunks at the node level ([`RemoteAdmission::admit_remote`]): the
//! replication driver calls it for every chunk of another node's client log before it
//! publishes it on this node's replica. A peer holds the cluster key, so it can send
//! well-formed chunks; what it may not do is change an inode it has no right to. Every
//! inode an entry of `origin` changes (pm's `Record::changed_inode`: the inode, the
//! directory of a name, the file written; not an OPEN_WRITE) must be
//!
//! * one `origin` holds the node-level write lease of, or
//! * a number of one of `origin`'s inode ranges on which no other node holds a node-level
//!   lease — an inode `origin` makes (its allocator hands out only its own ranges,
//!   [`crate::node::alloc`]), or one of them nobody else has taken since.
//!
//! Checks 2 and 3 of local admission (structure, and meaning with the primary's
//! credentials) stay the replication driver's. The table is fed what this node knows of
//! node-level leases (its [`super::ClusterLeases`] as manager and holder; the origin's
//! lease records replicated before its entries, paper §3.5) and every node's ranges.

use super::{Ino, LeaseId, Mode, NodeId};
use clustermgr::InodeRange;
use linefs_pm::publish::Batch;
use linefs_pm::record::Record;
use linefs_proto::RemoteError;
use std::collections::BTreeMap;

/// What this node knows of node-level leases and inode ranges, for admitting peers' chunks.
#[derive(Debug, Default, Clone)]
pub(crate) struct RemoteAdmission {
    /// Per inode, the nodes holding a node-level lease on it (mode and id).
    leases: BTreeMap<Ino, BTreeMap<NodeId, (Mode, LeaseId)>>,
    /// Each node's inode ranges, sorted.
    ranges: BTreeMap<NodeId, Vec<InodeRange>>,
}

impl RemoteAdmission {
    /// `node` holds `lease` on `ino` in `mode` (replacing what it held there).
    pub(crate) fn granted(&mut self, node: NodeId, ino: Ino, mode: Mode, lease: LeaseId) {
        self.leases.entry(ino).or_default().insert(node, (mode, lease));
    }

    /// `node` handed `lease` on `ino` back (a downgrade: `keep_read`).
    pub(crate) fn released(&mut self, node: NodeId, ino: Ino, lease: LeaseId, keep_read: bool) {
        let Some(holders) = self.leases.get_mut(&ino) else { return };
        if holders.get(&node).is_some_and(|&(_, l)| l == lease) {
            if keep_read {
                holders.insert(node, (Mode::Read, lease));
            } else {
                holders.remove(&node);
            }
        }
        if holders.is_empty() {
            self.leases.remove(&ino);
        }
    }

    /// clustermgr granted `node` the numbers of `r`.
    pub(crate) fn add_range(&mut self, node: NodeId, r: InodeRange) {
        let v = self.ranges.entry(node).or_default();
        if !v.contains(&r) {
            v.push(r);
            v.sort();
        }
    }

    fn in_ranges(&self, node: NodeId, ino: Ino) -> bool {
        self.ranges.get(&node).is_some_and(|v| {
            let i = v.partition_point(|r| r.end <= ino);
            v.get(i).is_some_and(|r| r.contains(ino))
        })
    }

    /// Whether `origin` may change `ino`; the reason when not.
    pub(crate) fn may_change(&self, origin: NodeId, ino: Ino) -> Result<(), String> {
        let holders = self.leases.get(&ino);
        if holders.and_then(|h| h.get(&origin)).is_some_and(|&(m, _)| m == Mode::Write) {
            return Ok(());
        }
        if let Some((&other, &(mode, _))) = holders.and_then(|h| h.iter().find(|(&n, _)| n != origin)) {
            return Err(format!("inode {ino} is {mode:?}-leased by node {other}, not by node {origin}"));
        }
        if self.in_ranges(origin, ino) {
            return Ok(());
        }
        Err(format!("node {origin} holds no write lease on inode {ino}, which is not in its inode ranges"))
    }

    /// How many of `batch`'s entries, from the first, change only inodes `origin` may
    /// change; the LSN of the next one and why it is refused.
    pub(crate) fn check(&self, origin: NodeId, batch: &Batch) -> Result<(), (u64, String)> {
        for (loc, records) in &batch.entries {
            for ino in records.iter().filter_map(Record::changed_inode) {
                self.may_change(origin, ino).map_err(|why| (loc.lsn, why))?;
            }
        }
        Ok(())
    }

    /// The agreed hook (COMMON.md): a replicated batch of `origin`'s is admitted whole, or
    /// refused (`NotPermitted`) — [`RemoteAdmission::check`] says where and why.
    pub(crate) fn admit_remote(&self, origin: NodeId, batch: &Batch) -> Result<(), RemoteError> {
        self.check(origin, batch).map_err(|(lsn, why)| {
            tracing::warn!(origin, lsn, %why, "replicated entry refused: not covered by the origin's node-level leases");
            RemoteError::NotPermitted
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use linefs_pm::oplog::EntryLoc;
    use linefs_pm::record::InodeImage;

    fn batch(entries: Vec<Vec<Record>>) -> Batch {
        let mut b = Batch::new(0, 0);
        for (i, records) in entries.into_iter().enumerate() {
            let lsn = 100 * i as u64;
            let loc = EntryLoc { lsn, end: lsn + 100, payload_off: 0, payload_len: 0 };
            b.entries.push((loc, records));
            b.callers.push(None);
        }
        b
    }

    fn write(ino: u64) -> Record {
        Record::Write { ino, off: 0, len: 1, data_off: 0 }
    }

    fn create(ino: u64, dir: u64) -> Vec<Record> {
        let img = InodeImage { ino, mode: 0o100644, nlink: 1, ..InodeImage::default() };
        vec![Record::Inode { fresh: true, img }, Record::Dirent { dir, ino, dtype: 8, name: b"f".to_vec() }]
    }

    #[test]
    fn a_batch_changing_an_inode_its_origin_does_not_hold_is_refused() {
        let mut a = RemoteAdmission::default();
        a.add_range(0, InodeRange { start: 100, end: 200 });
        a.add_range(1, InodeRange { start: 200, end: 300 });
        a.granted(0, 1, Mode::Write, 7); // node 0 writes the root directory
                                         // Node 0 makes inode 150 (its range) in the root: admitted.
        assert_eq!(a.admit_remote(0, &batch(vec![create(150, 1), vec![write(150)]])), Ok(()));
        // Node 1 makes 250 in the root it does not hold: refused at that entry.
        let b = batch(vec![vec![write(250)], create(250, 1)]);
        assert_eq!(a.admit_remote(1, &b), Err(RemoteError::NotPermitted));
        let (lsn, why) = a.check(1, &b).unwrap_err();
        assert_eq!(lsn, 100);
        assert!(why.contains("inode 1 is Write-leased by node 0"), "{why}");
        // A number of another node's range, or of nobody's, is refused.
        assert!(a.check(1, &batch(vec![vec![write(150)]])).unwrap_err().1.contains("not in its inode ranges"));
        assert!(a.check(0, &batch(vec![vec![write(5000)]])).is_err());
        // A number of origin's range another node has been leased is not origin's to change.
        a.granted(1, 160, Mode::Read, 9);
        assert!(a.check(0, &batch(vec![vec![write(160)]])).unwrap_err().1.contains("Read-leased by node 1"));
        // Leases move: once 0 hands the root back and 1 is granted it, 1's entry is admitted
        // and 0's refused.
        a.released(0, 1, 7, false);
        a.granted(1, 1, Mode::Write, 8);
        assert_eq!(a.admit_remote(1, &batch(vec![create(250, 1)])), Ok(()));
        assert_eq!(a.admit_remote(0, &batch(vec![create(151, 1)])), Err(RemoteError::NotPermitted));
        // A downgrade keeps a read lease, which does not allow changes.
        a.released(1, 1, 8, true);
        assert!(a.check(1, &batch(vec![vec![write(1)]])).is_err());
        // An OPEN_WRITE changes nothing.
        assert_eq!(a.admit_remote(0, &batch(vec![vec![Record::OpenWrite { ino: 4000 }]])), Ok(()));
        // A stale release (another id) changes nothing.
        a.released(1, 160, 1, false);
        assert!(a.check(0, &batch(vec![vec![write(160)]])).is_err());
    }
}
