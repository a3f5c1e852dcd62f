//! The `weir` binary: parses the command line and hands each subcommand to its module.
//!
//! Exit status: 0 when everything went well, 1 when something failed at run time (including a
//! damaged input file, after every readable packet was processed), 2 for a usage error (clap's
//! own convention). A closed stdout (`weir decode ... | head`) is not an error.

mod cmd;
mod output;
mod progress;
mod time;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// weir: capture, filter, store, meter and measure network traffic.
#[derive(Parser, Debug)]
#[command(name = "weir", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Summarise capture files, like capinfos: packets, bytes, times, link types, protocol mix.
    Info(cmd::info::Args),
    /// Filter and convert capture files, like `tcpdump -r IN -w OUT EXPR`.
    Read(cmd::read::Args),
    /// Print one line per packet, tcpdump-like, for humans.
    Decode(cmd::decode::Args),
    /// Capture live traffic to a file or the terminal, like `tcpdump -i IFACE -w OUT`.
    Capture(cmd::capture::Args),
    /// Meter packets into flows; export NetFlow v5/v9/IPFIX, JSON lines or CSV.
    Flows(cmd::flows::Args),
    /// Record live traffic to a store of fixed-size segment files at disk speed.
    Record(cmd::record::Args),
    /// Packets of a time range matching a filter, from a store, in time order (uses the index).
    Extract(cmd::extract::Args),
    /// What a store holds: segments, time spans, packets, drops, index state.
    Ls(cmd::inventory::LsArgs),
    /// Build the index of capture files, or rebuild a store's missing or damaged indexes.
    Index(cmd::inventory::IndexArgs),
    /// Generate traffic: synthetic stamped streams or a capture replayed, on an interface or to a file.
    Gen(cmd::gen::Args),
    /// Match the packets of two captures and report one-way latency, loss, duplicates, reordering.
    Latency(cmd::latency::Args),
    /// Build a namespace test bench, apply queueing setups, run measurement scenarios.
    Lab(cmd::lab::Args),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info(a) => cmd::info::run(a),
        Command::Read(a) => cmd::read::run(a),
        Command::Decode(a) => cmd::decode::run(a),
        Command::Capture(a) => cmd::capture::run(a),
        Command::Flows(a) => cmd::flows::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Extract(a) => cmd::extract::run(a),
        Command::Ls(a) => cmd::inventory::ls(a),
        Command::Index(a) => cmd::inventory::index(a),
        Command::Gen(a) => cmd::gen::run(a),
        Command::Latency(a) => cmd::latency::run(a),
        Command::Lab(a) => cmd::lab::run(a),
    };
    match result {
        Ok(status) => status.into(),
        Err(err) => {
            if output::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("weir: error: {}", output::error_message(&err));
            ExitCode::from(1)
        }
    }
}
