//! Packet files: where packets come from and where they go when they are not recorded.
//!
//! [`read`] holds [`FileReader`], which reads classic pcap (µs and ns, both byte orders, the
//! modified format) and pcapng (sections, interfaces, any `if_tsresol`), memory-mapped for
//! regular files and streamed for pipes. [`write`](mod@write) holds the streaming writers [`PcapWriter`]
//! and [`PcapngWriter`] and [`PacketWriter`], which picks one at run time. Both sides speak
//! `weir_packet`'s vocabulary (link types, packet metadata), so a packet read here can be
//! written here unchanged. [`parallel`] reads one large classic pcap file on every core while
//! keeping file order.
#![deny(missing_docs)]

mod format;
pub mod parallel;
pub mod read;
pub mod write;

pub use format::{FileFormat, Precision};
pub use read::{FileReader, Interface, Packet, PacketOptions, ReadError};
pub use write::{PacketWriter, PcapWriter, PcapngWriter, WriteError};
