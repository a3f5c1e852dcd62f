//! `weir extract`: the packets of a time range matching a tcpdump expression, from a store (or
//! any capture files with their `.idx` indexes), in global time order, as pcap or pcapng.
//!
//! Per segment: the index (when present, valid and fresh) turns the expression and the time
//! range into candidate chunks; only those are read, plus whatever the index does not cover yet
//! (the tail of a segment being written). Every packet read is confirmed by the BPF program
//! compiled for the segment exactly as `tcpdump -r` would compile it, and by its timestamp, so
//! the result is exactly tcpdump's selection; the index only decides what need not be read. A
//! missing, corrupt or stale index is reported and the segment scanned whole.

use std::path::PathBuf;

use anyhow::{Context, Result};
use weir_index::Query;
use weir_pcap::PacketWriter;
use weir_store::extract::BpfMatcher;

use crate::args;
use crate::args::Format;
use crate::output::{self, Status};

/// Arguments of `weir extract`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("path", |a| a.required(true)))]
pub(crate) struct Args {
    /// Store directory (or a capture file with its `.idx`) to search.
    #[arg(value_name = "DIR|FILE")]
    input: PathBuf,
    /// More stores or files to search with it.
    #[arg(short = 'r', long = "read", value_name = "DIR|FILE")]
    more: Vec<PathBuf>,
    /// Earliest packet time: seconds since the epoch or a UTC date (`2026-11-22T10:00:00Z`).
    #[arg(long, value_name = "TIME", value_parser = args::time, allow_negative_numbers = true)]
    from: Option<u64>,
    /// Latest packet time (inclusive), same forms as --from.
    #[arg(long, value_name = "TIME", value_parser = args::time, allow_negative_numbers = true)]
    to: Option<u64>,
    #[command(flatten)]
    out: args::Output,
    /// Print how much the index narrowed the search.
    #[arg(short = 'v', long)]
    verbose: bool,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        if let (Some(from), Some(to)) = (self.from, self.to) {
            if from > to {
                return Err("--from is after --to".into());
            }
        }
        args::no_stdin(std::iter::once(&self.input).chain(&self.more), "extract")?;
        self.out.check(false)
    }
}

/// Runs `weir extract`.
///
/// A store with no segment yet gives an empty output (said on stderr, exit 0); a directory
/// that is not a store and holds no capture files is an error (exit 1). A segment the manifest
/// lists but whose file is gone, and damage, are warned about and end in exit 1 after every
/// readable packet was written.
pub(crate) fn run(args: Args) -> Result<Status> {
    let (from, to) = (args.from.unwrap_or(0), args.to.unwrap_or(u64::MAX));
    let mut inputs = vec![args.input.clone()];
    inputs.extend(args.more.iter().cloned());
    let mut bpf = BpfMatcher::new(&args.expr.joined())?;
    let query = Query::from_expr(&args.expr.joined());
    let mut status = Status::Clean;
    let mut notify = |n| output::notice(&n, args.verbose, &mut status);
    let mut selection = weir_store::select(&inputs, &query, (from, to), &mut bpf, &mut notify)?;
    let format = args.out.format(Format::Pcap);
    let specs = selection.output_interfaces(format)?;
    let out = args.out.path.as_deref().context("-w is required")?;
    let mut w = PacketWriter::new(output::create(out)?, format, &specs)?;
    selection.write(&mut w, format)?;
    w.finish()?.commit()?;
    if args.verbose {
        let s = selection.stats();
        eprintln!(
            "weir extract: {} packets from {} segment(s); read {} of {} bytes of packet data ({:.2} %)",
            selection.len(),
            s.segments,
            s.read_bytes,
            s.total_bytes,
            s.read_bytes as f64 * 100.0 / s.total_bytes.max(1) as f64
        );
    }
    Ok(status)
}
