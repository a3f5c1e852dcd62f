//! One tcpdump-like line per packet, for `weir decode`, `weir read` without `-w` and `weir
//! capture` without `-w`: UTC time of day with nanoseconds, the decoder's summary, and the
//! interface when the input has several. A visitor of the read loop ([`Visitor`]) and a sink of
//! the capture job ([`PacketSink`]).

use std::io::{BufWriter, Write};

use weir_buffer::Record;
use weir_packet::{time, LinkType, PacketMeta};
use weir_pcap::{Interface, Packet};

use crate::read::Visitor;
use crate::sink::PacketSink;
use crate::SensorError;

/// Prints one line per packet to `W` (see the module documentation).
pub struct LinePrinter<W: Write> {
    out: BufWriter<W>,
    printed: u64,
    limit: Option<u64>,
    /// Unsupported link types already warned about.
    warned: Vec<LinkType>,
    /// Says a warning (a link type weir does not decode, once per type).
    warn: fn(&str),
}

impl<W: Write> LinePrinter<W> {
    /// A printer to `out`, stopping after `limit` packets, saying its warnings with `warn`.
    pub fn new(out: W, limit: Option<u64>, warn: fn(&str)) -> Self {
        LinePrinter {
            out: BufWriter::with_capacity(1 << 16, out),
            printed: 0,
            limit,
            warned: Vec::new(),
            warn,
        }
    }

    /// Hands the lines printed so far to the output.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }

    /// Flushes the lines and returns the output.
    pub fn finish(self) -> std::io::Result<W> {
        self.out.into_inner().map_err(|e| e.into_error())
    }
}

impl<W: Write> Visitor for LinePrinter<W> {
    type Error = SensorError;

    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<(), SensorError> {
        if !packet.link.is_supported() && !self.warned.contains(&packet.link) {
            (self.warn)(&format!("{} is not a link type weir decodes", packet.link));
            self.warned.push(packet.link);
        }
        let t = time::time_of_day(packet.meta.ts_ns);
        if interfaces.len() > 1 {
            let i = &interfaces[packet.meta.interface as usize];
            write!(self.out, "{t} {} ", i.name.as_deref().unwrap_or("?"))?;
        } else {
            write!(self.out, "{t} ")?;
        }
        if packet.link.is_supported() {
            let decoded = weir_decode::decode(packet.link, packet.data);
            writeln!(self.out, "{}", weir_decode::summary(&decoded))?;
        } else {
            let n = packet.data.len();
            writeln!(self.out, "{}, not decoded: {n} bytes", packet.link)?;
        }
        self.printed += 1;
        Ok(())
    }

    fn done(&self) -> bool {
        self.limit.is_some_and(|l| self.printed >= l)
    }
}

impl<W: Write> PacketSink for LinePrinter<W> {
    type Error = SensorError;

    fn packet(&mut self, interfaces: &[Interface], r: &Record<'_>) -> Result<(), SensorError> {
        let link = interfaces
            .get(r.iface() as usize)
            .map_or(LinkType::ETHERNET, |i| i.link);
        let packet = Packet {
            meta: PacketMeta {
                ts_ns: r.ts_ns(),
                orig_len: r.orig_len(),
                interface: r.iface(),
            },
            link,
            data: r.data(),
            record_offset: 0,
            pcap_ts: None,
            options: weir_pcap::PacketOptions::NONE,
        };
        Visitor::packet(self, interfaces, &packet)
    }

    fn flush(&mut self) -> Result<(), SensorError> {
        Ok(LinePrinter::flush(self)?)
    }
}
