//! Capture-only link headers: BSD loopback address families and Linux "cooked" capture headers
//! (SLL, 16 bytes; SLL2, 20 bytes).

use weir_packet::bytes::{be16, be32};

use crate::{ErrorKind, Result};

/// BSD loopback address family for IPv4.
pub const AF_INET: u32 = 2;
/// BSD loopback address families for IPv6: NetBSD/OpenBSD (24), FreeBSD (28), Darwin (30).
pub const AF_INET6: [u32; 3] = [24, 28, 30];

/// Reads a BSD loopback header (4 bytes). With `network_order` (LINKTYPE_LOOP) the family is
/// big-endian; otherwise (LINKTYPE_NULL) it is in the capturing host's order, unknown here, so
/// both orders are tried and the one giving a known family wins (little-endian when neither does).
pub fn loopback_family(header: [u8; 4], network_order: bool) -> u32 {
    let be = u32::from_be_bytes(header);
    if network_order {
        return be;
    }
    let le = u32::from_le_bytes(header);
    let known = |f: u32| f == AF_INET || AF_INET6.contains(&f);
    if known(le) || !known(be) {
        le
    } else {
        be
    }
}

/// Linux ARPHRD value for netlink captures (no ethertype in the protocol field).
pub const ARPHRD_NETLINK: u16 = 824;
/// Linux SLL protocol value meaning an 802.2 LLC frame follows.
pub const SLL_PROTO_LLC: u16 = 0x0004;

mod sll_field {
    use crate::{Field, Rest};
    pub(super) const PACKET_TYPE: Field = 0..2;
    pub(super) const HATYPE: Field = 2..4;
    pub(super) const HALEN: Field = 4..6;
    pub(super) const ADDR: Field = 6..14;
    pub(super) const PROTOCOL: Field = 14..16;
    pub(super) const PAYLOAD: Rest = 16..;
}

/// Length of a Linux SLL header.
pub const SLL_HEADER_LEN: usize = sll_field::PROTOCOL.end;

view! {
    /// A view of a Linux cooked capture v1 header (LINKTYPE_LINUX_SLL).
    SllHeader
}

impl<T: AsRef<[u8]>> SllHeader<T> {
    /// Checks that the 16-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < SLL_HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Packet type: 0 to us, 1 broadcast, 2 multicast, 3 to another host, 4 sent by us.
    #[inline]
    pub fn packet_type(&self) -> u16 {
        be16(self.buffer.as_ref(), sll_field::PACKET_TYPE.start)
    }

    /// ARPHRD type of the interface (1 Ethernet, 772 loopback, 778 IP GRE, 824 netlink...).
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), sll_field::HATYPE.start)
    }

    /// Length of the link-layer address.
    #[inline]
    pub fn addr_len(&self) -> u16 {
        be16(self.buffer.as_ref(), sll_field::HALEN.start)
    }

    /// The link-layer address (up to 8 bytes, as many as `addr_len` says).
    #[inline]
    pub fn addr(&self) -> &[u8] {
        let a = &self.buffer.as_ref()[sll_field::ADDR];
        &a[..a.len().min(self.addr_len() as usize)]
    }

    /// Protocol: an ethertype, or a small Linux value (4 = 802.2 LLC).
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), sll_field::PROTOCOL.start)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> SllHeader<&'a T> {
    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[sll_field::PAYLOAD]
    }
}

mod sll2_field {
    use crate::{Field, Rest};
    pub(super) const PROTOCOL: Field = 0..2;
    pub(super) const RESERVED: Field = 2..4;
    pub(super) const IFINDEX: Field = 4..8;
    pub(super) const HATYPE: Field = 8..10;
    pub(super) const PACKET_TYPE: usize = 10;
    pub(super) const HALEN: usize = 11;
    pub(super) const ADDR: Field = 12..20;
    pub(super) const PAYLOAD: Rest = 20..;
}

/// Length of a Linux SLL2 header.
pub const SLL2_HEADER_LEN: usize = sll2_field::ADDR.end;

view! {
    /// A view of a Linux cooked capture v2 header (LINKTYPE_LINUX_SLL2).
    Sll2Header
}

impl<T: AsRef<[u8]>> Sll2Header<T> {
    /// Checks that the 20-byte header is there.
    #[inline]
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < SLL2_HEADER_LEN {
            Err(ErrorKind::Truncated)
        } else {
            Ok(())
        }
    }

    /// Protocol: an ethertype, or a small Linux value (4 = 802.2 LLC).
    #[inline]
    pub fn protocol(&self) -> u16 {
        be16(self.buffer.as_ref(), sll2_field::PROTOCOL.start)
    }

    /// The reserved field (0).
    #[inline]
    pub fn reserved(&self) -> u16 {
        be16(self.buffer.as_ref(), sll2_field::RESERVED.start)
    }

    /// Interface index the packet was seen on.
    #[inline]
    pub fn interface_index(&self) -> u32 {
        be32(self.buffer.as_ref(), sll2_field::IFINDEX.start)
    }

    /// ARPHRD type of the interface.
    #[inline]
    pub fn hardware_type(&self) -> u16 {
        be16(self.buffer.as_ref(), sll2_field::HATYPE.start)
    }

    /// Packet type, as in [`SllHeader::packet_type`].
    #[inline]
    pub fn packet_type(&self) -> u8 {
        self.buffer.as_ref()[sll2_field::PACKET_TYPE]
    }

    /// Length of the link-layer address.
    #[inline]
    pub fn addr_len(&self) -> u8 {
        self.buffer.as_ref()[sll2_field::HALEN]
    }

    /// The link-layer address (up to 8 bytes).
    #[inline]
    pub fn addr(&self) -> &[u8] {
        let a = &self.buffer.as_ref()[sll2_field::ADDR];
        &a[..a.len().min(self.addr_len() as usize)]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Sll2Header<&'a T> {
    /// The bytes after the header.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        &self.buffer.as_ref()[sll2_field::PAYLOAD]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn loopback_both_orders() {
        assert_eq!(loopback_family([2, 0, 0, 0], false), 2);
        assert_eq!(loopback_family([0, 0, 0, 2], false), 2);
        assert_eq!(loopback_family([30, 0, 0, 0], false), 30);
        assert_eq!(loopback_family([0, 0, 0, 24], false), 24);
        assert_eq!(loopback_family([0, 0, 0, 28], true), 28);
        // network order is not guessed
        assert_eq!(loopback_family([2, 0, 0, 0], true), 0x0200_0000);
        // unknown in both orders: little-endian
        assert_eq!(loopback_family([7, 0, 0, 0], false), 7);
    }

    #[test]
    fn sll() {
        let b = [
            0x00, 0x04, // outgoing
            0x00, 0x01, // ARPHRD_ETHER
            0x00, 0x06, // address length
            0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x00, 0x00, // address + padding
            0x08, 0x00, // IPv4
            0x45,
        ];
        let h = SllHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.packet_type(), 4);
        assert_eq!(h.hardware_type(), 1);
        assert_eq!(h.addr_len(), 6);
        assert_eq!(h.addr(), &[0xde, 0xad, 0xbe, 0xef, 0x00, 0x01]);
        assert_eq!(h.protocol(), 0x0800);
        assert_eq!(h.payload(), &[0x45]);
        assert_eq!(SllHeader::new_checked(&b[..15]), Err(ErrorKind::Truncated));
    }

    #[test]
    fn sll2() {
        let b = [
            0x86, 0xdd, // IPv6
            0x00, 0x00, // reserved
            0x00, 0x00, 0x00, 0x07, // ifindex 7
            0x00, 0x01, // ARPHRD_ETHER
            0x00, // to us
            0x06, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x00, 0x00, 0x60,
        ];
        let h = Sll2Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.protocol(), 0x86dd);
        assert_eq!(h.reserved(), 0);
        assert_eq!(h.interface_index(), 7);
        assert_eq!(h.hardware_type(), 1);
        assert_eq!(h.packet_type(), 0);
        assert_eq!(h.addr_len(), 6);
        assert_eq!(h.addr(), &[1, 2, 3, 4, 5, 6]);
        assert_eq!(h.payload(), &[0x60]);
        assert_eq!(Sll2Header::new_checked(&b[..19]), Err(ErrorKind::Truncated));
    }
}
