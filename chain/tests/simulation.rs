//! The seeded simulation CI runs: 5 nodes, chains of 3, clients appending and calling fsync,
//! messages lost, duplicated and reordered, crashes and view changes, every invariant checked
//! after every step (`chain/src/sim.rs`), and liveness once the network is quiet.
//!
//! A failing seed is printed with the command that replays it:
//! `CHAIN_SIM_SEED=7 cargo test -p linefs-chain --test simulation -- --nocapture`
//! (`CHAIN_SIM_OPS` changes the number of client operations). More seeds:
//! `cargo run --release -p linefs-chain --example sim -- --seeds 200`.

use linefs_chain::sim::{simulate, SimCfg, SimReport};
use linefs_chain::Mutation;

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("bad {name}={v}")))
}

#[test]
fn simulation_with_faults_and_view_changes() {
    let ops: usize = env("CHAIN_SIM_OPS").unwrap_or(5000);
    let seeds: Vec<u64> = match env::<u64>("CHAIN_SIM_SEED") {
        Some(s) => vec![s],
        None => (1..=24).collect(),
    };
    let mut total = SimReport::default();
    let mut failures = vec![];
    for &seed in &seeds {
        match simulate(&SimCfg::new(ops, seed)) {
            Ok(r) => {
                println!("seed {seed}: {r:?}");
                total.fsyncs_done += r.fsyncs_done;
                total.fsyncs_across_views += r.fsyncs_across_views;
                total.abandoned += r.abandoned;
                total.duplicated += r.duplicated;
                total.lost += r.lost;
                total.crashes += r.crashes;
                total.view_changes += r.view_changes;
                total.stale_delivered += r.stale_delivered;
                total.newer_epoch_reported += r.newer_epoch_reported;
                total.rebases += r.rebases;
                total.reclaims += r.reclaims;
                total.replicated_raised += r.replicated_raised;
                total.latency_messages += r.latency_messages;
                total.publishes += r.publishes;
            }
            Err(e) => {
                println!(
                    "FAILED: {e}\n  replay: CHAIN_SIM_SEED={seed} CHAIN_SIM_OPS={ops} cargo test -p linefs-chain --test simulation -- --nocapture"
                );
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{} failing seed(s): {failures:#?}", failures.len());
    // Sometimes: each check had its premise true in some run, or the run proves little.
    let t = &total;
    for (what, n) in [
        ("an fsync completed (its durability checked)", t.fsyncs_done),
        ("an fsync completed in a later view than it started in", t.fsyncs_across_views),
        ("an fsync abandoned by a crash", t.abandoned),
        ("a message duplicated", t.duplicated),
        ("a message lost", t.lost),
        ("a node crashed and restarted", t.crashes),
        ("the view changed", t.view_changes),
        ("a message of another epoch delivered (checked to change nothing)", t.stale_delivered),
        ("a newer epoch reported", t.newer_epoch_reported),
        ("a replica rebased by state transfer", t.rebases),
        ("log space reclaimed (checked against PM)", t.reclaims),
        ("a replicated LSN raised (checked against PM)", t.replicated_raised),
        ("a replica published (checked durable and in order)", t.publishes),
        ("a message on the low-latency class", t.latency_messages),
    ] {
        assert!(seeds.len() == 1 || n > 0, "never happened: {what}");
    }
}

/// Other shapes, fewer seeds: chains of 2 on 5 nodes (every removal brings a new member in,
/// often behind the reclaimed point), chains through every node of 3, and chains of 5.
#[test]
fn simulation_other_chain_shapes() {
    for (nodes, replicas) in [(5, 1), (3, 2), (5, 4)] {
        let mut rebases = 0;
        for seed in 1..=6 {
            let cfg = SimCfg { nodes, replicas, ..SimCfg::new(3000, seed) };
            match simulate(&cfg) {
                Ok(r) => rebases += r.rebases,
                Err(e) => panic!(
                    "{e}\n  replay: cargo run --release -p linefs-chain --example sim -- --seeds 1 --first-seed {seed} --ops 3000 --nodes {nodes} --replicas {replicas}"
                ),
            }
        }
        println!("{nodes} nodes, {replicas} replicas: {rebases} rebases");
        assert!(rebases > 0, "{nodes} nodes, {replicas} replicas: no member ever rebased");
    }
}

/// The violations that may reveal `m`: the check its bug breaks first. An exhaustive match,
/// so a new mutation needs a line here.
fn expected(m: Mutation) -> &'static [&'static str] {
    match m {
        Mutation::None => &[],
        // The primary hears "durable" before the PM has it: the replicated LSN or an fsync
        // is checked against the PM and found ahead of it.
        Mutation::AckOnReceive => &["replicated up to", "completed with"],
        Mutation::AcksCounted => &["completed with"],
        Mutation::NoEpochCheck => &["of another epoch changed"],
        Mutation::ReclaimAtPublished => &["reclaims"],
        Mutation::NoRetransmit => &["does not settle", "stalled"],
        Mutation::PublishUnpersisted => &["publishes"],
        Mutation::JoinerAssumedCaughtUp => &["completed with", "reclaims", "replicated up to"],
        Mutation::GapAccepted => &["does not settle", "stalled", "final state"],
    }
}

/// The simulation is no rubber stamp: each planted bug fails some seed, caught by the check
/// it breaks.
#[test]
fn simulation_catches_every_mutation() {
    for mutation in Mutation::ALL {
        let found = (1..=8).find_map(|seed| simulate(&SimCfg { mutation, ..SimCfg::new(2000, seed) }).err());
        let e = found.unwrap_or_else(|| panic!("{mutation:?} passed every seed"));
        println!("{mutation:?}: {e}");
        assert!(
            expected(mutation).iter().any(|x| e.contains(x)),
            "{mutation:?} caught as {e}, expected {:?}",
            expected(mutation)
        );
    }
}
