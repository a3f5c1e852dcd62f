//! Reading packet files (pcap and pcapng).
//!
//! Today: capture files. [`FileReader`] reads classic pcap (µs and ns magic, both byte orders,
//! the modified "Kuznetzov" format) and pcapng (several sections and interfaces, any
//! `if_tsresol`, EPB/SPB/OPB, byte order per section), memory-mapped and zero-copy for regular
//! files, streamed for pipes and stdin. A pcapng packet's options (its comments: rule tags) come
//! with it as [`PacketOptions`]. Packets are handed out as [`Packet`] views borrowing the
//! reader's buffer, so reading allocates nothing per packet.
//!
//! Damage is never fatal to what came before it: a truncated or corrupt file yields every valid
//! packet before the damage, then one [`ReadError::Damaged`] naming the byte offset, then the end.
//!
//! ```no_run
//! let mut reader = weir_pcap::FileReader::open("trace.pcap")?;
//! while let Some(packet) = reader.next_packet()? {
//!     println!("{} bytes at {} ns", packet.data.len(), packet.meta.ts_ns);
//! }
//! # Ok::<(), weir_pcap::ReadError>(())
//! ```

mod backing;
mod error;
mod options;
mod pcap;
mod pcapng;
mod reader;
pub mod summary;

pub use crate::format::FileFormat;
pub use error::ReadError;
pub use options::PacketOptions;
pub use reader::{FileReader, Packet};
pub use summary::FileSummary;
pub use weir_packet::Interface;
