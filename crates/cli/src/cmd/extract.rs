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
use weir_source::FileReader;
use weir_store::{InterfaceSpec, PacketWriter};

use super::input::Filters;
use super::read::Format;
use crate::output::{self, Status};

/// Arguments of `weir extract`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Store directory (or a capture file with its `.idx`) to search.
    #[arg(value_name = "DIR|FILE")]
    input: PathBuf,
    /// More stores or files to search with it.
    #[arg(short = 'r', long = "read", value_name = "DIR|FILE")]
    more: Vec<PathBuf>,
    /// Earliest packet time: seconds since the epoch or a UTC date (`2026-11-22T10:00:00Z`).
    #[arg(long, value_name = "TIME")]
    from: Option<String>,
    /// Latest packet time (inclusive), same forms as --from.
    #[arg(long, value_name = "TIME")]
    to: Option<String>,
    /// Write the packets here (`-` for stdout).
    #[arg(short = 'w', long = "write", value_name = "OUT", required = true)]
    output: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Pcap)]
    format: Format,
    /// Classic pcap with microsecond timestamps.
    #[arg(long)]
    micro: bool,
    /// Print how much the index narrowed the search.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// BPF filter expression in tcpdump syntax (several words are joined with spaces).
    #[arg(
        value_name = "EXPR",
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    expr: Vec<String>,
}

/// The segment files of the inputs, in order: a store's by its manifest (else by name), files
/// as given.
pub fn segments_of(inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in inputs {
        if !p.is_dir() {
            out.push(p.clone());
            continue;
        }
        let listed = weir_record::Manifest::load(p)
            .with_context(|| format!("cannot read the manifest of {}", p.display()))?;
        let mut files: Vec<PathBuf> = match listed {
            Some(m) => m.segments.iter().map(|s| p.join(&s.file)).collect(),
            None => std::fs::read_dir(p)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
                .collect(),
        };
        files.sort();
        out.extend(files.into_iter().filter(|f| f.exists()));
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

/// One selected packet: where it is, for the time-ordered second pass.
struct Hit {
    ts: u64,
    segment: u32,
    offset: u64,
}

/// Runs `weir extract`.
pub fn run(args: Args) -> Result<Status> {
    let parse = |t: &Option<String>, default: u64| -> Result<u64> {
        match t {
            None => Ok(default),
            Some(s) => crate::time::parse(s)
                .with_context(|| format!("cannot read the time {s:?} (seconds since the epoch or YYYY-MM-DDTHH:MM:SS[.frac]Z)")),
        }
    };
    let (from, to) = (parse(&args.from, 0)?, parse(&args.to, u64::MAX)?);
    if from > to {
        bail!("--from is after --to");
    }
    let mut filters = Filters::new(&args.expr)?;
    let query = Query::from_expr(&args.expr.join(" "));
    let mut inputs = vec![args.input.clone()];
    inputs.extend(args.more.iter().cloned());
    let segments = segments_of(&inputs)?;
    let mut hits = Vec::new();
    let (mut read_bytes, mut total_bytes) = (0u64, 0u64);
    let mut status = Status::Clean;
    for (si, path) in segments.iter().enumerate() {
        let len = std::fs::metadata(path)?.len();
        total_bytes += len;
        let ranges = match load_index(path) {
            Ok(ix) => {
                let mut r = ix.candidates(&query, from, to);
                if ix.covered_len < len {
                    r.push((ix.covered_len, u64::MAX)); // not indexed yet
                }
                r
            }
            Err(IndexError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                if args.verbose {
                    eprintln!("weir: {}: no index, scanning it", path.display());
                }
                vec![(0, u64::MAX)]
            }
            Err(e) => {
                eprintln!(
                    "weir: warning: {}: {e}; scanning the segment (`weir index` rebuilds it)",
                    path.display()
                );
                vec![(0, u64::MAX)]
            }
        };
        let mut reader =
            FileReader::open(path).with_context(|| format!("cannot open {}", path.display()))?;
        // Reading the first packet parses the interface blocks that precede it.
        let first = reader.next_packet()?.map(|p| p.record_offset);
        let mut per_iface = if filters.is_empty() {
            Vec::new()
        } else {
            filters.for_interfaces(reader.interfaces())?
        };
        for (start, end) in ranges {
            let Some(first) = first else { break };
            let start = start.max(first);
            if start >= len {
                continue;
            }
            reader.seek(start)?;
            while let Some(p) = output::next_or_damaged(&mut reader, &mut status)? {
                if p.record_offset >= end {
                    break;
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
            }
        }
    }
    // Global time order; ties keep segment and file order.
    hits.sort_by_key(|h| (h.ts, h.segment, h.offset));
    let written = write_hits(&args, &segments, &hits)?;
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

/// Second pass: reads each selected packet again (segments are memory-mapped, so this is
/// cheap) and writes it, mapping each segment's interfaces to the output's.
fn write_hits(args: &Args, segments: &[PathBuf], hits: &[Hit]) -> Result<u64> {
    let format = args.format.output(args.micro);
    let mut specs: Vec<InterfaceSpec> = Vec::new();
    let mut readers: Vec<Option<(FileReader, Vec<u32>)>> =
        (0..segments.len()).map(|_| None).collect();
    // Interfaces of every segment involved, in order of first use.
    for h in hits {
        let slot = &mut readers[h.segment as usize];
        if slot.is_some() {
            continue;
        }
        let mut r = FileReader::open(&segments[h.segment as usize])?;
        r.next_packet()?;
        let map = r
            .interfaces()
            .iter()
            .map(|i| {
                let spec = InterfaceSpec {
                    link: i.link,
                    snaplen: i.snaplen,
                    name: i.name.clone(),
                };
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
        *slot = Some((r, map));
    }
    if specs.is_empty() {
        specs.push(InterfaceSpec {
            link: weir_packet::LinkType::ETHERNET,
            snaplen: 262_144,
            name: None,
        });
    }
    let pcap = matches!(format, weir_store::OutputFormat::Pcap(_));
    if pcap && specs.iter().any(|s| s.link != specs[0].link) {
        bail!("the packets come from several link types; use --format pcapng");
    }
    let mut w = PacketWriter::new(output::create(&args.output)?, format, &specs)?;
    for h in hits {
        let (r, map) = readers[h.segment as usize].as_mut().expect("opened above");
        r.seek(h.offset)?;
        let p = r.next_packet()?.context("a selected packet vanished")?;
        let interface = if pcap {
            0
        } else {
            map[p.meta.interface as usize]
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
