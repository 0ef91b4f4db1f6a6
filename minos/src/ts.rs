//! Logical timestamps and node sets.
//!
//! A timestamp is the pair `<version, node_id>` of the paper (Figure 1(b)). Writes to one
//! record are ordered by it: the higher version is newer; for equal versions the higher node
//! id is newer. A coordinator makes the timestamp of a new client-write from its local
//! `volatileTS`: version + 1, its own node id. Two nodes can pick the same version
//! concurrently; the node id keeps the two timestamps distinct, so a timestamp names exactly
//! one write (`TS_WR` is unique, section III-A).
//!
//! [`Ts::ZERO`] is the timestamp of a record nobody has written (version 0 is never given to
//! a write). The paper's "RDLock free" value `<-1, -1>` is `None` in [`crate::Record`].

use std::fmt;

/// A node of the cluster: `0..nodes`. At most [`NodeSet::MAX_NODES`] nodes.
pub type NodeId = u32;

/// `<version, node_id>`. The derived order compares `version` first, then `node`, which is
/// the paper's order of writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ts {
    pub version: u64,
    pub node: NodeId,
}

impl Ts {
    /// The timestamp of a record no write has reached.
    pub const ZERO: Ts = Ts { version: 0, node: 0 };

    pub const fn new(version: u64, node: NodeId) -> Ts {
        Ts { version, node }
    }

    /// The timestamp a coordinator `node` gives a new client-write to a record whose local
    /// `volatileTS` is `self` (section III-A: read volatileTS, add one, do not update it).
    pub fn next_for(self, node: NodeId) -> Ts {
        Ts { version: self.version + 1, node }
    }
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{},{}>", self.version, self.node)
    }
}

/// A set of nodes as a bit mask: which followers have acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeSet(u64);

impl NodeSet {
    pub const MAX_NODES: u32 = 64;
    pub const EMPTY: NodeSet = NodeSet(0);

    /// Every node of a cluster of `nodes` except `except` (a coordinator's followers).
    pub fn all_but(nodes: u32, except: NodeId) -> NodeSet {
        assert!(nodes <= Self::MAX_NODES, "at most {} nodes", Self::MAX_NODES);
        let all = if nodes == 64 { u64::MAX } else { (1u64 << nodes) - 1 };
        NodeSet(all & !(1u64 << except))
    }

    pub fn insert(&mut self, node: NodeId) {
        self.0 |= 1u64 << node;
    }

    pub fn remove(&mut self, node: NodeId) {
        self.0 &= !(1u64 << node);
    }

    pub fn contains(self, node: NodeId) -> bool {
        self.0 & (1u64 << node) != 0
    }

    /// `self ⊇ other`.
    pub fn covers(self, other: NodeSet) -> bool {
        self.0 & other.0 == other.0
    }

    pub fn is_subset_of(self, other: NodeSet) -> bool {
        other.covers(self)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn len(self) -> u32 {
        self.0.count_ones()
    }

    pub fn iter(self) -> impl Iterator<Item = NodeId> {
        (0..64u32).filter(move |n| self.0 & (1u64 << n) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_version_then_node() {
        assert!(Ts::new(1, 2) < Ts::new(2, 0));
        assert!(Ts::new(2, 0) < Ts::new(2, 1));
        assert!(Ts::ZERO < Ts::new(1, 0));
        assert_eq!(Ts::new(3, 1).next_for(0), Ts::new(4, 0));
    }

    #[test]
    fn node_sets() {
        let f = NodeSet::all_but(3, 1);
        assert_eq!(f.iter().collect::<Vec<_>>(), vec![0, 2]);
        let mut acks = NodeSet::EMPTY;
        acks.insert(0);
        assert!(!acks.covers(f));
        acks.insert(2);
        assert!(acks.covers(f) && acks.is_subset_of(f) && acks.len() == 2);
        assert_eq!(NodeSet::all_but(64, 0).len(), 63);
    }
}
