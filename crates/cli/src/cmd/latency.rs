//! `weir latency A B`: matches the packets of two captures of the same traffic (before and after
//! a queue, a link, a router) and reports per-stream one-way latency, loss, duplicates,
//! reordering and jitter, as a table, JSON, CSV (one row per matched packet) and charts.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_latency::plot::Series;
use weir_latency::report::{self, Labelled};
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

fn runs(args: &Args) -> Result<Vec<(String, PathBuf, PathBuf)>> {
    let mut v = Vec::new();
    if let [a, b] = &args.files[..] {
        v.push(("run".to_string(), a.clone(), b.clone()));
    }
    for r in &args.runs {
        let (label, files) = r
            .split_once('=')
            .with_context(|| format!("--run {r}: expected LABEL=A,B"))?;
        let (a, b) = files
            .split_once(',')
            .with_context(|| format!("--run {r}: expected LABEL=A,B"))?;
        v.push((label.to_string(), a.into(), b.into()));
    }
    if v.is_empty() {
        bail!("give two capture files A B, or --run LABEL=A,B");
    }
    Ok(v)
}

/// Makes sure the charts can be written into `dir` (creating it), before any work is done.
fn check_plot_dir(dir: &Path) -> Result<()> {
    let fail =
        |e: std::io::Error| anyhow::anyhow!("cannot write the charts into {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(format!(".weir-probe-{}", std::process::id()));
    std::fs::File::create(&probe).map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Runs `weir latency`.
pub(crate) fn run(args: Args) -> Result<Status> {
    if args.window.is_nan() || args.window <= 0.0 {
        bail!("--window must be positive");
    }
    let cfg = Config {
        window_ns: (args.window * 1e9) as u64,
        offset_ns: args.offset,
        stamps: !args.no_stamps,
        unstamped: match args.unstamped {
            Grouping::Skip => Unstamped::Skip,
            Grouping::One => Unstamped::One,
            Grouping::Flow => Unstamped::ByFlow,
        },
    };

    let runs = runs(&args)?;
    let inputs: Vec<&PathBuf> = runs.iter().flat_map(|(_, a, b)| [a, b]).collect();
    for out in [&args.json, &args.csv].into_iter().flatten() {
        output::check_inputs(&inputs, Some(out))?;
    }
    if let Some(dir) = &args.plot {
        check_plot_dir(dir)?;
    }
    let mut csv = match &args.csv {
        Some(p) => {
            let mut w = BufWriter::with_capacity(1 << 20, output::create(p)?);
            writeln!(w, "run,stream,seq,a_ns,b_ns,latency_ns,len")?;
            Some(w)
        }
        None => None,
    };
    let mut results: Vec<(String, Run)> = Vec::new();
    let mut status = Status::Clean;
    for (label, a, b) in runs {
        let mut csv_err = None;
        let run = analyze(&a, &b, &cfg, &mut |m| {
            if let Some(w) = &mut csv {
                if let Err(e) = writeln!(
                    w,
                    "{label},{},{},{},{},{},{}",
                    m.stream, m.seq, m.a_ns, m.b_ns, m.latency_ns, m.len
                ) {
                    csv_err.get_or_insert(e);
                }
            }
        })
        .with_context(|| format!("cannot analyse {} against {}", a.display(), b.display()))?;
        if let Some(e) = csv_err {
            return Err(e.into());
        }
        for d in &run.damage {
            eprintln!("weir: warning: {d}");
            status = Status::Damaged;
        }
        let negative: u64 = run.streams.iter().map(|(_, s)| s.negative).sum();
        if negative > 0 {
            eprintln!(
                "weir: warning: {label}: {negative} packets have a negative latency: the two clocks are not in step (correct a constant offset with --offset NS)"
            );
        }
        if run.collisions > 0 {
            eprintln!(
                "weir: {label}: {} hash matches refused on the bytes (collisions)",
                run.collisions
            );
        }
        results.push((label, run));
    }
    if let Some(w) = csv {
        w.into_inner().map_err(|e| e.into_error())?.commit()?;
    }
    let labelled: Vec<Labelled<'_>> = results
        .iter()
        .map(|(l, r)| Labelled { label: l, run: r })
        .collect();
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
        let series: Vec<Series<'_>> = results
            .iter()
            .flat_map(|(label, run)| {
                let one = results.len() == 1;
                run.streams.iter().map(move |(name, st)| Series {
                    label: if one {
                        name.clone()
                    } else {
                        format!("{label}: {name}")
                    },
                    stats: st,
                    start_ns: run.start_ns,
                })
            })
            .collect();
        let files = weir_latency::plot::plot_all(dir, &series)
            .with_context(|| format!("cannot draw the charts into {}", dir.display()))?;
        eprintln!("weir: {} charts written to {}", files.len(), dir.display());
    }
    Ok(status)
}
