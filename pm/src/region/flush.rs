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
