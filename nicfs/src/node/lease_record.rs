//! The node's write leases and its sessions' credentials, recorded in PM (`leases.pm` in
//! the node's directory; mode 0600, never handed to a client), so that after a crash of
//! nicfs the committed log suffixes it finds are admitted as in normal publication:
//!
//! * by the write leases ([`crate::lease::table::LeaseTable::may_change`]): an entry of a slot is
//!   replayed only if that slot's session held the write lease of every inode the entry
//!   changes, and had not handed it back before the entry;
//! * by meaning: each slot's session's credentials (uid, gid, supplementary groups, whether
//!   it may state callers) and its *admitted* LSN — every entry below it passed every check
//!   of publication before the crash (and may have been applied, in part), none at or past
//!   it was ever applied. Recovery judges the entries at or past it by the permission rules
//!   with these credentials (pm's `recovery::recover_judged`, see [`crate::node`]).
//!
//! The lease part is one fixed entry per inode number — who holds its write lease and, once
//! it is handed back, how far the holder's log covers it — not a journal: it is current at
//! every moment, needs no compaction, and recovery reads it directly. A write lease is
//! recorded (persisted and fenced) *before* the client learns of it, so every entry a client
//! logs under a lease is covered by a durable record; a hand-back is recorded before the
//! lease table acts on it, so it is durable before anyone else is granted the inode. A
//! session's credentials are recorded (with admitted = its start LSN) before `Attached` is
//! sent, so before it can log anything; admitted moves to a batch's end before the batch is
//! applied ([`LeaseFile::admitting`]); both are cleared when the session's log is settled.
//! After recovery the whole record is cleared: no session survives a restart.
//!
//! Layout (little-endian), version 2 (a version 1 file is made afresh):
//!
//! ```text
//! header, 64 bytes                      slot s's credentials, at 64 + 192 s
//!  0  8 magic        b"LFLEASES"          0   4 flags    bit 0: recorded; bit 1: states callers
//!  8  4 version      2                    4   4 uid
//! 12  4 reserved     0                    8   4 gid
//! 16  8 inode_count  of the node         12   4 ngroups  groups recorded (at most 32)
//! 24  4 log_slots    of the node         16   4 total    groups the session had
//! 28 32 reserved     0                   20   4 reserved 0
//! 60  4 crc32c       over bytes 0..60    24 128 groups   32 x u32, the first ngroups used
//!                                       152   4 crc32c   over bytes 0..152
//!                                       156   4 reserved 0
//!                                       160   8 admitted LSN (written alone, 8-byte atomic)
//!                                       168  24 reserved 0
//!
//! entry of inode i, at 64 + 192 log_slots + 16 i
//!  0 4 holder   slot + 1 (0: no write lease)
//!  4 4 reserved 0
//!  8 8 covered  0: held; else the holder handed it back and its entries from this LSN on
//!               are not covered
//! ```
//!
//! A session with more than 32 supplementary groups is recorded with its first 32 (and
//! the count it had): recovery judges it with those, which can only refuse more, never
//! allow more; nicfs warns at attach.
//!
//! A file that is missing, of another size or version, or whose header does not check is
//! made afresh, with a log line, and recovery then trusts the logs as it did before leases
//! were recorded (a node that is new, or ran host-only until now, has no record; see
//! [`crate::node::Node::open`]). Entries are read as they are: any bytes give some holder
//! and LSN, never a panic; a credentials record whose checksum does not hold judges every
//! entry at or past its admitted LSN as refused.

use linefs_pm::layout::{le32, le64, put_le32, put_le64};
use linefs_pm::region::PmRegion;
use std::path::Path;

pub(crate) const FILE: &str = "leases.pm";
const MAGIC: &[u8; 8] = b"LFLEASES";
const VERSION: u32 = 2;
const HEADER: u64 = 64;
const ENTRY: u64 = 16;
/// One slot's credentials and admitted LSN.
const SLOT: u64 = 192;
/// Supplementary groups recorded per session.
pub(crate) const MAX_GROUPS: usize = 32;

/// Byte offsets of the header and of an entry (the table in the module doc).
pub(crate) mod off {
    pub(crate) const MAGIC: usize = 0;
    pub(crate) const VERSION: usize = 8;
    pub(crate) const INODE_COUNT: usize = 16;
    pub(crate) const LOG_SLOTS: usize = 24;
    pub(crate) const CRC: usize = 60;
    /// Within a slot's credentials.
    pub(crate) mod slot {
        pub(crate) const FLAGS: usize = 0;
        pub(crate) const UID: usize = 4;
        pub(crate) const GID: usize = 8;
        pub(crate) const NGROUPS: usize = 12;
        pub(crate) const TOTAL: usize = 16;
        pub(crate) const GROUPS: usize = 24;
        pub(crate) const CRC: usize = 152;
        pub(crate) const ADMITTED: u64 = 160;
    }
    /// Within an entry.
    pub(crate) const HOLDER: u64 = 0;
    pub(crate) const COVERED: u64 = 8;
}

/// The lease record of a node.
pub(crate) struct LeaseFile {
    region: PmRegion,
    inode_count: u64,
    log_slots: u32,
}

const RECORDED: u32 = 1;
const STATES_CALLERS: u32 = 2;

/// A session's credentials as recorded for recovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotCreds {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// At most [`MAX_GROUPS`].
    pub(crate) groups: Vec<u32>,
    /// The session may state the caller of each entry (it runs as root).
    pub(crate) states_callers: bool,
}

impl LeaseFile {
    /// Opens the record in `dir` for a node of `inode_count` inodes, or makes it afresh;
    /// says whether the old content is there to be read.
    pub(crate) fn open(dir: &Path, inode_count: u64, log_slots: u32) -> Result<(LeaseFile, bool), String> {
        let path = dir.join(FILE);
        // PM regions are at least 256 KiB.
        let size = (HEADER + SLOT * u64::from(log_slots) + ENTRY * inode_count).next_multiple_of(4096).max(256 << 10);
        if let Ok(region) = PmRegion::open(&path) {
            let f = LeaseFile { region, inode_count, log_slots };
            match f.check(size) {
                Ok(()) => return Ok((f, true)),
                Err(why) => tracing::warn!(path = %path.display(), %why, "lease record unusable; made afresh"),
            }
        }
        let _ = std::fs::remove_file(&path);
        // Mode 0600 from the first instant: the record says which inodes each slot may change.
        let (region, _) = PmRegion::create_new(&path, size, 0o600)
            .map_err(|e| format!("cannot create the lease record {}: {e}", path.display()))?;
        let f = LeaseFile { region, inode_count, log_slots };
        let mut h = [0u8; HEADER as usize];
        h[off::MAGIC..off::MAGIC + 8].copy_from_slice(MAGIC);
        put_le32(&mut h, off::VERSION, VERSION);
        put_le64(&mut h, off::INODE_COUNT, inode_count);
        put_le32(&mut h, off::LOG_SLOTS, log_slots);
        let crc = crc32c::crc32c(&h[..off::CRC]);
        put_le32(&mut h, off::CRC, crc);
        f.io(f.region.write(0, &h))?;
        f.io(f.region.persist(0, HEADER))?;
        f.region.fence();
        Ok((f, false))
    }

    fn check(&self, size: u64) -> Result<(), String> {
        if self.region.len() != size {
            return Err(format!("{} bytes, not {size}", self.region.len()));
        }
        let mut h = [0u8; HEADER as usize];
        self.region.read(0, &mut h).map_err(|e| e.to_string())?;
        if &h[off::MAGIC..off::MAGIC + 8] != MAGIC || le32(&h, off::CRC) != crc32c::crc32c(&h[..off::CRC]) {
            return Err("bad magic or checksum".into());
        }
        if le32(&h, off::VERSION) != VERSION
            || le64(&h, off::INODE_COUNT) != self.inode_count
            || le32(&h, off::LOG_SLOTS) != self.log_slots
        {
            return Err("another version or node".into());
        }
        Ok(())
    }

    fn io<T>(&self, r: Result<T, linefs_pm::region::PmError>) -> Result<T, String> {
        r.map_err(|e| format!("lease record: {e}"))
    }

    fn at(&self, ino: u64) -> Option<u64> {
        (ino < self.inode_count).then(|| HEADER + SLOT * u64::from(self.log_slots) + ENTRY * ino)
    }

    fn slot_at(&self, slot: u32) -> Option<u64> {
        (slot < self.log_slots).then(|| HEADER + SLOT * u64::from(slot))
    }

    /// `slot`'s session, of these credentials, starts at `start` (its checkpoint); durable
    /// when this returns, which is before the client can log anything.
    pub(crate) fn session_attached(&self, slot: u32, creds: &SlotCreds, total_groups: usize, start: u64) {
        let Some(at) = self.slot_at(slot) else { return };
        let mut b = [0u8; SLOT as usize];
        let flags = RECORDED | if creds.states_callers { STATES_CALLERS } else { 0 };
        put_le32(&mut b, off::slot::FLAGS, flags);
        put_le32(&mut b, off::slot::UID, creds.uid);
        put_le32(&mut b, off::slot::GID, creds.gid);
        let groups = &creds.groups[..creds.groups.len().min(MAX_GROUPS)];
        put_le32(&mut b, off::slot::NGROUPS, groups.len() as u32);
        put_le32(&mut b, off::slot::TOTAL, u32::try_from(total_groups).unwrap_or(u32::MAX));
        for (i, g) in groups.iter().enumerate() {
            put_le32(&mut b, off::slot::GROUPS + 4 * i, *g);
        }
        let crc = crc32c::crc32c(&b[..off::slot::CRC]);
        put_le32(&mut b, off::slot::CRC, crc);
        put_le64(&mut b, off::slot::ADMITTED as usize, start);
        let r = self.region.write(at, &b).and_then(|()| self.region.persist(at, SLOT));
        if let Err(e) = r {
            tracing::error!(slot, error = %e, "cannot record a session's credentials");
        }
        self.region.fence();
    }

    /// `slot`'s entries below `upto` passed every check and are about to be applied;
    /// durable when this returns.
    pub(crate) fn admitting(&self, slot: u32, upto: u64) {
        let Some(at) = self.slot_at(slot) else { return };
        let at = at + off::slot::ADMITTED;
        let r = self.region.write_u64(at, upto).and_then(|()| self.region.persist(at, 8));
        if let Err(e) = r {
            tracing::error!(slot, error = %e, "cannot record an admitted LSN");
        }
        self.region.fence();
    }

    /// What is recorded of `slot`'s session: None if nothing (no session, or one from
    /// before credentials were recorded); else its admitted LSN and its credentials, or why
    /// they cannot be believed.
    pub(crate) fn session(&self, slot: u32) -> Option<(u64, Result<SlotCreds, String>)> {
        let at = self.slot_at(slot)?;
        let mut b = [0u8; SLOT as usize];
        self.region.read(at, &mut b).ok()?;
        let flags = le32(&b, off::slot::FLAGS);
        let admitted = le64(&b, off::slot::ADMITTED as usize);
        if flags == 0 && b[..off::slot::CRC + 4].iter().all(|&x| x == 0) {
            return None;
        }
        if le32(&b, off::slot::CRC) != crc32c::crc32c(&b[..off::slot::CRC]) || flags & !(RECORDED | STATES_CALLERS) != 0
        {
            return Some((admitted, Err(format!("the credentials recorded for slot {slot} do not check"))));
        }
        let n = (le32(&b, off::slot::NGROUPS) as usize).min(MAX_GROUPS);
        let groups = (0..n).map(|i| le32(&b, off::slot::GROUPS + 4 * i)).collect();
        let creds = SlotCreds {
            uid: le32(&b, off::slot::UID),
            gid: le32(&b, off::slot::GID),
            groups,
            states_callers: flags & STATES_CALLERS != 0,
        };
        Some((admitted, Ok(creds)))
    }

    /// Who holds `ino`'s write lease (slot) and, if handed back, from which LSN its
    /// entries are not covered.
    pub(crate) fn holder(&self, ino: u64) -> Option<(u32, Option<u64>)> {
        let at = self.at(ino)?;
        let holder = self.region.read_u64(at + off::HOLDER).ok()? as u32;
        let covered = self.region.read_u64(at + off::COVERED).ok()?;
        (holder != 0).then(|| (holder - 1, (covered != 0).then_some(covered)))
    }

    fn put(&self, ino: u64, holder: u32, covered: u64) {
        let Some(at) = self.at(ino) else { return };
        let r = self
            .region
            .write_u64(at + off::HOLDER, u64::from(holder))
            .and_then(|()| self.region.write_u64(at + off::COVERED, covered))
            .and_then(|()| self.region.persist(at, ENTRY));
        if let Err(e) = r {
            tracing::error!(ino, error = %e, "cannot record a lease");
        }
    }

    /// `slot` holds the write leases of `inos`; durable when this returns.
    pub(crate) fn hold(&self, slot: u32, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            self.put(ino, slot + 1, 0);
        }
        self.region.fence();
    }

    /// `slot` handed `ino`'s write lease back covering its log up to `covered` (nothing if
    /// it is not the recorded holder); durable when this returns.
    pub(crate) fn handed_back(&self, slot: u32, ino: u64, covered: u64) {
        if self.holder(ino).is_some_and(|(s, _)| s == slot) {
            self.put(ino, slot + 1, covered.max(1));
            self.region.fence();
        }
    }

    /// `slot` no longer holds `ino` (it freed it).
    pub(crate) fn forget(&self, slot: u32, ino: u64) {
        if self.holder(ino).is_some_and(|(s, _)| s == slot) {
            self.put(ino, 0, 0);
            self.region.fence();
        }
    }

    /// `slot`'s session ended: it holds nothing.
    pub(crate) fn slot_ended(&self, slot: u32) {
        for ino in 1..self.inode_count {
            if self.holder(ino).is_some_and(|(s, _)| s == slot) {
                self.put(ino, 0, 0);
            }
        }
        self.region.fence();
    }

    /// `slot`'s session's log is settled and the slot is about to be released: its
    /// credentials are forgotten (before another session can claim the slot and record its
    /// own); durable when this returns.
    pub(crate) fn session_settled(&self, slot: u32) {
        let Some(at) = self.slot_at(slot) else { return };
        if let Err(e) = self.region.zero(at, SLOT).and_then(|()| self.region.persist(at, SLOT)) {
            tracing::error!(slot, error = %e, "cannot forget a session's credentials");
        }
        self.region.fence();
    }

    /// Nothing is held (after recovery: no session survives a restart).
    pub(crate) fn clear(&self) {
        let r = self
            .region
            .zero(HEADER, self.region.len() - HEADER)
            .and_then(|()| self.region.persist(HEADER, self.region.len() - HEADER));
        if let Err(e) = r {
            tracing::error!(error = %e, "cannot clear the lease record");
        }
        self.region.fence();
    }

    /// Whether `slot`'s entry at `lsn` changing `inos` was covered by write leases.
    pub(crate) fn admits(&self, slot: u32, lsn: u64, inos: impl IntoIterator<Item = u64>) -> Result<(), String> {
        for ino in inos {
            match self.holder(ino) {
                Some((s, covered)) if s == slot && covered.is_none_or(|c| lsn < c) => {}
                _ => return Err(format!("changes inode {ino}, for which no write lease of the slot is recorded")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_recorded_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (f, old) = LeaseFile::open(dir.path(), 100, 4).unwrap();
        assert!(!old);
        f.hold(2, [5, 6, 7]);
        f.handed_back(2, 6, 500);
        f.handed_back(3, 7, 10); // not the holder: ignored
        f.forget(2, 7);
        drop(f);
        let (f, old) = LeaseFile::open(dir.path(), 100, 4).unwrap();
        assert!(old);
        assert_eq!(f.holder(5), Some((2, None)));
        assert_eq!(f.holder(6), Some((2, Some(500))));
        assert_eq!(f.holder(7), None);
        assert!(f.admits(2, 900, [5]).is_ok());
        assert!(f.admits(2, 400, [5, 6]).is_ok());
        assert!(f.admits(2, 500, [6]).is_err(), "logged after the hand-back");
        assert!(f.admits(1, 0, [5]).is_err(), "another slot's inode");
        assert!(f.admits(2, 0, [1 << 40]).is_err(), "out of range");
        f.slot_ended(2);
        assert_eq!(f.holder(5), None);
        f.hold(1, [9]);
        f.clear();
        assert_eq!(f.holder(9), None);
        // Another node size: made afresh.
        drop(f);
        let (_, old) = LeaseFile::open(dir.path(), 200, 4).unwrap();
        assert!(!old);
    }

    /// A session's credentials and admitted LSN survive a reopen; more groups than
    /// recorded keep the first; a settled session leaves nothing; a torn record is not
    /// believed; another slot count makes the file afresh.
    #[test]
    fn session_credentials_are_recorded_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let (f, _) = LeaseFile::open(dir.path(), 100, 4).unwrap();
        assert_eq!(f.session(1), None);
        let groups: Vec<u32> = (100..140).collect();
        let creds = SlotCreds { uid: 65534, gid: 65534, groups: groups.clone(), states_callers: false };
        f.session_attached(1, &creds, groups.len(), 4096);
        f.session_attached(2, &SlotCreds { uid: 0, gid: 0, groups: vec![], states_callers: true }, 0, 0);
        f.admitting(1, 9000);
        f.admitting(9, 1); // no such slot: ignored
        f.hold(1, [5]);
        drop(f);
        let (f, old) = LeaseFile::open(dir.path(), 100, 4).unwrap();
        assert!(old);
        let (admitted, got) = f.session(1).unwrap();
        assert_eq!(admitted, 9000);
        assert_eq!(got.unwrap(), SlotCreds { groups: groups[..MAX_GROUPS].to_vec(), ..creds });
        assert!(f.session(2).unwrap().1.unwrap().states_callers);
        assert_eq!(f.holder(5), Some((1, None)), "inode entries lie past the slots'");
        f.session_settled(2);
        assert_eq!(f.session(2), None);
        // A flipped uid byte: the checksum does not hold.
        let at = f.slot_at(1).unwrap() + off::slot::UID as u64;
        f.region.write(at, &[0]).unwrap();
        assert!(f.session(1).unwrap().1.is_err());
        drop(f);
        let (_, old) = LeaseFile::open(dir.path(), 100, 8).unwrap();
        assert!(!old, "another slot count");
    }

    /// Arbitrary bytes: a garbage header is made afresh; garbage entries under a good header
    /// are read as some holder or none, and every query answers without panicking.
    #[test]
    fn arbitrary_bytes_are_refused_or_read_without_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let (f, _) = LeaseFile::open(dir.path(), 64, 4).unwrap();
        let size = f.region.len() as usize;
        drop(f);
        for round in 0..50 {
            let mut bytes = vec![0u8; size];
            rng.fill(&mut bytes[..]);
            if round % 2 == 0 {
                // Garbage everywhere: the header does not check.
                std::fs::write(&path, &bytes).unwrap();
                let (f, old) = LeaseFile::open(dir.path(), 64, 4).unwrap();
                assert!(!old, "round {round}: a garbage header was taken");
                assert!((0..64).all(|i| f.holder(i).is_none()), "made afresh: nothing held");
            } else {
                // A good header over garbage entries.
                let good = std::fs::read(&path).unwrap();
                bytes[..HEADER as usize].copy_from_slice(&good[..HEADER as usize]);
                std::fs::write(&path, &bytes).unwrap();
                let (f, old) = LeaseFile::open(dir.path(), 64, 4).unwrap();
                assert!(old);
                for slot in 0..6 {
                    let _ = f.session(slot);
                }
                for ino in 0..70 {
                    let _ = f.holder(ino);
                    let _ = f.admits(rng.random(), rng.random(), [ino]);
                }
                f.slot_ended(rng.random());
                f.clear();
            }
        }
    }
}
