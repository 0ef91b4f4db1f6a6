//! Caller credentials for FUSE requests.
//!
//! A FUSE request carries the caller's uid, gid and pid but not its supplementary groups, which
//! libfs needs for permission checks (`Cred::in_group`). We read them from the `Groups:` line
//! of `/proc/<pid>/status`; if that cannot be read (the process has exited, or the request
//! comes from the kernel with pid 0) the list is empty.
//!
//! Reading `/proc/<pid>/status` costs several microseconds, which would show in the latency
//! of every write. Results are therefore cached for [`CACHE_TTL`], keyed by
//! `(pid, uid, gid)`: a process that changes its supplementary groups without changing its
//! uid or gid sees the new groups at most one TTL later. Only the kernel's
//! `default_permissions` checks (on by default) and libfs's own checks use the groups.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// How long a process's supplementary groups are cached.
pub const CACHE_TTL: Duration = Duration::from_secs(1);

/// Entries beyond this are dropped wholesale (a cheap bound on the cache's memory).
const CACHE_MAX: usize = 4096;

/// `(pid, uid, gid)` of a request.
type CallerKey = (u32, u32, u32);

/// Builds [`libfs::Cred`] values for requests, caching supplementary groups per process.
#[derive(Debug, Default)]
pub struct CredCache {
    cache: Mutex<HashMap<CallerKey, (Instant, Vec<u32>)>>,
}

impl CredCache {
    pub fn new() -> CredCache {
        CredCache::default()
    }

    /// The credentials of a request from `pid` running as `uid`/`gid`.
    pub fn cred(&self, uid: u32, gid: u32, pid: u32) -> libfs::Cred {
        libfs::Cred { uid, gid, groups: self.groups(uid, gid, pid) }
    }

    fn groups(&self, uid: u32, gid: u32, pid: u32) -> Vec<u32> {
        if pid == 0 {
            return Vec::new();
        }
        let key = (pid, uid, gid);
        let now = Instant::now();
        if let Some((at, groups)) = self.cache.lock().get(&key) {
            if now.duration_since(*at) < CACHE_TTL {
                return groups.clone();
            }
        }
        let groups = read_groups(pid);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, (now, groups.clone()));
        groups
    }
}

/// The supplementary groups of process `pid`, empty if they cannot be read.
pub fn read_groups(pid: u32) -> Vec<u32> {
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) => parse_groups(&status),
        Err(e) => {
            tracing::debug!(pid, error = %e, "cannot read supplementary groups");
            Vec::new()
        }
    }
}

/// Parses the `Groups:` line of a `/proc/<pid>/status` text.
pub fn parse_groups(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|rest| rest.split_whitespace().filter_map(|g| g.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_groups_line() {
        let status = "Name:\tbash\nUid:\t0\t0\t0\t0\nGroups:\t4 24 27 \nNgid:\t0\n";
        assert_eq!(parse_groups(status), vec![4, 24, 27]);
        assert_eq!(parse_groups("Groups:\t\n"), Vec::<u32>::new());
        assert_eq!(parse_groups("Name: x\n"), Vec::<u32>::new());
    }

    #[test]
    fn reads_own_groups() {
        let cache = CredCache::new();
        let me = std::process::id();
        let a = cache.cred(0, 0, me);
        let b = cache.cred(0, 0, me);
        assert_eq!(a, b);
        assert!(cache.cred(0, 0, 0).groups.is_empty());
    }
}
