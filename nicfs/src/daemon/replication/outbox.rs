//! Frames on their way to peers, so the engine thread never waits on a socket or on lz4.
//! Per peer and class, one bounded queue and one sender thread (`repl-send`); on the bulk
//! class a compress stage (`repl-lz4`, its own bounded queue) comes first: it encodes the
//! chunks the engine hands over whole, lz4 or not as the compression controller
//! ([`Stages`], `linefs_chain::compress::Adaptive`) decides, and passes on what the engine
//! encoded itself (acks, probes, and urgent chunks, which are never compressed). A chunk
//! forwarded to one peer is thus compressed once per link (a chain has one successor).
//! The sender thread counts what it sent and feeds the controller its sample (raw and wire
//! bytes, lz4 and send time, both queues' lengths). A full engine-side queue (the peer reads
//! slowly, or is stopped) drops the frame, counted: the engine's ticks resend what is
//! unacknowledged, and a replica acknowledges again what it is sent twice; the compress
//! stage waits for its sender instead (back-pressure shows as its queue's length).

use super::stages::Stages;
use crate::daemon::peers::Peers;
use crate::daemon::replication::status::{add, Counters};
use linefs_chain::compress::Sample;
use linefs_peer::repl::{self, ReplFrame};
use linefs_peer::Class;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

/// Frames queued per peer and class (and per compress stage) at most.
const QUEUE: usize = 64;

/// What a chunk is, for the counters, the controller and the latencies.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Meta {
    /// Log bytes in it.
    pub(crate) log_bytes: u64,
    /// When its bytes were appended here (None: a forward, or read from the old log file).
    pub(crate) appended: Option<Instant>,
    /// (own slot, end) of a first send (not a retransmission): what an ack is matched to.
    pub(crate) first: Option<(u32, u64)>,
}

/// What a chunk's encoding cost (filled by whoever encoded it).
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    raw: u64,
    wire: u64,
    /// lz4 ran on it (by the controller's decision).
    lz4: bool,
    /// The controller decided on it (not urgent): its sample goes back.
    decided: bool,
    compress_ns: u64,
    compress_queue: u32,
}

/// An encoded frame; `chunk` for chunks.
struct Encoded {
    kind: u16,
    payload: Vec<u8>,
    chunk: Option<(Meta, Cost)>,
}

enum Job {
    Encoded(Encoded),
    /// A non-urgent chunk for the compress stage.
    Chunk(ReplFrame, Meta),
}

struct Link {
    /// Where the engine queues: the compress stage's queue (bulk) or the sender's.
    first: crossbeam_channel::Sender<Job>,
    /// The sender's queue (for its length).
    send: crossbeam_channel::Sender<Job>,
    compress: bool,
}

pub(crate) struct Outbox {
    peers: Peers,
    counters: Arc<Counters>,
    stages: Arc<Stages>,
    links: HashMap<(u32, bool), Link>,
}

impl Outbox {
    pub(crate) fn new(peers: Peers, counters: Arc<Counters>, stages: Arc<Stages>) -> Outbox {
        Outbox { peers, counters, stages, links: HashMap::new() }
    }

    /// Queues `frame` for `to` on its link of `class`: a non-urgent chunk is encoded by the
    /// bulk compress stage, the rest here (uncompressed). False if it was dropped.
    pub(crate) fn send(&mut self, to: u32, class: Class, frame: ReplFrame, meta: Meta) -> bool {
        let bulk = class == Class::Bulk;
        let chunk = matches!(frame, ReplFrame::Chunk { .. });
        let Some(link) = self.link(to, class) else { return false };
        let job = if chunk && bulk && link.compress && matches!(frame, ReplFrame::Chunk { urgent: false, .. }) {
            Job::Chunk(frame, meta)
        } else {
            match repl::encode(&frame, false) {
                Ok((kind, payload, st)) => {
                    let cost = Cost { raw: st.raw, wire: st.wire, ..Cost::default() };
                    Job::Encoded(Encoded { kind, payload, chunk: chunk.then_some((meta, cost)) })
                }
                Err(e) => {
                    tracing::error!(node = to, error = %e, "cannot encode a replication frame");
                    return false;
                }
            }
        };
        if link.first.try_send(job).is_err() {
            add(&self.counters.send_dropped, 1);
            return false;
        }
        true
    }

    /// Per peer: frames in its compress queue, and in its send queues (both classes).
    pub(crate) fn queues(&self) -> BTreeMap<u32, (u64, u64)> {
        let mut out: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for (&(to, _), l) in &self.links {
            let e = out.entry(to).or_default();
            if l.compress {
                e.0 += l.first.len() as u64;
            }
            e.1 += l.send.len() as u64;
        }
        out
    }

    fn link(&mut self, to: u32, class: Class) -> Option<&Link> {
        let bulk = class == Class::Bulk;
        if !self.links.contains_key(&(to, bulk)) {
            match self.start(to, class) {
                Ok(l) => {
                    self.links.insert((to, bulk), l);
                }
                Err(e) => {
                    tracing::error!(node = to, "cannot start a replication sender: {e}");
                    add(&self.counters.send_dropped, 1);
                    return None;
                }
            }
        }
        self.links.get(&(to, bulk))
    }

    /// The threads of a link: a sender, and on the bulk class a compress stage before it.
    fn start(&self, to: u32, class: Class) -> std::io::Result<Link> {
        let bulk = class == Class::Bulk;
        let (send, srx) = crossbeam_channel::bounded::<Job>(QUEUE);
        let sender = Sender {
            to,
            class,
            peers: self.peers.clone(),
            counters: self.counters.clone(),
            stages: self.stages.clone(),
        };
        std::thread::Builder::new().name("repl-send".into()).spawn(move || sender.run(srx))?;
        if !bulk {
            // The low-latency class has no compress stage: the engine queues to its sender.
            return Ok(Link { first: send.clone(), send, compress: false });
        }
        let (first, crx) = crossbeam_channel::bounded::<Job>(QUEUE);
        let (tx, stages, counters) = (send.clone(), self.stages.clone(), self.counters.clone());
        std::thread::Builder::new()
            .name("repl-lz4".into())
            .spawn(move || compress_stage(crx, tx, &stages, &counters))?;
        Ok(Link { first, send, compress: true })
    }
}

/// The bulk compress stage: encodes the chunks, lz4 as the controller decides.
fn compress_stage(
    jobs: crossbeam_channel::Receiver<Job>,
    out: crossbeam_channel::Sender<Job>,
    stages: &Stages,
    counters: &Counters,
) {
    for job in &jobs {
        let e = match job {
            Job::Encoded(e) => e,
            Job::Chunk(frame, meta) => {
                let queue = u32::try_from(jobs.len()).unwrap_or(u32::MAX);
                let d = stages.decide();
                let t = Instant::now();
                match repl::encode(&frame, d.compress) {
                    Ok((kind, payload, st)) => {
                        let cost = Cost {
                            raw: st.raw,
                            wire: st.wire,
                            lz4: d.compress,
                            decided: true,
                            compress_ns: if d.compress { elapsed_ns(t) } else { 0 },
                            compress_queue: queue,
                        };
                        Encoded { kind, payload, chunk: Some((meta, cost)) }
                    }
                    Err(e) => {
                        add(&counters.send_dropped, 1);
                        tracing::error!(error = %e, "cannot encode a replication chunk");
                        continue;
                    }
                }
            }
        };
        if out.send(Job::Encoded(e)).is_err() {
            break;
        }
    }
}

fn elapsed_ns(t: Instant) -> u64 {
    u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A link's sender thread.
struct Sender {
    to: u32,
    class: Class,
    peers: Peers,
    counters: Arc<Counters>,
    stages: Arc<Stages>,
}

impl Sender {
    fn run(self, frames: crossbeam_channel::Receiver<Job>) {
        for job in &frames {
            let e = match job {
                Job::Encoded(e) => e,
                // Not queued here (chunks for lz4 go to the compress stage); sent as they are.
                Job::Chunk(frame, meta) => match repl::encode(&frame, false) {
                    Ok((kind, payload, st)) => {
                        let cost = Cost { raw: st.raw, wire: st.wire, ..Cost::default() };
                        Encoded { kind, payload, chunk: Some((meta, cost)) }
                    }
                    Err(_) => continue,
                },
            };
            let queue = u32::try_from(frames.len()).unwrap_or(u32::MAX);
            let t = Instant::now();
            if let Some((meta, _)) = &e.chunk {
                // Before the write, so that an ack racing this thread finds it.
                self.stages.sent(self.to, None, meta.first, t);
            }
            if let Err(err) = self.peers.send(self.to, self.class, e.kind, &e.payload) {
                add(&self.counters.send_dropped, 1);
                tracing::debug!(node = self.to, bulk = self.class == Class::Bulk, "replication frame not sent: {err}");
                continue;
            }
            let Some((meta, cost)) = e.chunk else { continue };
            let send_ns = elapsed_ns(t);
            let c = &self.counters;
            let saved = cost.raw.saturating_sub(cost.wire);
            add(&c.chunks_sent, 1);
            add(&c.bytes_sent, cost.wire);
            add(&c.raw_bytes_sent, cost.raw);
            add(&c.log_bytes_sent, meta.log_bytes);
            add(&c.saved_bytes, saved);
            add(if saved > 0 { &c.chunks_compressed } else { &c.chunks_uncompressed }, 1);
            if cost.decided {
                self.stages.observe(&Sample {
                    raw: cost.raw,
                    wire: cost.wire,
                    compressed: cost.lz4,
                    compress_ns: cost.compress_ns,
                    send_ns,
                    compress_threads: 1,
                    compress_queue: cost.compress_queue,
                    send_queue: queue,
                });
            }
            self.stages.sent(self.to, meta.appended, None, t);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::peers::Inbound;
    use linefs_peer::repl::Creds;
    use linefs_peer::ClusterKey;
    use std::net::SocketAddr;
    use std::time::Duration;

    fn chunk(urgent: bool, data: Vec<u8>) -> ReplFrame {
        ReplFrame::Chunk { stream: (0, 1), epoch: 5, start: 0, urgent, creds: Creds::default(), data }
    }

    /// Nodes 0 and 1 linked in a view of epoch 5; node 1's inbox.
    fn linked(dir: &std::path::Path) -> (Peers, Peers, crossbeam_channel::Receiver<Inbound>) {
        let path = dir.join("key");
        ClusterKey::generate(&path).unwrap();
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let (tx, inbox) = crossbeam_channel::unbounded();
        let p0 = Peers::start(0, &path, any, any, None).unwrap();
        let p1 = Peers::start(1, &path, any, any, Some(tx)).unwrap();
        let member = |n: u32, p: &Peers| (n, p.addrs().0.to_string(), p.addrs().1.to_string());
        let view = [member(0, &p0), member(1, &p1)];
        p0.set_view(5, &view);
        p1.set_view(5, &view);
        let end = Instant::now() + Duration::from_secs(10);
        while !p0.status().peers.iter().any(|p| p.low_latency.state == "connected" && p.bulk.state == "connected") {
            assert!(Instant::now() < end, "the links never came up");
            std::thread::sleep(Duration::from_millis(20));
        }
        (p0, p1, inbox)
    }

    #[test]
    fn a_proactive_chunk_is_compressed_by_the_bulk_stage_and_an_urgent_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (p0, p1, inbox) = linked(dir.path());
        let (counters, stages) = (Arc::new(Counters::default()), Arc::new(Stages::default()));
        let mut out = Outbox::new(p0.clone(), counters.clone(), stages.clone());
        let data = b"compressible ".repeat(5 << 10);
        let appended = Instant::now();
        let meta = Meta { log_bytes: data.len() as u64, appended: Some(appended), first: Some((1, data.len() as u64)) };
        assert!(out.send(1, Class::Bulk, chunk(false, data.clone()), meta));
        assert!(out.send(1, Class::LowLatency, chunk(true, data.clone()), Meta::default()));
        let mut got: Vec<Inbound> =
            (0..2).map(|_| inbox.recv_timeout(Duration::from_secs(10)).expect("both chunks arrive")).collect();
        got.sort_by_key(|f| f.wire_bytes);
        for f in &got {
            assert!(matches!(&f.frame, ReplFrame::Chunk { data: d, .. } if *d == data), "decoded to the same bytes");
        }
        assert!(matches!(got[0].frame, ReplFrame::Chunk { urgent: false, .. }));
        assert!(got[0].wire_bytes < data.len() as u64 / 10, "lz4 on the bulk link: {}", got[0].wire_bytes);
        assert!(got[1].wire_bytes > data.len() as u64, "the urgent chunk as it is: {}", got[1].wire_bytes);
        // The sender counts after the write: wait for both.
        let end = Instant::now() + Duration::from_secs(5);
        while counters.snapshot().chunks_sent < 2 {
            assert!(Instant::now() < end);
            std::thread::sleep(Duration::from_millis(10));
        }
        let c = counters.snapshot();
        assert_eq!((c.chunks_compressed, c.chunks_uncompressed, c.log_bytes_sent), (1, 1, data.len() as u64));
        assert_eq!(c.raw_bytes_sent - c.bytes_sent, c.saved_bytes);
        assert_eq!(c.bytes_sent, got[0].wire_bytes + got[1].wire_bytes);
        let z = stages.compression();
        assert_eq!((z.on, z.decided), (true, 1), "only the proactive chunk is the controller's");
        let peers = stages.peers(&out.queues());
        assert_eq!(peers.len(), 1);
        assert_eq!((peers[0].node, peers[0].append_to_send.samples), (1, 1));
        // Its ack is matched to its first send.
        stages.acked(1, 1, data.len() as u64, Instant::now());
        assert_eq!(stages.peers(&BTreeMap::new())[0].send_to_ack.samples, 1);
        p0.stop();
        p1.stop();
    }
}
