//! IEEE 802.1Q / 802.1ad VLAN tags: the 4 bytes after a TPID (0x8100, 0x88a8, 0x9100, 0x9200).

use weir_packet::bytes::be16;

use crate::{ErrorKind, Result};

mod field {
    use crate::{Field, Rest};
    pub(super) const TCI: Field = 0..2;
    pub(super) const ETHERTYPE: Field = 2..4;
    pub(super) const PAYLOAD: Rest = 4..;
}

/// Length of a tag, after its TPID.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;

view! {
    /// A view of a VLAN tag after its TPID: tag control information, then the next
    /// type-or-length.
    VlanTag
}

impl<T: AsRef<[u8]>> VlanTag<T> {
    /// Checks that the 4-byte tag is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// The whole tag control information.
    #[inline]
    pub fn tci(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TCI.start)
    }

    /// Priority code point (3 bits).
    #[inline]
    pub fn pcp(&self) -> u8 {
        (self.tci() >> 13) as u8
    }

    /// Drop eligible indicator (formerly CFI).
    #[inline]
    pub fn dei(&self) -> bool {
        self.tci() & 0x1000 != 0
    }

    /// VLAN identifier (12 bits).
    #[inline]
    pub fn vid(&self) -> u16 {
        self.tci() & 0x0fff
    }

    /// The type/length that follows the tag (an 802.3 length when at most 1500).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> VlanTag<&'a T> {
    /// The bytes after the tag; for an 802.3 length, clamped to it.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let rest = &self.buffer.as_ref()[field::PAYLOAD];
        let t = self.ethertype();
        if t <= crate::ethernet::MAX_8023_LEN {
            &rest[..rest.len().min(t as usize)]
        } else {
            rest
        }
    }
}

/// The construct side: write a tag in place.
impl<T: AsRef<[u8]> + AsMut<[u8]>> VlanTag<T> {
    /// Sets the whole tag control information.
    #[inline]
    pub fn set_tci(&mut self, tci: u16) {
        self.buffer.as_mut()[field::TCI].copy_from_slice(&tci.to_be_bytes());
    }

    /// Sets priority, drop eligibility and VLAN id (`pcp` is cut to 3 bits, `vid` to 12).
    #[inline]
    pub fn set_fields(&mut self, pcp: u8, dei: bool, vid: u16) {
        self.set_tci((u16::from(pcp & 7) << 13) | (u16::from(dei) << 12) | (vid & 0x0fff));
    }

    /// Sets the type/length that follows the tag.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn deconstruct() {
        // pcp 5 (101), dei 1, vid 0x123 -> 1011 0001 0010 0011 = 0xb123
        let b = [0xb1, 0x23, 0x86, 0xdd, 0xee];
        let t = VlanTag::new_checked(&b[..]).unwrap();
        assert_eq!(t.tci(), 0xb123);
        assert_eq!(t.pcp(), 5);
        assert!(t.dei());
        assert_eq!(t.vid(), 0x123);
        assert_eq!(t.ethertype(), 0x86dd);
        assert_eq!(t.payload(), &[0xee]);
        assert_eq!(VlanTag::new_checked(&b[..3]), Err(ErrorKind::Truncated));
    }

    #[test]
    fn length_after_tag() {
        let b = [0x00, 0x0a, 0x00, 0x02, 1, 2, 3];
        let t = VlanTag::new_checked(&b[..]).unwrap();
        assert_eq!((t.pcp(), t.dei(), t.vid()), (0, false, 10));
        assert_eq!(t.payload(), &[1, 2]);
    }
}
