//! The engine thread: feeds the chain engine its inputs one at a time and carries out its
//! outputs (see [`super`]). Inputs that carrying out an output produces (a persist done)
//! are queued and fed before the next message is read, so the engine sees them in order.

use super::copies::{Copies, Job, Publisher};
use super::outbox::{Meta, Outbox};
use super::status::{add, LogStatus, MemberStatus, ReplicationStatus};
use super::streams::Log;
use super::{Msg, Shared, CHUNK, REPLICAS};
use crate::daemon::peers::{Inbound, Peers};
use crate::node::Node;
use crate::pipeline::chunk::Event;
use crate::pipeline::replicate::Writer;
use linefs_chain::{Config, Data, Engine, Input, Message, OpId, Output, Recovered, StreamId, View};
use linefs_peer::repl::{self, Creds, ReplFrame};
use linefs_peer::Class;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the engine is ticked (retransmissions, probes) when it has something to do.
const TICK: Duration = Duration::from_millis(100);
/// An own log's tail shorter than a chunk, appended this long ago with nothing after it,
/// is shipped without waiting for an fsync (an fsync of the driver's own, nobody waits).
const IDLE_FLUSH: Duration = Duration::from_millis(200);

pub(crate) struct Driver {
    me: u32,
    engine: Engine,
    node: Arc<Node>,
    shared: Arc<Shared>,
    outbox: Outbox,
    /// Own logs' bytes in memory, by slot.
    logs: BTreeMap<u32, Log>,
    copies: Copies,
    publish: crossbeam_channel::Sender<Job>,
    /// Fsyncs waiting: op → (the sequencer to wake, the LSN).
    fsyncs: HashMap<OpId, (crossbeam_channel::Sender<Event>, u64)>,
    /// The driver's own fsyncs of idle tails ([`IDLE_FLUSH`]): op → slot.
    flushes: HashMap<OpId, u32>,
    next_op: OpId,
    /// Inputs produced while carrying out outputs.
    pending: VecDeque<Input>,
    /// The credentials of the chunk being handled (they go with its forward and persist).
    incoming: Option<Arc<Creds>>,
    /// Persists that failed (the copy's ring full until it publishes): retried on ticks.
    retry: Vec<(StreamId, u64, Data, Arc<Creds>)>,
    /// Per own slot and member, the end of what was sent (a range sent again below it is a
    /// retransmission) and the published LSN its acks reported.
    sent: HashMap<(u32, u32), u64>,
    member_published: HashMap<(u32, u32), u64>,
    /// Per own slot, the slowest member's progress at the last tick (None: someone unknown).
    slowest: BTreeMap<u32, Option<u64>>,
    /// Per own slot, its log file as this start found it and the checkpoint then: what is
    /// shipped below that checkpoint is read from there (published before the restart).
    previous: BTreeMap<u32, (Arc<linefs_pm::oplog::LogSlot>, u64)>,
}

impl Driver {
    /// The engine recovered from the node's slots (at their checkpoints: the node replaced
    /// its log files at start) and its replica copies.
    pub(crate) fn recover(
        me: u32,
        node: Arc<Node>,
        peers: Peers,
        shared: Arc<Shared>,
        report: crossbeam_channel::Sender<Msg>,
    ) -> Result<Driver, String> {
        let mut recovered = Vec::new();
        let mut logs = BTreeMap::new();
        let mut previous = BTreeMap::new();
        for slot in 0..node.geometry.log_slots {
            let at = node.checkpoint(slot);
            // What this node published before it restarted but a member may not hold yet
            // is read from the old log file when the member's ack says it lacks it (see
            // `send_previous`): the engine's reclaimed point starts a ring below the
            // checkpoint (it asks a member to rebase only below that).
            let log = Log::at(at);
            let mut low = at;
            if let Some((old, found)) = node.take_previous(slot) {
                if found == at && at > 0 {
                    low = at.saturating_sub(old.ring_bytes());
                    previous.insert(slot, (old, at));
                }
            }
            // Shipped (max of replicated and reclaimed) is the checkpoint: a member's first
            // ack below it has the engine resend from the member's durable end (an entry
            // boundary), not from `low`.
            recovered.push(Recovered::Primary { slot, appended: at, published: at, replicated: at, reclaimed: low });
            logs.insert(slot, log);
        }
        let (copies, found) = Copies::open(node.clone(), me);
        for (stream, durable, published) in found {
            recovered.push(Recovered::Replica { stream, durable, published });
        }
        let chunk = CHUNK.min(repl::MAX_CHUNK as u64);
        let engine = Engine::recover(Config::new(me, REPLICAS, chunk), recovered);
        let (publish, jobs) = crossbeam_channel::unbounded();
        let publisher = Publisher::new(node.clone(), shared.counters.clone(), report);
        std::thread::Builder::new()
            .name("repl-publish".into())
            .spawn(move || publisher.run(jobs))
            .map_err(|e| format!("cannot start the replica publishing thread: {e}"))?;
        Ok(Driver {
            me,
            engine,
            node,
            outbox: Outbox::new(peers, shared.counters.clone(), shared.stages.clone()),
            shared,
            logs,
            copies,
            publish,
            fsyncs: HashMap::new(),
            flushes: HashMap::new(),
            next_op: 1,
            pending: VecDeque::new(),
            incoming: None,
            retry: Vec::new(),
            sent: HashMap::new(),
            member_published: HashMap::new(),
            slowest: BTreeMap::new(),
            previous,
        })
    }

    pub(crate) fn run(mut self, msgs: crossbeam_channel::Receiver<Msg>, inbox: crossbeam_channel::Receiver<Inbound>) {
        let ticks = crossbeam_channel::tick(TICK);
        loop {
            crossbeam_channel::select! {
                recv(msgs) -> m => match m {
                    Ok(Msg::Stop) | Err(_) => break,
                    Ok(m) => self.msg(m),
                },
                recv(inbox) -> f => if let Ok(f) = f { self.inbound(f) },
                recv(ticks) -> _ => self.tick(),
            }
        }
        tracing::info!("replication stopped");
    }

    /// Feeds `input` and everything carrying out its outputs produces.
    fn feed(&mut self, input: Input) {
        self.pending.push_back(input);
        self.drain();
    }

    /// Feeds the queued inputs, and what carrying out their outputs produces.
    fn drain(&mut self) {
        while let Some(i) = self.pending.pop_front() {
            for o in self.engine.on_input(i) {
                self.output(o);
            }
        }
    }

    fn msg(&mut self, m: Msg) {
        match m {
            Msg::View { epoch, nodes } => {
                if epoch > self.engine.epoch() {
                    tracing::info!(epoch, ?nodes, "replication: new view");
                }
                self.feed(Input::View(View { epoch, nodes }));
            }
            Msg::Append { slot, from, bytes, writer } => {
                let len = bytes.len() as u64;
                let ring = self.node.ring_bytes();
                let log = self.logs.entry(slot).or_default();
                // Published here from: a gap filled below counts as published too (the
                // checkpoint moved past it).
                let published_from = from.min(log.end);
                if from > log.end {
                    // The log between was dropped unpublished (a refused suffix, the
                    // checkpoint moved past it): the chain gets entries without records in
                    // its place, so that the copies keep this log's LSNs.
                    let gap = linefs_pm::oplog::empty_entries(log.end, from, ring);
                    tracing::warn!(
                        slot,
                        from = log.end,
                        to = from,
                        "a dropped range of the log is replicated as empty entries"
                    );
                    add(&self.shared.counters.gaps_filled, 1);
                    self.shared.flow.add(gap.len() as u64);
                    let at = log.end;
                    let _ = log.append(at, Arc::from(gap), Arc::new(Writer::default()));
                }
                let before = log.held();
                match log.append(from, bytes, writer) {
                    Ok(end) => {
                        let taken = log.held() - before;
                        // Bytes not kept (already held) are not in flight.
                        self.shared.flow.shrink(len, taken);
                        // Published here already (the pipeline hands over what it published).
                        let stream = StreamId { primary: self.me, slot };
                        self.feed(Input::Append { slot, end });
                        self.feed(Input::Published { stream, start: published_from, end });
                    }
                    Err(expected) => {
                        self.shared.flow.shrink(len, 0);
                        tracing::error!(
                            slot,
                            from,
                            expected,
                            "published bytes do not continue the replicated log (a refused suffix was dropped): not replicated"
                        );
                    }
                }
            }
            Msg::Fsync { slot, lsn, wake } => {
                let op = self.next_op;
                self.next_op += 1;
                add(&self.shared.counters.fsyncs, 1);
                self.fsyncs.insert(op, (wake, lsn));
                let stream = StreamId { primary: self.me, slot };
                self.feed(Input::Fsync { op, targets: vec![(stream, lsn)] });
            }
            Msg::Published { stream, start, end } => self.feed(Input::Published { stream, start, end }),
            Msg::Stop => {}
        }
    }

    /// A replication frame from a peer (its epoch not below this node's: the peer links
    /// dropped older ones).
    fn inbound(&mut self, f: Inbound) {
        let c = &self.shared.counters;
        add(&c.bytes_received, f.wire_bytes);
        if f.frame.epoch() != self.engine.epoch() {
            add(&c.stale_dropped, 1);
        }
        let (primary, slot) = f.frame.stream();
        let stream = StreamId { primary, slot };
        let msg = match f.frame {
            ReplFrame::Chunk { epoch, start, urgent, creds, data, .. } => {
                add(&c.chunks_received, 1);
                self.incoming = Some(Arc::new(creds));
                Message::Chunk { stream, epoch, start, data: Data::new(data), urgent }
            }
            ReplFrame::Ack { epoch, durable, published, .. } => {
                add(&c.acks_received, 1);
                if primary == self.me {
                    let p = self.member_published.entry((slot, f.from)).or_default();
                    *p = (*p).max(published);
                    self.shared.stages.acked(slot, f.from, durable, Instant::now());
                }
                Message::Ack { stream, epoch, durable }
            }
            ReplFrame::Probe { epoch, .. } => Message::Probe { stream, epoch },
            ReplFrame::Rebase { epoch, lsn, .. } => Message::Rebase { stream, epoch, lsn },
        };
        self.feed(Input::Receive { from: f.from, msg });
        self.incoming = None;
    }

    fn tick(&mut self) {
        let retry = std::mem::take(&mut self.retry);
        for (stream, start, data, creds) in retry {
            self.persist(stream, start, data, creds);
        }
        self.drain();
        self.flush_idle_tails();
        if self.engine.tick_would_act() && self.stalled() {
            self.feed(Input::Tick);
        }
        self.snapshot();
    }

    /// Ships the tails of own logs that stay shorter than a chunk (the engine ships full
    /// chunks proactively, the rest on an fsync): an fsync of the driver's own, so a tail
    /// does not wait for the client's next fsync and the members' lag stays bounded.
    fn flush_idle_tails(&mut self) {
        let now = Instant::now();
        let idle: Vec<(u32, u64)> = self
            .logs
            .iter()
            .filter(|(slot, mem)| {
                !self.flushes.values().any(|s| s == *slot)
                    && mem.last_append().is_some_and(|t| now.saturating_duration_since(t) >= IDLE_FLUSH)
                    && self.engine.members(**slot).is_some_and(|m| !m.is_empty())
            })
            .filter_map(|(&slot, _)| {
                let log = self.engine.log(slot)?;
                (log.shipped < log.appended).then_some((slot, log.appended))
            })
            .collect();
        for (slot, lsn) in idle {
            let op = self.next_op;
            self.next_op += 1;
            self.flushes.insert(op, slot);
            let stream = StreamId { primary: self.me, slot };
            self.feed(Input::Fsync { op, targets: vec![(stream, lsn)] });
        }
    }

    /// Whether some own log's slowest member made no progress since the last tick (or has
    /// not answered), or an fsync waits: a tick's retransmissions and probes are due. A
    /// chain whose acks flow is left alone.
    fn stalled(&mut self) -> bool {
        let mut stalled = self.engine.pending_fsyncs().next().is_some() && self.engine.view().is_some();
        let slots: Vec<u32> = self.logs.keys().copied().collect();
        for slot in slots {
            let Some(members) = self.engine.members(slot) else { continue };
            let Some(log) = self.engine.log(slot) else { continue };
            let slowest =
                members.iter().map(|m| log.progress.get(m).copied()).try_fold(u64::MAX, |a, p| Some(a.min(p?)));
            let behind = match slowest {
                None => !members.is_empty(),
                Some(p) => p < log.shipped,
            };
            let before = self.slowest.insert(slot, slowest);
            if behind && before == Some(slowest) {
                stalled = true;
            }
        }
        stalled
    }

    fn output(&mut self, o: Output) {
        match o {
            Output::Send { to, msg } => self.send(to, msg),
            Output::SendLog { to, slot, epoch, start, end, urgent } => {
                self.send_log(to, slot, epoch, start, end, urgent)
            }
            Output::Persist { stream, start, data } => {
                let creds = self.incoming.clone().unwrap_or_default();
                self.persist(stream, start, data, creds);
            }
            Output::Publish { stream, start: _, end } => match self.copies.get(stream) {
                Ok(copy) => {
                    let _ = self.publish.send(Job { stream, copy, target: end });
                }
                Err(e) => tracing::error!(%stream, error = %e, "cannot open a replica copy to publish it"),
            },
            Output::Rebase { stream, lsn } => {
                add(&self.shared.counters.rebases_asked, 1);
                tracing::warn!(
                    %stream,
                    lsn,
                    "the primary no longer holds what this copy lacks: a state transfer is needed (not built yet); the copy waits"
                );
            }
            Output::Replicated { slot, lsn } => {
                if let Some(r) = self.shared.replicated.get(slot as usize) {
                    r.store(lsn, Ordering::Release);
                }
                if let Err(e) = self.node.set_replicated_lsn(slot, lsn) {
                    tracing::warn!(slot, lsn, error = %e, "cannot record the replicated LSN in the slot header");
                }
            }
            Output::Reclaim { stream, upto } => {
                if stream.primary == self.me {
                    if let Some(log) = self.logs.get_mut(&stream.slot) {
                        for piece in log.reclaim(upto) {
                            self.shared.flow.release(piece);
                        }
                        self.shared.stages.reclaim(stream.slot, upto);
                    }
                }
            }
            Output::FsyncDone { op } => {
                self.flushes.remove(&op);
                if let Some((wake, lsn)) = self.fsyncs.remove(&op) {
                    add(&self.shared.counters.fsyncs_done, 1);
                    let _ = wake.send(Event::Replicated { lsn });
                }
            }
            Output::FsyncRefused { op, stream } => {
                tracing::error!(op, %stream, "an fsync named a stream this node is not the primary of");
                self.fsyncs.remove(&op);
                self.flushes.remove(&op);
            }
            Output::NewerEpoch { epoch, from } => {
                tracing::debug!(epoch, from, mine = self.engine.epoch(), "a peer speaks from a newer epoch");
            }
        }
    }

    fn persist(&mut self, stream: StreamId, start: u64, data: Data, creds: Arc<Creds>) {
        match self.copies.persist(stream, start, data.as_slice(), &creds) {
            Ok(()) => {
                let end = start + data.len() as u64;
                self.pending.push_back(Input::Persisted { stream, start, end });
            }
            Err(e) => {
                add(&self.shared.counters.persist_errors, 1);
                tracing::debug!(%stream, start, error = %e, "persist of a replicated chunk failed; retried");
                self.retry.push((stream, start, data, creds));
            }
        }
    }

    /// A message of the engine as a frame on its class.
    fn send(&mut self, to: u32, msg: Message) {
        let class = match msg.class() {
            linefs_chain::Class::Latency => Class::LowLatency,
            linefs_chain::Class::Bulk => Class::Bulk,
        };
        let frame = match msg {
            Message::Chunk { stream, epoch, start, data, urgent } => {
                // A forward: the credentials came with the chunk received.
                let creds = self.incoming.as_deref().cloned().unwrap_or_default();
                let data = data.as_slice().to_vec();
                ReplFrame::Chunk { stream: (stream.primary, stream.slot), epoch, start, urgent, creds, data }
            }
            Message::Ack { stream, epoch, durable } => {
                add(&self.shared.counters.acks_sent, 1);
                let published = self.engine.copy(stream).map_or(0, |c| c.published.end());
                ReplFrame::Ack { stream: (stream.primary, stream.slot), epoch, durable, published }
            }
            Message::Probe { stream, epoch } => ReplFrame::Probe { stream: (stream.primary, stream.slot), epoch },
            Message::Rebase { stream, epoch, lsn } => {
                ReplFrame::Rebase { stream: (stream.primary, stream.slot), epoch, lsn }
            }
        };
        self.send_frame(to, class, frame, Meta::default());
    }

    /// Hands `frame` to the outbox (a chunk is encoded there, lz4 as the controller says).
    fn send_frame(&mut self, to: u32, class: Class, frame: ReplFrame, mut meta: Meta) {
        if let ReplFrame::Chunk { data, .. } = &frame {
            meta.log_bytes = data.len() as u64;
        }
        self.outbox.send(to, class, frame, meta);
    }

    /// Log bytes `[start, end)` of own slot `slot` to `to`, from memory, one chunk per
    /// writer's piece.
    fn send_log(&mut self, to: u32, slot: u32, epoch: u64, mut start: u64, end: u64, urgent: bool) {
        if start >= end {
            return;
        }
        if let Some(done) = self.send_previous(to, slot, epoch, start, end, urgent) {
            if done >= end {
                return;
            }
            start = done;
        }
        let pieces = self.logs.get(&slot).map(|l| l.range(start, end)).unwrap_or_default();
        if pieces.first().is_none_or(|p| p.start > start) {
            tracing::debug!(slot, start, end, node = to, "part of a range to send is no longer in memory");
        }
        let sent = self.sent.entry((slot, to)).or_default();
        let again = start < *sent;
        if again {
            add(&self.shared.counters.retransmits, 1);
        }
        *sent = (*sent).max(end);
        let class = if urgent { Class::LowLatency } else { Class::Bulk };
        for p in pieces {
            let w = &p.writer;
            let creds = Creds { uid: w.uid, gid: w.gid, groups: w.groups.clone(), trusted: w.trusted };
            let frame = ReplFrame::Chunk {
                stream: (self.me, slot),
                epoch,
                start: p.start,
                urgent,
                creds,
                data: p.bytes.to_vec(),
            };
            let end = p.start + p.bytes.len() as u64;
            let meta = Meta { log_bytes: 0, appended: Some(p.at), first: (!again).then_some((slot, end)) };
            self.send_frame(to, class, frame, meta);
        }
    }

    /// The part of `[start, end)` below the checkpoint this start found, read from the log
    /// file as it was then (published by the earlier nicfs or by recovery, so whole
    /// entries) and sent in chunks of whole entries; returns where it got to (None: nothing
    /// of the range lies there). Its writers' credentials died with the earlier nicfs: the
    /// chunks carry root's, as this node's recovery published what the log held
    /// (structurally); a replica checks the entries as any others.
    fn send_previous(&mut self, to: u32, slot: u32, epoch: u64, start: u64, end: u64, urgent: bool) -> Option<u64> {
        let (old, at) = self.previous.get(&slot).cloned()?;
        if start >= at {
            return None;
        }
        let until = end.min(at);
        let mut lsn = start;
        let class = if urgent { Class::LowLatency } else { Class::Bulk };
        while lsn < until {
            let max = CHUNK.min(repl::MAX_CHUNK as u64);
            let copy = match old.fetch(lsn, until, max) {
                Ok((copy, _)) if copy.end() > lsn => copy,
                Ok(_) => {
                    tracing::warn!(slot, lsn, until, node = to, "the old log file no longer holds what a member lacks");
                    return Some(lsn);
                }
                Err(e) => {
                    tracing::warn!(slot, lsn, error = %e, "cannot read the old log file");
                    return Some(lsn);
                }
            };
            let next = copy.end();
            let frame = ReplFrame::Chunk {
                stream: (self.me, slot),
                epoch,
                start: lsn,
                urgent,
                creds: Creds { uid: 0, gid: 0, groups: Vec::new(), trusted: false },
                data: copy.bytes,
            };
            self.send_frame(to, class, frame, Meta::default());
            lsn = next;
        }
        let sent = self.sent.entry((slot, to)).or_default();
        *sent = (*sent).max(lsn);
        Some(lsn)
    }

    /// Publishes the engine's state for the status file.
    fn snapshot(&mut self) {
        let now = Instant::now();
        let engine = &self.engine;
        let mut logs = Vec::new();
        for (&slot, mem) in &self.logs {
            let Some(log) = engine.log(slot) else { continue };
            let members = engine.members(slot).unwrap_or_default();
            if log.appended == 0 && members.is_empty() {
                continue;
            }
            let members = members
                .iter()
                .map(|&m| {
                    let acked = log.progress.get(&m).copied();
                    let a = acked.unwrap_or(log.reclaimed);
                    MemberStatus {
                        node: m,
                        acked_lsn: acked,
                        published_lsn: self.member_published.get(&(slot, m)).copied(),
                        lag_bytes: log.appended.saturating_sub(a),
                        lag_ms: u64::try_from(mem.lag(a, now).as_millis()).unwrap_or(u64::MAX),
                    }
                })
                .collect();
            logs.push(LogStatus {
                slot,
                appended_lsn: log.appended,
                replicated_lsn: log.replicated,
                reclaimed_lsn: log.reclaimed,
                memory_bytes: mem.held(),
                members,
            });
        }
        let st = ReplicationStatus {
            epoch: engine.epoch(),
            chain: engine.view().map(|v| v.nodes.clone()).unwrap_or_default(),
            logs,
            copies: self.copies.status(engine),
            fsyncs_waiting: engine.pending_fsyncs().count().saturating_sub(self.flushes.len()),
            peers: self.shared.stages.peers(&self.outbox.queues()),
            ..ReplicationStatus::default()
        };
        *self.shared.status.lock() = st;
    }
}
