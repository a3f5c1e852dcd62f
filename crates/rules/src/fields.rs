//! [`PacketFields`]: the handful of header fields the rule engine looks at, extracted once per
//! packet, and [`fields_from_frame`], which fills them with weir-decode's fast header parser
//! ([`weir_decode::quick`]) and falls back to the full decoder for every frame that parser
//! leaves to it (tunnels, ARP, IPv6 extension headers, truncated headers...).
//!
//! Both ways give the same fields: `tests/corpus.rs` compares them on every corpus packet and on
//! every truncation of it. The struct is small and `Copy` and knows nothing of the decoder, so
//! the pipeline can fill it from whatever parser it runs.

use core::net::IpAddr;

use weir_decode::quick::{self, Upper};
use weir_decode::{decode_into, Decoded, Layer, LinkType, Transport};
use weir_packet::bytes::be16_checked;

/// "No VLAN tag" in [`PacketFields::vlan`].
pub const NO_VLAN: u16 = 0xffff;
/// "Layer not present" in the offset fields of [`PacketFields`].
pub const NO_OFFSET: u32 = u32::MAX;

/// The fields of one packet the rules match on. Addresses are `u128`: an IPv4 address sits in
/// the low 32 bits (`u32::from(Ipv4Addr)`), and [`family`](Self::family) says which it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketFields {
    /// Outermost VLAN id, or [`NO_VLAN`].
    pub vlan: u16,
    /// 4, 6, or 0 when the packet has no IP header (then addresses, protocol and ports are 0).
    pub family: u8,
    /// IP protocol (innermost IP header; the upper protocol after IPv6 extension headers).
    pub proto: u8,
    /// Source address.
    pub src: u128,
    /// Destination address.
    pub dst: u128,
    /// Source port (TCP, UDP, SCTP; 0 otherwise).
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u8,
    /// True when the packet is TCP and its transport header was decoded.
    pub is_tcp: bool,
    /// TCP sequence number (0 otherwise).
    pub tcp_seq: u32,
    /// Length on the wire.
    pub wire_len: u32,
    /// Captured length (the bytes handed to the engine).
    pub cap_len: u32,
    /// Offset of the innermost IP header, or [`NO_OFFSET`].
    pub l3: u32,
    /// Offset of the transport header, or [`NO_OFFSET`].
    pub l4: u32,
    /// Offset of the transport payload, or [`NO_OFFSET`].
    pub payload: u32,
    /// Length of the transport payload in the captured bytes (0 without one).
    pub payload_len: u32,
}

impl PacketFields {
    /// Fields of a packet with nothing decoded: no IP, no VLAN, only lengths.
    pub fn empty(cap_len: u32, wire_len: u32) -> PacketFields {
        PacketFields {
            vlan: NO_VLAN,
            wire_len,
            cap_len,
            l3: NO_OFFSET,
            l4: NO_OFFSET,
            payload: NO_OFFSET,
            ..PacketFields::default()
        }
    }

    /// The transport payload inside `bytes` (the packet these fields were taken from).
    #[inline]
    pub fn payload_bytes<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        if self.payload == NO_OFFSET {
            return &[];
        }
        let start = self.payload as usize;
        let end = start
            .saturating_add(self.payload_len as usize)
            .min(bytes.len());
        bytes.get(start..end).unwrap_or(&[])
    }
}

/// Encodes an address the way [`PacketFields`] holds it, with its family.
pub fn addr_bits(a: IpAddr) -> (u8, u128) {
    match a {
        IpAddr::V4(v) => (4, u128::from(u32::from(v))),
        IpAddr::V6(v) => (6, u128::from(v)),
    }
}

/// Offset of `part` inside `frame` (both borrow the same bytes).
fn offset_in(frame: &[u8], part: &[u8]) -> u32 {
    (part.as_ptr() as usize).wrapping_sub(frame.as_ptr() as usize) as u32
}

/// Extracts the [`PacketFields`] of `frame` (link type `link`, `wire_len` bytes on the wire):
/// with the fast header parser when it covers the frame, else with the full decoder (reusing
/// `scratch`). The fields are the same either way ([`fields_from_decoded`] of the decoded
/// frame).
#[inline]
pub fn fields_from_frame<'a>(
    scratch: &mut Decoded<'a>,
    link: LinkType,
    frame: &'a [u8],
    wire_len: u32,
) -> PacketFields {
    if let Some(f) = quick_fields(link, frame, wire_len) {
        return f;
    }
    decode_into(scratch, link, frame);
    fields_from_decoded(scratch, frame, wire_len)
}

/// [`fields_from_frame`] without a scratch [`Decoded`] to lend: the fast parser's fields, or
/// (for the frames it leaves to the decoder) the decoder's, with a `Decoded` of its own.
#[inline]
pub fn fields(link: LinkType, frame: &[u8], wire_len: u32) -> PacketFields {
    match quick_fields(link, frame, wire_len) {
        Some(f) => f,
        None => decoded_fields(link, frame, wire_len),
    }
}

#[cold]
#[inline(never)]
fn decoded_fields(link: LinkType, frame: &[u8], wire_len: u32) -> PacketFields {
    let mut d = Decoded::new();
    decode_into(&mut d, link, frame);
    fields_from_decoded(&d, frame, wire_len)
}

/// Bytes before the network header of `link` (the link types [`quick::parse`] covers).
#[inline(always)]
fn link_header_len(link: LinkType) -> Option<usize> {
    Some(match link {
        LinkType::ETHERNET => 14,
        LinkType::LINUX_SLL => 16,
        LinkType::LINUX_SLL2 => 20,
        LinkType::NULL | LinkType::LOOP => 4,
        LinkType::RAW | LinkType::RAW_12 | LinkType::RAW_14 | LinkType::IPV4 | LinkType::IPV6 => 0,
        _ => return None,
    })
}

/// The fields through [`quick::parse`]; `None` leaves the frame to the decoder (the frames the
/// parser refuses, and IPv6 with extension headers, whose lengths it does not keep).
#[inline(always)]
fn quick_fields(link: LinkType, frame: &[u8], wire_len: u32) -> Option<PacketFields> {
    let h = quick::parse(link, frame)?;
    if h.ipv6_extensions != 0 {
        return None;
    }
    let cap = frame.len();
    let l3 = link_header_len(link)? + 4 * usize::from(h.vlan_tags) + 4 * usize::from(h.mpls_labels);
    let mut f = PacketFields::empty(cap as u32, wire_len);
    if let Some(v) = h.vlan() {
        f.vlan = v;
    }
    f.family = h.version();
    f.src = h.src;
    f.dst = h.dst;
    f.proto = h.proto;
    f.l3 = l3 as u32;
    // the transport header and the end of the IP packet in the captured bytes, as the decoder
    // bounds them (a length field of 0 means "up to the end of the capture")
    let (l4, ip_end) = if h.v6 {
        let n = h.ip_len as usize - 40;
        (l3 + 40, if n == 0 { cap } else { (l3 + 40 + n).min(cap) })
    } else {
        let hl = usize::from(frame.get(l3)? & 0x0f) * 4;
        let total = h.ip_len as usize;
        (
            l3 + hl,
            if total == 0 {
                cap
            } else {
                (l3 + total).min(cap)
            },
        )
    };
    match h.upper {
        Upper::Tcp => {
            let doff = usize::from(frame.get(l4 + 12)? >> 4) * 4;
            f.l4 = l4 as u32;
            f.sport = h.src_port;
            f.dport = h.dst_port;
            f.tcp_flags = h.tcp_flags;
            f.is_tcp = true;
            f.tcp_seq = u32::from_be_bytes(*frame.get(l4 + 4..)?.first_chunk::<4>()?);
            f.payload = (l4 + doff) as u32;
            f.payload_len = ip_end.checked_sub(l4 + doff)? as u32;
        }
        Upper::Udp => {
            let len = usize::from(be16_checked(frame, l4 + 4)?);
            let end = if len == 0 {
                ip_end
            } else {
                (l4 + len).min(ip_end)
            };
            f.l4 = l4 as u32;
            f.sport = h.src_port;
            f.dport = h.dst_port;
            f.payload = (l4 + 8) as u32;
            f.payload_len = end.saturating_sub(l4 + 8) as u32;
        }
        Upper::Sctp => {
            f.l4 = l4 as u32;
            f.sport = h.src_port;
            f.dport = h.dst_port;
        }
        Upper::Icmp | Upper::Icmpv6 => f.l4 = l4 as u32,
        Upper::Other | Upper::LaterFragment => {}
    }
    Some(f)
}

/// Extracts [`PacketFields`] from an already decoded frame.
pub fn fields_from_decoded(d: &Decoded<'_>, frame: &[u8], wire_len: u32) -> PacketFields {
    let mut f = PacketFields::empty(frame.len() as u32, wire_len);
    if let Some(v) = d.vlan() {
        f.vlan = v;
    }
    let Some(i) = d.ip_index() else {
        return f;
    };
    let layers = d.layers();
    f.l3 = match layers[i] {
        Layer::Ipv4(p) => offset_in(frame, p.as_bytes()),
        Layer::Ipv6(p) => offset_in(frame, p.as_bytes()),
        _ => NO_OFFSET,
    };
    if let Some(ip) = d.ip() {
        let (fam, src) = addr_bits(ip.src);
        f.family = fam;
        f.src = src;
        f.dst = addr_bits(ip.dst).1;
        f.proto = ip.proto;
    }
    let mut j = i + 1;
    while let Some(Layer::Ipv6Ext { .. }) = layers.get(j) {
        j += 1;
    }
    let l4 = match layers.get(j) {
        Some(Layer::Tcp(t)) => Some(offset_in(frame, t.as_bytes())),
        Some(Layer::Udp(t)) => Some(offset_in(frame, t.as_bytes())),
        Some(Layer::Icmp(t)) | Some(Layer::Icmpv6(t)) => Some(offset_in(frame, t.as_bytes())),
        Some(Layer::Sctp(t)) => Some(offset_in(frame, t.as_bytes())),
        _ => None,
    };
    if let Some(o) = l4 {
        f.l4 = o;
    }
    match d.transport() {
        Some(Transport::Tcp {
            src,
            dst,
            flags,
            seq,
            payload,
            ..
        }) => {
            f.sport = src;
            f.dport = dst;
            f.tcp_flags = flags;
            f.tcp_seq = seq;
            f.is_tcp = true;
            f.payload = offset_in(frame, payload);
            f.payload_len = payload.len() as u32;
        }
        Some(Transport::Udp {
            src, dst, payload, ..
        }) => {
            f.sport = src;
            f.dport = dst;
            f.payload = offset_in(frame, payload);
            f.payload_len = payload.len() as u32;
        }
        Some(Transport::Sctp { src, dst, .. }) => {
            f.sport = src;
            f.dport = dst;
        }
        _ => {}
    }
    f
}
