//! The bounded model check CI runs, per mode (3 nodes, 2 records; states explored printed):
//!
//! - `faulty` (a write, a racing read, a third node that follows) to the end twice: with one
//!   duplicated and one lost message, and with a crash and restart of any node at any point.
//!   Every coverage property must be seen, among them "a run ends with every client
//!   answered" (the deadlock and final-state checks are reached), a timeout's retransmission
//!   and re-drive, a restarted node catching up and answering a read.
//! - `pair` (2 concurrent writes to one record and a racing read; in lin-scope a scope of two
//!   writes): to the end in synch (with one duplicated delivery), renf and event; strict to
//!   depth 17 and scope to depth 18 (their full spaces are in docs/MINOS.md). Every coverage
//!   property but those seen only at a run's end must be seen.
//! - lin-scope: `scoped` (a scope of two writes and a racing read) to the end.
//! - `standard`: 3 concurrent writes (two to one record) and a read per node, explored
//!   breadth-first to depth 11.
//!
//! The deeper run is `cargo run --release -p linefs-minos --example check` (docs/MINOS.md).

use linefs_minos::check::{run, ModelCfg, Outcome};
use linefs_minos::Mode;

fn report(what: &str, o: &Outcome) {
    println!("{what:>16} {o}");
    assert!(o.ok(), "{what}: {o}");
}

/// Coverage that only a run reaching its end can show.
fn at_the_end(name: &str) -> bool {
    name.contains("run ended") || name.contains("run ends")
}

fn faulty(mode: Mode) {
    let o = run(ModelCfg::faulty(mode).with_duplicates(1).with_drops(1), None, 2);
    report("faulty dup+loss", &o);
    assert!(o.unseen.is_empty(), "{mode}: coverage not reached: {:?}", o.unseen);
    let o = run(ModelCfg::faulty(mode).with_crashes(1), None, 2);
    report("faulty crash", &o);
    assert!(o.unseen.is_empty(), "{mode}: coverage not reached: {:?}", o.unseen);
}

fn pair(mode: Mode) {
    let (depth, dups) = match mode {
        Mode::Synch => (None, 1),
        Mode::Strict => (Some(17), 0),
        Mode::Scope => (Some(18), 0),
        _ => (None, 0),
    };
    let o = run(ModelCfg::pair(mode).with_duplicates(dups), depth, 2);
    report("pair", &o);
    let unseen: Vec<_> = o.unseen.iter().filter(|n| depth.is_none() || !at_the_end(n)).collect();
    assert!(unseen.is_empty(), "{mode}: coverage not reached: {unseen:?}");
}

fn standard(mode: Mode) {
    report("standard", &run(ModelCfg::standard(mode), Some(11), 2));
}

#[test]
fn bounded_lin_synch() {
    faulty(Mode::Synch);
    pair(Mode::Synch);
    standard(Mode::Synch);
}

#[test]
fn bounded_lin_strict() {
    faulty(Mode::Strict);
    pair(Mode::Strict);
    standard(Mode::Strict);
}

#[test]
fn bounded_lin_renf() {
    faulty(Mode::ReadEnforced);
    pair(Mode::ReadEnforced);
    standard(Mode::ReadEnforced);
}

#[test]
fn bounded_lin_event() {
    faulty(Mode::Eventual);
    pair(Mode::Eventual);
    standard(Mode::Eventual);
}

/// A scope of two writes, explored to the end.
fn scoped(mode: Mode) {
    let o = run(ModelCfg::scoped(mode), None, 2);
    report("scoped", &o);
    assert!(o.unseen.is_empty(), "{mode}: coverage not reached: {:?}", o.unseen);
}

#[test]
fn bounded_lin_scope() {
    faulty(Mode::Scope);
    scoped(Mode::Scope);
    pair(Mode::Scope);
    standard(Mode::Scope);
}
