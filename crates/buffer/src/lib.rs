//! The one shared packet buffer (the HPCAP design, in user space, on a stock kernel).
//!
//! Capture threads ([`Writer`]s) copy packets into one power-of-two byte buffer; several
//! consumers ([`Reader`]s: the recorder, the flow meter, a live stream...) each read every packet
//! through their own cursor, in one order common to all of them, without copying. When the
//! slowest registered reader leaves no room, new packets are **dropped and counted**: a writer
//! never blocks and never waits for another thread.
//!
//! ```
//! use weir_buffer::PacketBuffer;
//! let buffer = PacketBuffer::new(4 << 20, 1)?;            // 4 MiB, one registered reader
//! let mut writer = buffer.writer()?;
//! let mut reader = buffer.reader(0)?;
//! writer.push(0, 1_700_000_000_000_000_000, 60, &[0u8; 60]).unwrap();
//! let batch = reader.next_batch().unwrap();
//! for record in batch.records() {
//!     assert_eq!(record.data().len(), 60);
//! }
//! let (a, b) = batch.bytes();                              // pcapng blocks, ready for disk
//! assert_eq!(a.len() + b.len(), 96);
//! batch.release();                                         // frees the space for writers
//! # Ok::<(), weir_buffer::BufferError>(())
//! ```
//!
//! # Layout
//!
//! The buffer holds `size = 2^k` bytes (on huge pages when the system has them, see
//! [`PageKind`]). Space is addressed by a 64-bit **offset** that only grows and is never reduced
//! modulo the size; the byte of offset `o` lives at `o & (size - 1)`. Differences between offsets
//! are taken with wrapping arithmetic, so even the wrap of the u64 (after 16 EiB) is harmless.
//!
//! Every record is a pcapng block (see [`pcapng`]): packets are Enhanced Packet Blocks, 8-byte
//! aligned, at least 32 bytes long; padding is an Interface Statistics Block that pcapng readers
//! skip. A run of the buffer is therefore a run of a pcapng file, and the recorder writes it to
//! disk as is. Packet records are always contiguous in memory; only padding may straddle the end
//! of the buffer (it is contiguous in the file, where the next lap follows the previous one).
//!
//! # Protocol
//!
//! Shared state: `reserved` (the next free offset), one slot per writer (`inflight`) and one
//! cursor per reader. A push of a record of `len` bytes goes:
//!
//! 1. **Check** (loads only): `r = reserved`; the push fits if `r + len ≤ min_cursor + size −
//!    headroom`, where `min_cursor` is the lowest cursor of the registered readers (cached by
//!    the writer, reloaded only when the cached value says "full"). If it does not fit, the
//!    packet is dropped and counted, and nothing was reserved, so nothing has to be given back.
//! 2. **Announce**: `inflight = r | BUSY` (`r` is a lower bound of the offset about to be
//!    reserved, because `reserved` only grows), then a `SeqCst` fence.
//! 3. **Reserve**: `a = reserved.fetch_add(len)`, the one atomic read-modify-write of a push.
//! 4. **Write** `[a, a + len)`. If that range would cross the end of the buffer, the writer
//!    fills all of it with padding instead and starts again at 1 (the next reservation begins
//!    after the wrap, so this happens at most once per lap per writer, in practice).
//! 5. **Commit**: `inflight = IDLE` with `Release`.
//!
//! A reader computes the **frontier**: `R = reserved`, a `SeqCst` fence, then the lowest
//! announced lower bound among busy writers, or `R` if it is lower. Every record below the
//! frontier is complete and visible; the reader gets `[cursor, frontier)` as a [`Batch`] (two
//! slices at most), walks it block by block (skipping padding) and **releases** it by storing
//! the new cursor with `Release`. A reader thus stops at (or before) the first record that may be
//! unfinished and delivers records in offset order even when writers finish out of order.
//!
//! A writer's slot goes through `IDLE → BUSY(lower bound) → IDLE` once per reservation. A
//! region of the buffer goes through *free → reserved (by one writer, in flight) → committed
//! (readable below the frontier) → released by every registered reader → free*.
//!
//! # Why it is sound
//!
//! * **No reader sees a reserved-but-unwritten record.** Suppose a reader's load of `reserved`
//!   sees writer W's reservation `[a, b)`. W announced `lb ≤ a` before its fence and its
//!   `fetch_add`; the reader loads W's slot after its own fence. By the fence rules of the
//!   C++20/Rust model (the store-buffering pattern), the reader then sees W's announcement or a
//!   later store of W's slot. If it sees the announcement, the frontier is at most `lb ≤ a` and
//!   the record is not read. Any later store (`IDLE`, or the next announcement, both `Release`)
//!   comes after W wrote `[a, b)`, and the reader's `Acquire` load makes those bytes visible.
//!   No timing is assumed anywhere: a writer that stalls mid-push only stalls the frontier.
//! * **No writer overwrites what a registered reader has not released.** Only the check can fail,
//!   and it happens before the `fetch_add`, so `reserved` can overshoot the check only through
//!   writers that passed their check concurrently, at most one push each. With
//!   `headroom = max_writers × max_record_len`, every reservation ends at most `size` bytes past
//!   a cursor value that some writer loaded, and cursors only grow. The happens-before edge from
//!   the reader's last read of that space to the writer's bytes goes: reader's `Release` store
//!   of its cursor → the checking writer's `Acquire` load → its `AcqRel` `fetch_add` → the
//!   release sequence on `reserved` → the overwriting writer's `fetch_add`.
//! * **No gap under 32 bytes.** Reservations are whole records (≥ 32 bytes, multiples of 8) and
//!   a padding record always covers one whole reservation.
//!
//! # Best-effort readers
//!
//! A best-effort reader does not hold writers back while it is idle: its cursor carries a `HELD`
//! bit, set (by compare-and-swap) only while it holds a batch. A writer short of space may move
//! an idle best-effort cursor forward to a record boundary it knows (the `reserved` value it
//! loaded) with a compare-and-swap; the reader notices at its next batch and counts the bytes it
//! skipped. While a batch is held, the reader counts like a registered one.
//!
//! The protocol is checked by `loom` (`scripts/loom.sh`) on a tiny buffer with two writers and a
//! reader, including the wrap, and by a stress test with many writers and readers
//! (`tests/stress.rs`).
#![deny(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

mod doorbell;
mod mem;
pub mod pcapng;
mod reader;
mod sync;
mod writer;

pub use mem::{advise_huge_pages, populate_for_writes, PageKind, Prefault};
pub use pcapng::Record;
pub use reader::{Batch, Block, Blocks, Reader, Records, Waker, WAKE_BYTES};
pub use writer::{Dropped, Pending, Writer};

use sync::{fence, Arc, AtomicBool, AtomicU64, Ordering, Padded, Shadow};

/// Errors creating a buffer or its handles.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BufferError {
    /// The configuration cannot work.
    #[error("invalid packet buffer configuration: {0}")]
    Config(String),
    /// The memory could not be mapped.
    #[error("cannot map {size} bytes for the packet buffer: {source}")]
    Map {
        /// Requested size.
        size: usize,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// Every writer slot is taken (see [`Config::max_writers`]).
    #[error("all {0} writer slots of the packet buffer are in use")]
    TooManyWriters(usize),
    /// That reader does not exist or was already handed out.
    #[error("reader {0} does not exist or is already taken")]
    Reader(usize),
}

/// How to build a [`PacketBuffer`].
#[derive(Debug, Clone)]
pub struct Config {
    size: usize,
    readers: usize,
    best_effort: usize,
    max_writers: usize,
    max_caplen: usize,
    max_comment: usize,
    huge_pages: bool,
    prefault: mem::Prefault,
}

impl Config {
    /// A buffer of `size` bytes (a power of two), with one registered reader, up to 8 writers,
    /// packets of up to 262144 captured bytes (tcpdump's default snap length), huge pages when
    /// available, and pages touched at creation.
    pub fn new(size: usize) -> Config {
        Config {
            size,
            readers: 1,
            best_effort: 0,
            max_writers: 8,
            max_caplen: 262_144,
            max_comment: pcapng::MAX_COMMENT,
            huge_pages: true,
            prefault: mem::Prefault::Now,
        }
    }

    /// Registered readers: writers never overwrite what one of them has not released. They are
    /// readers `0..n`.
    pub fn readers(mut self, n: usize) -> Config {
        self.readers = n;
        self
    }

    /// Best-effort readers, numbered after the registered ones: they are skipped forward when
    /// writers need their space (see the crate docs).
    pub fn best_effort_readers(mut self, n: usize) -> Config {
        self.best_effort = n;
        self
    }

    /// Most writers alive at once. With the largest record, it sets the headroom kept free to
    /// absorb concurrent reservations (`max_writers × record_len(max_caplen)`).
    pub fn max_writers(mut self, n: usize) -> Config {
        self.max_writers = n;
        self
    }

    /// Longest packet a writer may push; longer ones are refused and counted.
    pub fn max_caplen(mut self, n: usize) -> Config {
        self.max_caplen = n;
        self
    }

    /// Longest packet comment a writer may store (the rules' tags), at most and by default
    /// [`MAX_COMMENT`](pcapng::MAX_COMMENT); longer ones are cut. It counts in the headroom, so
    /// a buffer whose packets never carry comments may set 0.
    pub fn max_comment(mut self, n: usize) -> Config {
        self.max_comment = n.min(pcapng::MAX_COMMENT);
        self
    }

    /// Try explicit huge pages, then advise transparent ones (default true).
    pub fn huge_pages(mut self, on: bool) -> Config {
        self.huge_pages = on;
        self
    }

    /// Touch every page at creation so capture never takes a page fault (default true).
    pub fn prefault(mut self, on: bool) -> Config {
        self.prefault = if on {
            mem::Prefault::Now
        } else {
            mem::Prefault::Never
        };
        self
    }

    /// When to fault the pages in (see [`Prefault`]); [`prefault`](Self::prefault) picks
    /// between `Now` (the default) and `Never`.
    pub fn prefault_mode(mut self, mode: Prefault) -> Config {
        self.prefault = mode;
        self
    }

    /// Maps the memory and builds the buffer.
    pub fn build(self) -> Result<PacketBuffer, BufferError> {
        let bad = |m: String| Err(BufferError::Config(m));
        if !self.size.is_power_of_two() || self.size < 64 || self.size > 1 << 46 {
            return bad(format!(
                "size {} is not a power of two in 64 B ..= 64 TiB",
                self.size
            ));
        }
        if self.max_writers == 0 {
            return bad("max_writers must be at least 1".into());
        }
        if self.max_caplen > (u32::MAX as usize) - 64 {
            return bad(format!("max_caplen {} is too large", self.max_caplen));
        }
        let max_record = pcapng::epb_len(self.max_caplen, self.max_comment) as u64;
        let headroom = max_record * self.max_writers as u64;
        if headroom + max_record > self.size as u64 {
            return bad(format!(
                "size {} leaves no room for a {max_record}-byte record after the headroom of \
                 {} writers × {max_record} bytes; make it larger or lower max_caplen/max_writers",
                self.size, self.max_writers
            ));
        }
        let region =
            mem::Region::new(self.size, self.huge_pages, self.prefault).map_err(|source| {
                BufferError::Map {
                    size: self.size,
                    source,
                }
            })?;
        let readers = (0..self.readers + self.best_effort)
            .map(|i| {
                Padded(ReaderSlot {
                    cursor: AtomicU64::new(0),
                    claimed: AtomicBool::new(false),
                    best_effort: i >= self.readers,
                    skipped_bytes: AtomicU64::new(0),
                    skips: AtomicU64::new(0),
                    bell: doorbell::Doorbell::default(),
                })
            })
            .collect();
        let writers = (0..self.max_writers)
            .map(|_| {
                Padded(WriterSlot {
                    inflight: AtomicU64::new(IDLE),
                    claimed: AtomicBool::new(false),
                    pushed: AtomicU64::new(0),
                    pads: AtomicU64::new(0),
                    dropped_full: AtomicU64::new(0),
                    dropped_oversize: AtomicU64::new(0),
                })
            })
            .collect();
        Ok(PacketBuffer {
            inner: Arc::new(Inner {
                shadow: Shadow::new(self.size),
                region,
                size: self.size as u64,
                mask: self.size as u64 - 1,
                max_caplen: self.max_caplen,
                max_comment: self.max_comment,
                headroom,
                has_best_effort: self.best_effort > 0,
                reserved: Padded(AtomicU64::new(0)),
                writers,
                readers,
            }),
        })
    }
}

/// `inflight` value of a writer between pushes.
pub(crate) const IDLE: u64 = 0;
/// Low bit of `inflight` while a push is under way; the rest is the announced lower bound.
pub(crate) const BUSY: u64 = 1;
/// Cursor bit: a best-effort reader holds a batch (writers must not move the cursor).
pub(crate) const HELD: u64 = 1;
/// Cursor bit: the reader is gone; writers ignore it.
pub(crate) const DETACHED: u64 = 2;
/// Offsets are multiples of 8, so the low 3 bits of cursors and slots are free for flags.
pub(crate) const OFFSET_MASK: u64 = !7;

/// `a − b` as a signed distance between two offsets (correct across the u64 wrap).
#[inline]
pub(crate) fn dist(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b) as i64
}

pub(crate) struct WriterSlot {
    /// `IDLE`, or `lower_bound | BUSY` while the owning writer has a reservation in flight.
    /// Written only by the owning writer: `Release` for both stores (the next announcement
    /// also publishes the previous record), always followed by a `SeqCst` fence when announcing.
    /// Read by readers (`Acquire`, after their `SeqCst` fence) to compute the frontier.
    /// Invariant: while BUSY, the announced bound ≤ the start of the owner's reservation.
    pub(crate) inflight: AtomicU64,
    /// Whether a live [`Writer`] owns this slot (`Acquire` claim CAS / `Release` on drop).
    pub(crate) claimed: AtomicBool,
    /// Counters written only by the owner (`Relaxed`), summed by [`PacketBuffer::stats`].
    pub(crate) pushed: AtomicU64,
    pub(crate) pads: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    pub(crate) dropped_oversize: AtomicU64,
}

pub(crate) struct ReaderSlot {
    /// The reader's cursor: an offset (always a record boundary, multiple of 8) plus flags
    /// `HELD` (best-effort only) and `DETACHED`. Only grows. Written by the reader with
    /// `Release` after it is done with the bytes below it; loaded by writers with `Acquire`
    /// before they reuse that space. For best-effort readers, writers may also advance it by
    /// `AcqRel` compare-and-swap, only from an idle (not `HELD`) value.
    pub(crate) cursor: AtomicU64,
    pub(crate) claimed: AtomicBool,
    pub(crate) best_effort: bool,
    /// Bytes and times a best-effort reader was skipped forward (written by the reader only).
    pub(crate) skipped_bytes: AtomicU64,
    pub(crate) skips: AtomicU64,
    /// Where the reader waits for data ([`Reader::wait`]); writers ring it.
    pub(crate) bell: doorbell::Doorbell,
}

pub(crate) struct Inner {
    pub(crate) shadow: Shadow,
    region: mem::Region,
    pub(crate) size: u64,
    pub(crate) mask: u64,
    pub(crate) max_caplen: usize,
    /// Longest comment a record may carry (counted in `headroom`).
    pub(crate) max_comment: usize,
    /// Space kept free so concurrent reservations past a check never reach unreleased bytes.
    pub(crate) headroom: u64,
    pub(crate) has_best_effort: bool,
    /// The next offset to reserve. Only ever increased, by writers' `fetch_add(len, AcqRel)`;
    /// every value it takes is a record boundary. Invariant: `reserved − c ≤ size` for every
    /// registered (or held) reader cursor `c`.
    pub(crate) reserved: Padded<AtomicU64>,
    pub(crate) writers: Box<[Padded<WriterSlot>]>,
    pub(crate) readers: Box<[Padded<ReaderSlot>]>,
}

impl Inner {
    /// The bytes at buffer position `pos..pos + len`.
    ///
    /// # Safety
    /// `pos + len ≤ size`, and no thread writes those bytes while the slice lives (the caller
    /// holds them below its frontier and above its unreleased cursor).
    pub(crate) unsafe fn bytes(&self, pos: usize, len: usize) -> &[u8] {
        debug_assert!(pos + len <= self.size as usize);
        self.shadow.read(pos, len);
        // SAFETY: in bounds of the mapping by the caller's contract; not written concurrently.
        unsafe { std::slice::from_raw_parts(self.region.ptr().add(pos), len) }
    }

    /// The bytes at buffer position `pos..pos + len`, to write.
    ///
    /// # Safety
    /// `pos + len ≤ size`, and the caller owns those bytes exclusively (its reservation).
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, pos: usize, len: usize) -> &mut [u8] {
        debug_assert!(pos + len <= self.size as usize);
        self.shadow.write(pos, len);
        // SAFETY: in bounds by contract; exclusive because the range is the caller's reservation.
        unsafe { std::slice::from_raw_parts_mut(self.region.ptr().add(pos), len) }
    }

    /// The lowest cursor of the readers writers must respect (registered ones, and best-effort
    /// ones holding a batch or not yet skipped), as seen from `r`; `r` itself if there is none.
    pub(crate) fn min_cursor(&self, r: u64) -> u64 {
        let mut min = r;
        for slot in self.readers.iter() {
            // Acquire: pairs with the reader's Release store of its cursor, so its reads of the
            // space below the cursor happen before this writer reuses that space.
            let v = slot.cursor.load(Ordering::Acquire);
            if v & DETACHED == 0 && dist(v & OFFSET_MASK, min) < 0 {
                min = v & OFFSET_MASK;
            }
        }
        min
    }

    /// Moves every idle best-effort cursor that is behind `r` forward to `r` (a record
    /// boundary, since every value of `reserved` is one).
    pub(crate) fn skip_best_effort(&self, r: u64) {
        for slot in self.readers.iter().filter(|s| s.best_effort) {
            let v = slot.cursor.load(Ordering::Acquire);
            if v & (HELD | DETACHED) == 0 && dist(r, v) > 0 {
                // AcqRel: acquires the reader's Release store of `v` (its reads are done), and
                // releases to other writers loading the new cursor. Fails harmlessly if the
                // reader took `HELD` (or moved) in between.
                let _ = slot
                    .cursor
                    .compare_exchange(v, r, Ordering::AcqRel, Ordering::Relaxed);
            }
        }
    }

    /// Every record below the returned offset is complete and visible to this thread.
    pub(crate) fn frontier(&self) -> u64 {
        // Relaxed is enough here: what orders this load with the writers' announcements is the
        // fence below, paired with each writer's fence between announcing and reserving.
        let r = self.reserved.load(Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let mut f = r;
        for w in self.writers.iter() {
            // Acquire: pairs with the writer's Release stores of `inflight`, each made after the
            // bytes of its previous reservation were written.
            let v = w.inflight.load(Ordering::Acquire);
            if v & BUSY != 0 && dist(v & OFFSET_MASK, f) < 0 {
                f = v & OFFSET_MASK;
            }
        }
        f
    }
}

/// The shared packet buffer: a cheap handle (clone it freely) to hand out writers and readers.
#[derive(Clone)]
pub struct PacketBuffer {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for PacketBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketBuffer")
            .field("size", &self.inner.size)
            .field("pages", &self.page_kind())
            .field("readers", &self.inner.readers.len())
            .field("max_writers", &self.inner.writers.len())
            .finish()
    }
}

impl PacketBuffer {
    /// A buffer of `size` bytes (a power of two) with `readers` registered readers and the other
    /// defaults of [`Config::new`].
    pub fn new(size: usize, readers: usize) -> Result<PacketBuffer, BufferError> {
        Config::new(size).readers(readers).build()
    }

    /// A new writer, for one capture thread.
    pub fn writer(&self) -> Result<Writer, BufferError> {
        for (i, slot) in self.inner.writers.iter().enumerate() {
            if slot
                .claimed
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(Writer::new(self.clone(), i));
            }
        }
        Err(BufferError::TooManyWriters(self.inner.writers.len()))
    }

    /// Reader number `i` (registered readers first, then best-effort ones); each is handed out
    /// once. Dropping a reader detaches it: writers stop waiting for it.
    pub fn reader(&self, i: usize) -> Result<Reader, BufferError> {
        let slot = self.inner.readers.get(i).ok_or(BufferError::Reader(i))?;
        slot.claimed
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .map_err(|_| BufferError::Reader(i))?;
        let v = slot.cursor.load(Ordering::Acquire);
        if v & DETACHED != 0 {
            return Err(BufferError::Reader(i));
        }
        Ok(Reader::new(
            self.clone(),
            i,
            v & OFFSET_MASK,
            slot.best_effort,
        ))
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.inner.size as usize
    }

    /// Longest packet a writer may push.
    pub fn max_caplen(&self) -> usize {
        self.inner.max_caplen
    }

    /// Which pages back the buffer.
    pub fn page_kind(&self) -> PageKind {
        self.inner.region.kind()
    }

    /// Counters: packets pushed and dropped, and where each reader stands.
    pub fn stats(&self) -> Stats {
        let i = &self.inner;
        let reserved = i.reserved.load(Ordering::Relaxed);
        let mut s = Stats {
            size: i.size,
            reserved,
            ..Stats::default()
        };
        for w in i.writers.iter() {
            s.pushed += w.pushed.load(Ordering::Relaxed);
            s.padding += w.pads.load(Ordering::Relaxed);
            s.dropped_full += w.dropped_full.load(Ordering::Relaxed);
            s.dropped_oversize += w.dropped_oversize.load(Ordering::Relaxed);
        }
        for r in i.readers.iter() {
            let v = r.cursor.load(Ordering::Relaxed);
            let cursor = v & OFFSET_MASK;
            s.readers.push(ReaderStats {
                best_effort: r.best_effort,
                detached: v & DETACHED != 0,
                cursor,
                lag: dist(reserved, cursor).max(0) as u64,
                skipped_bytes: r.skipped_bytes.load(Ordering::Relaxed),
                skips: r.skips.load(Ordering::Relaxed),
            });
        }
        s
    }
}

/// A snapshot of the buffer's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Buffer size in bytes.
    pub size: u64,
    /// Bytes reserved since creation (the offset counter).
    pub reserved: u64,
    /// Packets written.
    pub pushed: u64,
    /// Packets dropped because the slowest registered reader left no room.
    pub dropped_full: u64,
    /// Packets refused because they were longer than the buffer's `max_caplen`.
    pub dropped_oversize: u64,
    /// Reservations turned into padding at the end of the buffer.
    pub padding: u64,
    /// One entry per reader, in reader order.
    pub readers: Vec<ReaderStats>,
}

impl Stats {
    /// Every packet dropped by the buffer, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_full + self.dropped_oversize
    }

    /// Fill of the buffer in 0.0..=1.0, as seen by the slowest attached registered reader.
    pub fn fill(&self) -> f64 {
        let lag = self
            .readers
            .iter()
            .filter(|r| !r.best_effort && !r.detached)
            .map(|r| r.lag)
            .max()
            .unwrap_or(0);
        lag as f64 / self.size as f64
    }
}

/// Where one reader stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Whether it is a best-effort reader.
    pub best_effort: bool,
    /// Whether it was dropped (writers no longer wait for it).
    pub detached: bool,
    /// Its cursor (an offset).
    pub cursor: u64,
    /// Bytes reserved but not yet released by this reader.
    pub lag: u64,
    /// Best-effort only: bytes it was skipped over because writers needed the space.
    pub skipped_bytes: u64,
    /// Best-effort only: how many times it was skipped forward.
    pub skips: u64,
}

#[cfg(all(test, not(loom)))]
mod tests;
