//! Errors of live capture, each naming the interface and the operation that failed.

use std::io;

/// Why a capture socket or ring could not be set up or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaptureError {
    /// A system call failed.
    #[error("{iface}: {what}: {source}")]
    Os {
        /// The interface.
        iface: String,
        /// The operation ("socket", "bind", "PACKET_RX_RING"...).
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// No such interface.
    #[error("no such interface: {0}")]
    NoInterface(String),
    /// The interface is administratively down (tcpdump's wording).
    #[error("{0}: That device is not up (bring it up with `ip link set {0} up`)")]
    NotUp(String),
    /// A ring parameter is invalid.
    #[error("invalid ring configuration: {0}")]
    BadRing(String),
    /// The filter could not be attached.
    #[error("{iface}: cannot attach the BPF filter: {source}")]
    Filter {
        /// The interface.
        iface: String,
        /// The OS error.
        source: io::Error,
    },
}

impl CaptureError {
    pub(crate) fn os(iface: &str, what: &'static str) -> CaptureError {
        CaptureError::Os {
            iface: iface.to_string(),
            what,
            source: io::Error::last_os_error(),
        }
    }
}
