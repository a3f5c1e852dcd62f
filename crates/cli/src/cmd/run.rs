//! `weir run CONFIG`: the long-running form of weir. Every job of the config file (see
//! [`weir_sensor::config`] and `packaging/weir.example.toml`) runs in this one process, one
//! thread each, with one control socket (`weir ctl`); the file is checked whole before anything
//! starts, and `--check` only checks it and prints what would run.
//!
//! SIGINT/SIGTERM stop every job the way `weir record` stops (capture first, then everything in
//! the buffer is written) and print each job's final counters; SIGHUP reads the config file
//! again (a job whose settings changed restarts, closing its store cleanly first; new jobs
//! start, removed ones stop; the others go on capturing) and reloads every job's rule file.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};
use weir_sensor::record::RecordReport;
use weir_sensor::Event;

use crate::output::{self, human_bytes, Status};

/// Arguments of `weir run`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The config file (TOML; see packaging/weir.example.toml).
    #[arg(value_name = "CONFIG")]
    config: PathBuf,
    /// Only check the config file and print what would run.
    #[arg(long)]
    check: bool,
    /// How the log on stderr is written: `text`, or `json` (one JSON object per line: ts,
    /// level, job, message; the library's tracing events too).
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
    log_format: LogFormat,
}

/// The log formats of `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    /// Human text.
    Text,
    /// JSON lines.
    Json,
}

impl Args {
    /// Whether the log is JSON lines.
    pub(crate) fn json_logs(&self) -> bool {
        self.log_format == LogFormat::Json
    }
}

/// Writes one line (or several) of the log: as text, or each line as a JSON object.
fn say(json: bool, level: &str, job: Option<&str>, text: &str) {
    if json {
        for line in text.lines() {
            crate::log::json_line(level, job, line);
        }
        return;
    }
    for line in text.lines() {
        match (level, job) {
            ("info", Some(j)) => eprintln!("weir: {j}: {line}"),
            ("info", None) => eprintln!("weir: {line}"),
            (l, Some(j)) => eprintln!("weir: {l}: {j}: {line}"),
            (l, None) => eprintln!("weir: {l}: {line}"),
        }
    }
}

/// Runs `weir run`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let cfg = weir_sensor::config::load(&args.config)?;
    if args.check {
        let mut out = output::stdout();
        out.write_all(cfg.describe().as_bytes())?;
        writeln!(
            out,
            "{}: valid, {} job(s)",
            args.config.display(),
            cfg.jobs.len()
        )?;
        out.flush()?;
        return Ok(Status::Clean);
    }
    let stop = Arc::new(AtomicBool::new(false));
    output::on_signal(stop.clone())?;
    let reload = output::on_hangup()?;
    let json = args.json_logs();
    let report = weir_sensor::service::run(&cfg, &stop, reload, &mut |job, e| match e {
        Event::Notice(t) => say(json, "info", job, &t),
        Event::Warning(t) => say(json, "warning", job, &t),
        Event::Progress(_) => {}
    })?;
    let mut status = Status::Clean;
    let mut failed = Vec::new();
    for end in report.jobs {
        match end.result {
            Ok(mut r) => {
                if let Some(f) = r.flows.take() {
                    if json {
                        say(json, "info", Some(&end.name), &f.report.summary());
                    } else {
                        eprintln!("weir: {}: flows:", end.name);
                        eprint!("{}", f.report.summary());
                    }
                    if let Some(e) = f.error {
                        say(json, "error", Some(&end.name), &format!("flows: {e}"));
                        failed.push(end.name.clone());
                    }
                }
                let text = summary(&end.name, &end.interface, &end.store, &r);
                if json {
                    say(json, "info", Some(&end.name), &text);
                } else {
                    eprint!("{text}");
                }
                if let Some(e) = &r.capture_error {
                    say(json, "error", Some(&end.name), &format!("capture: {e}"));
                    failed.push(end.name.clone());
                }
                if r.damaged() {
                    status = Status::Damaged;
                }
            }
            Err(e) => {
                say(
                    json,
                    "error",
                    Some(&end.name),
                    &output::error_message(&anyhow::Error::from(e)),
                );
                failed.push(end.name.clone());
            }
        }
    }
    if let Some(s) = report.stop_s {
        let t = format!("every job stopped {s:.2} s after the stop signal");
        if json {
            say(json, "info", None, &t);
        } else {
            eprintln!("weir run: {t}");
        }
    }
    if !failed.is_empty() {
        bail!("job(s) failed: {}", failed.join(", "));
    }
    Ok(status)
}

/// A job's closing summary (the lines of `weir record`'s, prefixed with the job).
fn summary(name: &str, iface: &str, store: &std::path::Path, r: &RecordReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let s = &r.summary;
    let t = &r.totals;
    let _ = writeln!(
        out,
        "weir run: {name} ({iface}): {} packets recorded in {:.1} s into {} ({} segment(s) now, \
         {}; {} written{})",
        s.packets,
        r.elapsed_s,
        store.display(),
        r.segments,
        human_bytes(r.stored_bytes),
        human_bytes(s.disk_bytes),
        if s.deleted > 0 {
            format!("; retention deleted {} segment(s)", s.deleted)
        } else {
            String::new()
        }
    );
    let rules_dropped = match r.rules {
        Some(_) => format!(", {} dropped by the rules", t.feed.rules_dropped),
        None => String::new(),
    };
    let _ = writeln!(
        out,
        "  before the ring: {}\n  kernel: {} received, {} dropped; capture: {} read, {} filtered \
         out{rules_dropped}; buffer: {} dropped (full), {} dropped (too long); writer: {} dropped{}",
        t.before_ring_text(),
        t.feed.kernel_packets,
        t.feed.kernel_drops,
        t.feed.received,
        t.feed.filtered,
        r.buffer.dropped_full,
        r.buffer.dropped_oversize,
        s.dropped,
        if s.paused > 0 {
            format!(", {} not recorded (paused)", s.paused)
        } else {
            String::new()
        }
    );
    if let Some(rules) = &r.rules {
        let _ = writeln!(out, "{rules}");
    }
    if let Some((bytes, times)) = r.flows_skipped() {
        if times > 0 {
            let _ = writeln!(
        out,
                "  flows: the meter fell behind and skipped {bytes} bytes of packets ({times} times)"
            );
        }
    }
    for st in &r.streams {
        eprintln!("  {}", st.line());
    }
    if let Some(e) = &s.error {
        let _ = writeln!(out, "weir: error: {name}: {e}");
    }
    out
}
