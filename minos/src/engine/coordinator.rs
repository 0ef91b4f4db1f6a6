//! The coordinator side: a local client's write, its acks, its validation, and lin-scope's
//! scope end ([PERSIST]sc transaction).
//!
//! A client write (Figure 2, lines 4-22) takes its timestamp from the local volatileTS,
//! snatches the RDLock, sends INV to every follower, updates the volatile record and starts
//! its persist, all in one step. It is then a [`CoordWrite`] until its acks arrive; what it
//! does then, and in which order, is the mode's (Figure 3, steps d, e, f):
//!
//! - synch: all ACK and own persist → glb_volatileTS = glb_durableTS = TS, release the
//!   RDLock if still owner, VAL, return;
//! - strict: all ACK_C and own persist → glb_volatileTS, release, VAL_C; then all ACK_P →
//!   glb_durableTS, VAL_P, return;
//! - renf: all ACK_C → glb_volatileTS, return; then all ACK_P and own persist →
//!   glb_durableTS, release, VAL;
//! - event, scope: all ACK_C → glb_volatileTS, release, VAL_C, return.
//!
//! Obsolete at the coordinator: the paper checks Obsolete(TS_WR) at lines 5 and 10 because
//! an INV of another node may slip in between making TS_WR and the local write. Here both
//! happen in one step from the current volatileTS, so TS_WR is always newer than it and the
//! check cannot fire; it is asserted instead of carrying a path that cannot run.

use super::{CoordWrite, Engine, Key, ScopeEnd, ScopePersist, Stage};
use crate::mode::{Mode, Mutation};
use crate::msg::{Message, OpId, Output, ScopeId, Value};
use crate::ts::{NodeId, NodeSet, Ts};

impl<K: Key> Engine<K> {
    pub(super) fn client_write(
        &mut self,
        op: OpId,
        key: K,
        value: Value,
        scope: Option<ScopeId>,
        out: &mut Vec<Output<K>>,
    ) {
        let id = self.cfg.id;
        let rec = self.records.entry(key.clone()).or_default();
        let ts = rec.volatile_ts.next_for(id);
        debug_assert!(!rec.obsolete(ts), "a fresh TS_WR is newer than volatileTS");
        rec.snatch_rdlock(ts);
        // Lines 9-13, atomic here (no WRLock needed): INV to all, then the local update.
        rec.value = value.clone();
        rec.volatile_ts = ts;
        self.send_all(Message::Inv { key: key.clone(), ts, value: value.clone(), scope }, out);
        let value_for_retransmit = value.clone();
        out.push(Output::Apply { key: key.clone(), ts, value: value.clone() });
        // Line 18 (step d): persist; awaited before step e only in synch and strict.
        out.push(Output::Persist { key: key.clone(), ts, value });
        if let Some(scope) = scope {
            self.open_scopes.entry(scope).or_default().push((key.clone(), ts));
        }
        self.coordinate(key, ts, Some(op), value_for_retransmit, scope);
    }

    /// Start coordinating (key, ts): a client's write, or one re-driven on a tick.
    pub(super) fn coordinate(&mut self, key: K, ts: Ts, op: Option<OpId>, value: Value, scope: Option<ScopeId>) {
        let w =
            CoordWrite { op, value, scope, acks_c: NodeSet::EMPTY, acks_p: NodeSet::EMPTY, stage: Stage::Consistency };
        self.coord.insert((key, ts), w);
    }

    pub(super) fn on_ack(&mut self, from: NodeId, key: K, ts: Ts, consistency: bool, persistency: bool) {
        let followers = self.followers();
        let counted = self.cfg.mutation == Mutation::AcksCounted;
        // Acks are sets: a second copy of an ack, or an ack of a write that already
        // finished, changes nothing.
        if let Some(w) = self.coord.get_mut(&(key, ts)) {
            let add = |set: &mut NodeSet| {
                if counted && set.contains(from) {
                    // The mutation: a counter, so the copy counts as one more follower.
                    if let Some(other) = followers.iter().find(|f| !set.contains(*f)) {
                        set.insert(other);
                    }
                } else {
                    set.insert(from);
                }
            };
            if consistency {
                add(&mut w.acks_c);
            }
            if persistency {
                add(&mut w.acks_p);
            }
        }
    }

    /// Step e's condition on consistency acks.
    fn all_consistency_acks(&self, w: &CoordWrite) -> bool {
        let followers = self.followers();
        if self.cfg.mutation == Mutation::ValBeforeAllAcks {
            return followers.is_empty() || !w.acks_c.is_empty();
        }
        w.acks_c.covers(followers)
    }

    pub(super) fn progress_writes(&mut self, out: &mut Vec<Output<K>>) -> bool {
        let mut moved = false;
        let keys: Vec<(K, Ts)> = self.coord.keys().cloned().collect();
        for (key, ts) in keys {
            moved |= self.progress_write(key, ts, out);
        }
        moved
    }

    fn progress_write(&mut self, key: K, ts: Ts, out: &mut Vec<Output<K>>) -> bool {
        let w = self.coord[&(key.clone(), ts)].clone();
        let mode = self.cfg.mode;
        let all_c = self.all_consistency_acks(&w);
        let all_p = w.acks_p.covers(self.followers());
        let own_persist = self.durable_here(&key, ts);
        let mut finished = false;
        let stage = match (mode, w.stage) {
            (Mode::Synch, Stage::Consistency) if all_c && own_persist => {
                self.rec(&key).raise_glb_volatile(ts);
                self.rec(&key).raise_glb_durable(ts);
                self.rec(&key).release_rdlock_if_owner(ts);
                self.send_all(Message::Val { key: key.clone(), ts }, out);
                done(out, w.op, &key, ts);
                finished = true;
                Stage::Consistency
            }
            (Mode::Strict, Stage::Consistency) if all_c && own_persist => {
                self.rec(&key).raise_glb_volatile(ts);
                self.rec(&key).release_rdlock_if_owner(ts);
                self.send_all(Message::ValC { key: key.clone(), ts }, out);
                Stage::Persistency
            }
            (Mode::Strict, Stage::Persistency) if all_p => {
                self.rec(&key).raise_glb_durable(ts);
                self.send_all(Message::ValP { key: key.clone(), ts }, out);
                done(out, w.op, &key, ts);
                finished = true;
                Stage::Persistency
            }
            (Mode::ReadEnforced, Stage::Consistency) if all_c => {
                self.rec(&key).raise_glb_volatile(ts);
                done(out, w.op, &key, ts);
                Stage::Persistency
            }
            (Mode::ReadEnforced, Stage::Persistency) if all_p && own_persist => {
                self.rec(&key).raise_glb_durable(ts);
                self.rec(&key).release_rdlock_if_owner(ts);
                self.send_all(Message::Val { key: key.clone(), ts }, out);
                finished = true;
                Stage::Persistency
            }
            (Mode::Eventual | Mode::Scope, Stage::Consistency) if all_c => {
                self.rec(&key).raise_glb_volatile(ts);
                self.rec(&key).release_rdlock_if_owner(ts);
                self.send_all(Message::ValC { key: key.clone(), ts }, out);
                done(out, w.op, &key, ts);
                finished = true;
                Stage::Consistency
            }
            _ => return false,
        };
        if finished {
            self.coord.remove(&(key, ts));
        } else {
            self.coord.get_mut(&(key, ts)).expect("still coordinated").stage = stage;
        }
        true
    }

    /// The client ends a scope: [PERSIST]sc to every follower, listing the scope's writes.
    pub(super) fn scope_end(&mut self, op: OpId, scope: ScopeId, out: &mut Vec<Output<K>>) {
        let writes = self.open_scopes.remove(&scope).unwrap_or_default();
        self.send_all(Message::Persist { scope, writes: writes.clone() }, out);
        self.scope_ends.insert(scope, ScopeEnd { op, writes, acks: NodeSet::EMPTY });
    }

    /// Scope ends (coordinator) and [PERSIST]sc requests (follower) whose persists are done.
    pub(super) fn progress_scopes(&mut self, out: &mut Vec<Output<K>>) -> bool {
        let mut moved = false;
        let followers = self.followers();
        let ends: Vec<ScopeId> = self.scope_ends.keys().copied().collect();
        for scope in ends {
            let end = &self.scope_ends[&scope];
            let local = end.writes.iter().all(|(k, ts)| self.durable_here(k, *ts));
            let mut done = end.acks.covers(followers) && local;
            if self.cfg.mutation == Mutation::ScopeEndsEarly {
                done = true;
            }
            if done {
                let end = self.scope_ends.remove(&scope).expect("listed");
                for (k, ts) in &end.writes {
                    self.records.entry(k.clone()).or_default().raise_glb_durable(*ts);
                }
                self.send_all(Message::ValPScope { scope, writes: end.writes }, out);
                out.push(Output::ScopeDone { op: end.op, scope });
                moved = true;
            }
        }
        let ready: Vec<ScopePersist<K>> = self
            .scope_persists
            .iter()
            .filter(|(_, _, writes)| writes.iter().all(|(k, ts)| self.durable_here(k, *ts)))
            .cloned()
            .collect();
        for p in ready {
            self.scope_persists.remove(&p);
            out.push(Output::Send { to: p.0, msg: Message::AckPScope { scope: p.1 } });
            moved = true;
        }
        moved
    }
}

/// The client's write returns (a write re-driven for another node has no client here).
fn done<K: Key>(out: &mut Vec<Output<K>>, op: Option<OpId>, key: &K, ts: Ts) {
    if let Some(op) = op {
        out.push(Output::WriteDone { op, key: key.clone(), ts });
    }
}
