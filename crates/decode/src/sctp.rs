//! SCTP common headers (RFC 9260): ports, verification tag, checksum, first chunk.

use weir_packet::bytes::{be16, be32};

use crate::{ErrorKind, Result};

mod field {
    use crate::{Field, Rest};
    pub(super) const SRC_PORT: Field = 0..2;
    pub(super) const DST_PORT: Field = 2..4;
    pub(super) const VTAG: Field = 4..8;
    pub(super) const CHECKSUM: Field = 8..12;
    pub(super) const CHUNKS: Rest = 12..;
}

/// Length of the SCTP common header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

view! {
    /// A view of an SCTP packet: common header and chunks.
    SctpPacket
}

impl<T: AsRef<[u8]>> SctpPacket<T> {
    /// Checks that the 12-byte common header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(ErrorKind::Truncated)
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

    /// Verification tag.
    #[inline]
    pub fn verification_tag(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VTAG.start)
    }

    /// CRC32c checksum, as carried.
    #[inline]
    pub fn checksum(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Type of the first chunk (0 DATA, 1 INIT, 2 INIT ACK...), when one is captured.
    #[inline]
    pub fn first_chunk_type(&self) -> Option<u8> {
        self.buffer.as_ref().get(HEADER_LEN).copied()
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> SctpPacket<&'a T> {
    /// The chunks after the common header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::CHUNKS]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn deconstruct() {
        let b = [
            0x0b, 0x59, 0x0b, 0x5a, 0xca, 0xfe, 0xba, 0xbe, 0x01, 0x02, 0x03, 0x04, 1, 0, 0, 4,
        ];
        let s = SctpPacket::new_checked(&b[..]).unwrap();
        assert_eq!(s.src_port(), 2905);
        assert_eq!(s.dst_port(), 2906);
        assert_eq!(s.verification_tag(), 0xcafebabe);
        assert_eq!(s.checksum(), 0x01020304);
        assert_eq!(s.first_chunk_type(), Some(1));
        assert_eq!(s.payload(), &[1, 0, 0, 4]);
        let s = SctpPacket::new_checked(&b[..12]).unwrap();
        assert_eq!(s.first_chunk_type(), None);
        assert_eq!(SctpPacket::new_checked(&b[..11]), Err(ErrorKind::Truncated));
    }
}
