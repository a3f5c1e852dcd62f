//! `weir read`: filter and convert capture files, like `tcpdump -r IN -w OUT EXPR`; without `-w`,
//! print one line per matching packet. With `--rules FILE`, the rule engine then drops, slices,
//! samples and tags the packets the expression passed; tags go into the pcapng packet comment
//! (classic pcap has no place for them: they are counted, and said once).

use anyhow::Result;
use weir_filter::effective_snaplen;
use weir_pcap::{FileFormat, FileReader, Interface, Packet, ReadError};
use weir_pcap::{PacketWriter, Precision};
use weir_rules::Tag;
use weir_sensor::read::{ReadConfig, Visitor};

use crate::args::{self, Format};
use crate::input;
use crate::lines::LinePrinter;
use crate::output::{self, Output, Status};

/// Arguments of `weir read`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("files", |a| a.required(true)))]
pub(crate) struct Args {
    #[command(flatten)]
    inputs: args::Inputs,
    #[command(flatten)]
    out: args::Output,
    /// Stop after this many matching packets.
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = args::count,
          allow_negative_numbers = true)]
    count: Option<u64>,
    #[command(flatten)]
    rules: args::RulesArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.rules.control.is_some() {
            return Err(
                "--control is for live commands: weir read applies its --rules file \
                        once, to the files it reads"
                    .into(),
            );
        }
        self.out.check(true)
    }
}

/// Runs `weir read`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let format = args.out.format(Format::Pcap);
    let mut cfg = ReadConfig {
        files: args.inputs.files.clone(),
        filter: args.expr.joined(),
        rules: args.rules.rules.clone(),
        // tags are pcapng packet comments; printed lines do not show them
        tags_stored: matches!(format, FileFormat::Pcapng),
    };
    let Some(out_path) = &args.out.path else {
        cfg.tags_stored = false;
        let mut printer = LinePrinter::stdout(args.count);
        let status = input::read(&cfg, &mut printer)?;
        printer.finish()?;
        return Ok(status);
    };
    output::check_inputs(&args.inputs.files, Some(out_path))?;
    let out = output::create(out_path)?;
    let mut sink = Sink {
        out: Some(out),
        writer: None,
        format,
        iface_map: Vec::new(),
        written: 0,
        limit: args.count,
        fallback: None,
        input_unit: None,
        tags_lost: 0,
    };
    let status = input::read(&cfg, &mut sink)?;
    sink.finish()?;
    Ok(status)
}

/// Writes matching packets; the writer is created on the first packet (or at the end), when the
/// link type of the output is known.
struct Sink {
    out: Option<Output>,
    writer: Option<PacketWriter<Output>>,
    format: FileFormat,
    /// Output interface id of each interface of the current input (`None` = not yet declared).
    iface_map: Vec<Option<u32>>,
    written: u64,
    limit: Option<u64>,
    /// What an output with no packet declares: the first input's first interface (what tcpdump
    /// does), Ethernet when there was none.
    fallback: Option<Interface>,
    /// The current input's timestamp unit when it is classic pcap: its records' time fields are
    /// copied as they are into a pcap output of the same unit (what tcpdump does).
    input_unit: Option<Precision>,
    /// Tagged packets written to classic pcap, which cannot hold their tags.
    tags_lost: u64,
}

/// An input's interface as the output declares it: with libpcap's snap length, as tcpdump.
fn spec(i: &Interface) -> Interface {
    Interface {
        snaplen: effective_snaplen(i.snaplen),
        ..i.clone()
    }
}

impl Sink {
    fn writer_for(&mut self, interfaces: &[Interface], iface: usize) -> Result<u32> {
        if self.iface_map.len() < interfaces.len() {
            self.iface_map.resize(interfaces.len(), None);
        }
        if let Some(id) = self.iface_map[iface] {
            return Ok(id);
        }
        let s = spec(&interfaces[iface]);
        let id = match &mut self.writer {
            Some(w) => w.add_interface(&s)?,
            None => {
                let out = self.out.take().expect("output taken once");
                // Like tcpdump, a pcap header describes the first input's interface (its snap
                // length may differ from the matching packet's file).
                let header = match (&self.format, &self.fallback) {
                    (FileFormat::Pcap(_), Some(first)) if first.link == s.link => first.clone(),
                    _ => s,
                };
                self.writer = Some(PacketWriter::new(out, self.format, &[header])?);
                0
            }
        };
        self.iface_map[iface] = Some(id);
        Ok(id)
    }

    fn finish(mut self) -> Result<()> {
        if self.tags_lost > 0 {
            eprintln!(
                "weir: warning: {} tagged packets written without their tags (classic pcap has \
                 no packet comments; --format pcapng stores them)",
                self.tags_lost
            );
        }
        if self.writer.is_none() {
            // No packet matched: still write a valid, empty file.
            let out = self.out.take().expect("output taken once");
            let s = self
                .fallback
                .take()
                .unwrap_or(Interface::new(weir_packet::LinkType::ETHERNET, 0));
            self.writer = Some(PacketWriter::new(out, self.format, &[s])?);
        }
        self.writer
            .take()
            .expect("writer exists")
            .finish()?
            .commit()
    }
}

impl Visitor for Sink {
    type Error = anyhow::Error;

    fn start_file(&mut self, reader: &FileReader) -> Result<()> {
        self.iface_map.clear();
        self.input_unit = match reader.format() {
            FileFormat::Pcap(unit) => Some(unit),
            FileFormat::Pcapng => None,
        };
        if self.fallback.is_none() {
            self.fallback = reader.interfaces().first().map(spec);
        }
        Ok(())
    }

    #[inline]
    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<()> {
        let iface = packet.meta.interface as usize;
        let id = match self.iface_map.get(iface) {
            Some(Some(id)) => *id,
            _ => self.writer_for(interfaces, iface)?,
        };
        let mut meta = packet.meta;
        meta.interface = id;
        let w = self
            .writer
            .as_mut()
            .expect("writer created with the first interface");
        match (packet.pcap_ts, self.input_unit) {
            (Some(ts), Some(unit)) => w.write_pcap_ts(&meta, ts, unit, packet.data)?,
            _ => w.write(&meta, packet.data)?,
        }
        self.written += 1;
        Ok(())
    }

    fn ruled(
        &mut self,
        interfaces: &[Interface],
        packet: &Packet<'_>,
        tag: Option<&Tag>,
    ) -> Result<()> {
        let Some(tag) = tag else {
            return self.packet(interfaces, packet);
        };
        if matches!(self.format, FileFormat::Pcap(_)) {
            self.tags_lost += 1;
            return self.packet(interfaces, packet);
        }
        let iface = packet.meta.interface as usize;
        let id = match self.iface_map.get(iface) {
            Some(Some(id)) => *id,
            _ => self.writer_for(interfaces, iface)?,
        };
        let mut meta = packet.meta;
        meta.interface = id;
        let w = self
            .writer
            .as_mut()
            .expect("writer created with the first interface");
        w.write_commented(&meta, packet.data, tag.to_string().as_bytes())?;
        self.written += 1;
        Ok(())
    }

    fn end_file(&mut self, reader: &FileReader, _damage: Option<&ReadError>) -> Result<()> {
        if self.fallback.is_none() {
            self.fallback = reader.interfaces().first().map(spec);
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.limit.is_some_and(|l| self.written >= l)
    }
}
