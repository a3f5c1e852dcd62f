//! `weir flows`: meter capture files into flows and export them as NetFlow v5 / v9 / IPFIX (UDP
//! or a file), JSON lines, CSV or Parquet files, with a summary of every counter on stderr.
//!
//! The options become a [`weir_sensor::flows::FlowsJobConfig`] and the job runs there (files:
//! the read loop into the meter, one large pcap file on every core; live: the capture pipeline
//! into the live meter; the rules of `--rules` in file order or in the capture threads, tags
//! exported with the flows: see [`weir_sensor::flows`]); this module prints what it says and its
//! report. Live, SIGINT/SIGTERM stop it, SIGHUP reloads `--rules`, `--control PATH` serves
//! `weir rules`. The outputs are `weir_export::Outputs`, shared with `weir record --flows`
//! (the options: [`weir_export::SinkArgs`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use weir_export::{Outputs, SinkArgs, Target};
use weir_flows::Config;
use weir_sensor::flows::{FlowsJobConfig, FlowsSource};
use weir_sensor::Controls;

use crate::args::{self, RulesArgs};
use crate::input::{self, Terminal};
use crate::output::{self, Status};

/// Arguments of `weir flows`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    source: args::Source,
    #[command(flatten)]
    sinks: SinkArgs,
    /// The meter: timeouts, shards, flow limit, biflow, key, seed.
    #[command(flatten)]
    meter: Config,
    /// Also write every counter of the run as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.source.check(m, "meter")?;
        self.sinks.check(m)?;
        self.meter.check().map_err(|e| e.to_string())
    }
}

/// Runs `weir flows` ([`weir_sensor::flows::run`]), printing what it says, then its report.
pub(crate) fn run(args: Args) -> Result<Status> {
    let live = args.source.is_live();
    let source = if live {
        FlowsSource::Live(weir_capture::PipelineConfig {
            kernel_rules: !args.rules.no_kernel_rules,
            ..args.source.live.pipeline(&args.expr.joined(), 1, 0, 64)?
        })
    } else {
        FlowsSource::Files(args.source.inputs.files.clone())
    };
    let cfg = FlowsJobConfig {
        source,
        filter: args.expr.joined(),
        rules: args.rules.config(),
        meter: args.meter.clone(),
        outputs: args
            .sinks
            .outputs((args.meter.biflow, args.rules.rules.is_some()), live)?,
        stats: args.stats.clone(),
        duration: args.source.live.duration.map(Duration::from_secs_f64),
    };
    let inputs = if live {
        &[][..]
    } else {
        &args.source.inputs.files[..]
    };
    check_outputs(&cfg.outputs, cfg.stats.as_deref(), inputs)?;
    let controls = if live {
        output::controls(cfg.rules.is_some())?
    } else {
        Controls::default()
    };
    let mut report = weir_sensor::flows::run(&cfg, &controls, &mut Terminal::default())?;
    // files: the rules' summary comes first (the read loop's end), live last (with capture's)
    if !live {
        if let Some(rules) = &report.rules {
            eprintln!("{rules}");
        }
    }
    eprint!("{}", report.report.summary());
    report.write_stats()?;
    if let Some(e) = report.error.take() {
        return Err(e.into());
    }
    if let Some(end) = &report.live {
        eprintln!("{}", output::live_summary(&end.totals, &end.buffer));
        if let Some(rules) = &report.rules {
            eprintln!("{rules}");
        }
    }
    Ok(input::status(report.damaged))
}

/// Before anything is created: no output file (`--export FILE`, `--json`, `--csv`, `--stats`)
/// is one of the files read or a directory, and no two name one place (they would overwrite
/// the input, or each other, silently).
fn check_outputs(o: &Outputs, stats: Option<&Path>, inputs: &[PathBuf]) -> Result<()> {
    let export = o.netflow.as_ref().and_then(|n| match &n.target {
        Target::File(p) => Some(p.as_path()),
        _ => None,
    });
    let outs = [
        ("--export", export),
        ("--json", o.json.as_deref()),
        ("--csv", o.csv.as_deref()),
        ("--stats", stats),
    ];
    weir_sensor::output::distinct_outputs(&outs, inputs).map_err(anyhow::Error::msg)
}
