//! How a restart's recovery judges the committed log suffixes the crash left
//! (pm's [`RecoveryPolicy`]): every entry by the write leases recorded in PM
//! ([`LeaseFile::admits`]), and, for a slot whose session's credentials are recorded, every
//! entry at or past its admitted LSN by meaning too — the permission rules of publication,
//! for the caller those credentials resolve ([`crate::node::caller::resolve_for`]), against the
//! state recovery has built so far.
//!
//! Write grants (what a session may write whatever the modes say, [`crate::node::grants`]) are not
//! recorded: those an entry of the suffix makes (a create, an OPEN_WRITE) hold for the
//! entries after it, as in publication; one made by an entry published before the crash is
//! gone. So a write, past the admitted LSN, to a file whose mode does not let the caller
//! write it, through an open or a create published before the crash (a chmod after the
//! open, a file created 0444), is refused at recovery, with what follows it: an unsynced
//! suffix lost in that corner (fsync waits for publication, so nothing an fsync
//! acknowledged is lost). A free, of any slot, ends every slot's grant of the number.

use crate::node::lease_record::{LeaseFile, SlotCreds};
use linefs_pm::public::Permissions;
use linefs_pm::record::{Caller, Record};
use linefs_pm::recovery::RecoveryPolicy;
use std::cell::RefCell;
use std::collections::HashSet;

/// The policy of one recovery.
pub(crate) struct Rejudge<'a> {
    leases: &'a LeaseFile,
    /// Whether the lease record survived (else the logs are trusted, as before leases were
    /// recorded: a new node, or one run host-only until now).
    recorded: bool,
    /// (slot, inode): the grants the replayed entries made.
    grants: RefCell<HashSet<(u32, u64)>>,
}

impl<'a> Rejudge<'a> {
    pub(crate) fn new(leases: &'a LeaseFile, recorded: bool) -> Rejudge<'a> {
        Rejudge { leases, recorded, grants: RefCell::default() }
    }
}

impl RecoveryPolicy for Rejudge<'_> {
    fn admit(&mut self, slot: u32, lsn: u64, records: &[Record]) -> Result<(), String> {
        if !self.recorded {
            return Ok(());
        }
        self.leases.admits(slot, lsn, records.iter().filter_map(Record::changed_inode))
    }

    fn judge(&mut self, slot: u32) -> Option<(u64, Box<dyn Permissions + '_>)> {
        if !self.recorded {
            return None;
        }
        let (admitted, creds) = self.leases.session(slot)?;
        Some((admitted, Box::new(SlotPerms { slot, creds, grants: &self.grants })))
    }
}

/// One slot's side of the permission checks at recovery.
struct SlotPerms<'a> {
    slot: u32,
    /// Its session's credentials, or why the record of them cannot be believed (then every
    /// entry judged is refused).
    creds: Result<SlotCreds, String>,
    grants: &'a RefCell<HashSet<(u32, u64)>>,
}

impl Permissions for SlotPerms<'_> {
    fn caller(&self, stated: Option<&Caller>) -> Result<Caller, String> {
        let c = self.creds.as_ref().map_err(Clone::clone)?;
        crate::node::caller::resolve_for(
            c.states_callers,
            c.uid,
            c.gid,
            &c.groups,
            stated.map(|s| (s.uid, s.gid, &s.groups[..])),
        )
    }

    fn may_write(&self, ino: u64) -> bool {
        self.grants.borrow().contains(&(self.slot, ino))
    }

    fn granted(&mut self, ino: u64) {
        self.grants.borrow_mut().insert((self.slot, ino));
    }

    fn freed(&mut self, ino: u64) {
        self.grants.borrow_mut().retain(|&(_, i)| i != ino);
    }
}
