//! Lax, zero-copy packet decoding for weir: from the link layer to the transport header, through
//! VLAN, MPLS, PPPoE and tunnels.
//!
//! [`decode`] takes a link type and the captured bytes of one frame and returns a [`Decoded`]: the
//! stack of [`Layer`]s it found (outermost first), each a typed view borrowing the frame, plus the
//! [`DecodeError`] that stopped it early, if any. It never panics, never allocates, and never
//! fails as a whole: a packet cut by the snap length or lying about its lengths still yields every
//! layer that could be read before the damage. The flow meter reads the fast accessors
//! ([`Decoded::ip`], [`Decoded::transport`], [`Decoded::vlan`]); humans read [`summary`], a one-line
//! tcpdump-like rendering.
//!
//! ```
//! use weir_decode::{decode, protocol_name, summary, LinkType, Transport};
//!
//! // Ethernet, IPv4 10.0.0.1 -> 10.0.0.2, UDP 53 -> 5353 with 4 bytes of payload
//! let frame = [
//!     0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00, // Ethernet
//!     0x45, 0, 0, 32, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
//!     0, 53, 0x14, 0xe9, 0, 12, 0, 0, // UDP
//!     1, 2, 3, 4,
//! ];
//! let d = decode(LinkType::ETHERNET, &frame);
//! assert_eq!(d.error(), None);
//! let ip = d.ip().unwrap();
//! assert_eq!(ip.src.to_string(), "10.0.0.1");
//! assert_eq!(ip.proto, 17);
//! assert!(matches!(d.transport(), Some(Transport::Udp { src: 53, dst: 5353, .. })));
//! assert_eq!(protocol_name(&d), "UDP");
//! assert_eq!(summary(&d).to_string(), "IP 10.0.0.1.53 > 10.0.0.2.5353: UDP, length 4");
//! ```
//!
//! # What is decoded
//!
//! * Link: Ethernet II and 802.3 (LLC, SNAP), BSD loopback (`NULL`, `LOOP`), raw IP, Linux cooked
//!   capture v1 and v2, PPP (with or without HDLC address/control), PPPoE (`PPP_ETHER`), Cisco
//!   HDLC (`C_HDLC`, 104, and inside `PPP_HDLC`).
//! * Inside: 802.1Q / 802.1ad / QinQ tag stacks, MPLS label stacks, PPPoE sessions, ARP.
//! * IPv4 (options, fragments), IPv6 with extension headers (hop-by-hop, routing, fragment,
//!   destination options, AH, mobility, HIP, shim6; stops at ESP and No Next Header).
//! * TCP, UDP, ICMP, ICMPv6, SCTP.
//! * Tunnels, decoded again from their inner header: GRE (RFC 2784/2890, and PPTP's enhanced GRE)
//!   carrying Ethernet, IPv4, IPv6, PPP or MPLS; ERSPAN type I, II and III; VXLAN (UDP
//!   destination port 4789 with the I flag set); IPv4/IPv6 in IP. At most [`MAX_TUNNELS`] tunnels
//!   and [`MAX_LAYERS`] layers are followed, so adversarial nesting ends with
//!   [`ErrorKind::TooDeep`] instead of looping.
//! * MPLS carries no type: after the bottom of the stack, a first nibble of 4 or 6 means IPv4 or
//!   IPv6, and 0 a pseudowire control word followed by Ethernet (RFC 4385/4448).
//!
//! # Why a hand-written decoder
//!
//! The brief says to lean on `etherparse` where it is fast enough. Its `LaxSlicedPacket` (0.18)
//! stops at Ethernet II, up to three VLAN tags, MACsec, ARP, IPv4/IPv6 (with extension headers)
//! and TCP/UDP/ICMP/ICMPv6: it has no MPLS, PPPoE, PPP, GRE, ERSPAN, VXLAN, SCTP, BSD loopback,
//! 802.3 LLC/SNAP or Linux SLL2 (SLL v1 only in its strict slicer), and no tunnel recursion, all
//! of which real captures carry. Those are the reasons this crate exists; speed is the condition:
//! `bench/src/bin/bench_decode.rs` (`cargo run --release -p weir-bench --bin bench_decode -- FILE`)
//! decodes the same Ethernet packets with both and extracts the same fields (IP addresses,
//! protocol, ports), so any regression against etherparse shows as a ratio. On the 86 k Ethernet
//! packets of the corpus (2026-11, a shared 2-core machine) it measured about 33 ns/packet with
//! [`decode_into`] and 55 with [`decode`], against 66 for etherparse, and the two agree on every
//! packet's fields except tunnels (weir reports the inner header), framings etherparse does not
//! follow, and one IPv6 packet whose extension-header chain exceeds [`MAX_LAYERS`].
//!
//! # The fast path: [`quick`]
//!
//! The hot paths (flow metering, index keys) read only a few header fields of mostly plain
//! packets; [`quick::parse`] reads them in one pass into a small `Copy` [`quick::Headers`]
//! (VLAN and MPLS stacks, IPv4/IPv6 addresses, protocol, IP length, ports, TCP flags, fragment
//! fields) and refuses everything else, which its callers then give to [`decode_into`]. The two
//! agree on every frame `quick` accepts (a proptest, the corpus, and an AFL++ target check it).
//!
//! # Writing packets
//!
//! The views also write, as smoltcp's do: `EthernetFrame`, `VlanTag`, `Ipv4Packet`,
//! `Ipv6Packet`, `UdpPacket` and `TcpPacket` over a mutable buffer have setters, the IPv4 header
//! and the transport checksums fill themselves ([`checksum`]), and [`EthernetRepr`],
//! [`Ipv4Repr`] and [`Ipv6Repr`] `emit` a whole header. `weir-gen` builds its frames this way.
//!
//! In a loop, prefer [`decode_into`] with one reused [`Decoded`]: [`decode`] returns a new one by
//! value, which costs a copy of about 400 bytes per packet.
//!
//! # Design
//!
//! Each protocol has its own module with a typed view in the style of smoltcp's `wire` module:
//! `Ipv4Packet<T: AsRef<[u8]>>`, a private `mod field` of byte ranges, `new_checked` (which
//! guarantees that no getter panics afterwards), and `#[inline]` getters reading network byte
//! order. The decoder is a loop over a small state enum rather than recursion, so tunnels cost no
//! stack. [`Decoded`] stores its layers in a fixed array (`[Layer; MAX_LAYERS]`), and is `Copy`.
//!
//! # Lengths: truncated or malformed
//!
//! Length fields (IPv4 total length, IPv6 payload length, UDP, PPPoE and 802.3 lengths) bound the
//! bytes handed to the next layer when they fit in the captured data (Ethernet padding is dropped
//! that way). When they claim more, the data is clamped to what was captured and
//! [`Decoded::clipped`] says so: normal for a packet cut by the snap length, and only the capture
//! record (caplen < orig_len) can tell whether it was. So a header running past the end of the
//! data is [`ErrorKind::Truncated`] when the capture ended first, and [`ErrorKind::Malformed`]
//! when the packet's own length field ended first; a field that contradicts the packet (IHL < 5,
//! a total length shorter than the header, a TCP data offset < 5, ...) is `Malformed` too. One
//! exception: a transport header cut by the end of a *first fragment* is no error, since it
//! continues in the next fragment; those bytes become a [`Layer::Payload`].
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[macro_use]
mod macros;

pub mod arp;
pub mod checksum;
pub mod ethernet;
pub mod gre;
pub mod icmp;
pub mod ip4;
pub mod ip6;
pub mod link;
pub mod mpls;
pub mod ppp;
pub mod quick;
pub mod sctp;
pub mod tcp;
pub mod udp;
pub mod vlan;
pub mod vxlan;

mod decode;
mod decoded;
mod error;
mod layer;
mod slice;
mod summary;

pub use arp::ArpPacket;
pub use decode::{decode, decode_into};
pub use decoded::{Decoded, Fragment, IpInfo, Transport, MAX_LAYERS, MAX_TUNNELS};
pub use error::{DecodeError, ErrorKind, Result};
pub use ethernet::{EthernetFrame, EthernetRepr, LlcHeader, MacAddr, SnapHeader};
pub use gre::{ErspanHeader, GrePacket};
pub use icmp::IcmpPacket;
pub use ip4::{Ipv4Packet, Ipv4Repr};
pub use ip6::{Ipv6ExtHeader, Ipv6FragmentHeader, Ipv6Packet, Ipv6Repr};
pub use layer::{Layer, LayerKind};
pub use link::{Sll2Header, SllHeader};
pub use mpls::MplsLabel;
pub use ppp::{ChdlcHeader, PppFrame, PppoeHeader};
pub use sctp::SctpPacket;
pub use slice::{headers_len, SliceLevel};
pub use summary::{protocol_name, summary, Summary};
pub use tcp::TcpPacket;
pub use udp::UdpPacket;
pub use vlan::VlanTag;
pub use vxlan::VxlanHeader;
pub use weir_packet::LinkType;

/// LINKTYPE_C_HDLC (Cisco HDLC), which `weir-packet` does not name.
pub const LINKTYPE_C_HDLC: LinkType = LinkType::C_HDLC;

/// A fixed field of a header: a byte range.
pub(crate) type Field = core::ops::Range<usize>;
/// The variable rest of a header or packet, from a byte offset on.
pub(crate) type Rest = core::ops::RangeFrom<usize>;

/// Ethernet type numbers the decoder follows (IEEE registry values).
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// Transparent Ethernet bridging (Ethernet inside GRE / NVGRE).
    pub const TEB: u16 = 0x6558;
    /// Reverse ARP.
    pub const RARP: u16 = 0x8035;
    /// 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// PPP (inside GRE, as PPTP uses it).
    pub const PPP: u16 = 0x880b;
    /// MPLS unicast.
    pub const MPLS: u16 = 0x8847;
    /// MPLS multicast.
    pub const MPLS_MC: u16 = 0x8848;
    /// PPPoE discovery stage.
    pub const PPPOE_DISCOVERY: u16 = 0x8863;
    /// PPPoE session stage.
    pub const PPPOE_SESSION: u16 = 0x8864;
    /// 802.1ad service VLAN tag (QinQ outer tag).
    pub const QINQ_8021AD: u16 = 0x88a8;
    /// ERSPAN type I and II (inside GRE).
    pub const ERSPAN: u16 = 0x88be;
    /// ERSPAN type III (inside GRE).
    pub const ERSPAN3: u16 = 0x22eb;
    /// Pre-standard QinQ tag used by some vendors.
    pub const QINQ_9100: u16 = 0x9100;
    /// Pre-standard QinQ tag used by some vendors.
    pub const QINQ_9200: u16 = 0x9200;

    /// A short human name for an ethertype, or `None` when weir does not know it.
    pub fn name(t: u16) -> Option<&'static str> {
        Some(match t {
            IPV4 => "IPv4",
            ARP => "ARP",
            TEB => "TEB",
            RARP => "RARP",
            VLAN => "802.1Q",
            IPV6 => "IPv6",
            PPP => "PPP",
            MPLS => "MPLS",
            MPLS_MC => "MPLS multicast",
            PPPOE_DISCOVERY => "PPPoE D",
            PPPOE_SESSION => "PPPoE S",
            QINQ_8021AD => "802.1ad",
            ERSPAN | ERSPAN3 => "ERSPAN",
            QINQ_9100 | QINQ_9200 => "QinQ",
            0x88cc => "LLDP",
            0x88e5 => "MACsec",
            0x8906 => "FCoE",
            0x88f7 => "PTP",
            0x888e => "EAPOL",
            0x9000 => "Loopback",
            _ => return None,
        })
    }
}

/// IP protocol numbers (IANA) the decoder follows.
pub mod ip_proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// IPv4 in IP.
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 in IP.
    pub const IPV6: u8 = 41;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// GRE.
    pub const GRE: u8 = 47;
    /// IPsec ESP.
    pub const ESP: u8 = 50;
    /// IPsec authentication header.
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 "no next header".
    pub const NO_NEXT: u8 = 59;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
    /// IPv6 mobility header.
    pub const MOBILITY: u8 = 135;
    /// SCTP.
    pub const SCTP: u8 = 132;
    /// Host Identity Protocol.
    pub const HIP: u8 = 139;
    /// Shim6.
    pub const SHIM6: u8 = 140;

    /// A short human name for an IP protocol, or `None` when weir does not know it.
    pub fn name(p: u8) -> Option<&'static str> {
        Some(match p {
            HOPOPT => "HOPOPT",
            ICMP => "ICMP",
            2 => "IGMP",
            IPIP => "IPIP",
            TCP => "TCP",
            UDP => "UDP",
            IPV6 => "IPv6",
            ROUTING => "IPv6-Route",
            FRAGMENT => "IPv6-Frag",
            GRE => "GRE",
            ESP => "ESP",
            AH => "AH",
            ICMPV6 => "ICMPv6",
            NO_NEXT => "IPv6-NoNxt",
            DSTOPTS => "IPv6-Opts",
            89 => "OSPF",
            103 => "PIM",
            112 => "VRRP",
            SCTP => "SCTP",
            MOBILITY => "Mobility",
            HIP => "HIP",
            SHIM6 => "Shim6",
            _ => return None,
        })
    }
}
