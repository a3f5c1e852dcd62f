//! [`FileFormat`]: the format of a packet file, the same type for what the reader found and
//! what a writer writes.

/// Timestamp precision of a classic pcap file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Precision {
    /// Nanoseconds (magic a1b23c4d), weir's default: no information is lost.
    #[default]
    Nano,
    /// Microseconds (magic a1b2c3d4), for old readers; nanoseconds are truncated.
    Micro,
}

/// The format of a packet file: what [`FileReader::format`](crate::FileReader::format) found,
/// and what [`PacketWriter::new`](crate::PacketWriter::new) writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// Classic pcap with this timestamp precision.
    Pcap(Precision),
    /// pcapng (a writer writes nanosecond resolution).
    Pcapng,
}

impl FileFormat {
    /// Short name for humans: "pcap", "pcap (ns)", "pcapng".
    pub fn name(&self) -> &'static str {
        match self {
            FileFormat::Pcap(Precision::Nano) => "pcap (ns)",
            FileFormat::Pcap(Precision::Micro) => "pcap",
            FileFormat::Pcapng => "pcapng",
        }
    }
}
