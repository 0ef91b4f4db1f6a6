//! Who may read the node's public file, and keeping the node's files to nicfs (issue 21,
//! class B; docs/SECURITY.md).
//!
//! Reading the public file is reading every file of the node, whatever its modes: it holds
//! every inode and every block. So it is a privilege, like the `disk` group's for a block
//! device: nicfs hands a descriptor of it (`Attached` with `public` set) only to a
//! *trusted* client — root, or a member of the group the operator names with
//! `--trusted-group GID|NAME` (none by default). Any other client is attached with its log
//! file alone; it may write entries (each judged by nicfs's admission rules) but reads
//! nothing of the node through nicfs — an untrusted user reads through a mount, whose root
//! daemon checks permissions. Membership is the kernel's word: the peer's gid from
//! SO_PEERCRED and its supplementary groups from SO_PEERGROUPS, both recorded when the
//! connection was made, never what a client states or what /proc says later.
//!
//! The node's files are nicfs's alone: at start the node directory is made mode 0700 and
//! every PM file in it (`public.pm`, `log-NN.pm`, `leases.pm`) 0600, so nobody else opens
//! them by path; clients get descriptors over the socket, which stays 0666.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use linefs_proto::PeerCred;

/// The attach decision's one input from the command line: the trusted group, if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Trust {
    pub(crate) group: Option<u32>,
}

impl Trust {
    /// Whether a peer of credentials `cred` and supplementary groups `groups` (the
    /// kernel's) may have the public file.
    pub(crate) fn trusted(&self, cred: &PeerCred, groups: &[u32]) -> bool {
        cred.uid == 0 || self.group.is_some_and(|g| cred.gid == g || groups.contains(&g))
    }
}

/// `--trusted-group`: a number, or a name looked up in `/etc/group` (a group only a
/// directory service knows must be given by number).
pub(crate) fn parse_group(s: &str) -> Result<u32, String> {
    if let Ok(gid) = s.parse::<u32>() {
        return Ok(gid);
    }
    let groups = std::fs::read_to_string("/etc/group").map_err(|e| format!("cannot read /etc/group: {e}"))?;
    group_in(&groups, s).ok_or_else(|| format!("no group {s:?} in /etc/group (give its number)"))
}

/// The gid of group `name` in the text of an `/etc/group`.
fn group_in(text: &str, name: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut f = line.split(':');
        (f.next()? == name).then_some(())?;
        f.nth(1)?.parse().ok()
    })
}

/// Makes the node directory 0700 and its PM files 0600: nobody but nicfs's user opens them
/// by path. A file that cannot be changed (another owner) is logged and left.
pub(crate) fn keep_node_private(dir: &Path) {
    let set = |path: &Path, mode: u32| {
        if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
            tracing::warn!(path = %path.display(), error = %e, "cannot make private (chmod {mode:o})");
        }
    };
    set(dir, 0o700);
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let is_pm = e.file_name().to_str().is_some_and(|n| n.ends_with(".pm") || n.ends_with(".pm.new"));
        if is_pm && e.file_type().is_ok_and(|t| t.is_file()) {
            set(&e.path(), 0o600);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_the_trusted_group_are_trusted_nobody_else() {
        let cred = |uid, gid| PeerCred { pid: 1, uid, gid };
        let none = Trust::default();
        assert!(none.trusted(&cred(0, 0), &[]));
        assert!(!none.trusted(&cred(1000, 0), &[0]), "no group is trusted by default, not even gid 0");
        let t = Trust { group: Some(6) };
        assert!(t.trusted(&cred(1000, 6), &[]), "primary group");
        assert!(t.trusted(&cred(1000, 100), &[4, 6]), "supplementary group");
        assert!(!t.trusted(&cred(1000, 100), &[4, 7]));
    }

    #[test]
    fn group_names_resolve_from_etc_group() {
        let text = "root:x:0:\ndisk:x:6:alice\nlinefs-readers:x:1234:bob,carol\nbad line\n";
        assert_eq!(group_in(text, "disk"), Some(6));
        assert_eq!(group_in(text, "linefs-readers"), Some(1234));
        assert_eq!(group_in(text, "linefs"), None);
        assert_eq!(group_in(text, "bad line"), None);
        assert_eq!(parse_group("42"), Ok(42));
        assert!(parse_group("no-such-group-here").unwrap_err().contains("no group"));
    }
}
