//! Fragment attribution, the one stateful part of turning a frame into what the flow table
//! needs (the stateless part is [`Preparer`](crate::Preparer)).
//!
//! A later fragment carries no ports, so it could not be keyed (nor hashed to its flow's shard)
//! on its own. The [`FragTable`] remembers, for each first fragment `(src, dst, proto, IP ID)`,
//! the ports (or ICMP type/code) of its transport header, for
//! [`Config::frag_timeout_ns`](crate::Config::frag_timeout_ns) of packet time; the meter's
//! in-order step ([`Meter::packet_prepared`](crate::Meter::packet_prepared)) consults it.

use hashbrown::HashMap;
use weir_decode::tcp;

use crate::key::Key;

/// What became of a frame handed to the meter.
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
/// datagram; addresses as the flow key's words (IPv4 `[0, address]`), then `proto | v6 << 8 |
/// id << 32`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct FragKey {
    pub w: [u64; 5],
}

impl std::hash::Hash for FragKey {
    /// Word by word: the derived impl hashes the array as a byte slice, foldhash's slow path.
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for w in self.w {
            state.write_u64(w);
        }
    }
}

impl FragKey {
    /// The datagram of a packet with canonical key `key`, direction `from_b` and IP ID `id`.
    #[inline]
    pub fn of(key: &Key, from_b: bool, id: u32) -> FragKey {
        let (s, d, _, _) = key.endpoints(from_b);
        let meta = u64::from(key.proto()) | u64::from(key.is_v6()) << 8 | u64::from(id) << 32;
        FragKey {
            w: [s[0], s[1], d[0], d[1], meta],
        }
    }
}

/// Ports of fragmented datagrams, learnt from their first fragment.
///
/// Entries are keyed by a 64-bit hash of the datagram's (src, dst, proto, ID) under a key drawn
/// at random per run, not by the 40-byte tuple itself: 24-byte entries keep a table of tens of
/// thousands of datagrams (a fragment flood) inside the L2 cache. `bench/flows_vs_peers.py`: the
/// tuple-keyed table cost 12 % of the run on the corpus trace (46 % IPv6 first fragments). Two
/// datagrams can only share an entry if their keyed hashes collide (about n²/2⁶⁵ for n live
/// datagrams); foldhash is not a cryptographic MAC, but without the per-run key a sender cannot
/// aim for a collision cheaply.
pub struct FragTable {
    keyer: foldhash::quality::RandomState,
    map: HashMap<u64, (u16, u16, u64), foldhash::fast::RandomState>,
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
            keyer: Default::default(),
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

    pub(crate) fn remember(&mut self, k: FragKey, ports: (u16, u16), now: u64) {
        let k = std::hash::BuildHasher::hash_one(&self.keyer, k);
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

    pub(crate) fn lookup(&self, k: &FragKey, now: u64) -> Option<(u16, u16)> {
        let k = std::hash::BuildHasher::hash_one(&self.keyer, k);
        self.map
            .get(&k)
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

/// True when the TCP flags end a connection (FIN or RST).
#[inline]
pub fn ends_tcp(flags: u8) -> bool {
    flags & (tcp::FIN | tcp::RST) != 0
}
