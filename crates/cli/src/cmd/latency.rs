//! `weir latency A B`: matches the packets of two captures of the same traffic (before and after
//! a queue, a link, a router) and reports per-stream one-way latency, loss, duplicates,
//! reordering and jitter, as a table, JSON, CSV (one row per matched packet) and charts.

use anyhow::Result;
use weir_latency::session::{Level, Say, Session};

use crate::output::Status;

/// Arguments of `weir latency`.
pub(crate) type Args = Session;

/// Runs `weir latency` ([`Session::run`]), printing what it tells.
pub(crate) fn run(args: Args) -> Result<Status> {
    let damaged = args.run(&mut |s| match s {
        Say::Notice(n) if n.level == Level::Info => eprintln!("weir: {}", n.text),
        Say::Notice(n) => eprintln!("weir: warning: {}", n.text),
        Say::Table(t) => eprint!("{t}"),
        Say::Charts(n, dir) => eprintln!("weir: {n} charts written to {}", dir.display()),
    })?;
    Ok(if damaged {
        Status::Damaged
    } else {
        Status::Clean
    })
}
