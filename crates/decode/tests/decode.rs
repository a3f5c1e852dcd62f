//! End-to-end decoding of hand-built frames: every encapsulation, every accessor, every
//! malformed case named in the brief, and the one-line summaries.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use common::*;
use weir_decode::{
    decode, protocol_name, summary, tcp as tcpf, DecodeError, ErrorKind, Fragment, Layer,
    LayerKind, LinkType, Transport, MAX_LAYERS, MAX_TUNNELS,
};

fn kinds(link: u32, frame: &[u8]) -> Vec<LayerKind> {
    decode(LinkType(link), frame)
        .layers()
        .iter()
        .map(|l| l.kind())
        .collect()
}

fn err(kind: ErrorKind, layer: LayerKind, offset: u32) -> Option<DecodeError> {
    Some(DecodeError {
        kind,
        layer,
        offset,
    })
}

use LayerKind as K;

const A4: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
const B4: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

fn a6() -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(IP6_A))
}
fn b6() -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(IP6_B))
}

#[test]
fn ethernet_ipv4_tcp_every_accessor() {
    let payload = b"hello";
    let mut v4 = V4::new(6);
    v4.tos = 0x28;
    v4.ttl = 57;
    let opts = [0x01, 0x01, 0x01, 0x00]; // NOP NOP NOP EOL
    let seg = tcp_opts(
        1234,
        80,
        7,
        9,
        tcpf::PSH | tcpf::ACK,
        &[2, 4, 5, 0xb4],
        payload,
    );
    let frame = eth(0x0800, &v4.build_opts(&opts, &seg));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert!(!d.clipped());
    let k: Vec<_> = d.layers().iter().map(Layer::kind).collect();
    assert_eq!(k, [K::Ethernet, K::Ipv4, K::Tcp]);

    let Layer::Ethernet(e) = d.layers()[0] else {
        panic!()
    };
    assert_eq!(e.dst_addr().0, MAC_B);
    assert_eq!(e.src_addr().0, MAC_A);
    assert_eq!(e.ethertype(), 0x0800);
    let Layer::Ipv4(ip) = d.layers()[1] else {
        panic!()
    };
    assert_eq!(ip.header_len(), 24);
    assert_eq!(ip.options(), &opts);
    assert_eq!(ip.payload(), &seg[..]);

    let info = d.ip().unwrap();
    assert_eq!(info.version, 4);
    assert_eq!((info.src, info.dst), (A4, B4));
    assert_eq!(info.proto, 6);
    assert_eq!(info.ttl, 57);
    assert_eq!(info.tos, 0x28);
    assert_eq!(info.len as usize, 24 + seg.len());
    assert_eq!(info.flow_label, 0);
    assert!(info.dont_fragment);
    assert_eq!(info.fragment, None);
    assert_eq!(d.outer_ip(), Some(info));
    assert_eq!(d.ip_index(), Some(1));

    assert_eq!(
        d.transport(),
        Some(Transport::Tcp {
            src: 1234,
            dst: 80,
            flags: tcpf::PSH | tcpf::ACK,
            seq: 7,
            ack: 9,
            window: 65535,
            hdr_len: 24,
            payload
        })
    );
    assert_eq!(d.transport().unwrap().ports(), Some((1234, 80)));
    assert_eq!(d.transport().unwrap().proto(), 6);
    assert_eq!(d.vlan(), None);
    assert_eq!(d.payload(), None);
    assert_eq!(protocol_name(&d), "TCP");
    assert_eq!(
        summary(&d).to_string(),
        "IP 10.0.0.1.1234 > 10.0.0.2.80: Flags [P.], seq 7:12, ack 9, win 65535, length 5"
    );
}

#[test]
fn tcp_syn_summary() {
    let frame = eth_ipv4_tcp_syn();
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1.1234 > 10.0.0.2.80: Flags [S], seq 1, win 65535, length 0"
    );
}

#[test]
fn ethernet_padding_is_dropped_by_ip_length() {
    let mut frame = eth(0x0800, &ipv4(17, &udp(1, 2, &[7])));
    frame.extend_from_slice(&[0xee; 10]); // padding to the minimum frame size
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    match d.transport() {
        Some(Transport::Udp { payload, len, .. }) => {
            assert_eq!(payload, &[7]);
            assert_eq!(len, 9);
        }
        t => panic!("{t:?}"),
    }
}

#[test]
fn ipv6_udp() {
    let frame = eth(
        0x86dd,
        &ipv6_full(0xb8, 0xabcde, 17, &udp(53, 5353, &[0; 12])),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    let ip = d.ip().unwrap();
    assert_eq!(ip.version, 6);
    assert_eq!((ip.src, ip.dst), (a6(), b6()));
    assert_eq!(ip.proto, 17);
    assert_eq!(ip.ttl, 64);
    assert_eq!(ip.tos, 0xb8);
    assert_eq!(ip.flow_label, 0xabcde);
    assert_eq!(ip.len, 40 + 20);
    assert_eq!(ip.fragment, None);
    assert_eq!(
        d.transport(),
        Some(Transport::Udp {
            src: 53,
            dst: 5353,
            len: 20,
            payload: &[0; 12]
        })
    );
    assert_eq!(protocol_name(&d), "UDP");
    assert_eq!(
        d.to_string(),
        "IP6 2001:db8::1.53 > 2001:db8::2.5353: UDP, length 12"
    );
}

#[test]
fn icmp_and_icmpv6() {
    let frame = eth(0x0800, &ipv4(1, &icmp(8, 0, 0x77, 3, &[0; 56])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        d.transport(),
        Some(Transport::Icmp {
            icmp_type: 8,
            code: 0
        })
    );
    assert_eq!(d.transport().unwrap().ports(), None);
    assert_eq!(protocol_name(&d), "ICMP");
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1 > 10.0.0.2: ICMP echo request, id 119, seq 3, length 64"
    );
    let frame = eth(0x0800, &ipv4(1, &icmp(3, 3, 0, 0, &[])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1 > 10.0.0.2: ICMP destination unreachable, code 3, length 8"
    );

    let frame = eth(0x86dd, &ipv6(58, &icmp(135, 0, 0, 0, &[0; 16])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        d.transport(),
        Some(Transport::Icmpv6 {
            icmp_type: 135,
            code: 0
        })
    );
    assert_eq!(protocol_name(&d), "ICMPv6");
    assert_eq!(
        d.to_string(),
        "IP6 2001:db8::1 > 2001:db8::2: ICMP6, neighbor solicitation, length 24"
    );
}

#[test]
fn sctp_common_header() {
    let frame = eth(0x0800, &ipv4(132, &sctp(2905, 2906, 0xcafe, &[1, 0, 0, 4])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        d.transport(),
        Some(Transport::Sctp {
            src: 2905,
            dst: 2906,
            vtag: 0xcafe
        })
    );
    assert_eq!(protocol_name(&d), "SCTP");
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1.2905 > 10.0.0.2.2906: SCTP, vtag 0xcafe, length 4"
    );
    // SCTP header cut by the capture: truncated
    let d = decode(LinkType::ETHERNET, &frame[..34 + 11]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Sctp, 34));
    assert_eq!(d.transport(), None);
    assert_eq!(protocol_name(&d), "SCTP");
    // an 11-byte SCTP header in a complete IP packet: malformed
    let frame = eth(0x0800, &ipv4(132, &[0; 11]));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Sctp, 34));
}

#[test]
fn arp_request_summary() {
    let frame = eth(0x0806, &arp_request(IP_A, IP_B));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Arp]);
    assert_eq!(d.ip(), None);
    assert_eq!(d.transport(), None);
    assert_eq!(protocol_name(&d), "ARP");
    assert_eq!(
        d.to_string(),
        "ARP, Request who-has 10.0.0.2 tell 10.0.0.1, length 28"
    );
    let d = decode(LinkType::ETHERNET, &frame[..14 + 27]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Arp, 14));
}

#[test]
fn vlan_stacks() {
    let inner = ipv4(6, &tcp(1, 2, 0, 0, 0x02, &[]));
    let frame = eth(0x88a8, &vlan(100, 0x8100, &vlan(10, 0x0800, &inner)));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Vlan, K::Vlan, K::Ipv4, K::Tcp]
    );
    assert_eq!(d.vlan(), Some(100));
    let Layer::Vlan { tpid, tag } = d.layers()[1] else {
        panic!()
    };
    assert_eq!((tpid, tag.vid(), tag.ethertype()), (0x88a8, 100, 0x8100));
    let Layer::Vlan { tpid, tag } = d.layers()[2] else {
        panic!()
    };
    assert_eq!((tpid, tag.vid(), tag.ethertype()), (0x8100, 10, 0x0800));
    assert_eq!(
        d.to_string(),
        "802.1ad vlan 100, p 0, 802.1Q vlan 10, p 0, IP 10.0.0.1.1 > 10.0.0.2.2: Flags [S], seq 0, win 65535, length 0"
    );
    for tpid in [0x9100u16, 0x9200] {
        let frame = eth(tpid, &vlan(5, 0x0800, &inner));
        let d = decode(LinkType::ETHERNET, &frame);
        assert_eq!(d.vlan(), Some(5));
        assert!(d.to_string().starts_with("QinQ vlan 5, p 0, IP "));
    }
    // a tag cut in the middle
    let d = decode(LinkType::ETHERNET, &frame[..16]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Vlan, 14));
    assert_eq!(d.to_string(), "[|vlan] (truncated VLAN tag at byte 14)");
}

#[test]
fn too_many_vlan_tags() {
    let mut body = ipv4(6, &tcp(1, 2, 0, 0, 0x02, &[]));
    for _ in 0..20 {
        body = vlan(1, 0x8100, &body);
    }
    let frame = eth(0x8100, &body);
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.layers().len(), MAX_LAYERS);
    let e = d.error().unwrap();
    assert_eq!((e.kind, e.layer), (ErrorKind::TooDeep, K::Vlan));
    assert_eq!(e.offset as usize, 14 + 4 * (MAX_LAYERS - 1));
}

#[test]
fn mpls_stacks() {
    let inner = ipv4(17, &udp(1, 2, &[]));
    let frame = eth(
        0x8847,
        &cat(&[&mpls(100, 0, false, 64), &mpls(200, 5, true, 63), &inner]),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Mpls, K::Mpls, K::Ipv4, K::Udp]
    );
    let Layer::Mpls(m) = d.layers()[2] else {
        panic!()
    };
    assert_eq!((m.label(), m.tc(), m.bottom(), m.ttl()), (200, 5, true, 63));
    assert_eq!(
        d.to_string(),
        "MPLS (label 100, tc 0, ttl 64) (label 200, tc 5, [S], ttl 63) IP 10.0.0.1.1 > 10.0.0.2.2: UDP, length 0"
    );

    // IPv6 by version nibble
    let frame = eth(0x8847, &cat(&[&mpls(2, 0, true, 1), &ipv6(59, &[])]));
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Mpls, K::Ipv6, K::Payload]
    );

    // unknown first nibble: payload
    let frame = eth(0x8847, &cat(&[&mpls(16, 0, true, 1), &[0x99, 1, 2]]));
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Mpls, K::Payload]);

    // no bottom-of-stack until the end of the data
    let frame = eth(
        0x8847,
        &cat(&[
            &mpls(1, 0, false, 1),
            &mpls(2, 0, false, 1),
            &mpls(3, 0, false, 1),
        ]),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Mpls, K::Mpls, K::Mpls]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Mpls, 26));

    // bottom of stack with nothing after it
    let frame = eth(0x8847, &mpls(1, 0, true, 1));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Payload, 18));
}

#[test]
fn mpls_pseudowire_control_word() {
    let inner = eth(0x0800, &ipv4(6, &tcp(1, 2, 0, 0, 0x10, &[])));
    let frame = eth(
        0x8847,
        &cat(&[&mpls(300, 0, true, 64), &[0, 0, 0, 0], &inner]),
    );
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Mpls, K::Ethernet, K::Ipv4, K::Tcp]
    );
    let d = decode(LinkType::ETHERNET, &frame[..14 + 4 + 3]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Ethernet, 18));
}

#[test]
fn pppoe_session() {
    let inner = ipv4(6, &tcp(1, 2, 0, 0, 0x02, &[]));
    let frame = eth(0x8864, &pppoe(0, 0x1234, &cat(&[&[0x00, 0x21], &inner])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Pppoe, K::Ppp, K::Ipv4, K::Tcp]
    );
    let Layer::Pppoe(h) = d.layers()[1] else {
        panic!()
    };
    assert_eq!((h.version(), h.pppoe_type(), h.code()), (1, 1, 0));
    assert_eq!(h.session_id(), 0x1234);
    assert_eq!(h.length() as usize, 2 + inner.len());
    let Layer::Ppp(p) = d.layers()[2] else {
        panic!()
    };
    assert_eq!(p.protocol(), 0x0021);
    assert!(d
        .to_string()
        .starts_with("PPPoE [ses 0x1234] IP 10.0.0.1.1 > 10.0.0.2.2: "));

    let frame6 = eth(0x8864, &pppoe(0, 1, &cat(&[&[0x00, 0x57], &ipv6(59, &[])])));
    assert_eq!(
        kinds(1, &frame6),
        [K::Ethernet, K::Pppoe, K::Ppp, K::Ipv6, K::Payload]
    );

    // length field shorter than the PPP protocol: malformed, the deepest layer is PPPoE
    let mut short = frame.clone();
    short[14 + 4..14 + 6].copy_from_slice(&1u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &short);
    assert_eq!(kinds(1, &short), [K::Ethernet, K::Pppoe]);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Ppp, 20));

    // length field shorter than the IP header inside: malformed at IPv4
    let mut short = frame.clone();
    short[14 + 4..14 + 6].copy_from_slice(&12u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &short);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Ipv4, 22));

    // length field longer than the capture: clipped, not an error
    let mut long = frame.clone();
    long[14 + 4..14 + 6].copy_from_slice(&1000u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &long);
    assert_eq!(d.error(), None);
    assert!(d.clipped());
    assert_eq!(d.layers().len(), 5);
}

#[test]
fn pppoe_discovery() {
    let frame = eth(0x8863, &pppoe(0x09, 0, &[0x01, 0x01, 0x00, 0x00]));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Pppoe, K::Payload]);
    assert_eq!(protocol_name(&d), "other");
    assert_eq!(d.to_string(), "PPPoE PADI 0x09 [ses 0x0], length 4");
}

#[test]
fn ieee_8023_llc_and_snap() {
    let stp = [0x42, 0x42, 0x03, 0, 0, 0, 0, 0];
    let mut frame = cat(&[&MAC_B, &MAC_A, &(stp.len() as u16).to_be_bytes(), &stp]);
    frame.extend_from_slice(&[0; 30]); // padding beyond the 802.3 length
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Llc, K::Payload]);
    assert_eq!(d.payload().unwrap().len(), 5);
    assert_eq!(protocol_name(&d), "other");
    assert_eq!(d.to_string(), "LLC dsap 0x42 ssap 0x42 ctrl 0x03, length 5");

    let inner = ipv4(17, &udp(1, 2, &[]));
    let body = cat(&[&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00], &inner]);
    let frame = cat(&[&MAC_B, &MAC_A, &(body.len() as u16).to_be_bytes(), &body]);
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Llc, K::Snap, K::Ipv4, K::Udp]
    );
    assert_eq!(d.ip().unwrap().src, A4);

    // non-RFC-1042 SNAP (Cisco CDP): not followed
    let body = [0xaa, 0xaa, 0x03, 0x00, 0x00, 0x0c, 0x20, 0x00, 1, 2];
    let frame = cat(&[&MAC_B, &MAC_A, &(body.len() as u16).to_be_bytes(), &body]);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Llc, K::Snap, K::Payload]);

    // 802.3 length shorter than the LLC header: malformed
    let frame = cat(&[&MAC_B, &MAC_A, &2u16.to_be_bytes(), &stp]);
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Llc, 14));
}

#[test]
fn unknown_ethertype() {
    let frame = eth(0x88cc, &[1, 2, 3]);
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Payload]);
    assert_eq!(d.payload(), Some(&[1u8, 2, 3][..]));
    assert_eq!(d.to_string(), "LLDP (0x88cc), length 3");
    let frame = eth(0x1234, &[]);
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.to_string(), "ethertype 0x1234, length 0");
    assert_eq!(protocol_name(&d), "other");
}

#[test]
fn link_types() {
    let tcp4 = ipv4(6, &tcp(1, 2, 0, 0, 0x02, &[]));
    let udp6 = ipv6(17, &udp(1, 2, &[]));
    let cases: Vec<(u32, Vec<u8>, Vec<LayerKind>)> = vec![
        (
            0,
            cat(&[&2u32.to_le_bytes(), &tcp4]),
            vec![K::Loopback, K::Ipv4, K::Tcp],
        ),
        (
            0,
            cat(&[&2u32.to_be_bytes(), &tcp4]),
            vec![K::Loopback, K::Ipv4, K::Tcp],
        ),
        (
            0,
            cat(&[&24u32.to_le_bytes(), &udp6]),
            vec![K::Loopback, K::Ipv6, K::Udp],
        ),
        (
            0,
            cat(&[&28u32.to_be_bytes(), &udp6]),
            vec![K::Loopback, K::Ipv6, K::Udp],
        ),
        (
            0,
            cat(&[&30u32.to_le_bytes(), &udp6]),
            vec![K::Loopback, K::Ipv6, K::Udp],
        ),
        (
            0,
            cat(&[&7u32.to_le_bytes(), &udp6]),
            vec![K::Loopback, K::Payload],
        ),
        (
            108,
            cat(&[&2u32.to_be_bytes(), &tcp4]),
            vec![K::Loopback, K::Ipv4, K::Tcp],
        ),
        (
            108,
            cat(&[&2u32.to_le_bytes(), &tcp4]),
            vec![K::Loopback, K::Payload],
        ),
        (12, tcp4.clone(), vec![K::Ipv4, K::Tcp]),
        (12, udp6.clone(), vec![K::Ipv6, K::Udp]),
        (14, udp6.clone(), vec![K::Ipv6, K::Udp]),
        (101, tcp4.clone(), vec![K::Ipv4, K::Tcp]),
        (228, tcp4.clone(), vec![K::Ipv4, K::Tcp]),
        (229, udp6.clone(), vec![K::Ipv6, K::Udp]),
        (
            113,
            cat(&[&[0, 0, 0, 1, 0, 6], &MAC_A, &[0, 0], &[0x08, 0x00], &tcp4]),
            vec![K::LinuxSll, K::Ipv4, K::Tcp],
        ),
        (
            113,
            cat(&[
                &[0, 0, 0, 1, 0, 6],
                &MAC_A,
                &[0, 0],
                &[0x00, 0x04],
                &[0x42, 0x42, 0x03],
            ]),
            vec![K::LinuxSll, K::Llc, K::Payload],
        ),
        (
            113,
            cat(&[
                &[0, 0, 0x03, 0x38, 0, 0],
                &[0; 8],
                &[0x00, 0x00],
                &[1, 2, 3],
            ]),
            vec![K::LinuxSll, K::Payload],
        ),
        (
            276,
            cat(&[
                &[0x86, 0xdd, 0, 0, 0, 0, 0, 2, 0, 1, 0, 6],
                &MAC_A,
                &[0, 0],
                &udp6,
            ]),
            vec![K::LinuxSll2, K::Ipv6, K::Udp],
        ),
        (
            9,
            cat(&[&[0xff, 0x03, 0x00, 0x21], &tcp4]),
            vec![K::Ppp, K::Ipv4, K::Tcp],
        ),
        (
            9,
            cat(&[&[0x00, 0x57], &udp6]),
            vec![K::Ppp, K::Ipv6, K::Udp],
        ),
        (9, cat(&[&[0x21], &tcp4]), vec![K::Ppp, K::Ipv4, K::Tcp]),
        (
            9,
            cat(&[&[0xff, 0x03, 0xc0, 0x21], &[1, 1, 0, 4]]),
            vec![K::Ppp, K::Payload],
        ),
        (
            50,
            cat(&[&[0xff, 0x03, 0x00, 0x57], &udp6]),
            vec![K::Ppp, K::Ipv6, K::Udp],
        ),
        (
            50,
            cat(&[&[0x0f, 0x00, 0x08, 0x00], &tcp4]),
            vec![K::Chdlc, K::Ipv4, K::Tcp],
        ),
        (
            104,
            cat(&[&[0x8f, 0x00, 0x86, 0xdd], &udp6]),
            vec![K::Chdlc, K::Ipv6, K::Udp],
        ),
        (
            104,
            cat(&[&[0x8f, 0x00, 0x80, 0x35], &[0; 18]]),
            vec![K::Chdlc, K::Arp],
        ),
        (
            104,
            cat(&[&[0x8f, 0x00, 0x12, 0x34], &[0; 4]]),
            vec![K::Chdlc, K::Payload],
        ),
        (
            51,
            pppoe(0, 3, &cat(&[&[0x00, 0x21], &tcp4])),
            vec![K::Pppoe, K::Ppp, K::Ipv4, K::Tcp],
        ),
    ];
    for (link, frame, want) in cases {
        let d = decode(LinkType(link), &frame);
        assert_eq!(d.error(), None, "link {link} {frame:02x?}");
        assert_eq!(kinds(link, &frame), want, "link {link} {frame:02x?}");
    }

    // loopback family values
    let frame = cat(&[&2u32.to_be_bytes(), &tcp4]);
    let d = decode(LinkType::NULL, &frame);
    assert!(matches!(d.layers()[0], Layer::Loopback { family: 2 }));
    let frame = cat(&[&30u32.to_be_bytes(), &udp6]);
    let d = decode(LinkType::LOOP, &frame);
    assert!(matches!(d.layers()[0], Layer::Loopback { family: 30 }));

    // raw IP with a bad version nibble
    let d = decode(LinkType::RAW, &[0x50; 20]);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Ipv4, 0));
    // raw IPv4 link type with IPv6 inside: bad version
    let d = decode(LinkType::IPV4, &udp6);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Ipv4, 0));
    // short cooked headers
    let d = decode(LinkType::LINUX_SLL, &[0; 15]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::LinuxSll, 0));
    let d = decode(LinkType::LINUX_SLL2, &[0; 19]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::LinuxSll2, 0));
    let d = decode(LinkType::NULL, &[2, 0, 0]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Loopback, 0));
    let d = decode(LinkType::PPP, &[0xff]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Ppp, 0));
    let d = decode(LinkType(104), &[0x0f, 0, 8]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Chdlc, 0));
    let frame = cat(&[&[0x0f, 0x00, 0xc0, 0x21], &[0; 4]]);
    let d = decode(LinkType(104), &frame);
    assert_eq!(d.to_string(), "CHDLC proto 0xc021, length 4");
}

#[test]
fn ipv4_malformed() {
    let good = eth(0x0800, &ipv4(6, &tcp(1, 2, 0, 0, 0x02, &[])));
    // short header
    let d = decode(LinkType::ETHERNET, &good[..14 + 19]);
    assert_eq!(kinds(1, &good[..33]), [K::Ethernet]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Ipv4, 14));
    assert_eq!(d.to_string(), "[|ip] (truncated IPv4 header at byte 14)");
    assert_eq!(protocol_name(&d), "other");
    // IHL < 5
    let mut b = good.clone();
    b[14] = 0x44;
    assert_eq!(
        decode(LinkType::ETHERNET, &b).error(),
        err(ErrorKind::Malformed, K::Ipv4, 14)
    );
    // total length < IHL * 4
    let mut b = good.clone();
    b[16..18].copy_from_slice(&19u16.to_be_bytes());
    assert_eq!(
        decode(LinkType::ETHERNET, &b).error(),
        err(ErrorKind::Malformed, K::Ipv4, 14)
    );
    // options announced, not captured
    let mut b = good[..14 + 20].to_vec();
    b[14] = 0x4f;
    assert_eq!(
        decode(LinkType::ETHERNET, &b).error(),
        err(ErrorKind::Truncated, K::Ipv4, 14)
    );
    // total length bigger than the capture: clipped, decoded, no error
    let mut b = good.clone();
    b[16..18].copy_from_slice(&1500u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &b);
    assert_eq!(d.error(), None);
    assert!(d.clipped());
    assert_eq!(d.ip().unwrap().len, 1500);
    assert_eq!(kinds(1, &b), [K::Ethernet, K::Ipv4, K::Tcp]);
    // total length 0 (segmentation offload): the capture decides
    let mut b = good.clone();
    b[16..18].copy_from_slice(&0u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &b);
    assert_eq!(d.error(), None);
    assert_eq!(kinds(1, &b), [K::Ethernet, K::Ipv4, K::Tcp]);
}

#[test]
fn ipv4_fragments() {
    let seg = tcp(1, 2, 0, 0, 0x02, &[0; 16]);
    let mut v4 = V4::new(6);
    v4.df = false;
    v4.mf = true;
    v4.id = 0xbeef;
    let first = eth(0x0800, &v4.build(&seg));
    let d = decode(LinkType::ETHERNET, &first);
    assert_eq!(kinds(1, &first), [K::Ethernet, K::Ipv4, K::Tcp]);
    let ip = d.ip().unwrap();
    assert_eq!(
        ip.fragment,
        Some(Fragment {
            id: 0xbeef,
            offset: 0,
            more: true
        })
    );
    assert!(!ip.dont_fragment);
    assert!(!ip.is_later_fragment());
    assert!(d.transport().unwrap().ports().is_some());

    v4.mf = false;
    v4.frag_units = 5;
    let later = eth(0x0800, &v4.build(&[0xaa; 12]));
    let d = decode(LinkType::ETHERNET, &later);
    assert_eq!(kinds(1, &later), [K::Ethernet, K::Ipv4, K::Payload]);
    assert_eq!(d.error(), None);
    let ip = d.ip().unwrap();
    assert_eq!(
        ip.fragment,
        Some(Fragment {
            id: 0xbeef,
            offset: 40,
            more: false
        })
    );
    assert!(ip.is_later_fragment());
    assert_eq!(d.transport(), None);
    assert_eq!(protocol_name(&d), "TCP");
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1 > 10.0.0.2: TCP fragment (id 48879, offset 40), length 12"
    );
}

#[test]
fn tiny_first_fragment_is_payload_not_error() {
    // a first fragment carrying only 8 bytes of a TCP header: the rest is in the next fragment
    let mut v4 = V4::new(6);
    v4.mf = true;
    let seg = tcp(12345, 8080, 1, 0, 0x02, &[]);
    let frame = eth(0x0800, &v4.build(&seg[..8]));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv4, K::Payload]);
    assert_eq!(d.transport(), None);
    assert_eq!(protocol_name(&d), "TCP");
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1 > 10.0.0.2: TCP fragment (id 4660, offset 0+), length 8"
    );
    // the same 8 bytes without MF: malformed
    let frame = eth(0x0800, &ipv4(6, &seg[..8]));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Tcp, 34));
    // with MF but cut by the capture: truncated
    let frame = eth(0x0800, &v4.build(&seg));
    let d = decode(LinkType::ETHERNET, &frame[..34 + 8]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Tcp, 34));
    // IPv6 first fragment, same rule
    let frame = eth(0x86dd, &ipv6(44, &frag6(17, 0, true, 5, &[0, 53, 0])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv6, K::Ipv6Ext, K::Payload]
    );
}

#[test]
fn ipv6_extension_chain() {
    let seg = tcp(1, 2, 3, 4, 0x10, &[0; 8]);
    let chain = ext(43, 0, &ext(60, 1, &ext(44, 0, &frag6(6, 0, true, 9, &seg))));
    let frame = eth(0x86dd, &ipv6(0, &chain));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(
        kinds(1, &frame),
        [
            K::Ethernet,
            K::Ipv6,
            K::Ipv6Ext,
            K::Ipv6Ext,
            K::Ipv6Ext,
            K::Ipv6Ext,
            K::Tcp
        ]
    );
    let ext_kinds: Vec<u8> = d
        .layers()
        .iter()
        .filter_map(|l| match l {
            Layer::Ipv6Ext { kind, .. } => Some(*kind),
            _ => None,
        })
        .collect();
    assert_eq!(ext_kinds, [0, 43, 60, 44]);
    let Layer::Ipv6Ext { header, .. } = d.layers()[3] else {
        panic!()
    };
    assert_eq!(header.header_len(), 16);
    let ip = d.ip().unwrap();
    assert_eq!(ip.proto, 6);
    assert_eq!(
        ip.fragment,
        Some(Fragment {
            id: 9,
            offset: 0,
            more: true
        })
    );
    assert_eq!(d.transport().unwrap().ports(), Some((1, 2)));
    assert_eq!(protocol_name(&d), "TCP");
    assert!(d
        .to_string()
        .starts_with("IP6 2001:db8::1.1 > 2001:db8::2.2: Flags [.], seq 3:11"));

    // a later fragment stops at the fragment header
    let frame = eth(0x86dd, &ipv6(44, &frag6(17, 100, false, 77, &[1; 24])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv6, K::Ipv6Ext, K::Payload]
    );
    let ip = d.ip().unwrap();
    assert_eq!(ip.proto, 17);
    assert_eq!(
        ip.fragment,
        Some(Fragment {
            id: 77,
            offset: 800,
            more: false
        })
    );
    assert_eq!(d.transport(), None);
    assert_eq!(protocol_name(&d), "UDP");
}

#[test]
fn ipv6_ah_esp_no_next() {
    let frame = eth(0x86dd, &ipv6(51, &ah(17, 3, &udp(5, 6, &[]))));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv6, K::Ipv6Ext, K::Udp]);
    let Layer::Ipv6Ext { kind, header } = d.layers()[2] else {
        panic!()
    };
    assert_eq!((kind, header.header_len()), (51, 24));
    assert_eq!(d.ip().unwrap().proto, 17);

    let frame = eth(0x86dd, &ipv6(50, &[0, 0, 0x10, 0, 0, 0, 0, 5, 0xee, 0xee]));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv6, K::Payload]);
    assert_eq!(d.transport(), Some(Transport::Other(50)));
    assert_eq!(protocol_name(&d), "IPv6-other");
    assert_eq!(
        d.to_string(),
        "IP6 2001:db8::1 > 2001:db8::2: ESP(spi=0x00001000,seq=0x5), length 10"
    );

    let frame = eth(0x86dd, &ipv6(60, &ext(59, 0, &[])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv6, K::Ipv6Ext, K::Payload]
    );
    assert_eq!(d.transport(), Some(Transport::Other(59)));
}

#[test]
fn ipv6_malformed() {
    let frame = eth(0x86dd, &ipv6(17, &udp(1, 2, &[])));
    let d = decode(LinkType::ETHERNET, &frame[..14 + 39]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Ipv6, 14));

    // extension header longer than the captured data
    let chain = ext(6, 3, &[]); // 32 bytes
    let frame = eth(0x86dd, &ipv6(0, &chain));
    let d = decode(LinkType::ETHERNET, &frame[..frame.len() - 8]);
    assert_eq!(kinds(1, &frame[..frame.len() - 8]), [K::Ethernet, K::Ipv6]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Ipv6Ext, 54));
    assert_eq!(d.ip().unwrap().proto, 0);
    assert_eq!(d.transport(), None);

    // extension header longer than the payload length (but captured): malformed
    let mut frame = eth(0x86dd, &ipv6(0, &chain));
    frame[14 + 4..14 + 6].copy_from_slice(&16u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Ipv6Ext, 54));

    // a second extension header running past the end of a complete packet: malformed
    let chain = ext(60, 0, &[60, 4, 0, 0]);
    let frame = eth(0x86dd, &ipv6(0, &chain));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv6, K::Ipv6Ext]);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Ipv6Ext, 62));
    assert_eq!(d.ip().unwrap().proto, 60);
}

#[test]
fn tcp_malformed() {
    let good = eth(0x0800, &ipv4(6, &tcp(1, 2, 0, 0, 0x02, &[1, 2, 3, 4])));
    // data offset < 5
    let mut b = good.clone();
    b[34 + 12] = 0x40;
    let d = decode(LinkType::ETHERNET, &b);
    assert_eq!(kinds(1, &b), [K::Ethernet, K::Ipv4]);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Tcp, 34));
    assert_eq!(d.transport(), None);
    assert_eq!(protocol_name(&d), "TCP");
    // data offset beyond the data, the IP total length bounding it: malformed
    let mut b = good.clone();
    b[34 + 12] = 0xf0;
    assert_eq!(
        decode(LinkType::ETHERNET, &b).error(),
        err(ErrorKind::Malformed, K::Tcp, 34)
    );
    // header cut by the capture (the IP total length claims more): truncated
    let d = decode(LinkType::ETHERNET, &good[..34 + 10]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Tcp, 34));
    assert!(d.clipped());
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1 > 10.0.0.2: [|tcp] (truncated TCP header at byte 34)"
    );
}

#[test]
fn udp_malformed() {
    let mut b = eth(0x0800, &ipv4(17, &udp(1, 2, &[1, 2])));
    b[34 + 4..34 + 6].copy_from_slice(&4u16.to_be_bytes());
    let d = decode(LinkType::ETHERNET, &b);
    assert_eq!(d.error(), err(ErrorKind::Malformed, K::Udp, 34));
    assert_eq!(protocol_name(&d), "UDP");
}

#[test]
fn gre_variants() {
    let inner_eth = eth(0x0800, &ipv4(1, &icmp(0, 0, 1, 1, &[])));
    // all option bits: C K S
    let frame = eth(
        0x0800,
        &ipv4(
            47,
            &gre(0xb000, 0x6558, &[0xabcd_0000, 0x11, 0x22], &inner_eth),
        ),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv4, K::Gre, K::Ethernet, K::Ipv4, K::Icmp]
    );
    let Layer::Gre(g) = d.layers()[2] else {
        panic!()
    };
    assert_eq!(g.checksum(), Some(0xabcd));
    assert_eq!(g.key(), Some(0x11));
    assert_eq!(g.seq_number(), Some(0x22));
    assert_eq!(g.header_len(), 16);
    assert_eq!(d.ip().unwrap().proto, 1);
    assert_eq!(d.outer_ip().unwrap().proto, 47);
    assert_eq!(d.ip_index(), Some(4));
    assert_eq!(protocol_name(&d), "ICMP");
    assert_eq!(
        d.to_string(),
        format!(
            "IP 10.0.0.1 > 10.0.0.2: GREv0, key=0x11, seq 34, proto 0x6558, length {}: IP 10.0.0.1 > 10.0.0.2: ICMP echo reply, id 1, seq 1, length 8",
            16 + inner_eth.len()
        )
    );
    // every cut inside the GRE options is a truncation at the GRE header
    for cut in 34 + 4..34 + 16 {
        let d = decode(LinkType::ETHERNET, &frame[..cut]);
        assert_eq!(d.error(), err(ErrorKind::Truncated, K::Gre, 34), "{cut}");
    }

    // IPv4 and IPv6 inside
    let frame = eth(
        0x0800,
        &ipv4(47, &gre(0, 0x0800, &[], &ipv4(6, &tcp(1, 2, 0, 0, 2, &[])))),
    );
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv4, K::Gre, K::Ipv4, K::Tcp]
    );
    let frame = eth(
        0x86dd,
        &ipv6(47, &gre(0x2000, 0x86dd, &[5], &ipv6(17, &udp(1, 2, &[])))),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv6, K::Gre, K::Ipv6, K::Udp]
    );
    assert_eq!(d.transport().unwrap().ports(), Some((1, 2)));

    // GRE with a non-IP inner protocol
    let frame = eth(0x0800, &ipv4(47, &gre(0, 0x88cc, &[], &[1, 2])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv4, K::Gre, K::Payload]);
    assert_eq!(d.transport(), Some(Transport::Other(47)));
    assert_eq!(protocol_name(&d), "GRE");

    // routing (RFC 1701) and unknown versions are unsupported
    let frame = eth(0x0800, &ipv4(47, &gre(0x4000, 0x0800, &[0], &[])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), err(ErrorKind::Unsupported, K::Gre, 34));
    assert_eq!(d.transport(), None);
}

#[test]
fn pptp_gre() {
    let inner = ipv4(17, &udp(1, 2, &[]));
    let frame = eth(
        0x0800,
        &ipv4(
            47,
            &gre(
                0x3081,
                0x880b,
                &[0x0020_0042, 1, 0],
                &cat(&[&[0xff, 0x03, 0x00, 0x21], &inner]),
            ),
        ),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv4, K::Gre, K::Ppp, K::Ipv4, K::Udp]
    );
    let Layer::Gre(g) = d.layers()[2] else {
        panic!()
    };
    assert_eq!(
        (g.version(), g.key(), g.seq_number(), g.ack_number()),
        (1, Some(0x0020_0042), Some(1), Some(0))
    );
}

#[test]
fn erspan_types() {
    let inner = eth(0x0800, &ipv4(6, &tcp(1, 2, 0, 0, 2, &[])));
    // type II: GRE with S, ERSPAN version 1, vlan 10, session 5
    let frame = eth(
        0x0800,
        &ipv4(
            47,
            &gre(
                0x1000,
                0x88be,
                &[1],
                &cat(&[&[0x10, 0x0a, 0x00, 0x05, 0, 0, 0, 1], &inner]),
            ),
        ),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(
        kinds(1, &frame),
        [
            K::Ethernet,
            K::Ipv4,
            K::Gre,
            K::Erspan,
            K::Ethernet,
            K::Ipv4,
            K::Tcp
        ]
    );
    let Layer::Erspan(e) = d.layers()[3] else {
        panic!()
    };
    assert_eq!((e.erspan_type(), e.vlan(), e.session_id()), (2, 10, 5));
    assert!(d
        .to_string()
        .contains("ERSPAN type 2, session 5, vlan 10: IP "));
    // type I: no S bit, no header
    let frame = eth(0x0800, &ipv4(47, &gre(0, 0x88be, &[], &inner)));
    assert_eq!(
        kinds(1, &frame),
        [K::Ethernet, K::Ipv4, K::Gre, K::Ethernet, K::Ipv4, K::Tcp]
    );
    // type III, 12 bytes
    let hdr3 = [0x20, 0x00, 0x00, 0x07, 0, 0, 0, 9, 0, 0, 0, 0];
    let frame = eth(
        0x0800,
        &ipv4(47, &gre(0x1000, 0x22eb, &[1], &cat(&[&hdr3, &inner]))),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(d.layers().len(), 7);
}

#[test]
fn vxlan_tunnel() {
    let inner = eth(
        0x0800,
        &V4 {
            src: [192, 168, 0, 1],
            dst: [192, 168, 0, 2],
            ..V4::new(6)
        }
        .build(&tcp(5555, 443, 1, 0, 2, &[])),
    );
    let frame = eth(
        0x0800,
        &ipv4(17, &udp(40000, 4789, &vxlan(0x123456, &inner))),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(
        kinds(1, &frame),
        [
            K::Ethernet,
            K::Ipv4,
            K::Udp,
            K::Vxlan,
            K::Ethernet,
            K::Ipv4,
            K::Tcp
        ]
    );
    let Layer::Vxlan(v) = d.layers()[3] else {
        panic!()
    };
    assert_eq!((v.flags(), v.vni()), (0x08, 0x123456));
    let ip = d.ip().unwrap();
    assert_eq!(ip.src, IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)));
    assert_eq!(d.outer_ip().unwrap().src, A4);
    assert_eq!(d.transport().unwrap().ports(), Some((5555, 443)));
    assert_eq!(protocol_name(&d), "TCP");
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1.40000 > 10.0.0.2.4789: VXLAN, flags [I] (0x08), vni 1193046: IP 192.168.0.1.5555 > 192.168.0.2.443: Flags [S], seq 1, win 65535, length 0"
    );

    // inner frame truncated: the deepest valid layer is VXLAN
    let cut = 14 + 20 + 8 + 8 + 10;
    let d = decode(LinkType::ETHERNET, &frame[..cut]);
    assert_eq!(
        kinds(1, &frame[..cut]),
        [K::Ethernet, K::Ipv4, K::Udp, K::Vxlan]
    );
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Ethernet, 50));
    assert_eq!(d.ip().unwrap().src, A4);
    assert_eq!(d.transport().unwrap().ports(), Some((40000, 4789)));
    // VXLAN header itself cut
    let d = decode(LinkType::ETHERNET, &frame[..14 + 20 + 8 + 5]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Vxlan, 42));
}

#[test]
fn udp_to_the_vxlan_port_without_vxlan() {
    // empty payload, complete datagram: plain UDP
    let frame = eth(0x0800, &ipv4(17, &udp(1, 4789, &[])));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv4, K::Udp]);
    // no I flag: plain UDP with its payload
    let frame = eth(
        0x0800,
        &ipv4(17, &udp(1, 4789, &[0, 1, 2, 3, 4, 5, 6, 7, 8])),
    );
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(d.error(), None);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv4, K::Udp]);
    assert_eq!(
        d.to_string(),
        "IP 10.0.0.1.1 > 10.0.0.2.4789: UDP, length 9"
    );
    // the capture ends right after the UDP header of a longer datagram: truncated VXLAN
    let frame = eth(0x0800, &ipv4(17, &udp(1, 4789, &vxlan(1, &[0; 14]))));
    let d = decode(LinkType::ETHERNET, &frame[..42]);
    assert_eq!(d.error(), err(ErrorKind::Truncated, K::Vxlan, 42));
}

#[test]
fn ip_in_ip() {
    let inner = V4 {
        src: [1, 1, 1, 1],
        ..V4::new(6)
    }
    .build(&tcp(1, 2, 0, 0, 2, &[]));
    let frame = eth(0x0800, &ipv4(4, &inner));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv4, K::Ipv4, K::Tcp]);
    assert_eq!(d.ip().unwrap().src, IpAddr::V4(Ipv4Addr::new(1, 1, 1, 1)));
    assert_eq!(d.outer_ip().unwrap().src, A4);
    let frame = eth(0x0800, &ipv4(41, &ipv6(17, &udp(1, 2, &[]))));
    let d = decode(LinkType::ETHERNET, &frame);
    assert_eq!(kinds(1, &frame), [K::Ethernet, K::Ipv4, K::Ipv6, K::Udp]);
    assert_eq!(d.ip().unwrap().version, 6);
}

#[test]
fn tunnel_depth_limit() {
    // GRE in GRE in ... deeper than the limit
    let mut pkt = ipv4(6, &tcp(1, 2, 0, 0, 2, &[]));
    for _ in 0..MAX_TUNNELS + 2 {
        pkt = ipv4(47, &gre(0, 0x0800, &[], &pkt));
    }
    let d = decode(LinkType::IPV4, &pkt);
    let e = d.error().unwrap();
    assert_eq!((e.kind, e.layer), (ErrorKind::TooDeep, K::Gre));
    let gres = d.layers().iter().filter(|l| l.kind() == K::Gre).count();
    assert_eq!(gres, MAX_TUNNELS);
    assert_eq!(e.offset as usize, (MAX_TUNNELS + 1) * 24 - 4);

    // IP in IP, same limit
    let mut pkt = ipv4(17, &udp(1, 2, &[]));
    for _ in 0..MAX_TUNNELS + 3 {
        pkt = ipv4(4, &pkt);
    }
    let d = decode(LinkType::IPV4, &pkt);
    let e = d.error().unwrap();
    assert_eq!((e.kind, e.layer), (ErrorKind::TooDeep, K::Ipv4));
    assert_eq!(d.layers().len(), MAX_TUNNELS + 1);
}

#[test]
fn summary_of_nothing() {
    let d = decode(LinkType(999), &[1, 2, 3]);
    assert_eq!(d.to_string(), "[|payload] (unsupported payload at byte 0)");
    assert_eq!(protocol_name(&d), "other");
    let d = decode(LinkType::ETHERNET, &[0; 5]);
    assert_eq!(
        d.to_string(),
        "[|ether] (truncated Ethernet header at byte 0)"
    );
}

#[test]
fn every_encapsulation_decodes_cleanly() {
    for (name, link, frame) in all_encapsulations() {
        let d = decode(LinkType(link), &frame);
        assert_eq!(d.error(), None, "{name}");
        let last = d.layers().last().unwrap().kind();
        let expect_last = match name.rsplit('/').next().unwrap() {
            "tcp" => K::Tcp,
            "udp" => K::Udp,
            "icmp" => K::Icmp,
            "icmpv6" => K::Icmpv6,
            "sctp" => K::Sctp,
            "arp" => K::Arp,
            "esp" | "stp" => K::Payload,
            other => panic!("{other}"),
        };
        assert_eq!(last, expect_last, "{name}");
        // the summary names the innermost protocol's addresses or the payload
        assert!(!d.to_string().is_empty(), "{name}");
    }
}
