//! Orphans, node-wide: an inode unlinked while a client of the node holds it open stays
//! until the last client that holds it open closes it (or goes), as POSIX has it for one
//! process and another.
//!
//! Clients tell nicfs their first open of an inode and their last close (`Opened`,
//! `Closed`). A `FreeInode` a client logs — it freed an inode no name and none of *its*
//! opens refer to — is published as logged unless another session holds the inode open;
//! then nicfs leaves the inode in place (nlink 0, its data intact, still readable by the
//! other client) and *keeps* it: it frees it itself when the last open of it is closed or
//! its session ends ([`crate::node::Node::free_orphan`]). Either way the freeing client's
//! lease on the number ends ([`crate::lease::Input::Forget`]) and the number goes back to
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
pub const MAX_OPEN_PER_SESSION: usize = 1 << 20;

#[derive(Default)]
struct Inner {
    /// ino → the sessions that hold it open.
    by_ino: HashMap<u64, HashSet<u64>>,
    /// session → the inodes it holds open.
    by_session: HashMap<u64, HashSet<u64>>,
    /// Orphans kept because a session holds them open.
    kept: HashSet<u64>,
}

/// The node's open inodes and kept orphans.
#[derive(Default)]
pub struct Opens {
    inner: Mutex<Inner>,
}

impl Opens {
    /// `session` holds `ino` open.
    pub fn opened(&self, session: u64, ino: u64) {
        let mut inner = self.inner.lock();
        let mine = inner.by_session.entry(session).or_default();
        if mine.len() >= MAX_OPEN_PER_SESSION {
            tracing::warn!(session, ino, "too many open inodes declared; ignored");
            return;
        }
        mine.insert(ino);
        inner.by_ino.entry(ino).or_default().insert(session);
    }

    /// `session` closed its last open of `ino`; returns `ino` if it is a kept orphan nobody
    /// holds open any more (the caller frees it).
    pub fn closed(&self, session: u64, ino: u64) -> Option<u64> {
        let mut inner = self.inner.lock();
        if let Some(mine) = inner.by_session.get_mut(&session) {
            mine.remove(&ino);
            if mine.is_empty() {
                inner.by_session.remove(&session);
            }
        }
        Self::drop_opener(&mut inner, session, ino)
    }

    /// `session` is gone: its opens end; returns the kept orphans nobody holds open now.
    pub fn session_ended(&self, session: u64) -> Vec<u64> {
        let mut inner = self.inner.lock();
        let Some(mine) = inner.by_session.remove(&session) else { return Vec::new() };
        mine.into_iter().filter_map(|ino| Self::drop_opener(&mut inner, session, ino)).collect()
    }

    fn drop_opener(inner: &mut Inner, session: u64, ino: u64) -> Option<u64> {
        let openers = inner.by_ino.get_mut(&ino)?;
        openers.remove(&session);
        if !openers.is_empty() {
            return None;
        }
        inner.by_ino.remove(&ino);
        inner.kept.remove(&ino).then_some(ino)
    }

    /// `session` logged the free of `ino`: true (and the orphan is kept) if another
    /// session holds it open, so that the free must not be published.
    pub fn keep(&self, session: u64, ino: u64) -> bool {
        let mut inner = self.inner.lock();
        let others = inner.by_ino.get(&ino).is_some_and(|s| s.iter().any(|&o| o != session));
        if others {
            inner.kept.insert(ino);
        }
        others
    }

    /// Orphans kept now, and inodes held open (for the status file).
    pub fn counts(&self) -> (u64, u64) {
        let inner = self.inner.lock();
        (inner.kept.len() as u64, inner.by_ino.len() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_orphan_open_elsewhere_is_kept_until_its_last_opener_goes() {
        let o = Opens::default();
        o.opened(1, 10);
        o.opened(2, 10);
        assert!(!o.keep(3, 11), "open nowhere: freed as logged");
        assert!(!o.keep(1, 20), "open by its freer only");
        assert!(o.keep(3, 10));
        assert_eq!(o.counts(), (1, 1));
        assert_eq!(o.closed(1, 10), None, "session 2 still holds it");
        assert_eq!(o.session_ended(2), vec![10]);
        assert_eq!(o.counts(), (0, 0));
        // A close of something never opened is harmless.
        assert_eq!(o.closed(5, 99), None);
    }
}
