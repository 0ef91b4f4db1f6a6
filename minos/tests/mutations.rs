//! The checker catches a broken core: each test plants one deliberate bug ([`Mutation`]) in
//! the engine and asserts that the model check reports a violation of the property that bug
//! breaks, printing the trace. Run with `--nocapture` to read the traces. Every mutation of
//! [`Mutation::ALL`] has a test here (`every_mutation_has_a_test` keeps the list honest).

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

const VALUES_WRONG: &str = "values: applied, persisted and read values are the writes'";
const STORE_BACK: &str = "values: the store never moves back to an older write";
const EARLY: &str = "2b all ACK_C or validated => volatileTS >= TS_WR everywhere";
const STUCK: [&str; 2] = ["no deadlock", "final state: agreed and persisted everywhere"];

#[test]
fn wrong_value_persisted_is_caught() {
    for mode in Mode::ALL {
        caught(ModelCfg::faulty(mode), Mutation::WrongValuePersisted, &[VALUES_WRONG]);
    }
}

#[test]
fn obsolete_value_applied_is_caught() {
    for mode in [Mode::Synch, Mode::Eventual] {
        caught(ModelCfg::pair(mode), Mutation::ObsoleteValueApplied, &[STORE_BACK, VALUES_WRONG]);
    }
}

#[test]
fn acks_counted_not_kept_as_sets_is_caught_in_every_mode() {
    for mode in Mode::ALL {
        caught(ModelCfg::faulty(mode).with_duplicates(1), Mutation::AcksCounted, &[EARLY, "linearizable"]);
    }
}

#[test]
fn no_retransmission_is_caught() {
    for mode in Mode::ALL {
        caught(ModelCfg::faulty(mode).with_drops(1), Mutation::NoRetransmit, &STUCK);
    }
}

#[test]
fn no_redrive_of_unvalidated_writes_is_caught() {
    for mode in Mode::ALL {
        caught(ModelCfg::faulty(mode).with_drops(1), Mutation::NoRedrive, &STUCK);
        caught(ModelCfg::faulty(mode).with_crashes(1), Mutation::NoRedrive, &STUCK);
    }
}

#[test]
fn duplicate_inv_not_reacked_is_caught() {
    for mode in Mode::ALL {
        caught(ModelCfg::faulty(mode).with_drops(1), Mutation::DuplicateInvNotReacked, &STUCK);
    }
}

/// In synch (and, for this workload, strict) a write returns only once every node persisted
/// it, so a restarted node's PM already holds every returned write; the modes that return on
/// consistency acks (renf, event, scope) need the catch-up.
#[test]
fn rejoin_without_catchup_is_caught() {
    for mode in [Mode::ReadEnforced, Mode::Eventual, Mode::Scope] {
        caught(
            ModelCfg::faulty(mode).with_crashes(1),
            Mutation::NoCatchup,
            &[
                "linearizable",
                "2a unlocked => volatileTS, glb_volatileTS agree",
                "2c glb_volatileTS is in every volatile memory",
                STUCK[1],
            ],
        );
    }
}

/// Each mutation the engine offers is tried by a test of this file.
#[test]
fn every_mutation_has_a_test() {
    let src = include_str!("mutations.rs");
    for m in Mutation::ALL {
        assert!(src.contains(&format!("Mutation::{m:?},")), "{m:?} has no test in tests/mutations.rs");
    }
}
