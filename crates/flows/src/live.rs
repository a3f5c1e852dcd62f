//! The meter of a live capture (`weir flows -i`, `weir record --flows`): one thread reads the
//! shared packet buffer (`weir_buffer`) as one of its consumers and meters every record, and
//! when traffic pauses it passes the wall clock it is given ([`wall_clock_ns`]) to
//! [`Meter::tick`] once a second, so idle flows still end. The meter itself never reads a clock.
//!
//! A record whose comment is a rules tag (`weir-tag=TAG`, [`comment_tag`]) is metered with
//! that tag ([`Meter::packet_tagged`]): `weir flows -i --rules` exports it with the flow.
//!
//! [`meter_live`] is the whole of `weir flows -i` once its capture pipeline runs: meter until
//! told to stop, stop the capture, meter what is left, and hand back every stage's counters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use weir_buffer::BufferError;
use weir_capture::{CaptureError, Pipeline, Totals};
use weir_decode::LinkType;

use crate::meter::{Finished, Meter, RecordSink};
use crate::record::Tag;

/// Wall time between two [`Meter::tick`]s.
const TICK: Duration = Duration::from_secs(1);
/// How often [`meter_live`] looks whether it should stop (the stop flag is set by a signal
/// handler, which cannot wake a waiter): ten wake-ups a second of the calling thread.
const POLL: Duration = Duration::from_millis(100);

/// The wall clock, ns since the epoch (0 before it): the time a live meter expires flows by
/// when traffic pauses.
pub fn wall_clock_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The tag in a buffer record's comment (`weir-tag=TAG`, written by a capture thread whose rules
/// tagged the packet: [`weir_capture::tag_comment`]); `None` for any other comment.
pub fn comment_tag(comment: &[u8]) -> Option<Tag> {
    let text = comment.strip_prefix(weir_capture::TAG_PREFIX.as_bytes())?;
    Tag::text(std::str::from_utf8(text).ok()?)
}

/// A [`Meter`] reading the packet buffer on its own thread (see the module documentation).
///
/// With nothing new in the buffer the thread waits on the reader's doorbell
/// ([`weir_buffer::Reader::wait_more`]) until capture hands over [`weir_buffer::WAKE_BYTES`]
/// more or its next tick is due; [`finish`](Self::finish), [`replace`](Self::replace) and a
/// [`TopFlowsHandle::top`] wake it at once. (Session 21: it slept 2 ms at a time, ≈ 500
/// wake-ups a second with no traffic.)
pub struct LiveMeter<S: RecordSink> {
    stop: Arc<AtomicBool>,
    waker: weir_buffer::Waker,
    packets: Arc<AtomicU64>,
    table: Arc<std::sync::Mutex<Option<(u64, crate::MeterStats)>>>,
    swaps: std::sync::mpsc::Sender<Replace<S>>,
    tops: std::sync::mpsc::Sender<TopAsk>,
    thread: JoinHandle<Finished<S>>,
}

/// What [`LiveMeter::replace`] runs on the meter's thread: the current meter's end in, the
/// meter that goes on out.
pub type Replace<S> = Box<dyn FnOnce(Metered<S>) -> Meter<S> + Send>;

/// What a finished meter run hands back ([`LiveMeter::finish`], [`FileMeter::finish`](crate::FileMeter::finish)).
pub struct Metered<S: RecordSink> {
    /// Packets read: from the buffer live (every one was handed to the meter), from the files
    /// (matching the filter or not) otherwise.
    pub packets: u64,
    /// The meter's counters and sink.
    pub meter: Finished<S>,
}

impl<S: RecordSink> LiveMeter<S> {
    /// Starts metering the records of `reader` on a new thread. `links` gives the link type of
    /// each interface index of the buffer's records (Ethernet beyond it); `now_ns` is the wall
    /// clock (ns since the epoch) that expires flows when no packet comes.
    pub fn spawn(
        mut meter: Meter<S>,
        mut reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        now_ns: fn() -> u64,
    ) -> LiveMeter<S> {
        let stop = Arc::new(AtomicBool::new(false));
        let packets = Arc::new(AtomicU64::new(0));
        let table = Arc::new(std::sync::Mutex::new(None));
        let (st, pk, tb) = (stop.clone(), packets.clone(), table.clone());
        let (swaps, swap_rx) = std::sync::mpsc::channel::<Replace<S>>();
        let (tops, top_rx) = std::sync::mpsc::channel::<TopAsk>();
        let waker = reader.waker();
        let thread = std::thread::Builder::new()
            .name("flow-meter".into())
            .spawn(move || {
                let mut n = 0u64;
                let mut last_tick = Instant::now();
                let mut base = TopBase::new();
                loop {
                    // between two batches, like a swap: the table is read, never changed
                    while let Ok(ask) = top_rx.try_recv() {
                        let _ = ask.reply.send(base.rank(&meter, ask.n, ask.by));
                    }
                    // between two batches: every packet before goes to the old meter, every one
                    // after to the new
                    if let Ok(next) = swap_rx.try_recv() {
                        let old = Metered {
                            packets: n,
                            meter: meter.finish(),
                        };
                        meter = next(old);
                        base = TopBase::new();
                        n = 0;
                        pk.store(0, Ordering::Relaxed);
                        *tb.lock().unwrap_or_else(|e| e.into_inner()) = None;
                    }
                    let got = match reader.next_batch() {
                        Some(batch) => {
                            for r in batch.records() {
                                let link = links
                                    .get(r.iface() as usize)
                                    .copied()
                                    .unwrap_or(LinkType::ETHERNET);
                                let tag = r.comment().and_then(comment_tag);
                                meter.packet_tagged(link, r.ts_ns(), r.data(), tag.as_ref());
                                n += 1;
                            }
                            batch.release();
                            pk.store(n, Ordering::Relaxed);
                            true
                        }
                        None => false,
                    };
                    if last_tick.elapsed() >= TICK {
                        meter.tick(now_ns());
                        last_tick = Instant::now();
                        let now = meter.table_now();
                        *tb.lock().unwrap_or_else(|e| e.into_inner()) = now;
                    }
                    if !got {
                        if st.load(Ordering::Acquire) && reader.next_batch().is_none() {
                            break;
                        }
                        // until more is handed over, the next tick, or a stop or request wakes us
                        reader.wait_more(last_tick + TICK);
                    }
                }
                meter.finish()
            });
        // as std::thread::spawn: the one way it fails is the system's limit on threads
        let thread = thread.expect("cannot start the flow meter's thread");
        LiveMeter {
            stop,
            waker,
            packets,
            table,
            swaps,
            tops,
            thread,
        }
    }

    /// Replaces the meter between two batches of the buffer, with no packet lost or metered
    /// twice: on the meter's thread, the current meter ends every flow and `next` gets its end
    /// (its packets and [`Finished`] counters and sink, to finish) and returns the meter that
    /// meters the packets from there on ([`packets`](Self::packets) starts again from 0).
    /// Packets wait in the buffer meanwhile (the reader is best-effort: a long wait is a skip,
    /// counted by the buffer).
    pub fn replace(&self, next: Replace<S>) {
        // the thread only ends in finish(), which takes self
        let _ = self.swaps.send(next);
        self.waker.wake();
    }

    /// A handle that ranks the open flows on the meter's thread ([`TopFlowsHandle::top`]);
    /// it outlives a [`replace`](Self::replace) (the thread is the same).
    pub fn top_handle(&self) -> TopFlowsHandle {
        TopFlowsHandle {
            tops: self.tops.clone(),
            waker: self.waker.clone(),
        }
    }

    /// Records metered so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// The flow table as of the last tick (a fraction of a second ago): flows held and the
    /// meter's counters so far ([`Meter::table_now`]; `None` with worker threads).
    pub fn table(&self) -> Option<(u64, crate::MeterStats)> {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Once capture has stopped: meters what is left in the buffer, ends every flow and
    /// returns the counters and the sink (to finish by its owner).
    pub fn finish(self) -> Metered<S> {
        self.stop.store(true, Ordering::Release);
        self.waker.wake();
        let meter = self
            .thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        Metered {
            packets: self.packets.load(Ordering::Relaxed),
            meter,
        }
    }
}

/// What a ranking of flows orders by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopBy {
    /// IP bytes (both directions).
    Bytes,
    /// Packets (both directions).
    Packets,
}

/// One open flow of a ranking ([`TopFlows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopFlow {
    /// The flow, the initiator as source.
    pub key: crate::FlowKey,
    /// Packets both ways since the flow started.
    pub packets: u64,
    /// IP bytes both ways since the flow started.
    pub bytes: u64,
    /// Packets over the interval ([`TopFlows::interval_s`]).
    pub interval_packets: u64,
    /// Bytes over the interval.
    pub interval_bytes: u64,
    /// Its first packet's time, ns since the epoch.
    pub start_ns: u64,
}

/// The biggest open flows of a live meter ([`TopFlowsHandle::top`]). Flows already ended
/// (exported) are not in it.
#[derive(Clone, Debug, PartialEq)]
pub struct TopFlows {
    /// Flows open.
    pub open: u64,
    /// Seconds the interval covers: since the latest earlier ranking at least a second old
    /// (since the meter started while there is none); a flow that started within it counts
    /// whole.
    pub interval_s: f64,
    /// The biggest over the interval, biggest first (ties: the older flow first); flows with
    /// nothing in the interval are left out.
    pub interval: Vec<TopFlow>,
    /// The biggest since they started, biggest first.
    pub since_start: Vec<TopFlow>,
}

/// Why a ranking could not be had.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TopError {
    /// The meter runs on worker threads: their tables are theirs.
    #[error("the flow meter runs on several threads: no live ranking of its flows")]
    Sharded,
    /// The meter's thread has ended.
    #[error("the flow meter has stopped")]
    Stopped,
    /// The meter's thread did not answer in time (a very long batch).
    #[error("the flow meter did not answer within {0:?}")]
    Late(Duration),
}

struct TopAsk {
    n: usize,
    by: TopBy,
    reply: std::sync::mpsc::SyncSender<Result<TopFlows, TopError>>,
}

/// Asks a [`LiveMeter`]'s thread for its biggest open flows (see [`LiveMeter::top_handle`]).
#[derive(Clone, Debug)]
pub struct TopFlowsHandle {
    tops: std::sync::mpsc::Sender<TopAsk>,
    waker: weir_buffer::Waker,
}

impl TopFlowsHandle {
    /// The `n` biggest open flows by `by`, over the last interval and since they started,
    /// ranked on the meter's thread between two batches (one walk of the table: O(flows
    /// held), nothing added to the packet path). Waits at most `wait` for the answer.
    pub fn top(&self, n: usize, by: TopBy, wait: Duration) -> Result<TopFlows, TopError> {
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        self.tops
            .send(TopAsk { n, by, reply })
            .map_err(|_| TopError::Stopped)?;
        self.waker.wake();
        rx.recv_timeout(wait).map_err(|e| match e {
            std::sync::mpsc::RecvTimeoutError::Timeout => TopError::Late(wait),
            std::sync::mpsc::RecvTimeoutError::Disconnected => TopError::Stopped,
        })?
    }
}

/// Per slot of a flow table: (start_ns, packets, bytes) of its flow at a ranking; start 0:
/// nothing.
type SlotCounts = Vec<(u64, u64, u64)>;

/// The counters each open flow had at the ranking the interval starts from, by slot.
struct TopBase {
    at: Instant,
    slots: SlotCounts,
    /// No ranking is a second old yet: the interval starts with the meter.
    first: bool,
    /// The latest ranking's counters, while younger than a second (then the base).
    pending: Option<(Instant, SlotCounts)>,
}

/// A ranked flow: its value, its start (older first on ties) and its slot.
type Ranked = (u64, std::cmp::Reverse<u64>, u32);

/// The `n` largest of a stream of values, kept in a min-heap.
struct Best {
    n: usize,
    heap: std::collections::BinaryHeap<std::cmp::Reverse<Ranked>>,
}

impl Best {
    fn new(n: usize) -> Best {
        Best {
            n,
            heap: std::collections::BinaryHeap::with_capacity(n.min(1 << 16) + 1),
        }
    }

    /// Offers `v` for the flow at `slot` starting at `start` (older first on ties).
    fn offer(&mut self, v: u64, start: u64, slot: u32) {
        if self.n == 0 {
            return;
        }
        let item = std::cmp::Reverse((v, std::cmp::Reverse(start), slot));
        if self.heap.len() < self.n {
            self.heap.push(item);
        } else if self.heap.peek().is_some_and(|min| item < *min) {
            self.heap.pop();
            self.heap.push(item);
        }
    }

    /// The slots kept, biggest first.
    fn slots(self) -> Vec<u32> {
        let mut v: Vec<_> = self.heap.into_iter().map(|r| r.0).collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.into_iter().map(|(_, _, slot)| slot).collect()
    }
}

impl TopBase {
    fn new() -> TopBase {
        TopBase {
            at: Instant::now(),
            slots: Vec::new(),
            first: true,
            pending: None,
        }
    }

    fn rank<S: RecordSink>(
        &mut self,
        meter: &Meter<S>,
        n: usize,
        by: TopBy,
    ) -> Result<TopFlows, TopError> {
        if self.pending.as_ref().is_some_and(|p| p.0.elapsed() >= TICK) {
            if let Some((at, slots)) = self.pending.take() {
                (self.at, self.slots, self.first) = (at, slots, false);
            }
        }
        let renew = self.pending.is_none();
        let mut next: SlotCounts = Vec::new();
        let mut flows: std::collections::HashMap<u32, TopFlow> = std::collections::HashMap::new();
        let (mut by_interval, mut by_total) = (Best::new(n), Best::new(n));
        let mut open = 0u64;
        let mut all: Vec<(u32, TopFlow)> = Vec::new();
        let walked = meter.each_open(&mut |f| {
            open += 1;
            let (ip, ib) = match self.slots.get(f.slot as usize) {
                Some(&(start, p, b)) if start == f.start_ns && !self.first => {
                    (f.packets.saturating_sub(p), f.bytes.saturating_sub(b))
                }
                _ => (f.packets, f.bytes),
            };
            let pick = |p: u64, b: u64| match by {
                TopBy::Bytes => b,
                TopBy::Packets => p,
            };
            if ip + ib > 0 {
                by_interval.offer(pick(ip, ib), f.start_ns, f.slot);
            }
            by_total.offer(pick(f.packets, f.bytes), f.start_ns, f.slot);
            if renew {
                let i = f.slot as usize;
                if next.len() <= i {
                    next.resize(i + 1, (0, 0, 0));
                }
                next[i] = (f.start_ns, f.packets, f.bytes);
            }
            all.push((
                f.slot,
                TopFlow {
                    key: f.key,
                    packets: f.packets,
                    bytes: f.bytes,
                    interval_packets: ip,
                    interval_bytes: ib,
                    start_ns: f.start_ns,
                },
            ));
            // keep only what a ranking can still pick: the memory stays O(n)
            if all.len() >= 4 * n.max(1024) {
                let keep: std::collections::HashSet<u32> = by_interval
                    .heap
                    .iter()
                    .chain(by_total.heap.iter())
                    .map(|r| r.0 .2)
                    .collect();
                all.retain(|(s, _)| keep.contains(s));
            }
        });
        if !walked {
            return Err(TopError::Sharded);
        }
        flows.extend(all);
        let interval_s = self.at.elapsed().as_secs_f64();
        let pick = |slots: Vec<u32>| -> Vec<TopFlow> {
            slots.iter().filter_map(|s| flows.get(s).copied()).collect()
        };
        let top = TopFlows {
            open,
            interval_s,
            interval: pick(by_interval.slots()),
            since_start: pick(by_total.slots()),
        };
        if renew {
            self.pending = Some((Instant::now(), next));
        }
        Ok(top)
    }
}

/// Why [`meter_live`] could not run or end cleanly.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The meter's reader of the packet buffer could not be had.
    #[error(transparent)]
    Reader(#[from] BufferError),
    /// A capture thread failed.
    #[error(transparent)]
    Capture(#[from] CaptureError),
}

/// What [`meter_live`] hands back.
pub struct LiveRun<S: RecordSink> {
    /// The records metered, the meter's counters and its sink.
    pub metered: Metered<S>,
    /// Every capture stage's counters once capture stopped.
    pub capture: Totals,
    /// The packet buffer's counters once capture stopped.
    pub buffer: weir_buffer::Stats,
}

/// Meters the records of a running capture `pipeline` with `meter`, as the buffer's consumer
/// number `reader`, on a thread of its own ([`LiveMeter`], the wall clock expiring flows when
/// traffic pauses), until `stop` is set, `duration` has passed or a capture thread has ended;
/// then stops the capture, meters what is left in the buffer, ends every flow and returns the
/// counters of every stage. A capture thread's error is the result (after the meter finished).
pub fn meter_live<S: RecordSink>(
    pipeline: &mut Pipeline,
    reader: usize,
    meter: Meter<S>,
    stop: &AtomicBool,
    duration: Option<Duration>,
) -> Result<LiveRun<S>, LiveError> {
    meter_live_polling(pipeline, reader, meter, stop, duration, || {})
}

/// [`meter_live`], calling `poll` on the calling thread about ten times a second while capture
/// runs (`weir flows --rules` reloads its rules there on SIGHUP).
pub fn meter_live_polling<S: RecordSink>(
    pipeline: &mut Pipeline,
    reader: usize,
    meter: Meter<S>,
    stop: &AtomicBool,
    duration: Option<Duration>,
    mut poll: impl FnMut(),
) -> Result<LiveRun<S>, LiveError> {
    let links = pipeline.interfaces().iter().map(|i| i.link).collect();
    let live = LiveMeter::spawn(
        meter,
        pipeline.buffer().reader(reader)?,
        links,
        wall_clock_ns,
    );
    let deadline = duration.map(|d| Instant::now() + d);
    while !stop.load(Ordering::Relaxed)
        && !pipeline.failed()
        && deadline.is_none_or(|d| Instant::now() < d)
    {
        poll();
        std::thread::sleep(POLL);
    }
    let stopped = pipeline.stop();
    let (capture, buffer) = (pipeline.counters().totals(), pipeline.buffer().stats());
    let metered = live.finish();
    stopped?;
    Ok(LiveRun {
        metered,
        capture,
        buffer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Config, FlowRecord};

    /// Raw IPv4: 10.0.0.1:1000 -> 10.0.0.2:53 over UDP, 32 bytes.
    const UDP_QUERY: [u8; 32] = [
        0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x03, 0xe8, 0, 53, 0,
        12, 0, 0, 1, 2, 3, 4,
    ];

    /// The meter's default settings with a fixed seed.
    fn seeded() -> Config {
        Config {
            seed: Some(1),
            ..Config::default()
        }
    }

    /// A packet buffer and a live meter (raw IPv4 link, fixed seed) reading its one ring.
    fn meter_on_a_buffer() -> (weir_buffer::PacketBuffer, LiveMeter<Vec<FlowRecord>>) {
        let buffer = weir_buffer::PacketBuffer::new(4 << 20, 1).unwrap();
        let live = LiveMeter::spawn(
            Meter::new(&seeded(), Vec::<FlowRecord>::new()),
            buffer.reader(0).unwrap(),
            vec![LinkType::IPV4],
            || 0,
        );
        (buffer, live)
    }

    #[test]
    fn the_wall_clock_is_in_ns_since_the_epoch() {
        let s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let ns = wall_clock_ns();
        assert!(
            ns / 1_000_000_000 >= s && ns / 1_000_000_000 <= s + 1,
            "{ns} vs {s} s"
        );
    }

    /// Records written into a buffer are metered by the live thread, the pending flows ended
    /// by `finish`: one flow of three packets, hand-counted.
    #[test]
    fn records_in_the_buffer_are_metered() {
        let (buffer, live) = meter_on_a_buffer();
        let q = UDP_QUERY;
        let mut w = buffer.writer().unwrap();
        for t in 1..=3u64 {
            w.push(0, t * 1000, q.len() as u32, &q).unwrap();
        }
        drop(w);
        let done = live.finish();
        assert_eq!(done.packets, 3);
        assert_eq!(done.meter.stats.metered, 3);
        let recs = done.meter.sink;
        assert_eq!(recs.len(), 1);
        let r = recs[0];
        assert_eq!((r.key.src_port, r.key.dst_port), (1000, 53));
        assert_eq!(
            (
                r.forward.packets,
                r.forward.bytes,
                r.forward.first_ns,
                r.forward.last_ns
            ),
            (3, 96, 1000, 3000)
        );
    }

    /// The ranking of open flows: three flows of 5, 3 and 1 packets (by hand), biggest first
    /// by packets and by bytes; a second ranking within the second sees nothing new in its
    /// interval; the handle still answers after the meter is replaced, and says when it ended.
    #[test]
    fn the_biggest_open_flows_are_ranked_on_the_meters_thread() {
        let (buffer, live) = meter_on_a_buffer();
        let q = UDP_QUERY;
        let mut w = buffer.writer().unwrap();
        let mut t = 1000;
        // flow to .2: 5 packets of 32 bytes; to .3: 3 of 32; to .4: 1 of 32 + 200 bytes
        for (dst, count) in [(2u8, 5), (3, 3)] {
            let mut p = q;
            p[19] = dst;
            for _ in 0..count {
                w.push(0, t, 32, &p).unwrap();
                t += 1000;
            }
        }
        let mut big = vec![0u8; 232];
        big[..32].copy_from_slice(&q);
        big[2..4].copy_from_slice(&232u16.to_be_bytes());
        big[19] = 4;
        w.push(0, t, 232, &big).unwrap();
        drop(w);
        let h = live.top_handle();
        let wait = Duration::from_secs(10);
        let dst = |f: &TopFlow| f.key.dst.to_string();
        let mut top = h.top(2, TopBy::Packets, wait).unwrap();
        while top.since_start.iter().map(|f| f.packets).sum::<u64>() < 8 {
            std::thread::sleep(Duration::from_millis(5));
            top = h.top(2, TopBy::Packets, wait).unwrap();
        }
        assert_eq!(top.open, 3);
        let got: Vec<(String, u64, u64)> = top
            .since_start
            .iter()
            .map(|f| (dst(f), f.packets, f.bytes))
            .collect();
        assert_eq!(
            got,
            [("10.0.0.2".into(), 5, 160), ("10.0.0.3".into(), 3, 96)]
        );
        let bytes = h.top(3, TopBy::Bytes, wait).unwrap();
        let order: Vec<String> = bytes.since_start.iter().map(dst).collect();
        assert_eq!(order, ["10.0.0.4", "10.0.0.2", "10.0.0.3"]);
        assert_eq!(bytes.since_start[0].bytes, 232);
        for f in &bytes.interval {
            assert!(f.interval_packets <= f.packets && f.interval_bytes <= f.bytes);
        }
        // nothing came since: once a ranking a second old is the base, the interval is empty
        let mut quiet = h.top(3, TopBy::Bytes, wait).unwrap();
        while !quiet.interval.is_empty() {
            std::thread::sleep(Duration::from_millis(50));
            quiet = h.top(3, TopBy::Bytes, wait).unwrap();
        }
        assert_eq!(quiet.since_start.len(), 3);
        live.replace(Box::new(move |old| {
            assert_eq!(old.packets, 9);
            Meter::new(&seeded(), old.meter.sink)
        }));
        let mut after = h.top(3, TopBy::Bytes, wait).unwrap();
        while after.open != 0 {
            after = h.top(3, TopBy::Bytes, wait).unwrap();
        }
        assert!(after.since_start.is_empty());
        let done = live.finish();
        assert_eq!(done.meter.sink.len(), 3);
        assert_eq!(h.top(3, TopBy::Bytes, wait), Err(TopError::Stopped));
    }

    /// A record whose comment is a rules tag is metered with it; other comments are ignored.
    #[test]
    fn a_record_comment_tags_its_flow() {
        let (buffer, live) = meter_on_a_buffer();
        let q = UDP_QUERY;
        let mut other = q;
        other[19] = 3; // to 10.0.0.3: another flow
        let mut w = buffer.writer().unwrap();
        w.push_commented(0, 1000, 32, &q, b"weir-tag=lab").unwrap();
        w.push(0, 2000, 32, &q).unwrap();
        w.push_commented(0, 3000, 32, &other, b"not a tag").unwrap();
        drop(w);
        let done = live.finish();
        let mut tags: Vec<(std::net::IpAddr, Option<String>)> = done
            .meter
            .sink
            .iter()
            .map(|r| (r.key.dst, r.tag.map(|t| t.to_string())))
            .collect();
        tags.sort();
        assert_eq!(
            tags,
            [
                ("10.0.0.2".parse().unwrap(), Some("lab".to_string())),
                ("10.0.0.3".parse().unwrap(), None)
            ]
        );
    }
}
