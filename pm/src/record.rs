//! Operation-log records: what libfs appends and what publishers apply to the public area.
//!
//! One log entry (see [`crate::oplog`]) carries an ordered group of records that commit
//! atomically. Every record is a *blind* post-image — "inode 7's attributes are now X",
//! "name `a` in directory 2 now maps to inode 9", "bytes [o, o+n) of inode 9 are now D" —
//! never an increment or a conditional. That is what makes publication idempotent: replaying
//! a suffix of the log over a public area that already holds any part of it gives the same
//! result as applying it once, which is how recovery after a crash mid-publication works.
//!
//! Record framing inside an entry payload (little-endian):
//!
//! ```text
//! off len field
//!   0   1 kind     (RecordKind)
//!   1   1 flags    (INODE: bit 0 = fresh inode, block map and xattrs cleared)
//!   2   2 reserved 0
//!   4   4 len      payload bytes that follow (the record is padded to 8 bytes)
//!   8   … payload
//! ```
//!
//! Payloads:
//!
//! ```text
//! INODE (120 bytes)   0 ino u64 | 8 size u64 | 16 parent u64 | 24 mode u32 | 28 uid u32
//!                     32 gid u32 | 36 nlink u32 | 40 rdev u32 | 44 generation u32
//!                     48 flags u32 | 52 reserved u32 | 56 atime | 72 mtime | 88 ctime
//!                     104 crtime   (each time: sec i64, nsec u32, reserved u32)
//! DIRENT              0 dir u64 | 8 ino u64 (0 = remove the name) | 16 dtype u8
//!                     17 name_len u8 | 18 reserved [6] | 24 name
//! WRITE               0 ino u64 | 8 offset u64 | 16 data (len - 16 bytes)
//! TRUNCATE            0 ino u64 | 8 size u64
//! PUNCH               0 ino u64 | 8 offset u64 | 16 len u64   (reads as zeros afterwards)
//! ALLOC               0 ino u64 | 8 offset u64 | 16 len u64   (allocate, zero-filled)
//! XATTRS              0 ino u64 | 8 count u32 | 12 reserved u32 | then count times:
//!                     name_len u8 | reserved [3] | value_len u32 | name | value
//!                     (the same entry encoding as the public area's xattr stream)
//! FREE_INODE          0 ino u64
//! ```

use crate::layout::{le32, le64, FormatError};

/// Longest name in a directory.
pub const NAME_MAX: usize = 255;
/// Largest value of one extended attribute (Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX: usize = 65536;
/// Bytes before the name of one encoded extended attribute.
pub const XATTR_ENTRY_HEADER: usize = 8;

/// Encoded size of a set of extended attributes (entries only).
pub fn xattrs_len<'a>(attrs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> usize {
    attrs.into_iter().map(|(n, v)| XATTR_ENTRY_HEADER + n.len() + v.len()).sum()
}

/// Append one attribute: name_len u8 | reserved [3] | value_len u32 | name | value.
pub fn put_xattr(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(name.len() as u8);
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Decode `count` attributes that must fill `b` exactly; `None` if they do not, or if a
/// name is empty or a value longer than [`XATTR_VALUE_MAX`].
pub fn get_xattrs(b: &[u8], count: usize) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut attrs = Vec::with_capacity(count.min(1024));
    let mut q = 0;
    for _ in 0..count {
        if q + XATTR_ENTRY_HEADER > b.len() {
            return None;
        }
        let nl = b[q] as usize;
        let vl = le32(b, q + 4) as usize;
        let start = q + XATTR_ENTRY_HEADER;
        if nl == 0 || vl > XATTR_VALUE_MAX || start + nl + vl > b.len() {
            return None;
        }
        attrs.push((b[start..start + nl].to_vec(), b[start + nl..start + nl + vl].to_vec()));
        q = start + nl + vl;
    }
    (q == b.len()).then_some(attrs)
}

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// Directory-entry types (the `DT_*` values of `readdir`).
pub mod dtype {
    pub const FIFO: u8 = 1;
    pub const CHR: u8 = 2;
    pub const DIR: u8 = 4;
    pub const BLK: u8 = 6;
    pub const REG: u8 = 8;
    pub const LNK: u8 = 10;
    pub const SOCK: u8 = 12;

    /// Whether `t` is one of the above.
    pub fn valid(t: u8) -> bool {
        matches!(t, FIFO | CHR | DIR | BLK | REG | LNK | SOCK)
    }

    /// The type of an `st_mode` (0 if its type bits name none). The one mapping between
    /// modes and types: every layer above converts through this and [`mode_bits`].
    pub fn of_mode(mode: u32) -> u8 {
        match mode & libc::S_IFMT {
            libc::S_IFREG => REG,
            libc::S_IFDIR => DIR,
            libc::S_IFLNK => LNK,
            libc::S_IFIFO => FIFO,
            libc::S_IFSOCK => SOCK,
            libc::S_IFCHR => CHR,
            libc::S_IFBLK => BLK,
            _ => 0,
        }
    }

    /// The `S_IF*` bits of a type (0 for an invalid one).
    pub fn mode_bits(t: u8) -> u32 {
        match t {
            REG => libc::S_IFREG,
            DIR => libc::S_IFDIR,
            LNK => libc::S_IFLNK,
            FIFO => libc::S_IFIFO,
            SOCK => libc::S_IFSOCK,
            CHR => libc::S_IFCHR,
            BLK => libc::S_IFBLK,
            _ => 0,
        }
    }
}

/// A point in time as persisted: seconds and nanoseconds since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, PartialOrd, Ord)]
pub struct Timespec {
    pub sec: i64,
    pub nsec: u32,
}

impl Timespec {
    fn put(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.sec.to_le_bytes());
        b[8..12].copy_from_slice(&self.nsec.to_le_bytes());
        b[12..16].fill(0);
    }

    fn get(b: &[u8]) -> Timespec {
        Timespec { sec: le64(b, 0) as i64, nsec: le32(b, 8) }
    }
}

/// The attributes of an inode (everything but its block map and xattrs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InodeImage {
    pub ino: u64,
    pub size: u64,
    /// Parent directory, for directories (`..`); 0 otherwise.
    pub parent: u64,
    /// File type and permission bits, as `st_mode`.
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub rdev: u32,
    pub generation: u32,
    pub flags: u32,
    pub atime: Timespec,
    pub mtime: Timespec,
    pub ctime: Timespec,
    pub crtime: Timespec,
}

/// Encoded size of an [`InodeImage`].
pub const INODE_IMAGE_LEN: usize = 120;

impl InodeImage {
    /// Encode into `b` (at least [`INODE_IMAGE_LEN`] bytes).
    pub fn encode_into(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.ino.to_le_bytes());
        b[8..16].copy_from_slice(&self.size.to_le_bytes());
        b[16..24].copy_from_slice(&self.parent.to_le_bytes());
        b[24..28].copy_from_slice(&self.mode.to_le_bytes());
        b[28..32].copy_from_slice(&self.uid.to_le_bytes());
        b[32..36].copy_from_slice(&self.gid.to_le_bytes());
        b[36..40].copy_from_slice(&self.nlink.to_le_bytes());
        b[40..44].copy_from_slice(&self.rdev.to_le_bytes());
        b[44..48].copy_from_slice(&self.generation.to_le_bytes());
        b[48..52].copy_from_slice(&self.flags.to_le_bytes());
        b[52..56].fill(0);
        self.atime.put(&mut b[56..72]);
        self.mtime.put(&mut b[72..88]);
        self.ctime.put(&mut b[88..104]);
        self.crtime.put(&mut b[104..120]);
    }

    /// Decode from `b` (at least [`INODE_IMAGE_LEN`] bytes).
    pub fn decode(b: &[u8]) -> InodeImage {
        InodeImage {
            ino: le64(b, 0),
            size: le64(b, 8),
            parent: le64(b, 16),
            mode: le32(b, 24),
            uid: le32(b, 28),
            gid: le32(b, 32),
            nlink: le32(b, 36),
            rdev: le32(b, 40),
            generation: le32(b, 44),
            flags: le32(b, 48),
            atime: Timespec::get(&b[56..72]),
            mtime: Timespec::get(&b[72..88]),
            ctime: Timespec::get(&b[88..104]),
            crtime: Timespec::get(&b[104..120]),
        }
    }
}

/// Record kinds, as stored in the first byte of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordKind {
    Inode = 1,
    Dirent = 2,
    Write = 3,
    Truncate = 4,
    Punch = 5,
    Alloc = 6,
    Xattrs = 7,
    FreeInode = 8,
}

/// A decoded record. Write data is not copied: it is named by its offset in the PM region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Inode { fresh: bool, img: InodeImage },
    Dirent { dir: u64, ino: u64, dtype: u8, name: Vec<u8> },
    Write { ino: u64, off: u64, len: u64, data_off: u64 },
    Truncate { ino: u64, size: u64 },
    Punch { ino: u64, off: u64, len: u64 },
    Alloc { ino: u64, off: u64, len: u64 },
    Xattrs { ino: u64, attrs: Vec<(Vec<u8>, Vec<u8>)> },
    FreeInode { ino: u64 },
}

impl Record {
    /// The inode this record changes (for DIRENT, the directory).
    pub fn target(&self) -> u64 {
        match self {
            Record::Inode { img, .. } => img.ino,
            Record::Dirent { dir, .. } => *dir,
            Record::Write { ino, .. }
            | Record::Truncate { ino, .. }
            | Record::Punch { ino, .. }
            | Record::Alloc { ino, .. }
            | Record::Xattrs { ino, .. }
            | Record::FreeInode { ino } => *ino,
        }
    }
}

/// Whether `name` is a valid directory-entry name: 1..=255 bytes, no `/` or NUL, not `.`
/// or `..`.
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != b"."
        && name != b".."
        && !name.iter().any(|&c| c == b'/' || c == 0)
}

/// Builds the payload of one log entry, record by record.
#[derive(Debug, Default, Clone)]
pub struct EntryBuilder {
    buf: Vec<u8>,
    /// (payload offset, length) of each WRITE record's data, in order.
    writes: Vec<(usize, usize)>,
    count: u32,
}

impl EntryBuilder {
    pub fn new() -> EntryBuilder {
        EntryBuilder::default()
    }

    /// The payload built so far.
    pub fn payload(&self) -> &[u8] {
        &self.buf
    }

    /// Number of records.
    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Payload offsets and lengths of the WRITE records' data, in order.
    pub fn write_data(&self) -> &[(usize, usize)] {
        &self.writes
    }

    fn begin(&mut self, kind: RecordKind, flags: u8, len: usize) -> usize {
        self.count += 1;
        self.buf.push(kind as u8);
        self.buf.push(flags);
        self.buf.extend_from_slice(&[0, 0]);
        self.buf.extend_from_slice(&(len as u32).to_le_bytes());
        let start = self.buf.len();
        self.buf.resize(start + len, 0);
        start
    }

    fn end(&mut self) {
        let pad = (8 - self.buf.len() % 8) % 8;
        self.buf.resize(self.buf.len() + pad, 0);
    }

    pub fn inode(&mut self, img: &InodeImage, fresh: bool) {
        let s = self.begin(RecordKind::Inode, fresh as u8, INODE_IMAGE_LEN);
        img.encode_into(&mut self.buf[s..s + INODE_IMAGE_LEN]);
        self.end();
    }

    /// `ino == 0` removes `name`.
    pub fn dirent(&mut self, dir: u64, name: &[u8], ino: u64, dtype: u8) {
        debug_assert!(name.len() <= NAME_MAX);
        let s = self.begin(RecordKind::Dirent, 0, 24 + name.len());
        let b = &mut self.buf[s..];
        b[0..8].copy_from_slice(&dir.to_le_bytes());
        b[8..16].copy_from_slice(&ino.to_le_bytes());
        b[16] = dtype;
        b[17] = name.len() as u8;
        b[24..24 + name.len()].copy_from_slice(name);
        self.end();
    }

    pub fn write(&mut self, ino: u64, off: u64, data: &[u8]) {
        let s = self.begin(RecordKind::Write, 0, 16 + data.len());
        self.buf[s..s + 8].copy_from_slice(&ino.to_le_bytes());
        self.buf[s + 8..s + 16].copy_from_slice(&off.to_le_bytes());
        self.buf[s + 16..s + 16 + data.len()].copy_from_slice(data);
        self.writes.push((s + 16, data.len()));
        self.end();
    }

    fn three(&mut self, kind: RecordKind, a: u64, b: u64, c: Option<u64>) {
        let len = if c.is_some() { 24 } else { 16 };
        let s = self.begin(kind, 0, len);
        self.buf[s..s + 8].copy_from_slice(&a.to_le_bytes());
        self.buf[s + 8..s + 16].copy_from_slice(&b.to_le_bytes());
        if let Some(c) = c {
            self.buf[s + 16..s + 24].copy_from_slice(&c.to_le_bytes());
        }
        self.end();
    }

    pub fn truncate(&mut self, ino: u64, size: u64) {
        self.three(RecordKind::Truncate, ino, size, None);
    }

    pub fn punch(&mut self, ino: u64, off: u64, len: u64) {
        self.three(RecordKind::Punch, ino, off, Some(len));
    }

    pub fn alloc(&mut self, ino: u64, off: u64, len: u64) {
        self.three(RecordKind::Alloc, ino, off, Some(len));
    }

    /// The complete set of extended attributes of `ino` after this entry.
    pub fn xattrs<'a>(&mut self, ino: u64, attrs: impl IntoIterator<Item = (&'a [u8], &'a [u8])> + Clone) {
        let mut enc = Vec::with_capacity(xattrs_len(attrs.clone()));
        let mut count = 0u32;
        for (n, v) in attrs {
            put_xattr(&mut enc, n, v);
            count += 1;
        }
        let s = self.begin(RecordKind::Xattrs, 0, 16 + enc.len());
        self.buf[s + 16..s + 16 + enc.len()].copy_from_slice(&enc);
        self.buf[s..s + 8].copy_from_slice(&ino.to_le_bytes());
        self.buf[s + 8..s + 12].copy_from_slice(&count.to_le_bytes());
        self.end();
    }

    pub fn free_inode(&mut self, ino: u64) {
        let s = self.begin(RecordKind::FreeInode, 0, 8);
        self.buf[s..s + 8].copy_from_slice(&ino.to_le_bytes());
        self.end();
    }
}

fn corrupt(detail: String) -> FormatError {
    FormatError::Corrupt { what: "log record".into(), detail }
}

/// Decode the records of an entry payload that starts at region offset `payload_off`.
/// Structural validation only (lengths, names, kinds); semantic checks (inode ranges,
/// types) are the publisher's.
pub fn decode_records(payload: &[u8], payload_off: u64) -> Result<Vec<Record>, FormatError> {
    let mut out = Vec::new();
    let mut p = 0usize;
    while p < payload.len() {
        if payload.len() - p < 8 {
            return Err(corrupt(format!("trailing {} bytes at {p}", payload.len() - p)));
        }
        let kind = payload[p];
        let flags = payload[p + 1];
        let len = le32(payload, p + 4) as usize;
        let s = p + 8;
        let Some(e) = s.checked_add(len).filter(|&e| e <= payload.len()) else {
            return Err(corrupt(format!("record at {p} of length {len} overruns the entry")));
        };
        let b = &payload[s..e];
        let need = |n: usize| {
            if b.len() == n {
                Ok(())
            } else {
                Err(corrupt(format!("record kind {kind} at {p} has length {}, expected {n}", b.len())))
            }
        };
        let rec = match kind {
            1 => {
                need(INODE_IMAGE_LEN)?;
                Record::Inode { fresh: flags & 1 != 0, img: InodeImage::decode(b) }
            }
            2 => {
                if b.len() < 24 || b.len() != 24 + b[17] as usize {
                    return Err(corrupt(format!("dirent at {p}: bad name length")));
                }
                let name = b[24..].to_vec();
                if !valid_name(&name) {
                    return Err(corrupt(format!("dirent at {p}: invalid name")));
                }
                let ino = le64(b, 8);
                if ino != 0 && !dtype::valid(b[16]) {
                    return Err(corrupt(format!("dirent at {p}: bad type {}", b[16])));
                }
                Record::Dirent { dir: le64(b, 0), ino, dtype: b[16], name }
            }
            3 => {
                if b.len() < 16 {
                    return Err(corrupt(format!("write at {p}: too short")));
                }
                let off = le64(b, 8);
                let len = (b.len() - 16) as u64;
                if off.checked_add(len).is_none_or(|end| end > MAX_FILE_SIZE) {
                    return Err(corrupt(format!("write at {p}: range beyond the largest file")));
                }
                Record::Write { ino: le64(b, 0), off, len, data_off: payload_off + (s + 16) as u64 }
            }
            4 => {
                need(16)?;
                let size = le64(b, 8);
                if size > MAX_FILE_SIZE {
                    return Err(corrupt(format!("truncate at {p}: size {size} too large")));
                }
                Record::Truncate { ino: le64(b, 0), size }
            }
            5 | 6 => {
                need(24)?;
                let (ino, off, len) = (le64(b, 0), le64(b, 8), le64(b, 16));
                if off.checked_add(len).is_none_or(|end| end > MAX_FILE_SIZE) {
                    return Err(corrupt(format!("range record at {p} beyond the largest file")));
                }
                if kind == 5 {
                    Record::Punch { ino, off, len }
                } else {
                    Record::Alloc { ino, off, len }
                }
            }
            7 => {
                if b.len() < 16 {
                    return Err(corrupt(format!("xattrs at {p}: too short")));
                }
                let Some(attrs) = get_xattrs(&b[16..], le32(b, 8) as usize) else {
                    return Err(corrupt(format!("xattrs at {p}: bad lengths")));
                };
                Record::Xattrs { ino: le64(b, 0), attrs }
            }
            8 => {
                need(8)?;
                Record::FreeInode { ino: le64(b, 0) }
            }
            k => return Err(corrupt(format!("unknown record kind {k} at {p}"))),
        };
        out.push(rec);
        p = e + (8 - e % 8) % 8;
    }
    Ok(out)
}

/// Largest file size linefs supports (the block map reaches 512 GiB; keep well inside).
pub const MAX_FILE_SIZE: u64 = 1 << 39;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_all_kinds() {
        let img = InodeImage { ino: 5, size: 9, mode: 0o100644, nlink: 1, ..Default::default() };
        let mut b = EntryBuilder::new();
        b.inode(&img, true);
        b.dirent(1, b"hello", 5, dtype::REG);
        b.write(5, 3, b"abcdefghi");
        b.truncate(5, 2);
        b.punch(5, 0, 1);
        b.alloc(5, 0, 4096);
        b.xattrs(5, [(&b"user.a"[..], &b"v"[..]), (&b"user.b"[..], &b""[..])]);
        b.free_inode(5);
        let recs = decode_records(b.payload(), 1000).unwrap();
        assert_eq!(recs.len(), 8);
        assert_eq!(recs[0], Record::Inode { fresh: true, img });
        assert_eq!(recs[1], Record::Dirent { dir: 1, ino: 5, dtype: dtype::REG, name: b"hello".to_vec() });
        let (pos, len) = b.write_data()[0];
        assert_eq!(recs[2], Record::Write { ino: 5, off: 3, len: 9, data_off: 1000 + pos as u64 });
        assert_eq!(&b.payload()[pos..pos + len], b"abcdefghi");
        assert_eq!(
            recs[6],
            Record::Xattrs { ino: 5, attrs: vec![(b"user.a".to_vec(), b"v".to_vec()), (b"user.b".to_vec(), vec![])] }
        );
        assert_eq!(recs[7], Record::FreeInode { ino: 5 });
    }

    #[test]
    fn rejects_malformed() {
        let mut b = EntryBuilder::new();
        b.dirent(1, b"x", 2, dtype::REG);
        let mut p = b.payload().to_vec();
        p[4] = 200; // length overruns
        assert!(decode_records(&p, 0).is_err());
        let mut p = b.payload().to_vec();
        p[8 + 24] = b'/';
        assert!(decode_records(&p, 0).is_err());
        let mut p = b.payload().to_vec();
        p[0] = 99;
        assert!(decode_records(&p, 0).is_err());
        assert!(decode_records(&[1, 2, 3], 0).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode_records(&bytes, 0);
        }
    }
}
