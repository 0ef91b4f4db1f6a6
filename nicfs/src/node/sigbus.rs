//! nicfs never dies of a fault on memory a client can resize. nicfs maps each slot's log
//! file, and the slot's client holds a writable descriptor of the same file: it can
//! `ftruncate` it at any moment, and a load or store in a page past the new end raises
//! SIGBUS, which would kill nicfs. A size check before each access cannot close that race
//! (the client truncates between the check and the copy), and sealing is not available:
//! file seals exist for memfd/shmem only, and a log is a file of the node's PM directory.
//! Reading with `pread` instead of mapping would rework pm's log access, which every
//! publisher (host-only clients, recovery, crash tests) shares.
//!
//! So the mapping stays, and faults on it are survived (as Wayland compositors survive
//! clients that shrink their shared buffers): each mapping of a log file is registered
//! here ([`register`]), and a SIGBUS handler, installed once ([`install`]), answers a fault
//! inside a registered range by mapping a private page of zeros over the faulting page
//! (`mmap(MAP_FIXED | MAP_ANONYMOUS)`) and counting the hit on that range; the access is
//! retried and reads zeros (or writes into that private page). A zero header or entry
//! fails its checks, so the fetch or scan fails cleanly; nicfs also checks the file's size
//! and the hit count after each fetch ([`crate::node::slots::Slots::resized`]) and fails the
//! session with a clear reason. The slot's file is replaced at the end of the session, and
//! the patched mapping with it. A SIGBUS anywhere else is not ours: the handler restores
//! the default action, says so on stderr, and the fault kills the process as before.
//!
//! The handler only reads atomics and calls `mmap` and `write`, which are async-signal-safe.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Once};

/// Most mappings registered at once (one per slot, and the old one while it is replaced).
const MAX: usize = 1024;

struct Range {
    start: AtomicUsize,
    len: AtomicUsize,
    hits: AtomicU64,
}

static RANGES: [Range; MAX] =
    [const { Range { start: AtomicUsize::new(0), len: AtomicUsize::new(0), hits: AtomicU64::new(0) } }; MAX];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static INSTALL: Once = Once::new();

/// Installs the SIGBUS handler (once per process; later calls do nothing).
pub(crate) fn install() {
    INSTALL.call_once(|| {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if page > 0 {
            PAGE.store(page as usize, Ordering::Relaxed);
        }
        // SAFETY: a zeroed sigaction is a valid value to fill in; `on_sigbus` has the
        // signature SA_SIGINFO asks for and is async-signal-safe (module notes).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
                tracing::error!(error = %std::io::Error::last_os_error(), "cannot install the SIGBUS handler");
            }
        }
    });
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for a SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for r in &RANGES {
        let start = r.start.load(Ordering::Acquire);
        let len = r.len.load(Ordering::Acquire);
        if len == 0 || addr < start || addr >= start + len {
            continue;
        }
        let at = addr & !(page - 1);
        // SAFETY: `at` is a page of a registered mapping of nicfs's own, which stays mapped
        // while registered; replacing that page with private zeros changes what nicfs reads
        // there and nothing else.
        let p = unsafe {
            libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            r.hits.fetch_add(1, Ordering::AcqRel);
            return;
        }
        break;
    }
    let msg = b"nicfs: SIGBUS outside any client log mapping\n";
    // SAFETY: write and sigaction are async-signal-safe; resetting SIGBUS to its default
    // makes the repeated fault end the process as it would have without this handler.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut());
    }
}

/// A registered mapping: faults in it are survived while this lives. Unregistered on drop —
/// keep it as long as the mapping may be accessed.
pub(crate) struct Guard {
    idx: usize,
}

impl Guard {
    /// Pages of the mapping patched with zeros so far: the file was shrunk under it.
    pub(crate) fn hits(&self) -> u64 {
        RANGES[self.idx].hits.load(Ordering::Acquire)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let r = &RANGES[self.idx];
        r.len.store(0, Ordering::Release);
        r.start.store(0, Ordering::Release);
    }
}

/// Registers the mapping `[start, start + len)`; None if the table is full (logged).
pub(crate) fn register(start: usize, len: usize) -> Option<Arc<Guard>> {
    install();
    for (idx, r) in RANGES.iter().enumerate() {
        if r.start.compare_exchange(0, start, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            r.hits.store(0, Ordering::Release);
            r.len.store(len, Ordering::Release);
            return Some(Arc::new(Guard { idx }));
        }
    }
    tracing::error!(start, len, "the SIGBUS guard's table is full: a mapping is not protected");
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_shrunk_file_under_a_registered_mapping_reads_zeros_and_counts_the_hit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&vec![7u8; 3 * 4096]).unwrap();
        let region = linefs_pm::PmRegion::open(&path).unwrap();
        let (start, len) = region.mapped_range().unwrap();
        let guard = register(start, len).unwrap();
        let mut b = [0u8; 1];
        region.read(2 * 4096, &mut b).unwrap();
        assert_eq!(b, [7]);
        f.set_len(4096).unwrap();
        region.read(2 * 4096 + 10, &mut b).unwrap();
        assert_eq!(b, [0], "the page past the end reads zeros");
        assert_eq!(guard.hits(), 1);
        region.read(0, &mut b).unwrap();
        assert_eq!(b, [7], "the rest of the mapping is untouched");
        drop(guard);
    }
}
