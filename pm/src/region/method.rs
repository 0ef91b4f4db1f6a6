//! How a mapped region persists its stores: the method ([`PersistMethod`]), chosen from what
//! backs the file ([`Backing`]: tmpfs, a DAX mount, a disk file, or the tracer's memory),
//! or forced by `LINEFS_PERSIST`.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::Path;

#[cfg(target_arch = "x86_64")]
use super::flush;
use super::{PmError, PERSIST_ENV};

/// `f_type` of tmpfs in statfs(2).
const TMPFS_MAGIC: i64 = 0x0102_1994;

/// How a region makes stores durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PersistMethod {
    /// `clwb` per cache line, `sfence` to order.
    Clwb,
    /// `clflushopt` per cache line, `sfence` to order.
    ClflushOpt,
    /// `clflush` per cache line (`sfence` issued anyway).
    Clflush,
    /// `msync(MS_SYNC)` of the page-aligned range; fence is a no-op.
    Msync,
    /// The in-memory tracing backend.
    Traced,
}

impl fmt::Display for PersistMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PersistMethod::Clwb => "clwb+sfence",
            PersistMethod::ClflushOpt => "clflushopt+sfence",
            PersistMethod::Clflush => "clflush",
            PersistMethod::Msync => "msync",
            PersistMethod::Traced => "traced",
        })
    }
}

impl PersistMethod {
    /// Parse a `LINEFS_PERSIST` value (`msync`, `clwb`, `clflushopt`, `clflush`).
    pub fn from_name(name: &str) -> Option<PersistMethod> {
        match name.trim().to_ascii_lowercase().as_str() {
            "msync" => Some(PersistMethod::Msync),
            "clwb" => Some(PersistMethod::Clwb),
            "clflushopt" => Some(PersistMethod::ClflushOpt),
            "clflush" => Some(PersistMethod::Clflush),
            _ => None,
        }
    }

    /// Whether this host can use the method on a mapped region.
    pub fn is_available(self) -> bool {
        match self {
            PersistMethod::Msync => true,
            PersistMethod::Traced => false,
            #[cfg(target_arch = "x86_64")]
            PersistMethod::Clwb => flush::features().clwb,
            #[cfg(target_arch = "x86_64")]
            PersistMethod::ClflushOpt => flush::features().clflushopt,
            #[cfg(target_arch = "x86_64")]
            PersistMethod::Clflush => flush::features().clflush,
            #[cfg(not(target_arch = "x86_64"))]
            PersistMethod::Clwb | PersistMethod::ClflushOpt | PersistMethod::Clflush => false,
        }
    }

    /// The best cache-line flush method of this CPU (msync off x86_64).
    pub fn best_flush() -> PersistMethod {
        [PersistMethod::Clwb, PersistMethod::ClflushOpt, PersistMethod::Clflush]
            .into_iter()
            .find(|m| m.is_available())
            .unwrap_or(PersistMethod::Msync)
    }
}

/// What backs a region's mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// A file on tmpfs (emulated PM: DRAM).
    Tmpfs,
    /// A file on a DAX mount (real or emulated PM, loads/stores go to the medium).
    Dax,
    /// A file on any other file system (disk).
    File,
    /// In-memory, tracing backend.
    Memory,
}

impl fmt::Display for Backing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backing::Tmpfs => "tmpfs",
            Backing::Dax => "dax",
            Backing::File => "file",
            Backing::Memory => "memory(traced)",
        })
    }
}

/// Choose the persist method for a mapped region on `backing`, honouring a forced
/// `LINEFS_PERSIST` value (`forced`, already read from the environment).
pub(super) fn select_method(backing: Backing, forced: Option<&str>) -> Result<PersistMethod, PmError> {
    if let Some(name) = forced.filter(|s| !s.trim().is_empty()) {
        let m = PersistMethod::from_name(name).ok_or_else(|| PmError::Unsupported {
            method: name.to_string(),
            reason: format!("{PERSIST_ENV} must be one of msync, clwb, clflushopt, clflush"),
        })?;
        if !m.is_available() {
            return Err(PmError::Unsupported {
                method: name.to_string(),
                reason: "this CPU does not support it".into(),
            });
        }
        if backing == Backing::File && m != PersistMethod::Msync {
            tracing::warn!(
                method = %m,
                "{PERSIST_ENV} forces cache-line flushes on a disk file: data is not durable across a power cut"
            );
        }
        return Ok(m);
    }
    Ok(match backing {
        Backing::Tmpfs | Backing::Dax => PersistMethod::best_flush(),
        Backing::File => PersistMethod::Msync,
        Backing::Memory => PersistMethod::Traced,
    })
}

pub(super) fn forced_method_from_env() -> Result<Option<String>, PmError> {
    match std::env::var(PERSIST_ENV) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(PmError::Unsupported {
            method: v.to_string_lossy().into_owned(),
            reason: format!("{PERSIST_ENV} is not valid UTF-8"),
        }),
    }
}

/// Whether the mount holding `path` (absolute, canonical) is a DAX mount, per the contents of
/// /proc/self/mountinfo. The innermost (longest, then last) mount point that contains `path`
/// wins; DAX if its mount or super options contain `dax` or `dax=always`.
pub(super) fn mountinfo_is_dax(mountinfo: &str, path: &Path) -> bool {
    let mounts = crate::mountinfo::parse(mountinfo);
    crate::mountinfo::holding(&mounts, path).is_some_and(|m| m.options().any(|o| o == "dax" || o == "dax=always"))
}

pub(super) fn detect_backing(file: &File, path: &Path) -> Backing {
    // SAFETY: `statfs` is plain old data; all-zero is a valid value of it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the fd is open for the lifetime of `file`, and `st` is a valid, writable statfs.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    if rc != 0 {
        tracing::warn!(
            path = %path.display(),
            error = %io::Error::last_os_error(),
            "fstatfs failed; treating the PM file as a disk file (msync)"
        );
        return Backing::File;
    }
    // f_type's integer type differs between libcs.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let f_type = st.f_type as i64;
    if f_type == TMPFS_MAGIC {
        return Backing::Tmpfs;
    }
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    match std::fs::read_to_string("/proc/self/mountinfo") {
        Ok(info) if mountinfo_is_dax(&info, &canonical) => Backing::Dax,
        Ok(_) => Backing::File,
        Err(e) => {
            tracing::debug!(error = %e, "cannot read /proc/self/mountinfo; assuming no DAX");
            Backing::File
        }
    }
}
