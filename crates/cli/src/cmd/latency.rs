//! `weir latency A B`: matches the packets of two captures of the same traffic (before and after
//! a queue, a link, a router) and reports per-stream one-way latency, loss, duplicates,
//! reordering and jitter, as a table, JSON, CSV (one row per matched packet) and charts.

use std::path::PathBuf;

use anyhow::Result;
use weir_latency::session::{self, Level, Outputs, RunSpec, Say};
use weir_latency::{Config, Unstamped};

use crate::output::Status;

/// Arguments of `weir latency`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Capture at the first point (sender side) and at the second point (receiver side).
    #[arg(value_names = ["A", "B"], num_args = 2)]
    files: Vec<PathBuf>,
    /// A labelled run, LABEL=A,B (repeat to overlay several runs in the table and charts).
    #[arg(long = "run", value_name = "LABEL=A,B")]
    runs: Vec<String>,
    /// Longest latency a match may have, in seconds (memory holds two windows of packets).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS", value_parser = crate::args::seconds,
          allow_negative_numbers = true)]
    window: f64,
    /// Clock offset of B relative to A in ns, subtracted from B's timestamps.
    #[arg(
        long,
        default_value_t = 0,
        allow_hyphen_values = true,
        value_name = "NS"
    )]
    offset: i64,
    /// Ignore weir gen stamps: match every packet by its invariant bytes.
    #[arg(long)]
    no_stamps: bool,
    /// How packets without a stamp are grouped into streams.
    #[arg(long, value_enum, default_value_t = Unstamped::One)]
    unstamped: Unstamped,
    /// Write the results as JSON to this file (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write one CSV row per matched packet to this file (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Draw CDF, box-plot and latency-over-time charts (SVG and PNG) into this directory.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
}

/// Runs `weir latency` ([`session::run`]), printing what it tells.
pub(crate) fn run(args: Args) -> Result<Status> {
    let cfg = Config::new(args.window, args.offset, !args.no_stamps, args.unstamped)?;
    let runs = RunSpec::all(&args.files, &args.runs)?;
    let (json, csv, plot) = (args.json, args.csv, args.plot);
    let damaged = session::run(&cfg, runs, &Outputs { json, csv, plot }, &mut |s| match s {
        Say::Notice(n) if n.level == Level::Info => eprintln!("weir: {}", n.text),
        Say::Notice(n) => eprintln!("weir: warning: {}", n.text),
        Say::Table(t) => eprint!("{t}"),
        Say::Charts(n, dir) => eprintln!("weir: {n} charts written to {}", dir.display()),
    })?;
    Ok(if damaged {
        Status::Damaged
    } else {
        Status::Clean
    })
}
