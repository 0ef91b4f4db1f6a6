//! The membership core: a pure state machine (no I/O, no clock). The driver reads the view
//! znode, then the member znodes, hands both to [`Membership::round`], and carries out the
//! [`Decision`]: deliver a newer view to the node, and/or write the next view by
//! compare-and-set.
//!
//! Single writer by compare-and-set, not by leader election: every member that sees the
//! live members differ from the view computes the same next view and writes it with the
//! view znode's version as the expected version; ZooKeeper lets exactly one such write
//! through per version, the others fail with a version conflict and read again. So the
//! epoch grows by exactly one per published change, and no election (and no window where
//! the elected leader is dead but still elected) is needed. The view is read *before* the
//! members in each round: ZooKeeper orders one session's reads, and whoever wrote the view
//! had seen the membership changes before it, so the members read next are at least as new
//! as the view they will replace — a late reader cannot put back a member the view already
//! dropped (its write would carry a stale version and fail).
//!
//! Chain order: the members of the previous view that are still alive (same node, same
//! incarnation) keep their relative order; newcomers go to the tail in join order (their
//! znodes' sequence). A node that rejoined (new incarnation) is a newcomer: it must recover
//! before it serves as anything but the tail. With one znode per node id expected, a
//! second live znode of the same node id (a restart before the old session expired) is
//! ignored until the old one goes: the lowest sequence wins.

use std::collections::BTreeMap;

use crate::format::{decode_member, decode_view, encode_view, FormatError, MemberEntry, View};

/// What the driver read of the view znode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewRead {
    /// No view znode yet.
    Absent,
    /// Its data and its znode version.
    Present { data: Vec<u8>, version: i32 },
}

/// One member znode as listed: its name (`m-<seq>`) and data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRead {
    pub name: String,
    pub data: Vec<u8>,
}

/// The write a round asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Create the view znode (it was absent); fails if someone else created it first.
    Create { data: Vec<u8> },
    /// Replace it if its version is still `expected_version`.
    Replace { data: Vec<u8>, expected_version: i32 },
}

/// The outcome of a round.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// A view newer than any delivered so far.
    pub deliver: Option<View>,
    /// The next view and how to write it.
    pub write: Option<(View, Write)>,
    /// Member znodes that could not be decoded (skipped, never members).
    pub skipped: Vec<(String, FormatError)>,
}

/// The live members from a listing: decoded, one per node id (lowest sequence wins), in
/// join order. Undecodable entries are returned apart.
pub fn live_members(members: &[MemberRead]) -> (Vec<MemberEntry>, Vec<(String, FormatError)>) {
    let mut by_node: BTreeMap<u32, MemberEntry> = BTreeMap::new();
    let mut skipped = Vec::new();
    for m in members {
        let Some(seq) = crate::format::member_seq(&m.name) else {
            skipped.push((m.name.clone(), FormatError::Invalid { what: "member", why: "name is not m-<sequence>" }));
            continue;
        };
        match decode_member(&m.data) {
            Ok((node, addrs)) => {
                let e = MemberEntry { node, seq, addrs };
                match by_node.get(&node) {
                    Some(old) if old.seq < seq => {}
                    _ => {
                        by_node.insert(node, e);
                    }
                }
            }
            Err(err) => skipped.push((m.name.clone(), err)),
        }
    }
    let mut live: Vec<MemberEntry> = by_node.into_values().collect();
    live.sort_by_key(|m| m.seq);
    (live, skipped)
}

/// The chain that follows `prev` given the live members: survivors keep their order,
/// newcomers follow in join order.
pub fn next_chain(prev: &[MemberEntry], live: &[MemberEntry]) -> Vec<MemberEntry> {
    let mut chain: Vec<MemberEntry> =
        prev.iter().filter_map(|p| live.iter().find(|l| l.node == p.node && l.seq == p.seq).cloned()).collect();
    for l in live {
        if !chain.iter().any(|c| c.node == l.node) {
            chain.push(l.clone());
        }
    }
    chain
}

/// One node's membership state: the newest view delivered to it, and the epoch floor it
/// started from (the epoch its nicfs persisted: views at or below it are never delivered,
/// and a view written by this node is always above it).
#[derive(Debug, Default)]
pub struct Membership {
    delivered: Option<View>,
    floor: u64,
}

impl Membership {
    pub fn new() -> Membership {
        Membership::default()
    }

    /// Starts above `epoch` (a rejoin, or a restart that persisted its last epoch).
    pub fn with_floor(epoch: u64) -> Membership {
        Membership { delivered: None, floor: epoch }
    }

    /// The newest view delivered.
    pub fn delivered(&self) -> Option<&View> {
        self.delivered.as_ref()
    }

    fn delivered_epoch(&self) -> u64 {
        self.delivered.as_ref().map_or(self.floor, |v| v.epoch.max(self.floor))
    }

    /// Note a view as seen (read, or written by us): returns it if it is newer than every
    /// view delivered so far. Views never go backwards.
    pub fn observe(&mut self, view: &View) -> Option<View> {
        if view.epoch > self.delivered_epoch() {
            self.delivered = Some(view.clone());
            Some(view.clone())
        } else {
            None
        }
    }

    /// One round: the view as read, then the members as listed (in that order).
    /// A view znode that cannot be decoded is an error: nothing is written over it.
    pub fn round(&mut self, view: &ViewRead, members: &[MemberRead]) -> Result<Decision, FormatError> {
        let (live, skipped) = live_members(members);
        let mut decision = Decision { skipped, ..Decision::default() };
        let (current, write_as) = match view {
            ViewRead::Absent => (None, None),
            ViewRead::Present { data, version } => (Some(decode_view(data)?), Some(*version)),
        };
        if let Some(v) = &current {
            decision.deliver = self.observe(v);
        }
        // A view older than one delivered means ZooKeeper lost data (a wiped data
        // directory): republish above the newest epoch seen, never below it.
        let read_epoch = current.as_ref().map_or(0, |v| v.epoch);
        let regressed = read_epoch < self.delivered_epoch();
        let base = read_epoch.max(self.delivered_epoch());
        let prev_chain: &[MemberEntry] = current.as_ref().map_or(&[], |v| &v.chain);
        let chain = next_chain(prev_chain, &live);
        if live.is_empty() || (!regressed && current.is_some() && chain == prev_chain) {
            return Ok(decision);
        }
        let next = View { epoch: base + 1, chain };
        let data = encode_view(&next)?;
        let write = match write_as {
            None => Write::Create { data },
            Some(expected_version) => Write::Replace { data, expected_version },
        };
        decision.write = Some((next, write));
        Ok(decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{encode_member, Addrs};
    use proptest::prelude::*;

    fn member(node: u32, seq: u64) -> MemberRead {
        let addrs =
            Addrs { low_latency: format!("127.0.0.1:{}", 7000 + node), bulk: format!("127.0.0.1:{}", 8000 + node) };
        MemberRead { name: format!("m-{seq:010}"), data: encode_member(node, &addrs).unwrap() }
    }

    /// A ZooKeeper stand-in: the view znode with its version.
    #[derive(Default)]
    struct Store {
        view: Option<(Vec<u8>, i32)>,
        history: Vec<View>,
    }

    impl Store {
        fn read(&self) -> ViewRead {
            match &self.view {
                None => ViewRead::Absent,
                Some((d, v)) => ViewRead::Present { data: d.clone(), version: *v },
            }
        }
        fn apply(&mut self, next: View, w: Write) -> bool {
            match (w, &self.view) {
                (Write::Create { data }, None) => self.view = Some((data, 0)),
                (Write::Replace { data, expected_version }, Some((_, v))) if *v == expected_version => {
                    self.view = Some((data, v + 1))
                }
                _ => return false,
            }
            self.history.push(next);
            true
        }
    }

    #[test]
    fn three_join_then_the_middle_leaves() {
        let mut store = Store::default();
        let mut m = Membership::new();
        let mut live = vec![member(1, 0)];
        for step in 0..4 {
            if step == 1 {
                live.push(member(2, 1));
            }
            if step == 2 {
                live.push(member(3, 2));
            }
            if step == 3 {
                live.remove(1);
            }
            let d = m.round(&store.read(), &live).unwrap();
            let (v, w) = d.write.expect("a change is published");
            assert!(store.apply(v.clone(), w));
            assert_eq!(m.observe(&v), Some(v));
            assert!(m.round(&store.read(), &live).unwrap().write.is_none(), "no change, no write");
        }
        let epochs: Vec<u64> = store.history.iter().map(|v| v.epoch).collect();
        assert_eq!(epochs, [1, 2, 3, 4]);
        assert_eq!(store.history[2].nodes(), [1, 2, 3]);
        assert_eq!(store.history[3].nodes(), [1, 3]);
    }

    #[test]
    fn a_rejoined_node_goes_to_the_tail_and_the_lowest_sequence_wins() {
        let prev = live_members(&[member(1, 0), member(2, 1), member(3, 2)]).0;
        let (live, _) = live_members(&[member(1, 5), member(2, 1), member(3, 2), member(2, 9)]);
        let chain = next_chain(&prev, &live);
        assert_eq!(chain.iter().map(|m| (m.node, m.seq)).collect::<Vec<_>>(), [(2, 1), (3, 2), (1, 5)]);
    }

    #[test]
    fn garbage_members_are_skipped_and_a_garbage_view_is_not_overwritten() {
        let mut m = Membership::new();
        let bad = MemberRead { name: "m-0000000003".into(), data: vec![1, 2, 3] };
        let d = m.round(&ViewRead::Absent, &[member(1, 0), bad]).unwrap();
        assert_eq!(d.skipped.len(), 1);
        assert_eq!(d.write.unwrap().0.nodes(), [1]);
        let garbage = ViewRead::Present { data: b"LFZV\x09\x00".to_vec(), version: 4 };
        assert!(m.round(&garbage, &[member(1, 0)]).is_err());
    }

    #[test]
    fn a_floor_from_the_node_record_is_never_undercut() {
        let mut m = Membership::with_floor(7);
        let chain = live_members(&[member(1, 0)]).0;
        let v3 = View { epoch: 3, chain: chain.clone() };
        let d = m.round(&ViewRead::Present { data: encode_view(&v3).unwrap(), version: 2 }, &[member(1, 0)]).unwrap();
        assert!(d.deliver.is_none(), "epoch 3 is below the floor");
        let (next, w) = d.write.unwrap();
        assert_eq!(next.epoch, 8);
        assert!(matches!(w, Write::Replace { expected_version: 2, .. }));
        assert_eq!(m.observe(&next), Some(next));
    }

    #[test]
    fn a_wiped_zookeeper_never_takes_the_epoch_back() {
        let mut m = Membership::new();
        let v9 = View { epoch: 9, chain: live_members(&[member(1, 0)]).0 };
        m.observe(&v9);
        let d = m.round(&ViewRead::Absent, &[member(1, 0)]).unwrap();
        assert_eq!(d.write.unwrap().0.epoch, 10);
        let old = View { epoch: 2, chain: v9.chain.clone() };
        let d = m.round(&ViewRead::Present { data: encode_view(&old).unwrap(), version: 1 }, &[member(1, 0)]).unwrap();
        assert!(d.deliver.is_none());
        assert_eq!(d.write.unwrap().0.epoch, 10);
    }

    proptest! {
        /// Several nodes race with reads of various ages over a changing membership: every
        /// published view has the epoch of the one it replaced plus one, the views a node
        /// delivers only go forward, and once everyone reads fresh state the last view
        /// is the live membership.
        #[test]
        fn racing_writers_publish_each_change_once(
            ops in proptest::collection::vec((0u8..4, 0usize..3, any::<bool>()), 1..60)
        ) {
            let mut store = Store::default();
            let mut nodes = [Membership::new(), Membership::new(), Membership::new()];
            let mut live: Vec<MemberRead> = vec![member(1, 0)];
            let mut next_seq = 1u64;
            let mut delivered: [u64; 3] = [0; 3];
            // A stale read: what a node read some steps ago.
            let mut stale: Option<(ViewRead, Vec<MemberRead>)> = None;
            for (op, who, use_stale) in ops {
                match op {
                    0 => {
                        let node = (next_seq % 5) as u32 + 1;
                        if !live.iter().any(|m| decode_member(&m.data).unwrap().0 == node) {
                            live.push(member(node, next_seq));
                        }
                        next_seq += 1;
                    }
                    1 if live.len() > 1 => { live.remove(next_seq as usize % live.len()); }
                    _ => {}
                }
                let (vr, mr) = match (&stale, use_stale) {
                    (Some(s), true) => s.clone(),
                    _ => (store.read(), live.clone()),
                };
                stale = Some((store.read(), live.clone()));
                let d = nodes[who].round(&vr, &mr).unwrap();
                if let Some(v) = &d.deliver {
                    prop_assert!(v.epoch > delivered[who]);
                    delivered[who] = v.epoch;
                }
                if let Some((v, w)) = d.write {
                    let before = store.history.last().map_or(0, |h| h.epoch);
                    if store.apply(v.clone(), w) {
                        prop_assert_eq!(v.epoch, before + 1);
                        if let Some(n) = nodes[who].observe(&v) { delivered[who] = n.epoch; }
                    }
                }
            }
            // Quiesce: fresh rounds until nobody writes.
            for _ in 0..6 {
                for n in nodes.iter_mut() {
                    let d = n.round(&store.read(), &live).unwrap();
                    if let Some((v, w)) = d.write { store.apply(v, w); }
                }
            }
            let last = store.history.last().unwrap();
            let want: Vec<(u32, u64)> = live_members(&live).0.iter().map(|m| (m.node, m.seq)).collect();
            let mut got: Vec<(u32, u64)> = last.chain.iter().map(|m| (m.node, m.seq)).collect();
            got.sort_by_key(|x| x.1);
            prop_assert_eq!(got, want);
            for w in store.history.windows(2) {
                prop_assert_eq!(w[1].epoch, w[0].epoch + 1);
                prop_assert!(w[0].chain != w[1].chain);
            }
        }
    }
}
