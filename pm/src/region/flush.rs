//! The x86_64 cache-line write-back and fence instructions behind the flush persist methods.

use core::arch::asm;
use core::arch::x86_64::{__cpuid, __cpuid_count};
use std::sync::OnceLock;

/// Cache-flush instructions of this CPU. `is_x86_feature_detected!` does not know clwb
/// and clflushopt on stable Rust, so CPUID is read directly.
#[derive(Debug, Clone, Copy)]
pub(super) struct Features {
    pub clflush: bool,
    pub clflushopt: bool,
    pub clwb: bool,
}

pub(super) fn features() -> Features {
    static F: OnceLock<Features> = OnceLock::new();
    *F.get_or_init(|| {
        // CPUID leaf 1 EDX bit 19: CLFSH. Leaf 7 subleaf 0 EBX bit 23: CLFLUSHOPT,
        // bit 24: CLWB (valid only when leaf 7 exists).
        // `__cpuid*` became safe fns in newer Rust; the block keeps MSRV 1.80 building.
        #[allow(unused_unsafe)]
        // SAFETY: CPUID exists on every x86_64 CPU; leaf 7 is only read when leaf 0 reports
        // it (max basic leaf >= 7).
        let (l1, l7_ebx) = unsafe {
            let l0 = __cpuid(0);
            let l1 = __cpuid(1);
            let l7 = if l0.eax >= 7 { __cpuid_count(7, 0).ebx } else { 0 };
            (l1, l7)
        };
        Features {
            clflush: l1.edx & (1 << 19) != 0,
            clflushopt: l7_ebx & (1 << 23) != 0,
            clwb: l7_ebx & (1 << 24) != 0,
        }
    })
}

/// Write back the cache line holding `p` (kept cached).
///
/// # Safety
/// `p` must point into memory mapped in this process.
#[inline]
pub(super) unsafe fn clwb(p: *const u8) {
    // SAFETY: the caller guarantees `p` is mapped; clwb neither changes memory contents
    // nor flags, and uses no stack. No `nomem`: it must not be reordered with stores.
    unsafe { asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags)) }
}

/// Flush (write back and invalidate) the cache line holding `p`, weakly ordered.
///
/// # Safety
/// `p` must point into memory mapped in this process.
#[inline]
pub(super) unsafe fn clflushopt(p: *const u8) {
    // SAFETY: as for clwb above.
    unsafe { asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags)) }
}

/// Flush the cache line holding `p` (strongly ordered clflush).
///
/// # Safety
/// `p` must point into memory mapped in this process.
#[inline]
pub(super) unsafe fn clflush(p: *const u8) {
    // SAFETY: the caller guarantees `p` is mapped; clflush is SSE2, baseline on x86_64.
    unsafe { core::arch::x86_64::_mm_clflush(p) }
}

/// Store fence.
#[inline]
pub(super) fn sfence() {
    // SAFETY: sfence has no memory-safety preconditions; SSE is baseline on x86_64.
    unsafe { core::arch::x86_64::_mm_sfence() }
}

/// Copy `len` bytes from `src` to `dst` with non-temporal (streaming) stores, which bypass
/// the cache and go to memory as whole lines: a copy and its write-back in one pass.
/// Weakly ordered, so callers [`sfence`] before anything depends on the bytes.
///
/// # Safety
/// `dst` must be 64-byte aligned, `len` a multiple of 64; `[dst, dst + len)` must be
/// writable mapped memory and `[src, src + len)` readable, not overlapping it.
#[inline]
pub(super) unsafe fn stream_copy(dst: *mut u8, src: *const u8, len: usize) {
    use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
    let mut i = 0;
    while i < len {
        // SAFETY: i + 64 <= len (len is a multiple of 64), so the four loads lie in the
        // caller's source range and the four stores in its destination range; dst + i is
        // 16-aligned as _mm_stream_si128 requires (dst is 64-aligned, i a multiple of 64).
        // SSE2 is baseline on x86_64.
        unsafe {
            let s = src.add(i).cast::<__m128i>();
            let d = dst.add(i).cast::<__m128i>();
            let (a, b, c, e) =
                (_mm_loadu_si128(s), _mm_loadu_si128(s.add(1)), _mm_loadu_si128(s.add(2)), _mm_loadu_si128(s.add(3)));
            _mm_stream_si128(d, a);
            _mm_stream_si128(d.add(1), b);
            _mm_stream_si128(d.add(2), c);
            _mm_stream_si128(d.add(3), e);
        }
        i += 64;
    }
}

/// Store `len` zero bytes at `dst` with non-temporal stores (see [`stream_copy`]).
///
/// # Safety
/// `dst` must be 64-byte aligned, `len` a multiple of 64, `[dst, dst + len)` writable
/// mapped memory.
#[inline]
pub(super) unsafe fn stream_zero(dst: *mut u8, len: usize) {
    use core::arch::x86_64::{__m128i, _mm_setzero_si128, _mm_stream_si128};
    // SAFETY: SSE2, the intrinsic's one requirement, is baseline on x86_64.
    let z = unsafe { _mm_setzero_si128() };
    let mut i = 0;
    while i < len {
        // SAFETY: as in stream_copy: the four 16-byte stores lie in [dst, dst + len) and
        // are 16-aligned.
        unsafe {
            let d = dst.add(i).cast::<__m128i>();
            _mm_stream_si128(d, z);
            _mm_stream_si128(d.add(1), z);
            _mm_stream_si128(d.add(2), z);
            _mm_stream_si128(d.add(3), z);
        }
        i += 64;
    }
}
