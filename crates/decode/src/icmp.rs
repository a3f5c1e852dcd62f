//! ICMP (RFC 792) and ICMPv6 (RFC 4443) messages: type, code, and the echo identifier and
//! sequence number. Both share the 4-byte type/code/checksum start and one view.

use weir_packet::bytes::be16;

use crate::{ErrorKind, Result};

mod field {
    use crate::Field;
    pub(super) const TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const CHECKSUM: Field = 2..4;
    pub(super) const ECHO_IDENT: Field = 4..6;
    pub(super) const ECHO_SEQ: Field = 6..8;
}

/// Length every ICMP message has: type, code, checksum.
pub const MIN_LEN: usize = field::CHECKSUM.end;
/// Length of the full ICMP header (with the 4-byte rest-of-header word).
pub const HEADER_LEN: usize = field::ECHO_SEQ.end;

/// ICMP echo reply type.
pub const ECHO_REPLY: u8 = 0;
/// ICMP echo request type.
pub const ECHO_REQUEST: u8 = 8;
/// ICMPv6 echo request type.
pub const ECHO_REQUEST_V6: u8 = 128;
/// ICMPv6 echo reply type.
pub const ECHO_REPLY_V6: u8 = 129;

view! {
    /// A view of an ICMP or ICMPv6 message. Only type, code and checksum are required: the
    /// rest-of-header word and the body are read when present.
    IcmpPacket
}

impl<T: AsRef<[u8]>> IcmpPacket<T> {
    /// Checks that type, code and checksum are there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MIN_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Message type.
    #[inline]
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }

    /// Message code.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum, as carried.
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// The rest-of-header word (bytes 4..8), when captured.
    #[inline]
    pub fn rest_of_header(&self) -> Option<[u8; 4]> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            None
        } else {
            Some([b[4], b[5], b[6], b[7]])
        }
    }

    /// Echo identifier and sequence number, read from the rest-of-header word (meaningful for
    /// echo request and reply only).
    #[inline]
    pub fn echo_ident_seq(&self) -> Option<(u16, u16)> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            None
        } else {
            Some((
                be16(b, field::ECHO_IDENT.start),
                be16(b, field::ECHO_SEQ.start),
            ))
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> IcmpPacket<&'a T> {
    /// The message body after the 8-byte header (empty when the header itself was cut).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        &b[HEADER_LEN.min(b.len())..]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn echo() {
        // echo request, code 0, checksum 0xf7ff, id 0x0102, seq 0x0304, 2 bytes of data
        let b = [8, 0, 0xf7, 0xff, 0x01, 0x02, 0x03, 0x04, 0xaa, 0xbb];
        let i = IcmpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(i.msg_type(), ECHO_REQUEST);
        assert_eq!(i.code(), 0);
        assert_eq!(i.checksum(), 0xf7ff);
        assert_eq!(i.rest_of_header(), Some([1, 2, 3, 4]));
        assert_eq!(i.echo_ident_seq(), Some((0x0102, 0x0304)));
        assert_eq!(i.payload(), &[0xaa, 0xbb]);
    }

    #[test]
    fn short() {
        let b = [3, 3, 0, 0, 0, 0];
        assert_eq!(IcmpPacket::new_checked(&b[..3]), Err(ErrorKind::Truncated));
        let i = IcmpPacket::new_checked(&b[..]).unwrap();
        assert_eq!((i.msg_type(), i.code()), (3, 3));
        assert_eq!(i.rest_of_header(), None);
        assert_eq!(i.echo_ident_seq(), None);
        assert!(i.payload().is_empty());
    }
}
