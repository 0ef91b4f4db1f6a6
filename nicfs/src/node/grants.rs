//! Write grants, node-wide: which sessions may write which files' data whatever their modes
//! say now (pm's [`Permissions::may_write`](linefs_pm::public::Permissions::may_write)).
//!
//! POSIX lets a file opened for writing be written through that open after its mode
//! changes, and lets its creator write it whatever mode it was created with. A session is
//! granted an inode when one of its admitted entries creates it or opens it for writing
//! (an OPEN_WRITE record, checked by pm's policy in log order, [`crate::lease::perms`]).
//!
//! A grant is never dropped for room: it lasts until the inode's number is freed, or the
//! session ends. The number of grants a session holds is bounded by the node's inode count,
//! because only numbers validation accepts (`1..inode_count`, checked before permissions)
//! are ever granted — [`Grants::grant`] refuses any other with a log line, so the bound does
//! not rest on the caller alone.
//!
//! **Frees end every session's grant.** When a free of a number is published — an admitted
//! FREE_INODE of any session ([`crate::lease::perms::SessionPerms`] is told in log order), or a
//! kept orphan freed by nicfs ([`crate::node::Node::free_orphan`]) — no session keeps a
//! grant of it, so a file made later under the same number starts with none, and a forged
//! write to it is judged by its own mode. A grantee cannot lose a grant it still needs
//! this way: a session's writes to an inode are published before another session can log
//! its free — the free needs the write lease, and nicfs moves a write lease only after
//! publishing its holder's log up to the hand-back — and an inode another session holds
//! open is not freed but kept ([`crate::node::opens`]).

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// The write grants of every session of the node.
pub(crate) struct Grants {
    /// Inode numbers of the node: grants are of `1..inode_count`.
    inode_count: u64,
    /// session → the inodes it holds grants of.
    by_session: Mutex<HashMap<u64, HashSet<u64>>>,
}

impl Grants {
    pub(crate) fn new(inode_count: u64) -> Grants {
        Grants { inode_count, by_session: Mutex::new(HashMap::new()) }
    }

    /// `session` may write `ino`'s data from now on (it created it or opened it for
    /// writing). A number outside the node is refused (validation has refused its entry
    /// already: this is not reached).
    pub(crate) fn grant(&self, session: u64, ino: u64) {
        if ino == 0 || ino >= self.inode_count {
            tracing::warn!(session, ino, "write grant of an inode number outside the node; ignored");
            return;
        }
        self.by_session.lock().entry(session).or_default().insert(ino);
    }

    /// Whether `session` holds a grant of `ino`.
    pub(crate) fn holds(&self, session: u64, ino: u64) -> bool {
        self.by_session.lock().get(&session).is_some_and(|g| g.contains(&ino))
    }

    /// `ino`'s number was freed: no session keeps a grant of it.
    pub(crate) fn freed(&self, ino: u64) {
        for grants in self.by_session.lock().values_mut() {
            grants.remove(&ino);
        }
    }

    /// `session` ended (its log is settled): its grants go.
    pub(crate) fn session_ended(&self, session: u64) {
        self.by_session.lock().remove(&session);
    }

    /// Grants held, over every session.
    #[cfg(test)]
    pub(crate) fn count(&self) -> usize {
        self.by_session.lock().values().map(HashSet::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_ends_every_sessions_grant_and_nothing_else() {
        let g = Grants::new(16);
        g.grant(1, 5);
        g.grant(2, 5);
        g.grant(2, 6);
        assert!(g.holds(1, 5) && g.holds(2, 5) && !g.holds(1, 6));
        g.freed(5);
        assert!(!g.holds(1, 5) && !g.holds(2, 5) && g.holds(2, 6));
        g.session_ended(2);
        assert_eq!(g.count(), 0);
    }

    #[test]
    fn grants_are_kept_however_many_and_only_of_the_nodes_numbers() {
        let g = Grants::new(1 << 16);
        for ino in 1..1 << 16 {
            g.grant(7, ino);
        }
        assert_eq!(g.count(), (1 << 16) - 1, "none dropped for room");
        assert!(g.holds(7, 1) && g.holds(7, (1 << 16) - 1));
        g.grant(8, 0);
        g.grant(8, 1 << 16);
        assert!(!g.holds(8, 0) && !g.holds(8, 1 << 16));
        assert_eq!(g.count(), (1 << 16) - 1);
    }
}
