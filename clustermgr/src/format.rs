//! The data of every znode clustermgr writes, and the paths they live at. Explicit
//! little-endian layouts, each starting with a magic and a version (this module owns the
//! byte tables; the crate docs and docs/ARCHITECTURE.md repeat them).
//!
//! Every decoder takes untrusted bytes (anything may write to ZooKeeper) and answers a
//! [`FormatError`], never a panic.

use linefs_bytes::{put_u32, put_u64, Reader, Truncated};

/// Layout version of every record below. Bump it when a layout changes.
pub const FORMAT_VERSION: u16 = 1;

/// `"LFZM"`: a member record.
pub const MEMBER_MAGIC: u32 = u32::from_le_bytes(*b"LFZM");
/// `"LFZV"`: the view.
pub const VIEW_MAGIC: u32 = u32::from_le_bytes(*b"LFZV");
/// `"LFZI"`: the inode-number counter.
pub const COUNTER_MAGIC: u32 = u32::from_le_bytes(*b"LFZI");
/// `"LFZL"`: a root-lease delegation.
pub const DELEGATION_MAGIC: u32 = u32::from_le_bytes(*b"LFZL");
/// Magic of an inode range's owner record.
pub const RANGE_MAGIC: u32 = u32::from_le_bytes(*b"LFZR");

/// The longest address a record carries (bytes of UTF-8).
pub const MAX_ADDR: usize = 255;
/// The most members a view carries.
pub const MAX_MEMBERS: usize = 1024;

/// A cluster node's id (nicfs's node id).
pub type NodeId = u32;

/// Why bytes read from a znode were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{0}")]
    Truncated(#[from] Truncated),
    #[error("{what}: bad magic {found:#010x}")]
    Magic { what: &'static str, found: u32 },
    #[error("{what}: layout version {found} (this build reads {FORMAT_VERSION})")]
    Version { what: &'static str, found: u16 },
    #[error("{what}: {why}")]
    Invalid { what: &'static str, why: &'static str },
}

/// The znode paths under one cluster's root (for example `/linefs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    pub root: String,
}

impl Paths {
    pub fn new(root: &str) -> Paths {
        Paths { root: root.trim_end_matches('/').to_string() }
    }
    /// Parent of the members' ephemeral sequential znodes.
    pub fn members(&self) -> String {
        format!("{}/members", self.root)
    }
    /// The prefix a member creates (ZooKeeper appends 10 decimal digits).
    pub fn member_prefix(&self) -> String {
        format!("{}/members/m-", self.root)
    }
    pub fn view(&self) -> String {
        format!("{}/view", self.root)
    }
    pub fn inodes(&self) -> String {
        format!("{}/inodes", self.root)
    }
    pub fn leases(&self) -> String {
        format!("{}/leases", self.root)
    }
    /// The delegation of the subtree rooted at `ino`: 16 lowercase hex digits.
    pub fn lease(&self, ino: u64) -> String {
        format!("{}/leases/{ino:016x}", self.root)
    }
    /// Parent of the inode ranges' owner records.
    pub fn inode_ranges(&self) -> String {
        format!("{}/inode-ranges", self.root)
    }
    /// The owner record of the range starting at `start`: 16 lowercase hex digits.
    pub fn inode_range(&self, start: u64) -> String {
        format!("{}/inode-ranges/{start:016x}", self.root)
    }
}

/// The sequence number of a member znode's name (`m-0000000042` → 42).
pub fn member_seq(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("m-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Where a member is reached: the two connection classes between nicfs daemons.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addrs {
    /// Low-latency class (fsync, leases).
    pub low_latency: String,
    /// Bulk class (chunks).
    pub bulk: String,
}

/// One member: its node id, its incarnation (the sequence number of its znode, new at every
/// join) and its addresses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MemberEntry {
    pub node: NodeId,
    pub seq: u64,
    pub addrs: Addrs,
}

fn header(out: &mut Vec<u8>, magic: u32) {
    put_u32(out, magic);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
}

fn check_header(r: &mut Reader<'_>, what: &'static str, magic: u32) -> Result<(), FormatError> {
    let found = r.u32(what)?;
    if found != magic {
        return Err(FormatError::Magic { what, found });
    }
    let version = r.u16(what)?;
    if version != FORMAT_VERSION {
        return Err(FormatError::Version { what, found: version });
    }
    if r.u16(what)? != 0 {
        return Err(FormatError::Invalid { what, why: "reserved bytes not zero" });
    }
    Ok(())
}

fn put_addr(out: &mut Vec<u8>, addr: &str) {
    out.extend_from_slice(addr.as_bytes());
}

fn check_addr_len(what: &'static str, a: &Addrs) -> Result<(), FormatError> {
    if a.low_latency.len() > MAX_ADDR || a.bulk.len() > MAX_ADDR {
        return Err(FormatError::Invalid { what, why: "address longer than 255 bytes" });
    }
    Ok(())
}

fn take_addr(r: &mut Reader<'_>, what: &'static str, len: u16) -> Result<String, FormatError> {
    if usize::from(len) > MAX_ADDR {
        return Err(FormatError::Invalid { what, why: "address longer than 255 bytes" });
    }
    let b = r.bytes(what, usize::from(len))?;
    String::from_utf8(b.to_vec()).map_err(|_| FormatError::Invalid { what, why: "address not UTF-8" })
}

/// A member znode's data (`<root>/members/m-<seq>`, ephemeral sequential; the sequence is
/// in the name, not the data):
///
/// | off | size | field |
/// |----:|-----:|-------|
/// | 0 | 4 | magic `"LFZM"` |
/// | 4 | 2 | version (1) |
/// | 6 | 2 | reserved, 0 |
/// | 8 | 4 | node id |
/// | 12 | 2 | low-latency address length L (≤ 255) |
/// | 14 | 2 | bulk address length B (≤ 255) |
/// | 16 | L | low-latency address, UTF-8 (`host:port`) |
/// | 16+L | B | bulk address, UTF-8 |
pub fn encode_member(node: NodeId, addrs: &Addrs) -> Result<Vec<u8>, FormatError> {
    check_addr_len("member", addrs)?;
    let mut out = Vec::with_capacity(16 + addrs.low_latency.len() + addrs.bulk.len());
    header(&mut out, MEMBER_MAGIC);
    put_u32(&mut out, node);
    out.extend_from_slice(&(addrs.low_latency.len() as u16).to_le_bytes());
    out.extend_from_slice(&(addrs.bulk.len() as u16).to_le_bytes());
    put_addr(&mut out, &addrs.low_latency);
    put_addr(&mut out, &addrs.bulk);
    Ok(out)
}

pub fn decode_member(data: &[u8]) -> Result<(NodeId, Addrs), FormatError> {
    let what = "member";
    let mut r = Reader::new(data);
    check_header(&mut r, what, MEMBER_MAGIC)?;
    let node = r.u32(what)?;
    let ll = r.u16(what)?;
    let bl = r.u16(what)?;
    let low_latency = take_addr(&mut r, what, ll)?;
    let bulk = take_addr(&mut r, what, bl)?;
    if !r.is_empty() {
        return Err(FormatError::Invalid { what, why: "trailing bytes" });
    }
    Ok((node, Addrs { low_latency, bulk }))
}

/// The cluster's view: its epoch and its members in chain order (head first). Written only
/// by compare-and-set on the znode's version, with `epoch` one more than the view it
/// replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    pub epoch: u64,
    pub chain: Vec<MemberEntry>,
}

impl View {
    /// The member of `node` in this view.
    pub fn member(&self, node: NodeId) -> Option<&MemberEntry> {
        self.chain.iter().find(|m| m.node == node)
    }
    /// Position of `node` in the chain (0 = head).
    pub fn position(&self, node: NodeId) -> Option<usize> {
        self.chain.iter().position(|m| m.node == node)
    }
    /// Whether this exact incarnation is a member.
    pub fn contains(&self, node: NodeId, seq: u64) -> bool {
        self.chain.iter().any(|m| m.node == node && m.seq == seq)
    }
    pub fn head(&self) -> Option<&MemberEntry> {
        self.chain.first()
    }
    pub fn tail(&self) -> Option<&MemberEntry> {
        self.chain.last()
    }
    pub fn nodes(&self) -> Vec<NodeId> {
        self.chain.iter().map(|m| m.node).collect()
    }
}

/// The view znode's data (`<root>/view`, persistent):
///
/// | off | size | field |
/// |----:|-----:|-------|
/// | 0 | 4 | magic `"LFZV"` |
/// | 4 | 2 | version (1) |
/// | 6 | 2 | reserved, 0 |
/// | 8 | 8 | epoch (≥ 1) |
/// | 16 | 4 | member count N (≤ 1024) |
/// | 20 | 4 | reserved, 0 |
/// | 24 | … | N member entries in chain order, head first |
///
/// Each member entry:
///
/// | off | size | field |
/// |----:|-----:|-------|
/// | 0 | 4 | node id |
/// | 4 | 2 | low-latency address length L (≤ 255) |
/// | 6 | 2 | bulk address length B (≤ 255) |
/// | 8 | 8 | incarnation (sequence number of the member's znode) |
/// | 16 | L | low-latency address, UTF-8 |
/// | 16+L | B | bulk address, UTF-8 |
pub fn encode_view(view: &View) -> Result<Vec<u8>, FormatError> {
    let what = "view";
    if view.chain.len() > MAX_MEMBERS {
        return Err(FormatError::Invalid { what, why: "more than 1024 members" });
    }
    let mut out = Vec::with_capacity(24 + view.chain.len() * 48);
    header(&mut out, VIEW_MAGIC);
    put_u64(&mut out, view.epoch);
    put_u32(&mut out, view.chain.len() as u32);
    put_u32(&mut out, 0);
    for m in &view.chain {
        check_addr_len(what, &m.addrs)?;
        put_u32(&mut out, m.node);
        out.extend_from_slice(&(m.addrs.low_latency.len() as u16).to_le_bytes());
        out.extend_from_slice(&(m.addrs.bulk.len() as u16).to_le_bytes());
        put_u64(&mut out, m.seq);
        put_addr(&mut out, &m.addrs.low_latency);
        put_addr(&mut out, &m.addrs.bulk);
    }
    Ok(out)
}

pub fn decode_view(data: &[u8]) -> Result<View, FormatError> {
    let what = "view";
    let mut r = Reader::new(data);
    check_header(&mut r, what, VIEW_MAGIC)?;
    let epoch = r.u64(what)?;
    let n = r.u32(what)?;
    if r.u32(what)? != 0 {
        return Err(FormatError::Invalid { what, why: "reserved bytes not zero" });
    }
    let n = r.check_count(what, u64::from(n), 16, MAX_MEMBERS).map_err(|e| match e {
        linefs_bytes::CountError::TooMany => FormatError::Invalid { what, why: "more than 1024 members" },
        linefs_bytes::CountError::Short(t) => FormatError::Truncated(t),
    })?;
    let mut chain = Vec::with_capacity(n);
    for _ in 0..n {
        let node = r.u32(what)?;
        let ll = r.u16(what)?;
        let bl = r.u16(what)?;
        let seq = r.u64(what)?;
        let low_latency = take_addr(&mut r, what, ll)?;
        let bulk = take_addr(&mut r, what, bl)?;
        if chain.iter().any(|m: &MemberEntry| m.node == node) {
            return Err(FormatError::Invalid { what, why: "a node twice in the chain" });
        }
        chain.push(MemberEntry { node, seq, addrs: Addrs { low_latency, bulk } });
    }
    if !r.is_empty() {
        return Err(FormatError::Invalid { what, why: "trailing bytes" });
    }
    if epoch == 0 {
        return Err(FormatError::Invalid { what, why: "epoch 0" });
    }
    Ok(View { epoch, chain })
}

/// The inode-number counter's data (`<root>/inodes`, persistent): the next inode number
/// never handed out. Only grows, by compare-and-set on the znode's version.
///
/// | off | size | field |
/// |----:|-----:|-------|
/// | 0 | 4 | magic `"LFZI"` |
/// | 4 | 2 | version (1) |
/// | 6 | 2 | reserved, 0 |
/// | 8 | 8 | next inode number |
pub fn encode_counter(next: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    header(&mut out, COUNTER_MAGIC);
    put_u64(&mut out, next);
    out
}

pub fn decode_counter(data: &[u8]) -> Result<u64, FormatError> {
    let what = "inode counter";
    let mut r = Reader::new(data);
    check_header(&mut r, what, COUNTER_MAGIC)?;
    let next = r.u64(what)?;
    if !r.is_empty() {
        return Err(FormatError::Invalid { what, why: "trailing bytes" });
    }
    Ok(next)
}

/// Which nicfs lease manager owns the root lease of a subtree (paper §3.4–3.5: lease
/// management is rooted in the cluster manager and delegated to nicfs instances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delegation {
    /// The subtree's root inode.
    pub subtree: u64,
    /// The owning lease manager's node and incarnation.
    pub owner: NodeId,
    pub owner_seq: u64,
    /// The view epoch in which it was granted.
    pub epoch: u64,
}

/// A delegation znode's data (`<root>/leases/<subtree inode as 16 hex digits>`, persistent):
///
/// | off | size | field |
/// |----:|-----:|-------|
/// | 0 | 4 | magic `"LFZL"` |
/// | 4 | 2 | version (1) |
/// | 6 | 2 | reserved, 0 |
/// | 8 | 4 | owner node id |
/// | 12 | 4 | reserved, 0 |
/// | 16 | 8 | owner incarnation (its member znode's sequence) |
/// | 24 | 8 | epoch of the view it was granted in |
/// | 32 | 8 | subtree root inode (repeats the name) |
pub fn encode_delegation(d: &Delegation) -> Vec<u8> {
    let mut out = Vec::with_capacity(40);
    header(&mut out, DELEGATION_MAGIC);
    put_u32(&mut out, d.owner);
    put_u32(&mut out, 0);
    put_u64(&mut out, d.owner_seq);
    put_u64(&mut out, d.epoch);
    put_u64(&mut out, d.subtree);
    out
}

pub fn decode_delegation(data: &[u8]) -> Result<Delegation, FormatError> {
    let what = "delegation";
    let mut r = Reader::new(data);
    check_header(&mut r, what, DELEGATION_MAGIC)?;
    let owner = r.u32(what)?;
    if r.u32(what)? != 0 {
        return Err(FormatError::Invalid { what, why: "reserved bytes not zero" });
    }
    let owner_seq = r.u64(what)?;
    let epoch = r.u64(what)?;
    let subtree = r.u64(what)?;
    if !r.is_empty() {
        return Err(FormatError::Invalid { what, why: "trailing bytes" });
    }
    Ok(Delegation { subtree, owner, owner_seq, epoch })
}

/// An inode range's owner record (`<root>/inode-ranges/<start as 16 hex digits>`,
/// persistent, created in the same multi-operation as the counter's write that cut the
/// range, so every range handed out has exactly one, naming the node it went to):
///
/// | off | size | field |
/// |----:|-----:|-------|
/// | 0 | 4 | magic `"LFZR"` |
/// | 4 | 2 | version (1) |
/// | 6 | 2 | reserved, 0 |
/// | 8 | 4 | owner node id |
/// | 12 | 4 | reserved, 0 |
/// | 16 | 8 | start (repeats the name) |
/// | 24 | 8 | end (numbers start..end) |
pub fn encode_range_owner(owner: NodeId, start: u64, end: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(32);
    header(&mut out, RANGE_MAGIC);
    put_u32(&mut out, owner);
    put_u32(&mut out, 0);
    put_u64(&mut out, start);
    put_u64(&mut out, end);
    out
}

/// An owner record's owner, start and end.
pub fn decode_range_owner(data: &[u8]) -> Result<(NodeId, u64, u64), FormatError> {
    let what = "inode range owner";
    let mut r = Reader::new(data);
    check_header(&mut r, what, RANGE_MAGIC)?;
    let owner = r.u32(what)?;
    if r.u32(what)? != 0 {
        return Err(FormatError::Invalid { what, why: "reserved bytes not zero" });
    }
    let (start, end) = (r.u64(what)?, r.u64(what)?);
    if !r.is_empty() {
        return Err(FormatError::Invalid { what, why: "trailing bytes" });
    }
    if start >= end {
        return Err(FormatError::Invalid { what, why: "an empty range" });
    }
    Ok((owner, start, end))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn range_owner_bytes_are_the_documented_table() {
        let b = encode_range_owner(3, 100, 116);
        assert_eq!(b.len(), 32);
        assert_eq!(&b[0..8], b"LFZR\x01\x00\x00\x00");
        assert_eq!(&b[8..16], &[3, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..24], &100u64.to_le_bytes());
        assert_eq!(&b[24..32], &116u64.to_le_bytes());
        assert_eq!(decode_range_owner(&b).unwrap(), (3, 100, 116));
        assert!(decode_range_owner(&encode_range_owner(3, 5, 5)).is_err());
        let mut t = b.clone();
        t.push(0);
        assert!(decode_range_owner(&t).is_err());
        assert!(decode_range_owner(&encode_delegation(&Delegation { subtree: 1, owner: 1, owner_seq: 1, epoch: 1 }))
            .is_err());
    }

    fn addrs(a: &str, b: &str) -> Addrs {
        Addrs { low_latency: a.into(), bulk: b.into() }
    }

    #[test]
    fn member_bytes_are_the_documented_table() {
        let b = encode_member(7, &addrs("h:1", "h:22")).unwrap();
        assert_eq!(&b[0..4], b"LFZM");
        assert_eq!(&b[4..8], &[1, 0, 0, 0]);
        assert_eq!(&b[8..12], &[7, 0, 0, 0]);
        assert_eq!(&b[12..16], &[3, 0, 4, 0]);
        assert_eq!(&b[16..], b"h:1h:22");
        assert_eq!(decode_member(&b).unwrap(), (7, addrs("h:1", "h:22")));
    }

    #[test]
    fn view_bytes_are_the_documented_table() {
        let v = View { epoch: 3, chain: vec![MemberEntry { node: 2, seq: 9, addrs: addrs("a", "bc") }] };
        let b = encode_view(&v).unwrap();
        assert_eq!(&b[0..8], b"LFZV\x01\x00\x00\x00");
        assert_eq!(&b[8..16], &3u64.to_le_bytes());
        assert_eq!(&b[16..24], &[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..32], &[2, 0, 0, 0, 1, 0, 2, 0]);
        assert_eq!(&b[32..40], &9u64.to_le_bytes());
        assert_eq!(&b[40..], b"abc");
        assert_eq!(decode_view(&b).unwrap(), v);
    }

    #[test]
    fn counter_and_delegation_tables() {
        let c = encode_counter(0x0102);
        assert_eq!(c, b"LFZI\x01\x00\x00\x00\x02\x01\x00\x00\x00\x00\x00\x00");
        assert_eq!(decode_counter(&c).unwrap(), 0x0102);
        let d = Delegation { subtree: 1, owner: 5, owner_seq: 6, epoch: 7 };
        let b = encode_delegation(&d);
        assert_eq!(b.len(), 40);
        assert_eq!(&b[8..12], &[5, 0, 0, 0]);
        assert_eq!(&b[16..24], &6u64.to_le_bytes());
        assert_eq!(&b[24..32], &7u64.to_le_bytes());
        assert_eq!(&b[32..40], &1u64.to_le_bytes());
        assert_eq!(decode_delegation(&b).unwrap(), d);
    }

    #[test]
    fn foreign_versions_and_magics_are_refused() {
        let mut c = encode_counter(5);
        c[4] = 2;
        assert!(matches!(decode_counter(&c), Err(FormatError::Version { found: 2, .. })));
        let c = encode_counter(5);
        assert!(matches!(decode_view(&c), Err(FormatError::Magic { .. })));
        let v = View { epoch: 0, chain: vec![] };
        assert!(decode_view(&encode_view(&v).unwrap()).is_err());
    }

    #[test]
    fn member_names() {
        assert_eq!(member_seq("m-0000000042"), Some(42));
        assert_eq!(member_seq("m-"), None);
        assert_eq!(member_seq("x-1"), None);
        assert_eq!(member_seq("m-+1"), None);
    }

    proptest! {
        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_member(&data);
            let _ = decode_view(&data);
            let _ = decode_counter(&data);
            let _ = decode_delegation(&data);
            let _ = decode_range_owner(&data);
        }

        #[test]
        fn view_round_trips(epoch in 1u64.., nodes in proptest::collection::btree_set(any::<u32>(), 0..8)) {
            let chain = nodes.iter().map(|&n| MemberEntry {
                node: n, seq: u64::from(n) * 3, addrs: addrs(&format!("l{n}"), &format!("b{n}")),
            }).collect();
            let v = View { epoch, chain };
            prop_assert_eq!(decode_view(&encode_view(&v).unwrap()).unwrap(), v);
        }
    }
}
