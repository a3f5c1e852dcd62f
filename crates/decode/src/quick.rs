//! The fast header parser of the hot paths (flow metering, index keys, and next the rules
//! engine): one pass from the link header to the transport ports, straight from the bytes, into a
//! small `Copy` [`Headers`], without building a [`Decoded`](crate::Decoded).
//!
//! # What it covers
//!
//! * Links: Ethernet II, raw IP (`RAW`, `IPV4`, `IPV6`), Linux cooked capture v1 and v2, BSD
//!   loopback (`NULL`, `LOOP`).
//! * Up to [`MAX_VLAN_TAGS`] VLAN tags (802.1Q, 802.1ad, the 0x9100/0x9200 QinQ tags) and up to
//!   [`MAX_MPLS_LABELS`] MPLS labels whose payload is IPv4 or IPv6.
//! * IPv4 with or without options, fragments included; IPv6 with up to
//!   [`MAX_IPV6_EXTENSIONS`] hop-by-hop, routing, destination-options or fragment headers.
//! * TCP (ports, flags), UDP (ports, unless the destination port is VXLAN's), SCTP (ports),
//!   ICMP and ICMPv6 (type, code); any other protocol as an opaque payload, and a later fragment
//!   as no transport at all.
//!
//! # The full decoder is the fallback
//!
//! [`parse`] returns `None` for every frame it does not cover: other link types, 802.3 / LLC,
//! ARP and every other non-IP ethertype, PPPoE, MPLS pseudowires, tunnels (GRE, IP in IP,
//! VXLAN), IPv6 AH and the rarer extension headers, deeper stacks than the limits above, and
//! anything truncated or malformed before the end of the transport header. The caller then
//! decodes the frame with [`decode_into`](crate::decode_into) (or [`decode`](crate::decode)),
//! which handles all of those. For every frame `parse` accepts, the full decoder finds exactly
//! the layers `Headers` describes (link, tags, labels, IP header, extension headers, then the
//! transport header or an opaque payload), no error, and the same values as
//! [`Decoded::ip`](crate::Decoded::ip), [`Decoded::transport`](crate::Decoded::transport) and
//! [`Decoded::vlan`](crate::Decoded::vlan): `tests/quick.rs` checks it on generated and mutated
//! frames and `tests/corpus.rs` on every packet of the corpus.
//!
//! `parse` never panics and never allocates, whatever the bytes (`fuzz/src/bin/fuzz_quick.rs`).
//!
//! ```
//! use weir_decode::quick::{self, Upper};
//! use weir_decode::LinkType;
//!
//! // Ethernet, IPv4 10.0.0.1 -> 10.0.0.2, UDP 53 -> 5353 with 4 bytes of payload
//! let frame = [
//!     0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00, // Ethernet
//!     0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
//!     0, 53, 0x14, 0xe9, 0, 12, 0, 0, // UDP
//!     1, 2, 3, 4,
//! ];
//! let h = quick::parse(LinkType::ETHERNET, &frame).unwrap();
//! assert_eq!((h.src, h.dst), (0x0a00_0001, 0x0a00_0002));
//! assert_eq!((h.upper, h.src_port, h.dst_port, h.ip_len), (Upper::Udp, 53, 5353, 32));
//! ```

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_packet::bytes::{be128, be16, be32};

use crate::{ethertype, ip_proto, link, Fragment, LinkType};

/// Most VLAN tags [`parse`] follows (QinQ and one more level each side); a deeper stack goes to
/// the full decoder, which follows any number.
pub const MAX_VLAN_TAGS: u8 = 4;
/// Most MPLS labels [`parse`] follows before the IP header.
pub const MAX_MPLS_LABELS: u8 = 4;
/// Most IPv6 extension headers [`parse`] walks through.
pub const MAX_IPV6_EXTENSIONS: u8 = 4;

/// What follows the IP header (and its extension headers), as [`parse`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Upper {
    /// TCP: ports and flags are set.
    Tcp,
    /// UDP: ports are set.
    Udp,
    /// SCTP: ports are set.
    Sctp,
    /// ICMP: `icmp_type` and `icmp_code` are set.
    Icmp,
    /// ICMPv6: `icmp_type` and `icmp_code` are set.
    Icmpv6,
    /// A protocol the decoder does not look into (its bytes are an opaque payload).
    #[default]
    Other,
    /// A fragment that is not the first: its transport header is in the first one.
    LaterFragment,
}

/// The headers of one frame, as [`parse`] reads them: 64 bytes, `Copy`, no borrow of the frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Headers {
    /// Source address as a number: IPv4 in the low 32 bits, IPv6 as its 128 bits.
    pub src: u128,
    /// Destination address, like `src`.
    pub dst: u128,
    /// IP length as the header states it: IPv4 total length, IPv6 payload length + 40 (may
    /// exceed the captured bytes; 0 for an IPv4 total length of 0).
    pub ip_len: u32,
    /// Fragment fields: an IPv4 fragment (MF or an offset), or an IPv6 fragment header (even an
    /// atomic one), as [`IpInfo::fragment`](crate::IpInfo::fragment).
    pub fragment: Option<Fragment>,
    /// VLAN identifier of the outermost tag (0 without tags).
    pub vlan: u16,
    /// Source port (TCP, UDP, SCTP; 0 otherwise).
    pub src_port: u16,
    /// Destination port (TCP, UDP, SCTP; 0 otherwise).
    pub dst_port: u16,
    /// What follows the IP header.
    pub upper: Upper,
    /// Upper-layer protocol number, after IPv6 extension headers (as
    /// [`IpInfo::proto`](crate::IpInfo::proto)).
    pub proto: u8,
    /// IPv4 TTL or IPv6 hop limit.
    pub ttl: u8,
    /// IPv4 type of service or IPv6 traffic class.
    pub tos: u8,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u8,
    /// ICMP / ICMPv6 message type (0 for other protocols).
    pub icmp_type: u8,
    /// ICMP / ICMPv6 message code (0 for other protocols).
    pub icmp_code: u8,
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// VLAN tags followed.
    pub vlan_tags: u8,
    /// MPLS labels followed.
    pub mpls_labels: u8,
    /// IPv6 extension headers walked through.
    pub ipv6_extensions: u8,
}

impl Headers {
    /// IP version: 4 or 6.
    #[inline]
    pub fn version(&self) -> u8 {
        if self.v6 {
            6
        } else {
            4
        }
    }

    /// The source address.
    #[inline]
    pub fn src_addr(&self) -> IpAddr {
        self.addr(self.src)
    }

    /// The destination address.
    #[inline]
    pub fn dst_addr(&self) -> IpAddr {
        self.addr(self.dst)
    }

    fn addr(&self, a: u128) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(a))
        } else {
            IpAddr::V4(Ipv4Addr::from(a as u32))
        }
    }

    /// The outermost VLAN identifier, `None` without tags (as
    /// [`Decoded::vlan`](crate::Decoded::vlan)).
    #[inline]
    pub fn vlan(&self) -> Option<u16> {
        (self.vlan_tags != 0).then_some(self.vlan)
    }

    /// True for a fragment that is not the first.
    #[inline]
    pub fn is_later_fragment(&self) -> bool {
        self.upper == Upper::LaterFragment
    }
}

/// Parses the headers of one frame of link type `link`; `None` when the frame is not one of the
/// shapes this parser covers, or is truncated or malformed: decode it with the full decoder then
/// (see the module documentation). Never panics, never allocates.
#[inline(always)]
pub fn parse(link: LinkType, frame: &[u8]) -> Option<Headers> {
    let mut h = Headers::default();
    // one call site for each IP version below keeps the parser small once inlined
    let (v6, ip) = match link {
        LinkType::ETHERNET => {
            if frame.len() < 14 {
                return None;
            }
            network(&mut h, be16(frame, 12), frame, 14)?
        }
        LinkType::RAW | LinkType::RAW_12 | LinkType::RAW_14 => match frame.first()? >> 4 {
            4 => (false, frame),
            6 => (true, frame),
            _ => return None,
        },
        LinkType::IPV4 => (false, frame),
        LinkType::IPV6 => (true, frame),
        LinkType::LINUX_SLL | LinkType::LINUX_SLL2 => {
            let (hatype, proto, at) = if link == LinkType::LINUX_SLL {
                if frame.len() < 16 {
                    return None;
                }
                (be16(frame, 2), be16(frame, 14), 16)
            } else {
                if frame.len() < 20 {
                    return None;
                }
                (be16(frame, 8), be16(frame, 0), 20)
            };
            if hatype == link::ARPHRD_NETLINK {
                return None;
            }
            network(&mut h, proto, frame, at)?
        }
        LinkType::NULL | LinkType::LOOP => {
            let head = *frame.first_chunk::<4>()?;
            let family = link::loopback_family(head, link == LinkType::LOOP);
            if family == link::AF_INET {
                (false, &frame[4..])
            } else if link::AF_INET6.contains(&family) {
                (true, &frame[4..])
            } else {
                return None;
            }
        }
        _ => return None,
    };
    if v6 {
        ipv6(&mut h, ip)?;
    } else {
        ipv4(&mut h, ip)?;
    }
    Some(h)
}

/// From an ethertype `t` whose payload starts at `frame[at..]`, through VLAN tags and MPLS
/// labels: the IP version (true for IPv6) and the IP packet.
#[inline(always)]
fn network<'a>(
    h: &mut Headers,
    mut t: u16,
    frame: &'a [u8],
    mut at: usize,
) -> Option<(bool, &'a [u8])> {
    loop {
        match t {
            ethertype::IPV4 => return Some((false, &frame[at..])),
            ethertype::IPV6 => return Some((true, &frame[at..])),
            ethertype::VLAN
            | ethertype::QINQ_8021AD
            | ethertype::QINQ_9100
            | ethertype::QINQ_9200 => {
                if h.vlan_tags == MAX_VLAN_TAGS || frame.len() < at + 4 {
                    return None;
                }
                if h.vlan_tags == 0 {
                    h.vlan = be16(frame, at) & 0x0fff;
                }
                h.vlan_tags += 1;
                t = be16(frame, at + 2);
                at += 4;
            }
            ethertype::MPLS | ethertype::MPLS_MC => {
                let (labels, v6) = mpls(&frame[at..])?;
                h.mpls_labels = labels;
                return Some((v6, &frame[at + 4 * usize::from(labels)..]));
            }
            // 802.3 lengths (LLC), ARP, PPPoE... : the decoder's
            _ => return None,
        }
    }
}

/// An MPLS label stack: how many labels, and whether IPv4 (false) or IPv6 (true) follows, told
/// by the first nibble after the bottom of the stack (as the decoder guesses).
#[cold]
#[inline(never)]
fn mpls(b: &[u8]) -> Option<(u8, bool)> {
    let mut labels = 0u8;
    loop {
        let at = 4 * usize::from(labels);
        if labels == MAX_MPLS_LABELS || b.len() < at + 4 {
            return None;
        }
        labels += 1;
        if b[at + 2] & 1 != 0 {
            break;
        }
    }
    match b.get(4 * usize::from(labels))? >> 4 {
        4 => Some((labels, false)),
        6 => Some((labels, true)),
        // a pseudowire control word and Ethernet, or an unknown payload: the decoder's
        _ => None,
    }
}

#[inline(always)]
fn ipv4(h: &mut Headers, b: &[u8]) -> Option<()> {
    if b.len() < 20 || b[0] >> 4 != 4 || b[0] & 0x0f < 5 {
        return None;
    }
    let hl = usize::from(b[0] & 0x0f) * 4;
    let total = usize::from(be16(b, 2));
    if b.len() < hl || (total != 0 && total < hl) {
        return None;
    }
    h.src = u128::from(be32(b, 12));
    h.dst = u128::from(be32(b, 16));
    h.proto = b[9];
    h.ttl = b[8];
    h.tos = b[1];
    h.ip_len = total as u32;
    let fl = be16(b, 6);
    let end = if total == 0 {
        b.len()
    } else {
        total.min(b.len())
    };
    if fl & 0x3fff != 0 {
        h.fragment = Some(Fragment {
            id: u32::from(be16(b, 4)),
            offset: (fl & 0x1fff) << 3,
            more: fl & 0x2000 != 0,
        });
        if fl & 0x1fff != 0 {
            h.upper = Upper::LaterFragment;
            return Some(());
        }
    }
    transport(h, &b[hl..end])
}

#[inline(always)]
fn ipv6(h: &mut Headers, b: &[u8]) -> Option<()> {
    if b.len() < 40 || b[0] >> 4 != 6 {
        return None;
    }
    let n = usize::from(be16(b, 4));
    let rest = &b[40..];
    let mut l4 = if n == 0 {
        rest
    } else {
        &rest[..n.min(rest.len())]
    };
    h.v6 = true;
    h.src = be128(b, 8);
    h.dst = be128(b, 24);
    h.ip_len = n as u32 + 40;
    h.ttl = b[7];
    h.tos = (be16(b, 0) >> 4) as u8;
    let mut proto = b[6];
    // hop-by-hop, destination options, routing and fragment headers, as the decoder walks
    // them; AH and the rarer ones go to the decoder
    loop {
        let len = match proto {
            ip_proto::HOPOPT | ip_proto::DSTOPTS | ip_proto::ROUTING => {
                if l4.len() < 2 {
                    return None;
                }
                (usize::from(l4[1]) + 1) * 8
            }
            ip_proto::FRAGMENT => 8,
            _ => break,
        };
        if h.ipv6_extensions == MAX_IPV6_EXTENSIONS || l4.len() < len {
            return None;
        }
        h.ipv6_extensions += 1;
        let next = l4[0];
        if proto == ip_proto::FRAGMENT {
            let off_m = be16(l4, 2);
            h.fragment = Some(Fragment {
                id: be32(l4, 4),
                offset: off_m & 0xfff8,
                more: off_m & 1 != 0,
            });
            if off_m & 0xfff8 != 0 {
                h.proto = next;
                h.upper = Upper::LaterFragment;
                return Some(());
            }
        }
        proto = next;
        l4 = &l4[len..];
    }
    h.proto = proto;
    transport(h, l4)
}

/// The transport header of an IP packet whose upper protocol is `h.proto`, in `l4` (clamped to
/// the IP length). A header cut short is refused, even in a first fragment (the decoder keeps
/// those bytes as a payload; the caller's fallback does the same).
#[inline(always)]
fn transport(h: &mut Headers, l4: &[u8]) -> Option<()> {
    match h.proto {
        ip_proto::TCP => {
            if l4.len() < 20 || l4[12] >> 4 < 5 || l4.len() < usize::from(l4[12] >> 4) * 4 {
                return None;
            }
            h.upper = Upper::Tcp;
            h.tcp_flags = l4[13];
            h.src_port = be16(l4, 0);
            h.dst_port = be16(l4, 2);
        }
        ip_proto::UDP => {
            if l4.len() < 8 {
                return None;
            }
            let len = be16(l4, 4);
            let dport = be16(l4, 2);
            // 4789 may be VXLAN (a tunnel the decoder follows)
            if (1..8).contains(&len) || dport == 4789 {
                return None;
            }
            h.upper = Upper::Udp;
            h.src_port = be16(l4, 0);
            h.dst_port = dport;
        }
        ip_proto::ICMP | ip_proto::ICMPV6 => {
            if l4.len() < 4 {
                return None;
            }
            h.upper = if h.proto == ip_proto::ICMP {
                Upper::Icmp
            } else {
                Upper::Icmpv6
            };
            h.icmp_type = l4[0];
            h.icmp_code = l4[1];
        }
        ip_proto::SCTP => {
            if l4.len() < 12 {
                return None;
            }
            h.upper = Upper::Sctp;
            h.src_port = be16(l4, 0);
            h.dst_port = be16(l4, 2);
        }
        // tunnels the decoder follows
        ip_proto::GRE | ip_proto::IPIP | ip_proto::IPV6 => return None,
        p if h.v6 && crate::ip6::is_extension(p) => return None,
        _ => h.upper = Upper::Other,
    }
    Some(())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn short_and_unknown_frames_are_refused() {
        for lt in [0, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147] {
            for n in 0..64 {
                assert_eq!(parse(LinkType(lt), &vec![0u8; n]), None, "{lt} {n}");
            }
        }
    }
}
