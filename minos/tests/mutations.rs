//! The checker catches a broken core: each test plants one deliberate single-line bug
//! ([`Mutation`]) in the engine and asserts that the model check reports a violation of the
//! property that bug breaks, printing the trace. Run with `--nocapture` to read the traces.

use linefs_minos::check::{run, ModelCfg};
use linefs_minos::{Mode, Mutation};

/// Explore `cfg` with `mutation` planted; the violations found must include `expected`.
fn caught(cfg: ModelCfg, mutation: Mutation, expected: &[&str]) {
    let mode = cfg.mode;
    // Sanity: without the mutation the same exploration is clean.
    let clean = run(cfg.clone(), Some(12), 2);
    assert!(clean.ok(), "{mode} unmutated: {clean}");
    let o = run(cfg.with_mutation(mutation), None, 2);
    println!("{mutation:?} in {mode}: {o}");
    assert!(!o.ok(), "{mutation:?} in {mode} was not caught");
    let names: Vec<&str> = o.violations.iter().map(|v| v.0).collect();
    assert!(
        names.iter().any(|n| expected.contains(n)),
        "{mutation:?} in {mode}: caught as {names:?}, expected one of {expected:?}"
    );
}

#[test]
fn val_before_all_acks_is_caught() {
    for mode in [Mode::Synch, Mode::Eventual] {
        caught(
            ModelCfg::pair(mode),
            Mutation::ValBeforeAllAcks,
            &["2c missing ACK_C => glb_volatileTS != TS_WR", "linearizable", "4 legal metadata and bookkeeping"],
        );
    }
}

#[test]
fn rdlock_not_released_is_caught() {
    caught(
        ModelCfg::pair(Mode::Eventual),
        Mutation::RdLockNotReleased,
        &["no deadlock", "final state: agreed and persisted everywhere"],
    );
}

#[test]
fn obsolete_write_applied_is_caught() {
    caught(
        ModelCfg::contended(Mode::Eventual),
        Mutation::ObsoleteApplied,
        &["4 legal metadata and bookkeeping", "linearizable", "2a unlocked => volatileTS, glb_volatileTS agree"],
    );
}

#[test]
fn synch_persist_not_awaited_is_caught() {
    caught(
        ModelCfg::pair(Mode::Synch),
        Mutation::SynchPersistNotAwaited,
        &["synch/strict: write returns persisted everywhere"],
    );
}

#[test]
fn scope_ending_early_is_caught() {
    caught(
        ModelCfg::pair(Mode::Scope),
        Mutation::ScopeEndsEarly,
        &[
            "scope: scope end returns with its writes persisted everywhere",
            "3b missing ACK_P => glb_durableTS != TS_WR",
        ],
    );
}
