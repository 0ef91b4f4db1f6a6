//! [`LinefsFuse`]: the `fuser::Filesystem` adapter over [`libfs::Fs`].
//!
//! The adapter holds no file-system state of its own: every method opens a tracing span, turns
//! the request into a libfs call (names as bytes, credentials from [`crate::creds`]), converts
//! [`libfs::Attr`] into [`fuser::FileAttr`] and replies. On error it replies with
//! `FsError::errno()`, so that one place in libfs decides every errno. The adapter decides
//! only what belongs to the FUSE protocol rather than to the file system: `ERANGE` for an
//! xattr reply larger than the caller's buffer (and `E2BIG` for one larger than FUSE can
//! carry), `EINVAL` for an xattr position (macOS resource forks) or a seek result beyond
//! `i64`, and `ENXIO` for SEEK_DATA/SEEK_HOLE at a negative offset, as Linux file systems
//! answer.
//!
//! Reference counting: libfs counts kernel references itself (lookup, create, mknod, mkdir,
//! symlink and link each take one); `forget` hands them back.
//!
//! Caching: how long the kernel caches attributes and names, and whether an open keeps the
//! page cache, is [`KernelCache`]'s decision (long and kept when nothing else changes the
//! node; in the offload mode only what [`crate::invalidate`] drops when a lease is lost).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, PollEvents, PollFlags,
    PollNotifier, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyIoctl,
    ReplyLseek, ReplyOpen, ReplyPoll, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use libfs::{AtimePolicy, Attr, FileKind, Fs, FsError, SetAttr, TimeSet};
use tracing::{debug, debug_span};

use crate::cache::KernelCache;
use crate::creds::CredCache;

/// Largest write the kernel is asked to send in one request.
pub const MAX_WRITE: u32 = 1 << 20;

/// The FUSE file system of a linefs mount: a thin adapter over a shared [`libfs::Fs`].
pub struct LinefsFuse {
    fs: Arc<Fs>,
    creds: CredCache,
    /// When reads update a file's access time (FUSE leaves it to the file system).
    atime: AtimePolicy,
    /// The same for listings of directories (`nodiratime`).
    diratime: AtimePolicy,
    /// What the kernel may cache, and for how long.
    cache: Arc<KernelCache>,
    /// Ask for the kernel's writeback cache ([`LinefsFuse::with_writeback_cache`]).
    writeback: bool,
}

impl LinefsFuse {
    /// An adapter serving `fs`. The caller keeps its own `Arc` to shut the file system down
    /// after the session has ended.
    pub fn new(fs: Arc<Fs>) -> LinefsFuse {
        let cache = Arc::new(KernelCache::new(fs.offloaded()));
        LinefsFuse {
            fs,
            creds: CredCache::new(),
            atime: AtimePolicy::Relative,
            diratime: AtimePolicy::Relative,
            cache,
            writeback: false,
        }
    }

    /// Has the kernel gather writes in its page cache and send them later, in large
    /// requests (`FUSE_WRITEBACK_CACHE`): a write returns before libfs has it, so it is
    /// durable only once fsync, close or the kernel's writeback has pushed it (as on a local
    /// file system). Only for a mount that is its node's only client (host-only): another
    /// client could not be shown data that sits in this kernel (`crate::daemon` refuses it
    /// otherwise).
    pub fn with_writeback_cache(mut self, on: bool) -> LinefsFuse {
        self.writeback = on && !self.cache.shared();
        self
    }

    /// The mount's caching policy, shared with its invalidation ([`crate::invalidate::start`]).
    pub fn kernel_cache(&self) -> Arc<KernelCache> {
        self.cache.clone()
    }

    /// Sets how reads of files and listings of directories update access times (from the
    /// mount options: `noatime`, `nodiratime`, `relatime`, `strictatime`, `ro`).
    pub fn with_atime(mut self, files: AtimePolicy, dirs: AtimePolicy) -> LinefsFuse {
        self.atime = files;
        self.diratime = dirs;
        self
    }

    /// Records an access before the reply, so that a stat after the read sees it (the kernel
    /// drops its cached atime when a read completes). A failure does not fail the read.
    fn accessed(&self, ino: u64, policy: AtimePolicy) {
        if policy == AtimePolicy::Never {
            return;
        }
        if let Err(e) = self.fs.touch_atime(ino, policy) {
            debug!(ino, error = %e, "access time not updated");
        }
    }

    /// The flags of an open of `ino`: the page cache is kept ([`KernelCache::open_flags`])
    /// unless a read now would update the access time — a read served from the page cache
    /// never reaches libfs, which keeps access times (FUSE inodes have `S_NOATIME`). With
    /// `relatime` that is after a change (atime not newer than mtime or ctime) or a day.
    fn open_flags(&self, ino: u64) -> FopenFlags {
        let flags = self.cache.open_flags(ino);
        if flags.contains(FopenFlags::FOPEN_KEEP_CACHE) && self.fs.atime_due(ino, self.atime).unwrap_or(true) {
            return flags - FopenFlags::FOPEN_KEEP_CACHE;
        }
        flags
    }

    fn cred(&self, req: &Request) -> libfs::Cred {
        self.creds.cred(req.uid(), req.gid(), req.pid())
    }
}

/// The errno to reply for a libfs error (decided by libfs).
fn errno(op: &str, e: &FsError) -> Errno {
    debug!(op, error = %e, errno = e.errno(), "request failed");
    Errno::from_i32(e.errno())
}

/// The FUSE file type of a libfs inode kind.
pub fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDev => FileType::CharDevice,
        FileKind::BlockDev => FileType::BlockDevice,
    }
}

/// Converts libfs attributes to the FUSE form.
pub fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.crtime,
        kind: file_type(a.kind),
        perm: (a.perm & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

/// The generation the kernel is told for an inode: the root's must be 0 (the kernel logs
/// "root generation should be zero" otherwise, e.g. on a lookup of `..` or of an NFS file
/// handle of the root); others carry libfs's, so that a reused number is a new file.
fn generation(a: &Attr) -> Generation {
    if a.ino == linefs_pm::record::ROOT_INO {
        Generation(0)
    } else {
        Generation(u64::from(a.generation))
    }
}

fn time_set(t: TimeOrNow) -> TimeSet {
    match t {
        TimeOrNow::Now => TimeSet::Now,
        TimeOrNow::SpecificTime(at) => TimeSet::At(at),
    }
}

fn reply_entry(reply: ReplyEntry, cache: &KernelCache, op: &str, res: Result<Attr, FsError>) {
    match res {
        Ok(a) => reply.entry_with_ttls(&cache.attr_ttl(), &cache.entry_ttl(), &file_attr(&a), generation(&a)),
        Err(e) => reply.error(errno(op, &e)),
    }
}

fn reply_empty(reply: ReplyEmpty, op: &str, res: Result<(), FsError>) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(op, &e)),
    }
}

/// Replies to getxattr/listxattr: the size when asked for it, ERANGE when the buffer is small.
fn reply_xattr(reply: ReplyXattr, op: &str, size: u32, res: Result<Vec<u8>, FsError>) {
    match res {
        Ok(value) => {
            let Ok(len) = u32::try_from(value.len()) else {
                reply.error(Errno::E2BIG);
                return;
            };
            if size == 0 {
                reply.size(len);
            } else if len > size {
                reply.error(Errno::ERANGE);
            } else {
                reply.data(&value);
            }
        }
        Err(e) => reply.error(errno(op, &e)),
    }
}

impl Filesystem for LinefsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // libfs truncates on O_TRUNC in open, so the kernel may pass it through.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC) {
            debug!(?missing, "kernel lacks FUSE_ATOMIC_O_TRUNC");
        }
        // Export support: the kernel may rebuild an inode from a file handle
        // (open_by_handle_at, NFS export) by looking up "." of its number and ".." of a
        // directory, which libfs answers.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT) {
            debug!(?missing, "kernel lacks FUSE_EXPORT_SUPPORT");
        }
        // libfs drops setuid/setgid (for writers other than root) and file capabilities on
        // write, truncate and fallocate itself. Without this the kernel asks for
        // security.capability before every write (one more round trip per write(2), with
        // or without the writeback cache): with it, it marks an inode that has neither
        // (S_NOSEC) and stops asking.
        if let Err(missing) = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2) {
            debug!(?missing, "kernel lacks FUSE_HANDLE_KILLPRIV_V2");
        }
        if let Err(nearest) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(nearest);
        }
        if self.cache.shared() {
            // Another client's change is seen by a read of a file kept open: the read first
            // revalidates the attributes (expired when the lease went) and drops the cached
            // pages if the size or modification time changed (crate::cache).
            if let Err(missing) = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA) {
                debug!(?missing, "kernel lacks FUSE_AUTO_INVAL_DATA");
            }
        }
        self.cache.set_kernel_minor(config.kernel_abi().1);
        // Without it, every write reaches libfs (and its log) before it returns.
        if self.writeback {
            if let Err(missing) = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE) {
                tracing::warn!(?missing, "kernel lacks FUSE_WRITEBACK_CACHE; writes go through");
            }
        }
        // No getlk/setlk: the kernel handles POSIX locks locally.
        tracing::info!(abi = %config.kernel_abi(), "FUSE session initialised");
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _s = debug_span!("lookup", parent = parent.0, ?name).entered();
        let res = self.fs.lookup(&self.cred(req), parent.0, name.as_bytes());
        reply_entry(reply, &self.cache, "lookup", res);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _s = debug_span!("forget", ino = ino.0, nlookup).entered();
        self.cache.forgotten(ino.0);
        self.fs.forget(ino.0, nlookup);
    }

    // batch_forget: fuser 0.18's default forwards each entry to `forget` (its `ForgetOne`
    // type is not exported, so the method cannot be overridden).

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _s = debug_span!("getattr", ino = ino.0).entered();
        match self.fs.getattr(ino.0) {
            Ok(a) => reply.attr(&self.cache.attr_ttl(), &file_attr(&a)),
            Err(e) => reply.error(errno("getattr", &e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _s = debug_span!("setattr", ino = ino.0, ?mode, ?uid, ?gid, ?size).entered();
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_set),
            mtime: mtime.map(time_set),
            ctime,
            via_handle: fh.is_some(),
        };
        match self.fs.setattr(&self.cred(req), ino.0, &set) {
            Ok(a) => reply.attr(&self.cache.attr_ttl(), &file_attr(&a)),
            Err(e) => reply.error(errno("setattr", &e)),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _s = debug_span!("readlink", ino = ino.0).entered();
        match self.fs.readlink(ino.0) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno("readlink", &e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let _s = debug_span!("mknod", parent = parent.0, ?name, mode, rdev).entered();
        let res = self.fs.mknod(&self.cred(req), parent.0, name.as_bytes(), mode, umask, rdev);
        reply_entry(reply, &self.cache, "mknod", res);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _s = debug_span!("mkdir", parent = parent.0, ?name, mode).entered();
        let res = self.fs.mkdir(&self.cred(req), parent.0, name.as_bytes(), mode, umask);
        reply_entry(reply, &self.cache, "mkdir", res);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = debug_span!("unlink", parent = parent.0, ?name).entered();
        let res = self.fs.unlink(&self.cred(req), parent.0, name.as_bytes());
        reply_empty(reply, "unlink", res);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = debug_span!("rmdir", parent = parent.0, ?name).entered();
        let res = self.fs.rmdir(&self.cred(req), parent.0, name.as_bytes());
        reply_empty(reply, "rmdir", res);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let _s = debug_span!("symlink", parent = parent.0, ?link_name, ?target).entered();
        let res = self.fs.symlink(&self.cred(req), parent.0, link_name.as_bytes(), target.as_os_str().as_bytes());
        reply_entry(reply, &self.cache, "symlink", res);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _s =
            debug_span!("rename", parent = parent.0, ?name, newparent = newparent.0, ?newname, flags = flags.bits())
                .entered();
        let res =
            self.fs.rename(&self.cred(req), parent.0, name.as_bytes(), newparent.0, newname.as_bytes(), flags.bits());
        reply_empty(reply, "rename", res);
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let _s = debug_span!("link", ino = ino.0, newparent = newparent.0, ?newname).entered();
        let res = self.fs.link(&self.cred(req), ino.0, newparent.0, newname.as_bytes());
        reply_entry(reply, &self.cache, "link", res);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _s = debug_span!("open", ino = ino.0, flags = flags.0).entered();
        match self.fs.open_noting_mode(&self.cred(req), ino.0, flags.0) {
            Ok((fh, mode_changed)) => {
                if mode_changed {
                    self.cache.expire_attrs(ino.0);
                }
                reply.opened(FileHandle(fh), self.open_flags(ino.0))
            }
            Err(e) => reply.error(errno("open", &e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _s = debug_span!("read", ino = ino.0, offset, size).entered();
        match self.fs.read(ino.0, offset, size) {
            Ok(data) => {
                self.accessed(ino.0, self.atime);
                reply.data(&data)
            }
            Err(e) => reply.error(errno("read", &e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _s = debug_span!("write", ino = ino.0, offset, len = data.len()).entered();
        let written = if self.writeback {
            self.fs.writeback_noting_mode(&self.cred(req), ino.0, offset, data)
        } else {
            self.fs.write_noting_mode(&self.cred(req), ino.0, offset, data)
        };
        match written {
            Ok((n, mode_changed)) => {
                if mode_changed {
                    self.cache.expire_attrs(ino.0);
                }
                reply.written(n)
            }
            Err(e) => reply.error(errno("write", &e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Writes are persisted in the log before they return: close has nothing to flush
        // (with the writeback cache, the kernel writes the dirty pages back before it sends
        // a flush, and goes on doing so without one), and POSIX locks are the kernel's.
        // ENOSYS tells the kernel never to send FLUSH again: one round trip less per close.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _s = debug_span!("release", ino = ino.0, fh = fh.0).entered();
        self.fs.release(ino.0, fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let _s = debug_span!("fsync", ino = ino.0, datasync).entered();
        reply_empty(reply, "fsync", self.fs.fsync(ino.0, datasync));
    }

    /// No ioctl is supported: ENOTTY, as a file system without any answers (a program's
    /// `isatty` on a file it opened — Python's `open` asks TCGETS — is routine, not worth
    /// fuser's default warning in the log on every open).
    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        debug!(ino = ino.0, cmd, "ioctl not supported");
        reply.error(Errno::ENOTTY);
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _s = debug_span!("opendir", ino = ino.0, flags = flags.0).entered();
        match self.fs.opendir(&self.cred(req), ino.0, flags.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(errno("opendir", &e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let _s = debug_span!("readdir", ino = ino.0, offset).entered();
        match self.fs.readdir_stream(ino.0, fh.0, offset) {
            Ok(entries) => {
                if offset == 0 {
                    self.accessed(ino.0, self.diratime);
                }
                for e in &entries {
                    let name = OsStr::from_bytes(&e.name);
                    if reply.add(INodeNo(e.ino), e.offset, file_type(e.kind), name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(errno("readdir", &e)),
        }
    }

    fn releasedir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        let _s = debug_span!("releasedir", ino = ino.0, fh = fh.0).entered();
        self.fs.releasedir(ino.0, fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let _s = debug_span!("fsyncdir", ino = ino.0, datasync).entered();
        reply_empty(reply, "fsyncdir", self.fs.fsync(ino.0, datasync));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _s = debug_span!("statfs").entered();
        let s = self.fs.statfs();
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let _s = debug_span!("setxattr", ino = ino.0, ?name, len = value.len(), flags).entered();
        if position != 0 {
            // Only macOS resource forks use a position.
            reply.error(Errno::EINVAL);
            return;
        }
        let res = self.fs.setxattr(&self.cred(req), ino.0, name.as_bytes(), value, flags);
        reply_empty(reply, "setxattr", res);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _s = debug_span!("getxattr", ino = ino.0, ?name, size).entered();
        let res = self.fs.getxattr(&self.cred(req), ino.0, name.as_bytes());
        reply_xattr(reply, "getxattr", size, res);
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _s = debug_span!("listxattr", ino = ino.0, size).entered();
        let res = self.fs.listxattr(&self.cred(req), ino.0);
        reply_xattr(reply, "listxattr", size, res);
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = debug_span!("removexattr", ino = ino.0, ?name).entered();
        let res = self.fs.removexattr(&self.cred(req), ino.0, name.as_bytes());
        reply_empty(reply, "removexattr", res);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let _s = debug_span!("access", ino = ino.0, mask = mask.bits()).entered();
        let res = self.fs.access(&self.cred(req), ino.0, mask.bits() as u32);
        reply_empty(reply, "access", res);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _s = debug_span!("create", parent = parent.0, ?name, mode, flags).entered();
        match self.fs.create(&self.cred(req), parent.0, name.as_bytes(), mode, umask, flags) {
            Ok((a, fh)) => reply.created(
                // One time-out for the name and the attributes: the shorter.
                &self.cache.entry_ttl().min(self.cache.attr_ttl()),
                &file_attr(&a),
                generation(&a),
                FileHandle(fh),
                // An existing file (another client's create won the race) may have stale pages.
                self.open_flags(a.ino),
            ),
            Err(e) => reply.error(errno("create", &e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _s = debug_span!("fallocate", ino = ino.0, offset, length, mode).entered();
        let res = self.fs.fallocate_noting_mode(&self.cred(req), ino.0, offset, length, mode);
        if res.as_ref().is_ok_and(|&changed| changed) {
            self.cache.expire_attrs(ino.0);
        }
        reply_empty(reply, "fallocate", res.map(|_| ()));
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let _s = debug_span!("lseek", ino = ino.0, offset, whence).entered();
        if self.writeback {
            // The kernel holds the size and the dirty pages: libfs's answer (the whole file
            // is data) would end at a stale size. ENOSYS has the kernel answer itself, the
            // same way, from its own size (generic_file_llseek), from now on.
            reply.error(Errno::ENOSYS);
            return;
        }
        let Ok(off) = u64::try_from(offset) else {
            // The kernel only forwards SEEK_DATA and SEEK_HOLE; Linux file systems answer
            // those with ENXIO for a negative offset, as for one past the end.
            reply.error(Errno::ENXIO);
            return;
        };
        match self.fs.lseek(ino.0, off, whence) {
            Ok(pos) => match i64::try_from(pos) {
                Ok(pos) => reply.offset(pos),
                Err(_) => reply.error(Errno::EINVAL),
            },
            Err(e) => reply.error(errno("lseek", &e)),
        }
    }
    /// A copy inside the file system (cp, many tools): libfs reads the source range and
    /// writes it to the destination in 1 MiB pieces, without the bytes crossing into the
    /// caller's address space and back. The kernel has checked the descriptors' modes and
    /// (with the writeback cache) written the source range back first; it drops the
    /// destination's cached pages after the reply. A short copy ends at the source's end.
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _s = debug_span!("copy_file_range", ino_in = ino_in.0, offset_in, ino_out = ino_out.0, offset_out, len)
            .entered();
        const PIECE: u64 = 1 << 20;
        // The reply counts in 32 bits; the kernel never asks for more than MAX_RW_COUNT.
        let len = len.min(u64::from(u32::MAX) & !(PIECE - 1));
        let cred = self.cred(req);
        let mut done: u64 = 0;
        let mut mode_changed = false;
        while done < len {
            let want = (len - done).min(PIECE) as u32;
            let data = match self.fs.read(ino_in.0, offset_in + done, want) {
                Ok(d) => d,
                Err(e) if done == 0 => return reply.error(errno("copy_file_range", &e)),
                Err(_) => break,
            };
            if data.is_empty() {
                break;
            }
            let written = if self.writeback {
                self.fs.writeback_noting_mode(&cred, ino_out.0, offset_out + done, &data)
            } else {
                self.fs.write_noting_mode(&cred, ino_out.0, offset_out + done, &data)
            };
            match written {
                Ok((n, changed)) => {
                    mode_changed |= changed;
                    done += u64::from(n);
                    if (n as usize) < data.len() || data.len() < want as usize {
                        break;
                    }
                }
                Err(e) if done == 0 => return reply.error(errno("copy_file_range", &e)),
                Err(_) => break,
            }
        }
        if done > 0 {
            self.accessed(ino_in.0, self.atime);
        }
        if mode_changed {
            self.cache.expire_attrs(ino_out.0);
        }
        reply.written(done as u32)
    }

    /// Regular files, directories and the rest are always ready, as on a local file system
    /// (FIFOs and sockets are served by the kernel, not here): the events asked for that a
    /// file can have, and no notifier kept.
    fn poll(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _ph: PollNotifier,
        events: PollEvents,
        _flags: PollFlags,
        reply: ReplyPoll,
    ) {
        let ready = PollEvents::POLLIN | PollEvents::POLLOUT | PollEvents::POLLRDNORM | PollEvents::POLLWRNORM;
        reply.poll(events & ready)
    }
}
