//! [`FileSummary`]: what `weir info` says about a capture file, capinfos-like: packets, captured
//! and wire bytes, truncated packets, first and last times, rates, timestamps out of order, the
//! interfaces, and where a damaged file stopped. The protocol mix is counted from names the
//! caller gives ([`FileSummary::add_protocol`]), so this crate needs no decoder.

use std::collections::BTreeMap;

use serde::Serialize;
use weir_packet::time::datetime;

use crate::read::{FileReader, Packet, ReadError};

/// One interface of a file, as reported.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct InterfaceSummary {
    /// Link type number.
    pub link_type: u32,
    /// Its name (`EN10MB`...), `unknown` when weir does not know it.
    pub link_type_name: String,
    /// Snap length as declared.
    pub snaplen: u32,
    /// Interface name, when the file gives one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Timestamp resolution as a human string.
    pub ts_resolution: String,
}

/// Where a damaged file stopped.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct DamageSummary {
    /// Byte offset of the damage.
    pub offset: u64,
    /// What is wrong there.
    pub reason: String,
}

/// The summary of one file.
#[derive(Serialize, Debug, Default, Clone, PartialEq)]
pub struct FileSummary {
    /// The file's name as given.
    pub file: String,
    /// Its format (`pcap`, `pcap (ns)`, `pcapng`).
    pub format: String,
    /// Its interfaces.
    pub interfaces: Vec<InterfaceSummary>,
    /// Packets read.
    pub packets: u64,
    /// Sum of captured lengths.
    pub captured_bytes: u64,
    /// Sum of lengths on the wire.
    pub wire_bytes: u64,
    /// Packets whose captured length is below their wire length.
    pub truncated_packets: u64,
    /// Earliest packet time, ns since the epoch.
    pub first_ns: Option<u64>,
    /// Latest packet time.
    pub last_ns: Option<u64>,
    /// From the earliest to the latest packet, seconds.
    pub duration_s: f64,
    /// Packets per second over that time (0 when it is 0).
    pub packets_per_s: f64,
    /// Captured bits per second over that time.
    pub bits_per_s: f64,
    /// Mean captured length.
    pub mean_packet_bytes: f64,
    /// Packets whose timestamp is earlier than the one before.
    pub out_of_order: u64,
    /// Packets per protocol name.
    pub protocols: BTreeMap<String, u64>,
    /// Packets per decode error.
    pub decode_errors: BTreeMap<String, u64>,
    /// pcapng blocks skipped (unknown types).
    pub skipped_blocks: u64,
    /// Where the file is damaged, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<DamageSummary>,
    /// Timestamp of the packet before (not reported).
    #[serde(skip)]
    prev_ts: u64,
}

/// The text of `weir info`: one `Name:   value` line per field, capinfos-like.
impl std::fmt::Display for FileSummary {
    fn fmt(&self, out: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(out, "File name:           {}", self.file)?;
        writeln!(out, "File format:         {}", self.format)?;
        for (n, i) in self.interfaces.iter().enumerate() {
            let name = i.name.as_ref().map(|n| format!(", name {n}"));
            writeln!(
                out,
                "Interface {n}:         {} ({}), snaplen {}, timestamps in {}{}",
                i.link_type_name,
                i.link_type,
                i.snaplen,
                i.ts_resolution,
                name.unwrap_or_default()
            )?;
        }
        writeln!(out, "Packets:             {}", self.packets)?;
        writeln!(out, "Captured bytes:      {}", self.captured_bytes)?;
        writeln!(out, "Wire bytes:          {}", self.wire_bytes)?;
        writeln!(out, "Truncated packets:   {}", self.truncated_packets)?;
        if let (Some(a), Some(b)) = (self.first_ns, self.last_ns) {
            writeln!(out, "First packet:        {} UTC", datetime(a))?;
            writeln!(out, "Last packet:         {} UTC", datetime(b))?;
        }
        writeln!(out, "Duration:            {:.9} s", self.duration_s)?;
        writeln!(
            out,
            "Packet rate:         {:.2} packets/s",
            self.packets_per_s
        )?;
        writeln!(out, "Data rate:           {:.2} bits/s", self.bits_per_s)?;
        writeln!(
            out,
            "Mean packet size:    {:.2} bytes",
            self.mean_packet_bytes
        )?;
        writeln!(out, "Out-of-order times:  {}", self.out_of_order)?;
        if !self.protocols.is_empty() {
            writeln!(out, "Protocols:")?;
            for (name, n, pct) in self.protocol_mix() {
                writeln!(out, "  {name:<18} {n:>10}  {pct:6.2} %")?;
            }
        }
        if !self.decode_errors.is_empty() {
            writeln!(out, "Decode errors:")?;
            for (what, n) in &self.decode_errors {
                writeln!(out, "  {n:>10}  {what}")?;
            }
        }
        if self.skipped_blocks > 0 {
            writeln!(out, "Skipped blocks:      {}", self.skipped_blocks)?;
        }
        if let Some(d) = &self.damage {
            writeln!(out, "Damaged at offset:   {} ({})", d.offset, d.reason)?;
        }
        Ok(())
    }
}

impl FileSummary {
    /// Starts the summary of the file `reader` has just opened.
    pub fn start(reader: &FileReader) -> FileSummary {
        FileSummary {
            file: reader.path().display().to_string(),
            format: reader.format_name().to_string(),
            ..FileSummary::default()
        }
    }

    /// Counts a packet.
    #[inline]
    pub fn add(&mut self, p: &Packet<'_>) {
        self.packets += 1;
        self.captured_bytes += p.data.len() as u64;
        self.wire_bytes += u64::from(p.meta.orig_len);
        if (p.data.len() as u64) < u64::from(p.meta.orig_len) {
            self.truncated_packets += 1;
        }
        let ts = p.meta.ts_ns;
        self.first_ns = Some(self.first_ns.map_or(ts, |f| f.min(ts)));
        self.last_ns = Some(self.last_ns.map_or(ts, |l| l.max(ts)));
        if ts < self.prev_ts {
            self.out_of_order += 1;
        }
        self.prev_ts = ts;
    }

    /// Counts a packet's protocol, and its decode error if it has one.
    #[inline]
    pub fn add_protocol<E: std::fmt::Display>(&mut self, protocol: &str, decode_error: Option<E>) {
        match self.protocols.get_mut(protocol) {
            Some(n) => *n += 1,
            None => {
                self.protocols.insert(protocol.to_string(), 1);
            }
        }
        if let Some(e) = decode_error {
            *self.decode_errors.entry(e.to_string()).or_default() += 1;
        }
    }

    /// Ends the summary once `reader` has given its last packet (or stopped at `damage`): the
    /// interfaces (pcapng files may declare them late), the skipped blocks, the rates.
    pub fn finish(&mut self, reader: &FileReader, damage: Option<&ReadError>) {
        self.interfaces = reader
            .interfaces()
            .iter()
            .map(|i| InterfaceSummary {
                link_type: i.link.0,
                link_type_name: i.link.name().unwrap_or("unknown").to_string(),
                snaplen: i.snaplen,
                name: i.name.clone(),
                ts_resolution: i.ts_resolution.clone(),
            })
            .collect();
        self.skipped_blocks = reader.skipped_blocks();
        if let (Some(f), Some(l)) = (self.first_ns, self.last_ns) {
            self.duration_s = (l - f) as f64 / 1e9;
        }
        if self.duration_s > 0.0 {
            self.packets_per_s = self.packets as f64 / self.duration_s;
            self.bits_per_s = self.captured_bytes as f64 * 8.0 / self.duration_s;
        }
        if self.packets > 0 {
            self.mean_packet_bytes = self.captured_bytes as f64 / self.packets as f64;
        }
        if let Some(ReadError::Damaged { offset, reason, .. }) = damage {
            self.damage = Some(DamageSummary {
                offset: *offset,
                reason: reason.clone(),
            });
        }
    }

    /// The protocol mix, most packets first (ties by name), each with its share in percent.
    pub fn protocol_mix(&self) -> Vec<(&str, u64, f64)> {
        let mut mix: Vec<(&str, u64, f64)> = self
            .protocols
            .iter()
            .map(|(name, n)| {
                let pct = 100.0 * *n as f64 / self.packets.max(1) as f64;
                (name.as_str(), *n, pct)
            })
            .collect();
        mix.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        mix
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FileFormat, PacketWriter, Precision};
    use weir_packet::{Interface, LinkType, PacketMeta};

    /// Four packets: 100/100, 60/1514 (truncated), 80/80 one second earlier (out of order),
    /// 40/40 two seconds after the first; then a damaged tail.
    fn file() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.pcap");
        let mut iface = Interface::new(LinkType::ETHERNET, 1514);
        iface.name = None;
        let mut w = PacketWriter::new(
            Vec::new(),
            FileFormat::Pcap(Precision::Nano),
            std::slice::from_ref(&iface),
        )
        .unwrap();
        let t0 = 1_700_000_000_000_000_000u64;
        for (ts, cap, wire) in [
            (t0, 100, 100),
            (t0 + 500, 60, 1514),
            (t0 - 1_000_000_000, 80, 80),
            (t0 + 2_000_000_000, 40, 40),
        ] {
            let meta = PacketMeta {
                ts_ns: ts,
                orig_len: wire,
                interface: 0,
            };
            w.write(&meta, &vec![0u8; cap]).unwrap();
        }
        let mut bytes = w.finish().unwrap();
        bytes.extend_from_slice(&[1, 2, 3, 4, 5]); // a record header cut short
        std::fs::write(&p, bytes).unwrap();
        (d, p)
    }

    #[test]
    fn counts_times_and_damage_by_hand() {
        let (_d, p) = file();
        let mut r = FileReader::open(&p).unwrap();
        let mut s = FileSummary::start(&r);
        let damage = loop {
            match r.next_packet() {
                Ok(Some(pk)) => {
                    s.add(&pk);
                    let err = (pk.data.len() == 40).then_some("short");
                    s.add_protocol(if pk.data.len() > 70 { "IPv4" } else { "other" }, err);
                }
                Ok(None) => break None,
                Err(e) => break Some(e),
            }
        };
        s.finish(&r, damage.as_ref());
        assert_eq!(s.file, p.display().to_string());
        assert_eq!(s.format, "pcap (ns)");
        assert_eq!(s.packets, 4);
        assert_eq!(s.captured_bytes, 280);
        assert_eq!(s.wire_bytes, 1734);
        assert_eq!(s.truncated_packets, 1);
        assert_eq!(s.out_of_order, 1);
        let t0 = 1_700_000_000_000_000_000u64;
        assert_eq!(s.first_ns, Some(t0 - 1_000_000_000));
        assert_eq!(s.last_ns, Some(t0 + 2_000_000_000));
        assert_eq!(s.duration_s, 3.0);
        assert!((s.packets_per_s - 4.0 / 3.0).abs() < 1e-12);
        assert!((s.bits_per_s - 280.0 * 8.0 / 3.0).abs() < 1e-9);
        assert_eq!(s.mean_packet_bytes, 70.0);
        assert_eq!(s.protocol_mix(), [("IPv4", 2, 50.0), ("other", 2, 50.0)]);
        assert_eq!(s.decode_errors.get("short"), Some(&1));
        assert_eq!(
            s.interfaces,
            [InterfaceSummary {
                link_type: 1,
                link_type_name: "EN10MB".into(),
                snaplen: 1514,
                name: None,
                ts_resolution: "ns".into(),
            }]
        );
        // 24-byte header + 4 records of 16 bytes plus their data.
        let d = s.damage.as_ref().expect("the cut tail is damage");
        assert_eq!(d.offset, 24 + 4 * 16 + 280);
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["captured_bytes"], 280);
        assert!(j.get("prev_ts").is_none());
        assert!(j["interfaces"][0].get("name").is_none());
    }
}
