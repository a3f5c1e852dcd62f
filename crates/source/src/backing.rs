//! The bytes behind a reader: a memory map for regular files, a refilling buffer for pipes.
//!
//! Both expose the same window API (`window(n)`, `advance(n)`), so the format parsers never know
//! whether the whole file is in memory or arrives from stdin. The ranges of a mapped file read in
//! parallel ([`Backing::chunk`]) are streamed too, with `pread` into a buffer each thread reuses.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read};
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use memmap2::Mmap;

/// Largest block or record weir will buffer when streaming; anything claiming more is corrupt.
pub(crate) const MAX_STREAM_RECORD: usize = 256 << 20;

/// Bytes of a mapped file made resident ahead of the cursor, and released behind it, per step. Populating in steps turns ~16 page faults per 64 KiB into one
/// `madvise` per step; releasing keeps the resident set small on files larger than memory.
/// Measured by `bench/read_vs_tcpdump.py` (the mapped reader was 1.6x tcpdump without it).
const MAP_STEP: usize = 8 << 20;
/// The granule of `madvise`.
const PAGE: usize = 4096;
/// How far ahead of the cursor [`Backing::advance`] asks the CPU to fetch a mapped file (the
/// hardware prefetchers stop at page boundaries; with it, reading the bench trace went from 47
/// to 34 ns/packet in `cargo run --release -p weir-flows --example flows_steps`; 1, 4 and 8 KiB
/// did no better).
const PREFETCH_AHEAD: usize = 2048;

/// How often (in bytes of cursor movement) the map is managed.
const MANAGE_STEP: usize = 1 << 20;
/// The cursor offset at which a new map is first managed (the file header and a few records
/// are read through page faults, so opening a file populates nothing).
const FIRST_MANAGE: usize = 64 << 10;

/// Bytes a stream asks for at a time (more when a record is larger). Ranges of a mapped file
/// are read with `pread` into buffers of this size rather than through the map: the kernel's
/// copy streams the bytes at full memory bandwidth and the records are then parsed from the
/// cache, where the mapped reader waited for a cache miss at every record header and paid for
/// mapping and unmapping every page (`cargo run --release -p weir-source --example scan_speed
/// FILE`, 3 M packets / 0.94 GB on one core: the ranges 1.2-1.6x faster than the map, 130-225 ms
/// against 170-360 ms as the VM's speed varied; 128 KiB to 2 MiB buffers did the same).
const STREAM_CHUNK: usize = 1 << 20;

thread_local! {
    /// The buffer of the last stream this thread finished with: the next range read on the
    /// thread reuses it (already faulted in, likely still cached) instead of fresh memory.
    static SPARE: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A stream's buffer: empty until first read, then [`STREAM_CHUNK`] bytes or more, handed to
/// the thread's [`SPARE`] when dropped.
#[derive(Default)]
pub(crate) struct StreamBuf(Vec<u8>);

impl StreamBuf {
    /// Makes the buffer at least `want` bytes long (a spare one, if the thread has it).
    fn reserve(&mut self, want: usize) {
        if self.0.is_empty() {
            self.0 = SPARE.with(Cell::take);
        }
        if self.0.len() < want.max(STREAM_CHUNK) {
            self.0.resize(want.max(STREAM_CHUNK).next_power_of_two(), 0);
        }
    }
}

impl Deref for StreamBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for StreamBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl Drop for StreamBuf {
    fn drop(&mut self) {
        // only common-sized buffers are kept: one grown for a huge record is let go
        if self.0.len() == STREAM_CHUNK {
            SPARE.with(|s| s.set(std::mem::take(&mut self.0)));
        }
    }
}

/// `[next, end)` of a file, read with `pread` (no shared file position: many ranges of one
/// file are read at once).
struct FileRange {
    file: Arc<File>,
    next: u64,
    end: u64,
}

impl Read for FileRange {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.next);
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if n == 0 {
            return Ok(0);
        }
        let got = self.file.read_at(&mut buf[..n], self.next)?;
        self.next += got as u64;
        Ok(got)
    }
}

/// The bytes of a capture file and a cursor into them.
pub(crate) enum Backing {
    /// A whole file in memory (a map, or bytes handed in by the caller).
    Whole {
        bytes: Whole,
        pos: usize,
        /// The reader stops here (the file's length, or a chunk's end).
        end: usize,
        /// The cursor offset at which `manage_map` runs next.
        next_manage: usize,
        /// Mapped bytes before this offset have been made resident.
        ahead: usize,
        /// Mapped bytes before this offset have been released.
        released: usize,
    },
    /// A stream read in chunks; `buf[start..end]` is unread data at file offset `base + start`.
    Stream {
        reader: Box<dyn Read + Send>,
        buf: StreamBuf,
        start: usize,
        end: usize,
        base: u64,
        eof: bool,
    },
}

/// Bytes held in memory in full.
pub(crate) enum Whole {
    /// A mapped file, and the file (its ranges are read from it).
    Map(Arc<Mmap>, Arc<File>),
    Owned(Vec<u8>),
}

impl Whole {
    fn as_slice(&self) -> &[u8] {
        match self {
            Whole::Map(m, _) => m,
            Whole::Owned(v) => v,
        }
    }
}

impl Backing {
    /// Maps `file` read-only.
    pub(crate) fn map(file: File) -> io::Result<Backing> {
        // SAFETY: the map is read-only and private to this process. If another process truncates
        // the file while we read it, accesses past the new end raise SIGBUS; that is the accepted
        // risk of every mmap-based reader (ripgrep, tcpdump's peers) and is documented on
        // `FileReader::open`. Concurrent appends are harmless: we only see the mapped length.
        let map = unsafe { Mmap::map(&file)? };
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        let map = Arc::new(map);
        let end = map.len();
        // Nothing is populated before the first reads: a file read in ranges (`chunk`) never
        // reads through the map, and one read from the start populates its first step then.
        Ok(Backing::Whole {
            bytes: Whole::Map(map, Arc::new(file)),
            pos: 0,
            end,
            next_manage: FIRST_MANAGE,
            ahead: 0,
            released: 0,
        })
    }

    pub(crate) fn owned(bytes: Vec<u8>) -> Backing {
        Backing::Whole {
            end: bytes.len(),
            bytes: Whole::Owned(bytes),
            pos: 0,
            next_manage: usize::MAX,
            ahead: 0,
            released: 0,
        }
    }

    pub(crate) fn stream(reader: Box<dyn Read + Send>) -> Backing {
        Backing::stream_at(reader, 0)
    }

    /// A stream whose first byte is at file offset `base`.
    fn stream_at(reader: Box<dyn Read + Send>, base: u64) -> Backing {
        Backing::Stream {
            reader,
            buf: StreamBuf::default(),
            start: 0,
            end: 0,
            base,
            eof: false,
        }
    }

    /// File offset of the cursor.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        match self {
            Backing::Whole { pos, .. } => *pos as u64,
            Backing::Stream { base, start, .. } => base + *start as u64,
        }
    }

    /// Returns the unread bytes, at least `want` of them unless the input ends first (then all
    /// that is left). A streamed window never holds more than `MAX_STREAM_RECORD` on demand.
    pub(crate) fn window(&mut self, want: usize) -> io::Result<&[u8]> {
        match self {
            Backing::Whole {
                bytes, pos, end, ..
            } => Ok(&bytes.as_slice()[*pos..*end]),
            Backing::Stream {
                reader,
                buf,
                start,
                end,
                base,
                eof,
            } => {
                let want = want.min(MAX_STREAM_RECORD);
                if *end - *start < want && !*eof {
                    if *start > 0 {
                        buf.copy_within(*start..*end, 0);
                        *base += *start as u64;
                        *end -= *start;
                        *start = 0;
                    }
                    buf.reserve(want);
                    while *end < want {
                        match reader.read(&mut buf[*end..]) {
                            Ok(0) => {
                                *eof = true;
                                break;
                            }
                            Ok(n) => *end += n,
                            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(e),
                        }
                    }
                }
                Ok(&buf[*start..*end])
            }
        }
    }

    /// The unread bytes already available, without reading more.
    #[inline]
    pub(crate) fn current(&self) -> &[u8] {
        match self {
            Backing::Whole {
                bytes, pos, end, ..
            } => &bytes.as_slice()[*pos..*end],
            Backing::Stream {
                buf, start, end, ..
            } => &buf[*start..*end],
        }
    }

    /// The last `n` bytes the cursor moved over (they stay valid until the next `window`).
    #[inline]
    pub(crate) fn behind(&self, n: usize) -> &[u8] {
        match self {
            Backing::Whole { bytes, pos, .. } => &bytes.as_slice()[*pos - n..*pos],
            Backing::Stream { buf, start, .. } => &buf[*start - n..*start],
        }
    }

    /// Moves the cursor forward by `n` bytes, which must be within the last window.
    #[inline]
    pub(crate) fn advance(&mut self, n: usize) {
        match self {
            Backing::Whole {
                bytes,
                pos,
                end,
                next_manage,
                ..
            } => {
                *pos += n;
                let ahead = *pos + PREFETCH_AHEAD;
                if ahead < *end {
                    weir_packet::prefetch(&bytes.as_slice()[ahead]);
                }
                if *pos >= *next_manage {
                    self.manage_map();
                }
            }
            Backing::Stream { start, .. } => *start += n,
        }
    }

    /// For a mapped file: a stream over `[start, end)` of the same file (see [`STREAM_CHUNK`]).
    /// Its offsets are the file's; nothing is read before the first window.
    pub(crate) fn chunk(&self, start: usize, end: usize) -> Option<Backing> {
        let range = FileRange {
            file: self.file()?.clone(),
            next: start as u64,
            end: end as u64,
        };
        Some(Backing::stream_at(Box::new(range), start as u64))
    }

    /// The mapped file (for reading parts of it with `pread`).
    pub(crate) fn file(&self) -> Option<&Arc<File>> {
        match self {
            Backing::Whole {
                bytes: Whole::Map(_, file),
                ..
            } => Some(file),
            _ => None,
        }
    }

    /// All bytes of an in-memory file (`None` when streaming).
    pub(crate) fn whole(&self) -> Option<&[u8]> {
        match self {
            Backing::Whole { bytes, .. } => Some(bytes.as_slice()),
            Backing::Stream { .. } => None,
        }
    }

    /// Moves the cursor of an in-memory file to `offset`; false when streaming or out of range.
    pub(crate) fn seek(&mut self, offset: usize) -> bool {
        match self {
            Backing::Whole {
                pos,
                end,
                next_manage,
                ..
            } if offset <= *end => {
                *pos = offset;
                *next_manage = 0;
                true
            }
            _ => false,
        }
    }

    /// At the end of a mapped file: releases every page read since the last release, so a
    /// finished file leaves nothing resident.
    pub(crate) fn release_read(&mut self) {
        let Backing::Whole {
            bytes: Whole::Map(map, _),
            pos,
            released,
            ..
        } = self
        else {
            return;
        };
        let upto = *pos / PAGE * PAGE;
        if upto > *released {
            // SAFETY: as in `manage_map`: a read-only shared file mapping, whose dropped pages fault
            // back in from the page cache; the reader is mutably borrowed, so no Packet slice is
            // alive. Another range's reader may still touch a page at the boundary: it faults it
            // in again, which costs time, never correctness.
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    *released,
                    upto - *released,
                )
            };
            *released = upto;
        }
    }

    /// Populates the next step of a mapped file and releases what lies a step behind the cursor.
    /// Both are hints: failures (old kernels without MADV_POPULATE_READ) change nothing but speed.
    #[cold]
    fn manage_map(&mut self) {
        let Backing::Whole {
            bytes: Whole::Map(map, _),
            pos,
            end,
            next_manage,
            ahead,
            released,
        } = self
        else {
            return;
        };
        *next_manage = *pos + MANAGE_STEP;
        // Populate up to the reader's end only (ranges of a split file no longer read through
        // the map, so this is the file's length; the bound stays cheap and safe).
        let len = (*end).min(map.len());
        // After a seek the cursor may be far from the populated range: restart there.
        let here = *pos / MAP_STEP * MAP_STEP;
        if *ahead < here {
            *ahead = here;
        }
        if *ahead < len && *pos + MAP_STEP / 2 > *ahead {
            let n = MAP_STEP.min(len - *ahead);
            let _ = map.advise_range(memmap2::Advice::PopulateRead, *ahead, n);
            *ahead += n;
        }
        // Release whole steps that end at least one step behind the cursor. Every Packet handed
        // out borrows the reader, which is mutably borrowed here, so no slice into the range
        // exists any more.
        let upto = pos.saturating_sub(MAP_STEP) / MAP_STEP * MAP_STEP;
        if upto > *released {
            // SAFETY: the map is a read-only shared file mapping; MADV_DONTNEED only drops our page
            // table entries and the next access faults the same file bytes back in from the page
            // cache, so no data can change or be lost. No reference into the range is alive (see
            // above).
            let _ = unsafe {
                map.unchecked_advise_range(
                    memmap2::UncheckedAdvice::DontNeed,
                    *released,
                    upto - *released,
                )
            };
            *released = upto;
        }
    }
}
