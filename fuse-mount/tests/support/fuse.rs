//! Whether this machine can run the tests that make real FUSE mounts. Shared by path
//! (`#[path]`) by the integration tests of fuse-mount and of the `linefs` CLI; a test that
//! cannot run prints why and passes.

#![allow(dead_code)] // each test binary uses some of these

use std::path::Path;

/// Why FUSE mounts cannot be made here, if they cannot: they need /dev/fuse, and fusermount3
/// on PATH (an unprivileged mount goes through it; the tests unmount with it).
fn missing() -> Option<&'static str> {
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse does not exist");
    }
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()))
        .unwrap_or(false);
    (!found).then_some("fusermount3 is not installed")
}

/// True if FUSE mounts can be made; otherwise prints why the test is skipped.
pub fn fuse_available() -> bool {
    let why = missing();
    if let Some(why) = why {
        eprintln!("skipped: {why}");
    }
    why.is_none()
}

/// As [`fuse_available`], and the test runs as root: the daemons it starts mount with
/// `allow_other`, which needs root (or `user_allow_other` in /etc/fuse.conf).
pub fn fuse_available_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root");
        return false;
    }
    fuse_available()
}
