//! Who a session's entries are checked for, and what it may write whatever the modes say
//! now (pm's [`Permissions`], whose rules are in `linefs_pm::public::policy`).
//!
//! * **The caller.** A client running as root — a mount daemon serving many users, or a
//!   process using the libfs API as root — states the caller of each operation (an
//!   entry's CALLER record) and is believed: root could do anything anyway. An entry
//!   without a CALLER record is root's. Any other client is held to what the kernel says it
//!   is: its uid and gid from SO_PEERCRED, its supplementary groups read from
//!   SO_PEERGROUPS of its connection when it attached; an entry stating another uid is refused.
//! * **Opens for writing.** POSIX lets a file opened for writing be written through that
//!   open after its mode changes. The client logs every open for writing (an OPEN_WRITE
//!   record, in an entry committed before the open returns); pm's policy checks it in log
//!   order, against the public state and the session's own entries before it — exactly
//!   the state the client checked the open on — and an admitted one, like a create, grants
//!   the session the file ([`crate::node::grants`]): the publication rules let the session write
//!   that file's data from then on, until its number is freed.
//! * **Write leases** ([`may_lease_write`]) go only where the caller could use them: a
//!   client not running as root gets the write lease of a free number unless it is in
//!   another session's implicit range (squatted, it would make that session's create of it
//!   fail), and of a live inode only if it owns it,
//!   may read or write it (libfs takes a file's or directory's write lease to update its
//!   access time after a read or a listing), holds a grant of it, it has no name left (to
//!   free it), or it could remove or move it: a directory whose parent it may write, a
//!   file named in a directory whose write lease it holds. Anything else is refused
//!   (EACCES) before the lease table sees the request.

use crate::lease::manager::Leases;
use crate::node::caller::resolve_for;
use crate::node::grants::Grants;
use crate::node::lease_record::LeaseFile;
use crate::session::Session;
use linefs_pm::public::{allows, Permissions, PublicReader};
use linefs_pm::record::Caller;

/// A session's side of the permission checks of its batches.
pub struct SessionPerms<'a> {
    pub session: &'a Session,
    /// The node's write grants.
    pub grants: &'a Grants,
    /// Where the session's admitted LSN is recorded for recovery (None: nowhere).
    pub record: Option<&'a LeaseFile>,
}

impl Permissions for SessionPerms<'_> {
    fn caller(&self, stated: Option<&Caller>) -> Result<Caller, String> {
        resolve(self.session, stated.map(|c| (c.uid, c.gid, &c.groups[..])))
    }

    fn may_write(&self, ino: u64) -> bool {
        self.grants.holds(self.session.id, ino)
    }

    fn granted(&mut self, ino: u64) {
        self.grants.grant(self.session.id, ino);
    }

    fn freed(&mut self, ino: u64) {
        self.grants.freed(ino);
    }

    fn admitting(&mut self, upto: u64) {
        if let Some(record) = self.record {
            record.admitting(self.session.slot, upto);
        }
    }
}

/// The caller to check for, given what the client states (uid, gid, groups).
fn resolve(session: &Session, stated: Option<(u32, u32, &[u32])>) -> Result<Caller, String> {
    let peer = &session.cred;
    resolve_for(peer.uid == 0, peer.uid, peer.gid, &session.groups, stated)
}

/// The supplementary groups of the process at the other end of `stream`, as the kernel
/// recorded them when it connected (SO_PEERGROUPS) — not read from `/proc/<pid>`, which a
/// departed pid (or one reused since) makes say anything.
pub fn peer_groups(stream: &impl std::os::fd::AsRawFd) -> std::io::Result<Vec<u32>> {
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a live buffer of `len` bytes, and the kernel writes at most
        // `len` bytes to it and the size it needs (or wrote) to `len`.
        let r = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 65536 {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
}

/// At most this many directories the session holds are searched for a name of a file it
/// asks the write lease of (the last rule of [`may_lease_write`]).
const LEASED_DIRS_SEARCHED: usize = 256;

/// Whether `session` may take the write lease of `ino` (module docs).
pub fn may_lease_write(
    public: &PublicReader,
    grants: &Grants,
    leases: &Leases,
    session: &Session,
    ino: u64,
) -> Result<(), &'static str> {
    let peer = &session.cred;
    if peer.uid == 0 {
        return Ok(());
    }
    let caller = Caller { uid: peer.uid, gid: peer.gid, groups: session.groups.clone() };
    let Ok(inode) = public.read_inode(ino) else { return Ok(()) };
    let img = inode.img;
    // A free number: not one handed to another session to create with.
    if img.mode == 0 {
        return match leases.implicit_session(ino) {
            Some(s) if s != session.id => Err("the number is free and another session's to create with"),
            _ => Ok(()),
        };
    }
    if img.nlink == 0 || img.uid == caller.uid || allows(&caller, &img, 4) || allows(&caller, &img, 2) {
        return Ok(());
    }
    if grants.holds(session.id, ino) {
        return Ok(());
    }
    if img.mode & libc::S_IFMT == libc::S_IFDIR {
        let parent = public.read_inode(img.parent).map(|p| p.img);
        if img.parent != ino && parent.is_ok_and(|p| allows(&caller, &p, 3)) {
            return Ok(());
        }
    } else {
        let named = leases.written_by(session.id).into_iter().take(LEASED_DIRS_SEARCHED).any(|d| {
            matches!(public.load_inode(d), Ok(Some((dir, Some(ents)))) if allows(&caller, &dir.img, 3) && ents.iter().any(|e| e.ino == ino))
        });
        if named {
            return Ok(());
        }
    }
    tracing::debug!(
        session = session.id,
        uid = caller.uid,
        ino,
        "write lease refused: the caller could change nothing of it"
    );
    Err("the caller may not change this inode")
}

#[cfg(test)]
mod tests {
    #[test]
    fn peer_groups_are_the_kernel_s_record_of_the_connecting_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut want = rustix::process::getgroups().unwrap().iter().map(|g| g.as_raw()).collect::<Vec<_>>();
        let mut got = super::peer_groups(&a).unwrap();
        want.sort();
        got.sort();
        assert_eq!(got, want);
    }
}
