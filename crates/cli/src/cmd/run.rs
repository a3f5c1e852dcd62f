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
    let report = weir_sensor::service::run(&cfg, &stop, reload, &mut |job, e| match job {
        Some(name) => match e {
            Event::Notice(t) => eprintln!("weir: {name}: {t}"),
            Event::Warning(t) => eprintln!("weir: warning: {name}: {t}"),
            Event::Progress(_) => {}
        },
        None => output::event(e),
    })?;
    let end = report.text();
    eprint!("{}", end.text);
    if !end.failed.is_empty() {
        bail!("job(s) failed: {}", end.failed.join(", "));
    }
    Ok(if end.damaged {
        Status::Damaged
    } else {
        Status::Clean
    })
}
