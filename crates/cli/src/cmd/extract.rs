//! `weir extract`: the packets of a time range matching a tcpdump expression, from a store (or
//! any capture files with their `.idx` indexes), in global time order, as pcap or pcapng.
//!
//! Per segment: the index (when present, valid and fresh) turns the expression and the time
//! range into candidate chunks; only those are read, plus whatever the index does not cover yet
//! (the tail of a segment being written). Every packet read is confirmed by the BPF program
//! compiled for the segment exactly as `tcpdump -r` would compile it, and by its timestamp, so
//! the result is exactly tcpdump's selection; the index only decides what need not be read. A
//! missing, corrupt or stale index is reported and the segment scanned whole.
//!
//! With `--sensor URL[,URL...]` the same extract is asked of several `weir serve` instances at
//! once and their packets merged in time order (`weir_store::remote`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_index::Query;
use weir_pcap::PacketWriter;
use weir_store::extract::BpfMatcher;

use crate::args;
use crate::args::Format;
use crate::input;
use crate::output::{self, Status};

/// Arguments of `weir extract`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("path", |a| a.required(true)))]
pub(crate) struct Args {
    /// Store directory (or a capture file with its `.idx`) to search.
    #[arg(value_name = "DIR|FILE", required_unless_present = "sensor")]
    input: Option<PathBuf>,
    /// More stores or files to search with it.
    #[arg(short = 'r', long = "read", value_name = "DIR|FILE")]
    more: Vec<PathBuf>,
    /// Ask these `weir serve` instances instead (http://HOST:PORT, comma-separated), in
    /// parallel, and merge their packets in time order. A sensor that fails is reported and
    /// the others' packets still written (exit status 1). Every word after the options is
    /// then the expression.
    #[arg(
        long,
        value_name = "URL[,URL...]",
        value_delimiter = ',',
        conflicts_with = "more"
    )]
    sensor: Vec<String>,
    /// Seconds a sensor may send nothing (connecting, answering, streaming) before it is
    /// reported as failed and the others' packets written without it, 1 to 86400.
    #[arg(long, value_name = "S", requires = "sensor",
          default_value_t = weir_store::remote::DEFAULT_SILENCE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=86_400),
          allow_negative_numbers = true)]
    sensor_timeout: u64,
    /// Bytes per second a sensor must send, on average over each --sensor-timeout of its
    /// answer, else it is reported as failed (a sensor dripping its answer cannot hold the
    /// extract); 0 for no minimum, at most 1000000000.
    #[arg(long, value_name = "BYTES", requires = "sensor",
          default_value_t = weir_store::remote::DEFAULT_MIN_RATE,
          value_parser = clap::value_parser!(u64).range(0..=1_000_000_000),
          allow_negative_numbers = true)]
    sensor_min_rate: u64,
    /// Bearer token sent to the sensors (`weir serve --token`).
    #[arg(long, value_name = "TOKEN", requires = "sensor", value_parser = args::token)]
    token: Option<String>,
    /// For https:// sensors: the CA (PEM) that signed their certificates.
    #[arg(long, value_name = "FILE", requires = "sensor")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) to present to https:// sensors (`weir serve --client-ca`).
    #[arg(long, value_name = "FILE", requires_all = ["tls_ca", "tls_key"])]
    tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Earliest packet time: seconds since the epoch or a UTC date (`2026-11-22T10:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = args::time, allow_negative_numbers = true)]
    from: Option<u64>,
    /// Latest packet time (inclusive), same forms as --from.
    #[arg(long, value_name = "TIME", value_parser = args::time, allow_negative_numbers = true)]
    to: Option<u64>,
    #[command(flatten)]
    out: args::Output,
    /// Print how much the index narrowed the search.
    #[arg(short = 'v', long)]
    verbose: bool,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let (Some(from), Some(to)) = (self.from, self.to) {
            if from > to {
                return Err("--from is after --to".into());
            }
        }
        args::no_stdin(self.input.iter().chain(&self.more), "extract")?;
        // every sensor a URL, each once (twice would write its packets twice)
        let mut seen = Vec::new();
        for url in &self.sensor {
            let (tls, hp) =
                weir_store::remote::host_port(url).map_err(|e| format!("--sensor {e}"))?;
            if seen.contains(&(tls, hp.clone())) {
                return Err(format!("--sensor {url} is given twice"));
            }
            seen.push((tls, hp));
        }
        self.out.check(false)
    }
}

/// Runs `weir extract`.
///
/// A store with no segment yet gives an empty output (said on stderr, exit 0); a directory
/// that is not a store and holds no capture files is an error (exit 1). A segment the manifest
/// lists but whose file is gone, and damage, are warned about and end in exit 1 after every
/// readable packet was written.
pub(crate) fn run(args: Args) -> Result<Status> {
    let (from, to) = (args.from.unwrap_or(0), args.to.unwrap_or(u64::MAX));
    if !args.sensor.is_empty() {
        return remote(&args, from, to);
    }
    let mut inputs: Vec<PathBuf> = args.input.iter().cloned().collect();
    inputs.extend(args.more.iter().cloned());
    input::capture_files(&inputs)?;
    let mut bpf = BpfMatcher::new(&args.expr.joined())?;
    let query = Query::from_expr(&args.expr.joined());
    let mut status = Status::Clean;
    let mut notify = |n| output::notice(&n, args.verbose, &mut status);
    let mut selection = weir_store::select(&inputs, &query, (from, to), &mut bpf, &mut notify)?;
    let format = args.out.format(Format::Pcap);
    let specs = selection.output_interfaces(format)?;
    let out = args.out.path.as_deref().context("-w is required")?;
    check_output(&inputs, out)?;
    let mut w = PacketWriter::new(output::create(out)?, format, &specs)?;
    let untagged = selection.write(&mut w, format)?;
    w.finish()?.commit()?;
    if untagged > 0 {
        eprintln!(
            "weir: warning: {untagged} packets written without their comments (rule tags): \
             classic pcap has none; --format pcapng keeps them"
        );
    }
    if args.verbose {
        eprintln!("weir extract: {}", selection.summary());
    }
    Ok(status)
}

/// Refuses an output that would replace what is read: one of the input files (the selection
/// would take the place of the whole file), an input file's index (`FILE.idx`), or a file in
/// an input store's directory (its manifest, a segment, an index), also through a symbolic
/// link (the output replaces what it points to) or a hard link.
fn check_output(inputs: &[PathBuf], out: &Path) -> Result<()> {
    output::check_inputs(inputs, Some(out))?;
    // where the output lands: an existing one through its links, a new one in its directory
    let out_dir = match std::fs::canonicalize(out) {
        Ok(real) => real.parent().map(Path::to_path_buf),
        Err(_) => match out.parent() {
            Some(d) if !d.as_os_str().is_empty() => std::fs::canonicalize(d).ok(),
            _ => std::fs::canonicalize(".").ok(),
        },
    };
    for input in inputs {
        if input.is_dir() {
            let store = std::fs::canonicalize(input).ok();
            let linked = std::fs::read_dir(input).is_ok_and(|mut files| {
                files.any(|f| f.is_ok_and(|f| weir_sensor::output::same_output(out, &f.path())))
            });
            if linked || (store.is_some() && out_dir == store) {
                bail!(
                    "refusing to write {} into the store {} it reads",
                    out.display(),
                    input.display()
                );
            }
        } else {
            if weir_sensor::output::same_output(out, &weir_index::index_path(input)) {
                bail!(
                    "refusing to write {} over the index of the input {}",
                    out.display(),
                    input.display()
                );
            }
        }
    }
    Ok(())
}

/// `--sensor`: the extract of every sensor, merged ([`weir_store::remote::merge`]); each
/// sensor's failure and notices are said on stderr, and make the exit status 1.
fn remote(args: &Args, from: u64, to: u64) -> Result<Status> {
    // the first word of the expression lands in the DIR|FILE slot
    let filter = match &args.input {
        Some(first) => format!("{} {}", first.display(), args.expr.joined()),
        None => args.expr.joined(),
    };
    let filter = filter.trim().to_owned();
    // checked before any sensor is asked
    BpfMatcher::new(&filter)?;
    let q = weir_store::remote::RemoteQuery {
        from,
        to,
        filter,
        token: args.token.clone(),
        silence: std::time::Duration::from_secs(args.sensor_timeout),
        min_rate: args.sensor_min_rate,
        tls: match &args.tls_ca {
            Some(ca) => Some(weir_httpd::tls::client_config(
                ca,
                args.tls_cert.as_deref().zip(args.tls_key.as_deref()),
            )?),
            None => None,
        },
    };
    let format = args.out.format(Format::Pcap);
    let out = args.out.path.as_deref().context("-w is required")?;
    let (w, reports) = weir_store::remote::merge(&args.sensor, &q, format, output::create(out)?)?;
    for m in reports.iter().flat_map(|r| r.warnings()) {
        eprintln!("weir: warning: {m}");
    }
    w.commit()?;
    let status = input::status(reports.iter().any(|r| r.incomplete()));
    if args.verbose || status == Status::Damaged {
        eprintln!("weir extract: {}", weir_store::remote::summary(&reports));
    }
    Ok(status)
}
