//! One tcpdump-like line per packet on stdout, for `weir decode`, `weir read` without `-w` and
//! `weir capture` without `-w`.

use std::io::{BufWriter, Write};

use anyhow::Result;
use weir_pcap::{Interface, Packet};

use weir_sensor::read::Visitor;

use crate::output::{self, Output};
use weir_packet::time;

/// Prints one line per packet: UTC time of day with nanoseconds, the decoder's summary, and the
/// interface when the input has several.
pub(crate) struct LinePrinter {
    out: BufWriter<Output>,
    printed: u64,
    limit: Option<u64>,
    /// Unsupported link types already warned about.
    warned: Vec<weir_packet::LinkType>,
}

impl LinePrinter {
    /// A printer to stdout, stopping after `limit` packets.
    pub(crate) fn stdout(limit: Option<u64>) -> LinePrinter {
        LinePrinter {
            out: BufWriter::with_capacity(1 << 16, output::stdout()),
            printed: 0,
            limit,
            warned: Vec::new(),
        }
    }

    /// Hands the lines printed so far to stdout.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.out.flush()?;
        Ok(())
    }

    /// Flushes the output.
    pub(crate) fn finish(self) -> Result<()> {
        self.out.into_inner().map_err(|e| e.into_error())?.commit()
    }
}

impl Visitor for LinePrinter {
    type Error = anyhow::Error;

    fn packet(&mut self, interfaces: &[Interface], packet: &Packet<'_>) -> Result<()> {
        if !packet.link.is_supported() && !self.warned.contains(&packet.link) {
            eprintln!(
                "weir: warning: {} is not a link type weir decodes",
                packet.link
            );
            self.warned.push(packet.link);
        }
        let decoded = weir_decode::decode(packet.link, packet.data);
        let t = time::time_of_day(packet.meta.ts_ns);
        if interfaces.len() > 1 {
            let i = &interfaces[packet.meta.interface as usize];
            let name = i.name.as_deref().unwrap_or("?");
            write!(self.out, "{t} {name} ")?;
        } else {
            write!(self.out, "{t} ")?;
        }
        if packet.link.is_supported() {
            writeln!(self.out, "{}", weir_decode::summary(&decoded))?;
        } else {
            writeln!(
                self.out,
                "{}, not decoded: {} bytes",
                packet.link,
                packet.data.len()
            )?;
        }
        self.printed += 1;
        Ok(())
    }

    fn done(&self) -> bool {
        self.limit.is_some_and(|l| self.printed >= l)
    }
}
