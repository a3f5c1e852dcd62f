//! `weir lab`: build and tear down the namespace bench, apply queueing setups to its bottleneck,
//! and run scenarios that measure them (see weir-lab).

use anyhow::Result;
use weir_lab::{action, Bench};

use crate::output::{self, Status};

/// Arguments of `weir lab`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: action::Action,
    /// Name of the bench (its namespaces are weirlab-NAME-snd, -rtr, -rcv).
    #[arg(long, default_value = "lab", global = true)]
    name: String,
}

/// Runs `weir lab` ([`action::Action::run`]).
pub(crate) fn run(args: Args) -> Result<Status> {
    let b = Bench::new(&args.name)?;
    let mut stdout = output::stdout();
    args.action
        .run(&b, &mut stdout, &mut |m| eprintln!("weir: {m}"))?;
    stdout.commit()?;
    Ok(Status::Clean)
}
