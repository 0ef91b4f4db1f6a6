//! Mounting a FUSE session and taking it down again.
//!
//! fuser mounts as root with `mount(2)` and type `fuse`, ignoring the subtype, so a linefs
//! mount would not read `fuse.linefs`. We therefore mount ourselves when we may: open
//! `/dev/fuse`, `mount(2)` it with type `fuse.SUBTYPE` (or `fuse` for `nosubtype`), and hand
//! the descriptor to `fuser::Session::from_fd`, which performs the INIT handshake. When
//! `mount(2)` is not permitted (a non-root user) we fall back to fuser's own mount through the
//! `fusermount3` helper, which understands `subtype=`.
//!
//! Unmounting: `umount(2)`; if the mount is busy it is detached lazily (`MNT_DETACH`), so the
//! mount point is free at once and the session ends when the last user lets go. Either way the
//! session threads end when the kernel tears the connection down (`ENODEV` on read), and
//! [`MountedSession::unmount`] waits for them for a bounded time.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, Filesystem, Session, SessionACL};
use rustix::io::Errno;
use rustix::mount::{MountFlags, UnmountFlags};
use thiserror::Error;
use tracing::{info, warn};

use crate::options::MountConfig;

/// An error mounting or unmounting.
#[derive(Debug, Error)]
pub enum MountError {
    #[error("{path}: {what}: {source}")]
    Io { path: PathBuf, what: &'static str, source: io::Error },
    #[error("{0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("{path}: session did not end within {secs} s after unmount")]
    Timeout { path: PathBuf, secs: u64 },
    #[error("{0}: the session thread panicked")]
    Panicked(PathBuf),
}

fn io_err(path: &Path, what: &'static str) -> impl FnOnce(io::Error) -> MountError {
    let path = path.to_path_buf();
    move |source| MountError::Io { path, what, source }
}

/// A mounted, serving FUSE session.
#[derive(Debug)]
pub struct MountedSession {
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
    /// True when we mounted with `mount(2)` ourselves (and so must unmount ourselves).
    own_mount: bool,
    /// A duplicate of the session's `/dev/fuse` descriptor (own mounts only), for the
    /// notifications fuser does not send ([`crate::invalidate::EpochNotifier`]).
    device: Option<OwnedFd>,
}

/// fuser's session configuration for `cfg`.
fn fuser_config(cfg: &MountConfig) -> Config {
    let mut config = Config::default();
    config.n_threads = Some(cfg.threads.max(1));
    config.acl = if cfg.allow_other { SessionACL::All } else { SessionACL::Owner };
    config.mount_options = cfg.fuser_options();
    config
}

/// Mounts `fs` at `mountpoint` and serves it on `cfg.threads` threads. Returns once the INIT
/// handshake is done, i.e. once the mount serves requests.
pub fn mount<FS: Filesystem>(fs: FS, mountpoint: &Path, cfg: &MountConfig) -> Result<MountedSession, MountError> {
    let meta = std::fs::metadata(mountpoint).map_err(io_err(mountpoint, "stat mount point"))?;
    if !meta.is_dir() {
        return Err(MountError::NotADirectory(mountpoint.to_path_buf()));
    }
    let mountpoint = std::fs::canonicalize(mountpoint).map_err(io_err(mountpoint, "resolve"))?;
    let config = fuser_config(cfg);

    let dev: OwnedFd = File::options()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(io_err(Path::new("/dev/fuse"), "open"))?
        .into();
    let mut data = format!(
        "fd={},rootmode={:o},user_id={},group_id={}",
        dev.as_raw_fd(),
        meta.mode() & libc::S_IFMT,
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw()
    );
    if cfg.default_permissions {
        data.push_str(",default_permissions");
    }
    if cfg.allow_other {
        data.push_str(",allow_other");
    }
    for o in &cfg.kernel_options {
        data.push(',');
        data.push_str(o);
    }
    let fstype = cfg.fstype();
    // Every MS_* flag that ms_flags() sets lies in the low 32 bits.
    let flags = MountFlags::from_bits_retain(cfg.ms_flags() as u32);
    let res = match CString::new(data.as_str()) {
        Ok(cdata) => rustix::mount::mount(cfg.fsname.as_str(), &mountpoint, fstype.as_str(), flags, cdata.as_c_str()),
        Err(_) => Err(Errno::INVAL),
    };
    match res {
        Ok(()) => {}
        Err(Errno::PERM) => {
            info!(mountpoint = %mountpoint.display(), "mount(2) not permitted; using fusermount3");
            drop(dev);
            let session = Session::new(fs, &mountpoint, &config)
                .and_then(Session::spawn)
                .map_err(io_err(&mountpoint, "mount via fusermount3"))?;
            return Ok(MountedSession { session: Some(session), mountpoint, own_mount: false, device: None });
        }
        Err(e) => return Err(MountError::Io { path: mountpoint, what: "mount(2)", source: e.into() }),
    }
    info!(mountpoint = %mountpoint.display(), %fstype, options = %data, "mounted");
    let device = match dev.try_clone() {
        Ok(d) => Some(d),
        Err(e) => {
            warn!(error = %e, "cannot duplicate the /dev/fuse descriptor");
            None
        }
    };
    let session = Session::from_fd(fs, dev, config.acl, config).and_then(Session::spawn).map_err(|e| {
        // The kernel side exists but nobody serves it: take it away again.
        let _ = rustix::mount::unmount(&mountpoint, UnmountFlags::DETACH);
        MountError::Io { path: mountpoint.clone(), what: "FUSE handshake", source: e }
    })?;
    Ok(MountedSession { session: Some(session), mountpoint, own_mount: true, device })
}

/// Sets the readahead window of the mount at `mountpoint`: the `read_ahead_kb` of its
/// backing device (an anonymous one, `0:N`) in sysfs. The kernel sends sequential reads in
/// requests of up to `max_pages` (1 MiB here) and keeps up to this much of them in flight;
/// its default, 128 KiB, keeps a sequential reader waiting on round trips.
pub fn set_read_ahead(mountpoint: &Path, kb: u32) -> io::Result<()> {
    let dev = std::fs::metadata(mountpoint)?.dev();
    let major = rustix::fs::major(dev);
    let minor = rustix::fs::minor(dev);
    std::fs::write(format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb"), format!("{kb}\n"))
}

impl MountedSession {
    /// What sends the kernel cache invalidations of this session.
    pub fn notifier(&self) -> Option<fuser::Notifier> {
        self.session.as_ref().map(|s| s.notifier())
    }

    /// A new duplicate of the session's `/dev/fuse` descriptor, when we mounted it ourselves.
    pub fn device(&self) -> Option<OwnedFd> {
        self.device.as_ref().and_then(|d| d.try_clone().ok())
    }

    /// The (canonical) mount point.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the session has ended on its own (e.g. someone ran `umount` or
    /// `fusermount3 -u` on the mount point).
    pub fn is_finished(&self) -> bool {
        match &self.session {
            Some(s) => s.guard.is_finished(),
            None => true,
        }
    }

    /// Unmounts (lazily if busy) and waits up to `wait` for the session threads to end.
    pub fn unmount(mut self, wait: Duration) -> Result<(), MountError> {
        self.unmount_inner(wait)
    }

    fn unmount_inner(&mut self, wait: Duration) -> Result<(), MountError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let mp = self.mountpoint.clone();
        if !self.own_mount {
            // fuser knows how to unmount what fusermount3 mounted; it may block, so give it
            // its own thread and a deadline.
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(session.umount_and_join());
            });
            return match rx.recv_timeout(wait) {
                Ok(res) => res.map_err(io_err(&mp, "unmount")),
                Err(_) => Err(MountError::Timeout { path: mp, secs: wait.as_secs() }),
            };
        }
        if !session.guard.is_finished() {
            match rustix::mount::unmount(&mp, UnmountFlags::empty()) {
                Ok(()) => info!(mountpoint = %mp.display(), "unmounted"),
                Err(Errno::BUSY) => {
                    warn!(mountpoint = %mp.display(), "mount busy; detaching lazily");
                    rustix::mount::unmount(&mp, UnmountFlags::DETACH)
                        .map_err(|e| io_err(&mp, "umount -l")(e.into()))?;
                }
                // EINVAL: no longer a mount point (unmounted by someone else); the session
                // thread ends on its own.
                Err(Errno::INVAL) => {
                    info!(mountpoint = %mp.display(), "already unmounted");
                }
                Err(e) => return Err(MountError::Io { path: mp, what: "umount", source: e.into() }),
            }
        }
        let deadline = Instant::now() + wait;
        while !session.guard.is_finished() {
            if Instant::now() >= deadline {
                return Err(MountError::Timeout { path: mp, secs: wait.as_secs() });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        match session.join() {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Other && e.to_string().contains("panicked") => {
                Err(MountError::Panicked(mp))
            }
            Err(e) => Err(MountError::Io { path: mp, what: "session", source: e }),
        }
    }
}

impl Drop for MountedSession {
    fn drop(&mut self) {
        if self.session.is_some() {
            if let Err(e) = self.unmount_inner(Duration::from_secs(5)) {
                warn!(error = %e, "unmount on drop failed");
            }
        }
    }
}
