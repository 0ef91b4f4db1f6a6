//! The one logging setup every linefs binary calls (nicfs, kworker, the mount daemon, the
//! `linefs` command's daemon verb, loadgen): `tracing` events to stderr, filtered by
//! `RUST_LOG` (default: the level the binary names), in colour only on a terminal — `linefs
//! up` sends a daemon's stderr to a log file.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Sets up logging to stderr with `RUST_LOG`'s filter, or `default` (e.g. `"info"`) without
/// one. A second call (a subscriber is set already) changes nothing.
pub fn init(default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .try_init();
}
