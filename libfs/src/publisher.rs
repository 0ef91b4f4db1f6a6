//! The background publisher thread, one of two loops chosen where the link is made
//! (`mount`). In the host-only mode libfs publishes its own log ([`run`]; this mode stays
//! as the baseline the benchmarks compare against); when the node publishes (offload),
//! the thread only tells it how far the log is committed (`ChunkReady`) and catches the
//! view up with what it reports ([`run_remote`]). Both go through the client's link.
//!
//! The thread wakes when a chunk's worth of log is unpublished (signalled by the write
//! path), or every `publish_interval` when anything is. It publishes in batches of at most
//! [`BATCH_BYTES`] of log under the publication locks only — appends and reads of
//! unpublished data go on meanwhile — then takes the front-end lock briefly to catch the
//! view up and reclaim the log space ([`crate::state::Front::catch_up`]).

use crate::state::Client;
use std::sync::Arc;
use std::time::Duration;

/// Most log bytes one background batch publishes (the public area's lock is held for it).
pub(crate) const BATCH_BYTES: u64 = 1 << 20;

/// The thread of a client that publishes its own log.
pub(crate) fn run(client: Arc<Client>, interval: Duration) {
    let wake = &client.wakeup;
    let mut flags = wake.flags.lock();
    loop {
        if flags.stop {
            return;
        }
        if !flags.kick {
            wake.cond.wait_for(&mut flags, interval);
        }
        flags.kick = false;
        if flags.stop {
            return;
        }
        drop(flags);
        let chunk = client.front.read().chunk_size;
        // Publish while anything is waiting after a timer wake-up, or while a full chunk is
        // waiting after a kick.
        loop {
            if client.link.failed() {
                break;
            }
            let before = client.front.read().pending_bytes();
            if before == 0 {
                break;
            }
            if let Err(e) = client.link.publish(&client.publication, u64::MAX, BATCH_BYTES) {
                tracing::error!(error = %e, "background publication failed; the log is kept intact");
                break;
            }
            let mut front = client.front.write();
            front.catch_up();
            let left = front.pending_bytes();
            drop(front);
            if left == 0 || (left < chunk && before >= chunk) {
                break;
            }
        }
        flags = wake.flags.lock();
    }
}

/// The thread of a client whose node publishes (offload). Woken by the write path (a chunk is committed), by the bulk
/// reader (nicfs published something) or by the interval: catches the view up with what
/// nicfs published, then sends `ChunkReady` if a chunk's worth of log was committed since
/// the last one — or anything at all, on the interval.
pub(crate) fn run_remote(client: Arc<Client>, interval: Duration) {
    let remote = client.link.clone();
    let wake = &client.wakeup;
    let mut sent = client.front.read().tail;
    let mut flags = wake.flags.lock();
    loop {
        if flags.stop {
            return;
        }
        let timed_out = !flags.kick && wake.cond.wait_for(&mut flags, interval).timed_out();
        flags.kick = false;
        if flags.stop {
            return;
        }
        drop(flags);
        remote.follow(&client.publication);
        let behind = {
            let published = client.publication.public.read().published;
            published > client.front.read().reclaimed
        };
        if behind {
            client.front.write().catch_up();
        }
        let (tail, chunk) = {
            let front = client.front.read();
            (front.tail, front.chunk_size)
        };
        if tail > sent && (tail - sent >= chunk || timed_out) && !remote.failed() {
            remote.chunk_ready(tail);
            sent = tail;
        }
        flags = wake.flags.lock();
    }
}
