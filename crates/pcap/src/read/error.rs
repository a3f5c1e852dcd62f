//! Errors of the file readers.

use std::io;
use std::path::PathBuf;

/// Why reading a capture file failed or stopped early.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file ("-" for stdin).
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file does not start like a pcap or pcapng file.
    #[error("{path}: not a pcap or pcapng file (first bytes {magic:02x?})")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
        /// Its first bytes.
        magic: Vec<u8>,
    },
    /// The file is shorter than its own file header.
    #[error("{path}: truncated file header ({len} bytes)")]
    ShortHeader {
        /// The file.
        path: PathBuf,
        /// How many bytes it has.
        len: usize,
    },
    /// The file header is invalid (unsupported version, bad byte-order magic...).
    #[error("{path}: bad file header: {reason}")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The file is damaged at `offset`: every packet before it was delivered, nothing after it
    /// will be. Like tcpdump's "truncated dump file".
    #[error("{path}: {reason} at byte offset {offset}; {packets} packets read before the damage")]
    Damaged {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damaged record or block.
        offset: u64,
        /// What is wrong there.
        reason: String,
        /// Packets delivered before the damage.
        packets: u64,
    },
}

impl ReadError {
    /// True for damage found after the file header: the packets before it were good.
    pub fn is_damage(&self) -> bool {
        matches!(self, ReadError::Damaged { .. })
    }
}
