//! `weir extract`: the packets of a time range matching a tcpdump expression, from a store (or
//! any capture files with their `.idx` indexes), in global time order, as pcap or pcapng.
//!
//! Per segment: the index (when present, valid and fresh) turns the expression and the time
//! range into candidate chunks; only those are read, plus whatever the index does not cover yet
//! (the tail of a segment being written). Every packet read is confirmed by the BPF program
//! compiled for the segment exactly as `tcpdump -r` would compile it, and by its timestamp, so
//! the result is exactly tcpdump's selection; the index only decides what need not be read. A
//! missing, corrupt or stale index is reported and the segment scanned whole.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use weir_index::{index_path, Index, IndexError, Query, HEAD_LEN};
use weir_packet::PacketMeta;
use weir_pcap::{FileReader, ReadError};
use weir_pcap::{Interface, PacketWriter};

use crate::args;
use crate::args::Format;
use crate::output::{self, Status};

/// Arguments of `weir extract`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("path", |a| a.required(true)))]
pub struct Args {
    /// Store directory (or a capture file with its `.idx`) to search.
    #[arg(value_name = "DIR|FILE")]
    input: PathBuf,
    /// More stores or files to search with it.
    #[arg(short = 'r', long = "read", value_name = "DIR|FILE")]
    more: Vec<PathBuf>,
    /// Earliest packet time: seconds since the epoch or a UTC date (`2026-11-22T10:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = args::time, allow_negative_numbers = true)]
    from: Option<u64>,
    /// Latest packet time (inclusive), same forms as --from.
    #[arg(long, value_name = "TIME", value_parser = args::time, allow_negative_numbers = true)]
    to: Option<u64>,
    #[command(flatten)]
    out: args::Output,
    /// Print how much the index narrowed the search.
    #[arg(short = 'v', long)]
    verbose: bool,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub fn check(&self) -> Result<(), String> {
        if let (Some(from), Some(to)) = (self.from, self.to) {
            if from > to {
                return Err("--from is after --to".into());
            }
        }
        self.out.check(false)
    }
}

/// One segment (or capture file) to search.
#[derive(Debug, Clone)]
pub struct SegmentRef {
    /// The file.
    pub path: PathBuf,
    /// Its store's manifest lists it as being written (by a running recorder, or by one that
    /// stopped without closing it).
    pub open: bool,
    /// A recorder holds its store right now.
    pub live: bool,
}

/// Ends the process on a usage error found after parsing (options that do not go together):
/// the message as clap prints its own, exit status 2.
pub fn usage_exit(msg: impl std::fmt::Display) -> ! {
    clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{msg}\n")).exit()
}

/// Refuses stdin where a command needs files it can read twice (exit 2, like any usage error).
pub fn refuse_stdin(inputs: &[PathBuf], command: &str) {
    if inputs.iter().any(|p| p.as_os_str() == "-") {
        usage_exit(format!(
            "weir {command} reads stores and capture files, not stdin (`-`): \
             save the capture to a file first"
        ));
    }
}

/// The segment files of the inputs, in order: a store's by its manifest (a directory without
/// one: its capture files by name), files as given. A path that does not exist, and a directory
/// that is neither a store nor holds capture files, are errors. A segment the manifest lists
/// but whose file is gone is named in a warning and `status` becomes damaged (unless a running
/// recorder's retention deleted it meanwhile); a store without segments yet is said.
pub fn segments_of(inputs: &[PathBuf], status: &mut Status) -> Result<Vec<SegmentRef>> {
    let mut out = Vec::new();
    for p in inputs {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot open {}", p.display()))?;
        if !meta.is_dir() {
            out.push(SegmentRef {
                path: p.clone(),
                open: false,
                live: false,
            });
            continue;
        }
        let live = weir_store::recorder_running(p);
        let listed = weir_store::Manifest::load(p)
            .with_context(|| format!("cannot read the manifest of {}", p.display()))?;
        let mut files: Vec<SegmentRef> = match listed {
            Some(m) => {
                if m.segments.is_empty() {
                    eprintln!("weir: {}: the store holds no segment yet", p.display());
                }
                let mut now: Option<weir_store::Manifest> = None;
                let mut v = Vec::new();
                for s in &m.segments {
                    let path = p.join(&s.file);
                    if !path.exists() {
                        if live {
                            // Retention of the running recorder deletes old segments: gone
                            // from a fresh manifest too means deleted on purpose.
                            if now.is_none() {
                                now = weir_store::Manifest::load(p).ok().flatten();
                            }
                            let still = now
                                .as_ref()
                                .is_some_and(|m| m.segments.iter().any(|x| x.file == s.file));
                            if !still {
                                continue;
                            }
                        }
                        eprintln!(
                            "weir: warning: {}: segment {} listed in the manifest is missing \
                             (deleted?); its {} packets cannot be searched",
                            p.display(),
                            s.file,
                            s.packets
                        );
                        *status = Status::Damaged;
                        continue;
                    }
                    v.push(SegmentRef {
                        path,
                        open: s.state == weir_store::SegmentState::Open,
                        live,
                    });
                }
                v
            }
            None => {
                let v: Vec<SegmentRef> = std::fs::read_dir(p)
                    .with_context(|| format!("cannot list {}", p.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|f| f.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
                    .map(|path| SegmentRef {
                        path,
                        open: false,
                        live: false,
                    })
                    .collect();
                if v.is_empty() {
                    bail!(
                        "{}: not a store (no manifest.json) and no capture files (.pcap, .pcapng) in it",
                        p.display()
                    );
                }
                v
            }
        };
        files.sort_by(|a, b| a.path.cmp(&b.path));
        out.extend(files);
    }
    Ok(out)
}

/// The first bytes of a file (what an index's file check hashes) and its length.
pub fn head_of(path: &Path) -> Result<(Vec<u8>, u64)> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut head = vec![0u8; HEAD_LEN];
    let n = f.read_at(&mut head, 0)?;
    head.truncate(n);
    Ok((head, f.metadata()?.len()))
}

/// Loads the index of a segment, checking it against the segment.
pub fn load_index(path: &Path) -> Result<Index, IndexError> {
    let (head, len) = head_of(path).map_err(|e| IndexError::Io(std::io::Error::other(e)))?;
    Index::load(&index_path(path), &head, len)
}

/// A segment opened for reading.
pub struct Opened {
    /// Its reader.
    pub reader: FileReader,
    /// Bytes readable (a snapshot's whole blocks for a segment being written).
    pub len: u64,
    /// Its first bytes, for the index's file check.
    pub head: Vec<u8>,
}

/// Largest record a recorder writes (its buffer's largest captured length).
const MAX_CAPLEN: u32 = 262_144 + 4;

/// Opens a segment. One being written is read whole into memory (with `read(2)`: the recorder
/// cuts the tail of pcap segments at each flush, which would fault a mapped reader with SIGBUS)
/// and cut after its last whole block or record, so the reader sees a clean prefix. Returns
/// `None`, with a warning unless its recorder is still writing it, for a segment that holds no
/// packet yet, or one whose file cannot be opened (then `status` is damaged).
pub fn open_segment(seg: &SegmentRef, status: &mut Status) -> Result<Option<Opened>> {
    let path = &seg.path;
    if seg.open {
        let mut bytes = match std::fs::read(path) {
            Ok(b) => b,
            // Its recorder failed and deleted it, or retention did: nothing to read.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && seg.live => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        };
        let scan = weir_store::scan::scan_bytes(&bytes, MAX_CAPLEN);
        if !seg.live && scan.valid_len < scan.file_len {
            eprintln!(
                "weir: warning: {}: {} bytes of unfinished tail left by a recorder that stopped \
                 are not read (`weir record -o` on the store repairs it)",
                path.display(),
                scan.file_len - scan.valid_len
            );
            *status = Status::Damaged;
        }
        if scan.packets == 0 {
            if !seg.live {
                eprintln!(
                    "weir: warning: {}: no packet in it (left by a recorder that stopped); skipped",
                    path.display()
                );
            }
            return Ok(None);
        }
        bytes.truncate(scan.valid_len as usize);
        let head = bytes[..bytes.len().min(HEAD_LEN)].to_vec();
        let reader = FileReader::from_bytes(path, bytes)?;
        return Ok(Some(Opened {
            reader,
            len: scan.valid_len,
            head,
        }));
    }
    let gone = |e: &anyhow::Error| {
        e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        })
    };
    let (head, len) = match head_of(path) {
        Ok(h) => h,
        // Retention of the running recorder deleted it since the manifest was read.
        Err(e) if seg.live && gone(&e) => return Ok(None),
        Err(e) => {
            eprintln!("weir: warning: {e:#}; skipped");
            *status = Status::Damaged;
            return Ok(None);
        }
    };
    if len == 0 {
        eprintln!(
            "weir: warning: {}: empty file (0 bytes), skipped",
            path.display()
        );
        return Ok(None);
    }
    match FileReader::open(path) {
        Ok(reader) => Ok(Some(Opened { reader, len, head })),
        Err(e) => {
            eprintln!("weir: warning: {e}; skipped");
            *status = Status::Damaged;
            Ok(None)
        }
    }
}

/// One selected packet: where it is, for the time-ordered second pass.
struct Hit {
    ts: u64,
    segment: u32,
    offset: u64,
}

/// A file range to read: records starting in `[start, end)`, those before `skip_below` skipped.
struct Range {
    start: u64,
    end: u64,
    skip_below: u64,
}

/// Runs `weir extract`.
///
/// A store with no segment yet gives an empty output (said on stderr, exit 0); a directory
/// that is not a store and holds no capture files is an error (exit 1). A segment the manifest
/// lists but whose file is gone, and damage, are warned about and end in exit 1 after every
/// readable packet was written.
pub fn run(args: Args) -> Result<Status> {
    let (from, to) = (args.from.unwrap_or(0), args.to.unwrap_or(u64::MAX));
    let mut inputs = vec![args.input.clone()];
    inputs.extend(args.more.iter().cloned());
    refuse_stdin(&inputs, "extract");
    let mut filters = weir_filter::FilterSet::new(&args.expr.joined())?;
    let query = Query::from_expr(&args.expr.joined());
    let mut status = Status::Clean;
    let segments = segments_of(&inputs, &mut status)?;
    let mut hits = Vec::new();
    let mut readers: Vec<Option<FileReader>> = Vec::with_capacity(segments.len());
    let (mut read_bytes, mut total_bytes) = (0u64, 0u64);
    for (si, seg) in segments.iter().enumerate() {
        let path = &seg.path;
        readers.push(None);
        let Some(Opened {
            mut reader,
            len,
            head,
        }) = open_segment(seg, &mut status)?
        else {
            continue;
        };
        total_bytes += len;
        let quiet = seg.open && seg.live; // its index lags behind by design
        let ranges = match Index::load(&index_path(path), &head, len) {
            Ok(ix) => {
                let mut r: Vec<Range> = ix
                    .candidates(&query, from, to)
                    .into_iter()
                    .map(|(start, end)| Range {
                        start,
                        end,
                        skip_below: 0,
                    })
                    .collect();
                if ix.covered_len < len {
                    // Not indexed yet: the records starting at or after `covered_len`.
                    r.push(Range {
                        start: ix.tail_start(),
                        end: u64::MAX,
                        skip_below: ix.covered_len,
                    });
                }
                r
            }
            Err(e) => {
                match &e {
                    IndexError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        if args.verbose {
                            eprintln!("weir: {}: no index, scanning it", path.display());
                        }
                    }
                    _ if quiet => {}
                    _ => eprintln!(
                        "weir: warning: {}: {e}; scanning the segment (`weir index` rebuilds it)",
                        path.display()
                    ),
                }
                vec![Range {
                    start: 0,
                    end: u64::MAX,
                    skip_below: 0,
                }]
            }
        };
        let whole = ranges.len() == 1 && ranges[0].start == 0 && ranges[0].end == u64::MAX;
        // Reading the first packet parses the interface blocks that precede it.
        let mut damage: Option<u64> = None;
        let first = match reader.next_packet() {
            Ok(p) => p.map(|p| p.record_offset),
            Err(e) => {
                report_damage(&e, true, &mut damage, &mut status)?;
                None
            }
        };
        let Some(first) = first else {
            continue;
        };
        let mut per_iface = if filters.is_empty() {
            Vec::new()
        } else {
            filters.for_interfaces(reader.interfaces())?
        };
        let mut any = false;
        for range in ranges {
            let start = range.start.max(first);
            if start >= len || damage.is_some_and(|d| start >= d) {
                continue;
            }
            // Counting from the first packet: a damage report of a whole scan counts right.
            reader.resume_at(start, 0)?;
            loop {
                let p = match reader.next_packet() {
                    Ok(Some(p)) => p,
                    Ok(None) => break,
                    Err(e) => {
                        report_damage(&e, whole, &mut damage, &mut status)?;
                        break;
                    }
                };
                if p.record_offset >= range.end || damage.is_some_and(|d| p.record_offset >= d) {
                    break;
                }
                if p.record_offset < range.skip_below {
                    continue;
                }
                read_bytes += p.data.len() as u64;
                if p.meta.ts_ns < from || p.meta.ts_ns > to {
                    continue;
                }
                let hit = Hit {
                    ts: p.meta.ts_ns,
                    segment: si as u32,
                    offset: p.record_offset,
                };
                if !filters.is_empty() {
                    let iface = p.meta.interface as usize;
                    let matched = if iface < per_iface.len() {
                        per_iface[iface].matches(p.data, p.meta.orig_len)
                    } else {
                        // A new interface block: the packet borrows the reader, so copy it out.
                        let (data, orig_len) = (p.data.to_vec(), p.meta.orig_len);
                        per_iface = filters.for_interfaces(reader.interfaces())?;
                        per_iface
                            .get(iface)
                            .is_some_and(|f| f.matches(&data, orig_len))
                    };
                    if !matched {
                        continue;
                    }
                }
                hits.push(hit);
                any = true;
            }
        }
        if any {
            readers[si] = Some(reader);
        }
    }
    // Global time order; ties keep segment and file order.
    hits.sort_by_key(|h| (h.ts, h.segment, h.offset));
    let written = write_hits(&args, &mut readers, &hits)?;
    if args.verbose {
        eprintln!(
            "weir extract: {written} packets from {} segment(s); read {} of {} bytes of packet data ({:.2} %)",
            segments.len(),
            read_bytes,
            total_bytes,
            read_bytes as f64 * 100.0 / total_bytes.max(1) as f64
        );
    }
    Ok(status)
}

/// Reports the damage that ends a segment's readable part, once per segment (a damaged region
/// can be reached from an index range and from the unindexed tail). `whole`: the segment is
/// read from its first packet on, so the reader's count of packets before the damage is right.
/// Errors that are not damage are returned.
fn report_damage(
    e: &ReadError,
    whole: bool,
    damage: &mut Option<u64>,
    status: &mut Status,
) -> Result<()> {
    let ReadError::Damaged {
        path,
        offset,
        reason,
        packets,
    } = e
    else {
        bail!("{e}");
    };
    if damage.is_none_or(|d| *offset < d) {
        if damage.is_none() {
            if whole {
                eprintln!(
                    "weir: warning: {}: {reason} at byte offset {offset}; {packets} packets read before the damage",
                    path.display()
                );
            } else {
                eprintln!(
                    "weir: warning: {}: {reason} at byte offset {offset}; the packets before it were searched",
                    path.display()
                );
            }
        }
        *damage = Some(*offset);
    }
    *status = Status::Damaged;
    Ok(())
}

/// Second pass: reads each selected packet again (through the readers of the first pass:
/// mapped segments, or the snapshot of a segment being written) and writes it, mapping each
/// segment's interfaces to the output's.
fn write_hits(args: &Args, readers: &mut [Option<FileReader>], hits: &[Hit]) -> Result<u64> {
    let format = args.out.format(Format::Pcap);
    let mut specs: Vec<Interface> = Vec::new();
    // Interfaces of every segment involved, in order of first use.
    let mut maps: Vec<Option<Vec<u32>>> = readers.iter().map(|_| None).collect();
    for h in hits {
        let slot = &mut maps[h.segment as usize];
        if slot.is_some() {
            continue;
        }
        let r = readers[h.segment as usize]
            .as_ref()
            .context("a selected packet's segment was not kept")?;
        let map = r
            .interfaces()
            .iter()
            .map(|i| {
                let spec = i.clone();
                match specs
                    .iter()
                    .position(|s| s.link == spec.link && s.name == spec.name)
                {
                    Some(k) => k as u32,
                    None => {
                        specs.push(spec);
                        (specs.len() - 1) as u32
                    }
                }
            })
            .collect();
        *slot = Some(map);
    }
    if specs.is_empty() {
        specs.push(Interface::new(weir_packet::LinkType::ETHERNET, 262_144));
    }
    let pcap = matches!(format, weir_pcap::FileFormat::Pcap(_));
    if pcap && specs.iter().any(|s| s.link != specs[0].link) {
        bail!("the packets come from several link types; use --format pcapng");
    }
    let out = args.out.path.as_deref().context("-w is required")?;
    let mut w = PacketWriter::new(output::create(out)?, format, &specs)?;
    for h in hits {
        let r = readers[h.segment as usize].as_mut().expect("kept above");
        let map = maps[h.segment as usize].as_ref().expect("mapped above");
        r.seek(h.offset)?;
        let p = r.next_packet()?.context("a selected packet vanished")?;
        let interface = if pcap {
            0
        } else {
            *map.get(p.meta.interface as usize)
                .context("a selected packet's interface vanished")?
        };
        w.write(
            &PacketMeta {
                interface,
                ..p.meta
            },
            p.data,
        )?;
    }
    w.finish()?.commit()?;
    Ok(hits.len() as u64)
}
