//! The command line's shared argument groups (behind the `clap` feature), declared once and
//! flattened by every subcommand that takes them: input files (`-r`, [`Inputs`]), live capture
//! ([`LiveArgs`]), the one-or-the-other choice of the two ([`Source`]), packet output
//! ([`Output`]), the filter expression ([`Expr`]), the rules ([`RulesArgs`]) and the flow meter
//! beside a recording ([`FlowArgs`]). Each group turns into the library config it describes
//! ([`LiveArgs::pipeline`], [`RulesArgs::config`]) and checks what clap cannot express; every
//! number goes through a value parser of [`weir_packet::value`] (finite and in range, or a usage
//! error naming the limit), before anything is opened, created or allocated.
//!
//! Combinations clap cannot express are checked against the parsed matches ([`given`],
//! [`first_given`]), also before the command runs.
//!
//! `weir record`'s options for the analyzers beside the recorder are here too:
//! `--http FILE` with `--http-*` ([`HttpBesideArgs`]), `--voip FILE` with `--voip-*`
//! ([`VoipBesideArgs`]), the same options (bounds, formats, outputs, charts) as `weir http` and
//! `weir voip` under a prefix, and the same keys as the config's `[[http]]`/`[[voip]]` tables.
//! Each `--http-*`/`--voip-*` option requires its `--http`/`--voip`.
//! [`HttpBesideArgs::beside`]/[`VoipBesideArgs::beside`] turn them into the job's
//! [`HttpBeside`]/[`VoipBeside`]; [`check_outputs`] refuses two outputs in one place and an
//! output that is an input. The sink options of `weir flows` and the analyzers' Kafka options
//! are weir-export's ([`weir_export::args`]), the analyzers' bounds their crates' `Config`s.
//!
//! `weir record`'s options as a whole are [`RecordArgs`], whose [`RecordArgs::config`] is the
//! record job ([`crate::record::RecordConfig`]) they describe.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::ArgMatches;

use crate::http::{HttpBeside, HttpLogs};
use crate::record::RecordConfig;
use crate::voip::{VoipBeside, VoipOutputs};
pub use weir_export::args::{first_given, given, outputs, ExportTargetError};
use weir_packet::value::{block_size, buffer_mib, ns, seconds, snaplen, MAX_SNAPLEN};
use weir_pcap::{FileFormat, Precision};

/// Output file format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Classic pcap, nanosecond timestamps (microsecond ones with --micro where a command has it).
    Pcap,
    /// pcapng with one interface block per input interface, nanosecond timestamps.
    Pcapng,
}

impl Format {
    /// The writer's format; `micro` asks classic pcap for microsecond timestamps.
    pub fn output(self, micro: bool) -> FileFormat {
        match self {
            Format::Pcap if micro => FileFormat::Pcap(Precision::Micro),
            Format::Pcap => FileFormat::Pcap(Precision::Nano),
            Format::Pcapng => FileFormat::Pcapng,
        }
    }
}

/// Input capture files (`-r`), repeated to concatenate.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Inputs {
    /// Input capture file (pcap or pcapng); `-` reads stdin. Repeat to concatenate files.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Where packets are written (`-w`) and in which format.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Output {
    /// Write the packets to this file (`-` for stdout) instead of printing them.
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    pub path: Option<PathBuf>,
    /// Output file format [default: pcap; pcapng for `capture`, which records each packet's
    /// interface].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Classic pcap with microsecond timestamps (the old magic) instead of nanoseconds; implies
    /// `--format pcap`.
    #[arg(long)]
    pub micro: bool,
}

impl Output {
    /// The writer's format: `--format`, else pcap with `--micro`, else `default`.
    pub fn format(&self, default: Format) -> FileFormat {
        match (self.format, self.micro) {
            (Some(f), micro) => f.output(micro),
            (None, true) => FileFormat::Pcap(Precision::Micro),
            (None, false) => default.output(false),
        }
    }

    /// `--micro` is for classic pcap; `--format`/`--micro` need `-w` (`needs_path`).
    pub fn check(&self, needs_path: bool) -> Result<(), String> {
        if self.micro && self.format == Some(Format::Pcapng) {
            return Err("--micro is for classic pcap; pcapng timestamps are nanoseconds".into());
        }
        if needs_path && self.path.is_none() && (self.format.is_some() || self.micro) {
            return Err("--format and --micro describe the file of -w OUT; give -w".into());
        }
        Ok(())
    }
}

/// The rule engine's options (`crates/rules/RULES.md`), shared by every packet path: `read`,
/// `capture`, `record` and `flows`, live and from files.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RulesArgs {
    /// Rule file (one rule per line, see crates/rules/RULES.md): what to keep, slice, sample,
    /// cut off per flow and tag, after the filter expression. Reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Unix socket on which `weir rules add|del|list|stats` reach this process's rules
    /// (created with mode 0660, removed on exit); needs `--rules`.
    #[arg(long, value_name = "PATH", requires = "rules")]
    pub control: Option<PathBuf>,
    /// Keep every rule in user space: no drop rule goes into the kernel socket filter.
    #[arg(long, requires = "rules")]
    pub no_kernel_rules: bool,
}

impl RulesArgs {
    /// The job's rules: the file and its control socket, when a file is given.
    pub fn config(&self) -> Option<crate::rules::RulesConfig> {
        self.rules.clone().map(|path| crate::rules::RulesConfig {
            path,
            control: self.control.clone(),
        })
    }
}

/// The filter expression, and tcpdump's `-n`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Expr {
    /// Filter expression in tcpdump syntax (pcap-filter(7)): every word that is not an option,
    /// joined with spaces, so options may come before, after or between its words; `--` ends
    /// the options.
    #[arg(value_name = "EXPR")]
    pub words: Vec<String>,
    /// Numeric addresses and ports: accepted for tcpdump users, weir never resolves names.
    #[arg(short = 'n', action = clap::ArgAction::Count)]
    pub numeric: u8,
}

impl Expr {
    /// The expression as one string (empty: every packet).
    pub fn joined(&self) -> String {
        self.words.join(" ")
    }
}

/// Refuses stdin (`-`) where a command needs files it can read twice (stores, indexed files).
pub fn no_stdin<'a>(
    mut inputs: impl Iterator<Item = &'a PathBuf>,
    command: &str,
) -> Result<(), String> {
    if inputs.any(|p| p.as_os_str() == "-") {
        return Err(format!(
            "weir {command} reads stores and capture files, not stdin (`-`): \
             save the capture to a file first"
        ));
    }
    Ok(())
}

/// Where packets come from: capture files (`-r`) or live interfaces (`-i`, with the options of
/// live capture), one or the other; shared by `flows`, `record`, `http` and `voip`.
#[derive(clap::Args, Debug, Clone)]
pub struct Source {
    /// Capture files (`-r`).
    #[command(flatten)]
    pub inputs: Inputs,
    /// Live capture (instead of -r): interfaces, threads, buffer...
    #[command(flatten)]
    pub live: LiveArgs,
}

impl Source {
    /// Whether the packets come from interfaces (`-i`).
    pub fn is_live(&self) -> bool {
        !self.live.interfaces.is_empty()
    }

    /// The usage checks of every command that reads files or interfaces: the live options' own
    /// checks, exactly one of the two, and no live-only option with files; `verb` is what the
    /// command does (`meter`, `analyze`).
    pub fn check(&self, m: &ArgMatches, verb: &str) -> Result<(), String> {
        self.live.check()?;
        let reading = !self.inputs.files.is_empty();
        match (reading, self.is_live()) {
            (true, true) => {
                return Err(format!("-i and -r: {verb} live traffic or files, not both"))
            }
            (false, false) => return Err("give input files with -r, or interfaces with -i".into()),
            _ => {}
        }
        if reading {
            let live_only = [LIVE_ONLY, &[("buffer_mib", "--buffer-mib")]].concat();
            if let Some(flag) = first_given(m, &live_only) {
                return Err(format!(
                    "{flag} is for live capture (-i), not for files (-r)"
                ));
            }
        }
        Ok(())
    }
}

/// The options of live capture (`LiveArgs`) other than `-i`: refused with `-r`, where they do
/// nothing.
pub const LIVE_ONLY: &[(&str, &str)] = &[
    ("threads", "--threads"),
    ("fanout", "--fanout"),
    ("no_promisc", "--no-promisc"),
    ("snaplen", "-s/--snaplen"),
    ("slice", "--slice"),
    ("no_hw_timestamps", "--no-hw-timestamps"),
    ("block_size", "--block-size"),
    ("block_count", "--block-count"),
    ("duration", "--duration"),
    ("backend", "--backend"),
];

/// Most bytes one thread's ring may map (block size × block count).
pub const MAX_RING_BYTES: u64 = 16 << 30;

/// Flow options of `weir record --flows`.
#[derive(clap::Args, Debug, Clone)]
pub struct FlowArgs {
    /// With --flows: export NetFlow/IPFIX to TARGET (as `weir flows --export`).
    #[arg(long = "flow-export", value_name = "TARGET", num_args = 0..=1, default_missing_value = weir_export::DEFAULT_COLLECTOR)]
    pub flow_export: Option<String>,
    /// With --flows: format of --flow-export.
    #[arg(long = "flow-format", value_enum, default_value_t = weir_export::NetflowFormat::Ipfix)]
    pub flow_format: weir_export::NetflowFormat,
    /// With --flows: write JSON lines to OUT (the default output is a file in the store:
    /// DIR/flows.json).
    #[arg(long = "flow-json", value_name = "OUT")]
    pub flow_json: Option<PathBuf>,
    /// With --flows: idle timeout in seconds.
    #[arg(long = "flow-idle-timeout", value_name = "S", default_value_t = 30.0,
          value_parser = seconds,
          allow_negative_numbers = true)]
    pub flow_idle_timeout: f64,
    /// With --flows: active timeout in seconds.
    #[arg(
        long = "flow-active-timeout",
        value_name = "S",
        default_value_t = 120.0,
        value_parser = seconds,
          allow_negative_numbers = true)]
    pub flow_active_timeout: f64,
}

impl FlowArgs {
    /// The ids and flags of these options, for "given without --flows" checks.
    pub const IDS: &'static [(&'static str, &'static str)] = &[
        ("flow_export", "--flow-export"),
        ("flow_format", "--flow-format"),
        ("flow_json", "--flow-json"),
        ("flow_idle_timeout", "--flow-idle-timeout"),
        ("flow_active_timeout", "--flow-active-timeout"),
    ];

    /// The flow meter beside a recording these options describe; `tags`: a run with rules,
    /// whose records carry the packets' tags.
    pub fn config(&self, tags: bool) -> Result<crate::record::FlowsConfig, ExportTargetError> {
        Ok(crate::record::FlowsConfig {
            meter: weir_flows::Config {
                idle_timeout_ns: ns(self.flow_idle_timeout),
                active_timeout_ns: ns(self.flow_active_timeout),
                ..weir_flows::Config::default()
            },
            outputs: outputs(
                self.flow_export.as_deref(),
                self.flow_format,
                (false, false, tags),
                self.flow_json.as_deref(),
                None,
            )?,
        })
    }
}

/// Layers `--slice` keeps.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slice {
    /// Link headers only.
    L2,
    /// Up to the IP header.
    L3,
    /// Up to the transport header.
    L4,
}

/// Receive backend on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// AF_PACKET TPACKET_V3 rings.
    Packet,
    /// AF_XDP sockets fed by weir's XDP program.
    Xdp,
}

/// Fanout mode on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fanout {
    /// By flow hash (both directions of a flow on one thread).
    Hash,
    /// Round robin.
    Lb,
    /// By receiving CPU.
    Cpu,
}

/// Capture options common to the live commands (`capture`, `record`, `flows -i`).
#[derive(clap::Args, Debug, Clone)]
pub struct LiveArgs {
    /// Interfaces to capture on, comma-separated (`-i eth0,eth1`).
    #[arg(short = 'i', long = "interface", value_delimiter = ',')]
    pub interfaces: Vec<String>,
    /// Capture threads per interface (joined in one fanout group), 1 to 256.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256),
          allow_negative_numbers = true)]
    pub threads: usize,
    /// How the fanout group spreads packets over threads.
    #[arg(long, value_enum, default_value_t = Fanout::Hash)]
    pub fanout: Fanout,
    /// Do not put the interfaces in promiscuous mode.
    #[arg(long)]
    pub no_promisc: bool,
    /// Keep at most this many bytes of each packet (the original length is recorded); 0 is the
    /// whole packet (262144), as in tcpdump.
    #[arg(short = 's', long, default_value_t = MAX_SNAPLEN, value_parser = snaplen,
          allow_negative_numbers = true)]
    pub snaplen: u32,
    /// Keep only the headers up to this layer (the original length is recorded).
    #[arg(long, value_enum)]
    pub slice: Option<Slice>,
    /// Do not ask the NIC for hardware timestamps.
    #[arg(long)]
    pub no_hw_timestamps: bool,
    /// Ring block size in bytes (a power of two from 4096 to 1 GiB).
    #[arg(long, default_value_t = 1 << 20, value_parser = block_size,
          allow_negative_numbers = true)]
    pub block_size: u32,
    /// Ring blocks per thread (1 to 1048576; at most 16 GiB of ring per thread).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1 << 20),
          allow_negative_numbers = true)]
    pub block_count: u32,
    /// Shared packet buffer size in MiB, a power of two up to 65536 (default: 512 for `record`,
    /// 64 for `capture` and `flows`).
    #[arg(long, value_name = "MIB", value_parser = buffer_mib,
          allow_negative_numbers = true)]
    pub buffer_mib: Option<usize>,
    /// Receive backend: `packet` (AF_PACKET rings) or `xdp` (AF_XDP sockets, one per RX queue).
    #[arg(long, value_enum, default_value_t = Backend::Packet)]
    pub backend: Backend,
    /// Stop after this many seconds (up to 10⁹).
    #[arg(long, value_name = "SECONDS", value_parser = seconds,
          allow_negative_numbers = true)]
    pub duration: Option<f64>,
}

impl LiveArgs {
    /// Usage checks clap cannot express: each interface once, a ring that the kernel can map.
    pub fn check(&self) -> Result<(), String> {
        for (k, i) in self.interfaces.iter().enumerate() {
            if i.is_empty() {
                return Err("-i: empty interface name".into());
            }
            if self.interfaces[..k].contains(i) {
                return Err(format!(
                    "interface {i} given twice: every packet would be captured twice"
                ));
            }
        }
        let ring = u64::from(self.block_size) * u64::from(self.block_count);
        if ring > MAX_RING_BYTES {
            return Err(format!(
                "--block-size {} × --block-count {} is {ring} bytes of ring per thread; the \
                 most is {} (16 GiB)",
                self.block_size, self.block_count, MAX_RING_BYTES
            ));
        }
        Ok(())
    }

    /// The capture library's fanout mode.
    pub fn fanout_mode(&self) -> weir_capture::FanoutMode {
        match self.fanout {
            Fanout::Hash => weir_capture::FanoutMode::Hash,
            Fanout::Lb => weir_capture::FanoutMode::LoadBalance,
            Fanout::Cpu => weir_capture::FanoutMode::Cpu,
        }
    }

    /// The live pipeline these options ask for, capturing what `expr` matches into a buffer of
    /// `--buffer-mib` (else `default_buffer_mib`) with `readers` registered and `best_effort`
    /// readers.
    pub fn pipeline(
        &self,
        expr: &str,
        readers: usize,
        best_effort: usize,
        default_buffer_mib: usize,
    ) -> Result<weir_capture::PipelineConfig, UsageError> {
        let buffer_mib = self.buffer_mib.unwrap_or(default_buffer_mib);
        if self.interfaces.is_empty() {
            return Err(UsageError("give at least one interface with -i".into()));
        }
        if self.threads == 0 {
            return Err(UsageError("--threads must be at least 1".into()));
        }
        let buffer_bytes = buffer_mib
            .checked_mul(1 << 20)
            .filter(|s| s.is_power_of_two())
            .ok_or_else(|| {
                UsageError(format!("--buffer-mib {buffer_mib} must be a power of two"))
            })?;
        Ok(weir_capture::PipelineConfig {
            interfaces: self.interfaces.clone(),
            threads: self.threads,
            fanout: self.fanout_mode(),
            promiscuous: !self.no_promisc,
            snaplen: self.snaplen,
            slice: self.slice.map(|s| match s {
                Slice::L2 => weir_decode::SliceLevel::L2,
                Slice::L3 => weir_decode::SliceLevel::L3,
                Slice::L4 => weir_decode::SliceLevel::L4,
            }),
            hw_timestamps: !self.no_hw_timestamps,
            ring: weir_capture::RingConfig {
                block_size: self.block_size,
                block_count: self.block_count,
                ..weir_capture::RingConfig::default()
            },
            filter: expr.to_string(),
            buffer_bytes,
            readers,
            best_effort_readers: best_effort,
            rules: None,
            kernel_rules: true,
            backend: match self.backend {
                Backend::Packet => weir_capture::Backend::Packet,
                Backend::Xdp => weir_capture::Backend::Xdp,
            },
        })
    }
}

/// `--metrics [ADDR]` on the live commands (`weir record`, `weir capture`): Prometheus metrics
/// served at `http://ADDR/metrics` while the job runs (off unless given). [`MetricsArgs::start`]
/// runs before capture, so a bad address or a port in use stops the command before anything is
/// captured; the job publishes its counters on the board the server renders
/// ([`crate::metrics`]).
#[derive(clap::Args, Debug, Clone)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics while running (ADDR is HOST:PORT,
    /// 127.0.0.1:9637 when --metrics is given alone; port 0 picks a free port, printed)
    #[arg(long = "metrics", value_name = "ADDR", num_args = 0..=1,
          default_missing_value = weir_metrics::DEFAULT_ADDR, value_parser = metrics_address)]
    pub addr: Option<std::net::SocketAddr>,
}

/// Parses a metrics address (clap's value parser: a bad one is a usage error).
fn metrics_address(s: &str) -> Result<std::net::SocketAddr, String> {
    weir_metrics::http::parse_addr(s).map_err(|e| e.to_string())
}

impl MetricsArgs {
    /// Starts the server when asked (and `say`s where), else nothing.
    pub fn start(
        &self,
        say: &mut dyn FnMut(String),
    ) -> Result<Option<crate::metrics::Serving>, weir_metrics::ServeError> {
        let Some(addr) = self.addr else {
            return Ok(None);
        };
        let serving = crate::metrics::serve(addr)?;
        say(format!(
            "metrics on http://{}/metrics",
            serving.server.local_addr()
        ));
        Ok(Some(serving))
    }
}

/// An option value or combination the library refuses, in the options' terms.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Format of the HTTP log.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HttpFormat {
    /// JSON lines, Zeek http.log's field names.
    Json,
    /// Apache's combined log format (`%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i"`).
    Apache,
}

impl From<HttpFormat> for weir_http::log::Format {
    fn from(f: HttpFormat) -> Self {
        match f {
            HttpFormat::Json => weir_http::log::Format::Json,
            HttpFormat::Apache => weir_http::log::Format::Apache,
        }
    }
}

/// A filter expression of an analyzer, checked (syntax, for Ethernet) before anything starts.
fn filter(expr: &str, flag: &str) -> Result<String, String> {
    weir_filter::FilterSet::new(expr).map_err(|e| format!("{flag}: {e}"))?;
    Ok(expr.to_string())
}

/// An analyzer's Kafka output with the defaults of `weir http|voip --kafka`, checked.
fn kafka(brokers: Option<&str>, flag: &str) -> Result<Option<weir_export::KafkaOutput>, String> {
    let Some(b) = brokers else { return Ok(None) };
    let out = weir_export::KafkaOutput::new(b, "weir.logs");
    out.check().map_err(|e| format!("{flag}: {e}"))?;
    Ok(Some(out))
}

/// The HTTP analyzer beside the recorder (`weir record --http FILE`).
#[derive(clap::Args, Clone, Debug)]
pub struct HttpBesideArgs {
    /// Also log HTTP transactions from the same buffer to FILE (see `weir http`; written in
    /// place, `-` for stdout).
    #[arg(long = "http", value_name = "FILE")]
    pub http: Option<PathBuf>,
    /// Format of the --http log (json: Zeek http.log's fields; apache: combined log format).
    #[arg(long, value_enum, default_value_t = HttpFormat::Json, requires = "http")]
    pub http_format: HttpFormat,
    /// Also write one JSON line per TLS handshake (SNI, ALPN, version) to FILE.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub http_tls_log: Option<PathBuf>,
    /// Only the packets this tcpdump expression matches go to the HTTP analyzer (the store
    /// keeps every packet recorded).
    #[arg(long, value_name = "EXPR", requires = "http")]
    pub http_filter: Option<String>,
    /// Most TCP connections the HTTP analyzer tracks at once (see `weir http --max-flows`).
    #[arg(long, value_name = "N", default_value_t = 500_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000),
          allow_negative_numbers = true, requires = "http")]
    pub http_max_flows: u64,
    /// Most MiB the HTTP analyzer holds out of order (1 to 65536).
    #[arg(long, value_name = "MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=65536),
          allow_negative_numbers = true, requires = "http")]
    pub http_max_memory_mib: u64,
    /// Seconds without a packet after which the HTTP analyzer ends a connection.
    #[arg(long, value_name = "S", default_value_t = 300.0, value_parser = seconds,
          allow_negative_numbers = true, requires = "http")]
    pub http_idle_timeout: f64,
    /// Also send the HTTP and TLS records to Kafka (topics weir.http, weir.tls; the --json
    /// lines; lz4, the host name as sensor: see `weir http --kafka`): bootstrap brokers
    /// HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "BROKERS", requires = "http")]
    pub http_kafka: Option<String>,
}

impl HttpBesideArgs {
    /// The analyzer these options describe, if `--http` was given.
    pub fn beside(&self) -> Result<Option<HttpBeside>, String> {
        let Some(http) = &self.http else {
            return Ok(None);
        };
        Ok(Some(HttpBeside {
            filter: filter(self.http_filter.as_deref().unwrap_or(""), "--http-filter")?,
            analyzer: weir_http::Config {
                max_flows: self.http_max_flows as usize,
                max_total_pending: (self.http_max_memory_mib as usize) << 20,
                idle_timeout_ns: ns(self.http_idle_timeout),
                ..weir_http::Config::default()
            },
            logs: HttpLogs {
                format: self.http_format.into(),
                http: http.clone(),
                tls: self.http_tls_log.clone(),
                kafka: kafka(self.http_kafka.as_deref(), "--http-kafka")?,
            },
        }))
    }
}

/// The VoIP analyzer beside the recorder (`weir record --voip FILE`).
#[derive(clap::Args, Clone, Debug)]
pub struct VoipBesideArgs {
    /// Also analyze SIP calls and RTP streams from the same buffer: call (and stream) records
    /// as JSON lines to FILE (see `weir voip`; each call written when it ends, `-` for stdout).
    #[arg(long = "voip", value_name = "FILE")]
    pub voip: Option<PathBuf>,
    /// Write the RTP stream records to FILE instead of beside the calls.
    #[arg(long, value_name = "FILE", requires = "voip")]
    pub voip_streams: Option<PathBuf>,
    /// Only the packets this tcpdump expression matches go to the VoIP analyzer (the store
    /// keeps every packet recorded).
    #[arg(long, value_name = "EXPR", requires = "voip")]
    pub voip_filter: Option<String>,
    /// Most SIP Call-IDs the VoIP analyzer tracks (see `weir voip --max-calls`).
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000),
          allow_negative_numbers = true, requires = "voip")]
    pub voip_max_calls: u64,
    /// Most RTP streams the VoIP analyzer tracks (see `weir voip --max-streams`).
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000),
          allow_negative_numbers = true, requires = "voip")]
    pub voip_max_streams: u64,
    /// A call that is over is written once this many seconds pass with none of its packets.
    #[arg(long, value_name = "SECONDS", default_value_t = 2.0, value_parser = seconds,
          allow_negative_numbers = true, requires = "voip")]
    pub voip_call_linger: f64,
    /// A call (or heuristic RTP stream) idle this many seconds is written as it stands.
    #[arg(long, value_name = "SECONDS", default_value_t = 300.0, value_parser = seconds,
          allow_negative_numbers = true, requires = "voip")]
    pub voip_call_timeout: f64,
    /// Draw each call's jitter and loss over time (SVG and CSV) into DIR when the call is
    /// written (see `weir voip --plot`).
    #[arg(long, value_name = "DIR", requires = "voip")]
    pub voip_plot: Option<PathBuf>,
    /// The charts' interval in seconds of the packets' time.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = seconds,
          allow_negative_numbers = true, requires = "voip_plot")]
    pub voip_plot_interval: f64,
    /// Also send the call and RTP stream records to Kafka (topics weir.calls, weir.rtp; lz4,
    /// the host name as sensor: see `weir voip --kafka`): bootstrap brokers
    /// HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "BROKERS", requires = "voip")]
    pub voip_kafka: Option<String>,
}

impl VoipBesideArgs {
    /// The analyzer these options describe, if `--voip` was given.
    pub fn beside(&self) -> Result<Option<VoipBeside>, String> {
        let Some(calls) = &self.voip else {
            return Ok(None);
        };
        Ok(Some(VoipBeside {
            filter: filter(self.voip_filter.as_deref().unwrap_or(""), "--voip-filter")?,
            analyzer: weir_voip::Config {
                max_calls: self.voip_max_calls as usize,
                max_streams: self.voip_max_streams as usize,
                linger_ns: ns(self.voip_call_linger),
                call_timeout_ns: ns(self.voip_call_timeout),
                timeline_ns: if self.voip_plot.is_some() {
                    ns(self.voip_plot_interval).max(1)
                } else {
                    0
                },
                ..weir_voip::Config::default()
            },
            outputs: VoipOutputs {
                calls: calls.clone(),
                streams: self.voip_streams.clone(),
                plot: self.voip_plot.clone(),
                kafka: kafka(self.voip_kafka.as_deref(), "--voip-kafka")?,
            },
        }))
    }
}

/// Refuses two analyzer outputs in one place (the same name, file, terminal or pipe), an output
/// that is one of `inputs` (files imported with `-r`) or a directory
/// ([`crate::output::distinct_outputs`]), and a chart directory that is a file.
pub fn check_outputs(
    http: &HttpBesideArgs,
    voip: &VoipBesideArgs,
    inputs: &[PathBuf],
) -> Result<(), String> {
    let outs = [
        ("--http", http.http.as_deref()),
        ("--http-tls-log", http.http_tls_log.as_deref()),
        ("--voip", voip.voip.as_deref()),
        ("--voip-streams", voip.voip_streams.as_deref()),
    ];
    crate::output::distinct_outputs(&outs, inputs)?;
    if let Some(p) = &voip.voip_plot {
        if p.exists() && !p.is_dir() {
            return Err(format!("--voip-plot: {} is not a directory", p.display()));
        }
    }
    Ok(())
}

/// Refuses to import a file that lies in the store `dir` itself (one of its segments, through
/// any link): it would be recorded into the store it is read from, its packets twice there.
fn not_in_store(inputs: &[PathBuf], dir: &Path) -> Result<(), String> {
    let Ok(store) = std::fs::canonicalize(dir) else {
        return Ok(()); // a new store holds nothing yet
    };
    for input in inputs {
        let home = std::fs::canonicalize(input)
            .ok()
            .and_then(|real| real.parent().map(Path::to_path_buf));
        if home.as_deref() == Some(store.as_path()) {
            return Err(format!(
                "refusing to import {} into the store {} it is part of",
                input.display(),
                dir.display()
            ));
        }
    }
    Ok(())
}

/// The options of `weir record`: live capture (or files to import), the store, the flow meter
/// and analyzers beside it, rules and metrics; [`RecordArgs::config`] is the job they describe.
#[derive(clap::Args, Debug)]
#[command(mut_arg("files", |a| a.help(
    "Import this capture file instead of capturing live (a lossless copy into the store); \
     repeat to import several",
)))]
pub struct RecordArgs {
    #[command(flatten)]
    source: Source,
    /// Store directory (created if needed; reopened after a crash, its segments repaired).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    dir: PathBuf,
    /// Segment file format.
    #[arg(long, value_enum, default_value_t = weir_store::Format::Pcapng)]
    format: weir_store::Format,
    /// Segment size in MiB (1 to 1048576).
    #[arg(long, value_name = "MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20),
          allow_negative_numbers = true)]
    segment_mib: u64,
    /// Delete the oldest segments while the store holds more than this many MiB (at least
    /// --segment-mib).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 40),
          allow_negative_numbers = true)]
    max_mib: Option<u64>,
    /// Delete segments whose last packet is older than this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = seconds,
          allow_negative_numbers = true)]
    max_age: Option<f64>,
    /// Bytes per disk write, in MiB (1 to 1024; a segment's worth at most).
    #[arg(long, value_name = "MIB", default_value_t = 4,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024),
          allow_negative_numbers = true)]
    write_mib: usize,
    /// Do not index the segments (see `weir extract`).
    #[arg(long)]
    no_index: bool,
    /// Index chunk size in KiB, 4 to 1048576 (smaller: finer extraction, larger index).
    #[arg(long, value_name = "KIB", default_value_t = weir_index::DEFAULT_CHUNK / 1024,
          value_parser = clap::value_parser!(u32).range(4..=1 << 20),
          allow_negative_numbers = true)]
    index_chunk_kib: u32,
    /// Write every counter as JSON to FILE, every second and at the end.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Also meter flows from the same buffer (see `weir flows` for the outputs).
    #[arg(long)]
    flows: bool,
    #[command(flatten)]
    flow: FlowArgs,
    #[command(flatten)]
    http: HttpBesideArgs,
    #[command(flatten)]
    voip: VoipBesideArgs,
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    #[command(flatten)]
    expr: Expr,
}

impl RecordArgs {
    /// The store's sizes, as given.
    fn sizes(&self) -> weir_store::Sizes {
        weir_store::Sizes {
            segment_mib: self.segment_mib,
            write_mib: self.write_mib as u64,
            max_mib: self.max_mib,
            index_chunk_kib: (!self.no_index).then_some(self.index_chunk_kib),
        }
    }

    /// Usage checks clap cannot express, against what was given (`m`).
    pub fn check(&self, m: &ArgMatches) -> Result<(), String> {
        self.source.live.check()?;
        let importing = !self.source.inputs.files.is_empty();
        match (importing, !self.source.is_live()) {
            (true, false) => return Err("-i and -r: record live or import files, not both".into()),
            (false, true) => {
                return Err("give interfaces with -i, or files to import with -r".into())
            }
            _ => {}
        }
        if importing {
            if let Some(flag) = first_given(m, LIVE_ONLY) {
                return Err(format!(
                    "{flag} is for live capture (-i); -r imports files as they are"
                ));
            }
            if !self.expr.words.is_empty() {
                return Err(
                    "a filter expression applies to live capture; filter files with \
                            `weir read` first"
                        .into(),
                );
            }
        }
        if given(m, "write_mib") && self.write_mib as u64 > self.segment_mib {
            return Err(format!(
                "--write-mib {} is larger than a segment (--segment-mib {})",
                self.write_mib, self.segment_mib
            ));
        }
        self.sizes().check(&self.dir).map_err(|e| e.in_options())?;
        if !self.flows {
            if let Some(flag) = first_given(m, FlowArgs::IDS) {
                return Err(format!("{flag} configures --flows; give --flows too"));
            }
        }
        Ok(())
    }

    /// The store directory (`-o`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The metrics server's options (`--metrics`).
    pub fn metrics(&self) -> &MetricsArgs {
        &self.metrics
    }

    /// The job these options describe (after [`RecordArgs::check`]).
    pub fn config(&self) -> Result<RecordConfig, RecordArgsError> {
        check_outputs(&self.http, &self.voip, &self.source.inputs.files).map_err(UsageError)?;
        not_in_store(&self.source.inputs.files, &self.dir).map_err(UsageError)?;
        let source = if self.source.inputs.files.is_empty() {
            crate::live::SourceConfig::Live(weir_capture::PipelineConfig {
                kernel_rules: !self.rules.no_kernel_rules,
                ..self.source.live.pipeline(&self.expr.joined(), 1, 0, 512)?
            })
        } else {
            crate::live::SourceConfig::Files {
                files: self.source.inputs.files.clone(),
                buffer_bytes: self.source.live.buffer_mib.unwrap_or(512) << 20,
            }
        };
        // with rules, the flow records carry the packets' tags
        let tags = self.rules.rules.is_some();
        let flows = self.flows.then(|| self.flow.config(tags)).transpose()?;
        Ok(RecordConfig {
            source,
            dir: self.dir.clone(),
            format: self.format,
            sizes: self.sizes(),
            max_age_ns: self.max_age.map(ns),
            duration: self.source.live.duration.map(Duration::from_secs_f64),
            stats_json: self.stats_json.clone(),
            flows,
            http: self.http.beside().map_err(UsageError)?,
            voip: self.voip.beside().map_err(UsageError)?,
            rules: self.rules.config(),
            streams: Vec::new(),
        })
    }
}

/// Why [`RecordArgs::config`] refused the options.
#[derive(Debug, thiserror::Error)]
pub enum RecordArgsError {
    /// An option value or combination that cannot work.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// `--flow-export`'s target is not one.
    #[error(transparent)]
    Target(#[from] ExportTargetError),
}
