//! Lease expiry: time is an input of the table like any other ([`Input::Tick`](super::Input::Tick)), so that
//! the table stays pure and the simulation drives its clock.
//!
//! * The table's clock is the time of the last tick; it never goes back. (The daemon ticks
//!   from a timer and before every other input, so the clock is current when a revoke is
//!   sent: a holder always gets the whole timeout.)
//! * With a revoke timeout `T` ([`LeaseTable::with_revoke_timeout`]; 0, the default: revokes
//!   never expire), a revoke sent at `now` is due at `now + T`, and a tick later than that
//!   expires its holder: the table emits [`Output::Expire`] naming that revoke, marks the
//!   session expired, disarms its other deadlines (a session expires once) and drops its
//!   waiting requests, so that the queues they were in move on.
//! * An expired session keeps what it holds until `SessionEnded`. The daemon fences it
//!   meanwhile: it publishes the session's log up to where it stood when fenced — entries
//!   logged under leases the session still holds, admitted as any others — and nothing
//!   after, then ends it; only then does a waiting request get the inode, exactly as after
//!   a client's death. The table ignores the session's requests (the daemon refuses its
//!   calls) and takes its hand-backs as stale: a revoke answered after its deadline changes
//!   nothing.
//!
//! Invariants (`LeaseTable::check`): with a timeout, every revoke in flight to a session
//! that has not expired has a deadline, and no other revoke has one; the index of deadlines
//! holds exactly those; after any step no deadline has passed (a tick expires every
//! overdue one) and none lies more than the timeout ahead; an expired session has no
//! request waiting.

use super::{Ino, LeaseId, LeaseTable, Output, Revoking, SessionId};
use std::collections::BTreeSet;
use std::fmt;

/// Why a session expired: the revoke it did not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expiry {
    /// The inode the revoke asked back, and the lease it named.
    pub(crate) ino: Ino,
    pub(crate) lease: LeaseId,
    /// The timeout it exceeded.
    pub(crate) timeout_ms: u64,
}

impl fmt::Display for Expiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "did not answer the revoke of inode {} within {} ms", self.ino, self.timeout_ms)
    }
}

/// The clock, the timeout and the deadlines of the revokes in flight.
#[derive(Debug, Default)]
pub(super) struct Deadlines {
    /// 0: revokes never expire.
    timeout_ms: u64,
    /// The last tick's time.
    now: u64,
    /// `(deadline, session, inode)` of every revoke in flight that has a deadline.
    due: BTreeSet<(u64, SessionId, Ino)>,
}

impl Deadlines {
    /// The deadline of a revoke of `ino` sent to `s` now, recorded — none if revokes do not
    /// expire or `s` has expired already.
    pub(super) fn arm(&mut self, s: SessionId, ino: Ino, expired: bool) -> Option<u64> {
        if self.timeout_ms == 0 || expired {
            return None;
        }
        let deadline = self.now.saturating_add(self.timeout_ms);
        self.due.insert((deadline, s, ino));
        Some(deadline)
    }

    /// Forgets the deadline of `r`, the revoke of `ino` to `s`, which has ended.
    pub(super) fn disarm(&mut self, s: SessionId, ino: Ino, r: &Revoking) {
        if let Some(deadline) = r.deadline {
            self.due.remove(&(deadline, s, ino));
        }
    }
}

impl LeaseTable {
    /// This table, with revokes expiring `timeout_ms` after they are sent (0: never).
    pub(crate) fn with_revoke_timeout(mut self, timeout_ms: u64) -> LeaseTable {
        self.deadlines.timeout_ms = timeout_ms;
        self
    }

    /// The revoke timeout (0: revokes never expire).
    pub(crate) fn revoke_timeout_ms(&self) -> u64 {
        self.deadlines.timeout_ms
    }

    /// Whether session `s` has expired (and not yet ended).
    pub(crate) fn expired(&self, s: SessionId) -> bool {
        self.sessions.get(&s).is_some_and(|i| i.expired)
    }

    /// The earliest deadline of a revoke in flight: a tick later than this expires a
    /// session.
    #[cfg(test)]
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.deadlines.due.first().map(|d| d.0)
    }

    /// `Tick{now}`: moves the clock on and expires every holder with a revoke overdue.
    pub(super) fn tick(&mut self, now: u64, out: &mut Vec<Output>) {
        self.deadlines.now = self.deadlines.now.max(now);
        while let Some(&(deadline, s, ino)) = self.deadlines.due.first() {
            if deadline >= self.deadlines.now {
                break;
            }
            self.expire(s, ino, out);
        }
    }

    /// Session `s` did not answer its revoke of `ino` in time.
    fn expire(&mut self, s: SessionId, ino: Ino, out: &mut Vec<Output>) {
        // Every deadline of `s` goes: it expires once.
        let armed: Vec<(u64, Ino)> = self.deadlines.due.iter().filter(|d| d.1 == s).map(|d| (d.0, d.2)).collect();
        let mut lease = 0;
        for (deadline, i) in armed {
            self.deadlines.due.remove(&(deadline, s, i));
            if let Some(r) = self.inodes.get_mut(&i).and_then(|st| st.revoking.get_mut(&s)) {
                r.deadline = None;
                if i == ino {
                    lease = r.lease;
                }
            }
        }
        self.counters.expired += 1;
        let reason = Expiry { ino, lease, timeout_ms: self.deadlines.timeout_ms };
        tracing::debug!(session = s, ino, lease, "revoke not answered in time: the session expires");
        out.push(Output::Expire { session: s, reason });
        let Some(info) = self.sessions.get_mut(&s) else { return };
        info.expired = true;
        // Its waiting requests go (the daemon refuses its calls from now on): the requests
        // behind them move up.
        let queued: Vec<Ino> = info
            .inodes
            .iter()
            .copied()
            .filter(|i| self.inodes.get(i).is_some_and(|st| st.queue.iter().any(|w| w.session == s)))
            .collect();
        for i in queued {
            if let Some(st) = self.inodes.get_mut(&i) {
                let before = st.queue.len();
                st.queue.retain(|w| w.session != s);
                let dropped = before - st.queue.len();
                if let Some(info) = self.sessions.get_mut(&s) {
                    info.waiting = info.waiting.saturating_sub(dropped);
                }
            }
            self.pump(i, out);
            self.tidy(i, s);
        }
    }

    /// The invariants of expiry (see the module docs).
    #[cfg(test)]
    pub(super) fn check_deadlines(&self) -> Result<(), String> {
        let d = &self.deadlines;
        let mut armed = BTreeSet::new();
        for (&ino, st) in &self.inodes {
            for (&s, r) in &st.revoking {
                let expired = self.expired(s);
                match r.deadline {
                    Some(deadline) if expired || d.timeout_ms == 0 => {
                        return Err(format!(
                            "inode {ino}: a deadline ({deadline}) for session {s}, which cannot expire"
                        ));
                    }
                    Some(deadline) => {
                        armed.insert((deadline, s, ino));
                    }
                    None if d.timeout_ms != 0 && !expired => {
                        return Err(format!("inode {ino}: the revoke to session {s} has no deadline"));
                    }
                    None => {}
                }
            }
        }
        if armed != d.due {
            return Err(format!("the deadlines indexed {:?} are not those of the revokes in flight {armed:?}", d.due));
        }
        if let Some(&(deadline, s, ino)) = d.due.first() {
            if deadline < d.now {
                return Err(format!("the revoke of inode {ino} to session {s} is overdue ({deadline} < {})", d.now));
            }
        }
        if let Some(&(deadline, s, ino)) = d.due.last() {
            if deadline > d.now.saturating_add(d.timeout_ms) {
                return Err(format!("the revoke of inode {ino} to session {s} is due too late ({deadline})"));
            }
        }
        if let Some((s, _)) = self.sessions.iter().find(|(_, i)| i.expired && i.waiting > 0) {
            return Err(format!("expired session {s} has requests waiting"));
        }
        Ok(())
    }
}
