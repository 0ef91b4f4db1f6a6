//! Permission checks, as a POSIX file system makes them.
//!
//! The kernel also checks when the mount uses `default_permissions`; libfs checks anyway,
//! because it is usable without FUSE and must not trust its caller's checks.

use crate::api::{Cred, R_OK, W_OK, X_OK};
use linefs_pm::record::InodeImage;

/// Whether `cred` may access `img` with `mask` (R_OK | W_OK | X_OK bits).
pub fn may(cred: &Cred, img: &InodeImage, mask: u32) -> bool {
    let mode = img.mode;
    if cred.uid == 0 {
        // Root may read and write anything; execute needs some x bit (or a directory).
        return mask & X_OK == 0 || mode & 0o111 != 0 || mode & libc::S_IFMT == libc::S_IFDIR;
    }
    let bits = if cred.uid == img.uid {
        (mode >> 6) & 7
    } else if cred.in_group(img.gid) {
        (mode >> 3) & 7
    } else {
        mode & 7
    };
    bits & mask == mask
}

/// Whether `cred` owns `img` or is root (chmod, utimes to explicit times, …).
pub fn owner_or_root(cred: &Cred, img: &InodeImage) -> bool {
    cred.uid == 0 || cred.uid == img.uid
}

/// Sticky-directory rule for removing or renaming `victim` out of `dir`.
pub fn sticky_allows(cred: &Cred, dir: &InodeImage, victim: &InodeImage) -> bool {
    dir.mode & libc::S_ISVTX == 0 || cred.uid == 0 || cred.uid == dir.uid || cred.uid == victim.uid
}

/// Linux's `__FMODE_EXEC` open flag: the kernel opens a file this way to execute it
/// (execve, uselib), and FUSE passes the flag through in its open request.
pub const FMODE_EXEC: i32 = 0x20;

/// The access mask an `open` with `flags` needs: an open to execute a file needs execute
/// permission, not read permission (a mode 0711 program runs for everyone); one that
/// truncates needs write permission whatever else it asks.
pub fn open_mask(flags: i32) -> u32 {
    let mut m = match flags & libc::O_ACCMODE {
        libc::O_RDONLY if flags & FMODE_EXEC != 0 => X_OK,
        libc::O_RDONLY => R_OK,
        libc::O_WRONLY => W_OK,
        _ => R_OK | W_OK,
    };
    if flags & libc::O_TRUNC != 0 {
        m |= W_OK;
    }
    m
}

/// Mode of `img` after a write, truncate or fallocate by `cred`, as Linux's
/// `setattr_should_drop_suidgid` has it (root standing for CAP_FSETID): setuid goes, and
/// setgid when the group may execute or the writer is not in the file's group; nothing goes
/// for root. (A FUSE kernel with `FUSE_HANDLE_KILLPRIV_V2`, as linefs mounts ask for, leaves
/// this to the file system.)
pub fn killpriv(cred: &Cred, img: &InodeImage) -> u32 {
    let mode = img.mode;
    if cred.uid == 0 || mode & libc::S_IFMT != libc::S_IFREG {
        return mode;
    }
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 || !cred.in_group(img.gid) {
        m &= !libc::S_ISGID;
    }
    m
}

/// Mode after a chown or chgrp of anything but a directory, whoever makes it and whether or
/// not the owner changes (Linux's `chown_common`): setuid goes, and setgid when the group may
/// execute.
pub fn chown_killpriv(mode: u32) -> u32 {
    if mode & libc::S_IFMT == libc::S_IFDIR {
        return mode;
    }
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(mode: u32, uid: u32, gid: u32) -> InodeImage {
        InodeImage { mode: libc::S_IFREG | mode, uid, gid, ..Default::default() }
    }

    #[test]
    fn owner_group_other() {
        let u = Cred { uid: 10, gid: 20, groups: vec![30] };
        assert!(may(&u, &img(0o600, 10, 0), R_OK | W_OK));
        assert!(!may(&u, &img(0o060, 10, 20), R_OK)); // owner bits win even if group allows
        assert!(may(&u, &img(0o040, 11, 30), R_OK));
        assert!(!may(&u, &img(0o004, 11, 30), R_OK));
        assert!(may(&u, &img(0o004, 11, 31), R_OK));
        let root = Cred::root();
        assert!(may(&root, &img(0o000, 1, 1), R_OK | W_OK));
        assert!(!may(&root, &img(0o644, 1, 1), X_OK));
        assert!(may(&root, &img(0o100, 1, 1), X_OK));
    }

    #[test]
    fn sticky_and_killpriv() {
        let dir = InodeImage { mode: libc::S_IFDIR | 0o1777, uid: 0, ..Default::default() };
        let u = Cred { uid: 10, gid: 10, groups: vec![] };
        assert!(!sticky_allows(&u, &dir, &img(0o644, 11, 0)));
        assert!(sticky_allows(&u, &dir, &img(0o644, 10, 0)));
        // img() makes regular files owned by (uid, gid).
        assert_eq!(killpriv(&u, &img(0o6755, 11, 10)) & 0o7777, 0o0755);
        // setgid without group exec stays for a writer in the file's group...
        assert_eq!(killpriv(&u, &img(0o6745, 11, 10)) & 0o7777, 0o2745);
        // ...and goes for one outside it (Linux's setattr_should_drop_sgid).
        assert_eq!(killpriv(&u, &img(0o6745, 11, 12)) & 0o7777, 0o0745);
        assert_eq!(killpriv(&Cred::root(), &img(0o6755, 11, 12)) & 0o7777, 0o6755);
        // chown: setuid always, setgid with group exec, root's chown too; not directories.
        assert_eq!(chown_killpriv(libc::S_IFREG | 0o6744) & 0o7777, 0o2744);
        assert_eq!(chown_killpriv(libc::S_IFREG | 0o6754) & 0o7777, 0o0754);
        assert_eq!(chown_killpriv(libc::S_IFDIR | 0o6755) & 0o7777, 0o6755);
    }
}
