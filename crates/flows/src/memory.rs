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
    const HUGE: usize = 2 << 20;
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + bytes) / HUGE * HUGE;
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: madvise(MADV_HUGEPAGE) changes how the kernel backs pages of memory the caller
        // owns (inside its allocation, page-aligned), never their contents or validity.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
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
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let bytes = std::mem::size_of_val(buf);
        let start = (buf.as_ptr() as usize).next_multiple_of(PAGE);
        let end = (buf.as_ptr() as usize + bytes) / PAGE * PAGE;
        if end > start {
            // SAFETY: MADV_POPULATE_WRITE faults in, writable, pages of memory `buf` owns
            // (page-aligned, inside the slice); it never changes their contents. Old kernels
            // answer EINVAL, which changes nothing.
            unsafe {
                libc::madvise(
                    start as *mut libc::c_void,
                    end - start,
                    libc::MADV_POPULATE_WRITE,
                );
            }
        }
    }
}
