//! The compact, canonical flow key the flow table stores and compares, and the seeded symmetric
//! hash over it.
//!
//! A [`Key`] is five `u64` words: the two endpoint addresses (IPv4 stored as the low 32 bits of an
//! otherwise zero 128-bit value, with a flag word bit saying which family) and one word packing
//! ports, VLAN, family, protocol and (optionally) TOS. Both directions of a conversation produce
//! the same key: the endpoint `(address, port)` that sorts first becomes side A. Hashing that
//! canonical key is what makes the hash symmetric, so both directions land in the same shard and
//! the same table slot. ICMP is the exception to port ordering: its "ports" are `0` and
//! `type << 8 | code` (NetFlow's convention), which are not endpoint properties, so only the
//! addresses are ordered and the port pair is kept as it is.

use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use weir_decode::ip_proto;

use crate::record::FlowKey;

/// Bit of the meta word marking IPv6 addresses.
const V6_BIT: u64 = 1 << 44;

/// A canonical flow key: both directions of a flow give the same value.
#[derive(Clone, Copy, Debug, Eq, Default)]
pub struct Key {
    /// `[a_hi, a_lo, b_hi, b_lo, meta]`; meta = `port_a | port_b << 16 | vlan << 32 | v6 << 44 |
    /// proto << 48 | tos << 56`.
    w: [u64; 5],
}

/// A packet's key before canonicalisation: who sent it to whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawKey {
    /// Outermost VLAN id (12 bits), 0 when untagged.
    pub vlan: u16,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// IP protocol.
    pub proto: u8,
    /// Source port (0 without ports).
    pub src_port: u16,
    /// Destination port; ICMP `type << 8 | code`.
    pub dst_port: u16,
    /// TOS when keyed on, else 0.
    pub tos: u8,
}

/// Everything of a raw key but the addresses, for [`Key::canonical_words`].
#[derive(Clone, Copy)]
pub(crate) struct Endpoints {
    pub v6: bool,
    pub vlan: u16,
    pub proto: u8,
    pub src_port: u16,
    pub dst_port: u16,
    pub tos: u8,
}

fn split(a: IpAddr) -> (u64, u64) {
    match a {
        IpAddr::V4(v) => (0, u64::from(u32::from(v))),
        IpAddr::V6(v) => {
            let x = u128::from(v);
            ((x >> 64) as u64, x as u64)
        }
    }
}

fn join(hi: u64, lo: u64, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from((u128::from(hi) << 64) | u128::from(lo)))
    } else {
        IpAddr::V4(Ipv4Addr::from(lo as u32))
    }
}

/// True for the protocols whose "ports" carry ICMP type/code.
#[inline]
fn is_icmp(proto: u8) -> bool {
    proto == ip_proto::ICMP || proto == ip_proto::ICMPV6
}

impl PartialEq for Key {
    /// Branch-free comparison of the five words (the derived one calls `memcmp`).
    #[inline(always)]
    fn eq(&self, o: &Key) -> bool {
        let (a, b) = (&self.w, &o.w);
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
    }
}

impl Key {
    /// The all-zero key of unused entries.
    pub(crate) const ZERO: Key = Key { w: [0; 5] };

    /// A key of these words (the meter's marks carry other data in them).
    pub(crate) fn from_words(w: [u64; 5]) -> Key {
        Key { w }
    }

    /// The five words.
    pub(crate) fn words(&self) -> [u64; 5] {
        self.w
    }

    /// Canonicalises a packet's key. Returns the key and `true` when the packet goes from side B
    /// to side A (its source sorted second). Mixed families (which no real packet has) are keyed
    /// as IPv6 when either address is.
    #[inline]
    pub fn canonical(raw: &RawKey) -> (Key, bool) {
        let v6 = raw.src.is_ipv6() || raw.dst.is_ipv6();
        let (s_hi, s_lo) = split(raw.src);
        let (d_hi, d_lo) = split(raw.dst);
        Key::canonical_words(
            [s_hi, s_lo],
            [d_hi, d_lo],
            Endpoints {
                v6,
                vlan: raw.vlan,
                proto: raw.proto,
                src_port: raw.src_port,
                dst_port: raw.dst_port,
                tos: raw.tos,
            },
        )
    }

    /// [`canonical`](Self::canonical) on addresses already split into `[hi, lo]` words (IPv4:
    /// `[0, address]`): what the fast path of [`Preparer`](crate::Preparer) calls, so both paths
    /// share one canonicalisation.
    #[inline(always)]
    pub(crate) fn canonical_words(src: [u64; 2], dst: [u64; 2], e: Endpoints) -> (Key, bool) {
        let [s_hi, s_lo] = src;
        let [d_hi, d_lo] = dst;
        let icmp = is_icmp(e.proto);
        let flipped = if icmp {
            (s_hi, s_lo) > (d_hi, d_lo)
        } else {
            (s_hi, s_lo, e.src_port) > (d_hi, d_lo, e.dst_port)
        };
        let (a_hi, a_lo, b_hi, b_lo) = if flipped {
            (d_hi, d_lo, s_hi, s_lo)
        } else {
            (s_hi, s_lo, d_hi, d_lo)
        };
        let (pa, pb) = if flipped && !icmp {
            (e.dst_port, e.src_port)
        } else {
            (e.src_port, e.dst_port)
        };
        let meta = u64::from(pa)
            | u64::from(pb) << 16
            | u64::from(e.vlan & 0x0fff) << 32
            | if e.v6 { V6_BIT } else { 0 }
            | u64::from(e.proto) << 48
            | u64::from(e.tos) << 56;
        (
            Key {
                w: [a_hi, a_lo, b_hi, b_lo, meta],
            },
            flipped,
        )
    }

    /// The packet's source and destination address words and ports (in the packet's own
    /// direction), from its canonical key and direction.
    #[inline]
    pub(crate) fn endpoints(&self, from_b: bool) -> ([u64; 2], [u64; 2], u16, u16) {
        let w = &self.w;
        let (a, b) = ([w[0], w[1]], [w[2], w[3]]);
        let (pa, pb) = (w[4] as u16, (w[4] >> 16) as u16);
        let ports = if from_b && !is_icmp(self.proto()) {
            (pb, pa)
        } else {
            (pa, pb)
        };
        let (src, dst) = if from_b { (b, a) } else { (a, b) };
        (src, dst, ports.0, ports.1)
    }

    /// The canonical key of the same packet with ports `src_port`, `dst_port` (a later fragment
    /// given its datagram's ports), and its direction.
    #[inline]
    pub(crate) fn with_ports(&self, from_b: bool, src_port: u16, dst_port: u16) -> (Key, bool) {
        let (src, dst, _, _) = self.endpoints(from_b);
        let m = self.w[4];
        Key::canonical_words(
            src,
            dst,
            Endpoints {
                v6: self.is_v6(),
                vlan: ((m >> 32) & 0x0fff) as u16,
                proto: self.proto(),
                src_port,
                dst_port,
                tos: (m >> 56) as u8,
            },
        )
    }

    /// The packet's [`RawKey`] back from its canonical key and direction (the inverse of
    /// [`canonical`](Self::canonical)).
    pub fn raw(&self, from_b: bool) -> RawKey {
        let f = self.flow_key(from_b, 0);
        RawKey {
            vlan: f.vlan,
            src: f.src,
            dst: f.dst,
            proto: f.proto,
            src_port: f.src_port,
            dst_port: f.dst_port,
            tos: f.tos,
        }
    }

    /// The IP protocol.
    #[inline]
    pub fn proto(&self) -> u8 {
        (self.w[4] >> 48) as u8
    }

    /// True for IPv6 keys.
    #[inline]
    pub fn is_v6(&self) -> bool {
        self.w[4] & V6_BIT != 0
    }

    /// The flow key of direction A→B (`from_b == false`) or B→A, with `tos` as the TOS field
    /// (the key's own TOS when keyed on it, otherwise the flow's first TOS).
    pub fn flow_key(&self, from_b: bool, tos: u8) -> FlowKey {
        let v6 = self.is_v6();
        let a = join(self.w[0], self.w[1], v6);
        let b = join(self.w[2], self.w[3], v6);
        let m = self.w[4];
        let (pa, pb) = (m as u16, (m >> 16) as u16);
        let proto = self.proto();
        let key_tos = (m >> 56) as u8;
        let (src, dst) = if from_b { (b, a) } else { (a, b) };
        let (src_port, dst_port) = if from_b && !is_icmp(proto) {
            (pb, pa)
        } else {
            (pa, pb)
        };
        FlowKey {
            vlan: ((m >> 32) & 0x0fff) as u16,
            src,
            dst,
            proto,
            src_port,
            dst_port,
            tos: if key_tos != 0 { key_tos } else { tos },
        }
    }
}

/// The per-run seeded hash of canonical keys. Seeded from the OS's randomness by default, so an
/// attacker cannot precompute keys that collide; a fixed seed makes runs reproducible (tests).
///
/// It is the folded-multiply construction of wyhash / foldhash (a 64×64→128-bit multiply whose
/// halves are XOR-ed), specialised to the key's five words with seven secret 64-bit keys derived
/// from the seed. `foldhash::hash_one` on the same key goes through its byte-slice path; this
/// replacement (with the branch-free key comparison) cut the flows command's CPU time on the
/// 3 M-packet bench trace from 0.53 s to 0.41 s. Keyed, not a cryptographic PRF: lookups compare the whole key,
/// so a collision can only slow a lookup down, never merge two flows.
#[derive(Clone, Debug)]
pub struct KeyHasher {
    s: [u64; 7],
}

#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

impl KeyHasher {
    /// A hasher with a random per-run seed.
    pub fn random() -> KeyHasher {
        // std's RandomState draws its keys from the OS once per process, then increments them.
        let seed = std::collections::hash_map::RandomState::new().hash_one(0x5745_4952u64);
        KeyHasher::with_seed(seed)
    }

    /// A hasher with a fixed seed.
    pub fn with_seed(seed: u64) -> KeyHasher {
        // splitmix64 expands the seed into the secret keys (odd, so no multiply loses bits)
        let mut x = seed;
        let mut s = [0u64; 7];
        for k in &mut s {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            *k = (z ^ (z >> 31)) | 1;
        }
        KeyHasher { s }
    }

    /// The hash of a canonical key (so of both directions of its flow).
    #[inline]
    pub fn hash(&self, k: &Key) -> u64 {
        let (w, s) = (&k.w, &self.s);
        let h0 = fold_mul(w[0] ^ s[0], w[1] ^ s[1]);
        let h1 = fold_mul(w[2] ^ s[2], w[3] ^ s[3]);
        let h2 = fold_mul(w[4] ^ s[4], h0 ^ s[5]);
        fold_mul(h1 ^ h2, s[6])
    }

    /// The hash that picks a packet's shard: the canonical key's addresses, VLAN and family only
    /// (so symmetric), not its ports or protocol. A later IP fragment, whose ports are only known
    /// once its first fragment is found, therefore lands in the same shard as its first fragment
    /// and as the rest of its flow, and each shard can keep its own fragment table.
    #[inline]
    pub fn route(&self, k: &Key) -> u64 {
        let (w, s) = (&k.w, &self.s);
        let h0 = fold_mul(w[0] ^ s[1], w[1] ^ s[2]);
        let h1 = fold_mul(w[2] ^ s[3], w[3] ^ s[4]);
        fold_mul(h0 ^ h1 ^ (w[4] & ROUTE_META), s[5])
    }

    /// The hash of an IP datagram (source, destination, protocol, identification, in the
    /// packet's own direction), under which the fragment table remembers its first fragment's
    /// ports. Never 0 (the table's empty mark).
    #[inline]
    pub fn fragment(&self, src: [u64; 2], dst: [u64; 2], proto: u8, v6: bool, id: u32) -> u64 {
        let meta = u64::from(proto) | u64::from(v6) << 8 | u64::from(id) << 32;
        self.hash(&Key {
            w: [src[0], src[1], dst[0], dst[1], meta],
        })
        .max(1)
    }
}

/// The meta word's VLAN and family bits, which [`KeyHasher::route`] includes.
const ROUTE_META: u64 = 0x0fff << 32 | V6_BIT;

/// The shard of `n` a hash belongs to: multiply-shift on the low 32 bits, so the shard choice
/// does not constrain the top bits hashbrown uses for its tags.
#[inline]
pub fn shard_of(hash: u64, n: usize) -> usize {
    (((hash & 0xffff_ffff) * n as u64) >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(src: &str, dst: &str, proto: u8, sp: u16, dp: u16) -> RawKey {
        RawKey {
            vlan: 7,
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            proto,
            src_port: sp,
            dst_port: dp,
            tos: 0,
        }
    }

    #[test]
    fn both_directions_same_key_and_hash() {
        let h = KeyHasher::with_seed(1);
        for (a, b) in [("10.0.0.1", "10.0.0.2"), ("2001:db8::2", "2001:db8::1")] {
            let (k1, f1) = Key::canonical(&raw(a, b, 6, 1234, 80));
            let (k2, f2) = Key::canonical(&raw(b, a, 6, 80, 1234));
            assert_eq!(k1, k2);
            assert_ne!(f1, f2);
            assert_eq!(h.hash(&k1), h.hash(&k2));
            let fk = k1.flow_key(f1, 0);
            assert_eq!(fk.src, a.parse::<IpAddr>().unwrap());
            assert_eq!(
                (fk.src_port, fk.dst_port, fk.vlan, fk.proto),
                (1234, 80, 7, 6)
            );
            assert_eq!(k1.flow_key(!f1, 0), fk.reversed());
            assert_eq!(k1.raw(f1), raw(a, b, 6, 1234, 80));
            assert_eq!(k1.raw(!f1), raw(b, a, 6, 80, 1234));
        }
    }

    #[test]
    fn same_address_orders_by_port() {
        let (k1, f1) = Key::canonical(&raw("10.0.0.1", "10.0.0.1", 17, 9, 5));
        let (k2, f2) = Key::canonical(&raw("10.0.0.1", "10.0.0.1", 17, 5, 9));
        assert_eq!(k1, k2);
        assert!(f1 && !f2);
    }

    #[test]
    fn icmp_ports_stay_put() {
        let (k, f) = Key::canonical(&raw("10.0.0.9", "10.0.0.1", 1, 0, 0x0300));
        assert!(f);
        let fwd = k.flow_key(f, 0);
        assert_eq!(fwd.src.to_string(), "10.0.0.9");
        assert_eq!((fwd.src_port, fwd.dst_port), (0, 0x0300));
        let rev = k.flow_key(!f, 0);
        assert_eq!((rev.src_port, rev.dst_port), (0, 0x0300));
        assert_eq!(rev.src.to_string(), "10.0.0.1");
    }

    #[test]
    fn v4_and_v6_never_equal() {
        let (k4, _) = Key::canonical(&raw("0.0.0.1", "0.0.0.2", 17, 1, 2));
        let (k6, _) = Key::canonical(&raw("::1", "::2", 17, 1, 2));
        assert_ne!(k4, k6);
        assert!(!k4.is_v6() && k6.is_v6());
    }

    #[test]
    fn seed_changes_hash() {
        let (k, _) = Key::canonical(&raw("10.0.0.1", "10.0.0.2", 6, 1, 2));
        assert_ne!(
            KeyHasher::with_seed(1).hash(&k),
            KeyHasher::with_seed(2).hash(&k)
        );
        assert_eq!(
            KeyHasher::with_seed(3).hash(&k),
            KeyHasher::with_seed(3).hash(&k)
        );
        // two random hashers differ (2^-64 chance of a false failure)
        assert_ne!(KeyHasher::random().hash(&k), KeyHasher::random().hash(&k));
    }

    #[test]
    fn shard_of_is_in_range_and_spread() {
        let h = KeyHasher::with_seed(9);
        let mut counts = [0u32; 3];
        for p in 0..3000u16 {
            let (k, _) = Key::canonical(&raw("10.0.0.1", "10.0.0.2", 6, p, 80));
            counts[shard_of(h.hash(&k), 3)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }

    #[test]
    fn route_follows_addresses_and_vlan_only() {
        let h = KeyHasher::with_seed(9);
        let route = |r: &RawKey| h.route(&Key::canonical(r).0);
        let a = raw("10.0.0.1", "10.0.0.2", 6, 1234, 80);
        let b = raw("10.0.0.2", "10.0.0.1", 17, 53, 0);
        assert_eq!(
            route(&a),
            route(&b),
            "direction, protocol and ports do not count"
        );
        assert_ne!(route(&a), route(&RawKey { vlan: 8, ..a }));
        assert_ne!(route(&a), route(&raw("10.0.0.1", "10.0.0.3", 6, 1234, 80)));
        let mut counts = [0u32; 3];
        for x in 0..3000u32 {
            let src = std::net::Ipv4Addr::from(0x0a00_0000 + x).to_string();
            counts[shard_of(route(&raw(&src, "10.1.0.1", 6, 1, 80)), 3)] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800), "{counts:?}");
    }

    #[test]
    fn fragment_hash_keeps_direction_and_id() {
        let h = KeyHasher::with_seed(9);
        let (s, d) = ([0, 1], [0, 2]);
        let x = h.fragment(s, d, 17, false, 7);
        assert_ne!(x, h.fragment(d, s, 17, false, 7));
        assert_ne!(x, h.fragment(s, d, 17, false, 8));
        assert_ne!(x, h.fragment(s, d, 6, false, 7));
        assert_ne!(x, h.fragment(s, d, 17, true, 7));
        assert_ne!(x, 0);
    }
}
