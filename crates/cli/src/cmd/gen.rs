//! `weir gen`: synthetic stamped streams or the replay of a capture file, sent on an interface
//! through an AF_PACKET TX ring or an AF_XDP socket (`--backend xdp`), or written to a file with
//! the planned times as timestamps.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use weir_gen::drive::SendOptions;
use weir_gen::job::{Backend, Job, Target};
use weir_gen::spec::StreamSpec;
use weir_gen::TxConfig;

use crate::args;
use crate::args::Format;
use crate::output::{self, Status};

/// Transmit backend of `weir gen`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum GenBackend {
    /// AF_PACKET TPACKET_V2 TX ring.
    Packet,
    /// AF_XDP socket (UMEM, TX and completion rings).
    Xdp,
}

/// Arguments of `weir gen`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Send on this interface (through a PACKET_TX_RING).
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IFACE",
        conflicts_with = "output",
        required_unless_present = "output"
    )]
    interface: Option<String>,
    /// Write the packets to this file (`-` for stdout) instead, timestamped with their planned
    /// send times.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Format of `-w`.
    #[arg(long, value_enum, default_value_t = Format::Pcap)]
    format: Format,
    /// Replay this pcap/pcapng file instead of generating synthetic streams.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// Replay at the recorded pace times this factor (2 = twice as fast). The default for
    /// --replay when no --pps, --mbps or --top is given.
    #[arg(long, value_name = "X", conflicts_with_all = ["pps", "mbps", "top"],
          value_parser = args::multiplier,
          allow_negative_numbers = true)]
    multiplier: Option<f64>,
    /// Replay the file this many times.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..),
          allow_negative_numbers = true)]
    loops: u64,
    /// The streams: rate, count, sizes, flows, addresses, ports, marks.
    #[command(flatten)]
    spec: StreamSpec,
    /// Timestamp of the first packet of a file, ns since the epoch (default: now).
    #[arg(long, value_name = "NS")]
    start: Option<u64>,
    /// Send through `packet` (an AF_PACKET TX ring) or `xdp` (an AF_XDP socket on queue 0:
    /// zero-copy when the driver offers it, else copy mode; never through the qdisc).
    #[arg(long, value_enum, default_value_t = GenBackend::Packet)]
    backend: GenBackend,
    /// Skip the qdisc (PACKET_QDISC_BYPASS); off by default since queueing is often measured.
    #[arg(long)]
    qdisc_bypass: bool,
    /// Most frames per send() call (1 to 65536, at most --ring-frames).
    #[arg(long, default_value_t = 256,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 16),
          allow_negative_numbers = true)]
    batch: usize,
    /// TX ring slots (1 to 1048576; with --backend xdp, UMEM frames, rounded up to a power of
    /// two, at least 64).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1 << 20),
          allow_negative_numbers = true)]
    ring_frames: u32,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        if self.batch > self.ring_frames as usize {
            return Err(format!(
                "--batch {} is more than the ring holds (--ring-frames {})",
                self.batch, self.ring_frames
            ));
        }
        let (ignored, mode) = if self.output.is_some() {
            let ids = [
                ("qdisc_bypass", "--qdisc-bypass"),
                ("batch", "--batch"),
                ("ring_frames", "--ring-frames"),
                ("backend", "--backend"),
            ];
            (
                args::first_given(m, &ids),
                "for sending on an interface (-i), not for -w",
            )
        } else {
            let ids = [("format", "--format"), ("start", "--start")];
            (args::first_given(m, &ids), "for a file (-w), not for -i")
        };
        match ignored {
            Some(flag) => Err(format!("{flag} is {mode}")),
            None if self.backend == GenBackend::Xdp && self.qdisc_bypass => Err(
                "--qdisc-bypass is for --backend packet (AF_XDP never goes through the qdisc)"
                    .into(),
            ),
            None => Ok(()),
        }
    }
}

impl Args {
    /// The job asked for.
    fn job(&self) -> Job {
        let target = match &self.output {
            Some(path) => Target::File {
                path: path.clone(),
                format: self.format.output(false),
                start_ns: self.start,
            },
            None => Target::Interface {
                name: self.interface.clone().unwrap_or_default(),
                backend: match self.backend {
                    GenBackend::Packet => Backend::Packet,
                    GenBackend::Xdp => Backend::Xdp,
                },
                ring: TxConfig {
                    frame_count: self.ring_frames,
                    qdisc_bypass: self.qdisc_bypass,
                    ..TxConfig::default()
                },
                send: SendOptions {
                    batch: self.batch,
                    duration: self.spec.duration_s.map(Duration::from_secs_f64),
                },
            },
        };
        Job {
            target,
            spec: self.spec.clone(),
            replay: self.replay.clone(),
            multiplier: self.multiplier,
            loops: self.loops,
        }
    }
}

/// Runs `weir gen` ([`Job::run`]): SIGINT/SIGTERM stop the sending on an interface.
pub(crate) fn run(args: Args) -> Result<Status> {
    let stop = Arc::new(AtomicBool::new(false));
    if args.output.is_none() {
        output::on_signal(stop.clone())?;
    }
    let report = args.job().run(&stop, &mut |s| eprintln!("weir: {s}"))?;
    eprintln!("weir: {}", report.summary(args.output.is_some()));
    if args.json {
        let mut out = output::stdout();
        writeln!(out, "{}", report.to_json())?;
        out.commit()?;
    }
    if let Some(failure) = report.failure() {
        bail!("{failure}");
    }
    Ok(Status::Clean)
}
