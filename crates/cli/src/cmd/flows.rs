//! `weir flows`: meter capture files into flows and export them as NetFlow v5 / v9 / IPFIX (UDP
//! or a file), JSON lines, CSV or Parquet files, with a summary of every counter on stderr.
//!
//! The options become a [`weir_sensor::flows::FlowsJobConfig`] and the job runs there (files:
//! the read loop into the meter, one large pcap file on every core; live: the capture pipeline
//! into the live meter; the rules of `--rules` in file order or in the capture threads, tags
//! exported with the flows: see [`weir_sensor::flows`]); this module prints what it says and its
//! report. Live, SIGINT/SIGTERM stop it, SIGHUP reloads `--rules`, `--control PATH` serves
//! `weir rules`. The outputs are `weir_export::Outputs`, shared with `weir record --flows`
//! ([`crate::flow_output`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use weir_flows::Config;
use weir_sensor::flows::{FlowsJobConfig, FlowsSource};
use weir_sensor::Controls;

use crate::args::{self, RulesArgs};
use crate::flow_output::{ns, SinkArgs};
use crate::input::{self, Terminal};
use crate::output::{self, Status};

/// Arguments of `weir flows`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    source: args::Source,
    #[command(flatten)]
    sinks: SinkArgs,
    /// Seconds without a packet after which a flow ends.
    #[arg(long, value_name = "S", default_value_t = 30.0, value_parser = args::seconds,
          allow_negative_numbers = true)]
    idle_timeout: f64,
    /// Seconds after which a long flow is exported and restarted.
    #[arg(long, value_name = "S", default_value_t = 120.0, value_parser = args::seconds,
          allow_negative_numbers = true)]
    active_timeout: f64,
    /// Seconds a TCP flow lives on after a FIN or RST (for the other side's FIN and last ACKs).
    #[arg(long, value_name = "S", default_value_t = 1.0, value_parser = args::seconds,
          allow_negative_numbers = true)]
    fin_grace: f64,
    /// Shards of the flow table, 1 to 256: each meters its part of the flows in packet order,
    /// on one thread at a time. Reading several files, pcapng or live traffic, each shard has a
    /// worker thread of its own (1: all on the reading thread); reading one large pcap file, the
    /// reading threads (one per core) run the shards themselves. The default is the number of
    /// cores.
    #[arg(long, value_name = "N", default_value_t = args::default_workers(),
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256),
          allow_negative_numbers = true)]
    workers: usize,
    /// Most flows held at once, at least 1 (split over the shards, at most 16777214 each);
    /// beyond it the least recently seen flow of the shard is exported early ("lack of
    /// resources").
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..),
          allow_negative_numbers = true)]
    max_flows: u64,
    /// Do not export TCP records with fewer bytes than this.
    #[arg(long, value_name = "N", default_value_t = 0)]
    min_tcp_bytes: u64,
    /// One record per flow with both directions (IPFIX RFC 5103; reverse columns in JSON/CSV).
    /// v5 and v9 still send one record per direction.
    #[arg(long)]
    biflow: bool,
    /// Put the IP TOS / traffic class in the flow key.
    #[arg(long)]
    tos_key: bool,
    /// Hash seed (default: random per run). With one worker, or input in time order, results do
    /// not depend on it; with several workers and a clock that runs backwards inside one file
    /// (captures concatenated into one), expiry follows each shard's own clock, so fix the seed
    /// for repeatable runs. (A file that starts before the clock, as in `-r LATER -r EARLIER`,
    /// ends every flow and restarts the clock: each file is metered as if alone.)
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
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
        let per_worker = self.max_flows.div_ceil(self.workers as u64);
        if per_worker > args::MAX_FLOWS_PER_WORKER {
            return Err(format!(
                "--max-flows {} over {} worker(s) is {per_worker} flows per worker; the most is \
                 {} per worker",
                self.max_flows,
                self.workers,
                args::MAX_FLOWS_PER_WORKER
            ));
        }
        Ok(())
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
        meter: Config {
            idle_timeout_ns: ns(args.idle_timeout),
            active_timeout_ns: ns(args.active_timeout),
            fin_grace_ns: ns(args.fin_grace),
            max_flows: args.max_flows,
            workers: args.workers,
            tos_key: args.tos_key,
            biflow: args.biflow,
            min_tcp_bytes: args.min_tcp_bytes,
            seed: args.seed,
            ..Config::default()
        },
        outputs: args
            .sinks
            .outputs((args.biflow, args.rules.rules.is_some()), live)?,
        stats: args.stats.clone(),
        duration: args.source.live.duration.map(Duration::from_secs_f64),
    };
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
