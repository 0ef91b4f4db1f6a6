//! A node of the previous PM format version (the stored version 6 image of
//! `pm/tests/data`, written out as a node directory) brought up by `linefs up`: upgraded in
//! place to version 7, served by its nicfs, its published tree and its committed but
//! unpublished log entries (replayed by recovery) read back through a mount; `linefs
//! upgrade` refuses a running cluster and finds nothing to do once the node is current.
//!
//! The mount part needs `/dev/fuse` and `fusermount3` (skipped with a note without them);
//! nicfs and kworker must be built beside `linefs` (`cargo build --bins`).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;
#[path = "common/cli.rs"]
mod common;
use common::{linefs, LINEFS};

/// The stored image (format in pm/tests/format_image.rs): `size N`, then `OFFSET HEX` lines.
fn read_image(rel: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../pm").join(rel);
    let text = fs::read_to_string(&path).unwrap();
    let mut image = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        if let Some(size) = line.strip_prefix("size ") {
            image = vec![0u8; size.parse().unwrap()];
            continue;
        }
        let (off, hex) = line.split_once(' ').unwrap();
        let off = usize::from_str_radix(off, 16).unwrap();
        for i in 0..64 {
            image[off + i] = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
    }
    image
}

fn pattern(off: u64, len: usize) -> Vec<u8> {
    (off..off + len as u64).map(|i| (i % 251) as u8 + 1).collect()
}

#[test]
fn up_upgrades_a_version_6_node_and_serves_it() {
    for name in ["nicfs", "kworker"] {
        let exe = Path::new(LINEFS).with_file_name(name);
        assert!(exe.is_file(), "{} is missing: build the daemons first (cargo build --bins)", exe.display());
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let pm = tmp.path().join("pm");
    let node = pm.join("node0");
    fs::create_dir_all(&node).unwrap();
    // The packed image: the public file (66 blocks), then the log file of slot 0.
    let image = read_image("tests/data/format-v6.img.hex");
    let public_len = 66 * 4096;
    for (name, bytes) in [("public.pm", &image[..public_len]), ("log-00.pm", &image[public_len..])] {
        fs::write(node.join(name), bytes).unwrap();
        fs::set_permissions(node.join(name), fs::Permissions::from_mode(0o600)).unwrap();
    }

    let out = linefs(&dir, &["up", "--nodes", "1", "--pm-dir", pm.to_str().unwrap()]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("PM format upgraded from version 6 to 7"), "{stderr}");
    let out = linefs(&dir, &["upgrade"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("is up: stop it first"));

    if fuse_available() {
        let mnt = tmp.path().join("mnt");
        fs::create_dir(&mnt).unwrap();
        assert!(linefs(&dir, &["mount", mnt.to_str().unwrap()]).status.success());
        // Published before: /docs/data, its two runs of data; committed after (replayed by
        // nicfs's recovery): /late, and /link removed.
        let data = fs::read(mnt.join("docs/data")).unwrap();
        assert_eq!(data.len(), 13 * 4096 + 100);
        assert_eq!(&data[4000..4200], &pattern(4000, 200)[..]);
        assert_eq!(&data[13 * 4096..], &pattern(13 * 4096, 100)[..]);
        assert!(data[..4000].iter().all(|&b| b == 0));
        assert_eq!(fs::read(mnt.join("late")).unwrap(), b"committed to the log, not yet published\n");
        assert!(!mnt.join("link").exists());
        // (A new file would not fit: the image's 64 data blocks are all within nicfs's
        // margin for publication's metadata.)
        assert!(linefs(&dir, &["umount", mnt.to_str().unwrap()]).status.success());
    }
    assert!(linefs(&dir, &["down"]).status.success());
    let out = linefs(&dir, &["upgrade"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("node 0: PM format version 7, nothing to do"));
    // The node's files are version 7 now: its superblock says so.
    let public = fs::read(node.join("public.pm")).unwrap();
    assert_eq!(u32::from_le_bytes(public[8..12].try_into().unwrap()), 7);
}
