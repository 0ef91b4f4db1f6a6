//! Mounting a client and shutting it down.
//!
//! In the host-only mode the client owns the node's PM (an exclusive `flock` of its public
//! file): mount
//! runs pm's node recovery ([`linefs_pm::recovery::recover`]: every log slot re-published,
//! orphans freed, torn structures checked), builds the DRAM view from the recovered public
//! area and starts the publisher thread. Shutdown publishes everything, frees this client's
//! orphans and stops the thread.

use crate::api::ROOT_INO;
use crate::error::{FsError, FsResult};
use crate::options::FsOptions;
use crate::publication::{Publication, Wakeup};
use crate::state::{Client, Front, Fs};
use crate::view::{Node, View};
use linefs_pm::node::{NodePm, PUBLIC_FILE};
use linefs_pm::oplog::LogSlot;
use linefs_pm::record::Record;
use linefs_pm::recovery::recover;
use linefs_pm::PmRegion;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

impl Fs {
    /// Open a node's PM (the directory `opts.pm_path`): recover (re-publish the committed
    /// logs), then serve.
    pub fn mount(opts: FsOptions) -> FsResult<Fs> {
        let public = opts.pm_path.join(PUBLIC_FILE);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&public)
            .map_err(|e| FsError::Io { what: format!("open {}", public.display()), source: e })?;
        // One client per node in the host-only mode: it publishes and recovers the node.
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(FsError::Busy(opts.pm_path.display().to_string()));
        }
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
        let mut view = View::new(geo.inode_count);
        let mut max_gen = 1;
        for (ino, li) in &rec.loaded.inodes {
            let mut n = Node::new(li.img);
            n.pub_blocks = li.blocks;
            n.xattrs = li.xattrs.iter().cloned().collect();
            view.inos.set(*ino);
            max_gen = max_gen.max(li.img.generation);
            view.nodes.insert(*ino, n);
        }
        for (dir, ents) in &rec.loaded.dirs {
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
        let log = LogSlot::new(node.logs[opts.client as usize].clone(), &geo, opts.client);
        let publication = Arc::new(Publication::new(node.public.clone(), geo, log, rec.area, published));
        let front = Front {
            publication: publication.clone(),
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
        let client = Arc::new(Client { front: RwLock::new(front), publication, wakeup: Wakeup::new() });
        let publisher = if opts.background_publish {
            let c = client.clone();
            let interval = opts.publish_interval;
            Some(
                std::thread::Builder::new()
                    .name("linefs-publish".into())
                    .spawn(move || crate::publisher::run(c, interval))
                    .map_err(|e| FsError::Io { what: "start publisher".into(), source: e })?,
            )
        } else {
            None
        };
        tracing::info!(recovered, published, orphans = rec.orphans_freed, "linefs client ready");
        Ok(Fs {
            client,
            publisher: Mutex::new(publisher),
            next_fh: AtomicU64::new(1),
            dir_streams: Mutex::new(HashMap::new()),
            pm_path: node.dir().map(|p| p.display().to_string()).unwrap_or_else(|| "(memory)".into()),
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
        let mut front = self.wlock();
        if front.shut {
            return Ok(());
        }
        let orphans: Vec<u64> = front
            .view
            .nodes
            .values()
            .filter(|n| n.img.nlink == 0 && n.img.ino != ROOT_INO)
            .map(|n| n.img.ino)
            .collect();
        for ino in orphans {
            if let Some(n) = front.view.node_mut(ino) {
                n.lookups = 0;
                n.opens = 0;
            }
            front.maybe_free(ino)?;
        }
        front.publish_all()?;
        front.shut = true;
        Ok(())
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::error!(error = %e, "shutdown failed; the log is intact and recovery replays it");
        }
    }
}
