//! Templates shared by NetFlow v9 and IPFIX: one list of fields describes both the template
//! record sent to the collector and the layout of every data record written with it, so the two
//! cannot disagree.

use std::net::IpAddr;

use weir_flows::{Direction, Tag};

use crate::clock::Clock;
use crate::packer::View;
use crate::time::ntp_timestamp;

/// IANA Private Enterprise Number that RFC 5103 assigns to reverse information elements.
pub(crate) const REVERSE_PEN: u32 = 29305;

/// Which side of a [`View`] a counter comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// The view's own direction.
    Fwd,
    /// The opposite direction (RFC 5103 reverse elements).
    Rev,
}

/// How flow start / end times are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeFormat {
    /// NetFlow v9 FIRST/LAST_SWITCHED: 32-bit sys_uptime in ms.
    Uptime,
    /// IPFIX dateTimeMilliseconds: 64-bit ms since the Unix epoch.
    Millis,
    /// IPFIX dateTimeNanoseconds: 64-bit NTP timestamp.
    Nanos,
}

/// The value a field carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value {
    /// Bytes of a side.
    Octets(Side),
    /// Packets of a side.
    Packets(Side),
    /// First packet time of a side.
    Start(Side),
    /// Last packet time of a side.
    End(Side),
    /// OR of TCP flags of a side.
    TcpFlags(Side),
    /// Minimum TTL of a side.
    MinTtl(Side),
    /// Maximum TTL of a side.
    MaxTtl(Side),
    /// Source address (4 or 16 bytes).
    SrcAddr,
    /// Destination address.
    DstAddr,
    /// Source port.
    SrcPort,
    /// Destination port (ICMP type << 8 | code).
    DstPort,
    /// ICMP type << 8 | code for ICMP and ICMPv6 flows, 0 otherwise (collectors such as nfdump
    /// take ICMP type/code from this element, not from the destination port).
    IcmpTypeCode,
    /// IP protocol.
    Proto,
    /// TOS / traffic class.
    Tos,
    /// VLAN id.
    Vlan,
    /// IPFIX flowEndReason.
    EndReason,
    /// The flow's tag as zero-padded UTF-8 text (applicationName, IE 96).
    Tag,
}

/// One field specifier: element id, length, optional enterprise number, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Field {
    /// Element id (without the enterprise bit).
    pub id: u16,
    /// Length on the wire.
    pub len: u16,
    /// Enterprise number (IPFIX only).
    pub pen: Option<u32>,
    /// What goes in it.
    pub value: Value,
}

/// A template: id, fields, and how its times are encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    /// Template id (≥ 256).
    pub id: u16,
    /// The fields in wire order.
    pub fields: Vec<Field>,
    /// Time encoding of `Start`/`End` fields.
    pub time: TimeFormat,
}

fn f(id: u16, len: u16, value: Value) -> Field {
    Field {
        id,
        len,
        pen: None,
        value,
    }
}

/// Bytes of the tag field: a text tag's 15 bytes or a number's 10 digits, zero-padded.
pub(crate) const TAG_LEN: u16 = 16;

/// The tag field, applicationName (IANA IE 96; NetFlow v9's APPLICATION_NAME, the same id),
/// a string Wireshark shows as `cflow.appl_name`.
fn tag_field() -> Field {
    f(96, TAG_LEN, Value::Tag)
}

/// The NetFlow v9 templates (RFC 3954 field types): `[IPv4, IPv6]`, ids 256 and 257; with
/// `tags`, each ends with the tag field (applicationName, 96).
/// Counters are 8 bytes (RFC 3954 allows N × 8 bits for IN_BYTES / IN_PKTS), so no split is needed.
pub(crate) fn v9_templates(tags: bool) -> Vec<Template> {
    let build = |id: u16, v6: bool| {
        let (src, dst, alen) = if v6 { (27, 28, 16) } else { (8, 12, 4) };
        Template {
            id,
            fields: vec![
                f(1, 8, Value::Octets(Side::Fwd)),   // IN_BYTES
                f(2, 8, Value::Packets(Side::Fwd)),  // IN_PKTS
                f(22, 4, Value::Start(Side::Fwd)),   // FIRST_SWITCHED
                f(21, 4, Value::End(Side::Fwd)),     // LAST_SWITCHED
                f(src, alen, Value::SrcAddr),        // IPV4/IPV6_SRC_ADDR
                f(dst, alen, Value::DstAddr),        // IPV4/IPV6_DST_ADDR
                f(7, 2, Value::SrcPort),             // L4_SRC_PORT
                f(11, 2, Value::DstPort),            // L4_DST_PORT
                f(32, 2, Value::IcmpTypeCode),       // ICMP_TYPE (both families, as softflowd does)
                f(58, 2, Value::Vlan),               // SRC_VLAN
                f(4, 1, Value::Proto),               // PROTOCOL
                f(5, 1, Value::Tos),                 // SRC_TOS
                f(6, 1, Value::TcpFlags(Side::Fwd)), // TCP_FLAGS
                f(52, 1, Value::MinTtl(Side::Fwd)),  // MIN_TTL
                f(53, 1, Value::MaxTtl(Side::Fwd)),  // MAX_TTL
            ]
            .into_iter()
            .chain(tags.then(tag_field))
            .collect(),
            time: TimeFormat::Uptime,
        }
    };
    vec![build(256, false), build(257, true)]
}

/// The IPFIX templates (IANA IPFIX element ids): one-way records with ids 256 (IPv4) and 257
/// (IPv6); with `biflow`, also 258 / 259 for bidirectional records (RFC 5103 reverse elements,
/// PEN 29305). A flow whose reverse direction saw no packet uses the one-way template even in
/// biflow mode, so no reverse element carries a made-up zero timestamp. With `tags`, every
/// template ends with the tag field (applicationName, 96).
pub(crate) fn ipfix_templates(biflow: bool, nanos: bool, tags: bool) -> Vec<Template> {
    let (time, start, end) = if nanos {
        (TimeFormat::Nanos, 156, 157) // flowStart/EndNanoseconds
    } else {
        (TimeFormat::Millis, 152, 153) // flowStart/EndMilliseconds
    };
    let build = |id: u16, v6: bool, biflow: bool| {
        let (src, dst, alen, icmp) = if v6 {
            (27, 28, 16, 139)
        } else {
            (8, 12, 4, 32)
        };
        let mut fields = vec![
            f(1, 8, Value::Octets(Side::Fwd)),    // octetDeltaCount
            f(2, 8, Value::Packets(Side::Fwd)),   // packetDeltaCount
            f(start, 8, Value::Start(Side::Fwd)), // flowStart*
            f(end, 8, Value::End(Side::Fwd)),     // flowEnd*
            f(src, alen, Value::SrcAddr),         // sourceIPv4/IPv6Address
            f(dst, alen, Value::DstAddr),         // destinationIPv4/IPv6Address
            f(7, 2, Value::SrcPort),              // sourceTransportPort
            // ICMP type/code before the destination port: nfdump 1.7 copies both into the
            // same slot in template order, so the port must come last to survive.
            f(icmp, 2, Value::IcmpTypeCode), // icmpTypeCodeIPv4 / icmpTypeCodeIPv6
            f(11, 2, Value::DstPort),        // destinationTransportPort
            f(58, 2, Value::Vlan),           // vlanId
            f(6, 2, Value::TcpFlags(Side::Fwd)), // tcpControlBits (unsigned16, RFC 7125)
            f(4, 1, Value::Proto),           // protocolIdentifier
            f(5, 1, Value::Tos),             // ipClassOfService
            f(52, 1, Value::MinTtl(Side::Fwd)), // minimumTTL
            f(53, 1, Value::MaxTtl(Side::Fwd)), // maximumTTL
            f(136, 1, Value::EndReason),     // flowEndReason
        ];
        if biflow {
            let rev = |id, len, value| Field {
                pen: Some(REVERSE_PEN),
                ..f(id, len, value)
            };
            fields.extend([
                rev(1, 8, Value::Octets(Side::Rev)),
                rev(2, 8, Value::Packets(Side::Rev)),
                rev(start, 8, Value::Start(Side::Rev)),
                rev(end, 8, Value::End(Side::Rev)),
                rev(6, 2, Value::TcpFlags(Side::Rev)),
                rev(52, 1, Value::MinTtl(Side::Rev)),
                rev(53, 1, Value::MaxTtl(Side::Rev)),
            ]);
        }
        fields.extend(tags.then(tag_field));
        Template { id, fields, time }
    };
    let mut all = vec![build(256, false, false), build(257, true, false)];
    if biflow {
        all.extend([build(258, false, true), build(259, true, true)]);
    }
    all
}

/// Big-endian `v` in its low `len` bytes.
fn put_uint(out: &mut Vec<u8>, v: u64, len: u16) {
    let len = usize::from(len).min(8);
    out.extend_from_slice(&v.to_be_bytes()[8 - len..]);
}

/// The tag's text in `len` bytes, zero-padded (all zero without a tag).
fn put_tag(out: &mut Vec<u8>, tag: Option<&Tag>, len: u16) {
    let start = out.len();
    if let Some(t) = tag {
        let text = t.to_string();
        out.extend_from_slice(&text.as_bytes()[..text.len().min(usize::from(len))]);
    }
    out.resize(start + usize::from(len), 0);
}

fn put_addr(out: &mut Vec<u8>, a: IpAddr, len: u16) {
    match (a, len) {
        (IpAddr::V4(a), 4) => out.extend_from_slice(&a.octets()),
        (IpAddr::V6(a), 16) => out.extend_from_slice(&a.octets()),
        (IpAddr::V4(a), 16) => out.extend_from_slice(&a.to_ipv6_mapped().octets()),
        (IpAddr::V6(_), n) => out.resize(out.len() + usize::from(n), 0),
        (IpAddr::V4(_), n) => out.resize(out.len() + usize::from(n), 0),
    }
}

impl Template {
    /// Bytes of one data record.
    pub(crate) fn record_len(&self) -> usize {
        self.fields.iter().map(|f| usize::from(f.len)).sum()
    }

    /// Bytes of the template record (v9: 4 per field; IPFIX: 8 per enterprise field).
    pub(crate) fn template_len(&self) -> usize {
        4 + self
            .fields
            .iter()
            .map(|f| if f.pen.is_some() { 8 } else { 4 })
            .sum::<usize>()
    }

    /// Appends the template record: id, field count, then each field specifier (with the
    /// enterprise bit and number for enterprise-specific elements).
    pub(crate) fn write_template(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.id.to_be_bytes());
        out.extend_from_slice(&(self.fields.len() as u16).to_be_bytes());
        for f in &self.fields {
            let id = if f.pen.is_some() { f.id | 0x8000 } else { f.id };
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&f.len.to_be_bytes());
            if let Some(pen) = f.pen {
                out.extend_from_slice(&pen.to_be_bytes());
            }
        }
    }

    /// Appends one data record for `view`.
    pub(crate) fn write_record(&self, out: &mut Vec<u8>, view: &View<'_>, clock: &Clock) {
        let side = |s: Side| -> &Direction {
            match s {
                Side::Fwd => view.fwd,
                Side::Rev => view.rev,
            }
        };
        for f in &self.fields {
            let v: u64 = match f.value {
                Value::Octets(s) => side(s).bytes,
                Value::Packets(s) => side(s).packets,
                Value::Start(s) => self.time_value(side(s), side(s).first_ns, clock),
                Value::End(s) => self.time_value(side(s), side(s).last_ns, clock),
                Value::TcpFlags(s) => u64::from(side(s).tcp_flags),
                Value::MinTtl(s) => u64::from(side(s).min_ttl),
                Value::MaxTtl(s) => u64::from(side(s).max_ttl),
                Value::SrcAddr => {
                    put_addr(out, view.key.src, f.len);
                    continue;
                }
                Value::DstAddr => {
                    put_addr(out, view.key.dst, f.len);
                    continue;
                }
                Value::SrcPort => u64::from(view.key.src_port),
                Value::DstPort => u64::from(view.key.dst_port),
                Value::IcmpTypeCode => match view.key.proto {
                    1 | 58 => u64::from(view.key.dst_port),
                    _ => 0,
                },
                Value::Proto => u64::from(view.key.proto),
                Value::Tos => u64::from(view.key.tos),
                Value::Vlan => u64::from(view.key.vlan),
                Value::EndReason => view.reason as u64,
                Value::Tag => {
                    put_tag(out, view.tag.as_ref(), f.len);
                    continue;
                }
            };
            put_uint(out, v, f.len);
        }
    }

    /// A time in this template's encoding; 0 for a direction without packets.
    fn time_value(&self, d: &Direction, t_ns: u64, clock: &Clock) -> u64 {
        if d.packets == 0 {
            return 0;
        }
        match self.time {
            TimeFormat::Uptime => u64::from(clock.uptime_ms(t_ns)),
            TimeFormat::Millis => t_ns / 1_000_000,
            TimeFormat::Nanos => ntp_timestamp(t_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths() {
        let [v4, v6] = &v9_templates(false)[..] else {
            panic!()
        };
        assert_eq!((v4.record_len(), v6.record_len()), (45, 69));
        assert_eq!(v4.template_len(), 4 + 15 * 4);
        let [u4, u6] = &ipfix_templates(false, true, false)[..] else {
            panic!()
        };
        assert_eq!((u4.id, u6.id), (256, 257));
        assert_eq!((u4.record_len(), u6.record_len()), (55, 79));
        let [_, _, b4, b6] = &ipfix_templates(true, false, false)[..] else {
            panic!()
        };
        assert_eq!((b4.id, b6.id), (258, 259));
        assert_eq!(b4.record_len(), 55 + 36);
        assert_eq!(b6.template_len(), 4 + 16 * 4 + 7 * 8);
    }

    /// With tags every template ends with applicationName (96), 16 bytes: the tag's text
    /// zero-padded, all zero without one.
    #[test]
    fn tag_field_ends_every_template() {
        for t in v9_templates(true)
            .into_iter()
            .chain(ipfix_templates(true, false, true))
        {
            let last = t.fields.last().unwrap();
            assert_eq!(
                (last.id, last.len, last.pen, last.value),
                (96, 16, None, Value::Tag)
            );
        }
        assert_eq!(v9_templates(true)[0].record_len(), 45 + 16);
        assert_eq!(v9_templates(true)[0].template_len(), 4 + 16 * 4);
        let mut out = Vec::new();
        put_tag(&mut out, Tag::text("lab").as_ref(), 16);
        put_tag(&mut out, Some(&Tag::Num(42)), 16);
        put_tag(&mut out, None, 16);
        let mut want = b"lab".to_vec();
        want.resize(16, 0);
        want.extend(b"42");
        want.resize(48, 0);
        assert_eq!(out, want);
    }

    #[test]
    fn template_record_bytes() {
        let t = Template {
            id: 300,
            fields: vec![
                f(1, 8, Value::Octets(Side::Fwd)),
                Field {
                    pen: Some(REVERSE_PEN),
                    ..f(2, 4, Value::Packets(Side::Rev))
                },
            ],
            time: TimeFormat::Millis,
        };
        let mut out = Vec::new();
        t.write_template(&mut out);
        #[rustfmt::skip]
        assert_eq!(out, [
            0x01, 0x2c, 0, 2,          // id 300, 2 fields
            0, 1, 0, 8,                // octetDeltaCount, 8
            0x80, 2, 0, 4, 0, 0, 0x72, 0x79, // reverse packetDeltaCount, 4, PEN 29305
        ]);
        assert_eq!(out.len(), t.template_len());
    }

    #[test]
    fn put_uint_truncates_to_length() {
        let mut out = Vec::new();
        put_uint(&mut out, 0x0102_0304_0506_0708, 8);
        put_uint(&mut out, 0x1234, 2);
        put_uint(&mut out, 0xab, 1);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8, 0x12, 0x34, 0xab]);
    }
}
