//! Building a segment's index as its packets are written, at a cost per packet that does not
//! depend on how many distinct keys the traffic has (issue 20).
//!
//! Per packet each key ORs the bit of the packet's **block** ([`BLOCKS_PER_CHUNK`] blocks of
//! 4 KiB per 128 KiB chunk) into the key's mask for the current **chunk**, in tables addressed
//! directly: 256 protocol masks, 65 536 port masks, a direct-mapped table of recent IPv4 (and
//! IPv6) addresses with their masks.
//! No hash map, no allocation, no branch on whether the key is new beyond the address slot's.
//! When the chunk ends, every key touched in it gives one entry `(key id, chunk, mask of its
//! blocks)` appended to a flat array per kind (an address pushed out of its slot by another
//! gives one early, merged later). The ports from [`PortGrain::exact_below`] on give their own
//! entries when the chunk has at most [`PortGrain::chunk_exact_ports`] distinct such ports
//! (real traffic: a few dozen), else one entry per bucket of them (random source ports: a
//! thousand and more per chunk of 64-byte frames), under the bucket's id (format 5). The key
//! id of a protocol or port is its value; an IPv4 address gets a dense number from a table of
//! the segment's addresses ([`V4Ids`]), looked up when the address takes a slot of the
//! address table (it keeps the slot, and its number, from chunk to chunk).
//!
//! When the index is serialized, the entries are grouped by key id with one counting pass
//! (stable, so each key's chunks stay in order; entries of the same key and chunk, next to
//! each other, merged with their masks ORed): the postings of every key are then runs of
//! consecutive entries, written in key order (the addresses' ids sorted by address, a sort of
//! the distinct addresses only). A key's block count is the sum of its
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
//! blocks as a mask (session 16) ≈ 2.0 per packet, the same index bytes; ports from 1 024 on
//! per bucket of 64 and a counting pass by key id instead of the radix sort (session 18):
//! ≈ 134 → ≈ 103 ns per packet (serializing ≈ 82 → ≈ 48), the index 2.51 → 1.34 % of the data;
//! the addresses' numbers kept in their slots, 16 384 slots, an entry's chunk and mask one
//! word, write_list's size passes one (session 19): see bench/README.md, issue 20, session 19.

use weir_decode::quick::{self, Upper};
use weir_packet::LinkType;

use crate::format::{self, varint_len, ChunkInfo, Listed, NONE};
use crate::keys::{keys_of_decoded, Key, PortGrain};

/// Blocks per chunk (the width of a chunk's block mask).
pub(crate) const BLOCKS_PER_CHUNK: u32 = 32;
/// A key in at most this many blocks lists its blocks.
pub(crate) const FINE_ALWAYS: usize = 16;
/// A key whose blocks are at most this many times its chunks, and whose block list is at most
/// 1.5 times as long in bytes as its chunk list, lists its blocks.
pub(crate) const FINE_PER_CHUNK: usize = 4;

/// Slots of the IPv4 address table (a power of two; 4 096 made the 4 352 addresses of
/// bench_index's diverse traffic push each other out, ≈ 5 % of its time in `v4_other`).
const V4_SLOTS: usize = 1 << 14;
/// Slots of the IPv6 address table (a power of two).
const V6_SLOTS: usize = 1 << 8;

/// Postings of one key kind: entries `(key id, chunk, mask of the chunk's blocks holding the
/// key)` in the order added (chunks never decrease), and one more than the largest key id. The
/// key id is the key's value for protocols and ports, a dense number ([`V4Ids`]) for addresses.
#[derive(Default)]
struct Postings {
    id: Vec<u32>,
    /// Chunk and mask, one word ([`entry`]): the grouping scatters one word per entry, not two.
    cm: Vec<u64>,
    /// Key ids are below this.
    ids: u32,
}

/// An entry's chunk and mask as one word (chunk high, so the words of one key sort by chunk).
#[inline(always)]
fn entry(chunk: u32, mask: u32) -> u64 {
    u64::from(chunk) << 32 | u64::from(mask)
}

impl Postings {
    #[inline(always)]
    fn push(&mut self, id: u32, chunk: u32, mask: u32) {
        self.ids = self.ids.max(id + 1);
        self.id.push(id);
        self.cm.push(entry(chunk, mask));
    }

    fn clear(&mut self) {
        self.id.clear();
        self.cm.clear();
        self.ids = 0;
    }

    /// Where the entries of chunks `c0` and later start (chunks never decrease: a binary
    /// search).
    fn since(&self, c0: u32) -> usize {
        self.cm.partition_point(|&x| ((x >> 32) as u32) < c0)
    }

    /// Groups the entries from `i0` on by key id into `g` (a counting sort: a pass counting
    /// each id's entries, then one stable pass, so each key's chunks stay in order).
    fn group(&self, i0: usize, g: &mut Grouped) {
        g.end.clear();
        g.end.resize(self.ids as usize, 0);
        let ids = &self.id[i0..];
        for &id in ids {
            g.end[id as usize] += 1;
        }
        let mut at = 0;
        for e in &mut g.end {
            let n = *e;
            *e = at;
            at += n;
        }
        g.cm.clear();
        g.cm.resize(ids.len(), 0);
        for (&id, &cm) in ids.iter().zip(&self.cm[i0..]) {
            let p = &mut g.end[id as usize];
            g.cm[*p as usize] = cm;
            *p += 1;
        }
    }
}

/// Entries grouped by key id: those of id `d` are at `end[d - 1]..end[d]` (from 0 for id 0).
#[derive(Default)]
struct Grouped {
    end: Vec<u32>,
    /// Chunk and mask ([`entry`]).
    cm: Vec<u64>,
    /// One key's entries, those of one chunk merged (scratch).
    run_c: Vec<u32>,
    run_m: Vec<u32>,
}

impl Grouped {
    /// Writes the list of key id `d` (nothing when it has no entry) as key `k`, its chunks
    /// counted from chunk `c0`.
    fn write(&mut self, out: &mut format::Writer, ch: Choice, c0: u32, d: usize, k: Listed) {
        let s = if d == 0 { 0 } else { self.end[d - 1] as usize };
        let e = self.end[d] as usize;
        if s == e {
            return;
        }
        self.run_c.clear();
        self.run_m.clear();
        for &cm in &self.cm[s..e] {
            let (c, m) = ((cm >> 32) as u32 - c0, cm as u32);
            // Entries of one chunk (an address pushed out of its slot and back, the index
            // serialized mid-chunk) are next to each other: one entry, masks ORed.
            if self.run_c.last() == Some(&c) {
                *self.run_m.last_mut().expect("one per chunk") |= m;
            } else {
                self.run_c.push(c);
                self.run_m.push(m);
            }
        }
        write_list(out, k, ch, &self.run_c, &self.run_m);
    }
}

/// Dense numbers for a segment's IPv4 addresses, in the order first seen: an open-addressing
/// table (Fibonacci hashing, linear probing) grown at half full. Looked up once per (address,
/// chunk) entry, not per packet; the numbers let the entries be grouped by one counting pass
/// (session 17 radix-sorted them on the 32 address bits: four scatter passes).
#[derive(Default)]
struct V4Ids {
    /// `(address, id + 1)`; id + 1 = 0: free.
    slot: Vec<(u32, u32)>,
    /// The address of each id.
    addr: Vec<u32>,
}

impl V4Ids {
    #[inline(always)]
    fn id(&mut self, a: u32) -> u32 {
        if self.slot.is_empty() {
            self.slot = vec![(0, 0); 1 << 12];
        }
        let mask = self.slot.len() - 1;
        let sh = 32 - self.slot.len().trailing_zeros();
        let mut i = (a.wrapping_mul(0x9e37_79b9) >> sh) as usize;
        loop {
            let (x, id1) = self.slot[i];
            if id1 == 0 {
                break;
            }
            if x == a {
                return id1 - 1;
            }
            i = (i + 1) & mask;
        }
        let id = self.addr.len() as u32;
        self.addr.push(a);
        self.slot[i] = (a, id + 1);
        if self.addr.len() * 2 > self.slot.len() {
            self.grow();
        }
        id
    }

    #[cold]
    fn grow(&mut self) {
        let n = self.slot.len() * 2;
        self.slot.clear();
        self.slot.resize(n, (0, 0));
        let (mask, sh) = (n - 1, 32 - n.trailing_zeros());
        for (id, &a) in self.addr.iter().enumerate() {
            let mut i = (a.wrapping_mul(0x9e37_79b9) >> sh) as usize;
            while self.slot[i].1 != 0 {
                i = (i + 1) & mask;
            }
            self.slot[i] = (a, id as u32 + 1);
        }
    }

    fn clear(&mut self) {
        self.slot.fill((0, 0));
        self.addr.clear();
    }
}

/// How a key's list is chosen between its blocks and its chunks (see the module doc).
#[derive(Clone, Copy)]
pub(crate) struct Choice {
    /// Blocks per chunk (a power of two; with one, the list is of blocks, which are chunks).
    pub per: u32,
    /// For a part: blocks more often (a block list up to 3 times the chunk list's bytes, not
    /// 1.5), so that a key listed by blocks in
    /// the whole segment is listed by blocks in each part, and the final index joined from the
    /// parts copies its blocks (`merge.rs`: it decides again on the joined sums; a key listed
    /// by chunks in one part can only be listed by chunks in the final index).
    pub part: bool,
}

/// Writes key `k` with its entries (chunks increasing, each with its blocks' mask), as blocks or
/// as chunks (see the module doc and [`Choice`]).
fn write_list(out: &mut format::Writer, k: Listed, ch: Choice, chunks: &[u32], masks: &[u32]) {
    let per = ch.per;
    debug_assert!(per.is_power_of_two());
    let sh = per.trailing_zeros();
    let nchunks = chunks.len();
    let n: usize = masks.iter().map(|m| m.count_ones() as usize).sum();
    let blocks = || {
        chunks.iter().zip(masks).flat_map(move |(&c, &m)| {
            let base = c << sh;
            Bits(u64::from(m)).map(move |b| base | b)
        })
    };
    // Lenient for addresses only: a host's blocks are what a narrow extraction reads; a port or
    // bucket listed by chunks in one part (so in the final index) costs little precision, and
    // lenient ports and buckets made the parts 1.7 times as large and the final index as dear
    // to join as to write whole (the record bench).
    let lenient = ch.part && matches!(k, Listed::Key(Key::V4(_) | Key::V6(_)));
    let (per_chunk, num, den) = if lenient {
        (FINE_PER_CHUNK, 3, 1)
    } else {
        (FINE_PER_CHUNK, 3, 2)
    };
    // Both lists' varint bytes in one pass over the entries: a chunk's delta from the last;
    // its first block's delta from the last block, then one byte per other block of its mask
    // (gaps below 32 blocks).
    let sums = || {
        let (mut coarse_bytes, mut fine_bytes) = (0, 0);
        let (mut prev_c, mut prev_b) = (0, 0);
        for (&c, &m) in chunks.iter().zip(masks) {
            coarse_bytes += varint_len(c - prev_c);
            prev_c = c;
            let first = c << sh | m.trailing_zeros();
            fine_bytes += varint_len(first - prev_b) + (m.count_ones() as usize).saturating_sub(1);
            prev_b = c << sh | (31 - m.leading_zeros());
        }
        (coarse_bytes, fine_bytes)
    };
    let mut summed = None;
    let fine = per == 1
        || n <= FINE_ALWAYS
        || (n <= per_chunk * nchunks && {
            let (coarse_bytes, fine_bytes) = *summed.insert(sums());
            den * fine_bytes <= num * coarse_bytes
        });
    if fine {
        match out.cut_chunk() {
            Some(cut) if nchunks > 0 => {
                let f = noted_stats(chunks, masks, sh, cut, summed.unwrap_or_else(sums));
                out.key_of_blocks(k, n, blocks(), f);
            }
            _ => out.key(k, false, n, blocks()),
        }
    } else {
        out.key(k, true, nchunks, chunks.iter().copied());
    }
}

/// What the join at the close needs of a part's list of blocks (`merge::FineStats`: the
/// same as `merge::decode` counts when it reads the list) for its chunks below `cut`, from
/// the key's `chunks` and `masks` and `sums`, the bytes [`write_list`] counts over all of
/// them: per chunk instead of per block, and the sums not counted twice (session 21).
fn noted_stats(
    chunks: &[u32],
    masks: &[u32],
    sh: u32,
    cut: u32,
    sums: (usize, usize),
) -> crate::format::merge::FineStats {
    let kept = chunks.partition_point(|&c| c < cut);
    if kept == 0 {
        return Default::default();
    }
    let first_block = |i: usize| chunks[i] << sh | masks[i].trailing_zeros();
    let last_block = |i: usize| chunks[i] << sh | (31 - masks[i].leading_zeros());
    // The sums less the first chunk's and first block's deltas from 0, and less the chunks cut
    // (only the last can be: a part's entries end at the chunk the next part starts at).
    let (mut coarse, mut fine) = (
        sums.0 - varint_len(chunks[0]),
        sums.1 - varint_len(first_block(0)),
    );
    for i in kept..chunks.len() {
        coarse -= varint_len(chunks[i] - chunks[i - 1]);
        fine -= varint_len(first_block(i) - last_block(i - 1))
            + (masks[i].count_ones() as usize).saturating_sub(1);
    }
    crate::format::merge::FineStats {
        chunks: kept as u64,
        first_chunk: u64::from(chunks[0]),
        last_chunk: u64::from(chunks[kept - 1]),
        coarse,
        fine,
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

/// Masks of one chunk by a 16-bit number (a port, or a bucket of ports), and which are not zero.
struct PortMasks {
    mask: Box<[u32; 65536]>,
    /// One bit per number whose mask is not zero. A bitmap, not a list of the numbers touched:
    /// the list's length depended on the mask just loaded (a miss in the 256 KiB table on
    /// random ports), which chained every packet's port to the previous one's miss (perf on
    /// diverse traffic: 43 % of `add` on that load). Read in order when the chunk ends, through
    /// `words` (one bit per word of `touched` not zero: a chunk of a few packets reads a few
    /// words, not 1 024).
    touched: Box<[u64; 1024]>,
    words: [u64; 16],
}

impl PortMasks {
    fn new() -> PortMasks {
        PortMasks {
            mask: Box::new([0; 65536]),
            touched: Box::new([0; 1024]),
            words: [0; 16],
        }
    }

    #[inline(always)]
    fn or(&mut self, i: usize, bit: u32) {
        self.mask[i] |= bit;
        self.touched[i >> 6] |= 1 << (i & 63);
        self.words[i >> 12] |= 1 << ((i >> 6) & 63);
    }

    /// Calls `f` with every number whose mask is not zero and its mask, in increasing order,
    /// and empties the table.
    fn drain(&mut self, mut f: impl FnMut(u32, u32)) {
        for (j, summary) in self.words.iter_mut().enumerate() {
            for w in Bits(std::mem::take(summary)) {
                let i = j << 6 | w as usize;
                for b in Bits(std::mem::take(&mut self.touched[i])) {
                    let p = i << 6 | b as usize;
                    f(p as u32, std::mem::take(&mut self.mask[p]));
                }
            }
        }
    }
}

/// Accumulates the index of one segment.
pub struct IndexBuilder {
    chunk_size: u32,
    block_size: u32,
    /// How finely ports are keyed.
    grain: PortGrain,
    /// log2 of the blocks per chunk.
    sh: u32,
    /// What the index knows of each block.
    chunks: Vec<ChunkInfo>,
    wildcard: Vec<u32>,
    protos: Postings,
    ports: Postings,
    /// Port buckets' entries (id: the bucket's number, its first port `>> bucket_shift`).
    buckets: Postings,
    v4: Postings,
    v4_ids: V4Ids,
    /// IPv6 entries `(address, chunk, mask)` in the order added (fewer: sorted by comparison
    /// when written).
    v6: Vec<(u128, u32, u32)>,
    /// The block being filled (`u32::MAX`: none yet), its chunk and its bit in the chunk's masks.
    block: u32,
    chunk: u32,
    bit: u32,
    /// The current chunk's masks per protocol and port, and which are not zero (the first
    /// `*_n`; one more place for the unconditional write of a key already counted).
    proto_mask: [u32; 256],
    proto_touched: [u8; 257],
    proto_n: usize,
    /// The current chunk's exact port masks.
    port_masks: PortMasks,
    /// Ports from here on may be bucketed (65 536: none).
    split: u32,
    /// The current chunk's masks per bucket of the ports from `split` on (by bucket number),
    /// the ports themselves in the order added (`port << 5 | the block's bit`), one bit per
    /// such port seen, and how many distinct ones. Per packet a bucket's mask (4 KiB of table:
    /// in the first-level cache) and an append, not a random port's mask in the 256 KiB table;
    /// the exact masks are made from the list at the chunk's end only when it has few ports.
    bucket_masks: PortMasks,
    wide: Vec<u32>,
    wide_seen: Box<[u64; 1024]>,
    wide_n: u32,
    /// The current block's number within its chunk.
    bit_ix: u32,
    /// Recent IPv4 addresses and their masks in the current chunk (mask 0: not in this chunk),
    /// each address's number + 1 ([`V4Ids`]; 0: the slot has held no address in this segment),
    /// and the slots touched in this chunk (the first `v4_n`; one more place for the
    /// unconditional write of a slot already counted). An address stays in its slot from chunk
    /// to chunk with its number, so the numbers are looked up when an address takes a slot,
    /// not once per address and chunk (bench_index, diverse traffic: ≈ 1 lookup per packet).
    v4_slot: Box<[(u32, u32); V4_SLOTS]>,
    v4_slot_id: Box<[u32; V4_SLOTS]>,
    v4_touched: Box<[u16; V4_SLOTS + 1]>,
    v4_n: usize,
    /// The same for IPv6.
    v6_slot: Box<[(u128, u32); V6_SLOTS]>,
    v6_touched: Vec<u16>,
    /// Keys of a packet the fast parser refuses.
    keys: Vec<Key>,
    grouped: Grouped,
    /// The lists of the parts written so far (`part.rs`).
    pieces: part::Pieces,
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
    /// An empty index with chunks of `chunk_size` bytes of segment file, ports keyed as
    /// [`PortGrain::DEFAULT`] says with its exact ports per chunk scaled to the chunk (one per
    /// 512 bytes: 256 in a 128 KiB chunk), so the exact lists' share of the data stays the same
    /// at any chunk size.
    pub fn new(chunk_size: u32) -> IndexBuilder {
        let grain = PortGrain {
            chunk_exact_ports: chunk_size / 512,
            ..PortGrain::DEFAULT
        };
        IndexBuilder::with_port_grain(chunk_size, grain)
    }

    /// An empty index with chunks of `chunk_size` bytes, keying ports as `grain` says
    /// ([`PortGrain::DEFAULT`] for [`new`](Self::new); [`PortGrain::EXACT`] keys every port).
    ///
    /// # Panics
    /// When `grain` is not [valid](PortGrain::is_valid) or the chunks are under 4 KiB.
    pub fn with_port_grain(chunk_size: u32, grain: PortGrain) -> IndexBuilder {
        assert!(chunk_size >= 4096, "chunks of at least 4 KiB");
        assert!(grain.is_valid(), "port grain {grain:?}");
        // A chunk size the blocks do not divide (not a power of two): one block per chunk.
        let per = if chunk_size % BLOCKS_PER_CHUNK == 0 {
            BLOCKS_PER_CHUNK
        } else {
            1
        };
        IndexBuilder {
            chunk_size,
            block_size: chunk_size / per,
            grain,
            sh: per.trailing_zeros(),
            chunks: Vec::new(),
            wildcard: Vec::new(),
            protos: Postings::default(),
            ports: Postings::default(),
            buckets: Postings::default(),
            v4: Postings::default(),
            v4_ids: V4Ids::default(),
            v6: Vec::new(),
            block: u32::MAX,
            chunk: u32::MAX,
            bit: 0,
            proto_mask: [0; 256],
            proto_touched: [0; 257],
            proto_n: 0,
            port_masks: PortMasks::new(),
            split: if grain.bucket_shift == 0 {
                1 << 16
            } else {
                grain.exact_below
            },
            bucket_masks: PortMasks::new(),
            wide: Vec::with_capacity(chunk_size as usize / 16),
            wide_seen: Box::new([0; 1024]),
            wide_n: 0,
            bit_ix: 0,
            v4_slot: Box::new([(0, 0); V4_SLOTS]),
            v4_slot_id: Box::new([0; V4_SLOTS]),
            v4_touched: Box::new([0; V4_SLOTS + 1]),
            v4_n: 0,
            v6_slot: Box::new([(0, 0); V6_SLOTS]),
            v6_touched: Vec::with_capacity(V6_SLOTS),
            keys: Vec::with_capacity(16),
            grouped: Grouped::default(),
            pieces: part::Pieces::default(),
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
        for p in [
            &mut self.protos,
            &mut self.ports,
            &mut self.buckets,
            &mut self.v4,
        ] {
            p.clear();
        }
        self.v4_ids.clear();
        self.pieces.clear();
        // The numbers start again: no slot holds a numbered address.
        self.v4_slot_id.fill(0);
        self.v6.clear();
        self.block = u32::MAX;
        self.chunk = u32::MAX;
        self.bit = 0;
        self.packets = 0;
        self.first_ns = None;
        self.last_ns = 0;
    }

    /// How finely this builder keys ports.
    pub fn port_grain(&self) -> PortGrain {
        self.grain
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
        self.bit_ix = block & ((1 << self.sh) - 1);
        self.bit = 1 << self.bit_ix;
    }

    /// Appends an entry for every key of the current chunk's tables and empties them.
    fn flush(&mut self) {
        let c = self.chunk;
        for &p in &self.proto_touched[..self.proto_n] {
            let m = std::mem::take(&mut self.proto_mask[usize::from(p)]);
            self.protos.push(u32::from(p), c, m);
        }
        self.proto_n = 0;
        self.flush_ports();
        for &s in &self.v4_touched[..self.v4_n] {
            let s = usize::from(s);
            let m = std::mem::take(&mut self.v4_slot[s].1);
            self.v4.push(self.v4_slot_id[s] - 1, c, m);
        }
        self.v4_n = 0;
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

    /// The current chunk's port entries: exact below [`PortGrain::exact_below`], and from
    /// there on exact too when the chunk has at most [`PortGrain::chunk_exact_ports`] distinct
    /// such ports, else per bucket (in port order, so a bucket's ports are consecutive).
    fn flush_ports(&mut self) {
        let c = self.chunk;
        if self.wide_n <= self.grain.chunk_exact_ports {
            // Few: their exact masks from the list; the buckets only emptied.
            for &e in &self.wide {
                self.port_masks.or((e >> 5) as usize, 1 << (e & 31));
            }
            self.bucket_masks.drain(|_, _| {});
        } else {
            let buckets = &mut self.buckets;
            self.bucket_masks.drain(|b, m| buckets.push(b, c, m));
        }
        for &e in &self.wide {
            self.wide_seen[(e >> 11) as usize] = 0;
        }
        self.wide.clear();
        self.wide_n = 0;
        let ports = &mut self.ports;
        self.port_masks.drain(|p, m| ports.push(p, c, m));
    }

    #[inline(always)]
    fn add_port(&mut self, p: u16) {
        if u32::from(p) < self.split {
            self.port_masks.or(usize::from(p), self.bit);
            return;
        }
        self.bucket_masks
            .or(usize::from(p >> self.grain.bucket_shift), self.bit);
        let e = u32::from(p) << 5 | self.bit_ix;
        // The same port in the same block as the last: nothing new (one flow's packets append
        // nothing: without this check bench_index one-flow cost ≈ 37 ns per packet, with it ≈ 33,
        // main's ≈ 30 in the same sitting).
        if self.wide.last() != Some(&e) {
            self.wide.push(e);
            let w = &mut self.wide_seen[usize::from(p >> 6)];
            let b = 1u64 << (p & 63);
            self.wide_n += u32::from(*w & b == 0);
            *w |= b;
        }
    }

    #[inline(always)]
    fn add_v4(&mut self, a: u32) {
        // Fibonacci hashing of the address to a slot.
        let slot = (a.wrapping_mul(0x9e37_79b9) >> (32 - V4_SLOTS.trailing_zeros())) as usize;
        let s = &mut self.v4_slot[slot];
        if s.0 == a && (s.1 != 0 || self.v4_slot_id[slot] != 0) {
            // Noted as touched whether new in this chunk or not (no branch); counted when new.
            self.v4_touched[self.v4_n] = slot as u16;
            self.v4_n += usize::from(s.1 == 0);
            s.1 |= self.bit;
        } else {
            self.v4_other(slot, a);
        }
    }

    /// IPv4 address `a` whose slot holds another address (which then gives its entry now, if
    /// it is in this chunk) or none yet.
    fn v4_other(&mut self, slot: usize, a: u32) {
        let m = self.v4_slot[slot].1;
        if m == 0 {
            self.v4_touched[self.v4_n] = slot as u16;
            self.v4_n += 1;
        } else {
            self.v4.push(self.v4_slot_id[slot] - 1, self.chunk, m);
        }
        self.v4_slot[slot] = (a, self.bit);
        self.v4_slot_id[slot] = self.v4_ids.id(a) + 1;
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
    /// be serialized again later (the index of a segment still being written). After parts
    /// ([`serialize_part`](Self::serialize_part)) from the segment's start on, it is their
    /// lists joined with those of the chunks since the last part (`merge.rs`): the entries of
    /// the parts' chunks are not grouped and encoded again.
    pub fn serialize(&mut self, covered_len: u64, head_hash: u64) -> Vec<u8> {
        // The current chunk's keys so far (packets added later in it give a second entry of
        // the same key and chunk, merged when grouped).
        self.flush();
        let h = self.header(
            covered_len,
            head_hash,
            self.first_ns.unwrap_or(0),
            self.last_ns,
        );
        let w = match self.merged_parts() {
            Some(w) => w,
            None => self.write_lists(0, None),
        };
        w.finish(&h, &self.chunks, &self.wildcard)
    }

    /// The header of an index of this builder.
    fn header(&self, covered_len: u64, head_hash: u64, first: u64, last: u64) -> format::Header {
        format::Header {
            covered_len,
            head_hash,
            packets: self.packets,
            first_ns: first,
            last_ns: last,
            chunk_size: self.chunk_size,
            per: 1 << self.sh,
            ports: self.grain,
        }
    }

    /// The key tables and lists of the entries of chunks `c0` and later, their chunks counted
    /// from `c0` (0: the whole index), for a part when `part` is `Some(end)` ([`Choice`]),
    /// noting what the join at the close needs of its lists with their items from chunk `end`
    /// on cut off (the next part's; `u32::MAX`: none). The current chunk's keys must have been
    /// flushed.
    pub(crate) fn write_lists(&mut self, c0: u32, part: Option<u32>) -> format::Writer {
        let per = Choice {
            per: 1 << self.sh,
            part: part.is_some(),
        };
        let mut out = match part {
            Some(end) => format::Writer::noting(c0, end, self.sh),
            None => format::Writer::default(),
        };
        // In the file's key order: protocols, ports, IPv4, IPv6 (`Key`'s `Ord`).
        let g = &mut self.grouped;
        self.protos.group(self.protos.since(c0), g);
        for p in 0..self.protos.ids as usize {
            g.write(&mut out, per, c0, p, Key::Proto(p as u8).into());
        }
        self.ports.group(self.ports.since(c0), g);
        for p in 0..self.ports.ids as usize {
            g.write(&mut out, per, c0, p, Key::Port(p as u16).into());
        }
        self.v4.group(self.v4.since(c0), g);
        // The ids of the addresses with entries, in address order.
        let mut at = 0;
        let mut order: Vec<u32> = (0..self.v4.ids)
            .filter(|&d| {
                let (s, e) = (at, g.end[d as usize]);
                at = e;
                s != e
            })
            .collect();
        order.sort_unstable_by_key(|&d| self.v4_ids.addr[d as usize]);
        for d in order {
            let a = self.v4_ids.addr[d as usize];
            g.write(&mut out, per, c0, d as usize, Key::V4(a).into());
        }
        // IPv6 (fewer): the entries since `c0` sorted by address, then chunk; those of one
        // address and chunk merged.
        let v0 = self.v6.partition_point(|e| e.1 < c0);
        let mut v6: Vec<(u128, u32, u32)> = self.v6[v0..]
            .iter()
            .map(|&(a, c, m)| (a, c - c0, m))
            .collect();
        v6.sort_unstable_by_key(|e| (e.0, e.1));
        let (mut w, mut m) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < v6.len() {
            let a = v6[i].0;
            w.clear();
            m.clear();
            while i < v6.len() && v6[i].0 == a {
                let (c, mask) = (v6[i].1, v6[i].2);
                if w.last() == Some(&c) {
                    *m.last_mut().expect("one per chunk") |= mask;
                } else {
                    w.push(c);
                    m.push(mask);
                }
                i += 1;
            }
            write_list(&mut out, Key::V6(a).into(), per, &w, &m);
        }
        // The port buckets, after every key (the fifth table).
        self.buckets.group(self.buckets.since(c0), g);
        for b in 0..self.buckets.ids as usize {
            let first = (b << self.grain.bucket_shift) as u16;
            g.write(&mut out, per, c0, b, Listed::Bucket(first));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64 words.
    fn words(mut x: u64, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            })
            .collect()
    }

    /// An address keeps its number through the table's growth; distinct addresses get
    /// distinct numbers, in the order first seen (a plain map as the oracle).
    #[test]
    fn v4_ids_are_dense_and_stable() {
        let mut ids = V4Ids::default();
        let mut map = std::collections::HashMap::new();
        for w in words(7, 50_000) {
            // 20 000 distinct addresses, 0 among them.
            let a = (w % 20_000) as u32 * 0x0001_0003;
            let next = map.len() as u32;
            let want = *map.entry(a).or_insert(next);
            assert_eq!(ids.id(a), want, "{a:#x}");
        }
        assert_eq!(ids.addr.len(), map.len());
        ids.clear();
        assert_eq!(ids.id(5), 0);
    }

    /// Grouping by key id is a stable sort on the id: each key's entries keep the order they
    /// were added in (a stable comparison sort as the oracle).
    #[test]
    fn grouping_is_a_stable_sort_on_the_key_id() {
        for (n, keys) in [(10usize, 3u64), (5000, 70), (70_000, 65_536)] {
            let mut p = Postings::default();
            let mut want = Vec::new();
            for (i, w) in words(n as u64, n).into_iter().enumerate() {
                let (id, chunk, mask) = ((w % keys) as u32, i as u32 / 7, (w >> 32) as u32);
                p.push(id, chunk, mask);
                want.push((id, chunk, mask));
            }
            want.sort_by_key(|e| e.0);
            let mut g = Grouped::default();
            p.group(0, &mut g);
            let mut got = Vec::new();
            for d in 0..p.ids as usize {
                let s = if d == 0 { 0 } else { g.end[d - 1] as usize };
                for &cm in &g.cm[s..g.end[d] as usize] {
                    got.push((d as u32, (cm >> 32) as u32, cm as u32));
                }
            }
            assert_eq!(got, want, "{n} entries, {keys} keys");
        }
    }
}

// Index parts (the open segment's index in pieces): a child module, to read the entries above.
#[path = "part.rs"]
pub(crate) mod part;
