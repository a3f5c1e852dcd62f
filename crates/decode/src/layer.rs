//! [`Layer`], one decoded header as a typed view over the frame, and [`LayerKind`], its name.

use crate::{
    ArpPacket, ChdlcHeader, ErspanHeader, EthernetFrame, GrePacket, IcmpPacket, Ipv4Packet,
    Ipv6ExtHeader, Ipv6Packet, LlcHeader, MplsLabel, PppFrame, PppoeHeader, SctpPacket, Sll2Header,
    SllHeader, SnapHeader, TcpPacket, UdpPacket, VlanTag, VxlanHeader,
};

/// One decoded header. Each variant holds a typed view whose buffer starts at the header and runs
/// to the end of the data that header governs (so `payload()` works on it); `new_checked` has
/// passed on every view here, so none of their getters panics.
#[derive(Clone, Copy, Debug)]
pub enum Layer<'a> {
    /// Ethernet II or 802.3 header.
    Ethernet(EthernetFrame<&'a [u8]>),
    /// 802.2 LLC header (after an 802.3 length, or Linux SLL protocol 4).
    Llc(LlcHeader<&'a [u8]>),
    /// SNAP header after LLC AA-AA-03.
    Snap(SnapHeader<&'a [u8]>),
    /// One VLAN tag.
    Vlan {
        /// The ethertype that announced the tag: 0x8100 (802.1Q), 0x88a8 (802.1ad), 0x9100 or
        /// 0x9200 (pre-standard QinQ).
        tpid: u16,
        /// The tag control information and the next ethertype.
        tag: VlanTag<&'a [u8]>,
    },
    /// One MPLS label stack entry.
    Mpls(MplsLabel<&'a [u8]>),
    /// PPPoE header (session or discovery stage).
    Pppoe(PppoeHeader<&'a [u8]>),
    /// PPP header (optional address/control, then the protocol).
    Ppp(PppFrame<&'a [u8]>),
    /// Cisco HDLC header.
    Chdlc(ChdlcHeader<&'a [u8]>),
    /// BSD loopback header.
    Loopback {
        /// The address family, read in whichever byte order gave a known value (2 is IPv4;
        /// 24, 28 and 30 are IPv6 on the BSDs and macOS).
        family: u32,
    },
    /// Linux cooked capture v1 header.
    LinuxSll(SllHeader<&'a [u8]>),
    /// Linux cooked capture v2 header.
    LinuxSll2(Sll2Header<&'a [u8]>),
    /// ARP or RARP packet.
    Arp(ArpPacket<&'a [u8]>),
    /// IPv4 header; `payload()` is clamped to the total length and the captured data.
    Ipv4(Ipv4Packet<&'a [u8]>),
    /// IPv6 fixed header; `payload()` is clamped to the payload length and the captured data.
    Ipv6(Ipv6Packet<&'a [u8]>),
    /// One IPv6 extension header (or AH).
    Ipv6Ext {
        /// Its protocol number: 0 hop-by-hop, 43 routing, 44 fragment, 51 AH, 60 destination
        /// options, 135 mobility, 139 HIP, 140 shim6.
        kind: u8,
        /// The header's bytes, exactly.
        header: Ipv6ExtHeader<&'a [u8]>,
    },
    /// TCP segment.
    Tcp(TcpPacket<&'a [u8]>),
    /// UDP datagram; `payload()` is clamped to the UDP length.
    Udp(UdpPacket<&'a [u8]>),
    /// ICMP (for IPv4) message.
    Icmp(IcmpPacket<&'a [u8]>),
    /// ICMPv6 message.
    Icmpv6(IcmpPacket<&'a [u8]>),
    /// SCTP common header and chunks.
    Sctp(SctpPacket<&'a [u8]>),
    /// GRE header.
    Gre(GrePacket<&'a [u8]>),
    /// ERSPAN type II or III header (type I has none).
    Erspan(ErspanHeader<&'a [u8]>),
    /// VXLAN header.
    Vxlan(VxlanHeader<&'a [u8]>),
    /// Bytes the decoder did not interpret: an unknown ethertype or IP protocol, a non-first
    /// fragment, ESP, a non-SNAP LLC payload... The payloads of TCP, UDP, ICMP and SCTP are not
    /// repeated here: take them from those layers.
    Payload(&'a [u8]),
}

/// The name of a [`Layer`] without its data, used in errors and tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(missing_docs)] // the variants mirror `Layer`'s, documented there
pub enum LayerKind {
    Ethernet,
    Llc,
    Snap,
    Vlan,
    Mpls,
    Pppoe,
    Ppp,
    Chdlc,
    Loopback,
    LinuxSll,
    LinuxSll2,
    Arp,
    Ipv4,
    Ipv6,
    Ipv6Ext,
    Tcp,
    Udp,
    Icmp,
    Icmpv6,
    Sctp,
    Gre,
    Erspan,
    Vxlan,
    Payload,
}

impl LayerKind {
    /// A human name: `"Ethernet header"`, `"TCP header"`, `"payload"`...
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Ethernet => "Ethernet header",
            LayerKind::Llc => "LLC header",
            LayerKind::Snap => "SNAP header",
            LayerKind::Vlan => "VLAN tag",
            LayerKind::Mpls => "MPLS label",
            LayerKind::Pppoe => "PPPoE header",
            LayerKind::Ppp => "PPP header",
            LayerKind::Chdlc => "Cisco HDLC header",
            LayerKind::Loopback => "loopback header",
            LayerKind::LinuxSll => "Linux SLL header",
            LayerKind::LinuxSll2 => "Linux SLL2 header",
            LayerKind::Arp => "ARP packet",
            LayerKind::Ipv4 => "IPv4 header",
            LayerKind::Ipv6 => "IPv6 header",
            LayerKind::Ipv6Ext => "IPv6 extension header",
            LayerKind::Tcp => "TCP header",
            LayerKind::Udp => "UDP header",
            LayerKind::Icmp => "ICMP header",
            LayerKind::Icmpv6 => "ICMPv6 header",
            LayerKind::Sctp => "SCTP header",
            LayerKind::Gre => "GRE header",
            LayerKind::Erspan => "ERSPAN header",
            LayerKind::Vxlan => "VXLAN header",
            LayerKind::Payload => "payload",
        }
    }

    /// The short word tcpdump puts in its truncation marker (`[|tcp]`).
    pub fn marker(self) -> &'static str {
        match self {
            LayerKind::Ethernet => "ether",
            LayerKind::Llc => "llc",
            LayerKind::Snap => "snap",
            LayerKind::Vlan => "vlan",
            LayerKind::Mpls => "mpls",
            LayerKind::Pppoe => "pppoe",
            LayerKind::Ppp => "ppp",
            LayerKind::Chdlc => "chdlc",
            LayerKind::Loopback => "null",
            LayerKind::LinuxSll => "sll",
            LayerKind::LinuxSll2 => "sll2",
            LayerKind::Arp => "arp",
            LayerKind::Ipv4 => "ip",
            LayerKind::Ipv6 => "ip6",
            LayerKind::Ipv6Ext => "ip6ext",
            LayerKind::Tcp => "tcp",
            LayerKind::Udp => "udp",
            LayerKind::Icmp => "icmp",
            LayerKind::Icmpv6 => "icmp6",
            LayerKind::Sctp => "sctp",
            LayerKind::Gre => "gre",
            LayerKind::Erspan => "erspan",
            LayerKind::Vxlan => "vxlan",
            LayerKind::Payload => "payload",
        }
    }
}

impl Layer<'_> {
    /// Which kind of layer this is.
    #[inline]
    pub fn kind(&self) -> LayerKind {
        match self {
            Layer::Ethernet(_) => LayerKind::Ethernet,
            Layer::Llc(_) => LayerKind::Llc,
            Layer::Snap(_) => LayerKind::Snap,
            Layer::Vlan { .. } => LayerKind::Vlan,
            Layer::Mpls(_) => LayerKind::Mpls,
            Layer::Pppoe(_) => LayerKind::Pppoe,
            Layer::Ppp(_) => LayerKind::Ppp,
            Layer::Chdlc(_) => LayerKind::Chdlc,
            Layer::Loopback { .. } => LayerKind::Loopback,
            Layer::LinuxSll(_) => LayerKind::LinuxSll,
            Layer::LinuxSll2(_) => LayerKind::LinuxSll2,
            Layer::Arp(_) => LayerKind::Arp,
            Layer::Ipv4(_) => LayerKind::Ipv4,
            Layer::Ipv6(_) => LayerKind::Ipv6,
            Layer::Ipv6Ext { .. } => LayerKind::Ipv6Ext,
            Layer::Tcp(_) => LayerKind::Tcp,
            Layer::Udp(_) => LayerKind::Udp,
            Layer::Icmp(_) => LayerKind::Icmp,
            Layer::Icmpv6(_) => LayerKind::Icmpv6,
            Layer::Sctp(_) => LayerKind::Sctp,
            Layer::Gre(_) => LayerKind::Gre,
            Layer::Erspan(_) => LayerKind::Erspan,
            Layer::Vxlan(_) => LayerKind::Vxlan,
            Layer::Payload(_) => LayerKind::Payload,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn layer_is_three_words() {
        // A slice plus the tag: keeping it this small keeps `Decoded` cheap to build and copy.
        assert_eq!(
            core::mem::size_of::<Layer<'static>>(),
            3 * core::mem::size_of::<usize>()
        );
    }

    #[test]
    fn kinds_and_names() {
        assert_eq!(Layer::Payload(&[]).kind(), LayerKind::Payload);
        assert_eq!(LayerKind::Tcp.marker(), "tcp");
        assert_eq!(LayerKind::Ipv6Ext.name(), "IPv6 extension header");
    }
}
