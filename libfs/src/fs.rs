//! The file-system calls.
//!
//! Every update follows one path ([`Inner::commit`]): check the call against the view,
//! build the entry's records (blind post-images), append the entry to the log and make it
//! durable, then apply the same records to the view. Nothing is acknowledged before the
//! entry is durable; nothing in the view is ahead of the log.
//!
//! Locking: one reader-writer lock over the view, the public area and the log tail.
//! Updates and publication take it for writing; reads, lookups and getattr share it.
//! Readers copy data out of PM while holding it, so the publisher cannot free or reuse a
//! block, nor reclaim log space, under a reader.

use crate::api::*;
use crate::error::{FsError, FsResult};
use crate::perm;
use crate::view::{Node, Src, View, FIRST_COOKIE};
use linefs_pm::layout::{FormatParams, Geometry, Superblock, BLOCK_SIZE};
use linefs_pm::oplog::{AppendError, EntryLoc, LogSlot, ScanStop};
use linefs_pm::public::{dtype_of_mode, xattr_chain_blocks, PublicArea, XATTR_SPACE};
use linefs_pm::record::{
    decode_records, valid_name, xattrs_len, EntryBuilder, InodeImage, Record, Timespec, MAX_FILE_SIZE, XATTR_VALUE_MAX,
};
use linefs_pm::region::{Backing, PersistMethod};
use linefs_pm::PmRegion;
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Options of [`Fs::open`].
#[derive(Debug, Clone)]
pub struct FsOptions {
    pub pm_path: PathBuf,
    /// Publication batch: the publisher wakes when this much log is unpublished.
    pub chunk_size: u64,
    /// The publisher also publishes whatever is pending this often.
    pub publish_interval: Duration,
    /// Log slot of this client.
    pub client: u32,
    /// Run the background publisher (tests turn it off to control publication).
    pub background_publish: bool,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            pm_path: PathBuf::new(),
            chunk_size: 4 << 20,
            publish_interval: Duration::from_secs(1),
            client: 0,
            background_publish: true,
        }
    }
}

/// Options of [`Fs::format`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatOptions {
    pub size: u64,
    pub log_size: u64,
    pub log_slots: u32,
    pub inodes: u64,
}

impl FormatOptions {
    /// Defaults for a PM file of `size` bytes.
    pub fn for_size(size: u64) -> FormatOptions {
        let p = FormatParams::for_size(size);
        FormatOptions { size, log_size: p.log_size, log_slots: p.log_slots, inodes: p.inodes }
    }
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions::for_size(1 << 30)
    }
}

/// What `status` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsStatus {
    pub pm_path: String,
    pub pm_size: u64,
    pub backing: String,
    pub persist_method: String,
    pub client: u32,
    pub log_capacity: u64,
    /// Bytes of log between the published LSN and the tail.
    pub log_used: u64,
    pub unpublished_entries: u64,
    pub published_lsn: u64,
    pub tail_lsn: u64,
    pub data_blocks: u64,
    pub free_blocks: u64,
    pub inodes: u64,
    pub free_inodes: u64,
    pub entries_appended: u64,
    pub entries_published: u64,
    pub publish_batches: u64,
    pub recovered_entries: u64,
    pub publish_error: Option<String>,
}

impl FsStatus {
    /// One JSON object.
    pub fn to_json(&self) -> String {
        fn s(v: &str) -> String {
            let mut o = String::from("\"");
            for c in v.chars() {
                match c {
                    '"' => o.push_str("\\\""),
                    '\\' => o.push_str("\\\\"),
                    c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
                    c => o.push(c),
                }
            }
            o.push('"');
            o
        }
        format!(
            "{{\"pm_path\":{},\"pm_size\":{},\"backing\":{},\"persist_method\":{},\"client\":{},\
             \"log_capacity\":{},\"log_used\":{},\"unpublished_entries\":{},\"published_lsn\":{},\
             \"tail_lsn\":{},\"data_blocks\":{},\"free_blocks\":{},\"inodes\":{},\"free_inodes\":{},\
             \"entries_appended\":{},\"entries_published\":{},\"publish_batches\":{},\
             \"recovered_entries\":{},\"publish_error\":{}}}",
            s(&self.pm_path),
            self.pm_size,
            s(&self.backing),
            s(&self.persist_method),
            self.client,
            self.log_capacity,
            self.log_used,
            self.unpublished_entries,
            self.published_lsn,
            self.tail_lsn,
            self.data_blocks,
            self.free_blocks,
            self.inodes,
            self.free_inodes,
            self.entries_appended,
            self.entries_published,
            self.publish_batches,
            self.recovered_entries,
            self.publish_error.as_deref().map(s).unwrap_or_else(|| "null".into()),
        )
    }
}

/// An entry in the log that is not yet published.
pub(crate) struct Pending {
    loc: EntryLoc,
    records: Vec<Record>,
    /// Data blocks this entry may need at publication (reserved against ENOSPC).
    est_blocks: u64,
}

/// Blocks kept free for publication's own metadata (indirect, directory, xattr blocks).
const META_RESERVE: u64 = 64;
/// Block pointers per indirect block.
const PTRS_PER_BLOCK: u64 = BLOCK_SIZE / 8;

/// Most indirect blocks that mapping `span` new data blocks of one file may need: one per
/// PTRS_PER_BLOCK data blocks, one per PTRS_PER_BLOCK² at the next level, plus a partly
/// filled block at each of the three levels where the range starts or ends mid-block.
fn index_blocks(span: u64) -> u64 {
    span.div_ceil(PTRS_PER_BLOCK) + span.div_ceil(PTRS_PER_BLOCK * PTRS_PER_BLOCK) + 3
}

/// How many data blocks `free` free blocks can hold once their indirect blocks are paid
/// for: what statfs reports as free, so that a file as large as `df` says fits does fit.
fn data_capacity(free: u64) -> u64 {
    let index = free.div_ceil(PTRS_PER_BLOCK + 1) + free.div_ceil(PTRS_PER_BLOCK * PTRS_PER_BLOCK) + 3;
    free.saturating_sub(index)
}
/// Most links one inode may have.
const LINK_MAX: u32 = 65000;
/// Largest value of one extended attribute.
/// The attribute holding a file's capabilities (setcap(8)).
const XATTR_CAPS: &[u8] = b"security.capability";

/// What an extended-attribute call does, for its permission check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XattrOp {
    Read,
    Set,
    Remove,
}

/// The front end: the view and the log tail. Updates hold it exclusively, reads share it.
///
/// Lock order: `Shared::inner` → `Core::publish` → `Core::public`; `Core::pending` is a
/// leaf (held briefly, nothing taken under it). The publisher works under `publish` and
/// `public` only, so appends and reads of unpublished data go on while it copies; it takes
/// the front-end lock afterwards, alone, to catch the view up ([`Inner::catch_up`]).
pub(crate) struct Inner {
    core: Arc<Core>,
    view: View,
    tail: u64,
    /// Log space before this LSN may be overwritten: published, and no overlay of the view
    /// points into it any more.
    reclaimed: u64,
    reserved: u64,
    pub(crate) chunk_size: u64,
    next_generation: u32,
    appended: u64,
    recovered: u64,
    shut: bool,
}

/// What the front end and the publisher share.
pub(crate) struct Core {
    region: Arc<PmRegion>,
    geo: Geometry,
    log: LogSlot,
    /// One publisher at a time (the background thread, or an update that needs space).
    publish: Mutex<()>,
    public: RwLock<Pub>,
    /// Durable entries not yet caught up with (in log order).
    pending: Mutex<VecDeque<Arc<Pending>>>,
    /// Free data blocks of the public area, pending frees included (kept outside the
    /// public lock so that updates can check space while a batch is being published).
    free_blocks: AtomicU64,
    /// Set when publication failed (mirrors `Pub::failed`, readable without the lock).
    failed: std::sync::atomic::AtomicBool,
}

/// The publisher's side: the public area and the durable checkpoint.
pub(crate) struct Pub {
    area: PublicArea,
    /// Everything before this LSN is published, durably.
    published: u64,
    failed: Option<String>,
    entries: u64,
    batches: u64,
}

impl Core {
    /// Publish pending entries — at least one, up to about `budget` bytes of log — and
    /// durably advance the checkpoint. Returns the new checkpoint. The view is not touched:
    /// the front end catches up under its own lock.
    pub(crate) fn publish_batch(&self, budget: u64) -> FsResult<u64> {
        let _one = self.publish.lock();
        let published = self.public.read().published;
        let batch: Vec<Arc<Pending>> = {
            let q = self.pending.lock();
            let mut out = Vec::new();
            let mut bytes = 0;
            for p in q.iter().filter(|p| p.loc.end > published) {
                if !out.is_empty() && bytes >= budget {
                    break;
                }
                bytes += p.loc.end - p.loc.lsn;
                out.push(p.clone());
            }
            out
        };
        if batch.is_empty() {
            return Ok(published);
        }
        let mut pb = self.public.write();
        if let Some(e) = &pb.failed {
            return Err(FsError::Io { what: "publication".into(), source: std::io::Error::other(e.clone()) });
        }
        let mut upto = pb.published;
        for p in &batch {
            // The whole entry is checked before any of it is applied: all or nothing.
            let area = &mut pb.area;
            let res = area.validate(&p.records).and_then(|()| p.records.iter().try_for_each(|r| area.apply(r)));
            if let Err(e) = res {
                pb.failed = Some(format!("entry at lsn {}: {e}", p.loc.lsn));
                self.failed.store(true, Ordering::Release);
                return Err(e.into());
            }
            upto = p.loc.end;
        }
        pb.area.fence();
        self.log.set_published_lsn(upto)?;
        pb.area.checkpoint_done();
        pb.published = upto;
        pb.entries += batch.len() as u64;
        pb.batches += 1;
        self.free_blocks.store(pb.area.free_blocks() + pb.area.pending_free_blocks(), Ordering::Release);
        Ok(upto)
    }

    /// Whether publication has failed (then updates are refused; the log stays intact).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}

pub(crate) struct Signal {
    pub(crate) kick: bool,
    pub(crate) stop: bool,
}

pub(crate) struct Shared {
    pub(crate) inner: RwLock<Inner>,
    pub(crate) core: Arc<Core>,
    pub(crate) signal: Mutex<Signal>,
    pub(crate) wake: Condvar,
}

/// A mounted linefs client. All methods take `&self`; it is `Send + Sync`.
pub struct Fs {
    shared: Arc<Shared>,
    publisher: Mutex<Option<JoinHandle<()>>>,
    next_fh: AtomicU64,
    /// Open directory streams: handle → the first cookie the stream does not return.
    dir_streams: Mutex<std::collections::HashMap<u64, u64>>,
    pm_path: String,
    client: u32,
    /// Keeps the advisory lock on the PM file (one mount per node for now).
    _lock: Option<std::fs::File>,
}

/// `relatime` also updates an access time older than this, however it compares with
/// mtime and ctime (as Linux does).
const RELATIME_SECS: i64 = 24 * 3600;

/// Whether changing a regular file's mode from `old` to `new` only clears setuid and/or
/// setgid. After a write, truncate or fallocate by someone else, the kernel drops those bits
/// (of regular files only); a FUSE kernel that leaves privilege killing to it (no
/// FUSE_HANDLE_KILLPRIV) asks for exactly this change in the writer's name, so whoever may
/// write the file may make it; a chmod(2) by a non-owner never reaches here (the kernel
/// refuses it first under default_permissions).
fn drops_only_privs(old: u32, new: u32) -> bool {
    if old & libc::S_IFMT != libc::S_IFREG {
        return false;
    }
    let (old, new) = (old & 0o7777, new & 0o7777);
    let dropped = old & !new;
    new & !old == 0 && dropped != 0 && dropped & !(libc::S_ISUID | libc::S_ISGID) == 0
}

fn now() -> Timespec {
    to_ts(SystemTime::now())
}

fn to_ts(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            if d.subsec_nanos() == 0 {
                Timespec { sec: -(d.as_secs() as i64), nsec: 0 }
            } else {
                Timespec { sec: -(d.as_secs() as i64) - 1, nsec: 1_000_000_000 - d.subsec_nanos() }
            }
        }
    }
}

fn from_ts(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(t.nsec as u64)
    }
}

fn kind_of(mode: u32) -> FileKind {
    FileKind::from_mode(mode).unwrap_or(FileKind::File)
}

fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if !valid_name(name) {
        return Err(FsError::Invalid("bad file name"));
    }
    Ok(())
}

impl Inner {
    fn node(&self, ino: Ino) -> FsResult<&Node> {
        self.view.node(ino).ok_or(FsError::NotFound)
    }

    fn dir(&self, ino: Ino) -> FsResult<&Node> {
        let n = self.node(ino)?;
        if !n.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(n)
    }

    /// A directory the caller may look names up in (search permission).
    fn searchable_dir(&self, cred: &Cred, ino: Ino) -> FsResult<&Node> {
        let d = self.dir(ino)?;
        if !perm::may(cred, &d.img, X_OK) {
            return Err(FsError::Access);
        }
        Ok(d)
    }

    /// The inode `name` in `dir` names, looked up as path resolution does (search
    /// permission first, then existence).
    fn child(&self, cred: &Cred, dir: Ino, name: &[u8]) -> FsResult<Ino> {
        let d = self.searchable_dir(cred, dir)?;
        d.dir.as_ref().expect("dir").get(name).map(|e| e.0).ok_or(FsError::NotFound)
    }

    /// A directory the caller may add entries to or remove entries from.
    fn writable_dir(&self, cred: &Cred, ino: Ino) -> FsResult<&Node> {
        let d = self.dir(ino)?;
        if d.img.nlink == 0 {
            return Err(FsError::NotFound);
        }
        if !perm::may(cred, &d.img, W_OK | X_OK) {
            return Err(FsError::Access);
        }
        Ok(d)
    }

    /// The data blocks a file maps once its log is published (for `st_blocks`): the public
    /// ones plus those its unpublished writes and preallocations add. A few unpublished
    /// blocks are looked up in the public block map, so that writing into preallocated or
    /// already written blocks does not count them twice; many are counted as new (an upper
    /// bound, until publication, rather than a walk of the map on every stat).
    fn mapped_blocks(&self, n: &Node) -> u64 {
        const EXACT_UP_TO: u64 = 256;
        let ranges = n.unpublished_blocks();
        let pending: u64 = ranges.iter().map(|(a, b)| b - a).sum();
        if n.fresh.is_some() {
            // Nothing of this file is public yet.
            return pending;
        }
        if pending == 0 || pending > EXACT_UP_TO {
            return n.pub_blocks + pending;
        }
        let public = self.core.public.read();
        let mut new = 0;
        for idx in ranges.iter().flat_map(|&(a, b)| a..b) {
            // An unreadable block map (corrupt PM) counts the block as new.
            if !public.area.reader().is_mapped(n.img.ino, idx).unwrap_or(false) {
                new += 1;
            }
        }
        n.pub_blocks + new
    }

    fn attr(&self, n: &Node) -> Attr {
        let img = &n.img;
        let blocks = match n.img.mode & libc::S_IFMT {
            libc::S_IFREG | libc::S_IFLNK | libc::S_IFDIR => self.mapped_blocks(n) * (BLOCK_SIZE / 512),
            _ => 0,
        };
        Attr {
            ino: img.ino,
            generation: img.generation,
            kind: kind_of(img.mode),
            perm: img.mode & 0o7777,
            nlink: img.nlink,
            uid: img.uid,
            gid: img.gid,
            rdev: img.rdev,
            size: img.size,
            blocks,
            blksize: BLOCK_SIZE as u32,
            atime: from_ts(img.atime),
            mtime: from_ts(img.mtime),
            ctime: from_ts(img.ctime),
            crtime: from_ts(img.crtime),
        }
    }

    fn attr_of(&self, ino: Ino) -> FsResult<Attr> {
        Ok(self.attr(self.node(ino)?))
    }

    pub(crate) fn pending_bytes(&self) -> u64 {
        self.tail - self.reclaimed
    }

    fn space_available(&self) -> u64 {
        self.core.free_blocks.load(Ordering::Acquire).saturating_sub(self.reserved + META_RESERVE)
    }

    /// Make an entry durable and apply it to the view. `est_blocks` is the number of data
    /// blocks publication may need for it.
    fn commit(&mut self, b: &EntryBuilder, est_blocks: u64) -> FsResult<Vec<Record>> {
        if self.shut {
            return Err(FsError::ShutDown);
        }
        if self.core.failed() {
            tracing::warn!("refusing update: publication failed earlier");
            return Err(FsError::NoSpace("publication stalled; see the mount log"));
        }
        if est_blocks > self.space_available() {
            // Publication may free space (unlinks, truncates) and makes the estimate exact.
            self.publish_all()?;
            if est_blocks > self.space_available() {
                return Err(FsError::NoSpace("public area full"));
            }
        }
        let loc = match self.core.log.append(self.tail, self.reclaimed, b.payload()) {
            Ok(loc) => loc,
            Err(AppendError::Full(_)) => {
                self.publish_all()?;
                match self.core.log.append(self.tail, self.reclaimed, b.payload()) {
                    Ok(loc) => loc,
                    Err(AppendError::Full(_)) => return Err(FsError::NoSpace("operation log full")),
                    Err(AppendError::TooLarge { .. }) => return Err(FsError::NoSpace("entry larger than the log")),
                    Err(AppendError::Pm(e)) => return Err(e.into()),
                }
            }
            Err(AppendError::TooLarge { .. }) => return Err(FsError::NoSpace("entry larger than the log")),
            Err(AppendError::Pm(e)) => return Err(e.into()),
        };
        self.tail = loc.end;
        self.appended += 1;
        let records = decode_records(b.payload(), loc.payload_off)?;
        self.view.apply(&records, loc.lsn);
        self.reserved += est_blocks;
        self.core.pending.lock().push_back(Arc::new(Pending { loc, records: records.clone(), est_blocks }));
        Ok(records)
    }

    /// Bring the view up to the publisher's checkpoint: drop published entries, their
    /// reservations and their overlay segments, and only then let the log space be reused.
    pub(crate) fn catch_up(&mut self) {
        let published = self.core.public.read().published;
        if published <= self.reclaimed {
            return;
        }
        let mut released = 0;
        let mut touched = Vec::new();
        {
            let mut q = self.core.pending.lock();
            while q.front().is_some_and(|p| p.loc.end <= published) {
                if let Some(p) = q.pop_front() {
                    released += p.est_blocks;
                    touched.extend(p.records.iter().map(|r| r.target()));
                }
            }
        }
        touched.sort_unstable();
        touched.dedup();
        {
            let pb = self.core.public.read();
            for ino in touched {
                if let Some(n) = self.view.node_mut(ino) {
                    n.pub_blocks = pb.area.file_blocks(ino);
                }
            }
        }
        self.reserved = self.reserved.saturating_sub(released);
        self.view.trim(published);
        self.reclaimed = published;
    }

    /// Publish everything in the log (an update that needs space, sync, shutdown).
    pub(crate) fn publish_all(&mut self) -> FsResult<()> {
        self.core.publish_batch(u64::MAX)?;
        self.catch_up();
        Ok(())
    }

    fn new_inode(&mut self, cred: &Cred, parent: &InodeImage, mode: u32, rdev: u32) -> FsResult<InodeImage> {
        let ino = self.view.inos.alloc().ok_or(FsError::NoSpace("no free inode"))?;
        // Allocation is only committed with the entry; give it back if the entry fails.
        let t = now();
        let mut mode = mode;
        let gid = if parent.mode & libc::S_ISGID != 0 {
            if mode & libc::S_IFMT == libc::S_IFDIR {
                mode |= libc::S_ISGID;
            }
            parent.gid
        } else {
            cred.gid
        };
        if mode & libc::S_IFMT != libc::S_IFDIR && mode & libc::S_ISGID != 0 && cred.uid != 0 && !cred.in_group(gid) {
            mode &= !libc::S_ISGID;
        }
        self.next_generation = self.next_generation.wrapping_add(1);
        Ok(InodeImage {
            ino,
            size: 0,
            parent: 0,
            mode,
            uid: cred.uid,
            gid,
            nlink: 1,
            rdev,
            generation: self.next_generation,
            flags: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        })
    }

    /// Create a new inode named `name` in `parent`: the shared part of mknod, mkdir,
    /// create and symlink.
    fn create_node(
        &mut self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        symlink: Option<&[u8]>,
    ) -> FsResult<Ino> {
        check_name(name)?;
        // As Linux orders the checks: search permission, existence, write permission.
        if self.child(cred, parent, name).is_ok() {
            return Err(FsError::Exists);
        }
        let p = self.writable_dir(cred, parent)?;
        let mut pimg = p.img;
        let mut img = self.new_inode(cred, &pimg, mode, rdev)?;
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        if is_dir {
            img.nlink = 2;
            img.parent = parent;
            img.size = 2 * 32;
            pimg.nlink += 1;
        }
        let t = img.ctime;
        pimg.mtime = t;
        pimg.ctime = t;
        pimg.size += 32;
        let mut b = EntryBuilder::new();
        let mut est = 1;
        if let Some(target) = symlink {
            img.size = target.len() as u64;
            b.inode(&img, true);
            b.write(img.ino, 0, target);
            est += 1;
        } else {
            b.inode(&img, true);
        }
        b.dirent(parent, name, img.ino, dtype_of_mode(mode));
        b.inode(&pimg, false);
        if let Err(e) = self.commit(&b, est) {
            self.view.inos.release(img.ino);
            return Err(e);
        }
        Ok(img.ino)
    }

    /// Log freeing an inode once nothing refers to it (no name, no kernel reference, no open).
    fn maybe_free(&mut self, ino: Ino) -> FsResult<()> {
        let Some(n) = self.view.node(ino) else { return Ok(()) };
        if ino == ROOT_INO || n.img.nlink > 0 || n.lookups > 0 || n.opens > 0 {
            return Ok(());
        }
        let mut b = EntryBuilder::new();
        b.free_inode(ino);
        self.commit(&b, 0)?;
        Ok(())
    }

    /// Remove `name` (resolving to `ino`) from `parent`, as unlink and rmdir do.
    fn remove_entry(&mut self, b: &mut EntryBuilder, parent: &mut InodeImage, name: &[u8], victim: &Node, t: Timespec) {
        b.dirent(parent.ino, name, 0, 0);
        let mut v = victim.img;
        if victim.is_dir() {
            v.nlink = 0;
            parent.nlink = parent.nlink.saturating_sub(1);
        } else {
            v.nlink = v.nlink.saturating_sub(1);
        }
        v.ctime = t;
        parent.mtime = t;
        parent.ctime = t;
        parent.size = parent.size.saturating_sub(32);
        if v.nlink == 0 && victim.lookups == 0 && victim.opens == 0 {
            b.free_inode(v.ino);
        } else {
            b.inode(&v, false);
        }
    }

    fn write_data(&mut self, cred: &Cred, ino: Ino, off: u64, data: &[u8]) -> FsResult<u32> {
        let n = self.node(ino)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        if n.kind_bits() != libc::S_IFREG {
            return Err(FsError::Invalid("write to a special file"));
        }
        let end = off.checked_add(data.len() as u64).ok_or(FsError::TooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(FsError::TooBig);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let max = (self.core.log.max_payload() as usize).saturating_sub(1024).min(1 << 20);
        let mut done = 0usize;
        while done < data.len() {
            let piece = &data[done..(done + max).min(data.len())];
            let pos = off + done as u64;
            let n = self.node(ino)?;
            let mut img = n.img;
            img.size = img.size.max(pos + piece.len() as u64);
            let t = now();
            img.mtime = t;
            img.ctime = t;
            img.mode = perm::killpriv(cred, img.mode);
            let est = self.estimate_blocks(ino, pos, piece.len() as u64)?;
            let mut b = EntryBuilder::new();
            b.write(ino, pos, piece);
            b.inode(&img, false);
            match self.commit(&b, est) {
                Ok(_) => done += piece.len(),
                // A short write is success for what was written.
                Err(e) if done > 0 => {
                    tracing::debug!(error = %e, "short write");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(done as u32)
    }

    /// Data blocks a write of [off, off+len) may need: the blocks not mapped yet.
    fn estimate_blocks(&self, ino: Ino, off: u64, len: u64) -> FsResult<u64> {
        let first = off / BLOCK_SIZE;
        let last = (off + len).div_ceil(BLOCK_SIZE);
        let span = last - first;
        let conservative = span + index_blocks(span);
        // While space is plentiful, reserve conservatively (as if no block were mapped) and
        // leave the public area alone: its lock may be held by a publication batch. Only
        // near full does the exact count matter.
        if span > 64 || conservative.saturating_mul(4) < self.space_available() {
            return Ok(conservative);
        }
        let mut need = 0;
        let public = self.core.public.read();
        for idx in first..last {
            if !public.area.reader().is_mapped(ino, idx)? {
                need += 1;
            }
        }
        Ok(need + if need > 0 { 3 } else { 0 })
    }

    fn read_data(&self, ino: Ino, off: u64, size: u32) -> FsResult<Vec<u8>> {
        let n = self.node(ino)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        let fsize = n.img.size;
        if off >= fsize {
            return Ok(Vec::new());
        }
        let end = fsize.min(off + size as u64);
        let mut buf = vec![0u8; (end - off) as usize];
        let mut pos = off;
        for (a, b, src) in n.overlay.overlapping(off, end) {
            if a > pos {
                self.core.public.read().area.reader().read_file(ino, pos, &mut buf[(pos - off) as usize..(a - off) as usize])?;
            }
            let dst = &mut buf[(a - off) as usize..(b - off) as usize];
            match src {
                Src::Log(at) => self.core.region.read(at, dst)?,
                Src::Zero => dst.fill(0),
            }
            pos = b;
        }
        if pos < end {
            self.core.public.read().area.reader().read_file(ino, pos, &mut buf[(pos - off) as usize..])?;
        }
        Ok(buf)
    }

    fn truncate_records(&self, b: &mut EntryBuilder, img: &mut InodeImage, size: u64) {
        if size < img.size {
            b.truncate(img.ino, size);
        }
        img.size = size;
    }
}

impl Fs {
    /// Create and format a PM file. Refuses to touch an existing non-empty file.
    pub fn format(path: &Path, opts: &FormatOptions) -> FsResult<()> {
        if let Ok(m) = std::fs::metadata(path) {
            if m.len() > 0 {
                return Err(FsError::Io {
                    what: format!("format {}", path.display()),
                    source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "file exists and is not empty"),
                });
            }
        }
        let geo = Geometry::compute(&FormatParams {
            size: opts.size,
            log_size: opts.log_size,
            log_slots: opts.log_slots,
            inodes: opts.inodes,
        })?;
        let region = Arc::new(PmRegion::create(path, opts.size)?);
        Fs::format_region(&region, &geo)
    }

    /// Format a region (tests use traced regions).
    pub fn format_region(region: &Arc<PmRegion>, geo: &Geometry) -> FsResult<()> {
        for slot in 0..geo.log_slots {
            LogSlot::new(region.clone(), geo, slot).format()?;
        }
        let t = now();
        let root = InodeImage {
            ino: ROOT_INO,
            size: 64,
            parent: ROOT_INO,
            mode: libc::S_IFDIR | 0o755,
            nlink: 2,
            generation: 1,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
            ..Default::default()
        };
        PublicArea::format(region, geo, &root)?;
        let mut uuid = [0u8; 16];
        let r: u128 = rand_u128();
        uuid.copy_from_slice(&r.to_le_bytes());
        let sb = Superblock {
            geometry: *geo,
            uuid,
            format_time_ns: SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0),
        };
        // The superblock is the format's commit point: written last.
        region.fence();
        region.write(0, &sb.encode())?;
        region.persist_now(0, 256)?;
        Ok(())
    }

    /// Check that `path` holds a valid linefs PM file.
    pub fn check(path: &Path) -> FsResult<()> {
        let region = PmRegion::open(path)?;
        Superblock::read(&region)?;
        Ok(())
    }

    /// Open a PM file: recover (re-publish the committed log), then serve.
    pub fn mount(opts: FsOptions) -> FsResult<Fs> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&opts.pm_path)
            .map_err(|e| FsError::Io { what: format!("open {}", opts.pm_path.display()), source: e })?;
        // SAFETY: flock on a file descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&file), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            return Err(FsError::Busy(opts.pm_path.display().to_string()));
        }
        let region = Arc::new(PmRegion::open(&opts.pm_path)?);
        let mut fs = Fs::mount_region(region, opts)?;
        fs._lock = Some(file);
        Ok(fs)
    }

    /// Open a region that is already mapped (tests: traced regions and crash images).
    pub fn mount_region(region: Arc<PmRegion>, opts: FsOptions) -> FsResult<Fs> {
        let sb = Superblock::read(&region)?;
        let geo = sb.geometry;
        if opts.client >= geo.log_slots {
            return Err(FsError::Invalid("client number beyond the log slots"));
        }
        let log = LogSlot::new(region.clone(), &geo, opts.client);
        let (mut public, mut loaded) = PublicArea::load(region.clone(), geo)?;
        let published = log.published_lsn()?;
        // Recovery: re-publish every committed entry after the checkpoint.
        let scan = log.scan(published)?;
        let mut entries = Vec::new();
        for loc in &scan.entries {
            let payload = log.read_payload(loc)?;
            match decode_records(&payload, loc.payload_off) {
                Ok(r) => entries.push((loc, r)),
                Err(e) => {
                    tracing::error!(lsn = loc.lsn, error = %e, "malformed log entry: recovery stops here");
                    break;
                }
            }
        }
        // A crash during publication leaves the public area ahead of the checkpoint; the
        // inodes the suffix frees or creates may already be in their later state.
        let unsettled: std::collections::HashSet<u64> = entries
            .iter()
            .flat_map(|(_, recs)| recs.iter())
            .filter_map(|r| match r {
                Record::FreeInode { ino } => Some(*ino),
                Record::Inode { fresh: true, img } => Some(img.ino),
                _ => None,
            })
            .collect();
        let mut upto = published;
        let mut recovered = 0;
        for (loc, records) in &entries {
            // Validate the whole entry first: it is published entirely or not at all. An
            // invalid entry (a bug or a forged log) stops the mount before anything changes.
            if let Err(e) = public.validate_with(records, &unsettled) {
                tracing::error!(lsn = loc.lsn, client = opts.client, error = %e, "invalid log entry; refusing to mount");
                return Err(FsError::InvalidLog { client: opts.client, lsn: loc.lsn, why: e.to_string() });
            }
            for r in records {
                public.apply_replayed(r, &unsettled)?;
            }
            upto = loc.end;
            recovered += 1;
        }
        if let ScanStop::Invalid(why) = &scan.stop {
            tracing::info!(%why, "log ends at a torn or corrupt entry (expected after a crash)");
        }
        // Orphans: inodes without names that were still open when the last client stopped.
        let orphans: Vec<u64> =
            loaded.inodes.values().filter(|i| i.img.nlink == 0 && i.img.ino != ROOT_INO).map(|i| i.img.ino).collect();
        let need_reload = recovered > 0 || !orphans.is_empty();
        if need_reload {
            for ino in orphans {
                // Still nameless after replay? Then free it.
                if public.read_inode(ino)?.img.nlink == 0 {
                    public.apply(&Record::FreeInode { ino })?;
                }
            }
            public.fence();
            log.set_published_lsn(upto)?;
            public.checkpoint_done();
            public.check_suspects()?;
            let (p, l) = PublicArea::load(region.clone(), geo)?;
            public = p;
            loaded = l;
            // Orphans freed by replay leave nothing behind; others (nlink 0 after replay) were freed above.
        } else {
            public.check_suspects()?;
        }
        let mut view = View::new(geo.inode_count);
        let mut max_gen = 1;
        for (ino, li) in &loaded.inodes {
            let mut n = Node::new(li.img);
            n.pub_blocks = li.blocks;
            n.xattrs = li.xattrs.iter().cloned().collect();
            view.inos.mark(*ino);
            max_gen = max_gen.max(li.img.generation);
            view.nodes.insert(*ino, n);
        }
        for (dir, ents) in &loaded.dirs {
            let mut recs = Vec::new();
            for e in ents {
                if view.nodes.contains_key(&e.ino) {
                    recs.push(Record::Dirent { dir: *dir, ino: e.ino, dtype: e.dtype, name: e.name.clone() });
                } else {
                    tracing::warn!(dir, ino = e.ino, "directory entry names a free inode; ignored");
                }
            }
            view.apply(&recs, 0);
        }
        if view.node(ROOT_INO).is_none_or(|n| !n.is_dir()) {
            return Err(FsError::Format(linefs_pm::layout::FormatError::Corrupt {
                what: "root directory".into(),
                detail: "missing".into(),
            }));
        }
        let free = public.free_blocks() + public.pending_free_blocks();
        let core = Arc::new(Core {
            region: region.clone(),
            geo,
            log,
            publish: Mutex::new(()),
            public: RwLock::new(Pub { area: public, published: upto, failed: None, entries: 0, batches: 0 }),
            pending: Mutex::new(VecDeque::new()),
            free_blocks: AtomicU64::new(free),
            failed: std::sync::atomic::AtomicBool::new(false),
        });
        let inner = Inner {
            core: core.clone(),
            view,
            tail: upto,
            reclaimed: upto,
            reserved: 0,
            chunk_size: opts.chunk_size.max(64 << 10),
            next_generation: max_gen,
            appended: 0,
            recovered,
            shut: false,
        };
        let shared = Arc::new(Shared {
            inner: RwLock::new(inner),
            core,
            signal: Mutex::new(Signal { kick: false, stop: false }),
            wake: Condvar::new(),
        });
        let publisher = if opts.background_publish {
            let s = shared.clone();
            let interval = opts.publish_interval;
            Some(
                std::thread::Builder::new()
                    .name("linefs-publish".into())
                    .spawn(move || crate::publisher::run(s, interval))
                    .map_err(|e| FsError::Io { what: "start publisher".into(), source: e })?,
            )
        } else {
            None
        };
        tracing::info!(recovered, published = upto, "linefs client ready");
        Ok(Fs {
            shared,
            publisher: Mutex::new(publisher),
            next_fh: AtomicU64::new(1),
            dir_streams: Mutex::new(std::collections::HashMap::new()),
            pm_path: region.path().map(|p| p.display().to_string()).unwrap_or_else(|| "(memory)".into()),
            client: opts.client,
            _lock: None,
        })
    }

    fn rlock(&self) -> RwLockReadGuard<'_, Inner> {
        self.shared.inner.read()
    }

    fn wlock(&self) -> RwLockWriteGuard<'_, Inner> {
        self.shared.inner.write()
    }

    /// Wake the publisher if a chunk is waiting.
    fn kick(&self, inner: &Inner) {
        if inner.pending_bytes() >= inner.chunk_size {
            let mut s = self.shared.signal.lock();
            s.kick = true;
            self.shared.wake.notify_one();
        }
    }

    /// Publish everything, free orphans, stop the publisher. Idempotent; also run on drop.
    pub fn shutdown(&self) -> FsResult<()> {
        {
            let mut s = self.shared.signal.lock();
            s.stop = true;
            self.shared.wake.notify_all();
        }
        if let Some(h) = self.publisher.lock().take() {
            let _ = h.join();
        }
        let mut inner = self.wlock();
        if inner.shut {
            return Ok(());
        }
        let orphans: Vec<u64> = inner
            .view
            .nodes
            .values()
            .filter(|n| n.img.nlink == 0 && n.img.ino != ROOT_INO)
            .map(|n| n.img.ino)
            .collect();
        for ino in orphans {
            if let Some(n) = inner.view.node_mut(ino) {
                n.lookups = 0;
                n.opens = 0;
            }
            inner.maybe_free(ino)?;
        }
        inner.publish_all()?;
        inner.shut = true;
        Ok(())
    }

    pub fn lookup(&self, cred: &Cred, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        let mut inner = self.wlock();
        if name == b"." && !inner.node(parent)?.is_dir() {
            // Only a file-handle lookup (the kernel's export support, open_by_handle_at)
            // asks for "." of a non-directory: it rebuilds an inode from its number. A file
            // with no name left is stale there, as on local file systems.
            if inner.node(parent)?.img.nlink == 0 {
                return Err(FsError::NotFound);
            }
            let attr = inner.attr_of(parent)?;
            if let Some(n) = inner.view.node_mut(parent) {
                n.lookups += 1;
            }
            return Ok(attr);
        }
        let p = inner.dir(parent)?;
        if !perm::may(cred, &p.img, X_OK) {
            return Err(FsError::Access);
        }
        let ino = match name {
            b"." => parent,
            b".." => p.img.parent.max(ROOT_INO),
            _ => p.dir.as_ref().expect("dir").get(name).ok_or(FsError::NotFound)?.0,
        };
        let attr = inner.attr_of(ino)?;
        if let Some(n) = inner.view.node_mut(ino) {
            n.lookups += 1;
        }
        Ok(attr)
    }

    pub fn forget(&self, ino: Ino, nlookup: u64) {
        let mut inner = self.wlock();
        if let Some(n) = inner.view.node_mut(ino) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        if let Err(e) = inner.maybe_free(ino) {
            tracing::warn!(ino, error = %e, "could not free orphan inode now; it is freed at next mount");
        }
    }

    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        self.rlock().attr_of(ino)
    }

    /// Records an access to `ino` (a read of its data or a listing of a directory) in its
    /// access time, as the mount's atime option says; changes nothing else (not ctime).
    /// Returns whether the access time changed. Under `Relative`, the common case (a file
    /// read again after its access time was set) only takes the read lock.
    pub fn touch_atime(&self, ino: Ino, policy: AtimePolicy) -> FsResult<bool> {
        let t = now();
        let due = |img: &InodeImage| match policy {
            AtimePolicy::Never => false,
            AtimePolicy::Strict => img.atime != t,
            AtimePolicy::Relative => {
                img.atime <= img.mtime || img.atime <= img.ctime || img.atime.sec + RELATIME_SECS <= t.sec
            }
        };
        if !due(&self.rlock().node(ino)?.img) {
            return Ok(false);
        }
        let mut inner = self.wlock();
        let mut img = inner.node(ino)?.img;
        // Checked again: another access may have updated it meanwhile.
        if !due(&img) {
            return Ok(false);
        }
        img.atime = t;
        let mut b = EntryBuilder::new();
        b.inode(&img, false);
        inner.commit(&b, 0)?;
        self.kick(&inner);
        Ok(true)
    }

    pub fn setattr(&self, cred: &Cred, ino: Ino, set: &SetAttr) -> FsResult<Attr> {
        let mut inner = self.wlock();
        let n = inner.node(ino)?;
        let mut img = n.img;
        let is_owner = perm::owner_or_root(cred, &img);
        let t = now();
        let mut b = EntryBuilder::new();
        let mut est = 0;
        if let Some(mode) = set.mode {
            if !is_owner && !(drops_only_privs(img.mode, mode) && (set.via_handle || perm::may(cred, &img, W_OK))) {
                return Err(FsError::Perm);
            }
            let mut m = mode & 0o7777;
            if cred.uid != 0 && !cred.in_group(set.gid.unwrap_or(img.gid)) {
                m &= !libc::S_ISGID;
            }
            img.mode = (img.mode & libc::S_IFMT) | m;
        }
        if set.uid.is_some() || set.gid.is_some() {
            let new_uid = set.uid.unwrap_or(img.uid);
            let new_gid = set.gid.unwrap_or(img.gid);
            if cred.uid != 0 {
                if new_uid != img.uid || cred.uid != img.uid {
                    return Err(FsError::Perm);
                }
                if new_gid != img.gid && !cred.in_group(new_gid) {
                    return Err(FsError::Perm);
                }
            }
            let changed = new_uid != img.uid || new_gid != img.gid;
            img.uid = new_uid;
            img.gid = new_gid;
            // chown clears setuid/setgid on non-directories (setgid only with group exec).
            if (changed || cred.uid != 0) && img.mode & libc::S_IFMT != libc::S_IFDIR && set.mode.is_none() {
                img.mode &= !libc::S_ISUID;
                if img.mode & libc::S_IXGRP != 0 {
                    img.mode &= !libc::S_ISGID;
                }
            }
        }
        if let Some(size) = set.size {
            if n.is_dir() {
                return Err(FsError::IsDir);
            }
            if n.kind_bits() != libc::S_IFREG {
                return Err(FsError::Invalid("truncate of a special file"));
            }
            if !set.via_handle && !perm::may(cred, &img, W_OK) {
                return Err(FsError::Access);
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::TooBig);
            }
            inner.truncate_records(&mut b, &mut img, size);
            img.mode = perm::killpriv(cred, img.mode);
            img.mtime = t;
            est = 1;
        }
        for (which, ts) in [(0, set.atime), (1, set.mtime)] {
            let Some(ts) = ts else { continue };
            let v = match ts {
                TimeSet::Now => {
                    if !is_owner && !perm::may(cred, &n.img, W_OK) {
                        return Err(FsError::Access);
                    }
                    t
                }
                TimeSet::At(at) => {
                    if !is_owner {
                        return Err(FsError::Perm);
                    }
                    to_ts(at)
                }
            };
            if which == 0 {
                img.atime = v;
            } else {
                img.mtime = v;
            }
        }
        img.ctime = set.ctime.map(to_ts).unwrap_or(t);
        b.inode(&img, false);
        inner.commit(&b, est)?;
        let a = inner.attr_of(ino)?;
        self.kick(&inner);
        Ok(a)
    }

    pub fn readlink(&self, ino: Ino) -> FsResult<Vec<u8>> {
        let inner = self.rlock();
        let n = inner.node(ino)?;
        if n.kind_bits() != libc::S_IFLNK {
            return Err(FsError::Invalid("not a symlink"));
        }
        inner.read_data(ino, 0, n.img.size as u32)
    }

    pub fn mknod(&self, cred: &Cred, parent: Ino, name: &[u8], mode: u32, umask: u32, rdev: u32) -> FsResult<Attr> {
        let kind = mode & libc::S_IFMT;
        let kind = if kind == 0 { libc::S_IFREG } else { kind };
        match kind {
            libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK => {}
            libc::S_IFCHR | libc::S_IFBLK => {
                if cred.uid != 0 {
                    return Err(FsError::Perm);
                }
            }
            libc::S_IFDIR => return self.mkdir(cred, parent, name, mode, umask),
            _ => return Err(FsError::Invalid("mknod of this file type")),
        }
        let mut inner = self.wlock();
        let ino = inner.create_node(cred, parent, name, kind | (mode & 0o7777 & !umask), rdev, None)?;
        self.finish_create(&mut inner, ino)
    }

    fn finish_create(&self, inner: &mut Inner, ino: Ino) -> FsResult<Attr> {
        if let Some(n) = inner.view.node_mut(ino) {
            n.lookups += 1;
        }
        let a = inner.attr_of(ino)?;
        self.kick(inner);
        Ok(a)
    }

    pub fn mkdir(&self, cred: &Cred, parent: Ino, name: &[u8], mode: u32, umask: u32) -> FsResult<Attr> {
        let mut inner = self.wlock();
        let ino = inner.create_node(cred, parent, name, libc::S_IFDIR | (mode & 0o7777 & !umask), 0, None)?;
        self.finish_create(&mut inner, ino)
    }

    pub fn create(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> FsResult<(Attr, u64)> {
        let mut inner = self.wlock();
        let existing = match inner.child(cred, parent, name) {
            Ok(ino) => Some(ino),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        let ino = match existing {
            Some(_) if flags & libc::O_EXCL != 0 => return Err(FsError::Exists),
            Some(ino) => {
                drop(inner);
                let fh = self.open(cred, ino, flags)?;
                let mut inner = self.wlock();
                return Ok((self.finish_create(&mut inner, ino)?, fh));
            }
            None => inner.create_node(cred, parent, name, libc::S_IFREG | (mode & 0o7777 & !umask), 0, None)?,
        };
        if let Some(n) = inner.view.node_mut(ino) {
            n.opens += 1;
        }
        let a = self.finish_create(&mut inner, ino)?;
        Ok((a, self.next_fh.fetch_add(1, Ordering::Relaxed)))
    }

    pub fn symlink(&self, cred: &Cred, parent: Ino, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        if target.len() > SYMLINK_MAX {
            return Err(FsError::NameTooLong);
        }
        if target.is_empty() {
            return Err(FsError::NotFound);
        }
        let mut inner = self.wlock();
        let ino = inner.create_node(cred, parent, name, libc::S_IFLNK | 0o777, 0, Some(target))?;
        self.finish_create(&mut inner, ino)
    }

    pub fn link(&self, cred: &Cred, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Attr> {
        check_name(newname)?;
        let mut inner = self.wlock();
        inner.node(ino)?;
        // As Linux: the new name is checked first (search permission, EEXIST), then write
        // permission, then the source (EPERM for a directory).
        if inner.child(cred, newparent, newname).is_ok() {
            return Err(FsError::Exists);
        }
        let mut pimg = inner.writable_dir(cred, newparent)?.img;
        let n = inner.node(ino)?;
        if n.is_dir() {
            return Err(FsError::Perm);
        }
        if n.img.nlink == 0 {
            return Err(FsError::NotFound);
        }
        if n.img.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        let mut img = n.img;
        let t = now();
        img.nlink += 1;
        img.ctime = t;
        pimg.mtime = t;
        pimg.ctime = t;
        pimg.size += 32;
        let mut b = EntryBuilder::new();
        b.dirent(newparent, newname, ino, dtype_of_mode(img.mode));
        b.inode(&img, false);
        b.inode(&pimg, false);
        inner.commit(&b, 1)?;
        self.finish_create(&mut inner, ino)
    }

    fn remove(&self, cred: &Cred, parent: Ino, name: &[u8], dir: bool) -> FsResult<()> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if dir && name == b"." {
            return Err(FsError::Invalid("rmdir ."));
        }
        if dir && name == b".." {
            return Err(FsError::NotEmpty);
        }
        let mut inner = self.wlock();
        // As Linux: lookup (search permission, ENOENT), then write permission, sticky bit,
        // and the victim's type.
        let ino = inner.child(cred, parent, name)?;
        let mut pimg = inner.writable_dir(cred, parent)?.img;
        let victim = inner.node(ino)?.clone();
        if !perm::sticky_allows(cred, &pimg, &victim.img) {
            return Err(FsError::Perm);
        }
        match (dir, victim.is_dir()) {
            (false, true) => return Err(FsError::IsDir),
            (true, false) => return Err(FsError::NotDir),
            (true, true) if victim.dir.as_ref().expect("dir").len() > 0 => return Err(FsError::NotEmpty),
            _ => {}
        }
        let mut b = EntryBuilder::new();
        inner.remove_entry(&mut b, &mut pimg, name, &victim, now());
        b.inode(&pimg, false);
        inner.commit(&b, 0)?;
        self.kick(&inner);
        Ok(())
    }

    pub fn unlink(&self, cred: &Cred, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove(cred, parent, name, false)
    }

    pub fn rmdir(&self, cred: &Cred, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove(cred, parent, name, true)
    }

    pub fn rename(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 {
            return Err(FsError::Invalid("unsupported rename flags"));
        }
        if flags & RENAME_NOREPLACE != 0 && flags & RENAME_EXCHANGE != 0 {
            return Err(FsError::Invalid("RENAME_NOREPLACE with RENAME_EXCHANGE"));
        }
        if flags & RENAME_WHITEOUT != 0 && flags & RENAME_EXCHANGE != 0 {
            return Err(FsError::Invalid("RENAME_WHITEOUT with RENAME_EXCHANGE"));
        }
        // The kernel has checked CAP_MKNOD; a whiteout is a device node all the same.
        if flags & RENAME_WHITEOUT != 0 && cred.uid != 0 {
            return Err(FsError::Perm);
        }
        check_name(name)?;
        check_name(newname)?;
        let mut inner = self.wlock();
        // The checks run in the order Linux makes them (do_renameat2, vfs_rename), so that a
        // call with several faults reports the same errno: lookups (search permission,
        // ENOENT), the flags, the subtree traps, same inode, then write permission and the
        // sticky bit on each side, the types, write permission on a moved directory, and
        // last an occupied target directory.
        let src = inner.child(cred, parent, name)?;
        let dst = match inner.child(cred, newparent, newname) {
            Ok(ino) => Some(ino),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        let exchange = flags & RENAME_EXCHANGE != 0;
        if exchange && dst.is_none() {
            return Err(FsError::NotFound);
        }
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(FsError::Exists);
        }
        let s = inner.node(src)?.clone();
        let d = match dst {
            Some(d) => Some(inner.node(d)?.clone()),
            None => None,
        };
        // A directory may not move into its own subtree.
        if s.is_dir() && parent != newparent && inner.view.is_ancestor(src, newparent) {
            return Err(FsError::Invalid("directory moved into its own subtree"));
        }
        // The target is an ancestor of the source: Linux refuses to replace it (ENOTEMPTY:
        // it holds the source), and to exchange them (EINVAL).
        if let Some(d) = d.as_ref().filter(|d| d.is_dir() && parent != newparent) {
            if inner.view.is_ancestor(d.img.ino, parent) {
                if exchange {
                    return Err(FsError::Invalid("directory moved into its own subtree"));
                }
                return Err(FsError::NotEmpty);
            }
        }
        if dst == Some(src) {
            // Two names of one inode: POSIX says do nothing.
            return Ok(());
        }
        let sp = inner.writable_dir(cred, parent)?.img;
        if !perm::sticky_allows(cred, &sp, &s.img) {
            return Err(FsError::Perm);
        }
        let dp = inner.writable_dir(cred, newparent)?.img;
        if let Some(d) = &d {
            if !perm::sticky_allows(cred, &dp, &d.img) {
                return Err(FsError::Perm);
            }
            if !exchange {
                match (s.is_dir(), d.is_dir()) {
                    (true, false) => return Err(FsError::NotDir),
                    (false, true) => return Err(FsError::IsDir),
                    _ => {}
                }
            }
        }
        // Moving a directory to another parent rewrites its "..": needs write access to it.
        if parent != newparent {
            if s.is_dir() && !perm::may(cred, &s.img, W_OK) {
                return Err(FsError::Access);
            }
            if exchange && d.as_ref().is_some_and(|d| d.is_dir() && !perm::may(cred, &d.img, W_OK)) {
                return Err(FsError::Access);
            }
        }
        if !exchange && d.as_ref().is_some_and(|d| d.is_dir() && d.dir.as_ref().expect("dir").len() > 0) {
            return Err(FsError::NotEmpty);
        }
        let t = now();
        let mut b = EntryBuilder::new();
        let mut simg = s.img;
        simg.ctime = t;
        let same = parent == newparent;
        // Parent images: one when both names are in the same directory.
        let mut pimgs = vec![sp];
        if !same {
            pimgs.push(dp);
        }
        let (si, di) = (0, if same { 0 } else { 1 });
        for p in pimgs.iter_mut() {
            p.mtime = t;
            p.ctime = t;
        }
        let s_dir = s.is_dir();
        let mut whiteout = None;
        if exchange {
            let d = d.expect("exchange target");
            let mut dimg = d.img;
            dimg.ctime = t;
            b.dirent(parent, name, dimg.ino, dtype_of_mode(dimg.mode));
            b.dirent(newparent, newname, src, dtype_of_mode(simg.mode));
            if !same {
                if s_dir {
                    simg.parent = newparent;
                    pimgs[si].nlink -= 1;
                    pimgs[di].nlink += 1;
                }
                if d.is_dir() {
                    dimg.parent = parent;
                    pimgs[di].nlink -= 1;
                    pimgs[si].nlink += 1;
                }
            }
            b.inode(&simg, false);
            b.inode(&dimg, false);
        } else {
            if flags & RENAME_WHITEOUT != 0 {
                // The source's name now holds a whiteout, in the same entry as the move.
                let wimg = inner.new_inode(cred, &pimgs[si], libc::S_IFCHR, 0)?;
                whiteout = Some(wimg.ino);
                b.inode(&wimg, true);
                b.dirent(parent, name, wimg.ino, dtype_of_mode(wimg.mode));
            } else {
                b.dirent(parent, name, 0, 0);
                pimgs[si].size = pimgs[si].size.saturating_sub(32);
            }
            match &d {
                Some(d) => {
                    // The replaced inode loses a name (a replaced directory is empty).
                    let mut vimg = d.img;
                    vimg.ctime = t;
                    if d.is_dir() {
                        vimg.nlink = 0;
                        pimgs[di].nlink -= 1;
                    } else {
                        vimg.nlink -= 1;
                    }
                    if vimg.nlink == 0 && d.lookups == 0 && d.opens == 0 {
                        b.free_inode(vimg.ino);
                    } else {
                        b.inode(&vimg, false);
                    }
                }
                None => pimgs[di].size += 32,
            }
            b.dirent(newparent, newname, src, dtype_of_mode(simg.mode));
            if s_dir && !same {
                simg.parent = newparent;
                pimgs[si].nlink -= 1;
                pimgs[di].nlink += 1;
            }
            b.inode(&simg, false);
        }
        for p in &pimgs {
            b.inode(p, false);
        }
        if let Err(e) = inner.commit(&b, 1) {
            if let Some(ino) = whiteout {
                inner.view.inos.release(ino);
            }
            return Err(e);
        }
        self.kick(&inner);
        Ok(())
    }

    pub fn open(&self, cred: &Cred, ino: Ino, flags: i32) -> FsResult<u64> {
        let mut inner = self.wlock();
        let n = inner.node(ino)?;
        let mask = perm::open_mask(flags);
        if n.is_dir() && mask & W_OK != 0 {
            return Err(FsError::IsDir);
        }
        if !perm::may(cred, &n.img, mask) {
            return Err(FsError::Access);
        }
        if flags & libc::O_TRUNC != 0 && n.kind_bits() == libc::S_IFREG && n.img.size > 0 {
            let mut img = n.img;
            let mut b = EntryBuilder::new();
            inner.truncate_records(&mut b, &mut img, 0);
            let t = now();
            img.mtime = t;
            img.ctime = t;
            img.mode = perm::killpriv(cred, img.mode);
            b.inode(&img, false);
            inner.commit(&b, 0)?;
        }
        if let Some(n) = inner.view.node_mut(ino) {
            n.opens += 1;
        }
        Ok(self.next_fh.fetch_add(1, Ordering::Relaxed))
    }

    pub fn release(&self, ino: Ino, _fh: u64) {
        let mut inner = self.wlock();
        if let Some(n) = inner.view.node_mut(ino) {
            n.opens = n.opens.saturating_sub(1);
        }
        if let Err(e) = inner.maybe_free(ino) {
            tracing::warn!(ino, error = %e, "could not free orphan inode now; it is freed at next mount");
        }
    }

    pub fn read(&self, ino: Ino, off: u64, size: u32) -> FsResult<Vec<u8>> {
        self.rlock().read_data(ino, off, size)
    }

    pub fn write(&self, cred: &Cred, ino: Ino, off: u64, data: &[u8]) -> FsResult<u32> {
        let mut inner = self.wlock();
        let n = inner.write_data(cred, ino, off, data)?;
        self.kick(&inner);
        Ok(n)
    }

    /// Every update is durable in the log when its call returns, so fsync has nothing left
    /// to persist in the host-only mode; it checks the inode exists.
    pub fn fsync(&self, ino: Ino, _datasync: bool) -> FsResult<()> {
        self.rlock().node(ino).map(|_| ())
    }

    /// Publish everything that is in the log.
    pub fn sync_all(&self) -> FsResult<()> {
        self.wlock().publish_all()
    }

    pub fn opendir(&self, cred: &Cred, ino: Ino, _flags: i32) -> FsResult<u64> {
        let limit = {
            let inner = self.rlock();
            let n = inner.dir(ino)?;
            if !perm::may(cred, &n.img, R_OK) {
                return Err(FsError::Access);
            }
            n.dir.as_ref().expect("dir").next_cookie()
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dir_streams.lock().insert(fh, limit);
        Ok(fh)
    }

    /// All entries after `offset` (a cookie), as they are now.
    pub fn readdir(&self, ino: Ino, offset: u64) -> FsResult<Vec<DirEntry>> {
        self.readdir_upto(ino, offset, u64::MAX)
    }

    /// readdir through the stream `fh` of [`Fs::opendir`]: entries added after the stream
    /// was opened (or rewound, `offset` 0) are not returned. Otherwise a program that
    /// renames each entry it reads (away and back, as generic/736 does) meets it again at
    /// the end of the directory, forever.
    pub fn readdir_stream(&self, ino: Ino, fh: u64, offset: u64) -> FsResult<Vec<DirEntry>> {
        // Lock order: `dir_streams` is never held while waiting for the view's lock, nor the
        // other way round. Holding both in opposite orders here and in opendir deadlocked
        // the mount as soon as a writer queued for the view between them (xfstests 631).
        let limit = if offset == 0 {
            let now = self.rlock().dir(ino)?.dir.as_ref().expect("dir").next_cookie();
            self.dir_streams.lock().insert(fh, now);
            now
        } else {
            self.dir_streams.lock().get(&fh).copied().unwrap_or(u64::MAX)
        };
        self.readdir_upto(ino, offset, limit)
    }

    fn readdir_upto(&self, ino: Ino, offset: u64, limit: u64) -> FsResult<Vec<DirEntry>> {
        let inner = self.rlock();
        let n = inner.dir(ino)?;
        let d = n.dir.as_ref().expect("dir");
        let mut out = Vec::new();
        if offset < 1 {
            out.push(DirEntry { ino, offset: 1, kind: FileKind::Dir, name: b".".to_vec() });
        }
        if offset < 2 {
            out.push(DirEntry {
                ino: n.img.parent.max(ROOT_INO),
                offset: 2,
                kind: FileKind::Dir,
                name: b"..".to_vec(),
            });
        }
        let from = offset.max(FIRST_COOKIE - 1) + 1;
        for (&c, name) in d.order.range(from..limit.max(from)) {
            let (child, _) = d.get(name).expect("indexed");
            let kind = inner.view.node(child).map(|c| kind_of(c.img.mode)).unwrap_or(FileKind::File);
            out.push(DirEntry { ino: child, offset: c, kind, name: name.clone() });
        }
        Ok(out)
    }

    pub fn releasedir(&self, _ino: Ino, fh: u64) {
        self.dir_streams.lock().remove(&fh);
    }

    pub fn statfs(&self) -> StatFs {
        let inner = self.rlock();
        let bfree = data_capacity(inner.space_available());
        StatFs {
            blocks: inner.core.geo.data_blocks,
            bfree,
            bavail: bfree,
            files: inner.core.geo.inode_count - 1,
            ffree: inner.view.inos.free(),
            bsize: BLOCK_SIZE as u32,
            namelen: NAME_MAX as u32,
            frsize: BLOCK_SIZE as u32,
        }
    }

    pub fn access(&self, cred: &Cred, ino: Ino, mask: u32) -> FsResult<()> {
        let inner = self.rlock();
        let n = inner.node(ino)?;
        if mask != 0 && !perm::may(cred, &n.img, mask & 7) {
            return Err(FsError::Access);
        }
        Ok(())
    }

    fn xattr_check(cred: &Cred, n: &Node, name: &[u8], op: XattrOp) -> FsResult<()> {
        let write = op != XattrOp::Read;
        if name.is_empty() {
            return Err(FsError::Invalid("empty attribute name"));
        }
        if name.len() > 255 {
            return Err(FsError::Range);
        }
        if name.starts_with(b"user.") {
            let k = n.kind_bits();
            if k != libc::S_IFREG && k != libc::S_IFDIR {
                return Err(if write { FsError::Perm } else { FsError::NoAttr });
            }
            let mask = if write { W_OK } else { R_OK };
            if !perm::may(cred, &n.img, mask) {
                return Err(FsError::Access);
            }
        } else if name.starts_with(b"trusted.") {
            if cred.uid != 0 {
                return Err(if write { FsError::Perm } else { FsError::NoAttr });
            }
        } else if name.starts_with(b"security.") {
            // Removing file capabilities is what every write does (Linux's file_remove_privs,
            // which the kernel performs as the writer, through a removexattr, before it sends
            // a write or fallocate to a FUSE file system): whoever may write the file may
            // remove them.
            let killpriv = op == XattrOp::Remove && name == XATTR_CAPS && perm::may(cred, &n.img, W_OK);
            if write && cred.uid != 0 && !perm::owner_or_root(cred, &n.img) && !killpriv {
                return Err(FsError::Perm);
            }
        } else {
            return Err(FsError::NotSupported("attribute namespace"));
        }
        Ok(())
    }

    pub fn setxattr(&self, cred: &Cred, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> FsResult<()> {
        let mut inner = self.wlock();
        let n = inner.node(ino)?;
        Fs::xattr_check(cred, n, name, XattrOp::Set)?;
        if value.len() > XATTR_VALUE_MAX {
            return Err(FsError::AttrTooBig);
        }
        let exists = n.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return Err(FsError::Exists);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(FsError::NoAttr);
        }
        let mut attrs = n.xattrs.clone();
        attrs.insert(name.to_vec(), value.to_vec());
        let len = xattrs_len(attrs.iter().map(|(k, v)| (&k[..], &v[..])));
        if len > XATTR_SPACE {
            return Err(FsError::NoSpace("extended attributes exceed 254 KiB per inode"));
        }
        let mut img = n.img;
        img.ctime = now();
        let mut b = EntryBuilder::new();
        b.xattrs(ino, attrs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        b.inode(&img, false);
        // Publication writes the whole chain; blocks it reuses are counted too (an upper bound,
        // like every reservation), so that a full file system refuses the call here rather
        // than leaving publication without space for an acknowledged entry.
        inner.commit(&b, xattr_chain_blocks(len))?;
        Ok(())
    }

    pub fn getxattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        let inner = self.rlock();
        let n = inner.node(ino)?;
        Fs::xattr_check(cred, n, name, XattrOp::Read)?;
        n.xattrs.get(name).cloned().ok_or(FsError::NoAttr)
    }

    pub fn listxattr(&self, cred: &Cred, ino: Ino) -> FsResult<Vec<u8>> {
        let inner = self.rlock();
        let n = inner.node(ino)?;
        let mut out = Vec::new();
        for k in n.xattrs.keys() {
            if k.starts_with(b"trusted.") && cred.uid != 0 {
                continue;
            }
            out.extend_from_slice(k);
            out.push(0);
        }
        Ok(out)
    }

    pub fn removexattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> FsResult<()> {
        let mut inner = self.wlock();
        let n = inner.node(ino)?;
        Fs::xattr_check(cred, n, name, XattrOp::Remove)?;
        if !n.xattrs.contains_key(name) {
            return Err(FsError::NoAttr);
        }
        let mut attrs = n.xattrs.clone();
        attrs.remove(name);
        let mut img = n.img;
        img.ctime = now();
        let mut b = EntryBuilder::new();
        b.xattrs(ino, attrs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        b.inode(&img, false);
        inner.commit(&b, 0)?;
        Ok(())
    }

    /// fallocate through an open handle: the open checked write permission.
    pub fn fallocate(&self, cred: &Cred, ino: Ino, off: u64, len: u64, mode: i32) -> FsResult<()> {
        if len == 0 {
            return Err(FsError::Invalid("fallocate of zero bytes"));
        }
        let end = off.checked_add(len).ok_or(FsError::TooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(FsError::TooBig);
        }
        let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & FALLOC_FL_ZERO_RANGE != 0;
        if mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
            return Err(FsError::NotSupported("fallocate mode"));
        }
        if punch && (!keep || zero) {
            return Err(FsError::NotSupported("PUNCH_HOLE needs KEEP_SIZE alone"));
        }
        let mut inner = self.wlock();
        let n = inner.node(ino)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        if n.kind_bits() != libc::S_IFREG {
            return Err(FsError::Invalid("fallocate of a special file"));
        }
        let mut img = n.img;
        // Like a write, fallocate by someone other than root drops setuid/setgid (Linux's
        // file_modified).
        img.mode = perm::killpriv(cred, img.mode);
        let t = now();
        let mut b = EntryBuilder::new();
        let mut est = 0;
        if punch || zero {
            // Only what lies inside the file needs zeroing.
            let pend = end.min(img.size);
            if off < pend {
                b.punch(ino, off, pend - off);
            }
            img.mtime = t;
            img.ctime = t;
        }
        if !punch {
            est = inner.estimate_blocks(ino, off, len)?;
            b.alloc(ino, off, len);
            if !keep && end > img.size {
                img.size = end;
                img.ctime = t;
                if zero {
                    img.mtime = t;
                }
            }
        }
        b.inode(&img, false);
        inner.commit(&b, est)?;
        self.kick(&inner);
        Ok(())
    }

    /// SEEK_DATA / SEEK_HOLE: linefs reports the whole file as data (allowed by POSIX).
    pub fn lseek(&self, ino: Ino, off: u64, whence: i32) -> FsResult<u64> {
        let inner = self.rlock();
        let size = inner.node(ino)?.img.size;
        match whence {
            libc::SEEK_DATA if off < size => Ok(off),
            libc::SEEK_HOLE if off < size => Ok(size),
            libc::SEEK_DATA | libc::SEEK_HOLE => Err(FsError::NoData),
            _ => Err(FsError::Invalid("lseek whence")),
        }
    }

    pub fn status(&self) -> FsStatus {
        let inner = self.rlock();
        let core = &self.shared.core;
        let pb = core.public.read();
        let region = &core.region;
        FsStatus {
            pm_path: self.pm_path.clone(),
            pm_size: region.len(),
            backing: region.backing().to_string(),
            persist_method: region.persist_method().to_string(),
            client: self.client,
            log_capacity: core.log.ring_bytes(),
            log_used: inner.tail - inner.reclaimed,
            unpublished_entries: core.pending.lock().iter().filter(|p| p.loc.end > pb.published).count() as u64,
            published_lsn: pb.published,
            tail_lsn: inner.tail,
            data_blocks: core.geo.data_blocks,
            free_blocks: pb.area.free_blocks(),
            inodes: core.geo.inode_count - 1,
            free_inodes: inner.view.inos.free(),
            entries_appended: inner.appended,
            entries_published: pb.entries,
            publish_batches: pb.batches,
            recovered_entries: inner.recovered,
            publish_error: pb.failed.clone(),
        }
    }

    /// The PM backing and persist method (for benchmarks and status).
    pub fn pm_info(&self) -> (Backing, PersistMethod) {
        let region = &self.shared.core.region;
        (region.backing(), region.persist_method())
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "shutdown failed; the log is intact and recovery replays it");
        }
    }
}

fn rand_u128() -> u128 {
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    u128::from_le_bytes(b) ^ t ^ (std::process::id() as u128) << 64
}
