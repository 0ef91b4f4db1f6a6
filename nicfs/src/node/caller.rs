//! The caller an entry of a session is checked for, from what the kernel says the client
//! is and what the client states (the rule in [`crate::lease::perms`]'s notes: root states
//! callers and is believed; anyone else is held to its own uid). Used by publication's
//! admission and by recovery's judgement of what nicfs had not applied
//! ([`crate::node::rejudge`]), so both judge the same way.
//!
//! Imports nothing of nicfs.

use linefs_pm::record::Caller;

/// The caller to check for, for a client of `uid`, `gid` and `groups` that may state
/// callers (`states`: it runs as root) or not, given what it states.
pub(crate) fn resolve_for(
    states: bool,
    uid: u32,
    gid: u32,
    groups: &[u32],
    stated: Option<(u32, u32, &[u32])>,
) -> Result<Caller, String> {
    if states {
        return Ok(match stated {
            Some((uid, gid, groups)) => Caller { uid, gid, groups: groups.to_vec() },
            None => Caller::default(),
        });
    }
    if let Some((s, _, _)) = stated {
        if s != uid {
            return Err(format!("states uid {s}, but the client process runs as uid {uid}"));
        }
    }
    Ok(Caller { uid, gid, groups: groups.to_vec() })
}
