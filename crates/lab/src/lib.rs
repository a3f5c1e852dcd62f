//! The lab bench: queueing experiments on one machine.
//!
//! [`Bench`] builds three network namespaces joined by two veth pairs,
//! `sender (eth0) — (in0) router (out0) — (eth0) receiver`, with addresses that exist only
//! inside them (10.10.1.0/24 and 10.10.2.0/24), routes, forwarding and permanent neighbour
//! entries (no ARP during a measurement). The router's `out0` is the bottleneck: [`knobs`] puts a
//! qdisc there (`tc`), sets byte queue limits (sysfs), TCP small queues (sysctl, on the sender)
//! or an XDP forwarding program in place of the kernel's forwarding path. [`caps`] finds out what
//! the running kernel offers, by trying each qdisc in a scratch namespace, so a scenario says
//! plainly which setups it cannot apply, and why, before it starts. [`scenario`] runs a TOML
//! scenario: for each setup, bulk traffic plus a stamped interactive stream, captured before the
//! bottleneck (sender's eth0) and after it (receiver's eth0) with weir-capture, matched with
//! weir-latency, and charted together. Captures and weir-gen's streams run in threads of this
//! process moved into the bench's namespaces (the private module `netns`), not as child processes.
//!
//! [`action::Action`] is one `weir lab` command on a bench, with what it prints.
//!
//! Everything the lab makes is named `weirlab-NAME-*` and recorded in a state file
//! (`/run/weir-lab/NAME.json`), so `weir lab down` removes it even after a crash.
#![deny(missing_docs)]

pub mod action;
pub mod bench;
pub mod caps;
pub mod knobs;
mod netns;
pub mod scenario;
mod traffic;
pub mod xdp;

pub use bench::Bench;

/// Errors of the lab.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LabError {
    /// A command failed.
    #[error("{cmd}: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it said.
        stderr: String,
    },
    /// A setting cannot be applied on this machine (the message says why).
    #[error("{0}")]
    Unsupported(String),
    /// A bad setting or scenario.
    #[error("{0}")]
    Config(String),
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The analysis failed.
    #[error(transparent)]
    Latency(#[from] weir_latency::LatencyError),
}
