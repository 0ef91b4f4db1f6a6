//! Frames on their way to peers: one bounded queue and one sender thread (`repl-send`) per
//! peer and class, so the engine thread never waits on a socket. A full queue (the peer
//! reads slowly, or is stopped) drops the frame, counted: the engine's ticks resend what is
//! unacknowledged, and a replica acknowledges again what it is sent twice.

use crate::daemon::peers::Peers;
use crate::daemon::replication::status::{add, Counters};
use linefs_peer::Class;
use std::collections::HashMap;
use std::sync::Arc;

/// Frames queued per peer and class at most.
const QUEUE: usize = 64;

type Frame = (u16, Vec<u8>);

pub(crate) struct Outbox {
    peers: Peers,
    counters: Arc<Counters>,
    queues: HashMap<(u32, bool), crossbeam_channel::Sender<Frame>>,
}

impl Outbox {
    pub(crate) fn new(peers: Peers, counters: Arc<Counters>) -> Outbox {
        Outbox { peers, counters, queues: HashMap::new() }
    }

    /// Queues a frame of `kind` for `to` on its link of `class`; false if it was dropped.
    pub(crate) fn send(&mut self, to: u32, class: Class, kind: u16, payload: Vec<u8>) -> bool {
        let bulk = class == Class::Bulk;
        let q = match self.queues.get(&(to, bulk)) {
            Some(q) => q,
            None => {
                let (tx, rx) = crossbeam_channel::bounded::<Frame>(QUEUE);
                let (peers, counters) = (self.peers.clone(), self.counters.clone());
                let spawned = std::thread::Builder::new().name("repl-send".into()).spawn(move || {
                    for (kind, payload) in rx {
                        if let Err(e) = peers.send(to, class, kind, &payload) {
                            add(&counters.send_dropped, 1);
                            tracing::debug!(node = to, bulk, "replication frame not sent: {e}");
                        }
                    }
                });
                if let Err(e) = spawned {
                    tracing::error!(node = to, "cannot start a replication sender: {e}");
                    add(&self.counters.send_dropped, 1);
                    return false;
                }
                self.queues.entry((to, bulk)).or_insert(tx)
            }
        };
        if q.try_send((kind, payload)).is_err() {
            add(&self.counters.send_dropped, 1);
            return false;
        }
        true
    }
}
