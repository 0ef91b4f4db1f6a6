//! The bounded model check CI runs (3 nodes, chains of 3, one client appending and calling
//! fsync; states explored printed), each to the end: with one lost and one duplicated
//! message, with a crash and restart of any node at any point, with a view change (a replica
//! removed: with chains of 3 on 3 nodes it shrinks the chain; with chains of 2 a new member
//! joins behind the reclaimed point and rebases), and the two-chunk script (a chunk shipped
//! proactively, the remainder by the fsync) without faults. Every coverage property must be
//! seen. Deeper runs (the two-chunk script with faults, two view changes):
//! `cargo run --release -p linefs-chain --example check -- --help`.

use linefs_chain::check::{run, ModelCfg, Outcome};

fn report(what: &str, o: &Outcome) {
    println!("{what:>16}: {o}");
    assert!(o.ok(), "{what}: {o}");
    assert!(o.unseen.is_empty(), "{what}: coverage not reached: {:?}", o.unseen);
}

#[test]
fn bounded_loss_and_duplicate() {
    report("loss+dup", &run(ModelCfg::small().with_drops(1).with_duplicates(1), 2));
}

#[test]
fn bounded_crash() {
    report("crash", &run(ModelCfg::small().with_crashes(1), 2));
}

#[test]
fn bounded_view_changes() {
    report("views", &run(ModelCfg::small().with_views(1), 2));
    report("views, joiner", &run(ModelCfg::small().short_chains().with_views(1), 2));
}

#[test]
fn bounded_two_chunks() {
    report("two chunks", &run(ModelCfg::two_chunks(), 2));
}
