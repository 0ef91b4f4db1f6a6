//! The node record: what a node knows of its place in a cluster — its id, the cluster it
//! belongs to, the epoch it last saw, its position in the replication chain, the members of
//! that epoch and the epochs before it — kept in the public file's block 0 and changed in
//! place, crash-atomically (format version 7).
//!
//! The superblock is written once; the node record changes with every membership change, so
//! it has two slots and every update goes to the one not holding the current record, with a
//! sequence number one higher. A slot is valid when its magic, version and checksum are
//! right; the current record is the valid slot with the higher sequence number. An update
//! stores the whole slot, then persists and fences it: a crash before the fence leaves the
//! slot torn or old — either way the other slot still holds the record before the update —
//! and after it the new record wins. One fence per update and no separate selector byte to
//! order behind it (redb's header keeps a selector; a sequence number gives the same
//! atomicity with one write less). The other slot is never touched by an update, so the
//! previous record survives any crash of the next one.
//!
//! Block 0 of the public file (version 7):
//!
//! ```text
//!    0  256  superblock (crate::layout)
//!  512  256  superblock copy, written before the superblock is rewritten (an upgrade), so
//!            a crash mid-rewrite leaves one valid copy (crate::layout::SUPERBLOCK_COPY_OFF)
//! 1024  512  node record slot 0
//! 1536  512  node record slot 1
//! ```
//!
//! A slot, byte by byte (all integers little-endian):
//!
//! ```text
//! off len field
//!   0   8 magic          b"LFSNODE\0"
//!   8   4 version        NODE_RECORD_VERSION (1)
//!  12   4 history_len    entries of `history` in use, 0..=HISTORY
//!  16   8 seq            update number; the valid slot with the higher one is current
//!  24   4 node_id        the node's id in its cluster; u32::MAX: none yet
//!  28   4 chain_pos      its position in the replication chain; u32::MAX: not in one
//!  32   8 epoch          the last cluster epoch this node joined; 0: never
//!  40  16 cluster_id     the cluster's identity; zeros: none
//!  56   8 members        bit i set: node i is a member in `epoch` (nodes 0..64)
//!  64  24×16 history     the epochs before, newest first: epoch u64, members u64,
//!                        since_ns u64 (when this node saw it begin, ns since the epoch)
//! 448  60 reserved       0
//! 508   4 crc32c         over bytes 0..508
//! ```
//!
//! The offsets are the constants of [`nr_off`]; `pm/tests/format_bytes.rs` pins the bytes.

use crate::layout::{FormatError, BLOCK_SIZE};
use crate::region::PmRegion;
use linefs_bytes::{Fixed, FixedOut, Reader};

/// Offsets of the two node record slots in block 0.
pub const SLOT_OFF: [u64; 2] = [1024, 1536];
/// Bytes of one slot.
pub const NODE_RECORD_SIZE: usize = 512;
/// Version of the slot layout above.
pub const NODE_RECORD_VERSION: u32 = 1;
/// Magic at the start of a slot.
pub const NODE_RECORD_MAGIC: &[u8; 8] = b"LFSNODE\0";
/// Epochs kept in `history`.
pub const HISTORY: usize = 16;
/// "None" for node ids and chain positions.
const NONE: u32 = u32::MAX;

/// Byte offsets of a slot's fields (the table in the module doc).
pub mod nr_off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HISTORY_LEN: usize = 12;
    pub const SEQ: usize = 16;
    pub const NODE_ID: usize = 24;
    pub const CHAIN_POS: usize = 28;
    pub const EPOCH: usize = 32;
    pub const CLUSTER_ID: usize = 40;
    pub const MEMBERS: usize = 56;
    pub const HISTORY: usize = 64;
    /// One history entry: epoch, members, since_ns.
    pub const HISTORY_ENTRY: usize = 24;
    pub const RESERVED: usize = HISTORY + super::HISTORY * HISTORY_ENTRY;
    /// crc32c over bytes `0..CRC`.
    pub const CRC: usize = 508;
    const _: () = assert!(HISTORY_LEN + 4 == SEQ && SEQ + 8 == NODE_ID && NODE_ID + 4 == CHAIN_POS);
    const _: () = assert!(CHAIN_POS + 4 == EPOCH && EPOCH + 8 == CLUSTER_ID && CLUSTER_ID + 16 == MEMBERS);
    const _: () = assert!(MEMBERS + 8 == HISTORY && RESERVED == 448 && RESERVED <= CRC);
    const _: () = assert!(CRC + 4 == super::NODE_RECORD_SIZE);
    const _: () = assert!(super::SLOT_OFF[1] as usize + super::NODE_RECORD_SIZE <= super::BLOCK_SIZE as usize);
}

/// One earlier epoch of the node's history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EpochEntry {
    pub epoch: u64,
    pub members: u64,
    pub since_ns: u64,
}

/// A decoded node record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    /// Update number (the slot with the higher one is current).
    pub seq: u64,
    pub node_id: Option<u32>,
    pub chain_pos: Option<u32>,
    /// The last epoch the node joined; 0 for a node that never joined a cluster.
    pub epoch: u64,
    pub cluster_id: [u8; 16],
    /// Members of `epoch`, one bit per node id.
    pub members: u64,
    /// Earlier epochs, newest first, at most [`HISTORY`].
    pub history: Vec<EpochEntry>,
}

impl Default for NodeRecord {
    fn default() -> NodeRecord {
        NodeRecord::initial()
    }
}

fn opt(v: u32) -> Option<u32> {
    (v != NONE).then_some(v)
}

impl NodeRecord {
    /// The record of a node that belongs to no cluster yet (format and upgrade write it).
    pub fn initial() -> NodeRecord {
        NodeRecord {
            seq: 1,
            node_id: None,
            chain_pos: None,
            epoch: 0,
            cluster_id: [0; 16],
            members: 0,
            history: Vec::new(),
        }
    }

    /// The record after the node joins `epoch` with `members`: the epoch it had goes into
    /// the history (the oldest falls out past [`HISTORY`]). `now_ns` is when it saw it.
    pub fn entering_epoch(&self, epoch: u64, members: u64, chain_pos: Option<u32>, now_ns: u64) -> NodeRecord {
        let mut next = self.clone();
        if self.epoch != 0 {
            next.history.insert(0, EpochEntry { epoch: self.epoch, members: self.members, since_ns: now_ns });
            next.history.truncate(HISTORY);
        }
        next.epoch = epoch;
        next.members = members;
        next.chain_pos = chain_pos;
        next
    }

    /// The slot's bytes.
    pub fn encode(&self) -> [u8; NODE_RECORD_SIZE] {
        use nr_off as o;
        let n = self.history.len().min(HISTORY);
        let mut table = [0u8; o::RESERVED - o::HISTORY];
        for (entry, e) in table.chunks_exact_mut(o::HISTORY_ENTRY).zip(self.history.iter().take(n)) {
            let mut f = FixedOut::<{ o::HISTORY_ENTRY }>::new();
            f.u64::<0>(e.epoch).u64::<8>(e.members).u64::<16>(e.since_ns);
            entry.copy_from_slice(f.bytes());
        }
        let mut b = FixedOut::<NODE_RECORD_SIZE>::new();
        b.array::<{ o::MAGIC }, 8>(*NODE_RECORD_MAGIC)
            .u32::<{ o::VERSION }>(NODE_RECORD_VERSION)
            .u32::<{ o::HISTORY_LEN }>(n as u32)
            .u64::<{ o::SEQ }>(self.seq)
            .u32::<{ o::NODE_ID }>(self.node_id.unwrap_or(NONE))
            .u32::<{ o::CHAIN_POS }>(self.chain_pos.unwrap_or(NONE))
            .u64::<{ o::EPOCH }>(self.epoch)
            .array::<{ o::CLUSTER_ID }, 16>(self.cluster_id)
            .u64::<{ o::MEMBERS }>(self.members)
            .array::<{ o::HISTORY }, { o::RESERVED - o::HISTORY }>(table);
        let crc = crc32c::crc32c(&b.bytes()[..o::CRC]);
        *b.u32::<{ o::CRC }>(crc).bytes()
    }

    /// A slot's record, or why it is not a valid one (never written, torn, another version).
    pub fn decode(b: &[u8; NODE_RECORD_SIZE]) -> Result<NodeRecord, String> {
        use nr_off as o;
        let f = Fixed::new(b);
        if f.array::<{ o::MAGIC }, 8>() != *NODE_RECORD_MAGIC {
            return Err("no node record (bad magic)".into());
        }
        let stored = f.u32::<{ o::CRC }>();
        let computed = crc32c::crc32c(&b[..o::CRC]);
        if stored != computed {
            return Err(format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"));
        }
        let version = f.u32::<{ o::VERSION }>();
        if version != NODE_RECORD_VERSION {
            return Err(format!("node record version {version}, this build reads {NODE_RECORD_VERSION}"));
        }
        let n = f.u32::<{ o::HISTORY_LEN }>() as usize;
        if n > HISTORY {
            return Err(format!("history of {n} entries (at most {HISTORY})"));
        }
        let mut table = Reader::new(&b[o::HISTORY..o::RESERVED]);
        let mut history = Vec::with_capacity(n);
        for _ in 0..n {
            // n <= HISTORY entries fit in the table.
            let e: Fixed<'_, { o::HISTORY_ENTRY }> = table.fixed("epoch history").map_err(|e| e.to_string())?;
            history.push(EpochEntry { epoch: e.u64::<0>(), members: e.u64::<8>(), since_ns: e.u64::<16>() });
        }
        Ok(NodeRecord {
            seq: f.u64::<{ o::SEQ }>(),
            node_id: opt(f.u32::<{ o::NODE_ID }>()),
            chain_pos: opt(f.u32::<{ o::CHAIN_POS }>()),
            epoch: f.u64::<{ o::EPOCH }>(),
            cluster_id: f.array::<{ o::CLUSTER_ID }, 16>(),
            members: f.u64::<{ o::MEMBERS }>(),
            history,
        })
    }

    /// Both slots of the public file `region`, decoded.
    pub fn slots(region: &PmRegion) -> Result<[Result<NodeRecord, String>; 2], FormatError> {
        let mut out = [Err(String::new()), Err(String::new())];
        for (i, off) in SLOT_OFF.iter().enumerate() {
            let mut b = [0u8; NODE_RECORD_SIZE];
            region.read(*off, &mut b)?;
            out[i] = NodeRecord::decode(&b);
        }
        Ok(out)
    }

    /// The current record of the public file `region` (a node of format version 7): the
    /// valid slot with the higher sequence number.
    pub fn load(region: &PmRegion) -> Result<NodeRecord, FormatError> {
        let [a, b] = NodeRecord::slots(region)?;
        match (a, b) {
            (Ok(a), Ok(b)) => Ok(if b.seq > a.seq { b } else { a }),
            (Ok(r), Err(_)) | (Err(_), Ok(r)) => Ok(r),
            (Err(a), Err(b)) => Err(FormatError::Corrupt {
                what: "node record".into(),
                detail: format!("neither slot holds one: slot 0: {a}; slot 1: {b}"),
            }),
        }
    }

    /// Make `next` the node's record: it is written, with the sequence number after the
    /// current one, to the slot that does not hold the current record, then persisted and
    /// fenced. Returns the record as stored. A crash at any point leaves the current record
    /// or the new one.
    pub fn store(region: &PmRegion, next: &NodeRecord) -> Result<NodeRecord, FormatError> {
        let current = NodeRecord::load(region)?;
        let stored = NodeRecord { seq: current.seq + 1, ..next.clone() };
        NodeRecord::write_slot(region, &stored)?;
        Ok(stored)
    }

    /// Write `rec` to its slot (`seq % 2`), persisted and fenced; the other slot is left
    /// alone. Format and upgrade write the first record this way.
    pub(crate) fn write_slot(region: &PmRegion, rec: &NodeRecord) -> Result<(), FormatError> {
        let off = SLOT_OFF[(rec.seq % 2) as usize];
        region.write(off, &rec.encode())?;
        region.persist_now(off, NODE_RECORD_SIZE as u64)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::put_le32;

    fn region() -> PmRegion {
        let r = PmRegion::traced(4 * BLOCK_SIZE);
        NodeRecord::write_slot(&r, &NodeRecord::initial()).unwrap();
        r
    }

    #[test]
    fn a_record_round_trips_with_its_history() {
        let mut rec = NodeRecord::initial();
        for e in 1..=20u64 {
            rec = rec.entering_epoch(e, e | 1, Some(e as u32 % 3), e * 1000);
        }
        rec.node_id = Some(2);
        rec.cluster_id = [9; 16];
        assert_eq!(rec.history.len(), HISTORY);
        assert_eq!(rec.history[0].epoch, 19);
        assert_eq!(rec.history[HISTORY - 1].epoch, 4);
        assert_eq!(NodeRecord::decode(&rec.encode()).unwrap(), rec);
    }

    #[test]
    fn updates_alternate_slots_and_the_newest_valid_one_wins() {
        let r = region();
        assert_eq!(NodeRecord::load(&r).unwrap(), NodeRecord::initial());
        let a = NodeRecord::store(&r, &NodeRecord { node_id: Some(1), ..NodeRecord::initial() }).unwrap();
        assert_eq!(a.seq, 2);
        let b = NodeRecord::store(&r, &a.entering_epoch(5, 0b111, Some(1), 7)).unwrap();
        assert_eq!((b.seq, b.epoch, b.node_id), (3, 5, Some(1)));
        assert_eq!(NodeRecord::load(&r).unwrap(), b);
        // The newest slot torn: the one before is current again.
        r.write(SLOT_OFF[(b.seq % 2) as usize] + 100, &[0xff]).unwrap();
        assert_eq!(NodeRecord::load(&r).unwrap(), a);
        // Both gone: a clear error.
        r.write(SLOT_OFF[(a.seq % 2) as usize], &[0]).unwrap();
        let e = NodeRecord::load(&r).unwrap_err().to_string();
        assert!(e.contains("node record") && e.contains("neither slot"), "{e}");
    }

    #[test]
    fn a_slot_of_another_version_or_an_impossible_history_is_not_a_record() {
        let mut b = NodeRecord::initial().encode();
        put_le32(&mut b, nr_off::VERSION, 2);
        let crc = crc32c::crc32c(&b[..nr_off::CRC]);
        put_le32(&mut b, nr_off::CRC, crc);
        assert!(NodeRecord::decode(&b).unwrap_err().contains("version 2"));
        let mut b = NodeRecord::initial().encode();
        put_le32(&mut b, nr_off::HISTORY_LEN, HISTORY as u32 + 1);
        let crc = crc32c::crc32c(&b[..nr_off::CRC]);
        put_le32(&mut b, nr_off::CRC, crc);
        assert!(NodeRecord::decode(&b).unwrap_err().contains("history"));
    }
}
