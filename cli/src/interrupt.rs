//! Ctrl-C, SIGTERM and SIGHUP for the commands that own a temporary cluster (`bench`,
//! `soak`). Their daemons run in sessions of their own, so a terminal's Ctrl-C reaches only
//! this process; dying there would leave the mounts, their daemons and the PM files behind.
//! [`install`] blocks the three signals in the calling thread (and so in every thread it
//! starts later) and receives them on a thread of its own, which tears down every registered
//! temporary cluster ([`crate::cluster::TempCluster`]) and exits with 128 + the signal.
//! Child processes start with an empty signal mask (the standard library resets it).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use fuse_mount::SignalSet;

use crate::cluster::ClusterDir;

/// A temporary cluster to tear down, on a signal or when its owner drops it.
pub struct Registered {
    id: u64,
    pub dir: ClusterDir,
    pub paths: Vec<PathBuf>,
    pub what: &'static str,
}

/// The last id handed out and the clusters registered now.
static LIVE: Mutex<(u64, Vec<Registered>)> = Mutex::new((0, Vec::new()));

/// Starts the signal thread. Call before the command starts any other thread.
pub fn install() {
    let signals = match SignalSet::block(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot block SIGINT/SIGTERM; an interrupted run leaves its cluster behind");
            return;
        }
    };
    std::thread::spawn(move || loop {
        if let Some(sig) = signals.wait(Duration::from_secs(3600)) {
            eprintln!("\nlinefs: signal {sig}: tearing down");
            let live = std::mem::take(&mut LIVE.lock().unwrap_or_else(|p| p.into_inner()).1);
            for t in live {
                crate::cluster::teardown(&t.dir, &t.paths, t.what);
            }
            std::process::exit(128 + sig);
        }
    });
}

/// Registers a temporary cluster; returns the id that [`unregister`] takes.
pub fn register(dir: ClusterDir, paths: Vec<PathBuf>, what: &'static str) -> u64 {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.0 += 1;
    let id = live.0;
    live.1.push(Registered { id, dir, paths, what });
    id
}

/// Takes a registration back for its owner to tear the cluster down; None if the signal
/// thread has taken it already.
pub fn unregister(id: u64) -> Option<Registered> {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    let i = live.1.iter().position(|t| t.id == id)?;
    Some(live.1.swap_remove(i))
}
