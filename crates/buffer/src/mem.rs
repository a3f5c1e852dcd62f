//! The buffer's memory: one anonymous mapping, on huge pages when the system has them.
//!
//! First choice is `MAP_HUGETLB` (explicit 2 MiB pages, which exist only when the administrator
//! reserved some in `/proc/sys/vm/nr_hugepages`; none are by default here). Failing that, a normal
//! anonymous mapping advised with `MADV_HUGEPAGE` so transparent huge pages may back it, and
//! failing that too, plain 4 KiB pages. [`PageKind`] says which one the buffer got, so the CLI can
//! say so. Pages are touched once at creation (optional) so capture never takes a page fault.
//!
//! The two memory hints are also public, for other large allocations on the packet path (the
//! flow meter's tables and batches): [`populate_for_writes`] and [`advise_huge_pages`].

use std::io;
use std::ptr::NonNull;

/// The kind of pages backing the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    /// Explicit huge pages (`MAP_HUGETLB`): reserved by the system, never swapped, few TLB misses.
    HugeTlb,
    /// Normal pages advised with `MADV_HUGEPAGE`: the kernel backs them with transparent huge pages
    /// when it can (it does not promise to).
    TransparentHuge,
    /// Normal 4 KiB pages.
    Normal,
}

impl PageKind {
    /// A short human name, for status lines.
    pub fn name(self) -> &'static str {
        match self {
            PageKind::HugeTlb => "huge pages (hugetlb)",
            PageKind::TransparentHuge => "transparent huge pages (advised)",
            PageKind::Normal => "normal pages",
        }
    }
}

/// `MADV_POPULATE_WRITE` (Linux 5.14), spelled out for libc versions that lack it.
const MADV_POPULATE_WRITE: libc::c_int = 23;

/// Makes the pages of `len` bytes at `addr` present and writable now, keeping their contents
/// (`madvise(MADV_POPULATE_WRITE)`, the one place it is written); false when the kernel refused
/// (before Linux 5.14, or `addr` not page-aligned), and the pages are then faulted in on first
/// use as before.
///
/// # Safety
///
/// `addr..addr + len` must lie inside one read-write mapping that the caller owns and that stays
/// mapped during the call. (The advice faults pages in as writes would, without changing what
/// they hold, so other threads may use the bytes meanwhile.)
unsafe fn populate_write(addr: *mut u8, len: usize) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the caller's promise; the advice changes how the kernel backs the pages, never
        // their contents or validity.
        unsafe { libc::madvise(addr.cast(), len, MADV_POPULATE_WRITE) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (addr, len);
        false
    }
}

/// Makes the whole pages of `buf` present and writable now, keeping their contents.
///
/// Freshly allocated zeroed memory is mapped lazily: a read maps the shared zero page, and the
/// first write to it then takes a copy-on-write fault whose TLB flush interrupts every other
/// core running the process. A table read (lookups) before it is written (inserts) pays that
/// fault per page; this pays it once, up front, in one system call. A hint: false when the
/// kernel lacks the advice (Linux < 5.14) or no whole page lies inside `buf`, and memory then
/// behaves as before, only slower.
pub fn populate_for_writes<T: Copy>(buf: &mut [T]) -> bool {
    const PAGE: usize = 4096;
    let (ptr, bytes) = (buf.as_mut_ptr() as usize, std::mem::size_of_val(buf));
    let start = ptr.next_multiple_of(PAGE);
    let end = (ptr + bytes) / PAGE * PAGE;
    // SAFETY: `start..end` are whole pages inside `buf`, memory this caller borrows mutably (so
    // owns for the call) and that is mapped read-write.
    end > start && unsafe { populate_write(start as *mut u8, end - start) }
}

/// Asks the kernel to back the 2 MiB-aligned part of `bytes` bytes at `ptr` with transparent
/// huge pages (`MADV_HUGEPAGE`): memory filled front to back then costs one page fault per
/// 2 MiB instead of one per 4 KiB. A hint: nothing happens where transparent huge pages are
/// off, or when no whole 2 MiB lies inside.
pub fn advise_huge_pages<T>(buf: *const T, bytes: usize) {
    let start = (buf as usize).next_multiple_of(HUGE_PAGE);
    let end = (buf as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    #[cfg(target_os = "linux")]
    if end > start {
        // SAFETY: MADV_HUGEPAGE changes how the kernel backs the pages of a range, never their
        // contents or validity; on a range that is not (wholly) mapped, or not the caller's,
        // the kernel answers an error, which is ignored as befits a hint (and changes nothing).
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (start, end);
}

/// Size of the huge pages `MAP_HUGETLB` hands out by default on x86-64 and arm64.
const HUGE_PAGE: usize = 2 << 20;

/// An owned anonymous mapping of `len` bytes, unmapped on drop.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
    kind: PageKind,
    /// The thread faulting pages in behind the buffer's back (see [`Prefault::Background`]), and
    /// its stop flag; joined before the memory is unmapped.
    populator: Option<(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    )>,
}

/// When the buffer's pages are faulted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefault {
    /// On first use, by whoever writes first (page faults on the packet path).
    Never,
    /// Before the buffer is handed out, on every core in parallel.
    Now,
    /// By a background thread with `MADV_POPULATE_WRITE`, which never changes the memory's
    /// contents and so may run while writers use the buffer: the buffer is usable at once and
    /// writers rarely meet a page not yet present. Where the kernel lacks the advice (before
    /// Linux 5.14) pages are faulted in on first use.
    Background,
}

// SAFETY: the region is plain memory owned by this value; all concurrent access to its bytes
// is coordinated by the buffer's protocol (see lib.rs), not by this type.
unsafe impl Send for Region {}
// SAFETY: as above; `Region` itself hands out only a raw pointer.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` bytes (a power of two), trying huge pages first when `huge` is set.
    pub(crate) fn new(len: usize, huge: bool, prefault: Prefault) -> io::Result<Region> {
        let mut region = None;
        if huge && len >= HUGE_PAGE && len % HUGE_PAGE == 0 {
            region = map(len, libc::MAP_HUGETLB).map(|ptr| Region {
                ptr,
                len,
                kind: PageKind::HugeTlb,
                populator: None,
            });
        }
        let region = match region {
            Some(r) => r,
            None => {
                let ptr = map(len, 0).ok_or_else(io::Error::last_os_error)?;
                let mut kind = PageKind::Normal;
                if huge && len >= HUGE_PAGE {
                    // SAFETY: `ptr..ptr+len` is the mapping just created; MADV_HUGEPAGE only
                    // changes how the kernel backs it, never its contents.
                    let rc =
                        unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
                    if rc == 0 {
                        kind = PageKind::TransparentHuge;
                    }
                }
                Region {
                    ptr,
                    len,
                    kind,
                    populator: None,
                }
            }
        };
        let mut region = region;
        match prefault {
            Prefault::Never => {}
            Prefault::Now => region.prefault(),
            Prefault::Background => {
                let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
                let (base, len, flag) = (region.ptr.as_ptr() as usize, region.len, stop.clone());
                let handle = std::thread::Builder::new()
                    .name("buffer-populate".into())
                    .spawn(move || {
                        const SLICE: usize = 8 << 20;
                        let mut from = 0;
                        while from < len && !flag.load(std::sync::atomic::Ordering::Relaxed) {
                            let to = (from + SLICE).min(len);
                            // SAFETY: `from..to` lies inside the mapping, which `Region::drop`
                            // unmaps only after joining this thread; populating faults pages in
                            // without changing what they hold, so writers and readers using the
                            // bytes meanwhile see no difference.
                            if !unsafe { populate_write((base + from) as *mut u8, to - from) } {
                                return;
                            }
                            from = to;
                        }
                    });
                // No thread: pages are faulted in on first use.
                region.populator = handle.ok().map(|h| (stop, h));
            }
        }
        Ok(region)
    }

    /// Faults every page in, in parallel: one slice per CPU, each with MADV_POPULATE_WRITE
    /// (Linux ≥ 5.14; one system call per slice), else by writing one byte per page. Zeroing a
    /// large buffer's pages is the kernel's (or a hypervisor's) work and spreads over cores.
    fn prefault(&self) {
        let step = if self.kind == PageKind::Normal {
            4096
        } else {
            HUGE_PAGE
        };
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // Slices of whole pages, at least 8 MiB each so small buffers stay on one thread.
        let per = (self.len / cpus.max(1)).max(8 << 20).next_multiple_of(step);
        let base = self.ptr.as_ptr() as usize;
        let touch = |from: usize, to: usize| {
            // SAFETY: `from..to` lies inside the mapping, which nobody else sees yet and which
            // outlives the scope below; populating only faults pages in (as writes would),
            // never changing their contents.
            if !unsafe { populate_write((base + from) as *mut u8, to - from) } {
                for off in (from..to).step_by(step) {
                    // SAFETY: `off < len`, inside the mapping, which nobody else sees yet; the
                    // slices of the threads do not overlap.
                    unsafe { ((base + off) as *mut u8).write_volatile(0) };
                }
            }
        };
        std::thread::scope(|s| {
            let mut from = 0;
            while from < self.len {
                let to = (from + per).min(self.len);
                // The last slice on this thread; the others on their own (here too when a
                // thread cannot be made).
                if to == self.len
                    || std::thread::Builder::new()
                        .spawn_scoped(s, move || touch(from, to))
                        .is_err()
                {
                    touch(from, to);
                }
                from = to;
            }
        });
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn kind(&self) -> PageKind {
        self.kind
    }
}

/// One private anonymous read-write mapping with extra `flags`, or `None` if the kernel refused.
fn map(len: usize, flags: libc::c_int) -> Option<NonNull<u8>> {
    // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches no
    // existing memory; the result is checked against MAP_FAILED before use.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        None
    } else {
        NonNull::new(p.cast())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some((stop, handle)) = self.populator.take() {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = handle.join();
        }
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new`, and every borrow of its bytes
        // (writers, readers, batches) holds an `Arc` of the buffer that owns this region.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
