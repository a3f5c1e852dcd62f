//! `weir ls` (what a store holds: segments, time spans, sizes, packets, drops, index state) and
//! `weir index` (build the index of capture files recorded elsewhere, or rebuild a store's
//! missing or damaged indexes).

use std::path::PathBuf;

use anyhow::Result;
use weir_index::DEFAULT_CHUNK;
use weir_store::inventory::{index_input, Listing};

use crate::args;
use crate::input;
use crate::output::{self, Status};

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

/// Runs `weir ls`. Writes through [`output::stdout`]: a closed stdout ends it quietly (exit 0,
/// see `main`), any other write error is an error naming stdout.
pub(crate) fn ls(args: LsArgs) -> Result<Status> {
    let listing = Listing::load(&args.dir)?;
    let mut out = std::io::BufWriter::new(output::stdout());
    listing.write(&mut out, args.json)?;
    out.into_inner().map_err(|e| e.into_error())?.commit()?;
    Ok(Status::Clean)
}

/// Runs `weir index` ([`index_input`] on each input), once every input named was found to be
/// a store or a capture file.
pub(crate) fn index(args: IndexArgs) -> Result<Status> {
    input::capture_files(&args.inputs)?;
    for file in args.inputs.iter().filter(|p| !p.is_dir()) {
        let idx = weir_index::index_path(file);
        if weir_sensor::output::same_output(&idx, file) {
            anyhow::bail!(
                "refusing to write {} over the input {} (a link to it)",
                idx.display(),
                file.display()
            );
        }
    }
    let status = std::cell::Cell::new(Status::Clean);
    for input in &args.inputs {
        index_input(
            input,
            args.chunk_kib.max(4) * 1024,
            args.force,
            &mut |n| {
                let mut st = status.get();
                output::notice(&n, false, &mut st);
                status.set(st);
            },
            &mut |e| {
                output::warn_damage(&e);
                status.set(Status::Damaged);
            },
            &mut |s| eprintln!("weir: {s}"),
        )?;
    }
    Ok(status.get())
}
