//! Orphans, node-wide: an inode unlinked while a client of the node holds it open stays
//! until the last client that holds it open closes it (or goes), as POSIX has it for one
//! process and another.
//!
//! Clients tell nicfs their first open of an inode and their last close (`Opened`,
//! `Closed`). A `FreeInode` a client logs — it freed an inode no name and none of *its*
//! opens refer to — is published as logged unless another session holds the inode open;
//! then nicfs leaves the inode in place (nlink 0, its data intact, still readable by the
//! other client) and *keeps* it. The client that closes it last frees it in its own log
//! (libfs re-reads an inode whose lease it lost before deciding it is an orphan), after
//! whatever else it logged about it — so nicfs does not free it when `Closed` arrives,
//! which could overtake that client's unpublished entries; it frees it itself
//! ([`crate::node::Node::free_orphan`]) only once the last opener's session has ended (its
//! log is settled by then). Either way the freeing client's
//! lease on the number ends ([`crate::lease::table::Input::Forget`]) and the number goes back to
//! the node's pool once it is free; a client in the offload mode never reuses a number it
//! freed itself, so a kept orphan cannot be overwritten by its freer's next file.
//!
//! Why the opens are known in time: to open an inode a client holds a lease on it, and to
//! free it the freer holds its write lease, which revokes the opener's; the opener's
//! `Opened` precedes its answer to that revoke on the same connection, so nicfs has it
//! before the freer can log the free. Kept orphans are not recorded in PM: after a crash of
//! nicfs no client is attached, and recovery frees every inode without a link.

use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// Inodes one session may declare open at once; beyond, `Opened` is ignored with a log line
/// (the inode is then protected only by that client's own reference).
pub(crate) const MAX_OPEN_PER_SESSION: usize = 1 << 20;

#[derive(Default)]
struct Inner {
    /// ino → the sessions that hold it open.
    by_ino: HashMap<u64, HashSet<u64>>,
    /// session → the inodes it holds open.
    by_session: HashMap<u64, HashSet<u64>>,
    /// Orphans kept because a session holds them open (None), or held it open last
    /// (Some: freed when that session ends, unless it frees it first).
    kept: HashMap<u64, Option<u64>>,
}

/// The node's open inodes and kept orphans.
#[derive(Default)]
pub(crate) struct Opens {
    inner: Mutex<Inner>,
}

impl Opens {
    /// `session` holds `ino` open.
    pub(crate) fn opened(&self, session: u64, ino: u64) {
        let mut inner = self.inner.lock();
        let mine = inner.by_session.entry(session).or_default();
        if mine.len() >= MAX_OPEN_PER_SESSION {
            tracing::warn!(session, ino, "too many open inodes declared; ignored");
            return;
        }
        mine.insert(ino);
        inner.by_ino.entry(ino).or_default().insert(session);
    }

    /// `session` closed its last open of `ino`.
    pub(crate) fn closed(&self, session: u64, ino: u64) {
        let mut inner = self.inner.lock();
        if let Some(mine) = inner.by_session.get_mut(&session) {
            mine.remove(&ino);
            if mine.is_empty() {
                inner.by_session.remove(&session);
            }
        }
        Self::drop_opener(&mut inner, session, ino);
    }

    /// `session` is gone (its log settled): its opens end; returns the kept orphans it was
    /// the last to hold open (the caller frees them).
    pub(crate) fn session_ended(&self, session: u64) -> Vec<u64> {
        let mut inner = self.inner.lock();
        if let Some(mine) = inner.by_session.remove(&session) {
            for ino in mine {
                Self::drop_opener(&mut inner, session, ino);
            }
        }
        let done: Vec<u64> = inner.kept.iter().filter(|(_, &last)| last == Some(session)).map(|(&i, _)| i).collect();
        for ino in &done {
            inner.kept.remove(ino);
        }
        done
    }

    fn drop_opener(inner: &mut Inner, session: u64, ino: u64) {
        let Some(openers) = inner.by_ino.get_mut(&ino) else { return };
        openers.remove(&session);
        if openers.is_empty() {
            inner.by_ino.remove(&ino);
            if let Some(last) = inner.kept.get_mut(&ino) {
                *last = Some(session);
            }
        }
    }

    /// `session` logged the free of `ino`: true (and the orphan is kept) if another
    /// session holds it open, so that the free must not be published; otherwise the free
    /// is published and nicfs keeps nothing of it.
    pub(crate) fn keep(&self, session: u64, ino: u64) -> bool {
        let mut inner = self.inner.lock();
        let others = inner.by_ino.get(&ino).is_some_and(|s| s.iter().any(|&o| o != session));
        if others {
            inner.kept.insert(ino, None);
        } else {
            inner.kept.remove(&ino);
        }
        others
    }

    /// Orphans kept now, and inodes held open (for the status file).
    pub(crate) fn counts(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.kept.len() as u64, inner.by_ino.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_orphan_open_elsewhere_is_kept_until_its_last_opener_frees_it_or_goes() {
        let o = Opens::default();
        o.opened(1, 10);
        o.opened(2, 10);
        assert!(!o.keep(3, 11), "open nowhere: freed as logged");
        assert!(!o.keep(1, 20), "open by its freer only");
        assert!(o.keep(3, 10));
        assert_eq!(o.counts(), (1, 1));
        o.closed(1, 10);
        o.closed(2, 10);
        assert_eq!(o.counts(), (1, 0), "kept, opened nowhere: its last opener frees it");
        assert!(o.session_ended(1).is_empty(), "not the last opener");
        assert_eq!(o.session_ended(2), vec![10], "the last opener went without freeing it");
        assert_eq!(o.counts(), (0, 0));
        // The last opener frees it itself: published, nothing kept.
        o.opened(4, 30);
        assert!(o.keep(5, 30));
        o.closed(4, 30);
        assert!(!o.keep(4, 30));
        assert!(o.session_ended(4).is_empty());
        assert_eq!(o.counts(), (0, 0));
        // A close of something never opened is harmless.
        o.closed(5, 99);
    }
}
