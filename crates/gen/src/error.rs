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
    #[error("{0}: That device is not up (bring it up with `ip link set {0} up`)")]
    NotUp(String),
    /// Reading the file to replay failed.
    #[error(transparent)]
    Read(#[from] weir_pcap::ReadError),
    /// Writing the output file failed.
    #[error(transparent)]
    Write(#[from] weir_pcap::WriteError),
    /// A MAC address is not six hex bytes separated by colons.
    #[error("bad MAC address '{text}'")]
    BadMac {
        /// The text given.
        text: String,
        /// The byte that is not hex, if that is the trouble.
        source: Option<std::num::ParseIntError>,
    },
    /// The interface's MAC address cannot be read (it does not exist, in practice).
    #[error("no such interface: {iface}")]
    NoAddress {
        /// The interface.
        iface: String,
        /// Why sysfs could not be read.
        source: io::Error,
    },
    /// The AF_PACKET socket failed in some other way.
    #[error(transparent)]
    Socket(weir_capture::CaptureError),
}

impl From<weir_capture::CaptureError> for GenError {
    /// The socket layer's errors, in the generator's words.
    fn from(e: weir_capture::CaptureError) -> GenError {
        use weir_capture::CaptureError as C;
        match e {
            C::Os {
                iface,
                what,
                source,
            } => GenError::Os {
                iface,
                what,
                source,
            },
            C::NoInterface(iface) => GenError::NoInterface(iface),
            C::NotUp(iface) => GenError::NotUp(iface),
            other => GenError::Socket(other),
        }
    }
}
