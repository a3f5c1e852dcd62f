//! `weir gen`: synthetic stamped streams or the replay of a capture file, sent on an interface
//! through an AF_PACKET TX ring or an AF_XDP socket (`--backend xdp`), or written to a file with
//! the planned times as timestamps. The options and the job they describe are weir-gen's
//! ([`weir_gen::args::GenArgs`]); this command parses them, runs the job and prints its report.

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{bail, Result};
use weir_gen::args::GenArgs;

use crate::output::{self, Status};

/// Arguments of `weir gen`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(flatten)]
    gen: GenArgs,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// Usage checks clap cannot express ([`GenArgs::check`]).
    pub(crate) fn check(&self, m: &clap::ArgMatches) -> Result<(), String> {
        self.gen.check(m)
    }
}

/// Runs `weir gen` ([`weir_gen::job::Job::run`]): SIGINT/SIGTERM stop the sending on an
/// interface.
pub(crate) fn run(args: Args) -> Result<Status> {
    let stop = Arc::new(AtomicBool::new(false));
    let to_file = args.gen.to_file();
    if !to_file {
        output::on_signal(stop.clone())?;
    }
    let report = args.gen.job().run(&stop, &mut |s| eprintln!("weir: {s}"))?;
    eprintln!("weir: {}", report.summary(to_file));
    if args.json {
        let mut out = output::stdout();
        writeln!(out, "{}", report.to_json())?;
        out.commit()?;
    }
    if let Some(failure) = report.failure() {
        bail!("{failure}");
    }
    Ok(Status::Clean)
}
