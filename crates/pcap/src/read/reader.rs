//! [`FileReader`]: one loop over pcap records or pcapng blocks, whatever holds the bytes.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use weir_packet::{Interface, LinkType, PacketMeta};

use super::backing::Backing;
use super::error::ReadError;
use super::options::PacketOptions;
use super::{pcap, pcapng};
use crate::format::{FileFormat, Precision};

/// One packet, borrowing the reader's buffer until the next call.
#[derive(Clone, Copy, Debug)]
pub struct Packet<'a> {
    /// Time, wire length and interface index.
    pub meta: PacketMeta,
    /// Link type of its interface.
    pub link: LinkType,
    /// The captured bytes.
    pub data: &'a [u8],
    /// Byte offset in the file of the record (pcap) or block (pcapng) holding the packet; give it
    /// to [`FileReader::seek`] to read the packet again.
    pub record_offset: u64,
    /// Classic pcap: the record's timestamp fields as the file stores them (seconds, and the
    /// fraction in the file's unit, µs or ns), out-of-range fractions included; `None` for
    /// pcapng. A pcap writer of the same unit copies them, as libpcap does.
    pub pcap_ts: Option<(u32, u32)>,
    /// pcapng: the packet block's options (comments, flags...), the well-formed part of them;
    /// empty for classic pcap.
    pub options: PacketOptions<'a>,
}

/// Where the packet found by the block loop sits in the block just consumed.
struct Found {
    record_offset: u64,
    block_len: usize,
    data_at: usize,
    caplen: usize,
    /// The block's option list (start, length), (0, 0) for none.
    opts: (usize, usize),
    meta: PacketMeta,
    link: LinkType,
}

/// Per-interface timestamp conversion for pcapng.
#[derive(Clone, Copy)]
struct Clock {
    resol: pcapng::TsResol,
    offset_s: i64,
    /// libpcap's effective snap length for this interface.
    snaplen: u32,
}

/// Reads packets from a pcap or pcapng file, stdin or any byte stream.
pub struct FileReader {
    path: PathBuf,
    backing: Backing,
    format: FileFormat,
    pcap: Option<pcap::Header>,
    /// Current pcapng section: big-endian, and the global index of each of its interfaces.
    be: bool,
    section_ifaces: Vec<u32>,
    interfaces: Vec<Interface>,
    clocks: Vec<Clock>,
    /// Section headers seen (pcapng).
    sections: u32,
    packets: u64,
    skipped_blocks: u64,
    /// Packets whose option list was damaged (cut at the damage).
    damaged_options: u64,
    done: bool,
}

impl FileReader {
    /// Opens a capture file; `-` means stdin. Regular files are memory-mapped (if another process
    /// truncates the file while it is read, the process may die of SIGBUS; appends are harmless),
    /// anything else is streamed.
    pub fn open(path: impl AsRef<Path>) -> Result<FileReader, ReadError> {
        let path = path.as_ref();
        if path.as_os_str() == "-" {
            return FileReader::from_reader(path, Box::new(io::stdin()));
        }
        let io_err = |source| ReadError::Io {
            path: path.to_owned(),
            source,
        };
        let file = File::open(path).map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if meta.is_file() {
            if meta.len() == 0 {
                return Err(ReadError::ShortHeader {
                    path: path.to_owned(),
                    len: 0,
                });
            }
            let backing = Backing::map(file).map_err(io_err)?;
            FileReader::start(path.to_owned(), backing)
        } else {
            FileReader::from_reader(path, Box::new(file))
        }
    }

    /// Opens a regular file to be read in scattered ranges
    /// ([`resume_range`](Self::resume_range)) with `pread` into one reused buffer, instead of
    /// through a memory map: what stays resident is that buffer (at most 1 MiB, or one larger
    /// record), not the page-cache folios around every range read (a mapped read faults in
    /// the whole folio, 2 MiB with large folios). Reads from the file's start otherwise; its
    /// length is taken now, and a file cut short since ends in a damage report (never SIGBUS).
    /// Not for pipes: an error when `path` is not a regular file.
    pub fn open_scattered(path: impl AsRef<Path>) -> Result<FileReader, ReadError> {
        let path = path.as_ref();
        let io_err = |source| ReadError::Io {
            path: path.to_owned(),
            source,
        };
        let not_a_file = || {
            io_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ))
        };
        // Checked before opening: opening a FIFO for reading waits for a writer.
        if !std::fs::metadata(path).map_err(io_err)?.is_file() {
            return Err(not_a_file());
        }
        let file = File::open(path).map_err(io_err)?;
        let meta = file.metadata().map_err(io_err)?;
        if !meta.is_file() {
            return Err(not_a_file());
        }
        if meta.len() == 0 {
            return Err(ReadError::ShortHeader {
                path: path.to_owned(),
                len: 0,
            });
        }
        FileReader::start(path.to_owned(), Backing::pread(file, meta.len()))
    }

    /// Reads a capture held in memory; `name` is used in messages.
    pub fn from_bytes(name: impl AsRef<Path>, bytes: Vec<u8>) -> Result<FileReader, ReadError> {
        FileReader::start(name.as_ref().to_owned(), Backing::owned(bytes))
    }

    /// Reads a capture from a stream (a pipe, a socket, stdin); `name` is used in messages.
    pub fn from_reader(
        name: impl AsRef<Path>,
        reader: Box<dyn Read + Send>,
    ) -> Result<FileReader, ReadError> {
        FileReader::start(name.as_ref().to_owned(), Backing::stream(reader))
    }

    fn start(path: PathBuf, mut backing: Backing) -> Result<FileReader, ReadError> {
        let head = backing.window(24).map_err(|source| ReadError::Io {
            path: path.clone(),
            source,
        })?;
        let mut reader = FileReader {
            path,
            backing: Backing::owned(Vec::new()),
            format: FileFormat::Pcapng,
            pcap: None,
            be: false,
            section_ifaces: Vec::new(),
            interfaces: Vec::new(),
            clocks: Vec::new(),
            sections: 0,
            packets: 0,
            skipped_blocks: 0,
            damaged_options: 0,
            done: false,
        };
        if pcap::is_pcap(head) {
            if head.len() < 24 {
                return Err(ReadError::ShortHeader {
                    path: reader.path,
                    len: head.len(),
                });
            }
            let h = pcap::parse_header(head).map_err(|reason| ReadError::BadHeader {
                path: reader.path.clone(),
                reason,
            })?;
            backing.advance(24);
            reader.format = FileFormat::Pcap(if h.nanos {
                Precision::Nano
            } else {
                Precision::Micro
            });
            reader.interfaces.push(Interface {
                link: h.link,
                snaplen: h.snaplen,
                name: None,
                description: None,
                ts_resolution: if h.nanos { "ns" } else { "µs" }.to_string(),
                fcs_len: h.fcs_len,
                swapped: h.swapped,
            });
            reader.pcap = Some(h);
            reader.backing = backing;
            Ok(reader)
        } else if pcapng::is_pcapng(head) {
            reader.backing = backing;
            // The first block must be a valid section header; damage there is a header error.
            // Nothing is consumed here beyond checking it, so the block loop reads it again.
            let w = reader.backing.window(28).map_err(|source| ReadError::Io {
                path: reader.path.clone(),
                source,
            })?;
            if w.len() < 28 {
                return Err(ReadError::ShortHeader {
                    path: reader.path,
                    len: w.len(),
                });
            }
            let checked = pcapng::section_order(w).and_then(|be| pcapng::check_shb(&w[..28], be));
            if let Err(reason) = checked {
                return Err(ReadError::BadHeader {
                    path: reader.path,
                    reason,
                });
            }
            Ok(reader)
        } else {
            Err(ReadError::UnknownFormat {
                path: reader.path,
                magic: head[..head.len().min(8)].to_vec(),
            })
        }
    }

    /// The container format (for classic pcap, with its timestamp unit).
    pub fn format(&self) -> FileFormat {
        self.format
    }

    /// True for the modified ("Kuznetzov", magic a1b2cd34) classic pcap variant, whose record
    /// headers are longer.
    pub fn is_modified_pcap(&self) -> bool {
        self.pcap.is_some_and(|h| h.modified)
    }

    /// Short name of the format for humans: "pcap", "pcap (ns)", "pcap (modified)", "pcapng".
    pub fn format_name(&self) -> &'static str {
        if self.is_modified_pcap() {
            "pcap (modified)"
        } else {
            self.format.name()
        }
    }

    /// The file's name as given.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Interfaces described so far, indexed by [`PacketMeta::interface`]. For pcapng this grows
    /// as interface blocks are read.
    pub fn interfaces(&self) -> &[Interface] {
        &self.interfaces
    }

    /// Packets delivered so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Blocks skipped because weir does not need them (statistics, name resolution, custom...).
    pub fn skipped_blocks(&self) -> u64 {
        self.skipped_blocks
    }

    /// Packets delivered whose pcapng option list was damaged (an option running past its block,
    /// stray bytes): each was delivered with the options before the damage.
    pub fn damaged_options(&self) -> u64 {
        self.damaged_options
    }

    /// Byte offset of the next unread record or block.
    pub fn offset(&self) -> u64 {
        self.backing.offset()
    }

    /// Returns the next packet, `Ok(None)` at the end, or once `Err(ReadError::Damaged)` when the
    /// rest of the file is unreadable (then `Ok(None)` forever).
    #[inline]
    pub fn next_packet(&mut self) -> Result<Option<Packet<'_>>, ReadError> {
        let Some(found) = self.next_found()? else {
            return Ok(None);
        };
        let block = self.backing.behind(found.block_len);
        let pcap_ts = self.pcap.map(|h| {
            (
                pcap::u32_at(block, 0, h.swapped),
                pcap::u32_at(block, 4, h.swapped),
            )
        });
        Ok(Some(Packet {
            meta: found.meta,
            link: found.link,
            data: &block[found.data_at..found.data_at + found.caplen],
            record_offset: found.record_offset,
            pcap_ts,
            options: PacketOptions::from_raw(
                &block[found.opts.0..found.opts.0 + found.opts.1],
                self.be,
            ),
        }))
    }

    /// Moves to the record or block at `record_offset` (a [`Packet::record_offset`] seen earlier,
    /// in the same pcapng section), so the next [`next_packet`](Self::next_packet) reads it again.
    /// Only for files held in memory; a stream cannot go back.
    pub fn seek(&mut self, record_offset: u64) -> Result<(), ReadError> {
        let ok = usize::try_from(record_offset)
            .ok()
            .is_some_and(|o| self.backing.seek(o));
        if !ok {
            return Err(ReadError::Io {
                path: self.path.clone(),
                source: io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("cannot seek to byte {record_offset}"),
                ),
            });
        }
        self.done = false;
        Ok(())
    }

    /// [`seek`](Self::seek) for a reader taking over from others (the ranges of
    /// [`split`](Self::split)) that read `packets_before` packets up to `record_offset`: its
    /// count, and the count in a damage report, go on from theirs.
    pub fn resume_at(&mut self, record_offset: u64, packets_before: u64) -> Result<(), ReadError> {
        self.seek(record_offset)?;
        self.packets = packets_before;
        Ok(())
    }

    /// [`resume_at`](Self::resume_at) for the records starting in `[record_offset, end)`: a
    /// reader of [`open_scattered`](Self::open_scattered) reads them with one `pread` (1 MiB at
    /// a time for a longer range; a record running past `end` is read whole all the same), a
    /// mapped one just moves there.
    pub fn resume_range(
        &mut self,
        record_offset: u64,
        end: u64,
        packets_before: u64,
    ) -> Result<(), ReadError> {
        if !self.backing.seek_range(record_offset, end) {
            return self.resume_at(record_offset, packets_before);
        }
        self.done = false;
        self.packets = packets_before;
        Ok(())
    }

    /// Splits a memory-mapped classic pcap file, not yet read, into at most `n` readers over
    /// consecutive byte ranges of the same map, for reading in parallel threads.
    /// Returns `None` when the file is not a mapped classic pcap file or no split point is found.
    ///
    /// Split points are found by looking for a chain of plausible record headers, which is only a
    /// guess: the caller must check that reader `k` ended exactly where reader `k + 1` starts, which
    /// is the case iff reader `k` ended without error. A reader whose last record crosses its end
    /// reports it as damage, so any error from a reader other than the last means "read this file
    /// sequentially instead"; then a sequential reader gives the true answer.
    pub fn split(&self, n: usize) -> Option<Vec<FileReader>> {
        let h = self.pcap?;
        let bytes = self.backing.whole()?;
        if self.packets != 0 || n < 2 {
            return None;
        }
        let start = self.backing.offset() as usize;
        let len = bytes.len();
        // Cuts are probed in a copy read with pread: a fault in the mapping would map a whole
        // page-cache folio (2 MiB) around each cut, 230 MB of page tables for a 1 GB file cut
        // in 112 ranges, all before the first packet is read. The map is the fallback.
        let file = self.backing.file();
        // a 32 KiB window first (16 records of up to 1.5 KB fit), the large one if it holds no
        // chain (the bench trace's 112 cuts: 1.0-1.7 ms on one core, against 4.1-5.2 ms with
        // 256 KiB windows and 5.7 ms with 16 KiB ones, which often hold no whole chain). The
        // probing is done before any packet is read: the cores share it.
        let probe = |target: usize, window: &mut [u8]| -> Option<usize> {
            let probed = file.and_then(|f| {
                [PROBE_WINDOW / 8, PROBE_WINDOW]
                    .into_iter()
                    .find_map(|size| {
                        use std::os::unix::fs::FileExt;
                        let got = f.read_at(&mut window[..size], target as u64).ok()?;
                        let w = &window[..got];
                        let eof = target + got == len;
                        (0..got)
                            .find(|&c| plausible_chain_in(&h, w, c, eof))
                            .map(|c| target + c)
                    })
            });
            probed.or_else(|| {
                (target..len.min(target + (4 << 20))).find(|&c| plausible_chain(&h, bytes, c))
            })
        };
        let targets: Vec<usize> = (1..n).map(|k| start + (len - start) * k / n).collect();
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let per = targets.len().div_ceil(threads).max(1);
        let found: Vec<Option<usize>> = std::thread::scope(|scope| {
            let probe = &probe;
            let parts: Vec<_> = targets
                .chunks(per)
                .map(|part| {
                    scope.spawn(move || {
                        let mut window = vec![0u8; PROBE_WINDOW];
                        part.iter()
                            .map(|&t| probe(t, &mut window))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            parts
                .into_iter()
                .flat_map(|p| p.join().expect("a probing thread panicked"))
                .collect()
        });
        let mut cuts = vec![start];
        for c in found {
            let c = c?;
            if c > *cuts.last().unwrap() {
                cuts.push(c);
            }
        }
        cuts.push(len);
        let mut out = Vec::with_capacity(cuts.len() - 1);
        for w in cuts.windows(2) {
            out.push(FileReader {
                path: self.path.clone(),
                backing: self.backing.chunk(w[0], w[1])?,
                format: self.format,
                pcap: self.pcap,
                be: self.be,
                section_ifaces: self.section_ifaces.clone(),
                interfaces: self.interfaces.clone(),
                clocks: self.clocks.clone(),
                sections: self.sections,
                packets: 0,
                skipped_blocks: 0,
                damaged_options: 0,
                done: false,
            });
        }
        Some(out)
    }

    fn io(&mut self, source: io::Error) -> ReadError {
        self.done = true;
        ReadError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn damaged(&mut self, reason: String) -> ReadError {
        self.done = true;
        ReadError::Damaged {
            path: self.path.clone(),
            offset: self.backing.offset(),
            reason,
            packets: self.packets,
        }
    }

    #[inline]
    fn next_found(&mut self) -> Result<Option<Found>, ReadError> {
        if self.done {
            return Ok(None);
        }
        match self.pcap {
            Some(h) => self.next_pcap_record(h),
            None => self.next_pcapng_packet(),
        }
    }

    #[inline]
    fn next_pcap_record(&mut self, h: pcap::Header) -> Result<Option<Found>, ReadError> {
        let hl = h.record_header_len();
        // The record is usually whole in what is mapped or buffered already: no window call.
        let whole = {
            let cur = self.backing.current();
            if cur.len() >= hl {
                let rec = pcap::parse_record(&h, cur);
                let total = hl + rec.caplen as usize;
                (rec.caplen <= pcap::MAX_SNAPLEN && cur.len() >= total).then_some((rec, total))
            } else {
                None
            }
        };
        let (rec, total) = match whole {
            Some(found) => found,
            None => match self.pcap_record_window(&h)? {
                Some(found) => found,
                None => return Ok(None),
            },
        };
        // the next record's header and the first bytes of its packet
        if let Some(next) = self.backing.current().get(total + hl + 32) {
            weir_packet::prefetch(next);
        }
        let record_offset = self.backing.offset();
        self.backing.advance(total);
        self.packets += 1;
        // Like libpcap, a record longer than the file's snap length is cut to it.
        let caplen = rec.caplen.min(pcap::effective_snaplen(&h)) as usize;
        Ok(Some(Found {
            record_offset,
            block_len: total,
            data_at: hl,
            caplen,
            opts: (0, 0),
            meta: PacketMeta {
                ts_ns: rec.ts_ns,
                orig_len: rec.orig_len,
                interface: 0,
            },
            link: h.link,
        }))
    }

    /// Makes the next record whole in the window (reading more of a stream); `None` at the end.
    #[cold]
    fn pcap_record_window(
        &mut self,
        h: &pcap::Header,
    ) -> Result<Option<(pcap::Record, usize)>, ReadError> {
        let hl = h.record_header_len();
        let have = match self.backing.window(hl) {
            Ok(w) => w.len(),
            Err(e) => return Err(self.io(e)),
        };
        if have == 0 {
            self.done = true;
            self.backing.release_read();
            return Ok(None);
        }
        if have < hl {
            return Err(self.damaged(format!(
                "truncated dump file; tried to read {hl} header bytes, only got {have}"
            )));
        }
        let rec = pcap::parse_record(h, self.backing.current());
        if rec.caplen > pcap::MAX_SNAPLEN {
            return Err(self.damaged(format!(
                "invalid packet capture length {}, bigger than maximum of {}",
                rec.caplen,
                pcap::MAX_SNAPLEN
            )));
        }
        let total = hl + rec.caplen as usize;
        let have = match self.backing.window(total) {
            Ok(w) => w.len(),
            Err(e) => return Err(self.io(e)),
        };
        if have < total {
            return Err(self.damaged(format!(
                "truncated dump file; tried to read {} captured bytes, only got {}",
                rec.caplen,
                have - hl
            )));
        }
        Ok(Some((rec, total)))
    }

    fn next_pcapng_packet(&mut self) -> Result<Option<Found>, ReadError> {
        loop {
            let have = match self.backing.window(12) {
                Ok(w) => w.len(),
                Err(e) => return Err(self.io(e)),
            };
            if have == 0 {
                self.done = true;
                self.backing.release_read();
                return Ok(None);
            }
            if have < 12 {
                return Err(self.damaged(format!(
                    "truncated dump file; tried to read 12 block header bytes, only got {have}"
                )));
            }
            let w = self.backing.current();
            let kind_le = u32::from_le_bytes(w[..4].try_into().unwrap());
            let be = if kind_le == pcapng::SHB {
                match pcapng::section_order(w) {
                    Ok(be) => be,
                    Err(reason) => return Err(self.damaged(reason)),
                }
            } else {
                self.be
            };
            let kind = pcapng::u32_at(w, 0, be);
            let len = pcapng::u32_at(w, 4, be);
            if len < 12 || len % 4 != 0 || len > pcapng::MAX_BLOCK {
                return Err(self.damaged(format!(
                    "block of type {kind:#x} has an invalid total length {len}"
                )));
            }
            let len = len as usize;
            let have = match self.backing.window(len) {
                Ok(w) => w.len(),
                Err(e) => return Err(self.io(e)),
            };
            if have < len {
                return Err(self.damaged(format!(
                    "truncated dump file; tried to read {len} block bytes, only got {have}"
                )));
            }
            let trailer = pcapng::u32_at(self.backing.current(), len - 4, be);
            if trailer as usize != len {
                return Err(self.damaged(format!(
                    "block of type {kind:#x}: total length {len} at the start but {trailer} at the end"
                )));
            }
            if self.sections == 0 && kind != pcapng::SHB {
                return Err(self.damaged("file does not start with a section header".into()));
            }
            let block_start = self.backing.offset();
            self.backing.advance(len);
            let block = self.backing.behind(len);
            let found = match kind {
                pcapng::SHB => {
                    if let Err(reason) = pcapng::check_shb(block, be) {
                        return Err(self.damaged_at(block_start, reason));
                    }
                    self.be = be;
                    self.sections += 1;
                    // Interface ids start again in each section.
                    self.section_ifaces.clear();
                    None
                }
                pcapng::IDB => match pcapng::parse_idb(block, be) {
                    Ok(idb) => {
                        self.add_interface(idb);
                        None
                    }
                    Err(reason) => return Err(self.damaged_at(block_start, reason)),
                },
                pcapng::EPB | pcapng::OPB => match pcapng::parse_epb_opb(kind, block, be) {
                    Ok(p) => Some(p),
                    Err(reason) => return Err(self.damaged_at(block_start, reason)),
                },
                pcapng::SPB => {
                    let snaplen = match self.section_ifaces.first() {
                        Some(&g) => self.interfaces[g as usize].snaplen,
                        None => {
                            return Err(self.damaged_at(
                                block_start,
                                "simple packet block before any interface description block".into(),
                            ))
                        }
                    };
                    match pcapng::parse_spb(block, be, snaplen) {
                        Ok(p) => Some(p),
                        Err(reason) => return Err(self.damaged_at(block_start, reason)),
                    }
                }
                _ => {
                    self.skipped_blocks += 1;
                    None
                }
            };
            let Some(p) = found else { continue };
            let Some(&global) = self.section_ifaces.get(p.iface as usize) else {
                return Err(self.damaged_at(
                    block_start,
                    format!(
                        "a packet arrived on interface {}, but there's no Interface Description Block for that interface",
                        p.iface
                    ),
                ));
            };
            let clock = self.clocks[global as usize];
            let ts_ns = match p.ts_units {
                Some(units) => {
                    let ns =
                        clock.resol.to_ns(units) as i128 + clock.offset_s as i128 * 1_000_000_000;
                    ns.clamp(0, u64::MAX as i128) as u64
                }
                None => 0,
            };
            self.packets += 1;
            self.damaged_options += p.opts_damaged as u64;
            return Ok(Some(Found {
                record_offset: block_start,
                block_len: len,
                data_at: p.data_at,
                caplen: (p.caplen.min(clock.snaplen)) as usize,
                opts: p.opts,
                meta: PacketMeta {
                    ts_ns,
                    orig_len: p.orig_len,
                    interface: global,
                },
                link: self.interfaces[global as usize].link,
            }));
        }
    }

    fn damaged_at(&mut self, offset: u64, reason: String) -> ReadError {
        self.done = true;
        ReadError::Damaged {
            path: self.path.clone(),
            offset,
            reason,
            packets: self.packets,
        }
    }

    fn add_interface(&mut self, idb: pcapng::Idb) {
        let global = self.interfaces.len() as u32;
        let ts_resolution = match idb.resol {
            pcapng::TsResol::Dec(6) => "µs".to_string(),
            pcapng::TsResol::Dec(9) => "ns".to_string(),
            pcapng::TsResol::Dec(e) => format!("10^-{e} s"),
            pcapng::TsResol::Bin(e) => format!("2^-{e} s"),
        };
        let snaplen = if idb.snaplen == 0 || idb.snaplen > pcap::MAX_SNAPLEN {
            pcap::MAX_SNAPLEN
        } else {
            idb.snaplen
        };
        self.clocks.push(Clock {
            resol: idb.resol,
            offset_s: idb.offset_s,
            snaplen,
        });
        self.interfaces.push(Interface {
            link: idb.link,
            snaplen: idb.snaplen,
            name: idb.name,
            description: idb.description,
            ts_resolution,
            fcs_len: idb.fcs_len,
            swapped: self.be != cfg!(target_endian = "big"),
        });
        self.section_ifaces.push(global);
    }
}

/// Records a split point must be followed by, all plausible, to be taken as a record boundary.
const CHAIN: usize = 16;
/// Bytes read at each cut target of [`FileReader::split`] to find a record boundary.
const PROBE_WINDOW: usize = 256 << 10;

/// True when `CHAIN` plausible pcap records (or fewer, ending exactly at the end of the file)
/// start at `at`: sane lengths within the snap length, sub-second field in range, timestamps
/// within a day of each other.
fn plausible_chain(h: &pcap::Header, bytes: &[u8], at: usize) -> bool {
    plausible_chain_in(h, bytes, at, true)
}

/// [`plausible_chain`] in a window of the file that ends at its end only when `eof`: a chain
/// running past a window that does not is not accepted (the search moves on, or falls back to
/// the whole map).
fn plausible_chain_in(h: &pcap::Header, bytes: &[u8], mut at: usize, eof: bool) -> bool {
    let hl = h.record_header_len();
    let snap = pcap::effective_snaplen(h).max(h.snaplen);
    let frac_max = if h.nanos { 1_000_000_000 } else { 1_000_000 };
    let mut prev_sec: Option<u32> = None;
    for _ in 0..CHAIN {
        if at == bytes.len() {
            return eof;
        }
        if at + hl > bytes.len() {
            return false;
        }
        let sec = pcap::u32_at(bytes, at, h.swapped);
        let frac = pcap::u32_at(bytes, at + 4, h.swapped);
        let caplen = pcap::u32_at(bytes, at + 8, h.swapped);
        let orig = pcap::u32_at(bytes, at + 12, h.swapped);
        let sane = frac < frac_max
            && caplen <= snap
            && caplen <= pcap::MAX_SNAPLEN
            && orig >= caplen
            && orig <= 1 << 20
            && prev_sec.is_none_or(|p| p.abs_diff(sec) <= 86_400);
        if !sane {
            return false;
        }
        prev_sec = Some(sec);
        at += hl + caplen as usize;
    }
    // in a window, the last record may run past it: its header was checked
    at <= bytes.len() || !eof
}
