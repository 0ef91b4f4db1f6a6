//! One stage of the pipeline: a queue (an unbounded crossbeam channel) and the threads that
//! take work from it and run the stage's handler. The pool is elastic, as LineFS's is
//! (§3.1: "if one stage becomes a bottleneck (e.g., its wait queue grows beyond 5 entries),
//! NICFS dynamically assigns more threads to process the stage"):
//!
//! * a stage starts with its `min` threads, which live as long as the stage;
//! * the pipeline's tuner looks at every queue each [`TUNE_PERIOD`]; a queue longer than
//!   [`GROW_ABOVE`] at [`GROW_AFTER`] looks in a row gets one more thread, up to the stage's
//!   `max` and while the pipeline's shared budget of extra threads lasts;
//! * an extra thread that finds the queue empty for [`IDLE_EXIT`] gives its place back.
//!
//! Work items of one stage may be handled concurrently and in any order; a stage that needs
//! an order (publication, per session) restores it itself.
//!
//! **Timings.** An item is stamped when it is queued; the thread that takes it records its
//! *wait* (queued → taken) and, once the handler returns, its *service* time (the handler's
//! run) in the stage's two [`Latency`] histograms, shown in [`StageStatus`] and exported by
//! [`crate::daemon::metrics`]. A handler's run is what the stage did for that item: a whole fetch
//! request for **fetch** (every chunk it cut), and for **publish** the item's batch plus
//! any later chunks of the same session that were parked waiting for it.

use crate::observe::latency::{Latency, Summary};
use parking_lot::Mutex;
use serde::Serialize;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the tuner looks at the queues.
pub(crate) const TUNE_PERIOD: Duration = Duration::from_millis(10);
/// A queue longer than this is a bottleneck...
pub(crate) const GROW_ABOVE: usize = 5;
/// ...when it is at this many looks in a row.
pub(crate) const GROW_AFTER: u32 = 3;
/// An extra thread idle this long exits.
pub(crate) const IDLE_EXIT: Duration = Duration::from_millis(200);

/// Extra threads the stages of a pipeline may add, all together.
#[derive(Debug)]
pub(crate) struct Budget {
    left: AtomicUsize,
}

impl Budget {
    pub(crate) fn new(extra_threads: usize) -> Arc<Budget> {
        Arc::new(Budget { left: AtomicUsize::new(extra_threads) })
    }

    fn take(&self) -> bool {
        self.left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok()
    }

    fn give_back(&self) {
        self.left.fetch_add(1, Ordering::AcqRel);
    }
}

/// A stage as the status file shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct StageStatus {
    pub(crate) stage: &'static str,
    /// Work items waiting.
    pub(crate) queue: usize,
    /// Threads now (the stage's own plus extra ones).
    pub(crate) threads: usize,
    pub(crate) min_threads: usize,
    pub(crate) max_threads: usize,
    /// Work items handled.
    pub(crate) handled: u64,
    /// Extra threads started so far.
    pub(crate) grown: u64,
    /// Most threads at once.
    pub(crate) peak_threads: usize,
    /// Time items waited in the queue, since start.
    pub(crate) wait: Summary,
    /// Time the handler took per item, since start.
    pub(crate) service: Summary,
}

struct Shared<T> {
    name: &'static str,
    /// Items with the time they were queued.
    rx: crossbeam_channel::Receiver<(Instant, T)>,
    handler: Box<dyn Fn(T) + Send + Sync>,
    min: usize,
    max: usize,
    budget: Arc<Budget>,
    threads: AtomicUsize,
    peak: AtomicUsize,
    handled: AtomicU64,
    grown: AtomicU64,
    /// Consecutive looks of the tuner at a long queue.
    long_looks: AtomicU32,
    spawn_lock: Mutex<()>,
    wait: Latency,
    service: Latency,
}

/// A stage: submit work with [`Stage::submit`].
pub(crate) struct Stage<T> {
    tx: crossbeam_channel::Sender<(Instant, T)>,
    shared: Arc<Shared<T>>,
}

impl<T: Send + 'static> Stage<T> {
    /// A stage named `name` running `handler` on `min..=max` threads (min >= 1).
    pub(crate) fn new(
        name: &'static str,
        min: usize,
        max: usize,
        budget: Arc<Budget>,
        handler: impl Fn(T) + Send + Sync + 'static,
    ) -> Stage<T> {
        let (tx, rx) = crossbeam_channel::unbounded();
        let min = min.max(1);
        let shared = Arc::new(Shared {
            name,
            rx,
            handler: Box::new(handler),
            min,
            max: max.max(min),
            budget,
            threads: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            handled: AtomicU64::new(0),
            grown: AtomicU64::new(0),
            long_looks: AtomicU32::new(0),
            spawn_lock: Mutex::new(()),
            wait: Latency::new(),
            service: Latency::new(),
        });
        for _ in 0..min {
            spawn(&shared, false);
        }
        Stage { tx, shared }
    }

    /// Queues `item` for the stage.
    pub(crate) fn submit(&self, item: T) {
        // The receivers live as long as the stage's threads, which never all exit.
        let _ = self.tx.send((Instant::now(), item));
    }

    pub(crate) fn name(&self) -> &'static str {
        self.shared.name
    }

    /// The stage's wait and service histograms (shared handles).
    pub(crate) fn latencies(&self) -> (Latency, Latency) {
        (self.shared.wait.clone(), self.shared.service.clone())
    }

    /// One look of the tuner: adds a thread if the queue has stayed long.
    pub(crate) fn tune(&self) {
        let s = &self.shared;
        if s.rx.len() <= GROW_ABOVE {
            s.long_looks.store(0, Ordering::Relaxed);
            return;
        }
        if s.long_looks.fetch_add(1, Ordering::Relaxed) + 1 < GROW_AFTER {
            return;
        }
        s.long_looks.store(0, Ordering::Relaxed);
        let _one = s.spawn_lock.lock();
        if s.threads.load(Ordering::Acquire) < s.max && s.budget.take() {
            s.grown.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(stage = s.name, queue = s.rx.len(), "stage queue stays long: one more thread");
            spawn(s, true);
        }
    }

    pub(crate) fn status(&self) -> StageStatus {
        let s = &self.shared;
        StageStatus {
            stage: s.name,
            queue: s.rx.len(),
            threads: s.threads.load(Ordering::Acquire),
            min_threads: s.min,
            max_threads: s.max,
            handled: s.handled.load(Ordering::Relaxed),
            grown: s.grown.load(Ordering::Relaxed),
            peak_threads: s.peak.load(Ordering::Relaxed),
            wait: s.wait.summary(),
            service: s.service.summary(),
        }
    }
}

fn spawn<T: Send + 'static>(shared: &Arc<Shared<T>>, extra: bool) {
    let n = shared.threads.fetch_add(1, Ordering::AcqRel) + 1;
    shared.peak.fetch_max(n, Ordering::Relaxed);
    let s = shared.clone();
    let started = std::thread::Builder::new().name(format!("{}-{n}", shared.name)).spawn(move || work(s, extra));
    if let Err(e) = started {
        tracing::error!(stage = shared.name, error = %e, "cannot start a stage thread");
        shared.threads.fetch_sub(1, Ordering::AcqRel);
        if extra {
            shared.budget.give_back();
        }
    }
}

fn work<T>(s: Arc<Shared<T>>, extra: bool) {
    loop {
        let (queued, item) = if extra {
            match s.rx.recv_timeout(IDLE_EXIT) {
                Ok(item) => item,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => break,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match s.rx.recv() {
                Ok(item) => item,
                Err(_) => break,
            }
        };
        let taken = Instant::now();
        s.wait.record(taken.saturating_duration_since(queued));
        (s.handler)(item);
        s.service.since(taken);
        s.handled.fetch_add(1, Ordering::Relaxed);
    }
    s.threads.fetch_sub(1, Ordering::AcqRel);
    if extra {
        s.budget.give_back();
        tracing::debug!(stage = s.name, "stage drained: an extra thread exits");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn wait(what: &str, f: impl Fn() -> bool) {
        let end = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < end, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_long_queue_gets_threads_and_gives_them_back_when_it_drains() {
        let (gate_tx, gate) = crossbeam_channel::unbounded::<()>();
        let done = Arc::new(AtomicU64::new(0));
        let d = done.clone();
        let budget = Budget::new(2);
        let stage = Stage::new("test", 1, 4, budget.clone(), move |()| {
            gate.recv().unwrap();
            d.fetch_add(1, Ordering::Relaxed);
        });
        for _ in 0..20 {
            stage.submit(());
        }
        // The single thread is stuck on its first item: the queue stays long.
        for _ in 0..GROW_AFTER * 2 {
            stage.tune();
        }
        let st = stage.status();
        assert_eq!((st.threads, st.grown), (3, 2), "two extra threads, all the budget: {st:?}");
        assert!(!budget.take(), "the budget is spent");
        for _ in 0..20 {
            gate_tx.send(()).unwrap();
        }
        wait("the queue to drain", || done.load(Ordering::Relaxed) == 20);
        // The extra threads leave once idle; the stage keeps its own.
        wait("extra threads to exit", || stage.status().threads == 1);
        let st = stage.status();
        assert_eq!((st.handled, st.peak_threads, st.queue), (20, 3, 0));
        assert_eq!((st.wait.count, st.service.count), (20, 20), "every item timed: {st:?}");
        assert!(budget.take(), "the budget is back");
    }

    #[test]
    fn a_short_queue_gets_no_thread() {
        let stage = Stage::new("test", 2, 4, Budget::new(8), |_: u32| {});
        for i in 0..3 {
            stage.submit(i);
        }
        for _ in 0..10 {
            stage.tune();
        }
        wait("the items", || stage.status().handled == 3);
        assert_eq!(stage.status().grown, 0);
        assert_eq!(stage.status().threads, 2);
    }

    #[test]
    fn waits_and_service_times_are_recorded_per_item() {
        let stage = Stage::new("test", 1, 1, Budget::new(0), |ms: u64| std::thread::sleep(Duration::from_millis(ms)));
        // One thread: the second and third items wait behind the first's 30 ms.
        for ms in [30, 1, 1] {
            stage.submit(ms);
        }
        wait("the items", || stage.status().handled == 3);
        let st = stage.status();
        assert_eq!((st.wait.count, st.service.count), (3, 3), "{st:?}");
        assert!(st.service.max_us >= 30_000, "the slow item's service: {st:?}");
        assert!(st.service.p50_us >= 1_000 && st.service.p50_us < 30_000, "{st:?}");
        assert!(st.wait.max_us >= 29_000, "an item waited behind the slow one: {st:?}");
        let (w, sv) = stage.latencies();
        assert_eq!((w.summary(), sv.summary()), (st.wait, st.service), "the handles share the histograms");
        assert_eq!(stage.name(), "test");
    }
}
