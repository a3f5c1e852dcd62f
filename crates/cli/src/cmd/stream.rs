//! `weir stream -i IF [EXPR] -w -|FIFO|unix:PATH`: a filtered live pcap stream for another tool
//! (tshark, tcpdump, Suricata, Zeek reading a pipe). The work is
//! [`weir_sensor::stream`]'s: the capture job's buffer goes through a queue bounded in bytes to
//! the reader; a slow or absent reader loses packets, counted, and capture never waits for it.
//! With `-w -` the stream ends when its reader goes away; a FIFO or a socket takes the next
//! reader (each gets a pcap header).

use std::time::Duration;

use anyhow::{Context, Result};
use weir_sensor::capture::{Capture, CaptureConfig, Watched};
use weir_sensor::stream::{Sink, Target};

use crate::args::{self, LiveArgs};
use crate::output::{self, Status};

/// Arguments of `weir stream`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    live: LiveArgs,
    /// Where the stream goes: `-` (stdout), an existing FIFO (mkfifo), or `unix:PATH` (a socket
    /// weir listens on).
    #[arg(short = 'w', value_name = "TARGET", value_parser = target)]
    to: Target,
    /// Bytes (KiB) queued for a slow reader before packets are dropped, 64 to 1048576.
    #[arg(long, value_name = "KIB", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(64..=1 << 20),
          allow_negative_numbers = true)]
    queue_kib: u32,
    #[command(flatten)]
    expr: args::Expr,
}

fn target(s: &str) -> Result<Target, String> {
    s.parse()
}

/// Runs `weir stream`.
pub(crate) fn run(args: Args) -> Result<Status> {
    args.live
        .check()
        .map_err(anyhow::Error::msg)
        .context("usage")?;
    args.to.check()?;
    let cfg = CaptureConfig {
        live: args.live.pipeline(&args.expr.joined(), 1, 0, 64)?,
        count: None,
        duration: args.live.duration.map(Duration::from_secs_f64),
        rules: None,
        store_tags: false,
    };
    let controls = output::controls(false)?;
    let job = Capture::start(&cfg, &mut output::event)?;
    let sink = Sink::open(&args.to, (args.queue_kib as usize) << 10, job.interfaces())?;
    // with `-w -` the stream also ends when stdout's reader is seen gone while idle
    let mut sink = Watched::new(sink, args.to == Target::Stdout);
    let report = job.run(&mut sink, &controls, &mut output::event)?;
    let s = sink.into_inner().finish();
    eprintln!(
        "weir: {}\n{}",
        s.line(),
        output::live_summary(&report.totals, &report.buffer)
    );
    Ok(Status::Clean)
}
