//! `weir flows`: meter capture files into flows and export them as NetFlow v5 / v9 / IPFIX (UDP
//! or a file), JSON lines or CSV, with a summary of every counter on stderr.
//!
//! The packets come from the shared offline input loop ([`for_each_packet`]: BPF filter, damage
//! handling); the meter is `weir_flows::Meter` (reader stage here, `--workers` shard threads, one
//! exporter thread); the encoders are `weir_export`'s sinks, several at once if asked
//! (`--export` and `--json` together, say). One large classic pcap file is read on every core
//! instead, the reading threads running the `--workers` shards themselves
//! ([`meter_in_parallel`]).
//!
//! Live (`-i IFACE`, and `weir record --flows`): capture threads fill the shared packet buffer
//! and the meter reads it as one of its consumers ([`LiveMeter`]), expiring flows on the wall
//! clock when traffic pauses.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use weir_export::{
    open_sink, ExportError, ExportStats, FlowSink, NetflowFormat, SinkSpec, Target,
    DEFAULT_COLLECTOR,
};
use weir_flows::{Config, FlowRecord, Meter, MeterStats, RecordSink};
use weir_packet::LinkType;
use weir_pcap::{FileReader, Interface, Packet, ReadError};

use super::input::{for_each_packet, Filters, Visitor};
use super::ordered;
use crate::args::{self, LiveArgs};
use crate::output::{on_signal, start_live, warn_damage, Status};

/// NetFlow-family format of `--export`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// NetFlow v5 (IPv4 only: IPv6 flows are counted and skipped).
    V5,
    /// NetFlow v9 (RFC 3954), IPv4 and IPv6 templates.
    V9,
    /// IPFIX (RFC 7011); with --biflow, RFC 5103 bidirectional records.
    Ipfix,
}

/// Arguments of `weir flows`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    inputs: args::Inputs,
    /// Live capture (instead of -r): interfaces, threads, buffer...
    #[command(flatten)]
    live: LiveArgs,
    /// Export NetFlow/IPFIX to `udp://HOST:PORT[,udp://HOST:PORT...]`, `file:PATH` or `-`
    /// (stdout). Without a value: udp://127.0.0.1:2055.
    #[arg(long, value_name = "TARGET", num_args = 0..=1, default_missing_value = DEFAULT_COLLECTOR)]
    export: Option<String>,
    /// Format of --export.
    #[arg(long, value_enum, default_value_t = Format::V9)]
    format: Format,
    /// IPFIX: nanosecond flow start/end instead of milliseconds.
    #[arg(long)]
    ts_nanos: bool,
    /// Write JSON lines to OUT (`-` for stdout). The default when no output is given.
    #[arg(long, value_name = "OUT")]
    json: Option<PathBuf>,
    /// Write CSV to OUT (`-` for stdout).
    #[arg(long, value_name = "OUT")]
    csv: Option<PathBuf>,
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
    /// Worker threads, each owning one shard of the flow table, 1 to 256 (1: all on one
    /// thread). The default is the number of cores.
    #[arg(long, value_name = "N", default_value_t = args::default_workers(),
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256),
          allow_negative_numbers = true)]
    workers: usize,
    /// Most flows held at once, at least 1 (split over the workers, at most 16777214 each);
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
    /// not depend on it; with several workers and a clock that runs backwards (concatenated
    /// captures), expiry follows each shard's own clock, so fix the seed for repeatable runs.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Also write every counter of the run as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats: Option<PathBuf>,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express, against what was given (`m`).
    pub fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.live.check()?;
        let reading = !self.inputs.files.is_empty();
        match (reading, self.live.interfaces.is_empty()) {
            (true, false) => return Err("-i and -r: meter live traffic or files, not both".into()),
            (false, true) => return Err("give input files with -r, or interfaces with -i".into()),
            _ => {}
        }
        if reading {
            let live_only = [args::LIVE_ONLY, &[("buffer_mib", "--buffer-mib")]].concat();
            if let Some(flag) = args::first_given(m, &live_only) {
                return Err(format!(
                    "{flag} is for live capture (-i), not for files (-r)"
                ));
            }
        }
        if self.export.is_none() {
            if let Some(flag) =
                args::first_given(m, &[("format", "--format"), ("ts_nanos", "--ts-nanos")])
            {
                return Err(format!(
                    "{flag} describes the NetFlow/IPFIX of --export; give --export"
                ));
            }
        }
        if self.ts_nanos && self.export.is_some() && self.format != Format::Ipfix {
            return Err("--ts-nanos is for --format ipfix".into());
        }
        let stdout = [
            ("--export", self.export.as_deref() == Some("-")),
            (
                "--json",
                self.json.as_deref().is_some_and(|p| p.as_os_str() == "-"),
            ),
            (
                "--csv",
                self.csv.as_deref().is_some_and(|p| p.as_os_str() == "-"),
            ),
        ];
        let on_stdout: Vec<&str> = stdout.iter().filter(|s| s.1).map(|s| s.0).collect();
        if on_stdout.len() > 1 {
            return Err(format!(
                "{} {} write to stdout (-): give all but one a file",
                on_stdout.join(" and "),
                if on_stdout.len() == 2 { "both" } else { "all" }
            ));
        }
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

fn seconds(name: &str, s: f64) -> Result<u64> {
    if !(s.is_finite() && s > 0.0 && s < 1e9) {
        bail!("--{name} must be a positive number of seconds, not {s}");
    }
    Ok((s * 1e9).round() as u64)
}

fn target_of(path: &std::path::Path) -> Target {
    if path.as_os_str() == "-" {
        Target::Stdout
    } else {
        Target::File(path.to_path_buf())
    }
}

/// Every sink of the run, fed the same records.
struct Sinks {
    sinks: Vec<(String, Box<dyn FlowSink>)>,
    /// The sink whose error stopped the export, to name it in the error message.
    failed: Option<usize>,
}

impl Sinks {
    fn new(sinks: Vec<(String, Box<dyn FlowSink>)>) -> Self {
        Sinks {
            sinks,
            failed: None,
        }
    }
}

impl RecordSink for Sinks {
    type Error = ExportError;

    #[inline]
    fn record(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        for (i, (_, s)) in self.sinks.iter_mut().enumerate() {
            s.export(rec).inspect_err(|_| self.failed = Some(i))?;
        }
        Ok(())
    }

    fn tick(&mut self, now_ns: u64) -> Result<(), ExportError> {
        for (i, (_, s)) in self.sinks.iter_mut().enumerate() {
            s.tick(now_ns).inspect_err(|_| self.failed = Some(i))?;
        }
        Ok(())
    }
}

struct Metering {
    meter: Meter<Sinks>,
    read: u64,
}

impl Visitor for Metering {
    #[inline]
    fn packet(&mut self, _interfaces: &[Interface], packet: &Packet<'_>) -> Result<()> {
        self.meter
            .packet(packet.link, packet.meta.ts_ns, packet.data);
        Ok(())
    }

    fn parallel_read(&self) -> bool {
        false
    }

    fn end_file(&mut self, reader: &FileReader, _damage: Option<&ReadError>) -> Result<()> {
        self.read += reader.packets();
        Ok(())
    }
}

/// Runs `weir flows`.
pub fn run(args: Args) -> Result<Status> {
    let cfg = Config {
        idle_timeout_ns: seconds("idle-timeout", args.idle_timeout)?,
        active_timeout_ns: seconds("active-timeout", args.active_timeout)?,
        fin_grace_ns: seconds("fin-grace", args.fin_grace)?,
        max_flows: args.max_flows.max(1),
        workers: args.workers.clamp(1, 256),
        tos_key: args.tos_key,
        biflow: args.biflow,
        min_tcp_bytes: args.min_tcp_bytes,
        seed: args.seed,
        ..Config::default()
    };
    let sinks = open_sinks(
        args.export.as_deref(),
        args.format,
        args.biflow,
        args.ts_nanos,
        args.json.as_deref(),
        args.csv.as_deref(),
    )?;
    // created now, so that a bad path fails before the run rather than after it
    let stats = args.stats.as_deref().map(StatsFile::create).transpose()?;
    if !args.live.interfaces.is_empty() {
        return run_live(&args, &cfg, sinks, stats);
    }
    let mut filters = Filters::new(&args.expr.words)?;
    // one large classic pcap file: read on every core
    let plan = match &args.inputs.files[..] {
        [single] => ordered::plan_ranges(single, RANGE_BYTES).map(|p| p.lookahead(LOOKAHEAD)),
        _ => None,
    };
    let cfg = Config {
        driven: plan.is_some(),
        ..cfg
    };
    let mut m = Metering {
        meter: Meter::new(&cfg, Sinks::new(sinks)),
        read: 0,
    };
    let status = match plan {
        Some(plan) => meter_in_parallel(plan, &mut filters, &mut m)?,
        None => for_each_packet(&args.inputs.files, &mut filters, &mut m)?,
    };
    let read = m.read;
    finish(read, m.meter, stats)?;
    Ok(status)
}

/// Opens every output asked for (JSON lines on stdout when none is).
fn open_sinks(
    export: Option<&str>,
    format: Format,
    biflow: bool,
    ts_nanos: bool,
    json: Option<&Path>,
    csv: Option<&Path>,
) -> Result<Vec<(String, Box<dyn FlowSink>)>> {
    let mut sinks = Vec::new();
    if let Some(t) = export {
        let target = Target::from_str(t).with_context(|| format!("--export {t}"))?;
        let spec = SinkSpec::Netflow {
            target,
            format: match format {
                Format::V5 => NetflowFormat::V5,
                Format::V9 => NetflowFormat::V9,
                Format::Ipfix => NetflowFormat::Ipfix,
            },
            biflow,
            ts_nanos,
        };
        let name = format!("{format:?} {t}").to_lowercase();
        sinks.push((name, open_sink(&spec).context("cannot open the exporter")?));
    }
    if let Some(p) = csv {
        let s = open_sink(&SinkSpec::Csv(target_of(p))).context("cannot open the CSV output")?;
        sinks.push((format!("csv {}", p.display()), s));
    }
    if json.is_some() || sinks.is_empty() {
        let p = json.map_or_else(|| PathBuf::from("-"), Path::to_path_buf);
        let s = open_sink(&SinkSpec::Json(target_of(&p))).context("cannot open the JSON output")?;
        sinks.push((format!("json {}", p.display()), s));
    }
    Ok(sinks)
}

/// The `--stats` file, created before the run and written at its end.
struct StatsFile {
    path: PathBuf,
    file: std::fs::File,
}

impl StatsFile {
    fn create(path: &Path) -> Result<StatsFile> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("--stats: cannot create {}", path.display()))?;
        Ok(StatsFile {
            path: path.to_path_buf(),
            file,
        })
    }

    fn write(mut self, json: &serde_json::Value) -> Result<()> {
        use std::io::Write as _;
        self.file
            .write_all(format!("{json:#}\n").as_bytes())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// Flushes the meter and every sink, prints the summary, writes `--stats`.
fn finish(read: u64, meter: Meter<Sinks>, stats: Option<StatsFile>) -> Result<()> {
    let done = meter.finish();
    let failed = done.sink.failed;
    let mut sinks = done.sink.sinks;
    let mut exports = Vec::new();
    let mut first_err = done.error.map(|e| {
        let name = failed.and_then(|i| sinks.get(i)).map(|(n, _)| n.as_str());
        anyhow::Error::from(e).context(format!("export to {}", name.unwrap_or("a sink")))
    });
    for (name, s) in &mut sinks {
        match s.finish() {
            Ok(st) => exports.push((name.clone(), st)),
            Err(e) => {
                if first_err.is_none() {
                    first_err = Some(anyhow::Error::from(e).context(format!("export to {name}")));
                }
            }
        }
    }
    summary(read, &done.stats, &exports);
    if let Some(file) = stats {
        file.write(&stats_json(read, &done.stats, &exports))?;
    }
    if let (None, Some((name, e))) = (&first_err, exports.iter().find(|(_, e)| e.dropped > 0)) {
        first_err = Some(anyhow::anyhow!(
            "export to {name}: {} records could not be sent (send errors; counted per collector)",
            e.dropped
        ));
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// `weir flows -i`: capture into the buffer, meter from it until SIGINT/SIGTERM or --duration.
fn run_live(
    args: &Args,
    cfg: &Config,
    sinks: Vec<(String, Box<dyn FlowSink>)>,
    stats: Option<StatsFile>,
) -> Result<Status> {
    let stop = Arc::new(AtomicBool::new(false));
    on_signal(stop.clone())?;
    let expr = args.expr.joined();
    let mut live = start_live(&args.live, &expr, 1, 0, "metering flows", 64)?;
    let links = live.interfaces().iter().map(|i| i.link).collect();
    let meter = LiveMeter::spawn(
        Meter::new(cfg, Sinks::new(sinks)),
        live.buffer().reader(0)?,
        links,
        stats,
    );
    let started = Instant::now();
    let deadline = args
        .live
        .duration
        .map(|s| started + Duration::from_secs_f64(s));
    while !stop.load(Ordering::Relaxed)
        && !live.failed()
        && deadline.is_none_or(|d| Instant::now() < d)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    live.stop()?;
    let t = live.counters().totals();
    let b = live.buffer().stats();
    meter.finish()?;
    eprintln!("{}", crate::output::live_summary(&t, &b));
    Ok(Status::Clean)
}

/// Flow options of `weir record --flows`.
#[derive(clap::Args, Debug, Clone)]
pub struct FlowArgs {
    /// With --flows: export NetFlow/IPFIX to TARGET (as `weir flows --export`).
    #[arg(long = "flow-export", value_name = "TARGET", num_args = 0..=1, default_missing_value = DEFAULT_COLLECTOR)]
    flow_export: Option<String>,
    /// With --flows: format of --flow-export.
    #[arg(long = "flow-format", value_enum, default_value_t = Format::Ipfix)]
    flow_format: Format,
    /// With --flows: write JSON lines to OUT (the default output is a file in the store:
    /// DIR/flows.json).
    #[arg(long = "flow-json", value_name = "OUT")]
    flow_json: Option<PathBuf>,
    /// With --flows: idle timeout in seconds.
    #[arg(long = "flow-idle-timeout", value_name = "S", default_value_t = 30.0,
          value_parser = args::seconds,
          allow_negative_numbers = true)]
    flow_idle_timeout: f64,
    /// With --flows: active timeout in seconds.
    #[arg(
        long = "flow-active-timeout",
        value_name = "S",
        default_value_t = 120.0,
        value_parser = args::seconds,
          allow_negative_numbers = true)]
    flow_active_timeout: f64,
}

impl FlowArgs {
    /// The ids and flags of these options, for "given without --flows" checks.
    pub const IDS: &'static [(&'static str, &'static str)] = &[
        ("flow_export", "--flow-export"),
        ("flow_format", "--flow-format"),
        ("flow_json", "--flow-json"),
        ("flow_idle_timeout", "--flow-idle-timeout"),
        ("flow_active_timeout", "--flow-active-timeout"),
    ];
}

/// A flow meter reading the packet buffer on its own thread.
pub struct LiveMeter {
    stop: Arc<AtomicBool>,
    packets: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<Result<()>>,
}

impl LiveMeter {
    /// Starts the meter of `weir record --flows` on `reader`; JSON goes to `default_json`
    /// unless the options name outputs.
    pub fn start(
        args: &FlowArgs,
        reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        default_json: &Path,
    ) -> Result<LiveMeter> {
        let cfg = Config {
            idle_timeout_ns: seconds("flow-idle-timeout", args.flow_idle_timeout)?,
            active_timeout_ns: seconds("flow-active-timeout", args.flow_active_timeout)?,
            ..Config::default()
        };
        let json = args.flow_json.clone().or_else(|| {
            args.flow_export
                .is_none()
                .then(|| default_json.to_path_buf())
        });
        let sinks = open_sinks(
            args.flow_export.as_deref(),
            args.flow_format,
            false,
            false,
            json.as_deref(),
            None,
        )?;
        Ok(LiveMeter::spawn(
            Meter::new(&cfg, Sinks::new(sinks)),
            reader,
            links,
            None,
        ))
    }

    fn spawn(
        mut meter: Meter<Sinks>,
        mut reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        stats: Option<StatsFile>,
    ) -> LiveMeter {
        let stop = Arc::new(AtomicBool::new(false));
        let packets = Arc::new(AtomicU64::new(0));
        let (st, pk) = (stop.clone(), packets.clone());
        let thread = std::thread::spawn(move || -> Result<()> {
            let mut n = 0u64;
            let mut last_tick = Instant::now();
            loop {
                let got = match reader.next_batch() {
                    Some(batch) => {
                        for r in batch.records() {
                            let link = links
                                .get(r.iface() as usize)
                                .copied()
                                .unwrap_or(LinkType::ETHERNET);
                            meter.packet(link, r.ts_ns(), r.data());
                            n += 1;
                        }
                        batch.release();
                        pk.store(n, Ordering::Relaxed);
                        true
                    }
                    None => false,
                };
                if last_tick.elapsed() >= Duration::from_secs(1) {
                    // Expire idle flows on the wall clock when traffic pauses.
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_nanos() as u64);
                    meter.tick(now);
                    last_tick = Instant::now();
                }
                if !got {
                    if st.load(Ordering::Acquire) && reader.next_batch().is_none() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            finish(n, meter, stats)
        });
        LiveMeter {
            stop,
            packets,
            thread,
        }
    }

    /// Live counters for a statistics file.
    pub fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "packets": self.packets.load(Ordering::Relaxed),
        })
    }

    /// Once capture has stopped: meters what is left, flushes every flow, prints the summary.
    pub fn finish(self) -> Result<()> {
        self.stop.store(true, Ordering::Release);
        self.thread.join().expect("flow meter panicked")
    }
}

/// Bytes per range of [`meter_in_parallel`]: 8 MiB ranges hold ≈ 27 k packets of the bench
/// trace, whose prepared packets (1.7 MB) stay in the reading core's 2 MiB L2 cache until they
/// are metered (`bench/flows_vs_peers.py`).
const RANGE_BYTES: u64 = 8 << 20;
/// Ranges read ahead of the slowest shard: what bounds the batches in flight.
const LOOKAHEAD: usize = 4;

/// Meters one large classic pcap file with every core ([`ordered::run_lanes`]): each thread
/// reads a range, filters and prepares its packets ([`Preparer`](weir_flows::Preparer),
/// stateless), routes them to the shards ([`Router`](weir_flows::Router)), then meters each
/// shard's batch itself when that shard is free and the batch is next in file order
/// ([`Lanes`](weir_flows::Lanes)), so the records are exactly those of the sequential path.
fn meter_in_parallel(
    plan: ordered::Plan,
    filters: &mut Filters,
    m: &mut Metering,
) -> Result<Status> {
    let filter = if filters.is_empty() {
        None
    } else {
        Some(filters.for_interface(&plan.interfaces[0])?.clone())
    };
    let preparer = m.meter.preparer().clone();
    // room for a range of 64-byte records in every shard's batch: no regrowing
    let template = m.meter.router().reserving(RANGE_BYTES as usize / 64);
    let lanes = m
        .meter
        .lanes()
        .context("the meter runs on this thread's lanes")?;
    let outcome = ordered::run_lanes(
        plan,
        filter.as_ref(),
        (4096, lanes.len()),
        (
            || template.empty_like(),
            |r: &mut weir_flows::Router, p: &Packet<'_>| {
                r.push(preparer.prepare(p.link, p.meta.ts_ns, p.data));
            },
        ),
        (
            |r: weir_flows::Router| r.into_routed().into_batches(),
            |s, batch| lanes.run(s, batch),
        ),
    )?;
    m.read += outcome.packets;
    if let Some(e) = &outcome.damage {
        warn_damage(e);
    }
    Ok(if outcome.damage.is_some() {
        Status::Damaged
    } else {
        Status::Clean
    })
}

fn summary(read: u64, s: &MeterStats, exports: &[(String, ExportStats)]) {
    let filtered = read.saturating_sub(s.packets);
    eprintln!(
        "weir flows: {read} packets read, {filtered} not matching the filter, {} metered; \
         dropped: {} non-IP, {} decode errors",
        s.metered, s.non_ip, s.decode_errors
    );
    eprintln!(
        "  fragments: {} attributed to their flow, {} unattributed (ports 0), {} forgotten early \
         (table full); {} packets without a transport header (ports 0)",
        s.frag_attributed, s.frag_unattributed, s.frag_table_full, s.no_transport
    );
    eprintln!(
        "  flows: {} created, peak {} active{}; ended: {} idle, {} active timeout, {} FIN/RST, \
         {} evicted (table full), {} at end of input",
        s.flows,
        s.peak_flows,
        if s.workers > 1 {
            format!(" (sum of {} shards' peaks)", s.workers)
        } else {
            String::new()
        },
        s.idle_ended,
        s.active_ended,
        s.tcp_ended,
        s.evicted,
        s.forced_ended
    );
    eprintln!(
        "  records: {} exported, {} below --min-tcp-bytes, {} lost to a failed exporter",
        s.records, s.below_min_bytes, s.sink_failed
    );
    for (name, e) in exports {
        eprintln!(
            "  {name}: {} records, {} datagrams, {} bytes, {} dropped, {} IPv6 flows not \
             exportable as v5",
            e.records, e.datagrams, e.bytes, e.dropped, e.dropped_v5_ipv6
        );
        if e.times_clamped > 0 {
            eprintln!(
                "weir: warning: {name}: {} records last longer than the 49.7 days NetFlow's \
                 32-bit uptime spans: their end time was clamped",
                e.times_clamped
            );
        }
    }
    eprintln!(
        "  memory: {:.1} bytes per flow ({} flows of capacity over {} shard(s))",
        s.bytes_per_flow, s.capacity, s.workers
    );
}

fn stats_json(read: u64, s: &MeterStats, exports: &[(String, ExportStats)]) -> serde_json::Value {
    serde_json::json!({
        "packets_read": read,
        "packets_filtered_out": read.saturating_sub(s.packets),
        "packets_to_meter": s.packets,
        "packets_metered": s.metered,
        "dropped_non_ip": s.non_ip,
        "dropped_decode_error": s.decode_errors,
        "frag_attributed": s.frag_attributed,
        "frag_unattributed": s.frag_unattributed,
        "frag_table_full": s.frag_table_full,
        "no_transport": s.no_transport,
        "flows": s.flows,
        "peak_flows": s.peak_flows,
        "ended_idle": s.idle_ended,
        "ended_active": s.active_ended,
        "ended_tcp": s.tcp_ended,
        "ended_forced": s.forced_ended,
        "evicted": s.evicted,
        "records": s.records,
        "records_below_min_tcp_bytes": s.below_min_bytes,
        "records_lost_exporter_failed": s.sink_failed,
        "bytes_per_flow": s.bytes_per_flow,
        "capacity": s.capacity,
        "workers": s.workers,
        "exports": exports.iter().map(|(n, e)| serde_json::json!({
            "sink": n,
            "records": e.records,
            "datagrams": e.datagrams,
            "bytes": e.bytes,
            "dropped": e.dropped,
            "dropped_v5_ipv6": e.dropped_v5_ipv6,
            "times_clamped": e.times_clamped,
        })).collect::<Vec<_>>(),
    })
}
