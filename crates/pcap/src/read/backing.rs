//! The bytes behind a reader: a memory map for regular files, a refilling buffer for pipes, and
//! for a regular file read in scattered ranges, one buffer refilled with `pread` at each range.
//!
//! All expose the same window API (`window(n)`, `advance(n)`), so the format parsers never know
//! whether the whole file is in memory or arrives from stdin. The ranges of a mapped file read in
//! parallel ([`Backing::chunk`]) are views of the same map.
//!
//! Why a third kind: a read of a mapped file faults in the page-cache folio around it, and with
//! large folios (2 MiB on the bench VM) `weir extract` of 36 470 DNS packets scattered over a
//! 1 GB segment kept 559 MiB mapped (peak RSS) to read 115 MB. [`Backing::Pread`] reads each
//! range the reader is sent to ([`Backing::seek_range`]) into one reused buffer instead: the
//! resident set is that buffer, whatever the ranges.

use std::fs::File;
use std::io::{self, Read};
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
/// How far ahead of the cursor [`Backing::advance`] has the CPU fetch a mapped file, every cache
/// line of it: the hardware prefetchers stop at page boundaries and some (AMD's) follow a stream
/// of irregular strides poorly, so the reader, which finds each record header only from the
/// previous one, would otherwise wait for memory at every record. Measured with `cargo run
/// --release -p weir-pcap --example scan_speed FILE` (3 M packets, 0.94 GB, one core, Xeon
/// VM): 150 ms with one line fetched 2 KiB ahead per record, 141 / 133 / 131 ms with every
/// line 1 / 2 / 4 KiB ahead; 2 KiB also did best in `bench/flows_vs_peers.py`.
const PREFETCH_AHEAD: usize = 2048;
/// A cache line.
const LINE: usize = 64;

/// How often (in bytes of cursor movement) the map is managed.
const MANAGE_STEP: usize = 1 << 20;
/// The cursor offset at which a new map is first managed (the file header and a few records
/// are read through page faults, so opening a file populates nothing).
const FIRST_MANAGE: usize = 64 << 10;

/// Bytes a stream asks for at a time (more when a record is larger).
const STREAM_CHUNK: usize = 1 << 20;

/// Bytes a [`Backing::Pread`] reads at least per refill when no range end lies ahead (the
/// file's header and first blocks, a packet read again): a few records of any size.
const PREAD_MIN: usize = 8 << 10;
/// Bytes a [`Backing::Pread`] reads at most per refill of a long range (more only when one
/// record is larger): the buffer's size.
const PREAD_MAX: usize = 1 << 20;

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
        buf: Vec<u8>,
        start: usize,
        end: usize,
        base: u64,
        eof: bool,
    },
    /// A regular file read with `pread`: `buf[start..end]` holds the file's bytes at
    /// `base + start`. A refill reads up to `range_end` (the end of the range the reader was
    /// sent to, at most [`PREAD_MAX`] at a time), at least [`PREAD_MIN`].
    Pread {
        file: File,
        buf: Vec<u8>,
        start: usize,
        end: usize,
        base: u64,
        /// The file's length when opened: the reader stops there, as a map would.
        len: u64,
        range_end: u64,
    },
}

/// Bytes held in memory in full.
pub(crate) enum Whole {
    /// A mapped file, and the file (split probes its cut points with `pread`).
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
        // Nothing is populated before the first reads: a file split into ranges (`chunk`) is
        // populated by each range's reader, and one read from the start populates its first step
        // then.
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

    /// Reads `file` (`len` bytes long) with `pread`, range by range.
    pub(crate) fn pread(file: File, len: u64) -> Backing {
        Backing::Pread {
            file,
            buf: Vec::new(),
            start: 0,
            end: 0,
            base: 0,
            len,
            range_end: 0,
        }
    }

    pub(crate) fn stream(reader: Box<dyn Read + Send>) -> Backing {
        Backing::Stream {
            reader,
            buf: Vec::new(),
            start: 0,
            end: 0,
            base: 0,
            eof: false,
        }
    }

    /// File offset of the cursor.
    #[inline]
    pub(crate) fn offset(&self) -> u64 {
        match self {
            Backing::Whole { pos, .. } => *pos as u64,
            Backing::Stream { base, start, .. } | Backing::Pread { base, start, .. } => {
                base + *start as u64
            }
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
                    let need = want.max(STREAM_CHUNK);
                    if buf.len() < need {
                        buf.resize(need.next_power_of_two(), 0);
                    }
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
            Backing::Pread {
                file,
                buf,
                start,
                end,
                base,
                len,
                range_end,
            } => {
                let want = want.min(MAX_STREAM_RECORD);
                let at = *base + *end as u64;
                if *end - *start < want && at < *len {
                    if *start > 0 {
                        buf.copy_within(*start..*end, 0);
                        *base += *start as u64;
                        *end -= *start;
                        *start = 0;
                    }
                    let pos = *base;
                    let ahead = usize::try_from(range_end.saturating_sub(pos))
                        .unwrap_or(usize::MAX)
                        .clamp(PREAD_MIN, PREAD_MAX);
                    let left = usize::try_from(*len - pos).unwrap_or(usize::MAX);
                    let need = want.max(ahead).min(left);
                    if buf.len() < need {
                        buf.resize(need, 0);
                    }
                    while *end < need {
                        use std::os::unix::fs::FileExt;
                        match file.read_at(&mut buf[*end..need], *base + *end as u64) {
                            // the file was cut short since it was opened
                            Ok(0) => break,
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

    /// For a [`Backing::Pread`]: moves the cursor to `offset` and has the next refill read up
    /// to `range_end` at once (one `pread` for a range that fits the buffer). False when
    /// `offset` is past the file's end or this is not a `pread` backing.
    pub(crate) fn seek_range(&mut self, offset: u64, range_end: u64) -> bool {
        let Backing::Pread {
            start,
            end,
            base,
            len,
            range_end: re,
            ..
        } = self
        else {
            return false;
        };
        if offset > *len {
            return false;
        }
        *re = range_end;
        if offset >= *base && offset <= *base + *end as u64 {
            // still in the buffer (a packet read again, the next range in the same block)
            *start = (offset - *base) as usize;
        } else {
            *base = offset;
            *start = 0;
            *end = 0;
        }
        true
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
            }
            | Backing::Pread {
                buf, start, end, ..
            } => &buf[*start..*end],
        }
    }

    /// The last `n` bytes the cursor moved over (they stay valid until the next `window`).
    #[inline]
    pub(crate) fn behind(&self, n: usize) -> &[u8] {
        match self {
            Backing::Whole { bytes, pos, .. } => &bytes.as_slice()[*pos - n..*pos],
            Backing::Stream { buf, start, .. } | Backing::Pread { buf, start, .. } => {
                &buf[*start - n..*start]
            }
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
                // the lines that came within PREFETCH_AHEAD of the cursor with this move (the
                // last PREFETCH_AHEAD bytes only, after a long record)
                let bytes = bytes.as_slice();
                let stop = (*pos + PREFETCH_AHEAD).min(*end);
                let mut line = (*pos + PREFETCH_AHEAD - n).max(*pos) & !(LINE - 1);
                while line < stop {
                    weir_packet::prefetch(&bytes[line]);
                    line += LINE;
                }
                if *pos >= *next_manage {
                    self.manage_map();
                }
            }
            Backing::Stream { start, .. } | Backing::Pread { start, .. } => *start += n,
        }
    }

    /// For a mapped file: a reader of `[start, end)` of the same map. Its offsets are the file's;
    /// nothing is populated before its first record is read (ranges are made long before a
    /// thread reaches them).
    ///
    /// Ranges once read their bytes with `pread` into a buffer instead, which did better on one
    /// VM (an AMD EPYC with 512 KiB of L2, before the dense [`PREFETCH_AHEAD`]) and worse on
    /// another (a Xeon with 2 MiB of L2: `bench/flows_vs_peers.py` with 2 workers 160 ms with
    /// `pread`, 141 ms through the map): the kernel's copy reads every byte from memory and
    /// writes it again, where the map only reads it.
    pub(crate) fn chunk(&self, start: usize, end: usize) -> Option<Backing> {
        let Backing::Whole {
            bytes: Whole::Map(map, file),
            ..
        } = self
        else {
            return None;
        };
        let page = start / PAGE * PAGE;
        Some(Backing::Whole {
            bytes: Whole::Map(map.clone(), file.clone()),
            pos: start,
            end,
            // managed at the first advance: its first step is populated then
            next_manage: 0,
            ahead: page,
            released: page,
        })
    }

    /// The mapped file (for probing parts of it with `pread`).
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
            Backing::Stream { .. } | Backing::Pread { .. } => None,
        }
    }

    /// Moves the cursor of an in-memory file (or one read with `pread`) to `offset`; false when
    /// streaming or out of range.
    pub(crate) fn seek(&mut self, offset: usize) -> bool {
        if let Backing::Pread { .. } = self {
            // no range ahead: a refill reads PREAD_MIN
            return self.seek_range(offset as u64, 0);
        }
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
        // Populate up to the reader's end only: a range leaves the next one to its reader.
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
