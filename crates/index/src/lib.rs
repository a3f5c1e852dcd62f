//! The index of a store: what lets `weir extract` read only the parts of the segments that can
//! hold the packets asked for.
//!
//! # Design
//!
//! A segment is cut into fixed **chunks** of its file (128 KiB by default). For every chunk the
//! index keeps the offset of the first record that starts in it and the smallest and largest
//! timestamp of its packets (the **time index**: exact bounds per chunk, so packets out of
//! order across capture threads never hide). For every **key** seen in the segment (an IPv4 or
//! IPv6 address, a TCP/UDP/SCTP port, an IP protocol number) it keeps the sorted list of chunks
//! whose packets carry it (**postings**, delta-coded varints). Ports from 1 024 on are listed
//! exactly in a chunk holding few distinct such ports (at most one per 512 bytes of chunk, 256
//! in 128 KiB: real traffic), and per bucket of 64 ports in the others ([`PortGrain`]): random
//! ephemeral source ports made every port a key present in dozens of chunks, half the index's
//! bytes on diverse traffic. A query for such a port reads its own list and its bucket's, a
//! superset the BPF program narrows; service ports below 1 024 and addresses keep their own
//! lists. Packets the decoder cannot read
//! all the way (a damaged header, an unknown link type) put their chunk on a **wildcard** list
//! that every query includes: the index may say "maybe" too often, never "no" wrongly.
//!
//! A query ([`Query`]) is derived from the tcpdump expression by a small, conservative parser
//! (`host`, `net`, `port`, `portrange`-free primitives, protocols, `and`/`or`; anything it does
//! not understand, and any `not`, means "every chunk"). The candidate chunks are then read and
//! each packet confirmed by the real BPF program, so an extraction returns exactly what
//! `tcpdump -r` would select.
//!
//! The file format (`SEGMENT.idx`, little-endian, format 5, see `format.rs`) has a head (the
//! chunks' times, the blocks' first records, the wildcard list, a table of the keys with the
//! offset of each key's list) and then the lists, so a query reads the head and its own keys'
//! lists only ([`Index::load_for`]). The head and every 4 KiB of lists carry a CRC-32; the head
//! records the length of the segment it covers and a hash of the segment's first 4 KiB, so a
//! corrupt, foreign or stale index is detected and bypassed.
//!
//! The index of a segment being written is kept as **parts** (`SEGMENT.idx.p<N>`, see
//! `part.rs`: [`IndexBuilder::serialize_part`], [`Parts`]), each an ordinary index of the
//! chunks since the previous part, so a periodic refresh costs what is new; readers union the
//! parts' candidates until the final index replaces them, which is joined from the parts'
//! lists (`merge.rs`) and so also costs about what is new since the last part.
//!
//! Size: 16 bytes per chunk and 2 per block, per key its value and a 4-byte offset, and per key
//! one varint (usually one byte) per block or chunk it appears in, or a bit per chunk of its
//! span. On 64-byte frames with random source ports (bench_index's diverse traffic) this is
//! 1.34 % of the data (2.51 % with every port its own key, format 3), on the corpus trace
//! about 0.1 %, where format 5 reads what format 3 read for an ephemeral port (format 4's
//! buckets in every chunk read 28 times more; see bench/README.md).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod builder;
mod format;
mod keys;
mod plan;
mod query;

pub use builder::part::{part_path, part_paths, remove_parts, LoadedPart, PartWritten, Parts};
pub use builder::IndexBuilder;
pub use format::{head_hash, Index, IndexError, HEAD_LEN};
pub use keys::{keys_of, keys_of_decoded, Key, PortGrain};
pub use plan::ReadRange;
pub use query::Query;

/// Default chunk size: 128 KiB of segment file.
pub const DEFAULT_CHUNK: u32 = 128 << 10;

/// The index file of a segment file: `SEGMENT.idx` next to it.
pub fn index_path(segment: &std::path::Path) -> std::path::PathBuf {
    let mut s = segment.as_os_str().to_owned();
    s.push(".idx");
    std::path::PathBuf::from(s)
}
