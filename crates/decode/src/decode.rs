//! The decoder: a loop over a small state enum, one step per header, from the link layer down.
//! Tunnels loop back to an earlier state instead of recursing, so nesting costs no stack and is
//! bounded by [`MAX_TUNNELS`] and [`MAX_LAYERS`].

use crate::{
    ethernet::MAX_8023_LEN, ethertype, ip6, ip_proto, link, ppp, vxlan, ArpPacket, ChdlcHeader,
    DecodeError, Decoded, ErrorKind, ErspanHeader, EthernetFrame, GrePacket, IcmpPacket,
    Ipv4Packet, Ipv6ExtHeader, Ipv6FragmentHeader, Ipv6Packet, Layer, LayerKind, LinkType,
    LlcHeader, MplsLabel, PppFrame, PppoeHeader, SctpPacket, Sll2Header, SllHeader, SnapHeader,
    TcpPacket, UdpPacket, VlanTag, VxlanHeader, MAX_LAYERS, MAX_TUNNELS,
};

/// What to decode next, and from which bytes.
#[derive(Clone, Copy)]
enum Next<'a> {
    Ethernet(&'a [u8]),
    /// A type-or-length value as found after Ethernet or a VLAN tag, and the bytes after it.
    TypeOrLen(u16, &'a [u8]),
    Llc(&'a [u8]),
    Vlan(u16, &'a [u8]),
    Mpls(&'a [u8]),
    Pppoe(&'a [u8]),
    Ppp(&'a [u8]),
    Chdlc(&'a [u8]),
    Loopback(&'a [u8], bool),
    Sll(&'a [u8]),
    Sll2(&'a [u8]),
    Arp(&'a [u8]),
    /// Raw IP: the version nibble decides.
    IpGuess(&'a [u8]),
    Ipv4(&'a [u8]),
    Ipv6(&'a [u8]),
    /// The payload of an IP header (or of an IPv6 extension header) with its protocol number.
    Upper(u8, bool, &'a [u8]),
    Gre(&'a [u8]),
    Erspan(&'a [u8]),
    Vxlan(&'a [u8]),
    Payload(&'a [u8]),
    Done,
}

/// Decodes one frame of link type `link`. Never panics, never allocates; see the crate docs for
/// what is followed and how errors are reported.
///
/// Returning the result by value costs a copy of [`Decoded`] (about 400 bytes) on top of
/// building it; a loop over many packets is faster with [`decode_into`], which reuses one.
#[inline]
pub fn decode(link: LinkType, frame: &[u8]) -> Decoded<'_> {
    let mut d = Decoded::new();
    decode_into(&mut d, link, frame);
    d
}

/// Decodes one frame into `d`, replacing what it held: the same result as [`decode`] without
/// building and copying a new [`Decoded`] per packet, which is what a hot loop wants.
///
/// ```
/// use weir_decode::{decode_into, Decoded, LinkType};
/// let frames: Vec<Vec<u8>> = vec![vec![0; 14], vec![0; 3]];
/// let mut d = Decoded::new();
/// for f in &frames {
///     decode_into(&mut d, LinkType::ETHERNET, f);
///     let _ = d.ip();
/// }
/// ```
#[inline(never)]
pub fn decode_into<'a>(d: &mut Decoded<'a>, link: LinkType, frame: &'a [u8]) {
    d.reset();
    let mut c = Cursor {
        d,
        base: frame.as_ptr() as usize,
        bounded: false,
        first_frag: false,
        tunnels: 0,
    };
    let mut next = match link {
        LinkType::ETHERNET => Next::Ethernet(frame),
        LinkType::NULL => Next::Loopback(frame, false),
        LinkType::LOOP => Next::Loopback(frame, true),
        LinkType::RAW_12 | LinkType::RAW_14 | LinkType::RAW => Next::IpGuess(frame),
        LinkType::IPV4 => Next::Ipv4(frame),
        LinkType::IPV6 => Next::Ipv6(frame),
        LinkType::LINUX_SLL => Next::Sll(frame),
        LinkType::LINUX_SLL2 => Next::Sll2(frame),
        LinkType::PPP => Next::Ppp(frame),
        // DLT_PPP_SERIAL carries Cisco HDLC too, told apart by the address byte (as tcpdump does)
        LinkType::PPP_HDLC => match frame.first() {
            Some(&(ppp::CHDLC_UNICAST | ppp::CHDLC_BROADCAST)) => Next::Chdlc(frame),
            _ => Next::Ppp(frame),
        },
        crate::LINKTYPE_C_HDLC => Next::Chdlc(frame),
        LinkType::PPP_ETHER => Next::Pppoe(frame),
        _ => c.fail(ErrorKind::Unsupported, LayerKind::Payload, frame),
    };
    loop {
        next = match next {
            Next::Done => break,
            Next::Ethernet(b) => c.ethernet(b),
            Next::TypeOrLen(t, b) => c.type_or_len(t, b),
            Next::Llc(b) => c.llc(b),
            Next::Vlan(tpid, b) => c.vlan(tpid, b),
            Next::Mpls(b) => c.mpls(b),
            Next::Pppoe(b) => c.pppoe(b),
            Next::Ppp(b) => c.ppp(b),
            Next::Chdlc(b) => c.chdlc(b),
            Next::Loopback(b, network_order) => c.loopback(b, network_order),
            Next::Sll(b) => c.sll(b),
            Next::Sll2(b) => c.sll2(b),
            Next::Arp(b) => c.arp(b),
            Next::IpGuess(b) => c.ip_guess(b),
            Next::Ipv4(b) => c.ipv4(b),
            Next::Ipv6(b) => c.ipv6(b),
            Next::Upper(proto, v6, b) => c.upper(proto, v6, b),
            Next::Gre(b) => c.gre(b),
            Next::Erspan(b) => c.erspan(b),
            Next::Vxlan(b) => c.vxlan(b),
            Next::Payload(b) => c.payload(b),
        };
    }
}

struct Cursor<'a, 'd> {
    d: &'d mut Decoded<'a>,
    /// Address of the frame's first byte, to turn sub-slices into offsets.
    base: usize,
    /// A length field set the end of the data (it fits in what was captured): a header running
    /// past the end runs past what the packet itself declares, so it is malformed, not truncated.
    bounded: bool,
    /// The innermost IP packet is a first fragment (offset 0, more fragments).
    first_frag: bool,
    tunnels: u8,
}

/// Unwraps a typed view's check, or records the error and stops.
macro_rules! check {
    ($c:expr, $e:expr, $kind:expr, $at:expr) => {
        match $e {
            Ok(v) => v,
            Err(k) => return $c.fail(k, $kind, $at),
        }
    };
}

impl<'a> Cursor<'a, '_> {
    #[inline]
    fn offset(&self, at: &[u8]) -> u32 {
        (at.as_ptr() as usize).wrapping_sub(self.base) as u32
    }

    #[cold]
    fn fail(&mut self, kind: ErrorKind, layer: LayerKind, at: &[u8]) -> Next<'a> {
        let kind = if kind == ErrorKind::Truncated && self.bounded {
            ErrorKind::Malformed
        } else {
            kind
        };
        self.d.error = Some(DecodeError {
            kind,
            layer,
            offset: self.offset(at),
        });
        Next::Done
    }

    /// Appends a layer; false (with the error recorded) when the array is full.
    #[inline]
    fn push(&mut self, layer: Layer<'a>, at: &[u8]) -> bool {
        let n = self.d.len as usize;
        if n < MAX_LAYERS {
            self.d.layers[n] = layer;
            self.d.len += 1;
            true
        } else {
            self.fail(ErrorKind::TooDeep, layer.kind(), at);
            false
        }
    }

    /// Counts one more tunnel; false (with the error recorded) past the limit.
    #[inline]
    fn enter_tunnel(&mut self, kind: LayerKind, at: &[u8]) -> bool {
        if (self.tunnels as usize) < MAX_TUNNELS {
            self.tunnels += 1;
            true
        } else {
            self.fail(ErrorKind::TooDeep, kind, at);
            false
        }
    }

    /// Records how a length field of `declared` bytes compares with the `available` ones: when
    /// it fits, the packet itself says where it ends, so a header running past that end is
    /// malformed; when it does not, the capture was cut short and the data is clipped.
    #[inline]
    fn bound(&mut self, declared: usize, available: usize) {
        if declared <= available {
            self.bounded = true;
        } else {
            self.d.clipped = true;
        }
    }

    fn ethernet(&mut self, b: &'a [u8]) -> Next<'a> {
        let f = check!(self, EthernetFrame::new_checked(b), LayerKind::Ethernet, b);
        if !self.push(Layer::Ethernet(f), b) {
            return Next::Done;
        }
        Next::TypeOrLen(f.ethertype(), &b[crate::ethernet::HEADER_LEN..])
    }

    #[inline]
    fn type_or_len(&mut self, t: u16, rest: &'a [u8]) -> Next<'a> {
        if t > MAX_8023_LEN {
            return self.ethertype(t, rest);
        }
        // 802.3: a length, then LLC
        self.bound(t as usize, rest.len());
        Next::Llc(&rest[..rest.len().min(t as usize)])
    }

    #[inline]
    fn ethertype(&mut self, t: u16, b: &'a [u8]) -> Next<'a> {
        match t {
            ethertype::IPV4 => Next::Ipv4(b),
            ethertype::IPV6 => Next::Ipv6(b),
            ethertype::VLAN
            | ethertype::QINQ_8021AD
            | ethertype::QINQ_9100
            | ethertype::QINQ_9200 => Next::Vlan(t, b),
            ethertype::ARP | ethertype::RARP => Next::Arp(b),
            ethertype::MPLS | ethertype::MPLS_MC => Next::Mpls(b),
            ethertype::PPPOE_SESSION | ethertype::PPPOE_DISCOVERY => Next::Pppoe(b),
            ethertype::PPP => Next::Ppp(b),
            ethertype::TEB => Next::Ethernet(b),
            _ => Next::Payload(b),
        }
    }

    fn llc(&mut self, b: &'a [u8]) -> Next<'a> {
        let l = check!(self, LlcHeader::new_checked(b), LayerKind::Llc, b);
        if !self.push(Layer::Llc(l), b) {
            return Next::Done;
        }
        let rest = l.payload();
        if !l.is_snap() {
            return Next::Payload(rest);
        }
        let s = check!(self, SnapHeader::new_checked(rest), LayerKind::Snap, rest);
        if !self.push(Layer::Snap(s), rest) {
            return Next::Done;
        }
        if s.carries_ethertype() {
            self.ethertype(s.protocol(), s.payload())
        } else {
            Next::Payload(s.payload())
        }
    }

    fn vlan(&mut self, tpid: u16, b: &'a [u8]) -> Next<'a> {
        let tag = check!(self, VlanTag::new_checked(b), LayerKind::Vlan, b);
        if !self.push(Layer::Vlan { tpid, tag }, b) {
            return Next::Done;
        }
        Next::TypeOrLen(tag.ethertype(), &b[crate::vlan::HEADER_LEN..])
    }

    fn mpls(&mut self, b: &'a [u8]) -> Next<'a> {
        let mut b = b;
        loop {
            let l = check!(self, MplsLabel::new_checked(b), LayerKind::Mpls, b);
            if !self.push(Layer::Mpls(l), b) {
                return Next::Done;
            }
            b = l.payload();
            if l.bottom() {
                break;
            }
        }
        // Nothing says what the payload is: guess by the first nibble, as routers do.
        match b.first().map(|v| v >> 4) {
            None => self.fail(ErrorKind::Truncated, LayerKind::Payload, b),
            Some(4) => Next::Ipv4(b),
            Some(6) => Next::Ipv6(b),
            // a pseudowire control word (RFC 4385, first nibble 0), then Ethernet (RFC 4448)
            Some(0) if b.len() >= 4 => Next::Ethernet(&b[4..]),
            Some(0) => self.fail(ErrorKind::Truncated, LayerKind::Ethernet, b),
            Some(_) => Next::Payload(b),
        }
    }

    fn pppoe(&mut self, b: &'a [u8]) -> Next<'a> {
        let h = check!(self, PppoeHeader::new_checked(b), LayerKind::Pppoe, b);
        if !self.push(Layer::Pppoe(h), b) {
            return Next::Done;
        }
        self.bound(h.length() as usize, b.len() - crate::ppp::PPPOE_HEADER_LEN);
        if h.code() == ppp::PPPOE_CODE_SESSION {
            Next::Ppp(h.payload())
        } else {
            Next::Payload(h.payload())
        }
    }

    fn ppp(&mut self, b: &'a [u8]) -> Next<'a> {
        let p = check!(self, PppFrame::new_checked(b), LayerKind::Ppp, b);
        if !self.push(Layer::Ppp(p), b) {
            return Next::Done;
        }
        let rest = p.payload();
        match p.protocol() {
            ppp::protocol::IPV4 => Next::Ipv4(rest),
            ppp::protocol::IPV6 => Next::Ipv6(rest),
            ppp::protocol::MPLS | ppp::protocol::MPLS_MC => Next::Mpls(rest),
            _ => Next::Payload(rest),
        }
    }

    fn chdlc(&mut self, b: &'a [u8]) -> Next<'a> {
        let h = check!(self, ChdlcHeader::new_checked(b), LayerKind::Chdlc, b);
        if !self.push(Layer::Chdlc(h), b) {
            return Next::Done;
        }
        self.ethertype(h.protocol(), h.payload())
    }

    fn loopback(&mut self, b: &'a [u8], network_order: bool) -> Next<'a> {
        let Some(h) = b.first_chunk::<4>() else {
            return self.fail(ErrorKind::Truncated, LayerKind::Loopback, b);
        };
        let family = link::loopback_family(*h, network_order);
        if !self.push(Layer::Loopback { family }, b) {
            return Next::Done;
        }
        let rest = &b[4..];
        match family {
            link::AF_INET => Next::Ipv4(rest),
            f if link::AF_INET6.contains(&f) => Next::Ipv6(rest),
            _ => Next::Payload(rest),
        }
    }

    #[inline]
    fn cooked(&mut self, hatype: u16, protocol: u16, rest: &'a [u8]) -> Next<'a> {
        if hatype == link::ARPHRD_NETLINK {
            Next::Payload(rest)
        } else if protocol == link::SLL_PROTO_LLC {
            Next::Llc(rest)
        } else if protocol <= MAX_8023_LEN {
            Next::Payload(rest)
        } else {
            self.ethertype(protocol, rest)
        }
    }

    fn sll(&mut self, b: &'a [u8]) -> Next<'a> {
        let h = check!(self, SllHeader::new_checked(b), LayerKind::LinuxSll, b);
        if !self.push(Layer::LinuxSll(h), b) {
            return Next::Done;
        }
        self.cooked(h.hardware_type(), h.protocol(), h.payload())
    }

    fn sll2(&mut self, b: &'a [u8]) -> Next<'a> {
        let h = check!(self, Sll2Header::new_checked(b), LayerKind::LinuxSll2, b);
        if !self.push(Layer::LinuxSll2(h), b) {
            return Next::Done;
        }
        self.cooked(h.hardware_type(), h.protocol(), h.payload())
    }

    fn arp(&mut self, b: &'a [u8]) -> Next<'a> {
        let a = check!(self, ArpPacket::new_checked(b), LayerKind::Arp, b);
        self.push(Layer::Arp(a), b);
        Next::Done
    }

    fn ip_guess(&mut self, b: &'a [u8]) -> Next<'a> {
        match b.first().map(|v| v >> 4) {
            None => self.fail(ErrorKind::Truncated, LayerKind::Ipv4, b),
            Some(4) => Next::Ipv4(b),
            Some(6) => Next::Ipv6(b),
            Some(_) => self.fail(ErrorKind::Malformed, LayerKind::Ipv4, b),
        }
    }

    fn ipv4(&mut self, b: &'a [u8]) -> Next<'a> {
        let p = check!(self, Ipv4Packet::new_checked(b), LayerKind::Ipv4, b);
        let index = self.d.len;
        if !self.push(Layer::Ipv4(p), b) {
            return Next::Done;
        }
        self.d.inner_ip = index;
        self.first_frag = p.more_frags();
        let total = p.total_len() as usize;
        if total != 0 {
            self.bound(total, b.len());
        }
        let payload = p.payload();
        if p.frag_offset() != 0 {
            // a later fragment: its transport header is in the first one
            return Next::Payload(payload);
        }
        Next::Upper(p.protocol(), false, payload)
    }

    fn ipv6(&mut self, b: &'a [u8]) -> Next<'a> {
        let p = check!(self, Ipv6Packet::new_checked(b), LayerKind::Ipv6, b);
        let index = self.d.len;
        if !self.push(Layer::Ipv6(p), b) {
            return Next::Done;
        }
        self.d.inner_ip = index;
        self.first_frag = false;
        let n = p.payload_len() as usize;
        if n != 0 {
            self.bound(n, b.len() - ip6::HEADER_LEN);
        }
        Next::Upper(p.next_header(), true, p.payload())
    }

    fn upper(&mut self, proto: u8, v6: bool, b: &'a [u8]) -> Next<'a> {
        match proto {
            ip_proto::TCP => match TcpPacket::new_checked(b) {
                Ok(t) => self.last(Layer::Tcp(t), b),
                Err(k) => self.transport_fail(k, LayerKind::Tcp, b),
            },
            ip_proto::UDP => match UdpPacket::new_checked(b) {
                Ok(u) => self.udp(u, b),
                Err(k) => self.transport_fail(k, LayerKind::Udp, b),
            },
            ip_proto::ICMP => match IcmpPacket::new_checked(b) {
                Ok(i) => self.last(Layer::Icmp(i), b),
                Err(k) => self.transport_fail(k, LayerKind::Icmp, b),
            },
            ip_proto::ICMPV6 => match IcmpPacket::new_checked(b) {
                Ok(i) => self.last(Layer::Icmpv6(i), b),
                Err(k) => self.transport_fail(k, LayerKind::Icmpv6, b),
            },
            ip_proto::SCTP => match SctpPacket::new_checked(b) {
                Ok(s) => self.last(Layer::Sctp(s), b),
                Err(k) => self.transport_fail(k, LayerKind::Sctp, b),
            },
            ip_proto::GRE => Next::Gre(b),
            ip_proto::IPIP => {
                if self.enter_tunnel(LayerKind::Ipv4, b) {
                    Next::Ipv4(b)
                } else {
                    Next::Done
                }
            }
            ip_proto::IPV6 => {
                if self.enter_tunnel(LayerKind::Ipv6, b) {
                    Next::Ipv6(b)
                } else {
                    Next::Done
                }
            }
            p if v6 && ip6::is_extension(p) => self.ipv6_ext(p, b),
            _ => Next::Payload(b),
        }
    }

    fn ipv6_ext(&mut self, kind: u8, b: &'a [u8]) -> Next<'a> {
        let (header, rest) = check!(self, Ipv6ExtHeader::split(kind, b), LayerKind::Ipv6Ext, b);
        if !self.push(Layer::Ipv6Ext { kind, header }, b) {
            return Next::Done;
        }
        if kind == ip_proto::FRAGMENT {
            let f = Ipv6FragmentHeader::new_unchecked(header.as_bytes());
            if f.frag_offset() != 0 {
                return Next::Payload(rest);
            }
            self.first_frag = f.more_frags();
        }
        Next::Upper(header.next_header(), true, rest)
    }

    /// Pushes a layer after which nothing is decoded.
    #[inline]
    fn last(&mut self, layer: Layer<'a>, at: &'a [u8]) -> Next<'a> {
        self.push(layer, at);
        Next::Done
    }

    /// A transport header that does not fit. In a first fragment that is no error: the header
    /// continues in the next fragment (a "tiny fragment"), so the bytes stay a payload.
    #[cold]
    fn transport_fail(&mut self, k: ErrorKind, layer: LayerKind, b: &'a [u8]) -> Next<'a> {
        if k == ErrorKind::Truncated && self.first_frag && self.bounded {
            Next::Payload(b)
        } else {
            self.fail(k, layer, b)
        }
    }

    fn udp(&mut self, u: UdpPacket<&'a [u8]>, b: &'a [u8]) -> Next<'a> {
        if !self.push(Layer::Udp(u), b) {
            return Next::Done;
        }
        let n = u.len() as usize;
        if n != 0 {
            self.bound(n, b.len());
        }
        if u.dst_port() == vxlan::UDP_PORT {
            // The port is a hint, the I flag the confirmation (as Suricata checks it); an empty
            // payload is plain UDP unless the capture cut it.
            let p = u.payload();
            match p.first() {
                None if u.clipped() => return self.fail(ErrorKind::Truncated, LayerKind::Vxlan, p),
                Some(f) if f & vxlan::FLAG_I != 0 && self.enter_tunnel(LayerKind::Vxlan, p) => {
                    return Next::Vxlan(p);
                }
                _ => {}
            }
        }
        Next::Done
    }

    fn gre(&mut self, b: &'a [u8]) -> Next<'a> {
        let g = check!(self, GrePacket::new_checked(b), LayerKind::Gre, b);
        if !self.enter_tunnel(LayerKind::Gre, b) || !self.push(Layer::Gre(g), b) {
            return Next::Done;
        }
        let rest = g.payload();
        match g.protocol() {
            // ERSPAN type I has no header and no sequence number; type II has both
            ethertype::ERSPAN if g.seq_present() => Next::Erspan(rest),
            ethertype::ERSPAN => Next::Ethernet(rest),
            ethertype::ERSPAN3 => Next::Erspan(rest),
            t => self.ethertype(t, rest),
        }
    }

    fn erspan(&mut self, b: &'a [u8]) -> Next<'a> {
        let e = check!(self, ErspanHeader::new_checked(b), LayerKind::Erspan, b);
        if !self.push(Layer::Erspan(e), b) {
            return Next::Done;
        }
        Next::Ethernet(e.payload())
    }

    fn vxlan(&mut self, b: &'a [u8]) -> Next<'a> {
        let v = check!(self, VxlanHeader::new_checked(b), LayerKind::Vxlan, b);
        if !self.push(Layer::Vxlan(v), b) {
            return Next::Done;
        }
        Next::Ethernet(v.payload())
    }

    fn payload(&mut self, b: &'a [u8]) -> Next<'a> {
        self.push(Layer::Payload(b), b);
        Next::Done
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::decoded::NONE;

    #[test]
    fn unknown_link_type() {
        let d = decode(LinkType(147), &[1, 2, 3]);
        assert!(d.layers().is_empty());
        let e = d.error().unwrap();
        assert_eq!(e.kind, ErrorKind::Unsupported);
        assert_eq!(e.offset, 0);
    }

    #[test]
    fn empty_frames() {
        for lt in [0, 1, 9, 12, 14, 50, 51, 101, 104, 108, 113, 228, 229, 276] {
            let d = decode(LinkType(lt), &[]);
            assert!(d.layers().is_empty(), "{lt}");
            assert_eq!(d.error().unwrap().kind, ErrorKind::Truncated, "{lt}");
        }
    }

    #[test]
    fn inner_ip_marker() {
        let d = decode(LinkType::ETHERNET, &[0; 14]);
        assert_eq!(d.inner_ip, NONE);
    }
}
