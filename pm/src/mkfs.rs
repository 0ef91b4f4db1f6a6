//! Formatting a node: every log slot empty, an empty public area with a root directory, and
//! the superblock written last — it is the format's commit point, so a crash while
//! formatting leaves a file that opening refuses (bad magic), never a half-made node.

use crate::layout::{FormatError, FormatParams, Geometry, Superblock, SUPERBLOCK_SIZE};
use crate::oplog::LogSlot;
use crate::public::PublicArea;
use crate::record::{InodeImage, Timespec, ROOT_INO};
use crate::region::PmRegion;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Create the PM file `path` of `params.size` bytes and format it. Refuses to touch an
/// existing non-empty file.
pub fn format_file(path: &Path, params: &FormatParams) -> Result<Geometry, FormatError> {
    if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
        return Err(FormatError::Exists(path.display().to_string()));
    }
    let geo = Geometry::compute(params)?;
    let region = Arc::new(PmRegion::create(path, params.size)?);
    format_region(&region, &geo)?;
    Ok(geo)
}

/// Format a region that is already mapped (tests use traced regions). The root directory
/// belongs to root with mode 0755.
pub fn format_region(region: &Arc<PmRegion>, geo: &Geometry) -> Result<(), FormatError> {
    for slot in 0..geo.log_slots {
        LogSlot::new(region.clone(), geo, slot).format()?;
    }
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
    // Everything above is durable before the superblock that makes it a linefs node.
    region.fence();
    region.write(0, &sb.encode())?;
    region.persist_now(0, SUPERBLOCK_SIZE as u64)?;
    Ok(())
}

/// Check that `path` holds a valid linefs PM file (superblock and geometry).
pub fn check_file(path: &Path) -> Result<Geometry, FormatError> {
    let region = PmRegion::open(path)?;
    Ok(Superblock::read(&region)?.geometry)
}
