//! Ethernet II and IEEE 802.3 frames, and the 802.2 LLC and SNAP headers that follow an 802.3
//! length field.

use core::fmt;

use weir_packet::bytes::{be16, be32};

use crate::{ErrorKind, Result};

mod field {
    use crate::{Field, Rest};
    pub(super) const DST: Field = 0..6;
    pub(super) const SRC: Field = 6..12;
    pub(super) const ETHERTYPE: Field = 12..14;
    pub(super) const PAYLOAD: Rest = 14..;
}

/// Length of an Ethernet header (without VLAN tags).
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// Type/length values up to this one are 802.3 lengths; from 0x0600 on they are ethertypes.
pub const MAX_8023_LEN: u16 = 1500;

/// A MAC address, printed as `aa:bb:cc:dd:ee:ff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddr(pub [u8; 6]);

impl MacAddr {
    /// True for a broadcast or multicast address (the group bit of the first byte).
    #[inline]
    pub fn is_group(&self) -> bool {
        self.0[0] & 1 != 0
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

view! {
    /// A view of an Ethernet frame (without FCS): destination, source, type-or-length.
    EthernetFrame
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks that the 14-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Destination MAC address.
    #[inline]
    pub fn dst_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        MacAddr(a)
    }

    /// Source MAC address.
    #[inline]
    pub fn src_addr(&self) -> MacAddr {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        MacAddr(a)
    }

    /// The type/length field: an ethertype from 0x0600 on, an 802.3 length up to 1500.
    #[inline]
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ETHERTYPE.start)
    }

    /// True when the type/length field is an 802.3 length (so LLC follows).
    #[inline]
    pub fn is_8023(&self) -> bool {
        self.ethertype() <= MAX_8023_LEN
    }

    /// Header length: always 14.
    #[inline]
    pub fn header_len(&self) -> usize {
        HEADER_LEN
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> EthernetFrame<&'a T> {
    /// The bytes after the header. For an 802.3 frame, clamped to the length field (which drops
    /// padding); otherwise everything captured, padding included.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let rest = &self.buffer.as_ref()[field::PAYLOAD];
        let t = self.ethertype();
        if t <= MAX_8023_LEN {
            &rest[..rest.len().min(t as usize)]
        } else {
            rest
        }
    }
}

mod llc_field {
    pub(super) const DSAP: usize = 0;
    pub(super) const SSAP: usize = 1;
    pub(super) const CONTROL: usize = 2;
}

view! {
    /// A view of an IEEE 802.2 LLC header: DSAP, SSAP and a 1-byte (U-format) or 2-byte (I/S
    /// format) control field.
    LlcHeader
}

impl<T: AsRef<[u8]>> LlcHeader<T> {
    /// Checks that the header, 3 or 4 bytes depending on the control field, is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < 3 || b.len() < self.header_len() {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Destination service access point.
    #[inline]
    pub fn dsap(&self) -> u8 {
        self.buffer.as_ref()[llc_field::DSAP]
    }

    /// Source service access point.
    #[inline]
    pub fn ssap(&self) -> u8 {
        self.buffer.as_ref()[llc_field::SSAP]
    }

    /// The first control byte.
    #[inline]
    pub fn control(&self) -> u8 {
        self.buffer.as_ref()[llc_field::CONTROL]
    }

    /// 3 for unnumbered (U-format) frames, whose control byte ends in binary 11; 4 otherwise.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.control() & 0x03 == 0x03 {
            3
        } else {
            4
        }
    }

    /// True for AA-AA-03, which announces a SNAP header.
    #[inline]
    pub fn is_snap(&self) -> bool {
        self.dsap() == 0xaa && self.ssap() == 0xaa && self.control() == 0x03
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> LlcHeader<&'a T> {
    /// The bytes after the LLC header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

mod snap_field {
    use crate::{Field, Rest};
    pub(super) const OUI: Field = 0..3;
    pub(super) const PROTOCOL: Field = 3..5;
    pub(super) const PAYLOAD: Rest = 5..;
}

/// Length of a SNAP header.
pub const SNAP_LEN: usize = snap_field::PROTOCOL.end;

view! {
    /// A view of a SNAP header: a 3-byte organisation code and a 2-byte protocol id (an
    /// ethertype when the organisation code is 0).
    SnapHeader
}

impl<T: AsRef<[u8]>> SnapHeader<T> {
    /// Checks that the 5-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < SNAP_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Organisationally unique identifier (0 for RFC 1042 encapsulation of ethertypes).
    #[inline]
    pub fn oui(&self) -> u32 {
        let b = &self.buffer.as_ref()[snap_field::OUI];
        be32(&[0, b[0], b[1], b[2]], 0)
    }

    /// Protocol id.
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), snap_field::PROTOCOL.start)
    }

    /// True when the protocol id is an ethertype: OUI 00-00-00 (RFC 1042) or 00-00-F8 (802.1H).
    #[inline]
    pub fn carries_ethertype(&self) -> bool {
        matches!(self.oui(), 0 | 0xf8)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> SnapHeader<&'a T> {
    /// The bytes after the SNAP header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[snap_field::PAYLOAD]
    }
}

/// The construct side (smoltcp's setters): write the fields of a frame in place.
impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a.0);
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, a: MacAddr) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a.0);
    }

    /// Sets the type/length field.
    #[inline]
    pub fn set_ethertype(&mut self, t: u16) {
        self.buffer.as_mut()[field::ETHERTYPE].copy_from_slice(&t.to_be_bytes());
    }

    /// The bytes after the header, to write the next layer into.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

/// The fields of an Ethernet II header, to [`emit`](EthernetRepr::emit) into a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetRepr {
    /// Source MAC address.
    pub src_addr: MacAddr,
    /// Destination MAC address.
    pub dst_addr: MacAddr,
    /// Ethertype of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first [`HEADER_LEN`] bytes of `frame`.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // dst 00:11:22:33:44:55, src 66:77:88:99:aa:bb, type 0x0800, 4 bytes of payload.
    static FRAME: [u8; 18] = [
        0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0x08, 0x00, 1, 2,
        3, 4,
    ];

    #[test]
    fn deconstruct() {
        let f = EthernetFrame::new_checked(&FRAME[..]).unwrap();
        assert_eq!(f.dst_addr(), MacAddr([0x00, 0x11, 0x22, 0x33, 0x44, 0x55]));
        assert_eq!(f.src_addr().to_string(), "66:77:88:99:aa:bb");
        assert_eq!(f.ethertype(), 0x0800);
        assert!(!f.is_8023());
        assert_eq!(f.header_len(), 14);
        assert_eq!(f.payload(), &[1, 2, 3, 4]);
        assert_eq!(f.as_bytes().len(), 18);
        assert_eq!(f.into_inner().len(), 18);
    }

    #[test]
    fn short_header() {
        assert_eq!(
            EthernetFrame::new_checked(&FRAME[..13]),
            Err(ErrorKind::Truncated)
        );
        let f = EthernetFrame::new_checked(&FRAME[..14]).unwrap();
        assert!(f.payload().is_empty());
    }

    #[test]
    fn ieee_8023_length_clamps_padding() {
        let mut b = FRAME;
        b[12] = 0;
        b[13] = 3; // length 3: the fourth payload byte is padding
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        assert!(f.is_8023());
        assert_eq!(f.payload(), &[1, 2, 3]);
        // a length longer than the capture is clamped to it
        b[13] = 200;
        assert_eq!(
            EthernetFrame::new_checked(&b[..]).unwrap().payload().len(),
            4
        );
    }

    #[test]
    fn llc_and_snap() {
        // STP's LLC: 42 42 03, U-format.
        let stp = [0x42, 0x42, 0x03, 0, 0];
        let l = LlcHeader::new_checked(&stp[..]).unwrap();
        assert_eq!((l.dsap(), l.ssap(), l.control()), (0x42, 0x42, 0x03));
        assert_eq!(l.header_len(), 3);
        assert!(!l.is_snap());
        assert_eq!(l.payload(), &[0, 0]);
        // I-format control (low bit 0) takes two bytes
        let i = [0xf0, 0xf0, 0x00, 0x01, 9];
        let l = LlcHeader::new_checked(&i[..]).unwrap();
        assert_eq!(l.header_len(), 4);
        assert_eq!(l.payload(), &[9]);
        assert_eq!(LlcHeader::new_checked(&i[..3]), Err(ErrorKind::Truncated));
        assert_eq!(LlcHeader::new_checked(&i[..2]), Err(ErrorKind::Truncated));

        let snap = [0xaa, 0xaa, 0x03, 0x00, 0x00, 0x00, 0x08, 0x06, 7];
        let l = LlcHeader::new_checked(&snap[..]).unwrap();
        assert!(l.is_snap());
        let s = SnapHeader::new_checked(l.payload()).unwrap();
        assert_eq!(s.oui(), 0);
        assert_eq!(s.protocol(), 0x0806);
        assert!(s.carries_ethertype());
        assert_eq!(s.payload(), &[7]);
        let cisco = [0x00, 0x00, 0x0c, 0x20, 0x00];
        let s = SnapHeader::new_checked(&cisco[..]).unwrap();
        assert_eq!(s.oui(), 0x00000c);
        assert!(!s.carries_ethertype());
        assert_eq!(
            SnapHeader::new_checked(&cisco[..4]),
            Err(ErrorKind::Truncated)
        );
    }
}
