//! JSON lines and CSV: one object / row per flow record, fields named after IPFIX information
//! elements, times as ISO-8601 UTC with nanoseconds.
//!
//! Columns, in order: `flowStartNanoseconds, flowEndNanoseconds, vlanId, sourceIPAddress,
//! destinationIPAddress, protocolIdentifier, sourceTransportPort, destinationTransportPort,
//! ipClassOfService, packetDeltaCount, octetDeltaCount, tcpControlBits, minimumTTL, maximumTTL,
//! reverseFlowStartNanoseconds, reverseFlowEndNanoseconds, reversePacketDeltaCount,
//! reverseOctetDeltaCount, reverseTcpControlBits, reverseMinimumTTL, reverseMaximumTTL,
//! flowEndReason`. The reverse columns are the RFC 5103 reverse direction (zero in one-way
//! mode). Times of a direction without packets are `null` (JSON) or empty (CSV).
//! `flowEndReason` is the IANA name: idleTimeout, activeTimeout, endOfFlow, forcedEnd,
//! lackOfResources.
//!
//! Tags (`--rules`): a JSON object of a tagged flow ends with `"tag":"TAG"` (no key when the
//! flow has none, so a run without rules writes what it always did); CSV opened with tags
//! ([`ExportOptions::tags`](crate::ExportOptions::tags)) has a last `tag` column, empty for an
//! untagged flow, quoted when the tag holds a comma, a quote or a line break.

use std::io::Write;

use weir_flows::{Direction, EndReason, FlowRecord};

use crate::sink::{ExportStats, FlowSink};
use crate::time::iso8601_ns;
use crate::transport::Commit;
use crate::ExportError;

/// The CSV header / JSON key order.
const COLUMNS: [&str; 22] = [
    "flowStartNanoseconds",
    "flowEndNanoseconds",
    "vlanId",
    "sourceIPAddress",
    "destinationIPAddress",
    "protocolIdentifier",
    "sourceTransportPort",
    "destinationTransportPort",
    "ipClassOfService",
    "packetDeltaCount",
    "octetDeltaCount",
    "tcpControlBits",
    "minimumTTL",
    "maximumTTL",
    "reverseFlowStartNanoseconds",
    "reverseFlowEndNanoseconds",
    "reversePacketDeltaCount",
    "reverseOctetDeltaCount",
    "reverseTcpControlBits",
    "reverseMinimumTTL",
    "reverseMaximumTTL",
    "flowEndReason",
];

/// Text flavour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextFormat {
    /// One JSON object per line.
    Json,
    /// CSV with a header row.
    Csv,
}

/// A text value: quoted string, bare number, or null.
enum Cell {
    Str(String),
    Num(u64),
    Null,
}

/// The IANA name of a flowEndReason value.
pub(crate) fn end_reason_name(r: EndReason) -> &'static str {
    match r {
        EndReason::IdleTimeout => "idleTimeout",
        EndReason::ActiveTimeout => "activeTimeout",
        EndReason::EndOfFlow => "endOfFlow",
        EndReason::ForcedEnd => "forcedEnd",
        EndReason::LackOfResources => "lackOfResources",
    }
}

fn cells(rec: &FlowRecord) -> [Cell; 22] {
    let time = |d: &Direction, t: u64| {
        if d.packets == 0 {
            Cell::Null
        } else {
            Cell::Str(iso8601_ns(t))
        }
    };
    let (f, r, k) = (&rec.forward, &rec.reverse, &rec.key);
    let n = |v: u64| Cell::Num(v);
    [
        time(f, f.first_ns),
        time(f, f.last_ns),
        n(k.vlan.into()),
        Cell::Str(k.src.to_string()),
        Cell::Str(k.dst.to_string()),
        n(k.proto.into()),
        n(k.src_port.into()),
        n(k.dst_port.into()),
        n(k.tos.into()),
        n(f.packets),
        n(f.bytes),
        n(f.tcp_flags.into()),
        n(f.min_ttl.into()),
        n(f.max_ttl.into()),
        time(r, r.first_ns),
        time(r, r.last_ns),
        n(r.packets),
        n(r.bytes),
        n(r.tcp_flags.into()),
        n(r.min_ttl.into()),
        n(r.max_ttl.into()),
        Cell::Str(end_reason_name(rec.end_reason).to_string()),
    ]
}

/// The tag as a JSON string.
fn json_string(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The tag as a CSV field.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Formats one record as a line (with its newline), without a tag column.
#[cfg(test)]
pub(crate) fn format_line(format: TextFormat, rec: &FlowRecord) -> String {
    format_line_tags(format, rec, false)
}

/// Formats one record as a line (with its newline); `tags`: CSV has the tag column. Only the
/// tag needs escaping: the other strings are addresses, timestamps and fixed names.
pub(crate) fn format_line_tags(format: TextFormat, rec: &FlowRecord, tags: bool) -> String {
    let mut s = String::with_capacity(400);
    push_line(format, rec, tags, &mut s);
    s
}

/// Appends one record as a line (with its newline) to `s`, as [`format_line_tags`] makes it
/// (a sink that keeps `s` allocates no line per record).
pub(crate) fn push_line(format: TextFormat, rec: &FlowRecord, tags: bool, s: &mut String) {
    use std::fmt::Write as _;
    if format == TextFormat::Json {
        s.push('{');
    }
    for (i, (name, cell)) in COLUMNS.iter().zip(cells(rec)).enumerate() {
        if i > 0 {
            s.push(',');
        }
        match format {
            TextFormat::Json => {
                s.push('"');
                s.push_str(name);
                s.push_str("\":");
                match cell {
                    Cell::Str(v) => {
                        s.push('"');
                        s.push_str(&v);
                        s.push('"');
                    }
                    Cell::Num(v) => {
                        let _ = write!(s, "{v}");
                    }
                    Cell::Null => s.push_str("null"),
                }
            }
            TextFormat::Csv => match cell {
                Cell::Str(v) => s.push_str(&v),
                Cell::Num(v) => {
                    let _ = write!(s, "{v}");
                }
                Cell::Null => {}
            },
        }
    }
    match (format, rec.tag) {
        (TextFormat::Json, Some(t)) => {
            s.push_str(",\"tag\":");
            s.push_str(&json_string(&t.to_string()));
        }
        (TextFormat::Csv, t) if tags => {
            s.push(',');
            if let Some(t) = t {
                s.push_str(&csv_field(&t.to_string()));
            }
        }
        _ => {}
    }
    if format == TextFormat::Json {
        s.push('}');
    }
    s.push('\n');
}

/// A JSON-lines or CSV sink.
pub(crate) struct TextSink {
    out: Box<dyn Commit>,
    format: TextFormat,
    /// CSV: the tag column.
    tags: bool,
    stats: ExportStats,
}

impl TextSink {
    /// A sink writing to `out`; CSV starts with its header row (with a last `tag` column
    /// when `tags`).
    pub(crate) fn new(
        mut out: Box<dyn Commit>,
        format: TextFormat,
        tags: bool,
    ) -> Result<Self, ExportError> {
        if format == TextFormat::Csv {
            let tag = if tags { ",tag" } else { "" };
            writeln!(out, "{}{tag}", COLUMNS.join(","))?;
        }
        Ok(TextSink {
            out,
            format,
            tags,
            stats: ExportStats::default(),
        })
    }
}

impl FlowSink for TextSink {
    fn export(&mut self, rec: &FlowRecord) -> Result<(), ExportError> {
        let line = format_line_tags(self.format, rec, self.tags);
        self.out.write_all(line.as_bytes())?;
        self.stats.records += 1;
        if self.format == TextFormat::Csv && !self.tags && rec.tag.is_some() {
            self.stats.tags_not_exported += 1;
        }
        self.stats.bytes += line.len() as u64;
        Ok(())
    }

    /// Flushes buffered output, so a live reader sees rows at least once per tick.
    fn tick(&mut self, _now_ns: u64) -> Result<(), ExportError> {
        self.out.flush()?;
        Ok(())
    }

    fn finish(&mut self) -> Result<ExportStats, ExportError> {
        self.out.commit()?;
        Ok(self.stats)
    }

    fn stats(&self) -> ExportStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv6Addr};
    use weir_flows::FlowKey;

    fn rec() -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                vlan: 0,
                src: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)),
                dst: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)),
                proto: 58,
                src_port: 0,
                dst_port: 128 << 8,
                tos: 0,
            },
            forward: Direction {
                packets: 2,
                bytes: 208,
                first_ns: 1_795_256_430_000_000_001,
                last_ns: 1_795_256_431_500_000_000,
                tcp_flags: 0,
                min_ttl: 64,
                max_ttl: 64,
            },
            reverse: Direction::default(),
            end_reason: EndReason::IdleTimeout,
            tag: None,
        }
    }

    #[test]
    fn json_line() {
        assert_eq!(
            format_line(TextFormat::Json, &rec()),
            concat!(
                r#"{"flowStartNanoseconds":"2026-11-21T10:20:30.000000001Z","#,
                r#""flowEndNanoseconds":"2026-11-21T10:20:31.500000000Z","vlanId":0,"#,
                r#""sourceIPAddress":"2001:db8::1","destinationIPAddress":"2001:db8::2","#,
                r#""protocolIdentifier":58,"sourceTransportPort":0,"destinationTransportPort":32768,"#,
                r#""ipClassOfService":0,"packetDeltaCount":2,"octetDeltaCount":208,"tcpControlBits":0,"#,
                r#""minimumTTL":64,"maximumTTL":64,"reverseFlowStartNanoseconds":null,"#,
                r#""reverseFlowEndNanoseconds":null,"reversePacketDeltaCount":0,"#,
                r#""reverseOctetDeltaCount":0,"reverseTcpControlBits":0,"reverseMinimumTTL":0,"#,
                r#""reverseMaximumTTL":0,"flowEndReason":"idleTimeout"}"#,
                "\n"
            )
        );
    }

    #[test]
    fn csv_header_and_row() {
        let mut sink = TextSink::new(Box::new(Vec::new()), TextFormat::Csv, false).unwrap();
        sink.export(&rec()).unwrap();
        let st = sink.finish().unwrap();
        assert_eq!(st.records, 1);
        let row = format_line(TextFormat::Csv, &rec());
        assert_eq!(
            row,
            "2026-11-21T10:20:30.000000001Z,2026-11-21T10:20:31.500000000Z,0,2001:db8::1,\
             2001:db8::2,58,0,32768,0,2,208,0,64,64,,,0,0,0,0,0,idleTimeout\n"
        );
        assert_eq!(row.split(',').count(), COLUMNS.len());
    }

    /// A tagged record: JSON gains a last `tag` key (escaped), CSV a last column only when
    /// opened with tags (quoted when it holds a comma or a quote); untagged records are as
    /// before, with an empty tag column.
    #[test]
    fn tags_in_json_and_csv() {
        let tagged = |t: &str| FlowRecord {
            tag: weir_flows::Tag::text(t),
            ..rec()
        };
        let json = format_line(TextFormat::Json, &tagged("lab"));
        assert!(json.ends_with(concat!(
            r#","flowEndReason":"idleTimeout","tag":"lab"}"#,
            "\n"
        )));
        let json = format_line(TextFormat::Json, &tagged("a\"b\\c"));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["tag"], "a\"b\\c");
        let plain = format_line(TextFormat::Csv, &rec());
        assert_eq!(format_line(TextFormat::Csv, &tagged("lab")), plain);
        let with = |r: &FlowRecord| format_line_tags(TextFormat::Csv, r, true);
        assert_eq!(with(&rec()), plain.replace('\n', ",\n"));
        assert_eq!(with(&tagged("lab")), plain.replace('\n', ",lab\n"));
        assert_eq!(
            with(&tagged("a,\"b")),
            plain.replace('\n', ",\"a,\"\"b\"\n")
        );
        let mut sink = TextSink::new(Box::new(Vec::new()), TextFormat::Csv, false).unwrap();
        sink.export(&tagged("lab")).unwrap();
        assert_eq!(sink.finish().unwrap().tags_not_exported, 1);
    }
}
