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

use weir_buffer::Dropped;
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
}

/// Runs one capture thread until `stop` is set: ring blocks → buffer records.
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
        let Some(block) = ring.next_block(50)? else {
            continue;
        };
        let (mut received, mut filtered, mut pushed, mut bytes, mut wire) = (0, 0, 0, 0, 0);
        let (mut full, mut long) = (0, 0);
        for p in block.packets() {
            received += 1;
            let mut orig_len = p.orig_len;
            // Put back the tag the NIC stripped, after the two MAC addresses.
            let (head, tail): (&[u8], &[u8]) = match p.vlan {
                Some((tpid, tci)) if p.data.len() >= 12 => {
                    tagged.clear();
                    tagged.extend_from_slice(&p.data[..12]);
                    tagged.extend_from_slice(&tpid.to_be_bytes());
                    tagged.extend_from_slice(&tci.to_be_bytes());
                    orig_len += 4;
                    (&tagged, &p.data[12..])
                }
                _ => (p.data, &[]),
            };
            if feed.user_filter.is_some() || feed.slice.is_some() {
                let whole: std::borrow::Cow<'_, [u8]> = if tail.is_empty() {
                    head.into()
                } else {
                    [head, tail].concat().into()
                };
                if feed
                    .user_filter
                    .as_ref()
                    .is_some_and(|f| !f.matches(&whole, orig_len))
                {
                    filtered += 1;
                    continue;
                }
                let keep = match feed.slice {
                    Some(level) => weir_decode::headers_len(feed.link, &whole, level),
                    None => whole.len(),
                };
                push(
                    writer,
                    feed.iface,
                    p.ts_ns,
                    orig_len,
                    &[&whole[..keep]],
                    (&mut pushed, &mut bytes, &mut full, &mut long),
                );
            } else {
                push(
                    writer,
                    feed.iface,
                    p.ts_ns,
                    orig_len,
                    &[head, tail],
                    (&mut pushed, &mut bytes, &mut full, &mut long),
                );
            }
            wire += u64::from(orig_len);
        }
        drop(block);
        add(&counters.received, received);
        add(&counters.filtered, filtered);
        add(&counters.pushed, pushed);
        add(&counters.pushed_bytes, bytes);
        add(&counters.wire_bytes, wire);
        add(&counters.buffer_full, full);
        add(&counters.too_long, long);
    }
    fold_kernel_stats(ring, counters);
    Ok(())
}

fn push(
    writer: &mut weir_buffer::Writer,
    iface: u32,
    ts_ns: u64,
    orig_len: u32,
    parts: &[&[u8]],
    (pushed, bytes, full, long): (&mut u64, &mut u64, &mut u64, &mut u64),
) {
    match writer.push_parts(iface, ts_ns, orig_len, parts) {
        Ok(()) => {
            *pushed += 1;
            *bytes += parts.iter().map(|p| p.len() as u64).sum::<u64>();
        }
        Err(Dropped::Full) => *full += 1,
        Err(Dropped::TooLong) => *long += 1,
    }
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
