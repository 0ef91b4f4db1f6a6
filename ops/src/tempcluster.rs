//! [`TempCluster`]: a cluster that lives only as long as a command (`bench`, `soak`). It owns
//! the cluster's teardown — down, then its directory and extra paths removed — and hands it to
//! [`crate::interrupt`], so that the teardown runs exactly once: when the owner drops the
//! cluster (on error paths too), or on Ctrl-C, SIGTERM or SIGHUP, whichever comes first.

use std::path::PathBuf;

use crate::cluster;
use crate::clusterdir::ClusterDir;

/// A temporary cluster: on drop it is brought down and its directory removed, with the extra
/// `paths` (PM files, local directories), on error paths too, and on Ctrl-C or SIGTERM when
/// the command installed [`crate::interrupt`]. `what` names the command in the messages.
pub struct TempCluster {
    /// Its registration with [`crate::interrupt`], which keeps the teardown.
    id: u64,
}

impl TempCluster {
    pub fn new(dir: ClusterDir, paths: Vec<PathBuf>, what: &'static str) -> TempCluster {
        TempCluster { id: crate::interrupt::register(Box::new(move || teardown(&dir, &paths, what))) }
    }
}

impl Drop for TempCluster {
    fn drop(&mut self) {
        // None: a signal has taken it and is tearing it down.
        if let Some(teardown) = crate::interrupt::unregister(self.id) {
            teardown();
        }
    }
}

/// Brings a temporary cluster down and removes its directory and `paths`; problems are
/// reported, not returned (this runs on drop and on signals).
fn teardown(dir: &ClusterDir, paths: &[PathBuf], what: &str) {
    if dir.desc_path().exists() {
        if let Err(e) = cluster::down(dir) {
            eprintln!("linefs: {what}: teardown: {e}");
        }
    }
    for p in paths.iter().chain(std::iter::once(&dir.root)) {
        let res = if p.is_dir() { std::fs::remove_dir_all(p) } else { std::fs::remove_file(p) };
        if let Err(e) = res {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("linefs: {what}: teardown: {}: {e}", p.display());
            }
        }
    }
}
