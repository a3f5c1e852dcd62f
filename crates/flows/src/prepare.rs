//! The stateless per-packet step of metering: a frame becomes a [`Prepared`] (canonical key,
//! hash, counters' inputs, and what fragment attribution will need) with no shared state, so it
//! can run on any thread, in any order. [`Meter::packet_prepared`](crate::Meter::packet_prepared)
//! is the stateful step that must see the packets in order (fragment table, counters, flow table,
//! expiry).
//!
//! [`Preparer::prepare`] first tries the workspace's fast header parser, [`weir_decode::quick`]
//! (Ethernet, Linux cooked and loopback captures or raw IP; VLAN and MPLS stacks; IPv4 with or
//! without options and fragments; IPv6 with the common extension headers; TCP, UDP, ICMP,
//! ICMPv6, SCTP or any protocol the decoder does not follow), and falls back to the full decoder
//! ([`weir_decode`], then [`Preparer::prepare_decoded`]) for everything else: other link types,
//! PPPoE, LLC, tunnels (GRE, VXLAN, IP in IP, which are metered by their inner packet), rare
//! IPv6 extension headers, and anything truncated or malformed. Both paths give the same
//! [`Prepared`] for every frame (tests run both over the whole corpus and over mutated frames).
//!
//! The fast path is justified by the benchmark (`bench/flows_vs_peers.py`'s 3.02 M-packet trace,
//! `examples/flows_steps.rs`, best of 3 on a loaded 2-core VM): it handles 98 % of the trace's
//! packets, and preparing costs ≈ 17 ns/packet against ≈ 31 ns/packet through the decoder
//! (file reading ≈ 50 ns/packet on top of either).

use weir_decode::quick::{self, Upper};
use weir_decode::{decode_into, ip_proto, Decoded, LinkType, Transport};

use weir_rules::Tag;

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
    /// Not a packet: the next packet of the same shard carries a tag (the rules' tag, kept in
    /// the key words: [`Prepared::tag_mark`]); the flow that packet lands in takes it.
    TagMark = 8,
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
            7 => Kind::Tick,
            _ => Kind::TagMark,
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

    /// The mark that goes right before packet `p` (same shard, same batch) when `p` carries
    /// `tag`: the tag is packed into the key words, the time is the packet's.
    pub(crate) fn tag_mark(tag: &Tag, p: &Prepared) -> Prepared {
        let mut w = [0u64; 5];
        match *tag {
            Tag::Num(n) => w[0] = u64::from(n) << 32,
            Tag::Text { len, bytes } => {
                let mut b = [0u8; 16];
                b[..Tag::MAX_TEXT].copy_from_slice(&bytes);
                w[0] = 1 | u64::from(len) << 8;
                w[1] = u64::from_le_bytes(b[..8].try_into().unwrap_or_default());
                w[2] = u64::from_le_bytes(b[8..].try_into().unwrap_or_default());
            }
        }
        Prepared {
            key: Key::from_words(w),
            // routed with the packet: the router looks at `key`, so it is given the packet
            hash: 0,
            ts_ns: p.ts_ns,
            bits: Kind::TagMark as u8,
            ..Prepared::default()
        }
    }

    /// The tag a [`Kind::TagMark`] carries.
    pub(crate) fn mark_tag(&self) -> Tag {
        let w = self.key.words();
        if w[0] & 0xff == 0 {
            return Tag::Num((w[0] >> 32) as u32);
        }
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&w[1].to_le_bytes());
        b[8..].copy_from_slice(&w[2].to_le_bytes());
        let mut bytes = [0u8; Tag::MAX_TEXT];
        bytes.copy_from_slice(&b[..Tag::MAX_TEXT]);
        Tag::Text {
            len: ((w[0] >> 8) as u8).min(Tag::MAX_TEXT as u8),
            bytes,
        }
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
        !matches!(
            self.kind(),
            Kind::NonIp | Kind::DecodeError | Kind::Tick | Kind::TagMark
        )
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

/// The fast path: [`weir_decode::quick`] reads the headers, `None` sends the frame to the
/// decoder (quick refuses every shape it does not read exactly like the decoder).
#[inline(always)]
fn parse(link: LinkType, frame: &[u8]) -> Option<Parsed> {
    let h = quick::parse(link, frame)?;
    let (kind, frag_id) = match h.fragment {
        Some(f) if f.offset != 0 => (Kind::LaterFrag, f.id),
        Some(f) if f.more => (Kind::FirstFrag, f.id),
        _ => (Kind::Metered, 0),
    };
    let (src_port, dst_port) = match h.upper {
        Upper::Icmp | Upper::Icmpv6 => (0, u16::from(h.icmp_type) << 8 | u16::from(h.icmp_code)),
        _ => (h.src_port, h.dst_port),
    };
    Some(Parsed {
        src: [(h.src >> 64) as u64, h.src as u64],
        dst: [(h.dst >> 64) as u64, h.dst as u64],
        e: Endpoints {
            v6: h.v6,
            vlan: h.vlan,
            proto: h.proto,
            src_port,
            dst_port,
            tos: 0,
        },
        bytes: h.ip_len,
        tcp_flags: h.tcp_flags,
        ttl: h.ttl,
        tos: h.tos,
        kind,
        frag_id,
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
