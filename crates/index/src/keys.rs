//! The keys a packet is indexed under: every IPv4/IPv6 address in its IP headers (tunnelled ones
//! too) and ARP's protocol addresses, every TCP/UDP/SCTP port, and the IP protocol numbers.

use weir_decode::quick::{self, Upper};
use weir_decode::{decode, Layer, LinkType};

/// One index key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// An IP protocol number (IPv4 protocol, IPv6 next header, the final upper layer).
    Proto(u8),
    /// A TCP, UDP or SCTP port (source or destination).
    Port(u16),
    /// An IPv4 address (source, destination, ARP sender/target).
    V4(u32),
    /// An IPv6 address.
    V6(u128),
}

impl Key {
    pub(crate) fn tag(self) -> u8 {
        match self {
            Key::Proto(_) => 1,
            Key::Port(_) => 2,
            Key::V4(_) => 3,
            Key::V6(_) => 4,
        }
    }
}

/// Appends the keys of one frame to `out`; returns `false` when decoding stopped on an error
/// before the outermost IP header's payload (the packet may match filters on bytes the decoder
/// did not read, so its chunk must be a candidate for every query; see [`keys_of_decoded`]).
///
/// The common shapes are read by the fast header parser ([`weir_decode::quick`]); everything it
/// refuses, and IPv6 packets with extension headers (each one's next header is a key), goes to
/// the full decoder ([`keys_of_decoded`]). Why: the full decoder made indexing cost 0.19 s of
/// CPU per GB of the corpus trace (38 % of a core at the disk's 2 GB/s,
/// bench/extract_vs_tcpdump.py); the test `fast_path_agrees_with_the_decoder` checks both give
/// the same keys on every corpus packet.
pub fn keys_of(link: LinkType, frame: &[u8], out: &mut Vec<Key>) -> bool {
    match quick::parse(link, frame) {
        Some(h) if h.ipv6_extensions == 0 => {
            if h.v6 {
                out.extend([Key::V6(h.src), Key::V6(h.dst), Key::Proto(h.proto)]);
            } else {
                out.extend([
                    Key::V4(h.src as u32),
                    Key::V4(h.dst as u32),
                    Key::Proto(h.proto),
                ]);
            }
            if matches!(h.upper, Upper::Tcp | Upper::Udp | Upper::Sctp) {
                out.extend([Key::Port(h.src_port), Key::Port(h.dst_port)]);
            }
            true
        }
        _ => keys_of_decoded(link, frame, out),
    }
}

/// The keys as the full decoder finds them (every layer, tunnels included). A packet the
/// decoder gave up on still has its keys indexed up to where it stopped, and is complete (not
/// a wildcard: `true`) when the layer after its outermost IP header (and that header's IPv6
/// extension headers) was read: its addresses, protocol and ports, all a filter the index
/// answers can ask of it (tcpdump's `host`, `net`, `port`, protocol primitives read the
/// outermost headers), are then known; what is damaged lies beyond, in a tunnel's inner packet
/// or the payload. Before (session 12) any decoding error made the packet a wildcard.
pub fn keys_of_decoded(link: LinkType, frame: &[u8], out: &mut Vec<Key>) -> bool {
    let d = decode(link, frame);
    let layers = d.layers();
    let complete = d.error().is_none()
        || layers
            .iter()
            .position(|l| matches!(l, Layer::Ipv4(_) | Layer::Ipv6(_)))
            .is_some_and(|ip| {
                layers[ip + 1..]
                    .iter()
                    .find(|l| !matches!(l, Layer::Ipv6Ext { .. }))
                    .is_some_and(|l| !matches!(l, Layer::Ipv4(_) | Layer::Ipv6(_)))
            });
    for layer in layers {
        match layer {
            Layer::Ipv4(v) => {
                out.push(Key::V4(u32::from(v.src_addr())));
                out.push(Key::V4(u32::from(v.dst_addr())));
                out.push(Key::Proto(v.protocol()));
            }
            Layer::Ipv6(v) => {
                out.push(Key::V6(u128::from(v.src_addr())));
                out.push(Key::V6(u128::from(v.dst_addr())));
                out.push(Key::Proto(v.next_header()));
            }
            Layer::Ipv6Ext { header, .. } => out.push(Key::Proto(header.next_header())),
            Layer::Arp(a) => {
                for addr in [a.sender_protocol_addr(), a.target_protocol_addr()] {
                    if let Ok(b) = <[u8; 4]>::try_from(addr) {
                        out.push(Key::V4(u32::from_be_bytes(b)));
                    }
                }
            }
            Layer::Tcp(t) => {
                out.push(Key::Port(t.src_port()));
                out.push(Key::Port(t.dst_port()));
            }
            Layer::Udp(u) => {
                out.push(Key::Port(u.src_port()));
                out.push(Key::Port(u.dst_port()));
            }
            Layer::Sctp(s) => {
                out.push(Key::Port(s.src_port()));
                out.push(Key::Port(s.dst_port()));
            }
            _ => {}
        }
    }
    complete
}

#[cfg(test)]
mod test {
    use super::*;

    /// Ethernet with `tags` 802.1Q tags, IPv4, UDP 1000 -> 53.
    fn tagged(tags: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        for i in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0, i as u8 + 1]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x03, 0xe8, 0, 53, 0, 8, 0, 0]);
        f
    }

    /// Any depth of VLAN tags gives the decoder's keys: the fast parser follows up to
    /// `quick::MAX_VLAN_TAGS`, the decoder the rest (before, the fast path here took one tag
    /// and the flow meter's two; both fell back to the decoder beyond, so no key changed).
    #[test]
    fn vlan_stacks_of_any_depth_give_the_decoders_keys() {
        for tags in 0..7 {
            let f = tagged(tags);
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            assert!(keys_of(LinkType::ETHERNET, &f, &mut fast));
            assert!(keys_of_decoded(LinkType::ETHERNET, &f, &mut slow));
            assert_eq!(fast, slow, "{tags} tags");
            assert_eq!(
                fast,
                [
                    Key::V4(0x0a00_0001),
                    Key::V4(0x0a00_0002),
                    Key::Proto(17),
                    Key::Port(1000),
                    Key::Port(53)
                ]
            );
            let read = quick::parse(LinkType::ETHERNET, &f).is_some();
            assert_eq!(
                read,
                tags <= usize::from(quick::MAX_VLAN_TAGS),
                "{tags} tags"
            );
        }
    }
}
