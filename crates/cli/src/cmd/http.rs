//! `weir http (-r FILE | -i IF) [-w OUT] [--format json|apache] [--tls-log FILE] [EXPR]`: one
//! line per HTTP transaction (JSON with Zeek http.log's fields, or Apache's combined log format)
//! and, with `--tls-log`, one JSON line per TLS handshake (SNI, ALPN, negotiated version), through
//! weir-http's analyzer. From files the packets come from the shared offline loop (BPF filter,
//! damage handling) into [`HttpFiles`]; live, from the capture pipeline ([`weir_sensor::http::run_live`]: the logs
//! written in place, SIGINT/SIGTERM end it and every pending transaction is written). A summary
//! of the analyzer's counters (transactions, gaps, evictions) ends the run on stderr.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use weir_export::{LogKind, Teed};
use weir_filter::FilterSet;
use weir_http::log::{Format, LogWriter};
use weir_http::Config;
use weir_sensor::http::{HttpFiles, HttpLiveConfig, HttpLogs};

use crate::args;
use crate::input::read_filtered;
use crate::output::{self, Status};

/// Format of the HTTP log.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    /// JSON lines, Zeek http.log's field names.
    Json,
    /// Apache's combined log format (`%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i"`).
    Apache,
}

/// Arguments of `weir http`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    source: args::Source,
    /// Write the HTTP transactions to OUT (`-` for stdout, the default).
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    out: Option<PathBuf>,
    /// Format of the HTTP log (the TLS log is JSON lines).
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    format: LogFormat,
    /// Also write one JSON line per TLS handshake (SNI, ALPN, version, cipher) to FILE (`-` for
    /// stdout when -w names a file).
    #[arg(long, value_name = "FILE")]
    tls_log: Option<PathBuf>,
    /// Most TCP connections tracked at once (at least 1); beyond it the least recently seen
    /// eighth is ended early and counted.
    #[arg(long, value_name = "N", default_value_t = 500_000,
          value_parser = clap::value_parser!(u64).range(1..=100_000_000),
          allow_negative_numbers = true)]
    max_flows: u64,
    /// Most MiB held out of order over all connections (1 to 65536); beyond it holes become
    /// gaps early, counted.
    #[arg(long, value_name = "MIB", default_value_t = 256,
          value_parser = clap::value_parser!(u64).range(1..=65536),
          allow_negative_numbers = true)]
    max_memory_mib: u64,
    /// Seconds without a packet after which a connection ends.
    #[arg(long, value_name = "S", default_value_t = 300.0, value_parser = args::seconds,
          allow_negative_numbers = true)]
    idle_timeout: f64,
    #[command(flatten)]
    kafka: weir_export::KafkaLogArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.source.check(m, "analyze")?;
        if self.kafka.kafka.is_some() && self.format != LogFormat::Json {
            return Err("--kafka sends the JSON records: leave out --format apache".into());
        }
        self.kafka.check(m)
    }

    fn analyzer(&self) -> Config {
        Config {
            max_flows: self.max_flows as usize,
            max_total_pending: (self.max_memory_mib as usize) << 20,
            idle_timeout_ns: (self.idle_timeout * 1e9) as u64,
            ..Config::default()
        }
    }
}

fn format(f: LogFormat) -> Format {
    match f {
        LogFormat::Json => Format::Json,
        LogFormat::Apache => Format::Apache,
    }
}

/// Runs `weir http`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let no_w = if args.kafka.kafka.is_some() {
        "/dev/null"
    } else {
        "-"
    };
    let http_path = args.out.clone().unwrap_or_else(|| PathBuf::from(no_w));
    if let Some(tls) = &args.tls_log {
        if output::same_output(tls, &http_path) {
            bail!(
                "--tls-log and -w both name {}: give the two logs different outputs",
                tls.display()
            );
        }
    }
    if args.source.is_live() {
        return run_live(args, http_path);
    }
    // the expression is checked before any output is created
    FilterSet::new(&args.expr.joined())?;
    output::check_inputs(&args.source.inputs.files, Some(&http_path))?;
    if let Some(t) = &args.tls_log {
        output::check_inputs(&args.source.inputs.files, Some(t))?;
    }
    let kafka = args.kafka.open()?;
    let lines = |kind| kafka.as_ref().map(|k| k.lines(kind));
    let http = Teed::new(Some(output::create(&http_path)?), lines(LogKind::Http));
    let tls = args.tls_log.as_deref().map(output::create).transpose()?;
    let tls = (tls.is_some() || kafka.is_some()).then(|| Teed::new(tls, lines(LogKind::Tls)));
    let log = LogWriter::new(format(args.format), http, tls);
    let mut sink = HttpFiles::new(args.analyzer(), log);
    let status = read_filtered(&args.source.inputs.files, args.expr.joined(), &mut sink)?;
    let (stats, http, tls) = sink.finish()?;
    for out in std::iter::once(http)
        .chain(tls)
        .filter_map(Teed::into_inner)
    {
        out.commit()?;
    }
    eprint!("{stats}");
    if let Some(k) = kafka {
        let (line, lost) = k.end();
        eprintln!("weir: {line}");
        lost?;
    }
    Ok(status)
}

/// `weir http -i`: the live job, then its summary.
fn run_live(args: Args, http_path: PathBuf) -> Result<Status> {
    let cfg = HttpLiveConfig {
        pipeline: args.source.live.pipeline(&args.expr.joined(), 1, 0, 64)?,
        analyzer: args.analyzer(),
        logs: HttpLogs {
            format: format(args.format),
            http: http_path,
            tls: args.tls_log.clone(),
            kafka: args.kafka.output().map_err(anyhow::Error::msg)?,
        },
        duration: args.source.live.duration.map(Duration::from_secs_f64),
    };
    let controls = output::controls(false)?;
    let report = weir_sensor::http::run_live(&cfg, &controls, &mut output::event)?;
    eprint!("{}", report.end.stats);
    eprintln!(
        "{}",
        output::live_summary(&report.live.totals, &report.live.buffer)
    );
    if let Some((k, s)) = &report.kafka {
        eprintln!("weir: {}", k.summary(s));
        k.check(s)?;
    }
    if let Some(e) = report.end.error {
        return Err(e.into());
    }
    if let Some(e) = report.capture_error {
        return Err(e.into());
    }
    Ok(Status::Clean)
}
