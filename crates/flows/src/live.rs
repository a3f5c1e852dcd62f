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
/// How long the thread sleeps when the buffer is empty.
const IDLE: Duration = Duration::from_millis(2);
/// How often [`meter_live`] looks whether it should stop.
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
pub struct LiveMeter<S: RecordSink> {
    stop: Arc<AtomicBool>,
    packets: Arc<AtomicU64>,
    table: Arc<std::sync::Mutex<Option<(u64, crate::MeterStats)>>>,
    swaps: std::sync::mpsc::Sender<Replace<S>>,
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
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            let mut last_tick = Instant::now();
            loop {
                // between two batches: every packet before goes to the old meter, every one
                // after to the new
                if let Ok(next) = swap_rx.try_recv() {
                    let old = Metered {
                        packets: n,
                        meter: meter.finish(),
                    };
                    meter = next(old);
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
                    std::thread::sleep(IDLE);
                }
            }
            meter.finish()
        });
        LiveMeter {
            stop,
            packets,
            table,
            swaps,
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
        let buffer = weir_buffer::PacketBuffer::new(4 << 20, 1).unwrap();
        let cfg = Config {
            seed: Some(1),
            ..Config::default()
        };
        let live = LiveMeter::spawn(
            Meter::new(&cfg, Vec::<FlowRecord>::new()),
            buffer.reader(0).unwrap(),
            vec![LinkType::IPV4],
            || 0,
        );
        // raw IPv4: 10.0.0.1:1000 -> 10.0.0.2:53 over UDP, 32 bytes
        let q = [
            0x45u8, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x03, 0xe8, 0,
            53, 0, 12, 0, 0, 1, 2, 3, 4,
        ];
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

    /// A record whose comment is a rules tag is metered with it; other comments are ignored.
    #[test]
    fn a_record_comment_tags_its_flow() {
        let buffer = weir_buffer::PacketBuffer::new(4 << 20, 1).unwrap();
        let cfg = Config {
            seed: Some(1),
            ..Config::default()
        };
        let live = LiveMeter::spawn(
            Meter::new(&cfg, Vec::<FlowRecord>::new()),
            buffer.reader(0).unwrap(),
            vec![LinkType::IPV4],
            || 0,
        );
        let q = [
            0x45u8, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x03, 0xe8, 0,
            53, 0, 12, 0, 0, 1, 2, 3, 4,
        ];
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
