//! `weir info`'s visitor of the read loop: one [`FileSummary`] per input file, with the
//! protocol mix and decode errors counted through the decoder.

use weir_pcap::read::FileSummary;
use weir_pcap::{FileReader, Interface, Packet, ReadError};

use crate::read::Visitor;
use crate::SensorError;

/// Sums up each file as it is read.
#[derive(Default)]
pub struct Collector {
    /// The files read so far, in order.
    pub files: Vec<FileSummary>,
    cur: FileSummary,
}

impl Visitor for Collector {
    type Error = SensorError;

    fn start_file(&mut self, reader: &FileReader) -> Result<(), SensorError> {
        self.cur = FileSummary::start(reader);
        Ok(())
    }

    #[inline]
    fn packet(&mut self, _interfaces: &[Interface], p: &Packet<'_>) -> Result<(), SensorError> {
        self.cur.add(p);
        let d = weir_decode::decode(p.link, p.data);
        self.cur
            .add_protocol(weir_decode::protocol_name(&d), d.error());
        Ok(())
    }

    fn end_file(
        &mut self,
        reader: &FileReader,
        damage: Option<&ReadError>,
    ) -> Result<(), SensorError> {
        let mut c = std::mem::take(&mut self.cur);
        c.finish(reader, damage);
        self.files.push(c);
        Ok(())
    }
}
