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
/// permission, not read permission (a mode 0711 program runs for everyone).
pub fn open_mask(flags: i32) -> u32 {
    if flags & FMODE_EXEC != 0 && flags & libc::O_ACCMODE == libc::O_RDONLY {
        return X_OK;
    }
    let mut m = match flags & libc::O_ACCMODE {
        libc::O_RDONLY => R_OK,
        libc::O_WRONLY => W_OK,
        _ => R_OK | W_OK,
    };
    if flags & libc::O_TRUNC != 0 {
        m |= W_OK;
    }
    m
}

/// Mode after a write or truncate by `cred`: Linux clears setuid, and setgid when the group
/// may execute, unless the writer is root.
pub fn killpriv(cred: &Cred, mode: u32) -> u32 {
    if cred.uid == 0 {
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
        assert_eq!(killpriv(&u, libc::S_IFREG | 0o6755) & 0o7777, 0o0755);
        assert_eq!(killpriv(&u, libc::S_IFREG | 0o6745) & 0o7777, 0o2745);
        assert_eq!(killpriv(&Cred::root(), libc::S_IFREG | 0o6755) & 0o7777, 0o6755);
    }
}
