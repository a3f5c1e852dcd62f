//! `weir info`: a capinfos-like summary of each capture file, as text or `--json`.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;
use weir_pcap::{FileReader, Interface, Packet, ReadError};

use weir_filter::FilterSet;

use crate::input::{for_each_packet, Visitor};
use crate::output::{self, Status};
use crate::time;

/// Arguments of `weir info`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Capture files (pcap or pcapng); `-` reads stdin.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    /// Print a JSON array with one object per file instead of text.
    #[arg(long)]
    json: bool,
}

/// One interface of a file, as reported.
#[derive(Serialize, Debug)]
struct InterfaceInfo {
    link_type: u32,
    link_type_name: String,
    snaplen: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    ts_resolution: String,
}

/// Where a damaged file stopped.
#[derive(Serialize, Debug)]
struct Damage {
    offset: u64,
    reason: String,
}

/// The summary of one file.
#[derive(Serialize, Debug, Default)]
struct FileInfo {
    file: String,
    format: String,
    interfaces: Vec<InterfaceInfo>,
    packets: u64,
    /// Sum of captured lengths.
    captured_bytes: u64,
    /// Sum of lengths on the wire.
    wire_bytes: u64,
    /// Packets whose captured length is below their wire length.
    truncated_packets: u64,
    first_ns: Option<u64>,
    last_ns: Option<u64>,
    duration_s: f64,
    packets_per_s: f64,
    bits_per_s: f64,
    mean_packet_bytes: f64,
    /// Packets whose timestamp is earlier than the one before.
    out_of_order: u64,
    protocols: BTreeMap<String, u64>,
    decode_errors: BTreeMap<String, u64>,
    skipped_blocks: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    damage: Option<Damage>,
}

struct Collector {
    files: Vec<FileInfo>,
    cur: FileInfo,
    prev_ts: u64,
}

impl Visitor for Collector {
    fn start_file(&mut self, reader: &FileReader) -> Result<()> {
        self.cur = FileInfo {
            file: reader.path().display().to_string(),
            format: reader.format_name().to_string(),
            ..FileInfo::default()
        };
        self.prev_ts = 0;
        Ok(())
    }

    #[inline]
    fn packet(&mut self, _interfaces: &[Interface], p: &Packet<'_>) -> Result<()> {
        let c = &mut self.cur;
        c.packets += 1;
        c.captured_bytes += p.data.len() as u64;
        c.wire_bytes += p.meta.orig_len as u64;
        if (p.data.len() as u64) < p.meta.orig_len as u64 {
            c.truncated_packets += 1;
        }
        let ts = p.meta.ts_ns;
        c.first_ns = Some(c.first_ns.map_or(ts, |f| f.min(ts)));
        c.last_ns = Some(c.last_ns.map_or(ts, |l| l.max(ts)));
        if ts < self.prev_ts {
            c.out_of_order += 1;
        }
        self.prev_ts = ts;
        let d = weir_decode::decode(p.link, p.data);
        *c.protocols
            .entry(weir_decode::protocol_name(&d).to_string())
            .or_default() += 1;
        if let Some(e) = d.error() {
            *c.decode_errors.entry(e.to_string()).or_default() += 1;
        }
        Ok(())
    }

    fn end_file(&mut self, reader: &FileReader, damage: Option<&ReadError>) -> Result<()> {
        let mut c = std::mem::take(&mut self.cur);
        c.interfaces = reader
            .interfaces()
            .iter()
            .map(|i| InterfaceInfo {
                link_type: i.link.0,
                link_type_name: i.link.name().unwrap_or("unknown").to_string(),
                snaplen: i.snaplen,
                name: i.name.clone(),
                ts_resolution: i.ts_resolution.clone(),
            })
            .collect();
        c.skipped_blocks = reader.skipped_blocks();
        if let (Some(f), Some(l)) = (c.first_ns, c.last_ns) {
            c.duration_s = (l - f) as f64 / 1e9;
        }
        if c.duration_s > 0.0 {
            c.packets_per_s = c.packets as f64 / c.duration_s;
            c.bits_per_s = c.captured_bytes as f64 * 8.0 / c.duration_s;
        }
        if c.packets > 0 {
            c.mean_packet_bytes = c.captured_bytes as f64 / c.packets as f64;
        }
        if let Some(ReadError::Damaged { offset, reason, .. }) = damage {
            c.damage = Some(Damage {
                offset: *offset,
                reason: reason.clone(),
            });
        }
        self.files.push(c);
        Ok(())
    }
}

/// Runs `weir info`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let mut collector = Collector {
        files: Vec::new(),
        cur: FileInfo::default(),
        prev_ts: 0,
    };
    let mut filters = FilterSet::new("")?;
    let status = for_each_packet(&args.files, &mut filters, &mut collector)?;
    let mut out = BufWriter::new(output::stdout());
    if args.json {
        let json = serde_json::to_string_pretty(&collector.files)?;
        writeln!(out, "{json}")?;
    } else {
        for (n, f) in collector.files.iter().enumerate() {
            if n > 0 {
                writeln!(out)?;
            }
            print_text(&mut out, f)?;
        }
    }
    out.into_inner().map_err(|e| e.into_error())?.commit()?;
    Ok(status)
}

fn print_text(out: &mut impl Write, f: &FileInfo) -> Result<()> {
    writeln!(out, "File name:           {}", f.file)?;
    writeln!(out, "File format:         {}", f.format)?;
    for (n, i) in f.interfaces.iter().enumerate() {
        writeln!(
            out,
            "Interface {n}:         {} ({}), snaplen {}, timestamps in {}{}",
            i.link_type_name,
            i.link_type,
            i.snaplen,
            i.ts_resolution,
            i.name
                .as_ref()
                .map(|n| format!(", name {n}"))
                .unwrap_or_default()
        )?;
    }
    writeln!(out, "Packets:             {}", f.packets)?;
    writeln!(out, "Captured bytes:      {}", f.captured_bytes)?;
    writeln!(out, "Wire bytes:          {}", f.wire_bytes)?;
    writeln!(out, "Truncated packets:   {}", f.truncated_packets)?;
    if let (Some(a), Some(b)) = (f.first_ns, f.last_ns) {
        writeln!(out, "First packet:        {} UTC", time::datetime(a))?;
        writeln!(out, "Last packet:         {} UTC", time::datetime(b))?;
    }
    writeln!(out, "Duration:            {:.9} s", f.duration_s)?;
    writeln!(out, "Packet rate:         {:.2} packets/s", f.packets_per_s)?;
    writeln!(out, "Data rate:           {:.2} bits/s", f.bits_per_s)?;
    writeln!(out, "Mean packet size:    {:.2} bytes", f.mean_packet_bytes)?;
    writeln!(out, "Out-of-order times:  {}", f.out_of_order)?;
    if !f.protocols.is_empty() {
        writeln!(out, "Protocols:")?;
        let mut mix: Vec<_> = f.protocols.iter().collect();
        mix.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (name, n) in mix {
            let pct = 100.0 * *n as f64 / f.packets.max(1) as f64;
            writeln!(out, "  {name:<18} {n:>10}  {pct:6.2} %")?;
        }
    }
    if !f.decode_errors.is_empty() {
        writeln!(out, "Decode errors:")?;
        for (what, n) in &f.decode_errors {
            writeln!(out, "  {n:>10}  {what}")?;
        }
    }
    if f.skipped_blocks > 0 {
        writeln!(out, "Skipped blocks:      {}", f.skipped_blocks)?;
    }
    if let Some(d) = &f.damage {
        writeln!(out, "Damaged at offset:   {} ({})", d.offset, d.reason)?;
    }
    Ok(())
}
