//! The capture loop of the live pipeline: one thread per ring reads its blocks in place, puts
//! back VLAN tags the NIC stripped, runs the user-space part of the filter (programs the kernel
//! refuses), slices packets to their headers when asked, and copies each packet into the shared
//! packet buffer ([`weir_buffer`]). It never blocks on a consumer: when the buffer is full the
//! packet is dropped and counted there.
//!
//! Counters are per thread, updated with relaxed stores by their one writer and read by the
//! statistics thread; the kernel's counters (which reset on every read) are accumulated here
//! every [`KERNEL_STATS_PERIOD`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_buffer::{Dropped, Pending};
use weir_decode::SliceLevel;
use weir_filter::Filter;
use weir_packet::LinkType;

use crate::RxRing;

/// How often a capture thread folds the kernel's counters into its own.
pub const KERNEL_STATS_PERIOD: Duration = Duration::from_millis(250);

/// One capture thread's counters. Each field has one writer (its capture thread): plain
/// relaxed load + store, no read-modify-write on the packet path.
#[derive(Debug, Default)]
pub struct FeedCounters {
    /// Packets the kernel queued to this ring, including those it then dropped (accumulated
    /// from PACKET_STATISTICS).
    pub kernel_packets: AtomicU64,
    /// Packets the kernel dropped because this ring was full.
    pub kernel_drops: AtomicU64,
    /// Packets read from the ring.
    pub received: AtomicU64,
    /// Packets the user-space filter rejected.
    pub filtered: AtomicU64,
    /// Packets copied into the buffer.
    pub pushed: AtomicU64,
    /// Their captured bytes.
    pub pushed_bytes: AtomicU64,
    /// Their bytes on the wire.
    pub wire_bytes: AtomicU64,
    /// Packets dropped because the buffer was full.
    pub buffer_full: AtomicU64,
    /// Packets dropped because they were longer than the buffer accepts.
    pub too_long: AtomicU64,
}

/// The counters of one or more capture threads at one moment (see [`FeedCounters`] for what
/// each counts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FeedTotals {
    /// Packets the kernel queued to the rings (dropped ones included).
    pub kernel_packets: u64,
    /// Packets the kernel dropped (ring full).
    pub kernel_drops: u64,
    /// Packets read from the rings (or from the files, when importing).
    pub received: u64,
    /// Packets the user-space filter rejected.
    pub filtered: u64,
    /// Packets copied into the buffer.
    pub pushed: u64,
    /// Their captured bytes.
    pub pushed_bytes: u64,
    /// Their bytes on the wire.
    pub wire_bytes: u64,
    /// Packets dropped: buffer full.
    pub buffer_full: u64,
    /// Packets dropped: longer than the buffer accepts.
    pub too_long: u64,
}

impl std::ops::AddAssign for FeedTotals {
    fn add_assign(&mut self, o: FeedTotals) {
        self.kernel_packets += o.kernel_packets;
        self.kernel_drops += o.kernel_drops;
        self.received += o.received;
        self.filtered += o.filtered;
        self.pushed += o.pushed;
        self.pushed_bytes += o.pushed_bytes;
        self.wire_bytes += o.wire_bytes;
        self.buffer_full += o.buffer_full;
        self.too_long += o.too_long;
    }
}

impl FeedCounters {
    /// The counters now (each read on its own, relaxed: a snapshot taken while the thread runs
    /// is not one instant).
    pub fn load(&self) -> FeedTotals {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FeedTotals {
            kernel_packets: l(&self.kernel_packets),
            kernel_drops: l(&self.kernel_drops),
            received: l(&self.received),
            filtered: l(&self.filtered),
            pushed: l(&self.pushed),
            pushed_bytes: l(&self.pushed_bytes),
            wire_bytes: l(&self.wire_bytes),
            buffer_full: l(&self.buffer_full),
            too_long: l(&self.too_long),
        }
    }
}

fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// What a capture thread does to each packet.
#[derive(Clone, Debug)]
pub struct Feed {
    /// Interface id written in each record (the index of the interface block in the files).
    pub iface: u32,
    /// The interface's link type (for slicing).
    pub link: LinkType,
    /// A filter to run in user space (the kernel refuses programs with backward jumps).
    pub user_filter: Option<Filter>,
    /// Keep only the headers up to this layer.
    pub slice: Option<SliceLevel>,
    /// The buffer's longest packet (longer ones are refused and counted).
    pub max_caplen: usize,
}

/// Longest a capture thread waits, after stop, for the kernel to hand over the packets it has
/// counted (the partly filled block is handed over when its retire timer fires).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Runs one capture thread until `stop` is set: ring blocks → buffer records. Then drains the
/// ring: the kernel stops queueing to it, every packet it already queued (the partly filled
/// block included) is read, and only then are its counters read for the last time, so that
/// `kernel_packets = received + kernel_drops` holds exactly at the end.
pub fn run(
    ring: &mut RxRing,
    writer: &mut weir_buffer::Writer,
    feed: &Feed,
    counters: &FeedCounters,
    stop: &AtomicBool,
) -> Result<(), crate::CaptureError> {
    let mut last_stats = Instant::now();
    let mut tagged = Vec::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        if last_stats.elapsed() >= KERNEL_STATS_PERIOD {
            fold_kernel_stats(ring, counters);
            last_stats = Instant::now();
        }
        if let Some(block) = ring.next_block(50)? {
            take_block(block, writer, feed, counters, &mut tagged);
        }
    }
    drain(ring, writer, feed, counters, &mut tagged)
}

/// The end of a capture thread: see [`run`].
fn drain(
    ring: &mut RxRing,
    writer: &mut weir_buffer::Writer,
    feed: &Feed,
    counters: &FeedCounters,
    tagged: &mut Vec<u8>,
) -> Result<(), crate::CaptureError> {
    if let Err(e) = ring.stop_intake() {
        fold_kernel_stats(ring, counters);
        return Err(e);
    }
    let started = Instant::now();
    // A packet that passed the old filter just before it was replaced may still be on its way
    // into the ring: give it one retire period to land and be counted.
    let settle = Duration::from_millis(u64::from(ring.retire_ms()).max(1));
    let wait_ms = ring.retire_ms().clamp(1, 100) as i32;
    loop {
        while let Some(block) = ring.next_block(0)? {
            take_block(block, writer, feed, counters, tagged);
        }
        fold_kernel_stats(ring, counters);
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let queued = l(&counters.kernel_packets).saturating_sub(l(&counters.kernel_drops));
        let elapsed = started.elapsed();
        if (l(&counters.received) >= queued && elapsed >= settle) || elapsed >= DRAIN_LIMIT {
            return Ok(());
        }
        if let Some(block) = ring.next_block(wait_ms)? {
            take_block(block, writer, feed, counters, tagged);
        }
    }
}

/// Copies the packets of one block into the buffer, counts them, and hands the block back.
fn take_block(
    block: crate::Block<'_>,
    writer: &mut weir_buffer::Writer,
    feed: &Feed,
    counters: &FeedCounters,
    tagged: &mut Vec<u8>,
) {
    let (mut received, mut filtered, mut wire) = (0, 0, 0);
    // Packets go to the buffer in groups (one reservation per group, see
    // `Writer::push_batch`); a packet that needs a copy (a VLAN tag to put back) flushes
    // the group first, so the order is kept.
    let mut pending: Vec<Pending<'_>> = Vec::with_capacity(block.len());
    let mut t = Tally::default();
    for p in block.packets() {
        received += 1;
        match p.vlan {
            // Put back the tag the NIC stripped, after the two MAC addresses.
            Some((tpid, tci)) if p.data.len() >= 12 => {
                tagged.clear();
                tagged.extend_from_slice(&p.data[..12]);
                tagged.extend_from_slice(&tpid.to_be_bytes());
                tagged.extend_from_slice(&tci.to_be_bytes());
                tagged.extend_from_slice(&p.data[12..]);
                let orig_len = p.orig_len + 4;
                if feed
                    .user_filter
                    .as_ref()
                    .is_some_and(|f| !f.matches(tagged, orig_len))
                {
                    filtered += 1;
                    continue;
                }
                let keep = feed.slice.map_or(tagged.len(), |level| {
                    weir_decode::headers_len(feed.link, tagged, level)
                });
                flush(&mut pending, writer, feed.max_caplen, &mut t);
                match writer.push(feed.iface, p.ts_ns, orig_len, &tagged[..keep]) {
                    Ok(()) => {
                        t.pushed += 1;
                        t.bytes += keep as u64;
                    }
                    Err(Dropped::Full) => t.full += 1,
                    Err(Dropped::TooLong) => t.long += 1,
                }
                wire += u64::from(orig_len);
            }
            _ => {
                if feed
                    .user_filter
                    .as_ref()
                    .is_some_and(|f| !f.matches(p.data, p.orig_len))
                {
                    filtered += 1;
                    continue;
                }
                let keep = feed.slice.map_or(p.data.len(), |level| {
                    weir_decode::headers_len(feed.link, p.data, level)
                });
                pending.push(Pending {
                    iface: feed.iface,
                    ts_ns: p.ts_ns,
                    orig_len: p.orig_len,
                    data: &p.data[..keep],
                });
                wire += u64::from(p.orig_len);
            }
        }
    }
    flush(&mut pending, writer, feed.max_caplen, &mut t);
    drop(pending);
    drop(block);
    add(&counters.received, received);
    add(&counters.filtered, filtered);
    add(&counters.pushed, t.pushed);
    add(&counters.pushed_bytes, t.bytes);
    add(&counters.wire_bytes, wire);
    add(&counters.buffer_full, t.full);
    add(&counters.too_long, t.long);
}

/// What happened to the packets of one block.
#[derive(Default)]
struct Tally {
    pushed: u64,
    bytes: u64,
    full: u64,
    long: u64,
}

/// Pushes the pending group and counts the outcome.
fn flush(
    pending: &mut Vec<Pending<'_>>,
    writer: &mut weir_buffer::Writer,
    max_caplen: usize,
    t: &mut Tally,
) {
    if pending.is_empty() {
        return;
    }
    let n = writer.push_batch(pending);
    let oversize = pending.iter().filter(|p| p.data.len() > max_caplen).count() as u64;
    t.pushed += n as u64;
    t.bytes += pending[..n]
        .iter()
        .map(|p| p.data.len() as u64)
        .sum::<u64>();
    t.long += oversize;
    t.full += pending.len() as u64 - n as u64 - oversize;
    pending.clear();
}

fn fold_kernel_stats(ring: &mut RxRing, counters: &FeedCounters) {
    let s = ring.kernel_stats();
    counters.kernel_packets.store(s.packets, Ordering::Relaxed);
    counters.kernel_drops.store(s.drops, Ordering::Relaxed);
}

/// Pins the calling thread to one CPU; a failure only costs locality.
pub fn pin_to_cpu(cpu: usize) {
    // SAFETY: cpu_set_t is plain old data; CPU_ZERO/CPU_SET only write inside it, and
    // sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu % libc::CPU_SETSIZE as usize, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}
