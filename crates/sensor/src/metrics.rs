//! The Prometheus series of a running job: a [`Board`] the caller shares with its metrics
//! server ([`weir_metrics::Server`], rendering [`Board::render`] at each scrape) and hands to
//! the job through [`Controls::metrics`](crate::Controls). The job [`attach`](Board::attach)es
//! its live counters when capture starts (the capture threads', the buffer's, the recorder's,
//! the rules'), keeps the flow meter's packet count up to date each tick, and at its end
//! [`finish`](Board::finish)es: the counters are frozen at their final values (those the
//! summary prints) and the flow meter's end (table peak, evictions, exports per sink) joins
//! them. A scrape reads the live counters at that moment, so it never lags the job.
//!
//! Every series comes from a counter weir keeps; none is derived or invented. Counters are
//! since the job started (the interfaces' and the backlog's drops too: the difference from
//! their values at start, as in the summary). Names follow Prometheus' conventions:
//! `weir_..._total` counters, base units in names (`_bytes`, `_seconds`), `_ratio` for 0..1,
//! and the standard `process_cpu_seconds_total` / `process_resident_memory_bytes`.

#[cfg(test)]
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use weir_buffer::PacketBuffer;
use weir_capture::{Counters, Totals};
use weir_metrics::text::{Exposition, Kind};
use weir_rules::Engine;
use weir_store::RecorderStats;

/// At most this many wildcard rules get series of their own (the first ones, in evaluation
/// order); `weir_rules_wildcard` tells how many there are.
pub const MAX_RULE_SERIES: usize = 1000;

/// The live counters of a job (see the module documentation).
pub struct Live {
    /// The capture threads' counters (live capture; `None` when importing files).
    pub counters: Option<Counters>,
    /// The packet buffer.
    pub buffer: PacketBuffer,
    /// The buffer's readers' names, in reader order (`recorder`, `flows`, `capture`).
    pub readers: Vec<String>,
    /// The recorder's counters (record).
    pub recorder: Option<Arc<RecorderStats>>,
    /// The store directory, for the space left on its filesystem (record).
    pub store: Option<PathBuf>,
    /// Packets the capture job handed to its sink (capture).
    pub written: Option<Arc<AtomicU64>>,
    /// The rule engine, when there are rules.
    pub rules: Option<Engine>,
    /// Packets handed to the flow meter so far, when flows run beside the recorder.
    pub flows_packets: Option<Arc<AtomicU64>>,
    /// The flow outputs' totals so far (as of the meter's last tick), while it runs.
    pub exports: Option<weir_export::LiveExports>,
    /// The live streams' counters, by stream name (final once the job ended).
    pub streams: Vec<(String, Arc<crate::stream::StreamStats>)>,
}

/// How a job's flow meter ended (its counters and each output's).
#[derive(Clone, Debug)]
pub struct FlowsEnd {
    /// The meter's counters.
    pub meter: weir_flows::MeterStats,
    /// Each output's totals, by name.
    pub exports: Vec<(String, weir_export::ExportStats)>,
}

/// What a scrape shows of a job.
enum Job {
    Running(Live),
    Done(Box<Done>),
}

/// A job's counters at its end.
struct Done {
    live: Live,
    totals: Totals,
    per_interface: Vec<(String, Totals)>,
    buffer: weir_buffer::Stats,
    flows: Option<FlowsEnd>,
}

/// The HTTP and VoIP analyzers beside a recorder: each one's counters as of its last tick
/// (or its end) and the records it has read from the buffer so far; `None` when not running.
#[derive(Clone, Copy, Debug, Default)]
pub struct Analyzers {
    /// The HTTP analyzer's.
    pub http: Option<(weir_http::Stats, u64)>,
    /// The VoIP analyzer's.
    pub voip: Option<(weir_voip::Stats, u64)>,
}

/// The shared cell between a job and its metrics server (see the module documentation).
#[derive(Default)]
pub struct Board {
    job: Mutex<Option<Job>>,
    /// The flow meter's table as of its last tick: flows held, counters so far.
    flows_table: Mutex<Option<(u64, weir_flows::MeterStats)>>,
    /// The analyzers' counters, as of the job's last tick or their end.
    analyzers: Mutex<Analyzers>,
}

impl std::fmt::Debug for Board {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Board")
    }
}

/// A running metrics server and the board its scrapes render.
pub struct Serving {
    /// The board the job publishes on.
    pub board: Arc<Board>,
    /// The server (stopped when dropped).
    pub server: weir_metrics::Server,
}

/// Serves a new board's metrics at `http://ADDR/metrics` until the result is dropped.
pub fn serve(addr: std::net::SocketAddr) -> Result<Serving, weir_metrics::ServeError> {
    let board = Board::new();
    let b = board.clone();
    let server = weir_metrics::Server::start(&addr.to_string(), Arc::new(move || b.render()))?;
    Ok(Serving { board, server })
}

impl Board {
    /// A board with no job yet (a scrape shows the process series only).
    pub fn new() -> Arc<Board> {
        Arc::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Job>> {
        self.job.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The job's live counters, from now on.
    pub fn attach(&self, live: Live) {
        *self.lock() = Some(Job::Running(live));
    }

    /// The flow outputs' live totals changed (the meter restarted with new outputs).
    pub fn set_exports(&self, exports: weir_export::LiveExports) {
        if let Some(Job::Running(live)) = &mut *self.lock() {
            live.exports = Some(exports);
        }
    }

    /// The flow meter's table now (flows held, its counters so far), while the job runs.
    pub fn flows_table(&self, table: Option<(u64, weir_flows::MeterStats)>) {
        *self.flows_table.lock().unwrap_or_else(|e| e.into_inner()) = table;
    }

    /// The HTTP and VoIP analyzers' counters now (while the job runs, and at their end).
    pub fn analyzers(&self, a: Analyzers) {
        *self.analyzers.lock().unwrap_or_else(|e| e.into_inner()) = a;
    }

    /// The job ended: its counters stay at `totals` (the source's final totals, for an import
    /// the only ones) and the buffer's now, with the flow meter's end.
    pub fn finish(&self, totals: &Totals, flows: Option<FlowsEnd>) {
        let mut g = self.lock();
        if let Some(Job::Running(live)) = g.take() {
            let per_interface = live
                .counters
                .as_ref()
                .map(Counters::per_interface)
                .unwrap_or_default();
            *g = Some(Job::Done(Box::new(Done {
                buffer: live.buffer.stats(),
                totals: totals.clone(),
                per_interface,
                flows,
                live,
            })));
        }
    }

    /// The exposition now: the process series, then the job's.
    pub fn render(&self) -> String {
        let mut e = Exposition::new();
        process(&mut e);
        self.render_into(&mut e);
        e.finish()
    }

    /// The exposition of several jobs of one process: the process series once, then each
    /// job's series, every sample labelled `weir_job="NAME"` (`job` itself is the label
    /// Prometheus gives its scrape targets).
    pub fn render_jobs<'a>(jobs: impl IntoIterator<Item = (&'a str, &'a Board)>) -> String {
        let mut e = Exposition::new();
        process(&mut e);
        for (name, board) in jobs {
            e.set_labels(&[("weir_job", name)]);
            board.render_into(&mut e);
        }
        e.finish()
    }

    /// Writes the job's series (not the process's) into `e`.
    pub fn render_into(&self, e: &mut Exposition) {
        let e = &mut *e;
        if let Some(job) = &*self.lock() {
            match job {
                Job::Running(live) => {
                    let totals = match &live.counters {
                        Some(c) => c.totals(),
                        None => Totals::default(),
                    };
                    let per = live
                        .counters
                        .as_ref()
                        .map(Counters::per_interface)
                        .unwrap_or_default();
                    let b = live.buffer.stats();
                    series(e, live, &totals, &per, &b, None, false);
                    let table = self
                        .flows_table
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    if let (Some(_), Some((active, m))) = (&live.flows_packets, table) {
                        flows_table(e, active, &m);
                    }
                    if let Some(cell) = &live.exports {
                        let now = cell.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        exports(e, &now);
                    }
                }
                Job::Done(d) => series(
                    e,
                    &d.live,
                    &d.totals,
                    &d.per_interface,
                    &d.buffer,
                    d.flows.as_ref(),
                    true,
                ),
            }
            let a = *self.analyzers.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((stats, read)) = &a.http {
                crate::http::series(e, stats, *read);
            }
            if let Some((stats, read)) = &a.voip {
                crate::voip::series(e, stats, *read);
            }
        }
    }
}

/// The standard process series.
fn process(e: &mut Exposition) {
    if let Some(s) = weir_metrics::process::cpu_seconds() {
        e.single(
            "process_cpu_seconds_total",
            Kind::Counter,
            "Total user and system CPU time spent in seconds.",
            s,
        );
    }
    if let Some(b) = weir_metrics::process::resident_bytes() {
        e.single(
            "process_resident_memory_bytes",
            Kind::Gauge,
            "Resident memory size in bytes.",
            b,
        );
    }
}

/// Writes a counter family with one sample per interface.
fn per_iface(
    e: &mut Exposition,
    per: &[(String, Totals)],
    name: &str,
    help: &str,
    f: impl Fn(&Totals) -> u64,
) {
    if per.is_empty() {
        return;
    }
    let mut fam = e.family(name, Kind::Counter, help);
    for (iface, t) in per {
        fam.sample(&[("interface", iface)], f(t));
    }
}

/// The live streams' series, labelled `stream="NAME"`: matched = written + dropped (+ queued
/// while the job runs).
fn streams(e: &mut Exposition, streams: &[(String, Arc<crate::stream::StreamStats>)]) {
    if streams.is_empty() {
        return;
    }
    fn l(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }
    type Pick = fn(&crate::stream::StreamStats) -> u64;
    let families: [(&str, Kind, &str, Pick); 6] = [
        (
            "weir_stream_matched_packets_total",
            Kind::Counter,
            "Packets that matched the stream's filter.",
            |s| l(&s.matched),
        ),
        (
            "weir_stream_written_packets_total",
            Kind::Counter,
            "Packets of the stream the kernel took for its reader.",
            |s| l(&s.written),
        ),
        (
            "weir_stream_dropped_packets_total",
            Kind::Counter,
            "Matching packets the stream dropped: queue full, no reader, or in flight when the \
             reader went.",
            |s| l(&s.dropped),
        ),
        (
            "weir_stream_queued_bytes",
            Kind::Gauge,
            "Bytes in the stream's queue now.",
            |s| s.queued_bytes.load(Ordering::Relaxed) as u64,
        ),
        (
            "weir_stream_readers_total",
            Kind::Counter,
            "Readers the stream served (FIFO opens, socket clients).",
            |s| l(&s.readers),
        ),
        (
            "weir_stream_attached",
            Kind::Gauge,
            "1 while a reader is attached to the stream.",
            |s| u64::from(s.attached.load(Ordering::Relaxed)),
        ),
    ];
    for (name, kind, help, pick) in families {
        let mut fam = e.family(name, kind, help);
        for (stream, st) in streams {
            fam.sample(&[("stream", stream)], pick(st));
        }
    }
}

/// Every series of a job (`done`: it ended, `totals` are final; an import's come only then).
fn series(
    e: &mut Exposition,
    live: &Live,
    totals: &Totals,
    per: &[(String, Totals)],
    b: &weir_buffer::Stats,
    flows: Option<&FlowsEnd>,
    done: bool,
) {
    streams(e, &live.streams);
    // Before the rings and at the rings, per interface (live capture only).
    per_iface(
        e,
        per,
        "weir_kernel_received_packets_total",
        "Packets the kernel queued to the interface's capture rings, dropped ones included \
         (PACKET_STATISTICS).",
        |t| t.feed.kernel_packets,
    );
    per_iface(
        e,
        per,
        "weir_kernel_dropped_packets_total",
        "Packets the kernel dropped because a capture ring was full (PACKET_STATISTICS).",
        |t| t.feed.kernel_drops,
    );
    per_iface(
        e,
        per,
        "weir_interface_rx_dropped_packets_total",
        "The interface's rx_dropped since capture started (/sys/class/net/IF/statistics).",
        |t| t.if_rx_dropped,
    );
    per_iface(
        e,
        per,
        "weir_interface_rx_missed_packets_total",
        "The interface's rx_missed_errors since capture started (no room in the NIC).",
        |t| t.if_rx_missed,
    );
    per_iface(
        e,
        per,
        "weir_interface_rx_fifo_errors_total",
        "The interface's rx_fifo_errors since capture started (NIC receive FIFO overflow).",
        |t| t.if_rx_fifo,
    );
    if live.counters.is_some() {
        e.single(
            "weir_softnet_backlog_dropped_packets_total",
            Kind::Counter,
            "Packets the kernel dropped because a CPU's backlog queue was full, since capture \
             started (/proc/net/softnet_stat, all CPUs and all interfaces of the machine).",
            totals.softnet_dropped,
        );
    }
    if let Some(k) = &totals.kernel_rules {
        e.single(
            "weir_kernel_rules_dropped_packets_total",
            Kind::Counter,
            "Packets the rules' drop rules rejected in the kernel socket filter (they reached \
             no ring).",
            k.dropped,
        );
    }

    // The capture stage: per interface live, the file import's totals once it ended.
    let import = [("files".to_string(), totals.clone())];
    let stage: &[(String, Totals)] = match (live.counters.is_some(), done) {
        (true, _) => per,
        (false, true) => &import,
        (false, false) => &[],
    };
    let stage_fam = |e: &mut Exposition, name: &str, help: &str, f: &dyn Fn(&Totals) -> u64| {
        if stage.is_empty() {
            return;
        }
        let mut fam = e.family(name, Kind::Counter, help);
        for (iface, t) in stage {
            fam.sample(&[("interface", iface)], f(t));
        }
    };
    stage_fam(
        e,
        "weir_capture_read_packets_total",
        "Packets the capture threads read from the rings (or the import from the files).",
        &|t| t.feed.received,
    );
    stage_fam(
        e,
        "weir_capture_wire_bytes_total",
        "Bytes on the wire of the packets read.",
        &|t| t.feed.wire_bytes,
    );
    stage_fam(
        e,
        "weir_capture_filtered_packets_total",
        "Packets the user-space filter rejected.",
        &|t| t.feed.filtered,
    );
    stage_fam(
        e,
        "weir_capture_rules_dropped_packets_total",
        "Packets the rules dropped after the filter (drop, cutoff, sampled out).",
        &|t| t.feed.rules_dropped,
    );
    stage_fam(
        e,
        "weir_capture_pushed_packets_total",
        "Packets copied into the packet buffer.",
        &|t| t.feed.pushed,
    );
    stage_fam(
        e,
        "weir_capture_pushed_bytes_total",
        "Captured bytes copied into the packet buffer.",
        &|t| t.feed.pushed_bytes,
    );

    // The buffer.
    e.family(
        "weir_buffer_dropped_packets_total",
        Kind::Counter,
        "Packets the packet buffer refused: full (the slowest registered reader left no room) \
         or too long.",
    )
    .sample(&[("reason", "full")], b.dropped_full)
    .sample(&[("reason", "too_long")], b.dropped_oversize);
    e.single(
        "weir_buffer_size_bytes",
        Kind::Gauge,
        "Size of the packet buffer.",
        b.size,
    );
    e.single(
        "weir_buffer_fill_ratio",
        Kind::Gauge,
        "How full the packet buffer is (0 to 1), as seen by the slowest registered reader.",
        b.fill(),
    );
    let readers: Vec<_> = b
        .readers
        .iter()
        .zip(&live.readers)
        .map(|(r, n)| (n.as_str(), r))
        .collect();
    let mut fam = e.family(
        "weir_buffer_reader_lag_bytes",
        Kind::Gauge,
        "Bytes in the buffer a reader has not released yet.",
    );
    for (n, r) in &readers {
        fam.sample(&[("reader", n)], r.lag);
    }
    let best_effort: Vec<_> = readers.iter().filter(|(_, r)| r.best_effort).collect();
    if !best_effort.is_empty() {
        let mut fam = e.family(
            "weir_buffer_reader_skipped_bytes_total",
            Kind::Counter,
            "Bytes a best-effort reader (the flow meter) was skipped over because it fell \
             behind: packets it never saw.",
        );
        for (n, r) in &best_effort {
            fam.sample(&[("reader", n)], r.skipped_bytes);
        }
    }

    // The writer: the recorder's, or the capture job's sink.
    if let Some(r) = &live.recorder {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        e.single(
            "weir_writer_packets_total",
            Kind::Counter,
            "Packets written (recorded into the store).",
            l(&r.packets),
        );
        e.single(
            "weir_writer_packet_bytes_total",
            Kind::Counter,
            "Captured bytes of the packets recorded.",
            l(&r.packet_bytes),
        );
        e.single(
            "weir_writer_dropped_packets_total",
            Kind::Counter,
            "Packets the recorder could not write (disk full, write errors).",
            l(&r.dropped),
        );
        e.single(
            "weir_writer_paused_packets_total",
            Kind::Counter,
            "Packets not recorded because recording was paused (weir ctl pause).",
            l(&r.paused),
        );
        e.single(
            "weir_writer_paused",
            Kind::Gauge,
            "1 while recording is paused.",
            r.pause.load(Ordering::Relaxed),
        );
        e.single(
            "weir_store_written_bytes_total",
            Kind::Counter,
            "Bytes written to disk (headers, padding and rewrites of flushed tails included).",
            l(&r.disk_bytes),
        );
        e.single(
            "weir_store_writes_total",
            Kind::Counter,
            "Write system calls of the recorder.",
            l(&r.writes),
        );
        e.single(
            "weir_store_segments_started_total",
            Kind::Counter,
            "Segment files started.",
            l(&r.segments),
        );
        e.single(
            "weir_store_retention_deleted_segments_total",
            Kind::Counter,
            "Segment files deleted by retention (size or age).",
            l(&r.deleted),
        );
        e.single(
            "weir_store_failed",
            Kind::Gauge,
            "1 when writing stopped on a disk error.",
            r.failed.load(Ordering::Relaxed),
        );
        if r.indexing.load(Ordering::Relaxed) {
            e.single(
                "weir_record_index_lag_seconds",
                Kind::Gauge,
                "Seconds the packets recorded since the open segment's index was last written \
                 have waited for it (0 when the index covers every packet recorded).",
                r.index_lag_s(weir_flows::wall_clock_ns()),
            );
        }
    }
    if let Some(avail) = live
        .store
        .as_deref()
        .and_then(weir_metrics::process::filesystem_avail_bytes)
    {
        e.single(
            "weir_store_filesystem_avail_bytes",
            Kind::Gauge,
            "Bytes available on the store's filesystem (statvfs f_bavail).",
            avail,
        );
    }
    if let Some(w) = &live.written {
        e.single(
            "weir_writer_packets_total",
            Kind::Counter,
            "Packets written (handed to the capture file or the terminal).",
            w.load(Ordering::Relaxed),
        );
    }

    if let Some(engine) = &live.rules {
        rules(e, engine);
    }

    if let Some(p) = &live.flows_packets {
        e.single(
            "weir_flows_packets_total",
            Kind::Counter,
            "Packets handed to the flow meter.",
            p.load(Ordering::Relaxed),
        );
    }
    if let Some(f) = flows {
        flows_end(e, f);
    }
}

/// The rules' series: engine totals, then each wildcard rule's.
fn rules(e: &mut Exposition, engine: &Engine) {
    let s = engine.stats();
    let t = &s.totals;
    e.single(
        "weir_rules_version",
        Kind::Gauge,
        "The running rule set's version.",
        s.version,
    );
    e.single(
        "weir_rules_wildcard",
        Kind::Gauge,
        "Wildcard rules in the running set.",
        s.wild.len(),
    );
    e.single(
        "weir_rules_exact",
        Kind::Gauge,
        "Exact (5-tuple) rules in the running set.",
        s.exact_rules,
    );
    e.family(
        "weir_rules_packets_total",
        Kind::Counter,
        "Packets the rules decided, by final verdict (their sum is the packets evaluated).",
    )
    .sample(&[("verdict", "passed")], t.passed)
    .sample(&[("verdict", "dropped")], t.dropped)
    .sample(&[("verdict", "sliced")], t.sliced)
    .sample(&[("verdict", "sampled_out")], t.sampled_out);
    e.single(
        "weir_rules_evaluated_bytes_total",
        Kind::Counter,
        "Captured bytes of the packets the rules evaluated.",
        t.bytes_in,
    );
    e.single(
        "weir_rules_unmatched_packets_total",
        Kind::Counter,
        "Packets no rule matched (the default verdict applied).",
        t.unmatched,
    );
    e.single(
        "weir_rules_cutoff_packets_total",
        Kind::Counter,
        "Of the dropped packets, those cut by a per-flow cutoff.",
        t.cut,
    );
    e.single(
        "weir_rules_learned_flows_total",
        Kind::Counter,
        "Flows learnt by learn actions.",
        t.learned,
    );
    e.single(
        "weir_rules_flow_evictions_total",
        Kind::Counter,
        "Flows evicted from the rules' full flow tables.",
        t.flow_evictions,
    );
    e.single(
        "weir_rules_exact_matched_packets_total",
        Kind::Counter,
        "Packets the exact rules matched, all of them together.",
        s.exact.packets,
    );
    let listing = engine.list(0);
    let rules: Vec<_> = listing
        .wild
        .iter()
        .take(MAX_RULE_SERIES)
        .map(|r| (r.rule.id.to_string(), r.rule.action.to_string(), &r.stats))
        .collect();
    if rules.is_empty() {
        return;
    }
    let mut fam = e.family(
        "weir_rule_matched_packets_total",
        Kind::Counter,
        "Packets a wildcard rule matched (rule = its id, action as written).",
    );
    for (id, action, st) in &rules {
        fam.sample(&[("rule", id), ("action", action)], st.packets);
    }
    let mut fam = e.family(
        "weir_rule_matched_bytes_total",
        Kind::Counter,
        "Captured bytes of the packets a wildcard rule matched.",
    );
    for (id, action, st) in &rules {
        fam.sample(&[("rule", id), ("action", action)], st.bytes);
    }
    let mut fam = e.family(
        "weir_rule_verdict_packets_total",
        Kind::Counter,
        "Packets a wildcard rule matched, by the packet's final verdict.",
    );
    for (id, action, st) in &rules {
        for (v, n) in [
            ("passed", st.passed),
            ("dropped", st.dropped),
            ("sliced", st.sliced),
            ("sampled_out", st.sampled_out),
        ] {
            fam.sample(&[("rule", id), ("action", action), ("verdict", v)], n);
        }
    }
}

/// The flow meter's end: its table (empty now) and each output's totals.
fn flows_end(e: &mut Exposition, f: &FlowsEnd) {
    flows_table(e, 0, &f.meter);
    e.single(
        "weir_flows_records_total",
        Kind::Counter,
        "Flow records handed to the outputs.",
        f.meter.records,
    );
    exports(e, &f.exports);
}

/// The flow table: flows held now, and the table's counters.
fn flows_table(e: &mut Exposition, active: u64, m: &weir_flows::MeterStats) {
    e.single(
        "weir_flows_active",
        Kind::Gauge,
        "Flows in the flow table now (as of the meter's last tick, at most a second ago).",
        active,
    );
    e.single(
        "weir_flows_created_total",
        Kind::Counter,
        "Flows created by the meter.",
        m.flows,
    );
    e.single(
        "weir_flows_peak",
        Kind::Gauge,
        "Peak of active flows in the flow table (summed over shards' peaks).",
        m.peak_flows,
    );
    e.single(
        "weir_flows_evicted_total",
        Kind::Counter,
        "Flows evicted because the flow table was full.",
        m.evicted,
    );
    e.family(
        "weir_flows_ended_total",
        Kind::Counter,
        "Flows ended, by reason (evicted ones are in weir_flows_evicted_total).",
    )
    .sample(&[("reason", "idle")], m.idle_ended)
    .sample(&[("reason", "active")], m.active_ended)
    .sample(&[("reason", "tcp")], m.tcp_ended)
    .sample(&[("reason", "forced")], m.forced_ended);
}

/// Each output's totals.
fn exports(e: &mut Exposition, sinks: &[(String, weir_export::ExportStats)]) {
    if sinks.is_empty() {
        return;
    }
    type Get = fn(&weir_export::ExportStats) -> u64;
    let fams: [(&str, &str, Get); 4] = [
        (
            "weir_export_records_total",
            "Records an output wrote (flow records or text rows).",
            |s| s.records,
        ),
        (
            "weir_export_datagrams_total",
            "Datagrams an output produced (each goes to every collector).",
            |s| s.datagrams,
        ),
        (
            "weir_export_bytes_total",
            "Bytes an output produced (datagram payloads or text).",
            |s| s.bytes,
        ),
        (
            "weir_export_dropped_records_total",
            "Records in datagrams an output could not send (counted per collector).",
            |s| s.dropped,
        ),
    ];
    for (name, help, get) in fams {
        let mut fam = e.family(name, Kind::Counter, help);
        for (sink, s) in sinks {
            fam.sample(&[("sink", sink)], get(s));
        }
    }
    kafka(e, sinks);
}

/// The Kafka outputs' message accounting and the bound of what a `kill -9` would lose now.
fn kafka(e: &mut Exposition, sinks: &[(String, weir_export::ExportStats)]) {
    let kafka: Vec<(&str, &weir_export::KafkaStats)> = sinks
        .iter()
        .filter_map(|(n, s)| s.kafka.as_ref().map(|k| (n.as_str(), k)))
        .collect();
    if kafka.is_empty() {
        return;
    }
    type Get = fn(&weir_export::KafkaStats) -> u64;
    let fams: [(&str, Kind, &str, Get); 7] = [
        (
            "weir_kafka_messages_total",
            Kind::Counter,
            "Messages a Kafka output made from its records.",
            |k| k.messages,
        ),
        (
            "weir_kafka_delivered_messages_total",
            Kind::Counter,
            "Messages the broker acknowledged.",
            |k| k.delivered,
        ),
        (
            "weir_kafka_failed_messages_total",
            Kind::Counter,
            "Messages not delivered within the delivery timeout or refused by the broker.",
            |k| k.failed,
        ),
        (
            "weir_kafka_overflow_messages_total",
            Kind::Counter,
            "Messages dropped because the producer's queue was full.",
            |k| k.overflow,
        ),
        (
            "weir_kafka_lost_records_total",
            Kind::Counter,
            "Records in the failed and overflowed messages.",
            |k| k.records_lost,
        ),
        (
            "weir_kafka_unacknowledged_messages",
            Kind::Gauge,
            "Messages handed to librdkafka and not acknowledged (nor failed) yet.",
            |k| k.unacknowledged,
        ),
        (
            "weir_kafka_unacknowledged_records",
            Kind::Gauge,
            "The most records a kill -9 now would lose (unacknowledged or not yet sent).",
            |k| k.records_unacknowledged,
        ),
    ];
    for (name, kind, help, get) in fams {
        let mut fam = e.family(name, kind, help);
        for (sink, k) in &kafka {
            fam.sample(&[("sink", sink)], get(k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record;
    use crate::Controls;
    use weir_packet::{LinkType, PacketMeta};
    use weir_pcap::{FileFormat, Interface, PacketWriter, Precision};

    /// An Ethernet/IPv4/UDP frame from 10.0.0.1:`sport` to 10.0.0.2:53, 10 bytes of payload.
    fn frame(sport: u16) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[
            0x45, 0, 0, 38, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&sport.to_be_bytes());
        f.extend_from_slice(&[0, 53, 0, 18, 0, 0]);
        f.extend_from_slice(&[0xab; 10]);
        f
    }

    /// A record job importing 12 packets of 3 flows, with the flow meter: before the job the
    /// board shows the process only; after it, the import's, the writer's and the meter's
    /// counters at the values the report has (each family once, HELP and TYPE first).
    #[test]
    fn a_finished_import_shows_its_report() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.pcap");
        let mut w = PacketWriter::new(
            std::fs::File::create(&input).unwrap(),
            FileFormat::Pcap(Precision::Nano),
            &[Interface::new(LinkType::ETHERNET, 65535)],
        )
        .unwrap();
        for i in 0..12u64 {
            let data = frame(1000 + (i % 3) as u16);
            let meta = PacketMeta {
                ts_ns: 1_700_000_000_000_000_000 + i * 1_000_000,
                orig_len: data.len() as u32,
                interface: 0,
            };
            w.write(&meta, &data).unwrap();
        }
        w.finish().unwrap();
        let store = dir.path().join("store");
        let cfg = record::tests::import_job(input, &store, weir_flows::Config::default());
        let board = Board::new();
        let before = board.render();
        assert!(
            before.contains("\nprocess_resident_memory_bytes "),
            "{before}"
        );
        assert!(!before.contains("weir_"), "{before}");
        let controls = Controls {
            metrics: Some(board.clone()),
            ..Controls::default()
        };
        let report = record::run(&cfg, &controls, &mut |_| {}).unwrap();
        assert_eq!(report.summary.packets, 12);
        let text = board.render();
        let s: BTreeMap<&str, &str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .collect();
        let want = [
            ("weir_capture_read_packets_total{interface=\"files\"}", "12"),
            (
                "weir_capture_pushed_bytes_total{interface=\"files\"}",
                "624",
            ),
            ("weir_writer_packets_total", "12"),
            ("weir_writer_packet_bytes_total", "624"), // 12 × (14 + 20 + 8 + 10)
            ("weir_writer_dropped_packets_total", "0"),
            ("weir_store_segments_started_total", "1"),
            ("weir_buffer_dropped_packets_total{reason=\"full\"}", "0"),
            ("weir_flows_packets_total", "12"),
            ("weir_flows_created_total", "3"),
            ("weir_flows_peak", "3"),
            ("weir_flows_active", "0"),
            ("weir_flows_ended_total{reason=\"forced\"}", "3"),
            ("weir_flows_records_total", "3"),
            (
                "weir_buffer_reader_skipped_bytes_total{reader=\"flows\"}",
                "0",
            ),
        ];
        for (k, v) in want {
            assert_eq!(s.get(k), Some(&v), "{k} in\n{text}");
        }
        let sink = format!("{}", cfg.dir.join("flows.json").display());
        assert_eq!(
            s.get(format!("weir_export_records_total{{sink=\"json {sink}\"}}").as_str()),
            Some(&"3"),
            "{text}"
        );
        assert_eq!(
            s["weir_store_written_bytes_total"],
            report.summary.disk_bytes.to_string()
        );
        // No live-capture series for an import; each family's header once, before its samples.
        assert!(!text.contains("weir_kernel_"), "{text}");
        let mut seen = std::collections::BTreeSet::new();
        let mut current = "";
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("# TYPE ") {
                current = rest.split(' ').next().unwrap();
                assert!(seen.insert(current.to_string()), "{current} twice");
            } else if !l.starts_with('#') {
                assert!(l.starts_with(current), "{l} outside its family");
            }
        }
    }
}
