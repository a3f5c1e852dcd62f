//! The keys a packet is indexed under: every IPv4/IPv6 address in its IP headers (tunnelled ones
//! too) and ARP's protocol addresses, every TCP/UDP/SCTP port, and the IP protocol numbers.

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
/// (the packet may match filters on bytes the decoder did not read, so its chunk must be a
/// candidate for every query).
pub fn keys_of(link: LinkType, frame: &[u8], out: &mut Vec<Key>) -> bool {
    if link == LinkType::ETHERNET {
        let mark = out.len();
        if let Some(ok) = fast_ethernet(frame, out) {
            return ok;
        }
        out.truncate(mark);
    }
    keys_of_decoded(link, frame, out)
}

/// The hand-written fast path for the common case (Ethernet, at most one VLAN tag, an
/// unfragmented IPv4 header without options or a bare IPv6 header, then TCP, plain UDP, ICMP or
/// a protocol the decoder does not look into), reading the few
/// fields it needs in place. Anything else, or anything unusual, returns `None` and goes to the
/// full decoder. Why: the full decoder made indexing cost 0.19 s of CPU per GB of the corpus
/// trace (38 % of a core at the disk's 2 GB/s, bench/extract_vs_tcpdump.py); the test
/// `fast_path_agrees_with_the_decoder` checks both give the same keys on every corpus packet.
fn fast_ethernet(f: &[u8], out: &mut Vec<Key>) -> Option<bool> {
    let be16 = |b: &[u8], i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    if f.len() < 14 {
        return None;
    }
    let (mut et, mut off) = (be16(f, 12), 14);
    if et == 0x8100 {
        if f.len() < 18 {
            return None;
        }
        (et, off) = (be16(f, 16), 18);
    }
    let ip = &f[off..];
    let (proto, l4) = match et {
        0x0800 => {
            if ip.len() < 20 || ip[0] >> 4 != 4 {
                return None;
            }
            let ihl = usize::from(ip[0] & 15) * 4;
            let total = usize::from(be16(ip, 2));
            // Fragments, options-bearing oddities and short totals go the long way.
            if ihl != 20 || total < ihl || be16(ip, 6) & 0x3fff != 0 {
                return None;
            }
            let src = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]);
            let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
            out.extend([Key::V4(src), Key::V4(dst), Key::Proto(ip[9])]);
            (ip[9], &ip[ihl..total.min(ip.len())])
        }
        0x86dd => {
            if ip.len() < 40 || ip[0] >> 4 != 6 {
                return None;
            }
            let plen = usize::from(be16(ip, 4));
            let src = u128::from_be_bytes(ip[8..24].try_into().expect("16"));
            let dst = u128::from_be_bytes(ip[24..40].try_into().expect("16"));
            out.extend([Key::V6(src), Key::V6(dst), Key::Proto(ip[6])]);
            (ip[6], &ip[40..(40 + plen).min(ip.len())])
        }
        _ => return None,
    };
    match proto {
        6 => {
            if l4.len() < 20 {
                return None;
            }
            let doff = usize::from(l4[12] >> 4) * 4;
            if doff < 20 || doff > l4.len() {
                return None;
            }
        }
        17 => {
            if l4.len() < 8 || be16(l4, 2) == 4789 || usize::from(be16(l4, 4)) < 8 {
                return None;
            }
        }
        // ICMP and ICMPv6 carry no key of their own; the decoder only needs their 4 bytes.
        1 | 58 => return (l4.len() >= 4).then_some(true),
        // SCTP, GRE and IP-in-IP go on to more headers, and so do IPv6 extension headers:
        // the decoder's business.
        132 | 47 | 4 | 41 => return None,
        p if et == 0x86dd && weir_decode::ip6::is_extension(p) => return None,
        // Anything else is an opaque payload to the decoder too.
        _ => return Some(true),
    }
    out.extend([Key::Port(be16(l4, 0)), Key::Port(be16(l4, 2))]);
    Some(true)
}

/// The keys as the full decoder finds them (every layer, tunnels included).
pub fn keys_of_decoded(link: LinkType, frame: &[u8], out: &mut Vec<Key>) -> bool {
    let d = decode(link, frame);
    for layer in d.layers() {
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
    d.error().is_none()
}
