//! The lease table's invariants, checked after every step by the unit tests and the
//! simulation ([`LeaseTable::check`]; those of expiry are in [`super::expiry`]).

use super::{LeaseTable, SessionId};
use std::collections::{BTreeSet, HashMap};

impl LeaseTable {
    #[cfg(test)]
    /// Checks every structural invariant; the first violation, described.
    pub(crate) fn check(&self) -> Result<(), String> {
        let mut leases = BTreeSet::new();
        let mut waiting: HashMap<SessionId, usize> = HashMap::new();
        for (&ino, st) in &self.inodes {
            let e = |what: &str| Err(format!("inode {ino}: {what}: {st:?}"));
            if st.is_empty() {
                return e("empty entry kept");
            }
            if st.writer.is_some() && !st.readers.is_empty() {
                return e("a writer and readers");
            }
            for lease in st.writer.iter().map(|w| w.1).chain(st.readers.values().copied()) {
                if lease == 0 || lease > self.last_lease || !leases.insert(lease) {
                    return e("lease id out of range or used twice");
                }
            }
            for (&s, r) in &st.revoking {
                if st.held(s).map(|h| h.0) != Some(r.lease) {
                    return e("a revoke of a lease not held");
                }
            }
            let mut mentioned: BTreeSet<SessionId> = st.readers.keys().copied().collect();
            mentioned.extend(st.writer.map(|w| w.0));
            mentioned.extend(st.revoking.keys().copied());
            mentioned.extend(st.awaiting.keys().copied());
            for w in &st.queue {
                *waiting.entry(w.session).or_default() += 1;
                mentioned.insert(w.session);
            }
            for s in mentioned {
                if !self.sessions.get(&s).is_some_and(|i| i.inodes.contains(&ino)) {
                    return e(&format!("session {s} is not indexed"));
                }
            }
            for (&s, &lsn) in &st.awaiting {
                let info = &self.sessions[&s];
                if !info.awaits.contains(&ino) || lsn <= info.published {
                    return e(&format!("awaited publication of session {s} not indexed or already done"));
                }
            }
            if let Some((first, end, s)) = self.implicit_owner(ino) {
                return e(&format!("also in the implicit range {first}..{end} of session {s}"));
            }
            // At most one session may change the inode: the writer, or the last writer
            // until its log is published — never both of two sessions.
            let mut changers: BTreeSet<SessionId> = st.awaiting.keys().copied().collect();
            changers.extend(st.writer.map(|w| w.0));
            if changers.len() > 1 {
                return e("two sessions may change it");
            }
        }
        for (&s, info) in &self.sessions {
            if info.is_empty() {
                return Err(format!("session {s}: empty entry kept"));
            }
            if info.waiting != waiting.get(&s).copied().unwrap_or(0) || info.waiting > self.max_waiting {
                return Err(format!("session {s}: waiting count {} is wrong", info.waiting));
            }
            for ino in &info.inodes {
                if !self.inodes.get(ino).is_some_and(|st| st.mentions(s)) {
                    return Err(format!("session {s}: indexed inode {ino} does not mention it"));
                }
            }
            for ino in &info.awaits {
                if !self.inodes.get(ino).is_some_and(|st| st.awaiting.contains_key(&s)) {
                    return Err(format!("session {s}: indexed await of inode {ino} is not there"));
                }
            }
            for first in &info.ranges {
                if self.implicit.get(first).is_none_or(|&(_, o)| o != s) {
                    return Err(format!("session {s}: indexed range at {first} is not its own"));
                }
            }
        }
        let mut prev_end = 0;
        for (&first, &(end, s)) in &self.implicit {
            if first >= end || first < prev_end {
                return Err(format!("implicit range {first}..{end} empty or overlapping"));
            }
            if !self.sessions.get(&s).is_some_and(|i| i.ranges.contains(&first)) {
                return Err(format!("implicit range {first}..{end} of session {s} not indexed"));
            }
            prev_end = end;
        }
        self.check_deadlines()
    }
}
