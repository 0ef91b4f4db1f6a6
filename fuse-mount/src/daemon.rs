//! The `linefs-fuse` program: mount one linefs node and serve it in the foreground until
//! SIGINT/SIGTERM or an external unmount. The readiness descriptor, the status file's atomic
//! write and logging are public: the benchmarks' passthrough daemon (`linefs-passthrough`)
//! follows the same protocol with them.
//!
//! Life cycle:
//! 1. SIGINT and SIGTERM are blocked before any thread exists (libfs's publisher, the FUSE
//!    workers), so that only the main thread receives them, synchronously, with
//!    `sigtimedwait`.
//! 2. The backend is opened (libfs recovers the log of the PM file), and mounted.
//! 3. Readiness — the mount serves — is signalled by writing one byte to `--ready-fd` (the
//!    `linefs` CLI waits on that pipe), or by printing `ready` on stdout.
//! 4. Every second the status file (if any) is rewritten atomically with libfs's status.
//! 5. On a signal: unmount (lazily if busy), wait for the session to end, then
//!    `Fs::shutdown()`, which publishes everything; exit 0. If the mount goes away on its own
//!    (`umount`, `fusermount3 -u`), the same shutdown follows.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use libfs::{Fs, FsError, FsOptions};
use thiserror::Error;
use tracing::{error, info, warn};

use crate::mount::{self, MountError, MountedSession};
use crate::options::{MountConfig, OptionError};
use crate::LinefsFuse;

/// How long to wait for the FUSE session to end after unmounting.
const UNMOUNT_WAIT: Duration = Duration::from_secs(20);

/// Whether a host-only mount has the kernel's writeback cache unless `-o` says otherwise.
const WRITEBACK_CACHE_DEFAULT: bool = false;

/// A linefs mount's readahead window unless `-o read_ahead_kb=N` says otherwise (the
/// kernel's default is 128 KiB). Measured on the 2-core VM, 16 KiB sequential reads of a
/// 256 MiB file after dropping its pages, host-only: 128 KiB ~2,050 MB/s, 1 MiB ~2,650,
/// 4 MiB ~2,850–3,300, 16 MiB ~2,300–2,700; random 16 KiB reads alike at all four.
const READ_AHEAD_KB_DEFAULT: u32 = 4096;

/// Command-line arguments of `linefs-fuse`.
#[derive(Debug, Clone, Args)]
pub struct DaemonArgs {
    /// PM directory of the node to mount (formatted by `linefs up`). With `--nicfs` it only
    /// names the node.
    #[arg(long, value_name = "NODEDIR", required_unless_present = "nicfs")]
    pub pm: Option<PathBuf>,
    /// Attach to the node's nicfs on this Unix socket (offload: nicfs owns the PM and
    /// publishes) instead of opening the PM directly (host-only).
    #[arg(long, value_name = "SOCKET")]
    pub nicfs: Option<PathBuf>,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated (fsname=X, nosubtype, nodefault_permissions, ro, ...).
    #[arg(short = 'o', value_name = "OPT,...")]
    pub options: Vec<String>,
    /// FUSE request threads.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// Rewrite this file with the file system's status (JSON) every second.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// Write one byte to this descriptor once the mount serves (instead of printing "ready").
    #[arg(long, value_name = "FD")]
    pub ready_fd: Option<i32>,
    /// libfs client log slot.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub client: u32,
    /// With `--nicfs`: the node is a member of a replicating cluster, so an fsync asks nicfs
    /// and returns once the log is published there and durable on every replica (`linefs
    /// mount` passes it when the cluster has ZooKeeper).
    #[arg(long, requires = "nicfs")]
    pub replicated: bool,
}

/// Why `linefs-fuse` failed.
#[derive(Debug, Error)]
pub enum DaemonError {
    #[error(transparent)]
    Options(#[from] OptionError),
    #[error("--threads must be between 1 and 256, not {0}")]
    Threads(usize),
    #[error("{path}: cannot open linefs: {source}")]
    Open { path: PathBuf, source: FsError },
    #[error(transparent)]
    Mount(#[from] MountError),
    #[error("blocking signals: {0}")]
    Signals(io::Error),
    #[error("--ready-fd {fd}: {source}")]
    ReadyFd { fd: i32, source: io::Error },
    #[error("shutting linefs down after unmount: {0}")]
    Shutdown(FsError),
    #[error(
        "-o writeback_cache needs the host-only mode (no --nicfs): with offload, other clients of \
         the node could not see data the kernel still holds"
    )]
    WritebackShared,
}

/// Takes ownership of the readiness descriptor (`--ready-fd`) after checking it is open and
/// not stdio.
pub fn ready_fd(fd: i32) -> io::Result<File> {
    if fd <= 2 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    // SAFETY: F_GETFD only queries the descriptor's flags.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is open (checked above) and was handed to us, by the command line,
    // for our exclusive use; nothing else in this process refers to it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Writes the status file with libfs's status.
fn write_status(path: &Path, fs: &Fs, mountpoint: &Path, args: &DaemonArgs) {
    let libfs = serde_json::to_value(fs.status()).unwrap_or(serde_json::Value::Null);
    let doc = serde_json::json!({
        "pid": std::process::id(),
        "backend": "linefs",
        "mountpoint": mountpoint,
        "pm": args.pm,
        "nicfs": args.nicfs,
        "source": serde_json::Value::Null,
        "updated_unix_ms": unix_ms(),
        "libfs": libfs,
    });
    write_status_doc(path, &doc);
}

/// Milliseconds since the Unix epoch (the status file's `updated_unix_ms`).
pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// Writes a mount daemon's status file atomically (temporary file + rename), mode 0640; a
/// failure is logged, not fatal.
pub fn write_status_doc(path: &Path, doc: &serde_json::Value) {
    let tmp = path.with_extension("tmp");
    // Mode 0640: the status names the node and the mount (docs/SECURITY.md).
    let res = {
        use std::io::Write;
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o640)
            .open(&tmp)
            .and_then(|mut f| {
                f.set_permissions(std::fs::Permissions::from_mode(0o640))?;
                f.write_all(format!("{doc}\n").as_bytes())
            })
            .and_then(|()| std::fs::rename(&tmp, path))
    };
    if let Err(e) = res {
        warn!(path = %path.display(), error = %e, "cannot write status file");
    }
}

/// Why a mount daemon's flags or mount point were refused before anything started.
#[derive(Debug, Error)]
pub enum SetupError {
    #[error(transparent)]
    Options(#[from] OptionError),
    #[error("--threads must be between 1 and 256, not {0}")]
    Threads(usize),
    #[error(transparent)]
    Mount(#[from] MountError),
}

/// The mount configuration `-o` `options` and `--threads` give, once `mountpoint` is checked
/// to be a directory: what every mount daemon (`linefs-fuse`, `linefs-passthrough`) checks
/// before it opens its backend.
pub fn mount_config(options: &[String], threads: Option<usize>, mountpoint: &Path) -> Result<MountConfig, SetupError> {
    let mut cfg = MountConfig::default();
    cfg.apply_options(options)?;
    if let Some(n) = threads {
        if !(1..=256).contains(&n) {
            return Err(SetupError::Threads(n));
        }
        cfg.threads = n;
    }
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => Ok(cfg),
        Ok(_) => Err(MountError::NotADirectory(mountpoint.to_path_buf()).into()),
        Err(source) => Err(MountError::Io { path: mountpoint.to_path_buf(), what: "stat mount point", source }.into()),
    }
}

impl From<SetupError> for DaemonError {
    fn from(e: SetupError) -> DaemonError {
        match e {
            SetupError::Options(e) => DaemonError::Options(e),
            SetupError::Threads(n) => DaemonError::Threads(n),
            SetupError::Mount(e) => DaemonError::Mount(e),
        }
    }
}

/// Runs `linefs-fuse` with `args` until it is told to stop.
pub fn run(args: DaemonArgs) -> Result<(), DaemonError> {
    // Fail on a bad mount point before opening (and recovering) the backend.
    let cfg = mount_config(&args.options, args.threads, &args.mountpoint)?;
    let ready =
        args.ready_fd.map(|fd| ready_fd(fd).map_err(|source| DaemonError::ReadyFd { fd, source })).transpose()?;
    // Before any thread exists, so that every thread inherits the mask.
    let signals = linefs_pm::signals::SignalSet::block(&[libc::SIGINT, libc::SIGTERM]).map_err(DaemonError::Signals)?;

    let (fs, session) = {
        let pm = args.pm.clone().or_else(|| args.nicfs.clone()).unwrap_or_default();
        let opts = FsOptions {
            pm_path: pm.clone(),
            client: args.client,
            nicfs: args.nicfs.clone(),
            // A mount daemon states each caller's credentials; nicfs accepts that from root.
            mount_daemon: rustix::process::geteuid().is_root(),
            replicated: args.replicated,
            ..FsOptions::default()
        };
        let (files, dirs) = cfg.atime_policies();
        let fs = Arc::new(Fs::mount(opts).map_err(|source| DaemonError::Open { path: pm, source })?);
        // The writeback cache only where nothing else changes the node (the mount is its only
        // client): off by default with offload, refused when asked for.
        let writeback = match (cfg.writeback_cache, fs.offloaded()) {
            (Some(true), true) => {
                if let Err(se) = fs.shutdown() {
                    error!(error = %se, "shutdown after refusing the writeback cache");
                }
                return Err(DaemonError::WritebackShared);
            }
            (Some(on), false) => on,
            (None, offloaded) => !offloaded && WRITEBACK_CACHE_DEFAULT,
            (Some(false), true) => false,
        };
        let adapter = LinefsFuse::new(fs.clone()).with_atime(files, dirs).with_writeback_cache(writeback);
        info!(writeback, "kernel writeback cache");
        let cache = adapter.kernel_cache();
        let session = match mount::mount(adapter, &args.mountpoint, &cfg) {
            Ok(s) => s,
            Err(e) => {
                if let Err(se) = fs.shutdown() {
                    error!(error = %se, "shutdown after failed mount");
                }
                return Err(e.into());
            }
        };
        if let Some(n) = session.notifier() {
            cache.set_notifier(n);
        }
        if fs.offloaded() {
            // Names are expired before a hand-back only with the epoch notification.
            let epoch = match session.device() {
                Some(d) if cache.kernel_has_epoch() => Some(crate::invalidate::EpochNotifier::new(d)),
                _ => {
                    info!("no FUSE_NOTIFY_INC_EPOCH (kernel before 6.16, or mounted by fusermount3): names are cached for 1 s");
                    None
                }
            };
            match session.notifier() {
                Some(n) => {
                    if let Err(e) = crate::invalidate::start(&fs, n, epoch, cache) {
                        warn!(error = %e, "cannot start the kernel cache invalidation thread; kernel caches stay short");
                    }
                }
                None => warn!("no FUSE notifier: kernel caches are not invalidated when leases move; they stay short"),
            }
        }
        (fs, session)
    };
    let mountpoint = session.mountpoint().to_path_buf();
    let kb = cfg.read_ahead_kb.unwrap_or(READ_AHEAD_KB_DEFAULT);
    match mount::set_read_ahead(&mountpoint, kb) {
        Ok(()) => info!(read_ahead_kb = kb, "readahead window set"),
        // Not root (a fusermount3 mount): the kernel's default stays.
        Err(e) => warn!(read_ahead_kb = kb, error = %e, "cannot set the readahead window"),
    }
    info!(backend = "linefs", mountpoint = %mountpoint.display(), "serving");
    if let Some(status) = &args.status_file {
        write_status(status, &fs, &mountpoint, &args);
    }
    signal_ready(ready);

    serve(&signals, &session, &fs, &mountpoint, &args);
    finish(session, fs, &args)
}

/// Says the mount serves: one byte on the readiness descriptor, else `ready` on stdout.
pub fn signal_ready(ready: Option<File>) {
    match ready {
        Some(mut f) => {
            // A reader that went away (EPIPE) is not our failure: keep serving.
            if let Err(e) = f.write_all(b"R") {
                warn!(error = %e, "cannot signal readiness");
            }
        }
        None => {
            let mut out = io::stdout();
            let _ = writeln!(out, "ready");
            let _ = out.flush();
        }
    }
}

/// Waits for a signal or the end of the session, refreshing the status file every second.
fn serve(
    signals: &linefs_pm::signals::SignalSet,
    session: &MountedSession,
    fs: &Fs,
    mountpoint: &Path,
    args: &DaemonArgs,
) {
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
            write_status(status, fs, mountpoint, args);
        }
    }
}

fn finish(session: MountedSession, fs: Arc<Fs>, args: &DaemonArgs) -> Result<(), DaemonError> {
    if let Err(e) = session.unmount(UNMOUNT_WAIT) {
        // The log holds every acknowledged update: shutting down is still safe.
        error!(error = %e, "unmount did not complete cleanly");
    }
    if let Some(status) = &args.status_file {
        let _ = std::fs::remove_file(status);
    }
    fs.shutdown().map_err(DaemonError::Shutdown)?;
    info!("linefs shut down; everything published");
    Ok(())
}
