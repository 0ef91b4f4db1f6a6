//! The model check catches a broken core: each test plants one deliberate bug ([`Mutation`])
//! and asserts that the exploration reports the property it breaks, printing the trace (run
//! with `--nocapture` to read them). The simulation catches every one too
//! (`tests/simulation.rs`).

use linefs_chain::check::{run, ModelCfg};
use linefs_chain::Mutation;

const CHECKS: &str = "no violation of the world's checks";
const LIVENESS: &str = "liveness: a run ends with no fsync waiting, and settled";

/// The configuration that reveals `m`, and the property it breaks. An exhaustive match, so a
/// new mutation needs a line here.
fn plan(m: Mutation) -> Option<(ModelCfg, &'static str)> {
    let small = ModelCfg::small();
    Some(match m {
        Mutation::None => return None,
        Mutation::AckOnReceive => (small, CHECKS),
        Mutation::AcksCounted => (small.with_duplicates(1), CHECKS),
        Mutation::NoEpochCheck => (small.with_views(1), CHECKS),
        Mutation::ReclaimAtPublished => (small, CHECKS),
        // The handshake resends everything once, so one loss is repaired without a timeout.
        Mutation::NoRetransmit => (small.with_drops(2), LIVENESS),
        Mutation::PublishUnpersisted => (small, CHECKS),
        Mutation::JoinerAssumedCaughtUp => (small.short_chains().with_views(1), CHECKS),
        // The proactive chunk and the fsync's remainder may arrive in either order.
        Mutation::GapAccepted => (ModelCfg::two_chunks(), LIVENESS),
    })
}

#[test]
fn every_mutation_is_caught_by_the_model_check() {
    for m in Mutation::ALL {
        let (cfg, expected) = plan(m).expect("a plan");
        let clean = run(cfg.clone(), 2);
        assert!(clean.ok(), "{m:?}'s configuration unmutated: {clean}");
        let o = run(cfg.with_mutation(m), 2);
        println!("{m:?}: {o}");
        assert!(!o.ok(), "{m:?} was not caught");
        let names: Vec<&str> = o.violations.iter().map(|v| v.0).collect();
        assert!(names.contains(&expected), "{m:?} caught as {names:?}, expected {expected:?}");
    }
}
