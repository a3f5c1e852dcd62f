//! [`GenError`], what can go wrong while generating traffic.

use std::io;

/// Errors of the generator.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenError {
    /// A setting makes no sense (message says which).
    #[error("{0}")]
    Config(String),
    /// A system call on the interface failed.
    #[error("{iface}: {what} failed: {source}")]
    Os {
        /// The interface.
        iface: String,
        /// The call.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The interface does not exist.
    #[error("no such interface: {0}")]
    NoInterface(String),
    /// The interface is down (as tcpdump words it).
    #[error("{0}: That device is not up")]
    NotUp(String),
    /// Reading the file to replay failed.
    #[error(transparent)]
    Read(#[from] weir_pcap::ReadError),
    /// Writing the output file failed.
    #[error(transparent)]
    Write(#[from] weir_pcap::WriteError),
}

impl GenError {
    /// An OS error from the last system call.
    pub(crate) fn os(iface: &str, what: &'static str) -> GenError {
        GenError::Os {
            iface: iface.to_string(),
            what,
            source: io::Error::last_os_error(),
        }
    }
}
