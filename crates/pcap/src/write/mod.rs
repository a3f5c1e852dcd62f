//! Writing packet files (pcap and pcapng).
//!
//! Today: streaming writers for classic pcap ([`PcapWriter`], nanosecond magic by default,
//! microseconds on request) and pcapng ([`PcapngWriter`], one interface description block per
//! interface, nanosecond resolution). Both write to any `io::Write` (a file, stdout) through a
//! large buffer and produce files that tcpdump, tshark, capinfos and Wireshark read with the same
//! packets, lengths and timestamps.
//!
//! [`PacketWriter`] picks one of the two at run time, for commands whose output format is a flag.
//! Interfaces are declared as [`Interface`]s (link type, snap length, name), the type the reader
//! hands out, so a file's interfaces can be declared again as they were read.

#![forbid(unsafe_code)]

mod pcap;
mod pcapng;

use std::io;

pub use pcap::PcapWriter;
pub use pcapng::PcapngWriter;
use weir_packet::{Interface, LinkType, PacketMeta};

pub use crate::format::{FileFormat, Precision};

/// Errors of the writers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The output failed.
    #[error("write failed: {0}")]
    Io(#[from] io::Error),
    /// A classic pcap file holds one link type; a packet of another one cannot be written there.
    #[error(
        "classic pcap holds one link type ({file}); a packet of {packet} needs --format pcapng"
    )]
    MixedLinkTypes {
        /// The file's link type.
        file: LinkType,
        /// The packet's link type.
        packet: LinkType,
    },
    /// A packet names an interface that was never added.
    #[error("packet on interface {0}, which was never described")]
    UnknownInterface(u32),
    /// The captured bytes do not fit the 32-bit length fields of the format.
    #[error("packet of {0} bytes is too large for the file format")]
    TooLarge(usize),
}

/// A pcap or pcapng writer chosen at run time.
pub enum PacketWriter<W: io::Write> {
    /// Classic pcap.
    Pcap(PcapWriter<W>),
    /// pcapng.
    Pcapng(PcapngWriter<W>),
}

impl<W: io::Write> PacketWriter<W> {
    /// Starts a file in `format` declaring `interfaces` (classic pcap uses the first one's link
    /// type and snap length; later packets must share that link type).
    pub fn new(out: W, format: FileFormat, interfaces: &[Interface]) -> Result<Self, WriteError> {
        Ok(match format {
            FileFormat::Pcap(precision) => {
                let (link, snaplen) = interfaces
                    .first()
                    .map_or((LinkType::ETHERNET, 0), |i| (i.link, i.snaplen));
                PacketWriter::Pcap(PcapWriter::new(out, link, snaplen, precision)?)
            }
            FileFormat::Pcapng => {
                let mut w = PcapngWriter::new(out)?;
                for i in interfaces {
                    w.add_interface(i)?;
                }
                PacketWriter::Pcapng(w)
            }
        })
    }

    /// Declares another interface (pcapng) or checks that it matches the file's link type (pcap).
    pub fn add_interface(&mut self, spec: &Interface) -> Result<u32, WriteError> {
        match self {
            PacketWriter::Pcap(w) => {
                if spec.link != w.link() {
                    return Err(WriteError::MixedLinkTypes {
                        file: w.link(),
                        packet: spec.link,
                    });
                }
                Ok(0)
            }
            PacketWriter::Pcapng(w) => w.add_interface(spec),
        }
    }

    /// Writes one packet. For pcap, `meta.interface` is ignored.
    #[inline]
    pub fn write(&mut self, meta: &PacketMeta, data: &[u8]) -> Result<(), WriteError> {
        match self {
            PacketWriter::Pcap(w) => w.write(meta, data),
            PacketWriter::Pcapng(w) => w.write(meta, data),
        }
    }

    /// Writes one packet with a comment (pcapng's `opt_comment`, tshark's `frame.comment`).
    /// Returns false when the comment could not be stored: classic pcap has no place for it (the
    /// packet is written without it).
    #[inline]
    pub fn write_commented(
        &mut self,
        meta: &PacketMeta,
        data: &[u8],
        comment: &[u8],
    ) -> Result<bool, WriteError> {
        match self {
            PacketWriter::Pcap(w) => w.write(meta, data).map(|()| false),
            PacketWriter::Pcapng(w) => w.write_commented(meta, data, Some(comment)).map(|()| true),
        }
    }

    /// Writes one packet with its comments (pcapng: one `opt_comment` each, in order). Returns
    /// false when there were comments and they could not be stored: classic pcap has no place for
    /// them (the packet is written without them).
    #[inline]
    pub fn write_comments<'c, I>(
        &mut self,
        meta: &PacketMeta,
        data: &[u8],
        comments: I,
    ) -> Result<bool, WriteError>
    where
        I: IntoIterator<Item = &'c [u8]>,
        I::IntoIter: Clone,
    {
        match self {
            PacketWriter::Pcap(w) => {
                let none = comments.into_iter().next().is_none();
                w.write(meta, data).map(|()| none)
            }
            PacketWriter::Pcapng(w) => w.write_comments(meta, data, comments).map(|()| true),
        }
    }

    /// Writes one packet; a classic pcap of precision `unit` takes the timestamp fields `ts`
    /// (seconds, fraction in `unit`) as they are, instead of `meta.ts_ns`. For copying records
    /// between pcap files the way libpcap does (an out-of-range fraction stays as it was).
    #[inline]
    pub fn write_pcap_ts(
        &mut self,
        meta: &PacketMeta,
        ts: (u32, u32),
        unit: Precision,
        data: &[u8],
    ) -> Result<(), WriteError> {
        match self {
            PacketWriter::Pcap(w) if w.precision() == unit => {
                w.write_ts_fields(ts.0, ts.1, meta, data)
            }
            // libpcap reads nanoseconds at µs precision by dividing the field alone.
            PacketWriter::Pcap(w) if w.precision() == Precision::Micro => {
                w.write_ts_fields(ts.0, ts.1 / 1000, meta, data)
            }
            _ => self.write(meta, data),
        }
    }

    /// Writes out buffered data and flushes the output; the file goes on.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        match self {
            PacketWriter::Pcap(w) => w.flush(),
            PacketWriter::Pcapng(w) => w.flush(),
        }
    }

    /// Flushes buffered data and returns the output.
    pub fn finish(self) -> Result<W, WriteError> {
        match self {
            PacketWriter::Pcap(w) => w.finish(),
            PacketWriter::Pcapng(w) => w.finish(),
        }
    }
}
