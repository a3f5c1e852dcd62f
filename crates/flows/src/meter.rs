//! The metering pipeline, ffProbe's design: the caller's thread reads (and decodes) packets, N
//! worker threads each own one [`Shard`] of the flow table, one exporter thread owns the
//! [`RecordSink`].
//!
//! ```text
//!  reader (caller) ──batches of 256 Prepared───▶ worker k (Shard k) ──batches of records──┐
//!        │  prepare, fragments, route             ▲ empty batches recycled ◀──┘            ▼
//!        └── every second of packet time: flush + Tick to every worker         exporter (sink)
//! ```
//!
//! Handoff is by bounded crossbeam channels carrying whole batches, so a channel operation costs
//! a fraction of a nanosecond per packet, and no lock is taken on the packet path (each shard is
//! touched by its worker only). A full channel blocks the reader: offline, nothing is ever
//! dropped. With one worker the whole pipeline runs inline on the caller's thread, with no
//! channel at all.
//!
//! Time is packet time: each worker's clock is the latest packet time it saw, and the reader
//! sends a tick with its own clock to every worker once per second of packet time, so a shard
//! that receives no packets still expires its flows (at most one second late).

use std::thread::JoinHandle;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use weir_decode::LinkType;

use crate::extract::{FragKey, FragTable};
use crate::key::{shard_of, KeyHasher};
use crate::prepare::{Kind, Prepared, Preparer};
use crate::record::{EndReason, FlowRecord};
use crate::shard::{Shard, ShardConfig, ShardStats};

/// Packets per batch handed to a worker.
pub const BATCH: usize = 256;
/// Records per batch handed to the exporter.
const RECORD_BATCH: usize = 128;
/// Batches in flight per worker.
const QUEUE: usize = 16;
/// Packet time between ticks (threaded) or sweeps (inline).
const TICK_NS: u64 = 1_000_000_000;
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
    /// Most fragmented datagrams remembered at once.
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
    /// First fragments not remembered because the fragment table was full.
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
    fn add_shard(&mut self, s: &ShardStats) {
        self.flows += s.created;
        self.peak_flows += s.peak;
        self.idle_ended += s.ended[EndReason::IdleTimeout as usize];
        self.active_ended += s.ended[EndReason::ActiveTimeout as usize];
        self.tcp_ended += s.ended[EndReason::EndOfFlow as usize];
        self.forced_ended += s.ended[EndReason::ForcedEnd as usize];
        self.evicted += s.ended[EndReason::LackOfResources as usize];
        self.below_min_bytes += s.below_min_bytes;
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
    frags: FragTable,
    stats: MeterStats,
    stage: Stage<S>,
    /// Latest packet time seen.
    clock: u64,
}

enum Stage<S: RecordSink> {
    Inline(Box<Inline<S>>),
    Threaded(Threaded<S>),
}

struct Inline<S: RecordSink> {
    shard: Shard,
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
        self.shard.expire(now, &mut self.out);
        self.drain();
        if self.error.is_none() {
            if let Err(e) = self.sink.tick(self.shard.now()) {
                self.error = Some(e);
            }
        }
        self.next_sweep = self.shard.now().saturating_add(SWEEP_NS);
    }
}

enum ToWorker {
    Batch(Vec<Prepared>),
    Tick(u64),
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
    txs: Vec<Sender<ToWorker>>,
    pending: Vec<Vec<Prepared>>,
    recycled: Receiver<Vec<Prepared>>,
    workers: Vec<JoinHandle<(ShardStats, f64, u64)>>,
    exporter: JoinHandle<ExporterDone<S>>,
    next_tick: u64,
}

impl<S: RecordSink> Threaded<S> {
    #[inline]
    fn send(&mut self, s: usize) {
        let fresh = self
            .recycled
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let batch = std::mem::replace(&mut self.pending[s], fresh);
        // a worker only hangs up by panicking, which `finish` reports
        let _ = self.txs[s].send(ToWorker::Batch(batch));
    }

    fn tick(&mut self, now: u64) {
        for s in 0..self.txs.len() {
            if !self.pending[s].is_empty() {
                self.send(s);
            }
            let _ = self.txs[s].send(ToWorker::Tick(now));
        }
        self.next_tick = now.saturating_add(TICK_NS);
    }
}

fn worker(
    mut shard: Shard,
    rx: Receiver<ToWorker>,
    recycle: Sender<Vec<Prepared>>,
    exp: Sender<ToExporter>,
) -> (ShardStats, f64, u64) {
    let mut out = Vec::with_capacity(RECORD_BATCH);
    for msg in rx {
        let tick = match msg {
            ToWorker::Batch(mut v) => {
                for p in &v {
                    shard.packet(p, &mut out);
                }
                shard.expire(shard.now(), &mut out);
                v.clear();
                let _ = recycle.send(v);
                false
            }
            ToWorker::Tick(t) => {
                shard.expire(t, &mut out);
                true
            }
        };
        if out.len() >= RECORD_BATCH || tick {
            let records = std::mem::replace(&mut out, Vec::with_capacity(RECORD_BATCH));
            let _ = exp.send(ToExporter {
                records,
                now: shard.now(),
            });
        }
    }
    shard.flush(EndReason::ForcedEnd, &mut out);
    let _ = exp.send(ToExporter {
        records: out,
        now: shard.now(),
    });
    let cap = u64::from(shard.capacity());
    (shard.stats(), shard.bytes_per_flow(), cap)
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
        let frags = FragTable::new(cfg.frag_capacity, cfg.frag_timeout_ns);
        let scfg = shard_config(cfg);
        let workers = cfg.workers.max(1);
        let stage = if workers == 1 {
            Stage::Inline(Box::new(Inline {
                shard: Shard::new(scfg, hasher),
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
            let (rtx, rrx) = unbounded();
            let mut txs = Vec::new();
            let mut handles = Vec::new();
            for k in 0..workers {
                let (tx, rx) = bounded(QUEUE);
                let shard = Shard::new(scfg.clone(), hasher.clone());
                let (rtx, etx) = (rtx.clone(), etx.clone());
                handles.push(
                    std::thread::Builder::new()
                        .name(format!("weir-flows-{k}"))
                        .spawn(move || worker(shard, rx, rtx, etx))
                        .expect("spawn a flow worker thread"),
                );
                txs.push(tx);
            }
            Stage::Threaded(Threaded {
                txs,
                pending: (0..workers).map(|_| Vec::with_capacity(BATCH)).collect(),
                recycled: rrx,
                workers: handles,
                exporter,
                next_tick: 0,
            })
        };
        Meter {
            preparer,
            frags,
            stats: MeterStats {
                workers,
                ..MeterStats::default()
            },
            stage,
            clock: 0,
        }
    }

    /// The stateless step's settings (hasher, keying), to run [`Preparer::prepare`] on other
    /// threads and feed the results, in packet order, to [`packet_prepared`](Self::packet_prepared).
    pub fn preparer(&self) -> &Preparer {
        &self.preparer
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
        self.stats.packets += 1;
        self.clock = self.clock.max(p.ts_ns);
        match p.kind() {
            Kind::Metered => {}
            Kind::NoTransport => self.stats.no_transport += 1,
            Kind::NonIp => {
                self.stats.non_ip += 1;
                return;
            }
            Kind::DecodeError => {
                self.stats.decode_errors += 1;
                return;
            }
            Kind::FirstFrag | Kind::FirstFragNoTransport | Kind::LaterFrag => {
                let q = self.attribute(p);
                self.stats.metered += 1;
                self.table(&q);
                return;
            }
        }
        self.stats.metered += 1;
        self.table(p);
    }

    /// Fragments: remembers a first fragment's ports, or gives a later fragment the ports of its
    /// first one; returns the packet with its final key and hash.
    #[cold]
    #[inline(never)]
    fn attribute(&mut self, p: &Prepared) -> Prepared {
        let mut q = *p;
        let from_b = p.from_b();
        let fk = FragKey::of(&p.key, from_b, p.hash as u32);
        let kind = match p.kind() {
            Kind::LaterFrag => match self.frags.lookup(&fk, p.ts_ns) {
                Some((src_port, dst_port)) => {
                    self.stats.frag_attributed += 1;
                    let (key, from_b) = p.key.with_ports(from_b, src_port, dst_port);
                    q.key = key;
                    q.set_from_b(from_b);
                    Kind::Metered
                }
                None => {
                    self.stats.frag_unattributed += 1;
                    Kind::Metered
                }
            },
            k => {
                let (_, _, sport, dport) = p.key.endpoints(from_b);
                self.frags.remember(fk, (sport, dport), p.ts_ns);
                if k == Kind::FirstFragNoTransport {
                    self.stats.no_transport += 1;
                    Kind::NoTransport
                } else {
                    Kind::Metered
                }
            }
        };
        q.set_kind(kind);
        q.hash = self.preparer.hasher().hash(&q.key);
        q
    }

    /// The flow-table step of a metered packet with its final key.
    #[inline(always)]
    fn table(&mut self, p: &Prepared) {
        match &mut self.stage {
            Stage::Inline(s) => {
                s.shard.packet(p, &mut s.out);
                if p.ts_ns >= s.next_sweep {
                    s.sweep(p.ts_ns);
                } else if !s.out.is_empty() {
                    s.drain();
                }
            }
            Stage::Threaded(t) => {
                if p.ts_ns >= t.next_tick {
                    t.tick(p.ts_ns);
                }
                let s = shard_of(p.hash, t.txs.len());
                t.pending[s].push(*p);
                if t.pending[s].len() >= BATCH {
                    t.send(s);
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
            Stage::Threaded(t) => t.tick(now_ns),
        }
    }

    /// Counters so far (shard counters only appear after [`finish`](Self::finish)).
    pub fn stats(&self) -> &MeterStats {
        &self.stats
    }

    /// Expires what is due at the last packet's time, ends every other flow
    /// ([`EndReason::ForcedEnd`]), stops the threads and returns the counters and the sink.
    pub fn finish(mut self) -> Finished<S> {
        // every shard sweeps at the same final time, so the result does not depend on sharding
        self.tick(self.clock);
        let mut stats = self.stats;
        stats.frag_table_full = self.frags.overflow;
        match self.stage {
            Stage::Inline(mut s) => {
                s.shard.flush(EndReason::ForcedEnd, &mut s.out);
                s.drain();
                stats.add_shard(&s.shard.stats());
                stats.bytes_per_flow = s.shard.bytes_per_flow();
                stats.capacity = u64::from(s.shard.capacity());
                stats.records = s.records;
                stats.sink_failed = s.sink_failed;
                Finished {
                    stats,
                    sink: s.sink,
                    error: s.error,
                }
            }
            Stage::Threaded(mut t) => {
                for s in 0..t.txs.len() {
                    if !t.pending[s].is_empty() {
                        t.send(s);
                    }
                }
                drop(t.txs);
                let mut bpf = 0.0;
                for h in t.workers {
                    let (s, b, cap) = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    stats.add_shard(&s);
                    bpf = b;
                    stats.capacity += cap;
                }
                stats.bytes_per_flow = bpf;
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
