//! Getting finished datagrams out: UDP to every collector, or a file / stdout.
//!
//! File layout: IPFIX messages are written back to back (they carry their own length, which is
//! the RFC 5655 IPFIX file layout); NetFlow v5 and v9 datagrams, which do not, are each preceded
//! by their length as a 2-byte big-endian integer.

use std::io::{BufWriter, Write};
use std::net::{SocketAddr, UdpSocket};

use weir_packet::output::Output;

use crate::packer::Datagram;
use crate::sink::ExportStats;
use crate::{ExportError, Target};

/// How datagrams are delimited in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Back to back (self-delimiting IPFIX messages).
    Raw,
    /// A 2-byte big-endian length before each datagram.
    LengthPrefixed,
}

/// A writer whose output is complete only once committed: a file is written under a temporary
/// name and renamed over its path by [`Commit::commit`] ([`weir_packet::output`]), so a run
/// that fails or is killed leaves no half file under the final name.
pub(crate) trait Commit: Write + Send {
    /// Flushes and, for a file, renames it into place.
    fn commit(&mut self) -> std::io::Result<()> {
        self.flush()
    }
}

impl Commit for Vec<u8> {}
impl Commit for BufWriter<Output> {
    fn commit(&mut self) -> std::io::Result<()> {
        self.flush()?;
        self.get_mut().commit_mut()
    }
}

/// Opens a buffered writer on a file or stdout; UDP is refused.
pub(crate) fn open_writer(target: &Target, what: &str) -> Result<Box<dyn Commit>, ExportError> {
    match target {
        Target::File(path) => {
            let f = weir_packet::output::create(path).map_err(|e| ExportError::Create {
                path: path.clone(),
                source: e.source.unwrap_or_else(|| std::io::Error::other(e.what)),
            })?;
            Ok(Box::new(BufWriter::with_capacity(1 << 16, f)))
        }
        // errors say "cannot write to stdout", as every command's output does
        Target::Stdout => Ok(Box::new(BufWriter::new(weir_packet::output::stdout()))),
        Target::Udp(_) => Err(ExportError::Unsupported(format!(
            "{what} goes to a file or stdout, not UDP"
        ))),
    }
}

/// A datagram destination.
pub(crate) enum Transport {
    /// UDP: one unconnected socket per address family in use, the same datagram to each
    /// collector.
    Udp {
        /// Socket bound to 0.0.0.0:0, if any collector is IPv4.
        v4: Option<UdpSocket>,
        /// Socket bound to [::]:0, if any collector is IPv6.
        v6: Option<UdpSocket>,
        /// The collectors.
        dests: Vec<SocketAddr>,
    },
    /// A file or stdout.
    Stream {
        /// The writer.
        out: Box<dyn Commit>,
        /// How datagrams are delimited.
        framing: Framing,
    },
}

impl Transport {
    /// Opens the transport for `target`.
    pub(crate) fn open(target: &Target, framing: Framing) -> Result<Self, ExportError> {
        match target {
            Target::Udp(dests) => {
                if dests.is_empty() {
                    return Err(ExportError::Unsupported("no UDP collector given".into()));
                }
                let bind = |any: &str, want: bool| -> Result<Option<UdpSocket>, ExportError> {
                    want.then(|| UdpSocket::bind(any).map_err(ExportError::Socket))
                        .transpose()
                };
                Ok(Transport::Udp {
                    v4: bind("0.0.0.0:0", dests.iter().any(SocketAddr::is_ipv4))?,
                    v6: bind("[::]:0", dests.iter().any(SocketAddr::is_ipv6))?,
                    dests: dests.clone(),
                })
            }
            _ => Ok(Transport::Stream {
                out: open_writer(target, "a NetFlow file")?,
                framing,
            }),
        }
    }

    /// Sends one datagram and counts it. A collector that cannot be reached (a send error) does
    /// not stop the export: its records are counted in `stats.dropped`. File errors are returned.
    pub(crate) fn send(
        &mut self,
        d: &Datagram,
        stats: &mut ExportStats,
    ) -> Result<(), ExportError> {
        stats.datagrams += 1;
        stats.bytes += d.bytes.len() as u64;
        stats.records += d.records;
        match self {
            Transport::Udp { v4, v6, dests } => {
                for dest in dests.iter() {
                    let sock = if dest.is_ipv4() {
                        v4.as_ref()
                    } else {
                        v6.as_ref()
                    };
                    let sent = sock.map(|s| s.send_to(&d.bytes, dest));
                    if !matches!(sent, Some(Ok(n)) if n == d.bytes.len()) {
                        stats.dropped += d.records;
                    }
                }
                Ok(())
            }
            Transport::Stream { out, framing } => {
                if *framing == Framing::LengthPrefixed {
                    out.write_all(&(d.bytes.len() as u16).to_be_bytes())?;
                }
                out.write_all(&d.bytes)?;
                Ok(())
            }
        }
    }

    /// Flushes and completes file output (renamed into place).
    pub(crate) fn commit(&mut self) -> Result<(), ExportError> {
        if let Transport::Stream { out, .. } = self {
            out.commit()?;
        }
        Ok(())
    }
}
