//! The read job's capture file output, as `weir read -w` (and `tcpdump -r IN -w OUT`) writes
//! it: packets of several inputs into one file, each input's interfaces declared as they are
//! first used (with libpcap's snap length), a classic pcap header describing the first input's
//! interface, classic pcap records' time fields copied as they are when the units agree, and a
//! rule's tag as the pcapng packet comment, after the comments the input packet had (classic pcap
//! cannot hold them: counted).

use std::io::Write;

use weir_filter::effective_snaplen;
use weir_pcap::{FileFormat, FileReader, Interface, Packet, PacketWriter, Precision, ReadError};
use weir_rules::Tag;

use crate::read::Visitor;
use crate::SensorError;

/// Writes the packets it is handed to one capture file; the writer is created on the first
/// packet (or at the end), when the link type of the output is known.
pub struct Convert<W: Write> {
    out: Option<W>,
    writer: Option<PacketWriter<W>>,
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
    /// Tagged or commented packets written to classic pcap, which cannot hold their tags.
    tags_lost: u64,
}

/// An input's interface as the output declares it: with libpcap's snap length, as tcpdump.
fn spec(i: &Interface) -> Interface {
    Interface {
        snaplen: effective_snaplen(i.snaplen),
        ..i.clone()
    }
}

impl<W: Write> Convert<W> {
    /// Writes to `out` in `format`, at most `limit` packets.
    pub fn new(out: W, format: FileFormat, limit: Option<u64>) -> Convert<W> {
        Convert {
            out: Some(out),
            writer: None,
            format,
            iface_map: Vec::new(),
            written: 0,
            limit,
            fallback: None,
            input_unit: None,
            tags_lost: 0,
        }
    }

    fn writer_for(&mut self, interfaces: &[Interface], iface: usize) -> Result<u32, SensorError> {
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

    /// Ends the file (an output no packet reached still gets a valid, empty file) and hands
    /// back the output and how many tagged or commented packets were written without their tags
    /// and comments (classic pcap has no packet comments).
    pub fn finish(mut self) -> Result<(W, u64), SensorError> {
        if self.writer.is_none() {
            // No packet matched: still write a valid, empty file.
            let out = self.out.take().expect("output taken once");
            let s = self
                .fallback
                .take()
                .unwrap_or(Interface::new(weir_packet::LinkType::ETHERNET, 0));
            self.writer = Some(PacketWriter::new(out, self.format, &[s])?);
        }
        let out = self.writer.take().expect("writer exists").finish()?;
        Ok((out, self.tags_lost))
    }
}

impl<W: Write> Visitor for Convert<W> {
    type Error = SensorError;

    fn start_file(&mut self, reader: &FileReader) -> Result<(), SensorError> {
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
    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<(), SensorError> {
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
        if !packet.options.is_empty() {
            // pcapng input: its comments (rule tags of an earlier run) go on
            if !w.write_comments(&meta, packet.data, packet.options.comments())? {
                self.tags_lost += 1;
            }
            self.written += 1;
            return Ok(());
        }
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
    ) -> Result<(), SensorError> {
        let Some(tag) = tag else {
            return self.packet(interfaces, packet);
        };
        if matches!(self.format, FileFormat::Pcap(_)) {
            if !packet.options.has_comments() {
                // else counted by `packet`
                self.tags_lost += 1;
            }
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
        // the input's comments, then the tag
        let tag = tag.to_string();
        let comments = packet.options.comments().chain([tag.as_bytes()]);
        w.write_comments(&meta, packet.data, comments)?;
        self.written += 1;
        Ok(())
    }

    fn end_file(
        &mut self,
        reader: &FileReader,
        _damage: Option<&ReadError>,
    ) -> Result<(), SensorError> {
        if self.fallback.is_none() {
            self.fallback = reader.interfaces().first().map(spec);
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.limit.is_some_and(|l| self.written >= l)
    }
}
