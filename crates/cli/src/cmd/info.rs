//! `weir info`: a capinfos-like summary of each capture file, as text or `--json`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::Result;
use weir_pcap::read::FileSummary;
use weir_pcap::{FileReader, Interface, Packet, ReadError};

use weir_sensor::read::Visitor;

use crate::input::read_filtered;
use crate::output::{self, Status};
use weir_packet::time;

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

/// Sums up each file as it is read.
#[derive(Default)]
struct Collector {
    files: Vec<FileSummary>,
    cur: FileSummary,
}

impl Visitor for Collector {
    type Error = anyhow::Error;

    fn start_file(&mut self, reader: &FileReader) -> Result<()> {
        self.cur = FileSummary::start(reader);
        Ok(())
    }

    #[inline]
    fn packet(&mut self, _interfaces: &[Interface], p: &Packet<'_>) -> Result<()> {
        self.cur.add(p);
        let d = weir_decode::decode(p.link, p.data);
        self.cur
            .add_protocol(weir_decode::protocol_name(&d), d.error());
        Ok(())
    }

    fn end_file(&mut self, reader: &FileReader, damage: Option<&ReadError>) -> Result<()> {
        let mut c = std::mem::take(&mut self.cur);
        c.finish(reader, damage);
        self.files.push(c);
        Ok(())
    }
}

/// Runs `weir info`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let mut collector = Collector::default();
    let status = read_filtered(&args.files, String::new(), &mut collector)?;
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

fn print_text(out: &mut impl Write, f: &FileSummary) -> Result<()> {
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
        for (name, n, pct) in f.protocol_mix() {
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
