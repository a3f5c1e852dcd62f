//! The analyzer of a live capture (`weir http -i`, `weir record --http`): one thread reads the
//! shared packet buffer (`weir_buffer`) as one of its consumers, hands every record to an
//! [`Analyzer`] and writes what it finds through a [`LogWriter`]. Once a second it ends the
//! connections idle longer than the timeout by the wall clock ([`Analyzer::tick`]), so a quiet
//! link still gets its records, and writes the lines gathered so far (whole lines only).
//! [`LiveAnalyzer::finish`], once capture has stopped, reads what is left in the buffer, ends
//! every connection (their pending transactions are written) and flushes.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use weir_decode::LinkType;

use crate::log::LogWriter;
use crate::{Analyzer, Stats};

/// Wall time between two ticks. With nothing new in the buffer the thread waits on the
/// reader's doorbell ([`weir_buffer::Reader::wait_more`]) until capture hands over more or the
/// next tick is due; [`LiveAnalyzer::finish`] wakes it at once. (Session 21: it slept 2 ms at a
/// time, ≈ 500 wake-ups a second with no traffic.)
const TICK: Duration = Duration::from_secs(1);

fn wall_clock_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Writes `events` (emptied), keeping the first error and writing nothing after it.
fn write<W: Write>(
    writer: &mut LogWriter<W>,
    events: &mut Vec<crate::Event>,
    error: &mut Option<std::io::Error>,
) {
    for e in events.drain(..) {
        if error.is_none() {
            *error = writer.write(&e).err();
        }
    }
}

/// What a live run hands back.
#[derive(Debug)]
pub struct LiveEnd {
    /// The analyzer's counters.
    pub stats: Stats,
    /// Records read from the buffer.
    pub packets: u64,
    /// The first write error; the analyzer kept reading (and counting) after it.
    pub error: Option<std::io::Error>,
}

/// Which records of the buffer the analyzer reads (the others are passed over): given each
/// record's interface index, its bytes and its length on the wire.
pub type Keep = Box<dyn FnMut(u32, &[u8], u32) -> bool + Send>;

/// An [`Analyzer`] reading the packet buffer on its own thread.
pub struct LiveAnalyzer {
    stop: Arc<AtomicBool>,
    waker: weir_buffer::Waker,
    packets: Arc<AtomicU64>,
    stats: Arc<Mutex<Stats>>,
    thread: JoinHandle<LiveEnd>,
}

impl LiveAnalyzer {
    /// Starts analyzing the records of `reader` on a new thread; `links` gives the link type
    /// of each interface index (Ethernet beyond it).
    pub fn spawn<W: Write + Send + 'static>(
        analyzer: Analyzer,
        reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        writer: LogWriter<W>,
    ) -> std::io::Result<LiveAnalyzer> {
        Self::spawn_filtered(analyzer, reader, links, writer, None)
    }

    /// [`LiveAnalyzer::spawn`] reading only the records `keep` accepts (all with `None`).
    pub fn spawn_filtered<W: Write + Send + 'static>(
        mut analyzer: Analyzer,
        mut reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        mut writer: LogWriter<W>,
        mut keep: Option<Keep>,
    ) -> std::io::Result<LiveAnalyzer> {
        let stop = Arc::new(AtomicBool::new(false));
        let packets = Arc::new(AtomicU64::new(0));
        let stats = Arc::new(Mutex::new(Stats::default()));
        let (st, pk, shared) = (stop.clone(), packets.clone(), stats.clone());
        let waker = reader.waker();
        let thread = std::thread::Builder::new()
            .name("http".into())
            .spawn(move || {
                let mut n = 0u64;
                let mut error: Option<std::io::Error> = None;
                let mut last_tick = Instant::now();
                let mut events = Vec::new();
                loop {
                    // set before this read: an empty read after it means all is read
                    let stopping = st.load(Ordering::Acquire);
                    let got = match reader.next_batch() {
                        Some(batch) => {
                            for r in batch.records() {
                                if let Some(k) = keep.as_mut() {
                                    if !k(r.iface(), r.data(), r.orig_len()) {
                                        continue;
                                    }
                                }
                                let link = links
                                    .get(r.iface() as usize)
                                    .copied()
                                    .unwrap_or(LinkType::ETHERNET);
                                analyzer.packet(r.ts_ns(), link, r.data(), &mut |e| events.push(e));
                                n += 1;
                            }
                            batch.release();
                            pk.store(n, Ordering::Relaxed);
                            true
                        }
                        None => false,
                    };
                    if last_tick.elapsed() >= TICK {
                        analyzer.tick(wall_clock_ns(), &mut |e| events.push(e));
                    }
                    write(&mut writer, &mut events, &mut error);
                    if last_tick.elapsed() >= TICK {
                        if error.is_none() {
                            error = writer.flush().err();
                        }
                        if let Ok(mut s) = shared.lock() {
                            *s = analyzer.stats();
                        }
                        last_tick = Instant::now();
                    }
                    if !got {
                        if stopping {
                            break;
                        }
                        reader.wait_more(last_tick + TICK);
                    }
                }
                let stats = analyzer.finish(&mut |e| events.push(e));
                write(&mut writer, &mut events, &mut error);
                if error.is_none() {
                    error = writer.flush().err();
                }
                LiveEnd {
                    stats,
                    packets: n,
                    error,
                }
            })?;
        Ok(LiveAnalyzer {
            stop,
            waker,
            packets,
            stats,
            thread,
        })
    }

    /// Records read so far (those a filter passed over not counted).
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// The analyzer's counters as of its last tick (once a second).
    pub fn stats(&self) -> Stats {
        self.stats.lock().map_or_else(|_| Stats::default(), |s| *s)
    }

    /// Once capture has stopped: reads what is left, ends every connection, flushes.
    pub fn finish(self) -> LiveEnd {
        self.stop.store(true, Ordering::Release);
        self.waker.wake();
        self.thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }
}
