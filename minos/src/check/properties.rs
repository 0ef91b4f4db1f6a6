//! The properties the model checker verifies, after Table I of the MINOS paper, and the
//! coverage properties that show each check is exercised.
//!
//! Table I states its invariants for one write at a time ("the volatileTS of the record is
//! the same across all nodes" once all consistency acks arrived). With concurrent writes to
//! one record, an asynchronous network and crashes those literal forms do not hold (a newer
//! write may already be half-applied; a node that acked may have crashed since), so each is
//! checked in the form that keeps its meaning — the reasons are in docs/MINOS.md:
//!
//! - 1 (concurrency): no deadlock — a state with nothing left to do (no message, no persist,
//!   no timeout that would act, no client able to invoke) has every client operation
//!   answered (a request abandoned by its node's crash excepted). No livelock: every action
//!   consumes a finite resource (timeouts a budget of 3 per node per loss or crash
//!   allowed, enough for every correct run explored), so every run ends, and one that retransmits without progress
//!   ends with a client waiting.
//! - 2a: when a record is readable on every node (caught up, RDLock free), its volatileTS
//!   and its glb_volatileTS are each equal on every node.
//! - 2b: once a coordinator holds every consistency ack of a write, and whenever a VAL or
//!   VAL_C is sent, every node (but one still rejoining) has volatileTS at least the write's.
//! - 2c: a node's glb_volatileTS is in every node's volatile memory (every node but one still
//!   rejoining has volatileTS at least it) — Table I's "not all ACK_C ⇒ glb_volatileTS is
//!   not TS_WR" in the form that survives re-driven writes and crashes.
//! - 3a: when the record is readable everywhere and no persistency validation of it is
//!   under way (nothing in flight about it, no timeout that would re-drive it), glb_durableTS is equal on every node (in lin-scope only without faults: a
//!   lost [VAL_P]sc is not retransmitted, and its loss costs nothing).
//! - 3b: a node's glb_durableTS is in every node's persistent memory.
//! - 4 (legal values): glb_volatileTS ≤ volatileTS, glb_durableTS ≤ volatileTS, a held
//!   RDLock is owned by the write in the volatile record, the engine's durable timestamp is
//!   the persistent memory's, ack sets contain only the write's followers.
//! - Values: every Apply, Persist and read answer carries the value its write wrote; the
//!   driver's store only moves forward; each engine's record equals its driver's store (the
//!   same timestamp and value). With the final state below and linearizability, every node
//!   holds and has persisted what linearizability and the mode's durability promise.
//! - Linearizability of the client history (stateright's linearizability tester).
//! - Durability points, stated over the persistent memory a crash leaves: synch and strict
//!   writes return persisted on every node; synch and renf reads return only values
//!   persisted on every node; a lin-scope scope end returns with every write of the scope
//!   persisted on every node; at the end of every run (every mode, event too) every node has
//!   persisted the final value of every record.
//! - Coverage ("sometimes"), per mode and fault budget: each check above has its premise
//!   true in some explored state — a run ends, a write is validated, a record is unlocked
//!   everywhere after a write, durable writes and reads are answered, a scope of two writes
//!   ends; with faults, a timeout retransmits or re-drives, a restarted node catches up and
//!   answers a read. [`for_cfg`] lists them; CI requires every one seen.

use super::{broken, seen, MinosModel, ModelCfg, State};
use crate::engine::SpinStage;
use crate::mode::Mode;
use crate::msg::Message;
use crate::ts::Ts;
use stateright::semantics::ConsistencyTester;
use stateright::Property;

/// The properties of a configuration: every safety property, and the coverage properties
/// that apply to its mode, workload and fault budgets.
pub fn for_cfg(cfg: &ModelCfg) -> Vec<Property<MinosModel>> {
    let mode = cfg.mode;
    let mut p = vec![
        Property::always("no deadlock", |m, s| !deadlocked(m, s)),
        Property::always("linearizable", |_, s: &State| s.history.is_consistent()),
        Property::always("2a unlocked => volatileTS, glb_volatileTS agree", inv_2a),
        Property::always("2b all ACK_C or validated => volatileTS >= TS_WR everywhere", inv_2b),
        Property::always("2c glb_volatileTS is in every volatile memory", inv_2c),
        Property::always("3a unlocked, quiet => glb_durableTS agrees", inv_3a),
        Property::always("3b glb_durableTS is in every persistent memory", inv_3b),
        Property::always("4 legal metadata and bookkeeping", inv_4),
        Property::always("values: applied, persisted and read values are the writes'", |_, s: &State| {
            s.broken & broken::WRONG_VALUE == 0
        }),
        Property::always("values: the store never moves back to an older write", |_, s: &State| {
            s.broken & broken::STORE_BACKWARDS == 0
        }),
        Property::always("values: each engine's record is its store's and its PM's", values_agree),
        Property::always("synch/strict: write returns persisted everywhere", |_, s: &State| {
            s.broken & broken::WRITE_NOT_DURABLE == 0
        }),
        Property::always("synch/renf: reads see only values persisted everywhere", |_, s: &State| {
            s.broken & broken::READ_NOT_DURABLE == 0
        }),
        Property::always("scope: scope end returns with its writes persisted everywhere", |_, s: &State| {
            s.broken & broken::SCOPE_NOT_DURABLE == 0
        }),
        Property::always("final state: agreed and persisted everywhere", final_state),
        Property::sometimes("a run ends with every client answered", |m, s| terminal(m, s) && !deadlocked(m, s)),
        Property::sometimes("a write validated (2b checked at a VAL)", |_, s: &State| {
            s.seen & seen::VALIDATION_SENT != 0
        }),
        Property::sometimes("a written record unlocked everywhere (2a, 3a premise)", |m, s: &State| {
            keys(m).any(|k| {
                s.nodes.iter().all(|n| n.readable(&k)) && s.nodes.iter().any(|n| n.record(&k).volatile_ts > Ts::ZERO)
            })
        }),
        Property::sometimes("glb_volatileTS set (2c premise)", |_, s: &State| {
            s.nodes.iter().any(|n| n.records().any(|(_, r)| r.glb_volatile_ts > Ts::ZERO))
        }),
        Property::sometimes("a read answered with a written value", |_, s: &State| {
            s.seen & seen::READ_RETURNED_WRITTEN != 0
        }),
        Property::sometimes("a follower persisted a write (value checked)", |_, s: &State| {
            s.seen & seen::FOLLOWER_PERSISTED != 0
        }),
    ];
    let contended = {
        let mut writers = vec![];
        for sc in &cfg.scripts {
            for op in sc {
                if let super::Op::Write { key, .. } = op {
                    writers.push(*key);
                }
            }
        }
        writers.iter().enumerate().any(|(i, k)| writers[..i].contains(k))
    };
    if contended {
        p.push(Property::sometimes("obsolete write spinning", |_, s: &State| {
            s.nodes.iter().any(|n| n.spins().any(|sp| sp.stage == SpinStage::Consistency))
        }));
    }
    if mode != Mode::Eventual {
        p.push(Property::sometimes("glb_durableTS set (3a, 3b premise)", |_, s: &State| {
            s.nodes.iter().any(|n| n.records().any(|(_, r)| r.glb_durable_ts > Ts::ZERO))
        }));
    }
    if matches!(mode, Mode::Synch | Mode::Strict | Mode::ReadEnforced) {
        p.push(Property::sometimes("all consistency acks held while coordinating (2b premise)", |_, s: &State| {
            s.nodes.iter().any(|c| c.coordinating().any(|(_, _, w)| w.acks_c.covers(c.followers())))
        }));
    }
    if mode.write_returns_durable() {
        p.push(Property::sometimes("a write returned (durability checked)", |_, s: &State| {
            s.seen & seen::WRITE_RETURNED_DURABLE != 0
        }));
    }
    if mode == Mode::Scope
        && cfg.scripts.iter().any(|sc| sc.iter().filter(|o| matches!(o, super::Op::Write { .. })).count() >= 2)
    {
        p.push(Property::sometimes("a scope of two writes ended (durability checked)", |_, s: &State| {
            s.seen & seen::SCOPE_OF_TWO_ENDED != 0
        }));
    }
    if cfg.duplicates > 0 {
        p.push(Property::sometimes("a copy delivered, then the run ended", |m, s: &State| {
            s.duplicates_left < m.cfg.duplicates && terminal(m, s) && !deadlocked(m, s)
        }));
    }
    if cfg.drops > 0 {
        p.push(Property::sometimes("a message lost, then the run ended", |m, s: &State| {
            s.faults > 0 && terminal(m, s) && !deadlocked(m, s)
        }));
        p.push(Property::sometimes("a timeout retransmitted", |_, s: &State| s.seen & seen::RETRANSMITTED != 0));
        p.push(Property::sometimes("a timeout re-drove an unvalidated write", |_, s: &State| {
            s.seen & seen::REDRIVEN != 0
        }));
    }
    if cfg.crashes > 0 {
        p.push(Property::sometimes("a node crashed, then the run ended", |m, s: &State| {
            s.restarted != 0 && terminal(m, s) && !deadlocked(m, s)
        }));
        p.push(Property::sometimes("a restarted node caught up", |_, s: &State| s.seen & seen::CAUGHT_UP != 0));
        p.push(Property::sometimes("a restarted node answered a read", |_, s: &State| {
            s.seen & seen::READ_AFTER_RESTART != 0
        }));
        p.push(Property::sometimes("a timeout re-drove an unvalidated write", |_, s: &State| {
            s.seen & seen::REDRIVEN != 0
        }));
    }
    p
}

/// The names of the properties checked for `cfg`.
pub fn property_names(cfg: &ModelCfg) -> Vec<&'static str> {
    for_cfg(cfg).into_iter().map(|p| p.name).collect()
}

/// Nothing left to do: no message or persist in flight, no client able to invoke, no
/// timeout that would act. (A crash is always possible while the budget lasts; it is not
/// progress, so a state where only a crash could happen counts as terminal.)
fn terminal(m: &MinosModel, s: &State) -> bool {
    s.net.is_empty()
        && s.persists.is_empty()
        && s.clients.iter().enumerate().all(|(i, c)| c.pending || c.next >= m.cfg.scripts[i].len())
        && s.nodes.iter().enumerate().all(|(i, n)| s.ticks_left[i] == 0 || !n.tick_would_act())
}

fn deadlocked(m: &MinosModel, s: &State) -> bool {
    terminal(m, s) && s.clients.iter().any(|c| c.pending)
}

fn keys(m: &MinosModel) -> std::ops::Range<u8> {
    0..m.cfg.keys
}

fn inv_2a(m: &MinosModel, s: &State) -> bool {
    keys(m).all(|k| {
        if !s.nodes.iter().all(|n| n.readable(&k)) {
            return true;
        }
        let recs: Vec<_> = s.nodes.iter().map(|n| n.record(&k)).collect();
        recs.iter().all(|r| r.volatile_ts == recs[0].volatile_ts && r.glb_volatile_ts == recs[0].glb_volatile_ts)
    })
}

/// Every node but one still rejoining holds (k, ts) or a newer write in volatile memory.
fn everywhere_volatile(s: &State, k: u8, ts: Ts) -> bool {
    s.nodes.iter().all(|n| n.is_rejoining() || n.record(&k).volatile_ts >= ts)
}

fn inv_2b(_: &MinosModel, s: &State) -> bool {
    s.broken & broken::VALIDATED_EARLY == 0
        && s.nodes.iter().all(|c| {
            c.coordinating().all(|(k, ts, w)| !w.acks_c.covers(c.followers()) || everywhere_volatile(s, *k, ts))
        })
}

fn inv_2c(m: &MinosModel, s: &State) -> bool {
    keys(m).all(|k| s.nodes.iter().all(|n| everywhere_volatile(s, k, n.record(&k).glb_volatile_ts)))
}

fn persistency_quiet(s: &State, k: u8) -> bool {
    let lists = |writes: &Vec<(u8, Ts)>| writes.iter().any(|(wk, _)| *wk == k);
    s.nodes
        .iter()
        .all(|n| n.coordinating().all(|(wk, _, _)| *wk != k) && n.scope_ends().all(|(_, e)| !lists(&e.writes)))
        && s.net.iter().all(|(_, _, msg)| match msg {
            Message::Persist { writes, .. } | Message::ValPScope { writes, .. } => !lists(writes),
            Message::Rejoin | Message::Catchup { .. } => false,
            other => other.key() != Some(&k),
        })
}

fn inv_3a(m: &MinosModel, s: &State) -> bool {
    if m.cfg.mode == Mode::Scope && s.faults > 0 {
        return true;
    }
    keys(m).all(|k| {
        if !s.nodes.iter().all(|n| n.readable(&k)) || !persistency_quiet(s, k) {
            return true;
        }
        // A validation lost on the way (VAL_P in strict) is not over until a timeout
        // re-drives it.
        if s.faults > 0 && s.nodes.iter().any(|n| n.tick_would_act()) {
            return true;
        }
        let recs: Vec<_> = s.nodes.iter().map(|n| n.record(&k)).collect();
        recs.iter().all(|r| r.glb_durable_ts == recs[0].glb_durable_ts)
    })
}

fn inv_3b(m: &MinosModel, s: &State) -> bool {
    keys(m).all(|k| {
        s.nodes.iter().all(|n| {
            let g = n.record(&k).glb_durable_ts;
            s.pm.iter().all(|pm| pm[k as usize].0 >= g)
        })
    })
}

fn inv_4(m: &MinosModel, s: &State) -> bool {
    s.nodes.iter().enumerate().all(|(i, n)| {
        let records_ok = keys(m).all(|k| {
            let r = n.record(&k);
            r.glb_volatile_ts <= r.volatile_ts
                && r.glb_durable_ts <= r.volatile_ts
                && (r.rdlock.is_none() || r.rdlock == Some(r.volatile_ts))
                && r.durable_ts == s.pm[i][k as usize].0
        });
        let followers = n.followers();
        let books_ok =
            n.coordinating().all(|(_, _, w)| w.acks_c.is_subset_of(followers) && w.acks_p.is_subset_of(followers))
                && n.scope_ends().all(|(_, e)| e.acks.is_subset_of(followers));
        records_ok && books_ok
    })
}

fn values_agree(m: &MinosModel, s: &State) -> bool {
    s.nodes.iter().enumerate().all(|(i, n)| {
        keys(m).all(|k| {
            let r = n.record(&k);
            let (ts, v) = s.store[i][k as usize];
            r.volatile_ts == ts && r.value.first().copied().unwrap_or(0) == v
        })
    })
}

fn final_state(m: &MinosModel, s: &State) -> bool {
    if !terminal(m, s) {
        return true;
    }
    // glb_durableTS is never set in event; in scope a restarted node only learns it from
    // later scopes, and a lost [VAL_P]sc is not retransmitted.
    let durable_agrees = matches!(m.cfg.mode, Mode::Synch | Mode::Strict | Mode::ReadEnforced) || s.faults == 0;
    s.nodes.iter().all(|n| n.is_idle())
        && keys(m).all(|k| {
            let first = s.nodes[0].record(&k);
            let value = MinosModel::written(s, k, first.volatile_ts);
            s.nodes.iter().enumerate().all(|(i, n)| {
                let r = n.record(&k);
                r.rdlock.is_none()
                    && r.volatile_ts == first.volatile_ts
                    && value == Some(r.value.first().copied().unwrap_or(0))
                    && r.glb_volatile_ts == r.volatile_ts
                    && (!durable_agrees || r.glb_durable_ts == first.glb_durable_ts)
                    && s.pm[i][k as usize].0 == r.volatile_ts
                    && Some(s.pm[i][k as usize].1) == value
            })
        })
}

/// The last state of a trace, for the report: per node and record, the metadata.
pub fn describe(m: &MinosModel, s: &State) -> String {
    let mut out = String::new();
    for (i, n) in s.nodes.iter().enumerate() {
        for k in keys(m) {
            let r = n.record(&k);
            out.push_str(&format!(
                "    node {i} key {k}: value {:?} volatileTS {} glb_volatileTS {} glb_durableTS {} RDLock {} persisted {} value {}{}\n",
                r.value.first().copied().unwrap_or(0),
                r.volatile_ts,
                r.glb_volatile_ts,
                r.glb_durable_ts,
                r.rdlock.map(|t| t.to_string()).unwrap_or_else(|| "free".into()),
                s.pm[i][k as usize].0,
                s.pm[i][k as usize].1,
                if n.is_rejoining() { " (rejoining)" } else { "" },
            ));
        }
    }
    let pending: Vec<usize> = s.clients.iter().enumerate().filter(|(_, c)| c.pending).map(|(i, _)| i).collect();
    out.push_str(&format!(
        "    in flight: {} message(s), {} persist(s); clients waiting: {pending:?}\n",
        s.net.len(),
        s.persists.len()
    ));
    out
}
