//! Live capture from Linux network interfaces with no special hardware.
//!
//! [`RxRing`] is one AF_PACKET socket with a TPACKET_V3 receive ring: the kernel fills blocks of
//! packets in memory shared with us, we read them in place and hand each block back. Several
//! rings on one interface join a PACKET_FANOUT group (hash by default, so both directions of a flow
//! land on the same ring), each served by its own thread. The socket gets the libpcap-compiled
//! BPF filter in the kernel, promiscuous mode (unless turned off), nanosecond timestamps
//! (hardware ones when the NIC provides them, said plainly when it does not), and its kernel
//! counters (received, dropped) are read with PACKET_STATISTICS.
//!
//! Every `unsafe` block of weir's capture path lives in `socket.rs` and `ring.rs`, each with a
//! `// SAFETY:` comment.
#![deny(missing_docs)]

mod error;
pub mod feed;
pub mod netstats;
mod ring;
mod socket;

pub use error::CaptureError;
pub use ring::{Block, LivePacket, RingConfig, RxRing, TimestampSource};
pub use socket::{check_up, interface_index, FanoutMode, KernelStats};
