//! The `weir` binary: parses the command line and hands each subcommand to its module.
//!
//! Exit status: 0 when everything went well, 1 when something failed at run time (including a
//! damaged input file, after every readable packet was processed), 2 for a usage error (clap's
//! own convention), 130/143 when SIGINT/SIGTERM ended a command that does not stop on them by
//! itself (its half-written outputs removed: [`signals`]). A closed stdout (`weir decode ... |
//! head`) is not an error.

// Output goes through `output::stdout()` (errors checked, a closed pipe a quiet exit 0).
#![deny(clippy::print_stdout)]
#![forbid(unsafe_code)]

/// std's `eprintln!` panics when stderr cannot be written (`2>&-`, `2>&1 | head -c0`, a full
/// disk): this one, in scope for every module below, loses the message instead, so the exit
/// status still says how the run went.
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` without the panic, as `eprintln!` above.
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod cmd;
mod input;
mod log;
mod output;
mod progress;
mod signals;

use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

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
    /// Change and read a running weir's rules over its control socket; check a rule file.
    Rules(cmd::rules::Args),
    /// Run the jobs of a config file as a service (record + flows + rules per interface).
    Run(cmd::run::Args),
    /// Ask a running `weir run` over its control socket: status, counters, rules.
    Ctl(cmd::ctl::Args),
    /// HTTP transaction logs (Zeek http.log fields) and TLS handshake logs, as JSON lines.
    Http(cmd::http::Args),
    /// A filtered live pcap stream to stdout, a FIFO or a Unix socket (a slow reader loses packets, counted).
    Stream(cmd::stream::Args),
    /// A running `weir run` seen live from its control socket: rates, drops, fill, streams.
    Top(cmd::top::Args),
    /// SIP call records and RTP stream quality (RFC 3550 loss/jitter, E-model MOS), as JSON lines.
    Voip(cmd::voip::Args),
    /// Serve a store's extract, listing and health over HTTP (for `weir extract --sensor`).
    Serve(cmd::serve::Args),
}

fn main() -> ExitCode {
    let cli = parse();
    log::init(matches!(&cli.command, Command::Run(a) if a.json_logs()));
    if let Err(err) = signals::install() {
        eprintln!("weir: error: {}", output::error_message(&err));
        return ExitCode::from(1);
    }
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
        Command::Rules(a) => cmd::rules::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Ctl(a) => cmd::ctl::run(a),
        Command::Http(a) => cmd::http::run(a),
        Command::Stream(a) => cmd::stream::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Voip(a) => cmd::voip::run(a),
        Command::Serve(a) => cmd::serve::run(a),
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

/// Parses the command line; a usage error exits with status 2, the way clap does. An option
/// clap does not know is named as such ("unknown option -X"), and the combinations of options
/// clap cannot check are checked by the subcommand (`check`).
fn parse() -> Cli {
    let mut command = Cli::command();
    let matches = match command.try_get_matches_from_mut(std::env::args_os()) {
        Ok(m) => m,
        Err(e) => exit_usage(e),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let Some((name, m)) = matches.subcommand() else {
        return cli;
    };
    let checked = match &cli.command {
        Command::Read(a) => a.check(),
        Command::Decode(a) => a.check(),
        Command::Capture(a) => a.check(),
        Command::Flows(a) => a.check(m),
        Command::Record(a) => a.check(m),
        Command::Extract(a) => a.check(),
        Command::Index(a) => a.check(),
        Command::Gen(a) => a.check(m),
        Command::Http(a) => a.check(m),
        Command::Voip(a) => a.check(m),
        _ => Ok(()),
    };
    if let Err(msg) = checked {
        command.build();
        let sub = command
            .find_subcommand_mut(name)
            .expect("the subcommand just parsed");
        exit_usage(sub.error(ErrorKind::ArgumentConflict, msg));
    }
    cli
}

/// Prints a usage error and exits with status 2 (0 for --help and --version).
fn exit_usage(e: clap::Error) -> ! {
    if e.kind() == ErrorKind::UnknownArgument {
        if let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) {
            if arg.starts_with('-') && arg.len() > 1 {
                let text = e.render().to_string().replacen(
                    &format!("unexpected argument '{arg}' found"),
                    &format!("unknown option '{arg}'"),
                    1,
                );
                eprint!("{text}");
                std::process::exit(2);
            }
        }
    }
    e.exit()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// clap's own consistency checks (ids, shorts used twice, flattened groups).
    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
