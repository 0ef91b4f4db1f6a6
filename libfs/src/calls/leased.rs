//! How a call holds the leases it needs for its duration ([`Fs::leased`]), on top of the
//! lease table ([`crate::leases`]) and the node's link: acquire what is missing, have the
//! view re-read what is newly held, pin them all. In the host-only mode every lease is
//! held for good ([`crate::leases::Leases::sole`]): nothing is missing, nothing to pin.

use crate::error::FsResult;
use crate::leases::{Need, Pinned};
use crate::state::{Front, Fs};

impl Fs {
    /// Holds the leases a call needs for its duration: acquires what is missing, has the
    /// view re-read what is newly held, pins them all.
    pub(crate) fn leased(&self, need: &[Need]) -> FsResult<Pinned<'_>> {
        let remote = &self.client.link;
        let leases = remote.leases();
        if leases.holds_everything() {
            // Nothing to acquire, load or pin (the host-only mode's calls cost what they did
            // before there were leases).
            return Ok(Pinned { leases, need: Vec::new() });
        }
        let mut need: Vec<Need> = need.iter().filter(|n| n.ino != 0).copied().collect();
        need.sort_by_key(|n| (n.ino, !n.write));
        need.dedup_by_key(|n| n.ino);
        loop {
            for n in leases.missing(&need) {
                remote.request_lease(n)?;
            }
            let unloaded = leases.unloaded(&need);
            if !unloaded.is_empty() {
                let mut front = self.wlock();
                for ino in unloaded {
                    // Another call may have read it meanwhile.
                    if leases.needs_load(ino) {
                        let loaded = front.publication.public.read().reader().load_inode(ino)?;
                        front.view.reload(ino, loaded);
                        leases.mark_loaded(ino);
                    }
                }
            }
            if leases.try_pin(&need) {
                return Ok(Pinned { leases, need });
            }
            // A revoke came in between: start over.
        }
    }

    /// [`Fs::leased`] for `base` plus the inodes `more` finds in the view once `base` is
    /// held (a name's target: its inode is known only from the directory). Starts over if
    /// what `more` finds changed while its leases were being acquired.
    pub(crate) fn leased_with(&self, base: &[Need], more: impl Fn(&Front) -> Vec<Need>) -> FsResult<Pinned<'_>> {
        if self.client.link.leases().holds_everything() {
            // Whatever `more` finds is held too.
            return self.leased(base);
        }
        let mut extra: Vec<Need> = Vec::new();
        loop {
            let all: Vec<Need> = base.iter().chain(extra.iter()).copied().collect();
            let pinned = self.leased(&all)?;
            let found = more(&self.rlock());
            if found.iter().all(|f| pinned.need.iter().any(|p| p.ino == f.ino && (p.write || !f.write))) {
                return Ok(pinned);
            }
            drop(pinned);
            extra = found;
        }
    }
}
