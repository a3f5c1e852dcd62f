//! The exporters' error type.

use std::path::PathBuf;

/// Why an exporter could not be opened or could not write. An I/O cause is the error's
/// [`source`](std::error::Error::source), not part of its message (print the chain, as anyhow's
/// `{:#}` does, to see it).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// A target string that does not parse (`udp://HOST:PORT[,HOST:PORT...]`, `file:PATH`, `-`).
    #[error("bad export target {target:?}: {reason}")]
    BadTarget {
        /// The string given.
        target: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A combination the exporters do not support (e.g. JSON over UDP).
    #[error("unsupported export: {0}")]
    Unsupported(String),
    /// The output file could not be created.
    #[error("cannot create {path}")]
    Create {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A stale temporary file could not be removed.
    #[error("cannot remove {path}")]
    Remove {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The UDP socket could not be opened.
    #[error("cannot open a UDP socket")]
    Socket(#[source] std::io::Error),
    /// The configured MTU cannot hold a header, the templates and one record.
    #[error("MTU {mtu} is too small: at least {needed} bytes are needed")]
    MtuTooSmall {
        /// The configured MTU (maximum datagram payload).
        mtu: usize,
        /// The smallest workable value.
        needed: usize,
    },
    /// A Kafka output could not be opened or used (bad settings, no broker answering).
    #[error("kafka: {0}")]
    Kafka(String),
    /// The Parquet writer failed (an I/O error is its source).
    #[error("Parquet write failed")]
    Parquet(#[source] parquet::errors::ParquetError),
    /// The thread a sink runs on stopped (module `threaded`): panicked, or had stopped on an
    /// error returned before.
    #[error("the sink's thread: {0}")]
    Thread(String),
    /// Writing to a file or stdout failed.
    #[error("write failed")]
    Write(#[from] std::io::Error),
}
