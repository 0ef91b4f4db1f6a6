//! The publication state a client shares with its publisher: its log slot, the public area
//! with the durable checkpoint, the queue of entries waiting for publication, and the
//! publisher's wake-up.
//!
//! Who publishes is the node link's to decide (`crate::link::NodeLink::publish`); this
//! module has what either way needs, and knows nothing of links:
//! * **the client publishes** (host-only, [`Publication::publish_local`]): it owns the node
//!   and publishes its own log with pm's [`publish_slot`] under its own locks;
//!   `PublicState::area` is the publisher's public area.
//! * **the node publishes** (offload, [`Publication::publish_by`], [`Publication::follow`]):
//!   the client maps the public file read-only (`PublicState::reader`), tells the node how
//!   far its log is committed, and follows what it reports (`Published` notices,
//!   `FsyncDone`). Its space comes from the node too: `free_blocks` is then the credit of
//!   blocks the node reserved for it.

use crate::error::{FsError, FsResult};
use linefs_pm::coalesce;
use linefs_pm::layout::Geometry;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::{execute_moves, Collector, Move, PublicArea, PublicReader};
use linefs_pm::publish::{publish_batch, publish_slot, Batch, Bounds, Published, SlotError};
use linefs_pm::PmRegion;
use parking_lot::{Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A durable entry not yet caught up with: where it ends and the data blocks reserved for
/// its publication.
pub(crate) struct Pending {
    pub(crate) end: u64,
    pub(crate) est_blocks: u64,
}

/// What a node that publishes has said about publication (its link's reader threads
/// collect it; [`Publication::follow`] takes it in).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The public area holds the log up to here.
    pub(crate) published: u64,
    /// The log before this may be reused.
    pub(crate) reclaim: u64,
    /// Inodes publication changed since the front end last caught up.
    pub(crate) touched: Vec<u64>,
    /// Publication changed more inodes than a notice lists.
    pub(crate) touched_all: bool,
    /// Why the client cannot publish any more (an entry refused, nicfs gone).
    pub(crate) failed: Option<String>,
}

/// How this client maps the public area: as its publisher, or read-only.
// One per client: the size difference costs nothing, a box would cost an indirection.
#[allow(clippy::large_enum_variant)]
enum PublicMap {
    /// The publisher's public area (host-only mode).
    Own(PublicArea),
    /// A read-only view of the public file (offload mode).
    Shared(PublicReader),
}

/// The public area as this client sees it.
pub(crate) struct PublicState {
    map: PublicMap,
    /// Everything before this LSN is published, durably.
    pub(crate) published: u64,
    /// Log space before this LSN may be reused: published and replicated (the slot's
    /// reclaim LSN; nicfs's `reclaim_lsn` in the offload mode).
    pub(crate) reclaim: u64,
    /// Inodes changed by batches the front end has not caught up with yet.
    pub(crate) touched: Vec<u64>,
    pub(crate) failed: Option<String>,
    pub(crate) entries: u64,
    pub(crate) batches: u64,
}

/// What the front end and the publisher share: the client's log slot, the public area and
/// the queue of entries waiting for publication.
///
/// Lock order: `Client::front` → `publish` → `public`; `pending` is a leaf (held briefly,
/// nothing taken under it).
pub(crate) struct Publication {
    /// The node's public file (for what status reports about the PM).
    pub(crate) public_region: Arc<PmRegion>,
    pub(crate) geo: Geometry,
    pub(crate) log: LogSlot,
    /// Host-only: publish by nicfs's steps ([`crate::FsOptions::nicfs_steps`]).
    pub(crate) nicfs_steps: bool,
    /// One publisher at a time (the background thread, or an update that needs space).
    publish: Mutex<()>,
    pub(crate) public: RwLock<PublicState>,
    /// Durable entries not yet caught up with (in log order).
    pub(crate) pending: Mutex<VecDeque<Pending>>,
    /// Host-only: free data blocks of the public area, pending frees included (kept outside
    /// the public lock so that updates can check space while a batch is being published).
    /// Offload: the blocks nicfs has reserved for this client.
    pub(crate) free_blocks: AtomicU64,
    /// Set when this client's own publication failed (mirrors `PublicState::failed`,
    /// readable without a lock).
    failed: AtomicBool,
}

impl PublicState {
    /// The reader of published state (either mode).
    pub(crate) fn reader(&self) -> &PublicReader {
        match &self.map {
            PublicMap::Own(a) => a.reader(),
            PublicMap::Shared(r) => r,
        }
    }

    /// The public area, if this client publishes into it (host-only mode).
    pub(crate) fn area(&self) -> Option<&PublicArea> {
        match &self.map {
            PublicMap::Own(a) => Some(a),
            PublicMap::Shared(_) => None,
        }
    }

    /// Mapped data blocks of `ino` in the public area (0 if unreadable).
    pub(crate) fn file_blocks(&self, ino: u64) -> u64 {
        match &self.map {
            PublicMap::Own(a) => a.file_blocks(ino),
            PublicMap::Shared(r) => r.file_blocks(ino).unwrap_or(0),
        }
    }
}

impl Publication {
    /// Host-only: this client publishes into `area`.
    pub(crate) fn local(
        public_region: Arc<PmRegion>,
        geo: Geometry,
        log: LogSlot,
        area: PublicArea,
        published: u64,
    ) -> Self {
        let free = area.free_blocks() + area.pending_free_blocks();
        Publication::new(public_region, geo, log, PublicMap::Own(area), published, free)
    }

    /// Offload: the node publishes; the client reads the public file through `reader`.
    pub(crate) fn offload(
        public_region: Arc<PmRegion>,
        geo: Geometry,
        log: LogSlot,
        reader: PublicReader,
        published: u64,
    ) -> Self {
        Publication::new(public_region, geo, log, PublicMap::Shared(reader), published, 0)
    }

    fn new(
        public_region: Arc<PmRegion>,
        geo: Geometry,
        log: LogSlot,
        map: PublicMap,
        published: u64,
        free: u64,
    ) -> Self {
        Publication {
            public_region,
            geo,
            log,
            nicfs_steps: false,
            publish: Mutex::new(()),
            public: RwLock::new(PublicState {
                map,
                published,
                reclaim: published,
                touched: Vec::new(),
                failed: None,
                entries: 0,
                batches: 0,
            }),
            pending: Mutex::new(VecDeque::new()),
            free_blocks: AtomicU64::new(free),
            failed: AtomicBool::new(false),
        }
    }

    /// Host-only: publishes committed entries — at least one, up to about `budget` bytes
    /// of log — and durably advances the checkpoint. Returns the new checkpoint. The view
    /// is not touched: the front end catches up under its own lock.
    pub(crate) fn publish_local(&self, budget: u64) -> FsResult<u64> {
        let _one = self.publish.lock();
        // Entries up to the last one queued are durable; the log is scanned only that far.
        let Some(until) = self.pending.lock().back().map(|p| p.end) else {
            return Ok(self.public.read().published);
        };
        let mut ps = self.public.write();
        if let Some(e) = &ps.failed {
            return Err(FsError::PublicationFailed(e.clone()));
        }
        if ps.published >= until {
            return Ok(ps.published);
        }
        let PublicMap::Own(area) = &mut ps.map else {
            return Err(FsError::PublicationFailed("this client does not publish (offload mode)".into()));
        };
        let result = if self.nicfs_steps {
            publish_as_nicfs(area, &self.log, until, budget)
        } else {
            publish_slot(area, &self.log, Bounds { until, max_bytes: budget })
        };
        let done = match &result {
            Ok(p) | Err(SlotError::Rejected { published: p, .. }) => Some(p.clone()),
            Err(_) => None,
        };
        if let Some(Published { upto, entries, touched, .. }) = done {
            ps.published = upto;
            ps.reclaim = self.log.reclaim_lsn().unwrap_or(ps.reclaim).min(upto);
            ps.entries += entries;
            ps.batches += u64::from(entries > 0);
            ps.touched.extend(touched);
        }
        let free = ps.area().map_or(0, |a| a.free_blocks() + a.pending_free_blocks());
        self.free_blocks.store(free, Ordering::Release);
        if let Err(e) = result {
            // The log stays intact; updates are refused from now on (see `commit`).
            let why = e.to_string();
            ps.failed = Some(why.clone());
            self.failed.store(true, Ordering::Release);
            return Err(FsError::PublicationFailed(why));
        }
        Ok(ps.published)
    }

    /// The node publishes: waits until `fsync` (the node's) has published the log through
    /// the first committed entry that ends at or past `lsn` (all of it if none does), and
    /// lets the node carry on with the rest in the background — a full log frees its
    /// oldest part this way.
    pub(crate) fn publish_by(&self, lsn: u64, fsync: impl FnOnce(u64) -> FsResult<u64>) -> FsResult<u64> {
        let _one = self.publish.lock();
        let until = {
            let q = self.pending.lock();
            let i = q.partition_point(|p| p.end < lsn);
            q.get(i).or(q.back()).map(|p| p.end)
        };
        let Some(until) = until else { return Ok(self.public.read().published) };
        if self.public.read().published >= until {
            return Ok(self.public.read().published);
        }
        let durable = fsync(until)?;
        let mut ps = self.public.write();
        ps.published = ps.published.max(durable);
        // Durable: published and replicated, so reclaimable too.
        ps.reclaim = ps.reclaim.max(durable);
        ps.batches += 1;
        Ok(ps.published)
    }

    /// The node publishes: takes what it reported since the last call into the public
    /// state.
    pub(crate) fn follow(&self, progress: Progress) {
        let Progress { published, reclaim, touched, touched_all: all, .. } = progress;
        let mut ps = self.public.write();
        ps.published = ps.published.max(published);
        ps.reclaim = ps.reclaim.max(reclaim);
        ps.touched.extend(touched);
        if all {
            ps.touched.push(u64::MAX);
        }
    }

    /// Host-only: whether this client's own publication failed (then updates are refused;
    /// the log stays intact).
    pub(crate) fn failed_here(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Host-only: why this client's own publication failed, if it did.
    pub(crate) fn failure_here(&self) -> Option<String> {
        self.public.read().failed.clone()
    }
}

/// Publishes `log` up to `until` (at most about `budget` bytes) by nicfs's steps: copy the
/// committed entries out of the log, scan and decode the copy, coalesce it, and publish it
/// as one batch whose file data goes through a deferred copy list, executed from the log
/// file into the public file (persisted, fenced) as kworker executes one, before the
/// pointers to the blocks it filled are persisted.
fn publish_as_nicfs(area: &mut PublicArea, log: &LogSlot, until: u64, budget: u64) -> Result<Published, SlotError> {
    let slot = log.slot();
    let from = log.published_lsn().map_err(|source| SlotError::Log { slot, source })?;
    let (copy, _) = log.fetch(from, until, budget).map_err(|source| SlotError::Log { slot, source })?;
    let (batch, _) = Batch::from_copy(&copy);
    let plan = (!batch.entries.is_empty()).then(|| coalesce::plan(batch.entries.iter().map(|(_, r)| &r[..])));
    let (src, dst) = (log.region().clone(), area.region().clone());
    let mut mover = Collector::new(src.len(), |moves: &[Move]| execute_moves(moves, &src, &dst));
    publish_batch(area, log, &batch, plan.as_ref(), &mut mover)
}
