//! The nouns of chain replication: nodes, log positions, streams, the cluster view, and the
//! byte slices that travel in chunks.
//!
//! A *stream* is one client log of one node (its primary), named by the primary's node id
//! and the log slot: `StreamId { primary, slot }`. Positions in a stream are LSNs, byte
//! offsets from the start of the log; a range `[start, end)` of a stream names the same
//! bytes on every node that holds it, because only the primary appends and a replica's copy
//! is always a prefix of the primary's log.
//!
//! The *view* is what the cluster manager decides: an epoch and the ordered list of live
//! nodes. The chain of a stream is derived from it ([`View::chain`]): the primary first, then
//! the nodes that follow it in the view's order (wrapping around), as many as the
//! replication factor asks. Every node computes the same chain from the same view, so a
//! message's epoch is enough to know that its sender and receiver agree on the chain.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A node of the cluster (its nicfs daemon).
pub type NodeId = u32;

/// A byte position in a stream's log.
pub type Lsn = u64;

/// A cluster epoch; 0 means "no view yet" and is never a real view's.
pub type Epoch = u64;

/// An fsync request, numbered by the driver; its completion names it.
pub type OpId = u64;

/// One client log of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub primary: NodeId,
    pub slot: u32,
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.primary, self.slot)
    }
}

/// The cluster manager's view: an epoch and the live nodes, in chain order.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct View {
    pub epoch: Epoch,
    pub nodes: Vec<NodeId>,
}

impl View {
    pub fn contains(&self, node: NodeId) -> bool {
        self.nodes.contains(&node)
    }

    /// The chain of `stream`: its primary, then up to `replicas` nodes following the primary
    /// in the view's order (wrapping around). Empty when the primary is not in the view.
    pub fn chain(&self, stream: StreamId, replicas: usize) -> Vec<NodeId> {
        let Some(at) = self.nodes.iter().position(|&n| n == stream.primary) else { return vec![] };
        let len = self.nodes.len().min(replicas + 1);
        (0..len).map(|i| self.nodes[(at + i) % self.nodes.len()]).collect()
    }
}

/// An immutable byte slice shared between a received chunk, its forward and its persist
/// (no copy): an `Arc` of the buffer and a window of it. Compared, ordered and hashed by
/// content.
#[derive(Clone)]
pub struct Data {
    buf: Arc<[u8]>,
    start: usize,
    end: usize,
}

impl Data {
    pub fn new(bytes: impl Into<Arc<[u8]>>) -> Data {
        let buf = bytes.into();
        let end = buf.len();
        Data { buf, start: 0, end }
    }

    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The bytes `from..to` of this slice (relative offsets), sharing the buffer. Bounds are
    /// clamped to the slice, so a caller's arithmetic error yields less data, never a panic.
    pub fn slice(&self, from: usize, to: usize) -> Data {
        let len = self.len();
        let (from, to) = (from.min(len), to.min(len));
        Data { buf: self.buf.clone(), start: self.start + from, end: self.start + to.max(from) }
    }
}

impl PartialEq for Data {
    fn eq(&self, other: &Data) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Data {}

impl PartialOrd for Data {
    fn partial_cmp(&self, other: &Data) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Data {
    fn cmp(&self, other: &Data) -> std::cmp::Ordering {
        self.as_slice().cmp(other.as_slice())
    }
}

impl Hash for Data {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for Data {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_rotates_from_the_primary_and_wraps() {
        let v = View { epoch: 3, nodes: vec![4, 1, 7, 2] };
        assert_eq!(v.chain(StreamId { primary: 7, slot: 0 }, 2), vec![7, 2, 4]);
        assert_eq!(v.chain(StreamId { primary: 4, slot: 0 }, 9), vec![4, 1, 7, 2]);
        assert_eq!(v.chain(StreamId { primary: 5, slot: 0 }, 2), Vec::<NodeId>::new());
    }

    #[test]
    fn data_slices_share_and_clamp() {
        let d = Data::new(vec![1u8, 2, 3, 4, 5]);
        let s = d.slice(1, 4);
        assert_eq!(s.as_slice(), &[2, 3, 4]);
        assert_eq!(s.slice(1, 10).as_slice(), &[3, 4]);
        assert_eq!(s.slice(5, 2).len(), 0);
        assert_eq!(Data::new(vec![3u8, 4]), s.slice(1, 3));
    }
}
