//! The metering pipeline, ffProbe's design: a reader stage prepares packets and routes them to N
//! shards of the flow table (each a state machine of its own: counters, fragment table, flow
//! table, expiry rules; time passed in), and one exporter thread owns the [`RecordSink`].
//!
//! ```text
//!  reader ──prepare, route (Router)──batches of Prepared──▶ shard k ──records──┐
//!                ▲                    + a clock mark per second   │            ▼
//!                └────────── empty batches recycled ◀─────────────┘   exporter (sink)
//! ```
//!
//! The shards are what `--workers` counts: parts of the table, each metered in packet order by
//! one thread at a time, and plain values owned by whoever runs them (no lock around a shard).
//! Which threads run them is this module's choice, one of three:
//! * **inline** (one shard, [`Meter::new`]): everything on the caller's thread, records
//!   straight into the sink;
//! * **threaded** (N shards, [`Meter::new`]): one worker thread per shard, owning it, fed by
//!   bounded crossbeam channels of whole batches (a channel operation costs a fraction of a
//!   nanosecond per packet; a full channel blocks the reader, so offline nothing is ever
//!   dropped);
//! * **lanes of the file reader** (1 or N shards, `FileShards`, for
//!   [`meter_parallel`](crate::meter_parallel) only): no worker threads; each shard is a lane
//!   of the scheduler that reads the file on every core (`weir_pcap::parallel::Plan::run_lanes`),
//!   which owns the shard and lends it as `&mut` to one reading thread at a time. A thread that
//!   has prepared a range meters its batches while they are still in its cache, and no core
//!   sits idle waiting for a worker.
//!
//! The reader stage is the caller's thread, one packet at a time ([`Meter::packet`],
//! [`Meter::packet_prepared`]), or several threads that each prepare and route a whole range of
//! a file ([`Meter::router`]) and hand it over in file order ([`Meter::feed`]) or run it as a
//! lane (`FileShards::run`). Packets go to shards by their addresses ([`KeyHasher::route`]), so both
//! directions of a flow and every fragment of a datagram meet in one shard and each shard keeps
//! its own fragment table: everything stateful is per shard, no lock is taken per packet.
//!
//! Time is packet time: each shard's clock is the latest packet time it saw, and the router
//! puts a clock mark into every shard's batch once per second of packet time, so a shard that
//! receives no packets still expires its flows (at most one second late). A live caller passes
//! the wall clock in with [`Meter::tick`] when traffic pauses; nothing here reads a clock.
//!
//! Several inputs one after the other (`-r a.pcap -r b.pcap`) are one run, and a clock that
//! runs backwards from one input to the next would leave each shard expiring the new input's
//! flows by the old input's clock (as due, at once, and differently in each shard). So when a
//! new input starts before the current clock ([`Meter::new_input`]), every shard ends its
//! flows as at the end of input (what is due at the old clock expires, the rest is ended as
//! [`EndReason::ForcedEnd`]), forgets its fragments and restarts its clock at the new input's
//! first packet: the records are those of metering each input alone, for any shard count. An
//! input that starts at or after the clock simply continues the run (flows may span it).

use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Receiver, Sender};
use weir_decode::LinkType;

use crate::frag::FragTable;
use crate::key::KeyHasher;
use crate::prepare::{Prepared, Preparer};
use crate::record::{EndReason, FlowRecord, Tag};
use crate::route::{Pool, Routed, Router};
use crate::shard::{Emit, Shard, RECORD_BATCH};
use crate::table::{FlowTable, TableConfig};

/// Packets per batch handed to a worker.
pub const BATCH: usize = 256;
/// Batches in flight per worker.
const QUEUE: usize = 4;

/// Settings of a [`Meter`]; with the `clap` feature, the meter's options of `weir flows` (the doc
/// comments are their help, durations are given in seconds and held in ns).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct Config {
    /// Seconds without a packet after which a flow ends.
    #[cfg_attr(feature = "clap", arg(long = "idle-timeout", value_name = "S", default_value = "30",
          value_parser = weir_packet::value::seconds_ns, allow_negative_numbers = true))]
    pub idle_timeout_ns: u64,
    /// Seconds after which a long flow is exported and restarted.
    #[cfg_attr(feature = "clap", arg(long = "active-timeout", value_name = "S", default_value = "120",
          value_parser = weir_packet::value::seconds_ns, allow_negative_numbers = true))]
    pub active_timeout_ns: u64,
    /// Seconds a TCP flow lives on after a FIN or RST (for the other side's FIN and last ACKs).
    #[cfg_attr(feature = "clap", arg(long = "fin-grace", value_name = "S", default_value = "1",
          value_parser = weir_packet::value::seconds_ns, allow_negative_numbers = true))]
    pub fin_grace_ns: u64,
    /// Shards of the flow table, 1 to 256: each meters its part of the flows in packet order,
    /// on one thread at a time. Reading several files, pcapng or live traffic, each shard has a
    /// worker thread of its own (1: all on the reading thread); reading one large pcap file, the
    /// reading threads (one per core) run the shards themselves. The default is the number of
    /// cores.
    // [`Meter::new`] gives each shard its own worker thread (1: inline on the caller's thread);
    // [`meter_parallel`](crate::meter_parallel) lets the threads reading a file run them.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = default_workers(),
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=256),
          allow_negative_numbers = true))]
    pub workers: usize,
    /// Most flows held at once, at least 1 (split over the shards, at most 16777214 each);
    /// beyond it the least recently seen flow of the shard is exported early ("lack of
    /// resources").
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true))]
    pub max_flows: u64,
    /// Do not export TCP records with fewer bytes than this.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N", default_value_t = 0))]
    pub min_tcp_bytes: u64,
    /// One record per flow with both directions (IPFIX RFC 5103; reverse columns in JSON/CSV).
    /// v5 and v9 still send one record per direction.
    #[cfg_attr(feature = "clap", arg(long))]
    pub biflow: bool,
    /// Put the IP TOS / traffic class in the flow key.
    #[cfg_attr(feature = "clap", arg(long))]
    pub tos_key: bool,
    /// Hash seed (default: random per run). With one worker, or input in time order, results do
    /// not depend on it; with several workers and a clock that runs backwards inside one file
    /// (captures concatenated into one), expiry follows each shard's own clock, so fix the seed
    /// for repeatable runs. (A file that starts before the clock, as in `-r LATER -r EARLIER`,
    /// ends every flow and restarts the clock: each file is metered as if alone.)
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub seed: Option<u64>,
    /// Most fragmented datagrams remembered at once (split over the shards).
    #[cfg_attr(feature = "clap", arg(skip = 65_536usize))]
    pub frag_capacity: usize,
    /// How long a first fragment's ports are remembered (default 30 s, Linux's `ipfrag_time`).
    #[cfg_attr(feature = "clap", arg(skip = 30_000_000_000u64))]
    pub frag_timeout_ns: u64,
}

/// The default of `--workers`: one shard per core (at most 256).
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(256))
}

/// Most flows one shard of the meter holds ([`MAX_CAPACITY`](crate::index::MAX_CAPACITY)).
pub const MAX_FLOWS_PER_WORKER: u64 = crate::index::MAX_CAPACITY as u64;

/// A [`Config`] whose `max_flows` split over its `workers` is more than one shard holds.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "--max-flows {max_flows} over {workers} worker(s) is {per_worker} flows per worker; the most \
     is {MAX_FLOWS_PER_WORKER} per worker"
)]
pub struct TooManyFlows {
    /// The config's `max_flows`.
    pub max_flows: u64,
    /// The config's `workers`.
    pub workers: usize,
    /// `max_flows` over `workers`, rounded up.
    pub per_worker: u64,
}

impl Config {
    /// Checks what the meter cannot take: more flows per shard than
    /// [`MAX_FLOWS_PER_WORKER`] (the table would hold fewer than asked).
    pub fn check(&self) -> Result<(), TooManyFlows> {
        let per_worker = self.max_flows.div_ceil(self.workers.max(1) as u64);
        if per_worker > MAX_FLOWS_PER_WORKER {
            return Err(TooManyFlows {
                max_flows: self.max_flows,
                workers: self.workers,
                per_worker,
            });
        }
        Ok(())
    }
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
    /// Memory per flow at full capacity: slab entry + hash index share (+ the tag side table of
    /// the shards that saw tags), bytes, over all shards.
    pub bytes_per_flow: f64,
    /// Flows the shards can hold, in all.
    pub capacity: u64,
    /// Workers (shards).
    pub workers: usize,
    /// Packets metered with a tag (the rules' `tag`; 0 without rules).
    pub tagged_packets: u64,
    /// Records exported with a tag.
    pub tagged_records: u64,
    /// Tagged packets whose tag was not kept (a shard's table of 65 535 distinct tags full).
    pub tags_lost: u64,
}

impl MeterStats {
    fn add_shard(&mut self, st: &Shard) {
        let (c, s) = (&st.counts, &st.table.stats());
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
        self.tagged_packets += s.tagged_packets;
        self.tagged_records += s.tagged_records;
        self.tags_lost += s.tags_lost;
        // over all shards: a shard whose flows carried tags has the tag side table too
        let (before, cap) = (self.capacity as f64, f64::from(st.table.capacity()));
        self.bytes_per_flow =
            (self.bytes_per_flow * before + st.table.bytes_per_flow() * cap) / (before + cap);
        self.capacity += u64::from(st.table.capacity());
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
    /// One shard on the caller's thread, writing to the sink itself.
    Inline(Box<Inline<S>>),
    /// One worker thread per shard.
    Threaded(Threaded<S>),
}

struct Inline<S: RecordSink> {
    shard: Shard,
    sink: ToSink<S>,
}

/// Records straight into the sink (inline, and on the exporter thread).
struct ToSink<S: RecordSink> {
    sink: S,
    error: Option<S::Error>,
    records: u64,
    failed: u64,
    clock: u64,
}

impl<S: RecordSink> Emit for ToSink<S> {
    const HANDOFF: bool = false;

    fn records(&mut self, out: &mut Vec<FlowRecord>, clock: Option<u64>) {
        for r in out.drain(..) {
            if self.error.is_some() {
                self.failed += 1;
            } else if let Err(e) = self.sink.record(&r) {
                self.error = Some(e);
                self.failed += 1;
            } else {
                self.records += 1;
            }
        }
        if let Some(t) = clock {
            self.clock = self.clock.max(t);
            if self.error.is_none() {
                if let Err(e) = self.sink.tick(self.clock) {
                    self.error = Some(e);
                }
            }
        }
    }
}

/// Records to the exporter thread.
struct ToExporter<'a>(&'a Sender<Exported>);

/// A message to the exporter thread.
struct Exported {
    records: Vec<FlowRecord>,
    clock: Option<u64>,
}

impl Emit for ToExporter<'_> {
    const HANDOFF: bool = true;

    fn records(&mut self, out: &mut Vec<FlowRecord>, clock: Option<u64>) {
        if out.is_empty() && clock.is_none() {
            return;
        }
        let records = std::mem::replace(out, Vec::with_capacity(RECORD_BATCH));
        // the exporter only hangs up by panicking, which `finish` reports
        let _ = self.0.send(Exported { records, clock });
    }
}

/// The exporter thread, shared by the threaded stage and [`FileShards`].
struct Exporter<S: RecordSink> {
    tx: Sender<Exported>,
    thread: JoinHandle<ToSink<S>>,
}

impl<S: RecordSink> Exporter<S> {
    fn spawn(sink: S, queue: usize) -> Exporter<S> {
        let (tx, rx) = bounded::<Exported>(queue);
        let thread = std::thread::Builder::new()
            .name("weir-export".into())
            .spawn(move || {
                let mut to = ToSink {
                    sink,
                    error: None,
                    records: 0,
                    failed: 0,
                    clock: 0,
                };
                for mut msg in rx {
                    // ticks only when the clock moves on: several shards send their own clocks
                    let clock = msg.clock.filter(|&t| t > to.clock);
                    to.records(&mut msg.records, clock);
                }
                to
            })
            .expect("spawn the exporter thread");
        Exporter { tx, thread }
    }

    /// Waits for the exporter (every sender must be gone) and returns what it wrote to.
    fn finish(thread: JoinHandle<ToSink<S>>, stats: &mut MeterStats) -> Finished<S> {
        let done = thread
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        finished(done, stats)
    }
}

fn finished<S: RecordSink>(to: ToSink<S>, stats: &mut MeterStats) -> Finished<S> {
    stats.records = to.records;
    stats.sink_failed = to.failed;
    Finished {
        stats: std::mem::take(stats),
        sink: to.sink,
        error: to.error,
    }
}

/// What a worker thread is handed.
enum Work {
    /// Packets (and clock marks) routed to its shard, in order.
    Batch(Vec<Prepared>),
    /// A new input starts before the clock ([`Shard::restart`]).
    Restart { end: u64, start: u64 },
}

struct Threaded<S: RecordSink> {
    txs: Vec<Sender<Work>>,
    router: Router,
    workers: Vec<JoinHandle<Shard>>,
    exporter: Exporter<S>,
}

impl<S: RecordSink> Threaded<S> {
    #[inline]
    fn send(&mut self, s: usize) {
        let batch = self.router.take_one(s);
        // a worker only hangs up by panicking, which `finish` reports
        let _ = self.txs[s].send(Work::Batch(batch));
    }

    fn send_all(&mut self) {
        for s in 0..self.txs.len() {
            if self.router.batch_len(s) > 0 {
                self.send(s);
            }
        }
    }
}

fn worker(mut shard: Shard, rx: Receiver<Work>, recycle: Pool, exp: Sender<Exported>) -> Shard {
    let mut emit = ToExporter(&exp);
    for work in rx {
        match work {
            Work::Batch(batch) => {
                shard.run(&batch, &mut emit);
                recycle.put(batch);
            }
            Work::Restart { end, start } => shard.restart(end, start, &mut emit),
        }
    }
    shard.flush(&mut emit);
    shard
}

/// Bytes of a file per range when a file is read on several threads (`meter_parallel`): 8 MiB
/// ranges hold ≈ 27 k packets of the bench trace, whose prepared packets (1.7 MB) stay in the
/// reading core's 2 MiB L2 cache until they are metered (`bench/flows_vs_peers.py`).
pub const RANGE_BYTES: u64 = 8 << 20;

/// A meter whose shards are lanes of the scheduler that reads a file on every core
/// (`weir_pcap::parallel::Plan::run_lanes`, for [`meter_parallel`](crate::meter_parallel)):
/// the shard states ([`new`](Self::new) hands them out) are owned by that scheduler and lent,
/// as `&mut`, to one reading thread at a time, which meters its batch ([`run`](Self::run))
/// while the batch is still in its cache. Everything else is here: each thread prepares and
/// routes a range's packets into a [`Router`] of its own ([`new_range`](Self::new_range),
/// [`push`](Self::push)) and splits it into one batch per shard ([`split`](Self::split));
/// [`finish`](Self::finish) takes the shards back. `Sync`: share it between the threads.
pub(crate) struct FileShards<S: RecordSink> {
    preparer: Preparer,
    template: Router,
    pool: Pool,
    exporter: Exporter<S>,
}

impl<S: RecordSink> FileShards<S> {
    /// `cfg.workers` shards for ranges of about `range_bytes`, sending records to `sink`
    /// through the exporter thread (with one shard, too).
    pub(crate) fn new(cfg: &Config, sink: S, range_bytes: u64) -> (FileShards<S>, Vec<Shard>) {
        let parts = Parts::new(cfg);
        let workers = parts.workers;
        let shards = (0..workers).map(|_| parts.shard(cfg)).collect();
        // room for a range of 64-byte records in every shard's batch: no regrowing
        let template = parts.router(range_bytes as usize / 64);
        let file = FileShards {
            preparer: parts.preparer,
            template,
            pool: parts.pool,
            exporter: Exporter::spawn(sink, QUEUE * workers),
        };
        (file, shards)
    }

    /// An empty router for one range (its batches have room for a whole range).
    pub(crate) fn new_range(&self) -> Router {
        self.template.empty_like()
    }

    /// Prepares one frame and routes it into `range`.
    #[inline]
    pub(crate) fn push(&self, range: &mut Router, link: LinkType, ts_ns: u64, frame: &[u8]) {
        range.push(self.preparer.prepare(link, ts_ns, frame));
    }

    /// The range's batches, one per shard in shard order.
    pub(crate) fn split(range: Router) -> Vec<Vec<Prepared>> {
        range.into_routed().into_batches()
    }

    /// Meters `batch`, `shard`'s part of a range. Each shard's batches must come in packet
    /// order; different shards run in parallel.
    pub(crate) fn run(&self, shard: &mut Shard, batch: Vec<Prepared>) {
        shard.run(&batch, &mut ToExporter(&self.exporter.tx));
        self.pool.put(batch);
    }

    /// Expires what is due at the latest time any shard saw, ends every other flow
    /// ([`EndReason::ForcedEnd`]), stops the exporter and returns the counters and the sink
    /// ([`Meter::finish`]).
    pub(crate) fn finish(self, mut shards: Vec<Shard>) -> Finished<S> {
        let clock = shards.iter().map(|s| s.table.now()).max().unwrap_or(0);
        let tx = self.exporter.tx;
        // every shard sweeps at the same final time, so the result does not depend on sharding
        for s in &mut shards {
            s.tick(clock, &mut ToExporter(&tx));
        }
        let mut stats = MeterStats {
            workers: shards.len(),
            ..MeterStats::default()
        };
        for mut shard in shards {
            shard.flush(&mut ToExporter(&tx));
            stats.add_shard(&shard);
        }
        drop(tx);
        Exporter::finish(self.exporter.thread, &mut stats)
    }
}

/// What every meter is made of: the stateless step, the shards' settings, the batch pool.
struct Parts {
    hasher: KeyHasher,
    preparer: Preparer,
    table: TableConfig,
    workers: usize,
    pool: Pool,
}

impl Parts {
    fn new(cfg: &Config) -> Parts {
        let hasher = match cfg.seed {
            Some(s) => KeyHasher::with_seed(s),
            None => KeyHasher::random(),
        };
        Parts {
            preparer: Preparer::new(hasher.clone(), cfg.tos_key),
            hasher,
            table: table_config(cfg),
            workers: cfg.workers.max(1),
            pool: Pool::default(),
        }
    }

    /// One shard's state machine.
    fn shard(&self, cfg: &Config) -> Shard {
        Shard::new(
            FlowTable::new(self.table.clone(), self.hasher.clone()),
            FragTable::new(
                cfg.frag_capacity.div_ceil(self.workers),
                cfg.frag_timeout_ns,
            ),
            self.hasher.clone(),
            self.workers == 1,
        )
    }

    /// A router to every shard whose new batch vectors have room for `reserve` packets.
    fn router(&self, reserve: usize) -> Router {
        Router::new(
            self.hasher.clone(),
            self.workers,
            self.pool.clone(),
            reserve,
        )
    }
}

impl<S: RecordSink> Meter<S> {
    /// A meter sending records to `sink`: with `cfg.workers > 1` it starts one worker thread per
    /// shard and the exporter thread; with one shard everything runs on the caller's thread.
    pub fn new(cfg: &Config, sink: S) -> Meter<S> {
        let parts = Parts::new(cfg);
        let workers = parts.workers;
        let stage = if workers == 1 {
            Stage::Inline(Box::new(Inline {
                shard: parts.shard(cfg),
                sink: ToSink {
                    sink,
                    error: None,
                    records: 0,
                    failed: 0,
                    clock: 0,
                },
            }))
        } else {
            let exporter = Exporter::spawn(sink, QUEUE * workers);
            let mut txs = Vec::new();
            let mut handles = Vec::new();
            for k in 0..workers {
                let (tx, rx) = bounded(QUEUE);
                let (sh, rtx, etx) = (parts.shard(cfg), parts.pool.clone(), exporter.tx.clone());
                handles.push(
                    std::thread::Builder::new()
                        .name(format!("weir-flows-{k}"))
                        .spawn(move || worker(sh, rx, rtx, etx))
                        .expect("spawn a flow worker thread"),
                );
                txs.push(tx);
            }
            Stage::Threaded(Threaded {
                txs,
                router: parts.router(BATCH),
                workers: handles,
                exporter,
            })
        };
        Meter {
            preparer: parts.preparer,
            stage,
            pool: parts.pool,
            clock: 0,
        }
    }

    /// The stateless step's settings (hasher, keying), to run [`Preparer::prepare`] on other
    /// threads and feed the results, in packet order, to [`packet_prepared`](Self::packet_prepared)
    /// (or routed, to [`feed`](Self::feed)).
    pub fn preparer(&self) -> &Preparer {
        &self.preparer
    }

    /// Shards (`cfg.workers`).
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

    /// [`packet`](Self::packet) for a packet the rules may have tagged: with `Some(tag)`, the
    /// packet's flow takes the tag (a flow keeps the last tag seen; see [`FlowRecord::tag`]).
    /// `tag: None` is [`packet`](Self::packet).
    #[inline]
    pub fn packet_tagged(&mut self, link: LinkType, ts_ns: u64, frame: &[u8], tag: Option<&Tag>) {
        let p = self.preparer.prepare(link, ts_ns, frame);
        self.packet_prepared_tagged(&p, tag);
    }

    /// The stateful step: meters one packet prepared by this meter's [`preparer`](Self::preparer)
    /// (or a clone of it). Packets must come in the order they were captured (as they would
    /// through [`packet`](Self::packet)): fragment attribution, counters, the flow table and
    /// expiry depend on it.
    #[inline]
    pub fn packet_prepared(&mut self, p: &Prepared) {
        self.packet_prepared_tagged(p, None);
    }

    /// [`packet_prepared`](Self::packet_prepared) with the packet's tag, if it has one.
    #[inline]
    pub fn packet_prepared_tagged(&mut self, p: &Prepared, tag: Option<&Tag>) {
        self.clock = self.clock.max(p.ts_ns);
        match &mut self.stage {
            Stage::Inline(s) => {
                if let Some(tag) = tag {
                    s.shard.tag_next(*tag);
                }
                s.shard.packet(p, &mut s.sink);
                s.shard.end_batch(&mut s.sink);
            }
            Stage::Threaded(t) => {
                let (s, ticked) = t.router.push_tagged(tag, *p);
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
                    s.shard.run(&batch, &mut s.sink);
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
                        let _ = t.txs[s].send(Work::Batch(batch));
                    }
                }
            }
        }
    }

    /// A new input (the next file of a run) starts with a packet at `start_ns`. When that is
    /// before the clock, every shard ends its flows as at the end of input and restarts its
    /// clock at `start_ns` (see the module documentation); otherwise nothing happens. Call it
    /// before the input's first packet.
    pub fn new_input(&mut self, start_ns: u64) {
        let end = self.clock;
        if start_ns >= end {
            return;
        }
        match &mut self.stage {
            Stage::Inline(s) => s.shard.restart(end, start_ns, &mut s.sink),
            Stage::Threaded(t) => {
                t.send_all();
                t.router.restart();
                for tx in &t.txs {
                    let _ = tx.send(Work::Restart {
                        end,
                        start: start_ns,
                    });
                }
            }
        }
        self.clock = start_ns;
    }

    /// Advances the packet clock without a packet (live capture on a quiet link), expiring what
    /// is due.
    pub fn tick(&mut self, now_ns: u64) {
        self.clock = self.clock.max(now_ns);
        match &mut self.stage {
            Stage::Inline(s) => s.shard.tick(now_ns, &mut s.sink),
            Stage::Threaded(t) => {
                t.router.mark(now_ns);
                t.send_all();
            }
        }
    }

    /// The flow table now, for live statistics: flows held and the counters so far (records
    /// and sink counts excepted), when the shard is the caller's (one shard inline); `None` with
    /// worker threads, whose shards are theirs until the end.
    pub fn table_now(&self) -> Option<(u64, MeterStats)> {
        let mut stats = MeterStats::default();
        let mut active = 0u64;
        let mut add = |shard: &Shard| {
            active += u64::from(shard.table.active());
            stats.add_shard(shard);
        };
        match &self.stage {
            Stage::Inline(s) => add(&s.shard),
            Stage::Threaded(_) => return None,
        }
        Some((active, stats))
    }

    /// Every open flow ([`FlowTable::each_open`](crate::table::FlowTable::each_open)), when the
    /// shard is the caller's (one shard inline); `false` with worker threads.
    pub fn each_open(&self, f: &mut dyn FnMut(crate::table::OpenFlow)) -> bool {
        match &self.stage {
            Stage::Inline(s) => {
                s.shard.table.each_open(f);
                true
            }
            Stage::Threaded(_) => false,
        }
    }

    /// Expires what is due at the last packet's time, ends every other flow
    /// ([`EndReason::ForcedEnd`]), stops the threads and returns the counters and the sink.
    pub fn finish(mut self) -> Finished<S> {
        // every shard sweeps at the same final time, so the result does not depend on sharding
        self.tick(self.clock);
        let mut stats = MeterStats {
            workers: self.shards(),
            ..MeterStats::default()
        };
        match self.stage {
            Stage::Inline(mut s) => {
                s.shard.flush(&mut s.sink);
                stats.add_shard(&s.shard);
                finished(s.sink, &mut stats)
            }
            Stage::Threaded(t) => {
                drop(t.txs);
                for h in t.workers {
                    let shard = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    stats.add_shard(&shard);
                }
                drop(t.exporter.tx);
                Exporter::finish(t.exporter.thread, &mut stats)
            }
        }
    }
}

fn table_config(cfg: &Config) -> TableConfig {
    let n = cfg.workers.max(1) as u64;
    TableConfig {
        idle_ns: cfg.idle_timeout_ns,
        active_ns: cfg.active_timeout_ns,
        grace_ns: cfg.fin_grace_ns,
        capacity: cfg.max_flows.div_ceil(n).clamp(1, u64::from(u32::MAX)) as u32,
        biflow: cfg.biflow,
        min_tcp_bytes: cfg.min_tcp_bytes,
    }
}
