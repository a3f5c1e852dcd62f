//! weir's flow exporters: NetFlow v5, NetFlow v9 (RFC 3954) and IPFIX (RFC 7011, with RFC 5103
//! bidirectional records) sent over UDP to one or more collectors or written to a file, and JSON
//! lines / CSV text.
//!
//! The flow meter (`weir-flows`) hands finished [`FlowRecord`](weir_flows::FlowRecord)s to a
//! [`FlowSink`] opened with [`open_sink`], or to several at once through a [`Fanout`] (the
//! meter's [`RecordSink`](weir_flows::RecordSink)). NetFlow sinks batch records into datagrams like ffProbe:
//! a datagram goes out when the next record no longer fits, or when [`FlowSink::tick`] sees that
//! the oldest record in it has waited longer than the queue timeout (1 s of packet time by
//! default, see [`ExportOptions`]).
//!
//! A meter run's outputs are named by [`Outputs`] and opened together ([`Outputs::open`]); at
//! its end [`RunReport::finish`] finishes them and gathers every counter of the run, which
//! [`RunReport::summary`] puts in words and a [`StatsFile`] writes as JSON.
//!
//! Flow records also go to Kafka ([`KafkaOutput`], module `kafka`: JSON or goflow2's protobuf,
//! idempotent producer, bounded queue whose overflow is counted).
//! [`ParquetOutput`] writes the records as Parquet files, one per interval and sensor, in
//! Hive-style `date=/hour=` directories (module `parquet_sink`).
//!
//! # Time base
//!
//! Every clock the formats carry (sys_uptime, unix_secs, export time) is packet time, so file runs
//! are deterministic: the exporter's "now" is the latest flow end or tick time seen, and NetFlow's
//! "boot" is the first tick time or the first record's first packet, whichever came first (or
//! [`ExportOptions::boot_ns`]). Callers should call `tick(first_packet_ns)` before exporting so
//! that boot is the start of the capture. A NetFlow v5 / v9 datagram whose records cannot count
//! from that boot (input whose clock runs backwards, such as concatenated captures, or spans more
//! than the 49.7 days of a 32-bit ms uptime) gets a boot and header time of its own, so every
//! First / Last a collector rebuilds is exact to the millisecond.
//!
//! # Files
//!
//! A NetFlow [`Target::File`] (or [`Target::Stdout`]) holds the datagrams one after the other:
//! IPFIX messages are self-delimiting and written back to back (the RFC 5655 IPFIX file layout);
//! NetFlow v5 and v9 datagrams are each preceded by their length as a 2-byte big-endian integer.
//! nfcapd cannot read these files; the UDP target is the one collectors use.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "clap")]
pub mod args;
mod clock;
mod error;
mod fanout;
mod flowpb;
mod ipfix;
mod kafka;
mod kafka_log;
mod netflow;
mod open;
mod outputs;
mod packer;
mod parquet_sink;
mod report;
mod sets;
mod sink;
mod target;
mod template;
mod text;
mod threaded;
mod time;
mod transport;
mod v5;
mod v9;

#[cfg(feature = "clap")]
pub use args::{kafka_seconds, KafkaLogArgs, SinkArgs};
pub use error::ExportError;
pub use fanout::{Fanout, FanoutTotals, LiveExports, SinkError};
pub use kafka::{
    check_topic, host_name, KafkaCompression, KafkaFormat, KafkaOutput, KafkaStats,
    DEFAULT_FLOWS_TOPIC, DEFAULT_RECORDS_PER_MESSAGE, MAX_PACKED_BYTES, MAX_RECORDS_PER_MESSAGE,
};
pub use kafka_log::{KafkaLines, KafkaLog, LogKind, LogTopics, Teed};
pub use netflow::{ExportOptions, NetflowFormat};
pub use open::{open_sink, open_sink_with, SinkSpec};
pub use outputs::{NetflowOutput, OpenError, Outputs};
pub use parquet_sink::{ParquetOutput, DEFAULT_INTERVAL_NS, ROW_GROUP_ROWS};
pub use report::{RunError, RunReport, StatsFile, StatsFileError};
pub use sink::{ExportStats, FlowSink};
pub use target::{Target, DEFAULT_COLLECTOR};
