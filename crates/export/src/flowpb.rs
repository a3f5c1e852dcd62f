//! goflow2's protobuf flow record (`FlowMessage` of its `pb/flow.proto`, kept in the repo as
//! `proto/flow.proto`), written by hand with prost's derive: the field numbers and types are the
//! .proto's, so no protoc is needed to build, and goflow2 → Kafka → ClickHouse pipelines read
//! weir's records unchanged.
//!
//! One message per direction with packets, as goflow2 makes one per NetFlow/IPFIX record: a
//! one-way (default) flow record is one message, a `--biflow` record with a reverse direction is
//! two (the reverse one with the addresses and ports swapped). What goes where:
//!
//! | FlowMessage field | value |
//! |---|---|
//! | `type` | `IPFIX` (4): weir's records are IPFIX's |
//! | `time_received_ns` | the direction's last packet time (weir's clocks are packet time) |
//! | `sequence_num` | the output's message count before this one (wraps at 2^32) |
//! | `sampling_rate` | 1 (weir meters every packet) |
//! | `time_flow_start_ns`, `time_flow_end_ns` | first / last packet, ns since the epoch |
//! | `bytes`, `packets` | octetDeltaCount, packetDeltaCount |
//! | `src_addr`, `dst_addr` | 4 bytes (IPv4) or 16 (IPv6) |
//! | `etype` | 0x0800 or 0x86dd |
//! | `proto`, `src_port`, `dst_port` | as in JSON (ICMP: `dst_port` = type << 8 \| code) |
//! | `icmp_type`, `icmp_code` | ICMP / ICMPv6 only, from `dst_port` (as goflow2 decodes IPFIX) |
//! | `vlan_id`, `src_vlan` | vlanId (goflow2 fills both from IPFIX vlanId) |
//! | `ip_tos` | ipClassOfService |
//! | `ip_ttl` | minimumTTL (goflow2 maps IPFIX minimumTTL here) |
//! | `tcp_flags` | tcpControlBits |
//!
//! The other fields stay unset (proto3 default). flowEndReason, maximumTTL and the rules' tag
//! have no field in goflow2's message; they are in the JSON encoding.

use std::net::IpAddr;

use weir_flows::{Direction, FlowKey, FlowRecord};

/// goflow2's `FlowMessage` (every field, numbers as in `proto/flow.proto`).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct FlowMessage {
    #[prost(enumeration = "FlowType", tag = "1")]
    pub(crate) r#type: i32,
    #[prost(uint64, tag = "110")]
    pub(crate) time_received_ns: u64,
    #[prost(uint32, tag = "4")]
    pub(crate) sequence_num: u32,
    #[prost(uint64, tag = "3")]
    pub(crate) sampling_rate: u64,
    #[prost(bytes = "vec", tag = "11")]
    pub(crate) sampler_address: Vec<u8>,
    #[prost(uint64, tag = "111")]
    pub(crate) time_flow_start_ns: u64,
    #[prost(uint64, tag = "112")]
    pub(crate) time_flow_end_ns: u64,
    #[prost(uint64, tag = "9")]
    pub(crate) bytes: u64,
    #[prost(uint64, tag = "10")]
    pub(crate) packets: u64,
    #[prost(bytes = "vec", tag = "6")]
    pub(crate) src_addr: Vec<u8>,
    #[prost(bytes = "vec", tag = "7")]
    pub(crate) dst_addr: Vec<u8>,
    #[prost(uint32, tag = "30")]
    pub(crate) etype: u32,
    #[prost(uint32, tag = "20")]
    pub(crate) proto: u32,
    #[prost(uint32, tag = "21")]
    pub(crate) src_port: u32,
    #[prost(uint32, tag = "22")]
    pub(crate) dst_port: u32,
    #[prost(uint32, tag = "18")]
    pub(crate) in_if: u32,
    #[prost(uint32, tag = "19")]
    pub(crate) out_if: u32,
    #[prost(uint64, tag = "27")]
    pub(crate) src_mac: u64,
    #[prost(uint64, tag = "28")]
    pub(crate) dst_mac: u64,
    #[prost(uint32, tag = "33")]
    pub(crate) src_vlan: u32,
    #[prost(uint32, tag = "34")]
    pub(crate) dst_vlan: u32,
    #[prost(uint32, tag = "29")]
    pub(crate) vlan_id: u32,
    #[prost(uint32, tag = "23")]
    pub(crate) ip_tos: u32,
    #[prost(uint32, tag = "24")]
    pub(crate) forwarding_status: u32,
    #[prost(uint32, tag = "25")]
    pub(crate) ip_ttl: u32,
    #[prost(uint32, tag = "38")]
    pub(crate) ip_flags: u32,
    #[prost(uint32, tag = "26")]
    pub(crate) tcp_flags: u32,
    #[prost(uint32, tag = "31")]
    pub(crate) icmp_type: u32,
    #[prost(uint32, tag = "32")]
    pub(crate) icmp_code: u32,
    #[prost(uint32, tag = "37")]
    pub(crate) ipv6_flow_label: u32,
    #[prost(uint32, tag = "35")]
    pub(crate) fragment_id: u32,
    #[prost(uint32, tag = "36")]
    pub(crate) fragment_offset: u32,
    #[prost(uint32, tag = "14")]
    pub(crate) src_as: u32,
    #[prost(uint32, tag = "15")]
    pub(crate) dst_as: u32,
    #[prost(bytes = "vec", tag = "12")]
    pub(crate) next_hop: Vec<u8>,
    #[prost(uint32, tag = "13")]
    pub(crate) next_hop_as: u32,
    #[prost(uint32, tag = "16")]
    pub(crate) src_net: u32,
    #[prost(uint32, tag = "17")]
    pub(crate) dst_net: u32,
    #[prost(bytes = "vec", tag = "100")]
    pub(crate) bgp_next_hop: Vec<u8>,
    #[prost(uint32, repeated, tag = "101")]
    pub(crate) bgp_communities: Vec<u32>,
    #[prost(uint32, repeated, tag = "102")]
    pub(crate) as_path: Vec<u32>,
    #[prost(uint32, repeated, tag = "80")]
    pub(crate) mpls_ttl: Vec<u32>,
    #[prost(uint32, repeated, tag = "81")]
    pub(crate) mpls_label: Vec<u32>,
    #[prost(bytes = "vec", repeated, tag = "82")]
    pub(crate) mpls_ip: Vec<Vec<u8>>,
    #[prost(uint32, tag = "70")]
    pub(crate) observation_domain_id: u32,
    #[prost(uint32, tag = "71")]
    pub(crate) observation_point_id: u32,
    #[prost(enumeration = "LayerStack", repeated, tag = "103")]
    pub(crate) layer_stack: Vec<i32>,
    #[prost(uint32, repeated, tag = "104")]
    pub(crate) layer_size: Vec<u32>,
    #[prost(bytes = "vec", repeated, tag = "105")]
    pub(crate) ipv6_routing_header_addresses: Vec<Vec<u8>>,
    #[prost(uint32, tag = "106")]
    pub(crate) ipv6_routing_header_seg_left: u32,
}

/// `FlowMessage.FlowType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum FlowType {
    FlowUnknown = 0,
    Sflow5 = 1,
    NetflowV5 = 2,
    NetflowV9 = 3,
    Ipfix = 4,
}

/// `FlowMessage.LayerStack` (weir leaves `layer_stack` empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub(crate) enum LayerStack {
    Ethernet = 0,
    IPv4 = 1,
    IPv6 = 2,
    Tcp = 3,
    Udp = 4,
    Mpls = 5,
    Dot1Q = 6,
    Icmp = 7,
    ICMPv6 = 8,
    Gre = 9,
    IPv6HeaderRouting = 10,
    IPv6HeaderFragment = 11,
    Geneve = 12,
    Teredo = 13,
    Custom = 99,
}

fn addr(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The message of one direction (`key` as that direction sees it).
fn message(key: &FlowKey, d: &Direction, seq: u32) -> FlowMessage {
    let icmp = matches!(key.proto, 1 | 58);
    FlowMessage {
        r#type: FlowType::Ipfix as i32,
        time_received_ns: d.last_ns,
        sequence_num: seq,
        sampling_rate: 1,
        time_flow_start_ns: d.first_ns,
        time_flow_end_ns: d.last_ns,
        bytes: d.bytes,
        packets: d.packets,
        src_addr: addr(key.src),
        dst_addr: addr(key.dst),
        etype: if key.src.is_ipv4() { 0x0800 } else { 0x86dd },
        proto: key.proto.into(),
        src_port: key.src_port.into(),
        dst_port: key.dst_port.into(),
        icmp_type: if icmp {
            u32::from(key.dst_port >> 8)
        } else {
            0
        },
        icmp_code: if icmp {
            u32::from(key.dst_port & 0xff)
        } else {
            0
        },
        vlan_id: key.vlan.into(),
        src_vlan: key.vlan.into(),
        ip_tos: key.tos.into(),
        ip_ttl: d.min_ttl.into(),
        tcp_flags: d.tcp_flags.into(),
        ..FlowMessage::default()
    }
}

/// The messages of one flow record (see the module documentation): the forward direction, then
/// the reverse one when it has packets. `seq` is the output's message count, advanced here.
pub(crate) fn messages(rec: &FlowRecord, seq: &mut u64) -> impl Iterator<Item = FlowMessage> {
    let fwd = message(&rec.key, &rec.forward, *seq as u32);
    *seq += 1;
    let rev = (rec.reverse.packets > 0).then(|| {
        let m = message(&rec.key.reversed(), &rec.reverse, *seq as u32);
        *seq += 1;
        m
    });
    std::iter::once(fwd).chain(rev)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use weir_flows::EndReason;

    fn rec(reverse: bool) -> FlowRecord {
        let d = |p, b, t| Direction {
            packets: p,
            bytes: b,
            first_ns: t,
            last_ns: t + 5,
            tcp_flags: 0x12,
            min_ttl: 63,
            max_ttl: 64,
        };
        FlowRecord {
            key: FlowKey {
                vlan: 7,
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                proto: 6,
                src_port: 40000,
                dst_port: 443,
                tos: 0x20,
            },
            forward: d(3, 180, 1_000),
            reverse: if reverse {
                d(2, 120, 2_000)
            } else {
                Direction::default()
            },
            end_reason: EndReason::EndOfFlow,
            tag: None,
        }
    }

    /// The bytes on the wire, checked by hand against the .proto's field numbers: tag
    /// (number << 3 | wire type) then value.
    #[test]
    fn wire_bytes_follow_the_field_numbers() {
        let mut seq = 0;
        let m: Vec<_> = messages(&rec(false), &mut seq).collect();
        assert_eq!((m.len(), seq), (1, 1));
        let b = m[0].encode_to_vec();
        // type = 4 (field 1, varint)
        assert_eq!(&b[..2], &[0x08, 4]);
        // sampling_rate = 1 (field 3)
        assert!(b.windows(2).any(|w| w == [0x18, 1]));
        // src_addr (field 6, length-delimited) = 10.0.0.1
        assert!(b.windows(6).any(|w| w == [0x32, 4, 10, 0, 0, 1]));
        // dst_port = 443 (field 22: tag 0xb0 0x01, varint 0xbb 0x03)
        assert!(b.windows(4).any(|w| w == [0xb0, 0x01, 0xbb, 0x03]));
        // time_flow_end_ns = 1005 (field 112: tag 0x80 0x07, varint 0xed 0x07)
        assert!(b.windows(4).any(|w| w == [0x80, 0x07, 0xed, 0x07]));
        assert_eq!(FlowMessage::decode(&b[..]).unwrap(), m[0]);
    }

    #[test]
    fn a_biflow_record_is_two_messages() {
        let mut seq = 10;
        let m: Vec<_> = messages(&rec(true), &mut seq).collect();
        assert_eq!(seq, 12);
        assert_eq!((m[0].sequence_num, m[1].sequence_num), (10, 11));
        assert_eq!(m[1].src_addr, [10, 0, 0, 2]);
        assert_eq!((m[1].src_port, m[1].dst_port), (443, 40000));
        assert_eq!((m[1].packets, m[1].bytes), (2, 120));
        assert_eq!((m[0].vlan_id, m[0].src_vlan, m[0].ip_tos), (7, 7, 0x20));
        assert_eq!((m[0].ip_ttl, m[0].tcp_flags, m[0].etype), (63, 0x12, 0x800));
    }

    #[test]
    fn icmp_type_and_code_come_from_the_port() {
        let mut r = rec(false);
        r.key.proto = 58;
        r.key.src = "2001:db8::1".parse().unwrap();
        r.key.dst = "2001:db8::2".parse().unwrap();
        r.key.src_port = 0;
        r.key.dst_port = 128 << 8 | 3;
        let m = messages(&r, &mut 0).next().unwrap();
        assert_eq!((m.icmp_type, m.icmp_code, m.dst_port), (128, 3, 32771));
        assert_eq!((m.src_addr.len(), m.etype), (16, 0x86dd));
    }
}
