//! [`Passthrough`]: a FUSE file system that forwards every call to a source directory.
//!
//! It is the "FUSE passthrough of the node-local directory" baseline of the benchmarks (DESIGN
//! section 8): the same FUSE round trips as linefs, with the host file system behind them, so
//! that a benchmark can tell FUSE's cost from linefs's.
//!
//! Design (as libfuse's `passthrough_ll`): each inode the kernel knows is held by an `O_PATH`
//! descriptor of the source object, so renames in the source need no path bookkeeping, and
//! operations run relative to those descriptors (`openat`, `mkdirat`, ... on the parent) or
//! through `/proc/self/fd/N` where no `*at` form exists (open, chmod, truncate, xattrs).
//! The descriptor also pins the source inode, so its number cannot be reused while the kernel
//! may still name it.
//!
//! Inode numbers are the source's `st_ino`, except that the source root and inode 1 swap
//! places (FUSE's root is 1). The source must therefore be a single file system: an object on
//! another device whose number collides with a known one is refused with `EXDEV`.
//!
//! Limits, acceptable for a baseline: new objects belong to the daemon's user (no setfsuid),
//! `access` checks the daemon's credentials, timestamps of symlinks cannot be set, and the
//! daemon's umask also applies (the `linefs-passthrough` program clears it).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirEntryExt, FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use parking_lot::{Mutex, RwLock};
use rustix::fs::{self as rfs, Access, AtFlags, Mode, OFlags, Stat, Timestamps, XattrFlags, CWD};
use tracing::{debug, debug_span};

use crate::host::{errno, fallocate, fstat, getxattr, kind_of, listxattr, lseek, mknodat, oflags, time, timespec};
use crate::sys;

/// Attribute and entry cache time (the source may change behind our back only if someone
/// writes it directly, which the benchmarks do not do).
const TTL: Duration = Duration::from_secs(1);

struct Inode {
    /// `O_PATH | O_NOFOLLOW` descriptor of the source object.
    fd: OwnedFd,
    dev: u64,
    is_symlink: bool,
    /// Kernel references (lookups not yet forgotten). Guarded by the inode table's lock.
    nlookup: AtomicU64,
}

impl Inode {
    /// `/proc/self/fd/N`: a path that reaches the object itself.
    fn proc_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }
}

struct DirHandle {
    ino: u64,
    entries: Vec<(u64, FileType, OsString)>,
}

/// FUSE passthrough of a source directory.
pub struct Passthrough {
    source: PathBuf,
    root_host_ino: u64,
    inodes: RwLock<HashMap<u64, Arc<Inode>>>,
    files: RwLock<HashMap<u64, Arc<File>>>,
    dirs: Mutex<HashMap<u64, DirHandle>>,
    next_fh: AtomicU64,
}

impl Passthrough {
    /// A passthrough of `source`, which must be a directory.
    pub fn new(source: &Path) -> io::Result<Passthrough> {
        let source = std::fs::canonicalize(source)?;
        let fd = rfs::open(&source, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let st = fstat(&fd)?;
        let root = Inode { fd, dev: st.st_dev, is_symlink: false, nlookup: AtomicU64::new(1) };
        let mut inodes = HashMap::new();
        inodes.insert(1, Arc::new(root));
        Ok(Passthrough {
            source,
            root_host_ino: st.st_ino,
            inodes: RwLock::new(inodes),
            files: RwLock::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
        })
    }

    /// The FUSE inode number of a source inode number (root and 1 swap places).
    fn map_ino(&self, host: u64) -> u64 {
        if host == self.root_host_ino {
            1
        } else if host == 1 {
            self.root_host_ino
        } else {
            host
        }
    }

    fn attr(&self, st: &Stat) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.map_ino(st.st_ino)),
            size: st.st_size as u64,
            blocks: st.st_blocks as u64,
            atime: time(st.st_atime, st.st_atime_nsec as i64),
            mtime: time(st.st_mtime, st.st_mtime_nsec as i64),
            ctime: time(st.st_ctime, st.st_ctime_nsec as i64),
            crtime: UNIX_EPOCH,
            kind: kind_of(st.st_mode),
            perm: (st.st_mode & 0o7777) as u16,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            rdev: st.st_rdev as u32,
            blksize: st.st_blksize as u32,
            flags: 0,
        }
    }

    fn inode(&self, ino: INodeNo) -> Result<Arc<Inode>, Errno> {
        self.inodes.read().get(&ino.0).cloned().ok_or(Errno::ESTALE)
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        self.files.read().get(&fh.0).cloned().ok_or(Errno::EBADF)
    }

    fn add_file(&self, file: File) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.files.write().insert(fh, Arc::new(file));
        fh
    }

    /// Looks `name` up in `parent`, taking one kernel reference on the result.
    fn do_lookup(&self, parent: &Inode, name: &OsStr) -> Result<FileAttr, Errno> {
        let fd = rfs::openat(&parent.fd, name, OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| errno("lookup", e.into()))?;
        let st = fstat(&fd).map_err(|e| errno("lookup", e))?;
        let ino = self.map_ino(st.st_ino);
        let mut inodes = self.inodes.write();
        match inodes.get(&ino) {
            Some(known) if known.dev != st.st_dev => return Err(Errno::EXDEV),
            Some(known) => {
                known.nlookup.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                let is_symlink = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
                let inode = Inode { fd, dev: st.st_dev, is_symlink, nlookup: AtomicU64::new(1) };
                inodes.insert(ino, Arc::new(inode));
            }
        }
        Ok(self.attr(&st))
    }

    fn entry(&self, op: &str, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let res = self.inode(parent).and_then(|p| self.do_lookup(&p, name));
        match res {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => {
                debug!(op, ?e, "entry reply failed");
                reply.error(e)
            }
        }
    }

    fn getattr_inner(&self, ino: INodeNo) -> Result<FileAttr, Errno> {
        let inode = self.inode(ino)?;
        let st = fstat(&inode.fd).map_err(|e| errno("getattr", e))?;
        Ok(self.attr(&st))
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_inner(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        let inode = self.inode(ino)?;
        let file = match fh {
            Some(fh) => self.file(fh).ok(),
            None => None,
        };
        let path = inode.proc_path();
        if let Some(mode) = mode {
            let perm = std::fs::Permissions::from_mode(mode & 0o7777);
            match &file {
                Some(f) => f.set_permissions(perm),
                None => std::fs::set_permissions(&path, perm),
            }
            .map_err(|e| errno("chmod", e))?;
        }
        if uid.is_some() || gid.is_some() {
            // -1 (u32::MAX) also means "keep", as for chown(2).
            let uid = uid.filter(|&u| u != u32::MAX).map(rustix::process::Uid::from_raw);
            let gid = gid.filter(|&g| g != u32::MAX).map(rustix::process::Gid::from_raw);
            let flags = AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW;
            rfs::chownat(&inode.fd, c"", uid, gid, flags).map_err(|e| errno("chown", e.into()))?;
        }
        if let Some(size) = size {
            match &file {
                Some(f) => f.set_len(size),
                None => sys::truncate(&path, size),
            }
            .map_err(|e| errno("truncate", e))?;
        }
        if atime.is_some() || mtime.is_some() {
            if inode.is_symlink {
                return Err(Errno::EPERM);
            }
            let times = Timestamps { last_access: timespec(atime), last_modification: timespec(mtime) };
            rfs::utimensat(CWD, &path, &times, AtFlags::empty()).map_err(|e| errno("utimens", e.into()))?;
        }
        let st = fstat(&inode.fd).map_err(|e| errno("setattr", e))?;
        Ok(self.attr(&st))
    }

    fn read_dir(&self, inode: &Inode, ino: u64) -> io::Result<Vec<(u64, FileType, OsString)>> {
        let parent = rfs::statat(&inode.fd, "..", AtFlags::SYMLINK_NOFOLLOW)?;
        let mut entries = vec![
            (ino, FileType::Directory, OsString::from(".")),
            (self.map_ino(parent.st_ino), FileType::Directory, OsString::from("..")),
        ];
        for e in std::fs::read_dir(inode.proc_path())? {
            let e = e?;
            let kind = match e.file_type() {
                Ok(t) => FileType::from_std(t).unwrap_or(FileType::RegularFile),
                Err(_) => FileType::RegularFile,
            };
            entries.push((self.map_ino(e.ino()), kind, e.file_name()));
        }
        if ino == 1 {
            entries[1].0 = 1;
        }
        Ok(entries)
    }
}

fn reply_empty(reply: ReplyEmpty, op: &str, res: io::Result<()>) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(op, e)),
    }
}

fn reply_xattr(reply: ReplyXattr, op: &str, size: u32, res: io::Result<Vec<u8>>) {
    match res {
        Ok(v) => {
            let len = v.len() as u32;
            if size == 0 {
                reply.size(len)
            } else if len > size {
                reply.error(Errno::ERANGE)
            } else {
                reply.data(&v)
            }
        }
        Err(e) => reply.error(errno(op, e)),
    }
}

macro_rules! tri {
    ($reply:ident, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return $reply.error(e),
        }
    };
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        if let Err(nearest) = config.set_max_write(fuse_mount::adapter::MAX_WRITE) {
            let _ = config.set_max_write(nearest);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _s = debug_span!("pt_lookup", parent = parent.0, ?name).entered();
        self.entry("lookup", parent, name, reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if ino.0 == 1 {
            return;
        }
        let mut inodes = self.inodes.write();
        if let Some(inode) = inodes.get(&ino.0) {
            let left = inode.nlookup.load(Ordering::Relaxed).saturating_sub(nlookup);
            inode.nlookup.store(left, Ordering::Relaxed);
            if left == 0 {
                inodes.remove(&ino.0);
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _s = debug_span!("pt_getattr", ino = ino.0).entered();
        match self.getattr_inner(ino) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _s = debug_span!("pt_setattr", ino = ino.0, ?mode, ?size).entered();
        match self.setattr_inner(ino, mode, uid, gid, size, atime, mtime, fh) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let inode = tri!(reply, self.inode(ino));
        match rfs::readlinkat(&inode.fd, c"", Vec::new()) {
            Ok(t) => reply.data(t.as_bytes()),
            Err(e) => reply.error(errno("readlink", e.into())),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _s = debug_span!("pt_mknod", parent = parent.0, ?name, mode).entered();
        let p = tri!(reply, self.inode(parent));
        let res = mknodat(&p.fd, name, mode & !umask, u64::from(rdev));
        tri!(reply, res.map_err(|e| errno("mknod", e)));
        self.entry("mknod", parent, name, reply);
    }

    fn mkdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let _s = debug_span!("pt_mkdir", parent = parent.0, ?name, mode).entered();
        let p = tri!(reply, self.inode(parent));
        let res = rfs::mkdirat(&p.fd, name, Mode::from_bits_retain(mode & !umask));
        tri!(reply, res.map_err(|e| errno("mkdir", e.into())));
        self.entry("mkdir", parent, name, reply);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = debug_span!("pt_unlink", parent = parent.0, ?name).entered();
        let p = tri!(reply, self.inode(parent));
        reply_empty(reply, "unlink", rfs::unlinkat(&p.fd, name, AtFlags::empty()).map_err(Into::into));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _s = debug_span!("pt_rmdir", parent = parent.0, ?name).entered();
        let p = tri!(reply, self.inode(parent));
        reply_empty(reply, "rmdir", rfs::unlinkat(&p.fd, name, AtFlags::REMOVEDIR).map_err(Into::into));
    }

    fn symlink(&self, _req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let p = tri!(reply, self.inode(parent));
        let res = rfs::symlinkat(target, &p.fd, link_name);
        tri!(reply, res.map_err(|e| errno("symlink", e.into())));
        self.entry("symlink", parent, link_name, reply);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _s = debug_span!("pt_rename", parent = parent.0, ?name, ?newname).entered();
        let p = tri!(reply, self.inode(parent));
        let np = tri!(reply, self.inode(newparent));
        let flags = rfs::RenameFlags::from_bits_retain(flags.bits());
        let res = rfs::renameat_with(&p.fd, name, &np.fd, newname, flags);
        reply_empty(reply, "rename", res.map_err(Into::into));
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let inode = tri!(reply, self.inode(ino));
        let np = tri!(reply, self.inode(newparent));
        let res = rfs::linkat(CWD, inode.proc_path(), &np.fd, newname, AtFlags::SYMLINK_FOLLOW);
        tri!(reply, res.map_err(|e| errno("link", e.into())));
        self.entry("link", newparent, newname, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let _s = debug_span!("pt_open", ino = ino.0, flags = flags.0).entered();
        let inode = tri!(reply, self.inode(ino));
        let flags = flags.0 & !(libc::O_NOFOLLOW | libc::O_CREAT | libc::O_EXCL);
        match rfs::open(inode.proc_path(), oflags(flags), Mode::empty()) {
            Ok(fd) => reply.opened(FileHandle(self.add_file(File::from(fd))), FopenFlags::empty()),
            Err(e) => reply.error(errno("open", e.into())),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let _s = debug_span!("pt_read", ino = ino.0, offset, size).entered();
        let file = tri!(reply, self.file(fh));
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(errno("read", e)),
            }
        }
        reply.data(&buf[..done]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let _s = debug_span!("pt_write", ino = ino.0, offset, len = data.len()).entered();
        let file = tri!(reply, self.file(fh));
        match file.write_all_at(data, offset) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno("write", e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.files.write().remove(&fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let _s = debug_span!("pt_fsync", ino = ino.0, datasync).entered();
        let file = tri!(reply, self.file(fh));
        let res = if datasync { file.sync_data() } else { file.sync_all() };
        reply_empty(reply, "fsync", res);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let inode = tri!(reply, self.inode(ino));
        match self.read_dir(&inode, ino.0) {
            Ok(entries) => {
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.dirs.lock().insert(fh, DirHandle { ino: ino.0, entries });
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(errno("opendir", e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let _s = debug_span!("pt_readdir", ino = ino.0, offset).entered();
        let mut dirs = self.dirs.lock();
        let Some(dir) = dirs.get_mut(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        if offset == 0 && dir.ino == ino.0 {
            // rewinddir: take a fresh snapshot.
            let inode = tri!(reply, self.inode(ino));
            dir.entries = tri!(reply, self.read_dir(&inode, ino.0).map_err(|e| errno("readdir", e)));
        }
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (ino, kind, name)) in dir.entries.iter().enumerate().skip(start) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.dirs.lock().remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let inode = tri!(reply, self.inode(ino));
        let dir = rfs::open(inode.proc_path(), OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty());
        let res =
            dir.map(File::from).map_err(io::Error::from).and_then(
                |d| {
                    if datasync {
                        d.sync_data()
                    } else {
                        d.sync_all()
                    }
                },
            );
        reply_empty(reply, "fsyncdir", res);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match rfs::statvfs(&self.source) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(errno("statfs", e.into())),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        let inode = tri!(reply, self.inode(ino));
        if position != 0 {
            return reply.error(Errno::EINVAL);
        }
        if inode.is_symlink {
            return reply.error(Errno::EPERM);
        }
        let flags = XattrFlags::from_bits_retain(flags as u32);
        let res = rfs::setxattr(inode.proc_path(), name, value, flags);
        reply_empty(reply, "setxattr", res.map_err(Into::into));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let inode = tri!(reply, self.inode(ino));
        if inode.is_symlink {
            return reply.error(Errno::NO_XATTR);
        }
        reply_xattr(reply, "getxattr", size, getxattr(&inode.proc_path(), name));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let inode = tri!(reply, self.inode(ino));
        if inode.is_symlink {
            return reply_xattr(reply, "listxattr", size, Ok(Vec::new()));
        }
        reply_xattr(reply, "listxattr", size, listxattr(&inode.proc_path()));
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let inode = tri!(reply, self.inode(ino));
        if inode.is_symlink {
            return reply.error(Errno::EPERM);
        }
        reply_empty(reply, "removexattr", rfs::removexattr(inode.proc_path(), name).map_err(Into::into));
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let inode = tri!(reply, self.inode(ino));
        if inode.is_symlink {
            return reply.ok();
        }
        let res = rfs::accessat(CWD, inode.proc_path(), Access::from_bits_retain(mask.bits() as u32), AtFlags::empty());
        reply_empty(reply, "access", res.map_err(Into::into));
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let _s = debug_span!("pt_create", parent = parent.0, ?name, mode, flags).entered();
        let p = tri!(reply, self.inode(parent));
        let flags = (flags & !libc::O_NOFOLLOW) | libc::O_CREAT;
        let fd = match rfs::openat(&p.fd, name, oflags(flags), Mode::from_bits_retain(mode & !umask)) {
            Ok(fd) => fd,
            Err(e) => return reply.error(errno("create", e.into())),
        };
        match self.do_lookup(&p, name) {
            Ok(attr) => {
                let fh = self.add_file(File::from(fd));
                reply.created(&TTL, &attr, Generation(0), FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let file = tri!(reply, self.file(fh));
        reply_empty(reply, "fallocate", fallocate(&file, mode, offset, length));
    }

    fn lseek(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        let file = tri!(reply, self.file(fh));
        match lseek(&file, offset, whence) {
            Ok(off) => reply.offset(off),
            Err(e) => reply.error(errno("lseek", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_one_swap() {
        let dir = tempfile::tempdir().unwrap();
        let pt = Passthrough::new(dir.path()).unwrap();
        let root = pt.root_host_ino;
        assert_eq!(pt.map_ino(root), 1);
        if root != 1 {
            assert_eq!(pt.map_ino(1), root);
        }
        assert_eq!(pt.map_ino(root + 12345), root + 12345);
    }
}
