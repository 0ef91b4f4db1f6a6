//! A node's copies of other nodes' client logs (replica log copies).
//!
//! In a cluster every client log is chain-replicated: each replica keeps its own copy of the
//! primary's log slot, persists the chunks it receives into it *before* it acknowledges them
//! (an acknowledgement means durable, not received), and publishes them into its own public
//! area from the copy, with the same code that publishes a node's own logs.
//!
//! ```text
//! NODE_DIR/replicas/                 mode 0700, created on first use
//! NODE_DIR/replicas/n{origin}-log-{slot:02}.pm
//!                                    the copy of slot `slot` of node `origin`, mode 0600
//! ```
//!
//! A copy is a log-slot file exactly as [`crate::oplog`] describes (header block, then a ring
//! of the node's own ring size from its [`Geometry`]): no format of its own, no version of its
//! own. Its header's `slot` field records the origin's slot index (what [`LogSlot`] checks);
//! the origin node is named by the file name only (the header has no field for it, and the
//! slot format is left unchanged). The header's LSNs mean what they mean for a node's own
//! log: `published_lsn` is how far *this* node has published the copy into its own public
//! area (its checkpoint, where recovery re-publishes from), `replicated_lsn` is raised with
//! it.
//!
//! Positions are the origin's LSNs: byte `lsn` of the origin's log is stored at ring offset
//! `lsn % ring_bytes` of the copy, so the copy holds the primary's entries at the primary's
//! LSNs, byte for byte, and [`LogSlot::scan`], [`LogSlot::fetch`] and publication
//! ([`crate::publish`]) work on it unchanged; WRITE records' data is read from the copy's
//! region ([`ReplicaLog::region`]).
//!
//! **Durability.** [`ReplicaLog::write`] persists and fences what it stores before it
//! returns. A crash in the middle of a write leaves a torn entry, which fails its checksum:
//! what a restarted replica holds is the valid, LSN-contiguous prefix from `published_lsn`
//! ([`ReplicaLog::durable_end`]), as for a client's own log after a crash. Stale entries of
//! an earlier lap carry other LSNs and end the scan.
//!
//! **Creation** is crash-safe: the file is made under a temporary name
//! (`….pm.new`, mode 0600 from its creation), formatted (header with both LSNs 0 over a
//! zero ring), persisted, fenced and fsynced, then renamed into place and the directory
//! fsynced. A stray `.new` file is removed and remade by the next creation.
//!
//! Recovery ([`crate::recovery`]) re-publishes every copy's committed suffix after its
//! checkpoint, as it does for the node's own slots; fsck ([`crate::fsck`]) checks every
//! copy's header.

use crate::layout::{FormatError, Geometry};
use crate::oplog::LogSlot;
use crate::region::{PmError, PmRegion};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a copy's file is called while it is created, before it is renamed into place.
pub const NEW_SUFFIX: &str = ".new";

/// The directory of a node's replica copies, inside the node directory.
pub const REPLICAS_DIR: &str = "replicas";

/// Name of the copy of slot `slot` of node `origin` (in [`REPLICAS_DIR`]).
pub fn replica_file_name(origin: u32, slot: u32) -> String {
    format!("n{origin}-log-{slot:02}.pm")
}

/// The path of the copy of slot `slot` of node `origin` in the node directory `node_dir`.
pub fn replica_path(node_dir: &Path, origin: u32, slot: u32) -> PathBuf {
    node_dir.join(REPLICAS_DIR).join(replica_file_name(origin, slot))
}

/// Parses a copy's file name (`n{origin}-log-{slot:02}.pm`) into `(origin, slot)`. Only the
/// canonical spelling is taken (no leading zeros on the origin, exactly the digits
/// [`replica_file_name`] writes for the slot), so one copy has one name.
pub fn parse_replica_file_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix('n')?.strip_suffix(".pm")?;
    let (origin, slot) = rest.split_once("-log-")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(origin) || !digits(slot) {
        return None;
    }
    let (o, s) = (origin.parse::<u32>().ok()?, slot.parse::<u32>().ok()?);
    (replica_file_name(o, s) == name).then_some((o, s))
}

/// Every copy in the node directory `node_dir`: `(origin, slot)` pairs, sorted. Files that are
/// not copies (a stray `.new`, anything else) are skipped; a missing directory is no copies.
pub fn list_replicas(node_dir: &Path) -> Vec<(u32, u32)> {
    let Ok(rd) = std::fs::read_dir(node_dir.join(REPLICAS_DIR)) else {
        return Vec::new();
    };
    let mut out: Vec<(u32, u32)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .filter_map(|e| e.file_name().to_str().and_then(parse_replica_file_name))
        .collect();
    out.sort_unstable();
    out
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> FormatError {
    move |source| FormatError::Pm(PmError::Io { what, source })
}

/// A node's copy of one client log of another node, file
/// `DIR/replicas/n{origin}-log-{slot:02}.pm`, in the log-slot format (same ring size as the
/// node's own logs), created on first use. See the module notes.
///
/// Writes are not serialised here: one writer per copy (the replication stream of that
/// `(origin, slot)`), as for a client's log.
pub struct ReplicaLog {
    origin: u32,
    slot: u32,
    log: LogSlot,
}

impl ReplicaLog {
    /// Opens the copy of slot `slot` of node `origin` in the node directory `node_dir` (of
    /// geometry `geo`), creating `replicas/` (0700) and the file (0600, an empty log at LSN 0)
    /// if missing. An existing file must have the geometry's log size and a valid header for
    /// that slot.
    pub fn open_or_create(node_dir: &Path, geo: &Geometry, origin: u32, slot: u32) -> Result<ReplicaLog, FormatError> {
        let dir = node_dir.join(REPLICAS_DIR);
        let path = dir.join(replica_file_name(origin, slot));
        if !path.exists() {
            Self::create(&dir, &path, geo, slot)?;
        }
        Self::open(node_dir, geo, origin, slot)
    }

    /// Opens an existing copy (no creation): size and header are checked.
    pub fn open(node_dir: &Path, geo: &Geometry, origin: u32, slot: u32) -> Result<ReplicaLog, FormatError> {
        let path = replica_path(node_dir, origin, slot);
        let region = PmRegion::open(&path)?;
        if region.len() != geo.log_size() {
            return Err(FormatError::SizeMismatch { expected: geo.log_size(), found: region.len() });
        }
        ReplicaLog::from_region(Arc::new(region), geo, origin, slot)
    }

    /// A copy held in `region` (a file's, or a test's traced region or window): its header is
    /// checked (use [`ReplicaLog::format`] on a fresh region first).
    pub fn from_region(
        region: Arc<PmRegion>,
        geo: &Geometry,
        origin: u32,
        slot: u32,
    ) -> Result<ReplicaLog, FormatError> {
        let r = ReplicaLog::unchecked(region, geo, origin, slot);
        r.log.published_lsn()?;
        Ok(r)
    }

    /// Formats `region` as an empty copy (header with both LSNs 0, first ring block zeroed),
    /// persisted and fenced, and returns it. The rest of the ring must hold no entry of LSN 0's
    /// lap (a fresh region is all zeros).
    pub fn format(region: Arc<PmRegion>, geo: &Geometry, origin: u32, slot: u32) -> Result<ReplicaLog, FormatError> {
        let r = ReplicaLog::unchecked(region, geo, origin, slot);
        r.log.format()?;
        r.log.region().fence();
        Ok(r)
    }

    fn unchecked(region: Arc<PmRegion>, geo: &Geometry, origin: u32, slot: u32) -> ReplicaLog {
        ReplicaLog { origin, slot, log: LogSlot::new(region, geo, slot) }
    }

    /// Creates the file under its temporary name, formats it durably, renames it into place.
    fn create(dir: &Path, path: &Path, geo: &Geometry, slot: u32) -> Result<(), FormatError> {
        std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(io(format!("chmod 700 {}", dir.display())))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(NEW_SUFFIX);
        let tmp = PathBuf::from(tmp);
        match std::fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("remove {}", tmp.display()))(e)),
        }
        let (region, file) = PmRegion::create_new(&tmp, geo.log_size(), 0o600)?;
        let region = Arc::new(region);
        // Origin is only in the name; format() checks nothing of it.
        ReplicaLog::format(region, geo, 0, slot)?;
        file.sync_all().map_err(io(format!("fsync {}", tmp.display())))?;
        std::fs::rename(&tmp, path).map_err(io(format!("rename {} into place", tmp.display())))?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io(format!("fsync {}", dir.display())))?;
        Ok(())
    }

    /// The node whose client log this copies.
    pub fn origin(&self) -> u32 {
        self.origin
    }

    /// The origin's slot index of the copied log.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The copy as a log slot: `published_lsn`/`set_published_lsn`, `fetch`, `scan` — the
    /// usual slot API.
    pub fn log(&self) -> &LogSlot {
        &self.log
    }

    /// The copy's region: what a DataMover reads WRITE data from (payload offsets of its
    /// entries are offsets in it).
    pub fn region(&self) -> &Arc<PmRegion> {
        self.log.region()
    }

    /// Size of the copy's ring (the node's own log ring size).
    pub fn ring_bytes(&self) -> u64 {
        self.log.ring_bytes()
    }

    /// Store log bytes `[start, start+bytes.len())` at their ring positions, persist and fence
    /// them. Refused (error, nothing written) if the range would overwrite what is not yet
    /// published (`start + len > published_lsn + ring`) or is below `published_lsn`.
    pub fn write(&self, start: u64, bytes: &[u8]) -> Result<(), FormatError> {
        let published = self.log.published_lsn()?;
        let ring = self.log.ring_bytes();
        let len = bytes.len() as u64;
        let refuse = |detail: String| FormatError::Corrupt { what: self.what(), detail };
        let Some(end) = start.checked_add(len) else {
            return Err(refuse(format!("write of {len} bytes at lsn {start} overflows")));
        };
        if start < published {
            return Err(refuse(format!("write at lsn {start} is before the published lsn {published}")));
        }
        if end > published.saturating_add(ring) {
            return Err(refuse(format!(
                "write of lsns {start}..{end} would overwrite unpublished log (published {published}, ring {ring})"
            )));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        let region = self.log.region();
        let ring_off = crate::layout::BLOCK_SIZE;
        let pos = start % ring;
        let first = len.min(ring - pos) as usize;
        region.write_persist(ring_off + pos, &bytes[..first])?;
        if first < bytes.len() {
            region.write_persist(ring_off, &bytes[first..])?;
        }
        region.fence();
        Ok(())
    }

    /// The end of the valid (checksummed, LSN-contiguous) prefix from `published_lsn`: what a
    /// restarted replica holds durable.
    pub fn durable_end(&self) -> Result<u64, FormatError> {
        let published = self.log.published_lsn()?;
        Ok(self.log.scan(published)?.end)
    }

    /// Restarts the copy at `lsn` (the primary's log is replicated from there, e.g. a replica
    /// joining a stream whose earlier log is already reclaimed): the ring is zeroed and
    /// persisted, then both header LSNs are durably set to `lsn`. Whatever the copy held is
    /// dropped; the caller's public area must already hold the origin's state up to `lsn`
    /// (or it does not matter to it). A crash in between leaves either the old checkpoint over
    /// a ring without entries (nothing to re-publish) or the new one.
    pub fn rebase(&self, lsn: u64) -> Result<(), FormatError> {
        let region = self.log.region();
        region.zero_persist(crate::layout::BLOCK_SIZE, self.log.ring_bytes())?;
        region.fence();
        let h = crate::oplog::slot_off::PUBLISHED_LSN as u64;
        region.write_u64(h, lsn)?;
        region.write_u64(h + 8, lsn)?;
        region.persist(h, 16)?;
        region.fence();
        Ok(())
    }

    fn what(&self) -> String {
        format!("replica copy {}", replica_file_name(self.origin, self.slot))
    }
}

#[cfg(test)]
mod tests;
