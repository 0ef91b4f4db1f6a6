//! A batch: the committed entries of one slot from its checkpoint, decoded, with who each
//! was logged for — what a publisher validates and applies as one
//! ([`crate::publish::publish_batch`]), and what a checking publisher judges
//! ([`crate::public::PublicArea::check_permissions`]). It knows the log and the records,
//! nothing of the public area, so that both sides can use it.

use crate::oplog::{EntryLoc, LogCopy, ScanStop};
use crate::record::{decode_entry, Caller, Record};

/// Committed entries of one slot, decoded, to be published as one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Batch {
    pub slot: u32,
    /// Where the batch starts: the slot's checkpoint when it was read.
    pub from: u64,
    /// The entries in log order, each with its records.
    pub entries: Vec<(EntryLoc, Vec<Record>)>,
    /// Who each entry was logged for, if it states it (its CALLER), in the same order.
    pub callers: Vec<Option<Caller>>,
    /// The entry that ended the batch because it does not decode (its LSN and why): it and
    /// everything after it are refused.
    pub malformed: Option<(u64, String)>,
}

impl Batch {
    /// An empty batch of `slot` from `from`.
    pub fn new(slot: u32, from: u64) -> Batch {
        Batch { slot, from, ..Batch::default() }
    }

    /// Adds the next entry a scan found (its location and payload), decoded; once an entry
    /// does not decode, the batch is over and later ones are ignored.
    pub fn push(&mut self, loc: &EntryLoc, payload: &[u8]) {
        if self.malformed.is_some() {
            return;
        }
        match decode_entry(payload, loc.payload_off) {
            Ok((caller, records)) => {
                self.entries.push((*loc, records));
                self.callers.push(caller);
            }
            Err(e) => self.malformed = Some((loc.lsn, format!("malformed entry: {e}"))),
        }
    }

    /// The batch of the entries in a copy of a slot's log ([`LogSlot::fetch`](crate::oplog::LogSlot::fetch)): scanned and
    /// checked on the copy, never read from the log again. Also returns how the scan ended.
    pub fn from_copy(copy: &LogCopy) -> (Batch, ScanStop) {
        let mut batch = Batch::new(copy.slot, copy.from);
        let scan = copy.scan_with(|loc, payload| batch.push(loc, payload));
        (batch, scan.stop)
    }

    /// The batch of this one's first `n` entries, the next one (at `lsn`) refused for `why`
    /// like a malformed entry: publication stops there.
    pub fn refused_from(&self, n: usize, lsn: u64, why: String) -> Batch {
        Batch {
            slot: self.slot,
            from: self.from,
            entries: self.entries[..n.min(self.entries.len())].to_vec(),
            callers: self.callers[..n.min(self.callers.len())].to_vec(),
            malformed: Some((lsn, why)),
        }
    }

    /// The LSN just past the batch's last entry (`from` if it has none).
    pub fn end(&self) -> u64 {
        self.entries.last().map_or(self.from, |(loc, _)| loc.end)
    }

    /// Whether there is nothing to publish or refuse.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.malformed.is_none()
    }

    /// Bytes of log its entries span.
    pub fn log_bytes(&self) -> u64 {
        self.end() - self.from
    }
}
