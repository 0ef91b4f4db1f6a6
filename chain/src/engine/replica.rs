//! The replica side: this node's copies of other nodes' logs — accepting chunks in order,
//! forwarding them, persisting, acknowledging what is durable, publishing what is durable in
//! order, rebasing.

use super::{Engine, Mutation};
use crate::msg::{Message, Output};
use crate::ranges::Prefix;
use crate::types::{Data, Lsn, StreamId};

/// This node's copy of another node's log.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Copy {
    /// Everything before was handed to a persist (the end of the accepted prefix).
    pub received: Lsn,
    /// The contiguous prefix that is persisted.
    pub durable: Prefix,
    /// Publication was asked up to here.
    pub publishing: Lsn,
    /// The contiguous prefix that is published here.
    pub published: Prefix,
    /// The copy's space below is reclaimed (published here).
    pub reclaimed: Lsn,
    /// A state transfer to this LSN is under way (0: none).
    pub rebasing: Lsn,
}

impl Copy {
    pub(crate) fn recovered(durable: Lsn, published: Lsn) -> Copy {
        let published = published.min(durable);
        Copy {
            received: durable,
            durable: Prefix::at(durable),
            publishing: published,
            published: Prefix::at(published),
            reclaimed: published,
            rebasing: 0,
        }
    }
}

impl Engine {
    /// Acknowledge this node's durable prefix of `stream` to its primary.
    pub(super) fn ack(&mut self, stream: StreamId, out: &mut Vec<Output>) {
        let durable = self.copies.get(&stream).map_or(0, |c| c.durable.end());
        let msg = Message::Ack { stream, epoch: self.epoch(), durable };
        out.push(Output::Send { to: stream.primary, msg });
    }

    pub(super) fn on_chunk(&mut self, stream: StreamId, start: Lsn, data: Data, urgent: bool, out: &mut Vec<Output>) {
        let chain = self.view.as_ref().map(|v| v.chain(stream, self.cfg.replicas)).unwrap_or_default();
        if !chain.contains(&self.cfg.id) {
            return;
        }
        // Forward first, in parallel with the own persist: every chunk of the epoch goes on,
        // the successor keeps what continues its own copy.
        if let Some(succ) = self.successor(stream) {
            let msg = Message::Chunk { stream, epoch: self.epoch(), start, data: data.clone(), urgent };
            out.push(Output::Send { to: succ, msg });
        }
        // A range past the end of the LSN space is nothing a correct primary sends.
        let Some(end) = start.checked_add(data.len() as Lsn) else { return };
        let copy = self.copies.entry(stream).or_default();
        if start > copy.received && self.cfg.mutation != Mutation::GapAccepted {
            return; // a gap: the primary resends from this node's acknowledged end
        }
        if end <= copy.received {
            // A copy already held: acknowledge again (the first ack may have been lost).
            self.ack(stream, out);
            return;
        }
        let from = copy.received.max(start);
        let part = data.slice((from - start) as usize, data.len());
        copy.received = end;
        out.push(Output::Persist { stream, start: from, data: part });
        if self.cfg.mutation == Mutation::AckOnReceive {
            let msg = Message::Ack { stream, epoch: self.epoch(), durable: end };
            out.push(Output::Send { to: stream.primary, msg });
        }
        if self.cfg.mutation == Mutation::PublishUnpersisted {
            self.publish_more(stream, out);
        }
    }

    pub(super) fn copy_persisted(&mut self, stream: StreamId, start: Lsn, end: Lsn, out: &mut Vec<Output>) {
        let Some(copy) = self.copies.get_mut(&stream) else { return };
        if copy.durable.complete(start, end) && self.cfg.mutation != Mutation::AckOnReceive {
            self.ack(stream, out);
        }
        self.publish_more(stream, out);
    }

    /// Publish what every copy holds durable and has not asked yet (after a restart).
    pub(super) fn publish_all(&mut self, out: &mut Vec<Output>) {
        let streams: Vec<StreamId> = self.copies.keys().copied().collect();
        for s in streams {
            self.publish_more(s, out);
        }
    }

    /// Publish, in order, what is durable and not yet asked.
    fn publish_more(&mut self, stream: StreamId, out: &mut Vec<Output>) {
        let Some(copy) = self.copies.get_mut(&stream) else { return };
        let upto = if self.cfg.mutation == Mutation::PublishUnpersisted { copy.received } else { copy.durable.end() };
        if upto > copy.publishing {
            out.push(Output::Publish { stream, start: copy.publishing, end: upto });
            copy.publishing = upto;
        }
    }

    pub(super) fn copy_published(&mut self, stream: StreamId, start: Lsn, end: Lsn, out: &mut Vec<Output>) {
        let Some(copy) = self.copies.get_mut(&stream) else { return };
        copy.published.complete(start, end);
        let upto = copy.published.end().min(copy.durable.end());
        if upto > copy.reclaimed {
            copy.reclaimed = upto;
            out.push(Output::Reclaim { stream, upto });
        }
    }

    pub(super) fn on_rebase(&mut self, stream: StreamId, lsn: Lsn, out: &mut Vec<Output>) {
        let copy = self.copies.entry(stream).or_default();
        if lsn <= copy.durable.end() {
            self.ack(stream, out);
        } else if lsn > copy.rebasing {
            copy.rebasing = lsn;
            out.push(Output::Rebase { stream, lsn });
        }
    }

    pub(super) fn copy_rebased(&mut self, stream: StreamId, lsn: Lsn, out: &mut Vec<Output>) {
        let copy = self.copies.entry(stream).or_default();
        copy.durable.raise(lsn);
        copy.published.raise(lsn);
        copy.received = copy.received.max(lsn);
        copy.publishing = copy.publishing.max(lsn);
        if copy.rebasing <= lsn {
            copy.rebasing = 0;
        }
        self.ack(stream, out);
        self.publish_more(stream, out);
    }
}
