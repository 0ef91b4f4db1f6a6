//! A node's PM: the public file and one log file per client slot, in one directory.
//!
//! ```text
//! NODE_DIR/public.pm     superblock, inode table, data blocks (owned by nicfs, or by the
//!                        host-only client; clients map it read-only)
//! NODE_DIR/log-00.pm     log slot 0: header block + ring (written by the client of slot 0)
//! NODE_DIR/log-01.pm     …
//! NODE_DIR/replicas/     copies of other nodes' client logs (crate::replica), if any
//! ```
//!
//! Splitting the node into files is what makes the trust boundary enforceable: a client is
//! handed a writable descriptor of its own log file and a read-only one of the public file,
//! and the kernel refuses it everything else.
//!
//! Tests and the crash suite hold a node *packed* in one region — the public file followed
//! by the log files — and see each file as a [`PmRegion::window`] of it, so that one tracer
//! records every store and fence of the node and one crash image covers all its files.

use crate::layout::{FormatError, Geometry, Superblock};
use crate::region::PmRegion;
use crate::replica::{list_replicas, ReplicaLog};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Name of the public file in a node directory.
pub const PUBLIC_FILE: &str = "public.pm";

/// Name of the node's lock file: whoever publishes the node (nicfs, or a host-only client)
/// holds an exclusive `flock` of it. No client is ever handed a descriptor of it (unlike
/// the public and log files), so no process can keep one from an earlier session and take
/// the lock to stop the node's publisher from starting.
pub const LOCK_FILE: &str = "nicfs.lock";

/// Takes the exclusive lock of the node in `dir` ([`LOCK_FILE`], created mode 0600 if
/// missing); `Ok(None)` if another process holds it. Once held, a lock file this process's
/// user does not own (left by another user's run, or planted) is made its own (when running
/// as root) and mode 0600, so that nobody else can open it and take the lock next time.
/// The file is never unlinked: a holder of a lock on an unlinked file would exclude nobody.
pub fn lock_node(dir: &Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    let me = rustix::process::geteuid();
    if meta.uid() != me.as_raw() {
        tracing::warn!(path = %path.display(), owner = meta.uid(), "the node's lock file belongs to another user; taking it over");
        rustix::fs::fchown(&file, Some(me), Some(rustix::process::getegid()))?;
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(Some(file))
}

/// Name of log slot `slot`'s file in a node directory.
pub fn log_file_name(slot: u32) -> String {
    format!("log-{slot:02}.pm")
}

/// The PM regions of one node.
pub struct NodePm {
    pub geometry: Geometry,
    pub public: Arc<PmRegion>,
    pub logs: Vec<Arc<PmRegion>>,
    /// The node's copies of other nodes' client logs ([`crate::replica`]): every copy in
    /// `replicas/` when opened from files (sorted by origin, then slot), none when created
    /// or packed (a test adds its own). Recovery re-publishes them with the node's own logs.
    pub replicas: Vec<ReplicaLog>,
    dir: Option<PathBuf>,
}

impl NodePm {
    /// Create (or truncate) the files of a node with geometry `geo` in `dir`, which is created
    /// if missing. Formatting is [`crate::mkfs`]'s.
    pub fn create(dir: &Path, geo: &Geometry) -> Result<NodePm, FormatError> {
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)))
            .map_err(|e| crate::PmError::Io { what: format!("create {}", dir.display()), source: e })?;
        // Only the node's owner (nicfs, or the host-only client) opens these files by path:
        // clients get descriptors over the socket, a log to write and the public file to read.
        // Anyone else could otherwise read another client's unpublished log, or write.
        let private = |path: &Path, size: u64| -> Result<Arc<PmRegion>, FormatError> {
            let region = PmRegion::create(path, size)?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| crate::PmError::Io { what: format!("chmod 600 {}", path.display()), source: e })?;
            Ok(Arc::new(region))
        };
        let public = private(&dir.join(PUBLIC_FILE), geo.public_size())?;
        let logs = (0..geo.log_slots)
            .map(|s| private(&dir.join(log_file_name(s)), geo.log_size()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NodePm { geometry: *geo, public, logs, replicas: Vec::new(), dir: Some(dir.to_path_buf()) })
    }

    /// Open the node in `dir`: the public file's superblock gives the geometry, and every log
    /// file must be there with the size it names. Every replica copy in `replicas/` is opened
    /// too (its size and header checked).
    pub fn open(dir: &Path) -> Result<NodePm, FormatError> {
        let public = Arc::new(PmRegion::open(&dir.join(PUBLIC_FILE))?);
        let geometry = Superblock::read(&public)?.geometry;
        let mut logs = Vec::new();
        for s in 0..geometry.log_slots {
            let path = dir.join(log_file_name(s));
            let log = PmRegion::open(&path)?;
            if log.len() != geometry.log_size() {
                return Err(FormatError::SizeMismatch { expected: geometry.log_size(), found: log.len() });
            }
            logs.push(Arc::new(log));
        }
        let replicas = list_replicas(dir)
            .into_iter()
            .map(|(origin, slot)| ReplicaLog::open(dir, &geometry, origin, slot))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NodePm { geometry, public, logs, replicas, dir: Some(dir.to_path_buf()) })
    }

    /// The files of a node packed in `region` with geometry `geo` (for formatting it).
    pub fn packed_with(region: Arc<PmRegion>, geo: &Geometry) -> Result<NodePm, FormatError> {
        if region.len() != geo.node_size() {
            return Err(FormatError::SizeMismatch { expected: geo.node_size(), found: region.len() });
        }
        let public = Arc::new(PmRegion::window(region.clone(), 0, geo.public_size())?);
        let logs = (0..geo.log_slots)
            .map(|s| PmRegion::window(region.clone(), geo.packed_log_off(s), geo.log_size()).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(NodePm { geometry: *geo, public, logs, replicas: Vec::new(), dir: None })
    }

    /// A formatted node packed in `region` (a crash image, a test's traced region): its
    /// superblock gives the geometry.
    pub fn packed(region: Arc<PmRegion>) -> Result<NodePm, FormatError> {
        let geo = Superblock::read_packed(&region)?.geometry;
        NodePm::packed_with(region, &geo)
    }

    /// A new traced region holding a node of geometry `geo`, packed.
    pub fn traced(geo: &Geometry) -> NodePm {
        NodePm::packed_with(Arc::new(PmRegion::traced(geo.node_size())), geo).expect("sized for the geometry")
    }

    /// The directory of a node opened from files.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Log file `slot`, if the node has it.
    pub fn log(&self, slot: u32) -> Option<&Arc<PmRegion>> {
        self.logs.get(slot as usize)
    }
}

/// Whether `dir` holds a node's public file.
pub fn is_node_dir(dir: &Path) -> bool {
    dir.join(PUBLIC_FILE).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_node_lock_excludes_a_second_holder_and_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock_node(dir.path()).unwrap().expect("free");
        assert!(lock_node(dir.path()).unwrap().is_none(), "held: a second taker is refused");
        let meta = std::fs::metadata(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        drop(first);
        assert!(lock_node(dir.path()).unwrap().is_some(), "free again");
    }

    #[test]
    fn a_lock_file_left_readable_by_others_is_made_private_when_taken() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let me = rustix::process::geteuid();
        if me.is_root() {
            // Another user's file (root may take it over).
            rustix::fs::chown(&path, Some(rustix::fs::Uid::from_raw(65534)), None).unwrap();
        }
        let _l = lock_node(dir.path()).unwrap().expect("free");
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.mode() & 0o777, meta.uid()), (0o600, me.as_raw()));
    }
}
