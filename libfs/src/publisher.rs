//! The background publisher thread of the host-only mode: libfs publishes its own log.
//!
//! It wakes when a chunk's worth of log is unpublished (signalled by the write path), or
//! every `publish_interval` when anything is, and publishes one chunk at a time so that the
//! write lock is held for one chunk's work at most. Later, nicfs takes this role; the
//! host-only mode stays as the baseline the benchmarks compare against.

use crate::fs::Shared;
use std::sync::Arc;
use std::time::Duration;

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
        loop {
            let mut inner = shared.inner.write();
            if inner.pending_bytes() == 0 || inner.publish_failed.is_some() {
                break;
            }
            let chunk = inner.chunk_size;
            if let Err(e) = inner.publish(chunk) {
                tracing::error!(error = %e, "background publication failed; log kept intact");
                break;
            }
            // Keep going only while a full chunk is waiting; the rest waits for the timer.
            if inner.pending_bytes() < chunk {
                break;
            }
        }
        guard = shared.signal.lock();
    }
}
