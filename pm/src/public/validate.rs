//! Validation of log records against the public state, before anything is applied: a
//! hostile or buggy log must not be able to corrupt the public area, and an entry is
//! published entirely or not at all.

use super::area::PublicArea;
use super::format::{PmInode, XATTR_SPACE};
use super::{dtype_of_mode, invalid, PublishError, Result};
use crate::record::{dtype, xattrs_len, Record, NAME_MAX, XATTR_VALUE_MAX};
use crate::region::PmRegion;
use std::collections::{HashMap, HashSet};

/// Whether a set of extended attributes can be published: names of 1..=255 bytes, values of
/// at most [`XATTR_VALUE_MAX`], at most [`XATTR_SPACE`] bytes encoded.
pub(super) fn check_xattrs(ino: u64, attrs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
    if attrs.iter().any(|(n, v)| n.is_empty() || n.len() > NAME_MAX || v.len() > XATTR_VALUE_MAX) {
        return Err(invalid(ino, "extended attribute name or value of invalid length"));
    }
    if xattrs_len(attrs.iter().map(|(n, v)| (&n[..], &v[..]))) > XATTR_SPACE {
        return Err(invalid(ino, "extended attributes exceed the xattr space of an inode"));
    }
    Ok(())
}

impl PublicArea {
    /// A live (allocated) inode, for a record that changes it.
    pub(super) fn live_inode(&self, ino: u64) -> Result<PmInode> {
        if ino == 0 || ino >= self.geo.inode_count {
            return Err(invalid(ino, "inode number out of range"));
        }
        let inode = self.read_inode(ino)?;
        if inode.img.mode == 0 {
            return Err(invalid(ino, "inode is not allocated"));
        }
        Ok(inode)
    }

    /// Check that every record of one entry can be applied, without changing anything, so
    /// that an entry is published entirely or not at all. Records may depend on earlier
    /// records of the same entry (a file created and written in one entry). `log` is the
    /// writer's log file, where WRITE records' data lives.
    pub fn validate(&self, records: &[Record], log: &PmRegion) -> Result<()> {
        self.validate_with(records, &HashSet::new(), log)
    }

    /// [`PublicArea::validate`] for recovery. A crash in the middle of a publication batch
    /// leaves the public area *ahead* of the checkpoint: later entries of the batch may
    /// already have freed an inode, or freed it and created another file in its place, that
    /// an earlier entry still writes to. Replaying the suffix converges all the same (the
    /// records are blind post-images, and a block freed in the batch is not reused before
    /// the checkpoint), so for the inodes in `unsettled` — those the suffix itself frees or
    /// creates — whether they are allocated, and as what, is not held against an entry;
    /// everything else is checked as usual.
    pub fn validate_with(&self, records: &[Record], unsettled: &HashSet<u64>, log: &PmRegion) -> Result<()> {
        self.check_entry(records, unsettled, log.len(), &mut HashMap::new())
    }

    /// Validates consecutive entries as one batch, before any of them is applied: each is
    /// checked against the public state as the entries before it leave it (which inodes
    /// they allocate or free, and as what — all validation looks at). `log_len` is the size
    /// of the writer's log file. Returns how many entries, from the first, are valid, and
    /// the error of the first one that is not (the ones after it are not looked at).
    pub fn validate_batch<'a>(
        &self,
        entries: impl IntoIterator<Item = &'a [Record]>,
        log_len: u64,
    ) -> (usize, Option<PublishError>) {
        let mut carried = HashMap::new();
        let unsettled = HashSet::new();
        let mut n = 0;
        for records in entries {
            if let Err(e) = self.check_entry(records, &unsettled, log_len, &mut carried) {
                return (n, Some(e));
            }
            n += 1;
        }
        (n, None)
    }

    /// Checks one entry against the public state overlaid with `local`, the modes (allocated
    /// as what, or free) that earlier records of the batch left, which it updates.
    fn check_entry(
        &self,
        records: &[Record],
        unsettled: &HashSet<u64>,
        log_len: u64,
        local: &mut HashMap<u64, Option<u32>>,
    ) -> Result<()> {
        // ino -> Some(Some(mode)): allocated; Some(None): free; None: unknown (unsettled).
        let mode_of = |local: &HashMap<u64, Option<u32>>, ino: u64| -> Result<Option<Option<u32>>> {
            if ino == 0 || ino >= self.geo.inode_count {
                return Err(invalid(ino, "inode number out of range"));
            }
            if let Some(m) = local.get(&ino) {
                return Ok(Some(*m));
            }
            if unsettled.contains(&ino) {
                return Ok(None);
            }
            let m = self.read_inode(ino)?.img.mode;
            Ok(Some((m != 0).then_some(m)))
        };
        // The file type of a live inode (None: unsettled, any type is accepted).
        let live = |local: &HashMap<u64, Option<u32>>, ino: u64| -> Result<Option<u32>> {
            match mode_of(local, ino)? {
                None => Ok(None),
                Some(None) => Err(invalid(ino, "inode is not allocated")),
                Some(Some(m)) => Ok(Some(m & libc::S_IFMT)),
            }
        };
        for rec in records {
            match rec {
                Record::Inode { fresh, img } => {
                    if !dtype::valid(dtype_of_mode(img.mode)) {
                        return Err(invalid(img.ino, format!("mode {:o} has no file type", img.mode)));
                    }
                    let cur = mode_of(local, img.ino)?;
                    if !fresh {
                        match cur {
                            Some(None) => return Err(invalid(img.ino, "attributes for an unallocated inode")),
                            Some(Some(m)) if m & libc::S_IFMT != img.mode & libc::S_IFMT => {
                                return Err(invalid(img.ino, "file type changed"))
                            }
                            _ => {}
                        }
                    }
                    local.insert(img.ino, Some(img.mode));
                }
                Record::Dirent { dir, ino, dtype: t, .. } => {
                    if live(local, *dir)?.is_some_and(|k| k != libc::S_IFDIR) {
                        return Err(invalid(*dir, "directory entry in a non-directory"));
                    }
                    // A name's type is its inode's: readers (and the rename-cycle check)
                    // go by it.
                    if *ino != 0 && live(local, *ino)?.is_some_and(|k| dtype_of_mode(k) != *t) {
                        return Err(invalid(*ino, format!("directory entry of type {t} for an inode of another type")));
                    }
                }
                Record::Write { ino, len, data_off, .. } => {
                    let k = live(local, *ino)?;
                    if k.is_some_and(|k| k != libc::S_IFREG && k != libc::S_IFLNK) {
                        return Err(invalid(*ino, "data write to a non-file"));
                    }
                    if data_off.checked_add(*len).is_none_or(|e| e > log_len) {
                        return Err(invalid(*ino, "write data outside the writer's log"));
                    }
                }
                Record::Truncate { ino, .. } | Record::Punch { ino, .. } => {
                    // Only a regular file's data is cut or zeroed: a directory's blocks hold
                    // its names (a truncation would drop them all), a symbolic link's its
                    // target (written once, when it is made).
                    if live(local, *ino)?.is_some_and(|k| k != libc::S_IFREG) {
                        return Err(invalid(*ino, "truncation or hole in a non-file"));
                    }
                }
                Record::Alloc { ino, .. } => {
                    if live(local, *ino)?.is_some_and(|k| k != libc::S_IFREG) {
                        return Err(invalid(*ino, "allocation for a non-file"));
                    }
                }
                Record::Xattrs { ino, attrs } => {
                    live(local, *ino)?;
                    check_xattrs(*ino, attrs)?;
                }
                Record::OpenWrite { ino } => {
                    if live(local, *ino)?.is_some_and(|k| k != libc::S_IFREG) {
                        return Err(invalid(*ino, "open for writing of a non-file"));
                    }
                }
                Record::FreeInode { ino } => {
                    if *ino <= 1 || *ino >= self.geo.inode_count {
                        return Err(invalid(*ino, "cannot free this inode"));
                    }
                    local.insert(*ino, None);
                }
            }
        }
        Ok(())
    }
}
