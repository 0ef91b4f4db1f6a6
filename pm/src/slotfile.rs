//! Replacing a log slot's file with a fresh one, so that whoever still holds a descriptor or
//! a mapping of the old file writes into an unlinked inode nobody reads again.
//!
//! A publisher that hands a slot's log file to untrusted writers (nicfs) cannot take a
//! descriptor back: a process whose session has ended — or a child it forked, or a process
//! it passed the descriptor to — can still write the file. Before the slot goes to its next
//! writer the publisher therefore puts a new file in its place:
//!
//! 1. [`prepare`]: create `log-NN.pm.new` (a stray one from an earlier crash is removed
//!    first) with mode 0600 from its creation, of the slot's size; write the slot header
//!    with the LSNs the caller gives (its checkpoint) over a ring of zeros; persist, fence
//!    and fsync it.
//! 2. [`FreshLog::install`]: rename it over `log-NN.pm` and fsync the directory.
//!
//! The ring's contents are not copied: the caller replaces a *settled* slot only —
//! everything before the checkpoint is published (and, once there are replicas,
//! replicated), and nothing after it may ever be published (the writer is gone, or its
//! refused suffix was dropped). A ring of zeros holds no entry of any lap, so a scan from
//! the checkpoint finds the new log empty and the slot's next writer appends from there. The
//! file layout is unchanged (no format version bump): the new file is exactly what
//! [`crate::oplog::LogSlot::format_at`] writes.
//!
//! **Crash safety.** The rename is the commit point, and both names always hold a valid
//! slot file:
//!
//! * a crash before the rename leaves the old file in place (it is never written here) and
//!   perhaps a `.new` file, whole or torn; nothing opens a `.new` file as a log
//!   ([`crate::node::NodePm::open`] opens `log-NN.pm` only), [`remove_stray`] deletes it,
//!   and the next [`prepare`] of the slot replaces it anyway;
//! * a crash after the rename but before the directory's fsync leaves either the old file
//!   or the new one under `log-NN.pm`. The new one's header is durable before the rename
//!   (persist, fence, fsync), and carries the checkpoint the old one holds, so recovery
//!   scans from the same LSN in either: in the new one it finds nothing, in the old one
//!   whatever the gone writer left past the checkpoint, which recovery treats as it always
//!   did (a publisher that checks leases refuses it: the writer's leases ended with its
//!   session).

use crate::layout::{FormatError, Geometry};
use crate::node::log_file_name;
use crate::oplog::LogSlot;
use crate::region::{PmError, PmRegion};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a fresh log file is called until it is renamed over the slot's file.
pub const NEW_SUFFIX: &str = ".new";

/// Name of slot `slot`'s fresh log file before it is installed.
pub fn new_log_file_name(slot: u32) -> String {
    format!("{}{NEW_SUFFIX}", log_file_name(slot))
}

/// The LSNs a slot header carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotLsns {
    /// The checkpoint: everything before it is published.
    pub published: u64,
    /// Everything before it is on every replica.
    pub replicated: u64,
}

/// A fresh log file for a slot, durable under its temporary name, not yet in place.
pub struct FreshLog {
    slot: u32,
    dir: PathBuf,
    tmp: PathBuf,
    file: File,
    region: Arc<PmRegion>,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> FormatError {
    move |source| FormatError::Pm(PmError::Io { what, source })
}

/// Writes a fresh log file for slot `slot` of the node in `dir` (geometry `geo`) whose
/// header carries `lsns`, under its temporary name (step 1 of the module notes).
pub fn prepare(dir: &Path, geo: &Geometry, slot: u32, lsns: SlotLsns) -> Result<FreshLog, FormatError> {
    if slot >= geo.log_slots {
        return Err(FormatError::Options(format!("no log slot {slot} (the node has {})", geo.log_slots)));
    }
    let tmp = dir.join(new_log_file_name(slot));
    match std::fs::remove_file(&tmp) {
        Ok(()) => tracing::warn!(slot, path = %tmp.display(), "removed a stray fresh log file"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(format!("remove {}", tmp.display()))(e)),
    }
    let (region, file) = PmRegion::create_new(&tmp, geo.log_size(), 0o600)?;
    let fresh = FreshLog { slot, dir: dir.to_path_buf(), tmp, file, region: Arc::new(region) };
    let written = (|| {
        LogSlot::new(fresh.region.clone(), geo, slot).format_at(lsns.published, lsns.replicated)?;
        fresh.region.fence();
        fresh.file.sync_all().map_err(io(format!("fsync {}", fresh.tmp.display())))
    })();
    match written {
        Ok(()) => Ok(fresh),
        Err(e) => {
            fresh.abandon();
            Err(e)
        }
    }
}

impl FreshLog {
    /// Where the fresh file is until it is installed (to open it for a lock of its own:
    /// a lock taken on the descriptor behind [`FreshLog::region`]'s mapping would last as
    /// long as the mapping does).
    pub fn path(&self) -> &Path {
        &self.tmp
    }

    /// The fresh file's mapping.
    pub fn region(&self) -> &Arc<PmRegion> {
        &self.region
    }

    /// Renames the fresh file over the slot's file and makes that durable (step 2 of the
    /// module notes); returns its mapping. On an error the rename may or may not have
    /// happened: either file is a valid log of the slot.
    pub fn install(self) -> Result<Arc<PmRegion>, FormatError> {
        let path = self.dir.join(log_file_name(self.slot));
        std::fs::rename(&self.tmp, &path).map_err(io(format!(
            "rename {} to {}",
            self.tmp.display(),
            path.display()
        )))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(format!("fsync the directory {}", self.dir.display())))?;
        Ok(self.region)
    }

    /// Removes the fresh file without installing it (best effort: a stray is harmless).
    pub fn abandon(self) {
        if let Err(e) = std::fs::remove_file(&self.tmp) {
            tracing::warn!(slot = self.slot, path = %self.tmp.display(), error = %e, "cannot remove a fresh log file");
        }
    }
}

/// Replaces slot `slot`'s log file with a fresh one whose header carries `lsns`
/// ([`prepare`], then [`FreshLog::install`]); returns the new file's mapping.
pub fn replace(dir: &Path, geo: &Geometry, slot: u32, lsns: SlotLsns) -> Result<Arc<PmRegion>, FormatError> {
    prepare(dir, geo, slot, lsns)?.install()
}

/// Removes every fresh log file a crash left before its rename (the module notes say why
/// that is safe); returns the slots that had one. A file that cannot be removed is logged
/// and left: nothing reads it.
pub fn remove_stray(dir: &Path, geo: &Geometry) -> Vec<u32> {
    let mut removed = Vec::new();
    for slot in 0..geo.log_slots {
        let tmp = dir.join(new_log_file_name(slot));
        match std::fs::remove_file(&tmp) {
            Ok(()) => {
                tracing::info!(slot, path = %tmp.display(), "removed a fresh log file a crash left before its rename");
                removed.push(slot);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(slot, path = %tmp.display(), error = %e, "cannot remove a stray fresh log file"),
        }
    }
    removed
}

#[cfg(test)]
mod tests;
