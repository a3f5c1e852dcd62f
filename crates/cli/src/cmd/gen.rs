//! `weir gen`: synthetic stamped streams or the replay of a capture file, sent on an interface
//! through an AF_PACKET TX ring or written to a file with the planned times as timestamps.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use weir_gen::drive::{self, Report, SendOptions};
use weir_gen::{
    interface_mac, neighbour_mac, parse_mac, FlowSpec, Proto, Rate, Replay, ReplayPace, SizeMix,
    Source, Synth, SynthConfig, TxConfig, TxRing,
};

use crate::args;
use crate::args::Format;
use crate::output::{self, Status};

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
    /// Rate in packets per second (all flows together).
    #[arg(long, value_name = "PPS", conflicts_with_all = ["mbps", "top"], value_parser = args::pps,
          allow_negative_numbers = true)]
    pps: Option<f64>,
    /// Rate in megabits per second of frames (all flows together).
    #[arg(long, value_name = "MBPS", conflicts_with = "top", value_parser = args::mbps,
          allow_negative_numbers = true)]
    mbps: Option<f64>,
    /// As fast as possible (the default for synthetic streams on an interface).
    #[arg(long)]
    top: bool,
    /// Stop after this many packets (synthetic streams; default: no limit with --duration,
    /// else 1000).
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = args::count,
          allow_negative_numbers = true)]
    count: Option<u64>,
    /// Stop after this many seconds (planned time for files, wall time on an interface).
    #[arg(long, value_name = "SECONDS", value_parser = args::seconds,
          allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Frame size without FCS, up to 65535: N, `imix` (60/590/1514 in 7:4:1) or a uniform
    /// range LO-HI.
    #[arg(long, default_value = "60", value_name = "SIZE", value_parser = size_mix)]
    size: SizeMix,
    /// Number of flows (source ports sport, sport+1, ...), each its own stream.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u16).range(1..),
          allow_negative_numbers = true)]
    flows: u16,
    /// Stream id of the first flow.
    #[arg(long, default_value_t = 0, value_name = "ID")]
    stream: u16,
    /// Source address.
    #[arg(long, default_value = "10.0.0.1", value_name = "IP")]
    src: IpAddr,
    /// Destination address.
    #[arg(long, default_value = "10.0.0.2", value_name = "IP")]
    dst: IpAddr,
    /// Source port (of the first flow).
    #[arg(long, default_value_t = 40_000)]
    sport: u16,
    /// Destination port.
    #[arg(long, default_value_t = 9_000)]
    dport: u16,
    /// Source MAC (default: the interface's, 02:00:00:00:00:01 for files).
    #[arg(long, value_name = "MAC")]
    src_mac: Option<String>,
    /// Destination MAC (default: the destination's neighbour entry on the interface, else
    /// broadcast; 02:00:00:00:00:02 for files).
    #[arg(long, value_name = "MAC")]
    dst_mac: Option<String>,
    /// TOS byte / traffic class (decimal or 0x hex), e.g. 0xc0.
    #[arg(long, value_parser = parse_u8, default_value = "0")]
    tos: u8,
    /// DSCP (0-63), sets the upper six bits of the TOS byte.
    #[arg(long, conflicts_with = "tos", value_parser = clap::value_parser!(u8).range(0..=63),
          allow_negative_numbers = true)]
    dscp: Option<u8>,
    /// TTL / hop limit.
    #[arg(long, default_value_t = 64)]
    ttl: u8,
    /// 802.1Q tag: VID or VID:PRIORITY.
    #[arg(long, value_name = "VID[:PCP]")]
    vlan: Option<String>,
    /// TCP-shaped segments instead of UDP datagrams.
    #[arg(long)]
    tcp: bool,
    /// Seed of the uniform size draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Timestamp of the first packet of a file, ns since the epoch (default: now).
    #[arg(long, value_name = "NS")]
    start: Option<u64>,
    /// Skip the qdisc (PACKET_QDISC_BYPASS); off by default since queueing is often measured.
    #[arg(long)]
    qdisc_bypass: bool,
    /// Most frames per send() call (1 to 65536, at most --ring-frames).
    #[arg(long, default_value_t = 256,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 16),
          allow_negative_numbers = true)]
    batch: usize,
    /// TX ring slots (1 to 1048576).
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
            None => Ok(()),
        }
    }
}

/// `--size`: a [`SizeMix`] whose frames fit in 65535 bytes.
fn size_mix(s: &str) -> Result<SizeMix, String> {
    let mix: SizeMix = s.parse()?;
    let too_big = match &mix {
        SizeMix::Fixed(n) => *n == 0 || *n > 65_535,
        SizeMix::Uniform { lo, hi } => *lo == 0 || *hi > 65_535,
        SizeMix::Imix => false,
    };
    if too_big {
        return Err(format!("bad size '{s}': frames are 1 to 65535 bytes"));
    }
    Ok(mix)
}

fn parse_u8(s: &str) -> Result<u8, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u8::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("'{s}' is not a byte (0-255 or 0x00-0xff)"))
}

fn rate(args: &Args) -> Option<Rate> {
    if let Some(p) = args.pps {
        Some(Rate::Pps(p))
    } else if let Some(m) = args.mbps {
        Some(Rate::Mbps(m))
    } else if args.top {
        Some(Rate::Top)
    } else {
        None
    }
}

fn synth(args: &Args) -> Result<Synth> {
    let (src_mac, dst_mac) = match &args.interface {
        Some(i) => (
            match &args.src_mac {
                Some(m) => parse_mac(m)?,
                None => interface_mac(i)?,
            },
            match &args.dst_mac {
                Some(m) => parse_mac(m)?,
                None => neighbour_mac(i, args.dst).unwrap_or_else(|| {
                    eprintln!(
                        "weir: warning: no neighbour entry for {} on {i}: sending to the broadcast MAC (routers will not forward it; give --dst-mac)",
                        args.dst
                    );
                    [0xff; 6]
                }),
            },
        ),
        None => (
            parse_mac(args.src_mac.as_deref().unwrap_or("02:00:00:00:00:01"))?,
            parse_mac(args.dst_mac.as_deref().unwrap_or("02:00:00:00:00:02"))?,
        ),
    };
    let vlan = match &args.vlan {
        None => None,
        Some(v) => {
            let (vid, pcp) = v.split_once(':').unwrap_or((v, "0"));
            Some((
                vid.parse()
                    .with_context(|| format!("bad VLAN id '{vid}'"))?,
                pcp.parse()
                    .with_context(|| format!("bad VLAN priority '{pcp}'"))?,
            ))
        }
    };
    let tos = match args.dscp {
        Some(d) if d > 63 => bail!("--dscp must be 0-63"),
        Some(d) => d << 2,
        None => args.tos,
    };
    if args.flows == 0 {
        bail!("--flows must be at least 1");
    }
    let flows = (0..args.flows)
        .map(|k| FlowSpec {
            src_mac,
            dst_mac,
            vlan,
            src_ip: args.src,
            dst_ip: args.dst,
            src_port: args.sport.wrapping_add(k),
            dst_port: args.dport,
            tos,
            ttl: args.ttl,
            proto: if args.tcp { Proto::Tcp } else { Proto::Udp },
        })
        .collect();
    let duration_ns = args.duration.map(|d| (d * 1e9) as u64);
    let count = match (args.count, duration_ns) {
        (Some(c), _) => Some(c),
        (None, Some(_)) => None,
        (None, None) => Some(1000),
    };
    let rate = rate(args).unwrap_or(Rate::Top);
    Ok(Synth::new(SynthConfig {
        flows,
        stream_base: args.stream,
        sizes: args.size.clone(),
        seed: args.seed,
        rate,
        count,
        duration_ns,
    })?)
}

fn replay(args: &Args, path: &std::path::Path, max_len: usize) -> Result<Replay> {
    let pace = match (args.multiplier, rate(args)) {
        (Some(m), _) => ReplayPace::Recorded { multiplier: m },
        (None, Some(r)) => ReplayPace::Rate(r),
        (None, None) => ReplayPace::Recorded { multiplier: 1.0 },
    };
    Replay::open(path, pace, args.loops, max_len)
        .with_context(|| format!("cannot replay {}", path.display()))
}

/// Runs `weir gen`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let report = if let Some(path) = &args.output {
        let mut src: Box<dyn Source> = match &args.replay {
            Some(r) => Box::new(replay(&args, r, usize::MAX)?),
            None => Box::new(synth(&args)?),
        };
        let start = args.start.unwrap_or_else(drive::realtime_ns);
        output::check_inputs(args.replay.as_slice(), Some(path))?;
        let out = output::create(path)?;
        let (rep, out) = drive::to_file(src.as_mut(), out, args.format.output(false), start)?;
        out.commit()?;
        rep
    } else {
        let iface = args.interface.as_deref().expect("clap requires -i or -w");
        let mut ring = TxRing::open(
            iface,
            TxConfig {
                frame_count: args.ring_frames,
                qdisc_bypass: args.qdisc_bypass,
                ..TxConfig::default()
            },
        )?;
        let mut src: Box<dyn Source> = match &args.replay {
            Some(r) => {
                let s = replay(&args, r, ring.max_frame())?;
                if s.link() != weir_packet::LinkType::ETHERNET {
                    bail!(
                        "{}: only Ethernet captures can be sent on an interface, this one is {}",
                        r.display(),
                        s.link()
                    );
                }
                Box::new(s)
            }
            None => Box::new(synth(&args)?),
        };
        let stop = Arc::new(AtomicBool::new(false));
        output::on_signal(stop.clone())?;
        eprintln!(
            "weir: sending on {iface} ({}qdisc)",
            if args.qdisc_bypass {
                "bypassing the "
            } else {
                "through the "
            }
        );
        drive::to_ring(
            src.as_mut(),
            &mut ring,
            SendOptions {
                batch: args.batch,
                duration: args.duration.map(Duration::from_secs_f64),
            },
            &stop,
        )?
    };
    print_report(&report, args.json, args.output.is_some())?;
    if report.send_errors > 0 {
        anyhow::bail!(
            "{} of the send calls failed, {} packets not sent{}",
            report.send_errors,
            report.unsent,
            report
                .last_error
                .as_ref()
                .map(|e| format!(" (last: {e})"))
                .unwrap_or_default()
        );
    }
    Ok(Status::Clean)
}

fn print_report(r: &Report, json: bool, file: bool) -> Result<()> {
    let secs = r.elapsed_ns as f64 / 1e9;
    if file {
        eprintln!(
            "weir: wrote {} packets ({} bytes) spanning {secs:.6} s of planned time",
            r.sent, r.bytes
        );
    } else {
        eprintln!(
            "weir: sent {} packets ({} bytes) in {secs:.3} s: {:.0} pps, {:.1} Mbps; {} send() calls, {} send errors{}, {} rejected frames",
            r.sent,
            r.bytes,
            r.pps(),
            r.mbps(),
            r.batches,
            r.send_errors,
            r.last_error.as_ref().map(|e| format!(" (last: {e})")).unwrap_or_default(),
            r.rejected
        );
    }
    if json {
        let v = serde_json::json!({
            "sent": r.sent,
            "bytes": r.bytes,
            "elapsed_ns": r.elapsed_ns,
            "pps": r.pps(),
            "mbps": r.mbps(),
            "send_calls": r.batches,
            "send_errors": r.send_errors,
            "last_error": r.last_error,
            "rejected": r.rejected,
        });
        let mut out = output::stdout();
        writeln!(out, "{v}")?;
        out.commit()?;
    }
    Ok(())
}
