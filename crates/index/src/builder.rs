//! Building a segment's index as its packets are written, at a cost per packet that does not
//! depend on how many distinct keys the traffic has (issue 20).
//!
//! Per packet each key ORs the bit of the packet's **block** ([`BLOCKS_PER_CHUNK`] blocks of
//! 4 KiB per 128 KiB chunk) into the key's mask for the current **chunk**, in tables addressed
//! directly: 256 protocol masks, 65 536 port masks, a direct-mapped table of recent IPv4 (and
//! IPv6) addresses with their masks. No hash map, no allocation, no branch on whether the key
//! is new beyond the address slot's. When the chunk ends, every key touched in it gives one
//! entry `(key, chunk, mask of its blocks)` appended to a flat array per kind (an address
//! pushed out of its slot by another gives one early, merged later).
//!
//! When the index is serialized, the entries added since the last time are radix-sorted on
//! their key bits (stable, so each key's chunks stay in order), entries of the same key and
//! chunk merged (their masks ORed) and merged into the sorted entries of before: the postings
//! of every key are then runs of consecutive entries. A key's block count is the sum of its
//! masks' popcounts and its chunk count the length of its run, so the choice of list is read
//! off the run, as the format asks: its blocks when the key is rare ([`FINE_ALWAYS`] blocks at
//! most) or in few blocks of its chunks (at most [`FINE_PER_CHUNK`] per chunk on average) for
//! a list at most 1.5 times as large; else its chunks (on 64-byte frames with random source
//! ports, every port's blocks would make the index 2.3 → 5 % of the data, bench_index).
//!
//! History (bench_index, diverse 64-byte frames): a hash set and a hash map of postings per
//! chunk (session 12) cost ≈ 1 µs per packet; flat arrays of `(key, chunk)` words radix-sorted
//! (session 14) ≈ 89 ns; the same with a word per (key, 4 KiB block) for index format 2
//! (session 15) ≈ 140 ns, ≈ 3.1 words per packet to sort; a word per (key, chunk) with the
//! blocks as a mask (session 16) ≈ 2.0 per packet, the same index bytes.

use weir_decode::quick::{self, Upper};
use weir_packet::LinkType;

use crate::format::{self, ChunkInfo, NONE};
use crate::keys::{keys_of_decoded, Key};

/// Blocks per chunk (the width of a chunk's block mask).
pub(crate) const BLOCKS_PER_CHUNK: u32 = 32;
/// A key in at most this many blocks lists its blocks.
pub(crate) const FINE_ALWAYS: usize = 16;
/// A key whose blocks are at most this many times its chunks, and whose block list is at most
/// 1.5 times as long in bytes as its chunk list, lists its blocks.
pub(crate) const FINE_PER_CHUNK: usize = 4;

/// Slots of the IPv4 address table (a power of two).
const V4_SLOTS: usize = 1 << 12;
/// Slots of the IPv6 address table (a power of two).
const V6_SLOTS: usize = 1 << 8;

/// Postings of one key kind: entries `(key << 32) | chunk` and beside each the mask of the
/// chunk's blocks holding the key.
#[derive(Default)]
struct Postings {
    w: Vec<u64>,
    m: Vec<u32>,
    /// `w[..sorted]` is sorted and free of duplicates.
    sorted: usize,
}

impl Postings {
    #[inline(always)]
    fn push(&mut self, key: u32, chunk: u32, mask: u32) {
        self.w.push(u64::from(key) << 32 | u64::from(chunk));
        self.m.push(mask);
    }

    fn clear(&mut self) {
        self.w.clear();
        self.m.clear();
        self.sorted = 0;
    }

    /// Sorts the entries added since the last call (on the key's `bits` bits above the chunk),
    /// merges those of one key and chunk and merges them into the sorted ones.
    fn settle(&mut self, bits: u32, tmp: &mut Vec<u64>, tmp_m: &mut Vec<u32>) {
        let s = self.sorted;
        if s == self.w.len() {
            return;
        }
        radix_sort(
            &mut self.w[s..],
            &mut self.m[s..],
            32,
            32 + bits,
            tmp,
            tmp_m,
        );
        let mut end = s;
        for i in s..self.w.len() {
            if end > s && self.w[i] == self.w[end - 1] {
                self.m[end - 1] |= self.m[i];
            } else {
                self.w[end] = self.w[i];
                self.m[end] = self.m[i];
                end += 1;
            }
        }
        self.w.truncate(end);
        self.m.truncate(end);
        if s > 0 {
            let (w, m) = merge((&self.w[..s], &self.m[..s]), (&self.w[s..], &self.m[s..]));
            self.w = w;
            self.m = m;
        }
        self.sorted = self.w.len();
    }

    /// Writes the postings of every key (sorted entries only), `key` making a key of the high
    /// 32 bits.
    fn write(&self, out: &mut format::Writer, per: u32, key: impl Fn(u32) -> Key) {
        let v = &self.w[..self.sorted];
        let mut i = 0;
        while i < v.len() {
            let k = (v[i] >> 32) as u32;
            let n = v[i..]
                .iter()
                .take_while(|w| (**w >> 32) as u32 == k)
                .count();
            write_list(out, key(k), per, &v[i..i + n], &self.m[i..i + n]);
            i += n;
        }
    }
}

/// Writes key `k` with its entries (chunks increasing, each with its blocks' mask), as blocks or
/// as chunks (see the module doc). `per` (blocks per chunk) is a power of two; with one block
/// per chunk the list is of blocks, which are the chunks.
fn write_list(out: &mut format::Writer, k: Key, per: u32, chunks: &[u64], masks: &[u32]) {
    debug_assert!(per.is_power_of_two());
    let sh = per.trailing_zeros();
    let nchunks = chunks.len();
    let n: usize = masks.iter().map(|m| m.count_ones() as usize).sum();
    let blocks = || {
        chunks.iter().zip(masks).flat_map(move |(&w, &m)| {
            let base = (w as u32) << sh;
            Bits(u64::from(m)).map(move |b| base | b)
        })
    };
    let fine = per == 1
        || n <= FINE_ALWAYS
        || (n <= FINE_PER_CHUNK * nchunks && {
            let mut prev = 0;
            let coarse_bytes: usize = chunks
                .iter()
                .map(|&w| {
                    let c = w as u32;
                    let d = varint_len(c - prev);
                    prev = c;
                    d
                })
                .sum();
            let mut prev = 0;
            let fine_bytes: usize = blocks()
                .map(|b| {
                    let d = varint_len(b - prev);
                    prev = b;
                    d
                })
                .sum();
            2 * fine_bytes <= 3 * coarse_bytes
        });
    if fine {
        out.key(k, false, n, blocks());
    } else {
        out.key(k, true, nchunks, chunks.iter().map(|&w| w as u32));
    }
}

/// The set bits of a word (a block mask widened, or a port bitmap word), lowest first.
struct Bits(u64);

impl Iterator for Bits {
    type Item = u32;
    #[inline(always)]
    fn next(&mut self) -> Option<u32> {
        (self.0 != 0).then(|| {
            let b = self.0.trailing_zeros();
            self.0 &= self.0 - 1;
            b
        })
    }
}

/// Bytes of a varint of `d`.
fn varint_len(d: u32) -> usize {
    (32 - d.leading_zeros()).div_ceil(7).max(1) as usize
}

/// Bits per radix digit at most (256 counters: the scatter writes to at most 256 places at
/// once, which the TLB holds; 11-bit digits, three passes for an IPv4 address instead of four,
/// measured no faster on bench_index's diverse traffic in session 15).
const RADIX_BITS: u32 = 8;

/// Sorts `v` (and `m` alongside) stably on bits `lo..hi` of `v`'s words (least significant
/// digit first, digits of up to [`RADIX_BITS`] bits; the counts of every digit are taken in one
/// read of the words, and a digit all words share costs no move). `tmp` and `tmp_m` are scratch.
fn radix_sort(
    v: &mut [u64],
    m: &mut [u32],
    lo: u32,
    hi: u32,
    tmp: &mut Vec<u64>,
    tmp_m: &mut Vec<u32>,
) {
    debug_assert_eq!(v.len(), m.len());
    let key_mask = if hi - lo >= 64 {
        u64::MAX
    } else {
        (1u64 << (hi - lo)) - 1
    };
    if v.len() < 64 {
        // Small: a comparison sort on the same bits (stable).
        let mut pairs: Vec<(u64, u32)> = v.iter().copied().zip(m.iter().copied()).collect();
        pairs.sort_by_key(|p| (p.0 >> lo) & key_mask);
        for (i, (w, x)) in pairs.into_iter().enumerate() {
            v[i] = w;
            m[i] = x;
        }
        return;
    }
    let passes = (hi - lo).div_ceil(RADIX_BITS) as usize;
    let width = (hi - lo).div_ceil(passes as u32);
    let mask = (1u64 << width) - 1;
    let buckets = 1usize << width;
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
    tmp_m.clear();
    tmp_m.resize(v.len(), 0);
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
        let (src, dst, src_m, dst_m): (&[u64], &mut [u64], &[u32], &mut [u32]) = if in_tmp {
            (&tmp[..], &mut v[..], &tmp_m[..], &mut m[..])
        } else {
            (&v[..], &mut tmp[..], &m[..], &mut tmp_m[..])
        };
        for (&w, &x) in src.iter().zip(src_m) {
            let d = (((w >> lo) & key_mask) >> shift & mask) as usize;
            dst[count[d]] = w;
            dst_m[count[d]] = x;
            count[d] += 1;
        }
        in_tmp = !in_tmp;
    }
    if in_tmp {
        v.copy_from_slice(tmp);
        m.copy_from_slice(tmp_m);
    }
}

/// The sorted union of two sorted, duplicate-free entry lists (words and masks); an entry in
/// both gets the union of the masks.
fn merge(a: (&[u64], &[u32]), b: (&[u64], &[u32])) -> (Vec<u64>, Vec<u32>) {
    let n = a.0.len() + b.0.len();
    let (mut w, mut m) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let (mut i, mut j) = (0, 0);
    while i < a.0.len() && j < b.0.len() {
        let (x, y) = (a.0[i], b.0[j]);
        w.push(x.min(y));
        let mut mask = 0;
        if x <= y {
            mask |= a.1[i];
            i += 1;
        }
        if y <= x {
            mask |= b.1[j];
            j += 1;
        }
        m.push(mask);
    }
    w.extend_from_slice(&a.0[i..]);
    m.extend_from_slice(&a.1[i..]);
    w.extend_from_slice(&b.0[j..]);
    m.extend_from_slice(&b.1[j..]);
    (w, m)
}

/// Accumulates the index of one segment.
pub struct IndexBuilder {
    chunk_size: u32,
    block_size: u32,
    /// log2 of the blocks per chunk.
    sh: u32,
    /// What the index knows of each block.
    chunks: Vec<ChunkInfo>,
    wildcard: Vec<u32>,
    protos: Postings,
    ports: Postings,
    v4: Postings,
    /// IPv6 entries `(address, chunk, mask)` (fewer: sorted by comparison); `v6[..v6_sorted]`
    /// sorted and free of duplicates.
    v6: Vec<(u128, u32, u32)>,
    v6_sorted: usize,
    /// The block being filled (`u32::MAX`: none yet), its chunk and its bit in the chunk's masks.
    block: u32,
    chunk: u32,
    bit: u32,
    /// The current chunk's masks per protocol and port, and which are not zero (the first
    /// `*_n`; one more place for the unconditional write of a key already counted).
    proto_mask: [u32; 256],
    proto_touched: [u8; 257],
    proto_n: usize,
    port_mask: Box<[u32; 65536]>,
    /// One bit per port whose mask is not zero. A bitmap, not a list of the ports touched: the
    /// list's length depended on the mask just loaded (a miss in the 256 KiB table on random
    /// ports), which chained every packet's port to the previous one's miss (perf on diverse
    /// traffic: 43 % of `add` on that load). Read in port order when the chunk ends, through
    /// `port_words` (one bit per word of `port_touched` not zero: a chunk of a few packets
    /// reads a few words, not 1 024).
    port_touched: Box<[u64; 1024]>,
    port_words: [u64; 16],
    /// Recent IPv4 addresses and their masks in the current chunk (mask 0: free slot), and the
    /// slots in use.
    v4_slot: Box<[(u32, u32); V4_SLOTS]>,
    v4_touched: Vec<u16>,
    /// The same for IPv6.
    v6_slot: Box<[(u128, u32); V6_SLOTS]>,
    v6_touched: Vec<u16>,
    /// Keys of a packet the fast parser refuses.
    keys: Vec<Key>,
    tmp: Vec<u64>,
    tmp_m: Vec<u32>,
    packets: u64,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl std::fmt::Debug for IndexBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexBuilder")
            .field("chunk_size", &self.chunk_size)
            .field("blocks", &self.chunks.len())
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
            sh: per.trailing_zeros(),
            chunks: Vec::new(),
            wildcard: Vec::new(),
            protos: Postings::default(),
            ports: Postings::default(),
            v4: Postings::default(),
            v6: Vec::new(),
            v6_sorted: 0,
            block: u32::MAX,
            chunk: u32::MAX,
            bit: 0,
            proto_mask: [0; 256],
            proto_touched: [0; 257],
            proto_n: 0,
            port_mask: Box::new([0; 65536]),
            port_touched: Box::new([0; 1024]),
            port_words: [0; 16],
            v4_slot: Box::new([(0, 0); V4_SLOTS]),
            v4_touched: Vec::with_capacity(V4_SLOTS),
            v6_slot: Box::new([(0, 0); V6_SLOTS]),
            v6_touched: Vec::with_capacity(V6_SLOTS),
            keys: Vec::with_capacity(16),
            tmp: Vec::new(),
            tmp_m: Vec::new(),
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
        // The current chunk's tables back to empty (by what is in them).
        self.flush();
        for p in [&mut self.protos, &mut self.ports, &mut self.v4] {
            p.clear();
        }
        self.v6.clear();
        self.v6_sorted = 0;
        self.block = u32::MAX;
        self.chunk = u32::MAX;
        self.bit = 0;
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
        let block = (offset / u64::from(self.block_size)).min(u64::from(u32::MAX - 1)) as u32;
        if block != self.block {
            self.start_block(block);
        }
        let c = &mut self.chunks[block as usize];
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
                if !keys_of_decoded(link, data, &mut keys) && self.wildcard.last() != Some(&block) {
                    self.wildcard.push(block);
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

    /// Moves on to block `block` (later than the current one), ending the chunk when it is in
    /// the next.
    #[cold]
    fn start_block(&mut self, block: u32) {
        while self.chunks.len() <= block as usize {
            self.chunks.push(ChunkInfo {
                first: NONE,
                min_ns: u64::MAX,
                max_ns: 0,
            });
        }
        let chunk = block >> self.sh;
        if chunk != self.chunk {
            self.flush();
            self.chunk = chunk;
        }
        self.block = block;
        self.bit = 1 << (block & ((1 << self.sh) - 1));
    }

    /// Appends an entry for every key of the current chunk's tables and empties them.
    fn flush(&mut self) {
        let c = self.chunk;
        for &p in &self.proto_touched[..self.proto_n] {
            let m = std::mem::take(&mut self.proto_mask[usize::from(p)]);
            self.protos.push(u32::from(p), c, m);
        }
        self.proto_n = 0;
        for (j, summary) in self.port_words.iter_mut().enumerate() {
            for w in Bits(std::mem::take(summary)) {
                let i = j << 6 | w as usize;
                for b in Bits(std::mem::take(&mut self.port_touched[i])) {
                    let p = i << 6 | b as usize;
                    let m = std::mem::take(&mut self.port_mask[p]);
                    self.ports.push(p as u32, c, m);
                }
            }
        }
        for &s in &self.v4_touched {
            let (a, m) = std::mem::take(&mut self.v4_slot[usize::from(s)]);
            self.v4.push(a, c, m);
        }
        self.v4_touched.clear();
        for &s in &self.v6_touched {
            let (a, m) = std::mem::take(&mut self.v6_slot[usize::from(s)]);
            self.v6.push((a, c, m));
        }
        self.v6_touched.clear();
    }

    #[inline(always)]
    fn add_proto(&mut self, p: u8) {
        let m = &mut self.proto_mask[usize::from(p)];
        // Noted as touched whether new or not (no branch); counted only when new.
        self.proto_touched[self.proto_n] = p;
        self.proto_n += usize::from(*m == 0);
        *m |= self.bit;
    }

    #[inline(always)]
    fn add_port(&mut self, p: u16) {
        let p = usize::from(p);
        self.port_mask[p] |= self.bit;
        self.port_touched[p >> 6] |= 1 << (p & 63);
        self.port_words[p >> 12] |= 1 << ((p >> 6) & 63);
    }

    #[inline(always)]
    fn add_v4(&mut self, a: u32) {
        // Fibonacci hashing of the address to a slot.
        let slot = (a.wrapping_mul(0x9e37_79b9) >> (32 - V4_SLOTS.trailing_zeros())) as usize;
        let s = &mut self.v4_slot[slot];
        if s.1 != 0 && s.0 == a {
            s.1 |= self.bit;
        } else {
            self.v4_other(slot, a);
        }
    }

    /// IPv4 address `a` whose slot is free or holds another address (which then gives its
    /// entry now).
    fn v4_other(&mut self, slot: usize, a: u32) {
        let (old, m) = self.v4_slot[slot];
        if m == 0 {
            self.v4_touched.push(slot as u16);
        } else {
            self.v4.push(old, self.chunk, m);
        }
        self.v4_slot[slot] = (a, self.bit);
    }

    fn add_v6(&mut self, a: u128) {
        let folded = (a as u64) ^ ((a >> 64) as u64);
        let slot = (folded.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - V6_SLOTS.trailing_zeros()))
            as usize;
        let (old, m) = self.v6_slot[slot];
        if m != 0 && old == a {
            self.v6_slot[slot].1 |= self.bit;
            return;
        }
        if m == 0 {
            self.v6_touched.push(slot as u16);
        } else {
            self.v6.push((old, self.chunk, m));
        }
        self.v6_slot[slot] = (a, self.bit);
    }

    /// The index file's bytes, covering the segment's first `covered_len` bytes, whose first
    /// [`HEAD_LEN`](crate::HEAD_LEN) bytes hash to `head_hash`. The builder keeps going: it can
    /// be serialized again later (the index of a segment still being written).
    pub fn serialize(&mut self, covered_len: u64, head_hash: u64) -> Vec<u8> {
        // The current chunk's keys so far (packets added later in it give a second entry of
        // the same key and chunk, merged by the next settle).
        self.flush();
        self.protos.settle(8, &mut self.tmp, &mut self.tmp_m);
        self.ports.settle(16, &mut self.tmp, &mut self.tmp_m);
        self.v4.settle(32, &mut self.tmp, &mut self.tmp_m);
        if self.v6_sorted < self.v6.len() {
            // By address, then chunk; entries of one address and chunk merged.
            self.v6.sort_unstable_by_key(|e| (e.0, e.1));
            let mut end = 0;
            for i in 0..self.v6.len() {
                let e = self.v6[i];
                if end > 0 && (self.v6[end - 1].0, self.v6[end - 1].1) == (e.0, e.1) {
                    self.v6[end - 1].2 |= e.2;
                } else {
                    self.v6[end] = e;
                    end += 1;
                }
            }
            self.v6.truncate(end);
            self.v6_sorted = self.v6.len();
        }
        let per = 1u32 << self.sh;
        let mut out = format::Writer::default();
        // In the file's key order: protocols, ports, IPv4, IPv6 (`Key`'s `Ord`).
        self.protos.write(&mut out, per, |k| Key::Proto(k as u8));
        self.ports.write(&mut out, per, |k| Key::Port(k as u16));
        self.v4.write(&mut out, per, Key::V4);
        let mut i = 0;
        let (mut w, mut m) = (Vec::new(), Vec::new());
        while i < self.v6.len() {
            let a = self.v6[i].0;
            let n = self.v6[i..].iter().take_while(|e| e.0 == a).count();
            w.clear();
            m.clear();
            for e in &self.v6[i..i + n] {
                w.push(u64::from(e.1));
                m.push(e.2);
            }
            write_list(&mut out, Key::V6(a), per, &w, &m);
            i += n;
        }
        out.finish(
            &format::Header {
                covered_len,
                head_hash,
                packets: self.packets,
                first_ns: self.first_ns.unwrap_or(0),
                last_ns: self.last_ns,
                chunk_size: self.chunk_size,
                per,
            },
            &self.chunks,
            &self.wildcard,
        )
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
            let mut m: Vec<u32> = v.iter().map(|w| !(*w as u32)).collect();
            radix_sort(&mut v, &mut m, 32, 64, &mut Vec::new(), &mut Vec::new());
            assert_eq!(v, want, "{n} words, {spread} key bits");
            // The masks moved with their words.
            assert!(v.iter().zip(&m).all(|(w, m)| *m == !(*w as u32)));
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
        let mut m = vec![0; v.len()];
        radix_sort(&mut v, &mut m, 32, 50, &mut Vec::new(), &mut Vec::new());
        assert_eq!(v, want);
    }

    #[test]
    fn merge_is_the_sorted_union_with_masks_ored() {
        assert_eq!(
            merge((&[1, 3, 5], &[1, 2, 4]), (&[2, 3, 6, 7], &[8, 16, 32, 64])),
            (vec![1, 2, 3, 5, 6, 7], vec![1, 8, 2 | 16, 4, 32, 64])
        );
        assert_eq!(merge((&[], &[]), (&[4], &[1])), (vec![4], vec![1]));
        assert_eq!(merge((&[4], &[1]), (&[], &[])), (vec![4], vec![1]));
    }
}
