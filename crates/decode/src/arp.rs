//! ARP and RARP packets (RFC 826): recognised and exposed, not interpreted further.

use core::net::Ipv4Addr;

use weir_packet::bytes::be16;

use crate::{ErrorKind, MacAddr, Result};

mod field {
    use crate::Field;
    pub(super) const HTYPE: Field = 0..2;
    pub(super) const PTYPE: Field = 2..4;
    pub(super) const HLEN: usize = 4;
    pub(super) const PLEN: usize = 5;
    pub(super) const OPER: Field = 6..8;
    pub(super) const ADDRS: usize = 8;
}

/// Length of the fixed part of an ARP packet.
pub const FIXED_LEN: usize = field::OPER.end;
/// Operation: request.
pub const OP_REQUEST: u16 = 1;
/// Operation: reply.
pub const OP_REPLY: u16 = 2;

view! {
    /// A view of an ARP packet of any hardware and protocol address sizes.
    ArpPacket
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Checks that the fixed part and the four addresses it announces are there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < FIXED_LEN || b.len() < self.packet_len() {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Hardware type (1 = Ethernet).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::HTYPE.start)
    }

    /// Protocol type (0x0800 = IPv4).
    #[inline]
    pub fn protocol_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::PTYPE.start)
    }

    /// Hardware address length.
    #[inline]
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// Protocol address length.
    #[inline]
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// Operation (1 request, 2 reply, 3/4 RARP).
    #[inline]
    pub fn operation(&self) -> u16 {
        be16(self.buffer.as_ref(), field::OPER.start)
    }

    /// Length of the packet the fixed part announces: 8 + 2 × (hardware + protocol length).
    #[inline]
    pub fn packet_len(&self) -> usize {
        FIXED_LEN + 2 * (self.hardware_len() as usize + self.protocol_len() as usize)
    }

    #[inline]
    fn addr(&self, index: usize) -> &[u8] {
        let (h, p) = (self.hardware_len() as usize, self.protocol_len() as usize);
        let start = field::ADDRS + (index / 2) * (h + p) + (index % 2) * h;
        let len = if index % 2 == 0 { h } else { p };
        &self.buffer.as_ref()[start..start + len]
    }

    /// Sender hardware address bytes.
    #[inline]
    pub fn sender_hardware_addr(&self) -> &[u8] {
        self.addr(0)
    }

    /// Sender protocol address bytes.
    #[inline]
    pub fn sender_protocol_addr(&self) -> &[u8] {
        self.addr(1)
    }

    /// Target hardware address bytes.
    #[inline]
    pub fn target_hardware_addr(&self) -> &[u8] {
        self.addr(2)
    }

    /// Target protocol address bytes.
    #[inline]
    pub fn target_protocol_addr(&self) -> &[u8] {
        self.addr(3)
    }

    /// True for Ethernet/IPv4 ARP (6-byte hardware and 4-byte protocol addresses).
    #[inline]
    pub fn is_ethernet_ipv4(&self) -> bool {
        self.hardware_len() == 6 && self.protocol_len() == 4 && self.protocol_type() == 0x0800
    }

    /// Sender (MAC, IPv4) for Ethernet/IPv4 ARP.
    pub fn sender_ethernet_ipv4(&self) -> Option<(MacAddr, Ipv4Addr)> {
        self.eth_ip(0)
    }

    /// Target (MAC, IPv4) for Ethernet/IPv4 ARP.
    pub fn target_ethernet_ipv4(&self) -> Option<(MacAddr, Ipv4Addr)> {
        self.eth_ip(2)
    }

    fn eth_ip(&self, index: usize) -> Option<(MacAddr, Ipv4Addr)> {
        if !self.is_ethernet_ipv4() {
            return None;
        }
        let mut mac = [0; 6];
        mac.copy_from_slice(self.addr(index));
        let ip = self.addr(index + 1);
        Some((MacAddr(mac), Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3])))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    static REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 6, 4, 0x00, 0x01, // fixed part: Ethernet, IPv4, request
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 10, 0, 0, 1, // sender
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 10, 0, 0, 2, // target
    ];

    #[test]
    fn deconstruct() {
        let a = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(a.hardware_type(), 1);
        assert_eq!(a.protocol_type(), 0x0800);
        assert_eq!(a.hardware_len(), 6);
        assert_eq!(a.protocol_len(), 4);
        assert_eq!(a.operation(), OP_REQUEST);
        assert_eq!(a.packet_len(), 28);
        assert_eq!(a.sender_hardware_addr(), &REQUEST[8..14]);
        assert_eq!(a.sender_protocol_addr(), &[10, 0, 0, 1]);
        assert_eq!(a.target_hardware_addr(), &[0; 6]);
        assert_eq!(a.target_protocol_addr(), &[10, 0, 0, 2]);
        assert!(a.is_ethernet_ipv4());
        let (mac, ip) = a.sender_ethernet_ipv4().unwrap();
        assert_eq!(mac.to_string(), "02:00:00:00:00:01");
        assert_eq!(ip, Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(
            a.target_ethernet_ipv4().unwrap().1,
            Ipv4Addr::new(10, 0, 0, 2)
        );
    }

    #[test]
    fn short() {
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..7]),
            Err(ErrorKind::Truncated)
        );
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]),
            Err(ErrorKind::Truncated)
        );
        // odd sizes are fine as long as they fit
        let odd = [0, 1, 0x08, 0x00, 1, 2, 0, 2, 9, 8, 7, 6, 5, 4];
        let a = ArpPacket::new_checked(&odd[..]).unwrap();
        assert_eq!(a.sender_hardware_addr(), &[9]);
        assert_eq!(a.sender_protocol_addr(), &[8, 7]);
        assert_eq!(a.target_hardware_addr(), &[6]);
        assert_eq!(a.target_protocol_addr(), &[5, 4]);
        assert_eq!(a.sender_ethernet_ipv4(), None);
    }
}
