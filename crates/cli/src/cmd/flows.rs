//! `weir flows`: meter capture files into flows and export them as NetFlow v5 / v9 / IPFIX (UDP
//! or a file), JSON lines, CSV or Parquet files, with a summary of every counter on stderr.
//!
//! The options become a [`weir_sensor::flows::FlowsJobConfig`] and the job runs there (files:
//! the read loop into the meter, one large pcap file on every core; live: the capture pipeline
//! into the live meter; the rules of `--rules` in file order or in the capture threads, tags
//! exported with the flows: see [`weir_sensor::flows`]); this module prints what it says and its
//! report. Live, SIGINT/SIGTERM stop it, SIGHUP reloads `--rules`, `--control PATH` serves
//! `weir rules`. The outputs are `weir_export::Outputs`, shared with `weir record --flows`
//! ([`crate::flow_output`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use weir_export::{
    KafkaCompression, KafkaFormat, KafkaOutput, Outputs, ParquetOutput, DEFAULT_COLLECTOR,
    DEFAULT_FLOWS_TOPIC,
};
use weir_flows::Config;
use weir_sensor::flows::{FlowsJobConfig, FlowsSource};
use weir_sensor::Controls;

use crate::args::{self, FlowFormat, LiveArgs, RulesArgs};
use crate::flow_output::{ns, outputs};
use crate::input::{self, Terminal};
use crate::output::{self, Status};

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
    /// Write Parquet files under DIR: one per --parquet-interval of packet time, in
    /// DIR/date=YYYY-MM-DD/hour=HH/, each renamed from a hidden temporary name when complete.
    #[arg(long, value_name = "DIR")]
    parquet: Option<PathBuf>,
    /// Seconds of packet time each Parquet file covers, 1 to 86400.
    #[arg(long, value_name = "S", default_value_t = 300.0, value_parser = parquet_interval,
          allow_negative_numbers = true)]
    parquet_interval: f64,
    /// The sensor name of the Parquet files (their name prefix and `sensor` column); default:
    /// the host name.
    #[arg(long, value_name = "NAME")]
    parquet_sensor: Option<String>,
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
    kafka: KafkaArgs,
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    expr: args::Expr,
}

/// The Kafka output of `weir flows` (see `weir_export::KafkaOutput`).
#[derive(clap::Args, Debug)]
pub(crate) struct KafkaArgs {
    /// Send the flow records to Kafka: bootstrap brokers HOST:PORT[,HOST:PORT...]
    /// (idempotent producer; a broker must answer within 10 s).
    #[arg(long, value_name = "BROKERS")]
    kafka: Option<String>,
    /// Topic of the flow records.
    #[arg(long, value_name = "T", default_value = DEFAULT_FLOWS_TOPIC)]
    kafka_topic: String,
    /// Encoding: json (the records --json prints) or protobuf (goflow2's flow.proto,
    /// length-delimited; one message per direction).
    #[arg(long, value_enum, default_value_t = KafkaFormatArg::Json)]
    kafka_format: KafkaFormatArg,
    /// Batch compression.
    #[arg(long, value_enum, default_value_t = KafkaCompressionArg::Zstd)]
    kafka_compression: KafkaCompressionArg,
    /// The sensor's name in message keys (default: the host name).
    #[arg(long, value_name = "NAME")]
    kafka_sensor: Option<String>,
    /// Most messages waiting in the producer (1 to 10000000); beyond it (after waiting up to
    /// 1 s for room) messages are dropped and counted.
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u32).range(1..=10_000_000),
          allow_negative_numbers = true)]
    kafka_queue: u32,
    /// Milliseconds a batch may wait to fill (0 to 900000).
    #[arg(long, value_name = "MS", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(0..=900_000),
          allow_negative_numbers = true)]
    kafka_linger_ms: u32,
    /// Largest batch in bytes (1024 to 1073741824).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20,
          value_parser = clap::value_parser!(u32).range(1024..=(1 << 30)),
          allow_negative_numbers = true)]
    kafka_batch_bytes: u32,
    /// Seconds to try to deliver a message before it counts as failed (1 to 2000000); the end
    /// of the run waits at most this long for pending messages.
    #[arg(long, value_name = "S", default_value_t = 60.0, value_parser = kafka_seconds,
          allow_negative_numbers = true)]
    kafka_timeout: f64,
}

/// `--kafka-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum KafkaFormatArg {
    Json,
    Protobuf,
}

/// `--kafka-compression`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum KafkaCompressionArg {
    Zstd,
    Lz4,
    None,
}

/// `--kafka-timeout`: 1 s to 2·10⁶ s (librdkafka's message.timeout.ms is an int of ms).
fn kafka_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (1.0..=2e6).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds from 1 to 2000000"
        )),
    }
}

impl KafkaArgs {
    /// Usage: the other --kafka-* options without --kafka are refused, and the values checked.
    fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        if self.kafka.is_none() {
            const OPTS: &[(&str, &str)] = &[
                ("kafka_topic", "--kafka-topic"),
                ("kafka_format", "--kafka-format"),
                ("kafka_compression", "--kafka-compression"),
                ("kafka_sensor", "--kafka-sensor"),
                ("kafka_queue", "--kafka-queue"),
                ("kafka_linger_ms", "--kafka-linger-ms"),
                ("kafka_batch_bytes", "--kafka-batch-bytes"),
                ("kafka_timeout", "--kafka-timeout"),
            ];
            if let Some(flag) = args::first_given(m, OPTS) {
                return Err(format!("{flag} describes the Kafka output; give --kafka"));
            }
        }
        self.output().map(drop)
    }

    /// The output, when --kafka is given.
    fn output(&self) -> Result<Option<KafkaOutput>, String> {
        let Some(brokers) = &self.kafka else {
            return Ok(None);
        };
        let mut out = KafkaOutput::new(brokers, &self.kafka_topic);
        out.format = match self.kafka_format {
            KafkaFormatArg::Json => KafkaFormat::Json,
            KafkaFormatArg::Protobuf => KafkaFormat::Protobuf,
        };
        out.compression = match self.kafka_compression {
            KafkaCompressionArg::Zstd => KafkaCompression::Zstd,
            KafkaCompressionArg::Lz4 => KafkaCompression::Lz4,
            KafkaCompressionArg::None => KafkaCompression::None,
        };
        if let Some(s) = &self.kafka_sensor {
            out.sensor = s.clone();
        }
        out.queue_messages = self.kafka_queue;
        out.linger_ms = self.kafka_linger_ms;
        out.batch_bytes = self.kafka_batch_bytes;
        out.delivery_timeout_ms = (self.kafka_timeout * 1000.0).round() as u32;
        out.check().map_err(|e| format!("--kafka: {e}"))?;
        Ok(Some(out))
    }
}

impl Args {
    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        args::live_or_files(&self.live, &self.inputs, m, "meter")?;
        self.kafka.check(m)?;
        if self.export.is_none() {
            if let Some(flag) =
                args::first_given(m, &[("format", "--format"), ("ts_nanos", "--ts-nanos")])
            {
                return Err(format!(
                    "{flag} describes the NetFlow/IPFIX of --export; give --export"
                ));
            }
        }
        if self.parquet.is_none() {
            let flags = [
                ("parquet_interval", "--parquet-interval"),
                ("parquet_sensor", "--parquet-sensor"),
            ];
            if let Some(flag) = args::first_given(m, &flags) {
                return Err(format!(
                    "{flag} describes the files of --parquet; give --parquet"
                ));
            }
        }
        if self
            .parquet
            .as_deref()
            .is_some_and(|p| p.as_os_str() == "-")
        {
            return Err("--parquet takes a directory, not stdout (-)".into());
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

/// A Parquet interval: 1 to 86400 seconds.
fn parquet_interval(s: &str) -> Result<f64, String> {
    match args::seconds(s)? {
        v if (1.0..=86400.0).contains(&v) => Ok(v),
        v => Err(format!("{v} seconds is out of range: give 1 to 86400")),
    }
}

/// The host name (the Parquet files' default sensor name), `weir` when it cannot be read.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "weir".into())
}

/// Runs `weir flows` ([`weir_sensor::flows::run`]), printing what it says, then its report.
pub(crate) fn run(args: Args) -> Result<Status> {
    let live = !args.live.interfaces.is_empty();
    let source = if live {
        FlowsSource::Live(weir_capture::PipelineConfig {
            kernel_rules: !args.rules.no_kernel_rules,
            ..args.live.pipeline(&args.expr.joined(), 1, 0, 64)?
        })
    } else {
        FlowsSource::Files(args.inputs.files.clone())
    };
    let cfg = FlowsJobConfig {
        source,
        filter: args.expr.joined(),
        rules: args.rules.config(),
        meter: Config {
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
        },
        outputs: Outputs {
            parquet: args.parquet.clone().map(|dir| ParquetOutput {
                dir,
                interval_ns: ns(args.parquet_interval),
                sensor: args.parquet_sensor.clone().unwrap_or_else(host_name),
                // a live capture cannot be run again: fsync its files (see ParquetOutput::sync)
                sync: live,
            }),
            kafka: args.kafka.output().map_err(anyhow::Error::msg)?,
            ..outputs(
                args.export.as_deref(),
                args.format,
                (args.biflow, args.ts_nanos, args.rules.rules.is_some()),
                args.json.as_deref(),
                args.csv.as_deref(),
            )?
        },
        stats: args.stats.clone(),
        duration: args.live.duration.map(Duration::from_secs_f64),
    };
    let controls = if live {
        output::controls(cfg.rules.is_some())?
    } else {
        Controls::default()
    };
    let mut report = weir_sensor::flows::run(&cfg, &controls, &mut Terminal::default())?;
    // files: the rules' summary comes first (the read loop's end), live last (with capture's)
    if !live {
        if let Some(rules) = &report.rules {
            eprintln!("{rules}");
        }
    }
    eprint!("{}", report.report.summary());
    report.write_stats()?;
    if let Some(e) = report.error.take() {
        return Err(e.into());
    }
    if let Some(end) = &report.live {
        eprintln!("{}", output::live_summary(&end.totals, &end.buffer));
        if let Some(rules) = &report.rules {
            eprintln!("{rules}");
        }
    }
    Ok(input::status(report.damaged))
}
