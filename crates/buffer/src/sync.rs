//! One switch between the real atomics and loom's model of them (crossbeam's `primitive` idea).
//!
//! Built normally, this re-exports `std`'s atomics. Built with `RUSTFLAGS="--cfg loom"`, it
//! re-exports loom's, so `scripts/loom.sh` checks the very code that ships. Under loom the packet
//! bytes themselves are shadowed by loom cells ([`Shadow`]) so that a read not ordered after the
//! write of the same bytes is reported as a data race.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(loom)]
pub use loom::sync::Arc;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::Arc;

/// Aligns (and so pads) a value to 128 bytes, two cache lines, as crossbeam's `CachePadded`
/// does on x86-64 (the adjacent-line prefetcher pulls lines in pairs), so that atomics written by
/// different threads never share a line.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub(crate) T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Under loom: one cell per 8-byte granule of the buffer, touched (`with_mut` by the writer,
/// `with` by readers) wherever the real code touches the bytes, so loom checks that every read of
/// packet bytes happens after their write and every rewrite after the last read.
#[cfg(loom)]
pub(crate) struct Shadow(Box<[loom::cell::UnsafeCell<()>]>);

#[cfg(loom)]
impl Shadow {
    pub(crate) fn new(size: usize) -> Shadow {
        Shadow(
            (0..size / 8)
                .map(|_| loom::cell::UnsafeCell::new(()))
                .collect(),
        )
    }
    fn granules(
        &self,
        pos: usize,
        len: usize,
    ) -> impl Iterator<Item = &loom::cell::UnsafeCell<()>> {
        let n = self.0.len();
        (0..len.div_ceil(8)).map(move |i| &self.0[(pos / 8 + i) % n])
    }
    pub(crate) fn write(&self, pos: usize, len: usize) {
        self.granules(pos, len).for_each(|c| c.with_mut(|_| ()));
    }
    pub(crate) fn read(&self, pos: usize, len: usize) {
        self.granules(pos, len).for_each(|c| c.with(|_| ()));
    }
}

/// Outside loom the shadow is nothing and costs nothing.
#[cfg(not(loom))]
pub(crate) struct Shadow;

#[cfg(not(loom))]
impl Shadow {
    pub(crate) fn new(_size: usize) -> Shadow {
        Shadow
    }
    #[inline(always)]
    pub(crate) fn write(&self, _pos: usize, _len: usize) {}
    #[inline(always)]
    pub(crate) fn read(&self, _pos: usize, _len: usize) {}
}
