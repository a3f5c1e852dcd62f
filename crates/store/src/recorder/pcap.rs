//! The classic pcap segment writer (nanosecond magic): each record is converted (16-byte pcap
//! header + data) into the aligned staging buffer, written a full buffer at a time; a segment
//! ends at its last whole packet (pcap has no padding).

use std::io;
use std::time::Instant;

use weir_pcap::Interface;

use super::{add, SegmentIo};
use crate::disk::{align_down, align_up, AlignedBuf};
use crate::RecordError;

/// The file header every segment starts with: nanosecond magic, the interfaces' one link type
/// and their largest snap length.
pub(super) fn file_header(interfaces: &[Interface]) -> Result<Vec<u8>, RecordError> {
    let link = interfaces[0].link;
    if interfaces.iter().any(|i| i.link != link) {
        return Err(RecordError::Config(
            "classic pcap holds one link type; record these interfaces as pcapng".into(),
        ));
    }
    let snaplen = interfaces.iter().map(|i| i.snaplen).max().unwrap_or(0);
    let mut h = Vec::with_capacity(24);
    h.extend_from_slice(&0xA1B2_3C4Du32.to_ne_bytes());
    h.extend_from_slice(&2u16.to_ne_bytes());
    h.extend_from_slice(&4u16.to_ne_bytes());
    h.extend_from_slice(&[0; 8]);
    h.extend_from_slice(&snaplen.to_ne_bytes());
    h.extend_from_slice(&link.0.to_ne_bytes());
    Ok(h)
}

/// A pcap segment being written.
pub(super) struct PcapSegment {
    /// Aligned file offset where the staging buffer starts.
    pub(super) file_done: u64,
    /// Bytes in the staging buffer.
    staged: usize,
}

impl PcapSegment {
    /// A segment whose file header is put in the staging buffer first.
    pub(super) fn new(stage: &mut AlignedBuf, file_header: &[u8]) -> PcapSegment {
        let h = file_header.len();
        stage.bytes_mut()[..h].copy_from_slice(file_header);
        PcapSegment {
            file_done: 0,
            staged: h,
        }
    }

    /// Its length so far (written and staged).
    pub(super) fn len(&self) -> u64 {
        self.file_done + self.staged as u64
    }

    /// Whether a packet of `caplen` bytes fits in a segment of `segment_size`.
    pub(super) fn fits(&self, caplen: usize, segment_size: u64) -> bool {
        self.len() + 16 + caplen as u64 <= segment_size
    }

    /// Appends one packet to the staging buffer, writing it out when full.
    pub(super) fn append(
        &mut self,
        io: &mut SegmentIo<'_>,
        ts: u64,
        data: &[u8],
        orig: u32,
    ) -> io::Result<()> {
        let rec = 16 + data.len();
        if self.staged + rec > io.stage.len() {
            let full = align_down(self.staged as u64) as usize;
            io.file
                .write_at(self.file_done, &[&io.stage.bytes_mut()[..full]])?;
            add(&io.stats.writes, 1);
            add(&io.stats.disk_bytes, full as u64);
            *io.last_write = Instant::now();
            io.stage.bytes_mut().copy_within(full..self.staged, 0);
            self.file_done += full as u64;
            self.staged -= full;
        }
        let s = &mut io.stage.bytes_mut()[self.staged..self.staged + rec];
        s[0..4].copy_from_slice(&((ts / 1_000_000_000) as u32).to_ne_bytes());
        s[4..8].copy_from_slice(&((ts % 1_000_000_000) as u32).to_ne_bytes());
        s[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        s[12..16].copy_from_slice(&orig.to_ne_bytes());
        s[16..].copy_from_slice(data);
        self.staged += rec;
        io.info.packets += 1;
        io.info.first_ns.get_or_insert(ts);
        io.info.last_ns = Some(ts);
        add(&io.stats.packets, 1);
        add(&io.stats.packet_bytes, data.len() as u64);
        Ok(())
    }

    /// Writes the staging buffer's whole blocks plus its partial last block (zero-filled), then
    /// cuts the file at its real length. The staging buffer keeps the partial block, which is
    /// rewritten when more packets follow.
    pub(super) fn flush(&mut self, io: &mut SegmentIo<'_>, sync: bool) -> io::Result<()> {
        let to = align_up(self.staged as u64) as usize;
        let stage = io.stage.bytes_mut();
        stage[self.staged..to].fill(0);
        if to > 0 {
            io.file.write_at(self.file_done, &[&stage[..to]])?;
            add(&io.stats.writes, 1);
            add(&io.stats.disk_bytes, to as u64);
        }
        io.file.truncate(self.len())?;
        if sync {
            io.file.sync()?;
        }
        let full = align_down(self.staged as u64) as usize;
        stage.copy_within(full..self.staged, 0);
        self.file_done += full as u64;
        self.staged -= full;
        io.info.bytes = self.len();
        *io.last_write = Instant::now();
        Ok(())
    }
}
