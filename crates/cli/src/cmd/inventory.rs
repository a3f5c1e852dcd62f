//! `weir ls` (what a store holds: segments, time spans, sizes, packets, drops, index state) and
//! `weir index` (build the index of capture files recorded elsewhere, or rebuild a store's
//! missing or damaged indexes).

use std::path::PathBuf;
use std::time::Instant;

use std::io::Write;

use anyhow::{Context, Result};
use weir_index::DEFAULT_CHUNK;
use weir_store::inventory::{build_index, index_action, IndexAction, Listing};
use weir_store::select::segments_of;

use crate::args;
use crate::output::{self, human_bytes, Status};
use weir_packet::time::datetime;

/// Arguments of `weir ls`.
#[derive(clap::Args, Debug)]
pub(crate) struct LsArgs {
    /// Store directory.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// One JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// Arguments of `weir index`.
#[derive(clap::Args, Debug)]
pub(crate) struct IndexArgs {
    /// Capture files (each gets FILE.idx) or store directories (their segments without a valid
    /// index get one; segments being written are left to the recorder).
    #[arg(required = true, value_name = "FILE|DIR")]
    inputs: Vec<PathBuf>,
    /// Chunk size in KiB, 4 to 1048576.
    #[arg(long, value_name = "KIB", default_value_t = DEFAULT_CHUNK / 1024,
          value_parser = clap::value_parser!(u32).range(4..=1 << 20),
          allow_negative_numbers = true)]
    chunk_kib: u32,
    /// Rebuild indexes that look valid too.
    #[arg(long)]
    force: bool,
}

impl IndexArgs {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        args::no_stdin(self.inputs.iter(), "index")
    }
}

/// Runs `weir ls`. Writes with `?`: a closed stdout ends it quietly (exit 0, see `main`), any
/// other write error is an error naming stdout.
pub(crate) fn ls(args: LsArgs) -> Result<Status> {
    let listing = Listing::load(&args.dir)?;
    let mut out = std::io::stdout().lock();
    let result = (|| -> std::io::Result<()> {
        if args.json {
            writeln!(out, "{:#}", listing.to_json())?;
            return out.flush();
        }
        writeln!(
            out,
            "{:<44} {:<9} {:<29} {:<29} {:>10} {:>10} {:>7} {:>10}  index state",
            "segment",
            "state",
            "first packet (UTC)",
            "last packet",
            "packets",
            "bytes",
            "drops",
            "index size"
        )?;
        let t = |v: Option<u64>| v.map_or("-".into(), datetime);
        for r in &listing.rows {
            let s = &r.segment;
            writeln!(
                out,
                "{:<44} {:<9} {:<29} {:<29} {:>10} {:>10} {:>7} {:>10}  {}",
                s.file,
                format!("{:?}", s.state).to_lowercase(),
                t(s.first_ns),
                t(s.last_ns),
                s.packets,
                human_bytes(s.bytes),
                s.drops,
                human_bytes(r.index_bytes),
                r.index
            )?;
        }
        writeln!(
            out,
            "{} segment(s), {} packets, {} of data, {} of index ({:.2} % of the data), {} drops",
            listing.rows.len(),
            listing.packets(),
            human_bytes(listing.data_bytes()),
            human_bytes(listing.index_bytes()),
            listing.index_percent(),
            listing.drops()
        )?;
        out.flush()
    })();
    result.context("cannot write to stdout")?;
    Ok(Status::Clean)
}

/// Runs `weir index`. A store directory: its segments without a valid index get one (all of
/// them with `--force`); the one a running recorder writes is left to it; one left open by a
/// recorder that stopped is indexed as far as it holds whole blocks.
pub(crate) fn index(args: IndexArgs) -> Result<Status> {
    let chunk = args.chunk_kib.max(4) * 1024;
    let mut status = Status::Clean;
    for input in &args.inputs {
        let mut notify = |n| output::notice(&n, false, &mut status);
        let segs = segments_of(std::slice::from_ref(input), &mut notify)?;
        let mut up_to_date = 0;
        for seg in &segs {
            let path = &seg.path;
            match index_action(seg, input.is_dir(), args.force) {
                IndexAction::LeaveToRecorder => {
                    eprintln!(
                        "weir: {}: being written; the recorder indexes it",
                        path.display()
                    );
                    continue;
                }
                IndexAction::UpToDate => {
                    up_to_date += 1;
                    continue;
                }
                IndexAction::Build { unfinished: true } => eprintln!(
                    "weir: {}: left open by a recorder that stopped; indexing what it holds \
                     (`weir record -o` on the store repairs it)",
                    path.display()
                ),
                IndexAction::Build { unfinished: false } => {}
            }
            let started = Instant::now();
            let seg_status = std::cell::Cell::new(status);
            let built = build_index(
                seg,
                chunk,
                &mut |n| {
                    let mut st = seg_status.get();
                    output::notice(&n, false, &mut st);
                    seg_status.set(st);
                },
                &mut |e| {
                    output::warn_damage(&e);
                    seg_status.set(Status::Damaged);
                },
            );
            status = seg_status.get();
            let built = built?;
            let Some(b) = built else { continue };
            eprintln!(
                "weir: {}: {} packets indexed in {:.2} s; index {} ({:.2} % of {})",
                path.display(),
                b.packets,
                started.elapsed().as_secs_f64(),
                human_bytes(b.index_bytes),
                b.index_bytes as f64 * 100.0 / b.data_bytes.max(1) as f64,
                human_bytes(b.data_bytes)
            );
        }
        if up_to_date > 0 {
            eprintln!(
                "weir: {}: {up_to_date} segment(s) already indexed (--force rebuilds them)",
                input.display()
            );
        } else if segs.is_empty() {
            eprintln!("weir: {}: nothing to index", input.display());
        }
    }
    Ok(status)
}
