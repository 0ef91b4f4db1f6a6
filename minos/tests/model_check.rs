//! The bounded model check CI runs: every mode, 3 nodes, 2 records.
//!
//! - `pair`: 2 concurrent writes to one record and a racing read, explored to the end (every
//!   interleaving, reordering and completion order of persists; in synch also one duplicated
//!   delivery), so deadlock freedom and the final-state checks are exercised; strict is
//!   bounded at depth 18 and scope at depth 24 to keep CI within minutes (their full spaces
//!   are in docs/MINOS.md).
//! - `standard`: 3 concurrent writes (two to one record) and a read per node, explored
//!   breadth-first to depth 12.
//!
//! The deeper run is `cargo run --release -p linefs-minos --example check` (docs/MINOS.md).
//! Each run prints its state counts.

use linefs_minos::check::{run, ModelCfg, Outcome};
use linefs_minos::Mode;

fn report(what: &str, o: &Outcome) {
    println!("{what:>9} {o}");
    assert!(o.ok(), "{what}: {o}");
}

fn pair(mode: Mode) {
    let (depth, dups) = match mode {
        Mode::Synch => (None, 1),
        Mode::Strict => (Some(18), 0),
        Mode::Scope => (Some(24), 0),
        _ => (None, 0),
    };
    let o = run(ModelCfg::pair(mode).with_duplicates(dups), depth, 2);
    report("pair", &o);
    assert!(o.unseen.is_empty(), "{mode}: coverage not reached: {:?}", o.unseen);
}

fn standard(mode: Mode) {
    report("standard", &run(ModelCfg::standard(mode), Some(12), 2));
}

#[test]
fn bounded_lin_synch() {
    pair(Mode::Synch);
    standard(Mode::Synch);
}

#[test]
fn bounded_lin_strict() {
    pair(Mode::Strict);
    standard(Mode::Strict);
}

#[test]
fn bounded_lin_renf() {
    pair(Mode::ReadEnforced);
    standard(Mode::ReadEnforced);
}

#[test]
fn bounded_lin_event() {
    pair(Mode::Eventual);
    standard(Mode::Eventual);
}

#[test]
fn bounded_lin_scope() {
    pair(Mode::Scope);
    standard(Mode::Scope);
}
