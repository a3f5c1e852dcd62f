//! One shard of the meter, the state machine that meters its packets in order: per-packet
//! counters, fragment attribution through the shard's own [`FragTable`], the flow table
//! ([`FlowTable`]), and the rules of when its flows are expired and its records handed on.
//! Time is passed in (packet times, clock marks, [`Shard::tick`]); nothing here reads a clock
//! or knows which thread runs it: the caller's thread (one shard), a worker thread of its own,
//! or whichever reading thread the file reader's scheduler lends it to next (`FileShards`).
//!
//! Packets reach a shard by [`KeyHasher::route`], which looks at addresses only, so every
//! fragment of a datagram, and the flow it belongs to, meet in the same shard: the fragment
//! table needs no sharing between threads.
//!
//! The expiry rules depend only on the number of shards:
//!
//! * **one shard** sees every packet, so it sweeps on its own packet clock every
//!   [`SWEEP_NS`] and ignores clock marks: the records come out in the same order however the
//!   packets were batched (a file read on every core gives the sequential order);
//! * **several shards** expire at each clock mark (the router puts one into every shard's batch
//!   each second of packet time, so an idle shard still expires) and at the end of each batch.
//!
//! Records leave through an [`Emit`] with the packet clock the sink may flush by: written to the
//! sink directly inline, sent to the exporter thread in batches otherwise.

use weir_rules::Tag;

use crate::frag::FragTable;
use crate::key::KeyHasher;
use crate::prepare::{Kind, Prepared};
use crate::record::{EndReason, FlowRecord};
use crate::table::FlowTable;

/// Packet time between expiry sweeps of a single shard.
pub(crate) const SWEEP_NS: u64 = 100_000_000;
/// Records a shard gathers before handing them on, with several shards (unless a clock mark
/// came).
pub(crate) const RECORD_BATCH: usize = 128;

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

/// One shard's state and rules (see the module documentation).
pub(crate) struct Shard {
    pub table: FlowTable,
    pub frags: FragTable,
    hasher: KeyHasher,
    pub counts: Counts,
    out: Vec<FlowRecord>,
    /// The only shard: sweeps on its packet clock, ignores clock marks.
    single: bool,
    next_sweep: u64,
    /// A clock mark came during this batch (several shards).
    ticked: bool,
    /// The tag a tag mark gave the next packet.
    pending: Option<Tag>,
}

impl Shard {
    pub(crate) fn new(
        table: FlowTable,
        frags: FragTable,
        hasher: KeyHasher,
        single: bool,
    ) -> Shard {
        Shard {
            table,
            frags,
            hasher,
            counts: Counts::default(),
            out: Vec::with_capacity(RECORD_BATCH),
            single,
            next_sweep: 0,
            ticked: false,
            pending: None,
        }
    }

    /// The next packet carries `tag` (the one-shard meter's way; routed batches carry tag
    /// marks instead).
    #[inline]
    pub(crate) fn tag_next(&mut self, tag: Tag) {
        self.pending = Some(tag);
    }

    /// Prefetches for the packets that follow `batch[i]` (call before metering `batch[i]`).
    #[inline(always)]
    fn prefetch_ahead(&self, batch: &[Prepared], i: usize) {
        if let Some(q) = batch.get(i + BATCH_AHEAD) {
            weir_packet::prefetch(q);
        }
        if let Some(q) = batch.get(i + AHEAD) {
            match q.kind() {
                Kind::Metered | Kind::NoTransport => self.table.prefetch(q.hash),
                Kind::FirstFrag | Kind::FirstFragNoTransport | Kind::LaterFrag => {
                    self.frags.prefetch(q.hash)
                }
                Kind::NonIp | Kind::DecodeError | Kind::Tick | Kind::TagMark => {}
            }
        }
    }

    /// Meters one prepared packet (records of flows that end wait in `out`). A clock mark is
    /// not a packet: its time is returned for the caller to expire flows and tick its sink.
    #[inline]
    fn step(&mut self, p: &Prepared) -> Option<u64> {
        let c = &mut self.counts;
        match p.kind() {
            Kind::Metered => {}
            Kind::NoTransport => c.no_transport += 1,
            Kind::Tick => return Some(p.ts_ns),
            Kind::TagMark => {
                self.pending = Some(p.mark_tag());
                return None;
            }
            Kind::NonIp => {
                c.packets += 1;
                c.non_ip += 1;
                self.pending = None;
                return None;
            }
            Kind::DecodeError => {
                c.packets += 1;
                c.decode_errors += 1;
                self.pending = None;
                return None;
            }
            Kind::FirstFrag | Kind::FirstFragNoTransport | Kind::LaterFrag => {
                let q = self.attribute(p);
                self.counts.packets += 1;
                self.counts.metered += 1;
                self.meter(&q);
                return None;
            }
        }
        c.packets += 1;
        c.metered += 1;
        self.meter(p);
        None
    }

    /// Hands a packet to the flow table, with the tag a mark gave it, if any.
    #[inline(always)]
    fn meter(&mut self, p: &Prepared) {
        match self.pending.take() {
            None => self.table.packet(p, &mut self.out),
            Some(tag) => self.table.packet_tagged(p, tag, &mut self.out),
        }
    }

    /// Meters one packet; records go to `emit` only at sweeps (call [`end_batch`](Self::end_batch)
    /// after the last packet of a batch).
    #[inline(always)]
    pub(crate) fn packet<E: Emit>(&mut self, p: &Prepared, emit: &mut E) {
        match self.step(p) {
            // a clock mark: with one shard, the packet clock alone decides
            Some(t) if !self.single => {
                self.table.expire(t, &mut self.out);
                self.ticked = true;
            }
            Some(_) => {}
            None if self.single && p.ts_ns >= self.next_sweep => self.sweep(p.ts_ns, emit),
            None => {}
        }
    }

    /// Meters a batch of packets in order and hands on what it ended.
    #[inline]
    pub(crate) fn run<E: Emit>(&mut self, batch: &[Prepared], emit: &mut E) {
        for (i, p) in batch.iter().enumerate() {
            self.prefetch_ahead(batch, i);
            self.packet(p, emit);
        }
        self.end_batch(emit);
    }

    /// Hands on the records of the batch just metered: one shard, all of them (so a per-packet
    /// caller writing to its sink emits right after the packet that ended them); several shards,
    /// after expiring at the shard's clock, once enough have gathered or a clock mark came.
    #[inline]
    pub(crate) fn end_batch<E: Emit>(&mut self, emit: &mut E) {
        if self.single {
            if E::HANDOFF {
                emit.records(&mut self.out, Some(self.table.now()));
            } else if !self.out.is_empty() {
                emit.records(&mut self.out, None);
            }
            return;
        }
        let now = self.table.now();
        self.table.expire(now, &mut self.out);
        if self.ticked || self.out.len() >= RECORD_BATCH {
            self.ticked = false;
            emit.records(&mut self.out, Some(now));
        }
    }

    /// Expires what is due at `now` (one shard's sweep); the records and the clock go on now,
    /// or, through a costly hand-off, with the batch's others unless many have gathered.
    fn sweep<E: Emit>(&mut self, now: u64, emit: &mut E) {
        self.table.expire(now, &mut self.out);
        let clock = self.table.now();
        self.next_sweep = clock.saturating_add(SWEEP_NS);
        if !E::HANDOFF || self.out.len() >= RECORD_BATCH {
            emit.records(&mut self.out, Some(clock));
        }
    }

    /// Expires what is due at `now` and hands on every record and the clock (time went on with
    /// no packet, or the input ends).
    pub(crate) fn tick<E: Emit>(&mut self, now: u64, emit: &mut E) {
        self.table.expire(now, &mut self.out);
        let clock = self.table.now();
        self.next_sweep = clock.saturating_add(SWEEP_NS);
        self.ticked = false;
        emit.records(&mut self.out, Some(clock));
    }

    /// Ends every flow (end of input) and hands on the records.
    pub(crate) fn flush<E: Emit>(&mut self, emit: &mut E) {
        self.table.flush(EndReason::ForcedEnd, &mut self.out);
        let clock = self.table.now();
        emit.records(&mut self.out, Some(clock));
    }

    /// A new input starts at `start`, before this shard's clock: ends every flow as at the end
    /// of input (what is due at `end` expires, the rest is ended with
    /// [`EndReason::ForcedEnd`]), hands on the records, forgets the fragments and restarts the
    /// clock at `start`, so the new input is metered as if it came alone.
    pub(crate) fn restart<E: Emit>(&mut self, end: u64, start: u64, emit: &mut E) {
        self.tick(end, emit);
        self.flush(emit);
        self.frags.clear();
        self.table.restart(start);
        self.next_sweep = 0;
        self.ticked = false;
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

/// Where a shard's records go.
pub(crate) trait Emit {
    /// Handing records on costs more than a record (a message to another thread): a single
    /// shard then gathers a batch's records, instead of emitting at each sweep (which comes
    /// every 100 ms of packet time, 570 000 times on an all-day capture).
    const HANDOFF: bool;

    /// Takes the records in `out` (leaving it empty, capacity kept or renewed) and, when
    /// `clock` is given, the packet clock the sink may flush by.
    fn records(&mut self, out: &mut Vec<FlowRecord>, clock: Option<u64>);
}
