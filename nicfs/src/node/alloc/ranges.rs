//! The inode-number ranges clustermgr granted this node, persisted in the node directory
//! (`DIR/inode-ranges.lfs`, mode 0600, never handed to a client), so that a restarted
//! nicfs hands out numbers only from ranges it was granted and never one the cluster's
//! counter gave another node.
//!
//! A range is used only once it is in this file: the file is written whole to
//! `inode-ranges.lfs.new`, fsynced, renamed over the old one and the directory fsynced
//! before the allocator takes the new range. A crash before the rename leaves the old list
//! (the new range was cut from ZooKeeper's counter and is never used by anyone: skipped,
//! as clustermgr skips a range whose answer was lost); after it, the new one.
//!
//! Layout (version 1, every integer little-endian):
//!
//! ```text
//! off      len  field
//!   0        8  magic     b"LFSINOR\0"
//!   8        4  version   RANGES_VERSION (1); another is refused
//!  12        4  count N   ranges that follow, at most MAX_RANGES
//!  16        4  node id   the node the ranges were granted to
//!  20        4  reserved  0
//!  24     16×N  ranges    start u64, end u64 (numbers start..end), start < end, sorted by
//!                         start, disjoint
//!  24+16N    4  crc32c    over bytes 0..24+16N
//! ```
//!
//! The decoder is total: any bytes give a list or a one-line reason.

use clustermgr::InodeRange;
use linefs_bytes::{Fixed, FixedOut, Reader};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The file's name in the node directory.
pub(crate) const RANGES_FILE: &str = "inode-ranges.lfs";
pub(crate) const RANGES_MAGIC: [u8; 8] = *b"LFSINOR\0";
pub(crate) const RANGES_VERSION: u32 = 1;
/// Most ranges a file holds (a node of 2^32 inodes in ranges of 2^16).
pub(crate) const MAX_RANGES: usize = 1 << 16;
const HEADER: usize = 24;
const ENTRY: usize = 16;

/// The ranges of one node, as persisted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RangeFile {
    pub(crate) node: u32,
    pub(crate) ranges: Vec<InodeRange>,
}

impl RangeFile {
    /// The file's bytes (the ranges sorted; the caller keeps them disjoint).
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut ranges = self.ranges.clone();
        ranges.sort();
        let mut h = FixedOut::<HEADER>::new();
        h.array::<0, 8>(RANGES_MAGIC).u32::<8>(RANGES_VERSION).u32::<12>(ranges.len() as u32).u32::<16>(self.node);
        let mut out = Vec::with_capacity(HEADER + ENTRY * ranges.len() + 4);
        h.put(&mut out);
        for r in &ranges {
            linefs_bytes::put_u64(&mut out, r.start);
            linefs_bytes::put_u64(&mut out, r.end);
        }
        let crc = crc32c::crc32c(&out);
        linefs_bytes::put_u32(&mut out, crc);
        out
    }

    /// The list in `b`, or why it is not one.
    pub(crate) fn decode(b: &[u8]) -> Result<RangeFile, String> {
        let mut r = Reader::new(b);
        let h: Fixed<'_, HEADER> = r.fixed("inode range header").map_err(|e| e.to_string())?;
        if h.array::<0, 8>() != RANGES_MAGIC {
            return Err("not an inode range file (bad magic)".into());
        }
        let version = h.u32::<8>();
        if version != RANGES_VERSION {
            return Err(format!("inode range file version {version}, this build reads {RANGES_VERSION}"));
        }
        if !h.is_zero::<20, 24>() {
            return Err("inode range file reserved bytes not zero".into());
        }
        let n = h.u32::<12>() as usize;
        if n > MAX_RANGES {
            return Err(format!("{n} inode ranges (at most {MAX_RANGES})"));
        }
        let body = HEADER + ENTRY * n;
        if b.len() != body + 4 {
            return Err(format!("inode range file of {} bytes, {} expected for {n} ranges", b.len(), body + 4));
        }
        let stored = u32::from_le_bytes([b[body], b[body + 1], b[body + 2], b[body + 3]]);
        let computed = crc32c::crc32c(&b[..body]);
        if stored != computed {
            return Err(format!(
                "inode range file checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let mut ranges: Vec<InodeRange> = Vec::with_capacity(n);
        for _ in 0..n {
            let start = r.u64("range start").map_err(|e| e.to_string())?;
            let end = r.u64("range end").map_err(|e| e.to_string())?;
            if start >= end {
                return Err(format!("inode range {start}..{end} is empty"));
            }
            if ranges.last().is_some_and(|p| p.end > start) {
                return Err(format!("inode range {start}..{end} overlaps or precedes the one before"));
            }
            ranges.push(InodeRange { start, end });
        }
        Ok(RangeFile { node: h.u32::<16>(), ranges })
    }

    /// The list of node directory `dir`; None if the node has none (never had a range).
    pub(crate) fn load(dir: &Path) -> Result<Option<RangeFile>, String> {
        let path = dir.join(RANGES_FILE);
        match std::fs::read(&path) {
            Ok(b) => RangeFile::decode(&b).map(Some).map_err(|e| format!("{}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("cannot read {}: {e}", path.display())),
        }
    }

    /// Makes `self` the list of `dir`, durably (temporary file, fsync, rename, directory
    /// fsync).
    pub(crate) fn store(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{RANGES_FILE}.new"));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        f.write_all(&self.encode())?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, dir.join(RANGES_FILE))?;
        std::fs::File::open(dir)?.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(start: u64, end: u64) -> InodeRange {
        InodeRange { start, end }
    }

    #[test]
    fn a_list_round_trips_and_its_bytes_are_where_the_docs_say() {
        let f = RangeFile { node: 7, ranges: vec![r(40, 50), r(2, 10)] };
        let b = f.encode();
        assert_eq!(b.len(), 24 + 2 * 16 + 4);
        assert_eq!(&b[0..8], b"LFSINOR\0");
        assert_eq!(&b[8..12], &1u32.to_le_bytes());
        assert_eq!(&b[12..16], &2u32.to_le_bytes());
        assert_eq!(&b[16..20], &7u32.to_le_bytes());
        assert_eq!(&b[24..32], &2u64.to_le_bytes(), "sorted by start");
        assert_eq!(&b[48..56], &50u64.to_le_bytes());
        assert_eq!(&b[56..60], &crc32c::crc32c(&b[..56]).to_le_bytes());
        assert_eq!(RangeFile::decode(&b).unwrap(), RangeFile { node: 7, ranges: vec![r(2, 10), r(40, 50)] });
    }

    #[test]
    fn a_bad_list_is_refused_with_a_reason() {
        let good = RangeFile { node: 1, ranges: vec![r(2, 10), r(10, 20)] }.encode();
        let reseal = |mut b: Vec<u8>| {
            let body = b.len() - 4;
            let crc = crc32c::crc32c(&b[..body]);
            b[body..].copy_from_slice(&crc.to_le_bytes());
            b
        };
        let mut v = good.clone();
        v[8] = 2;
        assert!(RangeFile::decode(&reseal(v)).unwrap_err().contains("version 2"));
        let mut o = good.clone();
        o[40..48].copy_from_slice(&5u64.to_le_bytes());
        assert!(RangeFile::decode(&reseal(o)).unwrap_err().contains("overlaps"));
        let mut e = good.clone();
        e[32..40].copy_from_slice(&2u64.to_le_bytes());
        assert!(RangeFile::decode(&reseal(e)).unwrap_err().contains("empty"));
        let mut c = good.clone();
        c[30] ^= 1;
        assert!(RangeFile::decode(&c).unwrap_err().contains("checksum"));
        assert!(RangeFile::decode(&good[..good.len() - 1]).is_err());
        let mut z = good;
        z[21] = 1;
        assert!(RangeFile::decode(&reseal(z)).unwrap_err().contains("reserved"));
    }

    #[test]
    fn store_then_load_and_a_missing_file_is_none() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(RangeFile::load(d.path()).unwrap(), None);
        let f = RangeFile { node: 2, ranges: vec![r(100, 116)] };
        f.store(d.path()).unwrap();
        assert_eq!(RangeFile::load(d.path()).unwrap(), Some(f));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.path().join(RANGES_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        std::fs::write(d.path().join(RANGES_FILE), b"junk").unwrap();
        assert!(RangeFile::load(d.path()).is_err());
    }

    proptest::proptest! {
        /// Any bytes: decoding never panics, and what it takes re-encodes to those bytes.
        #[test]
        fn decode_is_total_and_canonical(b in proptest::collection::vec(proptest::num::u8::ANY, 0..120)) {
            if let Ok(f) = RangeFile::decode(&b) {
                proptest::prop_assert_eq!(f.encode(), b);
            }
        }

        /// A valid file with one bit flipped is refused (the checksum, or a field check).
        #[test]
        fn a_flipped_bit_is_refused(at in 0usize..60, bit in 0u8..8) {
            let mut b = RangeFile { node: 3, ranges: vec![r(2, 10), r(20, 30)] }.encode();
            b[at] ^= 1 << bit;
            proptest::prop_assert!(RangeFile::decode(&b).is_err());
        }
    }
}
