//! One shard metered in packet order, wherever it runs: on the caller's thread (one shard), on
//! its own worker thread, or on whichever reading thread holds it next ([`Lanes`](crate::Lanes)).
//!
//! A lane is a [`Step`] (counters, fragment table, flow table) plus the rules of when its flows
//! are expired and its records handed on, which depend only on the number of shards, never on
//! the thread that runs it:
//!
//! * **one shard** sees every packet, so it sweeps on its own packet clock every
//!   [`SWEEP_NS`] and ignores clock marks: the records come out in the same order however the
//!   packets were batched (a file read on every core gives the sequential order);
//! * **several shards** expire at each clock mark (the router puts one into every shard's batch
//!   each second of packet time, so an idle shard still expires) and at the end of each batch.
//!
//! Records leave through an [`Emit`] with the packet clock the sink may flush by: written to the
//! sink directly inline, sent to the exporter thread in batches otherwise.

use crate::prepare::Prepared;
use crate::record::{EndReason, FlowRecord};
use crate::step::Step;

/// Packet time between expiry sweeps of a single shard.
pub(crate) const SWEEP_NS: u64 = 100_000_000;
/// Records a multi-shard lane gathers before handing them on (unless a clock mark came).
pub(crate) const RECORD_BATCH: usize = 128;

/// One shard's state and expiry rules (see the module documentation).
pub(crate) struct Lane {
    pub step: Step,
    out: Vec<FlowRecord>,
    /// The only shard: sweeps on its packet clock, ignores clock marks.
    single: bool,
    next_sweep: u64,
    /// A clock mark came during this batch (several shards).
    ticked: bool,
}

impl Lane {
    pub fn new(step: Step, single: bool) -> Lane {
        Lane {
            step,
            out: Vec::with_capacity(RECORD_BATCH),
            single,
            next_sweep: 0,
            ticked: false,
        }
    }

    /// Meters one packet; records go to `emit` only at sweeps (call [`end_batch`](Self::end_batch)
    /// after the last packet of a batch).
    #[inline(always)]
    pub fn packet<E: Emit>(&mut self, p: &Prepared, emit: &mut E) {
        match self.step.packet(p, &mut self.out) {
            // a clock mark: with one shard, the packet clock alone decides
            Some(t) if !self.single => {
                self.step.shard.expire(t, &mut self.out);
                self.ticked = true;
            }
            Some(_) => {}
            None if self.single && p.ts_ns >= self.next_sweep => self.sweep(p.ts_ns, emit),
            None => {}
        }
    }

    /// Meters a batch of packets in order and hands on what it ended.
    #[inline]
    pub fn run<E: Emit>(&mut self, batch: &[Prepared], emit: &mut E) {
        for (i, p) in batch.iter().enumerate() {
            self.step.prefetch_ahead(batch, i);
            self.packet(p, emit);
        }
        self.end_batch(emit);
    }

    /// Hands on the records of the batch just metered: one shard, all of them (so a per-packet
    /// caller writing to its sink emits right after the packet that ended them); several shards,
    /// after expiring at the shard's clock, once enough have gathered or a clock mark came.
    #[inline]
    pub fn end_batch<E: Emit>(&mut self, emit: &mut E) {
        if self.single {
            if E::HANDOFF {
                emit.records(&mut self.out, Some(self.step.shard.now()));
            } else if !self.out.is_empty() {
                emit.records(&mut self.out, None);
            }
            return;
        }
        let now = self.step.shard.now();
        self.step.shard.expire(now, &mut self.out);
        if self.ticked || self.out.len() >= RECORD_BATCH {
            self.ticked = false;
            emit.records(&mut self.out, Some(now));
        }
    }

    /// Expires what is due at `now` (one shard's sweep); the records and the clock go on now,
    /// or, through a costly hand-off, with the batch's others unless many have gathered.
    fn sweep<E: Emit>(&mut self, now: u64, emit: &mut E) {
        let shard = &mut self.step.shard;
        shard.expire(now, &mut self.out);
        let clock = shard.now();
        self.next_sweep = clock.saturating_add(SWEEP_NS);
        if !E::HANDOFF || self.out.len() >= RECORD_BATCH {
            emit.records(&mut self.out, Some(clock));
        }
    }

    /// Expires what is due at `now` and hands on every record and the clock (time went on with
    /// no packet, or the input ends).
    pub fn tick<E: Emit>(&mut self, now: u64, emit: &mut E) {
        let shard = &mut self.step.shard;
        shard.expire(now, &mut self.out);
        let clock = shard.now();
        self.next_sweep = clock.saturating_add(SWEEP_NS);
        self.ticked = false;
        emit.records(&mut self.out, Some(clock));
    }

    /// Ends every flow (end of input) and hands on the records.
    pub fn flush<E: Emit>(&mut self, emit: &mut E) {
        self.step.shard.flush(EndReason::ForcedEnd, &mut self.out);
        let clock = self.step.shard.now();
        emit.records(&mut self.out, Some(clock));
    }
}

/// Where a lane's records go.
pub(crate) trait Emit {
    /// Handing records on costs more than a record (a message to another thread): a single
    /// shard then gathers a batch's records, instead of emitting at each sweep (which comes
    /// every 100 ms of packet time, 570 000 times on an all-day capture).
    const HANDOFF: bool;

    /// Takes the records in `out` (leaving it empty, capacity kept or renewed) and, when
    /// `clock` is given, the packet clock the sink may flush by.
    fn records(&mut self, out: &mut Vec<FlowRecord>, clock: Option<u64>);
}
