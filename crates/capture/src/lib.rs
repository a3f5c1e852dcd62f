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
//! [`Pipeline`] is the live pipeline built on them: rings → capture threads ([`feed`]) → one
//! shared packet buffer ([`weir_buffer`]) that its consumers read, with every stage's counters
//! ([`Totals`]). [`Import`] fills such a buffer from capture files instead. With rules, the
//! drop rules a socket filter can run are rejected in the kernel as well ([`kernel_rules`]).
//!
//! [`xdp`] is the second backend (`Backend::Xdp`): AF_XDP sockets fed by weir's own XDP
//! program, into the same capture threads and buffer; with rules, the drop rules run in that
//! program (`xdp_rules`). [`ebpf`] is weir's raw eBPF layer (instruction encoding, `bpf()`
//! calls, the classic-to-eBPF translation), used by it and by the lab's XDP forwarder.
//!
//! Every `unsafe` block of weir's capture path lives in `socket.rs`, `ring.rs`, `xdp.rs`, `ebpf.rs`, `privilege.rs` (the switch of `weir run --user`) and `signal.rs` (SIGHUP), each with a
//! `// SAFETY:` comment.
#![deny(missing_docs)]

pub mod ebpf;
mod error;
pub mod feed;
mod import;
pub mod kernel_rules;
pub mod netstats;
mod pipeline;
pub mod privilege;
mod ring;
pub mod signal;
mod socket;
pub mod xdp;
mod xdp_rules;

pub use error::CaptureError;
pub use feed::{tag_comment, FeedTotals, TAG_PREFIX};
pub use import::Import;
pub use kernel_rules::KernelRules;
pub use pipeline::{Backend, Counters, Pipeline, PipelineConfig, Rules, Totals};
pub use ring::{Block, LivePacket, RingConfig, RxRing, TimestampSource};
pub use socket::{
    check_up, interface_index, interface_value, link_type, FanoutMode, KernelStats, PacketSocket,
    RingMap,
};
