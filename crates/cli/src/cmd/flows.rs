//! `weir flows`: meter capture files into flows and export them as NetFlow v5 / v9 / IPFIX (UDP
//! or a file), JSON lines or CSV, with a summary of every counter on stderr.
//!
//! The packets come from the shared offline input loop ([`for_each_packet_with`]: BPF filter,
//! the rules of `--rules` in file order, damage handling) into a `weir_flows::FileMeter`; one large classic pcap file is metered on every
//! core instead (`weir_flows::meter_parallel`). Live (`-i IFACE`), the meter reads the capture
//! pipeline's packet buffer (`weir_flows::meter_live`). With `--rules FILE` (live) the capture
//! threads decide every packet after the filter, as in `weir record`: what the rules drop is
//! not metered, a sliced packet is metered from its headers (so with its IP length, the bytes
//! on the wire, as softflowd does under a snaplen), and a tagged packet's record carries its
//! tag to the meter (the pcapng comment `weir-tag=TAG`); each flow keeps the last tag seen and
//! is exported with it (JSON `tag`, a CSV `tag` column, IPFIX/v9 applicationName; v5 counts
//! what it cannot carry). Files (`-r`) take the same rules in the offline loop, on one thread.
//! Live, SIGHUP reloads the file; `--control PATH` serves `weir rules`.
//! The outputs are `weir_export::Outputs`,
//! the summary a `weir_export::RunReport`, both shared with `weir record --flows`
//! ([`crate::flow_output`]).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use weir_export::{Fanout, StatsFile, DEFAULT_COLLECTOR};
use weir_filter::FilterSet;
use weir_flows::{meter_live_polling, meter_parallel, Config, FileMeter, Meter, RANGE_BYTES};
use weir_pcap::{FileReader, Interface, Packet, ReadError};
use weir_rules::Tag;

use crate::args::{self, FlowFormat, LiveArgs, RulesArgs};
use crate::flow_output::{finish, finish_with, ns, outputs};
use crate::input::{for_each_packet_with, matches, parallel_plan, Visitor};
use crate::output::{self, on_signal, warn_damage, Status};

/// Arguments of `weir flows`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
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
    #[arg(long, value_enum, default_value_t = FlowFormat::V9)]
    format: FlowFormat,
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
        if self.ts_nanos && self.export.is_some() && self.format != FlowFormat::Ipfix {
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

impl Visitor for FileMeter<Fanout> {
    fn start_file(&mut self, _reader: &FileReader) -> Result<()> {
        self.start_input();
        Ok(())
    }

    #[inline]
    fn packet(&mut self, _interfaces: &[Interface], packet: &Packet<'_>) -> Result<()> {
        FileMeter::packet(self, packet.link, packet.meta.ts_ns, packet.data);
        Ok(())
    }

    /// Behind `--rules`: the packets the rules keep, with their tags.
    #[inline]
    fn ruled(&mut self, _: &[Interface], packet: &Packet<'_>, tag: Option<&Tag>) -> Result<()> {
        self.packet_tagged(packet.link, packet.meta.ts_ns, packet.data, tag);
        Ok(())
    }

    fn parallel_read(&self) -> bool {
        false
    }

    fn end_file(&mut self, reader: &FileReader, _damage: Option<&ReadError>) -> Result<()> {
        self.end_input(reader.packets());
        Ok(())
    }
}

/// Runs `weir flows`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let cfg = Config {
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
    };
    let sinks = outputs(
        args.export.as_deref(),
        args.format,
        (args.biflow, args.ts_nanos, args.rules.rules.is_some()),
        args.json.as_deref(),
        args.csv.as_deref(),
    )?
    .open()?;
    // created now, so that a bad path fails before the run rather than after it
    let stats = args
        .stats
        .as_deref()
        .map(|p| StatsFile::create(p).context("--stats"))
        .transpose()?;
    if !args.live.interfaces.is_empty() {
        return run_live(&args, &cfg, sinks, stats);
    }
    let mut filters = FilterSet::new(&args.expr.joined())?;
    // one large classic pcap file: read on every core (not with rules: they decide the packets
    // of a flow in file order, on the reading thread)
    if let ([single], None) = (&args.inputs.files[..], &args.rules.rules) {
        if let Some(plan) = parallel_plan(single, RANGE_BYTES) {
            let filter = if filters.is_empty() {
                None
            } else {
                Some(filters.for_interface(&plan.interfaces()[0])?.clone())
            };
            let run = meter_parallel(&cfg, sinks, plan, |p| matches(filter.as_ref(), p))?;
            if let Some(e) = &run.damage {
                warn_damage(e);
            }
            finish(run.metered, stats)?;
            return Ok(match run.damage {
                Some(_) => Status::Damaged,
                None => Status::Clean,
            });
        }
    }
    let mut meter = FileMeter::new(&cfg, sinks);
    let status = for_each_packet_with(&args.inputs.files, &mut filters, &args.rules, &mut meter)?;
    finish(meter.finish(), stats)?;
    Ok(status)
}

/// `weir flows -i`: the capture pipeline (with the rule engine in every capture thread when
/// `--rules` is given) feeding the live meter until a signal, `--duration` or a failed capture
/// thread ends it; then the meter's summary, capture's and the rules'.
fn run_live(args: &Args, cfg: &Config, sinks: Fanout, stats: Option<StatsFile>) -> Result<Status> {
    let stop = Arc::new(AtomicBool::new(false));
    on_signal(stop.clone())?;
    let rules_file = args.rules.rules.as_deref();
    let rule_set = rules_file.map(output::load_rules).transpose()?;
    let set_tags = rule_set.as_ref().is_some_and(output::LiveRules::set_tags);
    let engine = output::live_engine(&args.live, rule_set, rules_file)?;
    let _control = output::serve_control(&args.rules, engine.as_ref())?;
    let mut rules = match (&engine, rules_file) {
        (Some(e), Some(p)) => Some(output::LiveRules::new(
            p,
            e.clone(),
            true,
            set_tags,
            "`weir flows`",
        )?),
        _ => None,
    };
    // tags travel to the meter as the records' comments
    let pipeline_rules = engine.map(|engine| weir_capture::Rules {
        engine,
        store_tags: true,
    });
    let expr = args.expr.joined();
    let mut live = match pipeline_rules {
        // without rules, the pipeline it always was
        None => output::start_live(&args.live, &expr, 1, 0, "metering flows", 64)?,
        Some(r) => {
            let live = output::start_live_quietly_with_rules(
                &args.live,
                &expr,
                (1, 0, 64),
                Some(r),
                !args.rules.no_kernel_rules,
            )?;
            output::announce_live(&args.live, &live, "metering flows");
            live
        }
    };
    let duration = args.live.duration.map(Duration::from_secs_f64);
    let run = meter_live_polling(
        &mut live,
        0,
        Meter::new(cfg, sinks),
        &stop,
        duration,
        || {
            if let Some(r) = rules.as_mut() {
                r.poll();
            }
        },
    )?;
    let mut extra = serde_json::Map::new();
    if let Some(r) = &rules {
        extra.insert("rules".into(), r.json(&run.capture.feed));
    }
    finish_with(run.metered, stats, extra)?;
    eprintln!("{}", output::live_summary(&run.capture, &run.buffer));
    if let Some(r) = &rules {
        eprintln!(
            "  rules: {} dropped after the filter (not metered)\n{}",
            run.capture.feed.rules_dropped,
            r.summary(&run.capture.feed)
        );
    }
    Ok(Status::Clean)
}
