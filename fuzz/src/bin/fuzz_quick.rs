//! AFL++ harness, differential: the first byte picks a link type, the rest is a frame. The fast
//! header parser (`weir_decode::quick`) must not panic, and whenever it accepts a frame the full
//! decoder must decode it without error to the same IP header, VLAN, transport fields and stack
//! depths (the same check as crates/decode/tests/common `quick_agrees`).

use weir_decode::quick::{self, Upper};
use weir_decode::{decode, Layer, Transport};

const LINKS: [u32; 11] = [0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147];

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let Some((&l, frame)) = data.split_first() else {
            return;
        };
        let link = weir_packet::LinkType(LINKS[l as usize % LINKS.len()]);
        let Some(h) = quick::parse(link, frame) else {
            return;
        };
        let d = decode(link, frame);
        assert_eq!(d.error(), None, "{h:?} {d:?}");
        let ip = d.ip().expect("an IP header");
        let count = |f: fn(&Layer<'_>) -> bool| d.layers().iter().filter(|l| f(l)).count() as u8;
        assert_eq!(count(|l| matches!(l, Layer::Ipv4(_) | Layer::Ipv6(_))), 1);
        assert_eq!(h.vlan_tags, count(|l| matches!(l, Layer::Vlan { .. })));
        assert_eq!(h.mpls_labels, count(|l| matches!(l, Layer::Mpls(_))));
        assert_eq!(h.ipv6_extensions, count(|l| matches!(l, Layer::Ipv6Ext { .. })));
        assert_eq!(h.vlan(), d.vlan());
        assert_eq!(
            (h.version(), h.src_addr(), h.dst_addr(), h.proto, h.ttl, h.tos, h.ip_len),
            (ip.version, ip.src, ip.dst, ip.proto, ip.ttl, ip.tos, ip.len)
        );
        assert_eq!(h.fragment, ip.fragment);
        let ok = match (h.upper, d.transport()) {
            (Upper::Tcp, Some(Transport::Tcp { src, dst, flags, .. })) => {
                (src, dst, flags) == (h.src_port, h.dst_port, h.tcp_flags)
            }
            (Upper::Udp, Some(Transport::Udp { src, dst, .. }))
            | (Upper::Sctp, Some(Transport::Sctp { src, dst, .. })) => {
                (src, dst) == (h.src_port, h.dst_port)
            }
            (Upper::Icmp, Some(Transport::Icmp { icmp_type, code }))
            | (Upper::Icmpv6, Some(Transport::Icmpv6 { icmp_type, code })) => {
                (icmp_type, code) == (h.icmp_type, h.icmp_code)
            }
            (Upper::Other, Some(Transport::Other(p))) => p == h.proto,
            (Upper::LaterFragment, None) => ip.is_later_fragment(),
            _ => false,
        };
        assert!(ok, "{h:?} {d:?}");
    });
}
