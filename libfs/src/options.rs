//! Options of a client mount ([`Fs::mount`](crate::Fs::mount)).

use std::path::PathBuf;
use std::time::Duration;

/// Options of [`Fs::mount`](crate::Fs::mount).
#[derive(Debug, Clone)]
pub struct FsOptions {
    /// The node's PM directory (its public file and log files, see `linefs_pm::node`).
    pub pm_path: PathBuf,
    /// Publication batch: the publisher wakes when this much log is unpublished.
    pub chunk_size: u64,
    /// The publisher also publishes whatever is pending this often.
    pub publish_interval: Duration,
    /// Log slot of this client.
    pub client: u32,
    /// Run the background publisher (tests turn it off to control publication).
    pub background_publish: bool,
    /// Offload: attach to the nicfs listening on this socket instead of opening the PM
    /// (`pm_path` then only names the node in status and errors).
    pub nicfs: Option<PathBuf>,
    /// Attach as a mount daemon (root, stating each caller's credentials) rather than as a
    /// process using the API directly (held to its own credentials).
    pub mount_daemon: bool,
    /// Host-only: publish by nicfs's steps rather than pm's direct publisher — copy each
    /// batch out of the log and decode the copy, coalesce it, move file data as a deferred
    /// copy list executed the way kworker executes one, then persist the pointers — so that
    /// the crash suite crashes nicfs's publication at every fence (`linefs crash-suite`).
    pub nicfs_steps: bool,
    /// Offload in a replicated cluster: an fsync asks nicfs, which answers once the log is
    /// published there and durable on every replica (see [`crate::Fs::fsync`]). Off (a
    /// node on its own): the log entry in this host's PM is the durable copy.
    pub replicated: bool,
}

impl Default for FsOptions {
    fn default() -> Self {
        FsOptions {
            pm_path: PathBuf::new(),
            chunk_size: 4 << 20,
            publish_interval: Duration::from_secs(1),
            client: 0,
            background_publish: true,
            nicfs: None,
            mount_daemon: false,
            nicfs_steps: false,
            replicated: false,
        }
    }
}
