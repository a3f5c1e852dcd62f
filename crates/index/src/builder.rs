//! Building a segment's index as its packets are written, at a cost per packet that does not
//! depend on how many distinct keys the traffic has (issue 20).
//!
//! Per packet the keys are appended to flat arrays of `(key << 32) | chunk` words, one array
//! per kind (protocols, ports, IPv4 addresses; IPv6 addresses as pairs): no hash map, no
//! allocation beyond the arrays' growth. Repeats within a chunk are mostly filtered on the
//! way in: protocols and ports by an exact bit set per chunk (256 and 65 536 bits), IPv4
//! addresses by a small direct-mapped table of the chunk's recent addresses (a miss only
//! costs a duplicate word, removed later). When the index is serialized, the words added since
//! the last time are radix-sorted on their key bits (stable, so each key's chunks stay in
//! order), deduplicated and merged into the sorted words of before: the postings of every key
//! are then runs of consecutive words, written out as they are.
//!
//! The words are of **blocks** ([`BLOCKS_PER_CHUNK`] per chunk: 4 KiB with 128 KiB chunks),
//! repeats filtered per block by stamps (the block number last seen per port, protocol or
//! address slot: nothing to clear between blocks). At serialization each key's list is written
//! as blocks when the key is rare ([`FINE_ALWAYS`] blocks at most) or in few blocks of its
//! chunks (at most [`FINE_PER_CHUNK`] per chunk on average) for an index at most 1.5 times as
//! large: a rare host's extraction reads a few KiB per packet. Else as chunks (on 64-byte frames
//! with random source ports, every port's blocks in the file would make the index 2.3 → 5 % of
//! the data, bench_index).
//!
//! Before (session 12) the keys of each chunk went through a hash set and a hash map of
//! postings: ≈ 1 µs per packet on 64-byte frames with random source ports and a few thousand
//! addresses, 2.3× the CPU of the whole capture (bench_index, bench/README.md).

use weir_decode::quick::{self, Upper};
use weir_packet::LinkType;

use crate::format::{self, ChunkInfo, NONE};
use crate::keys::{keys_of_decoded, Key};

/// Blocks per chunk.
pub(crate) const BLOCKS_PER_CHUNK: u32 = 32;
/// A key in at most this many blocks lists its blocks.
pub(crate) const FINE_ALWAYS: usize = 16;
/// A key whose blocks are at most this many times its chunks, and whose block list is at most
/// 1.5 times as long in bytes as its chunk list, lists its blocks.
pub(crate) const FINE_PER_CHUNK: usize = 4;

/// Slots of the per-block IPv4 repeat filter (a power of two).
const V4_SLOTS: usize = 1 << 12;
/// Slots of the per-block IPv6 repeat filter (a power of two).
const V6_SLOTS: usize = 1 << 8;

/// Sorted-and-new words of one key kind: `(key << 32) | chunk`.
#[derive(Default)]
struct Words {
    v: Vec<u64>,
    /// `v[..sorted]` is sorted and free of duplicates.
    sorted: usize,
}

impl Words {
    /// Sorts the words added since the last call (on the key's `bits` bits above the chunk),
    /// drops duplicates and merges them into the sorted ones.
    fn settle(&mut self, bits: u32, tmp: &mut Vec<u64>) {
        if self.sorted == self.v.len() {
            return;
        }
        radix_sort(&mut self.v[self.sorted..], 32, 32 + bits, tmp);
        let mut end = self.sorted;
        for i in self.sorted..self.v.len() {
            if end == self.sorted || self.v[i] != self.v[end - 1] {
                self.v[end] = self.v[i];
                end += 1;
            }
        }
        self.v.truncate(end);
        if self.sorted > 0 {
            let merged = merge(&self.v[..self.sorted], &self.v[self.sorted..]);
            self.v = merged;
        }
        self.sorted = self.v.len();
    }

    /// Distinct keys among the sorted words.
    fn keys(&self) -> usize {
        let v = &self.v[..self.sorted];
        v.iter()
            .zip(v.iter().skip(1))
            .filter(|(a, b)| *a >> 32 != *b >> 32)
            .count()
            + usize::from(!v.is_empty())
    }

    /// Writes the postings of every key (sorted words only), `key` making a key of the high
    /// 32 bits.
    fn write(&self, out: &mut Vec<u8>, per: u32, key: impl Fn(u32) -> Key) {
        let v = &self.v[..self.sorted];
        let mut i = 0;
        while i < v.len() {
            let k = (v[i] >> 32) as u32;
            let n = v[i..]
                .iter()
                .take_while(|w| (**w >> 32) as u32 == k)
                .count();
            write_list(out, key(k), per, v[i..i + n].iter().map(|w| *w as u32));
            i += n;
        }
    }
}

/// Writes key `k` with its blocks (increasing), as blocks or as chunks (see the module doc).
/// `per` (blocks per chunk) is a power of two; the counts and both lists' sizes are taken in
/// one read of the blocks.
fn write_list(out: &mut Vec<u8>, k: Key, per: u32, blocks: impl Iterator<Item = u32> + Clone) {
    debug_assert!(per.is_power_of_two());
    let sh = per.trailing_zeros();
    let (mut n, mut nchunks, mut fine_bytes, mut coarse_bytes) = (0usize, 0usize, 0usize, 0usize);
    let (mut prev_b, mut prev_c) = (0u32, 0u32);
    for b in blocks.clone() {
        fine_bytes += varint_len(b - prev_b);
        prev_b = b;
        let c = b >> sh;
        if nchunks == 0 || c != prev_c {
            coarse_bytes += varint_len(c - if nchunks == 0 { 0 } else { prev_c });
            prev_c = c;
            nchunks += 1;
        }
        n += 1;
    }
    let fine = per == 1
        || n <= FINE_ALWAYS
        || (n <= FINE_PER_CHUNK * nchunks && 2 * fine_bytes <= 3 * coarse_bytes);
    if fine {
        format::write_key(out, k, false, n, blocks);
    } else {
        let mut last = u32::MAX;
        let chunks = blocks.filter_map(move |b| {
            let c = b >> sh;
            (c != last).then(|| {
                last = c;
                c
            })
        });
        format::write_key(out, k, true, nchunks, chunks);
    }
}

/// Bytes of a varint of `d`.
fn varint_len(d: u32) -> usize {
    (32 - d.leading_zeros()).div_ceil(7).max(1) as usize
}

/// Bits per radix digit at most (256 counters: the scatter writes to at most 256 places at
/// once, which the TLB holds; 11-bit digits, three passes for an IPv4 address instead of four,
/// measured no faster on bench_index's diverse traffic).
const RADIX_BITS: u32 = 8;

/// Sorts `v` stably on bits `lo..hi` of its words (least significant digit first, digits of up
/// to [`RADIX_BITS`] bits; the counts of every digit are taken in one read of the words, and a
/// digit all words share costs no move). `tmp` is scratch.
fn radix_sort(v: &mut [u64], lo: u32, hi: u32, tmp: &mut Vec<u64>) {
    if v.len() < 64 {
        // Small: a comparison sort on the same bits (stable).
        let mask = if hi - lo >= 64 {
            u64::MAX
        } else {
            ((1u64 << (hi - lo)) - 1) << lo
        };
        v.sort_by_key(|w| w & mask);
        return;
    }
    let passes = (hi - lo).div_ceil(RADIX_BITS) as usize;
    let width = (hi - lo).div_ceil(passes as u32);
    let mask = (1u64 << width) - 1;
    let buckets = 1usize << width;
    // The sort's bits, shifted down (the top digit may reach past `hi`).
    let key_mask = if hi - lo >= 64 {
        u64::MAX
    } else {
        (1u64 << (hi - lo)) - 1
    };
    // counts[p * buckets + d]: words whose digit p is d, all digits in one read.
    let mut counts = vec![0usize; passes * buckets];
    for &w in v.iter() {
        let mut x = (w >> lo) & key_mask;
        for p in 0..passes {
            counts[p * buckets + (x & mask) as usize] += 1;
            x >>= width;
        }
    }
    tmp.clear();
    tmp.resize(v.len(), 0);
    // Whether the words are in `tmp` (after an odd number of moves).
    let mut in_tmp = false;
    for p in 0..passes {
        let count = &mut counts[p * buckets..(p + 1) * buckets];
        if count.contains(&v.len()) {
            continue;
        }
        let mut at = 0;
        for c in count.iter_mut() {
            let n = *c;
            *c = at;
            at += n;
        }
        let shift = p as u32 * width;
        let (src, dst): (&[u64], &mut [u64]) = if in_tmp {
            (&tmp[..], &mut v[..])
        } else {
            (&v[..], &mut tmp[..])
        };
        for &w in src {
            let d = (((w >> lo) & key_mask) >> shift & mask) as usize;
            dst[count[d]] = w;
            count[d] += 1;
        }
        in_tmp = !in_tmp;
    }
    if in_tmp {
        v.copy_from_slice(tmp);
    }
}

/// The sorted union of two sorted, duplicate-free lists, without duplicates.
fn merge(a: &[u64], b: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let (x, y) = (a[i], b[j]);
        out.push(x.min(y));
        i += usize::from(x <= y);
        j += usize::from(y <= x);
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// Accumulates the index of one segment.
pub struct IndexBuilder {
    chunk_size: u32,
    block_size: u32,
    chunks: Vec<ChunkInfo>,
    wildcard: Vec<u32>,
    protos: Words,
    ports: Words,
    v4: Words,
    /// IPv6 addresses and their chunks (fewer: sorted by comparison); `v6[..v6_sorted]` sorted.
    v6: Vec<(u128, u32)>,
    v6_sorted: usize,
    /// The block being filled (`u32::MAX`: none yet).
    chunk: u32,
    /// The block each protocol and port was last added for.
    proto_seen: [u32; 256],
    port_seen: Box<[u32; 65536]>,
    /// Recent IPv4 addresses: `(block << 32) | address` per slot.
    v4_seen: Box<[u64; V4_SLOTS]>,
    /// The same for IPv6: `(address, chunk)` per slot.
    v6_seen: Box<[(u128, u32); V6_SLOTS]>,
    /// Keys of a packet the fast parser refuses.
    keys: Vec<Key>,
    tmp: Vec<u64>,
    packets: u64,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl std::fmt::Debug for IndexBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexBuilder")
            .field("chunk_size", &self.chunk_size)
            .field("chunks", &self.chunks.len())
            .field("packets", &self.packets)
            .finish()
    }
}

impl IndexBuilder {
    /// An empty index with chunks of `chunk_size` bytes of segment file.
    pub fn new(chunk_size: u32) -> IndexBuilder {
        assert!(chunk_size >= 4096, "chunks of at least 4 KiB");
        // A chunk size the blocks do not divide (not a power of two): one block per chunk.
        let per = if chunk_size % BLOCKS_PER_CHUNK == 0 {
            BLOCKS_PER_CHUNK
        } else {
            1
        };
        IndexBuilder {
            chunk_size,
            block_size: chunk_size / per,
            chunks: Vec::new(),
            wildcard: Vec::new(),
            protos: Words::default(),
            ports: Words::default(),
            v4: Words::default(),
            v6: Vec::new(),
            v6_sorted: 0,
            chunk: u32::MAX,
            proto_seen: [u32::MAX; 256],
            port_seen: Box::new([u32::MAX; 65536]),
            v4_seen: Box::new([u64::MAX; V4_SLOTS]),
            v6_seen: Box::new([(0, u32::MAX); V6_SLOTS]),
            keys: Vec::with_capacity(16),
            tmp: Vec::new(),
            packets: 0,
            first_ns: None,
            last_ns: 0,
        }
    }

    /// Empties the builder for the next segment, keeping its memory (a fresh builder's arrays
    /// are new pages the kernel must fault in and zero: on 64-byte frames with diverse keys
    /// that cost as much as the sorting, bench_index).
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.wildcard.clear();
        for w in [&mut self.protos, &mut self.ports, &mut self.v4] {
            w.v.clear();
            w.sorted = 0;
        }
        self.v6.clear();
        self.v6_sorted = 0;
        self.chunk = u32::MAX;
        self.proto_seen.fill(u32::MAX);
        self.port_seen.fill(u32::MAX);
        self.v4_seen.fill(u64::MAX);
        self.v6_seen.fill((0, u32::MAX));
        self.packets = 0;
        self.first_ns = None;
        self.last_ns = 0;
    }

    /// Packets added so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Adds the packet whose record starts at file offset `offset` (records must come in file
    /// order).
    pub fn add(&mut self, offset: u64, ts_ns: u64, link: LinkType, data: &[u8]) {
        // Block numbers are u32 in the file: a segment of 2^32 blocks (512 GiB at the smallest,
        // 128 bytes) would be needed to overflow, and the recorder cuts segments long before.
        let chunk = (offset / u64::from(self.block_size)).min(u64::from(u32::MAX - 1)) as u32;
        if chunk != self.chunk {
            self.start_chunk(chunk);
        }
        let c = &mut self.chunks[chunk as usize];
        if c.first == NONE {
            c.first = offset;
        }
        c.min_ns = c.min_ns.min(ts_ns);
        c.max_ns = c.max_ns.max(ts_ns);
        match quick::parse(link, data) {
            Some(h) if h.ipv6_extensions == 0 => {
                if h.v6 {
                    self.add_v6(h.src);
                    self.add_v6(h.dst);
                } else {
                    self.add_v4(h.src as u32);
                    self.add_v4(h.dst as u32);
                }
                self.add_proto(h.proto);
                if matches!(h.upper, Upper::Tcp | Upper::Udp | Upper::Sctp) {
                    self.add_port(h.src_port);
                    self.add_port(h.dst_port);
                }
            }
            _ => {
                let mut keys = std::mem::take(&mut self.keys);
                keys.clear();
                if !keys_of_decoded(link, data, &mut keys) && self.wildcard.last() != Some(&chunk) {
                    self.wildcard.push(chunk);
                }
                for &k in &keys {
                    match k {
                        Key::Proto(p) => self.add_proto(p),
                        Key::Port(p) => self.add_port(p),
                        Key::V4(a) => self.add_v4(a),
                        Key::V6(a) => self.add_v6(a),
                    }
                }
                self.keys = keys;
            }
        }
        self.packets += 1;
        self.first_ns.get_or_insert(ts_ns);
        self.last_ns = self.last_ns.max(ts_ns);
    }

    /// Moves on to block `chunk` (later than the current one).
    #[cold]
    fn start_chunk(&mut self, chunk: u32) {
        self.chunk = chunk;
        while self.chunks.len() <= chunk as usize {
            self.chunks.push(ChunkInfo {
                first: NONE,
                min_ns: u64::MAX,
                max_ns: 0,
            });
        }
    }

    #[inline(always)]
    fn add_proto(&mut self, p: u8) {
        let seen = &mut self.proto_seen[usize::from(p)];
        if *seen != self.chunk {
            *seen = self.chunk;
            self.protos
                .v
                .push(u64::from(p) << 32 | u64::from(self.chunk));
        }
    }

    #[inline(always)]
    fn add_port(&mut self, p: u16) {
        let seen = &mut self.port_seen[usize::from(p)];
        if *seen != self.chunk {
            *seen = self.chunk;
            self.ports
                .v
                .push(u64::from(p) << 32 | u64::from(self.chunk));
        }
    }

    #[inline(always)]
    fn add_v4(&mut self, a: u32) {
        let word = u64::from(a) << 32 | u64::from(self.chunk);
        // Fibonacci hashing of the address to a slot.
        let slot = (a.wrapping_mul(0x9e37_79b9) >> (32 - V4_SLOTS.trailing_zeros())) as usize;
        let seen = u64::from(self.chunk) << 32 | u64::from(a);
        if self.v4_seen[slot] != seen {
            self.v4_seen[slot] = seen;
            self.v4.v.push(word);
        }
    }

    fn add_v6(&mut self, a: u128) {
        let folded = (a as u64) ^ ((a >> 64) as u64);
        let slot = (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - V6_SLOTS.trailing_zeros()))
            as usize;
        if self.v6_seen[slot] != (a, self.chunk) {
            self.v6_seen[slot] = (a, self.chunk);
            self.v6.push((a, self.chunk));
        }
    }

    /// The index file's bytes, covering the segment's first `covered_len` bytes, whose first
    /// [`HEAD_LEN`](crate::HEAD_LEN) bytes hash to `head_hash`. The builder keeps going: it can
    /// be serialized again later (the index of a segment still being written).
    pub fn serialize(&mut self, covered_len: u64, head_hash: u64) -> Vec<u8> {
        self.protos.settle(8, &mut self.tmp);
        self.ports.settle(16, &mut self.tmp);
        self.v4.settle(32, &mut self.tmp);
        if self.v6_sorted < self.v6.len() {
            // By address, then chunk.
            self.v6.sort_unstable();
            self.v6.dedup();
            self.v6_sorted = self.v6.len();
        }
        let v6_keys = self
            .v6
            .iter()
            .zip(self.v6.iter().skip(1))
            .filter(|(a, b)| a.0 != b.0)
            .count()
            + usize::from(!self.v6.is_empty());
        let nkeys = self.protos.keys() + self.ports.keys() + self.v4.keys() + v6_keys;
        let mut out = format::write_head(
            &format::Header {
                covered_len,
                head_hash,
                packets: self.packets,
                first_ns: self.first_ns.unwrap_or(0),
                last_ns: self.last_ns,
                chunk_size: self.chunk_size,
                per: self.chunk_size / self.block_size,
            },
            &self.chunks,
            &self.wildcard,
            nkeys,
        );
        // In the file's key order: protocols, ports, IPv4, IPv6 (`Key`'s `Ord`).
        let per = self.chunk_size / self.block_size;
        self.protos.write(&mut out, per, |k| Key::Proto(k as u8));
        self.ports.write(&mut out, per, |k| Key::Port(k as u16));
        self.v4.write(&mut out, per, Key::V4);
        let mut i = 0;
        while i < self.v6.len() {
            let a = self.v6[i].0;
            let n = self.v6[i..].iter().take_while(|w| w.0 == a).count();
            write_list(
                &mut out,
                Key::V6(a),
                per,
                self.v6[i..i + n].iter().map(|w| w.1),
            );
            i += n;
        }
        format::finish(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The radix sort agrees with a stable comparison sort on the key bits, whatever the
    /// words (digits shared by all words skipped or not).
    #[test]
    fn radix_sort_is_a_stable_sort_on_the_key_bits() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for (n, spread) in [
            (10usize, 64u32),
            (1000, 3),
            (5000, 20),
            (5000, 32),
            (70_000, 32),
        ] {
            let mut v: Vec<u64> = (0..n as u64)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let key = if spread >= 32 {
                        x >> 32
                    } else {
                        (x >> 32) & ((1 << spread) - 1)
                    };
                    key << 32 | i
                })
                .collect();
            let mut want = v.clone();
            want.sort_by_key(|w| w >> 32);
            radix_sort(&mut v, 32, 64, &mut Vec::new());
            assert_eq!(v, want, "{n} words, {spread} key bits");
        }
    }

    /// Bits above `hi` do not take part in the sort (the top digit reaches past them).
    #[test]
    fn radix_sort_ignores_the_bits_above_hi() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        let mut v: Vec<u64> = (0..5000u64)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x & 0xffff_ffff_0000_0000) | i
            })
            .collect();
        let mut want = v.clone();
        want.sort_by_key(|w| (w >> 32) & 0x3_ffff);
        radix_sort(&mut v, 32, 50, &mut Vec::new());
        assert_eq!(v, want);
    }

    #[test]
    fn merge_is_the_sorted_union() {
        assert_eq!(merge(&[1, 3, 5], &[2, 3, 6, 7]), [1, 2, 3, 5, 6, 7]);
        assert_eq!(merge(&[], &[4]), [4]);
        assert_eq!(merge(&[4], &[]), [4]);
    }
}
