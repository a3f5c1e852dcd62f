//! IPv4 headers (RFC 791): addresses, lengths, fragmentation fields, options.

use core::net::Ipv4Addr;

use weir_packet::bytes::be16;

use crate::{ErrorKind, Result};

mod field {
    use crate::Field;
    pub(super) const VER_IHL: usize = 0;
    pub(super) const TOS: usize = 1;
    pub(super) const TOTAL_LEN: Field = 2..4;
    pub(super) const IDENT: Field = 4..6;
    pub(super) const FLG_OFF: Field = 6..8;
    pub(super) const TTL: usize = 8;
    pub(super) const PROTOCOL: usize = 9;
    pub(super) const CHECKSUM: Field = 10..12;
    pub(super) const SRC_ADDR: Field = 12..16;
    pub(super) const DST_ADDR: Field = 16..20;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

view! {
    /// A view of an IPv4 packet: header, options and payload.
    ///
    /// The buffer may be longer than the packet (Ethernet padding) or shorter (a packet cut by
    /// the snap length): [`payload`](Ipv4Packet::payload) is clamped to both the total length and
    /// the buffer. A total length of 0 (seen on captures of TCP segmentation offload) means "up to
    /// the end of the buffer".
    Ipv4Packet
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Checks the header: 20 bytes present (`Truncated`), version 4 and IHL at least 5
    /// (`Malformed`), the whole header with options present (`Truncated`), and a total length of
    /// 0 or at least the header length (`Malformed`). A total length beyond the buffer is
    /// accepted (see [`clipped`](Self::clipped)).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(ErrorKind::Truncated);
        }
        if self.version() != 4 || self.ihl() < 5 {
            return Err(ErrorKind::Malformed);
        }
        let hl = self.header_len();
        if len < hl {
            return Err(ErrorKind::Truncated);
        }
        let total = self.total_len() as usize;
        if total != 0 && total < hl {
            return Err(ErrorKind::Malformed);
        }
        Ok(())
    }

    /// Version (4).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Internet header length, in 32-bit words.
    #[inline]
    pub fn ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] & 0x0f
    }

    /// Header length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.ihl() as usize * 4
    }

    /// The whole type-of-service byte (DSCP and ECN).
    #[inline]
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[field::TOS]
    }

    /// Differentiated services code point (the upper 6 bits of the TOS byte).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }

    /// Explicit congestion notification (the lower 2 bits of the TOS byte).
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.tos() & 0x03
    }

    /// Total length field: header and payload, in bytes.
    #[inline]
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TOTAL_LEN.start)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), field::IDENT.start)
    }

    /// The reserved ("evil") flag bit.
    #[inline]
    pub fn reserved_flag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x8000 != 0
    }

    /// Don't fragment.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x4000 != 0
    }

    /// More fragments.
    #[inline]
    pub fn more_frags(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x2000 != 0
    }

    /// Fragment offset in bytes (the field is in 8-byte units).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x1fff) << 3
    }

    /// True when this packet is a fragment (more fragments, or a non-zero offset).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        be16(self.buffer.as_ref(), field::FLG_OFF.start) & 0x3fff != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload (6 TCP, 17 UDP...).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum, as carried (not verified).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// True when the total length claims more bytes than the buffer holds (the packet was cut,
    /// by the snap length or otherwise).
    #[inline]
    pub fn clipped(&self) -> bool {
        self.total_len() as usize > self.buffer.as_ref().len()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Ipv4Packet<&'a T> {
    /// The options, between the fixed header and the payload.
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload, clamped to the total length and to the buffer.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let total = self.total_len() as usize;
        let end = if total == 0 {
            b.len()
        } else {
            total.min(b.len())
        };
        &b[self.header_len()..end]
    }
}

/// The construct side (smoltcp's setters): write the fields of a header in place.
impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Sets version 4 and the header length in 32-bit words.
    #[inline]
    pub fn set_version_ihl(&mut self, ihl: u8) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | (ihl & 0x0f);
    }

    /// Sets the type-of-service byte.
    #[inline]
    pub fn set_tos(&mut self, tos: u8) {
        self.buffer.as_mut()[field::TOS] = tos;
    }

    /// Sets the total length.
    #[inline]
    pub fn set_total_len(&mut self, n: u16) {
        self.buffer.as_mut()[field::TOTAL_LEN].copy_from_slice(&n.to_be_bytes());
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, id: u16) {
        self.buffer.as_mut()[field::IDENT].copy_from_slice(&id.to_be_bytes());
    }

    /// Sets the flags and the fragment offset (in bytes, a multiple of 8).
    #[inline]
    pub fn set_frag(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = (u16::from(dont_frag) << 14) | (u16::from(more_frags) << 13) | (offset >> 3);
        self.buffer.as_mut()[field::FLG_OFF].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the time to live.
    #[inline]
    pub fn set_ttl(&mut self, ttl: u8) {
        self.buffer.as_mut()[field::TTL] = ttl;
    }

    /// Sets the payload's protocol.
    #[inline]
    pub fn set_protocol(&mut self, p: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = p;
    }

    /// Sets the header checksum field as given.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets());
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets());
    }

    /// Computes the header checksum (options included) and writes it.
    #[inline]
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = crate::checksum::fold(crate::checksum::sum16(0, &self.buffer.as_ref()[..hl]));
        self.set_checksum(c);
    }

    /// The bytes after the header (options included in the header), to write the next layer.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

/// The fields of an IPv4 header without options, to [`emit`](Ipv4Repr::emit) into a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload length in bytes (the total length is 20 more).
    pub payload_len: usize,
    /// Type-of-service byte.
    pub tos: u8,
    /// Time to live.
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// Don't-fragment flag.
    pub dont_frag: bool,
}

impl Ipv4Repr {
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (no options, not a fragment) into `packet`, checksum included.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        packet.set_version_ihl(5);
        packet.set_tos(self.tos);
        packet.set_total_len((HEADER_LEN + self.payload_len) as u16);
        packet.set_ident(self.ident);
        packet.set_frag(self.dont_frag, false, 0);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // IHL 6 (one option word), TOS 0xb9 (DSCP 46, ECN 1), total 28, id 0x1234, MF set, offset
    // 0x0102 units = 2064 bytes, TTL 64, UDP, checksum 0xabcd, 10.0.0.1 -> 192.168.1.2, option
    // word 01 01 01 00, 4 bytes of payload, then 2 bytes of padding past the total length.
    static PACKET: [u8; 30] = [
        0x46, 0xb9, 0x00, 0x1c, 0x12, 0x34, 0x21, 0x02, 0x40, 0x11, 0xab, 0xcd, 10, 0, 0, 1, 192,
        168, 1, 2, 0x01, 0x01, 0x01, 0x00, 0xde, 0xad, 0xbe, 0xef, 0xff, 0xff,
    ];

    #[test]
    fn deconstruct() {
        let p = Ipv4Packet::new_checked(&PACKET[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.ihl(), 6);
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.tos(), 0xb9);
        assert_eq!(p.dscp(), 46);
        assert_eq!(p.ecn(), 1);
        assert_eq!(p.total_len(), 28);
        assert_eq!(p.ident(), 0x1234);
        assert!(!p.reserved_flag());
        assert!(!p.dont_frag());
        assert!(p.more_frags());
        assert_eq!(p.frag_offset(), 0x0102 * 8);
        assert!(p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.checksum(), 0xabcd);
        assert_eq!(p.src_addr(), Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(p.dst_addr(), Ipv4Addr::new(192, 168, 1, 2));
        assert_eq!(p.options(), &[0x01, 0x01, 0x01, 0x00]);
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert!(!p.clipped());
    }

    #[test]
    fn flags() {
        let mut b = PACKET;
        b[6] = 0xc0; // reserved + DF, offset 0
        b[7] = 0x00;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert!(p.reserved_flag());
        assert!(p.dont_frag());
        assert!(!p.more_frags());
        assert_eq!(p.frag_offset(), 0);
        assert!(!p.is_fragment());
    }

    #[test]
    fn short_header() {
        assert_eq!(
            Ipv4Packet::new_checked(&PACKET[..19]),
            Err(ErrorKind::Truncated)
        );
        // fixed header there, option word cut
        assert_eq!(
            Ipv4Packet::new_checked(&PACKET[..23]),
            Err(ErrorKind::Truncated)
        );
    }

    #[test]
    fn bad_ihl_and_version() {
        let mut b = PACKET;
        b[0] = 0x44;
        assert_eq!(Ipv4Packet::new_checked(&b[..]), Err(ErrorKind::Malformed));
        b[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&b[..]), Err(ErrorKind::Malformed));
    }

    #[test]
    fn total_len_below_header() {
        let mut b = PACKET;
        b[3] = 23; // IHL says 24
        assert_eq!(Ipv4Packet::new_checked(&b[..]), Err(ErrorKind::Malformed));
        b[3] = 24; // header only: empty payload
        assert_eq!(Ipv4Packet::new_checked(&b[..]).unwrap().payload(), &[]);
    }

    #[test]
    fn total_len_beyond_capture_is_clipped() {
        let p = Ipv4Packet::new_checked(&PACKET[..26]).unwrap();
        assert!(p.clipped());
        assert_eq!(p.payload(), &[0xde, 0xad]);
    }

    #[test]
    fn zero_total_len_takes_the_buffer() {
        let mut b = PACKET;
        b[2] = 0;
        b[3] = 0;
        let p = Ipv4Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.payload().len(), 6);
        assert!(!p.clipped());
    }
}
