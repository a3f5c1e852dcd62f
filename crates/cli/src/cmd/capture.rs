//! `weir capture`: live capture to a file or the terminal, like `tcpdump -i IFACE -w OUT EXPR`,
//! with several threads per interface joined in a fanout group and several interfaces at once.
//!
//! The options become a [`weir_sensor::capture::CaptureConfig`]; the job
//! ([`weir_sensor::capture::Capture`]) runs the pipeline and hands its buffer, in order, to this
//! module's sink: the `-w` file or lines on stdout. When the sink falls behind, the buffer drops
//! new packets and counts them, so capture threads never block. `weir record` is the tool for
//! sustained high rates (segments written straight from the buffer with O_DIRECT).
//!
//! With `--rules FILE` the capture threads decide each packet after the filter (see `weir
//! record`); SIGHUP reloads the file. Tags are counted but not written by `capture` (its
//! writer has no packet comments); `weir record` stores them.

use std::time::Duration;

use anyhow::Result;
use weir_packet::{LinkType, PacketMeta};
use weir_pcap::{Interface, Packet};
use weir_sensor::capture::{Capture, CaptureConfig, FileSink, PacketSink};

use crate::args::{self, Format, LiveArgs, RulesArgs};
use crate::lines::LinePrinter;
use crate::metrics::{MetricsArgs, Serving};
use crate::output::{self, Status};
use weir_sensor::read::Visitor;

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
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    metrics: MetricsArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
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
    let serving = args.metrics.start()?;
    controls.metrics = serving.as_ref().map(Serving::board);
    let job = Capture::start(&cfg, &mut output::event)?;
    let mut out = Output::open(&args, job.interfaces())?;
    let report = job.run(&mut out, &controls, &mut output::event)?;
    if report.reader_gone {
        return Ok(Status::Clean);
    }
    out.finish()?;
    eprintln!(
        "weir: {} packets written in {:.1} s\n{}",
        report.written,
        report.elapsed_s,
        output::live_summary(&report.totals, &report.buffer)
    );
    if let Some(r) = &report.rules {
        eprintln!(
            "  rules: {} dropped after the filter\n{r}",
            report.totals.feed.rules_dropped
        );
    }
    Ok(Status::Clean)
}

/// Where captured packets go: a capture file, or lines on stdout.
struct Output {
    to: To,
    /// It is stdout (`-w -`, or lines): a reader that went away ends the capture.
    to_stdout: bool,
}

enum To {
    File(FileSink<output::Output>),
    Lines(LinePrinter),
}

impl Output {
    fn open(args: &Args, interfaces: &[Interface]) -> Result<Output> {
        let to_stdout = args.out.path.as_ref().is_none_or(|p| p.as_os_str() == "-");
        let to = match &args.out.path {
            None => To::Lines(LinePrinter::stdout(None)),
            Some(path) => To::File(FileSink::new(
                output::create_in_place(path)?,
                args.out.format(Format::Pcapng),
                interfaces,
            )?),
        };
        Ok(Output { to, to_stdout })
    }

    fn finish(self) -> Result<()> {
        match self.to {
            To::File(w) => w.finish()?.commit()?,
            To::Lines(p) => p.finish()?,
        }
        Ok(())
    }
}

impl PacketSink for Output {
    type Error = anyhow::Error;

    fn packet(&mut self, interfaces: &[Interface], r: &weir_buffer::Record<'_>) -> Result<()> {
        match &mut self.to {
            To::File(w) => w.write(r)?,
            To::Lines(p) => {
                let link = interfaces
                    .get(r.iface() as usize)
                    .map_or(LinkType::ETHERNET, |i| i.link);
                let packet = Packet {
                    meta: PacketMeta {
                        ts_ns: r.ts_ns(),
                        orig_len: r.orig_len(),
                        interface: r.iface(),
                    },
                    link,
                    data: r.data(),
                    record_offset: 0,
                    pcap_ts: None,
                };
                p.packet(interfaces, &packet)?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        match &mut self.to {
            To::File(w) => w.flush()?,
            To::Lines(p) => p.flush()?,
        }
        Ok(())
    }

    fn closed(&self) -> bool {
        self.to_stdout && output::stdout_gone()
    }
}
