//! Lost and duplicated messages, crashes, recovery and rejoin (docs/MINOS.md, "Crashes,
//! recovery and rejoin"). The paper (section III-E) leaves recovery as future work; this is
//! ours.
//!
//! - [`Input::Tick`] (a driver timeout): the coordinator of a write still missing acks sends
//!   its INV again to the followers that have not acked; a scope end sends [PERSIST]sc again
//!   to the followers missing; a node rejoining sends REJOIN again to the peers that have not
//!   answered. And a node holding a record whose newest write it has not seen validated
//!   (the VAL was lost, or the write's coordinator crashed and forgot it) *re-drives* that
//!   write: it coordinates it itself, with the same timestamp and value, as a write without
//!   a client — INV to every other node, the mode's acks, the mode's validation. Completing
//!   a write is always allowed (its client was not answered, or was answered because it is
//!   complete), and aborting one could undo a value a reader saw, so orphaned writes are
//!   completed, never aborted.
//! - A crash loses the node's volatile state; its persistent memory keeps, per record, the
//!   newest persisted timestamp and value. [`Engine::recover`] rebuilds the records from it
//!   with the RDLock held (whether that write was validated is unknown until it is re-driven)
//!   and every global timestamp at zero, and sends REJOIN to every peer.
//! - A peer answering REJOIN forgets the restarted node's acks of its writes in progress
//!   (they came from the lost incarnation, whose volatile copy is gone) and sends CATCHUP
//!   with every record it holds. The restarted node applies each newer record as an INV
//!   (RDLock snatched, volatile update, persist) and holds its clients' requests until every
//!   peer answered: a write that completed before a request was made is then in its volatile
//!   memory, because every peer that acked it, and its coordinator, answered after holding
//!   it. Its held records are validated by re-driving on the next ticks.
//!
//! The transport must not deliver a message of a node's previous incarnation after the
//! node restarted (a crash closes the node's connections, and what they still carried is
//! lost): the model and the simulation drop everything in flight to and from a crashing node.

use super::Engine;
use super::Key;
use crate::engine::Stage;
use crate::mode::{Mode, Mutation};
use crate::msg::{Input, Message, Output, Value};
use crate::record::Record;
use crate::ts::{NodeId, NodeSet, Ts};
use crate::Config;

impl<K: Key> Engine<K> {
    /// A node restarted after a crash, from what its persistent memory holds: per record,
    /// the newest persisted timestamp and its value. Returns the engine and the REJOIN
    /// messages to send.
    pub fn recover(cfg: Config, persisted: impl IntoIterator<Item = (K, Ts, Value)>) -> (Engine<K>, Vec<Output<K>>) {
        let mut e = Engine::new(cfg);
        for (key, ts, value) in persisted {
            if ts == Ts::ZERO {
                continue;
            }
            let rec = Record { value, volatile_ts: ts, durable_ts: ts, rdlock: Some(ts), ..Record::default() };
            e.records.insert(key, rec);
        }
        let peers = e.followers();
        let mut out = vec![];
        if !peers.is_empty() && cfg.mutation != Mutation::NoCatchup {
            e.rejoining = Some(NodeSet::EMPTY);
            e.send_all(Message::Rejoin, &mut out);
        }
        (e, out)
    }

    /// A peer restarted: its acks of our writes came from the lost incarnation.
    pub(super) fn on_rejoin(&mut self, from: NodeId, out: &mut Vec<Output<K>>) {
        for w in self.coord.values_mut() {
            w.acks_c.remove(from);
            w.acks_p.remove(from);
        }
        for end in self.scope_ends.values_mut() {
            end.acks.remove(from);
        }
        let records = self
            .records
            .iter()
            .filter(|(_, r)| r.volatile_ts > Ts::ZERO)
            .map(|(k, r)| (k.clone(), r.volatile_ts, r.value.clone()))
            .collect();
        out.push(Output::Send { to: from, msg: Message::Catchup { records } });
    }

    /// A peer's records, while rejoining: each newer one is applied as an INV would be.
    pub(super) fn on_catchup(&mut self, from: NodeId, records: Vec<(K, Ts, Value)>, out: &mut Vec<Output<K>>) {
        let Some(mut answered) = self.rejoining else {
            return; // a copy, after the rejoin finished
        };
        for (key, ts, value) in records {
            let rec = self.rec(&key);
            if ts <= rec.volatile_ts {
                continue;
            }
            rec.snatch_rdlock(ts);
            rec.value = value.clone();
            rec.volatile_ts = ts;
            out.push(Output::Apply { key: key.clone(), ts, value: value.clone() });
            out.push(Output::Persist { key, ts, value });
        }
        answered.insert(from);
        self.rejoining = if answered.covers(self.followers()) { None } else { Some(answered) };
    }

    /// Whether this node has seen the write that made its volatile record validated, as the
    /// mode validates: VAL (synch, renf), VAL_P (strict), VAL_C (event, scope).
    fn validated_here(&self, r: &Record) -> bool {
        match self.cfg.mode {
            Mode::Synch | Mode::ReadEnforced => r.glb_volatile_ts >= r.volatile_ts && r.glb_durable_ts >= r.volatile_ts,
            Mode::Strict => r.glb_durable_ts >= r.volatile_ts,
            Mode::Eventual | Mode::Scope => r.glb_volatile_ts >= r.volatile_ts,
        }
    }

    /// A timeout: retransmit, and re-drive unvalidated writes.
    pub(super) fn tick(&mut self, out: &mut Vec<Output<K>>) {
        let followers = self.followers();
        if let Some(answered) = self.rejoining {
            for to in followers.iter().filter(|p| !answered.contains(*p)) {
                out.push(Output::Send { to, msg: Message::Rejoin });
            }
            return;
        }
        let mode = self.cfg.mode;
        if self.cfg.mutation != Mutation::NoRetransmit {
            for ((key, ts), w) in &self.coord {
                let need_p = mode.single_ack() || mode.tracks_ack_p();
                for to in followers.iter() {
                    let missing = match w.stage {
                        Stage::Consistency => !w.acks_c.contains(to) || (need_p && !w.acks_p.contains(to)),
                        Stage::Persistency => !w.acks_p.contains(to),
                    };
                    if missing {
                        let msg = Message::Inv { key: key.clone(), ts: *ts, value: w.value.clone(), scope: w.scope };
                        out.push(Output::Send { to, msg });
                    }
                }
            }
            for (scope, end) in &self.scope_ends {
                for to in followers.iter().filter(|f| !end.acks.contains(*f)) {
                    out.push(Output::Send { to, msg: Message::Persist { scope: *scope, writes: end.writes.clone() } });
                }
            }
        }
        if self.cfg.mutation == Mutation::NoRedrive {
            return;
        }
        let unvalidated: Vec<(K, Ts, Value)> = self
            .records
            .iter()
            .filter(|(k, r)| {
                r.volatile_ts > Ts::ZERO
                    && !self.validated_here(r)
                    && !self.coord.contains_key(&((*k).clone(), r.volatile_ts))
            })
            .map(|(k, r)| (k.clone(), r.volatile_ts, r.value.clone()))
            .collect();
        for (key, ts, value) in unvalidated {
            self.send_all(Message::Inv { key: key.clone(), ts, value: value.clone(), scope: None }, out);
            self.coordinate(key, ts, None, value, None);
        }
    }

    /// Whether a tick would do anything now (the model lets a timeout fire only then).
    pub fn tick_would_act(&self) -> bool {
        let mut probe = self.clone();
        let mut out = vec![];
        probe.handle(Input::Tick, &mut out);
        !out.is_empty() || probe != *self
    }
}
