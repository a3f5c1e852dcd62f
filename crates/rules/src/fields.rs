//! [`PacketFields`]: the handful of header fields the rule engine looks at, extracted once per
//! packet, and [`fields_from_frame`], which fills them with weir-decode's decoder.
//!
//! The struct is small and `Copy` and knows nothing of the decoder, so the pipeline can fill it
//! from whatever parser it runs (the fast header parser `weir_decode::quick` will replace
//! [`fields_from_frame`] in one place).

use core::net::IpAddr;

use weir_decode::{decode_into, Decoded, Layer, LinkType, Transport};

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

/// Decodes `frame` with weir-decode (reusing `scratch`) and extracts its [`PacketFields`].
/// `wire_len` is the packet's length on the wire.
pub fn fields_from_frame<'a>(
    scratch: &mut Decoded<'a>,
    link: LinkType,
    frame: &'a [u8],
    wire_len: u32,
) -> PacketFields {
    decode_into(scratch, link, frame);
    fields_from_decoded(scratch, frame, wire_len)
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
