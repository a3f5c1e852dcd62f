//! MPLS label stack entries (RFC 3032): label, traffic class, bottom-of-stack bit, TTL.

use weir_packet::bytes::be32;

use crate::{ErrorKind, Result};

mod field {
    use crate::{Field, Rest};
    pub(super) const ENTRY: Field = 0..4;
    pub(super) const PAYLOAD: Rest = 4..;
}

/// Length of one label stack entry.
pub const HEADER_LEN: usize = field::ENTRY.end;

/// Label 0: IPv4 explicit null.
pub const IPV4_EXPLICIT_NULL: u32 = 0;
/// Label 2: IPv6 explicit null.
pub const IPV6_EXPLICIT_NULL: u32 = 2;

view! {
    /// A view of one MPLS label stack entry, followed by the rest of the stack and the payload.
    MplsLabel
}

impl<T: AsRef<[u8]>> MplsLabel<T> {
    /// Checks that the 4-byte entry is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    #[inline]
    fn entry(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ENTRY.start)
    }

    /// The 20-bit label.
    #[inline]
    pub fn label(&self) -> u32 {
        self.entry() >> 12
    }

    /// Traffic class (the former EXP bits).
    #[inline]
    pub fn tc(&self) -> u8 {
        ((self.entry() >> 9) & 0x7) as u8
    }

    /// Bottom-of-stack bit: the payload follows this entry.
    #[inline]
    pub fn bottom(&self) -> bool {
        self.entry() & 0x100 != 0
    }

    /// Time to live.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.entry() as u8
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> MplsLabel<&'a T> {
    /// The bytes after this entry: the next entry, or the payload at the bottom of the stack.
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
        // label 0x12345, tc 5, bottom, ttl 63:
        // 0001 0010 0011 0100 0101 | 101 | 1 | 0011 1111
        let b = [0x12, 0x34, 0x5b, 0x3f, 0x45];
        let l = MplsLabel::new_checked(&b[..]).unwrap();
        assert_eq!(l.label(), 0x12345);
        assert_eq!(l.tc(), 5);
        assert!(l.bottom());
        assert_eq!(l.ttl(), 63);
        assert_eq!(l.payload(), &[0x45]);
        let b = [0x00, 0x01, 0x00, 0x01];
        let l = MplsLabel::new_checked(&b[..]).unwrap();
        assert_eq!((l.label(), l.tc(), l.bottom(), l.ttl()), (16, 0, false, 1));
        assert_eq!(MplsLabel::new_checked(&b[..3]), Err(ErrorKind::Truncated));
    }
}
