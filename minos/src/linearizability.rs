//! A linearizability checker for register histories with unique written values, fast
//! enough for the simulation's thousands of operations.
//!
//! Linearizability is local (Herlihy and Wing): a history of several records is
//! linearizable iff each record's sub-history is, so the check runs per record. For one
//! register whose writes all write distinct values, the zone characterisation (Gibbons and
//! Korach; Golab, Li and Shah) decides it in O(n log n):
//!
//! - every read returns the initial value or a value some write wrote, and no read returns
//!   before the write of its value was invoked;
//! - group each write with the reads that returned its value (the initial value counts as
//!   a write over before anything else). For a group, let `f` be the earliest return and `s`
//!   the latest invocation. If `f < s` the group's zone is *forward*, `[f, s]`: some
//!   operation of the group ended before another began, so the write's value must stay
//!   current over that whole interval. Otherwise it is *backward*, `[s, f]`.
//! - the history is linearizable iff no two forward zones overlap and no backward zone lies
//!   inside a forward zone.
//!
//! Times are the driver's logical event counter; an operation's invocation time is before
//! its return time, and all times are distinct. A brute-force checker in the tests
//! confirms the zone check on random small histories.

use std::collections::BTreeMap;

/// What an operation did: wrote a value, or read one (0 is the initial value; writes write
/// non-zero values, each once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    Write(u64),
    Read(u64),
}

/// One completed operation on one register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistOp {
    pub kind: OpKind,
    pub invoked: u64,
    pub returned: u64,
}

/// Check one register's history; `Err` explains the first conflict found.
pub fn check_register(ops: &[HistOp]) -> Result<(), String> {
    // Per written value: (write invocation, earliest return, latest invocation).
    let mut groups: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new();
    // The initial value: written "at time 0", before every operation.
    groups.insert(0, (0, 0, 0));
    for op in ops {
        debug_assert!(op.invoked < op.returned, "{op:?}");
        if let OpKind::Write(v) = op.kind {
            assert!(v != 0, "writes write non-zero values");
            if groups.insert(v, (op.invoked, op.returned, op.invoked)).is_some() {
                return Err(format!("value {v} written twice"));
            }
        }
    }
    for op in ops {
        if let OpKind::Read(v) = op.kind {
            let Some(g) = groups.get_mut(&v) else {
                return Err(format!("read {op:?} returned value {v}, which no write wrote"));
            };
            if op.returned < g.0 {
                return Err(format!("read {op:?} returned value {v} before its write was invoked (at {})", g.0));
            }
            g.1 = g.1.min(op.returned);
            g.2 = g.2.max(op.invoked);
        }
    }
    let mut forward: Vec<(u64, u64, u64)> = vec![]; // (f, s, value)
    let mut backward: Vec<(u64, u64, u64)> = vec![]; // (s, f, value)
    for (&v, &(_, f, s)) in &groups {
        if f < s {
            forward.push((f, s, v));
        } else {
            backward.push((s, f, v));
        }
    }
    forward.sort();
    for w in forward.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(format!(
                "values {} and {} must each be current over overlapping intervals [{}, {}] and [{}, {}]",
                w[0].2, w[1].2, w[0].0, w[0].1, w[1].0, w[1].1
            ));
        }
    }
    // Forward zones are disjoint and sorted: find, per backward zone, the forward zone that
    // starts last before it.
    for &(s, f, v) in &backward {
        let i = forward.partition_point(|z| z.0 < s);
        if i > 0 {
            let z = forward[i - 1];
            if f < z.1 && z.2 != v {
                return Err(format!(
                    "value {v} is written and read within [{s}, {f}], inside the interval [{}, {}] over which value {} must be current",
                    z.0, z.1, z.2
                ));
            }
        }
    }
    Ok(())
}

/// A history of several registers: check each.
pub fn check<K: Ord + Clone + std::fmt::Debug>(ops: &[(K, HistOp)]) -> Result<(), String> {
    let mut per_key: BTreeMap<K, Vec<HistOp>> = BTreeMap::new();
    for (k, op) in ops {
        per_key.entry(k.clone()).or_default().push(*op);
    }
    for (k, ops) in per_key {
        check_register(&ops).map_err(|e| format!("record {k:?}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Try every order that respects real time.
    fn brute_force(ops: &[HistOp]) -> bool {
        fn go(ops: &[HistOp], done: &mut Vec<bool>, value: u64, left: usize) -> bool {
            if left == 0 {
                return true;
            }
            for i in 0..ops.len() {
                if done[i] {
                    continue;
                }
                // i can go next only if no pending op returned before i was invoked.
                if (0..ops.len()).any(|j| !done[j] && j != i && ops[j].returned < ops[i].invoked) {
                    continue;
                }
                let next = match ops[i].kind {
                    OpKind::Write(v) => v,
                    OpKind::Read(v) if v == value => value,
                    OpKind::Read(_) => continue,
                };
                done[i] = true;
                if go(ops, done, next, left - 1) {
                    return true;
                }
                done[i] = false;
            }
            false
        }
        go(ops, &mut vec![false; ops.len()], 0, ops.len())
    }

    fn op(kind: OpKind, invoked: u64, returned: u64) -> HistOp {
        HistOp { kind, invoked, returned }
    }

    #[test]
    fn examples() {
        use OpKind::*;
        // A stale read after a completed write.
        let h = [op(Write(1), 1, 2), op(Read(0), 3, 4)];
        assert!(check_register(&h).is_err() && !brute_force(&h));
        // Concurrent read may see either.
        let h = [op(Write(1), 1, 4), op(Read(0), 2, 3), op(Read(1), 2, 5)];
        assert!(check_register(&h).is_ok() && brute_force(&h));
        // New-old inversion: read 1 then a later read 0 while the write is still running.
        let h = [op(Write(1), 1, 10), op(Read(1), 2, 3), op(Read(0), 4, 5)];
        assert!(check_register(&h).is_err() && !brute_force(&h));
    }

    fn history() -> impl Strategy<Value = Vec<HistOp>> {
        // Up to 6 operations, 3 writes at most; endpoints from a shuffled range keep every
        // time distinct.
        (1usize..=6, proptest::collection::vec((any::<bool>(), 0u64..4), 6), Just(()))
            .prop_flat_map(|(n, kinds, _)| {
                let times: Vec<u64> = (1..=(2 * n as u64)).collect();
                (Just(n), Just(kinds), Just(times).prop_shuffle())
            })
            .prop_map(|(n, kinds, times)| {
                let mut next_value = 1;
                (0..n)
                    .map(|i| {
                        let (a, b) = (times[2 * i], times[2 * i + 1]);
                        let (is_write, v) = kinds[i];
                        let kind = if is_write {
                            next_value += 1;
                            OpKind::Write(next_value - 1)
                        } else {
                            OpKind::Read(v)
                        };
                        op(kind, a.min(b), a.max(b))
                    })
                    .collect()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn zones_agree_with_brute_force(h in history()) {
            prop_assert_eq!(check_register(&h).is_ok(), brute_force(&h), "{:?}", h);
        }
    }
}
