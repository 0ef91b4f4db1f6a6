//! The chain replication engine of one node: primary of its own client logs, replica of
//! other nodes' logs.
//!
//! [`Engine::on_input`] takes one [`Input`] and returns the [`Output`]s it causes. After
//! every input the engine re-evaluates what may have moved (`Engine::settle`): fsync
//! remainders to ship, each log's replicated and reclaim points, fsyncs to complete. The
//! rules, in one place (docs/ARCHITECTURE.md, "Chain replication core", argues them):
//!
//! - **Order.** Only the primary appends; chunks flow down the chain primary → replica 1 →
//!   replica 2. A replica accepts a chunk only if it starts at or before the end of what it
//!   has already received (no gap), persists the new part, and forwards every chunk of the
//!   current epoch to its successor in the same step (in parallel with its own persist; the
//!   successor applies the same rule). Its copy is therefore always a prefix of the
//!   primary's log.
//! - **Acks mean durable.** A replica acknowledges to the primary (directly, LineFS §3.3.2
//!   step 5) the contiguous prefix of its copy that is *persisted*, never what it merely
//!   received. The primary keeps, per chain member, the highest durable LSN it was told
//!   (`progress`, a map keyed by node: a duplicated ack changes nothing).
//! - **Fsync.** An fsync names `(stream, lsn)` targets (the client's log and the lease
//!   records' stream); the remainder below each target is shipped at once on the low-latency
//!   class; the fsync completes when, in the engine's current view, the primary is in the
//!   chain and every other member has acknowledged each target. A view change re-evaluates
//!   the waiting fsyncs against the new chain: a removed member is no longer waited for; a
//!   new one is, once its handshake tells how far its copy is durable.
//! - **Reclaim.** A log's replicated LSN is the minimum durable LSN over its current chain's
//!   other members (all of them heard from; it drops when a member joins behind); the
//!   reclaim point is the smaller of that and what is published locally, and never moves
//!   back. A replica reclaims its copy up to what it published.
//! - **Epochs.** Every message carries its sender's epoch; `Engine::receive` drops one of
//!   another epoch before any handler sees it, reporting a newer one as
//!   [`Output::NewerEpoch`]. Views are taken only if newer.
//! - **Loss, duplicates, reordering, crashes.** Every handler is idempotent. On a tick the
//!   primary probes members it has not heard from and resends a bounded window from the
//!   slowest member's acknowledged end down the chain, from its own log (still there:
//!   nothing above the replicated LSN is reclaimed); a member's first answer in a view
//!   (its handshake) has everything shipped since its durable end resent at once;
//!   a replica re-acknowledges every duplicate chunk, so lost acks are recovered too. A member
//!   whose copy ends below the primary's reclaimed point is told to rebase (state transfer).
//!
//! Collections are ordered (BTreeMap) so that the engine's state is deterministic and
//! comparable, as the simulation's stale-epoch check needs.

mod primary;
mod replica;

use crate::msg::{Input, Message, Output, Recovered};
use crate::types::{Epoch, Lsn, NodeId, OpId, StreamId, View};
use std::collections::BTreeMap;

pub use primary::PrimaryLog;
pub use replica::Copy;

/// A deliberate bug, planted by the mutation tests to show that the checks catch it. Each
/// is one changed condition in the engine, marked with `Mutation::` at its use. Production
/// code never sets one: [`Config::new`] leaves it at [`Mutation::None`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mutation {
    #[default]
    None,
    /// A replica acknowledges what it received, before its persist completes.
    AckOnReceive,
    /// The primary counts acknowledgements per fsync target instead of keeping per-member
    /// progress: a duplicated ack counts as another member's.
    AcksCounted,
    /// Messages of another epoch are handled instead of dropped.
    NoEpochCheck,
    /// The reclaim point is what is published locally, ignoring replication.
    ReclaimAtPublished,
    /// A tick does not resend what is unacknowledged.
    NoRetransmit,
    /// A replica publishes what it received, not only what it persisted.
    PublishUnpersisted,
    /// A new chain member is assumed to hold everything shipped so far, without a handshake.
    JoinerAssumedCaughtUp,
    /// A replica accepts a chunk that starts beyond what it received (a gap).
    GapAccepted,
}

impl Mutation {
    pub const ALL: [Mutation; 8] = [
        Mutation::AckOnReceive,
        Mutation::AcksCounted,
        Mutation::NoEpochCheck,
        Mutation::ReclaimAtPublished,
        Mutation::NoRetransmit,
        Mutation::PublishUnpersisted,
        Mutation::JoinerAssumedCaughtUp,
        Mutation::GapAccepted,
    ];
}

/// Static configuration of a node's engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Config {
    pub id: NodeId,
    /// Replicas per log besides its primary (the chain is at most `replicas + 1` long).
    pub replicas: usize,
    /// Proactive shipping: a chunk leaves as soon as this many bytes are unshipped.
    pub chunk: Lsn,
    /// Only the mutation tests set this.
    pub mutation: Mutation,
}

impl Config {
    pub fn new(id: NodeId, replicas: usize, chunk: Lsn) -> Config {
        Config { id, replicas, chunk: chunk.max(1), mutation: Mutation::None }
    }
}

/// An fsync waiting: its targets, each with the count of acknowledgements at or above it
/// (kept only for [`Mutation::AcksCounted`]; the real rule reads the per-member progress).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PendingFsync {
    pub targets: Vec<(StreamId, Lsn, u32)>,
}

/// The chain replication engine of one node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Engine {
    cfg: Config,
    view: Option<View>,
    /// This node's logs, by slot.
    logs: BTreeMap<u32, PrimaryLog>,
    /// This node's copies of other nodes' logs.
    copies: BTreeMap<StreamId, Copy>,
    fsyncs: BTreeMap<OpId, PendingFsync>,
}

impl Engine {
    pub fn new(cfg: Config) -> Engine {
        Engine { cfg, view: None, logs: BTreeMap::new(), copies: BTreeMap::new(), fsyncs: BTreeMap::new() }
    }

    /// A restarted node: its logs and copies as its PM holds them. It has no view until the
    /// driver feeds one; its progress knowledge is re-learned by handshakes.
    pub fn recover(cfg: Config, recovered: impl IntoIterator<Item = Recovered>) -> Engine {
        let mut e = Engine::new(cfg);
        for r in recovered {
            match r {
                Recovered::Primary { slot, appended, published, replicated, reclaimed } => {
                    e.logs.insert(slot, PrimaryLog::recovered(appended, published, replicated, reclaimed));
                }
                Recovered::Replica { stream, durable, published } => {
                    if stream.primary != cfg.id {
                        e.copies.insert(stream, Copy::recovered(durable, published));
                    }
                }
            }
        }
        e
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn id(&self) -> NodeId {
        self.cfg.id
    }

    pub fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    pub fn epoch(&self) -> Epoch {
        self.view.as_ref().map_or(0, |v| v.epoch)
    }

    pub fn log(&self, slot: u32) -> Option<&PrimaryLog> {
        self.logs.get(&slot)
    }

    pub fn copy(&self, stream: StreamId) -> Option<&Copy> {
        self.copies.get(&stream)
    }

    pub fn pending_fsyncs(&self) -> impl Iterator<Item = (OpId, &PendingFsync)> {
        self.fsyncs.iter().map(|(op, f)| (*op, f))
    }

    /// The other members of the chain of this node's log `slot` in the current view; `None`
    /// when this node has no view or is not in it (it may then ship nothing and complete no
    /// fsync).
    pub fn members(&self, slot: u32) -> Option<Vec<NodeId>> {
        let view = self.view.as_ref()?;
        let chain = view.chain(StreamId { primary: self.cfg.id, slot }, self.cfg.replicas);
        if chain.is_empty() {
            return None;
        }
        Some(chain[1..].to_vec())
    }

    /// This node's successor in the chain of `stream` (`None` at the tail or outside it).
    fn successor(&self, stream: StreamId) -> Option<NodeId> {
        let chain = self.view.as_ref()?.chain(stream, self.cfg.replicas);
        let at = chain.iter().position(|&n| n == self.cfg.id)?;
        chain.get(at + 1).copied()
    }

    /// Whether a tick would do anything: a member not heard from, a member behind what was
    /// shipped, or an fsync waiting.
    pub fn tick_would_act(&self) -> bool {
        !self.fsyncs.is_empty()
            || self.copies.values().any(|c| c.publishing < c.durable.end())
            || self.logs.iter().any(|(&slot, log)| {
                self.members(slot).is_some_and(|m| {
                    m.iter().any(|n| log.progress.get(n).is_none_or(|&p| p < log.shipped || p < log.reclaimed))
                })
            })
    }

    /// Handle one input; returns what the driver must do.
    pub fn on_input(&mut self, input: Input) -> Vec<Output> {
        let mut out = Vec::new();
        self.handle(input, &mut out);
        out
    }

    /// Like [`Engine::on_input`], appending to a caller's buffer.
    pub fn handle(&mut self, input: Input, out: &mut Vec<Output>) {
        match input {
            Input::View(v) => self.on_view(v, out),
            Input::Append { slot, end } => self.on_append(slot, end, out),
            Input::Published { stream, start, end } => {
                if stream.primary == self.cfg.id {
                    self.logs.entry(stream.slot).or_default().published.complete(start, end);
                } else {
                    self.copy_published(stream, start, end, out);
                }
            }
            Input::Fsync { op, targets } => {
                if let Some(&(stream, _)) = targets.iter().find(|(s, _)| s.primary != self.cfg.id) {
                    out.push(Output::FsyncRefused { op, stream });
                    return;
                }
                for (s, _) in &targets {
                    self.logs.entry(s.slot).or_default();
                }
                let targets = targets.into_iter().map(|(s, l)| (s, l, 0)).collect();
                self.fsyncs.insert(op, PendingFsync { targets });
            }
            Input::Receive { from, msg } => self.receive(from, msg, out),
            Input::Persisted { stream, start, end } => self.copy_persisted(stream, start, end, out),
            Input::Rebased { stream, lsn } => self.copy_rebased(stream, lsn, out),
            Input::Tick => {
                self.tick(out);
                self.publish_all(out);
            }
        }
        self.settle(out);
    }

    /// The one entry point of messages: a message of another epoch than the view's is
    /// dropped here, before any handler sees it (a newer one is reported); so is one from a
    /// node outside the view.
    fn receive(&mut self, from: NodeId, msg: Message, out: &mut Vec<Output>) {
        let epoch = msg.epoch();
        if epoch != self.epoch() && self.cfg.mutation != Mutation::NoEpochCheck {
            if epoch > self.epoch() {
                out.push(Output::NewerEpoch { epoch, from });
            }
            return;
        }
        if !self.view.as_ref().is_some_and(|v| v.contains(from)) {
            return;
        }
        let stream = msg.stream();
        let mine = stream.primary == self.cfg.id;
        match msg {
            Message::Chunk { start, data, urgent, .. } if !mine => self.on_chunk(stream, start, data, urgent, out),
            Message::Ack { durable, .. } if mine => self.on_ack(from, stream.slot, durable, out),
            Message::Probe { .. } if !mine && from == stream.primary => self.ack(stream, out),
            Message::Rebase { lsn, .. } if !mine && from == stream.primary => self.on_rebase(stream, lsn, out),
            // A chunk or a handshake about this node's own log, or an ack of a log it does
            // not own: nothing a correct peer sends.
            _ => {}
        }
    }

    /// A newer view: adopt it; each log's chain is recomputed.
    fn on_view(&mut self, view: View, out: &mut Vec<Output>) {
        if view.epoch <= self.epoch() {
            return;
        }
        self.view = Some(view);
        // A restarted replica may hold durable bytes it has not published yet.
        self.publish_all(out);
        let slots: Vec<u32> = self.logs.keys().copied().collect();
        for slot in slots {
            self.log_view_changed(slot, out);
        }
    }

    /// Re-evaluate what may have moved after an input.
    fn settle(&mut self, out: &mut Vec<Output>) {
        self.ship_fsync_remainders(out);
        let slots: Vec<u32> = self.logs.keys().copied().collect();
        for slot in slots {
            self.update_marks(slot, out);
        }
        let done: Vec<OpId> = self.fsyncs.iter().filter(|(_, f)| self.fsync_complete(f)).map(|(op, _)| *op).collect();
        for op in done {
            self.fsyncs.remove(&op);
            out.push(Output::FsyncDone { op });
        }
    }

    /// Every target of `f` is durable on every member of its chain in the current view.
    fn fsync_complete(&self, f: &PendingFsync) -> bool {
        f.targets.iter().all(|&(stream, lsn, acks)| {
            let Some(members) = self.members(stream.slot) else { return false };
            let Some(log) = self.logs.get(&stream.slot) else { return false };
            if log.appended < lsn {
                return false;
            }
            if self.cfg.mutation == Mutation::AcksCounted {
                return acks as usize >= members.len();
            }
            members.iter().all(|m| log.progress.get(m).is_some_and(|&p| p >= lsn))
        })
    }
}

#[cfg(test)]
mod tests;
