//! IPv6 fixed headers (RFC 8200) and the extension headers that may follow them: hop-by-hop,
//! routing, fragment, destination options, AH (RFC 4302), mobility, HIP and shim6.

use core::net::Ipv6Addr;

use weir_packet::bytes::{be16, be32};

use crate::{ip_proto, ErrorKind, Result};

mod field {
    use crate::Field;
    pub(super) const VER_TC_FLOW: Field = 0..4;
    pub(super) const PAYLOAD_LEN: Field = 4..6;
    pub(super) const NEXT_HEADER: usize = 6;
    pub(super) const HOP_LIMIT: usize = 7;
    pub(super) const SRC_ADDR: Field = 8..24;
    pub(super) const DST_ADDR: Field = 24..40;
}

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

view! {
    /// A view of an IPv6 packet: fixed header and payload (extension headers included).
    ///
    /// As with IPv4, [`payload`](Ipv6Packet::payload) is clamped to the payload length and to the
    /// buffer; a payload length of 0 (jumbogram, or segmentation offload) means "to the end of the
    /// buffer".
    Ipv6Packet
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Checks that the 40-byte header is there (`Truncated`) and that the version is 6
    /// (`Malformed`).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else if self.version() != 6 {
            Err(ErrorKind::Malformed)
        } else {
            Ok(())
        }
    }

    #[inline]
    fn first_word(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VER_TC_FLOW.start)
    }

    /// Version (6).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Traffic class (DSCP and ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.first_word() >> 20) as u8
    }

    /// Flow label (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.first_word() & 0x000f_ffff
    }

    /// Payload length: everything after the fixed header, extension headers included.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PAYLOAD_LEN.start)
    }

    /// Next header: the first extension header or the upper-layer protocol.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }

    /// True when the payload length claims more bytes than the buffer holds.
    #[inline]
    pub fn clipped(&self) -> bool {
        HEADER_LEN + self.payload_len() as usize > self.buffer.as_ref().len()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv6Packet<&'a T> {
    /// The payload (extension headers included), clamped to the payload length and the buffer.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = &self.buffer.as_ref()[HEADER_LEN..];
        let n = self.payload_len() as usize;
        if n == 0 {
            b
        } else {
            &b[..n.min(b.len())]
        }
    }
}

/// True when `proto` names an IPv6 extension header this crate walks through (fragment and AH
/// included; ESP and No Next Header excluded, as nothing readable follows them).
#[inline]
pub fn is_extension(proto: u8) -> bool {
    matches!(
        proto,
        ip_proto::HOPOPT
            | ip_proto::ROUTING
            | ip_proto::FRAGMENT
            | ip_proto::DSTOPTS
            | ip_proto::AH
            | ip_proto::MOBILITY
            | ip_proto::HIP
            | ip_proto::SHIM6
    )
}

/// Length in bytes of an extension header of type `kind` whose length byte (the second byte) is
/// `len_byte`: AH counts 4-byte units minus 2, the fragment header is always 8, the others count
/// 8-byte units minus 1.
#[inline]
pub fn extension_len(kind: u8, len_byte: u8) -> usize {
    match kind {
        ip_proto::AH => (len_byte as usize + 2) * 4,
        ip_proto::FRAGMENT => 8,
        _ => (len_byte as usize + 1) * 8,
    }
}

view! {
    /// A view of exactly one IPv6 extension header (its type is known from the header before it,
    /// and kept beside the view in [`Layer::Ipv6Ext`](crate::Layer::Ipv6Ext)).
    Ipv6ExtHeader
}

impl<T: AsRef<[u8]>> Ipv6ExtHeader<T> {
    /// Checks that the two common bytes (next header, length) are there. The view's buffer is
    /// meant to be the header exactly, as [`Ipv6ExtHeader::split`] cuts it.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < 2 {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// The header that follows this one.
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// The raw length byte (its unit depends on the header type, see [`extension_len`]).
    #[inline]
    pub fn len_byte(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Length of the header in bytes (the buffer's length).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.buffer.as_ref().len()
    }

    /// The bytes after the two common ones: options, routing data, fragment fields, AH fields.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[2..]
    }
}

impl<'a> Ipv6ExtHeader<&'a [u8]> {
    /// Cuts one extension header of type `kind` off the front of `data`: returns the header and
    /// the bytes after it, or `Truncated` when `data` is shorter than the header says.
    #[inline]
    pub fn split(kind: u8, data: &'a [u8]) -> Result<(Self, &'a [u8])> {
        if data.len() < 2 {
            return Err(ErrorKind::Truncated);
        }
        let n = extension_len(kind, data[1]);
        if data.len() < n {
            return Err(ErrorKind::Truncated);
        }
        let (h, rest) = data.split_at(n);
        Ok((Ipv6ExtHeader::new_unchecked(h), rest))
    }
}

mod frag_field {
    use crate::Field;
    pub(super) const NEXT_HEADER: usize = 0;
    pub(super) const OFF_M: Field = 2..4;
    pub(super) const IDENT: Field = 4..8;
}

/// Length of the IPv6 fragment header.
pub const FRAGMENT_LEN: usize = frag_field::IDENT.end;

view! {
    /// A view of an IPv6 fragment header (RFC 8200 section 4.5).
    Ipv6FragmentHeader
}

impl<T: AsRef<[u8]>> Ipv6FragmentHeader<T> {
    /// Checks that the 8-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < FRAGMENT_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// The header that follows (in the reassembled packet).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[frag_field::NEXT_HEADER]
    }

    /// Fragment offset in bytes (the field is in 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        be16(self.buffer.as_ref(), frag_field::OFF_M.start) & 0xfff8
    }

    /// More fragments.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), frag_field::OFF_M.start) & 1 != 0
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u32 {
        be32(self.buffer.as_ref(), frag_field::IDENT.start)
    }
}

/// The construct side (smoltcp's setters): write the fields of a header in place.
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets version 6, the traffic class and the flow label (cut to 20 bits).
    #[inline]
    pub fn set_first_word(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0x000f_ffff);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the payload length.
    #[inline]
    pub fn set_payload_len(&mut self, n: u16) {
        self.buffer.as_mut()[field::PAYLOAD_LEN].copy_from_slice(&n.to_be_bytes());
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, p: u8) {
        self.buffer.as_mut()[field::NEXT_HEADER] = p;
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, h: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = h;
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// The bytes after the fixed header, to write the next layer into.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

/// The fields of an IPv6 header, to [`emit`](Ipv6Repr::emit) into a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Next header.
    pub next_header: u8,
    /// Payload length in bytes.
    pub payload_len: usize,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `packet`.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) {
        packet.set_first_word(self.traffic_class, self.flow_label);
        packet.set_payload_len(self.payload_len as u16);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // version 6, traffic class 0xa5, flow label 0x12345, payload length 8, next header 44
    // (fragment), hop limit 255, 2001:db8::1 -> ff02::2, then a fragment header: next 17, offset
    // 0x0b9 units (1480 bytes), M set, id 0xdeadbeef. Two bytes of padding follow.
    static PACKET: [u8; 50] = [
        0x6a, 0x51, 0x23, 0x45, 0x00, 0x08, 44, 255, //
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, //
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, //
        17, 0, 0x05, 0xc9, 0xde, 0xad, 0xbe, 0xef, 0, 0,
    ];

    #[test]
    fn deconstruct() {
        let p = Ipv6Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0xa5);
        assert_eq!(p.flow_label(), 0x12345);
        assert_eq!(p.payload_len(), 8);
        assert_eq!(p.next_header(), 44);
        assert_eq!(p.hop_limit(), 255);
        assert_eq!(p.src_addr(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst_addr(), "ff02::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.payload(), &PACKET[40..48]);
        assert!(!p.clipped());

        let (h, rest) = Ipv6ExtHeader::split(44, p.payload()).unwrap();
        assert_eq!(h.next_header(), 17);
        assert_eq!(h.header_len(), 8);
        assert!(rest.is_empty());
        let f = Ipv6FragmentHeader::new_checked(h.into_inner()).unwrap();
        assert_eq!(f.next_header(), 17);
        assert_eq!(f.frag_offset(), 1480);
        assert!(f.more_frags());
        assert_eq!(f.ident(), 0xdeadbeef);
    }

    #[test]
    fn short_and_bad_version() {
        assert_eq!(
            Ipv6Packet::new_checked(&PACKET[..39]),
            Err(ErrorKind::Truncated)
        );
        let mut b = PACKET;
        b[0] = 0x4a;
        assert_eq!(Ipv6Packet::new_checked(&b[..]), Err(ErrorKind::Malformed));
        let p = Ipv6Packet::new_checked(&PACKET[..44]).unwrap();
        assert!(p.clipped());
        assert_eq!(p.payload().len(), 4);
        assert_eq!(
            Ipv6FragmentHeader::new_checked(&PACKET[40..47]),
            Err(ErrorKind::Truncated)
        );
    }

    #[test]
    fn extension_lengths() {
        assert_eq!(extension_len(ip_proto::HOPOPT, 0), 8);
        assert_eq!(extension_len(ip_proto::ROUTING, 2), 24);
        assert_eq!(extension_len(ip_proto::FRAGMENT, 200), 8);
        assert_eq!(extension_len(ip_proto::AH, 4), 24);
        assert!(is_extension(ip_proto::DSTOPTS));
        assert!(!is_extension(ip_proto::ESP));
        assert!(!is_extension(ip_proto::NO_NEXT));
        assert!(!is_extension(ip_proto::TCP));
    }

    #[test]
    fn ext_split() {
        // destination options: next 6, length 1 -> 16 bytes
        let mut d = [0u8; 20];
        d[0] = 6;
        d[1] = 1;
        let (h, rest) = Ipv6ExtHeader::split(ip_proto::DSTOPTS, &d[..]).unwrap();
        assert_eq!(h.next_header(), 6);
        assert_eq!(h.len_byte(), 1);
        assert_eq!(h.header_len(), 16);
        assert_eq!(h.data().len(), 14);
        assert_eq!(rest.len(), 4);
        assert_eq!(
            Ipv6ExtHeader::split(ip_proto::DSTOPTS, &d[..15]),
            Err(ErrorKind::Truncated)
        );
        assert_eq!(
            Ipv6ExtHeader::split(ip_proto::DSTOPTS, &d[..1]),
            Err(ErrorKind::Truncated)
        );
        assert!(Ipv6ExtHeader::new_checked(&d[..1]).is_err());
    }
}
