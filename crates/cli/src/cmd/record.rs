//! `weir record`: capture live traffic (or import capture files) into a store of fixed-size
//! segment files, at the speed of the disk, with a status line, a statistics file and a final
//! summary in which every dropped packet is counted at the stage that dropped it.
//!
//! Threads: capture threads (see [`weir_capture::Pipeline`]) → the shared packet buffer → the
//! recorder thread (registered reader: capture drops rather than overwrite what it has not
//! written) and, with `--flows`, the flow meter (best-effort reader: when it falls behind it is
//! skipped forward and the bytes it missed are counted, so it never costs the recording a packet).
//! This thread prints the status and handles SIGINT/SIGTERM: capture stops first, then the
//! recorder writes everything already in the buffer, then the summary.
//!
//! With `--rules FILE` every capture thread (or the import thread) decides each packet after
//! the filter expression: dropped, kept whole or cut, and tagged; pcapng segments store the tag
//! as the packet's comment (`weir-tag=TAG`, tshark's `frame.comment`), classic pcap ones cannot
//! (said once, counted). SIGHUP reloads the file; the rules' counters close the summary and are
//! in `--stats-json` under `rules`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use weir_buffer::PacketBuffer;
use weir_capture::{Counters, Import, Pipeline, Totals};
use weir_pcap::FileReader;
use weir_store::{Format, Options, Recorder, RecorderStats, SizeError, Sizes, Store};

use crate::args::{self, FlowArgs, LiveArgs, RulesArgs};
use crate::flow_output::RecordFlows;
use crate::output::{
    announce_live, human_bytes, live_engine, load_rules, on_signal, rules_error, serve_control,
    start_live_quietly_with_rules, LiveRules, Status,
};

/// Arguments of `weir record`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("files", |a| a.help(
    "Import this capture file instead of capturing live (a lossless copy into the store); \
     repeat to import several",
)))]
pub(crate) struct Args {
    #[command(flatten)]
    live: LiveArgs,
    #[command(flatten)]
    inputs: args::Inputs,
    /// Store directory (created if needed; reopened after a crash, its segments repaired).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    dir: PathBuf,
    /// Segment file format.
    #[arg(long, value_enum, default_value_t = Format::Pcapng)]
    format: Format,
    /// Segment size in MiB (1 to 1048576).
    #[arg(long, value_name = "MIB", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=1 << 20),
          allow_negative_numbers = true)]
    segment_mib: u64,
    /// Delete the oldest segments while the store holds more than this many MiB (at least
    /// --segment-mib).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=1 << 40),
          allow_negative_numbers = true)]
    max_mib: Option<u64>,
    /// Delete segments whose last packet is older than this many seconds.
    #[arg(long, value_name = "SECONDS", value_parser = args::seconds,
          allow_negative_numbers = true)]
    max_age: Option<f64>,
    /// Bytes per disk write, in MiB (1 to 1024; a segment's worth at most).
    #[arg(long, value_name = "MIB", default_value_t = 4,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024),
          allow_negative_numbers = true)]
    write_mib: usize,
    /// Do not index the segments (see `weir extract`).
    #[arg(long)]
    no_index: bool,
    /// Index chunk size in KiB, 4 to 1048576 (smaller: finer extraction, larger index).
    #[arg(long, value_name = "KIB", default_value_t = weir_index::DEFAULT_CHUNK / 1024,
          value_parser = clap::value_parser!(u32).range(4..=1 << 20),
          allow_negative_numbers = true)]
    index_chunk_kib: u32,
    /// Write every counter as JSON to FILE, every second and at the end.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Also meter flows from the same buffer (see `weir flows` for the outputs).
    #[arg(long)]
    flows: bool,
    #[command(flatten)]
    flow: FlowArgs,
    #[command(flatten)]
    rules: RulesArgs,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// The store's sizes, as given.
    fn sizes(&self) -> Sizes {
        Sizes {
            segment_mib: self.segment_mib,
            write_mib: self.write_mib as u64,
            max_mib: self.max_mib,
            index_chunk_kib: (!self.no_index).then_some(self.index_chunk_kib),
        }
    }

    /// The store's objection to the sizes, in terms of the options.
    fn size_message(&self, e: SizeError) -> String {
        match e {
            SizeError::SegmentTooSmall => "--segment-mib must be at least 1".into(),
            SizeError::SegmentOverFilesystem {
                dir, filesystem, ..
            } => format!(
                "--segment-mib {} is larger than the filesystem that would hold {} ({})",
                self.segment_mib,
                dir.display(),
                human_bytes(filesystem)
            ),
            SizeError::WriteOutOfRange => "--write-mib must be between 1 and 1024".into(),
            SizeError::RetentionUnderSegment { max_mib, .. } => format!(
                "--max-mib {max_mib} is smaller than one segment (--segment-mib {}): retention \
                 would delete the segment being written",
                self.segment_mib
            ),
            SizeError::IndexChunkTooSmall => "--index-chunk-kib must be at least 4".into(),
            e => e.to_string(),
        }
    }

    /// Usage checks clap cannot express, against what was given (`m`).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.live.check()?;
        let importing = !self.inputs.files.is_empty();
        match (importing, self.live.interfaces.is_empty()) {
            (true, false) => return Err("-i and -r: record live or import files, not both".into()),
            (false, true) => {
                return Err("give interfaces with -i, or files to import with -r".into())
            }
            _ => {}
        }
        if importing {
            if let Some(flag) = args::first_given(m, args::LIVE_ONLY) {
                return Err(format!(
                    "{flag} is for live capture (-i); -r imports files as they are"
                ));
            }
            if !self.expr.words.is_empty() {
                return Err(
                    "a filter expression applies to live capture; filter files with \
                            `weir read` first"
                        .into(),
                );
            }
        }
        if args::given(m, "write_mib") && self.write_mib as u64 > self.segment_mib {
            return Err(format!(
                "--write-mib {} is larger than a segment (--segment-mib {})",
                self.write_mib, self.segment_mib
            ));
        }
        self.sizes()
            .check(&self.dir)
            .map_err(|e| self.size_message(e))?;
        if !self.flows {
            if let Some(flag) = args::first_given(m, FlowArgs::IDS) {
                return Err(format!("{flag} configures --flows; give --flows too"));
            }
        }
        Ok(())
    }
}

/// Where packets come from.
enum Source {
    Live(Pipeline),
    Files(Import),
}

/// Runs `weir record`. Order: the options were checked (`Args::check`), the input files are opened, then the
/// store directory is created and locked (a second recorder stops there, before it allocates
/// anything or says it is recording), then capture starts, then the store is opened (repaired).
pub(crate) fn run(args: Args) -> Result<Status> {
    let expr = args.expr.joined();
    let rule_set = args.rules.rules.as_deref().map(load_rules).transpose()?;
    let store_tags = args.format == Format::Pcapng;
    let set_tags = rule_set.as_ref().is_some_and(LiveRules::set_tags);
    let first_input = match args.inputs.files.first() {
        Some(p) => {
            Some(FileReader::open(p).with_context(|| format!("cannot open {}", p.display()))?)
        }
        None => None,
    };
    let lock = weir_store::StoreLock::take(&args.dir)?;
    let stop_capture = Arc::new(AtomicBool::new(false));
    on_signal(stop_capture.clone())?;
    let readers = 1;
    let best_effort = usize::from(args.flows);
    let rules_file = args.rules.rules.as_deref();
    let started = if let Some(first) = first_input {
        Import::start_with_rules(
            first,
            &args.inputs.files[1..],
            args.live.buffer_mib.unwrap_or(512) << 20,
            readers,
            best_effort,
            &stop_capture,
            rule_set.map(|s| (s, store_tags)),
        )
        .map_err(|e| rules_error(e.into(), rules_file))
        .map(|import| {
            let interfaces = import.interfaces().to_vec();
            let engine = import.engine().cloned();
            (Source::Files(import), interfaces, None, engine)
        })
    } else {
        live_engine(&args.live, rule_set, rules_file).and_then(|engine| {
            let rules = engine
                .clone()
                .map(|engine| weir_capture::Rules { engine, store_tags });
            // Quietly: "recording on" is said once the store is open, so that a tool waiting for
            // that line finds the store (its manifest) there.
            start_live_quietly_with_rules(&args.live, &expr, readers, best_effort, 512, rules).map(
                |live| {
                    let interfaces = live.interfaces().to_vec();
                    let counters = Some(live.counters());
                    (Source::Live(live), interfaces, counters, engine)
                },
            )
        })
    };
    let (source, interfaces, counters, engine) = match started {
        Ok(s) => s,
        Err(e) => {
            lock.abandon();
            return Err(e);
        }
    };
    let _control = match serve_control(&args.rules, engine.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            lock.abandon();
            return Err(e);
        }
    };
    let buffer = match &source {
        Source::Live(l) => l.buffer().clone(),
        Source::Files(i) => i.buffer().clone(),
    };
    let format = args.format;
    let mut opts = Options::new(interfaces.clone());
    opts.format = format;
    args.sizes().apply(&mut opts)?;
    opts.max_age_ns = args.max_age.map(|s| (s * 1e9) as u64);
    opts.max_caplen = buffer.max_caplen() as u32;
    if let Some(c) = &counters {
        let c = c.clone();
        let b = buffer.clone();
        opts.upstream_drops = Some(Arc::new(move || {
            c.totals().feed.kernel_drops + b.stats().dropped()
        }));
    }
    let (store, recovery) = Store::open_locked(lock, format, opts.segment_size, opts.max_caplen)?;
    for (name, cut) in &recovery.repaired {
        eprintln!("weir: repaired {name} after an unclean stop ({cut} bytes of partial tail cut)");
    }
    for name in &recovery.missing {
        eprintln!("weir: warning: segment {name} listed in the manifest is missing");
    }
    for name in &recovery.removed {
        eprintln!("weir: removed {name}: it held no packet (left by an unclean stop)");
    }
    let mut recorder = Recorder::new(store, opts)?;
    // Before "recording on": from then on a SIGHUP reloads the rules.
    let mut rules = match (engine, rules_file) {
        (Some(engine), Some(path)) => Some(LiveRules::new(
            path,
            engine,
            store_tags,
            set_tags,
            "classic pcap segments (--format pcap)",
        )?),
        _ => None,
    };
    if let Source::Live(live) = &source {
        announce_live(&args.live, live, "recording");
    }
    let rstats = recorder.stats();
    let stop_recorder = Arc::new(AtomicBool::new(false));
    let mut reader = buffer.reader(0)?;
    let rec_thread = {
        let stop = stop_recorder.clone();
        std::thread::Builder::new().name("recorder".into()).spawn(
            move || -> Result<(weir_store::Summary, Recorder)> {
                let s = recorder.run(&mut reader, &stop)?;
                Ok((s, recorder))
            },
        )?
    };
    let meter = if args.flows {
        let links = interfaces.iter().map(|i| i.link).collect();
        let json = args.dir.join("flows.json");
        Some(RecordFlows::start(
            &args.flow,
            buffer.reader(1)?,
            links,
            &json,
        )?)
    } else {
        None
    };

    let started = Instant::now();
    let deadline = args
        .live
        .duration
        .map(|s| started + Duration::from_secs_f64(s));
    let tty = std::io::stderr().is_terminal();
    let mut last = (Instant::now(), Totals::default(), 0u64);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if let Some(r) = rules.as_mut() {
            r.poll();
        }
        let done = match &source {
            Source::Live(l) => l.failed(),
            Source::Files(i) => i.is_finished(),
        };
        if stop_capture.load(Ordering::Relaxed)
            || done
            || deadline.is_some_and(|d| Instant::now() >= d)
            || rec_thread.is_finished()
        {
            break;
        }
        if last.0.elapsed() >= Duration::from_secs(1) {
            let t = counters.as_ref().map(Counters::totals).unwrap_or_default();
            let now = Instant::now();
            let dt = now.duration_since(last.0).as_secs_f64();
            let written = rstats.packets.load(Ordering::Relaxed);
            let line = status_line(&t, &last.1, written, last.2, dt, &buffer, &rstats);
            if tty {
                eprint!("\r\x1b[2K{line}");
            }
            if let Some(p) = &args.stats_json {
                write_stats(
                    p,
                    started,
                    &t,
                    &buffer,
                    &rstats,
                    meter.as_ref(),
                    rules.as_ref(),
                )?;
            }
            last = (now, t, written);
        }
    }
    if tty {
        eprintln!();
    }
    // Capture first, so the buffer stops growing; then the recorder drains it.
    let (source_result, file_totals) = match source {
        Source::Live(mut l) => (l.stop(), None),
        Source::Files(i) => (Ok(()), Some(i.finish()?)),
    };
    stop_recorder.store(true, Ordering::Release);
    let (summary, recorder) = rec_thread.join().expect("recorder panicked")?;
    if let Some(m) = meter {
        m.finish()?;
    }
    let totals = counters
        .as_ref()
        .map(Counters::totals)
        .or(file_totals)
        .unwrap_or_default();
    if let Some(p) = &args.stats_json {
        write_stats(p, started, &totals, &buffer, &rstats, None, rules.as_ref())?;
    }
    let b = buffer.stats();
    let elapsed = started.elapsed().as_secs_f64();
    let segs = &recorder.store().manifest.segments;
    let stored: u64 = segs.iter().map(|s| s.bytes).sum();
    eprintln!(
        "weir record: {} packets recorded in {elapsed:.1} s into {} ({} segment(s) now, {}; {} written \
         with {}{})",
        summary.packets,
        args.dir.display(),
        segs.len(),
        human_bytes(stored),
        human_bytes(summary.disk_bytes),
        if summary.direct { "O_DIRECT" } else { "buffered writes (the filesystem refused O_DIRECT)" },
        if summary.deleted > 0 {
            format!("; retention deleted {} segment(s)", summary.deleted)
        } else {
            String::new()
        }
    );
    if args.inputs.files.is_empty() {
        eprintln!(
            "  before the ring: {}\n  kernel: {} received, {} dropped; capture: {} read, {} \
             filtered out{}; buffer: {} dropped (full), {} dropped (too long); writer: {} dropped",
            totals.before_ring_text(),
            totals.feed.kernel_packets,
            totals.feed.kernel_drops,
            totals.feed.received,
            totals.feed.filtered,
            rules_dropped_text(rules.as_ref(), &totals),
            b.dropped_full,
            b.dropped_oversize,
            summary.dropped
        );
    } else {
        eprintln!(
            "  import: {} packets read{}, {} too long for the buffer; writer: {} dropped",
            totals.feed.received,
            rules_dropped_text(rules.as_ref(), &totals),
            totals.feed.too_long,
            summary.dropped
        );
    }
    if let Some(r) = &rules {
        eprintln!("{}", r.summary(&totals.feed));
    }
    if let Some(r) = b.readers.get(1) {
        eprintln!(
            "  flows: the meter fell behind and skipped {} bytes of packets ({} times)",
            r.skipped_bytes, r.skips
        );
    }
    if let Some(e) = &summary.error {
        eprintln!("weir: error: {e}");
    }
    source_result?;
    Ok(if summary.error.is_some() || summary.dropped > 0 {
        Status::Damaged
    } else {
        Status::Clean
    })
}

/// `, N dropped by the rules` when there are rules.
fn rules_dropped_text(rules: Option<&LiveRules>, t: &Totals) -> String {
    rules.map_or(String::new(), |_| {
        format!(", {} dropped by the rules", t.feed.rules_dropped)
    })
}

fn status_line(
    t: &Totals,
    prev: &Totals,
    written: u64,
    prev_written: u64,
    dt: f64,
    buffer: &PacketBuffer,
    r: &RecorderStats,
) -> String {
    let b = buffer.stats();
    let pps = (t.feed.received.saturating_sub(prev.feed.received)) as f64 / dt;
    let bps = (t.feed.wire_bytes.saturating_sub(prev.feed.wire_bytes)) as f64 * 8.0 / dt;
    format!(
        "weir: {:.3} Mpps {:.3} Gbps | written {:.3} Mpps | buffer {:.1}% | drops: interface {}, \
         backlog {}, kernel {}, buffer {}, writer {}",
        pps / 1e6,
        bps / 1e9,
        (written.saturating_sub(prev_written)) as f64 / dt / 1e6,
        b.fill() * 100.0,
        t.interface_drops(),
        t.softnet_dropped,
        t.feed.kernel_drops,
        b.dropped(),
        r.dropped.load(Ordering::Relaxed)
    )
}

fn write_stats(
    path: &std::path::Path,
    started: Instant,
    t: &Totals,
    buffer: &PacketBuffer,
    r: &RecorderStats,
    meter: Option<&RecordFlows>,
    rules: Option<&LiveRules>,
) -> Result<()> {
    let b = buffer.stats();
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let json = serde_json::json!({
        "elapsed_s": started.elapsed().as_secs_f64(),
        "capture": t,
        "buffer": {
            "size": b.size,
            "fill": b.fill(),
            "pushed": b.pushed,
            "dropped_full": b.dropped_full,
            "dropped_too_long": b.dropped_oversize,
            "pages": buffer.page_kind().name(),
        },
        "writer": {
            "packets": l(&r.packets),
            "packet_bytes": l(&r.packet_bytes),
            "disk_bytes": l(&r.disk_bytes),
            "writes": l(&r.writes),
            "dropped": l(&r.dropped),
            "segments": l(&r.segments),
            "deleted": l(&r.deleted),
            "direct": r.direct.load(Ordering::Relaxed),
            "failed": r.failed.load(Ordering::Relaxed),
        },
        "flows": meter.map(RecordFlows::stats_json),
        "rules": rules.map(|r| r.json(&t.feed)),
    });
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{json:#}\n"))
        .with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}
