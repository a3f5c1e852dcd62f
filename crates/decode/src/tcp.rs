//! TCP headers (RFC 9293): ports, sequence numbers, flags, window, options, payload.

use weir_packet::bytes::{be16, be32};

use crate::{ErrorKind, Result};

mod field {
    use crate::Field;
    pub(super) const SRC_PORT: Field = 0..2;
    pub(super) const DST_PORT: Field = 2..4;
    pub(super) const SEQ_NUM: Field = 4..8;
    pub(super) const ACK_NUM: Field = 8..12;
    pub(super) const DATA_OFF: usize = 12;
    pub(super) const FLAGS: usize = 13;
    pub(super) const WINDOW: Field = 14..16;
    pub(super) const CHECKSUM: Field = 16..18;
    pub(super) const URGENT: Field = 18..20;
}

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = field::URGENT.end;

/// FIN flag bit.
pub const FIN: u8 = 0x01;
/// SYN flag bit.
pub const SYN: u8 = 0x02;
/// RST flag bit.
pub const RST: u8 = 0x04;
/// PSH flag bit.
pub const PSH: u8 = 0x08;
/// ACK flag bit.
pub const ACK: u8 = 0x10;
/// URG flag bit.
pub const URG: u8 = 0x20;
/// ECE flag bit.
pub const ECE: u8 = 0x40;
/// CWR flag bit.
pub const CWR: u8 = 0x80;

view! {
    /// A view of a TCP segment: header, options and payload.
    TcpPacket
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Checks that the 20-byte header is there (`Truncated`), that the data offset is at least 5
    /// (`Malformed`) and that the options it announces are there (`Truncated`).
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else if self.data_offset() < 5 {
            Err(ErrorKind::Malformed)
        } else if len < self.header_len() {
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

    /// Sequence number.
    #[inline]
    pub fn seq_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ_NUM.start)
    }

    /// Acknowledgement number (meaningful when ACK is set).
    #[inline]
    pub fn ack_number(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_NUM.start)
    }

    /// Data offset: header length in 32-bit words.
    #[inline]
    pub fn data_offset(&self) -> u8 {
        self.buffer.as_ref()[field::DATA_OFF] >> 4
    }

    /// Header length in bytes, options included.
    #[inline]
    pub fn header_len(&self) -> usize {
        self.data_offset() as usize * 4
    }

    /// The eight classic flag bits (CWR ECE URG ACK PSH RST SYN FIN), as NetFlow stores them;
    /// see the constants [`FIN`], [`SYN`]...
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// The accurate-ECN / former nonce-sum bit, the ninth flag (low bit of byte 12).
    #[inline]
    pub fn ae(&self) -> bool {
        self.buffer.as_ref()[field::DATA_OFF] & 1 != 0
    }

    /// FIN set.
    #[inline]
    pub fn fin(&self) -> bool {
        self.flags() & FIN != 0
    }

    /// SYN set.
    #[inline]
    pub fn syn(&self) -> bool {
        self.flags() & SYN != 0
    }

    /// RST set.
    #[inline]
    pub fn rst(&self) -> bool {
        self.flags() & RST != 0
    }

    /// PSH set.
    #[inline]
    pub fn psh(&self) -> bool {
        self.flags() & PSH != 0
    }

    /// ACK set.
    #[inline]
    pub fn ack(&self) -> bool {
        self.flags() & ACK != 0
    }

    /// URG set.
    #[inline]
    pub fn urg(&self) -> bool {
        self.flags() & URG != 0
    }

    /// ECE set.
    #[inline]
    pub fn ece(&self) -> bool {
        self.flags() & ECE != 0
    }

    /// CWR set.
    #[inline]
    pub fn cwr(&self) -> bool {
        self.flags() & CWR != 0
    }

    /// Receive window (unscaled).
    #[inline]
    pub fn window(&self) -> u16 {
        be16(self.buffer.as_ref(), field::WINDOW.start)
    }

    /// Checksum, as carried (not verified).
    #[inline]
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM.start)
    }

    /// Urgent pointer.
    #[inline]
    pub fn urgent(&self) -> u16 {
        be16(self.buffer.as_ref(), field::URGENT.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> TcpPacket<&'a T> {
    /// The option bytes.
    #[inline]
    pub fn options(&self) -> &'a [u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.header_len()]
    }

    /// The payload: everything after the header (the IP layer already bounded the buffer).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// The construct side (smoltcp's setters): write the fields of a header in place.
impl<T: AsRef<[u8]> + AsMut<[u8]>> TcpPacket<T> {
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

    /// Sets the sequence number.
    #[inline]
    pub fn set_seq_number(&mut self, n: u32) {
        self.buffer.as_mut()[field::SEQ_NUM].copy_from_slice(&n.to_be_bytes());
    }

    /// Sets the acknowledgement number.
    #[inline]
    pub fn set_ack_number(&mut self, n: u32) {
        self.buffer.as_mut()[field::ACK_NUM].copy_from_slice(&n.to_be_bytes());
    }

    /// Sets the header length in bytes (a multiple of 4; the reserved bits and AE are cleared).
    #[inline]
    pub fn set_header_len(&mut self, n: usize) {
        self.buffer.as_mut()[field::DATA_OFF] = ((n / 4) as u8) << 4;
    }

    /// Sets the eight classic flag bits ([`SYN`], [`ACK`]...).
    #[inline]
    pub fn set_flags(&mut self, f: u8) {
        self.buffer.as_mut()[field::FLAGS] = f;
    }

    /// Sets the window.
    #[inline]
    pub fn set_window(&mut self, w: u16) {
        self.buffer.as_mut()[field::WINDOW].copy_from_slice(&w.to_be_bytes());
    }

    /// Sets the checksum field as given.
    #[inline]
    pub fn set_checksum(&mut self, c: u16) {
        self.buffer.as_mut()[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
    }

    /// Sets the urgent pointer.
    #[inline]
    pub fn set_urgent(&mut self, u: u16) {
        self.buffer.as_mut()[field::URGENT].copy_from_slice(&u.to_be_bytes());
    }

    /// Computes the checksum over the pseudo-header sum `pseudo` (from
    /// [`checksum::pseudo_header`](crate::checksum::pseudo_header), without the length) and the
    /// whole buffer as the segment, and writes it.
    #[inline]
    pub fn fill_checksum(&mut self, pseudo: u32) {
        self.set_checksum(0);
        let b = self.buffer.as_ref();
        let c = crate::checksum::fold(crate::checksum::sum16(pseudo + b.len() as u32, b));
        self.set_checksum(c);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // 1234 -> 80, seq 0x01020304, ack 0x0a0b0c0d, data offset 6 with AE set, flags SYN|ACK|ECE,
    // window 0xfaf0, checksum 0x1122, urgent 0x0033, option MSS 1460, payload "hi".
    static SEGMENT: [u8; 26] = [
        0x04, 0xd2, 0x00, 0x50, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d, 0x61, 0x52, 0xfa,
        0xf0, 0x11, 0x22, 0x00, 0x33, 0x02, 0x04, 0x05, 0xb4, b'h', b'i',
    ];

    #[test]
    fn deconstruct() {
        let t = TcpPacket::new_checked(&SEGMENT[..]).unwrap();
        assert_eq!(t.src_port(), 1234);
        assert_eq!(t.dst_port(), 80);
        assert_eq!(t.seq_number(), 0x01020304);
        assert_eq!(t.ack_number(), 0x0a0b0c0d);
        assert_eq!(t.data_offset(), 6);
        assert_eq!(t.header_len(), 24);
        assert_eq!(t.flags(), SYN | ACK | ECE);
        assert!(t.ae());
        assert!(t.syn() && t.ack() && t.ece());
        assert!(!t.fin() && !t.rst() && !t.psh() && !t.urg() && !t.cwr());
        assert_eq!(t.window(), 0xfaf0);
        assert_eq!(t.checksum(), 0x1122);
        assert_eq!(t.urgent(), 0x33);
        assert_eq!(t.options(), &[0x02, 0x04, 0x05, 0xb4]);
        assert_eq!(t.payload(), b"hi");
    }

    #[test]
    fn all_flags() {
        let mut b = SEGMENT;
        b[13] = 0xff;
        let t = TcpPacket::new_checked(&b[..]).unwrap();
        assert!(t.fin() && t.syn() && t.rst() && t.psh() && t.ack() && t.urg());
        assert!(t.ece() && t.cwr());
    }

    #[test]
    fn malformed() {
        assert_eq!(
            TcpPacket::new_checked(&SEGMENT[..19]),
            Err(ErrorKind::Truncated)
        );
        // options announced but cut
        assert_eq!(
            TcpPacket::new_checked(&SEGMENT[..23]),
            Err(ErrorKind::Truncated)
        );
        let mut b = SEGMENT;
        b[12] = 0x40; // data offset 4
        assert_eq!(TcpPacket::new_checked(&b[..]), Err(ErrorKind::Malformed));
        b[12] = 0xf0; // data offset 15 = 60 bytes, beyond the data
        assert_eq!(TcpPacket::new_checked(&b[..]), Err(ErrorKind::Truncated));
    }
}
