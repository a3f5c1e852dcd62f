//! What `weir extract` adds to [`select()`](crate::select()): the [`Matcher`] of a tcpdump
//! expression ([`BpfMatcher`], the BPF program compiled for each segment's interfaces exactly as
//! `tcpdump -r` would compile it), and the writing of a [`Selection`] into one pcap or pcapng
//! output ([`Selection::output_interfaces`], [`Selection::write`]; pcapng keeps the packets'
//! comments, the rules' tags; classic pcap cannot).

use std::io::Write;

use weir_filter::{Filter, FilterSet, FilterSetError};
use weir_packet::{Interface, LinkType, PacketMeta};
use weir_pcap::{FileFormat, PacketWriter, WriteError};

use crate::select::{Matcher, SelectError, Selection};

/// Why an extraction failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    /// Reading the stores failed.
    #[error(transparent)]
    Select(#[from] SelectError),
    /// The expression does not compile (for a segment's link type).
    #[error(transparent)]
    Filter(#[from] FilterSetError),
    /// Writing the output failed.
    #[error(transparent)]
    Write(#[from] WriteError),
    /// Classic pcap holds one link type, the packets have several.
    #[error("the packets come from several link types; use --format pcapng")]
    MixedLinks,
}

/// The BPF filters of an expression, per interface of the segment being read.
#[derive(Debug)]
pub struct BpfMatcher {
    filters: FilterSet,
    per_iface: Vec<Filter>,
}

impl BpfMatcher {
    /// Checks that `expr` (tcpdump syntax; empty matches everything) compiles.
    pub fn new(expr: &str) -> Result<BpfMatcher, FilterSetError> {
        Ok(BpfMatcher {
            filters: FilterSet::new(expr)?,
            per_iface: Vec::new(),
        })
    }
}

impl Matcher for BpfMatcher {
    type Error = ExtractError;

    fn matches_all(&self) -> bool {
        self.filters.is_empty()
    }

    fn set_interfaces(&mut self, interfaces: &[Interface]) -> Result<(), ExtractError> {
        self.per_iface = self.filters.for_interfaces(interfaces)?;
        Ok(())
    }

    fn matches(&self, interface: u32, data: &[u8], orig_len: u32) -> Option<bool> {
        let f = self.per_iface.get(interface as usize)?;
        Some(f.matches(data, orig_len))
    }
}

impl Selection {
    /// The interfaces of an output in `format`: the selection's (one Ethernet interface when
    /// nothing was selected); an error for classic pcap when they have several link types.
    pub fn output_interfaces(&self, format: FileFormat) -> Result<Vec<Interface>, ExtractError> {
        if matches!(format, FileFormat::Pcap(_)) && self.mixed_links() {
            return Err(ExtractError::MixedLinks);
        }
        let mut specs = self.interfaces().to_vec();
        if specs.is_empty() {
            specs.push(Interface::new(LinkType::ETHERNET, 262_144));
        }
        Ok(specs)
    }

    /// Writes every selected packet, in time order, into `w` (made in `format` with
    /// [`output_interfaces`](Self::output_interfaces)), a pcapng output with the packets'
    /// comments (the rules' tags, `weir-tag=TAG`). Returns how many packets with comments were
    /// written without them: classic pcap has no place for them.
    pub fn write<W: Write>(
        &mut self,
        w: &mut PacketWriter<W>,
        format: FileFormat,
    ) -> Result<u64, ExtractError> {
        let pcap = matches!(format, FileFormat::Pcap(_));
        let mut lost = 0;
        self.replay(|meta, data, options| -> Result<(), ExtractError> {
            let interface = if pcap { 0 } else { meta.interface };
            let meta = PacketMeta { interface, ..*meta };
            if options.is_empty() {
                w.write(&meta, data)?;
            } else if !w.write_comments(&meta, data, options.comments())? {
                lost += 1;
            }
            Ok(())
        })?;
        Ok(lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::tests::store;
    use weir_index::Query;
    use weir_pcap::{FileReader, Precision};

    fn extract(expr: &str, from_to: (u64, u64)) -> Vec<(u64, u32)> {
        let (d, _seg) = store(5, false);
        let mut m = BpfMatcher::new(expr).unwrap();
        let query = Query::from_expr(expr);
        let inputs = [d.path().to_owned()];
        let mut sel = crate::select(&inputs, &query, from_to, &mut m, &mut |_| {}).unwrap();
        let format = FileFormat::Pcap(Precision::Nano);
        let specs = sel.output_interfaces(format).unwrap();
        let mut w = PacketWriter::new(Vec::new(), format, &specs).unwrap();
        sel.write(&mut w, format).unwrap();
        let bytes = w.finish().unwrap();
        let mut r = FileReader::from_bytes("out", bytes).unwrap();
        let mut v = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            v.push((p.meta.ts_ns, p.meta.interface));
        }
        v
    }

    #[test]
    fn expression_and_time_range_select_by_hand() {
        // The five packets are UDP 10.0.0.1:1000 -> 10.0.0.2:2000 at 1 s + 0..4 ns.
        let t = 1_000_000_000;
        let all: Vec<(u64, u32)> = (0..5).map(|k| (t + k, 0)).collect();
        assert_eq!(extract("", (0, u64::MAX)), all);
        assert_eq!(extract("udp dst port 2000", (0, u64::MAX)), all);
        assert_eq!(extract("udp and src port 2000", (0, u64::MAX)), []);
        assert_eq!(extract("tcp", (0, u64::MAX)), []);
        assert_eq!(extract("host 10.0.0.2", (t + 1, t + 3)), all[1..4]);
        assert!(BpfMatcher::new("port port").is_err());
    }
}
