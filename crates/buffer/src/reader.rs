//! The reading side: one [`Reader`] per consumer, each with its own cursor.
//!
//! [`Reader::next_batch`] hands out everything committed from the cursor on, as a [`Batch`]
//! borrowing the buffer without copying: [`Batch::bytes`] (at most two slices, pcapng blocks
//! ready for the disk) and [`Batch::records`] (the packets, padding skipped). Nothing is freed
//! for writers until [`Batch::release`] (or [`Batch::release_before`] a given record); a batch
//! dropped without release is handed out again, grown by what was committed meanwhile.

use crate::pcapng::{get_u32, Record, EPB_TYPE, MIN_BLOCK_LEN};
use crate::sync::Ordering;
use crate::{dist, Inner, PacketBuffer, ReaderSlot, DETACHED, HELD, OFFSET_MASK};

/// How many new bytes end a [`Reader::wait_more`] (at most 1/16 of the buffer): ≈ 11 000
/// 64-byte packets, a few hundred wake-ups a second at the highest rates, and about none when
/// traffic is light (the consumer's own timeout then paces it).
pub const WAKE_BYTES: u64 = 1 << 20;

/// A consumer's handle: its cursor into the buffer. One thread at a time (`&mut self`).
pub struct Reader {
    buf: PacketBuffer,
    slot: usize,
    /// Our view of the cursor: the offset of the next record to read. The shared cursor equals
    /// it (plus `HELD` while a best-effort batch is out), unless writers skipped us forward.
    pos: u64,
    best_effort: bool,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader")
            .field("slot", &self.slot)
            .field("pos", &self.pos)
            .field("best_effort", &self.best_effort)
            .finish()
    }
}

impl Reader {
    pub(crate) fn new(buf: PacketBuffer, slot: usize, pos: u64, best_effort: bool) -> Reader {
        Reader {
            buf,
            slot,
            pos,
            best_effort,
        }
    }

    fn slot(&self) -> &ReaderSlot {
        &self.buf.inner.readers[self.slot]
    }

    /// Whether writers may skip this reader forward when they need its space.
    pub fn is_best_effort(&self) -> bool {
        self.best_effort
    }

    /// The offset of the next record this reader will see.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Every record committed from the cursor on, or `None` if there is none yet. Records are
    /// in offset order; the batch stops before the first record that may still be being
    /// written.
    pub fn next_batch(&mut self) -> Option<Batch<'_>> {
        if self.best_effort {
            self.hold();
        }
        let end = self.buf.inner.frontier();
        if dist(end, self.pos) <= 0 {
            if self.best_effort {
                self.unhold();
            }
            return None;
        }
        let start = self.pos;
        Some(Batch {
            reader: self,
            start,
            end,
            done: false,
        })
    }

    /// Waits until writers have reserved up to offset `until` (typically a few hundred KiB
    /// past the end of the last batch seen), or `timeout` passed, whichever comes first; at
    /// once when they already have. Writers ring after each batch they push (and every 64 KiB
    /// of single pushes), so a consumer wakes about once per `until − end` bytes instead of
    /// polling on a short sleep. A hint only: the reader must look with
    /// [`next_batch`](Self::next_batch) either way, and a wake-up missed costs at most
    /// `timeout`. Returns whether a writer rang (or the offset was already reached).
    pub fn wait(&mut self, until: u64, timeout: std::time::Duration) -> bool {
        let inner = &*self.buf.inner;
        self.slot()
            .bell
            .wait(until, timeout, || inner.reserved.load(Ordering::Relaxed))
    }

    /// [`wait`](Self::wait)s for [`WAKE_BYTES`] (at most a sixteenth of the buffer) past this
    /// reader's position, or until `deadline` (the consumer's next timer: a tick, a flush; at
    /// least 1 ms from now, so a timer already due is not a busy loop), or a [`Waker::wake`]:
    /// what a consumer that found nothing new does instead of sleeping a fixed few
    /// milliseconds (each such wake-up of an idle vCPU is dear on a VM: issue 20).
    pub fn wait_more(&mut self, deadline: std::time::Instant) -> bool {
        let wake = WAKE_BYTES.min(self.buf.size() as u64 / 16);
        let timeout = deadline
            .saturating_duration_since(std::time::Instant::now())
            .max(std::time::Duration::from_millis(1));
        self.wait(self.pos.wrapping_add(wake), timeout)
    }

    /// A handle that ends this reader's [`wait`](Self::wait) from another thread (a stop, a
    /// request for the consumer): see [`Waker::wake`].
    pub fn waker(&self) -> Waker {
        Waker {
            buf: self.buf.clone(),
            slot: self.slot,
        }
    }

    /// The size of the buffer in bytes.
    pub fn buffer_size(&self) -> usize {
        self.buf.size()
    }

    /// Best-effort readers: set `HELD` on the cursor so writers stop skipping it while a batch is
    /// out, first taking note of any skip.
    fn hold(&mut self) {
        let slot = &self.buf.inner.readers[self.slot];
        loop {
            let v = slot.cursor.load(Ordering::Acquire);
            let c = v & OFFSET_MASK;
            if c != self.pos {
                // A writer moved us forward over bytes we will never see.
                let skipped = dist(c, self.pos).max(0) as u64;
                add(&slot.skipped_bytes, skipped);
                add(&slot.skips, 1);
                self.pos = c;
            }
            // Acquire/Release like any cursor access; fails if a writer moved the cursor since
            // the load above, in which case we account for it and try again.
            if slot
                .cursor
                .compare_exchange(v, c | HELD, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Best-effort readers: clear `HELD` without moving. Release: our reads are done.
    fn unhold(&self) {
        self.slot().cursor.store(self.pos, Ordering::Release);
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // Writers stop waiting for us.
        self.slot().cursor.store(DETACHED, Ordering::Release);
    }
}

/// Ends a [`Reader::wait`] from another thread ([`Reader::waker`]); clone it freely.
#[derive(Clone)]
pub struct Waker {
    buf: PacketBuffer,
    slot: usize,
}

impl Waker {
    /// Ends the reader's wait in progress at once; when it is not waiting, its next wait
    /// returns at once instead (a wake is never lost). Set the flag the consumer looks at
    /// (a stop, a request queued) before waking it.
    pub fn wake(&self) {
        self.buf.inner.readers[self.slot].bell.wake();
    }
}

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waker").field("slot", &self.slot).finish()
    }
}

/// Committed records `[start, end)` lent by a reader. Release it to let writers reuse the space.
pub struct Batch<'a> {
    reader: &'a mut Reader,
    start: u64,
    end: u64,
    done: bool,
}

impl<'a> Batch<'a> {
    fn inner(&self) -> &Inner {
        &self.reader.buf.inner
    }

    /// First offset of the batch (a record boundary).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset just past the batch (a record boundary).
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.end.wrapping_sub(self.start) as usize
    }

    /// Whether the batch is empty (never, as handed out).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }

    /// The batch's bytes: a run of pcapng blocks (packets and padding), as one slice, or two
    /// when it wraps around the end of the buffer (the second then starts at the buffer's start).
    pub fn bytes(&self) -> (&[u8], &[u8]) {
        let inner = self.inner();
        let pos = (self.start & inner.mask) as usize;
        let len = self.len();
        let first = len.min(inner.size as usize - pos);
        // SAFETY: both ranges are inside the buffer, below the frontier (committed, visible) and
        // at or above our unreleased cursor (no writer may reuse them while this borrow lives).
        unsafe { (inner.bytes(pos, first), inner.bytes(0, len - first)) }
    }

    /// The packet records of the batch, in offset order (padding skipped).
    pub fn records(&self) -> Records<'_> {
        Records {
            blocks: self.blocks(self.start),
        }
    }

    /// Every block of the batch from `from` (a record boundary inside it, e.g. [`start`](Self::start))
    /// to its end: packets and padding, with their offsets and lengths. A recorder uses it to
    /// find where whole blocks end.
    pub fn blocks(&self, from: u64) -> Blocks<'_> {
        assert!(
            dist(from, self.start) >= 0 && dist(self.end, from) >= 0,
            "blocks({from}) outside batch {}..{}",
            self.start,
            self.end
        );
        Blocks {
            inner: self.inner(),
            pos: from,
            end: self.end,
        }
    }

    /// Frees the whole batch for the writers (and moves this reader's cursor past it).
    pub fn release(self) {
        let end = self.end;
        self.release_to(end);
    }

    /// Frees the part of the batch before `offset`, which must be the batch's end or the
    /// offset of one of its blocks (a packet's [`offset`](Record::offset), or a padding
    /// block's); the rest is handed out again by the next [`Reader::next_batch`].
    pub fn release_before(self, offset: u64) {
        assert!(
            dist(offset, self.start) >= 0 && dist(self.end, offset) >= 0 && offset % 8 == 0,
            "release_before({offset}) outside batch {}..{}",
            self.start,
            self.end
        );
        debug_assert!(
            offset == self.end || self.blocks(self.start).any(|b| b.offset == offset),
            "release_before({offset}): not a record boundary"
        );
        self.release_to(offset);
    }

    fn release_to(mut self, offset: u64) {
        // Release: every read of these bytes happens before a writer that loads the new cursor
        // (Acquire) reuses them. For best-effort readers this also clears `HELD`.
        self.reader.slot().cursor.store(offset, Ordering::Release);
        self.reader.pos = offset;
        self.done = true;
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if !self.done && self.reader.best_effort {
            self.reader.unhold();
        }
    }
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("start", &self.start)
            .field("end", &self.end)
            .finish()
    }
}

/// Iterator over the packet records of a [`Batch`].
pub struct Records<'a> {
    blocks: Blocks<'a>,
}

impl<'a> Iterator for Records<'a> {
    type Item = Record<'a>;

    #[inline]
    fn next(&mut self) -> Option<Record<'a>> {
        self.blocks.find_map(|b| b.packet)
    }
}

/// One block of a batch, as [`Batch::blocks`] yields it.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// Offset of the block in the buffer's stream.
    pub offset: u64,
    /// Length in bytes (a multiple of 8, at least 32).
    pub len: u32,
    /// The packet, or `None` for padding.
    pub packet: Option<Record<'a>>,
}

/// Iterator over every block of a [`Batch`], padding included.
pub struct Blocks<'a> {
    inner: &'a Inner,
    pos: u64,
    end: u64,
}

impl<'a> Iterator for Blocks<'a> {
    type Item = Block<'a>;

    #[inline]
    fn next(&mut self) -> Option<Block<'a>> {
        if self.pos == self.end {
            return None;
        }
        let p = (self.pos & self.inner.mask) as usize;
        // SAFETY: `pos` is a committed record boundary below the batch end: its first 8 bytes
        // (type, length) are in the buffer (positions are 8-aligned and the size is a multiple
        // of 8) and not written while the batch lives.
        let head = unsafe { self.inner.bytes(p, 8) };
        let (kind, len) = (get_u32(head, 0), get_u32(head, 4) as usize);
        assert!(
            len >= MIN_BLOCK_LEN && len % 8 == 0 && dist(self.end, self.pos) >= len as i64,
            "corrupt packet buffer record at offset {}",
            self.pos
        );
        let offset = self.pos;
        self.pos = self.pos.wrapping_add(len as u64);
        let packet = (kind == EPB_TYPE).then(|| {
            // SAFETY: packet records never straddle the end of the buffer, so `p + len ≤ size`;
            // committed and not rewritten while the batch lives, as above.
            Record::new(offset, unsafe { self.inner.bytes(p, len) })
        });
        Some(Block {
            offset,
            len: len as u32,
            packet,
        })
    }
}

fn add(c: &crate::sync::AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}
