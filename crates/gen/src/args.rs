//! `weir gen`'s options as a user gives them ([`GenArgs`], a `clap::Args` group, behind the
//! `clap` feature): checked against one another ([`GenArgs::check`]) and turned into the
//! [`Job`] they describe ([`GenArgs::job`]). The command line only parses and runs the job.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::parser::ValueSource;
use clap::ArgMatches;
use weir_pcap::{FileFormat, Precision};

use crate::drive::SendOptions;
use crate::job::{Backend, Job, Target};
use crate::size::SizeMix;
use crate::spec::StreamSpec;
use crate::TxConfig;

/// Transmit backend of `weir gen`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenBackend {
    /// AF_PACKET TPACKET_V2 TX ring.
    Packet,
    /// AF_XDP socket (UMEM, TX and completion rings).
    Xdp,
}

impl From<GenBackend> for Backend {
    fn from(b: GenBackend) -> Backend {
        match b {
            GenBackend::Packet => Backend::Packet,
            GenBackend::Xdp => Backend::Xdp,
        }
    }
}

/// `--format pcap|pcapng`: classic pcap with nanosecond timestamps, or pcapng.
fn file_format() -> impl TypedValueParser<Value = FileFormat> {
    PossibleValuesParser::new([
        PossibleValue::new("pcap").help("Classic pcap, nanosecond timestamps"),
        PossibleValue::new("pcapng").help("pcapng"),
    ])
    .map(|s| match s.as_str() {
        "pcapng" => FileFormat::Pcapng,
        _ => FileFormat::Pcap(Precision::Nano),
    })
}

/// The options of `weir gen`: where to (`-i` or `-w`), what (synthetic streams or `--replay`),
/// and how to send.
#[derive(clap::Args, Debug, Clone)]
pub struct GenArgs {
    /// Send on this interface (through a PACKET_TX_RING).
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IFACE",
        conflicts_with = "output",
        required_unless_present = "output"
    )]
    pub interface: Option<String>,
    /// Write the packets to this file (`-` for stdout) instead, timestamped with their planned
    /// send times.
    #[arg(short = 'w', long = "write", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Format of `-w`.
    #[arg(long, value_name = "FORMAT", default_value = "pcap", value_parser = file_format())]
    pub format: FileFormat,
    /// Replay this pcap/pcapng file instead of generating synthetic streams.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Replay at the recorded pace times this factor (2 = twice as fast). The default for
    /// --replay when no --pps, --mbps or --top is given.
    #[arg(long, value_name = "X", conflicts_with_all = ["pps", "mbps", "top"],
          value_parser = weir_packet::value::multiplier,
          allow_negative_numbers = true)]
    pub multiplier: Option<f64>,
    /// Replay the file this many times.
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..),
          allow_negative_numbers = true)]
    pub loops: u64,
    /// The streams: rate, count, sizes, flows, addresses, ports, marks.
    #[command(flatten)]
    pub spec: StreamSpec,
    /// Timestamp of the first packet of a file, ns since the epoch (default: now).
    #[arg(long, value_name = "NS")]
    pub start: Option<u64>,
    /// Send through `packet` (an AF_PACKET TX ring) or `xdp` (an AF_XDP socket on queue 0:
    /// zero-copy when the driver offers it, else copy mode; never through the qdisc).
    #[arg(long, value_enum, default_value_t = GenBackend::Packet)]
    pub backend: GenBackend,
    /// Skip the qdisc (PACKET_QDISC_BYPASS); off by default since queueing is often measured.
    #[arg(long)]
    pub qdisc_bypass: bool,
    /// Most frames per send() call (1 to 65536, at most --ring-frames).
    #[arg(long, default_value_t = 256,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 16),
          allow_negative_numbers = true)]
    pub batch: usize,
    /// TX ring slots (1 to 1048576; with --backend xdp, UMEM frames, rounded up to a power of
    /// two, at least 64).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1 << 20),
          allow_negative_numbers = true)]
    pub ring_frames: u32,
}

impl GenArgs {
    /// Usage checks clap cannot express (`m`: the matches, to tell given options from
    /// defaults): `--batch` within the ring, no option of the other target, no
    /// `--qdisc-bypass` with AF_XDP, a `--size N` that holds the headers and the stamp.
    pub fn check(&self, m: &ArgMatches) -> Result<(), String> {
        if m.value_source("sizes") == Some(ValueSource::CommandLine) {
            if let (SizeMix::Fixed(n), Ok(min)) = (&self.spec.sizes, self.spec.min_frame()) {
                if *n < min {
                    return Err(format!(
                        "--size {n} cannot hold the headers and the 18-byte stamp: the smallest \
                         frame is {min}"
                    ));
                }
            }
        }
        if self.batch > self.ring_frames as usize {
            return Err(format!(
                "--batch {} is more than the ring holds (--ring-frames {})",
                self.batch, self.ring_frames
            ));
        }
        let (ids, mode): (&[(&str, &str)], _) = if self.output.is_some() {
            (
                &[
                    ("qdisc_bypass", "--qdisc-bypass"),
                    ("batch", "--batch"),
                    ("ring_frames", "--ring-frames"),
                    ("backend", "--backend"),
                ],
                "for sending on an interface (-i), not for -w",
            )
        } else {
            (
                &[("format", "--format"), ("start", "--start")],
                "for a file (-w), not for -i",
            )
        };
        let given = ids
            .iter()
            .find(|(id, _)| m.value_source(id) == Some(ValueSource::CommandLine));
        match given {
            Some((_, flag)) => Err(format!("{flag} is {mode}")),
            None if self.backend == GenBackend::Xdp && self.qdisc_bypass => Err(
                "--qdisc-bypass is for --backend packet (AF_XDP never goes through the qdisc)"
                    .into(),
            ),
            None => Ok(()),
        }
    }

    /// Whether the packets go to a file (`-w`) rather than an interface.
    pub fn to_file(&self) -> bool {
        self.output.is_some()
    }

    /// The job the options describe. A `--size` not given is the smallest frame that holds
    /// the headers and the stamp (60 bytes stands for the smallest Ethernet frame; a `--vlan`,
    /// `--tcp` or IPv6 stream needs more, and asking for the smallest frame is what the default
    /// means); one given too small was refused by [`check`](Self::check).
    pub fn job(&self) -> Job {
        let mut spec = self.spec.clone();
        if let (SizeMix::Fixed(n), Ok(min)) = (&spec.sizes, spec.min_frame()) {
            if *n < min {
                spec.sizes = SizeMix::Fixed(min);
            }
        }
        let target = match &self.output {
            Some(path) => Target::File {
                path: path.clone(),
                format: self.format,
                start_ns: self.start,
            },
            None => Target::Interface {
                name: self.interface.clone().unwrap_or_default(),
                backend: self.backend.into(),
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
            spec,
            replay: self.replay.clone(),
            multiplier: self.multiplier,
            loops: self.loops,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, FromArgMatches, Parser};

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        gen: GenArgs,
    }

    fn parse(args: &[&str]) -> Result<GenArgs, String> {
        let m = Cli::command()
            .try_get_matches_from(std::iter::once("gen").chain(args.iter().copied()))
            .map_err(|e| e.kind().to_string())?;
        let cli = Cli::from_arg_matches(&m).map_err(|e| e.to_string())?;
        cli.gen.check(&m)?;
        Ok(cli.gen)
    }

    /// A stream with more headers than untagged IPv4 UDP: the default size grows to the
    /// smallest frame that holds them and the 18-byte stamp, and a `--size` given smaller is a
    /// usage error naming that frame. Sizes by hand: Ethernet 14 + IPv4 20 + UDP 8 + stamp 18 =
    /// 60; + 802.1Q 4 = 64; TCP 20 instead of UDP 8: 72; IPv6 40 instead of IPv4 20: 80.
    #[test]
    fn the_default_size_holds_the_headers_and_a_given_one_must() {
        let sizes = |args: &[&str]| parse(args).map(|g| g.job().spec.sizes);
        assert_eq!(sizes(&["-w", "x"]), Ok(SizeMix::Fixed(60)));
        assert_eq!(sizes(&["-w", "x", "--vlan", "100"]), Ok(SizeMix::Fixed(64)));
        assert_eq!(sizes(&["-w", "x", "--tcp"]), Ok(SizeMix::Fixed(72)));
        assert_eq!(
            sizes(&["-w", "x", "--src", "2001:db8::1", "--dst", "2001:db8::2"]),
            Ok(SizeMix::Fixed(80))
        );
        assert_eq!(
            sizes(&["-w", "x", "--vlan", "7", "--tcp", "--size", "76"]),
            Ok(SizeMix::Fixed(76))
        );
        assert_eq!(
            sizes(&["-w", "x", "--vlan", "100", "--size", "60"]),
            Err(
                "--size 60 cannot hold the headers and the 18-byte stamp: the smallest frame is 64"
                    .into()
            )
        );
        assert_eq!(
            sizes(&["-w", "x", "--vlan", "7", "--tcp", "--size", "75"]),
            Err(
                "--size 75 cannot hold the headers and the 18-byte stamp: the smallest frame is 76"
                    .into()
            )
        );
        // mixes are raised frame by frame (source.rs), not refused
        assert_eq!(
            sizes(&["-w", "x", "--tcp", "--size", "imix"]),
            Ok(SizeMix::Imix)
        );
    }

    /// Each option lands in its place of the job: a file target with its format and start,
    /// an interface with its backend, ring and batch, and the replay settings.
    #[test]
    fn options_become_the_job() {
        let g = parse(&[
            "-w", "x.pcapng", "--format", "pcapng", "--start", "7", "-c", "3",
        ])
        .unwrap();
        let job = g.job();
        match job.target {
            Target::File {
                path,
                format,
                start_ns,
            } => {
                assert_eq!(path, PathBuf::from("x.pcapng"));
                assert_eq!(format, FileFormat::Pcapng);
                assert_eq!(start_ns, Some(7));
            }
            t => panic!("{t:?}"),
        }
        assert_eq!(job.spec.count, Some(3));
        let g = parse(&[
            "-i",
            "veth0",
            "--backend",
            "xdp",
            "--batch",
            "8",
            "--ring-frames",
            "64",
            "--replay",
            "r.pcap",
            "--multiplier",
            "2",
            "--loops",
            "4",
            "--duration",
            "1.5",
        ])
        .unwrap();
        let job = g.job();
        match job.target {
            Target::Interface {
                name,
                backend,
                ring,
                send,
            } => {
                assert_eq!(name, "veth0");
                assert_eq!(backend, Backend::Xdp);
                assert_eq!(ring.frame_count, 64);
                assert!(!ring.qdisc_bypass);
                assert_eq!(send.batch, 8);
                assert_eq!(send.duration, Some(Duration::from_millis(1500)));
            }
            t => panic!("{t:?}"),
        }
        assert_eq!(job.replay, Some(PathBuf::from("r.pcap")));
        assert_eq!((job.multiplier, job.loops), (Some(2.0), 4));
        let g = parse(&["-w", "-"]).unwrap();
        assert!(matches!(
            g.job().target,
            Target::File {
                format: FileFormat::Pcap(Precision::Nano),
                start_ns: None,
                ..
            }
        ));
    }

    /// What clap cannot check: options of the other target, a batch beyond the ring,
    /// `--qdisc-bypass` with AF_XDP.
    #[test]
    fn combinations_are_checked() {
        let err = |a: &[&str]| parse(a).unwrap_err();
        assert_eq!(
            err(&["-w", "f", "--batch", "8"]),
            "--batch is for sending on an interface (-i), not for -w"
        );
        assert_eq!(
            err(&["-i", "lo", "--format", "pcapng"]),
            "--format is for a file (-w), not for -i"
        );
        assert_eq!(
            err(&["-i", "lo", "--batch", "100", "--ring-frames", "10"]),
            "--batch 100 is more than the ring holds (--ring-frames 10)"
        );
        assert_eq!(
            err(&["-i", "lo", "--backend", "xdp", "--qdisc-bypass"]),
            "--qdisc-bypass is for --backend packet (AF_XDP never goes through the qdisc)"
        );
        assert!(parse(&["-i", "lo", "--qdisc-bypass"]).is_ok());
    }
}
