//! The in-order, stateful step of one shard: per-packet counters, fragment attribution through
//! the shard's own [`FragTable`], then the flow table ([`Shard`]).
//!
//! Packets reach a shard by [`KeyHasher::route`], which looks at addresses only, so every
//! fragment of a datagram, and the flow it belongs to, meet in the same shard: the fragment
//! table needs no sharing between threads.

use crate::extract::FragTable;
use crate::key::KeyHasher;
use crate::prepare::{Kind, Prepared};
use crate::record::FlowRecord;
use crate::shard::Shard;

/// Per-packet counters of one shard (see [`MeterStats`](crate::MeterStats) for their meaning).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub packets: u64,
    pub metered: u64,
    pub non_ip: u64,
    pub decode_errors: u64,
    pub frag_attributed: u64,
    pub frag_unattributed: u64,
    pub no_transport: u64,
}

/// How many packets ahead of the one being metered the table lines are prefetched: the tables
/// are larger than the caches, so each packet would otherwise wait for two or three misses in
/// turn.
const AHEAD: usize = 6;
/// How many packets ahead the batch itself is prefetched: the batch was written while its range
/// of the file streamed through the cache (or by another core), so its lines come from far away.
/// `bench/flows_vs_peers.py` with 2 workers, 9 interleaved runs: 124 ms with 12, 120 ms with 30.
const BATCH_AHEAD: usize = 30;

/// One shard's state: what its worker owns.
pub(crate) struct Step {
    pub shard: Shard,
    pub frags: FragTable,
    hasher: KeyHasher,
    pub counts: Counts,
}

impl Step {
    pub fn new(shard: Shard, frags: FragTable, hasher: KeyHasher) -> Step {
        Step {
            shard,
            frags,
            hasher,
            counts: Counts::default(),
        }
    }

    /// Prefetches for the packets that follow `batch[i]` (call before metering `batch[i]`).
    #[inline(always)]
    pub fn prefetch_ahead(&self, batch: &[Prepared], i: usize) {
        if let Some(q) = batch.get(i + BATCH_AHEAD) {
            weir_packet::prefetch(q);
        }
        if let Some(q) = batch.get(i + AHEAD) {
            match q.kind() {
                Kind::Metered | Kind::NoTransport => self.shard.prefetch(q.hash),
                Kind::FirstFrag | Kind::FirstFragNoTransport | Kind::LaterFrag => {
                    self.frags.prefetch(q.hash)
                }
                Kind::NonIp | Kind::DecodeError | Kind::Tick => {}
            }
        }
    }

    /// Meters one prepared packet (records of flows that end go to `out`). A clock mark is not
    /// a packet: its time is returned for the caller to expire flows and tick its sink.
    #[inline]
    pub fn packet(&mut self, p: &Prepared, out: &mut Vec<FlowRecord>) -> Option<u64> {
        let c = &mut self.counts;
        match p.kind() {
            Kind::Metered => {}
            Kind::NoTransport => c.no_transport += 1,
            Kind::Tick => return Some(p.ts_ns),
            Kind::NonIp => {
                c.packets += 1;
                c.non_ip += 1;
                return None;
            }
            Kind::DecodeError => {
                c.packets += 1;
                c.decode_errors += 1;
                return None;
            }
            Kind::FirstFrag | Kind::FirstFragNoTransport | Kind::LaterFrag => {
                let q = self.attribute(p);
                self.counts.packets += 1;
                self.counts.metered += 1;
                self.shard.packet(&q, out);
                return None;
            }
        }
        c.packets += 1;
        c.metered += 1;
        self.shard.packet(p, out);
        None
    }

    /// Fragments: remembers a first fragment's ports, or gives a later fragment the ports of its
    /// first one; returns the packet with its final key and hash.
    #[inline(never)]
    fn attribute(&mut self, p: &Prepared) -> Prepared {
        let mut q = *p;
        let from_b = p.from_b();
        let kind = match p.kind() {
            Kind::LaterFrag => match self.frags.lookup(p.hash, p.ts_ns) {
                Some((src_port, dst_port)) => {
                    self.counts.frag_attributed += 1;
                    let (key, from_b) = p.key.with_ports(from_b, src_port, dst_port);
                    q.key = key;
                    q.set_from_b(from_b);
                    Kind::Metered
                }
                None => {
                    self.counts.frag_unattributed += 1;
                    Kind::Metered
                }
            },
            k => {
                let (_, _, sport, dport) = p.key.endpoints(from_b);
                self.frags.remember(p.hash, (sport, dport), p.ts_ns);
                if k == Kind::FirstFragNoTransport {
                    self.counts.no_transport += 1;
                    Kind::NoTransport
                } else {
                    Kind::Metered
                }
            }
        };
        q.set_kind(kind);
        q.hash = self.hasher.hash(&q.key);
        q
    }
}
