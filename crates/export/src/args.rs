//! The exporters' command-line options (feature `clap`), declared once: `weir flows`'s one
//! group of sink options ([`SinkArgs`]: NetFlow/IPFIX, JSON lines, CSV, Parquet, Kafka) and the
//! analyzers' Kafka output ([`KafkaLogArgs`], `weir http|voip --kafka BROKERS ...`). The two
//! Kafka groups share their producer options ([`KafkaProducerArgs`]: the same names, bounds and
//! defaults); each group checks what clap cannot express against the parsed matches ([`given`],
//! [`first_given`]) and turns into the library config it describes ([`SinkArgs::outputs`],
//! [`KafkaLogArgs::output`]).

use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::ArgMatches;

use crate::kafka::{KafkaCompression, KafkaFormat, KafkaOutput, DEFAULT_FLOWS_TOPIC};
use crate::kafka_log::{KafkaLog, LogTopics};
use crate::{ExportError, NetflowFormat, NetflowOutput, Outputs, ParquetOutput, DEFAULT_COLLECTOR};

/// Whether the option `id` was given on the command line (not its default).
pub fn given(m: &ArgMatches, id: &str) -> bool {
    m.value_source(id) == Some(ValueSource::CommandLine)
}

/// The first of `ids` given on the command line, as `--long` (or `-s`) for messages.
pub fn first_given(m: &ArgMatches, ids: &[(&str, &str)]) -> Option<String> {
    ids.iter()
        .find(|(id, _)| given(m, id))
        .map(|(_, flag)| (*flag).to_string())
}

/// An `--export` target that does not parse (the option and its value, then why).
#[derive(Debug, thiserror::Error)]
#[error("--export {target}")]
pub struct ExportTargetError {
    target: String,
    #[source]
    source: ExportError,
}

/// Why [`SinkArgs::outputs`] failed: the Kafka options, or an `--export` target.
#[derive(Debug, thiserror::Error)]
pub enum SinkArgsError {
    /// The Kafka output's values do not work together.
    #[error("{0}")]
    Kafka(String),
    /// An `--export` target that does not parse.
    #[error(transparent)]
    Target(#[from] ExportTargetError),
}

/// The flow outputs the options name (JSON lines on stdout when none is); `tags`: a run with
/// rules, whose records carry tags (a CSV `tag` column, applicationName in v9/IPFIX templates).
pub fn outputs(
    export: Option<&str>,
    format: NetflowFormat,
    (biflow, ts_nanos, tags): (bool, bool, bool),
    json: Option<&Path>,
    csv: Option<&Path>,
) -> Result<Outputs, ExportTargetError> {
    let netflow = export.map(|t| -> Result<NetflowOutput, ExportTargetError> {
        Ok(NetflowOutput {
            target: t.parse().map_err(|source| ExportTargetError {
                target: t.to_owned(),
                source,
            })?,
            label: t.to_owned(),
            format,
            biflow,
            ts_nanos,
        })
    });
    Ok(Outputs {
        netflow: netflow.transpose()?,
        csv: csv.map(Path::to_path_buf),
        json: json.map(Path::to_path_buf),
        tags,
        ..Outputs::default()
    })
}

/// Where `weir flows` sends its records: every sink option, checked together.
#[derive(clap::Args, Debug)]
pub struct SinkArgs {
    /// Export NetFlow/IPFIX to `udp://HOST:PORT[,udp://HOST:PORT...]`, `file:PATH` or `-`
    /// (stdout). Without a value: udp://127.0.0.1:2055.
    #[arg(long, value_name = "TARGET", num_args = 0..=1, default_missing_value = DEFAULT_COLLECTOR)]
    export: Option<String>,
    /// Format of --export.
    #[arg(long, value_enum, default_value_t = NetflowFormat::V9)]
    format: NetflowFormat,
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
    #[command(flatten)]
    kafka: KafkaArgs,
}

impl SinkArgs {
    /// Usage: the options of a sink not given are refused, and one output at most on stdout.
    pub fn check(&self, m: &ArgMatches) -> Result<(), String> {
        let dash = |p: &Option<PathBuf>| p.as_deref().is_some_and(|p| p.as_os_str() == "-");
        self.kafka.check(m)?;
        if self.export.is_none() {
            if let Some(flag) =
                first_given(m, &[("format", "--format"), ("ts_nanos", "--ts-nanos")])
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
            if let Some(flag) = first_given(m, &flags) {
                return Err(format!(
                    "{flag} describes the files of --parquet; give --parquet"
                ));
            }
        }
        if dash(&self.parquet) {
            return Err("--parquet takes a directory, not stdout (-)".into());
        }
        if self.ts_nanos && self.export.is_some() && self.format != NetflowFormat::Ipfix {
            return Err("--ts-nanos is for --format ipfix".into());
        }
        let stdout = [
            ("--export", self.export.as_deref() == Some("-")),
            ("--json", dash(&self.json)),
            ("--csv", dash(&self.csv)),
        ];
        let on_stdout: Vec<&str> = stdout.iter().filter(|s| s.1).map(|s| s.0).collect();
        if on_stdout.len() > 1 {
            return Err(format!(
                "{} {} write to stdout (-): give all but one a file",
                on_stdout.join(" and "),
                if on_stdout.len() == 2 { "both" } else { "all" }
            ));
        }
        Ok(())
    }

    /// The outputs (JSON lines on stdout when none is); `biflow`, `tags` (a run with rules) as
    /// in [`outputs`]; `live`: the Parquet files are synced (a capture cannot be run again).
    pub fn outputs(
        &self,
        (biflow, tags): (bool, bool),
        live: bool,
    ) -> Result<Outputs, SinkArgsError> {
        Ok(Outputs {
            parquet: self.parquet.clone().map(|dir| ParquetOutput {
                dir,
                interval_ns: weir_packet::value::ns(self.parquet_interval),
                sensor: self.parquet_sensor.clone().unwrap_or_else(crate::host_name),
                sync: live,
            }),
            kafka: self.kafka.output().map_err(SinkArgsError::Kafka)?,
            ..outputs(
                self.export.as_deref(),
                self.format,
                (biflow, self.ts_nanos, tags),
                self.json.as_deref(),
                self.csv.as_deref(),
            )?
        })
    }
}

/// A Parquet interval: 1 to 86400 seconds.
fn parquet_interval(s: &str) -> Result<f64, String> {
    match weir_packet::value::seconds(s)? {
        v if (1.0..=86400.0).contains(&v) => Ok(v),
        v => Err(format!("{v} seconds is out of range: give 1 to 86400")),
    }
}

/// The Kafka output of `weir flows` (see [`KafkaOutput`]).
#[derive(clap::Args, Debug)]
pub struct KafkaArgs {
    /// Send the flow records to Kafka: bootstrap brokers HOST:PORT[,HOST:PORT...]
    /// (idempotent producer; a broker must answer within 10 s).
    #[arg(long, value_name = "BROKERS")]
    kafka: Option<String>,
    /// Topic of the flow records.
    #[arg(long, value_name = "T", default_value = DEFAULT_FLOWS_TOPIC)]
    kafka_topic: String,
    /// Encoding: json (the records --json prints) or protobuf (goflow2's flow.proto,
    /// length-delimited; one FlowMessage per direction).
    #[arg(long, value_enum, default_value_t = KafkaFormat::Json)]
    kafka_format: KafkaFormat,
    #[command(flatten)]
    producer: KafkaProducerArgs,
    /// Records per message (1 to 100000; a message also ends at 900000 bytes): JSON records
    /// newline-separated (ClickHouse's Kafka engine reads them with JSONEachRow), protobuf
    /// FlowMessages length-delimited one after the other (its Protobuf format). Above 1 the
    /// key is the sensor name (one sensor's records on one partition, in order); 1: one record
    /// (protobuf: one FlowMessage, goflow2's way) per message under its flow's key. Default:
    /// 100 (json and protobuf).
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::MAX_RECORDS_PER_MESSAGE)),
          allow_negative_numbers = true)]
    kafka_records_per_message: Option<u32>,
}

impl KafkaArgs {
    /// Usage: the other --kafka-* options without --kafka are refused, and the values checked.
    fn check(&self, m: &ArgMatches) -> Result<(), String> {
        if self.kafka.is_none() {
            const OPTS: &[(&str, &str)] = &[
                ("kafka_topic", "--kafka-topic"),
                ("kafka_format", "--kafka-format"),
                ("kafka_records_per_message", "--kafka-records-per-message"),
            ];
            if let Some(flag) = first_given(m, OPTS).or_else(|| first_given(m, PRODUCER_OPTS)) {
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
        out.format = self.kafka_format;
        out.records_per_message = self
            .kafka_records_per_message
            .unwrap_or_else(|| self.kafka_format.default_records_per_message());
        self.producer.output(out).map(Some)
    }
}

/// The analyzers' Kafka output: `--kafka BROKERS` and its options (see [`KafkaLog`]).
#[derive(clap::Args, Debug, Clone)]
pub struct KafkaLogArgs {
    /// Send the records to Kafka as JSON (the --json lines), one message each: bootstrap
    /// brokers HOST:PORT[,HOST:PORT...] (idempotent producer; a broker must answer within
    /// 10 s). Topics weir.http and weir.tls (weir http), weir.calls and weir.rtp (weir voip).
    #[arg(long, value_name = "BROKERS")]
    pub kafka: Option<String>,
    /// The producer's options.
    #[command(flatten)]
    pub producer: KafkaProducerArgs,
}

impl KafkaLogArgs {
    /// Usage checks against what was given (`m`): the other `--kafka-*` options without
    /// `--kafka` are refused, and the values checked.
    pub fn check(&self, m: &ArgMatches) -> Result<(), String> {
        if self.kafka.is_none() {
            if let Some(flag) = first_given(m, PRODUCER_OPTS) {
                return Err(format!("{flag} describes the Kafka output; give --kafka"));
            }
        }
        self.output().map(drop)
    }

    /// The output the options describe, when `--kafka` is given (topic and format unused: see
    /// [`KafkaLog::open`]).
    pub fn output(&self) -> Result<Option<KafkaOutput>, String> {
        let Some(brokers) = &self.kafka else {
            return Ok(None);
        };
        self.producer
            .output(KafkaOutput::new(brokers, "weir.logs"))
            .map(Some)
    }

    /// The path of an analyzer's main log: `out` (`-w`), else stdout (`-`), or nowhere
    /// (`/dev/null`) when the records go to Kafka.
    pub fn log_path(&self, out: Option<&Path>) -> PathBuf {
        match out {
            Some(p) => p.to_path_buf(),
            None if self.kafka.is_some() => PathBuf::from("/dev/null"),
            None => PathBuf::from("-"),
        }
    }

    /// Opens the producer (the default topics), when `--kafka` is given.
    pub fn open(&self) -> Result<Option<KafkaLog>, ExportError> {
        match self.output().map_err(ExportError::Kafka)? {
            Some(out) => KafkaLog::open(&out, LogTopics::default()).map(Some),
            None => Ok(None),
        }
    }
}

/// The ids and flags of [`KafkaProducerArgs`], for "given without --kafka" checks.
const PRODUCER_OPTS: &[(&str, &str)] = &[
    ("kafka_compression", "--kafka-compression"),
    ("kafka_sensor", "--kafka-sensor"),
    ("kafka_queue", "--kafka-queue"),
    ("kafka_linger_ms", "--kafka-linger-ms"),
    ("kafka_batch_bytes", "--kafka-batch-bytes"),
    ("kafka_timeout", "--kafka-timeout"),
];

/// The Kafka producer's options, shared by the flows' and the analyzers' Kafka outputs.
#[derive(clap::Args, Debug, Clone)]
pub struct KafkaProducerArgs {
    /// Batch compression.
    #[arg(long, value_enum, default_value_t = KafkaCompression::Lz4)]
    pub kafka_compression: KafkaCompression,
    /// The sensor's name in message keys (default: the host name).
    #[arg(long, value_name = "NAME")]
    pub kafka_sensor: Option<String>,
    /// Most messages waiting in the producer (1 to 10000000); beyond it (after waiting up to
    /// 1 s for room) messages are dropped and counted.
    #[arg(long, value_name = "N", default_value_t = 100_000,
          value_parser = clap::value_parser!(u32).range(1..=10_000_000),
          allow_negative_numbers = true)]
    pub kafka_queue: u32,
    /// Milliseconds a batch may wait to fill (0 to 900000).
    #[arg(long, value_name = "MS", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(0..=900_000),
          allow_negative_numbers = true)]
    pub kafka_linger_ms: u32,
    /// Largest batch before compression in bytes (1024 to 1073741824; default 4194304 for
    /// compressed JSON, 1048576 otherwise). The broker's message.max.bytes (1 MB by default)
    /// bounds a compressed batch.
    #[arg(long, value_name = "BYTES",
          value_parser = clap::value_parser!(u32).range(1024..=(1 << 30)),
          allow_negative_numbers = true)]
    pub kafka_batch_bytes: Option<u32>,
    /// Seconds to try to deliver a message before it counts as failed (1 to 2000000); the end
    /// of the run waits at most this long for pending messages.
    #[arg(long, value_name = "S", default_value_t = 60.0, value_parser = kafka_seconds,
          allow_negative_numbers = true)]
    pub kafka_timeout: f64,
}

impl KafkaProducerArgs {
    /// `out` with these options, checked (`--kafka: why` when they do not work).
    fn output(&self, mut out: KafkaOutput) -> Result<KafkaOutput, String> {
        out.compression = self.kafka_compression;
        if let Some(s) = &self.kafka_sensor {
            out.sensor = s.clone();
        }
        out.queue_messages = self.kafka_queue;
        out.linger_ms = self.kafka_linger_ms;
        out.batch_bytes = self.kafka_batch_bytes;
        out.delivery_timeout_ms = (self.kafka_timeout * 1000.0).round() as u32;
        out.check().map_err(|e| format!("--kafka: {e}"))?;
        Ok(out)
    }
}

/// `--kafka-timeout`: 1 s to 2·10⁶ s (librdkafka's message.timeout.ms is an int of ms); the
/// value parser of the flows' and the analyzers' Kafka options alike.
pub fn kafka_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (1.0..=2e6).contains(&v) => Ok(v),
        _ => Err(format!(
            "{s:?} is not a number of seconds from 1 to 2000000"
        )),
    }
}
