//! The recorder loop: one thread reading the packet buffer as a registered reader and writing
//! segments.
//!
//! # pcapng: from the buffer to the file without a copy
//!
//! `O_DIRECT` wants file offsets, lengths and memory addresses aligned to the disk's block
//! size ([`ALIGN`]). The buffer is mapped at an aligned address and its size is a power of two,
//! so the bytes of buffer offset `o` sit at an address congruent to `o` modulo `ALIGN`. A
//! segment whose first record is at buffer offset `s0` gets a header (section header,
//! interface blocks, then one padding block) of exactly `hdr` bytes with `hdr ≡ s0 (mod
//! ALIGN)`; buffer offset `o` then lands at file offset `hdr + (o − s0) ≡ o`, and every aligned
//! run of the buffer is an aligned run of the file. The recorder writes such runs directly from
//! the buffer (at least [`Options::write_size`] at a time); only the first block of a segment
//! (header + first records), its last block (last records + end padding), and the periodic
//! flush of a partial tail go through a small aligned staging buffer.
//!
//! Space is released to the capture threads only once it is on disk: up to the last record
//! boundary at or below the last aligned byte written.
//!
//! A segment holds whole records: a record that would end past the segment's size (or leave a
//! gap under 32 bytes, the smallest padding block) starts the next segment, and the gap is filled
//! with padding blocks. Every segment thus has exactly the configured size, except the last one
//! of a run, which ends at its last record.
//!
//! # pcap
//!
//! Records are converted (16-byte pcap header + data) into the aligned staging buffer, written
//! a full buffer at a time; a segment ends at its last whole packet (pcap has no padding).

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_buffer::pcapng::{write_padding, write_padding_run, MIN_BLOCK_LEN};
use weir_buffer::{Block, Reader};
use weir_index::{head_hash, index_path, IndexBuilder, HEAD_LEN};
use weir_packet::LinkType;
use weir_pcap::{Interface, PcapngWriter};

use crate::disk::{align_down, align_up, AlignedBuf, SegmentFile, ALIGN};
use crate::manifest::{InterfaceInfo, SegmentInfo, SegmentState};
use crate::store::{segment_name, Store};
use crate::{Format, RecordError};

/// A source of the drops counted upstream of the recorder (kernel and buffer), sampled at
/// segment boundaries to attribute drops to segments.
pub type DropCounter = Arc<dyn Fn() -> u64 + Send + Sync>;

/// How to record.
#[derive(Clone)]
pub struct Options {
    /// Segment file format.
    pub format: Format,
    /// Size of a full segment in bytes (a multiple of 4096, at least 1 MiB).
    pub segment_size: u64,
    /// The interfaces, in interface-id order (the buffer's records carry the id).
    pub interfaces: Vec<Interface>,
    /// Delete the oldest segments while the store holds more than this.
    pub max_bytes: Option<u64>,
    /// Delete segments whose last packet is older than this (ns), measured against the newest
    /// packet recorded (so importing old files ages them by their own clock).
    pub max_age_ns: Option<u64>,
    /// Bytes per direct write (at least 1 MiB; a multiple of 4096).
    pub write_size: usize,
    /// Longest a recorded packet waits before it is on disk (flushed with padding).
    pub flush_interval: Duration,
    /// Drops counted upstream (kernel, buffer), for the per-segment drop counts.
    pub upstream_drops: Option<DropCounter>,
    /// Largest captured length a record may have (for repairing pcap segments).
    pub max_caplen: u32,
    /// Index each segment while writing it, with chunks of this many bytes (`None`: no index).
    pub index_chunk: Option<u32>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("format", &self.format)
            .field("segment_size", &self.segment_size)
            .field("max_bytes", &self.max_bytes)
            .field("max_age_ns", &self.max_age_ns)
            .field("write_size", &self.write_size)
            .finish()
    }
}

impl Options {
    /// pcapng, 1 GiB segments, 4 MiB writes, a flush every second.
    pub fn new(interfaces: Vec<Interface>) -> Options {
        Options {
            format: Format::Pcapng,
            segment_size: 1 << 30,
            interfaces,
            max_bytes: None,
            max_age_ns: None,
            write_size: 4 << 20,
            flush_interval: Duration::from_secs(1),
            upstream_drops: None,
            max_caplen: 262_144,
            index_chunk: Some(weir_index::DEFAULT_CHUNK),
        }
    }
}

/// Live counters of a recorder, read by the statistics thread. One writer (the recorder
/// thread) per field: relaxed load + store.
#[derive(Debug, Default)]
pub struct RecorderStats {
    /// Packets recorded (in a segment, on disk or about to be).
    pub packets: AtomicU64,
    /// Their captured bytes.
    pub packet_bytes: AtomicU64,
    /// Bytes written to disk (headers, padding and rewrites of flushed tails included).
    pub disk_bytes: AtomicU64,
    /// Write system calls.
    pub writes: AtomicU64,
    /// Packets the recorder could not write (disk full, write errors).
    pub dropped: AtomicU64,
    /// Segments started.
    pub segments: AtomicU64,
    /// Segments deleted by retention.
    pub deleted: AtomicU64,
    /// Whether the current segment is written with `O_DIRECT`.
    pub direct: AtomicBool,
    /// Whether writing has stopped on a disk error.
    pub failed: AtomicBool,
}

fn add(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// What a recorder did, when it stops.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Packets recorded.
    pub packets: u64,
    /// Packets it could not write.
    pub dropped: u64,
    /// Bytes written to disk.
    pub disk_bytes: u64,
    /// Segments written in this run.
    pub segments: u64,
    /// Segments deleted by retention.
    pub deleted: u64,
    /// Whether every segment was written with `O_DIRECT`.
    pub direct: bool,
    /// The disk error that stopped writing, if any.
    pub error: Option<String>,
}

/// The buffer bytes of a batch, addressed by buffer offset.
struct Ring<'a> {
    start: u64,
    a: &'a [u8],
    b: &'a [u8],
}

impl<'a> Ring<'a> {
    /// The bytes of `[from, to)`: one slice, or two when the range wraps.
    fn range(&self, from: u64, to: u64) -> [&'a [u8]; 2] {
        let i = from.wrapping_sub(self.start) as usize;
        let j = to.wrapping_sub(self.start) as usize;
        let la = self.a.len();
        [
            &self.a[i.min(la)..j.min(la)],
            &self.b[i.saturating_sub(la)..j.saturating_sub(la)],
        ]
    }
}

/// How a pcapng write ends.
#[derive(Clone, Copy, Debug)]
enum End {
    /// Write aligned runs only; the tail waits.
    Open,
    /// Write the tail too, then padding up to file offset `to`; `permanent` when the segment
    /// ends there (otherwise the tail is rewritten later, when more data follows).
    Pad { to: u64, permanent: bool },
    /// Write the tail and cut the file right after it (the last segment of a run).
    Cut,
}

/// The segment being written.
struct Segment {
    file: SegmentFile,
    path: std::path::PathBuf,
    index: Option<IndexBuilder>,
    info: SegmentInfo,
    /// Upstream + recorder drops when it was opened.
    drops_at_open: u64,
    last_write: Instant,
    kind: Kind,
}

enum Kind {
    Ng(NgSegment),
    Pcap(PcapSegment),
}

struct NgSegment {
    /// Buffer offset of the first record.
    s0: u64,
    /// Header bytes (file offsets `[0, hdr)`), `hdr ≡ s0 (mod ALIGN)`.
    header: Vec<u8>,
    /// File bytes `[0, done)` are final on disk; `done` is aligned.
    done: u64,
    /// Buffer offset up to which data is on disk (final or padded temporarily).
    visible: u64,
    /// `(A, B, packets before B, last ts before B)`: for the aligned buffer offset `A`, the
    /// largest record boundary `B ≤ A`.
    cover: Option<(u64, u64, u64, Option<u64>)>,
    /// Packets of this segment below the release point, and the last timestamp among them.
    safe_packets: u64,
    safe_last: Option<u64>,
}

impl NgSegment {
    fn hdr(&self) -> u64 {
        self.header.len() as u64
    }

    /// File offset of buffer offset `o`.
    fn fo(&self, o: u64) -> u64 {
        self.hdr() + o.wrapping_sub(self.s0)
    }

    /// Buffer offset of file offset `f ≥ hdr`.
    fn ro(&self, f: u64) -> u64 {
        self.s0.wrapping_add(f - self.hdr())
    }
}

struct PcapSegment {
    /// Aligned file offset where the staging buffer starts.
    file_done: u64,
    /// Bytes in the staging buffer.
    staged: usize,
}

impl PcapSegment {
    fn len(&self) -> u64 {
        self.file_done + self.staged as u64
    }
}

/// The recorder: owns the store and the segment being written.
pub struct Recorder {
    store: Store,
    opts: Options,
    stats: Arc<RecorderStats>,
    /// Buffer offset after the last block accounted for.
    walked: Option<u64>,
    /// Buffer offset (a record boundary) up to which space can be given back.
    release: u64,
    seg: Option<Segment>,
    failed_since: Option<Instant>,
    error: Option<String>,
    all_direct: bool,
    stage: AlignedBuf,
    /// Section header and interface blocks (pcapng), or the file header (pcap).
    file_header: Vec<u8>,
    newest_ns: u64,
    last_manifest: Instant,
}

/// How long writing pauses after a disk error before a new segment is tried.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How often the manifest entry of the segment being written is refreshed.
const MANIFEST_PERIOD: Duration = Duration::from_secs(5);

impl Recorder {
    /// A recorder writing into `store`.
    pub fn new(store: Store, opts: Options) -> Result<Recorder, RecordError> {
        if opts.segment_size % ALIGN as u64 != 0 || opts.segment_size < 1 << 20 {
            return Err(RecordError::Config(format!(
                "segment size {} must be a multiple of 4096 and at least 1 MiB",
                opts.segment_size
            )));
        }
        if opts.write_size % ALIGN != 0 || opts.write_size < 1 << 20 {
            return Err(RecordError::Config(format!(
                "write size {} must be a multiple of 4096 and at least 1 MiB",
                opts.write_size
            )));
        }
        if opts.interfaces.is_empty() {
            return Err(RecordError::Config("no interface to record".into()));
        }
        let file_header = match opts.format {
            Format::Pcapng => {
                let mut w = PcapngWriter::new(Vec::new())
                    .map_err(|e| RecordError::Io(format!("segment header: {e}")))?;
                for i in &opts.interfaces {
                    w.add_interface(i)
                        .map_err(|e| RecordError::Io(format!("segment header: {e}")))?;
                }
                w.finish()
                    .map_err(|e| RecordError::Io(format!("segment header: {e}")))?
            }
            Format::Pcap => {
                let link = opts.interfaces[0].link;
                if opts.interfaces.iter().any(|i| i.link != link) {
                    return Err(RecordError::Config(
                        "classic pcap holds one link type; record these interfaces as pcapng"
                            .into(),
                    ));
                }
                let snaplen = opts.interfaces.iter().map(|i| i.snaplen).max().unwrap_or(0);
                let mut h = Vec::with_capacity(24);
                h.extend_from_slice(&0xA1B2_3C4Du32.to_ne_bytes());
                h.extend_from_slice(&2u16.to_ne_bytes());
                h.extend_from_slice(&4u16.to_ne_bytes());
                h.extend_from_slice(&[0; 8]);
                h.extend_from_slice(&snaplen.to_ne_bytes());
                h.extend_from_slice(&link.0.to_ne_bytes());
                h
            }
        };
        // pcapng staging: the first or last block of a segment (a header, or a record plus the
        // end padding); pcap staging: a whole write.
        let stage_len = match opts.format {
            Format::Pcapng => {
                align_up(file_header.len() as u64 + 2 * ALIGN as u64) as usize
                    + align_up(opts.max_caplen as u64 + 2 * ALIGN as u64) as usize
            }
            Format::Pcap => opts.write_size,
        };
        let mut store = store;
        store.manifest.interfaces = opts.interfaces.iter().map(InterfaceInfo::from).collect();
        store.save()?;
        Ok(Recorder {
            store,
            stats: Arc::default(),
            walked: None,
            release: 0,
            seg: None,
            failed_since: None,
            error: None,
            all_direct: true,
            stage: AlignedBuf::new(stage_len),
            file_header,
            newest_ns: 0,
            last_manifest: Instant::now(),
            opts,
        })
    }

    /// The live counters.
    pub fn stats(&self) -> Arc<RecorderStats> {
        self.stats.clone()
    }

    /// The store's manifest as it stands.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Records until `stop` is set and everything committed to the buffer is written. Set
    /// `stop` only once the capture threads have stopped pushing.
    pub fn run(&mut self, reader: &mut Reader, stop: &AtomicBool) -> Result<Summary, RecordError> {
        loop {
            if self.step(reader)? {
                continue;
            }
            if stop.load(Ordering::Acquire) {
                // Writers are done: one last look, then finish.
                if self.step(reader)? {
                    continue;
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.finish(reader)
    }

    /// Processes what the buffer holds; returns whether there was anything new.
    pub fn step(&mut self, reader: &mut Reader) -> Result<bool, RecordError> {
        let Some(batch) = reader.next_batch() else {
            return Ok(false);
        };
        let walked = *self.walked.get_or_insert(batch.start());
        if self.seg.is_none() {
            // Nothing is held for a segment: everything before `walked` was handed on.
            self.release = walked;
        }
        let (a, b) = batch.bytes();
        let ring = Ring {
            start: batch.start(),
            a,
            b,
        };
        let new = batch.end() != walked;
        if new {
            for blk in batch.blocks(walked) {
                self.block(&ring, &blk)?;
            }
            self.walked = Some(batch.end());
            self.write_ready(&ring)?;
        } else {
            self.write_ready(&ring)?;
        }
        if self.seg.is_none() {
            self.release = batch.end();
        }
        batch.release_before(self.release);
        if self.last_manifest.elapsed() >= MANIFEST_PERIOD {
            self.refresh_manifest()?;
        }
        Ok(new)
    }

    fn upstream_drops(&self) -> u64 {
        self.opts.upstream_drops.as_ref().map_or(0, |f| f())
            + self.stats.dropped.load(Ordering::Relaxed)
    }

    /// Accounts one block: opens and closes segments around it, counts it.
    fn block(&mut self, ring: &Ring<'_>, blk: &Block<'_>) -> Result<(), RecordError> {
        let end = blk.offset.wrapping_add(u64::from(blk.len));
        if let Some(p) = &blk.packet {
            self.newest_ns = self.newest_ns.max(p.ts_ns());
        }
        if let Some(since) = self.failed_since {
            if since.elapsed() < RETRY_AFTER || blk.packet.is_none() {
                if blk.packet.is_some() {
                    add(&self.stats.dropped, 1);
                }
                self.release = end;
                return Ok(());
            }
            self.failed_since = None;
            self.stats.failed.store(false, Ordering::Relaxed);
        }
        // Does the block fit in the current segment?
        let fits = match self.seg.as_ref().map(|s| &s.kind) {
            None => true,
            Some(Kind::Ng(n)) => {
                let e = n.fo(end);
                e == self.opts.segment_size || e + MIN_BLOCK_LEN as u64 <= self.opts.segment_size
            }
            Some(Kind::Pcap(p)) => match &blk.packet {
                Some(r) => p.len() + 16 + r.data().len() as u64 <= self.opts.segment_size,
                None => true,
            },
        };
        if !fits {
            self.close(ring, blk.offset, true)?;
            if self.failed_since.is_some() {
                if blk.packet.is_some() {
                    add(&self.stats.dropped, 1);
                }
                self.release = end;
                return Ok(());
            }
        }
        if self.seg.is_none() {
            if blk.packet.is_none() {
                // Padding before a segment starts: nothing to keep.
                self.release = end;
                return Ok(());
            }
            if let Err(e) = self.open(blk) {
                self.fail(e, "cannot start a segment");
                add(&self.stats.dropped, 1);
                self.release = end;
                return Ok(());
            }
        }
        let link = |iface: u32| {
            self.opts
                .interfaces
                .get(iface as usize)
                .map_or(LinkType::ETHERNET, |i| i.link)
        };
        let link = blk.packet.as_ref().map(|p| link(p.iface()));
        let seg = self.seg.as_mut().expect("a segment is open");
        match (&mut seg.kind, &blk.packet) {
            (Kind::Ng(n), _) => {
                if let (Some(ix), Some(p), Some(link)) = (&mut seg.index, &blk.packet, link) {
                    ix.add(n.fo(blk.offset), p.ts_ns(), link, p.data());
                }
                let before = seg.info.packets;
                let last_before = seg.info.last_ns;
                if let Some(p) = &blk.packet {
                    seg.info.packets += 1;
                    seg.info.first_ns.get_or_insert(p.ts_ns());
                    seg.info.last_ns = Some(p.ts_ns());
                    add(&self.stats.packets, 1);
                    add(&self.stats.packet_bytes, p.data().len() as u64);
                }
                let a = align_down(end);
                if a == end {
                    n.cover = Some((a, end, seg.info.packets, seg.info.last_ns));
                } else if a >= blk.offset && a.wrapping_sub(blk.offset) < u64::from(blk.len) {
                    n.cover = Some((a, blk.offset, before, last_before));
                }
            }
            (Kind::Pcap(_), None) => {}
            (Kind::Pcap(pc), Some(p)) => {
                let (ts, data, orig) = (p.ts_ns(), p.data(), p.orig_len());
                if let (Some(ix), Some(link)) = (&mut seg.index, link) {
                    ix.add(pc.len(), ts, link, data);
                }
                if let Err(e) = self.pcap_append(ts, data, orig) {
                    self.fail_segment(e);
                    add(&self.stats.dropped, 1);
                }
            }
        }
        if matches!(
            self.seg.as_ref().map(|s| &s.kind),
            Some(Kind::Pcap(_)) | None
        ) {
            // pcap records are copied out of the buffer as they are read.
            self.release = end;
        }
        Ok(())
    }

    /// Starts a segment whose first record is `blk`.
    fn open(&mut self, blk: &Block<'_>) -> io::Result<()> {
        let ts = blk.packet.as_ref().map_or(self.newest_ns, |p| p.ts_ns());
        let seq = self.store.take_seq();
        let name = segment_name(ts, seq, self.opts.format);
        let path = self.store.dir().join(&name);
        let file = SegmentFile::create(&path, self.opts.segment_size)?;
        if !file.direct() && self.all_direct {
            tracing::warn!(
                "{}: the filesystem refuses O_DIRECT; writing through the page cache",
                self.store.dir().display()
            );
        }
        self.all_direct &= file.direct();
        self.stats.direct.store(file.direct(), Ordering::Relaxed);
        let kind = match self.opts.format {
            Format::Pcapng => {
                let s0 = blk.offset;
                let base = self.file_header.len() as u64;
                // hdr ≡ s0 (mod ALIGN), with room for a padding block when not already equal.
                let mut pad = s0.wrapping_sub(base) % ALIGN as u64;
                if pad != 0 && pad < MIN_BLOCK_LEN as u64 {
                    pad += ALIGN as u64;
                }
                let mut header = self.file_header.clone();
                let at = header.len();
                header.resize(at + pad as usize, 0);
                if pad > 0 {
                    write_padding(&mut header[at..], ts);
                }
                Kind::Ng(NgSegment {
                    s0,
                    header,
                    done: 0,
                    visible: s0,
                    cover: None,
                    safe_packets: 0,
                    safe_last: None,
                })
            }
            Format::Pcap => {
                let h = self.file_header.len();
                self.stage.bytes_mut()[..h].copy_from_slice(&self.file_header);
                Kind::Pcap(PcapSegment {
                    file_done: 0,
                    staged: h,
                })
            }
        };
        let info = SegmentInfo {
            file: name,
            seq,
            state: SegmentState::Open,
            first_ns: None,
            last_ns: None,
            packets: 0,
            bytes: 0,
            drops: 0,
            index_bytes: 0,
        };
        self.store.put(info.clone());
        self.store
            .save()
            .map_err(|e| io::Error::other(e.to_string()))?;
        add(&self.stats.segments, 1);
        self.seg = Some(Segment {
            file,
            path,
            index: self.opts.index_chunk.map(IndexBuilder::new),
            info,
            drops_at_open: self.upstream_drops(),
            last_write: Instant::now(),
            kind,
        });
        Ok(())
    }

    /// Writes what is due: aligned runs once a full write is ready, and the padded tail when
    /// the flush interval has passed.
    fn write_ready(&mut self, ring: &Ring<'_>) -> Result<(), RecordError> {
        let Some(seg) = &self.seg else { return Ok(()) };
        let walked = self.walked.expect("walked");
        let due = seg.last_write.elapsed() >= self.opts.flush_interval;
        let result = match &seg.kind {
            Kind::Ng(n) => {
                let end = n.fo(walked);
                if align_down(end) >= n.done + self.opts.write_size as u64 {
                    self.ng_write(ring, walked, End::Open)
                } else if due && n.visible != walked {
                    // Pad the tail to the next aligned offset (a padding block needs 32 bytes).
                    let mut to = align_up(end);
                    if to != end && to - end < MIN_BLOCK_LEN as u64 {
                        to += ALIGN as u64;
                    }
                    self.ng_write(
                        ring,
                        walked,
                        End::Pad {
                            to,
                            permanent: false,
                        },
                    )
                } else {
                    Ok(())
                }
            }
            Kind::Pcap(p) => {
                if due && p.len() != seg.info.bytes {
                    self.pcap_flush(false)
                } else {
                    Ok(())
                }
            }
        };
        if let Err(e) = result {
            self.fail_segment(e);
        }
        Ok(())
    }

    /// Writes the file bytes of the pcapng segment from its `done` offset up to buffer offset
    /// `upto` (a record boundary), ending as `end` says, then moves the release point.
    fn ng_write(&mut self, ring: &Ring<'_>, upto: u64, end: End) -> io::Result<()> {
        let seg = self.seg.as_mut().expect("open segment");
        let Kind::Ng(n) = &mut seg.kind else {
            unreachable!("pcapng segment")
        };
        let data_end = n.fo(upto);
        let hdr_blocks = align_up(n.hdr());
        let mut writes = 0u64;
        let mut bytes = 0u64;
        let staged = Staged {
            ring,
            data_end,
            ts: self.newest_ns,
        };
        // 1. The first block(s): header and first records, staged.
        if n.done < hdr_blocks && data_end >= hdr_blocks {
            bytes += staged.write(&mut self.stage, &seg.file, n, 0, hdr_blocks, false)?;
            writes += 1;
            n.done = hdr_blocks;
        }
        // 2. Aligned runs straight from the buffer.
        let direct_end = align_down(data_end);
        if n.done >= hdr_blocks && direct_end > n.done {
            let parts = ring.range(n.ro(n.done), n.ro(direct_end));
            let parts: Vec<&[u8]> = parts.into_iter().filter(|p| !p.is_empty()).collect();
            seg.file.write_at(n.done, &parts)?;
            writes += parts.len() as u64;
            bytes += direct_end - n.done;
            n.done = direct_end;
        }
        // 3. The tail: padded (to the segment's end, or temporarily to the next aligned
        // offset), or zero-filled and then cut at the data's end.
        let (to, pad) = match end {
            End::Open => (n.done, false),
            End::Pad { to, .. } => (to, true),
            End::Cut => (align_up(data_end), false),
        };
        if to > n.done {
            bytes += staged.write(&mut self.stage, &seg.file, n, n.done, to, pad)?;
            writes += 1;
        }
        match end {
            End::Pad {
                permanent: true, ..
            } => n.done = to,
            End::Cut => seg.file.truncate(data_end)?,
            _ => {}
        }
        if !matches!(end, End::Open) {
            n.visible = upto;
        } else if n.done >= hdr_blocks {
            n.visible = n.visible.max(n.ro(n.done));
        }
        add(&self.stats.writes, writes);
        add(&self.stats.disk_bytes, bytes);
        seg.last_write = Instant::now();
        // Give back what is on disk for good.
        match end {
            End::Cut
            | End::Pad {
                permanent: true, ..
            } => {
                self.release = upto;
                n.safe_packets = seg.info.packets;
                n.safe_last = seg.info.last_ns;
            }
            _ => {
                if let Some((a, b, packets, last)) = n.cover {
                    if n.done >= hdr_blocks && a == n.ro(n.done) {
                        self.release = b;
                        n.safe_packets = packets;
                        n.safe_last = last;
                    }
                }
            }
        }
        seg.info.bytes = seg.info.bytes.max(n.fo(n.visible));
        Ok(())
    }

    /// Appends one packet to the pcap staging buffer, writing it out when full.
    fn pcap_append(&mut self, ts: u64, data: &[u8], orig: u32) -> io::Result<()> {
        let seg = self.seg.as_mut().expect("open segment");
        let Kind::Pcap(p) = &mut seg.kind else {
            unreachable!("pcap segment")
        };
        let rec = 16 + data.len();
        if p.staged + rec > self.stage.len() {
            let full = align_down(p.staged as u64) as usize;
            seg.file
                .write_at(p.file_done, &[&self.stage.bytes_mut()[..full]])?;
            add(&self.stats.writes, 1);
            add(&self.stats.disk_bytes, full as u64);
            seg.last_write = Instant::now();
            self.stage.bytes_mut().copy_within(full..p.staged, 0);
            p.file_done += full as u64;
            p.staged -= full;
        }
        let s = &mut self.stage.bytes_mut()[p.staged..p.staged + rec];
        s[0..4].copy_from_slice(&((ts / 1_000_000_000) as u32).to_ne_bytes());
        s[4..8].copy_from_slice(&((ts % 1_000_000_000) as u32).to_ne_bytes());
        s[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        s[12..16].copy_from_slice(&orig.to_ne_bytes());
        s[16..].copy_from_slice(data);
        p.staged += rec;
        seg.info.packets += 1;
        seg.info.first_ns.get_or_insert(ts);
        seg.info.last_ns = Some(ts);
        add(&self.stats.packets, 1);
        add(&self.stats.packet_bytes, data.len() as u64);
        Ok(())
    }

    /// Writes the pcap staging buffer's whole blocks plus its partial last block (zero-filled),
    /// then cuts the file at its real length. The staging buffer keeps the partial block, which
    /// is rewritten when more packets follow.
    fn pcap_flush(&mut self, sync: bool) -> io::Result<()> {
        let seg = self.seg.as_mut().expect("open segment");
        let Kind::Pcap(p) = &mut seg.kind else {
            unreachable!("pcap segment")
        };
        let to = align_up(p.staged as u64) as usize;
        let stage = self.stage.bytes_mut();
        stage[p.staged..to].fill(0);
        if to > 0 {
            seg.file.write_at(p.file_done, &[&stage[..to]])?;
            add(&self.stats.writes, 1);
            add(&self.stats.disk_bytes, to as u64);
        }
        seg.file.truncate(p.len())?;
        if sync {
            seg.file.sync()?;
        }
        let full = align_down(p.staged as u64) as usize;
        stage.copy_within(full..p.staged, 0);
        p.file_done += full as u64;
        p.staged -= full;
        seg.info.bytes = p.len();
        seg.last_write = Instant::now();
        Ok(())
    }

    /// Ends the segment being written. `full`: it ends at buffer offset `at` because the next
    /// record does not fit (pcapng pads it to its exact size); otherwise it is the last one of
    /// the run and ends at its last record.
    fn close(&mut self, ring: &Ring<'_>, at: u64, full: bool) -> Result<(), RecordError> {
        let Some(seg) = &self.seg else { return Ok(()) };
        let result = match seg.kind {
            Kind::Ng(_) => {
                let end = if full {
                    End::Pad {
                        to: self.opts.segment_size,
                        permanent: true,
                    }
                } else {
                    End::Cut
                };
                self.ng_write(ring, at, end)
            }
            Kind::Pcap(_) => self.pcap_flush(true),
        }
        .and_then(|()| self.seg.as_ref().expect("open").file.sync());
        if let Err(e) = result {
            self.fail_segment(e);
            return Ok(());
        }
        let mut seg = self.seg.take().expect("open segment");
        seg.info.state = SegmentState::Closed;
        seg.info.drops = self.upstream_drops() - seg.drops_at_open;
        if let Kind::Ng(_) = seg.kind {
            seg.info.bytes = if full {
                self.opts.segment_size
            } else {
                seg.info.bytes
            };
        }
        let covered = seg.info.bytes;
        if let Err(e) = write_index(&mut seg, covered) {
            tracing::warn!("{}: cannot write the index: {e}", seg.info.file);
        }
        self.store.put(seg.info);
        let deleted =
            self.store
                .apply_retention(self.opts.max_bytes, self.opts.max_age_ns, self.newest_ns);
        add(&self.stats.deleted, deleted.len() as u64);
        for d in deleted {
            tracing::info!("retention: deleted {d}");
        }
        self.store.save()
    }

    /// A write failed: cut the segment at its last record known to be on disk, count what is
    /// lost, stop writing for a while.
    fn fail_segment(&mut self, e: io::Error) {
        let Some(mut seg) = self.seg.take() else {
            return;
        };
        let (keep_bytes, keep_packets, keep_last) = match &seg.kind {
            Kind::Ng(n) if n.done >= align_up(n.hdr()) => {
                let at = if self.release.wrapping_sub(n.s0) as i64 >= 0 {
                    self.release
                } else {
                    n.s0
                };
                (n.fo(at), n.safe_packets, n.safe_last)
            }
            Kind::Ng(_) => (0, 0, None),
            // The staged part is lost; what was written is whole blocks, cut by the scan
            // below at the last whole record.
            Kind::Pcap(p) => (p.file_done, u64::MAX, None),
        };
        let path = self.store.dir().join(&seg.info.file);
        // An index written earlier may cover what is cut now: `weir index` rebuilds it.
        let _ = std::fs::remove_file(index_path(&path));
        seg.info.index_bytes = 0;
        let mut lost = seg.info.packets;
        if keep_bytes == 0 {
            drop(seg.file);
            let _ = std::fs::remove_file(&path);
            self.store.forget(&seg.info.file);
        } else {
            let _ = seg.file.truncate(keep_bytes);
            drop(seg.file);
            let scan = SegmentFile::open_existing(&path).and_then(|f| match self.opts.format {
                Format::Pcapng => crate::scan::scan_pcapng(f),
                Format::Pcap => crate::scan::scan_pcap(f, self.opts.max_caplen),
            });
            if let Ok(s) = &scan {
                if s.valid_len < keep_bytes {
                    if let Ok(f) = SegmentFile::open_existing(&path) {
                        let _ = f.set_len(s.valid_len);
                    }
                }
            }
            let (packets, last, bytes) = match (keep_packets, scan) {
                (u64::MAX, Ok(s)) => (s.packets, s.last_ns, s.valid_len),
                (u64::MAX, Err(_)) => (0, None, keep_bytes),
                (n, _) => (n, keep_last, keep_bytes),
            };
            lost = seg.info.packets.saturating_sub(packets);
            seg.info.packets = packets;
            seg.info.last_ns = last;
            seg.info.bytes = bytes;
            seg.info.state = SegmentState::Closed;
            seg.info.drops = self.upstream_drops() + lost - seg.drops_at_open;
            self.store.put(seg.info);
        }
        let packets = self.stats.packets.load(Ordering::Relaxed);
        self.stats
            .packets
            .store(packets.saturating_sub(lost), Ordering::Relaxed);
        add(&self.stats.dropped, lost);
        self.release = self.walked.unwrap_or(self.release);
        self.fail(e, "write failed");
        let _ = self.store.save();
    }

    fn fail(&mut self, e: io::Error, what: &str) {
        let msg = format!("{}: {what}: {e}", self.store.dir().display());
        tracing::error!("{msg}; packets are dropped and counted until a segment can be written");
        if self.error.is_none() {
            self.error = Some(msg);
        }
        self.failed_since = Some(Instant::now());
        self.stats.failed.store(true, Ordering::Relaxed);
    }

    fn refresh_manifest(&mut self) -> Result<(), RecordError> {
        self.last_manifest = Instant::now();
        if let Some(seg) = &mut self.seg {
            // The index of the segment being written, up to what is on disk, once the file's
            // first block (which the index's file check hashes) is final.
            let covered = match &seg.kind {
                Kind::Ng(n) => (n.done >= HEAD_LEN as u64).then(|| n.fo(n.visible)),
                Kind::Pcap(p) => (p.file_done >= HEAD_LEN as u64).then_some(seg.info.bytes),
            };
            if let Some(covered) = covered {
                if let Err(e) = write_index(seg, covered) {
                    tracing::warn!("{}: cannot write the index: {e}", seg.info.file);
                }
            }
            self.store.put(seg.info.clone());
            self.store.save()?;
        }
        Ok(())
    }

    /// Writes the last segment's tail, cuts it after its last record, syncs, and reports.
    fn finish(&mut self, reader: &mut Reader) -> Result<Summary, RecordError> {
        if self.seg.is_some() {
            let walked = self.walked.expect("walked");
            let batch = reader.next_batch();
            match batch {
                Some(batch) => {
                    let (a, b) = batch.bytes();
                    let ring = Ring {
                        start: batch.start(),
                        a,
                        b,
                    };
                    self.close(&ring, walked, false)?;
                    batch.release_before(walked.max(self.release));
                }
                None => {
                    let ring = Ring {
                        start: walked,
                        a: &[],
                        b: &[],
                    };
                    self.close(&ring, walked, false)?;
                }
            }
        }
        self.store.save()?;
        let s = &self.stats;
        Ok(Summary {
            packets: s.packets.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            disk_bytes: s.disk_bytes.load(Ordering::Relaxed),
            segments: s.segments.load(Ordering::Relaxed),
            deleted: s.deleted.load(Ordering::Relaxed),
            direct: self.all_direct,
            error: self.error.clone(),
        })
    }
}

/// Writes the index of `seg` covering its first `covered` bytes next to it (atomically: a
/// temporary file renamed over the old one).
fn write_index(seg: &mut Segment, covered: u64) -> io::Result<()> {
    let Some(ix) = &mut seg.index else {
        return Ok(());
    };
    let mut head = vec![0u8; HEAD_LEN];
    let f = std::fs::File::open(&seg.path)?;
    let n = std::os::unix::fs::FileExt::read_at(&f, &mut head, 0)?;
    let bytes = ix.serialize(covered, head_hash(&head[..n]));
    let path = index_path(&seg.path);
    let mut tmp = path.clone().into_os_string();
    tmp.push(".tmp");
    std::fs::write(&tmp, &bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    seg.info.index_bytes = bytes.len() as u64;
    Ok(())
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
        n: &NgSegment,
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
