//! Upgrading a node of an older format version in place (`linefs upgrade`, and `linefs up`
//! before it starts a node's daemons).
//!
//! Versions 4 to 6 differ from 7 only in what 7 adds; nothing they hold moves:
//!
//! * 7 adds the node record and the superblock copy in block 0 (crate::noderecord), which
//!   older versions leave zero: the upgrade writes the first record (a node of no cluster);
//! * 5 added the replicated LSN to the log slot header (bytes 72..80), which version 4 left
//!   zero: the upgrade raises it to the published LSN (a node has had no replicas), so that
//!   log space before the checkpoint can be reclaimed as before;
//! * 5 and 6 added record kinds (CALLER, OPEN_WRITE) that an older log never holds, and
//!   this build reads every older record as it was written.
//!
//! Order, so that a crash anywhere leaves a node that opens or upgrades again: the log
//! headers and the node record first, each persisted and fenced (an older build ignores
//! them: it reads neither the record's bytes nor a replicated LSN); then the superblock,
//! rewritten through its copy ([`Superblock::rewrite`]), the upgrade's commit point. Before
//! it the node is still of its old version and the upgrade runs again from the start;
//! after it the node is of version 7. Running the upgrade on a node of version 7 changes
//! nothing, except that a superblock torn by a crash during an earlier upgrade is written
//! again from its copy. Version 3 (the logs inside the PM file) and anything else is
//! refused: such a node must be formatted anew.

use crate::layout::{FormatError, Superblock, FORMAT_VERSION};
use crate::node::{log_file_name, PUBLIC_FILE};
use crate::noderecord::{NodeRecord, NODE_RECORD_SIZE, SLOT_OFF};
use crate::oplog::LogSlot;
use crate::region::PmRegion;
use std::path::Path;
use std::sync::Arc;

/// What an upgrade did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upgrade {
    /// The version the node had.
    pub from: u32,
    /// The version it has now ([`FORMAT_VERSION`]).
    pub to: u32,
    /// A superblock torn by a crash during an earlier upgrade was written again from its
    /// copy.
    pub superblock_restored: bool,
}

impl Upgrade {
    /// Whether the node changed.
    pub fn changed(&self) -> bool {
        self.from != self.to || self.superblock_restored
    }
}

/// Upgrade the node in directory `dir` in place. The node must not be in use: its lock
/// (the exclusive `flock` of [`crate::node::LOCK_FILE`] that nicfs and a host-only mount
/// hold) is taken for the upgrade, and a node in use is refused.
pub fn upgrade_dir(dir: &Path) -> Result<Upgrade, FormatError> {
    let public_path = dir.join(PUBLIC_FILE);
    let io = |what: String| move |e: std::io::Error| FormatError::Pm(crate::PmError::Io { what, source: e });
    let lock_path = dir.join(crate::node::LOCK_FILE);
    let Some(lock) = crate::node::lock_node(dir).map_err(io(format!("lock {}", lock_path.display())))? else {
        return Err(FormatError::Options(format!(
            "{} is in use (a nicfs or a mount holds it): stop it before upgrading (linefs down)",
            dir.display()
        )));
    };
    let public = PmRegion::open(&public_path)?;
    let (version, sb, _) = Superblock::read_any_version(&public, false)?;
    let logs = (0..sb.geometry.log_slots)
        .map(|s| {
            let path = dir.join(log_file_name(s));
            let log = PmRegion::open(&path)?;
            if log.len() != sb.geometry.log_size() {
                return Err(FormatError::SizeMismatch { expected: sb.geometry.log_size(), found: log.len() });
            }
            Ok(Arc::new(log))
        })
        .collect::<Result<Vec<_>, FormatError>>()?;
    if version < FORMAT_VERSION {
        tracing::info!(dir = %dir.display(), from = version, to = FORMAT_VERSION, "upgrading the node's format");
    }
    let done = upgrade_files(&public, &logs)?;
    drop(lock);
    Ok(done)
}

/// Upgrade a node packed in one region (tests, crash images): the public file, then the
/// log files.
pub fn upgrade_packed(region: &Arc<PmRegion>) -> Result<Upgrade, FormatError> {
    let (_, sb, _) = Superblock::read_any_version(region, true)?;
    let geo = sb.geometry;
    let public = PmRegion::window(region.clone(), 0, geo.public_size())?;
    let logs = (0..geo.log_slots)
        .map(|s| PmRegion::window(region.clone(), geo.packed_log_off(s), geo.log_size()).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    upgrade_files(&public, &logs)
}

fn upgrade_files(public: &PmRegion, logs: &[Arc<PmRegion>]) -> Result<Upgrade, FormatError> {
    let (from, sb, from_copy) = Superblock::read_any_version(public, false)?;
    if from == FORMAT_VERSION {
        if from_copy {
            sb.rewrite(public, FORMAT_VERSION)?;
        }
        return Ok(Upgrade { from, to: FORMAT_VERSION, superblock_restored: from_copy });
    }
    // Version 4 left the replicated LSN zero: a node without replicas has everything it
    // published replicated.
    for (slot, log) in logs.iter().enumerate() {
        let slot = LogSlot::new(log.clone(), &sb.geometry, slot as u32);
        let published = slot.published_lsn()?;
        if slot.replicated_lsn()? < published {
            slot.set_replicated_lsn(published)?;
        }
    }
    // The first node record; the other slot and the superblock copy cleared (an older
    // version left them zero, but a crashed earlier upgrade may have written them).
    let first = NodeRecord::initial();
    let other = SLOT_OFF[((first.seq + 1) % 2) as usize];
    public.write(other, &[0u8; NODE_RECORD_SIZE])?;
    public.persist(other, NODE_RECORD_SIZE as u64)?;
    NodeRecord::write_slot(public, &first)?;
    // The commit point.
    sb.rewrite(public, FORMAT_VERSION)?;
    Ok(Upgrade { from, to: FORMAT_VERSION, superblock_restored: false })
}
