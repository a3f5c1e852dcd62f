//! The VoIP job of a live capture (`weir voip -i`) and the VoIP analyzer beside a recorder
//! (`weir record --voip`): weir-voip's [`Analyzer`] as one reader of the capture pipeline's
//! packet buffer, on its own thread. A call's lines (its streams, then the call) are written
//! and flushed as soon as the analyzer finishes it (over and lingered for late RTP, or idle:
//! [`weir_voip::Config`]), so a killed run loses only the calls still open; when the job stops
//! (SIGINT/SIGTERM, the duration) every call and stream still pending is written too. With no
//! traffic the thread advances the analyzer's clock from the wall clock (the capture's).
//! The outputs are opened (created, emptied) when the job starts, so a bad path fails first.
//! With a chart directory ([`VoipOutputs::plot`]) each call's jitter/loss chart is drawn when
//! its records are written ([`weir_voip::plot::Plotter`], the same files as `weir voip -r
//! --plot`): when the call ends, and at the job's end for the calls still open.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use weir_capture::PipelineConfig;
use weir_decode::LinkType;
use weir_voip::{Analyzer, Event as VoipEvent, Stats};

use weir_export::{KafkaLines, KafkaLog, KafkaStats, LogKind};

use crate::http::{open, Named};
use crate::{Controls, Event, SensorError};
use weir_http::live::Keep;

/// How often the analyzer's thread publishes its counters and, with no traffic, advances the
/// analyzer's clock. With nothing new in the buffer the thread waits on the reader's doorbell
/// ([`weir_buffer::Reader::wait_more`]) until capture hands over more or the next tick is due;
/// [`VoipLive::finish`] wakes it at once. (Session 21: it slept 2 ms at a time, ≈ 500 wake-ups
/// a second with no traffic.)
const TICK: Duration = Duration::from_secs(1);

/// Where the analyzer's records go.
#[derive(Clone, Debug)]
pub struct VoipOutputs {
    /// The call records (JSON lines; `-`: stdout); the stream records too without `streams`.
    pub calls: PathBuf,
    /// The stream records (JSON lines; `-`: stdout), if apart from the calls.
    pub streams: Option<PathBuf>,
    /// Every record to Kafka too (topics weir.calls and weir.rtp, the JSON lines: see
    /// [`weir_export::KafkaLog`]).
    pub kafka: Option<weir_export::KafkaOutput>,
    /// The directory of the calls' jitter and loss charts (created if missing), if any; the
    /// analyzer's [`weir_voip::Config::timeline_ns`] must be set for the charts to have points.
    pub plot: Option<PathBuf>,
}

/// The opened outputs of [`VoipOutputs`].
pub struct VoipWriter {
    calls: BufWriter<Named>,
    streams: Option<BufWriter<Named>>,
    kafka: Option<KafkaLines>,
    plot: Option<weir_voip::plot::Plotter>,
}

impl VoipOutputs {
    /// Opens (creates or truncates) the outputs, in place (without Kafka: see
    /// [`VoipOutputs::open_with`]).
    pub fn open(&self) -> Result<VoipWriter, SensorError> {
        self.open_with(None)
    }

    /// Opens the Kafka producer of [`VoipOutputs::kafka`], if any (a broker must answer).
    pub fn open_kafka(&self) -> Result<Option<KafkaLog>, SensorError> {
        match &self.kafka {
            Some(out) => Ok(Some(KafkaLog::open(
                out,
                weir_export::LogTopics::default(),
            )?)),
            None => Ok(None),
        }
    }

    /// Opens (creates or truncates) the outputs, in place; with `kafka`, every record goes
    /// there too.
    pub fn open_with(&self, kafka: Option<&KafkaLog>) -> Result<VoipWriter, SensorError> {
        let calls = BufWriter::with_capacity(1 << 16, open(&self.calls)?);
        let streams = match &self.streams {
            Some(p) => Some(BufWriter::with_capacity(1 << 16, open(p)?)),
            None => None,
        };
        let plot = match &self.plot {
            Some(dir) => {
                std::fs::create_dir_all(dir).map_err(|source| SensorError::Write {
                    path: dir.clone(),
                    source,
                })?;
                Some(weir_voip::plot::Plotter::new(dir))
            }
            None => None,
        };
        Ok(VoipWriter {
            calls,
            streams,
            kafka: kafka.map(|k| k.lines(LogKind::Voip)),
            plot,
        })
    }
}

impl VoipWriter {
    /// Writes one record as a JSON line (each says its `type`), and charts it.
    pub fn write(&mut self, e: &VoipEvent) -> io::Result<()> {
        if let Some(p) = &mut self.plot {
            p.event(e)
                .map_err(|err| io::Error::new(err.source.kind(), err.to_string()))?;
        }
        match e {
            VoipEvent::Call(r) => line(&mut self.calls, r)?,
            VoipEvent::Stream(r) => line(self.streams.as_mut().unwrap_or(&mut self.calls), r)?,
        }
        match &mut self.kafka {
            Some(k) => event_line(k, e),
            None => Ok(()),
        }
    }

    /// Charts drawn so far (0 without a chart directory).
    pub fn charts(&self) -> u64 {
        self.plot.as_ref().map_or(0, |p| p.written())
    }

    /// Flushes both outputs.
    pub fn flush(&mut self) -> io::Result<()> {
        self.calls.flush()?;
        if let Some(k) = &mut self.kafka {
            k.flush()?;
        }
        match &mut self.streams {
            Some(s) => s.flush(),
            None => Ok(()),
        }
    }
}

/// Writes `r` as one JSON line.
pub fn line<W: Write, T: serde::Serialize>(w: &mut W, r: &T) -> io::Result<()> {
    serde_json::to_writer(&mut *w, r).map_err(io::Error::from)?;
    w.write_all(b"\n")
}

/// Writes the record of `e` as one JSON line.
pub fn event_line<W: Write>(w: &mut W, e: &VoipEvent) -> io::Result<()> {
    match e {
        VoipEvent::Call(r) => line(w, r),
        VoipEvent::Stream(r) => line(w, r),
    }
}

/// The VoIP analyzer over capture files (`weir voip -r`): a [`Visitor`](crate::read::Visitor)
/// of the offline read loop (one sequential read per file, packets in file order) writing each
/// call (its streams, then the call; the streams to their own output when there is one) as it
/// finishes, charting it and sending it to Kafka; [`finish`](VoipFiles::finish) writes the
/// calls still open.
pub struct VoipFiles<W: Write> {
    analyzer: Analyzer,
    calls: BufWriter<W>,
    streams: Option<BufWriter<W>>,
    plot: Option<weir_voip::plot::Plotter>,
    kafka: Option<KafkaLines>,
}

impl<W: Write> VoipFiles<W> {
    /// An analyzer with `cfg`'s bounds writing the calls to `calls` (and the streams, without
    /// `streams`), the charts with `plot` and every record to `kafka`.
    pub fn new(
        cfg: weir_voip::Config,
        (calls, streams): (W, Option<W>),
        plot: Option<weir_voip::plot::Plotter>,
        kafka: Option<KafkaLines>,
    ) -> Self {
        VoipFiles {
            analyzer: Analyzer::new(cfg),
            calls: BufWriter::with_capacity(1 << 16, calls),
            streams: streams.map(|s| BufWriter::with_capacity(1 << 16, s)),
            plot,
            kafka,
        }
    }

    /// Writes every call still open and returns the analyzer's counters, the charts drawn and
    /// the two outputs (calls, streams), flushed.
    pub fn finish(self) -> Result<(Stats, u64, W, Option<W>), SensorError> {
        let VoipFiles {
            analyzer,
            mut calls,
            mut streams,
            mut plot,
            mut kafka,
        } = self;
        let mut error = None;
        let stats = analyzer.finish(&mut |e| {
            if error.is_none() {
                let outs = (streams.as_mut(), plot.as_mut(), kafka.as_mut());
                error = write_file(&mut calls, outs, &e).err();
            }
        });
        if let Some(e) = error {
            return Err(e);
        }
        let charts = plot.as_ref().map_or(0, |p| p.written());
        let calls = calls.into_inner().map_err(|e| e.into_error())?;
        let streams = match streams {
            Some(s) => Some(s.into_inner().map_err(|e| e.into_error())?),
            None => None,
        };
        Ok((stats, charts, calls, streams))
    }
}

/// The other outputs of a record: the streams' file, the charts, Kafka.
type Others<'a, W> = (
    Option<&'a mut BufWriter<W>>,
    Option<&'a mut weir_voip::plot::Plotter>,
    Option<&'a mut KafkaLines>,
);

/// Writes one record: streams to `streams` when given, else beside the calls; charts it;
/// sends it to Kafka.
fn write_file<W: Write>(
    calls: &mut BufWriter<W>,
    (streams, plot, kafka): Others<'_, W>,
    e: &VoipEvent,
) -> Result<(), SensorError> {
    if let Some(p) = plot {
        p.event(e)?;
    }
    if let Some(k) = kafka {
        event_line(k, e)?;
    }
    match e {
        VoipEvent::Stream(r) => line(streams.unwrap_or(calls), r)?,
        VoipEvent::Call(r) => line(calls, r)?,
    }
    Ok(())
}

impl<W: Write> crate::read::Visitor for VoipFiles<W> {
    type Error = SensorError;

    fn packet(
        &mut self,
        _interfaces: &[weir_pcap::Interface],
        packet: &weir_pcap::Packet<'_>,
    ) -> Result<(), SensorError> {
        self.analyzer
            .packet(packet.meta.ts_ns, packet.link, packet.data);
        if self.analyzer.has_ready() {
            let mut error = None;
            let (calls, mut streams) = (&mut self.calls, self.streams.as_mut());
            let (mut plot, mut kafka) = (self.plot.as_mut(), self.kafka.as_mut());
            self.analyzer.drain(&mut |e| {
                if error.is_none() {
                    let outs = (
                        streams.as_deref_mut(),
                        plot.as_deref_mut(),
                        kafka.as_deref_mut(),
                    );
                    error = write_file(calls, outs, &e).err();
                }
            });
            if let Some(e) = error {
                return Err(e);
            }
        }
        Ok(())
    }

    fn parallel_read(&self) -> bool {
        false
    }
}

/// The analyzer's counters as the lines `weir voip` ends with (and the bounds reached, when
/// they were), each ending in a newline.
pub fn summary(s: &Stats) -> String {
    let mut text = format!(
        "weir: {} sip call-ids ({} messages, {} over tcp, {} unparsable); {} rtp streams \
         ({} from sdp, {} by heuristic; {} candidates not steady); {} rtp packets, {} rtcp \
         packets ({} report blocks matched); {} packets\n",
        s.calls,
        s.sip_messages,
        s.sip_tcp_messages,
        s.sip_errors,
        s.streams,
        s.sdp_streams,
        s.heuristic_streams,
        s.candidates_discarded,
        s.rtp_packets,
        s.rtcp_packets,
        s.rtcp_reports,
        s.packets
    );
    if s.calls_dropped + s.streams_dropped_packets + s.tcp_bytes_dropped > 0 {
        text += &format!(
            "weir: bounds: {} call-ids ignored (--max-calls), {} rtp packets of untracked \
             streams (--max-streams), {} sip tcp bytes dropped (gaps or overflow)\n",
            s.calls_dropped, s.streams_dropped_packets, s.tcp_bytes_dropped
        );
    }
    text
}

/// What the VoIP analyzer of a live run hands back.
#[derive(Debug)]
pub struct VoipEnd {
    /// The analyzer's counters.
    pub stats: Stats,
    /// Records read from the buffer.
    pub packets: u64,
    /// The first write error (nothing was written after it).
    pub error: Option<io::Error>,
    /// Charts drawn (with a chart directory).
    pub charts: u64,
}

/// The wall clock in ns since the epoch (the clock software capture timestamps come from).
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A VoIP [`Analyzer`] reading the packet buffer on its own thread.
pub struct VoipLive {
    stop: Arc<AtomicBool>,
    waker: weir_buffer::Waker,
    packets: Arc<AtomicU64>,
    stats: Arc<Mutex<Stats>>,
    thread: JoinHandle<VoipEnd>,
}

impl VoipLive {
    /// Starts analyzing the records of `reader` on a new thread; `links` gives the link type
    /// of each interface index (Ethernet beyond it).
    pub fn spawn(
        analyzer: Analyzer,
        reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        writer: VoipWriter,
    ) -> io::Result<VoipLive> {
        Self::spawn_filtered(analyzer, reader, links, writer, None)
    }

    /// [`VoipLive::spawn`] reading only the records `keep` accepts (all with `None`).
    pub fn spawn_filtered(
        mut analyzer: Analyzer,
        mut reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        mut writer: VoipWriter,
        mut keep: Option<Keep>,
    ) -> io::Result<VoipLive> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(Stats::default()));
        let packets = Arc::new(AtomicU64::new(0));
        let (st, shared, pk) = (stop.clone(), stats.clone(), packets.clone());
        let waker = reader.waker();
        let thread = std::thread::Builder::new()
            .name("voip".into())
            .spawn(move || {
                let mut n = 0u64;
                let mut error: Option<io::Error> = None;
                let mut last_tick = std::time::Instant::now();
                loop {
                    if last_tick.elapsed() >= TICK {
                        if let Ok(mut s) = shared.lock() {
                            *s = analyzer.stats();
                        }
                        last_tick = std::time::Instant::now();
                    }
                    // set before this read: an empty read after it means all is read
                    let stopping = st.load(Ordering::Acquire);
                    let mut idle = false;
                    match reader.next_batch() {
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
                                analyzer.packet(r.ts_ns(), link, r.data());
                                n += 1;
                            }
                            batch.release();
                            pk.store(n, Ordering::Relaxed);
                        }
                        None if stopping => break,
                        None => {
                            analyzer.tick(wall_ns());
                            idle = true;
                        }
                    }
                    if analyzer.has_ready() && error.is_none() {
                        analyzer.drain(&mut |e| {
                            if error.is_none() {
                                error = writer.write(&e).err();
                            }
                        });
                        if error.is_none() {
                            error = writer.flush().err();
                        }
                    }
                    if idle {
                        // until more is handed over, the next tick, or the stop wakes us
                        reader.wait_more(last_tick + TICK);
                    }
                }
                let stats = analyzer.finish(&mut |e| {
                    if error.is_none() {
                        error = writer.write(&e).err();
                    }
                });
                if error.is_none() {
                    error = writer.flush().err();
                }
                VoipEnd {
                    stats,
                    packets: n,
                    error,
                    charts: writer.charts(),
                }
            })?;
        Ok(VoipLive {
            stop,
            waker,
            packets,
            stats,
            thread,
        })
    }

    /// The analyzer's counters as of its last second (calls and streams are written at the
    /// end: until then they count what is tracked).
    pub fn stats(&self) -> Stats {
        self.stats.lock().map_or_else(|_| Stats::default(), |s| *s)
    }

    /// Records read from the buffer so far (those a filter passed over not counted).
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// Once capture has stopped: reads what is left, writes every call and stream, flushes.
    pub fn finish(self) -> VoipEnd {
        self.stop.store(true, Ordering::Release);
        self.waker.wake();
        self.thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    }
}

/// The VoIP analyzer beside a recorder (`weir record --voip`, a `[[voip]]` job of `weir run`):
/// a best-effort reader of the recorder's buffer (when it falls behind it is skipped forward,
/// never costing the recording a packet; the skipped packets are missing from its figures).
#[derive(Clone, Debug)]
pub struct VoipBeside {
    /// The packets it analyzes (tcpdump syntax; empty: all the recorder's).
    pub filter: String,
    /// The analyzer's bounds.
    pub analyzer: weir_voip::Config,
    /// Where records go.
    pub outputs: VoipOutputs,
}

impl VoipBeside {
    /// Every packet of the recorder, default bounds, the call and stream records as JSON lines
    /// to `calls` (`weir record --voip FILE`).
    pub fn all_to(calls: PathBuf) -> Self {
        VoipBeside {
            filter: String::new(),
            analyzer: weir_voip::Config::default(),
            outputs: VoipOutputs {
                calls,
                streams: None,
                kafka: None,
                plot: None,
            },
        }
    }

    /// Starts the analyzer on `reader`, writing to `writer` (the outputs opened before anything
    /// else started, so that a bad path fails first).
    pub(crate) fn spawn(
        &self,
        writer: VoipWriter,
        reader: weir_buffer::Reader,
        interfaces: &[weir_pcap::Interface],
    ) -> Result<VoipLive, SensorError> {
        let links = interfaces.iter().map(|i| i.link).collect();
        let keep = crate::http::keep(&self.filter, interfaces)?;
        VoipLive::spawn_filtered(Analyzer::new(self.analyzer), reader, links, writer, keep)
            .map_err(SensorError::Thread)
    }
}

/// What `weir voip -i` does.
#[derive(Clone, Debug)]
pub struct VoipLiveConfig {
    /// The capture (its readers are set by the job).
    pub pipeline: PipelineConfig,
    /// The analyzer's bounds.
    pub analyzer: weir_voip::Config,
    /// Where records go.
    pub outputs: VoipOutputs,
    /// Stop after this long.
    pub duration: Option<Duration>,
}

/// What `weir voip -i` did.
#[derive(Debug)]
pub struct VoipLiveReport {
    /// The analyzer's counters and first write error.
    pub end: VoipEnd,
    /// Capture's counters.
    pub live: crate::flows::LiveEnd,
    /// A capture thread's error, if capture failed.
    pub capture_error: Option<weir_capture::CaptureError>,
    /// The Kafka output and its counts, with [`VoipOutputs::kafka`].
    pub kafka: Option<(KafkaLog, KafkaStats)>,
}

/// Runs `weir voip -i` until `controls.stop` is set, the duration has passed or capture fails;
/// then stops capture, analyzes what is left in the buffer and writes every call and stream.
pub fn run_live(
    cfg: &VoipLiveConfig,
    controls: &Controls,
    events: &mut dyn FnMut(Event),
) -> Result<VoipLiveReport, SensorError> {
    let kafka = cfg.outputs.open_kafka()?;
    let (end, live, capture_error) = crate::live::run_one_analyzer(
        &cfg.pipeline,
        cfg.duration,
        controls,
        events,
        "analyzing SIP and RTP",
        || cfg.outputs.open_with(kafka.as_ref()),
        |writer, reader, links| {
            VoipLive::spawn(Analyzer::new(cfg.analyzer), reader, links, writer)
                .map_err(SensorError::Thread)
        },
        VoipLive::finish,
    )?;
    Ok(VoipLiveReport {
        end,
        live,
        capture_error,
        kafka: kafka.map(|k| {
            let s = k.finish();
            (k, s)
        }),
    })
}

/// The VoIP analyzer's Prometheus series (`weir_voip_...`): `stats` as of its last tick (or
/// its end), `read` the records it has read from the buffer so far. Every series is one of
/// the counters `weir ctl counters --json` shows under `voip` (`read` is its `read`).
pub(crate) fn series(e: &mut weir_metrics::text::Exposition, stats: &Stats, read: u64) {
    use weir_metrics::text::Kind::Counter;
    let s = stats;
    let counters: [(&str, &str, u64); 15] = [
        (
            "weir_voip_read_packets_total",
            "Packets the VoIP analyzer read from the packet buffer (its filter's rejects not \
             counted).",
            read,
        ),
        (
            "weir_voip_analyzed_packets_total",
            "Packets the VoIP analyzer had analyzed at its last tick (once a second).",
            s.packets,
        ),
        (
            "weir_voip_sip_messages_total",
            "SIP messages parsed (UDP and TCP).",
            s.sip_messages,
        ),
        (
            "weir_voip_sip_tcp_messages_total",
            "SIP messages parsed from TCP.",
            s.sip_tcp_messages,
        ),
        (
            "weir_voip_sip_parse_errors_total",
            "Payloads that looked like SIP but did not parse.",
            s.sip_errors,
        ),
        (
            "weir_voip_sip_no_call_id_total",
            "SIP messages without a Call-ID.",
            s.sip_no_call_id,
        ),
        ("weir_voip_calls_total", "Calls (Call-IDs) seen.", s.calls),
        (
            "weir_voip_calls_over_limit_total",
            "Call-IDs ignored because the analyzer tracked its maximum of calls (max_calls).",
            s.calls_dropped,
        ),
        (
            "weir_voip_calls_written_early_total",
            "Calls written before the end of the job (over and lingered, or idle).",
            s.calls_expired,
        ),
        (
            "weir_voip_rtp_packets_total",
            "Packets counted in an RTP stream (heuristic candidates included).",
            s.rtp_packets,
        ),
        (
            "weir_voip_rtp_lost_packets_total",
            "RFC 3550 lost packets (expected - received, at least 0) of the streams written.",
            s.rtp_lost,
        ),
        (
            "weir_voip_stream_packets_over_limit_total",
            "Packets ignored because the analyzer tracked its maximum of streams (max_streams).",
            s.streams_dropped_packets,
        ),
        (
            "weir_voip_rtcp_packets_total",
            "RTCP packets.",
            s.rtcp_packets,
        ),
        (
            "weir_voip_rtcp_reports_total",
            "RTCP report blocks matched to a stream.",
            s.rtcp_reports,
        ),
        (
            "weir_voip_tcp_dropped_bytes_total",
            "SIP-over-TCP bytes dropped (gaps, overflow, bound on connections).",
            s.tcp_bytes_dropped,
        ),
    ];
    for (name, help, v) in counters {
        e.single(name, Counter, help, v);
    }
    e.family(
        "weir_voip_streams_total",
        Counter,
        "RTP streams written, by how they were found (SDP of a call, or the heuristic).",
    )
    .sample(&[("found_by", "sdp")], s.sdp_streams)
    .sample(&[("found_by", "heuristic")], s.heuristic_streams);
    e.single(
        "weir_voip_stream_candidates_discarded_total",
        Counter,
        "Heuristic RTP candidates not written (too short or irregular).",
        s.candidates_discarded,
    );
}
