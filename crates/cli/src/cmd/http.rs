//! `weir http -r FILE [-w OUT.jsonl] [--tls-log FILE] [EXPR]`: one JSON line per HTTP
//! transaction (Zeek http.log's fields) and, with `--tls-log`, one per TLS handshake (SNI,
//! ALPN, negotiated version), from capture files, through weir-http's analyzer. The packets come
//! from the shared offline loop (BPF filter, damage handling); a summary of the analyzer's
//! counters (transactions, gaps, evictions) ends the run on stderr.

use std::path::PathBuf;

use anyhow::{bail, Result};
use weir_filter::FilterSet;
use weir_http::log::Logs;
use weir_http::Config;
use weir_pcap::{Interface, Packet};
use weir_sensor::read::Visitor;

use crate::args;
use crate::input::read_filtered;
use crate::output::{self, Status};

/// Arguments of `weir http`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    inputs: args::Inputs,
    /// Write the HTTP transactions as JSON lines to OUT (`-` for stdout, the default).
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    out: Option<PathBuf>,
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
    expr: args::Expr,
}

/// The logs, as a visitor of the read loop.
struct Sink(Logs<output::Output>);

impl Visitor for Sink {
    type Error = anyhow::Error;

    fn packet(&mut self, _interfaces: &[Interface], p: &Packet<'_>) -> Result<()> {
        Ok(self.0.packet(p.meta.ts_ns, p.link, p.data)?)
    }

    fn parallel_read(&self) -> bool {
        false
    }
}

/// Runs `weir http`.
pub(crate) fn run(args: Args) -> Result<Status> {
    if args.inputs.files.is_empty() {
        bail!("give input files with -r (live capture is not supported by `weir http` yet)");
    }
    let http_path = args.out.clone().unwrap_or_else(|| PathBuf::from("-"));
    if let Some(tls) = &args.tls_log {
        let same_file = tls == &http_path
            || std::fs::canonicalize(tls)
                .ok()
                .zip(std::fs::canonicalize(&http_path).ok())
                .is_some_and(|(a, b)| a == b);
        if same_file {
            bail!(
                "--tls-log and -w both name {}: give the two logs different outputs",
                tls.display()
            );
        }
    }
    // the expression is checked before any output is created
    FilterSet::new(&args.expr.joined())?;
    output::check_inputs(&args.inputs.files, Some(&http_path))?;
    if let Some(t) = &args.tls_log {
        output::check_inputs(&args.inputs.files, Some(t))?;
    }
    let cfg = Config {
        max_flows: args.max_flows as usize,
        max_total_pending: (args.max_memory_mib as usize) << 20,
        idle_timeout_ns: (args.idle_timeout * 1e9) as u64,
        ..Config::default()
    };
    let http = output::create(&http_path)?;
    let tls = match &args.tls_log {
        Some(p) => Some(output::create(p)?),
        None => None,
    };
    let mut sink = Sink(Logs::new(cfg, http, tls));
    let status = read_filtered(&args.inputs.files, args.expr.joined(), &mut sink)?;
    let (stats, http, tls) = sink.0.finish()?;
    http.commit()?;
    if let Some(t) = tls {
        t.commit()?;
    }
    eprint!("{stats}");
    Ok(status)
}
