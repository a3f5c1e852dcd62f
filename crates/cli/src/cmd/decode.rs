//! `weir decode`: one tcpdump-like line per packet, for humans.

use anyhow::Result;

use crate::args;
use crate::input::read_filtered;
use crate::output::{self, Status};

/// Arguments of `weir decode`.
#[derive(clap::Args, Debug)]
#[command(mut_arg("files", |a| a.required(true)))]
pub(crate) struct Args {
    #[command(flatten)]
    inputs: args::Inputs,
    /// Stop after this many packets.
    #[arg(short = 'c', long = "count", value_name = "N", value_parser = args::count,
          allow_negative_numbers = true)]
    count: Option<u64>,
    #[command(flatten)]
    expr: args::Expr,
}

impl Args {
    /// Usage checks clap cannot express.
    pub(crate) fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Runs `weir decode`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let mut printer = output::lines(args.count);
    let status = read_filtered(&args.inputs.files, args.expr.joined(), &mut printer)?;
    printer.finish()?.commit()?;
    Ok(status)
}
