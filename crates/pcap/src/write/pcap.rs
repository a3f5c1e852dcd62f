//! Classic pcap writer: a 24-byte header, then a 16-byte record header before each packet, in this
//! machine's byte order.

use std::io::{BufWriter, Write};

use weir_packet::{split_ns, LinkType, PacketMeta};

use super::WriteError;
use crate::format::Precision;

/// Snap length written when none is known: libpcap's maximum.
const DEFAULT_SNAPLEN: u32 = 262_144;

/// Buffer size between the writer and the output: large writes, few syscalls.
pub(crate) const BUFFER: usize = 1 << 20;

/// Streams packets into a classic pcap file.
pub struct PcapWriter<W: Write> {
    out: BufWriter<W>,
    link: LinkType,
    precision: Precision,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header.
    pub fn new(
        out: W,
        link: LinkType,
        snaplen: u32,
        precision: Precision,
    ) -> Result<Self, WriteError> {
        let mut out = BufWriter::with_capacity(BUFFER, out);
        let magic: u32 = match precision {
            Precision::Nano => 0xa1b2_3c4d,
            Precision::Micro => 0xa1b2_c3d4,
        };
        let snaplen = if snaplen == 0 {
            DEFAULT_SNAPLEN
        } else {
            snaplen
        };
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&magic.to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        h[16..20].copy_from_slice(&snaplen.to_ne_bytes());
        h[20..24].copy_from_slice(&link.0.to_ne_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter {
            out,
            link,
            precision,
        })
    }

    /// The file's link type.
    pub fn link(&self) -> LinkType {
        self.link
    }

    /// The file's timestamp precision.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// Appends one packet.
    #[inline]
    pub fn write(&mut self, meta: &PacketMeta, data: &[u8]) -> Result<(), WriteError> {
        let (sec, ns) = split_ns(meta.ts_ns);
        let frac = match self.precision {
            Precision::Nano => ns,
            Precision::Micro => ns / 1000,
        };
        // pcap seconds are 32-bit: times past 2106 wrap, as in every pcap writer.
        self.write_ts_fields(sec as u32, frac, meta, data)
    }

    /// Appends one packet with the given timestamp fields (seconds, fraction in this file's
    /// unit) instead of `meta.ts_ns`: a pcap record copied from a pcap file of the same unit keeps
    /// its fields as they were, an out-of-range fraction included (what libpcap does).
    #[inline]
    pub fn write_ts_fields(
        &mut self,
        sec: u32,
        frac: u32,
        meta: &PacketMeta,
        data: &[u8],
    ) -> Result<(), WriteError> {
        let caplen = u32::try_from(data.len()).map_err(|_| WriteError::TooLarge(data.len()))?;
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&sec.to_ne_bytes());
        h[4..8].copy_from_slice(&frac.to_ne_bytes());
        h[8..12].copy_from_slice(&caplen.to_ne_bytes());
        h[12..16].copy_from_slice(&meta.orig_len.to_ne_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(data)?;
        Ok(())
    }

    /// Writes out what is buffered and flushes the output (a live capture with nothing to write
    /// lets its reader see the packets so far).
    pub fn flush(&mut self) -> Result<(), WriteError> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes and returns the output.
    pub fn finish(self) -> Result<W, WriteError> {
        self.out
            .into_inner()
            .map_err(|e| WriteError::Io(e.into_error()))
    }
}
