//! What identifies a packet at both capture points: its [`Stamp`] when it carries one (weir gen's
//! streams), otherwise a hash of the bytes that do not change hop to hop.
//!
//! The invariant bytes are the IP packet from its header on (the link layer, hence MAC addresses
//! and VLAN tags, is left out), with the IPv4 TTL and header checksum, the IPv6 hop limit and the
//! ECN bits (which a queue may set) zeroed. Only the first [`HASH_PREFIX`] bytes of the IP packet
//! are hashed, which covers the headers of both ends and the start of the payload; a match found
//! by hash is then confirmed by comparing the same masked bytes of both packets in full.

use std::hash::BuildHasher;
use std::net::IpAddr;

use weir_decode::{decode, Layer, Transport};
use weir_gen::Stamp;
use weir_packet::LinkType;

/// Bytes of the IP packet that are hashed.
pub const HASH_PREFIX: usize = 128;

/// How a packet is recognised at the other point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// weir gen's stream id and sequence number.
    Stamp {
        /// Stream id.
        stream: u16,
        /// Sequence number (as sent, 32 bits).
        seq: u32,
    },
    /// Hash of the invariant bytes.
    Hash(u64),
}

/// Which stream an unstamped packet is counted in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// IP protocol.
    pub proto: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (0 when none).
    pub sport: u16,
    /// Destination port (0 when none).
    pub dport: u16,
}

/// What classification found.
#[derive(Clone, Copy, Debug)]
pub struct Classified {
    /// The matching key.
    pub key: Key,
    /// The packet's flow (unstamped packets only).
    pub flow: Option<FlowKey>,
    /// Offset of the IP header in the frame and its length (hash-matched packets only).
    pub ip: Option<(usize, usize)>,
}

/// Zeroes the bytes of an IP packet that change from hop to hop.
#[inline]
pub fn mask(ip: &mut [u8]) {
    match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 12 => {
            ip[1] &= 0xfc; // ECN
            ip[8] = 0; // TTL
            ip[10] = 0; // header checksum
            ip[11] = 0;
        }
        Some(6) if ip.len() >= 8 => {
            ip[1] &= 0xcf; // ECN (low two bits of the traffic class)
            ip[7] = 0; // hop limit
        }
        _ => {}
    }
}

/// Classifies one frame; `None` when it has no IP header (it cannot be matched).
pub fn classify(link: LinkType, frame: &[u8], use_stamps: bool) -> Option<Classified> {
    let d = decode(link, frame);
    let idx = d.ip_index()?;
    if use_stamps {
        let payload = match d.transport() {
            Some(Transport::Udp { payload, .. }) | Some(Transport::Tcp { payload, .. }) => payload,
            _ => &[][..],
        };
        if let Some(s) = Stamp::parse(payload) {
            return Some(Classified {
                key: Key::Stamp {
                    stream: s.stream,
                    seq: s.seq,
                },
                flow: None,
                ip: None,
            });
        }
    }
    let bytes = match d.layers()[idx] {
        Layer::Ipv4(p) => p.into_inner(),
        Layer::Ipv6(p) => p.into_inner(),
        _ => return None,
    };
    // The view borrows the frame: its offset is the distance between the two pointers.
    let off = bytes.as_ptr() as usize - frame.as_ptr() as usize;
    let ip = d.ip()?;
    let (sport, dport) = d.transport().and_then(|t| t.ports()).unwrap_or((0, 0));
    let n = bytes.len().min(HASH_PREFIX);
    let mut buf = [0u8; HASH_PREFIX];
    buf[..n].copy_from_slice(&bytes[..n]);
    mask(&mut buf[..n]);
    let h = foldhash::fast::FixedState::with_seed(0x5745_4952).hash_one(&buf[..n]);
    Some(Classified {
        key: Key::Hash(h),
        flow: Some(FlowKey {
            proto: ip.proto,
            src: ip.src,
            dst: ip.dst,
            sport,
            dport,
        }),
        ip: Some((off, bytes.len())),
    })
}

/// True when two IP packets are the same once masked (compared over the shorter capture).
pub fn same_invariant_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().min(b.len());
    if n == 0 {
        return false;
    }
    let mut x = a[..n].to_vec();
    let mut y = b[..n].to_vec();
    mask(&mut x);
    mask(&mut y);
    x == y
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_gen::{FlowSpec, FrameBuilder, Proto};

    fn frame(ttl: u8, mac: u8, stamp_seq: u32, tos: u8) -> Vec<u8> {
        let mut b = FrameBuilder::new(FlowSpec {
            src_mac: [2, 0, 0, 0, 0, mac],
            dst_mac: [2, 0, 0, 0, 1, mac],
            vlan: None,
            src_ip: "10.1.0.1".parse().unwrap(),
            dst_ip: "10.2.0.1".parse().unwrap(),
            src_port: 1,
            dst_port: 2,
            tos,
            ttl,
            proto: Proto::Udp,
        })
        .unwrap();
        let mut buf = vec![0u8; 100];
        b.build(
            &mut buf,
            100,
            &Stamp {
                stream: 3,
                seq: stamp_seq,
                send_ns: 1,
            },
        );
        buf
    }

    #[test]
    fn stamps_win_and_hashes_ignore_hop_changes() {
        let a = frame(64, 1, 9, 0xb8);
        let c = classify(LinkType::ETHERNET, &a, true).unwrap();
        assert_eq!(c.key, Key::Stamp { stream: 3, seq: 9 });
        // One hop later: TTL - 1 (so a new checksum), other MACs, ECN set: same hash.
        let b = frame(63, 7, 9, 0xbb);
        let ha = classify(LinkType::ETHERNET, &a, false).unwrap();
        let hb = classify(LinkType::ETHERNET, &b, false).unwrap();
        assert_ne!(a[24..26], b[24..26], "checksums differ");
        assert_eq!(ha.key, hb.key);
        assert_eq!(ha.ip, Some((14, 86)));
        assert!(same_invariant_bytes(&a[14..], &b[14..]));
        // Another sequence number is another packet.
        let other = classify(LinkType::ETHERNET, &frame(64, 1, 10, 0xb8), false).unwrap();
        assert_ne!(ha.key, other.key);
        assert!(!same_invariant_bytes(
            &a[14..],
            &frame(64, 1, 10, 0xb8)[14..]
        ));
    }

    #[test]
    fn non_ip_is_not_classified() {
        let arp = [0xffu8; 60];
        assert!(classify(LinkType::ETHERNET, &arp, true).is_none());
    }
}
