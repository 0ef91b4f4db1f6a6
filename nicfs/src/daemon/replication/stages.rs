//! What the replication stages measure and decide between them: the compression controller
//! (`linefs_chain::compress::Adaptive`, shared by every link's compress stage and fed by
//! their sender threads), the per-peer latency windows (append → send, send → ack) and the
//! send times an ack is matched against. The engine thread reports acks and reclaims here;
//! the sender threads report sends. [`Stages::status`] makes the status file's view.

use super::status::{CompressionStatus, Latency, PeerStage};
use linefs_chain::compress::{Adaptive, Config, Decision, Reason, Sample};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Latency samples kept per peer and kind (the most recent ones).
const WINDOW: usize = 1024;
/// Send times kept per own slot at most (older ones are dropped first).
const SENDS: usize = 1 << 16;

/// The most recent samples of a latency, in µs.
#[derive(Debug, Default, Clone)]
pub(crate) struct Window {
    samples: VecDeque<u64>,
}

impl Window {
    pub(crate) fn push(&mut self, d: Duration) {
        if self.samples.len() == WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    /// p50 and p99 (nearest rank) of the window.
    pub(crate) fn latency(&self) -> Latency {
        let mut v: Vec<u64> = self.samples.iter().copied().collect();
        v.sort_unstable();
        let rank = |p: f64| -> u64 {
            if v.is_empty() {
                return 0;
            }
            let i = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            v[i]
        };
        Latency { samples: v.len() as u64, p50_us: rank(0.50), p99_us: rank(0.99) }
    }
}

#[derive(Debug, Default)]
struct PeerWindows {
    append_to_send: Window,
    send_to_ack: Window,
}

/// Shared by the engine thread, the compress stages and the sender threads.
pub(crate) struct Stages {
    adaptive: Mutex<Adaptive>,
    peers: Mutex<BTreeMap<u32, PeerWindows>>,
    /// Per own slot, (end, when sent) of first sends, in order.
    sends: Mutex<HashMap<u32, VecDeque<(u64, Instant)>>>,
    /// Per own slot and member, the durable end its last ack reported.
    acked: Mutex<HashMap<(u32, u32), u64>>,
}

impl Default for Stages {
    fn default() -> Stages {
        Stages {
            adaptive: Mutex::new(Adaptive::new(Config::default())),
            peers: Mutex::default(),
            sends: Mutex::default(),
            acked: Mutex::default(),
        }
    }
}

impl Stages {
    /// Whether to lz4 the next (non-urgent) chunk.
    pub(crate) fn decide(&self) -> Decision {
        self.adaptive.lock().decide()
    }

    /// What a chunk the controller decided on cost; logs a switch.
    pub(crate) fn observe(&self, s: &Sample) {
        if let Some(sw) = self.adaptive.lock().observe(s) {
            tracing::debug!(on = sw.on, reason = ?sw.reason, "replication compression switched");
        }
    }

    /// A chunk appended at `appended` was sent to `to` now.
    pub(crate) fn sent(&self, to: u32, appended: Option<Instant>, first: Option<(u32, u64)>, now: Instant) {
        if let Some(t) = appended {
            self.peers.lock().entry(to).or_default().append_to_send.push(now.saturating_duration_since(t));
        }
        if let Some((slot, end)) = first {
            let mut sends = self.sends.lock();
            let q = sends.entry(slot).or_default();
            if q.back().is_none_or(|&(e, _)| e < end) {
                if q.len() == SENDS {
                    q.pop_front();
                }
                q.push_back((end, now));
            }
        }
    }

    /// `member` acknowledged own slot `slot` durable to `durable`: every first send ending
    /// in between its previous ack and this one took `now - sent` to be acknowledged.
    pub(crate) fn acked(&self, slot: u32, member: u32, durable: u64, now: Instant) {
        let prev = {
            let mut acked = self.acked.lock();
            let a = acked.entry((slot, member)).or_default();
            let prev = *a;
            *a = prev.max(durable);
            prev
        };
        if durable <= prev {
            return;
        }
        let sends = self.sends.lock();
        let Some(q) = sends.get(&slot) else { return };
        let from = q.partition_point(|&(e, _)| e <= prev);
        let mut peers = self.peers.lock();
        let w = &mut peers.entry(member).or_default().send_to_ack;
        for &(_, t) in q.iter().skip(from).take_while(|&&(e, _)| e <= durable) {
            w.push(now.saturating_duration_since(t));
        }
    }

    /// Own slot `slot` is acknowledged by every member below `upto`: its send times go.
    pub(crate) fn reclaim(&self, slot: u32, upto: u64) {
        if let Some(q) = self.sends.lock().get_mut(&slot) {
            while q.front().is_some_and(|&(e, _)| e <= upto) {
                q.pop_front();
            }
        }
    }

    /// The controller's state.
    pub(crate) fn compression(&self) -> CompressionStatus {
        let s = self.adaptive.lock().stats();
        CompressionStatus {
            on: s.on,
            switches_on: s.switches_on,
            switches_off: s.switches_off,
            decided: s.chunks,
            probes: s.probes,
            last_reason: s.last_reason.map(|r| {
                match r {
                    Reason::NoSaving => "no-saving",
                    Reason::Slower => "slower",
                    Reason::QueueBottleneck => "queue-bottleneck",
                    Reason::Pays => "pays",
                }
                .to_string()
            }),
            ratio_permille: s.ratio.map(|r| (r * 1000.0).round().clamp(0.0, 1e9) as u64),
        }
    }

    /// Per peer: its latencies, with the queue lengths `queues` gives (compress, send).
    pub(crate) fn peers(&self, queues: &BTreeMap<u32, (u64, u64)>) -> Vec<PeerStage> {
        let peers = self.peers.lock();
        let mut nodes: Vec<u32> = peers.keys().chain(queues.keys()).copied().collect();
        nodes.sort_unstable();
        nodes.dedup();
        nodes
            .into_iter()
            .map(|node| {
                let (compress_queue, send_queue) = queues.get(&node).copied().unwrap_or_default();
                let w = peers.get(&node);
                PeerStage {
                    node,
                    compress_queue,
                    send_queue,
                    append_to_send: w.map(|w| w.append_to_send.latency()).unwrap_or_default(),
                    send_to_ack: w.map(|w| w.send_to_ack.latency()).unwrap_or_default(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_gives_nearest_rank_percentiles_of_its_last_samples() {
        let mut w = Window::default();
        assert_eq!(w.latency(), Latency::default());
        for us in 1..=100 {
            w.push(Duration::from_micros(us));
        }
        assert_eq!(w.latency(), Latency { samples: 100, p50_us: 50, p99_us: 99 });
        for _ in 0..WINDOW {
            w.push(Duration::from_micros(7));
        }
        assert_eq!(w.latency(), Latency { samples: WINDOW as u64, p50_us: 7, p99_us: 7 }, "old samples leave");
    }

    #[test]
    fn acks_are_matched_to_the_first_sends_they_cover_per_member() {
        let s = Stages::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        s.sent(1, Some(t0), Some((0, 100)), at(2));
        s.sent(1, None, Some((0, 200)), at(4));
        s.sent(1, Some(at(4)), Some((0, 150)), at(5)); // not past the last end: kept out
        s.acked(0, 1, 100, at(12));
        s.acked(0, 1, 100, at(50)); // nothing new
        s.acked(0, 2, 200, at(24));
        s.acked(0, 1, 250, at(34));
        let peers = s.peers(&BTreeMap::from([(1, (3, 4)), (5, (0, 1))]));
        assert_eq!(peers.iter().map(|p| p.node).collect::<Vec<_>>(), vec![1, 2, 5]);
        assert_eq!((peers[0].compress_queue, peers[0].send_queue), (3, 4));
        assert_eq!(peers[0].append_to_send, Latency { samples: 2, p50_us: 1000, p99_us: 2000 });
        assert_eq!(peers[0].send_to_ack, Latency { samples: 2, p50_us: 10_000, p99_us: 30_000 });
        assert_eq!(peers[1].send_to_ack, Latency { samples: 2, p50_us: 20_000, p99_us: 22_000 });
        assert_eq!(peers[2].send_to_ack.samples, 0);
        s.reclaim(0, 150);
        assert_eq!(s.sends.lock()[&0].len(), 1);
    }

    #[test]
    fn the_controller_counts_its_decisions() {
        let s = Stages::default();
        assert!(s.compression().on, "starts on");
        for _ in 0..3 {
            let d = s.decide();
            assert!(d.compress);
            s.observe(&Sample {
                raw: 1000,
                wire: 10,
                compressed: true,
                compress_ns: 100,
                send_ns: 1000,
                compress_threads: 1,
                compress_queue: 0,
                send_queue: 0,
            });
        }
        let c = s.compression();
        assert_eq!((c.decided, c.switches_off, c.ratio_permille), (3, 0, Some(10)));
    }
}
