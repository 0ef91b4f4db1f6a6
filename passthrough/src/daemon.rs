//! The `linefs-passthrough` program: mount a FUSE passthrough of SRCDIR and serve it in the
//! foreground until SIGINT/SIGTERM or an external unmount, with the life cycle and the
//! readiness protocol of `linefs-fuse` (`fuse_mount::daemon`): SIGINT and SIGTERM blocked
//! before any thread exists, one byte on `--ready-fd` once the mount serves (else `ready` on
//! stdout), the status file rewritten every second, an unmount on the signal.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use fuse_mount::daemon::{mount_config, ready_fd, signal_ready, unix_ms, write_status_doc, SetupError};
use fuse_mount::mount::{self, MountError, MountedSession};
use fuse_mount::options::OptionError;
use linefs_pm::signals::SignalSet;
use thiserror::Error;
use tracing::{error, info, warn};

use crate::fs::Passthrough;
use crate::host::raise_nofile_limit;

/// How long to wait for the FUSE session to end after unmounting.
const UNMOUNT_WAIT: Duration = Duration::from_secs(20);

/// Command-line arguments of `linefs-passthrough`.
#[derive(Debug, Clone, Args)]
pub struct PassthroughArgs {
    /// The directory whose passthrough is mounted.
    pub source: PathBuf,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated (fsname=X, nosubtype, ro, ...; as linefs-fuse's).
    #[arg(short = 'o', value_name = "OPT,...")]
    pub options: Vec<String>,
    /// FUSE request threads.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Rewrite this file with the mount's status (JSON) every second.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// Write one byte to this descriptor once the mount serves (instead of printing "ready").
    #[arg(long, value_name = "FD")]
    pub ready_fd: Option<i32>,
}

/// Why `linefs-passthrough` failed.
#[derive(Debug, Error)]
pub enum PassthroughError {
    #[error(transparent)]
    Options(#[from] OptionError),
    #[error("--threads must be between 1 and 256, not {0}")]
    Threads(usize),
    #[error("{path}: cannot serve a passthrough: {source}")]
    Source { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error("blocking signals: {0}")]
    Signals(io::Error),
    #[error("--ready-fd {fd}: {source}")]
    ReadyFd { fd: i32, source: io::Error },
}

impl From<SetupError> for PassthroughError {
    fn from(e: SetupError) -> PassthroughError {
        match e {
            SetupError::Options(e) => PassthroughError::Options(e),
            SetupError::Threads(n) => PassthroughError::Threads(n),
            SetupError::Mount(e) => PassthroughError::Mount(e),
        }
    }
}

/// Runs `linefs-passthrough` with `args` until it is told to stop.
pub fn run(args: PassthroughArgs) -> Result<(), PassthroughError> {
    let cfg = mount_config(&args.options, args.threads, &args.mountpoint)?;
    let ready =
        args.ready_fd.map(|fd| ready_fd(fd).map_err(|source| PassthroughError::ReadyFd { fd, source })).transpose()?;
    // Before any thread exists, so that every thread inherits the mask.
    let signals = SignalSet::block(&[libc::SIGINT, libc::SIGTERM]).map_err(PassthroughError::Signals)?;
    // New objects get exactly the mode the kernel asked for.
    rustix::process::umask(rustix::fs::Mode::empty());
    if let Err(e) = raise_nofile_limit() {
        warn!(error = %e, "cannot raise the open-file limit");
    }
    let src = &args.source;
    let pt = Passthrough::new(src).map_err(|source| PassthroughError::Source { path: src.clone(), source })?;
    let session = mount::mount(pt, &args.mountpoint, &cfg)?;
    let mountpoint = session.mountpoint().to_path_buf();
    info!(backend = "passthrough", mountpoint = %mountpoint.display(), "serving");
    if let Some(status) = &args.status_file {
        write_status(status, &mountpoint, &args);
    }
    signal_ready(ready);
    serve(&signals, &session, &mountpoint, &args);
    if let Err(e) = session.unmount(UNMOUNT_WAIT) {
        error!(error = %e, "unmount did not complete cleanly");
    }
    if let Some(status) = &args.status_file {
        let _ = std::fs::remove_file(status);
    }
    Ok(())
}

/// Waits for a signal or the end of the session, refreshing the status file every second.
fn serve(signals: &SignalSet, session: &MountedSession, mountpoint: &Path, args: &PassthroughArgs) {
    loop {
        if let Some(sig) = signals.wait_timeout(Duration::from_secs(1)) {
            info!(signal = sig, "stopping");
            return;
        }
        if session.is_finished() {
            info!(mountpoint = %mountpoint.display(), "unmounted from outside; stopping");
            return;
        }
        if let Some(status) = &args.status_file {
            write_status(status, mountpoint, args);
        }
    }
}

/// The status file: the keys of `linefs-fuse`'s, with no node and no libfs.
fn write_status(path: &Path, mountpoint: &Path, args: &PassthroughArgs) {
    let doc = serde_json::json!({
        "pid": std::process::id(),
        "backend": "passthrough",
        "mountpoint": mountpoint,
        "pm": serde_json::Value::Null,
        "nicfs": serde_json::Value::Null,
        "source": args.source,
        "updated_unix_ms": unix_ms(),
        "libfs": serde_json::Value::Null,
    });
    write_status_doc(path, &doc);
}
