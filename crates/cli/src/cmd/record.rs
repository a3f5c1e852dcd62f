//! `weir record`: capture live traffic (or import capture files) into a store of fixed-size
//! segment files, at the speed of the disk, with a status line, a statistics file and a final
//! summary in which every dropped packet is counted at the stage that dropped it.
//!
//! The options ([`weir_sensor::args::RecordArgs`]) become a
//! [`weir_sensor::record::RecordConfig`] and the job runs there (threads,
//! store, flow meter, rules, statistics file: see [`weir_sensor::record`]); this module prints
//! what it says, its status line (on a terminal) and its report. SIGINT/SIGTERM stop it (capture
//! first, then the recorder writes everything already in the buffer), SIGHUP reloads `--rules`.
//!
//! With `--rules FILE` every capture thread (or the import thread) decides each packet after
//! the filter expression: dropped, kept whole or cut, and tagged; pcapng segments store the tag
//! as the packet's comment (`weir-tag=TAG`, tshark's `frame.comment`), classic pcap ones cannot
//! (said once, counted). The rules' counters close the summary and are in `--stats-json` under
//! `rules`.

use std::io::IsTerminal;

use anyhow::Result;
use weir_sensor::Event;

use crate::output::{self, Status};

/// Arguments of `weir record` (an argument group of the library, with the job it describes).
pub(crate) type Args = weir_sensor::args::RecordArgs;

/// Runs `weir record` ([`weir_sensor::record::run`]), printing what it says, then its report.
pub(crate) fn run(args: Args) -> Result<Status> {
    let cfg = args.config()?;
    let mut controls = output::controls(cfg.rules.is_some())?;
    let serving = args.metrics().start(&mut |s| eprintln!("weir: {s}"))?;
    controls.metrics = serving.as_ref().map(|s| s.board.clone());
    let tty = std::io::stderr().is_terminal();
    let mut report = weir_sensor::record::run(&cfg, &controls, &mut |e| match e {
        Event::Progress(p) if tty => eprint!("\r\x1b[2K{p}"),
        e => output::event(e),
    })?;
    if tty {
        eprintln!();
    }
    if let Some(f) = report.flows.take() {
        eprint!("{}", f.report.summary());
        if let Some(e) = f.error {
            return Err(e.into());
        }
    }
    eprint!("{}", report.text(args.dir(), None));
    if let Some(e) = report.analyzer_error() {
        anyhow::bail!("{e}");
    }
    if let Some(e) = report.capture_error {
        return Err(e.into());
    }
    Ok(if report.damaged() {
        Status::Damaged
    } else {
        Status::Clean
    })
}
