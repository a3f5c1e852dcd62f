//! The pcapng segment writer: the buffer's records are the file's blocks, written from the
//! buffer without a copy (see the [recorder](super)'s layout: buffer offset `o` lands at file
//! offset `hdr + (o − s0) ≡ o (mod ALIGN)`); only the first block of a segment (header + first
//! records), its last block (last records + end padding), and the periodic flush of a partial
//! tail go through the staging buffer. A segment is padded to its exact size.

use std::io;
use std::time::Instant;

use weir_buffer::pcapng::{write_padding, write_padding_run, MIN_BLOCK_LEN};
use weir_pcap::{Interface, PcapngWriter};

use super::{add, Ring, SegmentIo};
use crate::disk::{align_down, align_up, AlignedBuf, SegmentFile, ALIGN};
use crate::RecordError;

/// The section header and interface blocks every segment starts with.
pub(super) fn file_header(interfaces: &[Interface]) -> Result<Vec<u8>, RecordError> {
    let err = |e: weir_pcap::WriteError| RecordError::Io(format!("segment header: {e}"));
    let mut w = PcapngWriter::new(Vec::new()).map_err(err)?;
    for i in interfaces {
        w.add_interface(i).map_err(err)?;
    }
    w.finish().map_err(err)
}

/// Staging buffer size: the first or last block of a segment (a header, or a record plus the
/// end padding).
pub(super) fn stage_len(file_header: &[u8], max_caplen: u32) -> usize {
    align_up(file_header.len() as u64 + 2 * ALIGN as u64) as usize
        + align_up(u64::from(max_caplen) + 2 * ALIGN as u64) as usize
}

/// How a pcapng write ends.
#[derive(Clone, Copy, Debug)]
pub(super) enum End {
    /// Write aligned runs only; the tail waits.
    Open,
    /// Write the tail too, then padding up to file offset `to`; `permanent` when the segment
    /// ends there (otherwise the tail is rewritten later, when more data follows).
    Pad { to: u64, permanent: bool },
    /// Write the tail and cut the file right after it (the last segment of a run).
    Cut,
}

/// A pcapng segment being written.
pub(super) struct PcapngSegment {
    /// Buffer offset of the first record.
    s0: u64,
    /// Header bytes (file offsets `[0, hdr)`), `hdr ≡ s0 (mod ALIGN)`.
    header: Vec<u8>,
    /// File bytes `[0, done)` are final on disk; `done` is aligned.
    pub(super) done: u64,
    /// Buffer offset up to which data is on disk (final or padded temporarily).
    pub(super) visible: u64,
    /// `(A, B, packets before B, last ts before B)`: for the aligned buffer offset `A`, the
    /// largest record boundary `B ≤ A`.
    cover: Option<(u64, u64, u64, Option<u64>)>,
    /// Packets of this segment below the release point, and the last timestamp among them.
    pub(super) safe_packets: u64,
    pub(super) safe_last: Option<u64>,
}

impl PcapngSegment {
    /// A segment whose first record is at buffer offset `s0`: its header is `file_header` plus
    /// a padding block (stamped `ts`) that makes `hdr ≡ s0 (mod ALIGN)`.
    pub(super) fn new(s0: u64, file_header: &[u8], ts: u64) -> PcapngSegment {
        let base = file_header.len() as u64;
        // hdr ≡ s0 (mod ALIGN), with room for a padding block when not already equal.
        let mut pad = s0.wrapping_sub(base) % ALIGN as u64;
        if pad != 0 && pad < MIN_BLOCK_LEN as u64 {
            pad += ALIGN as u64;
        }
        let mut header = file_header.to_vec();
        let at = header.len();
        header.resize(at + pad as usize, 0);
        if pad > 0 {
            write_padding(&mut header[at..], ts);
        }
        PcapngSegment {
            s0,
            header,
            done: 0,
            visible: s0,
            cover: None,
            safe_packets: 0,
            safe_last: None,
        }
    }

    pub(super) fn hdr(&self) -> u64 {
        self.header.len() as u64
    }

    /// File offset of buffer offset `o`.
    pub(super) fn fo(&self, o: u64) -> u64 {
        self.hdr() + o.wrapping_sub(self.s0)
    }

    /// Buffer offset of file offset `f ≥ hdr`.
    fn ro(&self, f: u64) -> u64 {
        self.s0.wrapping_add(f - self.hdr())
    }

    /// Buffer offset of the first record.
    pub(super) fn s0(&self) -> u64 {
        self.s0
    }

    /// Whether a block ending at buffer offset `end` fits in a segment of `segment_size`
    /// (exactly, or leaving room for a padding block).
    pub(super) fn fits(&self, end: u64, segment_size: u64) -> bool {
        let e = self.fo(end);
        e == segment_size || e + MIN_BLOCK_LEN as u64 <= segment_size
    }

    /// Notes a block `[offset, end)` just accounted for: `packets` and `last` are the
    /// segment's counts after it, `before` and `last_before` before it.
    pub(super) fn note_block(
        &mut self,
        offset: u64,
        end: u64,
        len: u32,
        (before, last_before): (u64, Option<u64>),
        (packets, last): (u64, Option<u64>),
    ) {
        let a = align_down(end);
        if a == end {
            self.cover = Some((a, end, packets, last));
        } else if a >= offset && a.wrapping_sub(offset) < u64::from(len) {
            self.cover = Some((a, offset, before, last_before));
        }
    }

    /// Writes the file bytes of the segment from its `done` offset up to buffer offset `upto`
    /// (a record boundary), ending as `end` says (padding stamped `ts`). Returns the new release
    /// point when it moved.
    pub(super) fn write(
        &mut self,
        io: &mut SegmentIo<'_>,
        ring: &Ring<'_>,
        upto: u64,
        end: End,
        ts: u64,
    ) -> io::Result<Option<u64>> {
        let data_end = self.fo(upto);
        let hdr_blocks = align_up(self.hdr());
        let mut writes = 0u64;
        let mut bytes = 0u64;
        let mut release = None;
        let staged = Staged { ring, data_end, ts };
        // 1. The first block(s): header and first records, staged.
        if self.done < hdr_blocks && data_end >= hdr_blocks {
            bytes += staged.write(io.stage, io.file, self, 0, hdr_blocks, false)?;
            writes += 1;
            self.done = hdr_blocks;
        }
        // 2. Aligned runs straight from the buffer.
        let direct_end = align_down(data_end);
        if self.done >= hdr_blocks && direct_end > self.done {
            let parts = ring.range(self.ro(self.done), self.ro(direct_end));
            let parts: Vec<&[u8]> = parts.into_iter().filter(|p| !p.is_empty()).collect();
            io.file.write_at(self.done, &parts)?;
            writes += parts.len() as u64;
            bytes += direct_end - self.done;
            self.done = direct_end;
        }
        // 3. The tail: padded (to the segment's end, or temporarily to the next aligned
        // offset), or zero-filled and then cut at the data's end.
        let (to, pad) = match end {
            End::Open => (self.done, false),
            End::Pad { to, .. } => (to, true),
            End::Cut => (align_up(data_end), false),
        };
        if to > self.done {
            bytes += staged.write(io.stage, io.file, self, self.done, to, pad)?;
            writes += 1;
        }
        match end {
            End::Pad {
                permanent: true, ..
            } => self.done = to,
            End::Cut => io.file.truncate(data_end)?,
            _ => {}
        }
        if !matches!(end, End::Open) {
            self.visible = upto;
        } else if self.done >= hdr_blocks {
            self.visible = self.visible.max(self.ro(self.done));
        }
        add(&io.stats.writes, writes);
        add(&io.stats.disk_bytes, bytes);
        *io.last_write = Instant::now();
        // Give back what is on disk for good.
        match end {
            End::Cut
            | End::Pad {
                permanent: true, ..
            } => {
                release = Some(upto);
                self.safe_packets = io.info.packets;
                self.safe_last = io.info.last_ns;
            }
            _ => {
                if let Some((a, b, packets, last)) = self.cover {
                    if self.done >= hdr_blocks && a == self.ro(self.done) {
                        release = Some(b);
                        self.safe_packets = packets;
                        self.safe_last = last;
                    }
                }
            }
        }
        io.info.bytes = io.info.bytes.max(self.fo(self.visible));
        Ok(release)
    }
}

/// The bytes of a pcapng segment that go through the staging buffer: header bytes below
/// `hdr`, buffer bytes up to `data_end`, then padding blocks or zeros.
struct Staged<'r, 'a> {
    ring: &'r Ring<'a>,
    data_end: u64,
    ts: u64,
}

impl Staged<'_, '_> {
    /// Fills the staging buffer with file bytes `[from, to)` (padding after the data when
    /// `pad`, zeros otherwise) and writes them at `from`. Returns the bytes written.
    fn write(
        &self,
        stage: &mut AlignedBuf,
        file: &SegmentFile,
        n: &PcapngSegment,
        from: u64,
        to: u64,
        pad: bool,
    ) -> io::Result<u64> {
        let len = (to - from) as usize;
        let out = &mut stage.bytes_mut()[..len];
        let hdr = n.hdr();
        let mut f = from;
        let mut i = 0;
        if f < hdr {
            let k = (hdr.min(to) - f) as usize;
            out[..k].copy_from_slice(&n.header[f as usize..f as usize + k]);
            f += k as u64;
            i += k;
        }
        let data_end = self.data_end.min(to);
        if f < data_end {
            for part in self.ring.range(n.ro(f), n.ro(data_end)) {
                out[i..i + part.len()].copy_from_slice(part);
                i += part.len();
            }
        }
        if i < len {
            if pad {
                write_padding_run(&mut out[i..], self.ts);
            } else {
                out[i..].fill(0);
            }
        }
        file.write_at(from, &[out])?;
        Ok(len as u64)
    }
}
