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
