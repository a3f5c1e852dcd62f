//! `weir latency A B`: matches the packets of two captures of the same traffic (before and after
//! a queue, a link, a router) and reports per-stream one-way latency, loss, duplicates,
//! reordering and jitter, as a table, JSON, CSV (one row per matched packet) and charts.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use weir_latency::report;
use weir_latency::session::{self, Level, RunSpec};
use weir_latency::{analyze, Config, Run, Unstamped};

use crate::output::{self, Status};

/// How unstamped packets are grouped.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Grouping {
    /// Do not match them.
    Skip,
    /// One stream for all of them.
    One,
    /// One stream per 5-tuple.
    Flow,
}

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
    #[arg(long, value_enum, default_value_t = Grouping::One)]
    unstamped: Grouping,
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

/// Runs `weir latency`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let unstamped = match args.unstamped {
        Grouping::Skip => Unstamped::Skip,
        Grouping::One => Unstamped::One,
        Grouping::Flow => Unstamped::ByFlow,
    };
    let cfg = Config::new(args.window, args.offset, !args.no_stamps, unstamped)?;
    let runs = RunSpec::all(&args.files, &args.runs)?;
    let inputs: Vec<&PathBuf> = runs.iter().flat_map(|r| [&r.a, &r.b]).collect();
    for out in [&args.json, &args.csv].into_iter().flatten() {
        output::check_inputs(&inputs, Some(out))?;
    }
    if let Some(dir) = &args.plot {
        session::check_plot_dir(dir)?;
    }
    let mut csv = match &args.csv {
        Some(p) => {
            let mut w = BufWriter::with_capacity(1 << 20, output::create(p)?);
            writeln!(w, "{}", session::CSV_HEADER)?;
            Some(w)
        }
        None => None,
    };
    let mut results: Vec<(String, Run)> = Vec::new();
    let mut status = Status::Clean;
    for RunSpec { label, a, b } in runs {
        let mut csv_err = None;
        let run = analyze(&a, &b, &cfg, &mut |m| {
            if let Some(w) = &mut csv {
                if let Err(e) = writeln!(w, "{}", session::csv_row(&label, m)) {
                    csv_err.get_or_insert(e);
                }
            }
        })
        .with_context(|| format!("cannot analyse {} against {}", a.display(), b.display()))?;
        if let Some(e) = csv_err {
            return Err(e.into());
        }
        for n in run.notices(&label) {
            match n.level {
                Level::Damage => {
                    eprintln!("weir: warning: {}", n.text);
                    status = Status::Damaged;
                }
                Level::Warning => eprintln!("weir: warning: {}", n.text),
                Level::Info => eprintln!("weir: {}", n.text),
            }
        }
        results.push((label, run));
    }
    if let Some(w) = csv {
        w.into_inner().map_err(|e| e.into_error())?.commit()?;
    }
    let labelled = session::labelled(&results);
    if let Some(p) = &args.json {
        let mut out = output::create(p)?;
        let json = serde_json::to_string_pretty(&report::json(&labelled))?;
        writeln!(out, "{json}")?;
        out.commit()?;
    }
    let to_stdout = |p: &Option<PathBuf>| p.as_ref().is_some_and(|p| p.as_os_str() == "-");
    let table = report::table(&labelled);
    if to_stdout(&args.json) || to_stdout(&args.csv) {
        eprint!("{table}");
    } else {
        let mut out = output::stdout();
        write!(out, "{table}")?;
        out.commit()?;
    }
    if let Some(dir) = &args.plot {
        let files = weir_latency::plot::plot_all(dir, &session::series(&results))
            .with_context(|| format!("cannot draw the charts into {}", dir.display()))?;
        eprintln!("weir: {} charts written to {}", files.len(), dir.display());
    }
    Ok(status)
}
