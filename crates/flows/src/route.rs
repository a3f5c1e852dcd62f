//! Routing prepared packets to the shards of the flow table.
//!
//! A [`Router`] sorts [`Prepared`] packets into one batch per shard, by
//! [`KeyHasher::route`] (addresses and VLAN only, so both directions of a flow, and every
//! fragment of a datagram, go to the same shard), keeping packet order within each batch. Every
//! second of packet time it also puts a clock mark into every batch, so a shard that receives no
//! packets of its own still expires its flows at most a second late.
//!
//! The meter routes packets itself when it is fed one packet at a time
//! ([`Meter::packet_prepared`](crate::Meter::packet_prepared)); reading threads that prepare whole
//! ranges of a file route their range with their own router ([`Meter::router`](crate::Meter::router))
//! and hand the meter the [`Routed`] batches, in file order ([`Meter::feed`](crate::Meter::feed)).
//! Batch vectors come from, and go back to, a pool shared with the meter, so a long run does
//! not allocate (or fault in fresh pages) per batch.

use std::sync::{Arc, Mutex};

use crate::key::{shard_of, KeyHasher};
use crate::prepare::Prepared;
use weir_buffer::advise_huge_pages;
use weir_rules::Tag;

/// Empty batch vectors for reuse, most recently returned first: that one is the likeliest to
/// still be in a cache. A lock per batch (thousands of packets), never per packet.
#[derive(Clone, Default)]
pub(crate) struct Pool(Arc<Mutex<Vec<Vec<Prepared>>>>);

impl Pool {
    /// Gives back a batch vector (emptied here).
    pub(crate) fn put(&self, mut v: Vec<Prepared>) {
        v.clear();
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(v);
    }

    /// The most recently returned vector, if any.
    pub(crate) fn take(&self) -> Option<Vec<Prepared>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
}

/// How many slots ahead of the next one [`Router::push`] prefetches in a batch.
const PUSH_AHEAD: usize = 8;

/// Packet time between clock marks.
pub(crate) const TICK_NS: u64 = 1_000_000_000;

/// Sorts prepared packets into per-shard batches (see the module documentation).
pub struct Router {
    hasher: KeyHasher,
    batches: Vec<Vec<Prepared>>,
    pool: Pool,
    /// Capacity of a batch vector made when the pool is empty.
    reserve: usize,
    next_tick: u64,
    clock: u64,
}

/// One range of packets sorted by shard, ready for [`Meter::feed`](crate::Meter::feed).
pub struct Routed {
    pub(crate) batches: Vec<Vec<Prepared>>,
    pub(crate) clock: u64,
}

impl Routed {
    /// Packets and clock marks in all batches.
    pub fn len(&self) -> usize {
        self.batches.iter().map(Vec::len).sum()
    }

    /// The batches, one per shard in shard order (one for each shard's worker).
    pub fn into_batches(self) -> Vec<Vec<Prepared>> {
        self.batches
    }

    /// True when no batch holds anything.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Router {
    pub(crate) fn new(hasher: KeyHasher, shards: usize, pool: Pool, reserve: usize) -> Router {
        let mut r = Router {
            hasher,
            batches: Vec::with_capacity(shards),
            pool,
            reserve,
            next_tick: 0,
            clock: 0,
        };
        for _ in 0..shards {
            let v = r.fresh();
            r.batches.push(v);
        }
        r
    }

    fn fresh(&self) -> Vec<Prepared> {
        self.pool.take().unwrap_or_else(|| {
            let v: Vec<Prepared> = Vec::with_capacity(self.reserve);
            // written once through (a range of the file): one fault per 2 MiB, not per 4 KiB
            // (the faults were ≈ 7 % of the CPU time of `bench/flows_vs_peers.py`)
            advise_huge_pages(v.as_ptr(), v.capacity() * std::mem::size_of::<Prepared>());
            v
        })
    }

    /// A new, empty router for the same meter whose new batch vectors have room for `packets`
    /// (only touched memory costs anything, so a generous guess avoids regrowing a batch while
    /// it fills).
    pub fn reserving(&self, packets: usize) -> Router {
        Router::new(
            self.hasher.clone(),
            self.batches.len(),
            self.pool.clone(),
            packets,
        )
    }

    /// A new, empty router for the same meter (batch vectors from the same pool).
    pub fn empty_like(&self) -> Router {
        self.reserving(self.reserve)
    }

    /// Shards routed to.
    pub fn shards(&self) -> usize {
        self.batches.len()
    }

    /// The latest packet time seen.
    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Adds one packet to its shard's batch; returns the shard and whether a clock mark went
    /// into every batch just before it.
    #[inline]
    pub fn push(&mut self, p: Prepared) -> (usize, bool) {
        self.push_marked(None, p)
    }

    /// [`push`](Self::push) for a packet the rules tagged: a tag mark goes into the packet's
    /// batch right before it, so the shard gives the tag to the packet's flow.
    #[inline]
    pub fn push_tagged(&mut self, tag: Option<&Tag>, p: Prepared) -> (usize, bool) {
        self.push_marked(tag.map(|t| Prepared::tag_mark(t, &p)), p)
    }

    #[inline(always)]
    fn push_marked(&mut self, mark: Option<Prepared>, p: Prepared) -> (usize, bool) {
        let t = p.ts_ns;
        // one shard sees every packet: it needs no marks
        let ticked = t >= self.next_tick && self.batches.len() > 1;
        if ticked {
            self.mark(t);
        }
        self.clock = self.clock.max(t);
        let s = if self.batches.len() == 1 {
            0
        } else {
            shard_of(self.hasher.route(&p.key), self.batches.len())
        };
        let b = &mut self.batches[s];
        // the slot a few packets on: its line is fetched while these are prepared, so the
        // store does not wait for it (the vectors are recycled, last touched by another core)
        if let Some(ahead) = b.spare_capacity_mut().get(PUSH_AHEAD) {
            weir_packet::prefetch(ahead);
        }
        if let Some(m) = mark {
            b.push(m);
        }
        b.push(p);
        (s, ticked)
    }

    /// Packets and marks in batch `s`.
    #[inline]
    pub(crate) fn batch_len(&self, s: usize) -> usize {
        self.batches[s].len()
    }

    /// Puts a clock mark for `now` into every batch (no packet came, but time went on).
    pub(crate) fn mark(&mut self, now: u64) {
        for b in &mut self.batches {
            b.push(Prepared::tick(now));
        }
        self.clock = self.clock.max(now);
        self.next_tick = now.saturating_add(TICK_NS);
    }

    /// Starts over at a new input whose clock is before this one's ([`Meter::new_input`](crate::Meter::new_input)): the next packet
    /// puts a clock mark into every batch, as the first one does.
    pub(crate) fn restart(&mut self) {
        self.next_tick = 0;
        self.clock = 0;
    }

    /// Batch `s` so far (left empty).
    pub(crate) fn take_one(&mut self, s: usize) -> Vec<Prepared> {
        let fresh = self.fresh();
        std::mem::replace(&mut self.batches[s], fresh)
    }

    /// Every batch (the end of a range).
    pub fn into_routed(self) -> Routed {
        Routed {
            batches: self.batches,
            clock: self.clock,
        }
    }
}
