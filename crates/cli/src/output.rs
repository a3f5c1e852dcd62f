//! How run-time outcomes become exit statuses and messages, and the live commands' signals.
//!
//! Every byte a command prints goes through [`weir_packet::output`] (stdout or a file written
//! under a temporary name, errors naming the output and keeping their kind): a reader that went
//! away ([`is_broken_pipe`]) ends the command quietly with status 0 and any other write error (a
//! full disk, `> /dev/full`) is reported with status 1. Nothing panics on a closed stdout:
//! `println!` is denied in the whole binary (main.rs).

use std::io;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
pub(crate) use weir_packet::output::{
    check_inputs, create, create_dir, create_in_place, stdout, Output,
};

/// The outcome of a command that ran to its end: `Clean`, or `Damaged` when some input could not
/// be read entirely (the command still processed every readable packet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Everything was read.
    Clean,
    /// Some input was damaged or unreadable; warnings were printed.
    Damaged,
}

impl From<Status> for std::process::ExitCode {
    fn from(s: Status) -> Self {
        match s {
            Status::Clean => std::process::ExitCode::SUCCESS,
            Status::Damaged => std::process::ExitCode::from(1),
        }
    }
}

/// One tcpdump-like line per packet on stdout ([`weir_sensor::lines`]), at most `limit`.
pub(crate) fn lines(limit: Option<u64>) -> weir_sensor::lines::LinePrinter<Output> {
    weir_sensor::lines::LinePrinter::new(stdout(), limit, |w| eprintln!("weir: warning: {w}"))
}

/// True when the error chain ends in a broken pipe (the reader of our stdout went away).
pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    weir_sensor::output::is_broken_pipe(err.chain())
}

/// The error's message with its causes, `: `-separated, without repeating a cause whose text
/// the message already ends with (error types that print their source and also return it from
/// `source()` would otherwise show an OS error twice). A failed write to an output is said the
/// same way by every command, whatever wrapped it: `cannot write to stdout: CAUSE`, `cannot
/// write PATH: CAUSE` ([`weir_packet::output::write_failure`]).
pub(crate) fn error_message(err: &anyhow::Error) -> String {
    match weir_packet::output::write_failure(err.as_ref()) {
        Some(failure) => weir_packet::output::error_chain(failure),
        None => weir_packet::output::error_chain(err.as_ref()),
    }
}

/// Prints a warning about a damaged input; the command goes on with its next input.
pub(crate) fn warn_damage(err: &weir_pcap::ReadError) {
    eprintln!("weir: warning: {err}");
}

/// Tells the user what reading a store came across (`weir: ...`, `weir: warning: ...`; notices
/// meant for a verbose run only when `verbose`); damage sets `status` to [`Status::Damaged`].
pub(crate) fn notice(n: &weir_store::Notice, verbose: bool, status: &mut Status) {
    if n.is_damage() {
        *status = Status::Damaged;
    }
    if n.is_verbose() && !verbose {
        return;
    }
    if n.is_warning() {
        eprintln!("weir: warning: {n}");
    } else {
        eprintln!("weir: {n}");
    }
}

/// The live commands and `gen` end when `flag` is set: the first SIGINT/SIGTERM sets it
/// ([`crate::signals`]).
pub(crate) fn on_signal(flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Result<()> {
    crate::signals::on_stop(flag);
    Ok(())
}

/// Prints what a job tells (`weir: TEXT`, `weir: warning: TEXT`); progress is the command's
/// to show (`weir record`'s status line).
pub(crate) fn event(e: weir_sensor::Event) {
    match e {
        weir_sensor::Event::Notice(t) => eprintln!("weir: {t}"),
        weir_sensor::Event::Warning(t) => eprintln!("weir: warning: {t}"),
        weir_sensor::Event::Progress(_) => {}
    }
}

/// Installs the SIGHUP handler and returns the flag it sets (a job's
/// [`Controls::reload`](weir_sensor::Controls); [`weir_capture::signal::on_hangup`]).
pub(crate) fn on_hangup() -> Result<&'static AtomicBool> {
    weir_capture::signal::on_hangup().context("cannot install the SIGHUP handler")
}

/// The job controls of a live command: SIGINT/SIGTERM stop it; with `rules`, SIGHUP reloads
/// them (without, SIGHUP stops it as SIGINT does).
pub(crate) fn controls(rules: bool) -> Result<weir_sensor::Controls> {
    let mut controls = weir_sensor::Controls::default();
    on_signal(controls.stop.clone())?;
    if rules {
        controls.reload = on_hangup()?;
    }
    Ok(controls)
}

/// The closing lines every live command prints ([`weir_sensor::live::live_summary`]).
pub(crate) use weir_sensor::live::live_summary;

/// Before a run over `files` creates anything: the filter `expr` compiles and none of `outs`
/// is one of the inputs.
pub(crate) fn check_file_run<const N: usize>(
    files: &[std::path::PathBuf],
    expr: &str,
    outs: [Option<&std::path::Path>; N],
) -> Result<()> {
    weir_filter::FilterSet::new(expr)?;
    for out in outs.into_iter().flatten() {
        check_inputs(files, Some(out))?;
    }
    Ok(())
}

/// The Kafka output's closing line of a run over files (`weir http|voip -r`), then its loss.
pub(crate) fn kafka_end(kafka: Option<weir_export::KafkaLog>) -> Result<()> {
    if let Some(k) = kafka {
        let (line, lost) = k.end();
        eprintln!("weir: {line}");
        lost?;
    }
    Ok(())
}

/// The end of a live analyzer (`weir http|voip -i`): capture's summary and the Kafka output's,
/// then the first error (Kafka's loss, the analyzer's first write error, capture's).
pub(crate) fn analyzer_end(
    live: &weir_sensor::flows::LiveEnd,
    kafka: &Option<(weir_export::KafkaLog, weir_export::KafkaStats)>,
    (write, capture): (Option<io::Error>, Option<weir_capture::CaptureError>),
) -> Result<Status> {
    eprintln!("{}", live_summary(&live.totals, &live.buffer));
    if let Some((k, s)) = kafka {
        eprintln!("weir: {}", k.summary(s));
        k.check(s)?;
    }
    if let Some(e) = write {
        return Err(e.into());
    }
    if let Some(e) = capture {
        return Err(e.into());
    }
    Ok(Status::Clean)
}
