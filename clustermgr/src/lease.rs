//! Root-lease delegation (paper §3.4–3.5): lease management is rooted in the cluster
//! manager and delegated, subtree by subtree, to nicfs lease managers. Each delegated
//! subtree has one znode naming its owner (node and incarnation) and the epoch it was
//! granted in. The first member to ask for an undelegated subtree claims it (create: one
//! wins); a delegation whose owner is no longer in the view is taken over by the member
//! asking, by compare-and-set, so a failed nicfs's leases expire with it and a live one
//! takes over its lease management. Pure: the driver reads and writes.

use crate::format::{decode_delegation, encode_delegation, Delegation, FormatError, MemberEntry, View};

/// What to do about one subtree's delegation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Delegated to a member of the view (maybe the asker).
    Owned(Delegation),
    /// Not delegated yet: create the znode with this data.
    Claim { record: Delegation, data: Vec<u8> },
    /// Owned by a node gone from the view: replace if the version is still this one.
    TakeOver { record: Delegation, data: Vec<u8>, expected_version: i32 },
    /// Granted in a view newer than the asker's: wait for that view, then ask again.
    Stale { granted_epoch: u64 },
    /// The asker is not in its own view (it cannot own anything).
    NotMember,
}

/// Decide about `subtree` given its znode (data and version) if any, the asker's view and
/// the asker.
pub fn step(existing: Option<(&[u8], i32)>, subtree: u64, view: &View, me: &MemberEntry) -> Result<Step, FormatError> {
    let mine = Delegation { subtree, owner: me.node, owner_seq: me.seq, epoch: view.epoch };
    let in_view = view.contains(me.node, me.seq);
    match existing {
        None if in_view => Ok(Step::Claim { record: mine, data: encode_delegation(&mine) }),
        None => Ok(Step::NotMember),
        Some((data, version)) => {
            let d = decode_delegation(data)?;
            if d.subtree != subtree {
                return Err(FormatError::Invalid { what: "delegation", why: "subtree differs from its znode name" });
            }
            if view.contains(d.owner, d.owner_seq) {
                Ok(Step::Owned(d))
            } else if d.epoch > view.epoch {
                Ok(Step::Stale { granted_epoch: d.epoch })
            } else if !in_view {
                Ok(Step::NotMember)
            } else {
                Ok(Step::TakeOver { record: mine, data: encode_delegation(&mine), expected_version: version })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::Addrs;

    fn m(node: u32, seq: u64) -> MemberEntry {
        MemberEntry { node, seq, addrs: Addrs { low_latency: "a".into(), bulk: "b".into() } }
    }

    #[test]
    fn claim_own_stale_and_takeover() {
        let v = View { epoch: 4, chain: vec![m(1, 0), m(2, 1)] };
        let Step::Claim { record, data } = step(None, 1, &v, &m(2, 1)).unwrap() else { panic!("claim") };
        assert_eq!((record.owner, record.epoch), (2, 4));
        assert_eq!(step(Some((&data, 0)), 1, &v, &m(1, 0)).unwrap(), Step::Owned(record));
        // Node 2 died: epoch 5 without it; node 1 takes over at the version it read.
        let v5 = View { epoch: 5, chain: vec![m(1, 0)] };
        let s = step(Some((&data, 3)), 1, &v5, &m(1, 0)).unwrap();
        assert!(matches!(s, Step::TakeOver { expected_version: 3, record: Delegation { owner: 1, epoch: 5, .. }, .. }));
        // An asker whose view predates the grant waits.
        let newer = encode_delegation(&Delegation { subtree: 1, owner: 3, owner_seq: 7, epoch: 6 });
        assert_eq!(step(Some((&newer, 0)), 1, &v5, &m(1, 0)).unwrap(), Step::Stale { granted_epoch: 6 });
        assert_eq!(step(None, 1, &v5, &m(2, 1)).unwrap(), Step::NotMember);
        assert!(step(Some((&data, 0)), 9, &v, &m(1, 0)).is_err());
    }
}
