//! `weir lab`: build and tear down the namespace bench, apply queueing setups to its bottleneck,
//! and run scenarios that measure them (see weir-lab).

use std::path::PathBuf;

use anyhow::Result;
use weir_lab::{action, knobs, Bench};

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

impl From<Action> for action::Action {
    fn from(a: Action) -> Self {
        use action::Action as A;
        match a {
            Action::Up => A::Up,
            Action::Down { all } => A::Down { all },
            Action::Status => A::Status,
            Action::Caps => A::Caps,
            Action::Qdisc { kind, args } => A::Qdisc { kind, args },
            Action::Bql { limit } => A::Bql { limit },
            Action::Tsq { bytes } => A::Tsq { bytes },
            Action::Xdp { state } => A::Xdp { on: state == "on" },
            Action::Run {
                scenario,
                out,
                keep,
            } => A::Run {
                scenario,
                out,
                keep,
            },
        }
    }
}

/// Runs `weir lab` ([`action::Action::run`]).
pub(crate) fn run(args: Args) -> Result<Status> {
    let b = Bench::new(&args.name)?;
    let mut stdout = output::stdout();
    action::Action::from(args.action).run(&b, &mut stdout, &mut |m| eprintln!("weir: {m}"))?;
    stdout.commit()?;
    Ok(Status::Clean)
}
