//! Two-point latency analysis: the same packets captured at two points (before and after a
//! queue, a router, a link) are matched, and each stream gets its one-way latency distribution,
//! loss, duplicates, reordering and jitter.
//!
//! * [`classify`]: how a packet is recognised at both points — by the stamp weir gen puts in its
//!   payloads (stream id + sequence number), otherwise by a hash of the bytes that do not change
//!   hop to hop, confirmed on the bytes.
//! * [`analyze`]: the matcher. Memory is bounded by the time window, not by the files.
//! * [`stats`]: per-stream counters, HDR histogram, exact moments, RFC 3550 jitter, RFC 4737
//!   reordering.
//! * [`report`]: the text table and the JSON document.
//! * [`plot`]: CDF, box plot and latency-over-time charts, SVG and PNG, several runs overlaid.
//! * [`session`]: a session of several labelled runs: their inputs, settings, CSV rows, notices
//!   and chart series.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod analyze;
pub mod classify;
pub mod plot;
pub mod report;
pub mod session;
pub mod stats;

pub use analyze::{analyze, Config, Match, Run, Unstamped};
pub use stats::{StreamStats, Summary};

/// Errors of the analyzer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LatencyError {
    /// A setting or an output folder is not usable (the message says which).
    #[error("{0}")]
    Config(String),
    /// An input could not be read.
    #[error(transparent)]
    Read(#[from] weir_pcap::ReadError),
    /// A chart could not be drawn or written.
    #[error("chart {path}: {message}")]
    Plot {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
}
