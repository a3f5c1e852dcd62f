//! GRE headers (RFC 2784 with the key and sequence number of RFC 2890, and PPTP's enhanced GRE,
//! version 1, RFC 2637), and the ERSPAN type II and III headers that ride on GRE.

use weir_packet::bytes::{be16, be32};

use crate::{ErrorKind, Result};

mod field {
    use crate::Field;
    pub(super) const FLAGS: usize = 0;
    pub(super) const FLAGS_VER: usize = 1;
    pub(super) const PROTOCOL: Field = 2..4;
    pub(super) const OPTIONS: usize = 4;
}

/// Length of the fixed part of a GRE header.
pub const FIXED_LEN: usize = field::OPTIONS;

const C: u8 = 0x80;
const R: u8 = 0x40;
const K: u8 = 0x20;
const S: u8 = 0x10;
const A: u8 = 0x80;

view! {
    /// A view of a GRE packet: flags, version, protocol type, then the optional checksum
    /// (+ reserved/offset), key, sequence number and (version 1) acknowledgement number.
    GrePacket
}

impl<T: AsRef<[u8]>> GrePacket<T> {
    /// Checks that the fixed part is there (`Truncated`), that the version is 0 or 1 and that no
    /// RFC 1701 routing is announced (`Unsupported`), and that the optional fields the flags
    /// announce are there (`Truncated`).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < FIXED_LEN {
            return Err(ErrorKind::Truncated);
        }
        if self.version() > 1 || (self.version() == 0 && self.routing_present()) {
            return Err(ErrorKind::Unsupported);
        }
        if len < self.header_len() {
            return Err(ErrorKind::Truncated);
        }
        Ok(())
    }

    #[inline]
    fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// C: a checksum (and the reserved1 / offset word) is present.
    #[inline]
    pub fn checksum_present(&self) -> bool {
        self.flags() & C != 0
    }

    /// R: RFC 1701 routing is present (not followed by this crate).
    #[inline]
    pub fn routing_present(&self) -> bool {
        self.flags() & R != 0
    }

    /// K: a key is present.
    #[inline]
    pub fn key_present(&self) -> bool {
        self.flags() & K != 0
    }

    /// S: a sequence number is present.
    #[inline]
    pub fn seq_present(&self) -> bool {
        self.flags() & S != 0
    }

    /// A (version 1 only): an acknowledgement number is present.
    #[inline]
    pub fn ack_present(&self) -> bool {
        self.version() == 1 && self.buffer.as_ref()[field::FLAGS_VER] & A != 0
    }

    /// Version: 0 for GRE, 1 for PPTP's enhanced GRE.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS_VER] & 0x07
    }

    /// Protocol type of the payload: an ethertype (0x0800 IPv4, 0x6558 Ethernet, 0x880b PPP...).
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PROTOCOL.start)
    }

    #[inline]
    fn checksum_words(&self) -> usize {
        usize::from(self.checksum_present() || self.routing_present())
    }

    /// Header length: 4, plus 4 for each of checksum(+offset), key, sequence, acknowledgement.
    #[inline]
    pub fn header_len(&self) -> usize {
        FIXED_LEN
            + 4 * (self.checksum_words()
                + usize::from(self.key_present())
                + usize::from(self.seq_present())
                + usize::from(self.ack_present()))
    }

    #[inline]
    fn word(&self, index: usize) -> u32 {
        be32(self.buffer.as_ref(), FIXED_LEN + 4 * index)
    }

    /// The checksum, when present (not verified).
    #[inline]
    pub fn checksum(&self) -> Option<u16> {
        self.checksum_present().then(|| (self.word(0) >> 16) as u16)
    }

    /// The key, when present. In version 1 it holds the payload length (upper 16 bits) and the
    /// call id (lower 16 bits).
    #[inline]
    pub fn key(&self) -> Option<u32> {
        self.key_present().then(|| self.word(self.checksum_words()))
    }

    /// The sequence number, when present.
    #[inline]
    pub fn seq_number(&self) -> Option<u32> {
        self.seq_present()
            .then(|| self.word(self.checksum_words() + usize::from(self.key_present())))
    }

    /// The acknowledgement number (version 1), when present.
    #[inline]
    pub fn ack_number(&self) -> Option<u32> {
        self.ack_present().then(|| {
            self.word(
                self.checksum_words()
                    + usize::from(self.key_present())
                    + usize::from(self.seq_present()),
            )
        })
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> GrePacket<&'a T> {
    /// The encapsulated packet.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

mod erspan_field {
    use crate::Field;
    pub(super) const VER_VLAN: Field = 0..2;
    pub(super) const COS_SESSION: Field = 2..4;
    pub(super) const WORD1: Field = 4..8;
    pub(super) const FLAGS3: usize = 11;
}

/// ERSPAN type II header length.
pub const ERSPAN2_LEN: usize = erspan_field::WORD1.end;
/// ERSPAN type III header length, without the optional 8-byte platform subheader.
pub const ERSPAN3_LEN: usize = erspan_field::FLAGS3 + 1;

view! {
    /// A view of an ERSPAN type II (version field 1, 8 bytes) or type III (version field 2,
    /// 12 bytes, + 8 with the platform subheader) header; mirrored Ethernet frames follow.
    ErspanHeader
}

impl<T: AsRef<[u8]>> ErspanHeader<T> {
    /// Checks that the first 8 bytes are there (`Truncated`), that the version is 1 or 2
    /// (`Unsupported`), and that the whole header is there (`Truncated`).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < ERSPAN2_LEN {
            return Err(ErrorKind::Truncated);
        }
        if !matches!(self.version(), 1 | 2) {
            return Err(ErrorKind::Unsupported);
        }
        // the fixed part first: the type III flag byte decides whether more follows
        if len < self.fixed_len() || len < self.header_len() {
            return Err(ErrorKind::Truncated);
        }
        Ok(())
    }

    #[inline]
    fn fixed_len(&self) -> usize {
        if self.version() == 2 {
            ERSPAN3_LEN
        } else {
            ERSPAN2_LEN
        }
    }

    /// Version field: 1 for type II, 2 for type III.
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// The ERSPAN type (2 or 3) the version field stands for.
    #[inline]
    pub fn erspan_type(&self) -> u8 {
        self.version() + 1
    }

    /// VLAN of the mirrored frame.
    #[inline]
    pub fn vlan(&self) -> u16 {
        be16(self.buffer.as_ref(), erspan_field::VER_VLAN.start) & 0x0fff
    }

    /// Class of service.
    #[inline]
    pub fn cos(&self) -> u8 {
        (be16(self.buffer.as_ref(), erspan_field::COS_SESSION.start) >> 13) as u8
    }

    /// Session id (10 bits).
    #[inline]
    pub fn session_id(&self) -> u16 {
        be16(self.buffer.as_ref(), erspan_field::COS_SESSION.start) & 0x03ff
    }

    /// Type II: the 20-bit port index. Type III: the timestamp.
    #[inline]
    pub fn word1(&self) -> u32 {
        let w = be32(self.buffer.as_ref(), erspan_field::WORD1.start);
        if self.version() == 1 {
            w & 0x000f_ffff
        } else {
            w
        }
    }

    /// Type III only: the optional platform-specific subheader follows.
    #[inline]
    pub fn has_platform_subheader(&self) -> bool {
        self.version() == 2 && self.buffer.as_ref()[erspan_field::FLAGS3] & 1 != 0
    }

    /// Header length: 8 (type II), 12 or 20 (type III).
    #[inline]
    pub fn header_len(&self) -> usize {
        self.fixed_len() + if self.has_platform_subheader() { 8 } else { 0 }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> ErspanHeader<&'a T> {
    /// The mirrored frame.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn plain() {
        let b = [0x00, 0x00, 0x08, 0x00, 0x45];
        let g = GrePacket::new_checked(&b[..]).unwrap();
        assert!(!g.checksum_present() && !g.routing_present());
        assert!(!g.key_present() && !g.seq_present() && !g.ack_present());
        assert_eq!(g.version(), 0);
        assert_eq!(g.protocol(), 0x0800);
        assert_eq!(g.header_len(), 4);
        assert_eq!(
            (g.checksum(), g.key(), g.seq_number(), g.ack_number()),
            (None, None, None, None)
        );
        assert_eq!(g.payload(), &[0x45]);
        assert_eq!(GrePacket::new_checked(&b[..3]), Err(ErrorKind::Truncated));
    }

    #[test]
    fn all_option_bits() {
        // C K S, version 0, Ethernet bridging; checksum 0xabcd + reserved, key 0x01020304,
        // sequence 0x0a0b0c0d, then one payload byte.
        let b = [
            0xb0, 0x00, 0x65, 0x58, 0xab, 0xcd, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b,
            0x0c, 0x0d, 0x99,
        ];
        let g = GrePacket::new_checked(&b[..]).unwrap();
        assert!(g.checksum_present() && g.key_present() && g.seq_present());
        assert_eq!(g.protocol(), 0x6558);
        assert_eq!(g.header_len(), 16);
        assert_eq!(g.checksum(), Some(0xabcd));
        assert_eq!(g.key(), Some(0x01020304));
        assert_eq!(g.seq_number(), Some(0x0a0b0c0d));
        assert_eq!(g.ack_number(), None);
        assert_eq!(g.payload(), &[0x99]);
        for cut in 4..16 {
            assert_eq!(
                GrePacket::new_checked(&b[..cut]),
                Err(ErrorKind::Truncated),
                "{cut}"
            );
        }
    }

    #[test]
    fn key_only_and_seq_only() {
        let k = [0x20, 0x00, 0x86, 0xdd, 0, 0, 0, 7];
        let g = GrePacket::new_checked(&k[..]).unwrap();
        assert_eq!(
            (g.key(), g.seq_number(), g.header_len()),
            (Some(7), None, 8)
        );
        let s = [0x10, 0x00, 0x88, 0xbe, 0, 0, 0, 9];
        let g = GrePacket::new_checked(&s[..]).unwrap();
        assert_eq!(
            (g.key(), g.seq_number(), g.header_len()),
            (None, Some(9), 8)
        );
    }

    #[test]
    fn pptp_enhanced() {
        // version 1, K S A, PPP; key = payload length 2 / call id 0x0042, seq 5, ack 4
        let b = [
            0x30, 0x81, 0x88, 0x0b, 0x00, 0x02, 0x00, 0x42, 0, 0, 0, 5, 0, 0, 0, 4, 0x00, 0x21,
        ];
        let g = GrePacket::new_checked(&b[..]).unwrap();
        assert_eq!(g.version(), 1);
        assert!(g.ack_present());
        assert_eq!(g.protocol(), 0x880b);
        assert_eq!(g.header_len(), 16);
        assert_eq!(g.key(), Some(0x0002_0042));
        assert_eq!(g.seq_number(), Some(5));
        assert_eq!(g.ack_number(), Some(4));
        assert_eq!(g.payload(), &[0x00, 0x21]);
    }

    #[test]
    fn unsupported() {
        let routing = [0x40, 0x00, 0x08, 0x00, 0, 0, 0, 0];
        assert_eq!(
            GrePacket::new_checked(&routing[..]),
            Err(ErrorKind::Unsupported)
        );
        let v2 = [0x00, 0x02, 0x08, 0x00];
        assert_eq!(GrePacket::new_checked(&v2[..]), Err(ErrorKind::Unsupported));
    }

    #[test]
    fn erspan() {
        // type II: ver 1, vlan 0x00a, cos 5, en 0, t 0, session 0x123, index 0x54321
        let b = [0x10, 0x0a, 0xa1, 0x23, 0xff, 0xf5, 0x43, 0x21, 0xee];
        let e = ErspanHeader::new_checked(&b[..]).unwrap();
        assert_eq!(e.version(), 1);
        assert_eq!(e.erspan_type(), 2);
        assert_eq!(e.vlan(), 10);
        assert_eq!(e.cos(), 5);
        assert_eq!(e.session_id(), 0x123);
        assert_eq!(e.word1(), 0x54321);
        assert!(!e.has_platform_subheader());
        assert_eq!(e.header_len(), 8);
        assert_eq!(e.payload(), &[0xee]);
        assert_eq!(
            ErspanHeader::new_checked(&b[..7]),
            Err(ErrorKind::Truncated)
        );

        // type III with the platform subheader
        let mut c = [0u8; 21];
        c[0] = 0x20;
        c[3] = 0x07;
        c[4..8].copy_from_slice(&0x11223344u32.to_be_bytes());
        c[11] = 0x01;
        c[20] = 0xee;
        let e = ErspanHeader::new_checked(&c[..]).unwrap();
        assert_eq!(e.erspan_type(), 3);
        assert_eq!(e.session_id(), 7);
        assert_eq!(e.word1(), 0x11223344);
        assert!(e.has_platform_subheader());
        assert_eq!(e.header_len(), 20);
        assert_eq!(e.payload(), &[0xee]);
        assert_eq!(
            ErspanHeader::new_checked(&c[..19]),
            Err(ErrorKind::Truncated)
        );
        assert_eq!(
            ErspanHeader::new_checked(&c[..11]),
            Err(ErrorKind::Truncated)
        );
        c[0] = 0x30;
        assert_eq!(
            ErspanHeader::new_checked(&c[..]),
            Err(ErrorKind::Unsupported)
        );
    }
}
