//! `weir voip (-r FILE | -i IF) [-w CALLS.jsonl] [--streams STREAMS.jsonl] [EXPR]`: one JSON
//! line per SIP Call-ID (call times, final status, post-dial delay, duration, MOS of its worst
//! stream) and one per RTP stream (RFC 3550 loss and jitter, RTCP reports, E-model MOS),
//! through weir-voip's analyzer (its bounds: [`weir_voip::Config`]). From files the packets
//! come from the shared offline loop (BPF filter, damage handling) into [`VoipFiles`]; live,
//! from the capture pipeline ([`weir_sensor::voip::run_live`]: SIGINT/SIGTERM end it and every
//! call and stream is written then). Without `--streams` the stream records go to the calls'
//! output, so nothing found is left out; each record says its `type`. A summary ends the run
//! on stderr. `--plot DIR` charts each call's streams' jitter and loss over time
//! ([`weir_voip::plot`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_sensor::voip::{summary, VoipFiles, VoipLiveConfig, VoipOutputs};
use weir_voip::Config;

use crate::args;
use crate::input::read_filtered;
use crate::output::{self, Status};

/// Arguments of `weir voip`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    source: args::Source,
    /// Write the call records as JSON lines to OUT (`-` for stdout, the default).
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    out: Option<PathBuf>,
    /// Write the RTP stream records to FILE (`-` for stdout when -w names a file) instead of
    /// beside the calls.
    #[arg(long, value_name = "FILE")]
    streams: Option<PathBuf>,
    #[command(flatten)]
    analyzer: Config,
    /// Draw each call's jitter and loss over time (SVG, with the numbers as CSV) into this
    /// directory (created if missing); live, each call's chart when it is written.
    #[arg(long, value_name = "DIR")]
    plot: Option<PathBuf>,
    /// The charts' interval: loss and jitter are sampled every this many seconds of the
    /// packets' time.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = args::seconds,
          allow_negative_numbers = true, requires = "plot")]
    plot_interval: f64,
    #[command(flatten)]
    kafka: weir_export::KafkaLogArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.source.check(m, "analyze")?;
        self.kafka.check(m)
    }

    /// The analyzer's bounds, with the charts' interval when there are charts.
    fn analyzer(&self) -> Config {
        let timeline_ns = weir_packet::value::ns(self.plot_interval).max(1);
        Config {
            timeline_ns: if self.plot.is_some() { timeline_ns } else { 0 },
            ..self.analyzer
        }
    }
}

/// Runs `weir voip`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let advice = "leave --streams out to write both to one place";
    let (calls_path, streams) = (args.kafka.log_path(args.out.as_deref()), &args.streams);
    weir_sensor::output::other_log(&calls_path, streams.as_deref(), "--streams", advice)
        .map_err(anyhow::Error::msg)?;
    if args.source.is_live() {
        return run_live(args, calls_path);
    }
    let outs = [Some(&*calls_path), streams.as_deref()];
    output::check_file_run(&args.source.inputs.files, &args.expr.joined(), outs)?;
    let plot = match &args.plot {
        Some(dir) => {
            output::create_dir(dir)
                .with_context(|| format!("--plot: cannot create {}", dir.display()))?;
            Some(weir_voip::plot::Plotter::new(dir))
        }
        None => None,
    };
    let kafka = args.kafka.open()?;
    let lines = kafka.as_ref().map(|k| k.lines(weir_export::LogKind::Voip));
    let outs = (
        output::create(&calls_path)?,
        args.streams.as_deref().map(output::create).transpose()?,
    );
    let mut feed = VoipFiles::new(args.analyzer(), outs, plot, lines);
    let status = read_filtered(&args.source.inputs.files, args.expr.joined(), &mut feed)?;
    let (stats, charts, calls, streams) = feed.finish()?;
    calls.commit()?;
    if let Some(s) = streams {
        s.commit()?;
    }
    eprint!("{}", summary(&stats));
    if let Some(dir) = &args.plot {
        eprintln!("weir: {charts} charts in {}", dir.display());
    }
    output::kafka_end(kafka)?;
    Ok(status)
}

/// `weir voip -i`: the live job, then its summary.
fn run_live(args: Args, calls_path: PathBuf) -> Result<Status> {
    let cfg = VoipLiveConfig {
        pipeline: args.source.live.pipeline(&args.expr.joined(), 1, 0, 64)?,
        analyzer: args.analyzer(),
        outputs: VoipOutputs {
            calls: calls_path,
            streams: args.streams.clone(),
            kafka: args.kafka.output().map_err(anyhow::Error::msg)?,
            plot: args.plot.clone(),
        },
        duration: args.source.live.duration.map(Duration::from_secs_f64),
    };
    let controls = output::controls(false)?;
    let report = weir_sensor::voip::run_live(&cfg, &controls, &mut output::event)?;
    eprint!("{}", summary(&report.end.stats));
    if let Some(dir) = &args.plot {
        eprintln!("weir: {} charts in {}", report.end.charts, dir.display());
    }
    let errors = (report.end.error, report.capture_error);
    output::analyzer_end(&report.live, &report.kafka, errors)
}
