//! Hints to the kernel about how the meter's large allocations will be used: huge pages for
//! large buffers (batch vectors, the hash index), and pages made present and writable at once
//! for memory read before it is written (the hash index).
//!
//! Both are hints: on failure, or on a system without transparent huge pages or
//! `MADV_POPULATE_WRITE` (Linux < 5.14), memory behaves as before, only slower.

/// Asks the kernel to back the 2 MiB-aligned part of `bytes` bytes at `ptr` with transparent
/// huge pages: memory filled front to back costs one page fault per 2 MiB instead of one per
/// 4 KiB.
pub(crate) fn advise_huge_pages<T>(ptr: *const T, bytes: usize) {
    advise_within(ptr.cast(), bytes, 2 << 20, libc::MADV_HUGEPAGE);
}

/// Makes the whole pages of `buf` present and writable now, keeping their contents.
///
/// Freshly allocated zeroed memory is mapped lazily: a read maps the shared zero page, and the
/// first write to it then takes a copy-on-write fault whose TLB flush interrupts every other
/// core running the process. A hash index is read (lookups) before it is written (inserts), so
/// filling a 2.7 MB index that way cost ≈ 8 % of the CPU time of `bench/flows_vs_peers.py` with
/// 2 workers, most of it in those cross-core interrupts (`perf record -g`: `do_wp_page` →
/// `flush_tlb_mm_range` → `smp_call_function_many_cond`).
pub(crate) fn populate_for_writes<T: Copy>(buf: &mut [T]) {
    advise_within(
        buf.as_ptr().cast(),
        std::mem::size_of_val(buf),
        4096,
        libc::MADV_POPULATE_WRITE,
    );
}

/// `madvise(advice)` over the `granule`-aligned part of `bytes` bytes at `ptr` (nothing when no
/// whole granule lies inside); the result is ignored, as befits a hint.
fn advise_within(ptr: *const u8, bytes: usize, granule: usize, advice: libc::c_int) {
    let start = (ptr as usize).next_multiple_of(granule);
    let end = (ptr as usize + bytes) / granule * granule;
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: both advices used here (MADV_HUGEPAGE, MADV_POPULATE_WRITE) change how the
        // kernel backs pages of memory the caller owns (page-aligned, inside its allocation),
        // never their contents or validity; old kernels answer EINVAL, which changes nothing.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, advice);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, end, advice);
}
