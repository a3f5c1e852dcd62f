//! Fragment attribution, the one stateful part of turning a frame into what the flow table
//! needs (the stateless part is [`Preparer`](crate::Preparer)).
//!
//! A later fragment carries no ports, so it could not be keyed (nor hashed to its flow's shard)
//! on its own. The [`FragTable`] remembers, for each first fragment `(src, dst, proto, IP ID)`,
//! the ports (or ICMP type/code) of its transport header, for
//! [`Config::frag_timeout_ns`](crate::Config::frag_timeout_ns) of packet time; each shard
//! of the meter consults its own table in packet order (fragments are routed by address,
//! [`KeyHasher::route`](crate::KeyHasher::route), so every fragment of a datagram meets its first
//! one in the same shard).

/// Ways per set: four 16-byte slots fill one cache line.
const WAYS: usize = 4;
/// Fragment times are kept in units of 2^20 ns (≈ 1.05 ms).
const UNIT_SHIFT: u32 = 20;

/// One remembered first fragment.
#[derive(Clone, Copy, Default)]
struct Slot {
    /// The datagram's hash ([`KeyHasher::fragment`](crate::KeyHasher::fragment)); 0 = empty.
    tag: u64,
    /// Source port in the high half, destination port (or ICMP type/code) in the low half.
    ports: u32,
    /// Packet time of the first fragment, in units of 2^20 ns, wrapping.
    stamp: u32,
}

/// The slots a datagram hash can occupy: one cache line.
#[derive(Clone, Copy, Default)]
#[repr(align(64))]
struct Set([Slot; WAYS]);

/// Ports of fragmented datagrams, learnt from their first fragment.
///
/// A set-associative cache keyed by the datagram's 64-bit hash, computed under the run's secret
/// seed by [`Preparer`](crate::Preparer) on the reading threads: a datagram can only sit in the
/// four slots of one cache line, so remembering or finding one touches one line, and the table
/// never grows, rehashes or scans (a fragment flood cannot make it slow). A first fragment
/// whose set holds four live datagrams replaces the oldest of them, which is counted in
/// [`overflow`](Self::overflow). Two datagrams can only be confused if their keyed 64-bit
/// hashes are equal.
///
/// `bench/flows_vs_peers.py` (46 % of the trace are IPv6 first fragments of a flood): the
/// hashbrown map this replaces, keyed by a hash computed in the in-order step, cost 13.6 % of the
/// run's CPU samples.
pub struct FragTable {
    sets: Box<[Set]>,
    /// The timeout in units of 2^20 ns (at least 1, below 2^31).
    timeout: u32,
    /// First fragments forgotten before their timeout because their set was full.
    pub overflow: u64,
}

#[inline]
fn units(ns: u64) -> u32 {
    (ns >> UNIT_SHIFT) as u32
}

impl FragTable {
    /// A table holding about `capacity` datagrams (rounded up to whole sets of four) for
    /// `timeout_ns` each (to the millisecond, at most 24 days).
    pub fn new(capacity: usize, timeout_ns: u64) -> FragTable {
        let sets = capacity.div_ceil(WAYS).max(1);
        FragTable {
            sets: vec![Set::default(); sets].into_boxed_slice(),
            timeout: units(timeout_ns.div_ceil(1 << UNIT_SHIFT) << UNIT_SHIFT).clamp(1, 1 << 30),
            overflow: 0,
        }
    }

    /// Forgets every datagram (a new input that starts earlier: its fragments are not those
    /// of the input before); keeps the `overflow` count.
    pub fn clear(&mut self) {
        self.sets.fill(Set::default());
    }

    /// Datagrams the table can hold.
    pub fn capacity(&self) -> usize {
        self.sets.len() * WAYS
    }

    #[inline]
    fn set(&self, hash: u64) -> usize {
        (((hash >> 32) * self.sets.len() as u64) >> 32) as usize
    }

    /// Still remembered at `now` (a time before the stamp, from input whose clock went back,
    /// counts as live).
    #[inline]
    fn live(&self, s: &Slot, now: u32) -> bool {
        s.tag != 0 && (now.wrapping_sub(s.stamp) as i32) < self.timeout as i32
    }

    /// Starts loading the set of the datagram `hash` (see [`weir_packet::prefetch`]).
    #[inline]
    pub fn prefetch(&self, hash: u64) {
        weir_packet::prefetch(&self.sets[self.set(hash)]);
    }

    /// Remembers the ports of the datagram `hash` (from its first fragment, seen at `now`).
    #[inline]
    pub fn remember(&mut self, hash: u64, ports: (u16, u16), now_ns: u64) {
        let now = units(now_ns);
        let i = self.set(hash);
        let slot = Slot {
            tag: hash,
            ports: u32::from(ports.0) << 16 | u32::from(ports.1),
            stamp: now,
        };
        let set = &self.sets[i].0;
        let mut victim = 0;
        let mut oldest = i32::MIN;
        let mut evicts = true;
        for (w, s) in set.iter().enumerate() {
            if s.tag == hash || !self.live(s, now) {
                victim = w;
                evicts = false;
                break;
            }
            let age = now.wrapping_sub(s.stamp) as i32;
            if age > oldest {
                oldest = age;
                victim = w;
            }
        }
        if evicts {
            self.overflow += 1;
        }
        self.sets[i].0[victim] = slot;
    }

    /// The ports remembered for the datagram `hash`, if its first fragment was seen less than
    /// the timeout before `now`.
    #[inline]
    pub fn lookup(&self, hash: u64, now_ns: u64) -> Option<(u16, u16)> {
        let now = units(now_ns);
        self.sets[self.set(hash)]
            .0
            .iter()
            .find(|s| s.tag == hash && self.live(s, now))
            .map(|s| ((s.ports >> 16) as u16, s.ports as u16))
    }

    /// Datagrams held now (live or expired but not yet replaced).
    pub fn len(&self) -> usize {
        self.sets
            .iter()
            .flat_map(|s| s.0.iter())
            .filter(|s| s.tag != 0)
            .count()
    }

    /// True when no datagram is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn remembers_until_the_timeout() {
        let mut t = FragTable::new(64, 30 * S);
        t.remember(0x1234_5678_9abc_def0, (5000, 53), 10 * S);
        assert_eq!(t.lookup(0x1234_5678_9abc_def0, 10 * S), Some((5000, 53)));
        assert_eq!(t.lookup(0x1234_5678_9abc_def0, 39 * S), Some((5000, 53)));
        assert_eq!(t.lookup(0x1234_5678_9abc_def0, 41 * S), None);
        assert_eq!(t.lookup(0x1234_5678_9abc_def1, 10 * S), None);
        // a clock that went back still finds it
        assert_eq!(t.lookup(0x1234_5678_9abc_def0, 5 * S), Some((5000, 53)));
        assert_eq!(t.overflow, 0);
    }

    #[test]
    fn a_full_set_forgets_its_oldest_and_counts_it() {
        let mut t = FragTable::new(4, 30 * S);
        assert_eq!(t.capacity(), 4);
        for k in 1..=4u64 {
            t.remember(k, (k as u16, 0), k * S);
        }
        assert_eq!(t.overflow, 0);
        t.remember(5, (5, 0), 6 * S);
        assert_eq!(t.overflow, 1);
        assert_eq!(t.lookup(1, 6 * S), None, "the oldest went");
        for k in 2..=5u64 {
            assert_eq!(t.lookup(k, 6 * S), Some((k as u16, 0)));
        }
        // the same datagram again replaces itself; an expired slot is reused without a count
        t.remember(5, (55, 0), 7 * S);
        assert_eq!(t.overflow, 1);
        assert_eq!(t.lookup(5, 7 * S), Some((55, 0)));
        t.remember(6, (6, 0), 33 * S);
        assert_eq!(t.overflow, 1);
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn a_flood_keeps_the_table_bounded() {
        let mut t = FragTable::new(1000, 30 * S);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..100_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.remember(x | 1, (1, 2), i * 1000);
        }
        assert_eq!(t.len(), t.capacity());
        assert_eq!(t.overflow, 100_000 - t.capacity() as u64);
    }
}
