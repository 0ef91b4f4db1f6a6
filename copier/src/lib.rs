//! linefs-copier, the copy-list executor: the one piece of code that applies a [`CopyList`]
//! to a node's files, used by the kworker daemon (normal mode) and by nicfs itself
//! (isolated mode). It is a library of its own so that neither daemon depends on the other.
//!
//! # Semantics
//!
//! Entries run in list order. Each is first checked against the files, then copied, then
//! its destination range is persisted:
//!
//! * the destination must lie wholly in the public file's **data area** (blocks
//!   `data_start ..` of the geometry in the superblock): the superblock, inode table and
//!   allocation state are nicfs's and never a copy's target;
//! * a `Slot(s)` source must name a log file of the node, and `src_offset + len` must lie
//!   within it; a `Zero` source must have `src_offset == 0`;
//! * offsets are added with overflow checks; a zero-length entry is a valid no-op.
//!
//! At the end of the list one fence makes every persisted range durable (the public file is
//! the only destination, so one fence covers the list). If an entry fails its check or its
//! copy, execution stops there: the entries before it are fenced (durable), the failed one
//! may be partly written (only within its own checked range — never outside it), and the
//! entries after it are not run. The failure names the entry index and an errno:
//! `ERANGE` (out of bounds), `EINVAL` (unknown slot, zero source with an offset), or the
//! I/O error's own errno (`EIO` if it has none). Nothing is skipped silently: a list is
//! either all done or reported failed at a named entry.
//!
//! Every entry is a pure function of the source bytes, so executing a list again — after a
//! crash mid-list, or by nicfs after kworker died — gives the same bytes: lists are
//! idempotent as long as their sources are unchanged, which the caller guarantees (a log
//! range is not reused before its publication is acknowledged).
//!
//! The executor is stateless apart from its open files: sources are read with `pread` on
//! read-only descriptors (the log files stay the clients'), the destination is the public
//! file mapped read-write with pm's persist primitives. It does no locking on the mapped
//! bytes: the caller must not run two lists that write the same range with different data
//! at once.
//!
//! **A slot's file can change.** nicfs replaces a slot's log file with a fresh one between
//! two sessions (pm's `slotfile`: a new inode renamed over `log-NN.pm`), so that the
//! previous client's descriptor writes into a file nobody reads. A descriptor opened before
//! would read that old file too. So the first entry of a list that reads a slot looks the
//! slot's name up again (a `stat`) and, if it names another file than the one open, opens
//! that one instead. That is enough: nicfs replaces a slot only once its session is settled
//! — no list reading the slot is in flight — and sends the next session's lists after the
//! rename, so every list reads the file its entries were validated against.
#![deny(clippy::undocumented_unsafe_blocks)]

use linefs_pm::layout::{Superblock, BLOCK_SIZE};
use linefs_pm::node::{log_file_name, PUBLIC_FILE};
use linefs_pm::{PmError, PmRegion};
use linefs_proto::{CopyEntry, CopyList, CopySource};
use parking_lot::Mutex;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Most bytes copied through the bounce buffer at a time: small enough to stay in the
/// CPU's cache between the read from the log and the (streaming) store into PM.
const PIECE: usize = 256 << 10;

thread_local! {
    /// Each copying thread's bounce buffer, allocated once ([`PIECE`] bytes).
    static BOUNCE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Why the node's files could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot map {path}: {source}")]
    Public { path: PathBuf, source: PmError },
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: linefs_pm::layout::FormatError },
    #[error("cannot open {path}: {source}")]
    Log { path: PathBuf, source: std::io::Error },
}

/// Why a list stopped: the index of the entry that failed, its errno and what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("copy entry {entry} failed (errno {errno}): {why}")]
pub struct ListFailure {
    pub entry: u32,
    pub errno: i32,
    pub why: String,
}

/// A node's files as the executor uses them.
pub struct NodeFiles {
    public: PmRegion,
    /// Bytes from the start of the public file to the first data block.
    data_start: u64,
    dir: PathBuf,
    /// Held for a whole list: lists run one at a time.
    logs: Mutex<Vec<LogFile>>,
}

/// One slot's log file, opened read-only.
struct LogFile {
    file: File,
    len: u64,
    /// Which file it is (device, inode).
    id: (u64, u64),
}

impl LogFile {
    fn open(path: &Path) -> std::io::Result<LogFile> {
        let file = File::open(path)?;
        let meta = file.metadata()?;
        Ok(LogFile { file, len: meta.len(), id: (meta.dev(), meta.ino()) })
    }
}

impl NodeFiles {
    /// Opens the node in `dir`: `public.pm` mapped read-write, every log file read-only.
    pub fn open(dir: &Path) -> Result<NodeFiles, OpenError> {
        let path = dir.join(PUBLIC_FILE);
        let public = PmRegion::open(&path).map_err(|source| OpenError::Public { path: path.clone(), source })?;
        let geometry = Superblock::read(&public).map_err(|source| OpenError::Format { path, source })?.geometry;
        let mut logs = Vec::with_capacity(geometry.log_slots as usize);
        for slot in 0..geometry.log_slots {
            let path = dir.join(log_file_name(slot));
            logs.push(LogFile::open(&path).map_err(|source| OpenError::Log { path, source })?);
        }
        Ok(NodeFiles {
            public,
            data_start: geometry.data_start * BLOCK_SIZE,
            dir: dir.to_path_buf(),
            logs: Mutex::new(logs),
        })
    }

    /// Makes `slot`'s entry of `logs` the file its name gives now (see the module notes).
    fn follow(&self, logs: &mut [LogFile], slot: usize) -> Result<(), (i32, String)> {
        let path = self.dir.join(log_file_name(slot as u32));
        let fail = |what: &str, e: std::io::Error| {
            (e.raw_os_error().unwrap_or(libc::EIO), format!("{what} {}: {e}", path.display()))
        };
        let meta = std::fs::metadata(&path).map_err(|e| fail("stat", e))?;
        if (meta.dev(), meta.ino()) != logs[slot].id {
            logs[slot] = LogFile::open(&path).map_err(|e| fail("open", e))?;
            tracing::debug!(slot, path = %path.display(), "log file replaced: reading the new one");
        }
        Ok(())
    }

    /// Executes `list` (see the module notes for what is checked and guaranteed).
    pub fn execute(&self, list: &CopyList) -> Result<(), ListFailure> {
        self.execute_observed(list, |_| {})
    }

    /// As [`NodeFiles::execute`], calling `before(i)` before entry `i` (kworker's test hook
    /// slows lists down with it).
    pub fn execute_observed(&self, list: &CopyList, mut before: impl FnMut(usize)) -> Result<(), ListFailure> {
        let mut guard = self.logs.lock();
        let logs = guard.as_mut_slice();
        let mut followed = vec![false; logs.len()];
        for (i, e) in list.entries.iter().enumerate() {
            before(i);
            let mut done = Ok(());
            if let CopySource::Slot(s) = e.source {
                if followed.get(s as usize) == Some(&false) {
                    followed[s as usize] = true;
                    done = self.follow(logs, s as usize);
                }
            }
            let done = done.and_then(|()| self.check(e, logs)).and_then(|()| self.copy(e, logs));
            if let Err((errno, why)) = done {
                // The entries before this one were persisted: make them durable.
                self.public.fence();
                return Err(ListFailure { entry: u32::try_from(i).unwrap_or(u32::MAX), errno, why });
            }
        }
        self.public.fence();
        Ok(())
    }

    /// Checks one entry against the files.
    fn check(&self, e: &CopyEntry, logs: &[LogFile]) -> Result<(), (i32, String)> {
        let dst_end = e.dst_offset.checked_add(e.len);
        match dst_end {
            Some(end) if e.dst_offset >= self.data_start && end <= self.public.len() => {}
            _ => {
                let why = format!(
                    "destination {}+{} is outside the data area {}..{} of the public file",
                    e.dst_offset,
                    e.len,
                    self.data_start,
                    self.public.len()
                );
                return Err((libc::ERANGE, why));
            }
        }
        match e.source {
            CopySource::Zero if e.src_offset != 0 => {
                Err((libc::EINVAL, format!("a zero source has offset {}, not 0", e.src_offset)))
            }
            CopySource::Zero => Ok(()),
            CopySource::Slot(s) => {
                let Some(LogFile { len, .. }) = logs.get(s as usize) else {
                    return Err((libc::EINVAL, format!("no log slot {s} (the node has {})", logs.len())));
                };
                match e.src_offset.checked_add(e.len) {
                    Some(end) if end <= *len => Ok(()),
                    _ => Err((
                        libc::ERANGE,
                        format!("source {}+{} is beyond log slot {s} ({len} bytes)", e.src_offset, e.len),
                    )),
                }
            }
        }
    }

    /// Copies one checked entry and persists its destination.
    fn copy(&self, e: &CopyEntry, logs: &[LogFile]) -> Result<(), (i32, String)> {
        if e.len == 0 {
            return Ok(());
        }
        let pm = |what: &str, err: PmError| {
            let errno = match &err {
                PmError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
                PmError::OutOfBounds { .. } => libc::ERANGE,
                _ => libc::EIO,
            };
            (errno, format!("{what}: {err}"))
        };
        match e.source {
            CopySource::Zero => self.public.zero_persist(e.dst_offset, e.len).map_err(|err| pm("zero fill", err)),
            CopySource::Slot(s) => BOUNCE.with_borrow_mut(|buf| {
                buf.resize(PIECE, 0);
                let file = &logs[s as usize].file;
                let mut done = 0u64;
                while done < e.len {
                    let n = PIECE.min(usize::try_from(e.len - done).unwrap_or(usize::MAX));
                    file.read_exact_at(&mut buf[..n], e.src_offset + done).map_err(|err| {
                        (err.raw_os_error().unwrap_or(libc::EIO), format!("read log slot {s}: {err}"))
                    })?;
                    self.public.write_persist(e.dst_offset + done, &buf[..n]).map_err(|err| pm("write public", err))?;
                    done += n as u64;
                }
                Ok(())
            }),
        }
    }

    /// The public file's mapping (tests and status read it).
    pub fn public(&self) -> &PmRegion {
        &self.public
    }

    /// Byte offset of the first data block in the public file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }
}
