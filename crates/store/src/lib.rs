//! The store: the recorder writes what capture threads put in the shared packet buffer to disk,
//! at the speed of the disk, as standard capture files (HPCAP's design in user space); readers
//! select packets from it by time and filter, through its indexes.
//!
//! A store is a directory of fixed-size **segment** files named by the time of their first
//! packet, plus a small [manifest](manifest::Manifest). In pcapng (the default) the buffer's
//! records already are the file's blocks, so the [`Recorder`] writes large aligned runs of the
//! buffer straight to the file with `O_DIRECT` (see [`recorder`] for the layout trick that makes
//! buffer offsets and file offsets agree modulo the block size), never a write per packet. A
//! packet that would cross the end of a segment starts the next one, and the rest of the
//! segment is filled with padding blocks that pcapng readers skip, so every segment has exactly
//! the configured size and holds whole packets. Classic pcap (nanosecond magic) has no such
//! padding: its records are converted into an aligned staging buffer and a segment ends at its
//! last whole packet.
//!
//! Crash safety: data is flushed at least every second (the unwritten tail padded to a block
//! boundary with a padding block, so the file reads cleanly up to there); after `kill -9`,
//! opening the store again cuts every unfinished segment after its last whole block
//! ([`scan`]). Disk full: the segment is cut at its last whole packet, writing stops, and
//! every packet that could not be written is counted.
//!
//! Reading: [`select()`] finds the packets of a time range matching a filter in stores and
//! capture files, through their indexes, and gives them back in global time order; a segment
//! being written is read as a stream, never mapped. [`serve`] serves a store's extract over
//! HTTP (through `weir_httpd`) and [`remote`] merges the extracts of several
//! served stores. The sizes of a store are checked once, by
//! [`Sizes`]. [`inventory`] lists a store's segments and indexes, and builds missing indexes.
#![deny(missing_docs)]

pub mod disk;
pub mod extract;
pub mod inventory;
pub mod manifest;
pub mod recorder;
pub mod remote;
pub mod scan;
pub mod select;
pub mod serve;
pub mod sizes;
pub mod store;

pub use manifest::{InterfaceInfo, Manifest, SegmentInfo, SegmentState};
pub use recorder::{Options, Recorder, RecorderStats, Summary};
pub use select::{select, Matcher, Notice, SegmentRef, SelectError, Selection};
pub use sizes::{SizeError, Sizes};
pub use store::{recorder_running, segment_name, Recovery, Store, StoreLock};

/// The file format of a store's segments.
///
/// The variants' doc comments are the help of `weir record --format` (feature `clap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// pcapng (written straight from the buffer, padded segments).
    Pcapng,
    /// Classic pcap with nanosecond timestamps.
    Pcap,
}

impl Format {
    /// `pcapng` or `pcap`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Pcapng => "pcapng",
            Format::Pcap => "pcap",
        }
    }

    /// The file name extension.
    pub fn extension(self) -> &'static str {
        self.name()
    }
}

/// Errors of the recorder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// A file operation failed (the message names the file and the operation).
    #[error("{0}")]
    Io(String),
    /// Another recorder holds the store.
    #[error("{0} is in use by another recorder")]
    Locked(std::path::PathBuf),
    /// The options cannot work.
    #[error("{0}")]
    Config(String),
}
