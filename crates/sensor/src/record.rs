//! The record job: packets from a [`Source`] (live capture or imported files) into a store of
//! fixed-size segment files, the flow meter beside it on the same buffer, rules in the capture
//! threads, a statistics file every second, and a report in which every dropped packet is
//! counted at the stage that dropped it.
//!
//! Threads: the source's (capture threads, or the import thread) → the shared packet buffer →
//! the recorder thread (registered reader: capture drops rather than overwrite what it has not
//! written) and, with flows, the flow meter (best-effort reader: when it falls behind it is
//! skipped forward and the bytes it missed are counted, so it never costs the recording a
//! packet). The caller's thread runs [`run`]: it watches the stop flag, reloads the rules when
//! asked, reports progress; at the end capture stops first, then the recorder writes everything
//! already in the buffer.
//!
//! Order at start: the first input file is opened, then the store directory is created and
//! locked (a second recorder stops there, before it allocates anything or says it is
//! recording), then capture starts, then the store is opened (repaired), then the job says it
//! is recording (so that a tool waiting for that line finds the store's manifest there).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_buffer::PacketBuffer;
use weir_capture::{CaptureError, Counters, Totals};
use weir_export::{Fanout, Outputs, RunError, RunReport};
use weir_flows::{wall_clock_ns, LiveMeter, Meter};
use weir_packet::output::{error_chain, human_bytes};
use weir_store::{Format, Options, Recorder, RecorderStats, Sizes, Store};

use crate::live::{announcement, open_first, Source, SourceConfig};
use crate::rules::{self, LiveRules, RulesConfig};
use crate::{metrics, Controls, Event, SensorError};

/// How often the job looks at its flags.
const TICK: Duration = Duration::from_millis(100);

/// How often it reports progress and writes the statistics file.
const PROGRESS: Duration = Duration::from_secs(1);

/// What the record job does.
#[derive(Clone, Debug)]
pub struct RecordConfig {
    /// Where packets come from.
    pub source: SourceConfig,
    /// The store directory (created if needed; reopened after a crash, its segments repaired).
    pub dir: PathBuf,
    /// The segments' file format.
    pub format: Format,
    /// Segment, write, retention and index sizes (checked with [`Sizes::check`]).
    pub sizes: Sizes,
    /// Retention by age: segments whose last packet is older are deleted.
    pub max_age_ns: Option<u64>,
    /// Stop after this long (live capture).
    pub duration: Option<Duration>,
    /// Write every counter as JSON to this file, every second and at the end.
    pub stats_json: Option<PathBuf>,
    /// Meter flows from the same buffer.
    pub flows: Option<FlowsConfig>,
    /// Analyze HTTP and TLS from the same buffer.
    pub http: Option<crate::http::HttpBeside>,
    /// Analyze SIP calls and RTP streams from the same buffer.
    pub voip: Option<crate::voip::VoipBeside>,
    /// Rules in the capture threads (or the import thread).
    pub rules: Option<RulesConfig>,
    /// Live streams of the same buffer ([`crate::stream`]), each a best-effort reader.
    pub streams: Vec<crate::stream::StreamConfig>,
}

/// The flow meter beside a recorder.
#[derive(Clone, Debug)]
pub struct FlowsConfig {
    /// Timeouts and the rest of the meter's settings.
    pub meter: weir_flows::Config,
    /// Where flows go; with no output at all, JSON lines to `flows.json` in the store.
    pub outputs: Outputs,
}

/// The rates and drops of a running recorder, once a second.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Progress {
    /// Packets per second read by capture.
    pub pps: f64,
    /// Bits per second on the wire.
    pub bps: f64,
    /// Packets per second written to the store.
    pub written_pps: f64,
    /// How full the buffer is, 0 to 1.
    pub buffer_fill: f64,
    /// Dropped by the interfaces before the rings, since the start.
    pub interface_drops: u64,
    /// Dropped by the kernel's backlog queues (all interfaces), since the start.
    pub backlog_drops: u64,
    /// Dropped by the kernel at the rings.
    pub kernel_drops: u64,
    /// Dropped by the buffer (full or too long).
    pub buffer_drops: u64,
    /// Dropped by the writer.
    pub writer_drops: u64,
}

/// `weir record`'s status line, rewritten every second on a terminal.
impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "weir: {:.3} Mpps {:.3} Gbps | written {:.3} Mpps | buffer {:.1}% | drops: interface \
             {}, backlog {}, kernel {}, buffer {}, writer {}",
            self.pps / 1e6,
            self.bps / 1e9,
            self.written_pps / 1e6,
            self.buffer_fill * 100.0,
            self.interface_drops,
            self.backlog_drops,
            self.kernel_drops,
            self.buffer_drops,
            self.writer_drops
        )
    }
}

/// How the flow meter ended.
#[derive(Debug)]
pub struct FlowsReport {
    /// Its counters and its outputs'.
    pub report: RunReport,
    /// The first export error, if any.
    pub error: Option<RunError>,
}

/// What a record job did.
#[derive(Debug)]
pub struct RecordReport {
    /// The recorder's summary (packets, drops, bytes, retention, the error that stopped it).
    pub summary: weir_store::Summary,
    /// Seconds from the start of recording to the end.
    pub elapsed_s: f64,
    /// The store's segments now.
    pub segments: usize,
    /// The bytes they hold.
    pub stored_bytes: u64,
    /// The source's counters.
    pub totals: Totals,
    /// The buffer's counters (`readers[1]` is the flow meter's, when there is one).
    pub buffer: weir_buffer::Stats,
    /// The packets came from files (no kernel or interface counters).
    pub imported: bool,
    /// The rules' summary lines, when there are rules.
    pub rules: Option<String>,
    /// The flow meter's end, when there is one.
    pub flows: Option<FlowsReport>,
    /// The HTTP analyzer's end (counters, first write error), when it ran.
    pub http: Option<weir_http::live::LiveEnd>,
    /// The VoIP analyzer's end (counters, first write error), when it ran.
    pub voip: Option<crate::voip::VoipEnd>,
    /// The analyzers' Kafka outputs (HTTP's, then VoIP's): each one's summary line and, when
    /// messages were lost, the error saying so.
    pub analyzers_kafka: Vec<(String, Option<String>)>,
    /// Each live stream's end, in the config's order.
    pub streams: Vec<crate::stream::StreamReport>,
    /// The error that ended live capture, if any (everything captured was still written).
    pub capture_error: Option<CaptureError>,
}

impl RecordReport {
    /// Bytes the flow meter was skipped over because it fell behind, and how many times
    /// (`None` without a meter).
    pub fn flows_skipped(&self) -> Option<(u64, u64)> {
        self.buffer
            .readers
            .get(1)
            .map(|r| (r.skipped_bytes, r.skips))
    }

    /// The HTTP and VoIP analyzers' closing lines (transactions, calls, gaps, evictions),
    /// each ending in a newline (a write error is [`RecordReport::analyzer_error`]).
    pub fn analyzers_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        if let Some(h) = &self.http {
            let s = &h.stats;
            let _ = writeln!(
                out,
                "  http: {} transactions, {} TLS handshakes from {} packets; gaps {} ({} \
                 bytes); evictions: {} connections, {} holdings",
                s.http_records,
                s.tls_records,
                h.packets,
                s.stream.gaps,
                s.stream.gap_bytes,
                s.flows_evicted,
                s.pending_evictions
            );
        }
        for (line, _) in &self.analyzers_kafka {
            let _ = writeln!(out, "  {line}");
        }
        if let Some(v) = &self.voip {
            let s = &v.stats;
            let _ = writeln!(
                out,
                "  voip: {} calls, {} RTP streams from {} packets; {} calls and {} stream \
                 packets beyond the limits",
                s.calls, s.streams, v.packets, s.calls_dropped, s.streams_dropped_packets
            );
        }
        out
    }

    /// The first write error of the HTTP or VoIP analyzer, if one had one.
    pub fn analyzer_error(&self) -> Option<String> {
        let http = self.http.as_ref().and_then(|h| h.error.as_ref());
        let voip = self.voip.as_ref().and_then(|v| v.error.as_ref());
        http.map(|e| format!("http: {e}"))
            .or_else(|| voip.map(|e| format!("voip: {e}")))
            .or_else(|| self.analyzers_kafka.iter().find_map(|k| k.1.clone()))
    }

    /// True when a packet was lost by the writer or the recorder stopped on an error.
    pub fn damaged(&self) -> bool {
        self.summary.error.is_some() || self.summary.dropped > 0
    }

    /// The closing summary of a job recording into `store`, lines ending in newlines, every
    /// dropped packet counted at the stage that dropped it: `weir record`'s (`job` `None`), or a
    /// `weir run` job's (`Some((name, interface))`: its lines prefixed with the job).
    pub fn text(&self, store: &Path, job: Option<(&str, &str)>) -> String {
        use std::fmt::Write as _;
        let (s, t, mut out) = (&self.summary, &self.totals, String::new());
        let deleted = if s.deleted > 0 {
            format!("; retention deleted {} segment(s)", s.deleted)
        } else {
            String::new()
        };
        let (title, how) = match job {
            Some((name, iface)) => (format!("weir run: {name} ({iface})"), String::new()),
            None if s.direct => ("weir record".into(), " with O_DIRECT".into()),
            None => (
                "weir record".into(),
                " with buffered writes (the filesystem refused O_DIRECT)".into(),
            ),
        };
        let _ = writeln!(
            out,
            "{title}: {} packets recorded in {:.1} s into {} ({} segment(s) now, {}; {} written\
             {how}{deleted})",
            s.packets,
            self.elapsed_s,
            store.display(),
            self.segments,
            human_bytes(self.stored_bytes),
            human_bytes(s.disk_bytes),
        );
        let rules_dropped = match self.rules {
            Some(_) => format!(", {} dropped by the rules", t.feed.rules_dropped),
            None => String::new(),
        };
        if self.imported {
            let _ = writeln!(
                out,
                "  import: {} packets read{rules_dropped}, {} too long for the buffer; writer: {} \
                 dropped",
                t.feed.received, t.feed.too_long, s.dropped
            );
        } else {
            let _ = writeln!(
                out,
                "  before the ring: {}\n  kernel: {} received, {} dropped; capture: {} read, {} \
                 filtered out{rules_dropped}; buffer: {} dropped (full), {} dropped (too long); \
                 writer: {} dropped{}",
                t.before_ring_text(),
                t.feed.kernel_packets,
                t.feed.kernel_drops,
                t.feed.received,
                t.feed.filtered,
                self.buffer.dropped_full,
                self.buffer.dropped_oversize,
                s.dropped,
                if s.paused > 0 {
                    format!(", {} not recorded (paused)", s.paused)
                } else {
                    String::new()
                }
            );
        }
        if let Some(rules) = &self.rules {
            let _ = writeln!(out, "{rules}");
        }
        match self.flows_skipped() {
            Some((bytes, times)) if job.is_none() || times > 0 => {
                let _ = writeln!(
                    out,
                    "  flows: the meter fell behind and skipped {bytes} bytes of packets ({times} \
                     times)"
                );
            }
            _ => {}
        }
        for st in &self.streams {
            let _ = writeln!(out, "  {}", st.line());
        }
        out.push_str(&self.analyzers_text());
        if let Some(e) = &s.error {
            let name = job.map(|(n, _)| format!("{n}: ")).unwrap_or_default();
            let _ = writeln!(out, "weir: error: {name}{e}");
        }
        out
    }
}

/// The outputs of `flows`, with the store's `flows.json` when none is named.
fn flow_outputs(flows: &FlowsConfig, dir: &Path) -> Outputs {
    let mut outputs = flows.outputs.clone();
    let named = outputs.netflow.is_some()
        || outputs.kafka.is_some()
        || outputs.csv.is_some()
        || outputs.parquet.is_some();
    if !named && outputs.json.is_none() {
        outputs.json = Some(dir.join("flows.json"));
    }
    outputs
}

/// Runs a record job to its end: until `controls.stop` is set, the duration has passed, the
/// files are imported, capture fails or the recorder stops. Says what happens through
/// `events`. A flow meter config [`weir_flows::Config::check`] refuses (`[record.flows]`,
/// `--flows`) is an error before anything is opened.
pub fn run(
    cfg: &RecordConfig,
    controls: &Controls,
    events: &mut dyn FnMut(Event),
) -> Result<RecordReport, SensorError> {
    if let Some(f) = &cfg.flows {
        f.meter.check()?;
    }
    let rules_path = cfg.rules.as_ref().map(|r| r.path.as_path());
    let rule_set = rules_path.map(rules::load).transpose()?;
    let store_tags = cfg.format == Format::Pcapng;
    let set_tags = rule_set.as_ref().is_some_and(LiveRules::set_tags);
    let first_input = match &cfg.source {
        SourceConfig::Files { files, .. } => open_first(files)?,
        SourceConfig::Live(_) => None,
    };
    // opened first: a bad path fails before the store is touched
    let http_kafka = cfg.http.as_ref().map(|h| h.logs.open_kafka()).transpose()?;
    let voip_kafka = cfg
        .voip
        .as_ref()
        .map(|v| v.outputs.open_kafka())
        .transpose()?;
    let (http_kafka, voip_kafka) = (http_kafka.flatten(), voip_kafka.flatten());
    let mut http_log = (cfg.http.as_ref())
        .map(|h| h.logs.open_with(http_kafka.as_ref()))
        .transpose()?;
    let mut voip_out = (cfg.voip.as_ref())
        .map(|v| v.outputs.open_with(voip_kafka.as_ref()))
        .transpose()?;
    let lock = weir_store::StoreLock::take(&cfg.dir)?;
    let readers = 1;
    let best_effort = usize::from(cfg.flows.is_some())
        + usize::from(cfg.http.is_some())
        + usize::from(cfg.voip.is_some())
        + cfg.streams.len();
    let started = match (&cfg.source, first_input) {
        (
            SourceConfig::Files {
                files,
                buffer_bytes,
            },
            Some(first),
        ) => Source::files(
            first,
            &files[1..],
            *buffer_bytes,
            readers,
            best_effort,
            &controls.stop,
            rule_set.map(|s| (s, store_tags)),
        )
        .map_err(|e| SensorError::about_rules(e, rules_path))
        .map(|s| {
            let engine = s.engine().cloned();
            (s, engine)
        }),
        (SourceConfig::Live(live), _) => rule_set
            .zip(rules_path)
            .map(|(set, path)| rules::live_engine(&live.interfaces, live.snaplen, set, path))
            .transpose()
            .and_then(|engine| {
                let rules = engine
                    .clone()
                    .map(|engine| weir_capture::Rules { engine, store_tags });
                Source::live(live, readers, best_effort, rules)
                    .map_err(|e| SensorError::about_rules(e, rules_path))
                    .map(|s| (s, engine))
            }),
        (SourceConfig::Files { .. }, None) => Err(SensorError::NoInput),
    };
    let (source, engine) = match started {
        Ok(s) => s,
        Err(e) => {
            lock.abandon();
            return Err(e);
        }
    };
    if let (Some(p), Some(e)) = (&controls.published, &engine) {
        p.set_engine(e.clone());
    }
    let _control = match (cfg.rules.as_ref(), engine.as_ref()) {
        (
            Some(RulesConfig {
                path,
                control: Some(socket),
            }),
            Some(engine),
        ) => match rules::serve_control(socket, engine, Some(path.clone())) {
            Ok(server) => {
                events(Event::Notice(format!(
                    "rules control socket on {}",
                    socket.display()
                )));
                Some(server)
            }
            Err(e) => {
                lock.abandon();
                return Err(e);
            }
        },
        _ => None,
    };
    let buffer = source.buffer().clone();
    let interfaces = source.interfaces().to_vec();
    let counters = source.counters();
    let mut opts = Options::new(interfaces.clone());
    opts.format = cfg.format;
    cfg.sizes.apply(&mut opts)?;
    opts.max_age_ns = cfg.max_age_ns;
    opts.max_caplen = buffer.max_caplen() as u32;
    if let Some(c) = &counters {
        let c = c.clone();
        let b = buffer.clone();
        opts.upstream_drops = Some(Arc::new(move || {
            c.totals().feed.kernel_drops + b.stats().dropped()
        }));
    }
    let (store, recovery) =
        Store::open_locked(lock, cfg.format, opts.segment_size, opts.max_caplen)?;
    for (name, cut) in &recovery.repaired {
        events(Event::Notice(format!(
            "repaired {name} after an unclean stop ({cut} bytes of partial tail cut)"
        )));
    }
    for name in &recovery.missing {
        events(Event::Warning(format!(
            "segment {name} listed in the manifest is missing"
        )));
    }
    for name in &recovery.removed {
        events(Event::Notice(format!(
            "removed {name}: it held no packet (left by an unclean stop)"
        )));
    }
    let mut recorder = Recorder::new(store, opts)?;
    let mut rules = match (engine, rules_path) {
        (Some(engine), Some(path)) => Some(LiveRules::new(
            path,
            engine,
            store_tags,
            set_tags,
            "classic pcap segments (--format pcap)",
            events,
        )),
        _ => None,
    };
    if let (Source::Live(live), SourceConfig::Live(live_cfg)) = (&source, &cfg.source) {
        for line in announcement(live_cfg, live, "recording") {
            events(line);
        }
    }
    let rstats = recorder.stats();
    if let Some(p) = &controls.published {
        p.set_recorder(rstats.clone());
    }
    let stop_recorder = Arc::new(AtomicBool::new(false));
    let mut reader = buffer.reader(0)?;
    let rec_thread = {
        let stop = stop_recorder.clone();
        std::thread::Builder::new()
            .name("recorder".into())
            .spawn(
                move || -> Result<(weir_store::Summary, Recorder), weir_store::RecordError> {
                    let s = recorder.run(&mut reader, &stop)?;
                    Ok((s, recorder))
                },
            )
            .map_err(SensorError::Thread)?
    };
    let mut live_exports = None;
    let meter = match &cfg.flows {
        Some(flows) => {
            let links = interfaces.iter().map(|i| i.link).collect();
            let mut sinks = flow_outputs(flows, &cfg.dir).open()?;
            if controls.metrics.is_some() {
                live_exports = Some(sinks.live());
            }
            let meter = Meter::new(&flows.meter, sinks);
            Some(LiveMeter::spawn(
                meter,
                buffer.reader(1)?,
                links,
                wall_clock_ns,
            ))
        }
        None => None,
    };
    if let (Some(p), Some(m)) = (&controls.published, &meter) {
        p.set_top_flows(m.top_handle());
    }
    // the HTTP analyzer reads after the flow meter
    let http_reader = 1 + usize::from(cfg.flows.is_some());
    let http = match (&cfg.http, http_log.take()) {
        (Some(h), Some(log)) => Some(h.spawn(log, buffer.reader(http_reader)?, &interfaces)?),
        _ => None,
    };
    // the VoIP analyzer reads after the HTTP analyzer
    let voip_reader = http_reader + usize::from(cfg.http.is_some());
    let voip = match (&cfg.voip, voip_out.take()) {
        (Some(v), Some(out)) => Some(v.spawn(out, buffer.reader(voip_reader)?, &interfaces)?),
        _ => None,
    };

    let streams = match crate::stream::Streams::spawn(
        &cfg.streams,
        &buffer,
        // streams read after the flow meter and the HTTP and VoIP analyzers
        voip_reader + usize::from(cfg.voip.is_some()),
        &interfaces,
    ) {
        Ok(s) => s,
        Err(e) => {
            let _ = source.stop();
            stop_recorder.store(true, Ordering::Release);
            let _ = rec_thread.join();
            return Err(e);
        }
    };
    for s in &cfg.streams {
        events(Event::Notice(format!(
            "stream {} to {}{}",
            s.name,
            s.target,
            if s.filter.is_empty() {
                String::new()
            } else {
                format!(" ({})", s.filter)
            }
        )));
    }

    let flows_packets = meter.as_ref().map(|_| Arc::new(AtomicU64::new(0)));
    if let Some(board) = &controls.metrics {
        board.attach(metrics::Live {
            counters: counters.clone(),
            buffer: buffer.clone(),
            readers: ["recorder", "flows", "http", "voip"]
                .into_iter()
                .zip([
                    true,
                    cfg.flows.is_some(),
                    cfg.http.is_some(),
                    cfg.voip.is_some(),
                ])
                .filter(|&(_, on)| on)
                .map(|(n, _)| n.to_string())
                .chain(cfg.streams.iter().map(|s| format!("stream {}", s.name)))
                .collect(),
            recorder: Some(rstats.clone()),
            store: Some(cfg.dir.clone()),
            written: None,
            rules: rules.as_ref().map(|r| r.engine().clone()),
            flows_packets: flows_packets.clone(),
            exports: live_exports,
            streams: streams.stats(),
        });
    }

    let started = Instant::now();
    let deadline = cfg.duration.map(|d| started + d);
    let mut last = (Instant::now(), Totals::default(), 0u64);
    let mut flows_now = cfg.flows.clone();
    loop {
        std::thread::sleep(TICK);
        let new_flows = controls
            .new_flows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(next) = new_flows {
            match (&meter, &flows_now) {
                (Some(m), Some(old)) => {
                    let (now, exports, outcome) = restart_meter(m, old, next, &cfg.dir, events);
                    flows_now = Some(now);
                    if let Some(p) = &controls.published {
                        p.set_flows_outcome(outcome);
                    }
                    if let (Some(board), Some(e)) = (&controls.metrics, exports) {
                        board.set_exports(e);
                    }
                }
                _ => {
                    let e = "flows: new settings for a job without a flow meter: not applied";
                    events(Event::Warning(e.into()));
                    if let Some(p) = &controls.published {
                        p.set_flows_outcome(Err(e.into()));
                    }
                }
            }
        }
        if let (Some(m), Some(p)) = (&meter, &flows_packets) {
            p.store(m.packets(), Ordering::Relaxed);
            if let Some(board) = &controls.metrics {
                board.flows_table(m.table());
            }
        }
        if let Some(board) = &controls.metrics {
            board.analyzers(metrics::Analyzers {
                http: http.as_ref().map(|h| (h.stats(), h.packets())),
                voip: voip.as_ref().map(|v| (v.stats(), v.packets())),
            });
        }
        if let Some(r) = rules.as_mut() {
            r.poll(controls.reload, events);
        }
        if controls.stop.load(Ordering::Relaxed)
            || source.done()
            || deadline.is_some_and(|d| Instant::now() >= d)
            || rec_thread.is_finished()
        {
            break;
        }
        if last.0.elapsed() >= PROGRESS {
            let t = counters.as_ref().map(Counters::totals).unwrap_or_default();
            let now = Instant::now();
            let dt = now.duration_since(last.0).as_secs_f64();
            let written = rstats.packets.load(Ordering::Relaxed);
            events(Event::Progress(progress(
                &t, &last.1, written, last.2, dt, &buffer, &rstats,
            )));
            if cfg.stats_json.is_some() || controls.published.is_some() {
                let flows = meter
                    .as_ref()
                    .map(|m: &LiveMeter<Fanout>| serde_json::json!({ "packets": m.packets() }));
                let mut json = stats_json(started, &t, &buffer, &rstats, flows, rules.as_ref());
                json["streams"] = streams.json();
                json["http"] = analyzer_json(http.as_ref().map(|h| (h.stats(), h.packets())));
                json["voip"] = analyzer_json(voip.as_ref().map(|v| (v.stats(), v.packets())));
                if let Some(p) = &cfg.stats_json {
                    write_stats(p, &json)?;
                }
                if let Some(p) = &controls.published {
                    p.set_counters(json);
                }
            }
            last = (now, t, written);
        }
    }
    // Capture first, so the buffer stops growing; then the recorder drains it.
    let (source_result, file_totals) = source.stop()?;
    stop_recorder.store(true, Ordering::Release);
    let (summary, recorder) = rec_thread
        .join()
        .map_err(|_| SensorError::Panicked("recorder"))??;
    let streams = streams.finish(&buffer);
    let flows = meter.map(|m| {
        let (report, error) = RunReport::finish(m.finish());
        FlowsReport { report, error }
    });
    let http = http.map(weir_http::live::LiveAnalyzer::finish);
    let voip = voip.map(crate::voip::VoipLive::finish);
    // after the analyzers wrote their last records
    let analyzers_kafka = [http_kafka, voip_kafka]
        .into_iter()
        .flatten()
        .map(|k| {
            let (line, lost) = k.end();
            (line, lost.err().map(|e| e.to_string()))
        })
        .collect();
    let totals = counters
        .as_ref()
        .map(Counters::totals)
        .or(file_totals)
        .unwrap_or_default();
    if cfg.stats_json.is_some() || controls.published.is_some() {
        let mut json = stats_json(started, &totals, &buffer, &rstats, None, rules.as_ref());
        json["streams"] = crate::stream::reports_json(&streams);
        json["http"] = analyzer_json(http.as_ref().map(|h| (h.stats, h.packets)));
        json["voip"] = analyzer_json(voip.as_ref().map(|v| (v.stats, v.packets)));
        if let Some(p) = &cfg.stats_json {
            write_stats(p, &json)?;
        }
        if let Some(p) = &controls.published {
            p.set_counters(json);
        }
    }
    if let Some(board) = &controls.metrics {
        let end = flows.as_ref().map(|f| metrics::FlowsEnd {
            meter: f.report.meter.clone(),
            exports: f.report.exports.clone(),
        });
        if let (Some(p), Some(f)) = (&flows_packets, &flows) {
            p.store(f.report.read, Ordering::Relaxed);
        }
        board.analyzers(metrics::Analyzers {
            http: http.as_ref().map(|h| (h.stats, h.packets)),
            voip: voip.as_ref().map(|v| (v.stats, v.packets)),
        });
        board.finish(&totals, end);
    }
    let segs = &recorder.store().manifest.segments;
    let rules = rules.as_ref().map(|r| r.summary(&totals.feed));
    Ok(RecordReport {
        elapsed_s: started.elapsed().as_secs_f64(),
        segments: segs.len(),
        stored_bytes: segs.iter().map(|s| s.bytes).sum(),
        summary,
        totals,
        buffer: buffer.stats(),
        imported: matches!(cfg.source, SourceConfig::Files { .. }),
        rules,
        flows,
        http,
        voip,
        analyzers_kafka,
        streams,
        capture_error: source_result.err(),
    })
}

/// Restarts the running flow meter `meter` (settings `old`) with the settings `next`, between
/// two batches of the buffer ([`LiveMeter::replace`]): capture and the recorder go on, no packet
/// is lost to the flows or metered twice. The old meter ends every flow into its outputs, which
/// are closed, and its summary is said; a JSON or CSV file the new outputs write where the old
/// ones wrote is moved aside first (`flows.json` → `flows.json.1`, the first free number), so
/// the flows before the restart are kept. When the new outputs cannot be opened, the old
/// settings go on (said). Returns the settings now in force and the new outputs' live totals.
fn restart_meter(
    meter: &LiveMeter<Fanout>,
    old: &FlowsConfig,
    next: FlowsConfig,
    dir: &Path,
    events: &mut dyn FnMut(Event),
) -> (
    FlowsConfig,
    Option<weir_export::LiveExports>,
    Result<(), String>,
) {
    type Restarted = (
        FlowsReport,
        Vec<(PathBuf, PathBuf)>,
        Option<String>,
        Option<weir_export::LiveExports>,
        bool,
    );
    let (tx, rx) = std::sync::mpsc::channel::<Restarted>();
    let (old_out, new_out) = (flow_outputs(old, dir), flow_outputs(&next, dir));
    let (old_meter, new_meter) = (old.meter.clone(), next.meter.clone());
    meter.replace(Box::new(move |metered| {
        let (report, error) = RunReport::finish(metered);
        let mut moved = Vec::new();
        let mut problem = None;
        for p in text_files(&new_out) {
            if !text_files(&old_out).contains(&p) || !p.exists() {
                continue;
            }
            match move_aside(&p) {
                Ok(to) => moved.push((p, to)),
                Err(e) => problem = Some(format!("cannot move {} aside: {e}", p.display())),
            }
        }
        let opened = match problem {
            Some(e) => Err(e),
            None => new_out.open().map_err(|e| error_chain(&e)),
        };
        let (mut sinks, settings, applied, problem) = match opened {
            Ok(s) => (s, new_meter, true, None),
            Err(e) => {
                // the old outputs open again: the flows they wrote until now are kept aside
                for p in text_files(&old_out) {
                    if p.exists() {
                        if let Ok(to) = move_aside(&p) {
                            moved.push((p, to));
                        }
                    }
                }
                match old_out.open() {
                    Ok(s) => (s, old_meter, false, Some(e)),
                    Err(e2) => (
                        Fanout::new(),
                        old_meter,
                        false,
                        Some(format!(
                            "{e}; the old outputs did not open either: {}",
                            error_chain(&e2)
                        )),
                    ),
                }
            }
        };
        let live = sinks.live();
        let _ = tx.send((
            FlowsReport { report, error },
            moved,
            problem,
            Some(live),
            applied,
        ));
        Meter::new(&settings, sinks)
    }));
    let Ok((end, moved, problem, live, applied)) = rx.recv() else {
        // the meter's thread had ended (the job is stopping)
        return (
            old.clone(),
            None,
            Err("the job is stopping: the flow meter was not restarted".into()),
        );
    };
    events(Event::Notice(format!(
        "flows: the meter restarted with the new [record.flows] (capture and recording go on); \
         until now:\n{}",
        end.report.summary().trim_end()
    )));
    if let Some(e) = &end.error {
        events(Event::Warning(format!("flows: before the restart: {e}")));
    }
    for (from, to) in &moved {
        events(Event::Notice(format!(
            "flows: {} moved to {} (the flows before the restart)",
            from.display(),
            to.display()
        )));
    }
    let outcome = match problem {
        Some(e) => {
            let e = format!(
                "flows: the new outputs did not open ({e}): the meter goes on with the old \
                 settings"
            );
            events(Event::Warning(e.clone()));
            Err(e)
        }
        None => Ok(()),
    };
    (if applied { next } else { old.clone() }, live, outcome)
}

/// The JSON and CSV files of `outputs` (not standard output).
fn text_files(outputs: &Outputs) -> Vec<PathBuf> {
    [&outputs.json, &outputs.csv]
        .into_iter()
        .flatten()
        .filter(|p| p.as_os_str() != "-")
        .cloned()
        .collect()
}

/// Renames `p` to `p.N`, the first N from 1 with no such file; returns the new name.
fn move_aside(p: &Path) -> std::io::Result<PathBuf> {
    for n in 1u32.. {
        let mut name = p.as_os_str().to_owned();
        name.push(format!(".{n}"));
        let to = PathBuf::from(name);
        if std::fs::symlink_metadata(&to).is_err() {
            std::fs::rename(p, &to)?;
            return Ok(to);
        }
    }
    Err(std::io::Error::other("no free name"))
}

/// The progress between two samples `dt` seconds apart (`prev`, `prev_written` the earlier).
fn progress(
    t: &Totals,
    prev: &Totals,
    written: u64,
    prev_written: u64,
    dt: f64,
    buffer: &PacketBuffer,
    r: &RecorderStats,
) -> Progress {
    let b = buffer.stats();
    Progress {
        pps: (t.feed.received.saturating_sub(prev.feed.received)) as f64 / dt,
        bps: (t.feed.wire_bytes.saturating_sub(prev.feed.wire_bytes)) as f64 * 8.0 / dt,
        written_pps: (written.saturating_sub(prev_written)) as f64 / dt,
        buffer_fill: b.fill(),
        interface_drops: t.interface_drops(),
        backlog_drops: t.softnet_dropped,
        kernel_drops: t.feed.kernel_drops,
        buffer_drops: b.dropped(),
        writer_drops: r.dropped.load(Ordering::Relaxed),
    }
}

/// Every counter of a recorder as one JSON object: `elapsed_s`, `capture` (the source's
/// totals), `buffer`, `writer`, `flows` (the meter's packets while it runs, else null) and
/// `rules` (their counters, else null).
pub fn stats_json(
    started: Instant,
    t: &Totals,
    buffer: &PacketBuffer,
    r: &RecorderStats,
    flows: Option<serde_json::Value>,
    rules: Option<&LiveRules>,
) -> serde_json::Value {
    let b = buffer.stats();
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    serde_json::json!({
        "elapsed_s": started.elapsed().as_secs_f64(),
        "capture": t,
        "buffer": {
            "size": b.size,
            "fill": b.fill(),
            "pushed": b.pushed,
            "dropped_full": b.dropped_full,
            "dropped_too_long": b.dropped_oversize,
            "pages": buffer.page_kind().name(),
        },
        "writer": {
            "packets": l(&r.packets),
            "packet_bytes": l(&r.packet_bytes),
            "disk_bytes": l(&r.disk_bytes),
            "writes": l(&r.writes),
            "dropped": l(&r.dropped),
            "segments": l(&r.segments),
            "deleted": l(&r.deleted),
            "direct": r.direct.load(Ordering::Relaxed),
            "failed": r.failed.load(Ordering::Relaxed),
            "paused": r.pause.load(Ordering::Relaxed),
            "paused_packets": l(&r.paused),
            "index_lag_s": r
                .indexing
                .load(Ordering::Relaxed)
                .then(|| r.index_lag_s(weir_flows::wall_clock_ns())),
        },
        "flows": flows,
        "rules": rules.map(|r| r.json(&t.feed)),
    })
}

/// An analyzer's counters and the packets it read (`packets` 0: not counted live) as JSON
/// (null without the analyzer).
fn analyzer_json<S: serde::Serialize>(a: Option<(S, u64)>) -> serde_json::Value {
    match a {
        None => serde_json::Value::Null,
        Some((stats, packets)) => {
            let mut v = serde_json::json!(stats);
            if packets > 0 {
                v["read"] = packets.into();
            }
            v
        }
    }
}

/// Writes `json` (pretty, one trailing newline) to `path` through a temporary file renamed
/// over it, so a reader never sees half a file.
pub fn write_stats(path: &Path, json: &serde_json::Value) -> Result<(), SensorError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{json:#}\n")).map_err(|source| SensorError::Write {
        path: tmp.clone(),
        source,
    })?;
    std::fs::rename(&tmp, path).map_err(|source| SensorError::Write {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use weir_packet::{LinkType, PacketMeta};
    use weir_pcap::{FileFormat, Interface, PacketWriter, Precision};

    /// An Ethernet/IPv4/UDP frame from 10.0.0.1:`sport` to 10.0.0.2:53 with `payload` bytes
    /// (also the frames of the flows job's tests).
    pub(crate) fn frame(sport: u16, payload: usize) -> Vec<u8> {
        let ip_len = 20 + 8 + payload;
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[
            0x45,
            0,
            (ip_len >> 8) as u8,
            ip_len as u8,
            0,
            0,
            0,
            0,
            64,
            17,
        ]);
        f.extend_from_slice(&[0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&53u16.to_be_bytes());
        f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend(std::iter::repeat_n(0xab, payload));
        f
    }

    /// A job importing `input` into `store` (1 MiB segments, pcapng) with a flow meter of
    /// `meter` beside it and no other output.
    pub(crate) fn import_job(
        input: PathBuf,
        store: &Path,
        meter: weir_flows::Config,
    ) -> RecordConfig {
        RecordConfig {
            source: SourceConfig::Files {
                files: vec![input],
                buffer_bytes: 4 << 20,
            },
            dir: store.to_path_buf(),
            format: Format::Pcapng,
            sizes: Sizes {
                segment_mib: 1,
                write_mib: 1,
                max_mib: None,
                index_chunk_kib: None,
            },
            max_age_ns: None,
            duration: None,
            stats_json: None,
            http: None,
            voip: None,
            flows: Some(FlowsConfig {
                meter,
                outputs: Outputs::default(),
            }),
            rules: None,
            streams: Vec::new(),
        }
    }

    /// Importing a file records every packet, byte for byte, into the store; the flow meter
    /// beside it writes the two flows to the store's `flows.json`; the statistics file and the
    /// report count the same packets.
    #[test]
    fn import_records_every_packet_and_meters_flows() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pcap");
        let packets: Vec<(u64, Vec<u8>)> = (0..10u64)
            .map(|i| {
                let sport = if i % 2 == 0 { 1000 } else { 2000 };
                (
                    1_700_000_000_000_000_000 + i * 1_000_000,
                    frame(sport, i as usize),
                )
            })
            .collect();
        let mut w = PacketWriter::new(
            std::fs::File::create(&input).unwrap(),
            FileFormat::Pcap(Precision::Nano),
            &[Interface::new(LinkType::ETHERNET, 65535)],
        )
        .unwrap();
        for (ts, data) in &packets {
            let meta = PacketMeta {
                ts_ns: *ts,
                orig_len: data.len() as u32,
                interface: 0,
            };
            w.write(&meta, data).unwrap();
        }
        w.finish().unwrap();
        let store = dir.path().join("store");
        let stats = dir.path().join("stats.json");
        let cfg = RecordConfig {
            stats_json: Some(stats.clone()),
            ..import_job(input, &store, weir_flows::Config::default())
        };
        let mut events = Vec::new();
        let report = run(&cfg, &Controls::default(), &mut |e| events.push(e)).unwrap();
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(report.summary.packets, 10);
        assert_eq!(report.totals.feed.received, 10);
        assert!(report.imported && !report.damaged());
        assert_eq!(report.segments, 1);
        let flows = report.flows.expect("a meter");
        assert!(flows.error.is_none());
        assert_eq!(flows.report.read, 10);

        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
        assert_eq!(json["writer"]["packets"], 10);
        assert_eq!(json["capture"]["received"], 10);
        assert!(json["flows"].is_null() && json["rules"].is_null());

        let lines = std::fs::read_to_string(store.join("flows.json")).unwrap();
        let mut ports: Vec<(u64, u64)> = lines
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (
                    v["sourceTransportPort"].as_u64().unwrap(),
                    v["packetDeltaCount"].as_u64().unwrap(),
                )
            })
            .collect();
        ports.sort();
        assert_eq!(ports, [(1000, 5), (2000, 5)], "{lines}");

        let manifest = weir_store::Manifest::load(&store).unwrap().unwrap();
        let seg = store.join(&manifest.segments[0].file);
        let mut r = weir_pcap::FileReader::open(&seg).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            got.push((p.meta.ts_ns, p.data.to_vec()));
        }
        assert_eq!(got, packets);
    }

    /// A flow meter of more flows per shard than a shard holds is refused before the store is
    /// created, with `weir flows`' message (the check of [`weir_flows::Config::check`]).
    #[test]
    fn record_refuses_a_meter_over_the_flow_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let meter = weir_flows::Config {
            max_flows: 16_777_215,
            workers: 1,
            ..weir_flows::Config::default()
        };
        let cfg = import_job(dir.path().join("missing.pcap"), &store, meter);
        let e = run(&cfg, &Controls::default(), &mut |_| {}).unwrap_err();
        assert!(matches!(e, SensorError::MeterConfig(_)), "{e:?}");
        assert_eq!(
            e.to_string(),
            "--max-flows 16777215 over 1 worker(s) is 16777215 flows per worker; the most is \
             16777214 per worker"
        );
        assert!(!store.exists());
    }
}
