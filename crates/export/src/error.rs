//! The exporters' error type.

use std::path::PathBuf;

/// Why an exporter could not be opened or could not write.
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
    #[error("cannot create {path}: {source}")]
    Create {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The UDP socket could not be opened.
    #[error("cannot open a UDP socket: {0}")]
    Socket(std::io::Error),
    /// The configured MTU cannot hold a header, the templates and one record.
    #[error("MTU {mtu} is too small: at least {needed} bytes are needed")]
    MtuTooSmall {
        /// The configured MTU (maximum datagram payload).
        mtu: usize,
        /// The smallest workable value.
        needed: usize,
    },
    /// Writing to a file or stdout failed.
    #[error("write failed: {0}")]
    Write(#[from] std::io::Error),
}
