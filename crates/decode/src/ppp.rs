//! PPP frames (RFC 1661/1662, with or without HDLC address and control, with or without
//! protocol field compression), the PPPoE header that carries them over Ethernet (RFC 2516), and
//! Cisco HDLC, which shares PPP's serial links.

use weir_packet::bytes::be16;

use crate::{ErrorKind, Result};

/// PPP protocol numbers the decoder follows.
pub mod protocol {
    /// IPv4.
    pub const IPV4: u16 = 0x0021;
    /// IPv6.
    pub const IPV6: u16 = 0x0057;
    /// MPLS unicast.
    pub const MPLS: u16 = 0x0281;
    /// MPLS multicast.
    pub const MPLS_MC: u16 = 0x0283;
    /// Link control protocol.
    pub const LCP: u16 = 0xc021;
}

view! {
    /// A view of a PPP frame: optional address and control bytes (`ff 03`), then a 1-byte
    /// (compressed, odd) or 2-byte protocol. No flag bytes, no FCS.
    PppFrame
}

impl<T: AsRef<[u8]>> PppFrame<T> {
    /// Checks that the address/control bytes (when the frame starts with `ff`) and the protocol
    /// field are there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        // one byte `ff` alone cannot tell whether address/control are there
        let ac = match b {
            [] | [0xff] => return Err(ErrorKind::Truncated),
            [0xff, 0x03, ..] => 2,
            _ => 0,
        };
        match b.get(ac) {
            None => Err(ErrorKind::Truncated),
            Some(p) if p & 1 == 1 => Ok(()),
            Some(_) if b.len() < ac + 2 => Err(ErrorKind::Truncated),
            Some(_) => Ok(()),
        }
    }

    /// True when the frame starts with the HDLC address and control bytes `ff 03`.
    #[inline]
    pub fn has_address_control(&self) -> bool {
        matches!(self.buffer.as_ref(), [0xff, 0x03, ..])
    }

    #[inline]
    fn ac_len(&self) -> usize {
        if self.has_address_control() {
            2
        } else {
            0
        }
    }

    /// True when the protocol field is compressed to one byte (its value is odd).
    #[inline]
    pub fn compressed_protocol(&self) -> bool {
        self.buffer.as_ref()[self.ac_len()] & 1 == 1
    }

    /// The protocol number (0x0021 IPv4, 0x0057 IPv6, 0x0281 MPLS, 0xc021 LCP...).
    #[inline]
    pub fn protocol(&self) -> u16 {
        let b = &self.buffer.as_ref()[self.ac_len()..];
        if b[0] & 1 == 1 {
            u16::from(b[0])
        } else {
            be16(b, 0)
        }
    }

    /// Header length: address/control (0 or 2) plus protocol (1 or 2).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.ac_len() + if self.compressed_protocol() { 1 } else { 2 }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> PppFrame<&'a T> {
    /// The bytes after the PPP header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

mod pppoe_field {
    use crate::{Field, Rest};
    pub(super) const VER_TYPE: usize = 0;
    pub(super) const CODE: usize = 1;
    pub(super) const SESSION_ID: Field = 2..4;
    pub(super) const LENGTH: Field = 4..6;
    pub(super) const PAYLOAD: Rest = 6..;
}

/// Length of a PPPoE header.
pub const PPPOE_HEADER_LEN: usize = pppoe_field::LENGTH.end;

/// PPPoE code for session data; the discovery stage uses other codes (PADI 0x09...).
pub const PPPOE_CODE_SESSION: u8 = 0x00;

view! {
    /// A view of a PPPoE header: version, type, code, session id, payload length.
    PppoeHeader
}

impl<T: AsRef<[u8]>> PppoeHeader<T> {
    /// Checks that the 6-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < PPPOE_HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Version (1).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[pppoe_field::VER_TYPE] >> 4
    }

    /// Type (1).
    #[inline]
    pub fn pppoe_type(&self) -> u8 {
        self.buffer.as_ref()[pppoe_field::VER_TYPE] & 0x0f
    }

    /// Code: 0 for session data, PADI 0x09, PADO 0x07, PADR 0x19, PADS 0x65, PADT 0xa7.
    #[inline]
    pub fn code(&self) -> u8 {
        self.buffer.as_ref()[pppoe_field::CODE]
    }

    /// Session id.
    #[inline]
    pub fn session_id(&self) -> u16 {
        be16(self.buffer.as_ref(), pppoe_field::SESSION_ID.start)
    }

    /// The payload length field.
    #[inline]
    pub fn length(&self) -> u16 {
        be16(self.buffer.as_ref(), pppoe_field::LENGTH.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> PppoeHeader<&'a T> {
    /// The payload, clamped to the length field and to the captured data.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let rest = &self.buffer.as_ref()[pppoe_field::PAYLOAD];
        &rest[..rest.len().min(self.length() as usize)]
    }
}

mod chdlc_field {
    use crate::{Field, Rest};
    pub(super) const ADDRESS: usize = 0;
    pub(super) const CONTROL: usize = 1;
    pub(super) const PROTOCOL: Field = 2..4;
    pub(super) const PAYLOAD: Rest = 4..;
}

/// Length of a Cisco HDLC header.
pub const CHDLC_HEADER_LEN: usize = chdlc_field::PROTOCOL.end;
/// Cisco HDLC unicast address byte.
pub const CHDLC_UNICAST: u8 = 0x0f;
/// Cisco HDLC broadcast address byte.
pub const CHDLC_BROADCAST: u8 = 0x8f;

view! {
    /// A view of a Cisco HDLC header (LINKTYPE_C_HDLC 104, and some LINKTYPE_PPP_HDLC
    /// captures): address, control, then an ethertype.
    ChdlcHeader
}

impl<T: AsRef<[u8]>> ChdlcHeader<T> {
    /// Checks that the 4-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < CHDLC_HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Address: 0x0f unicast, 0x8f broadcast.
    #[inline]
    pub fn address(&self) -> u8 {
        self.buffer.as_ref()[chdlc_field::ADDRESS]
    }

    /// Control (0).
    #[inline]
    pub fn control(&self) -> u8 {
        self.buffer.as_ref()[chdlc_field::CONTROL]
    }

    /// Protocol: an ethertype (0x8035 is Cisco's SLARP keepalive).
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), chdlc_field::PROTOCOL.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ChdlcHeader<&'a T> {
    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[chdlc_field::PAYLOAD]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn ppp_forms() {
        let full = [0xff, 0x03, 0x00, 0x21, 0x45];
        let p = PppFrame::new_checked(&full[..]).unwrap();
        assert!(p.has_address_control());
        assert!(!p.compressed_protocol());
        assert_eq!(p.protocol(), protocol::IPV4);
        assert_eq!(p.header_len(), 4);
        assert_eq!(p.payload(), &[0x45]);

        let bare = [0x00, 0x57, 0x60];
        let p = PppFrame::new_checked(&bare[..]).unwrap();
        assert!(!p.has_address_control());
        assert_eq!(p.protocol(), protocol::IPV6);
        assert_eq!(p.header_len(), 2);
        assert_eq!(p.payload(), &[0x60]);

        let compressed = [0xff, 0x03, 0x21, 0x45];
        let p = PppFrame::new_checked(&compressed[..]).unwrap();
        assert!(p.compressed_protocol());
        assert_eq!(p.protocol(), 0x21);
        assert_eq!(p.header_len(), 3);
        assert_eq!(p.payload(), &[0x45]);
    }

    #[test]
    fn ppp_short() {
        assert_eq!(PppFrame::new_checked(&[][..]), Err(ErrorKind::Truncated));
        assert_eq!(
            PppFrame::new_checked(&[0xff][..]),
            Err(ErrorKind::Truncated)
        );
        assert_eq!(
            PppFrame::new_checked(&[0xff, 0x03][..]),
            Err(ErrorKind::Truncated)
        );
        assert_eq!(
            PppFrame::new_checked(&[0xff, 0x03, 0x00][..]),
            Err(ErrorKind::Truncated)
        );
        assert_eq!(
            PppFrame::new_checked(&[0x00][..]),
            Err(ErrorKind::Truncated)
        );
        assert!(PppFrame::new_checked(&[0x21][..]).is_ok());
    }

    #[test]
    fn pppoe() {
        // ver 1 type 1, code 0, session 0x1234, length 3, then 4 bytes (one of padding)
        let b = [0x11, 0x00, 0x12, 0x34, 0x00, 0x03, 0x00, 0x21, 0x45, 0x00];
        let h = PppoeHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.version(), 1);
        assert_eq!(h.pppoe_type(), 1);
        assert_eq!(h.code(), PPPOE_CODE_SESSION);
        assert_eq!(h.session_id(), 0x1234);
        assert_eq!(h.length(), 3);
        assert_eq!(h.payload(), &[0x00, 0x21, 0x45]);
        assert_eq!(PppoeHeader::new_checked(&b[..5]), Err(ErrorKind::Truncated));
        let mut long = b;
        long[5] = 100;
        assert_eq!(
            PppoeHeader::new_checked(&long[..]).unwrap().payload().len(),
            4
        );
    }

    #[test]
    fn chdlc() {
        let b = [0x8f, 0x00, 0x08, 0x00, 0x45];
        let h = ChdlcHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.address(), CHDLC_BROADCAST);
        assert_eq!(h.control(), 0);
        assert_eq!(h.protocol(), 0x0800);
        assert_eq!(h.payload(), &[0x45]);
        assert_eq!(ChdlcHeader::new_checked(&b[..3]), Err(ErrorKind::Truncated));
    }
}
