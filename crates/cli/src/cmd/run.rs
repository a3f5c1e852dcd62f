//! `weir run CONFIG`: the long-running form of weir. Every job of the config file (see
//! [`weir_sensor::config`] and `packaging/weir.example.toml`) runs in this one process, one
//! thread each, with one control socket (`weir ctl`); the file is checked whole before anything
//! starts, and `--check` only checks it and prints what would run. `--user NAME` (or the
//! file's `user`) drops root once every job records (see [`weir_sensor::privilege`]).
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
use weir_sensor::Event;

use crate::output::{self, Status};

/// Arguments of `weir run`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The config file (TOML; see packaging/weir.example.toml).
    #[arg(value_name = "CONFIG")]
    config: PathBuf,
    /// Only check the config file and print what would run.
    #[arg(long)]
    check: bool,
    /// Once every job records, become this user (root only), keeping CAP_NET_RAW,
    /// CAP_NET_ADMIN and CAP_IPC_LOCK; overrides the config's `user`.
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
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
    let mut cfg = weir_sensor::config::load(&args.config)?;
    if let Some(name) = &args.user {
        let user =
            weir_sensor::privilege::lookup(name).map_err(|e| anyhow::anyhow!("--user: {e}"))?;
        cfg.user = Some(user);
    }
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
    let end = report.text();
    if json {
        for (job, text) in &end.parts {
            say(json, "info", job.as_deref(), text);
        }
    } else {
        eprint!("{}", end.text);
    }
    if !end.failed.is_empty() {
        bail!("job(s) failed: {}", end.failed.join(", "));
    }
    Ok(if end.damaged {
        Status::Damaged
    } else {
        Status::Clean
    })
}
