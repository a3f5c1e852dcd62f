//! The exporter API: [`FlowSink`], what every output (NetFlow, IPFIX, text) implements, and
//! [`ExportStats`], the totals each reports. The sinks live in their own modules ([`netflow`],
//! [`text`]) and import this one, never the reverse; [`open_sink`] (module `open`) opens one.
//!
//! [`netflow`]: crate::netflow
//! [`text`]: crate::text
//! [`open_sink`]: crate::open_sink

use weir_flows::FlowRecord;

use crate::ExportError;

/// A destination for finished flow records.
pub trait FlowSink: Send {
    /// Exports one flow record (it may wait in a partly filled datagram).
    fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError>;
    /// Advances packet time to `now_ns`: a partly filled datagram whose first record has waited
    /// longer than the queue timeout goes out; text sinks flush their buffers.
    fn tick(&mut self, now_ns: u64) -> Result<(), ExportError>;
    /// Sends what is pending, flushes, and returns the totals. Call it once, at the end.
    fn finish(&mut self) -> Result<ExportStats, ExportError>;
    /// The totals so far, while the sink runs (for live metrics; `finish` gives the final
    /// ones). A sink that keeps none reports zeros.
    fn stats(&self) -> ExportStats {
        ExportStats::default()
    }
}

/// Totals of one sink.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Records written: NetFlow/IPFIX data records (after v5 counter splitting and one-way
    /// splitting of both directions), or text rows.
    pub records: u64,
    /// Datagrams produced (each goes to every collector).
    pub datagrams: u64,
    /// Bytes produced (datagram payloads, or text).
    pub bytes: u64,
    /// Records in datagrams that could not be sent to a collector (counted per collector).
    pub dropped: u64,
    /// Flow records not exported because NetFlow v5 cannot carry IPv6.
    pub dropped_v5_ipv6: u64,
    /// NetFlow v5 / v9 records whose Last could not be expressed (a flow lasting more than the
    /// 49.7 days a 32-bit ms uptime spans): sent with Last clamped to First + 49.7 days.
    pub times_clamped: u64,
    /// Tagged flow records exported without their tag: NetFlow v5 has no field for it (and
    /// v9 / IPFIX / CSV without [`ExportOptions::tags`](crate::ExportOptions::tags)).
    pub tags_not_exported: u64,
    /// Files completed (a Parquet output; its `datagrams` stay 0).
    pub files: u64,
    /// Hidden temporary files a killed earlier run left, removed when the output opened.
    pub temp_removed: u64,
    /// A Kafka output's counters (its messages delivered, failed, lost to a full queue).
    pub kafka: Option<crate::KafkaStats>,
}
