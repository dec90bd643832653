//! Asking the processor for memory before it is read: for loops whose next loads are known
//! ahead but land far apart (a hash index, one curve per pair of a mesh), where the hardware
//! prefetcher, which follows strides, cannot guess them.

/// Starts loading the cache line at `p` (a hint: no effect on results, never faults).
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is a hint that never faults, whatever the address, and SSE is part
        // of the x86_64 baseline.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
