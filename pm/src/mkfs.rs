//! Formatting a node: every log file an empty slot, an empty public area with a root
//! directory, and the superblock written last — it is the format's commit point, so a crash while
//! formatting leaves a file that opening refuses (bad magic), never a half-made node.

use crate::layout::{FormatError, FormatParams, Geometry, Superblock, SUPERBLOCK_SIZE};
use crate::node::{is_node_dir, NodePm};
use crate::noderecord::NodeRecord;
use crate::oplog::LogSlot;
use crate::public::PublicArea;
use crate::record::{InodeImage, Timespec, ROOT_INO};
use crate::region::PmRegion;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Create the files of a node in `dir` (`params.size` bytes in all) and format them.
/// Refuses a directory that already holds a node.
pub fn format_dir(dir: &Path, params: &FormatParams) -> Result<NodePm, FormatError> {
    if is_node_dir(dir) {
        return Err(FormatError::Exists(dir.display().to_string()));
    }
    let geo = Geometry::compute(params)?;
    let node = NodePm::create(dir, &geo)?;
    format_node(&node)?;
    Ok(node)
}

/// Format the files of `node` (tests use a traced, packed node). The root directory belongs
/// to root with mode 0755.
pub fn format_node(node: &NodePm) -> Result<(), FormatError> {
    let geo = &node.geometry;
    for (slot, log) in node.logs.iter().enumerate() {
        LogSlot::new(log.clone(), geo, slot as u32).format()?;
        log.fence();
    }
    let region = &node.public;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let t = Timespec { sec: now.as_secs() as i64, nsec: now.subsec_nanos() };
    let root = InodeImage {
        ino: ROOT_INO,
        size: 64,
        parent: ROOT_INO,
        mode: libc::S_IFDIR | 0o755,
        nlink: 2,
        generation: 1,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        ..Default::default()
    };
    PublicArea::format(region, geo, &root)?;
    let sb = Superblock {
        geometry: *geo,
        uuid: rand::random::<u128>().to_le_bytes(),
        format_time_ns: now.as_nanos() as u64,
    };
    // The node record (no cluster yet) in its slot, the other slot and the superblock copy
    // cleared: a file formatted over an old one holds nothing of it.
    region.write(crate::layout::SUPERBLOCK_COPY_OFF, &[0u8; SUPERBLOCK_SIZE])?;
    region.persist(crate::layout::SUPERBLOCK_COPY_OFF, SUPERBLOCK_SIZE as u64)?;
    let first = NodeRecord::initial();
    let other = crate::noderecord::SLOT_OFF[((first.seq + 1) % 2) as usize];
    region.write(other, &[0u8; crate::noderecord::NODE_RECORD_SIZE])?;
    region.persist(other, crate::noderecord::NODE_RECORD_SIZE as u64)?;
    NodeRecord::write_slot(region, &first)?;
    // Everything above is durable before the superblock that makes it a linefs node.
    region.fence();
    region.write(0, &sb.encode())?;
    region.persist_now(0, SUPERBLOCK_SIZE as u64)?;
    Ok(())
}

/// Check that `dir` holds a valid linefs node (superblock, geometry, every log file).
pub fn check_dir(dir: &Path) -> Result<Geometry, FormatError> {
    Ok(NodePm::open(dir)?.geometry)
}

/// Format a node packed in one region of `geo.node_size()` bytes (tests, the crash suite).
pub fn format_region(region: &Arc<PmRegion>, geo: &Geometry) -> Result<(), FormatError> {
    format_node(&NodePm::packed_with(region.clone(), geo)?)
}
