//! Debian's `bindfs` as a second FUSE passthrough baseline of the node-local directory (the
//! strongest passthrough a user can install; ENVIRONMENT-NOTES, "Benchmarking").
//!
//! [`Bindfs::mount`] runs `bindfs -f` in a session of its own (so a terminal's Ctrl-C reaches
//! only linefs, whose teardown unmounts it) and waits until the mount appears. The mount is
//! registered with [`linefs_ops::interrupt`] so that it is unmounted on Ctrl-C/SIGTERM as well as on
//! drop. Its mount point lives next to the node-local directory, outside the temporary
//! cluster's directory, so the cluster's teardown never walks into it.
//!
//! Options ([`OPTIONS`]), chosen for throughput (bindfs 1.14 on libfuse 2.9):
//! - `--multithreaded`: bindfs is single-threaded by default, which serialises every request
//!   (about 50 MB/s for 16 KiB writes seen here); with it, requests run in parallel.
//! - `-o big_writes,max_write=131072`: without `big_writes` libfuse 2 gets 4 KiB write
//!   requests; 128 KiB is the most a libfuse-2 file system can negotiate (no `max_pages`).
//! - `-o kernel_cache`: keep the kernel page cache across opens (bindfs's default, like
//!   libfuse's, drops it at every open). Safe here: nothing else writes the bench's files
//!   behind bindfs's back (every target uses file names of its own).
//! - `-o attr_timeout=60,entry_timeout=60`: cache attributes and names for a minute instead
//!   of one second (fewer GETATTR/LOOKUP round trips), safe for the same reason.
//! - `--xattr-none`: answer xattr calls with ENOSYS, so the kernel stops asking for
//!   `security.capability` before every write (one round trip per write otherwise).
//! - `--no-allow-other`: only the bench's own user reads the mount (and a non-root user needs
//!   no `user_allow_other` in /etc/fuse.conf).
//!
//! libfuse 2 has no writeback cache, so writes stay write-through (one round trip per
//! 128 KiB at most), as they are in the default of the project's own passthrough.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use linefs_ops::procs;

/// The bindfs options used (see the module notes for why each).
pub(crate) const OPTIONS: [&str; 6] = [
    "--multithreaded",
    "--xattr-none",
    "--no-allow-other",
    "-o",
    "big_writes,max_write=131072,kernel_cache,attr_timeout=60,entry_timeout=60",
    "-f",
];

/// How long the mount may take to appear.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(10);

/// A mounted bindfs; unmounted (and its process reaped) on drop.
pub(crate) struct Bindfs {
    pub mountpoint: PathBuf,
    child: Child,
    /// Its registration with [`linefs_ops::interrupt`].
    id: u64,
}

/// Whether `bindfs` can be run (found on PATH).
pub(crate) fn installed() -> bool {
    Command::new("bindfs")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Unmounts `mountpoint` if something is mounted there, then signals `pid` if still alive.
fn unmount(mountpoint: &Path, pid: i32) {
    if procs::fuse_mounted_at(mountpoint) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(mountpoint)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    if procs::fuse_mounted_at(mountpoint) {
        let _ = rustix::mount::unmount(mountpoint, rustix::mount::UnmountFlags::empty());
    }
    if let Err(e) = procs::detach(mountpoint) {
        eprintln!("linefs: bench: bindfs teardown: {e}");
    }
    if !procs::wait_exit(pid, Duration::from_secs(5)) {
        procs::kill(pid, libc::SIGKILL);
    }
    let _ = std::fs::remove_dir(mountpoint);
}

impl Bindfs {
    /// Mounts `source` at `mountpoint` (created); Err says why it could not.
    pub(crate) fn mount(source: &Path, mountpoint: &Path) -> Result<Bindfs, String> {
        std::fs::create_dir_all(mountpoint).map_err(|e| format!("{}: create: {e}", mountpoint.display()))?;
        let mut cmd = Command::new("bindfs");
        cmd.args(OPTIONS).arg(source).arg(mountpoint);
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.spawn().map_err(|e| format!("cannot run bindfs: {e}"))?;
        let pid = child.id() as i32;
        let mp = mountpoint.to_path_buf();
        let id = linefs_ops::interrupt::register(Box::new(move || unmount(&mp, pid)));
        let mut b = Bindfs { mountpoint: mountpoint.to_path_buf(), child, id };
        let start = Instant::now();
        loop {
            if procs::fuse_mounted_at(mountpoint) {
                return Ok(b);
            }
            if let Ok(Some(status)) = b.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = b.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                return Err(format!("bindfs exited ({status}) before mounting: {}", err.trim()));
            }
            if start.elapsed() > MOUNT_TIMEOUT {
                return Err(format!("bindfs did not mount within {MOUNT_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        if let Some(teardown) = linefs_ops::interrupt::unregister(self.id) {
            teardown();
        }
        let _ = self.child.wait();
    }
}
