//! VXLAN headers (RFC 7348): flags and the 24-bit network identifier; Ethernet follows.

use weir_packet::bytes::be32;

use crate::{ErrorKind, Result};

mod field {
    use crate::{Field, Rest};
    pub(super) const FLAGS: usize = 0;
    pub(super) const VNI: Field = 4..8;
    pub(super) const PAYLOAD: Rest = 8..;
}

/// Length of a VXLAN header.
pub const HEADER_LEN: usize = field::VNI.end;
/// The UDP destination port IANA assigned to VXLAN.
pub const UDP_PORT: u16 = 4789;
/// The I flag: the VNI is valid.
pub const FLAG_I: u8 = 0x08;

view! {
    /// A view of a VXLAN header followed by the inner Ethernet frame.
    VxlanHeader
}

impl<T: AsRef<[u8]>> VxlanHeader<T> {
    /// Checks that the 8-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// The flags byte (0x08 when the VNI is valid).
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// True when the I flag says the VNI is valid.
    #[inline]
    pub fn vni_valid(&self) -> bool {
        self.flags() & FLAG_I != 0
    }

    /// VXLAN network identifier (24 bits).
    #[inline]
    pub fn vni(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VNI.start) >> 8
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> VxlanHeader<&'a T> {
    /// The inner Ethernet frame.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn deconstruct() {
        let b = [0x08, 0, 0, 0, 0x12, 0x34, 0x56, 0x00, 0xaa];
        let v = VxlanHeader::new_checked(&b[..]).unwrap();
        assert_eq!(v.flags(), 0x08);
        assert!(v.vni_valid());
        assert_eq!(v.vni(), 0x123456);
        assert_eq!(v.payload(), &[0xaa]);
        assert_eq!(VxlanHeader::new_checked(&b[..7]), Err(ErrorKind::Truncated));
    }
}
