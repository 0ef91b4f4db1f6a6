//! The node's write leases, recorded in PM (`leases.pm` in the node's directory), so that
//! after a crash of nicfs the committed log suffixes it finds are admitted by the same rule
//! as in normal publication ([`crate::lease::LeaseTable::may_change`]): an entry of a slot
//! is replayed only if that slot's session held the write lease of every inode the entry
//! changes, and had not handed it back before the entry.
//!
//! The record is one fixed entry per inode number — who holds its write lease and, once it
//! is handed back, how far the holder's log covers it — not a journal: it is current at
//! every moment, needs no compaction, and recovery reads it directly. A write lease is
//! recorded (persisted and fenced) *before* the client learns of it, so every entry a client
//! logs under a lease is covered by a durable record; a hand-back is recorded before the
//! lease table acts on it, so it is durable before anyone else is granted the inode. After
//! recovery the record is cleared: no session survives a restart.
//!
//! Layout (little-endian):
//!
//! ```text
//! header, 64 bytes                     entry of inode i, at 64 + 16 i
//!  0  8 magic        b"LFLEASES"        0 4 holder   slot + 1 (0: no write lease)
//!  8  4 version      1                  4 4 reserved 0
//! 12  4 reserved     0                  8 8 covered  0: held; else the holder handed it
//! 16  8 inode_count  of the node                     back and its entries from this LSN
//! 24 36 reserved     0                               on are not covered
//! 60  4 crc32c       over bytes 0..60
//! ```
//!
//! A file that is missing, of another size or version, or whose header does not check is
//! made afresh, with a log line, and recovery then trusts the logs as it did before leases
//! were recorded (a node that is new, or ran host-only until now, has no record; see
//! [`crate::node::Node::open`]). Entries are read as they are: any bytes give some holder
//! and LSN, never a panic.

use linefs_pm::layout::{le32, le64, put_le32, put_le64};
use linefs_pm::region::PmRegion;
use std::path::Path;

pub const FILE: &str = "leases.pm";
const MAGIC: &[u8; 8] = b"LFLEASES";
const VERSION: u32 = 1;
const HEADER: u64 = 64;
const ENTRY: u64 = 16;

/// Byte offsets of the header and of an entry (the table in the module doc).
pub mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const INODE_COUNT: usize = 16;
    pub const CRC: usize = 60;
    /// Within an entry.
    pub const HOLDER: u64 = 0;
    pub const COVERED: u64 = 8;
}

/// The lease record of a node.
pub struct LeaseFile {
    region: PmRegion,
    inode_count: u64,
}

impl LeaseFile {
    /// Opens the record in `dir` for a node of `inode_count` inodes, or makes it afresh;
    /// says whether the old content is there to be read.
    pub fn open(dir: &Path, inode_count: u64) -> Result<(LeaseFile, bool), String> {
        let path = dir.join(FILE);
        // PM regions are at least 256 KiB.
        let size = (HEADER + ENTRY * inode_count).next_multiple_of(4096).max(256 << 10);
        if let Ok(region) = PmRegion::open(&path) {
            let f = LeaseFile { region, inode_count };
            match f.check(size) {
                Ok(()) => return Ok((f, true)),
                Err(why) => tracing::warn!(path = %path.display(), %why, "lease record unusable; made afresh"),
            }
        }
        let _ = std::fs::remove_file(&path);
        // Mode 0600 from the first instant: the record says which inodes each slot may change.
        let (region, _) = PmRegion::create_new(&path, size, 0o600)
            .map_err(|e| format!("cannot create the lease record {}: {e}", path.display()))?;
        let f = LeaseFile { region, inode_count };
        let mut h = [0u8; HEADER as usize];
        h[off::MAGIC..off::MAGIC + 8].copy_from_slice(MAGIC);
        put_le32(&mut h, off::VERSION, VERSION);
        put_le64(&mut h, off::INODE_COUNT, inode_count);
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
        if le32(&h, off::VERSION) != VERSION || le64(&h, off::INODE_COUNT) != self.inode_count {
            return Err("another version or node".into());
        }
        Ok(())
    }

    fn io<T>(&self, r: Result<T, linefs_pm::region::PmError>) -> Result<T, String> {
        r.map_err(|e| format!("lease record: {e}"))
    }

    fn at(&self, ino: u64) -> Option<u64> {
        (ino < self.inode_count).then(|| HEADER + ENTRY * ino)
    }

    /// Who holds `ino`'s write lease (slot) and, if handed back, from which LSN its
    /// entries are not covered.
    pub fn holder(&self, ino: u64) -> Option<(u32, Option<u64>)> {
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
    pub fn hold(&self, slot: u32, inos: impl IntoIterator<Item = u64>) {
        for ino in inos {
            self.put(ino, slot + 1, 0);
        }
        self.region.fence();
    }

    /// `slot` handed `ino`'s write lease back covering its log up to `covered` (nothing if
    /// it is not the recorded holder); durable when this returns.
    pub fn handed_back(&self, slot: u32, ino: u64, covered: u64) {
        if self.holder(ino).is_some_and(|(s, _)| s == slot) {
            self.put(ino, slot + 1, covered.max(1));
            self.region.fence();
        }
    }

    /// `slot` no longer holds `ino` (it freed it).
    pub fn forget(&self, slot: u32, ino: u64) {
        if self.holder(ino).is_some_and(|(s, _)| s == slot) {
            self.put(ino, 0, 0);
            self.region.fence();
        }
    }

    /// `slot`'s session ended: it holds nothing.
    pub fn slot_ended(&self, slot: u32) {
        for ino in 1..self.inode_count {
            if self.holder(ino).is_some_and(|(s, _)| s == slot) {
                self.put(ino, 0, 0);
            }
        }
        self.region.fence();
    }

    /// Nothing is held (after recovery: no session survives a restart).
    pub fn clear(&self) {
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
    pub fn admits(&self, slot: u32, lsn: u64, inos: impl IntoIterator<Item = u64>) -> Result<(), String> {
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
        let (f, old) = LeaseFile::open(dir.path(), 100).unwrap();
        assert!(!old);
        f.hold(2, [5, 6, 7]);
        f.handed_back(2, 6, 500);
        f.handed_back(3, 7, 10); // not the holder: ignored
        f.forget(2, 7);
        drop(f);
        let (f, old) = LeaseFile::open(dir.path(), 100).unwrap();
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
        let (_, old) = LeaseFile::open(dir.path(), 200).unwrap();
        assert!(!old);
    }

    /// Arbitrary bytes: a garbage header is made afresh; garbage entries under a good header
    /// are read as some holder or none, and every query answers without panicking.
    #[test]
    fn arbitrary_bytes_are_refused_or_read_without_panic() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let (f, _) = LeaseFile::open(dir.path(), 64).unwrap();
        let size = f.region.len() as usize;
        drop(f);
        for round in 0..50 {
            let mut bytes = vec![0u8; size];
            rng.fill(&mut bytes[..]);
            if round % 2 == 0 {
                // Garbage everywhere: the header does not check.
                std::fs::write(&path, &bytes).unwrap();
                let (f, old) = LeaseFile::open(dir.path(), 64).unwrap();
                assert!(!old, "round {round}: a garbage header was taken");
                assert!((0..64).all(|i| f.holder(i).is_none()), "made afresh: nothing held");
            } else {
                // A good header over garbage entries.
                let good = std::fs::read(&path).unwrap();
                bytes[..HEADER as usize].copy_from_slice(&good[..HEADER as usize]);
                std::fs::write(&path, &bytes).unwrap();
                let (f, old) = LeaseFile::open(dir.path(), 64).unwrap();
                assert!(old);
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
