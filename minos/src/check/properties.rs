//! The properties the model checker verifies, after Table I of the MINOS paper.
//!
//! Table I states its invariants for one write at a time ("the volatileTS of the record is
//! the same across all nodes" once all consistency acks arrived). With concurrent writes to
//! one record and an asynchronous network those literal forms do not hold (a newer write may
//! already be half-applied), so each is checked in the form that concurrency keeps — the
//! reasons are in docs/MINOS.md:
//!
//! - 1 (concurrency): no deadlock — a state with nothing left to do (no message, no persist,
//!   no client able to invoke) has every client operation answered. No livelock: every
//!   action consumes a script operation, a message, a persist or a duplication credit, and
//!   each of those is finite, so every run of the model ends.
//! - 2a: when a record's RDLock is free on every node, its volatileTS and its
//!   glb_volatileTS are each equal on every node.
//! - 2b: once a coordinator holds every consistency ack of a write, every node's
//!   volatileTS of the record is at least the write's (same where no newer write exists).
//! - 2c: while a write lacks consistency acks, no node has glb_volatileTS equal to it.
//! - 3a: when the RDLock is free everywhere and no persistency validation of the record is
//!   under way (no write of it coordinated anywhere, no message or scope transaction about
//!   it in flight), glb_durableTS is equal on every node. Strict and scope need the
//!   qualifier: VAL_P and [VAL_P]sc travel after the RDLocks are released.
//! - 3b: while a write lacks persistency acks (synch ACK, strict/renf ACK_P, scope
//!   [ACK_P]sc of its scope), no node has glb_durableTS equal to it.
//! - 4 (legal values): glb_volatileTS ≤ volatileTS, glb_durableTS ≤ volatileTS, a held
//!   RDLock is owned by the write in the volatile record, the engine's durable timestamp is
//!   the model's persistent memory, ack sets contain only the write's followers.
//! - Linearizability of the client history (stateright's linearizability tester).
//! - Durability points, stated over the persistent memory a crash leaves: synch and strict
//!   writes return persisted on every node; synch and renf reads return only values
//!   persisted on every node; a lin-scope scope end returns with every write of the scope
//!   persisted on every node; at the end of every run (every mode, event too) every node has
//!   persisted the final value of every record.
//! - Coverage ("sometimes"): an obsolete write spins in handleObsolete; a read is answered.

use super::{broken, MinosModel, State};
use crate::engine::SpinStage;
use crate::mode::Mode;
use crate::msg::Message;
use crate::ts::Ts;
use stateright::semantics::ConsistencyTester;
use stateright::{Model, Property};

pub fn all() -> Vec<Property<MinosModel>> {
    vec![
        Property::always("no deadlock", |m, s| !deadlocked(m, s)),
        Property::always("linearizable", |_, s: &State| s.history.is_consistent()),
        Property::always("2a unlocked => volatileTS, glb_volatileTS agree", inv_2a),
        Property::always("2b all ACK_C => volatileTS >= TS_WR everywhere", inv_2b),
        Property::always("2c missing ACK_C => glb_volatileTS != TS_WR", inv_2c),
        Property::always("3a unlocked, quiet => glb_durableTS agrees", inv_3a),
        Property::always("3b missing ACK_P => glb_durableTS != TS_WR", inv_3b),
        Property::always("4 legal metadata and bookkeeping", inv_4),
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
        Property::sometimes("obsolete write spinning", |_, s: &State| {
            s.nodes.iter().any(|n| n.spins().any(|sp| sp.stage == SpinStage::Consistency))
        }),
        Property::sometimes("a read answered", |m, s: &State| {
            s.clients.iter().enumerate().any(|(i, c)| {
                !c.pending && c.next > 0 && matches!(m.cfg.scripts[i][c.next - 1], super::Op::Read { .. })
            })
        }),
    ]
}

pub fn property_names() -> Vec<&'static str> {
    all().into_iter().map(|p| p.name).collect()
}

fn terminal(m: &MinosModel, s: &State) -> bool {
    let mut actions = vec![];
    m.actions(s, &mut actions);
    actions.is_empty()
}

fn deadlocked(m: &MinosModel, s: &State) -> bool {
    terminal(m, s) && s.clients.iter().any(|c| c.pending)
}

fn keys(m: &MinosModel) -> std::ops::Range<u8> {
    0..m.cfg.keys
}

fn inv_2a(m: &MinosModel, s: &State) -> bool {
    keys(m).all(|k| {
        let recs: Vec<_> = s.nodes.iter().map(|n| n.record(&k)).collect();
        if recs.iter().any(|r| r.rdlock.is_some()) {
            return true;
        }
        recs.iter().all(|r| r.volatile_ts == recs[0].volatile_ts && r.glb_volatile_ts == recs[0].glb_volatile_ts)
    })
}

fn inv_2b(_: &MinosModel, s: &State) -> bool {
    s.nodes.iter().all(|c| {
        c.coordinating()
            .all(|(k, ts, w)| !w.acks_c.covers(c.followers()) || s.nodes.iter().all(|n| n.record(k).volatile_ts >= ts))
    })
}

fn inv_2c(_: &MinosModel, s: &State) -> bool {
    s.nodes.iter().all(|c| {
        c.coordinating().all(|(k, ts, w)| {
            w.acks_c.covers(c.followers()) || s.nodes.iter().all(|n| n.record(k).glb_volatile_ts != ts)
        })
    })
}

fn persistency_quiet(s: &State, k: u8) -> bool {
    let lists = |writes: &Vec<(u8, Ts)>| writes.iter().any(|(wk, _)| *wk == k);
    s.nodes
        .iter()
        .all(|n| n.coordinating().all(|(wk, _, _)| *wk != k) && n.scope_ends().all(|(_, e)| !lists(&e.writes)))
        && s.net.iter().all(|(_, _, msg)| match msg {
            Message::Persist { writes, .. } | Message::ValPScope { writes, .. } => !lists(writes),
            other => other.key() != Some(&k),
        })
}

fn inv_3a(m: &MinosModel, s: &State) -> bool {
    keys(m).all(|k| {
        let recs: Vec<_> = s.nodes.iter().map(|n| n.record(&k)).collect();
        if recs.iter().any(|r| r.rdlock.is_some()) || !persistency_quiet(s, k) {
            return true;
        }
        recs.iter().all(|r| r.glb_durable_ts == recs[0].glb_durable_ts)
    })
}

fn inv_3b(m: &MinosModel, s: &State) -> bool {
    let tracked = matches!(m.cfg.mode, Mode::Synch | Mode::Strict | Mode::ReadEnforced);
    s.nodes.iter().all(|c| {
        let writes_ok = !tracked
            || c.coordinating().all(|(k, ts, w)| {
                w.acks_p.covers(c.followers()) || s.nodes.iter().all(|n| n.record(k).glb_durable_ts != ts)
            });
        let scopes_ok = c.scope_ends().all(|(_, e)| {
            e.acks.covers(c.followers())
                || e.writes.iter().all(|(k, ts)| s.nodes.iter().all(|n| n.record(k).glb_durable_ts != *ts))
        });
        writes_ok && scopes_ok
    })
}

fn inv_4(m: &MinosModel, s: &State) -> bool {
    s.nodes.iter().enumerate().all(|(i, n)| {
        let records_ok = keys(m).all(|k| {
            let r = n.record(&k);
            r.glb_volatile_ts <= r.volatile_ts
                && r.glb_durable_ts <= r.volatile_ts
                && (r.rdlock.is_none() || r.rdlock == Some(r.volatile_ts))
                && r.durable_ts == s.pm[i][k as usize]
        });
        let followers = n.followers();
        let books_ok =
            n.coordinating().all(|(_, _, w)| w.acks_c.is_subset_of(followers) && w.acks_p.is_subset_of(followers))
                && n.scope_ends().all(|(_, e)| e.acks.is_subset_of(followers));
        records_ok && books_ok
    })
}

fn final_state(m: &MinosModel, s: &State) -> bool {
    if !terminal(m, s) {
        return true;
    }
    s.nodes.iter().all(|n| n.is_idle())
        && keys(m).all(|k| {
            let first = s.nodes[0].record(&k);
            s.nodes.iter().enumerate().all(|(i, n)| {
                let r = n.record(&k);
                r.rdlock.is_none()
                    && r.volatile_ts == first.volatile_ts
                    && r.value == first.value
                    && r.glb_volatile_ts == r.volatile_ts
                    && r.glb_durable_ts == first.glb_durable_ts
                    && s.pm[i][k as usize] == r.volatile_ts
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
                "    node {i} key {k}: value {:?} volatileTS {} glb_volatileTS {} glb_durableTS {} RDLock {} persisted {}\n",
                r.value.first().copied().unwrap_or(0),
                r.volatile_ts,
                r.glb_volatile_ts,
                r.glb_durable_ts,
                r.rdlock.map(|t| t.to_string()).unwrap_or_else(|| "free".into()),
                s.pm[i][k as usize],
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
