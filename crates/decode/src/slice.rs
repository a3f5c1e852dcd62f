//! Slicing a frame to its headers (`--slice l2|l3|l4` of the recorder): how many leading bytes
//! hold the headers up to a given layer, so a recorder can keep them and drop the payload while
//! the record keeps the original length.

use crate::{decode, Layer, LinkType};

/// The deepest kind of header to keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SliceLevel {
    /// Link headers: Ethernet, VLAN tags, MPLS, PPP(oE), cooked headers...
    L2,
    /// Also network headers: IPv4, IPv6 and its extension headers, ARP.
    L3,
    /// Also transport headers: TCP (with options), UDP, ICMP, SCTP's common header, and the
    /// headers of tunnels they carry (GRE, VXLAN and the encapsulated headers).
    L4,
}

/// Level of a header kind: 2 link, 3 network, 4 transport, 5 payload.
fn level(layer: &Layer<'_>) -> u8 {
    match layer {
        Layer::Ethernet(_)
        | Layer::Llc(_)
        | Layer::Snap(_)
        | Layer::Vlan { .. }
        | Layer::Mpls(_)
        | Layer::Pppoe(_)
        | Layer::Ppp(_)
        | Layer::Chdlc(_)
        | Layer::Loopback { .. }
        | Layer::LinuxSll(_)
        | Layer::LinuxSll2(_) => 2,
        Layer::Arp(_) | Layer::Ipv4(_) | Layer::Ipv6(_) | Layer::Ipv6Ext { .. } => 3,
        Layer::Tcp(_)
        | Layer::Udp(_)
        | Layer::Icmp(_)
        | Layer::Icmpv6(_)
        | Layer::Sctp(_)
        | Layer::Gre(_)
        | Layer::Erspan(_)
        | Layer::Vxlan(_) => 4,
        Layer::Payload(_) => 5,
    }
}

/// Where a layer starts in the frame (the BSD loopback header, which holds no slice, is always
/// first).
fn start(frame: &[u8], layer: &Layer<'_>) -> usize {
    let bytes: &[u8] = match layer {
        Layer::Ethernet(v) => v.as_bytes(),
        Layer::Llc(v) => v.as_bytes(),
        Layer::Snap(v) => v.as_bytes(),
        Layer::Vlan { tag, .. } => tag.as_bytes(),
        Layer::Mpls(v) => v.as_bytes(),
        Layer::Pppoe(v) => v.as_bytes(),
        Layer::Ppp(v) => v.as_bytes(),
        Layer::Chdlc(v) => v.as_bytes(),
        Layer::Loopback { .. } => return 0,
        Layer::LinuxSll(v) => v.as_bytes(),
        Layer::LinuxSll2(v) => v.as_bytes(),
        Layer::Arp(v) => v.as_bytes(),
        Layer::Ipv4(v) => v.as_bytes(),
        Layer::Ipv6(v) => v.as_bytes(),
        Layer::Ipv6Ext { header, .. } => header.as_bytes(),
        Layer::Tcp(v) => v.as_bytes(),
        Layer::Udp(v) => v.as_bytes(),
        Layer::Icmp(v) | Layer::Icmpv6(v) => v.as_bytes(),
        Layer::Sctp(v) => v.as_bytes(),
        Layer::Gre(v) => v.as_bytes(),
        Layer::Erspan(v) => v.as_bytes(),
        Layer::Vxlan(v) => v.as_bytes(),
        Layer::Payload(p) => p,
    };
    // Every view borrows the frame, so the difference of the pointers is the offset.
    (bytes.as_ptr() as usize)
        .saturating_sub(frame.as_ptr() as usize)
        .min(frame.len())
}

/// How many leading bytes of `frame` hold its headers up to `level`: the start of the first
/// deeper header (or of the payload). When decoding stops inside the headers kept (a truncated
/// or unknown frame), the whole frame is kept: slicing never drops a header it did not see.
pub fn headers_len(link: LinkType, frame: &[u8], keep: SliceLevel) -> usize {
    let max = match keep {
        SliceLevel::L2 => 2,
        SliceLevel::L3 => 3,
        SliceLevel::L4 => 4,
    };
    let d = decode(link, frame);
    let layers = d.layers();
    for layer in layers {
        if level(layer) > max {
            return start(frame, layer);
        }
    }
    match layers.last() {
        // A transport header ends the list when its payload follows (the payloads of TCP, UDP,
        // ICMP and SCTP are not layers): cut after the header.
        Some(last) if d.error().is_none() => {
            let hdr = match last {
                Layer::Tcp(t) => t.header_len(),
                Layer::Udp(_) | Layer::Icmp(_) | Layer::Icmpv6(_) => 8,
                Layer::Sctp(_) => 12,
                _ => return frame.len(),
            };
            (start(frame, last) + hdr).min(frame.len())
        }
        _ => frame.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth_ipv4_tcp(payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]); // one VLAN tag
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + 24 + payload.len()) as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 0, 0, 2]);
        f.extend_from_slice(&ip);
        let mut tcp = [0u8; 24]; // 20 bytes + one 4-byte option
        tcp[0..2].copy_from_slice(&1234u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[12] = 6 << 4;
        tcp[13] = 0x18;
        tcp[20] = 1; // NOPs
        tcp[21] = 1;
        tcp[22] = 1;
        tcp[23] = 1;
        f.extend_from_slice(&tcp);
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn cuts_after_each_level_of_a_tagged_tcp_frame() {
        let f = eth_ipv4_tcp(b"GET / HTTP/1.1\r\n\r\n");
        // 14 Ethernet + 4 VLAN | 20 IPv4 | 24 TCP | payload: counted by hand from the builder.
        assert_eq!(headers_len(LinkType::ETHERNET, &f, SliceLevel::L2), 18);
        assert_eq!(headers_len(LinkType::ETHERNET, &f, SliceLevel::L3), 38);
        assert_eq!(headers_len(LinkType::ETHERNET, &f, SliceLevel::L4), 62);
        assert_eq!(f.len(), 62 + 18);
    }

    #[test]
    fn keeps_frames_it_cannot_read_whole() {
        let f = eth_ipv4_tcp(b"xyz");
        for cut in 0..f.len() {
            let part = &f[..cut];
            for level in [SliceLevel::L2, SliceLevel::L3, SliceLevel::L4] {
                let n = headers_len(LinkType::ETHERNET, part, level);
                assert!(n <= part.len());
            }
        }
        // A truncated TCP header: nothing past the IP header is understood, all is kept.
        assert_eq!(
            headers_len(LinkType::ETHERNET, &f[..50], SliceLevel::L4),
            50
        );
        // Unknown ethertype: the link header only, at every level.
        let mut g = vec![0u8; 12];
        g.extend_from_slice(&[0x88, 0xb5]);
        g.extend_from_slice(&[0xaa; 30]);
        assert_eq!(headers_len(LinkType::ETHERNET, &g, SliceLevel::L4), 14);
    }
}
