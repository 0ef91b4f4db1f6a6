//! The node's log slots as nicfs holds them: each slot's log file and nicfs's mapping of
//! it, nicfs's own record of each slot's checkpoint, which slots sessions have claimed, and
//! the replacement of a slot's file before anyone else may claim the slot.
//!
//! **Claims.** A slot is *claimed* by an exclusive `flock` of its log file, taken on a
//! descriptor of nicfs's own and held for the session, so that nothing else that follows the
//! convention (a host-only mount of that slot, a second nicfs) can use it meanwhile. The
//! descriptors handed to the client are opened separately: a lock belongs to an open file
//! description, and a client sharing ours could unlock it.
//!
//! **A fresh file per session.** A client is handed a writable descriptor of its slot's log
//! file, and nicfs cannot take it back: once its session ends (it detached, was hung up,
//! failed on a refused entry, was fenced when its lease expired), the process — or a child
//! it forked, or a process it passed the descriptor to — can still write that file. So a
//! slot's file is never given to a second session. [`Slots::release`], called once the
//! session's log is *settled* (everything it committed published, or its refused suffix
//! dropped), puts a fresh file in its place with pm's `slotfile` — a new inode under
//! `log-NN.pm.new` holding the slot header over a ring of zeros, persisted, locked, then
//! renamed over `log-NN.pm` and the directory fsynced — swaps nicfs's mapping to it, and
//! only then marks the slot free. Every descriptor and mapping of the old file now reaches
//! an unlinked inode that nothing reads: not the next client (it is handed the new file),
//! not nicfs's fetches (they read the new mapping), not the copy lists (the copier's executor
//! looks the name up again), not recovery (it opens `log-NN.pm`). At start, after recovery,
//! every slot is replaced the same way, which cuts off the clients of an earlier nicfs that
//! outlived it. A slot whose replacement fails is *stale*: it is not claimed until a later
//! claim manages to replace it (logged both times).
//!
//! **The header comes from nicfs, not from the old file.** The fresh header's published
//! LSN is nicfs's own record of the slot's checkpoint — set by recovery (before anything
//! else runs), then by every publication and every dropped suffix under the public area's
//! mutex — not what the old file says: the old client could write its header until the
//! end, and must not choose where the next session starts. The replicated LSN is set to
//! the same value: a node has no replicas yet, so publication raises it with the
//! checkpoint and only the smaller of the two matters (replication will have to carry its
//! own LSN over, and replace a slot only once the replicas hold its log). The next
//! session's `start_lsn` and the scans that end a session (the fence, the dropped suffix)
//! start from the same record.
//!
//! **Locks across the replacement.** The fresh file is locked before it is renamed into
//! place — on a descriptor of its own: one sharing the mapping's open file description
//! would keep the lock as long as the mapping lives — and both the old file's lock and the
//! fresh one are dropped only under the claim table's mutex, after the slot is marked free:
//! at no moment does a claimed slot's file stand unlocked, and a claim never finds a free
//! slot still locked by its replacement.
//! nicfs's mapping is an `Arc` behind a lock, swapped whole: a reader that took the old one
//! finishes on it (none does once the session is settled: its fetches and publications are
//! all answered before it ends).
//!
//! **Resized files.** Every mapping of a log file is registered with the SIGBUS guard
//! ([`crate::node::sigbus`]) for as long as the mapping lives (a reader may finish on an old one
//! after a swap), and [`Slots::resized`] tells a fetch that the client resized its file —
//! its size is not the geometry's, or a read of the mapping faulted — so that the session
//! fails instead of nicfs.

use linefs_pm::layout::{FormatError, Geometry};
use linefs_pm::node::log_file_name;
use linefs_pm::oplog::LogSlot;
use linefs_pm::slotfile::{self, SlotLsns};
use linefs_pm::PmRegion;
use parking_lot::{Mutex, RwLock};
use rustix::fs::{flock, FlockOperation};
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// A claimed slot: released (lock dropped, file replaced, slot free again) by
/// [`Slots::release`].
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) slot: u32,
    lock: File,
}

/// Where a slot stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Claimed,
    /// Released, but its file could not be replaced: not claimed until it is.
    Stale,
}

/// A slot's log file as the start found it, and the checkpoint recovery left.
type Previous = (Arc<LogSlot>, u64);

/// One slot as nicfs holds it.
struct Slot {
    /// nicfs's mapping of the slot's log file, swapped when the file is replaced.
    log: RwLock<Arc<LogSlot>>,
    /// The SIGBUS guard of that mapping ([`crate::node::sigbus`]).
    guard: RwLock<Option<Arc<crate::node::sigbus::Guard>>>,
    /// nicfs's record of the slot's durable checkpoint (see the module notes).
    checkpoint: AtomicU64,
}

/// The node's log slots.
pub(crate) struct Slots {
    dir: PathBuf,
    geometry: Geometry,
    slots: Vec<Slot>,
    states: Mutex<Vec<State>>,
    /// Log files replaced since start (status).
    replaced: AtomicU64,
    /// Every guarded mapping that may still be accessed: a guard is dropped only once its
    /// mapping is gone (a reader may finish on an old mapping after a swap).
    guards: Mutex<Vec<(Weak<PmRegion>, Arc<crate::node::sigbus::Guard>)>>,
    /// Sessions found with their log file resized (status).
    resized_found: AtomicU64,
    /// Each slot's log file as the start found it (mapped; replaced since) with the
    /// checkpoint recovery left, until [`Slots::take_unreplicated`] takes it.
    previous: Mutex<Vec<Option<Previous>>>,
}

impl Slots {
    /// The slots of the node in `dir`, recovered: `regions` maps each slot's log file and
    /// `checkpoints` holds each checkpoint recovery left. Every slot's file is replaced at
    /// once (see the module notes).
    pub(crate) fn open(dir: &Path, geometry: Geometry, regions: Vec<Arc<PmRegion>>, checkpoints: &[u64]) -> Slots {
        let slots = regions
            .into_iter()
            .zip(checkpoints)
            .enumerate()
            .map(|(s, (region, &at))| Slot {
                log: RwLock::new(Arc::new(LogSlot::new(region, &geometry, s as u32))),
                guard: RwLock::new(None),
                checkpoint: AtomicU64::new(at),
            })
            .collect::<Vec<_>>();
        let slots = Slots {
            dir: dir.to_path_buf(),
            geometry,
            states: Mutex::new(vec![State::Free; slots.len()]),
            slots,
            replaced: AtomicU64::new(0),
            guards: Mutex::new(Vec::new()),
            resized_found: AtomicU64::new(0),
            previous: Mutex::new(Vec::new()),
        };
        for slot in 0..slots.slots.len() as u32 {
            slots.guard(slot);
        }
        // Kept mapped (and guarded) past their replacement: what a replicating node had
        // published but not yet replicated is read from there (take_unreplicated).
        *slots.previous.lock() =
            (0..slots.slots.len() as u32).map(|s| Some((slots.log(s), slots.checkpoint(s)))).collect();
        let mut states = slots.states.lock();
        for (slot, state) in states.iter_mut().enumerate() {
            if let Err(e) = slots.replace(slot as u32) {
                tracing::error!(slot, error = %e, "cannot replace the log file at start; the slot is out of use until it is");
                *state = State::Stale;
            }
        }
        drop(states);
        slots
    }

    /// Slot `slot`'s log file as the start found it (mapped, guarded; replaced since) and
    /// the checkpoint recovery left; taken once. The replication driver reads from it what
    /// this node had published but its replicas may not hold yet (see docs, "Replication
    /// in nicfs", Start): the file's header cannot tell how far that is (a publication
    /// raises its replicated LSN with the published one), the replicas' acks do.
    pub(crate) fn take_previous(&self, slot: u32) -> Option<(Arc<LogSlot>, u64)> {
        self.previous.lock().get_mut(slot as usize)?.take()
    }

    /// Slot `slot`'s log as nicfs maps it now.
    pub(crate) fn log(&self, slot: u32) -> Arc<LogSlot> {
        self.slots[slot as usize].log.read().clone()
    }

    /// Guards slot `slot`'s mapping now against SIGBUS ([`crate::node::sigbus`]), and lets go of
    /// the guards of mappings that are gone.
    fn guard(&self, slot: u32) {
        let region = self.log(slot).region().clone();
        let mut guards = self.guards.lock();
        guards.retain(|(r, _)| r.strong_count() > 0);
        let guard = region.mapped_range().and_then(|(start, len)| crate::node::sigbus::register(start, len));
        if let Some(g) = &guard {
            guards.push((Arc::downgrade(&region), g.clone()));
        }
        *self.slots[slot as usize].guard.write() = guard;
    }

    /// Why slot `slot`'s log file cannot be read as its log, if it cannot: its client
    /// resized it (its size is not the geometry's, or a read of nicfs's mapping faulted).
    pub(crate) fn resized(&self, slot: u32) -> Option<String> {
        let hits = self.slots[slot as usize].guard.read().as_ref().map_or(0, |g| g.hits());
        let why = if hits > 0 {
            format!("the client shrank its log file under nicfs's mapping ({hits} pages faulted)")
        } else {
            let want = self.geometry.log_size();
            match std::fs::metadata(self.log_path(slot)) {
                Ok(m) if m.len() == want => return None,
                Ok(m) => format!("the client resized its log file to {} bytes ({want} expected)", m.len()),
                Err(e) => format!("cannot stat the log file: {e}"),
            }
        };
        self.resized_found.fetch_add(1, Ordering::Relaxed);
        Some(why)
    }

    /// Times a resized log file was found since start.
    pub(crate) fn resized_found(&self) -> u64 {
        self.resized_found.load(Ordering::Relaxed)
    }

    /// nicfs's record of `slot`'s durable checkpoint.
    pub(crate) fn checkpoint(&self, slot: u32) -> u64 {
        self.slots[slot as usize].checkpoint.load(Ordering::Acquire)
    }

    /// Records that `slot`'s durable checkpoint is now `lsn` (under the area's mutex).
    pub(crate) fn set_checkpoint(&self, slot: u32, lsn: u64) {
        self.slots[slot as usize].checkpoint.store(lsn, Ordering::Release);
    }

    /// Log files replaced since start.
    pub(crate) fn replaced(&self) -> u64 {
        self.replaced.load(Ordering::Relaxed)
    }

    fn log_path(&self, slot: u32) -> PathBuf {
        self.dir.join(log_file_name(slot))
    }

    /// Claims a free slot (the lowest), or None when every slot is held. A stale slot is
    /// replaced first, or skipped.
    #[cfg(test)]
    pub(crate) fn claim(&self) -> Option<Claim> {
        self.claim_keeping(0)
    }

    /// `Slots::claim`, but only while more than `keep_free` slots are not claimed (the
    /// slots kept for root: [`crate::limits`]).
    pub(crate) fn claim_keeping(&self, keep_free: usize) -> Option<Claim> {
        let mut states = self.states.lock();
        if states.iter().filter(|s| **s != State::Claimed).count() <= keep_free {
            return None;
        }
        for slot in 0..self.slots.len() as u32 {
            match states[slot as usize] {
                State::Claimed => continue,
                State::Free => {}
                State::Stale => match self.replace(slot) {
                    Ok(_fresh_lock) => {
                        tracing::info!(slot, "stale slot's log file replaced; the slot is back in use");
                        states[slot as usize] = State::Free;
                    }
                    Err(e) => {
                        tracing::warn!(slot, error = %e, "stale slot's log file still cannot be replaced; skipping it");
                        continue;
                    }
                },
            }
            let path = self.log_path(slot);
            let lock = match OpenOptions::new().read(true).write(true).open(&path) {
                Ok(f) => f,
                Err(e) => {
                    tracing::error!(slot, path = %path.display(), error = %e, "cannot open log file");
                    continue;
                }
            };
            if flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
                tracing::warn!(slot, "log file locked by another process; skipping the slot");
                continue;
            }
            states[slot as usize] = State::Claimed;
            return Some(Claim { slot, lock });
        }
        None
    }

    /// Frees a claimed slot whose log is settled: its file is replaced by a fresh one (see
    /// the module notes), then it is free; if that fails it is stale.
    pub(crate) fn release(&self, claim: Claim) {
        let slot = claim.slot;
        let fresh_lock = self.replace(slot);
        let mut states = self.states.lock();
        states[slot as usize] = match &fresh_lock {
            Ok(_) => State::Free,
            Err(e) => {
                tracing::error!(slot, error = %e, "cannot replace the log file of a released slot; it is out of use until it is");
                State::Stale
            }
        };
        // Unlocked only now, under the mutex: see the module notes.
        drop(fresh_lock);
        drop(claim.lock);
        drop(states);
    }

    /// Puts a fresh file in slot `slot`'s place with nicfs's checkpoint and maps it; returns
    /// a descriptor holding the fresh file's lock.
    fn replace(&self, slot: u32) -> Result<File, FormatError> {
        let at = self.checkpoint(slot);
        let lsns = SlotLsns { published: at, replicated: at };
        let fresh = slotfile::prepare(&self.dir, &self.geometry, slot, lsns)?;
        let io = |what: &str| {
            let what = format!("{what} the fresh log file of slot {slot}");
            move |source: std::io::Error| FormatError::Pm(linefs_pm::PmError::Io { what, source })
        };
        // A descriptor of its own: one sharing the mapping's open file description would
        // hold the lock as long as nicfs maps the file.
        let locked = File::open(fresh.path()).map_err(io("open")).and_then(|f| {
            flock(&f, FlockOperation::NonBlockingLockExclusive).map_err(|e| io("lock")(e.into()))?;
            Ok(f)
        });
        let lock = match locked {
            Ok(f) => f,
            Err(e) => {
                fresh.abandon();
                return Err(e);
            }
        };
        let region = fresh.install()?;
        *self.slots[slot as usize].log.write() = Arc::new(LogSlot::new(region, &self.geometry, slot));
        self.guard(slot);
        self.replaced.fetch_add(1, Ordering::Relaxed);
        tracing::info!(slot, checkpoint = at, "log file replaced: earlier descriptors of the slot reach nothing");
        Ok(lock)
    }
}

#[cfg(test)]
mod tests;
