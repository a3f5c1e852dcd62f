//! The HTTP job of a live capture (`weir http -i`) and the HTTP analyzer beside a recorder
//! (`weir record --http`): weir-http's [`LiveAnalyzer`] as one reader of the capture
//! pipeline's packet buffer, its logs written in place (a process killed mid-run leaves whole
//! lines up to the last second), every pending transaction written when the job stops.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_capture::PipelineConfig;
use weir_http::live::{Keep, LiveAnalyzer, LiveEnd};
use weir_http::log::{Format, LogWriter};
use weir_http::Analyzer;

use weir_export::{KafkaLog, KafkaStats, LogKind, Teed};

use crate::{Controls, Event, SensorError};

/// Where the analyzer's records go.
#[derive(Clone, Debug)]
pub struct HttpLogs {
    /// Format of the HTTP log.
    pub format: Format,
    /// The HTTP log (`-`: stdout).
    pub http: PathBuf,
    /// The TLS log (JSON lines), if any (`-`: stdout).
    pub tls: Option<PathBuf>,
    /// Both logs to Kafka too (topics weir.http and weir.tls, the JSON lines: see
    /// [`weir_export::KafkaLog`]); the HTTP log must then be JSON.
    pub kafka: Option<weir_export::KafkaOutput>,
}

/// A log's output, whose errors name it: a file written in place or stdout
/// ([`weir_packet::output::create_in_place`]: `cannot write PATH: …`, `cannot write to stdout:
/// …`, the kind kept, the words every command uses), possibly teed to Kafka (whose errors name
/// the Kafka output).
pub type Named = Box<dyn Write + Send>;

/// Opens (creates or truncates) `path` in place, `-` being stdout.
pub(crate) fn open(path: &Path) -> Result<Named, SensorError> {
    let out = weir_packet::output::create_in_place(path).map_err(|e| SensorError::Write {
        path: path.to_path_buf(),
        source: e.source.unwrap_or_else(|| io::Error::other(e.what)),
    })?;
    Ok(Box::new(out))
}

impl HttpLogs {
    /// Opens (creates or truncates) the logs, in place (without Kafka: see
    /// [`HttpLogs::open_with`]).
    pub fn open(&self) -> Result<LogWriter<Named>, SensorError> {
        self.open_with(None)
    }

    /// Opens the Kafka producer of [`HttpLogs::kafka`], if any (a broker must answer).
    pub fn open_kafka(&self) -> Result<Option<KafkaLog>, SensorError> {
        let Some(out) = &self.kafka else {
            return Ok(None);
        };
        if self.format != Format::Json {
            return Err(weir_export::ExportError::Kafka(
                "Kafka takes the HTTP log as JSON, not in Apache's format".into(),
            )
            .into());
        }
        Ok(Some(KafkaLog::open(
            out,
            weir_export::LogTopics::default(),
        )?))
    }

    /// Opens (creates or truncates) the logs, in place; with `kafka`, every line goes there
    /// too (the TLS records as well when there is no TLS log).
    pub fn open_with(&self, kafka: Option<&KafkaLog>) -> Result<LogWriter<Named>, SensorError> {
        let http = open(&self.http)?;
        let tls = self.tls.as_deref().map(open).transpose()?;
        let Some(k) = kafka else {
            return Ok(LogWriter::new(self.format, http, tls));
        };
        let teed =
            |out: Option<Named>, kind| -> Named { Box::new(Teed::new(out, Some(k.lines(kind)))) };
        Ok(LogWriter::new(
            self.format,
            teed(Some(http), LogKind::Http),
            Some(teed(tls, LogKind::Tls)),
        ))
    }
}

/// The packets of the buffer an analyzer beside a recorder reads: those `expr` (tcpdump
/// syntax, compiled for each interface) matches; `None` for every packet.
pub(crate) fn keep(
    expr: &str,
    interfaces: &[weir_pcap::Interface],
) -> Result<Option<Keep>, SensorError> {
    let mut set = weir_filter::FilterSet::new(expr)?;
    if set.is_empty() {
        return Ok(None);
    }
    let filters = set.for_interfaces(interfaces)?;
    Ok(Some(Box::new(move |iface: u32, data: &[u8], len: u32| {
        filters
            .get(iface as usize)
            .is_some_and(|f| f.matches(data, len))
    })))
}

/// The HTTP analyzer beside a recorder (`weir record --http`, an `[[http]]` job of `weir
/// run`): a best-effort reader of the recorder's buffer (when it falls behind it is skipped
/// forward, never costing the recording a packet; the holes become gaps in its records).
#[derive(Clone, Debug)]
pub struct HttpBeside {
    /// The packets it analyzes (tcpdump syntax; empty: all the recorder's).
    pub filter: String,
    /// The analyzer's bounds.
    pub analyzer: weir_http::Config,
    /// Where records go.
    pub logs: HttpLogs,
}

impl HttpBeside {
    /// Every packet of the recorder, default bounds, the HTTP transactions as JSON lines to
    /// `http` and no TLS log (`weir record --http FILE`).
    pub fn all_to(http: PathBuf) -> Self {
        HttpBeside {
            filter: String::new(),
            analyzer: weir_http::Config::default(),
            logs: HttpLogs {
                format: Format::Json,
                http,
                tls: None,
                kafka: None,
            },
        }
    }

    /// Starts the analyzer on `reader`, writing to `writer` (the logs opened before anything
    /// else started, so that a bad path fails first).
    pub(crate) fn spawn(
        &self,
        writer: LogWriter<Named>,
        reader: weir_buffer::Reader,
        interfaces: &[weir_pcap::Interface],
    ) -> Result<LiveAnalyzer, SensorError> {
        let links = interfaces.iter().map(|i| i.link).collect();
        let keep = keep(&self.filter, interfaces)?;
        LiveAnalyzer::spawn_filtered(Analyzer::new(self.analyzer), reader, links, writer, keep)
            .map_err(SensorError::Thread)
    }
}

/// What `weir http -i` does.
#[derive(Clone, Debug)]
pub struct HttpLiveConfig {
    /// The capture (its readers are set by the job).
    pub pipeline: PipelineConfig,
    /// The analyzer's bounds.
    pub analyzer: weir_http::Config,
    /// Where records go.
    pub logs: HttpLogs,
    /// Stop after this long.
    pub duration: Option<Duration>,
}

/// What `weir http -i` did.
#[derive(Debug)]
pub struct HttpLiveReport {
    /// The analyzer's counters and first write error.
    pub end: LiveEnd,
    /// Capture's counters.
    pub live: crate::flows::LiveEnd,
    /// A capture thread's error, if capture failed.
    pub capture_error: Option<weir_capture::CaptureError>,
    /// The Kafka output and its counts, with [`HttpLogs::kafka`].
    pub kafka: Option<(KafkaLog, KafkaStats)>,
}

/// Runs `weir http -i` until `controls.stop` is set, the duration has passed or capture fails;
/// then stops capture, analyzes what is left in the buffer and writes every pending
/// transaction.
pub fn run_live(
    cfg: &HttpLiveConfig,
    controls: &Controls,
    events: &mut dyn FnMut(Event),
) -> Result<HttpLiveReport, SensorError> {
    let kafka = cfg.logs.open_kafka()?;
    let (end, live, capture_error) = crate::live::run_one_analyzer(
        &cfg.pipeline,
        cfg.duration,
        controls,
        events,
        "analyzing HTTP and TLS",
        || cfg.logs.open_with(kafka.as_ref()),
        |writer, reader, links| {
            LiveAnalyzer::spawn(Analyzer::new(cfg.analyzer), reader, links, writer)
                .map_err(SensorError::Thread)
        },
        LiveAnalyzer::finish,
    )?;
    Ok(HttpLiveReport {
        end,
        live,
        capture_error,
        kafka: kafka.map(|k| {
            let s = k.finish();
            (k, s)
        }),
    })
}

/// The HTTP analyzer's Prometheus series (`weir_http_...`): `stats` as of its last tick (or
/// its end), `read` the records it has read from the buffer so far. Every series is one of
/// the counters `weir ctl counters --json` shows under `http` (`read` is its `read`).
pub(crate) fn series(e: &mut weir_metrics::text::Exposition, stats: &weir_http::Stats, read: u64) {
    use weir_metrics::text::Kind::{Counter, Gauge};
    let s = stats;
    e.single(
        "weir_http_read_packets_total",
        Counter,
        "Packets the HTTP analyzer read from the packet buffer (its filter's rejects not counted).",
        read,
    );
    e.single(
        "weir_http_analyzed_packets_total",
        Counter,
        "Packets the HTTP analyzer had analyzed at its last tick (once a second).",
        s.packets,
    );
    e.single(
        "weir_http_tcp_packets_total",
        Counter,
        "TCP segments the HTTP analyzer analyzed.",
        s.tcp_packets,
    );
    e.single(
        "weir_http_connections_total",
        Counter,
        "TCP connections the HTTP analyzer tracked.",
        s.flows,
    );
    e.family(
        "weir_http_connections_recognised_total",
        Counter,
        "Connections recognised by their content, by protocol.",
    )
    .sample(&[("protocol", "http")], s.http_flows)
    .sample(&[("protocol", "tls")], s.tls_flows);
    e.family(
        "weir_http_connections_ended_early_total",
        Counter,
        "Connections ended before their end, by reason: the connection table was full \
         (evicted) or they were idle too long (timeout).",
    )
    .sample(&[("reason", "evicted")], s.flows_evicted)
    .sample(&[("reason", "timeout")], s.flows_timed_out);
    e.single(
        "weir_http_held_bytes_evictions_total",
        Counter,
        "Times the bound on bytes held out of order released a connection's holdings.",
        s.pending_evictions,
    );
    e.single(
        "weir_http_held_bytes_peak",
        Gauge,
        "Most bytes held out of order at once, over all connections.",
        s.max_pending_seen,
    );
    e.single(
        "weir_http_transactions_total",
        Counter,
        "HTTP transaction records written.",
        s.http_records,
    );
    e.single(
        "weir_http_tls_handshakes_total",
        Counter,
        "TLS handshake records written.",
        s.tls_records,
    );
    let r = &s.stream;
    e.single(
        "weir_http_reassembly_delivered_bytes_total",
        Counter,
        "TCP payload bytes delivered in order to the parsers.",
        r.delivered_bytes,
    );
    e.single(
        "weir_http_reassembly_gaps_total",
        Counter,
        "Gaps declared in TCP streams (bytes never seen).",
        r.gaps,
    );
    e.single(
        "weir_http_reassembly_gap_bytes_total",
        Counter,
        "Bytes declared missing in TCP streams.",
        r.gap_bytes,
    );
    e.single(
        "weir_http_reassembly_retransmitted_bytes_total",
        Counter,
        "TCP payload bytes seen again after they were delivered or held.",
        r.retransmitted_bytes,
    );
    e.single(
        "weir_http_reassembly_overlap_conflict_bytes_total",
        Counter,
        "Bytes whose later copy differed from the first one (the first was kept).",
        r.overlap_conflicts,
    );
    e.single(
        "weir_http_reassembly_out_of_order_segments_total",
        Counter,
        "TCP segments that arrived ahead of a hole and waited.",
        r.out_of_order_segments,
    );
    e.single(
        "weir_http_reassembly_evicted_bytes_total",
        Counter,
        "Bytes dropped from a connection's out-of-order holdings to respect its bound.",
        r.evicted_bytes,
    );
    let h = &s.http;
    e.family(
        "weir_http_messages_total",
        Counter,
        "HTTP messages parsed, by kind (final responses and 1xx apart).",
    )
    .sample(&[("kind", "request")], h.requests)
    .sample(&[("kind", "response")], h.responses)
    .sample(&[("kind", "informational")], h.informational);
    e.single(
        "weir_http_orphan_responses_total",
        Counter,
        "Responses with no request left to pair with.",
        h.orphan_responses,
    );
    e.single(
        "weir_http_parse_errors_total",
        Counter,
        "HTTP header blocks refused (httparse errors, headers too long).",
        h.parse_errors,
    );
    e.single(
        "weir_http_desyncs_total",
        Counter,
        "Times a side of a connection lost the message boundary.",
        h.desyncs,
    );
    e.single(
        "weir_http_skipped_bytes_total",
        Counter,
        "Bytes skipped while looking for the next HTTP message.",
        h.skipped_bytes,
    );
    e.family(
        "weir_http_tls_hellos_total",
        Counter,
        "TLS hello messages parsed, by side.",
    )
    .sample(&[("hello", "client")], s.tls.client_hellos)
    .sample(&[("hello", "server")], s.tls.server_hellos);
    e.single(
        "weir_http_tls_errors_total",
        Counter,
        "TLS records or hello messages refused (bad lengths, not TLS, truncated).",
        s.tls.errors,
    );
}

/// The HTTP analyzer over capture files (`weir http -r`): a [`Visitor`](crate::read::Visitor)
/// of the offline read loop (one sequential read per file, packets in file order) writing each
/// transaction as it ends; [`finish`](HttpFiles::finish) writes the pending ones.
pub struct HttpFiles<W: Write> {
    analyzer: Analyzer,
    log: LogWriter<W>,
    error: Option<io::Error>,
}

impl<W: Write> HttpFiles<W> {
    /// An analyzer with `cfg`'s bounds writing to `log`.
    pub fn new(cfg: weir_http::Config, log: LogWriter<W>) -> Self {
        HttpFiles {
            analyzer: Analyzer::new(cfg),
            log,
            error: None,
        }
    }

    /// Writes `events`, keeping the first write error (the analyzer goes on, to count).
    fn write(&mut self, events: Vec<weir_http::Event>) -> Result<(), SensorError> {
        for e in events {
            if self.error.is_none() {
                self.error = self.log.write(&e).err();
            }
        }
        self.error.take().map_or(Ok(()), |e| Err(e.into()))
    }

    /// Ends every pending transaction, writes it and returns the analyzer's counters and the
    /// two outputs (HTTP, TLS), flushed.
    pub fn finish(mut self) -> Result<(weir_http::Stats, W, Option<W>), SensorError> {
        let mut events = Vec::new();
        let stats = self.analyzer.finish(&mut |e| events.push(e));
        self.write(events)?;
        let (http, tls) = self.log.into_inner()?;
        Ok((stats, http, tls))
    }
}

impl<W: Write> crate::read::Visitor for HttpFiles<W> {
    type Error = SensorError;

    fn packet(
        &mut self,
        _interfaces: &[weir_pcap::Interface],
        packet: &weir_pcap::Packet<'_>,
    ) -> Result<(), SensorError> {
        let mut events = Vec::new();
        self.analyzer
            .packet(packet.meta.ts_ns, packet.link, packet.data, &mut |e| {
                events.push(e)
            });
        self.write(events)
    }

    fn parallel_read(&self) -> bool {
        false
    }
}
