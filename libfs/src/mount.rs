//! Mounting a client and shutting it down.
//!
//! In the host-only mode the client owns the node's PM (an exclusive `flock` of its public
//! file): mount runs pm's node recovery ([`linefs_pm::recovery::recover`]: every log slot
//! re-published, orphans freed, torn structures checked), builds the DRAM view from the
//! recovered public area and starts the publisher thread.
//!
//! In the offload mode ([`FsOptions::nicfs`]) nicfs owns the node and has recovered it; the
//! client attaches ([`crate::remote`]), maps the log file it is handed read-write and the
//! public file read-only, builds its view from the public file, and starts the reader
//! threads and its publisher thread (which here only tells nicfs and follows it).
//!
//! Shutdown publishes everything, frees this client's orphans, stops the thread and, in the
//! offload mode, detaches.

use crate::api::ROOT_INO;
use crate::error::{FsError, FsResult};
use crate::link::host::HostLink;
use crate::link::{Link, Session};
use crate::options::FsOptions;
use crate::publication::Publication;
use crate::remote::Remote;
use crate::state::{Client, Front, Fs};
use crate::view::{Node, View};
use crate::wakeup::Wakeup;
use linefs_pm::layout::{Geometry, Superblock};
use linefs_pm::node::NodePm;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::{Loaded, PublicReader};
use linefs_pm::record::Record;
use linefs_pm::recovery::recover;
use linefs_pm::PmRegion;
use linefs_proto::Role;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

impl Fs {
    /// Open a node's PM (the directory `opts.pm_path`): recover (re-publish the committed
    /// logs), then serve.
    pub fn mount(opts: FsOptions) -> FsResult<Fs> {
        if let Some(socket) = opts.nicfs.clone() {
            return Fs::attach(&socket, opts);
        }
        // One client per node in the host-only mode: it publishes and recovers the node, so
        // it takes the node's lock, as nicfs does (pm's `node::LOCK_FILE`).
        let lock = linefs_pm::node::lock_node(&opts.pm_path).map_err(|e| FsError::Io {
            what: format!("lock {}", opts.pm_path.join(linefs_pm::node::LOCK_FILE).display()),
            source: e,
        })?;
        let Some(file) = lock else { return Err(FsError::Busy(opts.pm_path.display().to_string())) };
        let node = NodePm::open(&opts.pm_path)?;
        let mut fs = Fs::mount_node(node, opts)?;
        fs._lock = Some(file);
        Ok(fs)
    }

    /// Open a node packed in one region that is already mapped (tests: traced regions and
    /// crash images).
    pub fn mount_region(region: Arc<PmRegion>, opts: FsOptions) -> FsResult<Fs> {
        Fs::mount_node(NodePm::packed(region)?, opts)
    }

    /// Open a node whose files are mapped.
    pub fn mount_node(node: NodePm, opts: FsOptions) -> FsResult<Fs> {
        let rec = recover(&node)?;
        let geo = rec.geometry;
        let Some(mine) = rec.slots.iter().find(|s| s.slot == opts.client) else {
            return Err(FsError::Invalid("client number beyond the log slots"));
        };
        let published = mine.published;
        let recovered = rec.replayed();
        let (view, max_gen) = build_view(&rec.loaded, &geo)?;
        let log = LogSlot::new(node.logs[opts.client as usize].clone(), &geo, opts.client);
        let mut publication = Publication::local(node.public.clone(), geo, log, rec.area, published);
        publication.nicfs_steps = opts.nicfs_steps;
        let publication = Arc::new(publication);
        let link: Link = Arc::new(HostLink::new(publication.clone()));
        tracing::info!(recovered, published, orphans = rec.orphans_freed, "linefs client ready");
        let pm_path = node.dir().map(|p| p.display().to_string()).unwrap_or_else(|| "(memory)".into());
        let started = Started { publication, link, background: crate::publisher::run };
        Fs::start(started, view, max_gen, recovered, pm_path, opts)
    }

    /// Offload: attach to the nicfs at `socket`, which publishes for this client.
    fn attach(socket: &Path, opts: FsOptions) -> FsResult<Fs> {
        Fs::attach_through(socket, opts, |link| link)
    }

    /// [`Fs::attach`], the calls going through the link `through` makes of nicfs's (tests
    /// put a fault link there).
    pub(crate) fn attach_through(socket: &Path, opts: FsOptions, through: impl FnOnce(Link) -> Link) -> FsResult<Fs> {
        let role = if opts.mount_daemon { Role::MountDaemon } else { Role::DirectApi };
        let (remote, files) = Remote::attach(socket, role)?;
        let a = remote.attached;
        let public = Arc::new(PmRegion::from_file(File::from(files.public), Path::new("nicfs's public file"), false)?);
        let log = Arc::new(PmRegion::from_file(File::from(files.log), Path::new("nicfs's log file"), true)?);
        let pm_path = format!("{} (through nicfs at {})", opts.pm_path.display(), socket.display());
        let session = Session { public, log, slot: a.slot, ring_bytes: a.log.ring_bytes, start_lsn: a.log.start_lsn };
        let opts = FsOptions { chunk_size: a.log.chunk_bytes, ..opts };
        remote.set_fsync_asks(opts.replicated);
        let fs = Fs::offload(session, through(remote.clone()), pm_path, opts)?;
        remote.start(fs.client.wakeup.clone())?;
        tracing::info!(
            session = a.session,
            slot = a.slot,
            published = a.log.start_lsn,
            "linefs client attached to nicfs"
        );
        Ok(fs)
    }

    /// A client of a node that publishes, reached through `link` (offload): `session` is
    /// what the node handed it (its log slot's file, the public file).
    pub(crate) fn offload(session: Session, link: Link, pm_path: String, opts: FsOptions) -> FsResult<Fs> {
        let geo = Superblock::read(&session.public)?.geometry;
        let log = LogSlot::new(session.log, &geo, session.slot);
        if log.ring_bytes() != session.ring_bytes {
            return Err(FsError::Invalid("the node's log geometry does not match its log file"));
        }
        let reader = PublicReader::shared(session.public.clone(), geo);
        let (view, max_gen) = build_view(&reader.load()?, &geo)?;
        let publication = Arc::new(Publication::offload(session.public, geo, log, reader, session.start_lsn));
        let opts = FsOptions { client: session.slot, ..opts };
        let started = Started { publication, link, background: crate::publisher::run_remote };
        Fs::start(started, view, max_gen, 0, pm_path, opts)
    }

    /// Builds the client around its publication state and its link, and starts its
    /// publisher thread.
    fn start(
        Started { publication, link, background }: Started,
        view: View,
        max_gen: u32,
        recovered: u64,
        pm_path: String,
        opts: FsOptions,
    ) -> FsResult<Fs> {
        let published = publication.public.read().published;
        let front = Front {
            publication: publication.clone(),
            link: link.clone(),
            view,
            tail: published,
            reclaimed: published,
            reserved: 0,
            chunk_size: opts.chunk_size.max(64 << 10),
            next_generation: max_gen,
            appended: 0,
            recovered,
            shut: false,
        };
        let client = Arc::new(Client { front: RwLock::new(front), publication, link, wakeup: Arc::new(Wakeup::new()) });
        let publisher = if opts.background_publish {
            let c = client.clone();
            let interval = opts.publish_interval;
            Some(
                std::thread::Builder::new()
                    .name("linefs-publish".into())
                    .spawn(move || background(c, interval))
                    .map_err(|e| FsError::Io { what: "start publisher".into(), source: e })?,
            )
        } else {
            None
        };
        Ok(Fs {
            client,
            publisher: Mutex::new(publisher),
            next_fh: AtomicU64::new(1),
            dir_streams: Mutex::new(HashMap::new()),
            pm_path,
            slot: opts.client,
            _lock: None,
        })
    }

    /// Publish everything, free orphans, stop the publisher. Idempotent; also run on drop.
    pub fn shutdown(&self) -> FsResult<()> {
        self.client.wakeup.stop();
        if let Some(h) = self.publisher.lock().take() {
            let _ = h.join();
        }
        let orphans: Vec<u64> = {
            let front = self.rlock();
            if front.shut {
                return Ok(());
            }
            front.view.nodes.values().filter(|n| n.img.nlink == 0 && n.img.ino != ROOT_INO).map(|n| n.img.ino).collect()
        };
        for ino in orphans {
            // Offload: freeing it needs its write lease.
            let _l = self.orphan_lease(ino);
            let mut front = self.wlock();
            if let Some(n) = front.view.node_mut(ino) {
                n.lookups = 0;
                n.opens = 0;
            }
            front.maybe_free(ino)?;
        }
        let mut front = self.wlock();
        if front.shut {
            return Ok(());
        }
        let published = front.publish_all();
        front.shut = true;
        drop(front);
        // Whether or not the last publication went through, nicfs settles the slot.
        self.client.link.detach();
        published
    }
}

/// A client's publication state, its link to the node, and the loop of its publisher
/// thread (`crate::publisher`: the client's own publisher, or one that follows the node's).
struct Started {
    publication: Arc<Publication>,
    link: Link,
    background: fn(Arc<Client>, std::time::Duration),
}

/// The DRAM view of a loaded public area, and the highest inode generation in it.
fn build_view(loaded: &Loaded, geo: &Geometry) -> FsResult<(View, u32)> {
    let mut view = View::new(geo.inode_count);
    let mut max_gen = 1;
    for (ino, li) in &loaded.inodes {
        let mut n = Node::new(li.img);
        n.pub_blocks = crate::view::PubBlocks::known(li.blocks);
        n.xattrs = li.xattrs.iter().cloned().collect();
        view.inos.set(*ino);
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
    Ok((view, max_gen))
}

impl Drop for Fs {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "shutdown failed; the log is intact and recovery replays it");
        }
    }
}
