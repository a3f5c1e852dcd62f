//! The stateless per-packet step of metering: a frame becomes a [`Prepared`] (canonical key,
//! hash, counters' inputs, and what fragment attribution will need) with no shared state, so it
//! can run on any thread, in any order. [`Meter::packet_prepared`](crate::Meter::packet_prepared)
//! is the stateful step that must see the packets in order (fragment table, counters, flow table,
//! expiry).
//!
//! [`Preparer::prepare`] first tries a hand-written parser of the common shapes (Ethernet with
//! up to two VLAN tags, or raw IP; IPv4 with or without options, or IPv6 without extension
//! headers; TCP, UDP, ICMP, ICMPv6, SCTP or any protocol the decoder does not follow) straight
//! from the bytes, and falls back to the full decoder ([`weir_decode`], then
//! [`Preparer::prepare_decoded`]) for everything else: other link types, MPLS, PPPoE, LLC,
//! tunnels (GRE, VXLAN, IP in IP, which are metered by their inner packet), IP fragments, IPv6
//! extension headers, and anything truncated or malformed. Both paths give the same
//! [`Prepared`] for every frame (tests run both over the whole corpus and over mutated frames).
//!
//! The fast path is justified by the benchmark (`bench/flows_vs_peers.py`'s 3.02 M-packet trace,
//! `examples/flows_steps.rs`, best of 3 on a loaded 2-core VM): it handles 98 % of the trace's
//! packets, and preparing costs ≈ 17 ns/packet against ≈ 31 ns/packet through the decoder
//! (file reading ≈ 50 ns/packet on top of either).

use weir_decode::{decode_into, ip_proto, Decoded, LinkType, Transport};

use crate::key::{Endpoints, Key, KeyHasher, RawKey};

/// What [`Preparer::prepare`] found, packed with the direction bit into one byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// Metered normally.
    Metered = 0,
    /// IP packet whose transport header was cut short: metered with ports 0.
    NoTransport = 1,
    /// No IP header: dropped.
    NonIp = 2,
    /// Decoding stopped before an IP header: dropped.
    DecodeError = 3,
    /// A first fragment with more to come: metered, and its ports remembered.
    FirstFrag = 4,
    /// Like `FirstFrag`, but its transport header was cut short (ports 0).
    FirstFragNoTransport = 5,
    /// A later fragment: its ports come from the fragment table.
    LaterFrag = 6,
    /// Not a packet: the packet clock reached `ts_ns` (a shard with no packets of its own still
    /// expires its flows).
    Tick = 7,
}

const FROM_B: u8 = 0x80;

/// One packet ready for the flow table: 64 bytes, `Copy` and `Send`, built by
/// [`Preparer::prepare`] on any thread and consumed in packet order by
/// [`Meter::packet_prepared`](crate::Meter::packet_prepared).
///
/// For IP fragments (first fragments with more to come, and later fragments) the `hash` slot
/// holds the datagram's hash ([`KeyHasher::fragment`]) instead of the key's hash, and the key of a
/// later fragment has ports 0: the in-order step attributes the fragment, then rehashes.
///
/// Aligned to a cache line, so each one is read by the metering thread with one line fill
/// (batches of them move between threads).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(align(64))]
pub struct Prepared {
    /// Canonical key (zero when the packet is not metered).
    pub(crate) key: Key,
    /// Seeded hash of `key`; for fragments, the datagram's hash.
    pub(crate) hash: u64,
    /// Capture time, ns since the epoch.
    pub(crate) ts_ns: u64,
    /// IP length.
    pub(crate) bytes: u32,
    /// TCP flags (0 for other protocols).
    pub(crate) tcp_flags: u8,
    /// TTL / hop limit.
    pub(crate) ttl: u8,
    /// TOS / traffic class.
    pub(crate) tos: u8,
    /// `Kind` in the low bits, [`FROM_B`] when the packet goes from side B to side A.
    pub(crate) bits: u8,
}

impl Prepared {
    #[inline(always)]
    pub(crate) fn kind(&self) -> Kind {
        match self.bits & !FROM_B {
            0 => Kind::Metered,
            1 => Kind::NoTransport,
            2 => Kind::NonIp,
            3 => Kind::DecodeError,
            4 => Kind::FirstFrag,
            5 => Kind::FirstFragNoTransport,
            6 => Kind::LaterFrag,
            _ => Kind::Tick,
        }
    }

    #[inline]
    pub(crate) fn set_kind(&mut self, k: Kind) {
        self.bits = (self.bits & FROM_B) | k as u8;
    }

    #[inline]
    pub(crate) fn set_from_b(&mut self, from_b: bool) {
        self.bits = (self.bits & !FROM_B) | if from_b { FROM_B } else { 0 };
    }

    /// A dropped packet (no IP header): only its time counts.
    fn dropped(ts_ns: u64, kind: Kind) -> Prepared {
        Prepared {
            ts_ns,
            bits: kind as u8,
            ..Prepared::default()
        }
    }

    /// The clock mark a [`Router`](crate::Router) puts into every shard's batch.
    pub(crate) fn tick(ts_ns: u64) -> Prepared {
        Prepared::dropped(ts_ns, Kind::Tick)
    }

    /// Canonical key (ports 0 for a later fragment, until attributed).
    #[inline]
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Seeded hash of the key, `None` for fragments (the in-order step rehashes them) and
    /// dropped packets.
    #[inline]
    pub fn hash(&self) -> Option<u64> {
        matches!(self.kind(), Kind::Metered | Kind::NoTransport).then_some(self.hash)
    }

    /// Capture time, ns since the epoch.
    #[inline]
    pub fn ts_ns(&self) -> u64 {
        self.ts_ns
    }

    /// IP length (0 for dropped packets).
    #[inline]
    pub fn bytes(&self) -> u32 {
        self.bytes
    }

    /// The packet goes from side B to side A of its canonical key.
    #[inline]
    pub fn from_b(&self) -> bool {
        self.bits & FROM_B != 0
    }

    /// TCP flags (0 for other protocols).
    #[inline]
    pub fn tcp_flags(&self) -> u8 {
        self.tcp_flags
    }

    /// TTL / hop limit.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.ttl
    }

    /// TOS / traffic class.
    #[inline]
    pub fn tos(&self) -> u8 {
        self.tos
    }

    /// False for packets the meter drops (no IP header, or decoding failed before it).
    #[inline]
    pub fn is_metered(&self) -> bool {
        !matches!(self.kind(), Kind::NonIp | Kind::DecodeError | Kind::Tick)
    }

    /// True for IP fragments whose handling needs the fragment table (first fragments with more
    /// to come, later fragments).
    #[inline]
    pub fn is_fragment(&self) -> bool {
        matches!(
            self.kind(),
            Kind::FirstFrag | Kind::FirstFragNoTransport | Kind::LaterFrag
        )
    }
}

/// The stateless per-packet step: the run's key hasher and key settings. `Clone + Send + Sync`:
/// give each reading thread its own copy (or share one by reference).
#[derive(Clone, Debug)]
pub struct Preparer {
    hasher: KeyHasher,
    tos_key: bool,
}

/// What the fast parser reads from a frame.
struct Parsed {
    src: [u64; 2],
    dst: [u64; 2],
    e: Endpoints,
    bytes: u32,
    tcp_flags: u8,
    ttl: u8,
    tos: u8,
    kind: Kind,
    frag_id: u32,
}

#[inline(always)]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline(always)]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

/// The fast parser: `None` sends the frame to the decoder. Every check mirrors the decoder's
/// (`weir_decode`), and every shape it does not handle exactly like the decoder is refused.
#[inline(always)]
fn parse(link: LinkType, frame: &[u8]) -> Option<Parsed> {
    let mut vlan = 0u16;
    let ip = match link {
        LinkType::ETHERNET => {
            if frame.len() < 14 {
                return None;
            }
            let mut t = be16(frame, 12);
            let mut at = 14;
            let mut tags = 0;
            while matches!(t, 0x8100 | 0x88a8 | 0x9100 | 0x9200) {
                // the decoder takes any number; two cover 802.1Q and QinQ
                if tags == 2 || frame.len() < at + 4 {
                    return None;
                }
                if tags == 0 {
                    vlan = be16(frame, at) & 0x0fff;
                }
                t = be16(frame, at + 2);
                at += 4;
                tags += 1;
            }
            match t {
                0x0800 => (4, &frame[at..]),
                0x86dd => (6, &frame[at..]),
                _ => return None,
            }
        }
        LinkType::RAW | LinkType::RAW_12 | LinkType::RAW_14 => match frame.first()? >> 4 {
            4 => (4, frame),
            6 => (6, frame),
            _ => return None,
        },
        LinkType::IPV4 => (4, frame),
        LinkType::IPV6 => (6, frame),
        _ => return None,
    };
    // `later`: a non-first fragment (no transport header); `frag`: the IP ID of a fragment
    // that needs the fragment table
    let (src, dst, proto, bytes, ttl, tos, l4, v6, later, frag) = match ip {
        (4, b) => {
            if b.len() < 20 || b[0] >> 4 != 4 || b[0] & 0x0f < 5 {
                return None;
            }
            let hl = usize::from(b[0] & 0x0f) * 4;
            let total = usize::from(be16(b, 2));
            if b.len() < hl || (total != 0 && total < hl) {
                return None;
            }
            let fl = be16(b, 6);
            let (later, frag) = if fl & 0x3fff == 0 {
                (false, None)
            } else {
                // an offset: a later fragment; else MF: a first one
                (fl & 0x1fff != 0, Some(u32::from(be16(b, 4))))
            };
            let end = if total == 0 {
                b.len()
            } else {
                total.min(b.len())
            };
            (
                [0, u64::from(be32(b, 12))],
                [0, u64::from(be32(b, 16))],
                b[9],
                total as u32,
                b[8],
                b[1],
                &b[hl..end],
                false,
                later,
                frag,
            )
        }
        (_, b) => {
            if b.len() < 40 || b[0] >> 4 != 6 {
                return None;
            }
            let n = usize::from(be16(b, 4));
            let rest = &b[40..];
            let mut l4 = if n == 0 {
                rest
            } else {
                &rest[..n.min(rest.len())]
            };
            let mut proto = b[6];
            let (mut later, mut frag, mut seen) = (false, None, false);
            // extension headers: hop-by-hop, destination options, routing, fragment (at most
            // one), as the decoder walks them; anything else goes to the decoder
            let mut exts = 0;
            loop {
                let len = match proto {
                    ip_proto::HOPOPT | ip_proto::DSTOPTS | ip_proto::ROUTING => {
                        if l4.len() < 2 {
                            return None;
                        }
                        (usize::from(l4[1]) + 1) * 8
                    }
                    ip_proto::FRAGMENT => {
                        if seen {
                            return None;
                        }
                        seen = true;
                        8
                    }
                    _ => break,
                };
                exts += 1;
                if exts > 4 || l4.len() < len {
                    return None;
                }
                let next = l4[0];
                if proto == ip_proto::FRAGMENT {
                    let off_m = be16(l4, 2);
                    // an atomic fragment (no offset, no M) needs nothing remembered
                    later = off_m & 0xfff8 != 0;
                    if later || off_m & 1 != 0 {
                        frag = Some(be32(l4, 4));
                    }
                }
                proto = next;
                l4 = &l4[len..];
                if later {
                    break;
                }
            }
            (
                [be64(b, 8), be64(b, 16)],
                [be64(b, 24), be64(b, 32)],
                proto,
                n as u32 + 40,
                b[7],
                (be16(b, 0) >> 4) as u8,
                l4,
                true,
                later,
                frag,
            )
        }
    };
    let mut tcp_flags = 0;
    let (src_port, dst_port) = if later {
        (0, 0)
    } else {
        match proto {
            ip_proto::TCP => {
                if l4.len() < 20 || l4[12] >> 4 < 5 || l4.len() < usize::from(l4[12] >> 4) * 4 {
                    return None;
                }
                tcp_flags = l4[13];
                (be16(l4, 0), be16(l4, 2))
            }
            ip_proto::UDP => {
                if l4.len() < 8 {
                    return None;
                }
                let len = be16(l4, 4);
                let dport = be16(l4, 2);
                // 4789 may be VXLAN (a tunnel the decoder follows)
                if (1..8).contains(&len) || dport == 4789 {
                    return None;
                }
                (be16(l4, 0), dport)
            }
            ip_proto::ICMP | ip_proto::ICMPV6 => {
                if l4.len() < 4 {
                    return None;
                }
                (0, u16::from(l4[0]) << 8 | u16::from(l4[1]))
            }
            ip_proto::SCTP => {
                if l4.len() < 12 {
                    return None;
                }
                (be16(l4, 0), be16(l4, 2))
            }
            // tunnels the decoder follows
            ip_proto::GRE | ip_proto::IPIP | ip_proto::IPV6 => return None,
            p if v6 && weir_decode::ip6::is_extension(p) => return None,
            _ => (0, 0),
        }
    };
    let kind = match (later, frag) {
        (true, _) => Kind::LaterFrag,
        (false, Some(_)) => Kind::FirstFrag,
        (false, None) => Kind::Metered,
    };
    Some(Parsed {
        src,
        dst,
        e: Endpoints {
            v6,
            vlan,
            proto,
            src_port,
            dst_port,
            tos: 0,
        },
        bytes,
        tcp_flags,
        ttl,
        tos,
        kind,
        frag_id: frag.unwrap_or(0),
    })
}

impl Preparer {
    /// A preparer hashing with `hasher`; `tos_key` puts the TOS into the key.
    pub fn new(hasher: KeyHasher, tos_key: bool) -> Preparer {
        Preparer { hasher, tos_key }
    }

    /// The key hasher.
    pub fn hasher(&self) -> &KeyHasher {
        &self.hasher
    }

    /// Prepares one frame of link type `link` captured at `ts_ns`: the fast parser when it
    /// knows the frame's shape, the decoder otherwise (same result).
    #[inline]
    pub fn prepare(&self, link: LinkType, ts_ns: u64, frame: &[u8]) -> Prepared {
        match parse(link, frame) {
            Some(p) => {
                let mut e = p.e;
                if self.tos_key {
                    e.tos = p.tos;
                }
                let (key, from_b) = Key::canonical_words(p.src, p.dst, e);
                Prepared {
                    key,
                    hash: if p.kind == Kind::Metered {
                        self.hasher.hash(&key)
                    } else {
                        let e = &p.e;
                        self.hasher.fragment(p.src, p.dst, e.proto, e.v6, p.frag_id)
                    },
                    ts_ns,
                    bytes: p.bytes,
                    tcp_flags: p.tcp_flags,
                    ttl: p.ttl,
                    tos: p.tos,
                    bits: p.kind as u8 | if from_b { FROM_B } else { 0 },
                }
            }
            None => self.prepare_slow(link, ts_ns, frame),
        }
    }

    /// [`prepare`](Self::prepare) through the decoder only (the reference the fast path is
    /// tested against).
    #[inline(never)]
    pub fn prepare_slow(&self, link: LinkType, ts_ns: u64, frame: &[u8]) -> Prepared {
        let mut d = Decoded::new();
        decode_into(&mut d, link, frame);
        self.prepare_decoded(&d, ts_ns)
    }

    /// Prepares an already decoded frame.
    pub fn prepare_decoded(&self, d: &Decoded<'_>, ts_ns: u64) -> Prepared {
        let Some(ip) = d.ip() else {
            return Prepared::dropped(
                ts_ns,
                if d.error().is_some() {
                    Kind::DecodeError
                } else {
                    Kind::NonIp
                },
            );
        };
        let mut kind = Kind::Metered;
        let mut flags = 0;
        let (sport, dport) = match d.transport() {
            Some(Transport::Tcp {
                src, dst, flags: f, ..
            }) => {
                flags = f;
                (src, dst)
            }
            Some(Transport::Udp { src, dst, .. }) | Some(Transport::Sctp { src, dst, .. }) => {
                (src, dst)
            }
            Some(Transport::Icmp { icmp_type, code })
            | Some(Transport::Icmpv6 { icmp_type, code }) => {
                (0, u16::from(icmp_type) << 8 | u16::from(code))
            }
            Some(Transport::Other(_)) => (0, 0),
            None => {
                if !ip.is_later_fragment() {
                    kind = Kind::NoTransport;
                }
                (0, 0)
            }
        };
        let mut frag_id = None;
        if let Some(f) = ip.fragment {
            if f.offset != 0 {
                kind = Kind::LaterFrag;
                frag_id = Some(f.id);
            } else if f.more {
                kind = if kind == Kind::NoTransport {
                    Kind::FirstFragNoTransport
                } else {
                    Kind::FirstFrag
                };
                frag_id = Some(f.id);
            }
        }
        let raw = RawKey {
            vlan: d.vlan().unwrap_or(0),
            src: ip.src,
            dst: ip.dst,
            proto: ip.proto,
            src_port: sport,
            dst_port: dport,
            tos: if self.tos_key { ip.tos } else { 0 },
        };
        let (key, from_b) = Key::canonical(&raw);
        let hash = match frag_id {
            Some(id) => {
                let (src, dst, _, _) = key.endpoints(from_b);
                self.hasher.fragment(src, dst, key.proto(), key.is_v6(), id)
            }
            None => self.hasher.hash(&key),
        };
        Prepared {
            key,
            hash,
            ts_ns,
            bytes: ip.len,
            tcp_flags: if ip.proto == ip_proto::TCP { flags } else { 0 },
            ttl: ip.ttl,
            tos: ip.tos,
            bits: kind as u8 | if from_b { FROM_B } else { 0 },
        }
    }
}

/// True when the fast parser handles the frame itself (tests check it is not always refusing).
#[cfg(test)]
pub(crate) fn fast_accepts(link: LinkType, frame: &[u8]) -> bool {
    parse(link, frame).is_some()
}
