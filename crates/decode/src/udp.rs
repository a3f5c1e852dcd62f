//! UDP headers (RFC 768): ports, length, checksum, payload.

use weir_packet::bytes::be16;

use crate::{ErrorKind, Result};

mod field {
    use crate::Field;
    pub(super) const SRC_PORT: Field = 0..2;
    pub(super) const DST_PORT: Field = 2..4;
    pub(super) const LENGTH: Field = 4..6;
    pub(super) const CHECKSUM: Field = 6..8;
}

/// Length of a UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

view! {
    /// A view of a UDP datagram. A length field of 0 (jumbogram, or segmentation offload) means
    /// "to the end of the buffer".
    UdpPacket
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Checks that the 8-byte header is there (`Truncated`) and that the length field is 0 or at
    /// least 8 (`Malformed`). A length beyond the buffer is accepted and clamped.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else if (1..HEADER_LEN as u16).contains(&self.len()) {
            Err(ErrorKind::Malformed)
        } else {
            Ok(())
        }
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT.start)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT.start)
    }

    /// Length field: header and payload.
    #[inline]
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH.start)
    }

    /// Checksum, as carried (0 = none).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// True when the length field claims more bytes than the buffer holds.
    #[inline]
    pub fn clipped(&self) -> bool {
        self.len() as usize > self.buffer.as_ref().len()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> UdpPacket<&'a T> {
    /// The payload, clamped to the length field and to the buffer.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let n = self.len() as usize;
        let end = if n == 0 { b.len() } else { n.min(b.len()) };
        &b[HEADER_LEN..end.max(HEADER_LEN)]
    }
}

/// The construct side (smoltcp's setters): write the fields of a header in place.
impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, p: u16) {
        self.buffer.as_mut()[field::SRC_PORT].copy_from_slice(&p.to_be_bytes());
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, p: u16) {
        self.buffer.as_mut()[field::DST_PORT].copy_from_slice(&p.to_be_bytes());
    }

    /// Sets the length field (header and payload).
    #[inline]
    pub fn set_len(&mut self, n: u16) {
        self.buffer.as_mut()[field::LENGTH].copy_from_slice(&n.to_be_bytes());
    }

    /// Sets the checksum field as given.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Computes the checksum over the pseudo-header sum `pseudo` (from
    /// [`checksum::pseudo_header`](crate::checksum::pseudo_header), without the length) and the
    /// datagram (the length field's bytes, clamped to the buffer), and writes it; a computed 0 is
    /// sent as 0xffff (0 means "no checksum").
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let n = usize::from(self.len()).min(self.buffer.as_ref().len());
        let acc = crate::checksum::sum16(pseudo + n as u32, &self.buffer.as_ref()[..n]);
        let c = crate::checksum::fold(acc);
        self.set_checksum(if c == 0 { 0xffff } else { c });
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // 53 -> 5353, length 11, checksum 0xbeef, 3 bytes of payload and one of padding.
    static DATAGRAM: [u8; 12] = [0x00, 0x35, 0x14, 0xe9, 0x00, 0x0b, 0xbe, 0xef, 1, 2, 3, 0];

    #[test]
    fn deconstruct() {
        let u = UdpPacket::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(u.src_port(), 53);
        assert_eq!(u.dst_port(), 5353);
        assert_eq!(u.len(), 11);
        assert_eq!(u.checksum(), 0xbeef);
        assert_eq!(u.payload(), &[1, 2, 3]);
        assert!(!u.clipped());
    }

    #[test]
    fn lengths() {
        assert_eq!(
            UdpPacket::new_checked(&DATAGRAM[..7]),
            Err(ErrorKind::Truncated)
        );
        let mut b = DATAGRAM;
        b[5] = 7;
        assert_eq!(UdpPacket::new_checked(&b[..]), Err(ErrorKind::Malformed));
        b[5] = 0;
        assert_eq!(UdpPacket::new_checked(&b[..]).unwrap().payload().len(), 4);
        b[5] = 8;
        assert!(UdpPacket::new_checked(&b[..]).unwrap().payload().is_empty());
        b[5] = 40;
        let u = UdpPacket::new_checked(&b[..]).unwrap();
        assert!(u.clipped());
        assert_eq!(u.payload().len(), 4);
    }
}
