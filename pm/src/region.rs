//! PM regions: a node's (emulated) persistent memory.
//!
//! A [`PmRegion`] is a byte range with explicit persistence primitives:
//!
//! * [`PmRegion::write`] and friends are plain stores: visible to later reads at once, but
//!   **not durable** until the range is persisted and a fence has executed.
//! * [`PmRegion::persist`] writes back the cache lines of a range (or msyncs its pages);
//!   [`PmRegion::fence`] orders those write-backs: after it, everything persisted before is
//!   durable. [`PmRegion::persist_now`] is both.
//! * [`PmRegion::write_persist`] and [`PmRegion::zero_persist`] store and write back in one
//!   call, streaming whole cache lines past the cache where that is cheaper (`durable`).
//!
//! # Backends and persist methods
//!
//! The persist method is chosen by what backs the file (statfs(2) on the open file):
//!
//! * **tmpfs** (`f_type == TMPFS_MAGIC`) or a **DAX** mount (the mount holding the file, found
//!   in `/proc/self/mountinfo`, has option `dax` / `dax=always`): the mapping *is* the
//!   (emulated) PM, so persisting is flushing cache lines: `clwb` when the CPU has it, else
//!   `clflushopt`, else `clflush`, ordered by `sfence`. On non-x86_64 hosts: msync.
//! * **any other file** (a disk file): `msync(MS_SYNC)` of the page-aligned range, so data also
//!   survives a real power cut. msync is synchronous, so `fence` is a no-op there.
//! * **memory (traced)**: an in-memory region driven by [`Tracer`], which models x86
//!   persistency at cache-line granularity and records crash points for the crash tests.
//!
//! The environment variable `LINEFS_PERSIST=msync|clwb|clflushopt|clflush` forces the method
//! of a mapped region (for benchmarks); naming an instruction the CPU lacks is an error.
//!
//! # Invariants and safety
//!
//! * Every access is bounds-checked against the region size first (`off + len` computed with
//!   overflow checks): out-of-range offsets return [`PmError::OutOfBounds`], never panic.
//! * A mapped region owns its [`MmapRaw`]; the mapping lives exactly as long as the region,
//!   so a bounds-checked pointer into it is valid for every access made through `&self`.
//! * The region itself does no locking on mapped bytes: concurrent writers to the *same*
//!   bytes (or a writer racing a reader of those bytes) must be excluded by the callers' locks
//!   (the log, inode and allocator locks of the layers above). Disjoint ranges may be
//!   accessed concurrently; `PmRegion` is `Send + Sync`.
//! * An 8-byte store at an 8-aligned offset ([`PmRegion::write_u64`]) is a single atomic
//!   store (the mapping is page-aligned, so the address is 8-aligned too); the operation log
//!   relies on this for its commit words. All multi-byte integers are little-endian.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::trace::Tracer;

/// Cache-line size used for flushing.
pub const CACHE_LINE: u64 = 64;
/// Page size; region sizes are multiples of it.
pub const PAGE_SIZE: u64 = 4096;
/// Smallest region [`PmRegion::create`] accepts: the smallest log file (64 blocks).
pub const MIN_REGION_SIZE: u64 = 256 << 10;
/// Set to skip prefaulting tmpfs/DAX mappings at open.
pub const NO_PREFAULT_ENV: &str = "LINEFS_NO_PREFAULT";
/// Environment variable forcing the persist method of mapped regions.
pub const PERSIST_ENV: &str = "LINEFS_PERSIST";

/// Errors of the PM region layer.
#[derive(thiserror::Error, Debug)]
pub enum PmError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// An access outside the region.
    #[error("PM access of {len} bytes at offset {off} is out of bounds (region size {size})")]
    OutOfBounds { off: u64, len: u64, size: u64 },
    /// A region (file) size that is not usable.
    #[error("{}: invalid PM region size {size}: {reason}", path.display())]
    BadSize { path: PathBuf, size: u64, reason: &'static str },
    /// The path is not a regular file.
    #[error("{}: not a regular file", path.display())]
    NotRegularFile { path: PathBuf },
    /// A forced persist method that cannot be used (unknown name, CPU lacks it).
    #[error("persist method {method:?} unusable: {reason}")]
    Unsupported { method: String, reason: String },
    /// A store to a region mapped read-only.
    #[error("{what}: the PM region is mapped read-only")]
    ReadOnly { what: String },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> PmError {
    let what = what.into();
    move |source| PmError::Io { what, source }
}

/// Counters of a region, for status output and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PmStats {
    /// Bytes stored (write, zero, write_u64).
    pub bytes_written: u64,
    /// Bytes passed to persist.
    pub bytes_persisted: u64,
    /// Number of persist calls.
    pub persist_calls: u64,
    /// Number of fences.
    pub fences: u64,
}

#[derive(Default)]
struct Counters {
    bytes_written: AtomicU64,
    bytes_persisted: AtomicU64,
    persist_calls: AtomicU64,
    fences: AtomicU64,
}

enum Backend {
    Mapped(MmapRaw),
    Traced(Tracer),
    /// `[base, base + size)` of another region: one traced region can hold all the files of
    /// a node, so that one tracer sees every store and fence across them (crash tests).
    Window {
        parent: Arc<PmRegion>,
        base: u64,
    },
}

/// A PM region: a shared mapping of a file, or an in-memory traced region.
pub struct PmRegion {
    size: u64,
    /// False for a read-only mapping (a client's view of the public file): every store is
    /// refused before it could touch the mapping.
    writable: bool,
    method: PersistMethod,
    backing: Backing,
    path: Option<PathBuf>,
    backend: Backend,
    counters: Counters,
    /// Msync method: page ranges persisted since the last fence. `fence` msyncs them while
    /// holding the lock, so a fence never returns while another thread's msync of a range
    /// persisted before it is still running.
    msync_pending: parking_lot::Mutex<Vec<(usize, usize)>>,
    /// An msync failed: nothing persisted after it can be trusted to be durable.
    failed: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for PmRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PmRegion")
            .field("path", &self.path)
            .field("size", &self.size)
            .field("backing", &self.backing)
            .field("method", &self.method)
            .finish()
    }
}

#[cfg(target_arch = "x86_64")]
mod durable;
#[cfg(not(target_arch = "x86_64"))]
mod durable_plain;
#[cfg(target_arch = "x86_64")]
mod flush;
mod method;

use method::{detect_backing, forced_method_from_env, select_method};
pub use method::{Backing, PersistMethod};

/// The sizes [`PmRegion::create`] accepts.
fn check_new_size(path: &Path, size: u64) -> Result<(), PmError> {
    if size < MIN_REGION_SIZE || !size.is_multiple_of(PAGE_SIZE) {
        let reason = "must be a multiple of 4096 and at least 256 KiB";
        return Err(PmError::BadSize { path: path.to_path_buf(), size, reason });
    }
    Ok(())
}

impl PmRegion {
    /// Create (or truncate-extend) the file at `path` to exactly `size` bytes and map it
    /// shared. `size` must be a multiple of 4096 and at least 256 KiB. Existing content up to
    /// `size` is kept (set_len); on a disk file the blocks are also reserved with
    /// posix_fallocate, so later stores cannot fault for lack of space.
    pub fn create(path: &Path, size: u64) -> Result<PmRegion, PmError> {
        check_new_size(path, size)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(format!("create PM file {}", path.display())))?;
        Self::size_and_map(file, path, size)
    }

    /// [`PmRegion::create`] of a file that must not exist yet, created with permission bits
    /// `mode` (less the umask) — never readable or writable by anyone else, even for an
    /// instant — mapped; returns the region and a descriptor of the file (for fsync). The
    /// descriptor shares the mapping's open file description, so a `flock` taken on it
    /// lasts as long as the mapping.
    pub fn create_new(path: &Path, size: u64, mode: u32) -> Result<(PmRegion, File), PmError> {
        use std::os::unix::fs::OpenOptionsExt;
        check_new_size(path, size)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(io_err(format!("create PM file {}", path.display())))?;
        let keep = file.try_clone().map_err(io_err(format!("dup {}", path.display())))?;
        Ok((Self::size_and_map(file, path, size)?, keep))
    }

    /// Sizes a file just opened for [`PmRegion::create`] and maps it.
    fn size_and_map(file: File, path: &Path, size: u64) -> Result<PmRegion, PmError> {
        let meta = file.metadata().map_err(io_err(format!("stat {}", path.display())))?;
        if !meta.is_file() {
            return Err(PmError::NotRegularFile { path: path.to_path_buf() });
        }
        file.set_len(size).map_err(io_err(format!("resize {} to {size}", path.display())))?;
        let backing = detect_backing(&file, path);
        if backing == Backing::File {
            let len = libc::off_t::try_from(size).map_err(|_| PmError::BadSize {
                path: path.to_path_buf(),
                size,
                reason: "too large for off_t",
            })?;
            // SAFETY: the fd is valid while `file` lives; posix_fallocate only reserves blocks.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
            if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
                return Err(PmError::Io {
                    what: format!("reserve {size} bytes for {}", path.display()),
                    source: io::Error::from_raw_os_error(rc),
                });
            }
            file.sync_all().map_err(io_err(format!("fsync {}", path.display())))?;
        }
        Self::map(file, path, size, backing)
    }

    /// Map an existing file read-write (shared). Errors if it is missing, not a regular
    /// file, empty, or not a multiple of 4096 bytes long.
    pub fn open(path: &Path) -> Result<PmRegion, PmError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(io_err(format!("open PM file {}", path.display())))?;
        Self::from_file(file, path, true)
    }

    /// Map an existing file read-only (shared): every store to the region is refused.
    pub fn open_read_only(path: &Path) -> Result<PmRegion, PmError> {
        let file = File::open(path).map_err(io_err(format!("open PM file {}", path.display())))?;
        Self::from_file(file, path, false)
    }

    /// Map an open file (e.g. a descriptor received over a socket), read-write or read-only
    /// as `writable` says — a read-only descriptor can only be mapped read-only. `path`
    /// names it in messages and is where DAX is looked for.
    pub fn from_file(file: File, path: &Path, writable: bool) -> Result<PmRegion, PmError> {
        let meta = file.metadata().map_err(io_err(format!("stat {}", path.display())))?;
        if !meta.is_file() {
            return Err(PmError::NotRegularFile { path: path.to_path_buf() });
        }
        let size = meta.len();
        if size == 0 {
            return Err(PmError::BadSize { path: path.to_path_buf(), size, reason: "file is empty" });
        }
        if !size.is_multiple_of(PAGE_SIZE) {
            return Err(PmError::BadSize { path: path.to_path_buf(), size, reason: "not a multiple of 4096" });
        }
        let backing = detect_backing(&file, path);
        Self::map_with(file, path, size, backing, writable)
    }

    fn map(file: File, path: &Path, size: u64, backing: Backing) -> Result<PmRegion, PmError> {
        Self::map_with(file, path, size, backing, true)
    }

    fn map_with(file: File, path: &Path, size: u64, backing: Backing, writable: bool) -> Result<PmRegion, PmError> {
        let method = select_method(backing, forced_method_from_env()?.as_deref())?;
        let len = usize::try_from(size).map_err(|_| PmError::BadSize {
            path: path.to_path_buf(),
            size,
            reason: "larger than the address space",
        })?;
        let mut opts = MmapOptions::new();
        opts.len(len);
        let map = if writable { opts.map_raw(&file) } else { opts.map_raw_read_only(&file) }
            .map_err(io_err(format!("mmap {}", path.display())))?;
        if writable && matches!(backing, Backing::Tmpfs | Backing::Dax) && std::env::var_os(NO_PREFAULT_ENV).is_none() {
            // Real PM is memory the node owns; tmpfs allocates (and zeroes) a page at its
            // first touch, which would otherwise land on the write path of whatever touches
            // it first. Populate the whole mapping once, up front. Best effort: an old kernel
            // without MADV_POPULATE_WRITE just faults lazily.
            // SAFETY: madvise on the mapping we own, with its exact address and length; it
            // does not change the mapping's contents.
            let rc = unsafe { libc::madvise(map.as_mut_ptr().cast(), len, libc::MADV_POPULATE_WRITE) };
            if rc != 0 {
                tracing::debug!(error = %io::Error::last_os_error(), "PM prefault skipped");
            }
        }
        tracing::info!(
            path = %path.display(),
            size,
            %backing,
            %method,
            writable,
            "mapped PM region"
        );
        Ok(PmRegion {
            size,
            writable,
            method,
            backing,
            path: Some(path.to_path_buf()),
            backend: Backend::Mapped(map),
            counters: Counters::default(),
            msync_pending: parking_lot::Mutex::new(Vec::new()),
            failed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// An in-memory, zero-filled region with the tracing backend.
    pub fn traced(size: u64) -> PmRegion {
        Self::traced_from_image(vec![0u8; size as usize])
    }

    /// A traced region whose live and durable images both start as `image` (to recover from
    /// a crash image).
    pub fn traced_from_image(image: Vec<u8>) -> PmRegion {
        PmRegion {
            size: image.len() as u64,
            writable: true,
            method: PersistMethod::Traced,
            backing: Backing::Memory,
            path: None,
            backend: Backend::Traced(Tracer::new(image)),
            counters: Counters::default(),
            msync_pending: parking_lot::Mutex::new(Vec::new()),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The part `[base, base + len)` of `parent` as a region of its own (offsets start at 0).
    /// It persists and fences through the parent: windows of one traced region share its
    /// tracer, so a crash image of the parent covers every window at one instant.
    pub fn window(parent: Arc<PmRegion>, base: u64, len: u64) -> Result<PmRegion, PmError> {
        parent.check(base, len)?;
        Ok(PmRegion {
            size: len,
            writable: parent.writable,
            method: parent.method,
            backing: parent.backing,
            path: None,
            backend: Backend::Window { parent, base },
            counters: Counters::default(),
            msync_pending: parking_lot::Mutex::new(Vec::new()),
            failed: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Region size in bytes.
    pub fn len(&self) -> u64 {
        self.size
    }

    /// Whether the region has no bytes (only possible for a traced region).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The persist method in use.
    pub fn persist_method(&self) -> PersistMethod {
        self.method
    }

    /// What backs the region.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// The address range `[start, start + len)` of the mapping, for a mapped region (a
    /// window: its part of its parent's). A process mapping a file others may resize uses
    /// it to tell a fault on this region from any other ([`nicfs`'s SIGBUS guard]).
    pub fn mapped_range(&self) -> Option<(usize, usize)> {
        match &self.backend {
            Backend::Mapped(map) => Some((map.as_ptr() as usize, self.size as usize)),
            Backend::Traced(_) => None,
            Backend::Window { parent, base } => {
                parent.mapped_range().map(|(a, _)| (a + *base as usize, self.size as usize))
            }
        }
    }

    /// The backing file, for a mapped region.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Check `[off, off + len)` and return `off` as an index.
    fn check(&self, off: u64, len: u64) -> Result<usize, PmError> {
        match off.checked_add(len) {
            Some(end) if end <= self.size => Ok(off as usize),
            _ => Err(PmError::OutOfBounds { off, len, size: self.size }),
        }
    }

    /// [`check`](Self::check) for a store: also refused on a read-only mapping.
    fn check_store(&self, off: u64, len: u64) -> Result<usize, PmError> {
        if !self.writable {
            let what = match &self.path {
                Some(p) => format!("store of {len} bytes at {off} in {}", p.display()),
                None => format!("store of {len} bytes at {off}"),
            };
            return Err(PmError::ReadOnly { what });
        }
        self.check(off, len)
    }

    /// Whether stores are allowed (false for a read-only mapping).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Copy `buf.len()` bytes at `off` into `buf`.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), PmError> {
        let o = self.check(off, buf.len() as u64)?;
        match &self.backend {
            Backend::Mapped(map) => {
                // SAFETY: [o, o + buf.len()) is within the mapping (checked above), which
                // lives as long as `self`; `buf` is a distinct Rust allocation. Racing writers
                // of these bytes are excluded by the callers' locks (module doc).
                unsafe { std::ptr::copy_nonoverlapping(map.as_ptr().add(o), buf.as_mut_ptr(), buf.len()) }
            }
            Backend::Traced(t) => t.read(off, buf),
            Backend::Window { parent, base } => parent.read(base + off, buf)?,
        }
        Ok(())
    }

    /// Store `data` at `off` (not durable until persisted and fenced).
    pub fn write(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        let o = self.check_store(off, data.len() as u64)?;
        match &self.backend {
            Backend::Mapped(map) => {
                // SAFETY: [o, o + data.len()) is within the shared mapping, which is writable
                // (both checked by check_store) and lives as long as `self`. `data` is a
                // shared Rust borrow, so no one may be writing it; callers never pass a slice of the mapping itself (the
                // region hands out no references into it), and same-byte writers are excluded
                // by the callers' locks (module doc).
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), map.as_mut_ptr().add(o), data.len()) }
            }
            Backend::Traced(t) => t.write(off, data),
            Backend::Window { parent, base } => parent.write(base + off, data)?,
        }
        self.counters.bytes_written.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Store `len` zero bytes at `off` (not durable until persisted and fenced).
    pub fn zero(&self, off: u64, len: u64) -> Result<(), PmError> {
        let o = self.check_store(off, len)?;
        match &self.backend {
            Backend::Mapped(map) => {
                // SAFETY: [o, o + len) is within the mapping, which is writable (check_store), which
                // lives as long as `self`; same-byte writers are excluded by callers' locks.
                unsafe { std::ptr::write_bytes(map.as_mut_ptr().add(o), 0, len as usize) }
            }
            Backend::Traced(t) => t.zero(off, len),
            Backend::Window { parent, base } => parent.zero(base + off, len)?,
        }
        self.counters.bytes_written.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    /// Load a little-endian u64 at `off` (a single atomic load when `off % 8 == 0`).
    pub fn read_u64(&self, off: u64) -> Result<u64, PmError> {
        let o = self.check(off, 8)?;
        match &self.backend {
            Backend::Mapped(map) if off.is_multiple_of(8) => {
                // SAFETY: [o, o + 8) is within the mapping (checked above), which lives as long
                // as `self`; the mapping is page-aligned and o % 8 == 0, so the pointer is
                // aligned for AtomicU64. Non-atomic writers of these bytes are excluded by the
                // callers' locks.
                let v = unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(o).cast::<u64>()).load(Ordering::Acquire) };
                Ok(u64::from_le(v))
            }
            Backend::Window { parent, base } => parent.read_u64(base + off),
            _ => {
                let mut b = [0u8; 8];
                self.read(off, &mut b)?;
                Ok(u64::from_le_bytes(b))
            }
        }
    }

    /// Store a little-endian u64 at `off`. When `off % 8 == 0` this is a single atomic
    /// 8-byte store (the log's commit words rely on it). Not durable until persisted.
    pub fn write_u64(&self, off: u64, v: u64) -> Result<(), PmError> {
        let o = self.check_store(off, 8)?;
        match &self.backend {
            Backend::Mapped(map) if off.is_multiple_of(8) => {
                // SAFETY: [o, o + 8) is within the mapping, which is writable (check_store), which
                // lives as long as `self`; page-aligned base + o % 8 == 0 gives an 8-aligned
                // pointer as AtomicU64 requires. Non-atomic accesses to these bytes are
                // excluded by the callers' locks.
                unsafe {
                    AtomicU64::from_ptr(map.as_mut_ptr().add(o).cast::<u64>()).store(v.to_le(), Ordering::Release)
                }
                self.counters.bytes_written.fetch_add(8, Ordering::Relaxed);
                Ok(())
            }
            Backend::Window { parent, base } => {
                parent.write_u64(base + off, v)?;
                self.counters.bytes_written.fetch_add(8, Ordering::Relaxed);
                Ok(())
            }
            // The tracer applies a whole store under its lock, and never tears an aligned word.
            _ => self.write(off, &v.to_le_bytes()),
        }
    }

    /// Write back the cache lines covering `[off, off + len)` (clwb / clflushopt / clflush),
    /// or msync the page-aligned range of a disk file. Not ordered until [`fence`](Self::fence).
    pub fn persist(&self, off: u64, len: u64) -> Result<(), PmError> {
        let o = self.check_store(off, len)?;
        if self.failed.load(Ordering::Acquire) {
            return Err(PmError::Io {
                what: "an earlier msync of this PM file failed".into(),
                source: io::Error::from_raw_os_error(libc::EIO),
            });
        }
        self.counters.persist_calls.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_persisted.fetch_add(len, Ordering::Relaxed);
        match &self.backend {
            Backend::Traced(t) => {
                t.persist(off, len);
                Ok(())
            }
            Backend::Window { parent, base } => parent.persist(base + o as u64, len),
            Backend::Mapped(map) => {
                if len == 0 {
                    return Ok(());
                }
                let end = o + len as usize;
                match self.method {
                    PersistMethod::Msync | PersistMethod::Traced => {
                        // Deferred to the fence: one msync per run of adjacent pages instead
                        // of one per persist call.
                        let page = PAGE_SIZE as usize;
                        let start = o - o % page;
                        let stop = end.next_multiple_of(page).min(self.size as usize);
                        let _ = map;
                        let mut pending = self.msync_pending.lock();
                        match pending.last_mut() {
                            Some(last) if start <= last.1 && stop >= last.0 => {
                                *last = (last.0.min(start), last.1.max(stop));
                            }
                            _ => pending.push((start, stop)),
                        }
                        Ok(())
                    }
                    #[cfg(target_arch = "x86_64")]
                    m => {
                        let line = CACHE_LINE as usize;
                        let base = map.as_ptr();
                        let mut l = o - o % line;
                        while l < end {
                            // SAFETY: l < end <= size, so base + l lies in the mapping, which
                            // lives as long as `self`; the method was checked available on
                            // this CPU when the region was created.
                            unsafe {
                                let p = base.add(l);
                                match m {
                                    PersistMethod::Clwb => flush::clwb(p),
                                    PersistMethod::ClflushOpt => flush::clflushopt(p),
                                    _ => flush::clflush(p),
                                }
                            }
                            l += line;
                        }
                        Ok(())
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    _ => unreachable!("cache-line flush methods are x86_64-only"),
                }
            }
        }
    }

    /// Store fence: after it, everything persisted before is durable. For msync, this is
    /// where the persisted page ranges are written back (merged, in address order).
    ///
    /// An msync failure (an I/O error of the disk behind the file) cannot be reported
    /// through a fence; it is logged and the region is marked failed, and every later
    /// [`persist`](Self::persist) returns the error, so no further update is acknowledged.
    pub fn fence(&self) {
        self.counters.fences.fetch_add(1, Ordering::Relaxed);
        match &self.backend {
            Backend::Traced(t) => t.fence(),
            Backend::Window { parent, .. } => parent.fence(),
            Backend::Mapped(map) => match self.method {
                #[cfg(target_arch = "x86_64")]
                PersistMethod::Clwb | PersistMethod::ClflushOpt | PersistMethod::Clflush => flush::sfence(),
                _ => {
                    let mut pending = self.msync_pending.lock();
                    if pending.is_empty() {
                        return;
                    }
                    pending.sort_unstable();
                    let mut merged: Vec<(usize, usize)> = Vec::with_capacity(pending.len());
                    for &(a, b) in pending.iter() {
                        match merged.last_mut() {
                            Some(last) if a <= last.1 => last.1 = last.1.max(b),
                            _ => merged.push((a, b)),
                        }
                    }
                    pending.clear();
                    for (a, b) in merged {
                        if let Err(e) = map.flush_range(a, b - a) {
                            tracing::error!(start = a, end = b, error = %e, "msync failed: PM file is no longer durable");
                            self.failed.store(true, Ordering::Release);
                        }
                    }
                }
            },
        }
    }

    /// [`persist`](Self::persist) then [`fence`](Self::fence).
    pub fn persist_now(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.persist(off, len)?;
        self.fence();
        Ok(())
    }

    /// A snapshot of the region's counters.
    pub fn stats(&self) -> PmStats {
        let c = &self.counters;
        PmStats {
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            bytes_persisted: c.bytes_persisted.load(Ordering::Relaxed),
            persist_calls: c.persist_calls.load(Ordering::Relaxed),
            fences: c.fences.load(Ordering::Relaxed),
        }
    }

    /// The tracer, when this is a traced region.
    pub fn tracer(&self) -> Option<&Tracer> {
        match &self.backend {
            Backend::Traced(t) => Some(t),
            Backend::Mapped(_) => None,
            Backend::Window { parent, .. } => parent.tracer(),
        }
    }
}

#[cfg(test)]
mod tests;
