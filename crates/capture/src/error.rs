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
    /// A system call was refused for want of a capability (`EPERM`/`EACCES` where the kernel
    /// checks one): the message names the capability, so a non-root user knows what to grant.
    #[error("{doing} on {iface} needs {capability} (or root): {source}")]
    Permission {
        /// The interface.
        iface: String,
        /// What was being done ("opening a packet socket"...).
        doing: &'static str,
        /// The capability the kernel checks ("CAP_NET_RAW"...).
        capability: &'static str,
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
    /// The AF_XDP backend could not be set up on an interface (`what` says what and why).
    #[error("{iface}: AF_XDP: {what}{}", os.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Xdp {
        /// The interface.
        iface: String,
        /// What failed, in words.
        what: String,
        /// The OS error, if a system call failed.
        os: Option<io::Error>,
    },
    /// The rule set could not be compiled.
    #[error("rules: {0}")]
    Rules(#[from] weir_rules::BuildError),
}

impl CaptureError {
    /// The error of the system call `what` that just failed (errno read now); a refusal the
    /// kernel makes for want of a capability becomes [`CaptureError::Permission`].
    pub(crate) fn os(iface: &str, what: &'static str) -> CaptureError {
        CaptureError::from_io(iface, what, io::Error::last_os_error())
    }

    /// [`os`](Self::os) with the error given.
    pub(crate) fn from_io(iface: &str, what: &'static str, source: io::Error) -> CaptureError {
        let refused = matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES));
        match needs_capability(what) {
            Some((doing, capability)) if refused => CaptureError::Permission {
                iface: iface.to_string(),
                doing,
                capability,
                source,
            },
            _ => CaptureError::Os {
                iface: iface.to_string(),
                what,
                source,
            },
        }
    }
}

/// The capability the kernel checks for a system call of this crate, and what the call does in
/// words. Only the checks the kernel makes: creating an AF_PACKET socket needs CAP_NET_RAW in the
/// socket's network namespace (`packet_create`); promiscuous membership, fanout, the ring and
/// its mapping need nothing more (a ring over RLIMIT_MEMLOCK without CAP_IPC_LOCK is mapped
/// unlocked instead, see [`PacketSocket::map_ring`](crate::socket::PacketSocket::map_ring)), and
/// hardware timestamps (CAP_NET_ADMIN) fall back to software ones.
fn needs_capability(what: &str) -> Option<(&'static str, &'static str)> {
    match what {
        "socket(AF_PACKET)" => Some(("opening a packet socket", "CAP_NET_RAW")),
        "socket(AF_XDP)" => Some(("opening an AF_XDP socket", "CAP_NET_RAW")),
        "BPF_MAP_CREATE(XSKMAP)" | "BPF_PROG_LOAD(XDP)" => {
            Some(("loading weir's XDP program", "CAP_BPF and CAP_NET_ADMIN"))
        }
        "BPF_LINK_CREATE(XDP)" => Some(("attaching weir's XDP program", "CAP_NET_ADMIN")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_packet_socket_names_the_capability() {
        for errno in [libc::EPERM, libc::EACCES] {
            let e = CaptureError::from_io(
                "veth0",
                "socket(AF_PACKET)",
                io::Error::from_raw_os_error(errno),
            );
            assert!(matches!(
                e,
                CaptureError::Permission {
                    capability: "CAP_NET_RAW",
                    ..
                }
            ));
        }
        let e = CaptureError::from_io(
            "veth0",
            "socket(AF_PACKET)",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert_eq!(
            e.to_string(),
            "opening a packet socket on veth0 needs CAP_NET_RAW (or root): \
             Operation not permitted (os error 1)"
        );
    }

    #[test]
    fn other_failures_stay_plain() {
        // Another errno of the same call, and EPERM of a call the kernel checks no capability
        // for, keep the call's name and the OS error.
        let e = CaptureError::from_io(
            "veth0",
            "socket(AF_PACKET)",
            io::Error::from_raw_os_error(libc::EMFILE),
        );
        assert!(matches!(
            e,
            CaptureError::Os {
                what: "socket(AF_PACKET)",
                ..
            }
        ));
        let e = CaptureError::from_io(
            "veth0",
            "PACKET_FANOUT",
            io::Error::from_raw_os_error(libc::EPERM),
        );
        assert_eq!(
            e.to_string(),
            "veth0: PACKET_FANOUT: Operation not permitted (os error 1)"
        );
    }
}
