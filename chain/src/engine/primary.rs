//! The primary side: this node's own logs — shipping chunks down the chain, per-member
//! progress, the fsync remainder, retransmission, the replicated and reclaim points.

use super::{Engine, Mutation};
use crate::msg::{Message, Output};
use crate::ranges::Prefix;
use crate::types::{Lsn, NodeId, StreamId};
use std::collections::BTreeMap;

/// How many chunks a timeout resends per log at most.
pub const RETRANSMIT_CHUNKS: Lsn = 8;

/// One of this node's logs, as replication sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PrimaryLog {
    /// The log's end: everything before is durable locally.
    pub appended: Lsn,
    /// Everything before was sent down the chain in the current view.
    pub shipped: Lsn,
    /// How far the local publishing pipeline published the log.
    pub published: Prefix,
    /// Per other chain member, the highest durable LSN it acknowledged; a member absent
    /// here has not answered its handshake yet.
    pub progress: BTreeMap<NodeId, Lsn>,
    /// Every member of the current chain has the log durable up to here (the slot header's
    /// replicated LSN; it drops when a member joins behind, until that member catches up).
    pub replicated: Lsn,
    /// Log space below is reclaimed: min(published, replicated), monotone.
    pub reclaimed: Lsn,
}

impl PrimaryLog {
    pub(crate) fn recovered(appended: Lsn, published: Lsn, replicated: Lsn, reclaimed: Lsn) -> PrimaryLog {
        PrimaryLog {
            appended,
            // What was sent beyond the replicated LSN before the crash is unknown: the
            // handshakes tell, and shipping restarts from there.
            shipped: replicated.max(reclaimed).min(appended),
            published: Prefix::at(published),
            progress: BTreeMap::new(),
            replicated,
            reclaimed,
        }
    }

    /// The lowest progress over `members`, if every one is known.
    fn min_progress(&self, members: &[NodeId]) -> Option<Lsn> {
        members.iter().map(|m| self.progress.get(m).copied()).try_fold(Lsn::MAX, |acc, p| Some(acc.min(p?)))
    }

    /// The lowest progress over the members that answered.
    fn min_known(&self, members: &[NodeId]) -> Option<Lsn> {
        members.iter().filter_map(|m| self.progress.get(m).copied()).min()
    }
}

impl Engine {
    pub(super) fn on_append(&mut self, slot: u32, end: Lsn, out: &mut Vec<Output>) {
        let log = self.logs.entry(slot).or_default();
        log.appended = log.appended.max(end);
        self.ship_full_chunks(slot, out);
    }

    /// Proactive replication: ship every full chunk not yet shipped.
    fn ship_full_chunks(&mut self, slot: u32, out: &mut Vec<Output>) {
        if self.members(slot).is_none_or(|m| m.is_empty()) {
            return;
        }
        let chunk = self.cfg.chunk;
        let log = &self.logs[&slot];
        let (from, mut to) = (log.shipped, log.shipped);
        while log.appended - to >= chunk {
            to += chunk;
        }
        self.send_range(slot, from, to, false, out);
        self.logs.get_mut(&slot).expect("exists").shipped = to;
    }

    /// Send `[from, to)` of log `slot` to this node's successor in chunk-sized pieces,
    /// never from reclaimed space.
    fn send_range(&self, slot: u32, from: Lsn, to: Lsn, urgent: bool, out: &mut Vec<Output>) {
        let Some(succ) = self.successor(StreamId { primary: self.cfg.id, slot }) else { return };
        let log = &self.logs[&slot];
        let mut start = from.max(log.reclaimed);
        let to = to.min(log.appended);
        while start < to {
            let end = to.min(start + self.cfg.chunk);
            out.push(Output::SendLog { to: succ, slot, epoch: self.epoch(), start, end, urgent });
            start = end;
        }
    }

    /// An fsync waits: ship, on the low-latency class, whatever of its targets was not
    /// shipped yet.
    pub(super) fn ship_fsync_remainders(&mut self, out: &mut Vec<Output>) {
        let mut want: BTreeMap<u32, Lsn> = BTreeMap::new();
        for f in self.fsyncs.values() {
            for &(s, lsn, _) in &f.targets {
                let w = want.entry(s.slot).or_default();
                *w = (*w).max(lsn);
            }
        }
        for (slot, lsn) in want {
            if self.members(slot).is_none_or(|m| m.is_empty()) {
                continue;
            }
            let log = &self.logs[&slot];
            let to = lsn.min(log.appended);
            if log.shipped < to {
                self.send_range(slot, log.shipped, to, true, out);
                self.logs.get_mut(&slot).expect("exists").shipped = to;
            }
        }
    }

    fn fsync_waits_on(&self, slot: u32) -> bool {
        self.fsyncs.values().any(|f| f.targets.iter().any(|(s, _, _)| s.slot == slot))
    }

    pub(super) fn on_ack(&mut self, from: NodeId, slot: u32, durable: Lsn, out: &mut Vec<Output>) {
        let Some(members) = self.members(slot) else { return };
        if !members.contains(&from) || !self.logs.contains_key(&slot) {
            return;
        }
        for f in self.fsyncs.values_mut() {
            for t in f.targets.iter_mut().filter(|t| t.0.slot == slot && durable >= t.1) {
                t.2 += 1;
            }
        }
        let urgent = self.fsync_waits_on(slot);
        let log = self.logs.get_mut(&slot).expect("checked");
        let first = !log.progress.contains_key(&from);
        let p = log.progress.entry(from).or_insert(0);
        *p = (*p).max(durable);
        let (p, reclaimed, shipped) = (*p, log.reclaimed, log.shipped);
        let stream = StreamId { primary: self.cfg.id, slot };
        if p < reclaimed {
            let msg = Message::Rebase { stream, epoch: self.epoch(), lsn: reclaimed };
            out.push(Output::Send { to: from, msg });
        } else if first && p < shipped {
            // A new member's handshake: resend from its durable end what was shipped.
            self.send_range(slot, p, shipped, urgent, out);
        }
    }

    /// The view changed: forget members that left, handshake with new ones, resend to the
    /// new successor what the members that stayed may lack, and ship what waited for a chain.
    pub(super) fn log_view_changed(&mut self, slot: u32, out: &mut Vec<Output>) {
        let members = self.members(slot).unwrap_or_default();
        let epoch = self.epoch();
        let urgent = self.fsync_waits_on(slot);
        let mutation = self.cfg.mutation;
        let log = self.logs.get_mut(&slot).expect("a known slot");
        log.progress.retain(|m, _| members.contains(m));
        let stream = StreamId { primary: self.cfg.id, slot };
        for &m in &members {
            if !log.progress.contains_key(&m) {
                if mutation == Mutation::JoinerAssumedCaughtUp {
                    log.progress.insert(m, log.shipped);
                } else {
                    out.push(Output::Send { to: m, msg: Message::Probe { stream, epoch } });
                }
            }
        }
        let (lo, shipped) = (log.min_known(&members), log.shipped);
        if let Some(lo) = lo {
            self.send_range(slot, lo, shipped, urgent, out);
        }
        self.ship_full_chunks(slot, out);
    }

    /// Timeouts: probe the members that did not answer, tell members below the reclaimed
    /// point to rebase, resend what some member lacks.
    pub(super) fn tick(&mut self, out: &mut Vec<Output>) {
        let epoch = self.epoch();
        let slots: Vec<u32> = self.logs.keys().copied().collect();
        for slot in slots {
            let Some(members) = self.members(slot) else { continue };
            let urgent = self.fsync_waits_on(slot);
            let log = &self.logs[&slot];
            let stream = StreamId { primary: self.cfg.id, slot };
            for &m in &members {
                match log.progress.get(&m) {
                    None => out.push(Output::Send { to: m, msg: Message::Probe { stream, epoch } }),
                    Some(&p) if p < log.reclaimed => {
                        let msg = Message::Rebase { stream, epoch, lsn: log.reclaimed };
                        out.push(Output::Send { to: m, msg });
                    }
                    Some(_) => {}
                }
            }
            if let Some(lo) = log.min_known(&members) {
                if lo < log.shipped && self.cfg.mutation != Mutation::NoRetransmit {
                    // A bounded window from the slowest member's durable end: a lost chunk
                    // is one of the first it lacks; resending everything at every timeout
                    // would flood a congested network.
                    let to = log.shipped.min(lo.max(log.reclaimed) + RETRANSMIT_CHUNKS * self.cfg.chunk);
                    self.send_range(slot, lo, to, urgent, out);
                }
            }
        }
    }

    /// Follow the log's replicated LSN (the current chain's minimum progress: it drops when
    /// a member joins behind) and raise the reclaim point as far as the rules allow.
    pub(super) fn update_marks(&mut self, slot: u32, out: &mut Vec<Output>) {
        let Some(members) = self.members(slot) else { return };
        let mutation = self.cfg.mutation;
        let log = self.logs.get_mut(&slot).expect("a known slot");
        let current = log.min_progress(&members).map(|m| m.min(log.appended));
        if let Some(lsn) = current {
            if lsn != log.replicated {
                log.replicated = lsn;
                out.push(Output::Replicated { slot, lsn });
            }
        }
        let upto = match (mutation, current) {
            (Mutation::ReclaimAtPublished, _) => log.published.end(),
            (_, Some(replicated)) => log.published.end().min(replicated),
            (_, None) => return,
        };
        if upto > log.reclaimed {
            log.reclaimed = upto;
            out.push(Output::Reclaim { stream: StreamId { primary: self.cfg.id, slot }, upto });
        }
    }
}
