//! The construct side of the views: headers written with the setters and `emit` are the bytes
//! the hand-written builders of `common` produce, carry checksums a receiver verifies, and decode
//! back to the fields put in.

mod common;

use std::net::{Ipv4Addr, Ipv6Addr};

use common::*;
use weir_decode::checksum::{fold, pseudo_header, sum16};
use weir_decode::{
    decode, ethertype, tcp, EthernetFrame, EthernetRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet,
    Ipv6Repr, LinkType, MacAddr, TcpPacket, Transport, UdpPacket, VlanTag,
};

#[test]
fn ethernet_vlan_ipv4_udp_as_the_builders_write_them() {
    let payload = [0xab; 12];
    let mut f = vec![0u8; 14 + 4 + 20 + 8 + payload.len()];
    EthernetRepr {
        src_addr: MacAddr(MAC_A),
        dst_addr: MacAddr(MAC_B),
        ethertype: ethertype::VLAN,
    }
    .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
    let mut tag = VlanTag::new_unchecked(&mut f[14..]);
    tag.set_fields(0, false, 42);
    tag.set_ethertype(ethertype::IPV4);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[18..]);
    Ipv4Repr {
        src_addr: Ipv4Addr::from(IP_A),
        dst_addr: Ipv4Addr::from(IP_B),
        protocol: 17,
        payload_len: 8 + payload.len(),
        tos: 0,
        ttl: 64,
        ident: 0x1234,
        dont_frag: true,
    }
    .emit(&mut ip);
    let mut u = UdpPacket::new_unchecked(&mut f[38..]);
    u.set_src_port(53);
    u.set_dst_port(5353);
    u.set_len((8 + payload.len()) as u16);
    f[46..].copy_from_slice(&payload);

    // the builders write checksums of 0: compare without them, then check ours verify
    let mut want = eth(
        0x8100,
        &vlan(42, 0x0800, &ipv4(17, &udp(53, 5353, &payload))),
    );
    let mut got = f.clone();
    for b in [&mut want, &mut got] {
        b[28..30].fill(0);
        b[44..46].fill(0);
    }
    assert_eq!(got, want);
    assert_eq!(fold(sum16(0, &f[18..38])), 0, "IPv4 header checksum");

    let pseudo = pseudo_header(IP_A.into(), IP_B.into(), 17);
    UdpPacket::new_unchecked(&mut f[38..]).fill_checksum(pseudo);
    let n = 8 + payload.len();
    assert_eq!(fold(sum16(pseudo + n as u32, &f[38..])), 0, "UDP checksum");

    let d = decode(LinkType::ETHERNET, &f);
    assert_eq!(d.error(), None);
    assert_eq!(d.vlan(), Some(42));
    assert!(matches!(
        d.transport(),
        Some(Transport::Udp {
            src: 53,
            dst: 5353,
            ..
        })
    ));
}

#[test]
fn ipv6_tcp_round_trip() {
    let payload = b"GET / HTTP/1.0\r\n\r\n";
    let (src, dst) = (Ipv6Addr::from(IP6_A), Ipv6Addr::from(IP6_B));
    let mut f = vec![0u8; 40 + 20 + payload.len()];
    Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: 6,
        payload_len: 20 + payload.len(),
        traffic_class: 0xb8,
        flow_label: 0x12345,
        hop_limit: 9,
    }
    .emit(&mut Ipv6Packet::new_unchecked(&mut f[..]));
    let mut t = TcpPacket::new_unchecked(&mut f[40..]);
    t.set_src_port(1234);
    t.set_dst_port(80);
    t.set_seq_number(1000);
    t.set_ack_number(2000);
    t.set_header_len(20);
    t.set_flags(tcp::PSH | tcp::ACK);
    t.set_window(65535);
    t.set_urgent(0);
    f[60..].copy_from_slice(payload);
    let pseudo = pseudo_header(src.into(), dst.into(), 6);
    TcpPacket::new_unchecked(&mut f[40..]).fill_checksum(pseudo);
    let n = 20 + payload.len();
    assert_eq!(fold(sum16(pseudo + n as u32, &f[40..])), 0, "TCP checksum");

    let mut want = ipv6_full(0xb8, 0x12345, 6, &tcp(1234, 80, 1000, 2000, 0x18, payload));
    want[7] = 9;
    let mut got = f.clone();
    got[56..58].fill(0);
    want[56..58].fill(0);
    assert_eq!(got, want);

    let d = decode(LinkType::IPV6, &f);
    assert_eq!(d.error(), None);
    let ip = d.ip().unwrap();
    assert_eq!((ip.tos, ip.flow_label, ip.ttl), (0xb8, 0x12345, 9));
    assert!(matches!(
        d.transport(),
        Some(Transport::Tcp {
            src: 1234,
            dst: 80,
            flags: 0x18,
            seq: 1000,
            ack: 2000,
            ..
        })
    ));
}

#[test]
fn ipv4_fragment_fields() {
    let mut b = [0u8; 20];
    let mut p = Ipv4Packet::new_unchecked(&mut b[..]);
    p.set_version_ihl(5);
    p.set_frag(false, true, 1480);
    p.set_total_len(20);
    p.fill_checksum();
    let p = Ipv4Packet::new_checked(&b[..]).unwrap();
    assert!(p.more_frags() && !p.dont_frag());
    assert_eq!(p.frag_offset(), 1480);
    assert_eq!(fold(sum16(0, &b)), 0);
}
