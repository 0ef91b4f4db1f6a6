//! The linefs crash suite (CrashMonkey-style, over a userspace PM log).
//!
//! * [`workload`]: ACE-style generation — a fixed small tree, a bounded menu of operations,
//!   each followed by fsync, fdatasync, sync or nothing; all sequences of one and two steps,
//!   a seeded sample of three.
//! * [`check`]: each workload runs on a traced PM region (every store, flush and fence
//!   recorded); at every fence and at the end of every step a crash point is taken; for each
//!   point the images a power failure could leave are built (every subset of the lines not
//!   yet durable when few, bounded structured subsets and random ones when many, plus lines
//!   torn at 8-byte granularity), recovered by the real mount path, and checked against the
//!   acknowledged states.
//! * [`replica`]: the same workload chain-replicated: its log shipped step by step into a
//!   replica's copy (pm's `replica`) and published there, the *replica* crashed at every
//!   fence of its copy writes and its publication; its recovered tree must be the primary's
//!   after every acknowledged step (a prefix of the primary's history).
//! * [`snapshot`]: the tree comparison and consistency check.
//!
//! [`run`] checks a list of workloads on several threads; `linefs crash-suite` drives it.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod check;
pub mod replica;
pub mod snapshot;
pub mod workload;

use linefs_pm::trace::CrashOpts;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use workload::Workload;

/// How thoroughly each crash point is explored.
pub fn crash_opts(quick: bool, seed: u64) -> CrashOpts {
    if quick {
        CrashOpts { max_exhaustive: 4, samples: 3, seed, torn_words: true, line_cap: 3 }
    } else {
        CrashOpts { max_exhaustive: 6, samples: 8, seed, torn_words: true, line_cap: 8 }
    }
}

/// A workload whose crash states were not all correct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub workload: String,
    pub id: usize,
    pub detail: String,
}

/// Totals of a run.
#[derive(Debug, Default, Clone)]
pub struct Report {
    pub workloads: usize,
    pub points: usize,
    pub states: usize,
    pub violations: Vec<Violation>,
    pub seconds: f64,
}

impl Report {
    /// The closing line.
    pub fn summary(&self) -> String {
        format!(
            "crash-suite: {} workloads, {} crash points, {} crash states, {} violations",
            self.workloads,
            self.points,
            self.states,
            self.violations.len()
        )
    }
}

/// Check one workload: published directly, by nicfs's steps, then on a replica
/// ([`replica`]); the first violation ends it.
pub fn check_all(w: &Workload, crash: &CrashOpts) -> check::Outcome {
    let mut o = check::check(w, crash);
    if o.violation.is_none() {
        if let Err(e) = replica::check_into(w, crash, replica::Fault::None, &mut o) {
            o.violation = Some(format!("replicated: {e}"));
        }
    }
    o
}

/// Check `workloads` on `threads` threads; `progress(done, total, report so far)` is called
/// after each workload.
pub fn run(
    workloads: &[Workload],
    crash: &CrashOpts,
    threads: usize,
    progress: &(dyn Fn(usize, usize, &Report) + Sync),
) -> Report {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let report = Mutex::new(Report::default());
    std::thread::scope(|s| {
        for _ in 0..threads.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(w) = workloads.get(i) else { break };
                let o = check_all(w, crash);
                let mut r = report.lock().unwrap_or_else(|p| p.into_inner());
                r.workloads += 1;
                r.points += o.points;
                r.states += o.states;
                if let Some(detail) = o.violation {
                    r.violations.push(Violation { workload: w.to_string(), id: w.id, detail });
                }
                progress(r.workloads, workloads.len(), &r);
            });
        }
    });
    let mut r = report.into_inner().unwrap_or_else(|p| p.into_inner());
    r.violations.sort_by_key(|v| v.id);
    r.seconds = start.elapsed().as_secs_f64();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enumeration_is_complete_and_stable() {
        let n = workload::steps().len();
        assert_eq!(n, workload::menu().len() * 4);
        let all = workload::all(1);
        assert_eq!(all.len(), n + n * n + workload::TRIPLES);
        assert_eq!(all, workload::all(1));
        assert!(all.iter().enumerate().all(|(i, w)| w.id == i));
        let q = workload::quick(1);
        assert!(q.iter().filter(|w| w.steps.len() == 1).count() == n);
        assert!(q.len() < all.len() / 10);
    }

    /// A sample of single steps, one per operation kind and persistence point in turn, must
    /// pass (the whole suite runs from `linefs crash-suite`).
    #[test]
    fn a_sample_of_workloads_recovers_correctly() {
        let all = workload::all(1);
        let sample: Vec<Workload> = all.iter().filter(|w| w.steps.len() == 1 && w.id % 9 == 0).cloned().collect();
        let r = run(&sample, &crash_opts(true, 1), 2, &|_, _, _| {});
        assert_eq!(r.workloads, sample.len());
        assert!(r.states > sample.len() * 4, "too few crash states: {}", r.states);
        assert!(r.violations.is_empty(), "{:#?}", r.violations);
    }

    /// Found by the suite (workload #14535 of seed 1): a crash inside the publication of
    /// an unlink, after the inode was freed in the public area but before the checkpoint
    /// moved, made recovery refuse the earlier setxattr entry of that inode as invalid.
    #[test]
    fn regression_crash_while_publishing_a_free_of_an_inode_written_earlier() {
        use workload::{Op, Persist, Step};
        let steps = vec![
            Step { op: Op::SetXattr("A/foo", "user.a", 20), persist: Persist::Fdatasync },
            Step { op: Op::Unlink("A/foo"), persist: Persist::Sync },
            Step { op: Op::Link("bar", "A/bar2"), persist: Persist::Sync },
        ];
        let w = Workload { id: 0, steps };
        let o = check::check(&w, &crash_opts(false, 1));
        assert!(o.states > 100, "too few crash states: {}", o.states);
        assert_eq!(o.violation, None);
    }

    /// The replica pass: every single step passes, and a replica that acknowledges a chunk
    /// before it is persisted is caught.
    #[test]
    fn the_replica_pass_recovers_every_step_and_catches_an_early_ack() {
        use replica::{check_into, Fault};
        let all = workload::all(1);
        let singles: Vec<&Workload> = all.iter().filter(|w| w.steps.len() == 1 && w.id % 5 == 0).collect();
        let crash = crash_opts(true, 1);
        let mut caught = 0;
        for w in &singles {
            let mut o = check::Outcome::default();
            check_into(w, &crash, Fault::None, &mut o).unwrap_or_else(|e| panic!("workload {}: {e}", w.id));
            assert!(o.states > 2, "too few crash states: {}", o.states);
            let mut bad = check::Outcome::default();
            caught += usize::from(check_into(w, &crash, Fault::AckBeforePersist, &mut bad).is_err());
        }
        // A step that logs nothing (a failing operation, a persistence point alone) ships
        // nothing to lose.
        assert!(caught * 2 > singles.len(), "an early ack caught in {caught} of {} workloads", singles.len());
    }

    /// The checker can fail: a state that differs from every acknowledged one is reported.
    #[test]
    fn a_wrong_recovered_state_is_a_violation() {
        use snapshot::{diff, Entry};
        let mut a = snapshot::Snapshot::new();
        let e = Entry { kind: libfs::FileKind::File, perm: 0o644, nlink: 1, size: 1, data: vec![1], xattrs: vec![] };
        a.insert("/f".into(), e.clone());
        let mut b = a.clone();
        b.get_mut("/f").expect("f").data = vec![2];
        assert_ne!(a, b);
        assert!(diff(&a, &b).contains("contents differ"));
    }
}
