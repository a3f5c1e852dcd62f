//! The meter of a live capture (`weir flows -i`, `weir record --flows`): one thread reads the
//! shared packet buffer (`weir_buffer`) as one of its consumers and meters every record, and
//! when traffic pauses it passes the wall clock it is given to [`Meter::tick`] once a second,
//! so idle flows still end. The meter itself never reads a clock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_decode::LinkType;

use crate::meter::{Finished, Meter, RecordSink};

/// Wall time between two [`Meter::tick`]s.
const TICK: Duration = Duration::from_secs(1);
/// How long the thread sleeps when the buffer is empty.
const IDLE: Duration = Duration::from_millis(2);

/// A [`Meter`] reading the packet buffer on its own thread (see the module documentation).
pub struct LiveMeter<S: RecordSink> {
    stop: Arc<AtomicBool>,
    packets: Arc<AtomicU64>,
    thread: JoinHandle<Finished<S>>,
}

/// What [`LiveMeter::finish`] hands back.
pub struct LiveFinished<S: RecordSink> {
    /// Records read from the buffer (every one was handed to the meter).
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
        let (st, pk) = (stop.clone(), packets.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0u64;
            let mut last_tick = Instant::now();
            loop {
                let got = match reader.next_batch() {
                    Some(batch) => {
                        for r in batch.records() {
                            let link = links
                                .get(r.iface() as usize)
                                .copied()
                                .unwrap_or(LinkType::ETHERNET);
                            meter.packet(link, r.ts_ns(), r.data());
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
            thread,
        }
    }

    /// Records metered so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// Once capture has stopped: meters what is left in the buffer, ends every flow and
    /// returns the counters and the sink (to finish by its owner).
    pub fn finish(self) -> LiveFinished<S> {
        self.stop.store(true, Ordering::Release);
        let meter = self
            .thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        LiveFinished {
            packets: self.packets.load(Ordering::Relaxed),
            meter,
        }
    }
}
