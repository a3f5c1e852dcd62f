//! The metering pipeline, ffProbe's design: a reader stage prepares packets and routes them to N
//! worker threads that each own one shard of the flow table ([`Step`]: counters, fragment
//! table, [`Shard`]), and one exporter thread owns the [`RecordSink`].
//!
//! ```text
//!  reader ──prepare, route (Router)──batches of Prepared──▶ worker k (Step k) ──records──┐
//!                ▲                    + a clock mark per second        │                 ▼
//!                └────────── empty batches recycled ◀──────────────────┘     exporter (sink)
//! ```
//!
//! The reader stage is either the caller's thread, one packet at a time
//! ([`Meter::packet`], [`Meter::packet_prepared`]), or several threads that each prepare and
//! route a whole range of a file ([`Meter::router`]) whose results the caller hands over in file
//! order ([`Meter::feed`]). Packets go to shards by their addresses ([`KeyHasher::route`]), so
//! both directions of a flow and every fragment of a datagram meet in one shard and each shard
//! keeps its own fragment table: everything stateful is per shard.
//!
//! Handoff is by bounded crossbeam channels carrying whole batches, so a channel operation costs
//! a fraction of a nanosecond per packet, and no lock is taken on the packet path (each shard is
//! touched by its worker only). A full channel blocks the reader: offline, nothing is ever
//! dropped. With one worker the whole pipeline runs inline on the caller's thread, with no
//! channel at all.
//!
//! Time is packet time: each worker's clock is the latest packet time it saw, and the router
//! puts a clock mark into every shard's batch once per second of packet time, so a shard that
//! receives no packets still expires its flows (at most one second late).

use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};
use weir_decode::LinkType;

use crate::extract::FragTable;
use crate::key::KeyHasher;
use crate::prepare::{Prepared, Preparer};
use crate::record::{EndReason, FlowRecord};
use crate::route::{Pool, Routed, Router};
use crate::shard::{Shard, ShardConfig};
use crate::step::Step;

/// Packets per batch handed to a worker.
pub const BATCH: usize = 256;
/// Records per batch handed to the exporter.
const RECORD_BATCH: usize = 128;
/// Batches in flight per worker.
const QUEUE: usize = 4;
/// Packet time between expiry sweeps inline.
const SWEEP_NS: u64 = 100_000_000;

/// Settings of a [`Meter`].
#[derive(Clone, Debug)]
pub struct Config {
    /// A flow with no packet for this long ends (default 30 s).
    pub idle_timeout_ns: u64,
    /// A flow is exported (and restarted) after this long (default 120 s).
    pub active_timeout_ns: u64,
    /// A TCP flow ends this long after a FIN or RST (and its last packet) (default 1 s).
    pub fin_grace_ns: u64,
    /// Most flows held at once, over all shards; each shard holds `max_flows / workers`
    /// (rounded up) and evicts its least recently seen flow beyond that (default 1 000 000).
    pub max_flows: u64,
    /// Worker threads (shards); 1 runs inline on the caller's thread.
    pub workers: usize,
    /// Put the IP TOS / traffic class in the flow key (ffProbe does; nProbe does not).
    pub tos_key: bool,
    /// One bidirectional record per flow (RFC 5103) instead of one per direction.
    pub biflow: bool,
    /// TCP records with fewer bytes are not exported (0: all are).
    pub min_tcp_bytes: u64,
    /// Hash seed; `None` draws a random one per run.
    pub seed: Option<u64>,
    /// Most fragmented datagrams remembered at once (split over the workers).
    pub frag_capacity: usize,
    /// How long a first fragment's ports are remembered (default 30 s, Linux's `ipfrag_time`).
    pub frag_timeout_ns: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            idle_timeout_ns: 30_000_000_000,
            active_timeout_ns: 120_000_000_000,
            fin_grace_ns: 1_000_000_000,
            max_flows: 1_000_000,
            workers: 1,
            tos_key: false,
            biflow: false,
            min_tcp_bytes: 0,
            seed: None,
            frag_capacity: 65_536,
            frag_timeout_ns: 30_000_000_000,
        }
    }
}

/// Where finished flow records go (the exporters implement it). Called from one thread only.
pub trait RecordSink: Send + 'static {
    /// The sink's error.
    type Error: std::error::Error + Send + Sync + 'static;
    /// Takes one record.
    fn record(&mut self, rec: &FlowRecord) -> Result<(), Self::Error>;
    /// The packet clock advanced to `now_ns` (lets a sink flush a partial datagram).
    fn tick(&mut self, _now_ns: u64) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl RecordSink for Vec<FlowRecord> {
    type Error = std::convert::Infallible;
    fn record(&mut self, rec: &FlowRecord) -> Result<(), Self::Error> {
        self.push(*rec);
        Ok(())
    }
}

/// Every counter of a run. Every packet handed to the meter is either metered or counted in
/// exactly one drop reason: `packets == metered + non_ip + decode_errors`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MeterStats {
    /// Packets handed to the meter.
    pub packets: u64,
    /// Packets accounted in a flow.
    pub metered: u64,
    /// Dropped: no IP header (ARP, STP, LLDP...).
    pub non_ip: u64,
    /// Dropped: decoding stopped before the IP header (truncated, malformed, unknown link).
    pub decode_errors: u64,
    /// Metered: later fragments attributed to their flow through the fragment table.
    pub frag_attributed: u64,
    /// Metered with ports 0: later fragments whose first fragment was not seen.
    pub frag_unattributed: u64,
    /// First fragments forgotten before their timeout because the fragment table was full
    /// (their later fragments are metered with ports 0).
    pub frag_table_full: u64,
    /// Metered with ports 0: IP packets whose transport header was cut short.
    pub no_transport: u64,
    /// Flows created.
    pub flows: u64,
    /// Sum over shards of each shard's peak of active flows (the exact peak with one worker).
    pub peak_flows: u64,
    /// Flows ended by idle timeout.
    pub idle_ended: u64,
    /// Flows ended by active timeout.
    pub active_ended: u64,
    /// Flows ended by TCP FIN/RST.
    pub tcp_ended: u64,
    /// Flows flushed at end of input.
    pub forced_ended: u64,
    /// Flows evicted because their shard was full.
    pub evicted: u64,
    /// Records handed to the sink.
    pub records: u64,
    /// Records not exported: TCP below `min_tcp_bytes`.
    pub below_min_bytes: u64,
    /// Records lost because the sink had failed.
    pub sink_failed: u64,
    /// Memory per flow at full capacity: slab entry + hash index share, bytes.
    pub bytes_per_flow: f64,
    /// Flows the shards can hold, in all.
    pub capacity: u64,
    /// Workers (shards).
    pub workers: usize,
}

impl MeterStats {
    fn add_step(&mut self, st: &Step) {
        let (c, s) = (&st.counts, &st.shard.stats());
        self.packets += c.packets;
        self.metered += c.metered;
        self.non_ip += c.non_ip;
        self.decode_errors += c.decode_errors;
        self.frag_attributed += c.frag_attributed;
        self.frag_unattributed += c.frag_unattributed;
        self.no_transport += c.no_transport;
        self.frag_table_full += st.frags.overflow;
        self.flows += s.created;
        self.peak_flows += s.peak;
        self.idle_ended += s.ended[EndReason::IdleTimeout as usize];
        self.active_ended += s.ended[EndReason::ActiveTimeout as usize];
        self.tcp_ended += s.ended[EndReason::EndOfFlow as usize];
        self.forced_ended += s.ended[EndReason::ForcedEnd as usize];
        self.evicted += s.ended[EndReason::LackOfResources as usize];
        self.below_min_bytes += s.below_min_bytes;
        self.capacity += u64::from(st.shard.capacity());
        self.bytes_per_flow = st.shard.bytes_per_flow();
    }
}

/// What [`Meter::finish`] hands back.
pub struct Finished<S: RecordSink> {
    /// Counters.
    pub stats: MeterStats,
    /// The sink, to finish (flush, close) by its owner.
    pub sink: S,
    /// The sink's first error, if it failed (later records were counted in `sink_failed`).
    pub error: Option<S::Error>,
}

/// The flow meter: feed it packets in time order, then [`finish`](Meter::finish) it.
pub struct Meter<S: RecordSink> {
    preparer: Preparer,
    stage: Stage<S>,
    /// Empty batch vectors, for routers.
    pool: Pool,
    /// Latest packet time seen.
    clock: u64,
}

enum Stage<S: RecordSink> {
    Inline(Box<Inline<S>>),
    Threaded(Threaded<S>),
}

struct Inline<S: RecordSink> {
    step: Step,
    out: Vec<FlowRecord>,
    sink: S,
    error: Option<S::Error>,
    sink_failed: u64,
    records: u64,
    next_sweep: u64,
}

impl<S: RecordSink> Inline<S> {
    fn drain(&mut self) {
        for r in self.out.drain(..) {
            if self.error.is_some() {
                self.sink_failed += 1;
                continue;
            }
            match self.sink.record(&r) {
                Ok(()) => self.records += 1,
                Err(e) => {
                    self.error = Some(e);
                    self.sink_failed += 1;
                }
            }
        }
    }

    fn sweep(&mut self, now: u64) {
        let shard = &mut self.step.shard;
        shard.expire(now, &mut self.out);
        self.drain();
        if self.error.is_none() {
            if let Err(e) = self.sink.tick(self.step.shard.now()) {
                self.error = Some(e);
            }
        }
        self.next_sweep = self.step.shard.now().saturating_add(SWEEP_NS);
    }

    #[inline(always)]
    fn packet(&mut self, p: &Prepared) {
        // A clock mark changes nothing here: the one shard sees every packet and sweeps on its
        // own clock, at the same packet times whatever the batching (so the records come out in
        // the same order).
        if self.step.packet(p, &mut self.out).is_some() {
            return;
        }
        if p.ts_ns >= self.next_sweep {
            self.sweep(p.ts_ns);
        } else if !self.out.is_empty() {
            self.drain();
        }
    }
}

struct ToExporter {
    records: Vec<FlowRecord>,
    now: u64,
}

struct ExporterDone<S: RecordSink> {
    sink: S,
    error: Option<S::Error>,
    records: u64,
    failed: u64,
}

struct Threaded<S: RecordSink> {
    txs: Vec<Sender<Vec<Prepared>>>,
    router: Router,
    workers: Vec<JoinHandle<Step>>,
    exporter: JoinHandle<ExporterDone<S>>,
}

impl<S: RecordSink> Threaded<S> {
    #[inline]
    fn send(&mut self, s: usize) {
        let batch = self.router.take_one(s);
        // a worker only hangs up by panicking, which `finish` reports
        let _ = self.txs[s].send(batch);
    }

    fn send_all(&mut self) {
        for s in 0..self.txs.len() {
            if self.router.batch_len(s) > 0 {
                self.send(s);
            }
        }
    }
}

fn worker(
    mut step: Step,
    rx: Receiver<Vec<Prepared>>,
    recycle: Pool,
    exp: Sender<ToExporter>,
) -> Step {
    let mut out = Vec::with_capacity(RECORD_BATCH);
    for batch in rx {
        let mut ticked = false;
        for (i, p) in batch.iter().enumerate() {
            step.prefetch_ahead(&batch, i);
            if let Some(t) = step.packet(p, &mut out) {
                step.shard.expire(t, &mut out);
                ticked = true;
            }
        }
        step.shard.expire(step.shard.now(), &mut out);
        recycle.put(batch);
        if out.len() >= RECORD_BATCH || ticked {
            let records = std::mem::replace(&mut out, Vec::with_capacity(RECORD_BATCH));
            let _ = exp.send(ToExporter {
                records,
                now: step.shard.now(),
            });
        }
    }
    step.shard.flush(EndReason::ForcedEnd, &mut out);
    let _ = exp.send(ToExporter {
        records: out,
        now: step.shard.now(),
    });
    step
}

fn exporter<S: RecordSink>(mut sink: S, rx: Receiver<ToExporter>) -> ExporterDone<S> {
    let mut error = None;
    let (mut records, mut failed) = (0, 0);
    let mut now = 0;
    for msg in rx {
        for r in &msg.records {
            if error.is_some() {
                failed += 1;
            } else if let Err(e) = sink.record(r) {
                error = Some(e);
                failed += 1;
            } else {
                records += 1;
            }
        }
        if msg.now > now {
            now = msg.now;
            if error.is_none() {
                if let Err(e) = sink.tick(now) {
                    error = Some(e);
                }
            }
        }
    }
    ExporterDone {
        sink,
        error,
        records,
        failed,
    }
}

fn shard_config(cfg: &Config) -> ShardConfig {
    let n = cfg.workers.max(1) as u64;
    ShardConfig {
        idle_ns: cfg.idle_timeout_ns,
        active_ns: cfg.active_timeout_ns,
        grace_ns: cfg.fin_grace_ns,
        capacity: cfg.max_flows.div_ceil(n).clamp(1, u64::from(u32::MAX)) as u32,
        biflow: cfg.biflow,
        min_tcp_bytes: cfg.min_tcp_bytes,
    }
}

impl<S: RecordSink> Meter<S> {
    /// A meter sending records to `sink`; with `cfg.workers > 1` it starts the worker and
    /// exporter threads.
    pub fn new(cfg: &Config, sink: S) -> Meter<S> {
        let hasher = match cfg.seed {
            Some(s) => KeyHasher::with_seed(s),
            None => KeyHasher::random(),
        };
        let preparer = Preparer::new(hasher.clone(), cfg.tos_key);
        let scfg = shard_config(cfg);
        let workers = cfg.workers.max(1);
        let step = || {
            Step::new(
                Shard::new(scfg.clone(), hasher.clone()),
                FragTable::new(cfg.frag_capacity.div_ceil(workers), cfg.frag_timeout_ns),
                hasher.clone(),
            )
        };
        let pool = Pool::default();
        let stage = if workers == 1 {
            Stage::Inline(Box::new(Inline {
                step: step(),
                out: Vec::with_capacity(RECORD_BATCH),
                sink,
                error: None,
                sink_failed: 0,
                records: 0,
                next_sweep: 0,
            }))
        } else {
            let (etx, erx) = bounded::<ToExporter>(QUEUE * workers);
            let exporter = std::thread::Builder::new()
                .name("weir-export".into())
                .spawn(move || exporter(sink, erx))
                .expect("spawn the exporter thread");
            let mut txs = Vec::new();
            let mut handles = Vec::new();
            for k in 0..workers {
                let (tx, rx) = bounded(QUEUE);
                let (st, rtx, etx) = (step(), pool.clone(), etx.clone());
                handles.push(
                    std::thread::Builder::new()
                        .name(format!("weir-flows-{k}"))
                        .spawn(move || worker(st, rx, rtx, etx))
                        .expect("spawn a flow worker thread"),
                );
                txs.push(tx);
            }
            Stage::Threaded(Threaded {
                txs,
                router: Router::new(hasher.clone(), workers, pool.clone(), BATCH),
                workers: handles,
                exporter,
            })
        };
        Meter {
            preparer,
            stage,
            pool,
            clock: 0,
        }
    }

    /// The stateless step's settings (hasher, keying), to run [`Preparer::prepare`] on other
    /// threads and feed the results, in packet order, to [`packet_prepared`](Self::packet_prepared)
    /// (or routed, to [`feed`](Self::feed)).
    pub fn preparer(&self) -> &Preparer {
        &self.preparer
    }

    /// Shards (workers).
    pub fn shards(&self) -> usize {
        match &self.stage {
            Stage::Inline(_) => 1,
            Stage::Threaded(t) => t.txs.len(),
        }
    }

    /// A router for this meter's shards, for a thread that prepares a range of packets and hands
    /// them to [`feed`](Self::feed). `Send`: make one per range, on any thread.
    pub fn router(&self) -> Router {
        Router::new(
            self.preparer.hasher().clone(),
            self.shards(),
            self.pool.clone(),
            0,
        )
    }

    /// Meters one frame of link type `link` captured at `ts_ns`: [`Preparer::prepare`] then
    /// [`packet_prepared`](Self::packet_prepared).
    #[inline]
    pub fn packet(&mut self, link: LinkType, ts_ns: u64, frame: &[u8]) {
        let p = self.preparer.prepare(link, ts_ns, frame);
        self.packet_prepared(&p);
    }

    /// The stateful step: meters one packet prepared by this meter's [`preparer`](Self::preparer)
    /// (or a clone of it). Packets must come in the order they were captured (as they would
    /// through [`packet`](Self::packet)): fragment attribution, counters, the flow table and
    /// expiry depend on it.
    #[inline]
    pub fn packet_prepared(&mut self, p: &Prepared) {
        self.clock = self.clock.max(p.ts_ns);
        match &mut self.stage {
            Stage::Inline(s) => s.packet(p),
            Stage::Threaded(t) => {
                let (s, ticked) = t.router.push(*p);
                if ticked {
                    t.send_all();
                } else if t.router.batch_len(s) >= BATCH {
                    t.send(s);
                }
            }
        }
    }

    /// Meters a range of packets routed by a [`router`](Self::router) of this meter. Ranges
    /// must come in packet order (each range's packets are in order inside it); the result is
    /// the same as [`packet_prepared`](Self::packet_prepared) on every packet.
    pub fn feed(&mut self, routed: Routed) {
        self.clock = self.clock.max(routed.clock);
        match &mut self.stage {
            Stage::Inline(s) => {
                for batch in routed.batches {
                    for (i, p) in batch.iter().enumerate() {
                        s.step.prefetch_ahead(&batch, i);
                        s.packet(p);
                    }
                    self.pool.put(batch);
                }
            }
            Stage::Threaded(t) => {
                // what this meter routed itself comes first
                t.send_all();
                for (s, batch) in routed.batches.into_iter().enumerate() {
                    if batch.is_empty() {
                        self.pool.put(batch);
                    } else {
                        let _ = t.txs[s].send(batch);
                    }
                }
            }
        }
    }

    /// Advances the packet clock without a packet (live capture on a quiet link), expiring what
    /// is due.
    pub fn tick(&mut self, now_ns: u64) {
        self.clock = self.clock.max(now_ns);
        match &mut self.stage {
            Stage::Inline(s) => s.sweep(now_ns),
            Stage::Threaded(t) => {
                t.router.mark(now_ns);
                t.send_all();
            }
        }
    }

    /// Expires what is due at the last packet's time, ends every other flow
    /// ([`EndReason::ForcedEnd`]), stops the threads and returns the counters and the sink.
    pub fn finish(mut self) -> Finished<S> {
        // every shard sweeps at the same final time, so the result does not depend on sharding
        self.tick(self.clock);
        let mut stats = MeterStats::default();
        match self.stage {
            Stage::Inline(mut s) => {
                s.step.shard.flush(EndReason::ForcedEnd, &mut s.out);
                s.drain();
                stats.add_step(&s.step);
                stats.workers = 1;
                stats.records = s.records;
                stats.sink_failed = s.sink_failed;
                Finished {
                    stats,
                    sink: s.sink,
                    error: s.error,
                }
            }
            Stage::Threaded(t) => {
                stats.workers = t.txs.len();
                drop(t.txs);
                for h in t.workers {
                    let step = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    stats.add_step(&step);
                }
                let done = t
                    .exporter
                    .join()
                    .unwrap_or_else(|p| std::panic::resume_unwind(p));
                stats.records = done.records;
                stats.sink_failed = done.failed;
                Finished {
                    stats,
                    sink: done.sink,
                    error: done.error,
                }
            }
        }
    }
}
