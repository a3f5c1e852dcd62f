//! `weir http (-r FILE | -i IF) [-w OUT] [--format json|apache] [--tls-log FILE] [EXPR]`: one
//! line per HTTP transaction (JSON with Zeek http.log's fields, or Apache's combined log format)
//! and, with `--tls-log`, one JSON line per TLS handshake (SNI, ALPN, negotiated version), through
//! weir-http's analyzer (its bounds: [`weir_http::Config`]). From files the packets come from the
//! shared offline loop (BPF filter, damage handling) into [`HttpFiles`]; live, from the capture
//! pipeline ([`weir_sensor::http::run_live`]: the logs written in place, SIGINT/SIGTERM end it
//! and every pending transaction is written). A summary of the analyzer's counters
//! (transactions, gaps, evictions) ends the run on stderr.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use weir_export::{LogKind, Teed};
use weir_http::log::LogWriter;
use weir_sensor::args::HttpFormat;
use weir_sensor::http::{HttpFiles, HttpLiveConfig, HttpLogs};

use crate::args;
use crate::input::read_filtered;
use crate::output::{self, Status};

/// Arguments of `weir http`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    source: args::Source,
    /// Write the HTTP transactions to OUT (`-` for stdout, the default).
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    out: Option<PathBuf>,
    /// Format of the HTTP log (the TLS log is JSON lines).
    #[arg(long, value_enum, default_value_t = HttpFormat::Json)]
    format: HttpFormat,
    /// Also write one JSON line per TLS handshake (SNI, ALPN, version, cipher) to FILE (`-` for
    /// stdout when -w names a file).
    #[arg(long, value_name = "FILE")]
    tls_log: Option<PathBuf>,
    #[command(flatten)]
    analyzer: weir_http::Config,
    #[command(flatten)]
    kafka: weir_export::KafkaLogArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.source.check(m, "analyze")?;
        if self.kafka.kafka.is_some() && self.format != HttpFormat::Json {
            return Err("--kafka sends the JSON records: leave out --format apache".into());
        }
        self.kafka.check(m)
    }
}

/// Runs `weir http`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let advice = "give the two logs different outputs";
    let (http_path, tls) = (args.kafka.log_path(args.out.as_deref()), &args.tls_log);
    weir_sensor::output::other_log(&http_path, tls.as_deref(), "--tls-log", advice)
        .map_err(anyhow::Error::msg)?;
    if args.source.is_live() {
        return run_live(args, http_path);
    }
    let outs = [Some(&*http_path), tls.as_deref()];
    output::check_file_run(&args.source.inputs.files, &args.expr.joined(), outs)?;
    let kafka = args.kafka.open()?;
    let lines = |kind| kafka.as_ref().map(|k| k.lines(kind));
    let http = Teed::new(Some(output::create(&http_path)?), lines(LogKind::Http));
    let tls = args.tls_log.as_deref().map(output::create).transpose()?;
    let tls = (tls.is_some() || kafka.is_some()).then(|| Teed::new(tls, lines(LogKind::Tls)));
    let log = LogWriter::new(args.format.into(), http, tls);
    let mut sink = HttpFiles::new(args.analyzer, log);
    let status = read_filtered(&args.source.inputs.files, args.expr.joined(), &mut sink)?;
    let (stats, http, tls) = sink.finish()?;
    for out in std::iter::once(http)
        .chain(tls)
        .filter_map(Teed::into_inner)
    {
        out.commit()?;
    }
    eprint!("{stats}");
    output::kafka_end(kafka)?;
    Ok(status)
}

/// `weir http -i`: the live job, then its summary.
fn run_live(args: Args, http_path: PathBuf) -> Result<Status> {
    let cfg = HttpLiveConfig {
        pipeline: args.source.live.pipeline(&args.expr.joined(), 1, 0, 64)?,
        analyzer: args.analyzer,
        logs: HttpLogs {
            format: args.format.into(),
            http: http_path,
            tls: args.tls_log.clone(),
            kafka: args.kafka.output().map_err(anyhow::Error::msg)?,
        },
        duration: args.source.live.duration.map(Duration::from_secs_f64),
    };
    let controls = output::controls(false)?;
    let report = weir_sensor::http::run_live(&cfg, &controls, &mut output::event)?;
    eprint!("{}", report.end.stats);
    let errors = (report.end.error, report.capture_error);
    output::analyzer_end(&report.live, &report.kafka, errors)
}
