//! One `weir lab` action on a [`Bench`] ([`Action::run`]): build it, remove it, show it, probe
//! the kernel, set the bottleneck's knobs or run a scenario, with what it prints.

use std::io::{self, Write};
use std::path::PathBuf;

use crate::bench::{self, Bench};
use crate::scenario::{self, Scenario};
use crate::{caps, knobs, LabError};

/// What `weir lab` can do; with the `clap` feature, its subcommands (the doc comments are
/// their help).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "clap", derive(clap::Subcommand))]
pub enum Action {
    /// Build the bench: sender — router — receiver, joined by veth pairs.
    Up,
    /// Remove the bench and everything running in it (also what a crashed run left).
    Down {
        /// Remove every weir lab bench on this machine.
        #[cfg_attr(feature = "clap", arg(long))]
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
        #[cfg_attr(feature = "clap", arg(value_parser = knobs::parse_bql, allow_negative_numbers = true))]
        limit: u64,
    },
    /// Set TCP small queues (net.ipv4.tcp_limit_output_bytes) on the sender.
    Tsq {
        /// Bytes (0 to 2147483647).
        #[cfg_attr(feature = "clap", arg(value_parser = knobs::parse_tsq, allow_negative_numbers = true))]
        bytes: u64,
    },
    /// Forward in the router with an XDP program (on) or the kernel's stack (off).
    Xdp {
        /// on or off.
        #[cfg_attr(feature = "clap", arg(value_name = "STATE", required = true,
            action = clap::ArgAction::Set, value_parser = on_off()))]
        on: bool,
    },
    /// Run a scenario: every setup measured, tables and charts overlaid.
    Run {
        /// The scenario file (TOML; see scenarios/).
        scenario: PathBuf,
        /// Output folder (default lab-results/NAME-TIME).
        #[cfg_attr(feature = "clap", arg(long))]
        out: Option<PathBuf>,
        /// Keep the bench up afterwards.
        #[cfg_attr(feature = "clap", arg(long))]
        keep: bool,
    },
}

/// `on` or `off`, as `weir lab xdp` takes it.
#[cfg(feature = "clap")]
fn on_off() -> impl clap::builder::TypedValueParser<Value = bool> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(["on", "off"]).map(|s| s == "on")
}

/// Errors of an [`Action`], each in the words of what it was doing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    /// The lab's own.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// The bench could not be built.
    #[error("cannot build the bench")]
    Build(#[source] LabError),
    /// A knob cannot be set on this machine.
    #[error("cannot apply: {0}")]
    Apply(String),
    /// No setup of the scenario could be applied.
    #[error("no setup of {} could be applied on this machine", .0.display())]
    NothingApplied(PathBuf),
    /// Printing, or reading the scenario's table.
    #[error("{0}")]
    Io(#[from] io::Error),
}

fn apply(e: LabError) -> ActionError {
    match e {
        LabError::Unsupported(why) => ActionError::Apply(why),
        other => other.into(),
    }
}

impl Action {
    /// Runs the action on `b`, printing its result to `out` and its progress through `say`.
    pub fn run(
        self,
        b: &Bench,
        out: &mut dyn Write,
        say: &mut dyn FnMut(String),
    ) -> Result<(), ActionError> {
        match self {
            Action::Up => {
                let st = b.up().map_err(ActionError::Build)?;
                write!(out, "{}", b.describe(&st))?;
            }
            Action::Down { all } => {
                let removed = if all { bench::down_all()? } else { b.down()? };
                if removed.is_empty() {
                    writeln!(out, "nothing to remove")?;
                } else {
                    writeln!(out, "removed {}", removed.join(", "))?;
                }
            }
            Action::Status => write!(out, "{}", b.status()?)?,
            Action::Caps => write!(out, "{}", caps::probe()?.describe())?,
            Action::Qdisc { kind, args } => {
                b.require_up()?;
                let c = caps::probe()?;
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                knobs::qdisc(b, Some(&c), &kind, &a).map_err(apply)?;
                writeln!(out, "{kind} on {}", knobs::BOTTLENECK)?;
            }
            Action::Bql { limit } => {
                b.require_up()?;
                knobs::bql(b, limit).map_err(apply)?;
                writeln!(out, "byte queue limit {limit} on {}", knobs::BOTTLENECK)?;
            }
            Action::Tsq { bytes } => {
                b.require_up()?;
                knobs::tsq(b, bytes).map_err(apply)?;
                writeln!(out, "tcp_limit_output_bytes = {bytes} on the sender")?;
            }
            Action::Xdp { on } => {
                b.require_up()?;
                knobs::xdp(b, on).map_err(apply)?;
                writeln!(out, "XDP forwarding {}", if on { "on" } else { "off" })?;
            }
            Action::Run {
                scenario: path,
                out: dir,
                keep,
            } => {
                let sc = Scenario::load(&path)?;
                let dir = dir.unwrap_or_else(|| scenario::default_out(&sc));
                let results =
                    scenario::run_on(b, &sc, &dir, keep, &mut |m: &str| say(m.to_string()))?;
                write!(out, "{}", std::fs::read_to_string(dir.join("table.txt"))?)?;
                let measured = results.iter().filter(|r| r.run.is_some()).count();
                say(format!(
                    "{measured} of {} setups measured; results, captures and charts in {}",
                    results.len(),
                    dir.display()
                ));
                if measured == 0 {
                    return Err(ActionError::NothingApplied(path));
                }
            }
        }
        Ok(())
    }
}
