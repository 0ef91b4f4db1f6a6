//! The deterministic simulation CI runs: every mode on 5 and 9 nodes, thousands of random
//! concurrent writes and reads per seed, messages and persists delayed and reordered by the
//! seeded scheduler, messages duplicated and lost, nodes crashed and restarted, the history
//! checked for linearizability, every value applied, persisted and read checked against its
//! write, and each mode's durability point.
//!
//! A failing seed is printed with the command that replays it:
//! `MINOS_SIM_MODE=renf MINOS_SIM_NODES=9 MINOS_SIM_SEED=7 cargo test -p linefs-minos --test simulation -- --nocapture`
//! (`MINOS_SIM_OPS` changes the number of operations). More seeds:
//! `cargo run --release -p linefs-minos --example sim -- --seeds 100`.

use linefs_minos::sim::{simulate, SimCfg};
use linefs_minos::{Mode, Mutation};

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("bad {name}={v}")))
}

#[test]
fn simulation_every_mode_5_and_9_nodes() {
    let modes: Vec<Mode> = match std::env::var("MINOS_SIM_MODE") {
        Ok(m) => vec![m.parse().expect("MINOS_SIM_MODE")],
        Err(_) => Mode::ALL.to_vec(),
    };
    let ops: usize = env("MINOS_SIM_OPS").unwrap_or(3000);
    let plan: Vec<(u32, Vec<u64>)> = match (env::<u32>("MINOS_SIM_NODES"), env::<u64>("MINOS_SIM_SEED")) {
        (n, Some(seed)) => vec![(n.unwrap_or(5), vec![seed])],
        (Some(n), None) => vec![(n, (1..=4).collect())],
        (None, None) => vec![(5, (1..=8).collect()), (9, (1..=4).collect())],
    };
    let mut failures = vec![];
    for mode in &modes {
        for (nodes, seeds) in &plan {
            let (mut w, mut r, mut msgs, mut skips, mut scopes) = (0, 0, 0, 0, 0);
            let (mut dups, mut lost, mut crashes, mut abandoned) = (0, 0, 0, 0);
            for &seed in seeds {
                match simulate(&SimCfg::new(*mode, *nodes, ops, seed)) {
                    Ok(rep) => {
                        w += rep.writes;
                        r += rep.reads;
                        msgs += rep.messages;
                        skips += rep.obsolete_skips;
                        scopes += rep.scope_ends;
                        dups += rep.duplicated;
                        lost += rep.lost;
                        crashes += rep.crashes;
                        abandoned += rep.abandoned;
                    }
                    Err(e) => {
                        println!("FAILED: {e}\n  replay: MINOS_SIM_MODE={} MINOS_SIM_NODES={nodes} MINOS_SIM_SEED={seed} MINOS_SIM_OPS={ops} cargo test -p linefs-minos --test simulation -- --nocapture", mode.name());
                        failures.push(e);
                    }
                }
            }
            println!(
                "{mode}: {nodes} nodes, seeds {seeds:?}, {ops} ops each: {w} writes, {r} reads, {scopes} scope ends, {msgs} messages, {skips} obsolete skips, {dups} duplicated, {lost} lost, {crashes} crashes ({abandoned} requests abandoned)"
            );
            // The run must exercise the contended paths and the faults, or it proves little.
            assert!(!failures.is_empty() || skips > 0, "{mode}/{nodes}: no write was ever obsolete");
            assert!(
                !failures.is_empty() || (dups > 0 && lost > 0 && crashes > 0),
                "{mode}/{nodes}: a fault never happened"
            );
        }
    }
    assert!(failures.is_empty(), "{} failing seed(s): {failures:#?}", failures.len());
}

/// The simulation is no rubber stamp either: each planted bug fails some seed.
#[test]
fn simulation_catches_mutations() {
    for (mutation, mode) in [
        (Mutation::ValBeforeAllAcks, Mode::Eventual),
        (Mutation::RdLockNotReleased, Mode::Strict),
        (Mutation::ObsoleteApplied, Mode::Synch),
        (Mutation::SynchPersistNotAwaited, Mode::Synch),
        (Mutation::ScopeEndsEarly, Mode::Scope),
        (Mutation::WrongValuePersisted, Mode::Eventual),
        (Mutation::ObsoleteValueApplied, Mode::ReadEnforced),
        (Mutation::AcksCounted, Mode::Strict),
        (Mutation::NoRetransmit, Mode::Scope),
        (Mutation::NoRedrive, Mode::ReadEnforced),
        (Mutation::NoCatchup, Mode::ReadEnforced),
        (Mutation::DuplicateInvNotReacked, Mode::ReadEnforced),
    ] {
        let found = (1..=4).find_map(|seed| simulate(&SimCfg { mutation, ..SimCfg::new(mode, 5, 3000, seed) }).err());
        let e = found.unwrap_or_else(|| panic!("{mutation:?} in {mode} passed every seed"));
        println!("{mutation:?} in {mode}: {e}");
    }
}
