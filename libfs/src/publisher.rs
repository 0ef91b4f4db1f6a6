//! The background publisher thread of the host-only mode: libfs publishes its own log.
//!
//! It wakes when a chunk's worth of log is unpublished (signalled by the write path), or
//! every `publish_interval` when anything is. It publishes in batches of at most
//! [`BATCH_BYTES`] of log under the public-area lock only — appends and reads of unpublished
//! data go on meanwhile — then takes the front-end lock briefly to catch the view up and
//! reclaim the log space. Later, nicfs takes this role; the host-only mode stays as the
//! baseline the benchmarks compare against.

use crate::fs::Shared;
use std::sync::Arc;
use std::time::Duration;

/// Log bytes published per batch: bounds how long readers of published data wait.
pub(crate) const BATCH_BYTES: u64 = 1 << 20;

pub(crate) fn run(shared: Arc<Shared>, interval: Duration) {
    let mut guard = shared.signal.lock();
    loop {
        if guard.stop {
            return;
        }
        if !guard.kick {
            shared.wake.wait_for(&mut guard, interval);
        }
        guard.kick = false;
        if guard.stop {
            return;
        }
        drop(guard);
        let chunk = shared.inner.read().chunk_size;
        // Publish while anything is waiting after a timer wake-up, or while a full chunk is
        // waiting after a kick.
        loop {
            if shared.core.failed() {
                break;
            }
            let before = shared.inner.read().pending_bytes();
            if before == 0 {
                break;
            }
            if let Err(e) = shared.core.publish_batch(BATCH_BYTES) {
                tracing::error!(error = %e, "background publication failed; the log is kept intact");
                break;
            }
            let mut inner = shared.inner.write();
            inner.catch_up();
            let left = inner.pending_bytes();
            drop(inner);
            if left == 0 || (left < chunk && before >= chunk) {
                break;
            }
        }
        guard = shared.signal.lock();
    }
}
