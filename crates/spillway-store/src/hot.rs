//! Hot-path hints to the CPU and the kernel: cache-line prefetches and transparent
//! huge pages for large arrays. One of the two modules of the workspace allowed `unsafe`
//! (the other is the Redis launcher, `tiered::server`, for `PR_SET_PDEATHSIG`).
//!
//! Both hints change no program state that safe code can observe:
//! - [`prefetch`] asks the CPU to start loading the cache line of a reference the
//!   caller already holds; a prefetch instruction never faults and never writes.
//!   It is how a batched operation overlaps the cache misses of many keys (FASTER's
//!   and hash-join-style memory-level parallelism) instead of paying them one after
//!   the other.
//! - [`advise_huge_pages`] calls `madvise(MADV_HUGEPAGE)` on the whole 2 MiB pages that
//!   lie inside a slice the caller owns. The advice only affects how the kernel backs
//!   the memory (fewer TLB misses for random access over tens of MiB); the contents are
//!   unchanged, and a failure is ignored because the advice is optional.
#![allow(unsafe_code)]

/// Starts loading the cache line holding `*r` into all cache levels.
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` needs SSE, which every x86_64 CPU has (it is part of the
    // x86_64 baseline the compiler targets). The pointer comes from a live reference,
    // and a prefetch neither dereferences it architecturally nor writes memory.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>());
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: PRFM is a hint instruction: it cannot fault or change memory; the address
    // comes from a live reference.
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) (r as *const T), options(nostack, readonly, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = r;
}

/// Asks the kernel to back the 2 MiB-aligned parts of `s` with transparent huge pages
/// (Linux; a no-op elsewhere and for slices under 2 MiB).
pub(crate) fn advise_huge_pages<T>(s: &[T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = s.as_ptr() as usize;
        let end = start + std::mem::size_of_val(s);
        let first = start.next_multiple_of(HUGE);
        let last = end & !(HUGE - 1);
        if last > first {
            // SAFETY: [first, last) lies inside the allocation of `s`, which the caller
            // holds a reference to for the duration of the call, and is page-aligned as
            // madvise requires. MADV_HUGEPAGE does not change the memory's contents or
            // its mapping's permissions; the return value is ignored because the advice
            // is optional (THP may be disabled).
            unsafe {
                libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = s;
}
