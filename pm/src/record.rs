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
//! CALLER              0 uid u32 | 4 gid u32 | 8 ngroups u32 | 12 reserved u32
//!                     16 groups: ngroups × u32 (at most CALLER_MAX_GROUPS)
//! OPEN_WRITE          0 ino u64
//! ```
//!
//! CALLER (format version 5) is not a change but the entry's metadata: who the entry was
//! logged for (a mount daemon serves many users and states each operation's caller, as a
//! FUSE server is told it). At most one per entry, and first; an entry without one was
//! logged for the client process itself. [`decode_entry`] returns it apart from the
//! records; [`decode_records`] skips it.
//!
//! OPEN_WRITE (format version 6) changes nothing either: it says that the entry's caller
//! opened regular file `ino` for writing. POSIX lets a file be written through such an open
//! whatever its mode becomes later, so a publisher that checks permissions (nicfs,
//! [`crate::public::Permissions`]) checks the open itself, in log order, and then lets the
//! session write the file's data. Applying it, replaying it and coalescing it change no
//! state, so lease admission does not count its inode ([`Record::changed_inode`]): a writer
//! logs it under a read lease. It is a record, not entry metadata like CALLER, because it
//! is checked like one, in order with the records around it.
//!
//! The offsets are the constants of [`rec_off`] (framing and each kind's fixed fields),
//! [`inode_off`] and [`time_off`] (the INODE payload, [`InodeImage`], which the public area's
//! inode also embeds) and [`xattr_off`] (one attribute of the stream), used by the encoders and
//! the decoders alike, through linefs-bytes (the codec proto's payloads use too, since
//! replication carries these bytes in frames): fixed parts by const offsets checked at
//! compile time, everything else through a bounds-checked reader, so no input can make a
//! decoder panic. `pm/tests/format_bytes.rs` pins the bytes against these tables.

use crate::layout::FormatError;
use linefs_bytes::{Fixed, FixedOut, Reader};

/// Longest name in a directory.
pub const NAME_MAX: usize = 255;
/// Largest value of one extended attribute (Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_MAX: usize = 65536;
/// Bytes before the name of one encoded extended attribute.
pub const XATTR_ENTRY_HEADER: usize = xattr_off::NAME;

/// Byte offsets of one encoded extended attribute (in an XATTRS record and in the public
/// area's xattr stream).
pub mod xattr_off {
    pub const NAME_LEN: usize = 0;
    pub const RESERVED: usize = 1;
    pub const VALUE_LEN: usize = 4;
    /// The name, then the value right after it.
    pub const NAME: usize = 8;
}

/// Byte offsets of the record framing and of each record kind's fixed fields (the tables in
/// the module doc). Payload offsets count from the end of the framing header.
pub mod rec_off {
    pub const KIND: usize = 0;
    pub const FLAGS: usize = 1;
    pub const RESERVED: usize = 2;
    pub const LEN: usize = 4;
    /// The record's payload; records are padded to a multiple of [`ALIGN`].
    pub const PAYLOAD: usize = 8;
    pub const ALIGN: usize = 8;

    /// DIRENT.
    pub mod dirent {
        pub const DIR: usize = 0;
        pub const INO: usize = 8;
        pub const DTYPE: usize = 16;
        pub const NAME_LEN: usize = 17;
        pub const RESERVED: usize = 18;
        pub const NAME: usize = 24;
    }
    /// WRITE.
    pub mod write {
        pub const INO: usize = 0;
        pub const OFFSET: usize = 8;
        pub const DATA: usize = 16;
    }
    /// TRUNCATE.
    pub mod truncate {
        pub const INO: usize = 0;
        pub const SIZE: usize = 8;
        /// Payload length.
        pub const END: usize = 16;
    }
    /// PUNCH and ALLOC.
    pub mod range {
        pub const INO: usize = 0;
        pub const OFFSET: usize = 8;
        pub const LEN: usize = 16;
        /// Payload length.
        pub const END: usize = 24;
    }
    /// XATTRS.
    pub mod xattrs {
        pub const INO: usize = 0;
        pub const COUNT: usize = 8;
        pub const RESERVED: usize = 12;
        /// `count` attributes, each encoded as in [`crate::record::xattr_off`].
        pub const ENTRIES: usize = 16;
    }
    /// FREE_INODE.
    pub mod free_inode {
        pub const INO: usize = 0;
        /// Payload length.
        pub const END: usize = 8;
    }
    /// OPEN_WRITE.
    pub mod open_write {
        pub const INO: usize = 0;
        /// Payload length.
        pub const END: usize = 8;
    }
    /// CALLER.
    pub mod caller {
        pub const UID: usize = 0;
        pub const GID: usize = 4;
        pub const NGROUPS: usize = 8;
        pub const RESERVED: usize = 12;
        pub const GROUPS: usize = 16;
    }
}

/// Most supplementary groups a CALLER record carries.
pub const CALLER_MAX_GROUPS: usize = 256;

/// Who an entry was logged for (a CALLER record).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups, at most [`CALLER_MAX_GROUPS`].
    pub groups: Vec<u32>,
}

impl Caller {
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether the caller is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// Encoded size of a set of extended attributes (entries only).
pub fn xattrs_len<'a>(attrs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> usize {
    attrs.into_iter().map(|(n, v)| XATTR_ENTRY_HEADER + n.len() + v.len()).sum()
}

/// Append one attribute: name_len u8 | reserved \[3\] | value_len u32 | name | value.
pub fn put_xattr(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    use xattr_off as o;
    FixedOut::<{ o::NAME }>::new()
        .u8::<{ o::NAME_LEN }>(name.len() as u8)
        .u32::<{ o::VALUE_LEN }>(value.len() as u32)
        .put(out);
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// Decode `count` attributes that must fill `b` exactly; `None` if they do not, or if a
/// name is empty or a value longer than [`XATTR_VALUE_MAX`].
pub fn get_xattrs(b: &[u8], count: usize) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    use xattr_off as o;
    let mut attrs = Vec::with_capacity(count.min(1024));
    let mut r = Reader::new(b);
    for _ in 0..count {
        let head: Fixed<'_, { o::NAME }> = r.fixed("xattr header").ok()?;
        let nl = head.u8::<{ o::NAME_LEN }>() as usize;
        let vl = head.u32::<{ o::VALUE_LEN }>() as usize;
        if nl == 0 || vl > XATTR_VALUE_MAX {
            return None;
        }
        let name = r.bytes("xattr name", nl).ok()?;
        let value = r.bytes("xattr value", vl).ok()?;
        attrs.push((name.to_vec(), value.to_vec()));
    }
    r.is_empty().then_some(attrs)
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

/// Byte offsets of a persisted [`Timespec`] (16 bytes: sec i64, nsec u32, reserved u32).
pub mod time_off {
    pub const SEC: usize = 0;
    pub const NSEC: usize = 8;
    pub const RESERVED: usize = 12;
    pub const LEN: usize = 16;
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
pub const INODE_IMAGE_LEN: usize = inode_off::LEN;

/// Byte offsets of an encoded [`InodeImage`] (the INODE record's payload; also bytes
/// 0..120 of the public area's inode). Each time is a [`time_off`] layout.
pub mod inode_off {
    pub const INO: usize = 0;
    pub const SIZE: usize = 8;
    pub const PARENT: usize = 16;
    pub const MODE: usize = 24;
    pub const UID: usize = 28;
    pub const GID: usize = 32;
    pub const NLINK: usize = 36;
    pub const RDEV: usize = 40;
    pub const GENERATION: usize = 44;
    pub const FLAGS: usize = 48;
    pub const RESERVED: usize = 52;
    pub const ATIME: usize = 56;
    pub const MTIME: usize = 72;
    pub const CTIME: usize = 88;
    pub const CRTIME: usize = 104;
    pub const LEN: usize = 120;
    const T: usize = super::time_off::LEN;
    const _: () = assert!(ATIME + T == MTIME && MTIME + T == CTIME && CTIME + T == CRTIME && CRTIME + T == LEN);
}

impl InodeImage {
    /// The encoded image.
    pub fn encode(&self) -> [u8; INODE_IMAGE_LEN] {
        use inode_off as o;
        use time_off as t;
        let mut f = FixedOut::<{ o::LEN }>::new();
        f.u64::<{ o::INO }>(self.ino)
            .u64::<{ o::SIZE }>(self.size)
            .u64::<{ o::PARENT }>(self.parent)
            .u32::<{ o::MODE }>(self.mode)
            .u32::<{ o::UID }>(self.uid)
            .u32::<{ o::GID }>(self.gid)
            .u32::<{ o::NLINK }>(self.nlink)
            .u32::<{ o::RDEV }>(self.rdev)
            .u32::<{ o::GENERATION }>(self.generation)
            .u32::<{ o::FLAGS }>(self.flags)
            // RESERVED, and each time's reserved word, stay zero.
            .i64::<{ o::ATIME + t::SEC }>(self.atime.sec)
            .u32::<{ o::ATIME + t::NSEC }>(self.atime.nsec)
            .i64::<{ o::MTIME + t::SEC }>(self.mtime.sec)
            .u32::<{ o::MTIME + t::NSEC }>(self.mtime.nsec)
            .i64::<{ o::CTIME + t::SEC }>(self.ctime.sec)
            .u32::<{ o::CTIME + t::NSEC }>(self.ctime.nsec)
            .i64::<{ o::CRTIME + t::SEC }>(self.crtime.sec)
            .u32::<{ o::CRTIME + t::NSEC }>(self.crtime.nsec);
        *f.bytes()
    }

    /// Decodes an encoded image.
    pub fn read(b: &[u8; INODE_IMAGE_LEN]) -> InodeImage {
        use inode_off as o;
        use time_off as t;
        let f = Fixed::new(b);
        InodeImage {
            ino: f.u64::<{ o::INO }>(),
            size: f.u64::<{ o::SIZE }>(),
            parent: f.u64::<{ o::PARENT }>(),
            mode: f.u32::<{ o::MODE }>(),
            uid: f.u32::<{ o::UID }>(),
            gid: f.u32::<{ o::GID }>(),
            nlink: f.u32::<{ o::NLINK }>(),
            rdev: f.u32::<{ o::RDEV }>(),
            generation: f.u32::<{ o::GENERATION }>(),
            flags: f.u32::<{ o::FLAGS }>(),
            atime: Timespec { sec: f.i64::<{ o::ATIME + t::SEC }>(), nsec: f.u32::<{ o::ATIME + t::NSEC }>() },
            mtime: Timespec { sec: f.i64::<{ o::MTIME + t::SEC }>(), nsec: f.u32::<{ o::MTIME + t::NSEC }>() },
            ctime: Timespec { sec: f.i64::<{ o::CTIME + t::SEC }>(), nsec: f.u32::<{ o::CTIME + t::NSEC }>() },
            crtime: Timespec { sec: f.i64::<{ o::CRTIME + t::SEC }>(), nsec: f.u32::<{ o::CRTIME + t::NSEC }>() },
        }
    }

    /// Encodes into the first [`INODE_IMAGE_LEN`] bytes of `b`, which the caller sized (a
    /// shorter `b` is the caller's bug, and panics).
    pub fn encode_into(&self, b: &mut [u8]) {
        b[..INODE_IMAGE_LEN].copy_from_slice(&self.encode());
    }

    /// Decodes the first [`INODE_IMAGE_LEN`] bytes of `b`, which the caller sized (a shorter
    /// `b` is the caller's bug, and panics). Bytes of unchecked length go through
    /// [`InodeImage::read`] after a checked take, as the record decoder does.
    pub fn decode(b: &[u8]) -> InodeImage {
        InodeImage::read(b.first_chunk().expect("the caller passes an inode image's bytes"))
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
    Caller = 9,
    OpenWrite = 10,
}

impl RecordKind {
    /// The kind stored as `k`, if any.
    pub fn from_u8(k: u8) -> Option<RecordKind> {
        use RecordKind::*;
        [Inode, Dirent, Write, Truncate, Punch, Alloc, Xattrs, FreeInode, Caller, OpenWrite]
            .into_iter()
            .find(|&r| r as u8 == k)
    }
}

/// INODE record flag: a fresh inode (block map and xattrs cleared).
pub const INODE_FRESH: u8 = 1;

/// A decoded record. Write data is not copied: it is named by its offset in the PM region.
/// `OpenWrite`: the entry's caller opened `ino` for writing (it changes nothing).
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
    OpenWrite { ino: u64 },
}

impl Record {
    /// The inode this record names (for DIRENT, the directory; for OPEN_WRITE, the file
    /// opened, which it does not change).
    pub fn target(&self) -> u64 {
        match self {
            Record::Inode { img, .. } => img.ino,
            Record::Dirent { dir, .. } => *dir,
            Record::Write { ino, .. }
            | Record::Truncate { ino, .. }
            | Record::Punch { ino, .. }
            | Record::Alloc { ino, .. }
            | Record::Xattrs { ino, .. }
            | Record::FreeInode { ino }
            | Record::OpenWrite { ino } => *ino,
        }
    }

    /// The inode applying the record changes — its [`target`](Record::target) — or None
    /// for OPEN_WRITE, which changes nothing: what a publication touches, and what the
    /// writer must hold the write lease of.
    pub fn changed_inode(&self) -> Option<u64> {
        (!matches!(self, Record::OpenWrite { .. })).then(|| self.target())
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

    /// Adds a record whose payload is `fixed` then `tail`, padded; returns the offset of
    /// `tail` in the entry payload.
    fn push(&mut self, kind: RecordKind, flags: u8, fixed: &[u8], tail: &[u8]) -> usize {
        self.count += 1;
        let len = fixed.len() + tail.len();
        FixedOut::<{ rec_off::PAYLOAD }>::new()
            .u8::<{ rec_off::KIND }>(kind as u8)
            .u8::<{ rec_off::FLAGS }>(flags)
            .u32::<{ rec_off::LEN }>(len as u32)
            .put(&mut self.buf);
        self.buf.extend_from_slice(fixed);
        let at = self.buf.len();
        self.buf.extend_from_slice(tail);
        let padded = self.buf.len().next_multiple_of(rec_off::ALIGN);
        self.buf.resize(padded, 0);
        at
    }

    pub fn inode(&mut self, img: &InodeImage, fresh: bool) {
        let flags = if fresh { INODE_FRESH } else { 0 };
        self.push(RecordKind::Inode, flags, &img.encode(), &[]);
    }

    /// `ino == 0` removes `name`.
    pub fn dirent(&mut self, dir: u64, name: &[u8], ino: u64, dtype: u8) {
        use rec_off::dirent as o;
        debug_assert!(name.len() <= NAME_MAX);
        let mut f = FixedOut::<{ o::NAME }>::new();
        f.u64::<{ o::DIR }>(dir)
            .u64::<{ o::INO }>(ino)
            .u8::<{ o::DTYPE }>(dtype)
            .u8::<{ o::NAME_LEN }>(name.len() as u8);
        self.push(RecordKind::Dirent, 0, f.bytes(), name);
    }

    pub fn write(&mut self, ino: u64, off: u64, data: &[u8]) {
        use rec_off::write as o;
        let mut f = FixedOut::<{ o::DATA }>::new();
        f.u64::<{ o::INO }>(ino).u64::<{ o::OFFSET }>(off);
        let at = self.push(RecordKind::Write, 0, f.bytes(), data);
        self.writes.push((at, data.len()));
    }

    pub fn truncate(&mut self, ino: u64, size: u64) {
        use rec_off::truncate as o;
        let mut f = FixedOut::<{ o::END }>::new();
        f.u64::<{ o::INO }>(ino).u64::<{ o::SIZE }>(size);
        self.push(RecordKind::Truncate, 0, f.bytes(), &[]);
    }

    fn range(&mut self, kind: RecordKind, ino: u64, off: u64, len: u64) {
        use rec_off::range as o;
        let mut f = FixedOut::<{ o::END }>::new();
        f.u64::<{ o::INO }>(ino).u64::<{ o::OFFSET }>(off).u64::<{ o::LEN }>(len);
        self.push(kind, 0, f.bytes(), &[]);
    }

    pub fn punch(&mut self, ino: u64, off: u64, len: u64) {
        self.range(RecordKind::Punch, ino, off, len);
    }

    pub fn alloc(&mut self, ino: u64, off: u64, len: u64) {
        self.range(RecordKind::Alloc, ino, off, len);
    }

    /// The complete set of extended attributes of `ino` after this entry.
    pub fn xattrs<'a>(&mut self, ino: u64, attrs: impl IntoIterator<Item = (&'a [u8], &'a [u8])> + Clone) {
        let mut enc = Vec::with_capacity(xattrs_len(attrs.clone()));
        let mut count = 0u32;
        for (n, v) in attrs {
            put_xattr(&mut enc, n, v);
            count += 1;
        }
        use rec_off::xattrs as o;
        let mut f = FixedOut::<{ o::ENTRIES }>::new();
        f.u64::<{ o::INO }>(ino).u32::<{ o::COUNT }>(count);
        self.push(RecordKind::Xattrs, 0, f.bytes(), &enc);
    }

    pub fn free_inode(&mut self, ino: u64) {
        use rec_off::free_inode as o;
        let mut f = FixedOut::<{ o::END }>::new();
        f.u64::<{ o::INO }>(ino);
        self.push(RecordKind::FreeInode, 0, f.bytes(), &[]);
    }

    /// The entry's caller opened regular file `ino` for writing.
    pub fn open_write(&mut self, ino: u64) {
        use rec_off::open_write as o;
        let mut f = FixedOut::<{ o::END }>::new();
        f.u64::<{ o::INO }>(ino);
        self.push(RecordKind::OpenWrite, 0, f.bytes(), &[]);
    }

    /// A builder of an entry logged for `caller` (its CALLER record first). A caller with
    /// more than [`CALLER_MAX_GROUPS`] groups is not stated: the entry is then taken as the
    /// client process's own.
    pub fn by(caller: &Caller) -> EntryBuilder {
        let mut e = EntryBuilder::new();
        if caller.groups.len() <= CALLER_MAX_GROUPS {
            use rec_off::caller as o;
            let mut f = FixedOut::<{ o::GROUPS }>::new();
            f.u32::<{ o::UID }>(caller.uid)
                .u32::<{ o::GID }>(caller.gid)
                .u32::<{ o::NGROUPS }>(caller.groups.len() as u32);
            let mut groups = Vec::with_capacity(4 * caller.groups.len());
            for g in &caller.groups {
                linefs_bytes::put_u32(&mut groups, *g);
            }
            e.push(RecordKind::Caller, 0, f.bytes(), &groups);
            // Metadata, not a change: an entry with nothing but its caller is empty.
            e.count -= 1;
        }
        e
    }
}

fn corrupt(detail: String) -> FormatError {
    FormatError::Corrupt { what: "log record".into(), detail }
}

/// Decode the records of an entry payload that starts at region offset `payload_off`.
/// Structural validation only (lengths, names, kinds); semantic checks (inode ranges,
/// types) are the publisher's.
pub fn decode_records(payload: &[u8], payload_off: u64) -> Result<Vec<Record>, FormatError> {
    decode_entry(payload, payload_off).map(|(_, records)| records)
}

/// [`decode_records`], and the entry's CALLER, if it states one.
pub fn decode_entry(payload: &[u8], payload_off: u64) -> Result<(Option<Caller>, Vec<Record>), FormatError> {
    let mut caller = None;
    let mut out = Vec::new();
    let mut r = Reader::new(payload);
    while !r.is_empty() {
        let p = r.position();
        let Ok(head) = r.fixed::<{ rec_off::PAYLOAD }>("record header") else {
            return Err(corrupt(format!("trailing {} bytes at {p}", r.remaining())));
        };
        let kind = head.u8::<{ rec_off::KIND }>();
        let flags = head.u8::<{ rec_off::FLAGS }>();
        let len = head.u32::<{ rec_off::LEN }>() as usize;
        let s = r.position();
        let Ok(b) = r.bytes("record", len) else {
            return Err(corrupt(format!("record at {p} of length {len} overruns the entry")));
        };
        // The padding to the next record (the end of the entry may cut it short).
        r.skip_at_most(len.next_multiple_of(rec_off::ALIGN) - len);
        let Some(kind) = RecordKind::from_u8(kind) else {
            return Err(corrupt(format!("unknown record kind {kind} at {p}")));
        };
        let rec = match kind {
            RecordKind::Inode => {
                let img = InodeImage::read(exact(b, kind, p)?.bytes());
                Record::Inode { fresh: flags & INODE_FRESH != 0, img }
            }
            RecordKind::Dirent => {
                use rec_off::dirent as o;
                let mut br = Reader::new(b);
                let bad_len = || corrupt(format!("dirent at {p}: bad name length"));
                let f: Fixed<'_, { o::NAME }> = br.fixed("dirent").map_err(|_| bad_len())?;
                let name = br.rest();
                if name.len() != f.u8::<{ o::NAME_LEN }>() as usize {
                    return Err(bad_len());
                }
                if !valid_name(name) {
                    return Err(corrupt(format!("dirent at {p}: invalid name")));
                }
                let ino = f.u64::<{ o::INO }>();
                let dt = f.u8::<{ o::DTYPE }>();
                if ino != 0 && !dtype::valid(dt) {
                    return Err(corrupt(format!("dirent at {p}: bad type {dt}")));
                }
                Record::Dirent { dir: f.u64::<{ o::DIR }>(), ino, dtype: dt, name: name.to_vec() }
            }
            RecordKind::Write => {
                use rec_off::write as o;
                let mut br = Reader::new(b);
                let f: Fixed<'_, { o::DATA }> =
                    br.fixed("write").map_err(|_| corrupt(format!("write at {p}: too short")))?;
                let off = f.u64::<{ o::OFFSET }>();
                let len = br.remaining() as u64;
                if off.checked_add(len).is_none_or(|end| end > MAX_FILE_SIZE) {
                    return Err(corrupt(format!("write at {p}: range beyond the largest file")));
                }
                Record::Write { ino: f.u64::<{ o::INO }>(), off, len, data_off: payload_off + (s + o::DATA) as u64 }
            }
            RecordKind::Truncate => {
                use rec_off::truncate as o;
                let f = exact::<{ o::END }>(b, kind, p)?;
                let size = f.u64::<{ o::SIZE }>();
                if size > MAX_FILE_SIZE {
                    return Err(corrupt(format!("truncate at {p}: size {size} too large")));
                }
                Record::Truncate { ino: f.u64::<{ o::INO }>(), size }
            }
            RecordKind::Punch | RecordKind::Alloc => {
                use rec_off::range as o;
                let f = exact::<{ o::END }>(b, kind, p)?;
                let (ino, off, len) = (f.u64::<{ o::INO }>(), f.u64::<{ o::OFFSET }>(), f.u64::<{ o::LEN }>());
                if off.checked_add(len).is_none_or(|end| end > MAX_FILE_SIZE) {
                    return Err(corrupt(format!("range record at {p} beyond the largest file")));
                }
                if kind == RecordKind::Punch {
                    Record::Punch { ino, off, len }
                } else {
                    Record::Alloc { ino, off, len }
                }
            }
            RecordKind::Xattrs => {
                use rec_off::xattrs as o;
                let mut br = Reader::new(b);
                let f: Fixed<'_, { o::ENTRIES }> =
                    br.fixed("xattrs").map_err(|_| corrupt(format!("xattrs at {p}: too short")))?;
                let Some(attrs) = get_xattrs(br.rest(), f.u32::<{ o::COUNT }>() as usize) else {
                    return Err(corrupt(format!("xattrs at {p}: bad lengths")));
                };
                Record::Xattrs { ino: f.u64::<{ o::INO }>(), attrs }
            }
            RecordKind::FreeInode => {
                use rec_off::free_inode as o;
                Record::FreeInode { ino: exact::<{ o::END }>(b, kind, p)?.u64::<{ o::INO }>() }
            }
            RecordKind::OpenWrite => {
                use rec_off::open_write as o;
                Record::OpenWrite { ino: exact::<{ o::END }>(b, kind, p)?.u64::<{ o::INO }>() }
            }
            RecordKind::Caller => {
                use rec_off::caller as o;
                let mut br = Reader::new(b);
                let short = || corrupt(format!("caller at {p}: not first in the entry, or too short"));
                if p != 0 {
                    return Err(short());
                }
                let f: Fixed<'_, { o::GROUPS }> = br.fixed("caller").map_err(|_| short())?;
                let n = f.u32::<{ o::NGROUPS }>() as usize;
                let bad_count = || corrupt(format!("caller at {p}: bad group count {n}"));
                if n > CALLER_MAX_GROUPS || br.remaining() != 4 * n {
                    return Err(bad_count());
                }
                let mut groups = Vec::with_capacity(n);
                for _ in 0..n {
                    groups.push(br.u32("caller groups").map_err(|_| bad_count())?);
                }
                caller = Some(Caller { uid: f.u32::<{ o::UID }>(), gid: f.u32::<{ o::GID }>(), groups });
                continue;
            }
        };
        out.push(rec);
    }
    Ok((caller, out))
}

/// A record payload that must be exactly `N` bytes (a kind with no variable part).
fn exact<const N: usize>(b: &[u8], kind: RecordKind, p: usize) -> Result<Fixed<'_, N>, FormatError> {
    <&[u8; N]>::try_from(b)
        .map(Fixed::new)
        .map_err(|_| corrupt(format!("record kind {} at {p} has length {}, expected {N}", kind as u8, b.len())))
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
        b.open_write(5);
        let recs = decode_records(b.payload(), 1000).unwrap();
        assert_eq!(recs.len(), 9);
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
        assert_eq!(recs[8], Record::OpenWrite { ino: 5 });
        assert!(recs[8].changed_inode().is_none() && recs[..8].iter().all(|r| r.changed_inode() == Some(r.target())));
    }

    #[test]
    fn rejects_malformed() {
        let mut b = EntryBuilder::new();
        b.dirent(1, b"x", 2, dtype::REG);
        let mut p = b.payload().to_vec();
        p[4] = 200; // length overruns
        assert!(decode_records(&p, 0).is_err());
        let mut p = b.payload().to_vec();
        p[rec_off::PAYLOAD + rec_off::dirent::NAME] = b'/';
        assert!(decode_records(&p, 0).is_err());
        let mut p = b.payload().to_vec();
        p[0] = 99;
        assert!(decode_records(&p, 0).is_err());
        assert!(decode_records(&[1, 2, 3], 0).is_err());
        // OPEN_WRITE: exactly 8 payload bytes.
        let mut b = EntryBuilder::new();
        b.open_write(7);
        for len in [0u32, 4, 16] {
            let mut p = b.payload().to_vec();
            p[rec_off::LEN..rec_off::PAYLOAD].copy_from_slice(&len.to_le_bytes());
            p.resize(rec_off::PAYLOAD + (len as usize).next_multiple_of(rec_off::ALIGN), 0);
            assert!(decode_records(&p, 0).is_err(), "OPEN_WRITE of length {len}");
        }
        assert!(decode_records(&b.payload()[..rec_off::PAYLOAD + 4], 0).is_err());
    }

    /// A valid entry with one record of every kind (OPEN_WRITE included), after its caller.
    fn every_kind() -> Vec<u8> {
        let mut b = EntryBuilder::by(&Caller { uid: 5, gid: 6, groups: vec![7] });
        b.inode(&InodeImage { ino: 5, mode: 0o100644, nlink: 1, ..Default::default() }, true);
        b.dirent(1, b"n", 5, dtype::REG);
        b.open_write(5);
        b.write(5, 1, b"xyz");
        b.truncate(5, 2);
        b.punch(5, 0, 1);
        b.alloc(5, 0, 9);
        b.xattrs(5, [(&b"user.a"[..], &b"v"[..])]);
        b.free_inode(5);
        b.payload().to_vec()
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode_records(&bytes, 0);
        }

        /// Valid entries of every kind with bytes changed and cut short: decoding gives an
        /// error or records, never a panic.
        #[test]
        fn decode_of_damaged_entries_never_panics(
            changes in proptest::collection::vec((proptest::num::usize::ANY, proptest::num::u8::ANY), 0..8),
            cut in proptest::num::usize::ANY,
        ) {
            let mut p = every_kind();
            for (at, v) in changes {
                let i = at % p.len();
                p[i] = v;
            }
            p.truncate(cut % (p.len() + 1));
            let _ = decode_entry(&p, 0);
        }
    }
}
