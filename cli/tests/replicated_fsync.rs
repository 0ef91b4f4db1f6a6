//! An fsync through a mount of a replicated cluster: when it returns, the file is durable on
//! every replica — node 0's nicfs and host killed (kill -9) right after it, the other nodes
//! still publish it from their copies and a mount of each reads it back with its bytes.
//! (Without the mount asking its nicfs at fsync, the file sat unpublished in node 0's log,
//! not replicated, and the replicas never had it.)
//!
//! Needs `nicfs` and `kworker` built beside `linefs` (`cargo build --bins`), java and the
//! `zookeeper` package (scripts/install-deps.sh), and `/dev/fuse`.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

#[path = "../../fuse-mount/tests/support/fuse.rs"]
mod support;
use support::fuse_available;
#[path = "common/cli.rs"]
mod common;
use common::{linefs, need_daemons, ok, Down};

/// Mounts node `node` at `mnt` again and again (a mount reads its node's public area as it
/// stands when it attaches) until `path` under it holds `want`, at most `timeout`.
fn read_back(dir: &Path, node: usize, mnt: &Path, path: &str, want: &[u8], timeout: Duration) {
    let start = Instant::now();
    loop {
        ok(dir, &["mount", "--node", &node.to_string(), &mnt.display().to_string()]);
        let got = fs::read(mnt.join(path));
        ok(dir, &["umount", &mnt.display().to_string()]);
        match got {
            Ok(g) if g == want => return,
            Ok(g) => assert!(start.elapsed() < timeout, "node {node}: {path} has {} bytes, not its own", g.len()),
            Err(e) => assert!(start.elapsed() < timeout, "node {node}: {path}: {e}"),
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn an_fsynced_file_is_on_every_replica_when_node_0_dies_right_after() {
    need_daemons();
    if !fuse_available() {
        eprintln!("skipped: no /dev/fuse");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cluster");
    let _down = Down(&dir);
    ok(&dir, &["up", "--nodes", "3", "--pm-size", "64M"]);
    let mnt = tmp.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    ok(&dir, &["mount", &mnt.display().to_string()]);
    // Small: far below a chunk, so nothing but the fsync publishes or replicates it.
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
    fs::create_dir(mnt.join("d")).unwrap();
    let mut f = File::create(mnt.join("d/f")).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    File::open(mnt.join("d")).unwrap().sync_all().unwrap();
    File::open(&mnt).unwrap().sync_all().unwrap();
    // Node 0 dies at once: nicfs and the host (the mount daemon, kworker).
    ok(&dir, &["kill-nic", "0"]);
    ok(&dir, &["kill-host", "0"]);
    for node in [1, 2] {
        let m = tmp.path().join(format!("mnt{node}"));
        fs::create_dir_all(&m).unwrap();
        read_back(&dir, node, &m, "d/f", &data, Duration::from_secs(15));
    }
    let out = linefs(&dir, &["down"]);
    assert!(out.status.success());
}
