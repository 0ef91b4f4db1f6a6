//! The leases this client holds in the offload mode, and how calls use them.
//!
//! nicfs grants each inode (file or directory) to one writer or to many readers. A client's
//! view of an inode is trusted only while the client holds a lease on it; every call first
//! makes sure it holds what it needs (`Fs::leased` (`calls/leased.rs`)): a read lease on the
//! inodes it reads, a write lease on those it changes. An inode this client creates from a
//! number nicfs granted it is written under an implicit write lease.
//!
//! * **Acquire** (no lock of the front end held): a `LeaseRequest` for each inode not held
//!   with the mode needed. A lease not held continuously since the view last read the inode
//!   marks it *unloaded*: the view re-reads it from the public area (nicfs publishes a
//!   writer's log before it grants the inode to anyone else, so the public area has every
//!   change) before any call uses it.
//! * **Pin**: a call pins its leases for its whole duration; a revoke waits until an inode's
//!   pins are gone, so an update is never logged under a lease already handed back. A call
//!   never waits for a lease while it pins one (it acquires everything first, then pins all
//!   at once, or starts over), and a pinned call waits on nicfs only for requests nicfs
//!   answers by itself (fsync, space, inode numbers): so revokes always complete.
//! * **Revoke** (nicfs's request, handled by the revoke thread, never by the reader of the
//!   control connection, which must go on delivering replies to pinned calls): wait for the
//!   pins; if the lease goes entirely (not `keep_read`), tell the observer *before* the
//!   hand-back, still with new calls on the inode waiting ([`crate::LeaseObserver`]: the
//!   FUSE adapter expires the kernel's cached attributes and names, which takes no lock of
//!   the kernel's); then answer `RevokeDone` with the end of the committed log (every update
//!   made under the lease is before it; nicfs publishes that far before granting the inode
//!   elsewhere), keep a read lease if nicfs allows it, else forget the lease and tell the
//!   observer again after the hand-back (the adapter drops the kernel's cached pages, which
//!   may wait for the kernel's page locks).
//! * **Opens for writing** (offload): an open for writing logs an OPEN_WRITE record under
//!   the file's lease (a read lease will do), which nicfs checks and then lets this session
//!   write the file through that open whatever its mode becomes. A lease remembers that one
//!   was logged under it (or the file created), so that the next opens while it is held
//!   log none; the memory goes when the lease is handed back, since only a client holding
//!   the write lease — which takes every other client's lease first — could free the
//!   number (and end nicfs's grant) meanwhile. A downgrade to a read lease keeps it.
//!
//! A node with one client (the host-only link, [`Leases::sole`]) grants it everything for
//! good: every need is held and loaded, pins cost nothing, no open is logged, and nothing
//! is ever revoked — the calls go through the same steps in both modes.

use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;

/// One inode a call needs, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Need {
    pub(crate) ino: u64,
    pub(crate) write: bool,
}

impl Need {
    pub(crate) fn read(ino: u64) -> Need {
        Need { ino, write: false }
    }

    pub(crate) fn write(ino: u64) -> Need {
        Need { ino, write: true }
    }
}

#[derive(Debug, Clone, Copy)]
struct Held {
    write: bool,
    /// nicfs's id of the grant; 0 for the implicit write lease of an inode created here.
    lease: u64,
    pins: u32,
    /// A revoke is waiting for the pins to go.
    revoking: bool,
    /// The view has read the inode since the lease was granted.
    loaded: bool,
    /// A number in this client's pool of free numbers (granted by nicfs): held for writing
    /// so that a create may use it ([`Leases::claim`]).
    pooled: bool,
    /// This client logged the inode's creation or an open of it for writing (an OPEN_WRITE
    /// record) while holding this lease: nicfs grants the session the file when it
    /// publishes that, so later opens for writing need not log another
    /// ([`Leases::open_logged`]).
    open_logged: bool,
}

impl Held {
    /// A lease newly held: no call pins it, no revoke is under way, no open is logged.
    fn new(write: bool, lease: u64, loaded: bool, pooled: bool) -> Held {
        Held { write, lease, pins: 0, revoking: false, loaded, pooled, open_logged: false }
    }
}

/// What a granted request tells [`Leases::granted`].
pub(crate) struct Grant {
    pub(crate) ino: u64,
    pub(crate) write: bool,
    pub(crate) lease: u64,
}

/// The leases held, their pins and the revokes in progress.
#[derive(Default)]
pub(crate) struct Leases {
    table: Mutex<HashMap<u64, Held>>,
    cond: Condvar,
    /// The last leases answered as handed back while not held (inode, lease id): a grant of
    /// one of them arriving afterwards is not recorded. nicfs sends each client a lease's
    /// grant before its revoke, so this only guards against a peer that does not.
    answered_unheld: Mutex<std::collections::VecDeque<(u64, u64)>>,
    /// Set (under the table's lock) once the session has ended: nothing is held any more,
    /// and a grant that still arrives is not recorded ([`Leases::drop_all`]).
    closed: std::sync::atomic::AtomicBool,
    /// This client is the node's only one: it holds every lease, for good.
    sole: bool,
}

/// How many [`Leases::answered_unheld`] remembers.
const ANSWERED_UNHELD: usize = 64;

impl Leases {
    /// The leases of a client that is its node's only one (host-only): every inode is its
    /// own, held for writing and loaded, and no other client can ask for it back.
    pub(crate) fn sole() -> Leases {
        Leases { sole: true, ..Leases::default() }
    }

    /// Whether every lease is held for good ([`Leases::sole`]): a call need not ask,
    /// load or pin anything.
    pub(crate) fn holds_everything(&self) -> bool {
        self.sole
    }

    /// The needs that are not held as needed (waits out a revoke in progress first).
    pub(crate) fn missing(&self, need: &[Need]) -> Vec<Need> {
        if self.sole {
            return Vec::new();
        }
        let mut t = self.table.lock();
        while need.iter().any(|n| t.get(&n.ino).is_some_and(|h| h.revoking)) {
            self.cond.wait(&mut t);
        }
        need.iter().filter(|n| !t.get(&n.ino).is_some_and(|h| h.write || !n.write)).copied().collect()
    }

    /// Records a lease nicfs granted. A lease newly held leaves the inode unloaded; an
    /// upgrade from read to write keeps what the view has (nobody could write meanwhile).
    pub(crate) fn granted(&self, g: Grant) {
        if self.sole {
            return;
        }
        let mut t = self.table.lock();
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            tracing::debug!(ino = g.ino, lease = g.lease, "grant after the session ended: not recorded");
            return;
        }
        {
            let mut answered = self.answered_unheld.lock();
            if let Some(i) = answered.iter().position(|&a| a == (g.ino, g.lease)) {
                answered.remove(i);
                tracing::warn!(ino = g.ino, lease = g.lease, "grant of a lease already handed back: not recorded");
                return;
            }
        }
        match t.get_mut(&g.ino) {
            Some(h) => {
                h.write |= g.write;
                h.lease = g.lease;
            }
            None => {
                t.insert(g.ino, Held::new(g.write, g.lease, false, false));
            }
        }
    }

    /// An inode this client just created: held for writing, and the view has it (the pin
    /// [`Leases::claim`] took stays until the call unpins it).
    pub(crate) fn created(&self, ino: u64) {
        if self.sole {
            return;
        }
        let mut t = self.table.lock();
        let h = t.entry(ino).or_insert(Held::new(true, 0, true, false));
        h.write = true;
        h.loaded = true;
        h.pooled = false;
        // nicfs grants the creator the file, as an open for writing does.
        h.open_logged = true;
    }

    /// Whether an open of `ino` for writing needs no OPEN_WRITE record: this client logged
    /// the file's creation or an open of it for writing and has held a lease on it without
    /// a break since. nicfs's grant of the file to this session then stands: it ends only
    /// when the number is freed, which this client would have logged itself (dropping the
    /// lease, [`Leases::freed`]) or another client would have, holding the write lease —
    /// which it gets only once this client has handed back its own.
    pub(crate) fn open_logged(&self, ino: u64) -> bool {
        // The sole client's node takes no OPEN_WRITE records (no other client to guard).
        self.sole || self.table.lock().get(&ino).is_some_and(|h| h.open_logged)
    }

    /// An OPEN_WRITE record of `ino` is committed, under the lease held (pinned).
    pub(crate) fn note_open_logged(&self, ino: u64) {
        if let Some(h) = self.table.lock().get_mut(&ino) {
            h.open_logged = true;
        }
    }

    /// A free number this client may create with: nicfs granted it (an implicit write
    /// lease). Held for writing until a revoke
    /// takes it: another client asked for it (it still knew the number), and from then on
    /// it is no longer this client's to create with.
    pub(crate) fn pool(&self, ino: u64) {
        if self.sole {
            return;
        }
        let mut t = self.table.lock();
        t.entry(ino).or_insert(Held::new(true, 0, true, true)).pooled = true;
    }

    /// Pins a pooled number for the create that is about to use it, if it is still held for
    /// writing; `false` when a revoke has taken it (the number must not be used).
    pub(crate) fn claim(&self, ino: u64) -> bool {
        if self.sole {
            return true;
        }
        let mut t = self.table.lock();
        match t.get_mut(&ino) {
            Some(h) if h.write && !h.revoking => {
                h.pins += 1;
                true
            }
            _ => false,
        }
    }

    /// Of `need`, the inodes held but not yet read by the view.
    pub(crate) fn unloaded(&self, need: &[Need]) -> Vec<u64> {
        let t = self.table.lock();
        need.iter().filter(|n| t.get(&n.ino).is_some_and(|h| !h.loaded)).map(|n| n.ino).collect()
    }

    /// Whether `ino` is held and unloaded (checked again under the front end's lock).
    pub(crate) fn needs_load(&self, ino: u64) -> bool {
        self.table.lock().get(&ino).is_some_and(|h| !h.loaded)
    }

    pub(crate) fn mark_loaded(&self, ino: u64) {
        if let Some(h) = self.table.lock().get_mut(&ino) {
            h.loaded = true;
        }
    }

    /// Pins every need if all are held as needed, loaded and not being revoked.
    pub(crate) fn try_pin(&self, need: &[Need]) -> bool {
        if self.sole {
            return true;
        }
        let mut t = self.table.lock();
        let ok = need.iter().all(|n| t.get(&n.ino).is_some_and(|h| (h.write || !n.write) && h.loaded && !h.revoking));
        if ok {
            for n in need {
                if let Some(h) = t.get_mut(&n.ino) {
                    h.pins += 1;
                }
            }
        }
        ok
    }

    /// This client freed `ino` (offload): nicfs forgets its lease on the number once the
    /// free is published (and may hand the number to another client), so it is not this
    /// client's any more — a later call naming it must ask nicfs again, not trust a lease
    /// nicfs no longer knows.
    pub(crate) fn freed(&self, ino: u64) {
        self.table.lock().remove(&ino);
        self.cond.notify_all();
    }

    pub(crate) fn unpin(&self, need: &[Need]) {
        if self.sole {
            return;
        }
        let mut t = self.table.lock();
        for n in need {
            if let Some(h) = t.get_mut(&n.ino) {
                h.pins = h.pins.saturating_sub(1);
            }
        }
        drop(t);
        self.cond.notify_all();
    }

    /// nicfs takes `ino` back: waits until no call pins it, then keeps a read lease
    /// (`keep_read`) or forgets it. When the lease goes entirely, `before_gone` runs once the
    /// pins are gone and before anything else, without the table's lock and with new calls
    /// on the inode still waiting. `committed` is read after it: the end of the log that
    /// every update under the lease is before. Returns that, and whether the lease is gone
    /// entirely (the caches of the inode must go too).
    pub(crate) fn revoke(
        &self,
        ino: u64,
        lease: u64,
        keep_read: bool,
        committed: impl Fn() -> u64,
        before_gone: impl FnOnce(),
    ) -> (u64, bool) {
        let mut t = self.table.lock();
        let Some(h) = t.get_mut(&ino) else {
            // Not held (already handed back, or a number granted for creation and never
            // used): nothing is logged under it beyond what is committed now, and nothing
            // was answered under it since its caches were last dropped; dropping them again
            // costs little.
            {
                let mut answered = self.answered_unheld.lock();
                if answered.len() == ANSWERED_UNHELD {
                    answered.pop_front();
                }
                answered.push_back((ino, lease));
            }
            drop(t);
            if !keep_read {
                before_gone();
            }
            return (committed(), true);
        };
        if h.lease != 0 && h.lease != lease {
            tracing::debug!(
                ino,
                held = h.lease,
                revoked = lease,
                "revoke of an older grant; handing back the current one"
            );
        }
        h.revoking = true;
        while t.get(&ino).is_some_and(|h| h.pins > 0) {
            self.cond.wait(&mut t);
        }
        if !keep_read {
            // `revoking` stays set meanwhile: no call pins the inode.
            drop(t);
            before_gone();
            t = self.table.lock();
        }
        let covered = committed();
        let gone = !keep_read;
        if gone {
            t.remove(&ino);
        } else if let Some(h) = t.get_mut(&ino) {
            h.write = false;
            h.revoking = false;
            // Kept: another client may write the file now, but freeing its number needs the
            // write lease, and that takes this client's read lease first.
        }
        drop(t);
        self.cond.notify_all();
        (covered, gone)
    }

    /// The session has ended (failed, fenced, or nicfs gone): nicfs passes this client's
    /// leases on, so none is held from now on and none is recorded again. Returns the inodes
    /// that were held (not the pooled free numbers): whatever caches them outside libfs must
    /// drop it.
    pub(crate) fn drop_all(&self) -> Vec<u64> {
        let mut t = self.table.lock();
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        let held = t.iter().filter(|(_, h)| !h.pooled).map(|(&ino, _)| ino).collect();
        t.clear();
        drop(t);
        self.cond.notify_all();
        held
    }

    /// Leases held on inodes (for status; pooled free numbers left out): (readers, writers).
    pub(crate) fn counts(&self) -> (u64, u64) {
        let t = self.table.lock();
        let w = t.values().filter(|h| h.write && !h.pooled).count() as u64;
        let r = t.values().filter(|h| !h.write).count() as u64;
        (r, w)
    }
}

/// Pins taken by `Fs::leased` (`calls/leased.rs`), released when the call ends.
pub(crate) struct Pinned<'a> {
    pub(crate) leases: &'a Leases,
    pub(crate) need: Vec<Need>,
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        self.leases.unpin(&self.need);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_arriving_after_its_revoke_was_answered_is_not_recorded() {
        let l = Leases::default();
        // Revoked before the grant was seen: answered at once, as handed back.
        assert_eq!(l.revoke(7, 40, false, || 123, || {}), (123, true));
        l.granted(Grant { ino: 7, write: true, lease: 40 });
        assert_eq!(l.missing(&[Need::write(7)]).len(), 1, "the late grant must not count as held");
        // The next grant of the inode is recorded as usual.
        l.granted(Grant { ino: 7, write: true, lease: 41 });
        assert!(l.missing(&[Need::write(7)]).is_empty());
    }

    #[test]
    fn an_open_logged_is_remembered_only_while_a_lease_is_held() {
        let l = Leases::default();
        assert!(!l.open_logged(7));
        l.note_open_logged(7);
        assert!(!l.open_logged(7), "no lease held: nothing to remember it by");
        l.granted(Grant { ino: 7, write: false, lease: 1 });
        assert!(!l.open_logged(7));
        l.note_open_logged(7);
        assert!(l.open_logged(7), "under a read lease");
        // Upgraded, then downgraded to a read lease: remembered throughout.
        l.granted(Grant { ino: 7, write: true, lease: 2 });
        assert!(l.open_logged(7));
        l.revoke(7, 2, true, || 0, || {});
        assert!(l.open_logged(7));
        // Handed back: forgotten, also once a lease comes back.
        l.revoke(7, 2, false, || 0, || {});
        assert!(!l.open_logged(7), "handed back");
        l.granted(Grant { ino: 7, write: true, lease: 3 });
        assert!(!l.open_logged(7));
        // A file created here counts as opened; freed here, or the session ended, forgotten.
        l.created(8);
        assert!(l.open_logged(8));
        l.freed(8);
        assert!(!l.open_logged(8));
        l.created(9);
        l.drop_all();
        assert!(!l.open_logged(9));
    }

    #[test]
    fn the_sole_client_holds_everything_and_records_nothing() {
        let l = Leases::sole();
        let need = [Need::write(3), Need::read(4)];
        assert!(l.missing(&need).is_empty());
        assert!(l.unloaded(&need).is_empty());
        assert!(l.try_pin(&need));
        assert!(l.claim(9));
        assert!(l.open_logged(3), "no OPEN_WRITE is ever needed");
        l.created(5);
        l.pool(6);
        l.granted(Grant { ino: 7, write: true, lease: 1 });
        assert_eq!(l.counts(), (0, 0), "nothing is recorded");
        assert!(l.drop_all().is_empty());
        assert!(l.holds_everything());
        assert!(!Leases::default().holds_everything());
    }

    #[test]
    fn nothing_is_held_after_the_session_ends() {
        let l = Leases::default();
        l.granted(Grant { ino: 3, write: true, lease: 1 });
        l.granted(Grant { ino: 4, write: false, lease: 2 });
        l.pool(9);
        let mut held = l.drop_all();
        held.sort_unstable();
        assert_eq!(held, [3, 4], "pooled free numbers are not caches to drop");
        assert_eq!(l.missing(&[Need::read(3), Need::read(4)]).len(), 2);
        assert!(!l.try_pin(&[Need::read(3)]));
        // A grant still in flight when the session ended is not recorded.
        l.granted(Grant { ino: 5, write: true, lease: 3 });
        assert_eq!(l.missing(&[Need::write(5)]).len(), 1);
    }
}
