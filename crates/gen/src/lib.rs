//! Traffic generation for measurements.
//!
//! Two sources ([`Source`]): [`Synth`], synthetic UDP (or TCP-shaped) streams whose every payload
//! starts with a [`Stamp`] (magic, stream id, sequence number, send time in ns; layout in
//! [`stamp`]), in a fixed size, the IMIX or a uniform size range ([`SizeMix`]), at a [`Rate`] in
//! pps or Mbps or at top speed, over several flows, with DSCP/TOS and VLAN; and [`Replay`], a
//! pcap/pcapng file at its recorded pace (times a multiplier), at a fixed rate or at top speed,
//! N times over.
//!
//! Two drivers ([`drive`]): [`drive::to_file`] writes the packets with their planned send times
//! as timestamps (so tests and analyses get exact, known timing), and [`drive::to_ring`] sends them
//! through a [`TxRing`] ([`job::Job`] runs either, from the command line's settings), an AF_PACKET TPACKET_V2 transmit ring: frames are written into memory
//! shared with the kernel and a batch leaves with one `send()`; or through weir-capture's AF_XDP
//! socket (`XskTx`, [`job::Backend::Xdp`]; both are a [`Transmit`]). The qdisc stays in the path
//! unless PACKET_QDISC_BYPASS is asked for, since queueing is often what is being measured.
//!
//! ```
//! use weir_gen::{FlowSpec, Proto, Rate, SizeMix, Source, Synth, SynthConfig, Stamp};
//!
//! let flow = FlowSpec {
//!     src_mac: [2, 0, 0, 0, 0, 1], dst_mac: [2, 0, 0, 0, 0, 2], vlan: None,
//!     src_ip: "10.0.0.1".parse().unwrap(), dst_ip: "10.0.0.2".parse().unwrap(),
//!     src_port: 40000, dst_port: 9000, tos: 0xc0, ttl: 64, proto: Proto::Udp,
//! };
//! let mut s = Synth::new(SynthConfig {
//!     flows: vec![flow], stream_base: 7, sizes: SizeMix::Fixed(200), seed: 1,
//!     rate: Rate::Pps(100.0), count: Some(3), duration_ns: None,
//! }).unwrap();
//! let mut buf = [0u8; 2048];
//! assert_eq!(s.next_due().unwrap(), Some(0));
//! let len = s.fill(&mut buf, 123).unwrap();
//! assert_eq!(len, 200);
//! assert_eq!(Stamp::parse(&buf[42..]), Some(Stamp { stream: 7, seq: 0, send_ns: 123 }));
//! assert_eq!(s.next_due().unwrap(), Some(10_000_000)); // 100 pps: 10 ms apart
//! ```
#![deny(missing_docs)]

#[cfg(feature = "clap")]
pub mod args;
pub mod drive;
mod error;
pub mod frame;
pub mod job;
pub mod mac;
mod report;
pub mod size;
pub mod source;
pub mod spec;
pub mod stamp;
pub mod tx;

pub use error::GenError;
pub use frame::{FlowSpec, FrameBuilder, Proto};
pub use mac::{interface_mac, neighbour_mac, parse_mac};
pub use report::Report;
pub use size::{SizeMix, Sizes};
pub use source::{Rate, Replay, ReplayPace, Source, Synth, SynthConfig};
pub use spec::StreamSpec;
pub use stamp::{Stamp, MAGIC, STAMP_LEN};
pub use tx::{Transmit, TxConfig, TxRing, TxStats};
