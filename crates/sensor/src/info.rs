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

impl Collector {
    /// Writes the summaries to `out`: capinfos-like text blocks separated by an empty line, or
    /// (`json`) one pretty-printed JSON array with one object per file.
    pub fn write(&self, out: &mut dyn std::io::Write, json: bool) -> std::io::Result<()> {
        if json {
            let text = serde_json::to_string_pretty(&self.files)?;
            return writeln!(out, "{text}");
        }
        for (n, f) in self.files.iter().enumerate() {
            if n > 0 {
                writeln!(out)?;
            }
            write!(out, "{f}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_files_are_two_blocks_or_a_json_array_of_two() {
        let c = Collector {
            files: vec![FileSummary::default(), FileSummary::default()],
            cur: FileSummary::default(),
        };
        let one = FileSummary::default().to_string();
        let mut text = Vec::new();
        c.write(&mut text, false).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), format!("{one}\n{one}"));
        let mut json = Vec::new();
        c.write(&mut json, true).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v.as_array().map(Vec::len), Some(2));
        assert!(json.ends_with(b"]\n"));
    }
}
