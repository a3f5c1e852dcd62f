//! The flow meter's command-line side shared by `weir flows` and `weir record --flows`: opening
//! the outputs the options name (a `weir_export::Fanout`), and at the end finishing them,
//! printing the summary of every counter on stderr and writing `--stats`.
//!
//! The metering itself is `weir_flows` (the live thread: `weir_flows::LiveMeter`); this module
//! only turns options into library calls and library counters into text.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use weir_export::{open_sink, ExportStats, Fanout, NetflowFormat, SinkSpec, Target};
use weir_flows::{Config, Finished, LiveMeter, MeterStats};
use weir_packet::LinkType;

use crate::args::{FlowArgs, FlowFormat};

/// Nanoseconds of a duration in seconds (already in range: [`crate::args::seconds`]).
pub(crate) fn ns(seconds: f64) -> u64 {
    (seconds * 1e9).round() as u64
}

fn target_of(path: &Path) -> Target {
    if path.as_os_str() == "-" {
        Target::Stdout
    } else {
        Target::File(path.to_path_buf())
    }
}

/// Opens every output asked for (JSON lines on stdout when none is).
pub(crate) fn open_outputs(
    export: Option<&str>,
    format: FlowFormat,
    biflow: bool,
    ts_nanos: bool,
    json: Option<&Path>,
    csv: Option<&Path>,
) -> Result<Fanout> {
    let mut sinks = Fanout::new();
    if let Some(t) = export {
        let target = Target::from_str(t).with_context(|| format!("--export {t}"))?;
        let spec = SinkSpec::Netflow {
            target,
            format: match format {
                FlowFormat::V5 => NetflowFormat::V5,
                FlowFormat::V9 => NetflowFormat::V9,
                FlowFormat::Ipfix => NetflowFormat::Ipfix,
            },
            biflow,
            ts_nanos,
        };
        let name = format!("{format:?} {t}").to_lowercase();
        sinks.push(name, open_sink(&spec).context("cannot open the exporter")?);
    }
    if let Some(p) = csv {
        let s = open_sink(&SinkSpec::Csv(target_of(p))).context("cannot open the CSV output")?;
        sinks.push(format!("csv {}", p.display()), s);
    }
    if json.is_some() || sinks.is_empty() {
        let p = json.map_or_else(|| PathBuf::from("-"), Path::to_path_buf);
        let s = open_sink(&SinkSpec::Json(target_of(&p))).context("cannot open the JSON output")?;
        sinks.push(format!("json {}", p.display()), s);
    }
    Ok(sinks)
}

/// The `--stats` file, created before the run and written at its end.
pub(crate) struct StatsFile {
    path: PathBuf,
    file: std::fs::File,
}

impl StatsFile {
    /// Creates `path` now, so that a bad path fails before the run rather than after it.
    pub(crate) fn create(path: &Path) -> Result<StatsFile> {
        let file = std::fs::File::create(path)
            .with_context(|| format!("--stats: cannot create {}", path.display()))?;
        Ok(StatsFile {
            path: path.to_path_buf(),
            file,
        })
    }

    fn write(mut self, json: &serde_json::Value) -> Result<()> {
        use std::io::Write as _;
        self.file
            .write_all(format!("{json:#}\n").as_bytes())
            .with_context(|| format!("cannot write {}", self.path.display()))
    }
}

/// Finishes every output of a finished meter, prints the summary (`read`: packets read before
/// the filter), writes `--stats`; the first export error, if any, is the result.
pub(crate) fn finish(read: u64, done: Finished<Fanout>, stats: Option<StatsFile>) -> Result<()> {
    let failed = done.sink.failed().map(str::to_owned);
    let mut first_err = done.error.map(|e| {
        anyhow::Error::from(e).context(format!(
            "export to {}",
            failed.as_deref().unwrap_or("a sink")
        ))
    });
    let totals = done.sink.finish();
    if let (None, Some(e)) = (&first_err, totals.error) {
        first_err = Some(anyhow::Error::from(e.error).context(format!("export to {}", e.name)));
    }
    let exports = totals.exports;
    summary(read, &done.stats, &exports);
    if let Some(file) = stats {
        file.write(&stats_json(read, &done.stats, &exports))?;
    }
    if let (None, Some((name, e))) = (&first_err, exports.iter().find(|(_, e)| e.dropped > 0)) {
        first_err = Some(anyhow::anyhow!(
            "export to {name}: {} records could not be sent (send errors; counted per collector)",
            e.dropped
        ));
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The wall clock, ns since the epoch: the time a live meter expires flows by when traffic
/// pauses.
pub(crate) fn wall_clock_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The flow meter of `weir record --flows`, on its own thread over the packet buffer.
pub(crate) struct RecordFlows {
    meter: LiveMeter<Fanout>,
}

impl RecordFlows {
    /// Starts the meter on `reader`; JSON goes to `default_json` unless the options name
    /// outputs.
    pub(crate) fn start(
        args: &FlowArgs,
        reader: weir_buffer::Reader,
        links: Vec<LinkType>,
        default_json: &Path,
    ) -> Result<RecordFlows> {
        let cfg = Config {
            idle_timeout_ns: ns(args.flow_idle_timeout),
            active_timeout_ns: ns(args.flow_active_timeout),
            ..Config::default()
        };
        let json = args.flow_json.clone().or_else(|| {
            args.flow_export
                .is_none()
                .then(|| default_json.to_path_buf())
        });
        let sinks = open_outputs(
            args.flow_export.as_deref(),
            args.flow_format,
            false,
            false,
            json.as_deref(),
            None,
        )?;
        let meter = weir_flows::Meter::new(&cfg, sinks);
        Ok(RecordFlows {
            meter: LiveMeter::spawn(meter, reader, links, wall_clock_ns),
        })
    }

    /// Live counters for a statistics file.
    pub(crate) fn stats_json(&self) -> serde_json::Value {
        serde_json::json!({
            "packets": self.meter.packets(),
        })
    }

    /// Once capture has stopped: meters what is left, flushes every flow, prints the summary.
    pub(crate) fn finish(self) -> Result<()> {
        let done = self.meter.finish();
        finish(done.packets, done.meter, None)
    }
}

fn summary(read: u64, s: &MeterStats, exports: &[(String, ExportStats)]) {
    let filtered = read.saturating_sub(s.packets);
    eprintln!(
        "weir flows: {read} packets read, {filtered} not matching the filter, {} metered; \
         dropped: {} non-IP, {} decode errors",
        s.metered, s.non_ip, s.decode_errors
    );
    eprintln!(
        "  fragments: {} attributed to their flow, {} unattributed (ports 0), {} forgotten early \
         (table full); {} packets without a transport header (ports 0)",
        s.frag_attributed, s.frag_unattributed, s.frag_table_full, s.no_transport
    );
    eprintln!(
        "  flows: {} created, peak {} active{}; ended: {} idle, {} active timeout, {} FIN/RST, \
         {} evicted (table full), {} at end of input",
        s.flows,
        s.peak_flows,
        if s.workers > 1 {
            format!(" (sum of {} shards' peaks)", s.workers)
        } else {
            String::new()
        },
        s.idle_ended,
        s.active_ended,
        s.tcp_ended,
        s.evicted,
        s.forced_ended
    );
    eprintln!(
        "  records: {} exported, {} below --min-tcp-bytes, {} lost to a failed exporter",
        s.records, s.below_min_bytes, s.sink_failed
    );
    for (name, e) in exports {
        eprintln!(
            "  {name}: {} records, {} datagrams, {} bytes, {} dropped, {} IPv6 flows not \
             exportable as v5",
            e.records, e.datagrams, e.bytes, e.dropped, e.dropped_v5_ipv6
        );
        if e.times_clamped > 0 {
            eprintln!(
                "weir: warning: {name}: {} records last longer than the 49.7 days NetFlow's \
                 32-bit uptime spans: their end time was clamped",
                e.times_clamped
            );
        }
    }
    eprintln!(
        "  memory: {:.1} bytes per flow ({} flows of capacity over {} shard(s))",
        s.bytes_per_flow, s.capacity, s.workers
    );
}

fn stats_json(read: u64, s: &MeterStats, exports: &[(String, ExportStats)]) -> serde_json::Value {
    serde_json::json!({
        "packets_read": read,
        "packets_filtered_out": read.saturating_sub(s.packets),
        "packets_to_meter": s.packets,
        "packets_metered": s.metered,
        "dropped_non_ip": s.non_ip,
        "dropped_decode_error": s.decode_errors,
        "frag_attributed": s.frag_attributed,
        "frag_unattributed": s.frag_unattributed,
        "frag_table_full": s.frag_table_full,
        "no_transport": s.no_transport,
        "flows": s.flows,
        "peak_flows": s.peak_flows,
        "ended_idle": s.idle_ended,
        "ended_active": s.active_ended,
        "ended_tcp": s.tcp_ended,
        "ended_forced": s.forced_ended,
        "evicted": s.evicted,
        "records": s.records,
        "records_below_min_tcp_bytes": s.below_min_bytes,
        "records_lost_exporter_failed": s.sink_failed,
        "bytes_per_flow": s.bytes_per_flow,
        "capacity": s.capacity,
        "workers": s.workers,
        "exports": exports.iter().map(|(n, e)| serde_json::json!({
            "sink": n,
            "records": e.records,
            "datagrams": e.datagrams,
            "bytes": e.bytes,
            "dropped": e.dropped,
            "dropped_v5_ipv6": e.dropped_v5_ipv6,
            "times_clamped": e.times_clamped,
        })).collect::<Vec<_>>(),
    })
}
