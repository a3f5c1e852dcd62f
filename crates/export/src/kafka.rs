//! The Kafka sink: flow records to a Kafka topic through librdkafka (the `rdkafka` crate, linked
//! to the system's librdkafka), up to [`KafkaOutput::records_per_message`] records per message
//! ([`DEFAULT_RECORDS_PER_MESSAGE`] by default, JSON and protobuf alike), as JSON or as
//! goflow2's protobuf.
//!
//! * **Producer**: idempotent (`enable.idempotence`: acks from every in-sync replica, retries
//!   without duplicates, order kept per partition), compression `lz4` (default: the least CPU), `zstd` or none,
//!   batching by `linger.ms` (default 50) and `batch.size` ([`KafkaOutput::batch`]), partitioner
//!   `murmur2_random` (Java's: Kafka Streams and Java consumers agree on a key's partition).
//! * **Key**: `SENSOR/VLAN/PROTO/ADDR/PORT/ADDR/PORT` with the two endpoints in a canonical
//!   order (the smaller address/port pair first), so every record of one flow of one sensor
//!   (both directions of a one-way export, every active-timeout part) lands on one partition, in
//!   the order weir exported them. The sensor is the host name unless given.
//! * **Several records per message** ([`KafkaOutput::records_per_message`] > 1; the default
//!   is [`DEFAULT_RECORDS_PER_MESSAGE`] for both encodings): JSON records are
//!   joined by newlines (no newline after the last), what ClickHouse's Kafka engine reads with
//!   `JSONEachRow` (a row-based format: every row of a message is read; ClickHouse itself
//!   writes several rows per message with `kafka_max_rows_per_message`) and what Vector or
//!   Logstash split into lines; protobuf records are
//!   length-delimited `FlowMessage`s one after the other (each preceded by its varint length),
//!   what ClickHouse's Kafka engine reads with its `Protobuf` format (its length-delimited
//!   one) and protobuf's own `parseDelimitedFrom` / Go's `protodelim` read in a loop. A message
//!   holds up to that many flow records (a `--biflow` record's two `FlowMessage`s stay in one
//!   message) or [`MAX_PACKED_BYTES`], whichever comes first, and waits at most `linger_ms`
//!   (at least 100 ms) of wall time for them. Its key is the sensor name alone: every record
//!   of one sensor goes to one partition, in the order weir exported them (a stronger order
//!   than the per-flow keys', spread over partitions by sensor only).
//! * **Payload**: [`KafkaFormat::Json`] is exactly the line `weir flows --json` prints for the
//!   record (without its newline); [`KafkaFormat::Protobuf`] is goflow2's `FlowMessage`
//!   (module `flowpb`, schema `proto/flow.proto`) preceded by its varint length, one per
//!   direction with packets. With one record per message that is goflow2's own framing (its
//!   `MarshalBinary` writes one `protodelim` message per Kafka message).
//! * **Bounded queue**: at most [`KafkaOutput::queue_messages`] messages wait in librdkafka.
//!   When it is full the sink waits (serving delivery reports) up to 1 s for room; if none comes
//!   the message is dropped and counted as overflow, and so is every next one until the queue
//!   takes a message again (so a broker that is away costs one wait, not one per record).
//! * **Accounting**: every message is delivered (acknowledged), failed (librdkafka gave up after
//!   [`KafkaOutput::delivery_timeout_ms`], or the broker refused it), lost to overflow, or still
//!   pending when the run ended (purged after that same timeout, counted as failed):
//!   `messages = delivered + failed + overflow`, reported in [`KafkaStats`]. librdkafka reports
//!   failures only (`delivery.report.only.error`: a report per delivered message would cost its
//!   broker thread an event and this one a poll), so delivered is what is left: while
//!   the run goes, the messages neither failed, overflowed nor still queued. Any loss makes
//!   the run's result an error ([`RunError::Dropped`](crate::RunError::Dropped)). Each message
//!   carries the records it holds (the delivery opaque: the first one's number and how many;
//!   a protobuf record sent one `FlowMessage` a message is in each of its messages), so the
//!   records in failed or overflowed messages are counted too, each record once
//!   ([`KafkaStats::records_lost`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message as _;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer as _, ProducerContext};
use rdkafka::ClientContext;
use weir_flows::FlowRecord;

use crate::sink::{ExportStats, FlowSink};
use crate::text::{push_line, TextFormat};
use crate::ExportError;

/// The default topic of flow records.
pub const DEFAULT_FLOWS_TOPIC: &str = "weir.flows";

/// The largest payload of a message of several JSON records, bytes: below librdkafka's and
/// the broker's default `message.max.bytes` (1 000 000) with room for the key and headers.
pub const MAX_PACKED_BYTES: usize = 900_000;

/// The most records per message ([`KafkaOutput::records_per_message`]).
pub const MAX_RECORDS_PER_MESSAGE: u32 = 100_000;

/// The default records per message, JSON and protobuf: 100 flow records (protobuf: 100 to
/// 200 `FlowMessage`s, about 10 to 20 kB; JSON about 60 kB), enough to take the per-message
/// cost (≈ 2.5 µs in weir and librdkafka, and the broker's) off the record path, small
/// enough for a consumer to read a message at a time.
pub const DEFAULT_RECORDS_PER_MESSAGE: u32 = 100;

/// How records are encoded (`weir flows --kafka-format`, feature `clap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum KafkaFormat {
    /// One JSON object, as `weir flows --json` prints it (IPFIX names).
    Json,
    /// goflow2's `FlowMessage`, length-delimited (varint length first).
    Protobuf,
}

impl KafkaFormat {
    /// Records per message when none is given: [`DEFAULT_RECORDS_PER_MESSAGE`] for both
    /// encodings (under the sensor's key; 1 must be asked for).
    pub fn default_records_per_message(self) -> u32 {
        match self {
            KafkaFormat::Json | KafkaFormat::Protobuf => DEFAULT_RECORDS_PER_MESSAGE,
        }
    }
}

/// Compression of the producer's batches (`weir flows --kafka-compression`, feature `clap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum KafkaCompression {
    /// zstd.
    Zstd,
    /// lz4.
    Lz4,
    /// None.
    None,
}

impl KafkaCompression {
    fn name(self) -> &'static str {
        match self {
            KafkaCompression::Zstd => "zstd",
            KafkaCompression::Lz4 => "lz4",
            KafkaCompression::None => "none",
        }
    }
}

/// A Kafka output (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaOutput {
    /// Bootstrap brokers, `HOST:PORT[,HOST:PORT...]`.
    pub brokers: String,
    /// The topic of flow records.
    pub topic: String,
    /// The encoding.
    pub format: KafkaFormat,
    /// Batch compression.
    pub compression: KafkaCompression,
    /// The sensor's name, first part of every key.
    pub sensor: String,
    /// The most messages waiting in the producer's queue (1 to 10 000 000).
    pub queue_messages: u32,
    /// How long a batch may wait to fill, ms (0 to 900 000).
    pub linger_ms: u32,
    /// The largest batch before compression, bytes (1024 to 2³⁰); `None`: [`KafkaOutput::batch`]
    /// chooses. The broker's `message.max.bytes` (1 MB by default) bounds a batch after
    /// compression.
    pub batch_bytes: Option<u32>,
    /// How long librdkafka tries to deliver a message before it counts as failed, ms (at least
    /// 1000). The end of the run waits at most this long for pending messages.
    pub delivery_timeout_ms: u32,
    /// How long opening waits for a broker to answer, ms.
    pub connect_timeout_ms: u32,
    /// Records per message (1 to [`MAX_RECORDS_PER_MESSAGE`]; see the module documentation;
    /// [`KafkaFormat::default_records_per_message`] when not given). 1: one record per message
    /// (one per direction in protobuf) under the flow's key.
    pub records_per_message: u32,
}

impl KafkaOutput {
    /// An output to `topic` on `brokers` with the defaults: JSON, lz4, the host name as
    /// sensor, a queue of 100 000 messages, linger 50 ms, batches of [`KafkaOutput::batch`],
    /// 60 s delivery timeout, 10 s to connect, [`DEFAULT_RECORDS_PER_MESSAGE`] records per
    /// message.
    pub fn new(brokers: &str, topic: &str) -> KafkaOutput {
        KafkaOutput {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            format: KafkaFormat::Json,
            compression: KafkaCompression::Lz4,
            sensor: host_name(),
            queue_messages: 100_000,
            linger_ms: 50,
            batch_bytes: None,
            delivery_timeout_ms: 60_000,
            connect_timeout_ms: 10_000,
            records_per_message: DEFAULT_RECORDS_PER_MESSAGE,
        }
    }

    /// The output's name in messages and counters: `kafka json weir.flows@127.0.0.1:9092`.
    pub fn name(&self) -> String {
        let f = match self.format {
            KafkaFormat::Json => "json",
            KafkaFormat::Protobuf => "protobuf",
        };
        format!("kafka {f} {}@{}", self.topic, self.brokers)
    }

    /// The largest batch before compression, bytes: [`KafkaOutput::batch_bytes`] when given,
    /// else 4 MiB for compressed JSON (lz4 and zstd shrink weir's JSON records 8 to 16 times,
    /// so a batch stays well under the broker's default `message.max.bytes` of 1 MB; with the
    /// idempotent producer's 5 requests in flight, librdkafka's broker thread polls without
    /// sleeping while a full batch waits for one of them, and fewer, larger requests leave it
    /// less to wait for) and 1 MiB otherwise (protobuf compresses about 2.6 times, uncompressed
    /// batches go as they are).
    pub fn batch(&self) -> u32 {
        match self.batch_bytes {
            Some(b) => b,
            None if self.format == KafkaFormat::Json
                && self.compression != KafkaCompression::None =>
            {
                4 << 20
            }
            None => 1 << 20,
        }
    }

    /// Checks the values (topic name, brokers, bounds) without connecting.
    pub fn check(&self) -> Result<(), ExportError> {
        check_topic(&self.topic)?;
        if self.brokers.is_empty() || !self.brokers.split(',').all(broker_ok) {
            return Err(ExportError::Kafka(format!(
                "bad broker list {:?}: give HOST:PORT[,HOST:PORT...] (ports 1 to 65535)",
                self.brokers
            )));
        }
        if self.sensor.contains('\0') {
            return Err(ExportError::Kafka(
                "the sensor name holds a NUL byte".into(),
            ));
        }
        let bounds = [
            ("queue", u64::from(self.queue_messages), 1, 10_000_000),
            ("linger", self.linger_ms.into(), 0, 900_000),
            ("batch size", self.batch().into(), 1024, 1 << 30),
            (
                "delivery timeout",
                self.delivery_timeout_ms.into(),
                1000,
                1 << 31,
            ),
            (
                "records per message",
                self.records_per_message.into(),
                1,
                MAX_RECORDS_PER_MESSAGE.into(),
            ),
        ];
        for (what, v, lo, hi) in bounds {
            if !(lo..=hi).contains(&v) {
                return Err(ExportError::Kafka(format!(
                    "{what} {v} is out of range ({lo} to {hi})"
                )));
            }
        }
        Ok(())
    }
}

/// A Kafka topic name: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn check_topic(topic: &str) -> Result<(), ExportError> {
    let ok = !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(ExportError::Kafka(format!(
            "bad topic name {topic:?}: 1 to 249 of a-z A-Z 0-9 . _ -"
        )))
    }
}

/// This machine's host name (`weir` when it cannot be read): the default sensor name of the
/// Kafka keys and the Parquet files.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "weir".to_owned())
}

/// What a Kafka output counted (messages: Kafka messages, each of up to
/// [`KafkaOutput::records_per_message`] records; with one record per message, one per JSON
/// record and one per direction in protobuf).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KafkaStats {
    /// Messages made from the records.
    pub messages: u64,
    /// Messages the broker acknowledged.
    pub delivered: u64,
    /// Messages that failed: not delivered within the delivery timeout, refused by the broker,
    /// or still pending at the end of the run.
    pub failed: u64,
    /// Messages dropped because the producer's queue was full.
    pub overflow: u64,
    /// The queue's bound, messages.
    pub queue: u32,
    /// Records in the failed and overflowed messages, each counted once (equal to `failed +
    /// overflow` with one record per message, except protobuf's records of two directions:
    /// two messages, one record).
    pub records_lost: u64,
    /// Messages handed to librdkafka and neither acknowledged nor failed yet (its queue and
    /// the requests in flight), as of these counts; 0 once the run has finished.
    pub unacknowledged: u64,
    /// The most records a `kill -9` at the time of these counts would lose: the records of the
    /// unacknowledged messages (each counted with the most records a message holds, and never
    /// more than the records handed to librdkafka and not failed) and those packed into a
    /// message not yet handed to librdkafka. 0 once the run has finished.
    pub records_unacknowledged: u64,
    /// The last delivery error, if any.
    last_error: Option<RDKafkaErrorCode>,
}

impl KafkaStats {
    /// The last delivery error, in words.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.map(|e| e.to_string())
    }
}

/// The records a message holds: `count` from the output's `first`th (records numbered from 0
/// in the order they were given). A protobuf record sent one `FlowMessage` a message
/// (`--kafka-records-per-message 1`) is in each of its messages: its second message holds it
/// again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    first: u64,
    count: u32,
}

/// Bits of a delivery opaque that hold [`Held::count`] (at least
/// [`MAX_RECORDS_PER_MESSAGE`]); the others hold the low bits of [`Held::first`].
const COUNT_BITS: u32 = 20;

impl Held {
    /// As a delivery opaque: `first` (its low bits: only compared with a neighbour's) above
    /// `count`.
    fn opaque(self) -> usize {
        ((self.first as usize) << COUNT_BITS) | self.count as usize
    }

    /// From a delivery opaque (`first` to the bits the opaque kept).
    fn from_opaque(o: usize) -> Held {
        Held {
            first: (o >> COUNT_BITS) as u64,
            count: (o & ((1 << COUNT_BITS) - 1)) as u32,
        }
    }

    /// Its records not yet counted when `last` (the same opaque bits) was the last record
    /// counted before it: all of them, or one fewer when its first is that one again.
    fn new_since(self, last: Option<u64>) -> u64 {
        let mask = u64::MAX >> (u64::BITS - (usize::BITS - COUNT_BITS));
        let again = last.is_some_and(|l| l & mask == self.first & mask);
        u64::from(self.count) - u64::from(again && self.count > 0)
    }

    /// The number of its last record (`first` when it holds none).
    fn last(self) -> u64 {
        self.first + u64::from(self.count.max(1)) - 1
    }
}

/// Delivery reports of failed messages, counted (librdkafka calls it from `poll`, on the sink's
/// thread; the producer asks for reports of failures only, see `delivery.report.only.error`).
#[derive(Default)]
struct Reports {
    failed: AtomicU64,
    /// Records in the failed messages, each once (see [`Held`]).
    records_failed: AtomicU64,
    last: Mutex<LastFailure>,
}

/// The last delivery error and, per partition, the last record counted failed: a record's two
/// messages (protobuf, one `FlowMessage` a message) go to one partition one after the other,
/// and their failures are reported in that order, so the second one is not counted again.
#[derive(Default)]
struct LastFailure {
    error: Option<RDKafkaErrorCode>,
    record: HashMap<i32, u64>,
}

impl ClientContext for Reports {
    /// librdkafka's log lines (broker connections coming and going) are not printed: what
    /// counts is in the delivery reports.
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, _: &str, _: &str) {}

    fn error(&self, _: KafkaError, _: &str) {}
}

impl ProducerContext for Reports {
    type DeliveryOpaque = usize;

    fn delivery(&self, r: &DeliveryResult<'_>, opaque: usize) {
        use rdkafka::message::Message as _;
        let Err((e, msg)) = r else { return };
        self.failed.fetch_add(1, Ordering::Relaxed);
        let held = Held::from_opaque(opaque);
        // a poisoned lock (a panic mid-count) still holds counts that are right
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let new = held.new_since(last.record.get(&msg.partition()).copied());
        last.record.insert(msg.partition(), held.last());
        self.records_failed.fetch_add(new, Ordering::Relaxed);
        if let Some(code) = e.rdkafka_error_code() {
            last.error = Some(code);
        }
    }
}

/// A producer with weir's settings, its bounded queue and its counters: the part of every
/// Kafka output (flow records here, the analyzers' logs in [`crate::KafkaLog`]) that sends
/// one message under a key to a topic.
pub(crate) struct Producer {
    producer: Option<BaseProducer<Reports>>,
    reports: Arc<Reports>,
    out: KafkaOutput,
    kafka: KafkaStats,
    /// Payload bytes queued.
    pub(crate) bytes: u64,
    /// The queue was full and stayed full for the whole wait: drop without waiting until it
    /// takes a message again.
    overflowing: bool,
    /// Records given so far (the next one's number, see [`Held`]).
    next_record: u64,
    /// Records handed to librdkafka (in a message it took), each once, and the last of them.
    records_handed: u64,
    last_handed: Option<u64>,
    /// The last record counted lost before librdkafka took it (overflow, refused).
    last_lost: Option<u64>,
}

/// How long a full queue is waited for before messages overflow.
const QUEUE_WAIT: Duration = Duration::from_secs(1);

impl Producer {
    /// Creates the producer and checks that a broker answers (within
    /// [`KafkaOutput::connect_timeout_ms`]).
    pub(crate) fn open(out: &KafkaOutput) -> Result<Producer, ExportError> {
        let p = Producer::create(out)?;
        if let Some(producer) = &p.producer {
            producer
                .client()
                .fetch_metadata(None, Duration::from_millis(out.connect_timeout_ms.into()))
                .map_err(|e| {
                    ExportError::Kafka(format!(
                        "no Kafka broker answered at {} within {} s: {e}",
                        out.brokers,
                        out.connect_timeout_ms / 1000
                    ))
                })?;
        }
        Ok(p)
    }

    /// Creates the producer with weir's settings, without waiting for a broker.
    fn create(out: &KafkaOutput) -> Result<Producer, ExportError> {
        out.check()?;
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", &out.brokers)
            .set("enable.idempotence", "true")
            .set("compression.type", out.compression.name())
            .set("linger.ms", out.linger_ms.to_string())
            .set("batch.size", out.batch().to_string())
            // a batch may be as large as batch.size (librdkafka's default message.max.bytes,
            // 1 000 000, would cut it there; its most is 10⁹)
            .set(
                "message.max.bytes",
                max_request_bytes(out.batch()).to_string(),
            )
            // batches bounded by bytes, not by librdkafka's 10 000 messages
            .set("batch.num.messages", "1000000")
            // zstd's fastest level (librdkafka's default is 3), lz4's fast mode: the batches
            // are compressed on weir's CPU, and level 1 costs about half for a few % more bytes
            .set("compression.level", "1")
            .set(
                "queue.buffering.max.messages",
                out.queue_messages.to_string(),
            )
            .set("queue.buffering.max.kbytes", "1048576")
            .set("message.timeout.ms", out.delivery_timeout_ms.to_string())
            // a topic not known yet (auto-created on first use, or the broker away when the
            // first record comes) is waited for as long as a message may wait, not 30 s
            .set(
                "topic.metadata.propagation.max.ms",
                out.delivery_timeout_ms.to_string(),
            )
            // only failures come back as delivery reports: a report per delivered message
            // costs librdkafka's broker thread an op and this thread a poll of it; every
            // message not reported failed (nor purged, nor still queued) was delivered
            .set("delivery.report.only.error", "true")
            .set("partitioner", "murmur2_random")
            .set("client.id", format!("weir-{}", out.sensor));
        let producer: BaseProducer<Reports> = cfg
            .create_with_context(Reports::default())
            .map_err(|e| ExportError::Kafka(format!("cannot create the producer: {e}")))?;
        let reports = producer.context().clone();
        Ok(Producer {
            producer: Some(producer),
            reports,
            out: out.clone(),
            kafka: KafkaStats {
                queue: out.queue_messages,
                ..KafkaStats::default()
            },
            bytes: 0,
            overflowing: false,
            next_record: 0,
            records_handed: 0,
            last_handed: None,
            last_lost: None,
        })
    }

    /// The output's settings.
    pub(crate) fn output(&self) -> &KafkaOutput {
        &self.out
    }

    /// Sends `payload` (holding the next `records` records) under `key` to `topic`, waiting
    /// for room as the module says; serves delivery reports every 256 messages.
    pub(crate) fn send(&mut self, topic: &str, key: &[u8], payload: &[u8], records: u32) {
        let held = Held {
            first: self.next_record,
            count: records,
        };
        self.next_record += u64::from(records);
        self.send_held(topic, key, payload, held);
    }

    /// Sends `payload` holding the last record sent again (a protobuf record's second
    /// `FlowMessage`, one a message), as [`Producer::send`] does.
    pub(crate) fn send_again(&mut self, topic: &str, key: &[u8], payload: &[u8]) {
        let held = Held {
            first: self.next_record.saturating_sub(1),
            count: 1,
        };
        self.send_held(topic, key, payload, held);
    }

    fn send_held(&mut self, topic: &str, key: &[u8], payload: &[u8], held: Held) {
        let Some(p) = &self.producer else { return };
        self.kafka.messages += 1;
        let started = Instant::now();
        loop {
            let rec = BaseRecord::with_opaque_to(topic, held.opaque())
                .key(key)
                .payload(payload);
            match p.send(rec) {
                Ok(()) => {
                    self.overflowing = false;
                    self.bytes += payload.len() as u64;
                    self.records_handed += held.new_since(self.last_handed);
                    self.last_handed = Some(held.last());
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    if self.overflowing || started.elapsed() >= QUEUE_WAIT {
                        self.overflowing = true;
                        self.kafka.overflow += 1;
                        self.kafka.records_lost += held.new_since(self.last_lost);
                        self.last_lost = Some(held.last());
                        break;
                    }
                    p.poll(Duration::from_millis(10));
                }
                Err((e, _)) => {
                    // refused before queueing (a message too large, say): failed
                    self.kafka.failed += 1;
                    self.kafka.records_lost += held.new_since(self.last_lost);
                    self.last_lost = Some(held.last());
                    self.kafka.last_error = e.rdkafka_error_code().or(self.kafka.last_error);
                    break;
                }
            }
        }
        if self.kafka.messages % 256 == 0 {
            p.poll(Duration::ZERO);
        }
    }

    /// Serves delivery reports.
    pub(crate) fn poll(&self) {
        if let Some(p) = &self.producer {
            p.poll(Duration::ZERO);
        }
    }

    /// The counts so far: failed as reported until now, delivered = the messages neither
    /// failed, overflowed nor still in the producer's queue, unacknowledged = those still in
    /// it (the bound of what a `kill -9` now would lose).
    pub(crate) fn stats(&self) -> KafkaStats {
        let mut k = self.kafka;
        k.failed += self.reports.failed.load(Ordering::Relaxed);
        let records_failed = self.reports.records_failed.load(Ordering::Relaxed);
        k.records_lost += records_failed;
        let queued = self
            .producer
            .as_ref()
            .map_or(0, |p| u64::try_from(p.in_flight_count()).unwrap_or(0));
        let handed = k.messages.saturating_sub(k.failed + k.overflow);
        k.delivered = handed.saturating_sub(queued);
        k.unacknowledged = handed - k.delivered;
        k.records_unacknowledged = self.records_in(k.unacknowledged, records_failed);
        k
    }

    /// The most records `messages` messages in librdkafka hold: each holds at most
    /// [`KafkaOutput::records_per_message`], and none a record not handed to it or already
    /// counted failed (`records_failed`).
    fn records_in(&self, messages: u64, records_failed: u64) -> u64 {
        (messages * u64::from(self.out.records_per_message))
            .min(self.records_handed.saturating_sub(records_failed))
    }

    /// Waits up to the delivery timeout for pending messages, then purges what is left (each
    /// purged message is reported as failed) and counts: delivered = the messages neither
    /// failed nor overflowed. Later calls return the same counts.
    pub(crate) fn finish(&mut self) -> KafkaStats {
        let r = self.reports.clone();
        if let Some(p) = self.producer.take() {
            // an Err is a timeout, and what is left is purged below
            let flushed = flush_promptly(
                &p,
                Duration::from_millis(u64::from(self.out.delivery_timeout_ms) + 5_000),
            );
            // still queued after the wait: failed, whether or not the purge reports them all
            // (the queue's length may hold a few non-message events too: those count as
            // failed, never as delivered)
            let left = match flushed {
                Ok(()) => 0,
                Err(_) => u64::try_from(p.in_flight_count()).unwrap_or(0),
            };
            let before = r.failed.load(Ordering::Relaxed);
            drop(p); // purges the queue and serves the purge's delivery reports
            let purged = r.failed.load(Ordering::Relaxed) - before;
            // messages queued but never reported: counted with the most records they may hold
            let unreported = left.saturating_sub(purged);
            let records_failed = r.records_failed.load(Ordering::Relaxed);
            self.kafka.failed += unreported;
            self.kafka.records_lost += self.records_in(unreported, records_failed);
            self.kafka.failed += r.failed.load(Ordering::Relaxed);
            self.kafka.records_lost += records_failed;
            let last = r.last.lock().unwrap_or_else(|p| p.into_inner());
            self.kafka.last_error = last.error.or(self.kafka.last_error);
        }
        self.kafka.delivered = self
            .kafka
            .messages
            .saturating_sub(self.kafka.failed + self.kafka.overflow);
        self.kafka
    }
}

/// Waits up to `timeout` for every message to be delivered or failed, sending what waits
/// for `linger.ms` at once, and returns within about 1 ms of the last acknowledgement.
///
/// librdkafka's `flush` serves the delivery reports in polls of up to 10 ms; with reports of
/// failures only (`delivery.report.only.error`) the last acknowledgement enqueues none, so one
/// long flush returns up to 10 ms after it (5 ms on average: ≈ 1.5 % of a 0.33 s `weir flows
/// -r` of the bench trace). Flushes of 1 ms one after the other end sooner; each keeps
/// librdkafka's "flushing" state (linger ignored) and wakes its broker threads again.
fn flush_promptly(p: &BaseProducer<Reports>, timeout: Duration) -> KafkaResult<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let step = deadline
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(1));
        match p.flush(step) {
            Err(_) if Instant::now() < deadline => {}
            done => return done,
        }
    }
}

/// The Kafka sink of flow records (see the module documentation).
pub(crate) struct KafkaSink {
    core: Producer,
    topic: String,
    /// Messages made so far (protobuf's sequence_num).
    seq: u64,
    records: u64,
    key: String,
    /// A JSON record's line, then its payload: both reused from record to record.
    line: String,
    payload: Vec<u8>,
    /// Several records per message: the records so far (JSON: newline-separated in `pack`;
    /// protobuf: length-delimited in `pack_pb`), how many, and when the first came.
    pack: String,
    pack_pb: Vec<u8>,
    packed: usize,
    pack_started: Instant,
}

impl KafkaSink {
    /// Creates the producer and checks that a broker answers (within
    /// [`KafkaOutput::connect_timeout_ms`]).
    pub(crate) fn open(out: &KafkaOutput) -> Result<KafkaSink, ExportError> {
        Ok(KafkaSink::with_producer(Producer::open(out)?, out))
    }

    /// The sink sending through `core` (made for `out`).
    fn with_producer(core: Producer, out: &KafkaOutput) -> KafkaSink {
        KafkaSink {
            core,
            topic: out.topic.clone(),
            seq: 0,
            records: 0,
            key: String::new(),
            line: String::with_capacity(512),
            payload: Vec::with_capacity(512),
            pack: String::new(),
            pack_pb: Vec::new(),
            packed: 0,
            pack_started: Instant::now(),
        }
    }

    /// Sends the records packed so far as one message under the sensor's key.
    fn send_pack(&mut self) {
        if self.packed > 0 {
            let key = self.core.output().sensor.clone();
            let payload = match self.core.output().format {
                KafkaFormat::Json => self.pack.as_bytes(),
                KafkaFormat::Protobuf => &self.pack_pb,
            };
            self.core
                .send(&self.topic, key.as_bytes(), payload, self.packed as u32);
            self.pack.clear();
            self.pack_pb.clear();
            self.packed = 0;
        }
    }

    /// Formats `rec` straight into the message being packed (JSON: its line; protobuf: its
    /// length-delimited `FlowMessage`s; one copy fewer than through `self.line` /
    /// `self.payload`), sending the message when it is full; a record that would take it past
    /// [`MAX_PACKED_BYTES`] starts the next one.
    fn pack_record(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        let most = self.core.output().records_per_message as usize;
        let fits = match self.core.output().format {
            KafkaFormat::Json => append_json(
                &mut self.pack,
                self.packed,
                rec,
                MAX_PACKED_BYTES,
                &mut self.line,
            ),
            KafkaFormat::Protobuf => append_protobuf(
                &mut self.pack_pb,
                self.packed,
                rec,
                &mut self.seq,
                MAX_PACKED_BYTES,
                &mut self.payload,
            )?,
        };
        if !fits {
            self.send_pack();
            match self.core.output().format {
                KafkaFormat::Json => self.pack.push_str(&self.line),
                KafkaFormat::Protobuf => self.pack_pb.extend_from_slice(&self.payload),
            }
        }
        if self.packed == 0 {
            self.pack_started = Instant::now();
        }
        self.packed += 1;
        if self.packed >= most {
            self.send_pack();
        }
        Ok(())
    }

    /// The export counters of `k`.
    fn totals(&self, k: KafkaStats) -> ExportStats {
        ExportStats {
            records: self.records,
            bytes: self.core.bytes,
            datagrams: k.messages,
            dropped: k.failed + k.overflow,
            kafka: Some(k),
            ..ExportStats::default()
        }
    }
}

/// librdkafka's `message.max.bytes` for batches of `batch` bytes: room for a batch and its
/// framing, at least librdkafka's default (1 000 000), at most its limit (10⁹).
fn max_request_bytes(batch: u32) -> u32 {
    batch
        .max(1_000_000)
        .saturating_add(65_536)
        .min(1_000_000_000)
}

/// Appends `rec`'s JSON line (without its newline) to `pack`, which holds `packed` records
/// separated by newlines. When that takes a pack of one record or more past `max` bytes, `pack`
/// is left as it was, the line is in `spill` and the answer is false.
fn append_json(
    pack: &mut String,
    packed: usize,
    rec: &FlowRecord,
    max: usize,
    spill: &mut String,
) -> bool {
    let start = pack.len();
    if packed > 0 {
        pack.push('\n');
    }
    push_line(TextFormat::Json, rec, false, pack);
    pack.pop(); // the newline
    if packed > 0 && pack.len() > max {
        spill.clear();
        spill.push_str(&pack[start + 1..]);
        pack.truncate(start);
        return false;
    }
    true
}

/// Appends `rec`'s length-delimited `FlowMessage`s (module `flowpb`; `seq` advanced) to `pack`,
/// which holds `packed` records. When that takes a pack of one record or more past `max` bytes,
/// `pack` is left as it was, the record's bytes are in `spill` and the answer is false.
fn append_protobuf(
    pack: &mut Vec<u8>,
    packed: usize,
    rec: &FlowRecord,
    seq: &mut u64,
    max: usize,
    spill: &mut Vec<u8>,
) -> Result<bool, ExportError> {
    let start = pack.len();
    for m in crate::flowpb::messages(rec, seq) {
        m.encode_length_delimited(pack)
            .map_err(|e| ExportError::Kafka(format!("protobuf encoding: {e}")))?;
    }
    if packed > 0 && pack.len() > max {
        spill.clear();
        spill.extend_from_slice(&pack[start..]);
        pack.truncate(start);
        return Ok(false);
    }
    Ok(true)
}

/// The key of a record: the sensor, the VLAN, the protocol and the endpoints in canonical order.
/// Written by hand, not with `write!`: `core::fmt` cost 5 % of a JSON run's CPU here.
fn flow_key(sensor: &str, rec: &FlowRecord, out: &mut String) {
    let k = &rec.key;
    let (a, b) = ((k.src, k.src_port), (k.dst, k.dst_port));
    let ((la, lp), (ha, hp)): ((IpAddr, u16), (IpAddr, u16)) = if a <= b { (a, b) } else { (b, a) };
    out.clear();
    out.push_str(sensor);
    for n in [u32::from(k.vlan), u32::from(k.proto)] {
        out.push('/');
        push_decimal(out, n);
    }
    for (addr, port) in [(la, lp), (ha, hp)] {
        out.push('/');
        push_addr(out, addr);
        out.push('/');
        push_decimal(out, port.into());
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut String, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// Appends an address as `Display` writes it (IPv4 by hand, IPv6 through `Display`).
fn push_addr(out: &mut String, addr: IpAddr) {
    match addr {
        IpAddr::V4(v4) => {
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                push_decimal(out, o.into());
            }
        }
        IpAddr::V6(v6) => {
            use std::fmt::Write as _;
            let _ = write!(out, "{v6}");
        }
    }
}

impl FlowSink for KafkaSink {
    fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        self.records += 1;
        if self.core.output().records_per_message > 1 {
            return self.pack_record(rec);
        }
        flow_key(&self.core.output().sensor, rec, &mut self.key);
        let topic = &self.topic;
        match self.core.output().format {
            KafkaFormat::Json => {
                // formatted into the sink's own line buffer: no allocation per record
                self.line.clear();
                push_line(TextFormat::Json, rec, false, &mut self.line);
                self.line.pop(); // the newline
                self.core
                    .send(topic, self.key.as_bytes(), self.line.as_bytes(), 1);
            }
            KafkaFormat::Protobuf => {
                // one message a direction: the second holds the same record again
                for (i, m) in crate::flowpb::messages(rec, &mut self.seq).enumerate() {
                    self.payload.clear();
                    if let Err(e) = m.encode_length_delimited(&mut self.payload) {
                        return Err(ExportError::Kafka(format!("protobuf encoding: {e}")));
                    }
                    if i == 0 {
                        self.core.send(topic, self.key.as_bytes(), &self.payload, 1);
                    } else {
                        self.core
                            .send_again(topic, self.key.as_bytes(), &self.payload);
                    }
                }
            }
        }
        Ok(())
    }

    /// The totals so far (see [`Producer::stats`]), the records packed but not yet sent
    /// counted as unacknowledged.
    fn stats(&self) -> ExportStats {
        let mut k = self.core.stats();
        k.records_unacknowledged += self.packed as u64;
        self.totals(k)
    }

    /// Serves delivery reports; sends the records packed so far once they waited `linger_ms`
    /// (at least 100 ms) of wall time.
    fn tick(&mut self, _now_ns: u64) -> Result<(), ExportError> {
        let wait = Duration::from_millis(self.core.output().linger_ms.max(100).into());
        if self.packed > 0 && self.pack_started.elapsed() >= wait {
            self.send_pack();
        }
        self.core.poll();
        Ok(())
    }

    /// Sends the records packed so far, waits for pending messages and counts (see
    /// [`Producer::finish`]).
    fn finish(&mut self) -> Result<ExportStats, ExportError> {
        self.send_pack();
        let k = self.core.finish();
        Ok(self.totals(k))
    }
}

/// One entry of a broker list as librdkafka takes it: `HOST`, `HOST:PORT`, `[IPv6]:PORT`, a
/// bare IPv6 address, each optionally after `SCHEME://`; a port, when given, is 1 to 65535
/// (librdkafka would only fail at connect time, after the socket timeout).
fn broker_ok(entry: &str) -> bool {
    let b = entry.split_once("://").map_or(entry, |(_, rest)| rest);
    if b.is_empty() || b.contains(|c: char| c.is_whitespace() || c == '\0') {
        return false;
    }
    let port = if let Some(rest) = b.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, "")) => return !host.is_empty(),
            Some((host, tail)) if !host.is_empty() => match tail.strip_prefix(':') {
                Some(port) => port,
                None => return false,
            },
            _ => return false,
        }
    } else {
        match b.split_once(':') {
            None => return true,
            // Two colons or more: a bare IPv6 address, no port.
            Some((_, rest)) if rest.contains(':') => return true,
            Some(("", _)) => return false,
            Some((_, port)) => port,
        }
    };
    port.parse::<u16>().is_ok_and(|p| p > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_flows::{Direction, EndReason, FlowKey};

    fn rec(src: &str, sp: u16, dst: &str, dp: u16) -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                vlan: 3,
                src: src.parse().unwrap(),
                dst: dst.parse().unwrap(),
                proto: 6,
                src_port: sp,
                dst_port: dp,
                tos: 0,
            },
            forward: Direction::default(),
            reverse: Direction::default(),
            end_reason: EndReason::IdleTimeout,
            tag: None,
        }
    }

    #[test]
    fn both_directions_of_a_flow_have_one_key() {
        let (mut a, mut b) = (String::new(), String::new());
        flow_key("s1", &rec("10.0.0.9", 80, "10.0.0.1", 5000), &mut a);
        flow_key("s1", &rec("10.0.0.1", 5000, "10.0.0.9", 80), &mut b);
        assert_eq!(a, "s1/3/6/10.0.0.1/5000/10.0.0.9/80");
        assert_eq!(a, b);
        flow_key("s1", &rec("2001:db8::1", 1, "10.0.0.1", 2), &mut b);
        assert_eq!(b, "s1/3/6/10.0.0.1/2/2001:db8::1/1", "IPv4 sorts first");
        let mut r = rec("255.0.10.100", 65535, "0.0.0.0", 0);
        r.key.vlan = 4095;
        r.key.proto = 255;
        flow_key("", &r, &mut b);
        assert_eq!(b, "/4095/255/0.0.0.0/0/255.0.10.100/65535");
        let mut n = String::new();
        for v in [0, 9, 10, 99, 100, 65_535, u32::MAX] {
            n.clear();
            push_decimal(&mut n, v);
            assert_eq!(n, v.to_string());
        }
    }

    #[test]
    fn bad_values_are_refused_before_connecting() {
        let ok = KafkaOutput::new("127.0.0.1:9092", DEFAULT_FLOWS_TOPIC);
        assert!(ok.check().is_ok());
        // The forms librdkafka's `bootstrap.servers` takes.
        for brokers in [
            "kafka",
            "a:1,b:65535",
            "[::1]:9092",
            "[::1]",
            "::1",
            "PLAINTEXT://host:9092",
        ] {
            let out = KafkaOutput::new(brokers, DEFAULT_FLOWS_TOPIC);
            assert!(out.check().is_ok(), "{brokers}");
        }
        for (out, msg) in [
            (
                KafkaOutput::new("127.0.0.1:9092", "a b"),
                "bad topic name \"a b\"",
            ),
            (KafkaOutput::new("127.0.0.1:9092", ".."), "bad topic name"),
            (KafkaOutput::new("", "t"), "bad broker list \"\""),
            (KafkaOutput::new("a:1,,b:2", "t"), "bad broker list"),
            (KafkaOutput::new("host:notaport", "t"), "bad broker list"),
            (KafkaOutput::new("host:99999", "t"), "bad broker list"),
            (KafkaOutput::new("host:0", "t"), "bad broker list"),
            (KafkaOutput::new(":9092", "t"), "bad broker list"),
            (KafkaOutput::new("[::1]x", "t"), "bad broker list"),
            (KafkaOutput::new("[]:9092", "t"), "bad broker list"),
            (
                KafkaOutput {
                    queue_messages: 0,
                    ..ok.clone()
                },
                "queue 0 is out of range (1 to 10000000)",
            ),
            (
                KafkaOutput {
                    delivery_timeout_ms: 10,
                    ..ok.clone()
                },
                "delivery timeout 10 is out of range",
            ),
            (
                KafkaOutput {
                    records_per_message: 0,
                    ..ok.clone()
                },
                "records per message 0 is out of range (1 to 100000)",
            ),
            (
                KafkaOutput {
                    records_per_message: 100_001,
                    ..ok.clone()
                },
                "records per message 100001 is out of range",
            ),
        ] {
            let e = out.check().unwrap_err().to_string();
            assert!(e.contains(msg), "{e}");
        }
        assert!(check_topic(&"t".repeat(250)).is_err());
        assert!(check_topic(&"t".repeat(249)).is_ok());
    }

    /// Records packed into one message are the `--json` lines joined by newlines; the record
    /// that would take a message past its limit is left out whole, for the next one.
    #[test]
    fn packed_records_are_json_lines_and_a_full_message_spills_whole() {
        let recs = [
            rec("10.0.0.1", 1000, "10.0.0.2", 80),
            rec("10.0.0.3", 1001, "10.0.0.2", 80),
            rec("2001:db8::1", 1002, "2001:db8::2", 443),
        ];
        let lines: Vec<String> = recs
            .iter()
            .map(|r| {
                let mut l = String::new();
                push_line(TextFormat::Json, r, false, &mut l);
                assert_eq!(l.pop(), Some('\n'));
                l
            })
            .collect();
        let two = lines[0].len() + 1 + lines[1].len();
        let (mut pack, mut spill) = (String::new(), String::new());
        for (i, r) in recs.iter().enumerate() {
            let fits = append_json(&mut pack, i, r, two, &mut spill);
            assert_eq!(fits, i < 2, "record {i}");
        }
        assert_eq!(pack, format!("{}\n{}", lines[0], lines[1]));
        assert_eq!(spill, lines[2]);
        // a first record always goes in, however long
        let mut alone = String::new();
        assert!(append_json(&mut alone, 0, &recs[2], 1, &mut spill));
        assert_eq!(alone, lines[2]);
    }

    /// Protobuf records packed into one message are their length-delimited `FlowMessage`s one
    /// after the other: read back with prost's `decode_length_delimited` in a loop they are the
    /// messages `flowpb::messages` makes, sequence numbers running on; a biflow record's two
    /// messages stay together, and the record that would take a message past its limit is left
    /// out whole (both of its messages), for the next one.
    #[test]
    fn packed_protobuf_records_are_length_delimited_and_spill_whole() {
        use crate::flowpb::FlowMessage;
        use prost::Message as _;
        let mut recs = [
            rec("10.0.0.1", 1000, "10.0.0.2", 80),
            rec("10.0.0.3", 1001, "10.0.0.2", 80),
            rec("2001:db8::1", 1002, "2001:db8::2", 443),
        ];
        for (i, r) in recs.iter_mut().enumerate() {
            r.forward.packets = 1 + i as u64;
            r.reverse.packets = 1; // two messages each
        }
        let one = |r: &FlowRecord, seq: u64| {
            let mut b = Vec::new();
            let mut s = seq;
            for m in crate::flowpb::messages(r, &mut s) {
                m.encode_length_delimited(&mut b).unwrap();
            }
            b
        };
        let (a, b, c) = (one(&recs[0], 0), one(&recs[1], 2), one(&recs[2], 4));
        let (mut pack, mut spill, mut seq) = (Vec::new(), Vec::new(), 0);
        for (i, r) in recs.iter().enumerate() {
            let fits =
                append_protobuf(&mut pack, i, r, &mut seq, a.len() + b.len(), &mut spill).unwrap();
            assert_eq!(fits, i < 2, "record {i}");
        }
        assert_eq!(seq, 6);
        assert_eq!(pack, [&a[..], &b[..]].concat());
        assert_eq!(spill, c);
        let mut rest = &pack[..];
        let mut got = Vec::new();
        while !rest.is_empty() {
            got.push(FlowMessage::decode_length_delimited(&mut rest).unwrap());
        }
        let want: Vec<FlowMessage> = {
            let mut s = 0;
            recs[..2]
                .iter()
                .flat_map(|r| crate::flowpb::messages(r, &mut s).collect::<Vec<_>>())
                .collect()
        };
        assert_eq!(got, want);
        assert_eq!(
            got.iter().map(|m| m.sequence_num).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        // a first record always goes in, however long
        let mut alone = Vec::new();
        assert!(append_protobuf(&mut alone, 0, &recs[2], &mut seq, 1, &mut spill).unwrap());
        assert_eq!(alone, one(&recs[2], 6));
    }

    /// Records per message when none is given: 100 for JSON and protobuf alike.
    #[test]
    fn the_default_records_per_message_is_100_for_both_formats() {
        for f in [KafkaFormat::Json, KafkaFormat::Protobuf] {
            assert_eq!(f.default_records_per_message(), 100, "{f:?}");
        }
        assert_eq!(
            KafkaOutput::new("127.0.0.1:9092", DEFAULT_FLOWS_TOPIC).records_per_message,
            100
        );
        let pb = KafkaOutput {
            format: KafkaFormat::Protobuf,
            records_per_message: 100_000,
            ..KafkaOutput::new("127.0.0.1:9092", DEFAULT_FLOWS_TOPIC)
        };
        assert!(pb.check().is_ok(), "several protobuf records per message");
    }

    /// The batch size: 4 MiB for compressed JSON, 1 MiB for protobuf or uncompressed, the
    /// given one when given.
    #[test]
    fn the_batch_size_follows_the_encoding_unless_given() {
        let json = KafkaOutput::new("127.0.0.1:9092", DEFAULT_FLOWS_TOPIC);
        assert_eq!(json.batch(), 4 << 20);
        let zstd = KafkaOutput {
            compression: KafkaCompression::Zstd,
            ..json.clone()
        };
        assert_eq!(zstd.batch(), 4 << 20);
        for other in [
            KafkaOutput {
                format: KafkaFormat::Protobuf,
                ..json.clone()
            },
            KafkaOutput {
                compression: KafkaCompression::None,
                ..json.clone()
            },
        ] {
            assert_eq!(other.batch(), 1 << 20);
        }
        let given = KafkaOutput {
            batch_bytes: Some(5000),
            format: KafkaFormat::Protobuf,
            ..json.clone()
        };
        assert_eq!(given.batch(), 5000);
        let tiny = KafkaOutput {
            batch_bytes: Some(10),
            ..json
        };
        let e = tiny.check().unwrap_err().to_string();
        assert!(e.contains("batch size 10 is out of range"), "{e}");
        assert_eq!(max_request_bytes(1024), 1_065_536);
        assert_eq!(max_request_bytes(4 << 20), (4 << 20) + 65_536);
        assert_eq!(
            max_request_bytes(1 << 30),
            1_000_000_000,
            "librdkafka's most"
        );
    }

    /// `flush_promptly`: with nothing queued it returns Ok; a message no broker can take
    /// (nothing listens on the port) is still queued when the wait ends, and the answer is the
    /// timeout error, as librdkafka's own `flush` gives.
    #[test]
    fn prompt_flush_waits_for_queued_messages_and_times_out() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p: BaseProducer<Reports> = ClientConfig::new()
            .set("bootstrap.servers", format!("127.0.0.1:{port}"))
            .set("message.timeout.ms", "60000")
            .create_with_context(Reports::default())
            .unwrap();
        assert!(flush_promptly(&p, Duration::from_millis(50)).is_ok());
        p.send(BaseRecord::with_opaque_to("t", 1).payload("x").key("k"))
            .unwrap();
        let e = flush_promptly(&p, Duration::from_millis(200)).unwrap_err();
        assert_eq!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::OperationTimedOut)
        );
        assert_eq!(p.in_flight_count(), 1);
    }

    /// Session 19's finding, reproduced: protobuf one `FlowMessage` a message, records of two
    /// directions (two messages each) and no broker (nothing listens on the port). Every
    /// message stays unacknowledged, then fails; the records counted are the records given
    /// (4: three of two directions, one of one), not the messages (7): before the fix
    /// `records_unacknowledged` and `records_lost` were both 7. Packed (100 a message), the
    /// same 4 records are one message of 4 records.
    #[test]
    fn records_of_two_messages_are_counted_once_unacknowledged_and_lost() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut recs = [
            rec("10.0.0.1", 1000, "10.0.0.2", 80),
            rec("10.0.0.3", 1001, "10.0.0.2", 80),
            rec("2001:db8::1", 1002, "2001:db8::2", 443),
            rec("10.0.0.4", 53, "10.0.0.5", 53),
        ];
        for (i, r) in recs.iter_mut().enumerate() {
            r.forward.packets = 1;
            r.reverse.packets = u64::from(i < 3); // the last is one-way
        }
        for (per_message, messages) in [(1, 7), (100, 1)] {
            let out = KafkaOutput {
                format: KafkaFormat::Protobuf,
                records_per_message: per_message,
                delivery_timeout_ms: 1000,
                ..KafkaOutput::new(&format!("127.0.0.1:{port}"), "t")
            };
            let mut sink = KafkaSink::with_producer(Producer::create(&out).unwrap(), &out);
            for r in &recs {
                sink.export(r).unwrap();
            }
            let k = sink.stats().kafka.unwrap();
            if per_message == 1 {
                assert_eq!(k.messages, 7);
                assert_eq!(k.unacknowledged, 7, "no broker: nothing acknowledged");
            }
            assert_eq!(
                k.records_unacknowledged, 4,
                "{per_message} a message: {k:?}"
            );
            let st = sink.finish().unwrap();
            let k = st.kafka.unwrap();
            assert_eq!(
                (k.messages, k.failed, k.delivered, k.overflow),
                (messages, messages, 0, 0),
                "{per_message} a message: {k:?}"
            );
            assert_eq!(k.records_lost, 4, "{per_message} a message: {k:?}");
            assert_eq!((k.unacknowledged, k.records_unacknowledged), (0, 0));
            assert_eq!(st.records, 4);
        }
    }

    /// A delivery opaque keeps the records a message holds; a record held again (its second
    /// message) is not new, the next one is.
    #[test]
    fn held_records_survive_the_opaque_and_count_once() {
        for h in [
            Held { first: 0, count: 1 },
            Held {
                first: 123_456_789,
                count: MAX_RECORDS_PER_MESSAGE,
            },
        ] {
            assert_eq!(Held::from_opaque(h.opaque()), h);
        }
        let h = Held { first: 7, count: 3 };
        assert_eq!(h.last(), 9);
        assert_eq!(h.new_since(None), 3);
        assert_eq!(h.new_since(Some(6)), 3);
        assert_eq!(h.new_since(Some(7)), 2, "record 7 was counted already");
        assert_eq!(Held { first: 9, count: 1 }.new_since(Some(9)), 0);
    }

    /// Nothing listens on the port: opening says so (after the connect timeout), it does not
    /// hang and does not panic.
    #[test]
    fn a_missing_broker_fails_at_open() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let out = KafkaOutput {
            connect_timeout_ms: 1000,
            ..KafkaOutput::new(&format!("127.0.0.1:{port}"), "t")
        };
        let Err(e) = Producer::open(&out) else {
            panic!("opened a producer with no broker")
        };
        assert!(
            e.to_string().starts_with(&format!(
                "kafka: no Kafka broker answered at 127.0.0.1:{port}"
            )),
            "{e}"
        );
    }
}
