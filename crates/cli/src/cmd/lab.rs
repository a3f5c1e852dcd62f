//! `weir lab`: build and tear down the namespace bench, apply queueing setups to its bottleneck,
//! and run scenarios that measure them (see weir-lab).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use weir_lab::bench::{self, Bench};
use weir_lab::scenario::{self, Scenario};
use weir_lab::{caps, knobs, LabError};

use crate::output::{self, Status};

/// Arguments of `weir lab`.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    /// Name of the bench (its namespaces are weirlab-NAME-snd, -rtr, -rcv).
    #[arg(long, default_value = "lab", global = true)]
    name: String,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// Build the bench: sender — router — receiver, joined by veth pairs.
    Up,
    /// Remove the bench and everything running in it (also what a crashed run left).
    Down {
        /// Remove every weir lab bench on this machine.
        #[arg(long)]
        all: bool,
    },
    /// Show the bench and what the kernel offers.
    Status,
    /// Probe what the kernel offers (qdiscs, BQL, TSQ, XDP) in a scratch namespace.
    Caps,
    /// Put a root qdisc on the bottleneck (router out0): KIND [tc arguments...].
    Qdisc {
        /// Qdisc kind: pfifo_fast, pfifo, tbf, htb, prio, fq_codel, hfsc...
        kind: String,
        /// Its arguments, as tc takes them (`rate 10mbit burst 5kb latency 20ms`).
        args: Vec<String>,
    },
    /// Set the byte queue limit (bytes) of the bottleneck.
    Bql {
        /// limit_max in bytes (0 to 1879048192, the kernel's DQL_MAX_LIMIT).
        #[arg(value_parser = knobs::parse_bql, allow_negative_numbers = true)]
        limit: u64,
    },
    /// Set TCP small queues (net.ipv4.tcp_limit_output_bytes) on the sender.
    Tsq {
        /// Bytes (0 to 2147483647).
        #[arg(value_parser = knobs::parse_tsq, allow_negative_numbers = true)]
        bytes: u64,
    },
    /// Forward in the router with an XDP program (on) or the kernel's stack (off).
    Xdp {
        /// on or off.
        #[arg(value_parser = ["on", "off"])]
        state: String,
    },
    /// Run a scenario: every setup measured, tables and charts overlaid.
    Run {
        /// The scenario file (TOML; see scenarios/).
        scenario: PathBuf,
        /// Output folder (default lab-results/NAME-TIME).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Keep the bench up afterwards.
        #[arg(long)]
        keep: bool,
    },
}

fn unsupported(e: LabError) -> anyhow::Error {
    match e {
        LabError::Unsupported(why) => anyhow::anyhow!("cannot apply: {why}"),
        other => other.into(),
    }
}

/// Runs `weir lab`.
pub(crate) fn run(args: Args) -> Result<Status> {
    let b = Bench::new(&args.name)?;
    let mut stdout = output::stdout();
    match args.action {
        Action::Up => {
            let st = b.up().context("cannot build the bench")?;
            write!(stdout, "{}", b.describe(&st))?;
        }
        Action::Down { all } => {
            let removed = if all { bench::down_all()? } else { b.down()? };
            if removed.is_empty() {
                writeln!(stdout, "nothing to remove")?;
            } else {
                writeln!(stdout, "removed {}", removed.join(", "))?;
            }
        }
        Action::Status => write!(stdout, "{}", b.status()?)?,
        Action::Caps => write!(stdout, "{}", caps::probe()?.describe())?,
        Action::Qdisc { kind, args: a } => {
            b.require_up()?;
            let c = caps::probe()?;
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            knobs::qdisc(&b, Some(&c), &kind, &a).map_err(unsupported)?;
            writeln!(stdout, "{kind} on {}", knobs::BOTTLENECK)?;
        }
        Action::Bql { limit } => {
            b.require_up()?;
            knobs::bql(&b, limit).map_err(unsupported)?;
            writeln!(stdout, "byte queue limit {limit} on {}", knobs::BOTTLENECK)?;
        }
        Action::Tsq { bytes } => {
            b.require_up()?;
            knobs::tsq(&b, bytes).map_err(unsupported)?;
            writeln!(stdout, "tcp_limit_output_bytes = {bytes} on the sender")?;
        }
        Action::Xdp { state } => {
            b.require_up()?;
            knobs::xdp(&b, state == "on").map_err(unsupported)?;
            writeln!(stdout, "XDP forwarding {state}")?;
        }
        Action::Run {
            scenario: path,
            out,
            keep,
        } => {
            let sc = Scenario::load(&path)?;
            let out = out.unwrap_or_else(|| scenario::default_out(&sc));
            let results = scenario::run_on(&b, &sc, &out, keep, &mut |m| eprintln!("weir: {m}"))?;
            write!(
                stdout,
                "{}",
                std::fs::read_to_string(out.join("table.txt"))?
            )?;
            let measured = results.iter().filter(|r| r.run.is_some()).count();
            eprintln!(
                "weir: {measured} of {} setups measured; results, captures and charts in {}",
                results.len(),
                out.display()
            );
            if measured == 0 {
                bail!(
                    "no setup of {} could be applied on this machine",
                    path.display()
                );
            }
        }
    }
    stdout.commit()?;
    Ok(Status::Clean)
}
