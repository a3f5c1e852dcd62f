//! The writing side: one [`Writer`] per capture thread.
//!
//! A push is: check room (loads only) → announce a lower bound in the writer's slot → `SeqCst`
//! fence → one `fetch_add` on the offset counter → write the record (or padding, at the end of
//! the buffer) → mark the slot idle with `Release`. See the crate docs for why that is sound.

use crate::pcapng::{self, pad_piece, record_len, MIN_BLOCK_LEN};
use crate::sync::{fence, Ordering};
use crate::{dist, Inner, PacketBuffer, WriterSlot, BUSY, IDLE};

/// Why a packet was not written. Every drop is also counted in [`Stats`](crate::Stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    /// The slowest registered reader has not released enough space.
    #[error("packet buffer full")]
    Full,
    /// The packet is longer than the buffer's `max_caplen`.
    #[error("packet longer than the packet buffer's max caplen")]
    TooLong,
}

/// One packet of a [`Writer::push_batch`].
#[derive(Clone, Copy, Debug)]
pub struct Pending<'a> {
    /// Interface id.
    pub iface: u32,
    /// Timestamp, ns since the epoch.
    pub ts_ns: u64,
    /// Length on the wire.
    pub orig_len: u32,
    /// Captured bytes.
    pub data: &'a [u8],
}

/// A capture thread's handle to the buffer. `push` takes `&mut self`: one thread per writer.
pub struct Writer {
    buf: PacketBuffer,
    slot: usize,
    /// A cursor value no higher than every attached reader's cursor (they only grow), so
    /// possibly stale but always safe; reloaded only when it says "no room".
    cached_min: u64,
    /// The offset past which a single push next rings the readers' doorbells (every
    /// [`RING_STEP`] bytes; a batch rings at its end).
    ring_at: u64,
}

/// How many bytes of single pushes go between two looks at the readers' doorbells (a batch
/// looks once, at its end): often enough that a reader waiting for a few hundred KiB is woken
/// close to its mark, seldom enough that the fence costs nothing per packet.
const RING_STEP: u64 = 64 << 10;

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").field("slot", &self.slot).finish()
    }
}

impl Writer {
    pub(crate) fn new(buf: PacketBuffer, slot: usize) -> Writer {
        // Start from a cursor that is certainly not above any reader's.
        let cached_min = buf
            .inner
            .min_cursor(buf.inner.reserved.load(Ordering::Relaxed));
        Writer {
            buf,
            slot,
            cached_min,
            ring_at: 0,
        }
    }

    fn slot(&self) -> &WriterSlot {
        &self.buf.inner.writers[self.slot]
    }

    /// Copies one packet into the buffer as a pcapng EPB: interface id `iface`, timestamp
    /// `ts_ns` (ns since the epoch), wire length `orig_len`, captured bytes `data`.
    ///
    /// Never blocks: when the slowest registered reader leaves no room, the packet is dropped,
    /// counted, and [`Dropped::Full`] returned.
    #[inline]
    pub fn push(
        &mut self,
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
    ) -> Result<(), Dropped> {
        self.push_commented(iface, ts_ns, orig_len, data, &[])
    }

    /// Like [`push`](Self::push), with `comment` stored as the EPB's `opt_comment` (see
    /// [`pcapng`](crate::pcapng); cut to the buffer's `max_comment` (at most [`MAX_COMMENT`](crate::pcapng::MAX_COMMENT)) bytes, empty:
    /// none).
    pub fn push_commented(
        &mut self,
        iface: u32,
        ts_ns: u64,
        orig_len: u32,
        data: &[u8],
        comment: &[u8],
    ) -> Result<(), Dropped> {
        if data.len() > self.buf.inner.max_caplen {
            bump(&self.slot().dropped_oversize);
            return Err(Dropped::TooLong);
        }
        // never longer than the headroom allows for
        let comment = &comment[..comment.len().min(self.buf.inner.max_comment)];
        let len = pcapng::epb_len(data.len(), comment.len()) as u64;
        loop {
            let Some(a) = self.reserve(len) else {
                bump(&self.slot().dropped_full);
                return Err(Dropped::Full);
            };
            let inner = &*self.buf.inner;
            let pos = (a & inner.mask) as usize;
            if pos as u64 + len <= inner.size {
                // SAFETY: `pos + len ≤ size`, and `[a, a + len)` is this writer's reservation:
                // no other writer got any of it (one fetch_add), no registered reader can be
                // reading it (the room check), and readers will not read it before the Release
                // store below makes it visible (the frontier stops at our announcement).
                let dst = unsafe { inner.bytes_mut(pos, len as usize) };
                pcapng::write_epb_commented(dst, iface, ts_ns, orig_len, data, comment);
                self.commit();
                bump(&self.slot().pushed);
                let end = a.wrapping_add(len);
                if crate::dist(end, self.ring_at) >= 0 {
                    self.ring_at = end.wrapping_add(RING_STEP);
                    self.ring_readers(end);
                }
                return Ok(());
            }
            // The record would cross the end of the buffer: the whole reservation becomes
            // padding (contiguous in a file, straddling here), and we reserve again after it.
            write_padding(inner, a, len as usize, ts_ns);
            self.commit();
            bump(&self.slot().pads);
        }
    }

    /// Copies several packets, in order, with one reservation (one fence, one `fetch_add`) per
    /// group of consecutive packets whose records add up to at most the largest single record:
    /// a capture thread pushes a whole ring block this way. No reservation is larger than a
    /// single largest record, so the headroom argument of the crate docs holds unchanged.
    ///
    /// When a group does not fit, its packets are tried one by one; from the first packet
    /// dropped for lack of room on, the rest of the batch is dropped too (the buffer is full;
    /// each is counted). Packets longer than the buffer's `max_caplen` are refused and counted
    /// on their own. Returns how many packets were pushed.
    pub fn push_batch(&mut self, packets: &[Pending<'_>]) -> usize {
        let max_caplen = self.buf.inner.max_caplen;
        let max_group = record_len(max_caplen);
        let mut pushed = 0;
        let mut i = 0;
        while i < packets.len() {
            let mut j = i;
            let mut total = 0;
            while j < packets.len()
                && packets[j].data.len() <= max_caplen
                && total + record_len(packets[j].data.len()) <= max_group
            {
                total += record_len(packets[j].data.len());
                j += 1;
            }
            if j - i > 1 && self.push_group(total, &packets[i..j]) {
                pushed += j - i;
                i = j;
                continue;
            }
            // A lone (or oversize) packet, or a group that does not fit: one at a time.
            for (k, p) in packets[i..j.max(i + 1)].iter().enumerate() {
                match self.push(p.iface, p.ts_ns, p.orig_len, p.data) {
                    Ok(()) => pushed += 1,
                    Err(Dropped::TooLong) => {}
                    Err(Dropped::Full) => {
                        let rest = (packets.len() - (i + k + 1)) as u64;
                        let c = &self.slot().dropped_full;
                        c.store(c.load(Ordering::Relaxed) + rest, Ordering::Relaxed);
                        return pushed;
                    }
                }
            }
            i = j.max(i + 1);
        }
        if pushed > 0 {
            self.ring_readers(self.buf.inner.reserved.load(Ordering::Relaxed));
        }
        pushed
    }

    /// Wakes the readers waiting ([`Reader::wait`](crate::Reader::wait)) for an offset below
    /// `reserved` (this writer's end after its last commit, or later).
    fn ring_readers(&self, reserved: u64) {
        for r in self.buf.inner.readers.iter() {
            r.bell.ring_if_reached(reserved);
        }
    }

    /// Reserves `total` bytes once and writes the records of `group` into them.
    fn push_group(&mut self, total: usize, group: &[Pending<'_>]) -> bool {
        loop {
            let Some(a) = self.reserve(total as u64) else {
                return false;
            };
            let inner = &*self.buf.inner;
            let pos = (a & inner.mask) as usize;
            if pos as u64 + total as u64 <= inner.size {
                // SAFETY: as in `push`: `[a, a + total)` is this writer's reservation,
                // inside the buffer, not visible to readers before the commit below.
                let dst = unsafe { inner.bytes_mut(pos, total) };
                let mut at = 0;
                for p in group {
                    let l = record_len(p.data.len());
                    pcapng::write_epb(&mut dst[at..at + l], p.iface, p.ts_ns, p.orig_len, p.data);
                    at += l;
                }
                self.commit();
                let c = &self.slot().pushed;
                c.store(
                    c.load(Ordering::Relaxed) + group.len() as u64,
                    Ordering::Relaxed,
                );
                return true;
            }
            write_padding(inner, a, total, group[0].ts_ns);
            self.commit();
            bump(&self.slot().pads);
        }
    }

    /// Checks room for `len` bytes, announces, and reserves them; returns the start offset.
    fn reserve(&mut self, len: u64) -> Option<u64> {
        let inner = &*self.buf.inner;
        // Relaxed: only the value matters (coherence makes it no older than our own last
        // reservation); the room argument in the crate docs needs nothing more.
        let r = inner.reserved.load(Ordering::Relaxed);
        if !fits(inner, &mut self.cached_min, r, len) {
            return None;
        }
        // Announce `r`: a lower bound of the offset the fetch_add below returns, since
        // `reserved` only grows. Release: a reader loading this value also sees our previous
        // record's bytes (it is a later store of the slot than that record's commit).
        let slot = &inner.writers[self.slot];
        slot.inflight.store(r | BUSY, Ordering::Release);
        // SeqCst fence, paired with the fence in `Inner::frontier`: a reader whose load of
        // `reserved` sees the fetch_add below must see the announcement above (or later).
        fence(Ordering::SeqCst);
        // AcqRel: Acquire joins the release sequence of earlier reservations (so the readers'
        // releases that other writers' room checks relied on happen before our writes); Release
        // passes on our own room check to later writers.
        Some(inner.reserved.fetch_add(len, Ordering::AcqRel))
    }

    /// Publishes the reservation just written: Release, paired with readers' Acquire loads of
    /// `inflight` in `Inner::frontier`.
    fn commit(&self) {
        self.slot().inflight.store(IDLE, Ordering::Release);
    }
}

/// Whether `len` more bytes fit after `r` without reaching space a reader still holds, with
/// the headroom left for concurrent reservations. `cached_min` is the writer's cached cursor.
fn fits(inner: &Inner, cached_min: &mut u64, r: u64, len: u64) -> bool {
    let limit = inner.size - inner.headroom;
    let lag = |c: u64| dist(r, c).max(0) as u64;
    if lag(*cached_min) + len <= limit {
        return true;
    }
    *cached_min = inner.min_cursor(r);
    if lag(*cached_min) + len <= limit {
        return true;
    }
    if inner.has_best_effort {
        inner.skip_best_effort(r);
        *cached_min = inner.min_cursor(r);
        return lag(*cached_min) + len <= limit;
    }
    false
}

/// Writes padding blocks over `[a, a + len)`, which may straddle the end of the buffer.
fn write_padding(inner: &Inner, a: u64, len: usize, ts_ns: u64) {
    let mut off = a;
    let mut rem = len;
    while rem > 0 {
        let piece = pad_piece(rem);
        put(inner, off, &pcapng::padding_head(piece, ts_ns));
        let mut o = off.wrapping_add(24);
        let mut fill = piece - MIN_BLOCK_LEN;
        while fill > 0 {
            let pos = (o & inner.mask) as usize;
            let n = fill.min(inner.size as usize - pos);
            // SAFETY: `pos + n ≤ size`; inside this writer's reservation (see `push`).
            unsafe { inner.bytes_mut(pos, n) }.fill(b' ');
            o = o.wrapping_add(n as u64);
            fill -= n;
        }
        put(
            inner,
            off.wrapping_add(piece as u64 - 8),
            &pcapng::padding_tail(piece),
        );
        off = off.wrapping_add(piece as u64);
        rem -= piece;
    }
}

/// Copies `bytes` to offset `off`, wrapping at the end of the buffer.
fn put(inner: &Inner, off: u64, bytes: &[u8]) {
    let pos = (off & inner.mask) as usize;
    let first = bytes.len().min(inner.size as usize - pos);
    // SAFETY: both ranges are within the buffer and inside this writer's reservation.
    unsafe { inner.bytes_mut(pos, first) }.copy_from_slice(&bytes[..first]);
    if first < bytes.len() {
        // SAFETY: as above, the part past the wrap starts at position 0.
        unsafe { inner.bytes_mut(0, bytes.len() - first) }.copy_from_slice(&bytes[first..]);
    }
}

/// Adds one to a counter only its owner writes (a load and a store, no locked instruction).
#[inline]
fn bump(c: &crate::sync::AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Release: the next owner of the slot continues its counters after ours.
        self.slot().claimed.store(false, Ordering::Release);
    }
}
