//! The buffer's memory: one anonymous mapping, on huge pages when the system has them.
//!
//! First choice is `MAP_HUGETLB` (explicit 2 MiB pages, which exist only when the administrator
//! reserved some in `/proc/sys/vm/nr_hugepages`; none are by default here). Failing that, a normal
//! anonymous mapping advised with `MADV_HUGEPAGE` so transparent huge pages may back it, and
//! failing that too, plain 4 KiB pages. [`PageKind`] says which one the buffer got, so the CLI can
//! say so. Pages are touched once at creation (optional) so capture never takes a page fault.

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

/// Size of the huge pages `MAP_HUGETLB` hands out by default on x86-64 and arm64.
const HUGE_PAGE: usize = 2 << 20;

/// An owned anonymous mapping of `len` bytes, unmapped on drop.
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
    kind: PageKind,
}

// SAFETY: the region is plain memory owned by this value; all concurrent access to its bytes
// is coordinated by the buffer's protocol (see lib.rs), not by this type.
unsafe impl Send for Region {}
// SAFETY: as above; `Region` itself hands out only a raw pointer.
unsafe impl Sync for Region {}

impl Region {
    /// Maps `len` bytes (a power of two), trying huge pages first when `huge` is set.
    pub(crate) fn new(len: usize, huge: bool, prefault: bool) -> io::Result<Region> {
        let mut region = None;
        if huge && len >= HUGE_PAGE && len % HUGE_PAGE == 0 {
            region = map(len, libc::MAP_HUGETLB).map(|ptr| Region {
                ptr,
                len,
                kind: PageKind::HugeTlb,
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
                Region { ptr, len, kind }
            }
        };
        if prefault {
            let step = if region.kind == PageKind::Normal {
                4096
            } else {
                HUGE_PAGE
            };
            for off in (0..len).step_by(step) {
                // SAFETY: `off < len`, inside the mapping, which nobody else sees yet.
                unsafe { region.ptr.as_ptr().add(off).write_volatile(0) };
            }
        }
        Ok(region)
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
        // SAFETY: `ptr`/`len` are exactly the mapping made in `new`, and every borrow of its bytes
        // (writers, readers, batches) holds an `Arc` of the buffer that owns this region.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
