//! `weir record`'s options for the analyzers beside the recorder, as clap argument groups
//! (feature `clap`): `--http FILE` with `--http-*`, `--voip FILE` with `--voip-*`, the same
//! options (bounds, formats, outputs, charts) as `weir http` and `weir voip` under a prefix,
//! and the same keys as the config's `[[http]]`/`[[voip]]` tables (`--http-kafka`/`--voip-kafka`:
//! the `--kafka` of `weir http`/`weir voip` with its defaults). Each `--http-*`/`--voip-*`
//! option requires its `--http`/`--voip`. [`HttpBesideArgs::beside`]/[`VoipBesideArgs::beside`]
//! turn them into the job's [`HttpBeside`]/[`VoipBeside`]; [`check_outputs`] refuses two
//! outputs in one place and an output that is an input.

use std::path::{Path, PathBuf};

use crate::http::{HttpBeside, HttpLogs};
use crate::voip::{VoipBeside, VoipOutputs};

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

/// A duration in seconds: from 1 ns to 10⁹ s, finite (the CLI's `seconds`).
fn seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number (seconds)"))?;
    if !(v.is_finite() && (1e-9..=1e9).contains(&v)) {
        return Err(format!("{s} is out of range: seconds from 1e-9 to 1e9"));
    }
    Ok(v)
}

/// Seconds as nanoseconds (the value is checked by [`seconds`]: no overflow).
fn ns(s: f64) -> u64 {
    (s * 1e9) as u64
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

/// Refuses two analyzer outputs in one place (the same name, file, terminal or pipe; see
/// [`crate::output::same_output`]), an output that is one of `inputs` (files imported with
/// `-r`), and a chart directory that is a file.
pub fn check_outputs(
    http: &HttpBesideArgs,
    voip: &VoipBesideArgs,
    inputs: &[PathBuf],
) -> Result<(), String> {
    let outs: Vec<(&str, &Path)> = [
        ("--http", http.http.as_deref()),
        ("--http-tls-log", http.http_tls_log.as_deref()),
        ("--voip", voip.voip.as_deref()),
        ("--voip-streams", voip.voip_streams.as_deref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.map(|p| (f, p)))
    .collect();
    for (i, (fa, a)) in outs.iter().enumerate() {
        weir_packet::output::check_inputs(inputs, Some(*a)).map_err(|e| format!("{fa}: {e}"))?;
        if a.is_dir() {
            return Err(format!("{fa}: {} is a directory", a.display()));
        }
        if let Some((fb, _)) = outs[i + 1..]
            .iter()
            .find(|(_, b)| crate::output::same_output(a, b))
        {
            return Err(format!(
                "{fa} and {fb} both name {}: give each log its own output",
                a.display()
            ));
        }
    }
    if let Some(p) = &voip.voip_plot {
        if p.exists() && !p.is_dir() {
            return Err(format!("--voip-plot: {} is not a directory", p.display()));
        }
    }
    Ok(())
}
