//! The command-line options of the analyzers' Kafka output (`weir http|voip --kafka BROKERS
//! ...`, feature `clap`): one argument group the commands flatten, the same names, bounds and
//! defaults as `weir flows`'s `--kafka-*` options.

use crate::kafka::{KafkaCompression, KafkaOutput};
use crate::kafka_log::{KafkaLog, LogTopics};
use crate::ExportError;

/// `--kafka BROKERS` and its options (see [`crate::KafkaLog`]).
#[derive(clap::Args, Debug, Clone)]
pub struct KafkaLogArgs {
    /// Send the records to Kafka as JSON (the --json lines), one message each: bootstrap
    /// brokers HOST:PORT[,HOST:PORT...] (idempotent producer; a broker must answer within
    /// 10 s). Topics weir.http and weir.tls (weir http), weir.calls and weir.rtp (weir voip).
    #[arg(long, value_name = "BROKERS")]
    pub kafka: Option<String>,
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
    /// Largest batch in bytes (1024 to 1073741824).
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20,
          value_parser = clap::value_parser!(u32).range(1024..=(1 << 30)),
          allow_negative_numbers = true)]
    pub kafka_batch_bytes: u32,
    /// Seconds to try to deliver a message before it counts as failed (1 to 2000000); the end
    /// of the run waits at most this long for pending messages.
    #[arg(long, value_name = "S", default_value_t = 60.0, value_parser = kafka_seconds,
          allow_negative_numbers = true)]
    pub kafka_timeout: f64,
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

impl KafkaLogArgs {
    /// Usage checks against what was given (`m`): the other `--kafka-*` options without
    /// `--kafka` are refused, and the values checked.
    pub fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        if self.kafka.is_none() {
            for (id, flag) in [
                ("kafka_compression", "--kafka-compression"),
                ("kafka_sensor", "--kafka-sensor"),
                ("kafka_queue", "--kafka-queue"),
                ("kafka_linger_ms", "--kafka-linger-ms"),
                ("kafka_batch_bytes", "--kafka-batch-bytes"),
                ("kafka_timeout", "--kafka-timeout"),
            ] {
                if m.value_source(id) == Some(clap::parser::ValueSource::CommandLine) {
                    return Err(format!("{flag} describes the Kafka output; give --kafka"));
                }
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
        let mut out = KafkaOutput::new(brokers, "weir.logs");
        out.compression = self.kafka_compression;
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

    /// Opens the producer (the default topics), when `--kafka` is given.
    pub fn open(&self) -> Result<Option<KafkaLog>, ExportError> {
        match self.output().map_err(ExportError::Kafka)? {
            Some(out) => KafkaLog::open(&out, LogTopics::default()).map(Some),
            None => Ok(None),
        }
    }
}
