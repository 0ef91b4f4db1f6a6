//! Durable stores: a store and the write-back of what it stored in one call, for the bulk
//! copies of the system (file data into a log, log data into the public area, zero fill).
//!
//! Where a region is persisted by cache-line instructions, the whole cache lines of such a
//! store are written with non-temporal stores: they go to memory without reading the old
//! line into the cache and without a separate write-back of each line, about four times
//! cheaper than a copy followed by `clwb` of every line on the development VM (0.054 vs
//! 0.205 s per GiB of 16 KiB copies). The partial lines at either end are stored and written
//! back as [`PmRegion::write`] and [`PmRegion::persist`] do. Every other backend (msync,
//! traced, a window of another region) does exactly `write` then `persist`, so the crash
//! tests see the same stores and write-backs whichever way a caller makes them.
//!
//! Non-temporal stores are weakly ordered even on x86: another thread could see a later
//! ordinary store of this thread before them. Each durable store therefore ends with an
//! `sfence` when it streamed anything, which keeps the rule callers already rely on — what
//! a thread stored is seen in order — and makes the streamed lines durable at once; the
//! contract stays the weaker one (durable after the next [`PmRegion::fence`]).

use std::sync::atomic::Ordering;

use super::{flush, Backend, PersistMethod, PmError, PmRegion, CACHE_LINE};

/// Durable stores shorter than this are a plain store and write-back (a few lines gain
/// nothing from streaming).
const STREAM_MIN: u64 = 256;

impl PmRegion {
    /// Store `data` at `off` and write it back: [`write`](Self::write) then
    /// [`persist`](Self::persist), durable after the next [`fence`](Self::fence) (module
    /// doc: whole lines by non-temporal stores where the region flushes cache lines).
    pub fn write_persist(&self, off: u64, data: &[u8]) -> Result<(), PmError> {
        let len = data.len() as u64;
        self.check_store(off, len)?;
        let Some((base, a, b)) = self.stream_span(off, len) else {
            if let Backend::Window { parent, base } = &self.backend {
                parent.write_persist(base + off, data)?;
                self.streamed(len);
                return Ok(());
            }
            self.write(off, data)?;
            return self.persist(off, len);
        };
        let head = (a - off) as usize;
        let body = (b - a) as usize;
        if head > 0 {
            self.write(off, &data[..head])?;
            self.persist(off, head as u64)?;
        }
        // SAFETY: [a, b) lies within the mapping (check_store checked [off, off + len), and
        // off <= a <= b <= off + len), which is writable and lives as long as `self`; `base + a`
        // is 64-aligned (the mapping is page-aligned, `a` a multiple of 64) and `body` a
        // multiple of 64; `data[head..head + body]` is a Rust borrow, never a slice of the
        // mapping (the region hands out no references into it). Same-byte writers are excluded
        // by the callers' locks (module doc of the region).
        unsafe { flush::stream_copy(base.add(a as usize), data.as_ptr().add(head), body) };
        self.streamed(body as u64);
        if b < off + len {
            self.write(b, &data[head + body..])?;
            self.persist(b, off + len - b)?;
        }
        flush::sfence();
        Ok(())
    }

    /// Store `len` zero bytes at `off` and write them back: [`zero`](Self::zero) then
    /// [`persist`](Self::persist), as [`write_persist`](Self::write_persist) does.
    pub fn zero_persist(&self, off: u64, len: u64) -> Result<(), PmError> {
        self.check_store(off, len)?;
        let Some((base, a, b)) = self.stream_span(off, len) else {
            if let Backend::Window { parent, base } = &self.backend {
                parent.zero_persist(base + off, len)?;
                self.streamed(len);
                return Ok(());
            }
            self.zero(off, len)?;
            return self.persist(off, len);
        };
        if a > off {
            self.zero(off, a - off)?;
            self.persist(off, a - off)?;
        }
        // SAFETY: as in write_persist: [a, b) is a 64-aligned whole-line span within the
        // writable mapping, which lives as long as `self`.
        unsafe { flush::stream_zero(base.add(a as usize), (b - a) as usize) };
        self.streamed(b - a);
        if b < off + len {
            self.zero(b, off + len - b)?;
            self.persist(b, off + len - b)?;
        }
        flush::sfence();
        Ok(())
    }

    /// Where a durable store of `[off, off + len)` streams: the mapping's base and the
    /// whole-line span `[a, b)` inside the range, or None to store and write back plainly
    /// (not a mapping flushed by cache-line instructions, or too short).
    fn stream_span(&self, off: u64, len: u64) -> Option<(*mut u8, u64, u64)> {
        let Backend::Mapped(map) = &self.backend else { return None };
        if !matches!(self.method, PersistMethod::Clwb | PersistMethod::ClflushOpt | PersistMethod::Clflush)
            || len < STREAM_MIN
        {
            return None;
        }
        let a = off.next_multiple_of(CACHE_LINE);
        let b = (off + len) / CACHE_LINE * CACHE_LINE;
        (a < b).then(|| (map.as_mut_ptr(), a, b))
    }

    /// Counts `n` bytes stored durably (streamed, or by the parent of a window) as written
    /// and persisted, as `write` and `persist` count them.
    fn streamed(&self, n: u64) {
        let c = &self.counters;
        c.bytes_written.fetch_add(n, Ordering::Relaxed);
        c.bytes_persisted.fetch_add(n, Ordering::Relaxed);
        c.persist_calls.fetch_add(1, Ordering::Relaxed);
    }
}
