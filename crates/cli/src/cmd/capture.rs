//! `weir capture`: live capture to a file or the terminal, like `tcpdump -i IFACE -w OUT EXPR`,
//! with several threads per interface joined in a fanout group and several interfaces at once.
//!
//! The options become a [`weir_sensor::capture::CaptureConfig`]; the job
//! ([`weir_sensor::capture::Capture`]) runs the pipeline and hands its buffer, in order, to the
//! `-w` file or lines on stdout ([`Watched`]: a reader that went away ends the capture). When the sink falls behind, the buffer drops
//! new packets and counts them, so capture threads never block. `weir record` is the tool for
//! sustained high rates (segments written straight from the buffer with O_DIRECT).
//!
//! With `--rules FILE` the capture threads decide each packet after the filter (see `weir
//! record`); SIGHUP reloads the file. Tags are counted but not written by `capture` (its
//! writer has no packet comments); `weir record` stores them.

use std::time::Duration;

use anyhow::Result;
use weir_sensor::capture::{Capture, CaptureConfig, FileSink, Sink, Watched};

use crate::args::{self, Format, LiveArgs, RulesArgs};
use crate::output::{self, Status};

/// Arguments of `weir capture`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    out: args::Output,
    /// Stop after this many packets.
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = args::count,
          allow_negative_numbers = true)]
    count: Option<u64>,
    /// Not for capture: refused with a pointer to `weir read -r`.
    #[arg(short = 'r', long = "read", value_name = "FILE", hide = true)]
    read: Option<std::path::PathBuf>,
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    metrics: weir_sensor::args::MetricsArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let Some(f) = &self.read {
            return Err(format!(
                "weir capture captures live traffic (-i); to read a capture file use `weir read \
                 -r {}`",
                f.display()
            ));
        }
        self.live.check()?;
        if self.live.interfaces.is_empty() {
            return Err("give at least one interface with -i".into());
        }
        self.out.check(true)
    }
}

/// Runs `weir capture`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let cfg = CaptureConfig {
        live: weir_capture::PipelineConfig {
            kernel_rules: !args.rules.no_kernel_rules,
            ..args.live.pipeline(&args.expr.joined(), 1, 0, 64)?
        },
        count: args.count,
        duration: args.live.duration.map(Duration::from_secs_f64),
        rules: args.rules.config(),
        store_tags: args.out.path.is_some()
            && !matches!(
                args.out.format(Format::Pcapng),
                weir_pcap::FileFormat::Pcap(_)
            ),
    };
    let mut controls = output::controls(cfg.rules.is_some())?;
    let serving = args.metrics.start(&mut |s| eprintln!("weir: {s}"))?;
    controls.metrics = serving.as_ref().map(|s| s.board.clone());
    let job = Capture::start(&cfg, &mut output::event)?;
    let sink = match &args.out.path {
        None => Sink::Lines(output::lines(None)),
        Some(path) => Sink::File(FileSink::new(
            output::create_in_place(path)?,
            args.out.format(Format::Pcapng),
            job.interfaces(),
        )?),
    };
    let to_stdout = args.out.path.as_ref().is_none_or(|p| p.as_os_str() == "-");
    let mut out = Watched::new(sink, to_stdout);
    let report = job.run(&mut out, &controls, &mut output::event)?;
    if !report.reader_gone {
        out.into_inner().finish()?.commit()?;
    }
    eprintln!("weir: {}", report.summary());
    Ok(Status::Clean)
}
