//! The command line's shared parts: the argument groups several subcommands flatten (input
//! files, packet output, the filter expression), the value parsers every number goes through
//! (durations, rates, sizes, counts: finite and in range, or a usage error naming the limit),
//! and the checks of options that only make sense together.
//!
//! Every numeric option is parsed once, here, by clap: a bad value is a usage error (exit 2)
//! before anything is opened, created or allocated. Combinations clap cannot express are checked
//! by each subcommand's `check` against the parsed matches ([`given`]), also before it runs.

use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::ArgMatches;
use weir_pcap::{FileFormat, Precision};

/// Output file format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Classic pcap, nanosecond timestamps (microsecond ones with --micro where a command has it).
    Pcap,
    /// pcapng with one interface block per input interface, nanosecond timestamps.
    Pcapng,
}

impl Format {
    /// The writer's format; `micro` asks classic pcap for microsecond timestamps.
    pub(crate) fn output(self, micro: bool) -> FileFormat {
        match self {
            Format::Pcap if micro => FileFormat::Pcap(Precision::Micro),
            Format::Pcap => FileFormat::Pcap(Precision::Nano),
            Format::Pcapng => FileFormat::Pcapng,
        }
    }
}

/// The largest snap length, and what `-s 0` means (as in tcpdump).
pub(crate) const MAX_SNAPLEN: u32 = 262_144;

/// Input capture files (`-r`), repeated to concatenate.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct Inputs {
    /// Input capture file (pcap or pcapng); `-` reads stdin. Repeat to concatenate files.
    #[arg(short = 'r', long = "read", value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

/// Where packets are written (`-w`) and in which format.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct Output {
    /// Write the packets to this file (`-` for stdout) instead of printing them.
    #[arg(short = 'w', long = "write", value_name = "OUT")]
    pub path: Option<PathBuf>,
    /// Output file format [default: pcap; pcapng for `capture`, which records each packet's
    /// interface].
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Classic pcap with microsecond timestamps (the old magic) instead of nanoseconds; implies
    /// `--format pcap`.
    #[arg(long)]
    pub micro: bool,
}

impl Output {
    /// The writer's format: `--format`, else pcap with `--micro`, else `default`.
    pub(crate) fn format(&self, default: Format) -> FileFormat {
        match (self.format, self.micro) {
            (Some(f), micro) => f.output(micro),
            (None, true) => FileFormat::Pcap(Precision::Micro),
            (None, false) => default.output(false),
        }
    }

    /// `--micro` is for classic pcap; `--format`/`--micro` need `-w` (`needs_path`).
    pub(crate) fn check(&self, needs_path: bool) -> Result<(), String> {
        if self.micro && self.format == Some(Format::Pcapng) {
            return Err("--micro is for classic pcap; pcapng timestamps are nanoseconds".into());
        }
        if needs_path && self.path.is_none() && (self.format.is_some() || self.micro) {
            return Err("--format and --micro describe the file of -w OUT; give -w".into());
        }
        Ok(())
    }
}

/// The rule engine's options (`crates/rules/RULES.md`), shared by every packet path: `read`,
/// `capture`, `record` and `flows`, live and from files.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct RulesArgs {
    /// Rule file (one rule per line, see crates/rules/RULES.md): what to keep, slice, sample,
    /// cut off per flow and tag, after the filter expression. Reloaded on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub rules: Option<PathBuf>,
    /// Unix socket on which `weir rules add|del|list|stats` reach this process's rules
    /// (created with mode 0660, removed on exit); needs `--rules`.
    #[arg(long, value_name = "PATH", requires = "rules")]
    pub control: Option<PathBuf>,
    /// Keep every rule in user space: no drop rule goes into the kernel socket filter.
    #[arg(long, requires = "rules")]
    pub no_kernel_rules: bool,
}

impl RulesArgs {
    /// The job's rules: the file and its control socket, when a file is given.
    pub(crate) fn config(&self) -> Option<weir_sensor::rules::RulesConfig> {
        self.rules
            .clone()
            .map(|path| weir_sensor::rules::RulesConfig {
                path,
                control: self.control.clone(),
            })
    }
}

/// The filter expression, and tcpdump's `-n`.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct Expr {
    /// Filter expression in tcpdump syntax (pcap-filter(7)): every word that is not an option,
    /// joined with spaces, so options may come before, after or between its words; `--` ends
    /// the options.
    #[arg(value_name = "EXPR")]
    pub words: Vec<String>,
    /// Numeric addresses and ports: accepted for tcpdump users, weir never resolves names.
    #[arg(short = 'n', action = clap::ArgAction::Count)]
    pub numeric: u8,
}

impl Expr {
    /// The expression as one string (empty: every packet).
    pub(crate) fn joined(&self) -> String {
        self.words.join(" ")
    }
}

/// Refuses stdin (`-`) where a command needs files it can read twice (stores, indexed files).
pub(crate) fn no_stdin<'a>(
    mut inputs: impl Iterator<Item = &'a PathBuf>,
    command: &str,
) -> Result<(), String> {
    if inputs.any(|p| p.as_os_str() == "-") {
        return Err(format!(
            "weir {command} reads stores and capture files, not stdin (`-`): \
             save the capture to a file first"
        ));
    }
    Ok(())
}

/// Whether the option `id` was given on the command line (not its default).
pub(crate) fn given(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

/// The first of `ids` given on the command line, as `--long` (or `-s`) for messages.
pub(crate) fn first_given(m: &ArgMatches, ids: &[(&str, &str)]) -> Option<String> {
    ids.iter()
        .find(|(id, _)| given(m, id))
        .map(|(_, flag)| (*flag).to_string())
}

/// Where packets come from: capture files (`-r`) or live interfaces (`-i`, with the options of
/// live capture), one or the other; shared by `flows`, `record`, `http` and `voip`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct Source {
    #[command(flatten)]
    pub inputs: Inputs,
    /// Live capture (instead of -r): interfaces, threads, buffer...
    #[command(flatten)]
    pub live: LiveArgs,
}

impl Source {
    /// Whether the packets come from interfaces (`-i`).
    pub(crate) fn is_live(&self) -> bool {
        !self.live.interfaces.is_empty()
    }

    /// The usage checks of every command that reads files or interfaces: the live options' own
    /// checks, exactly one of the two, and no live-only option with files; `verb` is what the
    /// command does (`meter`, `analyze`).
    pub(crate) fn check(&self, m: &ArgMatches, verb: &str) -> Result<(), String> {
        self.live.check()?;
        let reading = !self.inputs.files.is_empty();
        match (reading, self.is_live()) {
            (true, true) => {
                return Err(format!("-i and -r: {verb} live traffic or files, not both"))
            }
            (false, false) => return Err("give input files with -r, or interfaces with -i".into()),
            _ => {}
        }
        if reading {
            let live_only = [LIVE_ONLY, &[("buffer_mib", "--buffer-mib")]].concat();
            if let Some(flag) = first_given(m, &live_only) {
                return Err(format!(
                    "{flag} is for live capture (-i), not for files (-r)"
                ));
            }
        }
        Ok(())
    }
}

/// The options of live capture (`LiveArgs`) other than `-i`: refused with `-r`, where they do
/// nothing.
pub(crate) const LIVE_ONLY: &[(&str, &str)] = &[
    ("threads", "--threads"),
    ("fanout", "--fanout"),
    ("no_promisc", "--no-promisc"),
    ("snaplen", "-s/--snaplen"),
    ("slice", "--slice"),
    ("no_hw_timestamps", "--no-hw-timestamps"),
    ("block_size", "--block-size"),
    ("block_count", "--block-count"),
    ("duration", "--duration"),
    ("backend", "--backend"),
];

fn float_in(s: &str, what: &str, lo: f64, hi: f64) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number ({what})"))?;
    if !(v.is_finite() && (lo..=hi).contains(&v)) {
        return Err(format!("{s} is out of range: {what} from {lo} to {hi}"));
    }
    Ok(v)
}

/// A duration in seconds: from 1 ns to 10⁹ s (31 years), finite.
pub(crate) fn seconds(s: &str) -> Result<f64, String> {
    float_in(s, "seconds", 1e-9, 1e9)
}

/// A packet rate: 0.001 to 10⁹ packets per second.
pub(crate) fn pps(s: &str) -> Result<f64, String> {
    float_in(s, "packets per second", 1e-3, 1e9)
}

/// A bit rate: 0.001 to 10⁷ megabits per second.
pub(crate) fn mbps(s: &str) -> Result<f64, String> {
    float_in(s, "megabits per second", 1e-3, 1e7)
}

/// A speed factor: 10⁻⁶ to 10⁶.
pub(crate) fn multiplier(s: &str) -> Result<f64, String> {
    float_in(s, "speed factor", 1e-6, 1e6)
}

/// A point in time: seconds since the epoch or a UTC date ([`weir_packet::time::parse`]), as ns.
pub(crate) fn time(s: &str) -> Result<u64, String> {
    let too_late = s
        .trim()
        .parse::<f64>()
        .is_ok_and(|v| v >= u64::MAX as f64 / 1e9);
    weir_packet::time::parse(s).filter(|_| !too_late).ok_or_else(|| {
        format!(
            "cannot read the time {s:?}: seconds since the epoch or YYYY-MM-DD[THH:MM:SS[.frac]][Z], \
             UTC, from 1970 to 2554"
        )
    })
}

/// A packet count (`-c`): at least 1, as tcpdump ("invalid packet count 0").
pub(crate) fn count(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err(format!(
            "invalid packet count {s} (must be from 1 to {})",
            u64::MAX
        )),
        Ok(n) => Ok(n),
    }
}

/// A snap length: 1 to 262144 bytes, and 0 for the whole packet (262144), as tcpdump.
pub(crate) fn snaplen(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Ok(MAX_SNAPLEN),
        Ok(n) if n <= MAX_SNAPLEN => Ok(n),
        _ => Err(format!(
            "invalid snaplen {s} (must be from 0 to {MAX_SNAPLEN}; 0 is the whole packet)"
        )),
    }
}

fn power_of_two(s: &str, what: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if n.is_power_of_two() && (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!(
            "{s} is not a valid {what}: a power of two from {lo} to {hi}"
        )),
    }
}

/// The shared packet buffer in MiB: a power of two from 1 to 65536 (64 GiB).
pub(crate) fn buffer_mib(s: &str) -> Result<usize, String> {
    power_of_two(s, "buffer size in MiB", 1, 1 << 16).map(|n| n as usize)
}

/// A ring block in bytes: a power of two from 4096 (a page) to 1 GiB.
pub(crate) fn block_size(s: &str) -> Result<u32, String> {
    power_of_two(s, "ring block size in bytes", 4096, 1 << 30).map(|n| n as u32)
}

/// Most bytes one thread's ring may map (block size × block count).
pub(crate) const MAX_RING_BYTES: u64 = 16 << 30;

/// Most flows one shard of the meter holds.
pub(crate) const MAX_FLOWS_PER_WORKER: u64 = weir_flows::index::MAX_CAPACITY as u64;

/// The default of `weir flows --workers`: one per core.
pub(crate) fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(256))
}

/// NetFlow-family format of `weir flows --export` and `weir record --flow-export`.
pub(crate) use weir_export::NetflowFormat as FlowFormat;

/// Flow options of `weir record --flows`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct FlowArgs {
    /// With --flows: export NetFlow/IPFIX to TARGET (as `weir flows --export`).
    #[arg(long = "flow-export", value_name = "TARGET", num_args = 0..=1, default_missing_value = weir_export::DEFAULT_COLLECTOR)]
    pub flow_export: Option<String>,
    /// With --flows: format of --flow-export.
    #[arg(long = "flow-format", value_enum, default_value_t = FlowFormat::Ipfix)]
    pub flow_format: FlowFormat,
    /// With --flows: write JSON lines to OUT (the default output is a file in the store:
    /// DIR/flows.json).
    #[arg(long = "flow-json", value_name = "OUT")]
    pub flow_json: Option<PathBuf>,
    /// With --flows: idle timeout in seconds.
    #[arg(long = "flow-idle-timeout", value_name = "S", default_value_t = 30.0,
          value_parser = seconds,
          allow_negative_numbers = true)]
    pub flow_idle_timeout: f64,
    /// With --flows: active timeout in seconds.
    #[arg(
        long = "flow-active-timeout",
        value_name = "S",
        default_value_t = 120.0,
        value_parser = seconds,
          allow_negative_numbers = true)]
    pub flow_active_timeout: f64,
}

impl FlowArgs {
    /// The ids and flags of these options, for "given without --flows" checks.
    pub(crate) const IDS: &'static [(&'static str, &'static str)] = &[
        ("flow_export", "--flow-export"),
        ("flow_format", "--flow-format"),
        ("flow_json", "--flow-json"),
        ("flow_idle_timeout", "--flow-idle-timeout"),
        ("flow_active_timeout", "--flow-active-timeout"),
    ];
}

/// Layers `--slice` keeps.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slice {
    /// Link headers only.
    L2,
    /// Up to the IP header.
    L3,
    /// Up to the transport header.
    L4,
}

/// Receive backend on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// AF_PACKET TPACKET_V3 rings.
    Packet,
    /// AF_XDP sockets fed by weir's XDP program.
    Xdp,
}

/// Fanout mode on the command line.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fanout {
    /// By flow hash (both directions of a flow on one thread).
    Hash,
    /// Round robin.
    Lb,
    /// By receiving CPU.
    Cpu,
}

/// Capture options common to the live commands (`capture`, `record`, `flows -i`).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct LiveArgs {
    /// Interfaces to capture on, comma-separated (`-i eth0,eth1`).
    #[arg(short = 'i', long = "interface", value_delimiter = ',')]
    pub interfaces: Vec<String>,
    /// Capture threads per interface (joined in one fanout group), 1 to 256.
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256),
          allow_negative_numbers = true)]
    pub threads: usize,
    /// How the fanout group spreads packets over threads.
    #[arg(long, value_enum, default_value_t = Fanout::Hash)]
    pub fanout: Fanout,
    /// Do not put the interfaces in promiscuous mode.
    #[arg(long)]
    pub no_promisc: bool,
    /// Keep at most this many bytes of each packet (the original length is recorded); 0 is the
    /// whole packet (262144), as in tcpdump.
    #[arg(short = 's', long, default_value_t = MAX_SNAPLEN, value_parser = snaplen,
          allow_negative_numbers = true)]
    pub snaplen: u32,
    /// Keep only the headers up to this layer (the original length is recorded).
    #[arg(long, value_enum)]
    pub slice: Option<Slice>,
    /// Do not ask the NIC for hardware timestamps.
    #[arg(long)]
    pub no_hw_timestamps: bool,
    /// Ring block size in bytes (a power of two from 4096 to 1 GiB).
    #[arg(long, default_value_t = 1 << 20, value_parser = block_size,
          allow_negative_numbers = true)]
    pub block_size: u32,
    /// Ring blocks per thread (1 to 1048576; at most 16 GiB of ring per thread).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1 << 20),
          allow_negative_numbers = true)]
    pub block_count: u32,
    /// Shared packet buffer size in MiB, a power of two up to 65536 (default: 512 for `record`,
    /// 64 for `capture` and `flows`).
    #[arg(long, value_name = "MIB", value_parser = buffer_mib,
          allow_negative_numbers = true)]
    pub buffer_mib: Option<usize>,
    /// Receive backend: `packet` (AF_PACKET rings) or `xdp` (AF_XDP sockets, one per RX queue).
    #[arg(long, value_enum, default_value_t = Backend::Packet)]
    pub backend: Backend,
    /// Stop after this many seconds (up to 10⁹).
    #[arg(long, value_name = "SECONDS", value_parser = seconds,
          allow_negative_numbers = true)]
    pub duration: Option<f64>,
}

impl LiveArgs {
    /// Usage checks clap cannot express: each interface once, a ring that the kernel can map.
    pub(crate) fn check(&self) -> Result<(), String> {
        for (k, i) in self.interfaces.iter().enumerate() {
            if i.is_empty() {
                return Err("-i: empty interface name".into());
            }
            if self.interfaces[..k].contains(i) {
                return Err(format!(
                    "interface {i} given twice: every packet would be captured twice"
                ));
            }
        }
        let ring = u64::from(self.block_size) * u64::from(self.block_count);
        if ring > MAX_RING_BYTES {
            return Err(format!(
                "--block-size {} × --block-count {} is {ring} bytes of ring per thread; the \
                 most is {} (16 GiB)",
                self.block_size, self.block_count, MAX_RING_BYTES
            ));
        }
        Ok(())
    }

    /// The capture library's fanout mode.
    pub(crate) fn fanout_mode(&self) -> weir_capture::FanoutMode {
        match self.fanout {
            Fanout::Hash => weir_capture::FanoutMode::Hash,
            Fanout::Lb => weir_capture::FanoutMode::LoadBalance,
            Fanout::Cpu => weir_capture::FanoutMode::Cpu,
        }
    }

    /// The live pipeline these options ask for, capturing what `expr` matches into a buffer of
    /// `--buffer-mib` (else `default_buffer_mib`) with `readers` registered and `best_effort`
    /// readers.
    pub(crate) fn pipeline(
        &self,
        expr: &str,
        readers: usize,
        best_effort: usize,
        default_buffer_mib: usize,
    ) -> anyhow::Result<weir_capture::PipelineConfig> {
        use anyhow::{bail, Context};
        let buffer_mib = self.buffer_mib.unwrap_or(default_buffer_mib);
        if self.interfaces.is_empty() {
            bail!("give at least one interface with -i");
        }
        if self.threads == 0 {
            bail!("--threads must be at least 1");
        }
        let buffer_bytes = buffer_mib
            .checked_mul(1 << 20)
            .filter(|s| s.is_power_of_two())
            .with_context(|| format!("--buffer-mib {buffer_mib} must be a power of two"))?;
        Ok(weir_capture::PipelineConfig {
            interfaces: self.interfaces.clone(),
            threads: self.threads,
            fanout: self.fanout_mode(),
            promiscuous: !self.no_promisc,
            snaplen: self.snaplen,
            slice: self.slice.map(|s| match s {
                Slice::L2 => weir_decode::SliceLevel::L2,
                Slice::L3 => weir_decode::SliceLevel::L3,
                Slice::L4 => weir_decode::SliceLevel::L4,
            }),
            hw_timestamps: !self.no_hw_timestamps,
            ring: weir_capture::RingConfig {
                block_size: self.block_size,
                block_count: self.block_count,
                ..weir_capture::RingConfig::default()
            },
            filter: expr.to_string(),
            buffer_bytes,
            readers,
            best_effort_readers: best_effort,
            rules: None,
            kernel_rules: true,
            backend: match self.backend {
                Backend::Packet => weir_capture::Backend::Packet,
                Backend::Xdp => weir_capture::Backend::Xdp,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_finite_and_in_range() {
        for bad in [
            "-1", "nan", "NaN", "inf", "-inf", "1e30", "0", "", "x", "1e-10",
        ] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("0.5"), Ok(0.5));
        assert_eq!(seconds("1e9"), Ok(1e9));
        assert!(pps("0").is_err() && pps("inf").is_err() && pps("2e9").is_err());
        assert_eq!(count("1"), Ok(1));
        assert!(count("0").is_err() && count("-1").is_err());
        assert_eq!(snaplen("0"), Ok(MAX_SNAPLEN));
        assert_eq!(snaplen("96"), Ok(96));
        assert!(snaplen("262145").is_err() && snaplen("-1").is_err());
        assert_eq!(buffer_mib("64"), Ok(64));
        assert!(buffer_mib("0").is_err() && buffer_mib("3").is_err());
        assert!(buffer_mib("131072").is_err());
        assert!(block_size("2048").is_err() && block_size("4096").is_ok());
    }
}
