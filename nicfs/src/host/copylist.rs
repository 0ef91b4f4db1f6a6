//! The data mover nicfs hands pm's publisher: the file data of a batch — WRITE records'
//! bytes, zero fills — is recorded as pm [`Move`]s in order, and at the batch's settle
//! becomes one ordered copy list (cut into frames of at most `MAX_COPY_ENTRIES`) that the
//! host link executes: by kworker in normal mode, by nicfs itself with the same executor
//! (`linefs-copier`) in isolated mode, redone by nicfs if the kworker dies with it in flight. The list is
//! executed, persisted and fenced when [`HostLink::copy`] returns, and only then does pm
//! persist the pointers to the blocks it filled.
//!
//! A `Copy` move names the client's log file (`CopySource::Slot`) at the offset of the
//! WRITE record's data: file data is copied from the log by the host, not through nicfs's
//! fetched copy (see docs/ARCHITECTURE.md, "the trust argument", for why that is sound).
//! Destinations are byte offsets of the public file that pm computed from the validated
//! records and the block maps; kworker refuses any outside the data area.

use crate::host::link::{Copied, HostLink};
use linefs_pm::public::{Collector, DataMover, Move};
use linefs_proto::{CopyEntry, CopySource};

/// The copy-list entry of a move of slot `slot`'s data.
pub(crate) fn entry(slot: u32, m: &Move) -> CopyEntry {
    match *m {
        Move::Copy { src, dst, len } => {
            CopyEntry { source: CopySource::Slot(slot), src_offset: src, dst_offset: dst, len }
        }
        Move::Zero { dst, len } => CopyEntry { source: CopySource::Zero, src_offset: 0, dst_offset: dst, len },
    }
}

/// A deferred mover for publishing slot `slot` (whose log file has `log_len` bytes): its
/// moves are executed through `host` at each flush, and what that took is added to
/// `copied`.
pub(crate) fn mover<'a>(host: &'a HostLink, slot: u32, log_len: u64, copied: &'a mut Copied) -> impl DataMover + 'a {
    Collector::new(log_len, move |moves: &[Move]| {
        let entries: Vec<CopyEntry> = moves.iter().map(|m| entry(slot, m)).collect();
        let c = host.copy(&entries, host.copy_timeout()).map_err(|e| e.to_string())?;
        tracing::debug!(
            slot,
            entries = entries.len(),
            lists = c.by_kworker + c.by_nicfs,
            redone = c.redone,
            "copy list executed"
        );
        copied.add(c);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_become_copy_entries_of_the_slot_or_zeros() {
        assert_eq!(
            entry(3, &Move::Copy { src: 4096, dst: 81920, len: 10 }),
            CopyEntry { source: CopySource::Slot(3), src_offset: 4096, dst_offset: 81920, len: 10 }
        );
        assert_eq!(
            entry(3, &Move::Zero { dst: 81930, len: 4086 }),
            CopyEntry { source: CopySource::Zero, src_offset: 0, dst_offset: 81930, len: 4086 }
        );
    }
}
