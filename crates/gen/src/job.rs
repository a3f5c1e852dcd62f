//! A whole `weir gen` run ([`Job::run`]): the source (synthetic streams or a replayed file) built
//! for its target, then driven into a file ([`drive::to_file`], written under a temporary name and
//! committed) or on an interface ([`drive::to_ring`]) through an AF_PACKET TX ring or an AF_XDP
//! socket ([`Backend`]) until it ends or `stop`.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use weir_packet::output;
use weir_pcap::FileFormat;

use crate::drive::{self, SendOptions};
use crate::spec::{self, StreamSpec};
use weir_capture::xdp::tx::XskTx;

use crate::{Replay, Report, Source, TxConfig, TxRing};

/// How a [`Job`] sends on an interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// An AF_PACKET TPACKET_V2 TX ring ([`TxRing`]).
    #[default]
    Packet,
    /// An AF_XDP socket on queue 0 ([`XskTx`]): UMEM frames, TX and completion rings,
    /// zero-copy when the driver offers it, else copy mode; no qdisc.
    Xdp,
}

/// Where a [`Job`] sends its packets.
#[derive(Clone, Debug)]
pub enum Target {
    /// A capture file (`-` is stdout), timestamped from `start_ns` (default: now) + planned times.
    File {
        /// The file.
        path: PathBuf,
        /// Its format.
        format: FileFormat,
        /// Timestamp of the first packet, ns since the epoch.
        start_ns: Option<u64>,
    },
    /// An interface, through a TX ring or an AF_XDP socket.
    Interface {
        /// Its name.
        name: String,
        /// Through what.
        backend: Backend,
        /// The ring.
        ring: TxConfig,
        /// Batches and duration.
        send: SendOptions,
    },
}

/// What a [`Job`] tells as it goes.
#[derive(Debug)]
pub enum Said {
    /// Something suspect about the settings (a MAC not found...).
    Warning(String),
    /// Sending starts on this interface; whether the qdisc is bypassed.
    Sending(String, bool),
    /// Sending starts on this interface through AF_XDP, set up as said.
    SendingXdp(String, String),
}

/// The line `weir gen` prints after `weir: ` (`warning: ...`, `sending on IFACE (through the
/// qdisc)`; tests and scripts wait for the latter).
impl std::fmt::Display for Said {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Said::Warning(w) => write!(f, "warning: {w}"),
            Said::Sending(iface, bypass) => {
                let how = if *bypass { "bypassing" } else { "through" };
                write!(f, "sending on {iface} ({how} the qdisc)")
            }
            Said::SendingXdp(iface, how) => write!(f, "sending on {iface} ({how})"),
        }
    }
}

/// A `weir gen` run: synthetic streams (`spec`) or the replay of a file, to a [`Target`].
#[derive(Clone, Debug)]
pub struct Job {
    /// Where to.
    pub target: Target,
    /// The synthetic streams, when nothing is replayed (their rate is also a replay's).
    pub spec: StreamSpec,
    /// Replay this file instead.
    pub replay: Option<PathBuf>,
    /// Replay at the recorded pace times this factor.
    pub multiplier: Option<f64>,
    /// Replay the file this many times.
    pub loops: u64,
}

/// Errors of a [`Job`]: the generator's, or its output file's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// The generator's.
    #[error(transparent)]
    Gen(#[from] crate::GenError),
    /// The replayed file could not be opened.
    #[error("cannot replay {}", path.display())]
    Replay {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::GenError,
    },
    /// The output file could not be created.
    #[error(transparent)]
    Open(#[from] output::OpenError),
    /// The output file could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl Job {
    fn replay(&self, path: &std::path::Path, max_len: usize) -> Result<Replay, JobError> {
        let pace = spec::replay_pace(self.multiplier, self.spec.rate());
        Replay::open(path, pace, self.loops, max_len).map_err(|source| JobError::Replay {
            path: path.to_owned(),
            source,
        })
    }

    fn source(
        &self,
        iface: Option<&str>,
        max_len: usize,
        say: &mut dyn FnMut(Said),
    ) -> Result<Box<dyn Source>, JobError> {
        Ok(match &self.replay {
            Some(r) => {
                let s = self.replay(r, max_len)?;
                if iface.is_some() {
                    s.check_sendable()?;
                }
                Box::new(s)
            }
            None => Box::new(self.spec.synth(iface, &mut |w| say(Said::Warning(w)))?),
        })
    }

    /// Runs the job until the source ends, its duration passes or `stop` is raised (an
    /// interface only: a file is written whole); returns the report.
    pub fn run(&self, stop: &AtomicBool, say: &mut dyn FnMut(Said)) -> Result<Report, JobError> {
        match &self.target {
            Target::File {
                path,
                format,
                start_ns,
            } => {
                let mut src = self.source(None, usize::MAX, say)?;
                let start = start_ns.unwrap_or_else(drive::realtime_ns);
                output::check_inputs(self.replay.as_slice(), Some(path))?;
                let out = output::create(path)?;
                let (rep, out) = drive::to_file(src.as_mut(), out, *format, start)?;
                out.commit()?;
                Ok(rep)
            }
            Target::Interface {
                name,
                backend: Backend::Packet,
                ring,
                send,
            } => {
                let mut tx = TxRing::open(name, *ring)?;
                let mut src = self.source(Some(name), tx.max_frame(), say)?;
                say(Said::Sending(name.clone(), ring.qdisc_bypass));
                Ok(drive::to_ring(src.as_mut(), &mut tx, *send, stop)?)
            }
            Target::Interface {
                name,
                backend: Backend::Xdp,
                ring,
                send,
            } => {
                let mut tx = XskTx::open(name, ring.frame_count).map_err(crate::GenError::from)?;
                let mut src = self.source(Some(name), tx.max_frame(), say)?;
                say(Said::SendingXdp(name.clone(), tx.describe()));
                Ok(drive::to_ring(src.as_mut(), &mut tx, *send, stop)?)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Said;

    #[test]
    fn said_lines() {
        assert_eq!(Said::Warning("x".into()).to_string(), "warning: x");
        let on = |b| Said::Sending("veth0".into(), b).to_string();
        assert_eq!(on(false), "sending on veth0 (through the qdisc)");
        assert_eq!(on(true), "sending on veth0 (bypassing the qdisc)");
        assert_eq!(
            Said::SendingXdp("veth0".into(), "AF_XDP, copy mode".into()).to_string(),
            "sending on veth0 (AF_XDP, copy mode)"
        );
    }
}
