//! Packet builders for the tests: every byte written by hand from the field values given, so the
//! tests can compare what the decoder reads with what they put in.
#![allow(dead_code)]

pub(crate) const MAC_A: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];
pub(crate) const MAC_B: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x02];
pub(crate) const IP_A: [u8; 4] = [10, 0, 0, 1];
pub(crate) const IP_B: [u8; 4] = [10, 0, 0, 2];
pub(crate) const IP6_A: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub(crate) const IP6_B: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

pub(crate) fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// Ethernet II header + payload.
pub(crate) fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[&MAC_B, &MAC_A, &ethertype.to_be_bytes(), payload])
}

/// The 4 bytes after a TPID (PCP 0, DEI 0) + payload.
pub(crate) fn vlan(vid: u16, ethertype: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[&vid.to_be_bytes(), &ethertype.to_be_bytes(), payload])
}

/// One MPLS label stack entry.
pub(crate) fn mpls(label: u32, tc: u8, bottom: bool, ttl: u8) -> [u8; 4] {
    ((label << 12) | (u32::from(tc) << 9) | (u32::from(bottom) << 8) | u32::from(ttl)).to_be_bytes()
}

/// PPPoE header (version 1, type 1) with the length of `payload` + payload.
pub(crate) fn pppoe(code: u8, session: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[
        &[0x11, code],
        &session.to_be_bytes(),
        &(payload.len() as u16).to_be_bytes(),
        payload,
    ])
}

#[derive(Clone, Copy)]
pub(crate) struct V4 {
    pub src: [u8; 4],
    pub dst: [u8; 4],
    pub proto: u8,
    pub tos: u8,
    pub id: u16,
    pub df: bool,
    pub mf: bool,
    /// In 8-byte units.
    pub frag_units: u16,
    pub ttl: u8,
}

impl V4 {
    pub(crate) fn new(proto: u8) -> V4 {
        V4 {
            src: IP_A,
            dst: IP_B,
            proto,
            tos: 0,
            id: 0x1234,
            df: true,
            mf: false,
            frag_units: 0,
            ttl: 64,
        }
    }

    /// IPv4 header (IHL 5 + `options.len() / 4`) with the right total length + payload.
    pub(crate) fn build_opts(&self, options: &[u8], payload: &[u8]) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0);
        let ihl = 5 + options.len() / 4;
        let total = (ihl * 4 + payload.len()) as u16;
        let flags = (u16::from(self.df) << 14) | (u16::from(self.mf) << 13) | self.frag_units;
        cat(&[
            &[0x40 | ihl as u8, self.tos],
            &total.to_be_bytes(),
            &self.id.to_be_bytes(),
            &flags.to_be_bytes(),
            &[self.ttl, self.proto, 0, 0],
            &self.src,
            &self.dst,
            options,
            payload,
        ])
    }

    pub(crate) fn build(&self, payload: &[u8]) -> Vec<u8> {
        self.build_opts(&[], payload)
    }
}

pub(crate) fn ipv4(proto: u8, payload: &[u8]) -> Vec<u8> {
    V4::new(proto).build(payload)
}

/// IPv6 header (traffic class `tc`, flow label `flow`, hop limit 64) + payload.
pub(crate) fn ipv6_full(tc: u8, flow: u32, next: u8, payload: &[u8]) -> Vec<u8> {
    let word = (6u32 << 28) | (u32::from(tc) << 20) | flow;
    cat(&[
        &word.to_be_bytes(),
        &(payload.len() as u16).to_be_bytes(),
        &[next, 64],
        &IP6_A,
        &IP6_B,
        payload,
    ])
}

pub(crate) fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
    ipv6_full(0, 0, next, payload)
}

/// A generic IPv6 extension header of `units` 8-byte units beyond the first, + payload.
pub(crate) fn ext(next: u8, units: u8, payload: &[u8]) -> Vec<u8> {
    let mut h = vec![0u8; (units as usize + 1) * 8];
    h[0] = next;
    h[1] = units;
    h.extend_from_slice(payload);
    h
}

/// IPv6 fragment header + payload.
pub(crate) fn frag6(next: u8, offset_units: u16, more: bool, id: u32, payload: &[u8]) -> Vec<u8> {
    let om = (offset_units << 3) | u16::from(more);
    cat(&[&[next, 0], &om.to_be_bytes(), &id.to_be_bytes(), payload])
}

/// AH with `words` 4-byte words of ICV beyond the 12 fixed bytes (length field = 1 + words).
pub(crate) fn ah(next: u8, words: u8, payload: &[u8]) -> Vec<u8> {
    let len = 1 + words; // (len + 2) * 4 = 12 + 4 * words
    let mut h = vec![0u8; (len as usize + 2) * 4];
    h[0] = next;
    h[1] = len;
    h[4..8].copy_from_slice(&0x1000u32.to_be_bytes()); // SPI
    h.extend_from_slice(payload);
    h
}

/// TCP header (data offset 5 + options/4, window 65535) + payload.
pub(crate) fn tcp_opts(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert_eq!(options.len() % 4, 0);
    let off = (5 + options.len() / 4) as u8;
    cat(&[
        &sport.to_be_bytes(),
        &dport.to_be_bytes(),
        &seq.to_be_bytes(),
        &ack.to_be_bytes(),
        &[off << 4, flags],
        &65535u16.to_be_bytes(),
        &[0, 0, 0, 0],
        options,
        payload,
    ])
}

pub(crate) fn tcp(
    sport: u16,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    payload: &[u8],
) -> Vec<u8> {
    tcp_opts(sport, dport, seq, ack, flags, &[], payload)
}

/// UDP header with the right length + payload.
pub(crate) fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[
        &sport.to_be_bytes(),
        &dport.to_be_bytes(),
        &((payload.len() + 8) as u16).to_be_bytes(),
        &[0, 0],
        payload,
    ])
}

/// ICMP/ICMPv6 message: type, code, zero checksum, id, seq, data.
pub(crate) fn icmp(t: u8, code: u8, id: u16, seq: u16, data: &[u8]) -> Vec<u8> {
    cat(&[
        &[t, code, 0, 0],
        &id.to_be_bytes(),
        &seq.to_be_bytes(),
        data,
    ])
}

/// SCTP common header + chunks.
pub(crate) fn sctp(sport: u16, dport: u16, vtag: u32, chunks: &[u8]) -> Vec<u8> {
    cat(&[
        &sport.to_be_bytes(),
        &dport.to_be_bytes(),
        &vtag.to_be_bytes(),
        &[0, 0, 0, 0],
        chunks,
    ])
}

/// GRE header: flags/version word, protocol, optional words in order, payload.
pub(crate) fn gre(flags_ver: u16, proto: u16, words: &[u32], payload: &[u8]) -> Vec<u8> {
    let mut v = cat(&[&flags_ver.to_be_bytes(), &proto.to_be_bytes()]);
    for w in words {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(payload);
    v
}

/// VXLAN header with the I flag + payload.
pub(crate) fn vxlan(vni: u32, payload: &[u8]) -> Vec<u8> {
    cat(&[&[0x08, 0, 0, 0], &(vni << 8).to_be_bytes(), payload])
}

/// ARP request, Ethernet/IPv4: who has `target` tell `sender`.
pub(crate) fn arp_request(sender: [u8; 4], target: [u8; 4]) -> Vec<u8> {
    cat(&[
        &[0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01],
        &MAC_A,
        &sender,
        &[0; 6],
        &target,
    ])
}

/// Ethernet / IPv4 / TCP SYN 1234 -> 80, seq 1, no payload.
pub(crate) fn eth_ipv4_tcp_syn() -> Vec<u8> {
    eth(0x0800, &ipv4(6, &tcp(1234, 80, 1, 0, 0x02, &[])))
}

/// A set of valid frames covering every encapsulation, with their link types and names.
pub(crate) fn all_encapsulations() -> Vec<(&'static str, u32, Vec<u8>)> {
    let inner_tcp = ipv4(
        6,
        &tcp(1234, 80, 1000, 2000, 0x18, b"GET / HTTP/1.0\r\n\r\n"),
    );
    let inner_udp6 = ipv6(17, &udp(53, 5353, &[0xab; 12]));
    let inner_eth = eth(0x0800, &inner_tcp);
    vec![
        ("eth/ipv4/tcp", 1, eth(0x0800, &inner_tcp)),
        ("eth/ipv6/udp", 1, eth(0x86dd, &inner_udp6)),
        (
            "eth/ipv4/icmp",
            1,
            eth(0x0800, &ipv4(1, &icmp(8, 0, 1, 2, &[0; 8]))),
        ),
        (
            "eth/ipv6/icmpv6",
            1,
            eth(0x86dd, &ipv6(58, &icmp(128, 0, 1, 2, &[0; 8]))),
        ),
        (
            "eth/ipv4/sctp",
            1,
            eth(0x0800, &ipv4(132, &sctp(2905, 2906, 7, &[1, 0, 0, 4]))),
        ),
        ("eth/arp", 1, eth(0x0806, &arp_request(IP_A, IP_B))),
        (
            "eth/qinq/ipv4/tcp",
            1,
            eth(0x88a8, &vlan(100, 0x8100, &vlan(10, 0x0800, &inner_tcp))),
        ),
        (
            "eth/9100/ipv6/udp",
            1,
            eth(0x9100, &vlan(7, 0x86dd, &inner_udp6)),
        ),
        (
            "eth/mpls/mpls/ipv4/tcp",
            1,
            eth(
                0x8847,
                &cat(&[
                    &mpls(100, 0, false, 64),
                    &mpls(200, 1, true, 63),
                    &inner_tcp,
                ]),
            ),
        ),
        (
            "eth/mpls/ipv6/udp",
            1,
            eth(0x8847, &cat(&[&mpls(2, 0, true, 64), &inner_udp6])),
        ),
        (
            "eth/mpls/cw/eth/ipv4/tcp",
            1,
            eth(
                0x8847,
                &cat(&[&mpls(300, 0, true, 64), &[0, 0, 0, 0], &inner_eth]),
            ),
        ),
        (
            "eth/pppoe/ipv4/tcp",
            1,
            eth(0x8864, &pppoe(0, 0x11, &cat(&[&[0x00, 0x21], &inner_tcp]))),
        ),
        (
            "eth/pppoe/ipv6/udp",
            1,
            eth(0x8864, &pppoe(0, 0x11, &cat(&[&[0x00, 0x57], &inner_udp6]))),
        ),
        ("eth/llc/snap/ipv4/tcp", 1, {
            let body = cat(&[&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00], &inner_tcp]);
            cat(&[&MAC_B, &MAC_A, &(body.len() as u16).to_be_bytes(), &body])
        }),
        ("eth/llc/stp", 1, {
            let body = [0x42, 0x42, 0x03, 0, 0, 0, 0, 0];
            cat(&[&MAC_B, &MAC_A, &(body.len() as u16).to_be_bytes(), &body])
        }),
        (
            "eth/ipv6/hbh/rt/dst/frag/tcp",
            1,
            eth(
                0x86dd,
                &ipv6(
                    0,
                    &ext(
                        43,
                        0,
                        &ext(
                            60,
                            1,
                            &ext(
                                44,
                                0,
                                &frag6(6, 0, true, 9, &tcp(1, 2, 3, 4, 0x10, &[0; 8])),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        (
            "eth/ipv6/ah/tcp",
            1,
            eth(0x86dd, &ipv6(51, &ah(6, 3, &tcp(1, 2, 3, 4, 0x10, &[])))),
        ),
        (
            "eth/ipv6/esp",
            1,
            eth(0x86dd, &ipv6(50, &[0, 0, 0, 1, 0, 0, 0, 2, 9, 9])),
        ),
        (
            "eth/ipv4/gre-cks/eth/ipv4/tcp",
            1,
            eth(
                0x0800,
                &ipv4(47, &gre(0xb000, 0x6558, &[0xabcd_0000, 5, 6], &inner_eth)),
            ),
        ),
        (
            "eth/ipv4/gre/ipv6/udp",
            1,
            eth(0x0800, &ipv4(47, &gre(0x0000, 0x86dd, &[], &inner_udp6))),
        ),
        (
            "eth/ipv4/gre-v1/ppp/ipv4/tcp",
            1,
            eth(
                0x0800,
                &ipv4(
                    47,
                    &gre(
                        0x3081,
                        0x880b,
                        &[0x0040_0042, 1, 0],
                        &cat(&[&[0xff, 0x03, 0x00, 0x21], &inner_tcp]),
                    ),
                ),
            ),
        ),
        (
            "eth/ipv4/gre/erspan2/eth/ipv4/tcp",
            1,
            eth(
                0x0800,
                &ipv4(
                    47,
                    &gre(
                        0x1000,
                        0x88be,
                        &[1],
                        &cat(&[&[0x10, 0x0a, 0x00, 0x05, 0, 0, 0, 1], &inner_eth]),
                    ),
                ),
            ),
        ),
        (
            "eth/ipv4/udp/vxlan/eth/ipv4/tcp",
            1,
            eth(0x0800, &ipv4(17, &udp(40000, 4789, &vxlan(42, &inner_eth)))),
        ),
        (
            "eth/ipv4/ipip/ipv4/tcp",
            1,
            eth(0x0800, &ipv4(4, &inner_tcp)),
        ),
        (
            "eth/ipv4/6in4/ipv6/udp",
            1,
            eth(0x0800, &ipv4(41, &inner_udp6)),
        ),
        (
            "null-le/ipv4/tcp",
            0,
            cat(&[&2u32.to_le_bytes(), &inner_tcp]),
        ),
        (
            "null-be/ipv6/udp",
            0,
            cat(&[&30u32.to_be_bytes(), &inner_udp6]),
        ),
        (
            "loop/ipv6/udp",
            108,
            cat(&[&24u32.to_be_bytes(), &inner_udp6]),
        ),
        ("raw12/ipv4/tcp", 12, inner_tcp.clone()),
        ("raw14/ipv6/udp", 14, inner_udp6.clone()),
        ("raw101/ipv4/tcp", 101, inner_tcp.clone()),
        ("ipv4/tcp", 228, inner_tcp.clone()),
        ("ipv6/udp", 229, inner_udp6.clone()),
        ("sll/ipv4/tcp", 113, {
            cat(&[
                &[0, 0, 0, 1, 0, 6],
                &MAC_A,
                &[0, 0],
                &0x0800u16.to_be_bytes(),
                &inner_tcp,
            ])
        }),
        ("sll2/ipv6/udp", 276, {
            cat(&[
                &0x86ddu16.to_be_bytes(),
                &[0, 0, 0, 0, 0, 3, 0, 1, 0, 6],
                &MAC_A,
                &[0, 0],
                &inner_udp6,
            ])
        }),
        (
            "ppp/ac/ipv4/tcp",
            9,
            cat(&[&[0xff, 0x03, 0x00, 0x21], &inner_tcp]),
        ),
        ("ppp/ipv6/udp", 9, cat(&[&[0x00, 0x57], &inner_udp6])),
        (
            "ppp_hdlc/ipv4/tcp",
            50,
            cat(&[&[0xff, 0x03, 0x00, 0x21], &inner_tcp]),
        ),
        (
            "ppp_ether/ipv4/tcp",
            51,
            pppoe(0, 0x22, &cat(&[&[0x00, 0x21], &inner_tcp])),
        ),
    ]
}

/// Checks `weir_decode::quick` against the full decoder on one frame: when quick accepts it,
/// the decoder must decode it without error, with the same IP header, VLAN, stack depths and
/// transport fields. Returns whether quick accepted the frame; panics on any disagreement.
pub(crate) fn quick_agrees(link: weir_decode::LinkType, frame: &[u8]) -> bool {
    use weir_decode::quick::{self, Upper};
    use weir_decode::{decode, Layer, Transport};
    let Some(h) = quick::parse(link, frame) else {
        return false;
    };
    let d = decode(link, frame);
    let ctx = || {
        format!(
            "link {} frame {frame:02x?}\nquick {h:?}\ndecoder {d:?}",
            link.0
        )
    };
    assert_eq!(d.error(), None, "{}", ctx());
    let ip = d.ip().unwrap_or_else(|| panic!("no IP: {}", ctx()));
    assert_eq!(d.ip_index(), d.outer_ip().and(d.ip_index()), "{}", ctx());
    let ips = d
        .layers()
        .iter()
        .filter(|l| matches!(l, Layer::Ipv4(_) | Layer::Ipv6(_)))
        .count();
    assert_eq!(ips, 1, "a tunnel: {}", ctx());
    let count = |f: fn(&Layer<'_>) -> bool| d.layers().iter().filter(|l| f(l)).count() as u8;
    assert_eq!(
        (h.vlan_tags, h.mpls_labels, h.ipv6_extensions),
        (
            count(|l| matches!(l, Layer::Vlan { .. })),
            count(|l| matches!(l, Layer::Mpls(_))),
            count(|l| matches!(l, Layer::Ipv6Ext { .. })),
        ),
        "{}",
        ctx()
    );
    assert_eq!(h.vlan(), d.vlan(), "{}", ctx());
    assert_eq!(
        (
            h.version(),
            h.src_addr(),
            h.dst_addr(),
            h.proto,
            h.ttl,
            h.tos,
            h.ip_len,
            h.fragment
        ),
        (
            ip.version,
            ip.src,
            ip.dst,
            ip.proto,
            ip.ttl,
            ip.tos,
            ip.len,
            ip.fragment
        ),
        "{}",
        ctx()
    );
    let t = d.transport();
    let ok = match (h.upper, t) {
        (
            Upper::Tcp,
            Some(Transport::Tcp {
                src, dst, flags, ..
            }),
        ) => (src, dst, flags) == (h.src_port, h.dst_port, h.tcp_flags),
        (Upper::Udp, Some(Transport::Udp { src, dst, .. }))
        | (Upper::Sctp, Some(Transport::Sctp { src, dst, .. })) => {
            (src, dst, h.tcp_flags) == (h.src_port, h.dst_port, 0)
        }
        (Upper::Icmp, Some(Transport::Icmp { icmp_type, code }))
        | (Upper::Icmpv6, Some(Transport::Icmpv6 { icmp_type, code })) => {
            (icmp_type, code, h.src_port, h.dst_port) == (h.icmp_type, h.icmp_code, 0, 0)
        }
        (Upper::Other, Some(Transport::Other(p))) => p == h.proto && h.src_port == 0,
        (Upper::LaterFragment, None) => ip.is_later_fragment() && h.is_later_fragment(),
        _ => false,
    };
    assert!(ok, "transport {t:?}: {}", ctx());
    true
}

/// Linux cooked capture v1 header (hardware type 1, 6-byte address) + payload.
pub(crate) fn sll(protocol: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[
        &[0, 0, 0, 1, 0, 6],
        &MAC_A,
        &[0, 0],
        &protocol.to_be_bytes(),
        payload,
    ])
}

/// Linux cooked capture v2 header (hardware type 1, interface 2) + payload.
pub(crate) fn sll2(protocol: u16, payload: &[u8]) -> Vec<u8> {
    cat(&[
        &protocol.to_be_bytes(),
        &[0, 0, 0, 0, 0, 2, 0, 1, 0, 6],
        &MAC_A,
        &[0, 0],
        payload,
    ])
}
