//! The state of a mounted client and the view lookups every call starts from.
//!
//! * [`Fs`], the handle callers hold, owns a [`Client`]: the front end under its
//!   reader-writer lock, the publication state shared with the publisher thread, and the
//!   publisher's wake-up.
//! * [`Front`] is the front end: the DRAM view of the file system and the log tail.
//!   Updates take it exclusively (check against the view, append to the log, apply to the
//!   view: [`Front::commit`]); reads, lookups and getattr share it.
//!
//! Locks, in the order they are taken: `Client::front` → `Publication::publish` →
//! `Publication::public` (a reader of published data holds it for reading, so a batch
//! never changes a block under a reader). Leaves, held briefly with nothing taken under
//! them: `Publication::pending`, `Fs::dir_streams`, the publisher's wake-up flags.

use crate::api::*;
use crate::error::{FsError, FsResult};
use crate::link::Link;
use crate::perm;
use crate::publication::Publication;
use crate::time::from_ts;
use crate::view::{Node, View};
use crate::wakeup::Wakeup;
use linefs_pm::layout::BLOCK_SIZE;
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;

/// The front end: the view and the log tail. Updates hold it exclusively, reads share it.
pub(crate) struct Front {
    pub(crate) publication: Arc<Publication>,
    /// The node (host-only: this client itself; offload: its nicfs).
    pub(crate) link: Link,
    pub(crate) view: View,
    /// Where the next entry is appended.
    pub(crate) tail: u64,
    /// Log space before this LSN may be overwritten: published, and no overlay of the view
    /// points into it any more.
    pub(crate) reclaimed: u64,
    /// Data blocks reserved for the publication of the entries not yet caught up with.
    pub(crate) reserved: u64,
    pub(crate) chunk_size: u64,
    pub(crate) next_generation: u32,
    pub(crate) appended: u64,
    pub(crate) recovered: u64,
    pub(crate) shut: bool,
}

/// Everything one mounted client holds, shared with its publisher thread.
pub(crate) struct Client {
    pub(crate) front: RwLock<Front>,
    pub(crate) publication: Arc<Publication>,
    pub(crate) link: Link,
    pub(crate) wakeup: Arc<Wakeup>,
}

/// A mounted linefs client. All methods take `&self`; it is `Send + Sync`.
pub struct Fs {
    pub(crate) client: Arc<Client>,
    pub(crate) publisher: Mutex<Option<JoinHandle<()>>>,
    pub(crate) next_fh: AtomicU64,
    /// Open directory streams: handle → the first cookie the stream does not return.
    pub(crate) dir_streams: Mutex<HashMap<u64, u64>>,
    pub(crate) pm_path: String,
    pub(crate) slot: u32,
    /// Keeps the advisory lock on the PM file (one mount per node for now).
    pub(crate) _lock: Option<std::fs::File>,
}

impl Front {
    pub(crate) fn node(&self, ino: Ino) -> FsResult<&Node> {
        self.view.node(ino).ok_or(FsError::NotFound)
    }

    pub(crate) fn dir(&self, ino: Ino) -> FsResult<&Node> {
        let n = self.node(ino)?;
        if !n.is_dir() {
            return Err(FsError::NotDir);
        }
        Ok(n)
    }

    /// A directory the caller may look names up in (search permission).
    pub(crate) fn searchable_dir(&self, cred: &Cred, ino: Ino) -> FsResult<&Node> {
        let d = self.dir(ino)?;
        if !perm::may(cred, &d.img, X_OK) {
            return Err(FsError::Access);
        }
        Ok(d)
    }

    /// The inode `name` in `dir` names, looked up as path resolution does (search
    /// permission first, then existence).
    pub(crate) fn child(&self, cred: &Cred, dir: Ino, name: &[u8]) -> FsResult<Ino> {
        let d = self.searchable_dir(cred, dir)?;
        d.dir.as_ref().expect("dir").get(name).map(|e| e.0).ok_or(FsError::NotFound)
    }

    /// A directory the caller may add entries to or remove entries from.
    pub(crate) fn writable_dir(&self, cred: &Cred, ino: Ino) -> FsResult<&Node> {
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
    pub(crate) fn mapped_blocks(&self, n: &Node) -> u64 {
        const EXACT_UP_TO: u64 = 256;
        let ranges = n.unpublished_blocks();
        let pending: u64 = ranges.iter().map(|(a, b)| b - a).sum();
        if n.fresh.is_some() {
            // Nothing of this file is public yet.
            return pending;
        }
        // The public state's lock only when something must be read (a host-only
        // publication holds it for writing while it publishes a batch).
        let pub_blocks = n.pub_blocks.get_or(|| self.publication.public.read().file_blocks(n.img.ino));
        if pending == 0 || pending > EXACT_UP_TO {
            return pub_blocks + pending;
        }
        let public = self.publication.public.read();
        let mut new = 0;
        for idx in ranges.iter().flat_map(|&(a, b)| a..b) {
            // An unreadable block map (corrupt PM) counts the block as new.
            if !public.reader().is_mapped(n.img.ino, idx).unwrap_or(false) {
                new += 1;
            }
        }
        pub_blocks + new
    }

    pub(crate) fn attr(&self, n: &Node) -> Attr {
        let img = &n.img;
        let blocks = match n.img.mode & libc::S_IFMT {
            libc::S_IFREG | libc::S_IFLNK | libc::S_IFDIR => self.mapped_blocks(n) * (BLOCK_SIZE / 512),
            _ => 0,
        };
        Attr {
            ino: img.ino,
            generation: img.generation,
            kind: FileKind::from_mode(img.mode).unwrap_or(FileKind::File),
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

    pub(crate) fn attr_of(&self, ino: Ino) -> FsResult<Attr> {
        Ok(self.attr(self.node(ino)?))
    }

    pub(crate) fn pending_bytes(&self) -> u64 {
        self.tail - self.reclaimed
    }
}

impl Fs {
    /// Offload: `observer` is told of every inode whose lease this client loses (another
    /// client will change it), before and after the hand-back ([`LeaseObserver`]); the FUSE
    /// adapter drops the kernel's caches of it. Nothing happens in the host-only mode, where
    /// nothing but this client changes the node.
    pub fn observe_leases(&self, observer: Arc<dyn LeaseObserver>) {
        let (c1, c2) = (Arc::downgrade(&self.client), Arc::downgrade(&self.client));
        let (o1, o2) = (observer.clone(), observer);
        self.client.link.set_observer(crate::link::Observer {
            before: Arc::new(move |ino| {
                // Without waiting: a call holding the front end's lock may itself wait.
                let dir = c1.upgrade().and_then(|c| {
                    let front = c.front.try_read()?;
                    Some(front.view.node(ino).is_some_and(|n| n.is_dir()))
                });
                o1.before_handback(&LostInode { ino, dir, names: Vec::new() });
            }),
            after: Arc::new(move |ino| {
                let (dir, names) = c2
                    .upgrade()
                    .and_then(|c| {
                        let front = c.front.read();
                        let n = front.view.node(ino)?;
                        let names = n.dir.as_ref().map(|d| d.names.keys().cloned().collect()).unwrap_or_default();
                        Some((Some(n.is_dir()), names))
                    })
                    .unwrap_or((None, Vec::new()));
                o2.after_handback(LostInode { ino, dir, names });
            }),
        });
    }

    /// Whether nicfs publishes for this client (offload) rather than the client itself:
    /// the node is shared, other clients may change it.
    pub fn offloaded(&self) -> bool {
        self.client.link.shared()
    }

    pub(crate) fn rlock(&self) -> RwLockReadGuard<'_, Front> {
        self.client.front.read()
    }

    pub(crate) fn wlock(&self) -> RwLockWriteGuard<'_, Front> {
        self.client.front.write()
    }

    /// Wake the publisher if a chunk is waiting.
    pub(crate) fn kick(&self, front: &Front) {
        if front.pending_bytes() >= front.chunk_size {
            self.client.wakeup.kick();
        }
    }
}
