//! `weir info`: a capinfos-like summary of each capture file, as text or `--json`.

use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::Result;
use weir_sensor::info::Collector;

use crate::input::read_filtered;
use crate::output::{self, Status};

/// Arguments of `weir info`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// Capture files (pcap or pcapng); `-` reads stdin.
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
    /// Print a JSON array with one object per file instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `weir info`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let mut collector = Collector::default();
    let status = read_filtered(&args.files, String::new(), &mut collector)?;
    let mut out = BufWriter::new(output::stdout());
    collector.write(&mut out, args.json)?;
    out.into_inner().map_err(|e| e.into_error())?.commit()?;
    Ok(status)
}
