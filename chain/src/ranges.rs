//! A contiguous prefix fed by completions that may arrive in any order, overlap or repeat:
//! how far a replica's copy is durable (persists complete out of order) and how far it is
//! published.

use crate::types::Lsn;
use std::collections::BTreeMap;

/// Completed ranges: `end` is the contiguous prefix, `ahead` the completed ranges beyond a
/// gap (start -> end), merged into `end` once the gap fills.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Prefix {
    end: Lsn,
    ahead: BTreeMap<Lsn, Lsn>,
}

impl Prefix {
    pub fn at(end: Lsn) -> Prefix {
        Prefix { end, ahead: BTreeMap::new() }
    }

    /// The contiguous prefix's end.
    pub fn end(&self) -> Lsn {
        self.end
    }

    /// `[start, end)` completed; returns whether the prefix grew.
    pub fn complete(&mut self, start: Lsn, end: Lsn) -> bool {
        if end <= start || end <= self.end {
            return false;
        }
        let slot = self.ahead.entry(start).or_insert(end);
        *slot = (*slot).max(end);
        self.absorb()
    }

    /// Everything below `to` is complete (a state transfer); returns whether it grew.
    pub fn raise(&mut self, to: Lsn) -> bool {
        let before = self.end;
        self.end = self.end.max(to);
        self.absorb();
        self.end > before
    }

    fn absorb(&mut self) -> bool {
        let before = self.end;
        while let Some((&s, &e)) = self.ahead.first_key_value() {
            if s > self.end {
                break;
            }
            self.ahead.remove(&s);
            self.end = self.end.max(e);
        }
        self.end > before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Against a naive model (a bitmap of completed positions): the prefix is the first
        /// position never completed, whatever the order, overlaps and repeats.
        #[test]
        fn prefix_matches_a_bitmap(ops in proptest::collection::vec((0u64..64, 0u64..16, any::<bool>()), 0..40)) {
            let mut p = Prefix::default();
            let mut done = [false; 96];
            for (start, len, raise) in ops {
                let before = p.end();
                let grew = if raise {
                    for d in done.iter_mut().take(start as usize) {
                        *d = true;
                    }
                    p.raise(start)
                } else {
                    for d in done.iter_mut().skip(start as usize).take(len as usize) {
                        *d = true;
                    }
                    p.complete(start, start + len)
                };
                let expect = done.iter().position(|d| !d).unwrap_or(done.len()) as Lsn;
                prop_assert_eq!(p.end(), expect);
                prop_assert_eq!(grew, p.end() > before);
            }
        }
    }

    #[test]
    fn out_of_order_overlapping_and_repeated_completions() {
        let mut p = Prefix::default();
        assert!(!p.complete(10, 20));
        assert!(!p.complete(15, 30));
        assert_eq!(p.end(), 0);
        assert!(p.complete(0, 12));
        assert_eq!(p.end(), 30);
        assert!(!p.complete(0, 30));
        assert!(!p.complete(40, 40));
        assert!(!p.complete(35, 50));
        assert!(p.raise(36));
        assert_eq!(p.end(), 50);
    }
}
