//! The publication state a client shares with its publisher: its log slot, the public area
//! with the durable checkpoint, the queue of entries waiting for publication, and the
//! publisher's wake-up. Publishing itself is pm's ([`linefs_pm::publish::publish_slot`]);
//! [`Publication::publish_batch`] calls it under this client's locks.

use crate::error::{FsError, FsResult};
use linefs_pm::layout::Geometry;
use linefs_pm::oplog::LogSlot;
use linefs_pm::public::PublicArea;
use linefs_pm::publish::{publish_slot, Bounds, Published, SlotError};
use linefs_pm::PmRegion;
use parking_lot::{Condvar, Mutex, RwLock};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A durable entry not yet caught up with: where it ends and the data blocks reserved for
/// its publication.
pub(crate) struct Pending {
    pub(crate) end: u64,
    pub(crate) est_blocks: u64,
}

/// The public area as this client's publisher keeps it.
pub(crate) struct PublicState {
    pub(crate) area: PublicArea,
    /// Everything before this LSN is published, durably.
    pub(crate) published: u64,
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
    /// One publisher at a time (the background thread, or an update that needs space).
    publish: Mutex<()>,
    pub(crate) public: RwLock<PublicState>,
    /// Durable entries not yet caught up with (in log order).
    pub(crate) pending: Mutex<VecDeque<Pending>>,
    /// Free data blocks of the public area, pending frees included (kept outside the
    /// public lock so that updates can check space while a batch is being published).
    pub(crate) free_blocks: AtomicU64,
    /// Set when publication failed (mirrors `PublicState::failed`, readable without a lock).
    failed: AtomicBool,
}

impl Publication {
    pub(crate) fn new(
        public_region: Arc<PmRegion>,
        geo: Geometry,
        log: LogSlot,
        area: PublicArea,
        published: u64,
    ) -> Self {
        let free = area.free_blocks() + area.pending_free_blocks();
        Publication {
            public_region,
            geo,
            log,
            publish: Mutex::new(()),
            public: RwLock::new(PublicState {
                area,
                published,
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

    /// Publish committed entries — at least one, up to about `budget` bytes of log — and
    /// durably advance the checkpoint. Returns the new checkpoint. The view is not touched:
    /// the front end catches up under its own lock.
    pub(crate) fn publish_batch(&self, budget: u64) -> FsResult<u64> {
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
        let result = publish_slot(&mut ps.area, &self.log, Bounds { until, max_bytes: budget });
        let done = match &result {
            Ok(p) | Err(SlotError::Rejected { published: p, .. }) => Some(p.clone()),
            Err(_) => None,
        };
        if let Some(Published { upto, entries, touched, .. }) = done {
            ps.published = upto;
            ps.entries += entries;
            ps.batches += u64::from(entries > 0);
            ps.touched.extend(touched);
        }
        self.free_blocks.store(ps.area.free_blocks() + ps.area.pending_free_blocks(), Ordering::Release);
        if let Err(e) = result {
            // The log stays intact; updates are refused from now on (see `commit`).
            let why = e.to_string();
            ps.failed = Some(why.clone());
            self.failed.store(true, Ordering::Release);
            return Err(FsError::PublicationFailed(why));
        }
        Ok(ps.published)
    }

    /// Whether publication has failed (then updates are refused; the log stays intact).
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }
}

/// Wakes the publisher thread: a chunk is waiting (`kick`) or the client stops.
pub(crate) struct Wakeup {
    pub(crate) flags: Mutex<WakeFlags>,
    pub(crate) cond: Condvar,
}

pub(crate) struct WakeFlags {
    pub(crate) kick: bool,
    pub(crate) stop: bool,
}

impl Wakeup {
    pub(crate) fn new() -> Wakeup {
        Wakeup { flags: Mutex::new(WakeFlags { kick: false, stop: false }), cond: Condvar::new() }
    }

    pub(crate) fn kick(&self) {
        self.flags.lock().kick = true;
        self.cond.notify_one();
    }

    pub(crate) fn stop(&self) {
        self.flags.lock().stop = true;
        self.cond.notify_all();
    }
}
