//! Fair use: the per-user limits an operator sets (`nicfs` flags, passed on by `linefs up`),
//! the connection count they bound, the backoff of users whose sessions were fenced, and
//! the count of everything refused because of them (status: `refusals`).
//!
//! Root (uid 0) is trusted — the mount daemon serves every user — and is held to none of
//! the per-user limits; the log slots keep a reserve for it, so that a user who takes every
//! slot it may still leaves root able to mount (and to mount again after it unmounts).
//!
//! | limit | flag | default |
//! |-------|------|---------|
//! | connections of all unprivileged users | `--max-connections` | 1024 |
//! | connections per unprivileged uid | `--max-connections-per-uid` | 64 |
//! | log slots per unprivileged uid | `--max-slots-per-uid` | half the slots not reserved for root, at least 2 (at most all of them) |
//! | log slots only root may claim | `--root-reserved-slots` | 1 (0 on a node of one slot) |
//! | inode numbers granted and not yet used, per unprivileged uid | `--max-inodes-per-uid` | half the inode table, at least 256 (4 first grants) |
//! | data blocks reserved and not yet handed back, per unprivileged uid | `--max-blocks-per-uid` | half the data blocks |
//! | after a session of a uid is fenced, no lease for that uid's sessions for | `--fenced-backoff-ms` | 10000, doubled for each further fencing within the backoff, at most 10 min |
//!
//! A connection is counted from `accept` to its end; a connection past a limit is answered
//! one Error frame (`EUSERS`) and closed by the accepting thread, which starts no thread
//! for it. Each refusal is counted by kind and logged, at most once a second per kind
//! (the count of the ones not logged goes with the next line).

use parking_lot::Mutex;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `--max-connections` by default.
pub(crate) const DEFAULT_MAX_CONNECTIONS: u32 = 1024;
/// `--max-connections-per-uid` by default.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_UID: u32 = 64;
/// `--fenced-backoff-ms` by default.
pub(crate) const DEFAULT_FENCED_BACKOFF_MS: u64 = 10_000;
/// The longest a backoff grows to.
pub(crate) const MAX_FENCED_BACKOFF: Duration = Duration::from_secs(600);

/// The limits in force (0 in a flag means "the default for this node", resolved by
/// [`crate::config::LimitRequest::resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Limits {
    pub(crate) max_connections: u32,
    pub(crate) max_connections_per_uid: u32,
    pub(crate) max_slots_per_uid: u32,
    pub(crate) root_reserved_slots: u32,
    pub(crate) max_inodes_per_uid: u64,
    pub(crate) max_blocks_per_uid: u64,
    pub(crate) fenced_backoff_ms: u64,
}

#[cfg(test)]
impl Limits {
    /// No limit at all (tests of other parts).
    pub(crate) fn none() -> Limits {
        Limits {
            max_connections: u32::MAX,
            max_connections_per_uid: u32::MAX,
            max_slots_per_uid: u32::MAX,
            root_reserved_slots: 0,
            max_inodes_per_uid: u64::MAX,
            max_blocks_per_uid: u64::MAX,
            fenced_backoff_ms: 0,
        }
    }
}

/// What was refused, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Refusal {
    /// A connection past `--max-connections` or `--max-connections-per-uid`.
    Connection,
    /// An attach past `--max-slots-per-uid`, or into the root reserve.
    Slot,
    /// A kworker Hello from a uid that is not the kworker's.
    Kworker,
    /// A lease request during its uid's backoff.
    Fenced,
    /// Inode numbers past `--max-inodes-per-uid`, or none free.
    Inodes,
    /// A block reservation past `--max-blocks-per-uid`, or the free space.
    Blocks,
    /// A session whose log file was resized under nicfs.
    LogResized,
}

const KINDS: [Refusal; 7] = [
    Refusal::Connection,
    Refusal::Slot,
    Refusal::Kworker,
    Refusal::Fenced,
    Refusal::Inodes,
    Refusal::Blocks,
    Refusal::LogResized,
];

/// Refusals since start, by kind (status).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub(crate) struct RefusalCounts {
    pub(crate) connections: u64,
    pub(crate) slots: u64,
    pub(crate) kworker: u64,
    pub(crate) fenced: u64,
    pub(crate) inodes: u64,
    pub(crate) blocks: u64,
    pub(crate) log_resized: u64,
}

/// Counts refusals and rate-limits their log lines.
#[derive(Default)]
pub(crate) struct Refusals {
    counts: [AtomicU64; KINDS.len()],
    /// Per kind: when a line was last logged, and how many were not logged since.
    logged: Mutex<HashMap<Refusal, (Instant, u64)>>,
}

impl Refusals {
    /// Counts a refusal of `kind` and logs it (`who`, `why`) unless a line of that kind was
    /// logged less than a second ago.
    pub(crate) fn refused(&self, kind: Refusal, who: &str, why: &str) {
        let i = KINDS.iter().position(|k| *k == kind).expect("every kind is listed");
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut logged = self.logged.lock();
        let e = logged.entry(kind).or_insert((now - Duration::from_secs(2), 0));
        if now.duration_since(e.0) >= Duration::from_secs(1) {
            let unlogged = e.1;
            *e = (now, 0);
            drop(logged);
            tracing::warn!(kind = ?kind, peer = who, unlogged, "refused: {why}");
        } else {
            e.1 += 1;
        }
    }

    pub(crate) fn counts(&self) -> RefusalCounts {
        let c = |k: Refusal| self.counts[KINDS.iter().position(|x| *x == k).unwrap()].load(Ordering::Relaxed);
        RefusalCounts {
            connections: c(Refusal::Connection),
            slots: c(Refusal::Slot),
            kworker: c(Refusal::Kworker),
            fenced: c(Refusal::Fenced),
            inodes: c(Refusal::Inodes),
            blocks: c(Refusal::Blocks),
            log_resized: c(Refusal::LogResized),
        }
    }
}

/// The open connections of unprivileged users: all of them, and per uid.
#[derive(Default)]
pub(crate) struct Connections {
    inner: Mutex<(u32, HashMap<u32, u32>)>,
}

/// One counted connection; uncounted when dropped.
pub(crate) struct Counted {
    conns: Arc<Connections>,
    uid: u32,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.uid == 0 {
            return;
        }
        let mut inner = self.conns.inner.lock();
        inner.0 -= 1;
        if let Some(n) = inner.1.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                inner.1.remove(&self.uid);
            }
        }
    }
}

impl Connections {
    /// Counts a new connection of `uid`, or says why it is past a limit. Root's are not
    /// limited.
    pub(crate) fn admit(self: &Arc<Self>, uid: u32, limits: &Limits) -> Result<Counted, String> {
        if uid != 0 {
            let mut inner = self.inner.lock();
            let of_uid = inner.1.get(&uid).copied().unwrap_or(0);
            if of_uid >= limits.max_connections_per_uid {
                return Err(format!(
                    "uid {uid} has {of_uid} connections open (--max-connections-per-uid {})",
                    limits.max_connections_per_uid
                ));
            }
            if inner.0 >= limits.max_connections {
                return Err(format!(
                    "unprivileged users have {} connections open (--max-connections {})",
                    inner.0, limits.max_connections
                ));
            }
            inner.0 += 1;
            *inner.1.entry(uid).or_default() += 1;
        }
        Ok(Counted { conns: self.clone(), uid })
    }

    /// Connections of unprivileged users open now.
    pub(crate) fn open(&self) -> u32 {
        self.inner.lock().0
    }
}

/// The uids whose sessions were fenced recently (a revoke left unanswered past the lease
/// timeout), and until when their sessions get no lease.
#[derive(Default)]
pub(crate) struct Fenced {
    /// uid → (the backoff's end, its length).
    map: Mutex<HashMap<u32, (Instant, Duration)>>,
    base_ms: AtomicU64,
}

impl Fenced {
    pub(crate) fn set_base(&self, ms: u64) {
        self.base_ms.store(ms, Ordering::Relaxed);
    }

    /// A session of `uid` was fenced: its backoff starts now, twice as long as the last one
    /// if that had not ended yet. Root is not backed off.
    pub(crate) fn fenced(&self, uid: u32) {
        let base = Duration::from_millis(self.base_ms.load(Ordering::Relaxed));
        if uid == 0 || base.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut map = self.map.lock();
        let len = match map.get(&uid) {
            Some(&(until, len)) if until > now => (len * 2).min(MAX_FENCED_BACKOFF),
            _ => base,
        };
        map.insert(uid, (now + len, len));
        tracing::warn!(
            uid,
            backoff_ms = len.as_millis() as u64,
            "a session of the uid was fenced: its leases are refused for the backoff"
        );
    }

    /// How long `uid`'s sessions still get no lease, if they do not.
    pub(crate) fn backoff(&self, uid: u32) -> Option<Duration> {
        let now = Instant::now();
        let map = self.map.lock();
        map.get(&uid).and_then(|&(until, _)| until.checked_duration_since(now)).filter(|d| !d.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_counted_per_uid_and_root_is_not_limited() {
        let limits = Limits { max_connections: 3, max_connections_per_uid: 2, ..Limits::none() };
        let c = Arc::new(Connections::default());
        let a = c.admit(1000, &limits).ok().unwrap();
        let _b = c.admit(1000, &limits).ok().unwrap();
        assert!(c.admit(1000, &limits).err().unwrap().contains("--max-connections-per-uid 2"));
        let _d = c.admit(1001, &limits).ok().unwrap();
        assert!(c.admit(1002, &limits).err().unwrap().contains("--max-connections 3"));
        let roots: Vec<_> = (0..10).map(|_| c.admit(0, &limits).ok().unwrap()).collect();
        assert_eq!(c.open(), 3);
        drop(a);
        assert_eq!(c.open(), 2);
        assert!(c.admit(1000, &limits).is_ok());
        drop(roots);
    }

    #[test]
    fn a_fenced_uid_backs_off_longer_each_time_root_never() {
        let f = Fenced::default();
        f.set_base(200);
        assert_eq!(f.backoff(7), None);
        f.fenced(7);
        let first = f.backoff(7).unwrap();
        assert!(first <= Duration::from_millis(200) && first > Duration::from_millis(100), "{first:?}");
        f.fenced(7);
        assert!(f.backoff(7).unwrap() > Duration::from_millis(300), "doubled within the backoff");
        f.fenced(0);
        assert_eq!(f.backoff(0), None);
    }

    #[test]
    fn refusals_are_counted_even_when_not_logged() {
        let r = Refusals::default();
        for _ in 0..100 {
            r.refused(Refusal::Connection, "uid 1", "test");
        }
        r.refused(Refusal::Kworker, "uid 1", "test");
        assert_eq!(r.counts(), RefusalCounts { connections: 100, kworker: 1, ..Default::default() });
    }
}
