//! Errors of live capture, each naming the interface and the operation that failed.

use std::io;
use std::path::PathBuf;

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
    /// The interface's type cannot be read from sysfs (it does not exist, in practice).
    #[error("no such interface: {iface}")]
    LinkUnknown {
        /// The interface.
        iface: String,
        /// Why sysfs could not be read.
        source: io::Error,
    },
    /// The interface's type in sysfs is not a number.
    #[error("cannot parse {path}")]
    LinkUnparsable {
        /// The sysfs file.
        path: String,
        /// The parse error.
        source: std::num::ParseIntError,
    },
    /// The interface's ARPHRD type has no capture support yet.
    #[error("{iface}: ARPHRD type {arphrd} is not supported for capture yet")]
    LinkUnsupported {
        /// The interface.
        iface: String,
        /// Its ARPHRD type.
        arphrd: u32,
    },
    /// The filter expression does not compile for an interface's link type.
    #[error("invalid filter expression for {iface}")]
    Expression {
        /// The interface.
        iface: String,
        /// The compiler's error.
        source: weir_filter::FilterError,
    },
    /// The packet buffer could not be made.
    #[error("cannot create the packet buffer")]
    Buffer(#[source] weir_buffer::BufferError),
    /// A writer or reader of the packet buffer could not be had.
    #[error(transparent)]
    BufferHandle(weir_buffer::BufferError),
    /// A capture thread failed.
    #[error("capture on {iface}")]
    Thread {
        /// The interface.
        iface: String,
        /// What went wrong.
        source: Box<CaptureError>,
    },
    /// A capture file to import could not be opened.
    #[error("cannot open {}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: weir_pcap::ReadError,
    },
    /// A capture file being imported could not be read.
    #[error(transparent)]
    Read(#[from] weir_pcap::ReadError),
    /// The rule set could not be compiled.
    #[error("rules: {0}")]
    Rules(#[from] weir_rules::BuildError),
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
