//! The follower side (Figure 2, lines 23-44, with Figure 3's changes), and handleObsolete,
//! which both sides share.
//!
//! On an INV a follower first checks Obsolete(TS_WR). An obsolete write is skipped: no
//! volatile update, no persist, but before acking it the follower runs handleObsolete —
//! ConsistencySpin (wait until glb_volatileTS reaches the volatileTS that made the write
//! obsolete: the newer write is then in every node's volatile memory) and, in synch, strict
//! and renf, PersistencySpin (wait until glb_durableTS reaches it). Synch acks with one ACK
//! after both; strict and renf send ACK_C after the first and ACK_P after the second; event
//! and scope send ACK_C after ConsistencySpin only.
//!
//! A write that is not obsolete snatches the RDLock, updates the volatile record, starts its
//! persist, and acks: synch with ACK once the persist completed; strict and renf with ACK_C
//! at once and ACK_P once persisted; event and scope with ACK_C at once (the persist goes on
//! in the background).
//!
//! An INV whose TS_WR equals the local volatileTS is a copy of one already applied (a
//! timestamp names one write): a duplicate, a retransmission after a lost ack, or a write
//! re-driven by another node. It changes nothing but is acked again as the first copy was
//! (the ack may have been lost); it must not retake the RDLock, whose VAL may have been
//! consumed already.
//!
//! The validation messages raise glb_volatileTS (VAL, VAL_C) and glb_durableTS (VAL in synch
//! and renf, VAL_P) and release the RDLock if the validated write still owns it. A validation
//! of a write newer than the volatile record is ignored: only a node that acked the write and
//! then lost it in a crash can receive one.

use super::{Engine, Key, Spin, SpinFor, SpinStage};
use crate::mode::{Mode, Mutation};
use crate::msg::{Message, Output, Value};
use crate::ts::{NodeId, Ts};

impl<K: Key> Engine<K> {
    pub(super) fn on_inv(&mut self, from: NodeId, key: K, ts: Ts, value: Value, out: &mut Vec<Output<K>>) {
        let mutation = self.cfg.mutation;
        let rec = self.rec(&key);
        if ts == rec.volatile_ts {
            if mutation != Mutation::DuplicateInvNotReacked {
                self.ack_applied(from, key, ts, out);
            }
            return;
        }
        if rec.obsolete(ts) && mutation != Mutation::ObsoleteApplied {
            let target = rec.volatile_ts;
            if mutation == Mutation::ObsoleteValueApplied {
                out.push(Output::Apply { key: key.clone(), ts, value });
            }
            let spin = Spin { key, ts, target, stage: SpinStage::Consistency, on_behalf: SpinFor::Coordinator(from) };
            self.spins.insert(spin);
            return;
        }
        let old = std::mem::replace(&mut rec.value, value.clone());
        rec.snatch_rdlock(ts);
        rec.volatile_ts = ts;
        out.push(Output::Apply { key: key.clone(), ts, value: value.clone() });
        let persisted = if mutation == Mutation::WrongValuePersisted { old } else { value };
        out.push(Output::Persist { key: key.clone(), ts, value: persisted });
        self.ack_applied(from, key, ts, out);
    }

    /// Ack an INV applied here (its first copy or a later one): synch's ACK once persisted;
    /// ACK_C at once in the other modes, and in strict and renf ACK_P once persisted.
    fn ack_applied(&mut self, from: NodeId, key: K, ts: Ts, out: &mut Vec<Output<K>>) {
        let mode = self.cfg.mode;
        if mode == Mode::Synch && self.cfg.mutation == Mutation::SynchPersistNotAwaited {
            out.push(Output::Send { to: from, msg: Message::Ack { key, ts } });
            return;
        }
        if !mode.single_ack() {
            out.push(Output::Send { to: from, msg: Message::AckC { key: key.clone(), ts } });
        }
        if mode.single_ack() || mode.tracks_ack_p() {
            self.persist_acks.insert((key, ts, from));
        }
    }

    pub(super) fn on_val(&mut self, key: K, ts: Ts, consistency: bool, persistency: bool) {
        let mutation = self.cfg.mutation;
        let rec = self.rec(&key);
        if ts > rec.volatile_ts {
            // The validation of a write this node acked and then lost in a crash (its ack
            // counted before the peer learnt of the restart): not true here. The write comes
            // back with the catch-up and is validated again by re-driving.
            return;
        }
        if consistency {
            rec.raise_glb_volatile(ts);
        }
        if persistency {
            rec.raise_glb_durable(ts);
        }
        if consistency && mutation != Mutation::RdLockNotReleased {
            rec.release_rdlock_if_owner(ts);
        }
    }

    /// Follower acks that waited for the local persist of their update.
    pub(super) fn progress_persist_acks(&mut self, out: &mut Vec<Output<K>>) -> bool {
        let ready: Vec<(K, Ts, NodeId)> =
            self.persist_acks.iter().filter(|(k, ts, _)| self.durable_here(k, *ts)).cloned().collect();
        for (key, ts, to) in &ready {
            self.persist_acks.remove(&(key.clone(), *ts, *to));
            let msg = if self.cfg.mode.single_ack() {
                Message::Ack { key: key.clone(), ts: *ts }
            } else {
                Message::AckP { key: key.clone(), ts: *ts }
            };
            out.push(Output::Send { to: *to, msg });
        }
        !ready.is_empty()
    }

    /// handleObsolete: advance every spinning obsolete write whose condition now holds.
    pub(super) fn progress_spins(&mut self, out: &mut Vec<Output<K>>) -> bool {
        let mode = self.cfg.mode;
        let ready: Vec<Spin<K>> = self
            .spins
            .iter()
            .filter(|s| {
                let rec = self.records.get(&s.key);
                let reached = |f: fn(&crate::Record) -> Ts| rec.is_some_and(|r| f(r) >= s.target);
                match s.stage {
                    SpinStage::Consistency => reached(|r| r.glb_volatile_ts),
                    SpinStage::Persistency => reached(|r| r.glb_durable_ts),
                }
            })
            .cloned()
            .collect();
        for spin in &ready {
            self.spins.remove(spin);
            let (key, ts) = (spin.key.clone(), spin.ts);
            let finished = match spin.stage {
                SpinStage::Consistency => {
                    if let SpinFor::Coordinator(to) = spin.on_behalf {
                        if !mode.single_ack() {
                            out.push(Output::Send { to, msg: Message::AckC { key: key.clone(), ts } });
                        }
                    }
                    if mode.persistency_spin() {
                        self.spins.insert(Spin { stage: SpinStage::Persistency, ..spin.clone() });
                        false
                    } else {
                        true
                    }
                }
                SpinStage::Persistency => {
                    if let SpinFor::Coordinator(to) = spin.on_behalf {
                        let msg = if mode.single_ack() {
                            Message::Ack { key: key.clone(), ts }
                        } else {
                            Message::AckP { key: key.clone(), ts }
                        };
                        out.push(Output::Send { to, msg });
                    }
                    true
                }
            };
            if let (true, SpinFor::Client(op)) = (finished, spin.on_behalf) {
                out.push(Output::WriteDone { op, key, ts });
            }
        }
        !ready.is_empty()
    }
}
