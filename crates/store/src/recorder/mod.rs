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
//! The [`pcapng`] module writes such segments.
//!
//! # pcap
//!
//! Records are converted (16-byte pcap header + data) into the aligned staging buffer, written
//! a full buffer at a time; a segment ends at its last whole packet (pcap has no padding). The
//! [`pcap`] module writes such segments.
//!
//! Both are one [`SegmentWriter`]; this module holds what they share: reading the buffer,
//! starting and ending segments, the manifest, retention, indexing and disk errors.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir_buffer::pcapng::MIN_BLOCK_LEN;
use weir_buffer::{Block, Reader};
use weir_index::{head_hash, index_path, part_path, remove_parts, IndexBuilder, HEAD_LEN};
use weir_packet::LinkType;
use weir_pcap::Interface;

mod pcap;
mod pcapng;

use self::pcap::PcapSegment;
use self::pcapng::{End, PcapngSegment};
use crate::disk::{align_down, align_up, write_renamed, AlignedBuf, SegmentFile, ALIGN};
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
    /// Packets not recorded because recording was paused ([`pause`](Self::pause)).
    pub paused: AtomicU64,
    /// Request: close the segment being written at the next block boundary (a new one starts
    /// with the next packet). Cleared by the recorder once done.
    pub rotate: AtomicBool,
    /// Request: while set, the recorder closes its segment (at a block boundary) and counts
    /// every packet as [`paused`](Self::paused) instead of recording it.
    pub pause: AtomicBool,
    /// Wall clock (ns since the epoch) of the last index written that covered the packets
    /// recorded then (the open segment's, every few seconds, or a closing segment's); the
    /// recorder's start before the first.
    pub index_written_ns: AtomicU64,
    /// [`packets`](Self::packets) at that write.
    pub index_packets: AtomicU64,
    /// Whether the recorder indexes its segments.
    pub indexing: AtomicBool,
    /// Index files written (the open segment's at a manifest refresh, a closing segment's).
    pub index_writes: AtomicU64,
    /// Time the recorder thread spent writing them (serialization, file, sync), in ns.
    pub index_write_ns: AtomicU64,
    /// The CPU time of that thread while writing them, in ns (0 where the kernel does not
    /// report a thread's run time).
    pub index_write_cpu_ns: AtomicU64,
}

impl RecorderStats {
    /// Seconds the packets recorded since the last index write have waited for an index (the
    /// time since that write, as of `now_ns`); 0 when the index covers every packet recorded.
    pub fn index_lag_s(&self, now_ns: u64) -> f64 {
        if self.packets.load(Ordering::Relaxed) <= self.index_packets.load(Ordering::Relaxed) {
            return 0.0;
        }
        now_ns.saturating_sub(self.index_written_ns.load(Ordering::Relaxed)) as f64 / 1e9
    }

    fn indexed(&self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        self.index_written_ns.store(now, Ordering::Relaxed);
        self.index_packets
            .store(self.packets.load(Ordering::Relaxed), Ordering::Relaxed);
    }
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
    /// Packets not recorded because recording was paused.
    pub paused: u64,
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

    /// Starts loading the cache line at buffer offset `o` (if in the batch): part of the
    /// records [`PREFETCH_AHEAD`] bytes ahead of the one being accounted for, which a capture
    /// thread wrote on another core (a miss per record otherwise).
    #[inline(always)]
    fn prefetch(&self, o: u64) {
        let i = o.wrapping_sub(self.start) as usize;
        let la = self.a.len();
        let at = if i < la {
            self.a.get(i)
        } else {
            self.b.get(i - la)
        };
        if let Some(x) = at {
            weir_packet::prefetch(x);
        }
    }
}

/// How far ahead of the record being accounted for the recorder prefetches (bytes): every line
/// up to this distance is asked for once. 4 KiB is ≈ 40 64-byte packets' records (issue 20,
/// session 21: with two lines 1 KiB ahead, the loads of each record's length and caplen were
/// still ≈ 20 % of the recorder's samples: the lines come from the capture thread's CPU).
const PREFETCH_AHEAD: u64 = 4096;

/// The cache line size the prefetch steps by.
const LINE: u64 = 64;

/// Whether buffer offset `a` comes before `b` (offsets wrap: compared by their distance).
fn before(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) < 0
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
    /// When it was opened, and when its index was last written (its opening before the first).
    opened: Instant,
    indexed_at: Instant,
    /// Index parts written at the refreshes (see `weir_index::Parts`).
    parts: PartsWritten,
    writer: SegmentWriter,
}

/// What the recorder has written of the open segment's index parts.
#[derive(Debug, Default)]
struct PartsWritten {
    /// The chunk the next part starts at.
    next_chunk: u32,
    /// The covered length of the last part (a refresh with nothing new on disk writes none).
    covered: u64,
    /// Bytes of the part files on disk, and the first byte and size of the last one (a part
    /// written again from the same chunk replaces it).
    bytes: u64,
    last: Option<(u64, u64)>,
}

/// The format-specific part of the segment being written.
enum SegmentWriter {
    /// pcapng: written from the buffer without a copy.
    Pcapng(PcapngSegment),
    /// Classic pcap: converted through the staging buffer.
    Pcap(PcapSegment),
}

/// What a segment writer writes with: the segment's file, its manifest entry and last write
/// time, the recorder's staging buffer and counters.
struct SegmentIo<'a> {
    file: &'a SegmentFile,
    stage: &'a mut AlignedBuf,
    stats: &'a RecorderStats,
    info: &'a mut SegmentInfo,
    last_write: &'a mut Instant,
}

impl Segment {
    /// The writer, and what it writes with.
    fn split<'a>(
        &'a mut self,
        stage: &'a mut AlignedBuf,
        stats: &'a RecorderStats,
    ) -> (&'a mut SegmentWriter, SegmentIo<'a>) {
        (
            &mut self.writer,
            SegmentIo {
                file: &self.file,
                stage,
                stats,
                info: &mut self.info,
                last_write: &mut self.last_write,
            },
        )
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
    /// The index builder of the last closed segment, emptied for the next one: a fresh
    /// builder's ≈ 1 MiB of tables are new pages to fault in and zero at every segment
    /// (`IndexBuilder::clear` keeps them).
    spare_index: Option<IndexBuilder>,
    failed_since: Option<Instant>,
    error: Option<String>,
    all_direct: bool,
    stage: AlignedBuf,
    /// Section header and interface blocks (pcapng), or the file header (pcap).
    file_header: Vec<u8>,
    newest_ns: u64,
    last_manifest: Instant,
    /// Recording is paused (the [`RecorderStats::pause`] request, read between steps).
    paused: bool,
}

/// How many new bytes in the buffer wake a waiting recorder (at most 1/16 of the buffer). Issue
/// 20: a fixed 2 ms sleep woke the recorder ≈ 500 times a second, mostly for nothing (capture
/// threads hand over whole ring blocks every ≈ 10 ms), and on the EPYC VM those wake-ups were
/// ≈ 30 % of `weir record --no-index`'s CPU. 1 MiB is ≈ 11 000 64-byte packets.
const WAKE_BYTES: u64 = 1 << 20;
/// Longest the recorder waits for [`WAKE_BYTES`]: the latency of the stop, of pause and rotate
/// requests and of the flush of a slow tail (its `flush_interval` is 1 s by default).
const WAIT_LIMIT: Duration = Duration::from_millis(20);
/// How long writing pauses after a disk error before a new segment is tried.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// How often the manifest entry of the segment being written is refreshed.
const MANIFEST_PERIOD: Duration = Duration::from_secs(5);
// The index of the segment being written gets a part at every refresh: the chunks since the
// last part (`weir_index::Parts`), costing what is new, as its final index costs about what is
// new since the last part (joined from the parts' lists). Session 19 spaced the parts by
// `INDEX_DUTY` (19× the last part's time): a part's cost is per new packet, so spacing them
// saved nothing, and delayed what a reader finds (issue 20, session 20).

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
            Format::Pcapng => pcapng::file_header(&opts.interfaces)?,
            Format::Pcap => pcap::file_header(&opts.interfaces)?,
        };
        // pcapng staging: the first or last block of a segment; pcap staging: a whole write.
        let stage_len = match opts.format {
            Format::Pcapng => pcapng::stage_len(&file_header, opts.max_caplen),
            Format::Pcap => opts.write_size,
        };
        let mut store = store;
        store.manifest.interfaces = opts.interfaces.iter().map(InterfaceInfo::from).collect();
        store.save()?;
        let stats = Arc::new(RecorderStats::default());
        stats.indexed();
        stats
            .indexing
            .store(opts.index_chunk.is_some(), Ordering::Relaxed);
        Ok(Recorder {
            store,
            stats,
            walked: None,
            release: 0,
            seg: None,
            spare_index: None,
            failed_since: None,
            error: None,
            all_direct: true,
            stage: AlignedBuf::new(stage_len),
            file_header,
            newest_ns: 0,
            last_manifest: Instant::now(),
            paused: false,
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
            // Requests, between steps (so at a block boundary).
            self.paused = self.stats.pause.load(Ordering::Acquire);
            if (self.paused && self.seg.is_some()) || self.stats.rotate.load(Ordering::Acquire) {
                self.close_now(reader)?;
                self.stats.rotate.store(false, Ordering::Release);
            }
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
            // Nothing new: wait for the capture threads to hand over WAKE_BYTES more (they ring
            // after each ring block), or WAIT_LIMIT (tail flushes, manifest refreshes, requests
            // and the stop are looked at then).
            let seen = self.walked.unwrap_or_else(|| reader.position());
            let wake = WAKE_BYTES.min(reader.buffer_size() as u64 / 16);
            reader.wait(seen.wrapping_add(wake), WAIT_LIMIT);
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
            // The next line not yet prefetched (records are 8-aligned, lines 64).
            let mut fetched = walked & !(LINE - 1);
            for blk in batch.blocks(walked) {
                let until = blk.offset.wrapping_add(PREFETCH_AHEAD);
                while before(fetched, until) && before(fetched, batch.end()) {
                    ring.prefetch(fetched);
                    fetched = fetched.wrapping_add(LINE);
                }
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
        if self.paused && self.seg.is_none() {
            // Paused (the segment was closed before): counted, not recorded.
            if blk.packet.is_some() {
                add(&self.stats.paused, 1);
            }
            self.release = end;
            return Ok(());
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
        let fits = match self.seg.as_ref().map(|s| &s.writer) {
            None => true,
            Some(SegmentWriter::Pcapng(n)) => n.fits(end, self.opts.segment_size),
            Some(SegmentWriter::Pcap(p)) => match &blk.packet {
                Some(r) => p.fits(r.data().len(), self.opts.segment_size),
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
        let Segment {
            file,
            index,
            info,
            last_write,
            writer,
            ..
        } = self.seg.as_mut().expect("a segment is open");
        let mut failed = None;
        match (writer, &blk.packet) {
            (SegmentWriter::Pcapng(n), _) => {
                if let (Some(ix), Some(p), Some(link)) = (index, &blk.packet, link) {
                    ix.add(n.fo(blk.offset), p.ts_ns(), link, p.data());
                }
                let before = (info.packets, info.last_ns);
                if let Some(p) = &blk.packet {
                    info.packets += 1;
                    info.first_ns.get_or_insert(p.ts_ns());
                    info.last_ns = Some(p.ts_ns());
                    add(&self.stats.packets, 1);
                    add(&self.stats.packet_bytes, p.data().len() as u64);
                }
                let after = (info.packets, info.last_ns);
                n.note_block(blk.offset, end, blk.len, before, after);
            }
            (SegmentWriter::Pcap(_), None) => {}
            (SegmentWriter::Pcap(pc), Some(p)) => {
                let (ts, data, orig) = (p.ts_ns(), p.data(), p.orig_len());
                if let (Some(ix), Some(link)) = (index, link) {
                    ix.add(pc.len(), ts, link, data);
                }
                let mut io = SegmentIo {
                    file,
                    stage: &mut self.stage,
                    stats: &self.stats,
                    info,
                    last_write,
                };
                failed = pc.append(&mut io, ts, data, orig).err();
            }
        }
        if let Some(e) = failed {
            self.fail_segment(e);
            add(&self.stats.dropped, 1);
        }
        if matches!(
            self.seg.as_ref().map(|s| &s.writer),
            Some(SegmentWriter::Pcap(_)) | None
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
        let writer = match self.opts.format {
            Format::Pcapng => {
                SegmentWriter::Pcapng(PcapngSegment::new(blk.offset, &self.file_header, ts))
            }
            Format::Pcap => {
                SegmentWriter::Pcap(PcapSegment::new(&mut self.stage, &self.file_header))
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
            index: self
                .opts
                .index_chunk
                .map(|chunk| match self.spare_index.take() {
                    Some(mut ix) => {
                        ix.clear();
                        ix
                    }
                    None => IndexBuilder::new(chunk),
                }),
            info,
            drops_at_open: self.upstream_drops(),
            last_write: Instant::now(),
            opened: Instant::now(),
            indexed_at: Instant::now(),
            parts: PartsWritten::default(),
            writer,
        });
        Ok(())
    }

    /// Writes what is due: aligned runs once a full write is ready, and the padded tail when
    /// the flush interval has passed.
    fn write_ready(&mut self, ring: &Ring<'_>) -> Result<(), RecordError> {
        let Some(seg) = &mut self.seg else {
            return Ok(());
        };
        let walked = self.walked.expect("walked");
        let due = seg.last_write.elapsed() >= self.opts.flush_interval;
        let (write_size, ts, flushed) =
            (self.opts.write_size as u64, self.newest_ns, seg.info.bytes);
        let (writer, mut io) = seg.split(&mut self.stage, &self.stats);
        let result = match writer {
            SegmentWriter::Pcapng(n) => {
                let end = n.fo(walked);
                if align_down(end) >= n.done + write_size {
                    n.write(&mut io, ring, walked, End::Open, ts)
                } else if due && n.visible != walked {
                    // Pad the tail to the next aligned offset (a padding block needs 32 bytes).
                    let mut to = align_up(end);
                    if to != end && to - end < MIN_BLOCK_LEN as u64 {
                        to += ALIGN as u64;
                    }
                    let end = End::Pad {
                        to,
                        permanent: false,
                    };
                    n.write(&mut io, ring, walked, end, ts)
                } else {
                    Ok(None)
                }
            }
            SegmentWriter::Pcap(p) => {
                if due && p.len() != flushed {
                    p.flush(&mut io, false).map(|()| None)
                } else {
                    Ok(None)
                }
            }
        };
        match result {
            Ok(release) => self.release = release.unwrap_or(self.release),
            Err(e) => self.fail_segment(e),
        }
        Ok(())
    }

    /// Ends the segment being written. `full`: it ends at buffer offset `at` because the next
    /// record does not fit (pcapng pads it to its exact size); otherwise it is the last one of
    /// the run and ends at its last record.
    fn close(&mut self, ring: &Ring<'_>, at: u64, full: bool) -> Result<(), RecordError> {
        let Some(seg) = &mut self.seg else {
            return Ok(());
        };
        let (size, ts) = (self.opts.segment_size, self.newest_ns);
        let (writer, mut io) = seg.split(&mut self.stage, &self.stats);
        let written = match writer {
            SegmentWriter::Pcapng(n) => {
                let end = if full {
                    End::Pad {
                        to: size,
                        permanent: true,
                    }
                } else {
                    End::Cut
                };
                n.write(&mut io, ring, at, end, ts)
            }
            SegmentWriter::Pcap(p) => p.flush(&mut io, true).map(|()| None),
        };
        let (release, result) = match written {
            Ok(release) => (release, io.file.sync()),
            Err(e) => (None, Err(e)),
        };
        self.release = release.unwrap_or(self.release);
        if let Err(e) = result {
            self.fail_segment(e);
            return Ok(());
        }
        let mut seg = self.seg.take().expect("open segment");
        seg.info.state = SegmentState::Closed;
        seg.info.drops = self.upstream_drops() - seg.drops_at_open;
        if let SegmentWriter::Pcapng(_) = seg.writer {
            seg.info.bytes = if full {
                self.opts.segment_size
            } else {
                seg.info.bytes
            };
        }
        let covered = seg.info.bytes;
        match write_index(&mut seg, covered, &self.stats) {
            Err(e) => tracing::warn!("{}: cannot write the index: {e}", seg.info.file),
            Ok(()) => {
                self.stats.indexed();
                // The final index is in place (renamed): the parts are stale now; a crash
                // before they are gone leaves them beside it, where readers ignore them.
                if seg.index.is_some() {
                    remove_parts(&seg.path);
                }
            }
        }
        self.spare_index = seg.index.take();
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
        let (keep_bytes, keep_packets, keep_last) = match &seg.writer {
            SegmentWriter::Pcapng(n) if n.done >= align_up(n.hdr()) => {
                let at = if self.release.wrapping_sub(n.s0()) as i64 >= 0 {
                    self.release
                } else {
                    n.s0()
                };
                (n.fo(at), n.safe_packets, n.safe_last)
            }
            SegmentWriter::Pcapng(_) => (0, 0, None),
            // The staged part is lost; what was written is whole blocks, cut by the scan
            // below at the last whole record.
            SegmentWriter::Pcap(p) => (p.file_done, u64::MAX, None),
        };
        let path = self.store.dir().join(&seg.info.file);
        // An index written earlier may cover what is cut now: `weir index` rebuilds it.
        let _ = std::fs::remove_file(index_path(&path));
        remove_parts(&path);
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
            let covered = match &seg.writer {
                SegmentWriter::Pcapng(n) => (n.done >= HEAD_LEN as u64).then(|| n.fo(n.visible)),
                SegmentWriter::Pcap(p) => {
                    (p.file_done >= HEAD_LEN as u64).then_some(seg.info.bytes)
                }
            };
            let due = covered.filter(|&c| {
                let skip = closes_before_next_refresh(
                    c,
                    self.opts.segment_size,
                    seg.opened.elapsed(),
                    seg.indexed_at.elapsed(),
                );
                if skip {
                    tracing::debug!(
                        "{}: index not rewritten at {c} bytes: the segment fills before the next \
                         refresh",
                        seg.info.file
                    );
                }
                !skip
            });
            if let Some(covered) = due.filter(|&c| c > seg.parts.covered) {
                match write_part(seg, covered, &self.stats) {
                    Err(e) => tracing::warn!("{}: cannot write the index: {e}", seg.info.file),
                    Ok(()) => self.stats.indexed(),
                }
                seg.indexed_at = Instant::now();
            }
            self.store.put(seg.info.clone());
            self.store.save()?;
        }
        Ok(())
    }

    /// Writes the last segment's tail, cuts it after its last record, syncs, and reports.
    fn finish(&mut self, reader: &mut Reader) -> Result<Summary, RecordError> {
        self.close_now(reader)?;
        self.store.save()?;
        let s = &self.stats;
        Ok(Summary {
            packets: s.packets.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            disk_bytes: s.disk_bytes.load(Ordering::Relaxed),
            segments: s.segments.load(Ordering::Relaxed),
            deleted: s.deleted.load(Ordering::Relaxed),
            paused: s.paused.load(Ordering::Relaxed),
            direct: self.all_direct,
            error: self.error.clone(),
        })
    }

    /// Closes the segment being written, if any, after the last block accounted for (cut
    /// there, as at the end); the next packet starts a new segment.
    fn close_now(&mut self, reader: &mut Reader) -> Result<(), RecordError> {
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
        Ok(())
    }
}

/// Whether the open segment, `covered` bytes of `size` written in the `age` since it was
/// opened, is expected to fill up (and so get its final index) before the next manifest
/// refresh, at the rate it has filled so far: its index then gets no part now (the close, due
/// first, writes the final index, which holds the chunks a part would). Never when the index was last written two
/// refresh periods ago or more, so a rate that drops after the estimate delays the index by
/// one period at most (`since_index`: the time since its index was last written, or since it
/// was opened).
fn closes_before_next_refresh(
    covered: u64,
    size: u64,
    age: Duration,
    since_index: Duration,
) -> bool {
    if since_index >= 2 * MANIFEST_PERIOD || age.is_zero() {
        return false;
    }
    let remaining = size.saturating_sub(covered) as f64;
    remaining * age.as_secs_f64() <= covered as f64 * MANIFEST_PERIOD.as_secs_f64()
}

/// Writes the index of `seg` covering its first `covered` bytes next to it (atomically: a
/// temporary file renamed over the old one). After parts, the builder joins their lists with
/// those of the chunks since the last part (`IndexBuilder::serialize`): the segment's entries
/// are not grouped and encoded a second time.
fn write_index(seg: &mut Segment, covered: u64, stats: &RecorderStats) -> io::Result<()> {
    let Some(ix) = &mut seg.index else {
        return Ok(());
    };
    let timer = IndexTimer::start();
    let bytes = ix.serialize(covered, segment_head_hash(&seg.path)?);
    write_renamed(&index_path(&seg.path), &bytes)?;
    seg.info.index_bytes = bytes.len() as u64;
    let packets = ix.packets();
    timer.done(stats, &seg.info.file, "", packets, bytes.len(), covered);
    Ok(())
}

/// Writes the next index part of `seg` (the chunks since the last part) covering its first
/// `covered` bytes next to it (`SEGMENT.idx.p<from>`, atomically). Costs the entries of the
/// chunks since the last part, not the whole index.
fn write_part(seg: &mut Segment, covered: u64, stats: &RecorderStats) -> io::Result<()> {
    let Some(ix) = &mut seg.index else {
        return Ok(());
    };
    let timer = IndexTimer::start();
    let p = &mut seg.parts;
    let part = ix.serialize_part(p.next_chunk, covered, segment_head_hash(&seg.path)?);
    write_renamed(&part_path(&seg.path, part.from), &part.bytes)?;
    let len = part.bytes.len() as u64;
    if let Some((from, n)) = p.last {
        if from == part.from {
            p.bytes -= n;
        }
    }
    p.bytes += len;
    p.last = Some((part.from, len));
    p.next_chunk = part.next_chunk;
    p.covered = covered;
    seg.info.index_bytes = p.bytes;
    let packets = ix.packets();
    let what = format!("part from byte {}, ", part.from);
    timer.done(
        stats,
        &seg.info.file,
        &what,
        packets,
        part.bytes.len(),
        covered,
    );
    Ok(())
}

/// The hash of the segment file's first [`HEAD_LEN`] bytes (what its index records).
fn segment_head_hash(path: &std::path::Path) -> io::Result<u64> {
    let mut head = vec![0u8; HEAD_LEN];
    let f = std::fs::File::open(path)?;
    let n = std::os::unix::fs::FileExt::read_at(&f, &mut head, 0)?;
    Ok(head_hash(&head[..n]))
}

/// The wall and CPU time of one index write, added to the recorder's counters when done.
struct IndexTimer {
    started: Instant,
    cpu_before: Option<u64>,
}

impl IndexTimer {
    fn start() -> IndexTimer {
        IndexTimer {
            started: Instant::now(),
            cpu_before: thread_cpu_ns(),
        }
    }

    /// Counts the write (of `file`'s index, `what` of it when not all: "part from byte N, ";
    /// `bytes` long, `packets` in the segment so far, covering `covered` bytes) and says so at
    /// debug level.
    fn done(
        self,
        stats: &RecorderStats,
        file: &str,
        what: &str,
        packets: u64,
        bytes: usize,
        covered: u64,
    ) {
        let took = self.started.elapsed();
        let cpu = thread_cpu_ns()
            .zip(self.cpu_before)
            .map_or(0, |(b, a)| b.saturating_sub(a));
        add(&stats.index_writes, 1);
        add(&stats.index_write_ns, took.as_nanos() as u64);
        add(&stats.index_write_cpu_ns, cpu);
        tracing::debug!(
            "{file}: index written: {what}{packets} packets, {bytes} bytes, covering {covered} \
             bytes of the segment, in {:.1} ms ({:.1} ms CPU)",
            took.as_secs_f64() * 1e3,
            cpu as f64 / 1e6
        );
    }
}

/// The CPU time the calling thread has run so far, in ns (`/proc/thread-self/schedstat`'s
/// first field), or `None` where the kernel does not report it.
fn thread_cpu_ns() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1 GiB segment filling at 50 MiB/s (values by hand: 250 MiB in the next 5 s).
    #[test]
    fn the_rewrite_before_a_close_is_skipped_only_when_the_close_comes_first() {
        let (mib, s) = (1u64 << 20, Duration::from_secs);
        // (covered, age, since the index was written, skipped?) for a 1 GiB segment.
        let cases = [
            // 800 MiB in 16 s: 224 MiB left, filled in 4.5 s: skipped.
            (800 * mib, s(16), s(5), true),
            // 700 MiB in 14 s: 324 MiB left, 6.5 s: written.
            (700 * mib, s(14), s(5), false),
            // 768 MiB in 15 s: 256 MiB left, exactly 5 s: skipped (the close comes by the
            // refresh).
            (768 * mib, s(15), s(5), true),
            // Last written two periods ago: written whatever the estimate.
            (800 * mib, s(16), s(10), false),
            // Nothing written yet, or no time: written.
            (0, s(5), s(5), false),
            (mib, Duration::ZERO, s(0), false),
            // Full already (the close is due with the next record).
            (1024 * mib, s(20), s(5), true),
        ];
        for (covered, age, since_index, skipped) in cases {
            assert_eq!(
                closes_before_next_refresh(covered, 1024 * mib, age, since_index),
                skipped,
                "{covered} bytes in {age:?}, index {since_index:?} ago"
            );
        }
    }
}
