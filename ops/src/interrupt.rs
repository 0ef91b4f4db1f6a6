//! Ctrl-C, SIGTERM and SIGHUP for the commands that own a temporary cluster (`bench`,
//! `soak`). Their daemons run in sessions of their own, so a terminal's Ctrl-C reaches only
//! this process; dying there would leave the mounts, their daemons and the PM files behind.
//! [`install`] blocks the three signals in the calling thread (and so in every thread it
//! starts later) and receives them on a thread of its own, which runs every registered
//! teardown (each temporary cluster's: `TempCluster` in `tempcluster.rs`) and exits with
//! 128 + the signal. Child processes start with an empty signal mask (the standard library
//! resets it).
//!
//! This module knows nothing of clusters: a registration is a closure, so that the modules
//! which own clusters depend on this one and not the other way round.

use std::sync::Mutex;
use std::time::Duration;

use linefs_pm::signals::SignalSet;

/// What a registration runs: a temporary cluster's teardown.
pub type Teardown = Box<dyn FnOnce() + Send>;

/// The last id handed out and the teardowns registered now.
static LIVE: Mutex<(u64, Vec<(u64, Teardown)>)> = Mutex::new((0, Vec::new()));

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
        if let Some(sig) = signals.wait_timeout(Duration::from_secs(3600)) {
            eprintln!("\nlinefs: signal {sig}: tearing down");
            let live = std::mem::take(&mut LIVE.lock().unwrap_or_else(|p| p.into_inner()).1);
            for (_, teardown) in live {
                teardown();
            }
            std::process::exit(128 + sig);
        }
    });
}

/// Registers a teardown; returns the id that [`unregister`] takes.
pub fn register(teardown: Teardown) -> u64 {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    live.0 += 1;
    let id = live.0;
    live.1.push((id, teardown));
    id
}

/// Takes a registration back for its owner to run; None if the signal thread has taken it
/// already.
pub fn unregister(id: u64) -> Option<Teardown> {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    let i = live.1.iter().position(|(t, _)| *t == id)?;
    Some(live.1.swap_remove(i).1)
}
