//! The capture loop of the live pipeline: one thread per ring reads its blocks in place, puts
//! back VLAN tags the NIC stripped, runs the user-space part of the filter (programs the kernel
//! refuses), then the rule engine when there are rules (drop, keep whole, cut to
//! `Decision::keep` bytes with the wire length kept, tag: see [`Rules`](crate::Rules)), slices
//! packets to their headers when asked, and copies each packet into the shared
//! packet buffer ([`weir_buffer`]). A tagged packet's record carries the tag as its pcapng
//! comment, `weir-tag=TAG` ([`tag_comment`]). It never blocks on a consumer: when the buffer is full the
//! packet is dropped and counted there.
//!
//! Counters are per thread, updated with relaxed stores by their one writer and read by the
//! statistics thread; the kernel's counters (which reset on every read) are accumulated here
//! every [`KERNEL_STATS_PERIOD`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use weir_buffer::{Dropped, Pending};
use weir_decode::{Decoded, SliceLevel};
use weir_filter::Filter;
use weir_packet::LinkType;
use weir_rules::{Decision, Evaluator, Outcome, Tag};

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
    /// Packets the rules dropped (a `drop` verdict, a per-flow cutoff, or left out by `sample`),
    /// after the filter; not counted in `filtered`.
    pub rules_dropped: AtomicU64,
    /// Packets the rules cut short (a `slice` or a cutoff's last piece).
    pub rules_sliced: AtomicU64,
    /// Packets the rules kept with a tag.
    pub tagged: AtomicU64,
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
    /// Packets the rules dropped after the filter (drop, cutoff, sampled out).
    pub rules_dropped: u64,
    /// Packets the rules cut short.
    pub rules_sliced: u64,
    /// Packets the rules kept with a tag.
    pub tagged: u64,
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
        self.rules_dropped += o.rules_dropped;
        self.rules_sliced += o.rules_sliced;
        self.tagged += o.tagged;
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
            rules_dropped: l(&self.rules_dropped),
            rules_sliced: l(&self.rules_sliced),
            tagged: l(&self.tagged),
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
    /// Store the rules' tags as record comments (else they are only counted).
    pub store_tags: bool,
}

/// The prefix of the pcapng comment that stores a packet's tag: `weir-tag=alert`,
/// `weir-tag=42` (`tshark -T fields -e frame.comment` prints it).
pub const TAG_PREFIX: &str = "weir-tag=";

/// The pcapng comment of a packet tagged `tag` (see [`TAG_PREFIX`]), in `buf`; returns its
/// length.
pub fn tag_comment(tag: &Tag, buf: &mut [u8; 32]) -> usize {
    use std::io::Write;
    let mut w = &mut buf[..];
    // 9 bytes of prefix and at most 15 of tag (or 10 digits) fit in 32.
    let _ = write!(w, "{TAG_PREFIX}{tag}");
    32 - w.len()
}

/// The rules' decision for one packet of `link` (decoded here).
#[inline]
fn decide(ev: &mut Evaluator, link: LinkType, data: &[u8], orig_len: u32) -> Decision {
    let mut scratch = Decoded::new();
    let f = weir_rules::fields_from_frame(&mut scratch, link, data, orig_len);
    ev.eval(&f, data)
}

/// Applies the rules to one packet: `None` when they drop it (counted), else the bytes to keep
/// (at most `keep`) and the tag.
#[inline]
fn apply_rules(
    ev: &mut Evaluator,
    link: LinkType,
    data: &[u8],
    orig_len: u32,
    keep: usize,
    t: &mut Tally,
) -> Option<(usize, Option<Tag>)> {
    let d = decide(ev, link, data, orig_len);
    match d.outcome {
        Outcome::Dropped | Outcome::SampledOut => {
            t.rules_dropped += 1;
            return None;
        }
        Outcome::Sliced => t.rules_sliced += 1,
        Outcome::Passed => {}
    }
    if d.tag.is_some() {
        t.tagged += 1;
    }
    Some((keep.min(d.keep as usize), d.tag))
}

/// Longest a capture thread waits, after stop, for the kernel to hand over the packets it has
/// counted (the partly filled block is handed over when its retire timer fires).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Runs one capture thread until `stop` is set: ring blocks → buffer records. Then drains the
/// ring: the kernel stops queueing to it, every packet it already queued (the partly filled
/// block included) is read, and only then are its counters read for the last time, so that
/// `kernel_packets = received + kernel_drops` holds exactly at the end.
///
/// `rules` is this thread's evaluator of the rule engine, if there are rules.
pub fn run(
    ring: &mut RxRing,
    writer: &mut weir_buffer::Writer,
    feed: &Feed,
    counters: &FeedCounters,
    stop: &AtomicBool,
    rules: &mut Option<Evaluator>,
) -> Result<(), crate::CaptureError> {
    let mut last_stats = Instant::now();
    let mut tagged = Vec::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        if last_stats.elapsed() >= KERNEL_STATS_PERIOD {
            fold_kernel_stats(ring, counters);
            last_stats = Instant::now();
        }
        if let Some(block) = ring.next_block(50)? {
            take_block(block, writer, feed, counters, &mut tagged, rules);
        }
    }
    drain(ring, writer, feed, counters, &mut tagged, rules)
}

/// The end of a capture thread: see [`run`].
fn drain(
    ring: &mut RxRing,
    writer: &mut weir_buffer::Writer,
    feed: &Feed,
    counters: &FeedCounters,
    tagged: &mut Vec<u8>,
    rules: &mut Option<Evaluator>,
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
            take_block(block, writer, feed, counters, tagged, rules);
        }
        fold_kernel_stats(ring, counters);
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let queued = l(&counters.kernel_packets).saturating_sub(l(&counters.kernel_drops));
        let elapsed = started.elapsed();
        if (l(&counters.received) >= queued && elapsed >= settle) || elapsed >= DRAIN_LIMIT {
            return Ok(());
        }
        if let Some(block) = ring.next_block(wait_ms)? {
            take_block(block, writer, feed, counters, tagged, rules);
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
    rules: &mut Option<Evaluator>,
) {
    take_packets(
        block.packets(),
        block.len(),
        writer,
        feed,
        counters,
        tagged,
        rules,
    );
    drop(block);
}

/// Most packets [`take_packets`] gathers before pushing them with one reservation: the group's
/// descriptors stay in L1 between the pass that reads the ring and the pass that writes the
/// buffer (issue 20, session 21: a whole 1 MiB block of 64-byte frames made a 200 KiB list,
/// written cold and read back cold), and one fence and `fetch_add` per 64 packets is
/// nothing per packet.
const GROUP: usize = 64;

/// Copies packets (of one ring block or one AF_XDP batch) into the buffer and counts them.
pub(crate) fn take_packets<'a>(
    packets: impl Iterator<Item = crate::LivePacket<'a>>,
    len: usize,
    writer: &mut weir_buffer::Writer,
    feed: &Feed,
    counters: &FeedCounters,
    tagged: &mut Vec<u8>,
    rules: &mut Option<Evaluator>,
) {
    let (mut received, mut filtered, mut wire) = (0, 0, 0);
    // Packets go to the buffer in groups of at most `GROUP` (one reservation per group, see
    // `Writer::push_batch`); a packet that needs a copy (a VLAN tag to put back) flushes
    // the group first, so the order is kept.
    let mut pending: Vec<Pending<'_>> = Vec::with_capacity(len.min(GROUP));
    let mut t = Tally::default();
    for p in packets {
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
                wire += u64::from(orig_len);
                let mut keep = feed.slice.map_or(tagged.len(), |level| {
                    weir_decode::headers_len(feed.link, tagged, level)
                });
                let mut tag = None;
                if let Some(ev) = rules.as_mut() {
                    match apply_rules(ev, feed.link, tagged, orig_len, keep, &mut t) {
                        None => continue,
                        Some((k, g)) => (keep, tag) = (k, g.filter(|_| feed.store_tags)),
                    }
                }
                flush(&mut pending, writer, feed.max_caplen, &mut t);
                push_one(
                    writer,
                    feed.iface,
                    p.ts_ns,
                    orig_len,
                    &tagged[..keep],
                    tag,
                    &mut t,
                );
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
                wire += u64::from(p.orig_len);
                let mut keep = feed.slice.map_or(p.data.len(), |level| {
                    weir_decode::headers_len(feed.link, p.data, level)
                });
                if let Some(ev) = rules.as_mut() {
                    match apply_rules(ev, feed.link, p.data, p.orig_len, keep, &mut t) {
                        None => continue,
                        Some((k, Some(tag))) if feed.store_tags => {
                            // A record with a comment is pushed on its own, in order.
                            flush(&mut pending, writer, feed.max_caplen, &mut t);
                            push_one(
                                writer,
                                feed.iface,
                                p.ts_ns,
                                p.orig_len,
                                &p.data[..k],
                                Some(tag),
                                &mut t,
                            );
                            continue;
                        }
                        Some((k, _)) => keep = k,
                    }
                }
                pending.push(Pending {
                    iface: feed.iface,
                    ts_ns: p.ts_ns,
                    orig_len: p.orig_len,
                    data: &p.data[..keep],
                });
                if pending.len() == GROUP {
                    flush(&mut pending, writer, feed.max_caplen, &mut t);
                }
            }
        }
    }
    flush(&mut pending, writer, feed.max_caplen, &mut t);
    drop(pending);
    add(&counters.received, received);
    add(&counters.filtered, filtered);
    add(&counters.pushed, t.pushed);
    add(&counters.pushed_bytes, t.bytes);
    add(&counters.wire_bytes, wire);
    add(&counters.buffer_full, t.full);
    add(&counters.too_long, t.long);
    if rules.is_some() {
        add(&counters.rules_dropped, t.rules_dropped);
        add(&counters.rules_sliced, t.rules_sliced);
        add(&counters.tagged, t.tagged);
    }
}

/// Runs one AF_XDP capture thread until `stop` is set: RX batches → buffer records, the
/// socket's `XDP_STATISTICS` folded into `counters` (kernel drops = `rx_dropped +
/// rx_ring_full`; kernel packets = read + kernel drops) and `xdp` every
/// [`KERNEL_STATS_PERIOD`]. Then drains what the RX ring holds (until it stays empty for one
/// poll) and reads the counters for the last time.
pub(crate) fn run_xdp(
    sock: &mut crate::xdp::XskSocket,
    writer: &mut weir_buffer::Writer,
    feed: &Feed,
    counters: &FeedCounters,
    xdp: &crate::xdp::XdpCounters,
    stop: &AtomicBool,
    rules: &mut Option<Evaluator>,
) -> Result<(), crate::CaptureError> {
    let mut last_stats = Instant::now();
    let mut tagged = Vec::with_capacity(256);
    while !stop.load(Ordering::Relaxed) {
        if last_stats.elapsed() >= KERNEL_STATS_PERIOD {
            fold_xdp_stats(sock, counters, xdp)?;
            last_stats = Instant::now();
        }
        if let Some(batch) = sock.next_batch(50)? {
            let n = batch.len();
            take_packets(
                batch.packets(),
                n,
                writer,
                feed,
                counters,
                &mut tagged,
                rules,
            );
        }
    }
    let started = Instant::now();
    while started.elapsed() < DRAIN_LIMIT {
        let Some(batch) = sock.next_batch(10)? else {
            break;
        };
        let n = batch.len();
        take_packets(
            batch.packets(),
            n,
            writer,
            feed,
            counters,
            &mut tagged,
            rules,
        );
    }
    fold_xdp_stats(sock, counters, xdp)
}

fn fold_xdp_stats(
    sock: &crate::xdp::XskSocket,
    counters: &FeedCounters,
    xdp: &crate::xdp::XdpCounters,
) -> Result<(), crate::CaptureError> {
    let s = sock.stats()?;
    xdp.store(&s);
    let received = counters.received.load(Ordering::Relaxed);
    counters
        .kernel_packets
        .store(received + s.drops(), Ordering::Relaxed);
    counters.kernel_drops.store(s.drops(), Ordering::Relaxed);
    Ok(())
}

/// Pushes one packet on its own, with its tag as the record's comment, and counts the outcome.
fn push_one(
    writer: &mut weir_buffer::Writer,
    iface: u32,
    ts_ns: u64,
    orig_len: u32,
    data: &[u8],
    tag: Option<Tag>,
    t: &mut Tally,
) {
    let mut buf = [0u8; 32];
    let n = tag.map_or(0, |g| tag_comment(&g, &mut buf));
    match writer.push_commented(iface, ts_ns, orig_len, data, &buf[..n]) {
        Ok(()) => {
            t.pushed += 1;
            t.bytes += data.len() as u64;
        }
        Err(Dropped::Full) => t.full += 1,
        Err(Dropped::TooLong) => t.long += 1,
    }
}

/// What happened to the packets of one block.
#[derive(Default)]
struct Tally {
    pushed: u64,
    bytes: u64,
    full: u64,
    long: u64,
    rules_dropped: u64,
    rules_sliced: u64,
    tagged: u64,
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
