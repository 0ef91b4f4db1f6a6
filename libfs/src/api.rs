//! The types of the libfs API: credentials, attributes, and the arguments of the calls.
//!
//! These are plain data with no FUSE types in them, so that libfs can be driven directly
//! from Rust (tests, benchmarks) as well as from `fuse-mount`.

use linefs_pm::record::dtype;
use std::time::SystemTime;

/// Inode number. The root directory is [`ROOT_INO`] (1, as FUSE expects).
pub type Ino = u64;

/// The root directory's inode number.
pub const ROOT_INO: Ino = linefs_pm::record::ROOT_INO;

/// Longest name of a directory entry, in bytes.
pub const NAME_MAX: usize = linefs_pm::record::NAME_MAX;

/// Longest symlink target, in bytes.
pub const SYMLINK_MAX: usize = 4095;

/// Who is asking: the caller's identity, used for permission checks and new files' owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary `gid` need not be repeated here).
    pub groups: Vec<u32>,
}

impl Cred {
    /// The superuser.
    pub fn root() -> Cred {
        Cred { uid: 0, gid: 0, groups: Vec::new() }
    }

    /// The caller as an entry states it (its CALLER record).
    pub fn caller(&self) -> linefs_pm::record::Caller {
        linefs_pm::record::Caller { uid: self.uid, gid: self.gid, groups: self.groups.clone() }
    }

    /// Whether the caller is in group `gid` (primary or supplementary).
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The type of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

impl FileKind {
    /// The kind of a `DT_*` directory-entry type, if it names one.
    pub fn from_dtype(t: u8) -> Option<FileKind> {
        Some(match t {
            dtype::REG => FileKind::File,
            dtype::DIR => FileKind::Dir,
            dtype::LNK => FileKind::Symlink,
            dtype::FIFO => FileKind::Fifo,
            dtype::SOCK => FileKind::Socket,
            dtype::CHR => FileKind::CharDev,
            dtype::BLK => FileKind::BlockDev,
            _ => return None,
        })
    }

    /// The `DT_*` type of this kind.
    pub fn dtype(self) -> u8 {
        match self {
            FileKind::File => dtype::REG,
            FileKind::Dir => dtype::DIR,
            FileKind::Symlink => dtype::LNK,
            FileKind::Fifo => dtype::FIFO,
            FileKind::Socket => dtype::SOCK,
            FileKind::CharDev => dtype::CHR,
            FileKind::BlockDev => dtype::BLK,
        }
    }

    /// The kind encoded in the `S_IFMT` bits of `mode`, if any (through pm's one
    /// mode-to-type mapping, [`dtype::of_mode`]).
    pub fn from_mode(mode: u32) -> Option<FileKind> {
        FileKind::from_dtype(dtype::of_mode(mode))
    }

    /// The `S_IFMT` bits of this kind.
    pub fn mode_bits(self) -> u32 {
        dtype::mode_bits(self.dtype())
    }
}

/// Attributes of an inode, as `stat` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    pub ino: Ino,
    pub generation: u32,
    pub kind: FileKind,
    /// Permission bits including setuid/setgid/sticky (`mode & 0o7777`).
    pub perm: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub size: u64,
    /// 512-byte units allocated (or reserved) for the file.
    pub blocks: u64,
    pub blksize: u32,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    pub crtime: SystemTime,
}

/// A time to set with `setattr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSet {
    Now,
    At(SystemTime),
}

/// The changes of one `setattr` call; `None` leaves a field as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeSet>,
    pub mtime: Option<TimeSet>,
    pub ctime: Option<SystemTime>,
    /// The change comes through an open file handle (truncate via ftruncate: no write
    /// permission check beyond the open's).
    pub via_handle: bool,
}

/// One entry returned by `readdir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: Ino,
    /// Cookie to pass as `offset` to continue after this entry.
    pub offset: u64,
    pub kind: FileKind,
    pub name: Vec<u8>,
}

/// File-system statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// `rename` flags (Linux values).
pub const RENAME_NOREPLACE: u32 = 1;
pub const RENAME_EXCHANGE: u32 = 2;
/// Leave a whiteout (a character device 0:0) in place of the source, atomically (overlayfs).
pub const RENAME_WHITEOUT: u32 = 4;

/// `setxattr` flags (Linux values).
pub const XATTR_CREATE: i32 = 1;
pub const XATTR_REPLACE: i32 = 2;

/// `fallocate` modes (Linux values).
pub const FALLOC_FL_KEEP_SIZE: i32 = 1;
pub const FALLOC_FL_PUNCH_HOLE: i32 = 2;
pub const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

/// Access mask bits for [`crate::Fs::access`].
pub const R_OK: u32 = 4;
pub const W_OK: u32 = 2;
pub const X_OK: u32 = 1;

/// When reading a file or listing a directory updates its access time (the mount's
/// `noatime`, `relatime` and `strictatime` options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AtimePolicy {
    /// `noatime`: never.
    Never,
    /// `relatime` (Linux's default): when the access time is not after the modification or
    /// change time, or is more than a day old.
    #[default]
    Relative,
    /// `strictatime`: on every access.
    Strict,
}

/// An inode whose lease this client lost (offload): another client is about to change it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostInode {
    pub ino: Ino,
    /// Whether it is a directory, as this client's view has it; `None` when the view could
    /// not be looked at without waiting (a front end must then assume it may be one).
    pub dir: Option<bool>,
    /// A directory's names in this client's view (those a front end may have cached);
    /// filled in only for [`LeaseObserver::after_handback`].
    pub names: Vec<Vec<u8>>,
}

/// What a front end that caches libfs's answers outside libfs (the FUSE adapter: the
/// kernel's attribute, page and name caches) is told when this client loses a lease, in the
/// offload mode. See `docs/ARCHITECTURE.md`, "Kernel caches and leases".
pub trait LeaseObserver: Send + Sync {
    /// Called on the client's revoke thread once no call uses the inode any more and before
    /// nicfs hears that the lease is back (so before the other client can change anything);
    /// calls that need the inode wait meanwhile. It must not wait for any call of this client,
    /// nor for anything such a call may hold (the kernel may hold a directory's lock or a
    /// page's while its request waits for this lease): only non-blocking work, such as
    /// notifications that take no lock of the kernel's.
    fn before_handback(&self, lost: &LostInode);
    /// Called after the lease is handed back, on the same thread; may block (on the kernel's
    /// locks too: the calls holding them go on with the lease's next grant).
    fn after_handback(&self, lost: LostInode);
}
