//! The reader stage's share of metering: decode a frame, pick out what the flow table needs
//! ([`PacketInfo`]), attribute non-first IP fragments to their flow, and hash the key.
//!
//! Fragment attribution happens here, before sharding, because a later fragment carries no ports
//! and so could not be hashed to its flow's shard. The [`FragTable`] remembers, for each first
//! fragment `(src, dst, proto, IP ID)`, the ports (or ICMP type/code) of its transport header, for
//! [`Config::frag_timeout_ns`](crate::Config::frag_timeout_ns) of packet time.

use std::net::IpAddr;

use hashbrown::HashMap;
use weir_decode::{decode_into, ip_proto, tcp, Decoded, LinkType, Transport};

use crate::key::{Key, KeyHasher, RawKey};

/// What the flow table needs of one packet: 72 bytes, sent in batches to the shard workers.
#[derive(Clone, Copy, Debug, Default)]
pub struct PacketInfo {
    /// Canonical key.
    pub key: Key,
    /// Seeded hash of `key`.
    pub hash: u64,
    /// Capture time, ns since the epoch.
    pub ts_ns: u64,
    /// IP length.
    pub bytes: u32,
    /// The packet goes from side B to side A of the canonical key.
    pub from_b: bool,
    /// TCP flags (0 for other protocols).
    pub tcp_flags: u8,
    /// TTL / hop limit.
    pub ttl: u8,
    /// TOS / traffic class.
    pub tos: u8,
}

/// What became of a frame handed to [`Extractor::extract`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Metered normally.
    Metered,
    /// No IP header and no decoding error: ARP, LLDP, STP...; dropped.
    NonIp,
    /// Decoding stopped before an IP header (truncated, malformed, unsupported link); dropped.
    DecodeError,
    /// A later fragment whose first fragment was seen: metered into its flow.
    FragAttributed,
    /// A later fragment whose first fragment was not seen (or timed out): metered with ports 0.
    FragUnattributed,
    /// An IP packet whose transport header was cut short: metered with ports 0.
    NoTransport,
}

/// Key of the fragment table: (src, dst, proto, identification) as RFC 791 / 8200 define a
/// datagram.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct FragKey {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    id: u32,
}

/// Ports of fragmented datagrams, learnt from their first fragment.
pub struct FragTable {
    map: HashMap<FragKey, (u16, u16, u64), foldhash::fast::RandomState>,
    timeout_ns: u64,
    capacity: usize,
    last_purge: u64,
    /// First fragments not remembered because the table was full.
    pub overflow: u64,
}

impl FragTable {
    /// A table holding at most `capacity` datagrams for `timeout_ns` each.
    pub fn new(capacity: usize, timeout_ns: u64) -> FragTable {
        FragTable {
            map: HashMap::with_capacity_and_hasher(capacity.min(4096), Default::default()),
            timeout_ns,
            capacity,
            last_purge: 0,
            overflow: 0,
        }
    }

    fn purge(&mut self, now: u64) {
        let t = self.timeout_ns;
        self.map.retain(|_, v| v.2.saturating_add(t) > now);
        self.last_purge = now;
    }

    fn remember(&mut self, k: FragKey, ports: (u16, u16), now: u64) {
        if now >= self.last_purge.saturating_add(self.timeout_ns) {
            self.purge(now);
        }
        if self.map.len() >= self.capacity && !self.map.contains_key(&k) {
            self.purge(now);
            if self.map.len() >= self.capacity {
                self.overflow += 1;
                return;
            }
        }
        self.map.insert(k, (ports.0, ports.1, now));
    }

    fn lookup(&self, k: &FragKey, now: u64) -> Option<(u16, u16)> {
        self.map
            .get(k)
            .filter(|v| v.2.saturating_add(self.timeout_ns) > now)
            .map(|v| (v.0, v.1))
    }

    /// Datagrams remembered now.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when no datagram is remembered.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Turns frames into [`PacketInfo`]s.
pub struct Extractor {
    hasher: KeyHasher,
    frags: FragTable,
    tos_key: bool,
}

impl Extractor {
    /// An extractor hashing with `hasher`; `tos_key` puts the TOS into the key.
    pub fn new(
        hasher: KeyHasher,
        tos_key: bool,
        frag_capacity: usize,
        frag_timeout_ns: u64,
    ) -> Self {
        Extractor {
            hasher,
            frags: FragTable::new(frag_capacity, frag_timeout_ns),
            tos_key,
        }
    }

    /// The fragment table (for its counters).
    pub fn frags(&self) -> &FragTable {
        &self.frags
    }

    /// Decodes `frame` and fills `out` when the packet is metered.
    #[inline]
    pub fn extract(
        &mut self,
        link: LinkType,
        ts_ns: u64,
        frame: &[u8],
        out: &mut PacketInfo,
    ) -> Outcome {
        let mut d = Decoded::new();
        decode_into(&mut d, link, frame);
        self.extract_decoded(&d, ts_ns, out)
    }

    /// Like [`extract`](Self::extract) on an already decoded frame.
    pub fn extract_decoded(
        &mut self,
        d: &Decoded<'_>,
        ts_ns: u64,
        out: &mut PacketInfo,
    ) -> Outcome {
        let Some(ip) = d.ip() else {
            return if d.error().is_some() {
                Outcome::DecodeError
            } else {
                Outcome::NonIp
            };
        };
        let mut outcome = Outcome::Metered;
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
                if ip.is_later_fragment() {
                    (0, 0)
                } else {
                    outcome = Outcome::NoTransport;
                    (0, 0)
                }
            }
        };
        let (sport, dport) = match ip.fragment {
            Some(f) => {
                let fk = FragKey {
                    src: ip.src,
                    dst: ip.dst,
                    proto: ip.proto,
                    id: f.id,
                };
                if f.offset == 0 {
                    if f.more {
                        self.frags.remember(fk, (sport, dport), ts_ns);
                    }
                    (sport, dport)
                } else if let Some(p) = self.frags.lookup(&fk, ts_ns) {
                    outcome = Outcome::FragAttributed;
                    p
                } else {
                    outcome = Outcome::FragUnattributed;
                    (0, 0)
                }
            }
            None => (sport, dport),
        };
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
        *out = PacketInfo {
            key,
            hash: self.hasher.hash(&key),
            ts_ns,
            bytes: ip.len,
            from_b,
            tcp_flags: if ip.proto == ip_proto::TCP { flags } else { 0 },
            ttl: ip.ttl,
            tos: ip.tos,
        };
        outcome
    }
}

/// True when the TCP flags end a connection (FIN or RST).
#[inline]
pub fn ends_tcp(flags: u8) -> bool {
    flags & (tcp::FIN | tcp::RST) != 0
}
