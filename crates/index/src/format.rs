//! The index file format, and reading it back.
//!
//! Format 5 (`"WEIRIDX5"`, little-endian), made so that a query reads only what it needs: the
//! head (block and time tables, key tables) and the lists of its own keys, each checked.
//!
//! ```text
//! "WEIRIDX5"                                      8 bytes
//! covered_len, head_hash, packets,                u64 each
//! first_ns, last_ns
//! chunk_size, block count N, blocks per chunk P,  u32 each
//! wildcard list bytes W
//! key counts: protocols, ports, IPv4, IPv6        u32 each
//! lists bytes L, head bytes H                     u64 each
//! port grain: exact below E, bucket shift S       u32 each
//! port bucket keys B, exact ports per chunk X     u32 each
//! ---- from here on to H: the head ----
//! chunk times: ceil(N / P) × (min ts, max ts)     u64 each (min u64::MAX: no packet)
//! first record of each block, from its start      N × u16 (u32 when a block is over 65 535
//!                                                 bytes); all ones: no record starts there
//! wildcard block list                             W bytes: varint count, delta varints
//! key tables, one per kind: protocols, ports,     (value, offset of its list in the lists) ×
//! IPv4, IPv6, port buckets                        count; value: 1, 2, 4, 16 or 2 bytes
//!                                                 (a bucket's first port), offset u32
//! list page checksums                             ceil(L / 4096) × CRC-32
//! CRC-32 of the head                              u32 (of bytes 0..H)
//! ---- the lists, in key order ----               L bytes; a key's list ends where the next
//!                                                 key's starts
//! ```
//!
//! A list is a kind byte and its body: 0, blocks (varint count, delta varints); 1, chunks (the
//! same); 2, chunks as a bitmap (varint first chunk, then bit `i` of the bytes is chunk
//! `first + i`). A key found in few blocks of its chunks (a rare host, a port of a few calls)
//! lists its blocks, so an extraction reads a few KiB per packet; a key spread over most blocks
//! of its chunks lists its chunks, as deltas or as a bitmap, whichever is smaller (a key in a
//! third of the chunks: a bit per chunk instead of a byte per chunk it is in).
//!
//! Ports from E on are listed exactly in a chunk where at most X distinct such ports occur, and
//! per bucket of 2^S ports in the others (the bucket key is the bucket's first port, in the
//! fifth table; see [`PortGrain`]): a query for such a port reads its own list and its
//! bucket's, a superset the BPF program narrows. Version 4 (`"WEIRIDX4"`, session 18) is
//! version 5 without the line of B and X (104 bytes before the tables): every chunk lists its
//! ports from E on per bucket, under the bucket's key in the ports' table. Version 3
//! (`"WEIRIDX3"`, session 17) is version 4 without the port grain line (96 bytes before the
//! tables, every port its own key). Both are still read.
//!
//! Time bounds are kept per chunk (format 2 kept them per block: 16 of its 24 bytes per block);
//! a time window then reads at most a chunk too much at each end.
//!
//! Version 2 (`"WEIRIDX2"`, sessions 15-16) had a 24-byte entry per block (first record offset,
//! min and max timestamp, u64 each), every key's list inline after its key and one CRC-32 at
//! the end; version 1 (`"WEIRIDX1"`, before session 15) has no P: its blocks are its chunks and
//! every list is of chunks. Both are still read (stores written before keep their indexes).

use std::os::unix::fs::FileExt;

use crate::keys::{Key, PortGrain};
use crate::query::Query;

// Joining parts' lists into one index: a child module, to read the writer's lists.
#[path = "merge.rs"]
pub(crate) mod merge;

const MAGIC: &[u8; 8] = b"WEIRIDX5";
/// Version 4: version 5 without the port bucket table (every chunk's ports per bucket).
const MAGIC_V4: &[u8; 8] = b"WEIRIDX4";
/// Version 3: version 4 without the port grain (every port a key).
const MAGIC_V3: &[u8; 8] = b"WEIRIDX3";
/// Version 2: per-block entries, inline lists.
const MAGIC_V2: &[u8; 8] = b"WEIRIDX2";
/// Version 1: one block per chunk.
const MAGIC_V1: &[u8; 8] = b"WEIRIDX1";
/// The tag bit of a key whose list is of chunks (version 2).
const COARSE: u8 = 0x80;
/// "No record starts in this chunk."
pub(crate) const NONE: u64 = u64::MAX;
/// "No record starts in this block" (in-memory offset from the block's start).
const NONE32: u32 = u32::MAX;
/// Bytes of a version 5 file before its head's tables.
const FIXED: usize = 112;
/// Bytes of a version 4 file before its head's tables.
const FIXED_V4: usize = 104;
/// Bytes of a version 3 file before its head's tables.
const FIXED_V3: usize = 96;
/// Bytes of the lists each page checksum covers.
const PAGE: usize = 4096;
/// Bytes at the start of a segment whose hash an index records (to tell its segment from
/// another file of the same name).
pub const HEAD_LEN: usize = 4096;

/// The hash of a segment's first [`HEAD_LEN`] bytes (FNV-1a, 64 bits).
pub fn head_hash(head: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in &head[..head.len().min(HEAD_LEN)] {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Why an index cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IndexError {
    /// Reading it failed.
    #[error("cannot read the index: {0}")]
    Io(#[from] std::io::Error),
    /// Not an index, or damaged (bad magic, bad checksum, truncated).
    #[error("corrupt index: {0}")]
    Corrupt(&'static str),
    /// It was built for another file, or for more of this file than exists.
    #[error("stale index: {0}")]
    Stale(&'static str),
}

pub(crate) struct Header {
    pub covered_len: u64,
    pub head_hash: u64,
    pub packets: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    pub chunk_size: u32,
    /// Blocks per chunk.
    pub per: u32,
    /// How finely ports are keyed.
    pub ports: PortGrain,
}

/// What the index knows of one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkInfo {
    pub first: u64,
    pub min_ns: u64,
    pub max_ns: u64,
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Bytes of the varint of `v` (one per 7 bits, at least one).
pub(crate) fn varint_len(v: u32) -> usize {
    (32 - v.leading_zeros()).div_ceil(7).max(1) as usize
}

fn list(out: &mut Vec<u8>, chunks: &[u32]) {
    varint(out, chunks.len() as u64);
    let mut prev = 0u32;
    for (i, &c) in chunks.iter().enumerate() {
        varint(out, u64::from(if i == 0 { c } else { c - prev }));
        prev = c;
    }
}

/// What a list is written for: a key, or a bucket of ports (format 5: the bucket's first port).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Listed {
    /// A key.
    Key(Key),
    /// The ports of a bucket, by its first port.
    Bucket(u16),
}

impl From<Key> for Listed {
    fn from(k: Key) -> Listed {
        Listed::Key(k)
    }
}

/// The kind (0 to 3: protocol, port, IPv4, IPv6) of a key.
fn kind(k: Key) -> usize {
    match k {
        Key::Proto(_) => 0,
        Key::Port(_) => 1,
        Key::V4(_) => 2,
        Key::V6(_) => 3,
    }
}

/// The value of a key as the tables hold it (the first [`WIDTH`] bytes, little-endian).
fn value_of(k: Key) -> u128 {
    match k {
        Key::Proto(p) => u128::from(p),
        Key::Port(p) => u128::from(p),
        Key::V4(a) => u128::from(a),
        Key::V6(a) => a,
    }
}

/// The table of port buckets (format 5).
const BUCKETS: usize = 4;
/// Key tables (kinds).
const KINDS: usize = 5;
/// Value widths of the five kinds.
const WIDTH: [usize; KINDS] = [1, 2, 4, 16, 2];

/// Writes a version 5 index: keys in [`Key`]'s order with their lists, then the port buckets
/// in order, then [`finish`](Writer::finish).
#[derive(Default)]
pub(crate) struct Writer {
    tables: [Vec<u8>; KINDS],
    counts: [u32; KINDS],
    lists: Vec<u8>,
    scratch: Vec<u32>,
    /// When noted ([`noting`](Self::noting)): the chunk (counted from the writer's first) at
    /// which the join cuts its lists, and log2 of the blocks per chunk.
    cut: Option<(u32, u32)>,
    /// The absolute chunk of that cut, as the join checks it (`u32::MAX`: none).
    pub(crate) cut_end: u32,
    /// What the join needs of each list, in the order written, when noted.
    pub(crate) noted: Vec<merge::Noted>,
}

impl Writer {
    /// A writer that notes what the join at the close needs of each list (`merge.rs`): the
    /// lists of a part whose first chunk is `c0` and whose items from chunk `end` on (absolute;
    /// `u32::MAX`: none) the next part holds, with `sh` = log2 of the blocks per chunk.
    pub(crate) fn noting(c0: u32, end: u32, sh: u32) -> Writer {
        Writer {
            cut: Some((
                if end == u32::MAX {
                    u32::MAX
                } else {
                    end.saturating_sub(c0)
                },
                sh,
            )),
            cut_end: end,
            ..Writer::default()
        }
    }

    /// One key (or bucket) and its `n` blocks, or chunks when `coarse` (strictly increasing);
    /// keys must come in [`Key`]'s order, then the buckets in theirs.
    pub(crate) fn key(
        &mut self,
        k: Listed,
        coarse: bool,
        n: usize,
        items: impl Iterator<Item = u32>,
    ) {
        let (kind, value) = match k {
            Listed::Key(k) => (kind(k), value_of(k)),
            Listed::Bucket(p) => (BUCKETS, u128::from(p)),
        };
        self.entry(kind, value);
        self.body(coarse, n, items, None);
    }

    /// The chunk (counted from the writer's first) from which the join cuts the lists, when
    /// noting ([`noting`](Self::noting)).
    pub(crate) fn cut_chunk(&self) -> Option<u32> {
        self.cut.map(|c| c.0)
    }

    /// [`key`](Self::key) for a list of blocks, with what the join needs of its blocks below
    /// the cut (when noting) computed by the caller from its chunks ([`merge::FineStats`]).
    pub(crate) fn key_of_blocks(
        &mut self,
        k: Listed,
        n: usize,
        items: impl Iterator<Item = u32>,
        fine: merge::FineStats,
    ) {
        let (kind, value) = match k {
            Listed::Key(k) => (kind(k), value_of(k)),
            Listed::Bucket(p) => (BUCKETS, u128::from(p)),
        };
        self.entry(kind, value);
        self.body(false, n, items, Some(fine));
    }

    /// The key table entry of the key of kind `kind` and value `value` (a bucket's first
    /// port): its list comes next ([`body`](Self::body), or bytes appended to the lists).
    fn entry(&mut self, kind: usize, value: u128) {
        let t = &mut self.tables[kind];
        t.extend_from_slice(&value.to_le_bytes()[..WIDTH[kind]]);
        // Lists past 4 GiB would need a segment of some 300 GB of 64-byte frames; the recorder
        // cuts segments long before.
        t.extend_from_slice(&(self.lists.len().min(u32::MAX as usize) as u32).to_le_bytes());
        self.counts[kind] += 1;
    }

    /// The list of the key whose table entry was written last: its `n` blocks, or chunks when
    /// `coarse` (strictly increasing).
    fn body(
        &mut self,
        coarse: bool,
        n: usize,
        items: impl Iterator<Item = u32>,
        fine: Option<merge::FineStats>,
    ) {
        let v = &mut self.scratch;
        v.clear();
        v.reserve(n);
        v.extend(items);
        let out = &mut self.lists;
        if !coarse {
            out.push(0);
            match self.cut {
                Some((c, sh)) => self.noted.push(merge::list_noted(
                    out,
                    v,
                    0,
                    c.saturating_mul(1 << sh),
                    sh,
                    fine,
                )),
                None => list(out, v),
            }
            return;
        }
        // Chunks: deltas or a bitmap, whichever is smaller.
        let mut prev = 0;
        let deltas: usize = varint_len(v.len() as u32)
            + v.iter()
                .map(|&c| {
                    let d = varint_len(c - prev);
                    prev = c;
                    d
                })
                .sum::<usize>();
        let (first, last) = (
            v.first().copied().unwrap_or(0),
            v.last().copied().unwrap_or(0),
        );
        let bitmap = varint_len(first) + ((last - first) as usize + 8) / 8;
        if v.is_empty() || deltas <= bitmap {
            out.push(1);
            match self.cut {
                Some((c, sh)) => self.noted.push(merge::list_noted(out, v, 1, c, sh, None)),
                None => list(out, v),
            }
        } else {
            out.push(2);
            varint(out, u64::from(first));
            let at = out.len();
            if let Some((c, _)) = self.cut {
                self.noted.push(merge::bitmap_noted(
                    v,
                    at,
                    c,
                    deltas - varint_len(v.len() as u32),
                ));
            }
            out.resize(at + ((last - first) as usize + 8) / 8, 0);
            for &c in v.iter() {
                let i = (c - first) as usize;
                out[at + i / 8] |= 1 << (i % 8);
            }
        }
    }

    /// The file: the head (header, `blocks` as chunk times and first records, the wildcard
    /// list, the key tables, the lists' checksums, the head's checksum), then the lists.
    pub(crate) fn finish(&self, h: &Header, blocks: &[ChunkInfo], wildcard: &[u32]) -> Vec<u8> {
        let per = h.per.max(1) as usize;
        let block_size = u64::from(h.chunk_size / h.per.max(1));
        let wide = block_size > 0xffff;
        let nchunks = blocks.len().div_ceil(per);
        let mut wild = Vec::new();
        list(&mut wild, wildcard);
        let pages = self.lists.len().div_ceil(PAGE);
        let tables: usize = self.tables.iter().map(Vec::len).sum();
        let head_len = FIXED
            + nchunks * 16
            + blocks.len() * if wide { 4 } else { 2 }
            + wild.len()
            + tables
            + pages * 4;
        let mut out = Vec::with_capacity(head_len + 4 + self.lists.len());
        out.extend_from_slice(MAGIC);
        for v in [h.covered_len, h.head_hash, h.packets, h.first_ns, h.last_ns] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [h.chunk_size, blocks.len() as u32, h.per, wild.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for c in &self.counts[..BUCKETS] {
            out.extend_from_slice(&c.to_le_bytes());
        }
        for v in [self.lists.len() as u64, head_len as u64] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            h.ports.exact_below,
            h.ports.bucket_shift,
            self.counts[BUCKETS],
            h.ports.chunk_exact_ports,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        debug_assert_eq!(out.len(), FIXED);
        for c in blocks.chunks(per) {
            let min = c.iter().map(|b| b.min_ns).min().unwrap_or(u64::MAX);
            let max = c.iter().map(|b| b.max_ns).max().unwrap_or(0);
            out.extend_from_slice(&min.to_le_bytes());
            out.extend_from_slice(&max.to_le_bytes());
        }
        for (i, b) in blocks.iter().enumerate() {
            let start = i as u64 * block_size;
            // A record starting before its block cannot be (the builder numbers blocks by
            // offset); it would be written as "none" rather than as a wrong offset.
            let off = match b.first.checked_sub(start) {
                Some(o) if b.first != NONE && o < block_size => o,
                _ => u64::MAX,
            };
            if wide {
                out.extend_from_slice(&(off.min(u64::from(u32::MAX)) as u32).to_le_bytes());
            } else {
                out.extend_from_slice(&(off.min(0xffff) as u16).to_le_bytes());
            }
        }
        out.extend_from_slice(&wild);
        for t in &self.tables {
            out.extend_from_slice(t);
        }
        for p in self.lists.chunks(PAGE) {
            out.extend_from_slice(&crc32fast::hash(p).to_le_bytes());
        }
        debug_assert_eq!(out.len(), head_len);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&self.lists);
        out
    }
}

/// A parsed index file: all of it ([`Index::parse`], [`Index::load`]), or what one query needs
/// ([`Index::load_for`]).
#[derive(Debug, Clone)]
pub struct Index {
    /// Bytes of the segment the index covers (packets starting beyond are not indexed).
    pub covered_len: u64,
    /// Hash of the segment's first 4 KiB when the index was built.
    pub head_hash: u64,
    /// Packets indexed.
    pub packets: u64,
    /// First packet timestamp.
    pub first_ns: u64,
    /// Last packet timestamp.
    pub last_ns: u64,
    /// Chunk size in bytes.
    pub chunk_size: u32,
    /// Block size in bytes (the chunk size in a version 1 index).
    pub block_size: u32,
    /// Blocks per chunk (1 in a version 1 index).
    per: u32,
    /// Offset of the first record starting in each block from the block's start ([`NONE32`]:
    /// none).
    first: Vec<u32>,
    /// Smallest and largest timestamp of each `tper` blocks (a block in versions 1 and 2, a
    /// chunk in version 3).
    times: Vec<(u64, u64)>,
    tper: u32,
    /// How finely the ports are keyed.
    ports: PortGrain,
    /// Whether port buckets have a table of their own (format 5), so a bucketed port has two
    /// lists (its own and its bucket's); in format 4 its bucket's key is in the ports' table.
    buckets_apart: bool,
    /// Blocks.
    wildcard: Vec<u32>,
    /// Sorted by key: the key, whether its list is of chunks (else of blocks), the list. Only
    /// the keys of its query when loaded for one.
    keys: Vec<(Key, bool, Vec<u32>)>,
    /// The same for the port buckets of a format 5 index, by first port.
    buckets: Vec<(u16, bool, Vec<u32>)>,
    /// Distinct keys in the file.
    nkeys: usize,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], IndexError> {
        let s = self
            .b
            .get(self.at..self.at.saturating_add(n))
            .ok_or(IndexError::Corrupt("truncated"))?;
        self.at += n;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64, IndexError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    fn u32(&mut self) -> Result<u32, IndexError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    fn varint(&mut self) -> Result<u64, IndexError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.take(1)?[0];
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(IndexError::Corrupt("varint too long"))
    }
    fn list(&mut self, nchunks: u32) -> Result<Vec<u32>, IndexError> {
        let n = self.varint()?;
        if n > u64::from(nchunks) {
            return Err(IndexError::Corrupt("list longer than the chunk count"));
        }
        let mut v = Vec::with_capacity(n as usize);
        let mut c = 0u64;
        for i in 0..n {
            let d = self.varint()?;
            // Checked: a crafted delta near 2^64 would otherwise wrap (in release) to a small,
            // in-range chunk number, and the list would come out unsorted, which the merge and
            // intersection of postings silently mishandle (chunks skipped).
            let next = if i == 0 { Some(d) } else { c.checked_add(d) };
            match next {
                Some(x) if (i == 0 || d > 0) && x < u64::from(nchunks) => c = x,
                _ => return Err(IndexError::Corrupt("chunk list out of order or range")),
            }
            v.push(c as u32);
        }
        Ok(v)
    }
}

/// A version 3 list (kind byte and body, all of `b`): whether it is of chunks, and the list.
fn decode3(b: &[u8], nblocks: u32, nchunks: u32) -> Result<(bool, Vec<u32>), IndexError> {
    let mut c = Cursor { b, at: 1 };
    let (coarse, v) = match b.first() {
        Some(0) => (false, c.list(nblocks)?),
        Some(1) => (true, c.list(nchunks)?),
        Some(2) => {
            let first = c.varint()?;
            let bits = &b[c.at..];
            c.at = b.len();
            let mut v = Vec::new();
            for (i, &byte) in bits.iter().enumerate() {
                let mut m = byte;
                while m != 0 {
                    let x = first + (i as u64) * 8 + u64::from(m.trailing_zeros());
                    if x >= u64::from(nchunks) {
                        return Err(IndexError::Corrupt("chunk bitmap out of range"));
                    }
                    v.push(x as u32);
                    m &= m - 1;
                }
            }
            (true, v)
        }
        _ => return Err(IndexError::Corrupt("unknown list kind")),
    };
    if c.at != b.len() {
        return Err(IndexError::Corrupt("trailing bytes in a list"));
    }
    Ok((coarse, v))
}

/// Where a version 3, 4 or 5 head's key tables and checksums are (in the head's bytes).
struct Tables {
    /// Offset of each kind's table.
    at: [usize; KINDS],
    counts: [u32; KINDS],
    /// Keys before each kind's.
    base: [usize; KINDS],
    pages_at: usize,
    lists_len: u64,
    head_len: usize,
    nblocks: u32,
    nchunks: u32,
    ports: PortGrain,
    /// Whether the port buckets have their own table (format 5).
    apart: bool,
}

impl Tables {
    fn total(&self) -> usize {
        self.base[BUCKETS] + self.counts[BUCKETS] as usize
    }

    /// The kind and place in its table of the `g`th key.
    fn locate(&self, g: usize) -> (usize, usize) {
        let kind = (0..KINDS).rev().find(|&k| g >= self.base[k]).unwrap_or(0);
        (kind, g - self.base[kind])
    }

    fn entry<'a>(&self, b: &'a [u8], kind: usize, i: usize) -> &'a [u8] {
        let w = WIDTH[kind] + 4;
        &b[self.at[kind] + i * w..self.at[kind] + (i + 1) * w]
    }

    /// The `i`th key of kind `kind` (a bucket's first port as a port).
    fn key(&self, b: &[u8], kind: usize, i: usize) -> Key {
        let e = self.entry(b, kind, i);
        match kind {
            0 => Key::Proto(e[0]),
            1 | BUCKETS => Key::Port(u16::from_le_bytes([e[0], e[1]])),
            2 => Key::V4(u32::from_le_bytes(e[..4].try_into().expect("4"))),
            _ => Key::V6(u128::from_le_bytes(e[..16].try_into().expect("16"))),
        }
    }

    /// Offset of the `g`th key's list in the lists (the lists' length for the one past the last).
    fn off(&self, b: &[u8], g: usize) -> u64 {
        if g >= self.total() {
            return self.lists_len;
        }
        let (kind, i) = self.locate(g);
        let e = self.entry(b, kind, i);
        u64::from(u32::from_le_bytes(e[WIDTH[kind]..].try_into().expect("4")))
    }

    /// The place of key `k`, if the file has it.
    fn find(&self, b: &[u8], k: Key) -> Option<usize> {
        self.find_in(b, kind(k), k)
    }

    /// The place of key `k` in the table of kind `kind` (the port buckets: `k` a bucket's
    /// first port), if the file has it.
    fn find_in(&self, b: &[u8], kind: usize, k: Key) -> Option<usize> {
        let n = self.counts[kind] as usize;
        let i = partition(n, |i| self.key(b, kind, i) < k);
        (i < n && self.key(b, kind, i) == k).then_some(self.base[kind] + i)
    }

    /// The places of the IPv4 keys in `[lo, hi]`.
    fn v4_range(&self, b: &[u8], lo: u32, hi: u32) -> std::ops::Range<usize> {
        let n = self.counts[2] as usize;
        let s = partition(n, |i| self.key(b, 2, i) < Key::V4(lo));
        let e = partition(n, |i| self.key(b, 2, i) <= Key::V4(hi));
        self.base[2] + s..self.base[2] + e.max(s)
    }

    fn page_crc(&self, b: &[u8], p: usize) -> u32 {
        let at = self.pages_at + p * 4;
        u32::from_le_bytes(b[at..at + 4].try_into().expect("4"))
    }

    /// Checks the pages of `lists` (the lists' bytes from page `p0` on) against their sums.
    fn check_pages(&self, b: &[u8], p0: usize, lists: &[u8]) -> Result<(), IndexError> {
        for (i, page) in lists.chunks(PAGE).enumerate() {
            if crc32fast::hash(page) != self.page_crc(b, p0 + i) {
                return Err(IndexError::Corrupt("list checksum mismatch"));
            }
        }
        Ok(())
    }
}

/// The first of `0..n` for which `below` is false (`below` true then false over `0..n`).
fn partition(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Whether `b` starts as a version 3, 4 or 5 file (same layout but for the port grain and the
/// port buckets).
fn is_v34(b: &[u8]) -> bool {
    matches!(b.get(..8), Some(m) if m == MAGIC || m == MAGIC_V4 || m == MAGIC_V3)
}

/// The bytes before the head's tables of a version 3, 4 or 5 file starting with `b`.
fn fixed_len(b: &[u8]) -> usize {
    match b.get(..8) {
        Some(m) if m == MAGIC_V3 => FIXED_V3,
        Some(m) if m == MAGIC_V4 => FIXED_V4,
        _ => FIXED,
    }
}

/// The head length and the lists' length of a version 3, 4 or 5 file whose first bytes (at
/// least its [`fixed_len`]) are `b`.
fn sizes3(b: &[u8]) -> Result<(usize, u64), IndexError> {
    let fixed = fixed_len(b);
    if b.len() < fixed || !is_v34(b) {
        return Err(IndexError::Corrupt("not a weir index"));
    }
    let lists = u64::from_le_bytes(b[80..88].try_into().expect("8"));
    let head = u64::from_le_bytes(b[88..96].try_into().expect("8"));
    if head < fixed as u64 || head > 1 << 40 || lists > 1 << 40 {
        return Err(IndexError::Corrupt("bad sizes"));
    }
    Ok((head as usize, lists))
}

/// Parses a version 3, 4 or 5 head (`b`: its bytes and its checksum): the index without its
/// keys, and where its key tables are.
fn head3(b: &[u8]) -> Result<(Index, Tables), IndexError> {
    let (head_len, lists_len) = sizes3(b)?;
    if b.len() < head_len + 4 {
        return Err(IndexError::Corrupt("truncated"));
    }
    let (body, crc) = (&b[..head_len], &b[head_len..head_len + 4]);
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4")) {
        return Err(IndexError::Corrupt("checksum mismatch"));
    }
    let mut c = Cursor { b: body, at: 8 };
    let (covered_len, head_hash, packets, first_ns, last_ns) =
        (c.u64()?, c.u64()?, c.u64()?, c.u64()?, c.u64()?);
    let (chunk_size, n, per, wild_len) = (c.u32()?, c.u32()?, c.u32()?, c.u32()?);
    let mut counts = [c.u32()?, c.u32()?, c.u32()?, c.u32()?, 0];
    c.u64()?;
    c.u64()?;
    let fixed = fixed_len(body);
    let ports = if fixed >= FIXED_V4 {
        let mut g = PortGrain {
            exact_below: c.u32()?,
            bucket_shift: c.u32()?,
            chunk_exact_ports: 0,
        };
        if fixed == FIXED {
            counts[BUCKETS] = c.u32()?;
            g.chunk_exact_ports = c.u32()?;
        }
        if !g.is_valid() {
            return Err(IndexError::Corrupt("bad port grain"));
        }
        g
    } else {
        PortGrain::EXACT
    };
    debug_assert_eq!(c.at, fixed_len(body));
    if chunk_size < 4096
        || per == 0
        || chunk_size % per != 0
        || u64::from(n) * 2 > body.len() as u64
    {
        return Err(IndexError::Corrupt("bad chunk table"));
    }
    let block_size = chunk_size / per;
    let nchunks = n.div_ceil(per);
    let mut times = Vec::with_capacity(nchunks as usize);
    for _ in 0..nchunks {
        times.push((c.u64()?, c.u64()?));
    }
    let wide = block_size > 0xffff;
    let firsts = c.take(n as usize * if wide { 4 } else { 2 })?;
    let first: Vec<u32> = if wide {
        firsts
            .chunks_exact(4)
            .map(|x| u32::from_le_bytes(x.try_into().expect("4")))
            .collect()
    } else {
        firsts
            .chunks_exact(2)
            .map(|x| match u16::from_le_bytes([x[0], x[1]]) {
                0xffff => NONE32,
                o => u32::from(o),
            })
            .collect()
    };
    if first.iter().any(|&o| o != NONE32 && o >= block_size) {
        return Err(IndexError::Corrupt("record offset outside its block"));
    }
    let wild_end = c.at.saturating_add(wild_len as usize);
    let mut w = Cursor {
        b: body
            .get(..wild_end)
            .ok_or(IndexError::Corrupt("truncated"))?,
        at: c.at,
    };
    let wildcard = w.list(n)?;
    if w.at != wild_end {
        return Err(IndexError::Corrupt("trailing bytes in the wildcard list"));
    }
    c.at = wild_end;
    let mut at = [0; KINDS];
    let mut base = [0; KINDS];
    let mut total = 0usize;
    for k in 0..KINDS {
        at[k] = c.at;
        base[k] = total;
        total += counts[k] as usize;
        c.take((counts[k] as usize).saturating_mul(WIDTH[k] + 4))?;
    }
    let pages_at = c.at;
    c.take((lists_len as usize).div_ceil(PAGE) * 4)?;
    if c.at != head_len {
        return Err(IndexError::Corrupt("trailing bytes in the head"));
    }
    let t = Tables {
        at,
        counts,
        base,
        pages_at,
        lists_len,
        head_len,
        nblocks: n,
        nchunks,
        ports,
        apart: fixed == FIXED,
    };
    // Keys increasing within each kind, lists in key order, each at least a kind byte and a
    // count (so a binary search and a list's end can be trusted).
    let mut prev_off: Option<u64> = None;
    for (k, &count) in counts.iter().enumerate() {
        for i in 0..count as usize {
            if i > 0 && t.key(body, k, i - 1) >= t.key(body, k, i) {
                return Err(IndexError::Corrupt("keys out of order"));
            }
            let o = t.off(body, t.base[k] + i);
            if prev_off.is_some_and(|p| o < p + 2) || o >= lists_len {
                return Err(IndexError::Corrupt("lists out of order"));
            }
            prev_off = Some(o);
        }
    }
    if prev_off.is_some_and(|p| lists_len < p + 2) {
        return Err(IndexError::Corrupt("lists out of order"));
    }
    let ix = Index {
        covered_len,
        head_hash,
        packets,
        first_ns,
        last_ns,
        chunk_size,
        block_size,
        per,
        first,
        times,
        tper: per,
        ports,
        buckets_apart: fixed == FIXED,
        wildcard,
        keys: Vec::new(),
        buckets: Vec::new(),
        nkeys: total,
    };
    Ok((ix, t))
}

impl Index {
    /// Parses and checks an index file's bytes (all its keys).
    pub fn parse(bytes: &[u8]) -> Result<Index, IndexError> {
        if is_v34(bytes) {
            let (head_len, lists_len) = sizes3(bytes)?;
            if (bytes.len() as u64) != head_len as u64 + 4 + lists_len {
                return Err(IndexError::Corrupt("truncated or trailing bytes"));
            }
            let (mut ix, t) = head3(&bytes[..head_len + 4])?;
            let lists = &bytes[head_len + 4..];
            t.check_pages(bytes, 0, lists)?;
            ix.keys = Vec::with_capacity(ix.nkeys);
            for g in 0..t.total() {
                let (kind, i) = t.locate(g);
                let (a, e) = (t.off(bytes, g) as usize, t.off(bytes, g + 1) as usize);
                let (coarse, v) = decode3(&lists[a..e], t.nblocks, t.nchunks)?;
                ix.push(kind, t.key(bytes, kind, i), coarse, v);
            }
            return Ok(ix);
        }
        Index::parse_v12(bytes)
    }

    /// Parses a version 1 or 2 file.
    fn parse_v12(bytes: &[u8]) -> Result<Index, IndexError> {
        let v1 = bytes.get(..8) == Some(&MAGIC_V1[..]);
        if bytes.len() < 8 + 40 + 8 + 4 || !(v1 || &bytes[..8] == MAGIC_V2) {
            return Err(IndexError::Corrupt("not a weir index"));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4")) {
            return Err(IndexError::Corrupt("checksum mismatch"));
        }
        let mut c = Cursor { b: body, at: 8 };
        let (covered_len, head_hash, packets, first_ns, last_ns) =
            (c.u64()?, c.u64()?, c.u64()?, c.u64()?, c.u64()?);
        let chunk_size = c.u32()?;
        let n = c.u32()?;
        let per = if v1 { 1 } else { c.u32()? };
        if chunk_size < 4096
            || u64::from(n) * 24 > body.len() as u64
            || per == 0
            || chunk_size % per != 0
        {
            return Err(IndexError::Corrupt("bad chunk table"));
        }
        let block_size = chunk_size / per;
        let nchunks = n.div_ceil(per);
        let mut first = Vec::with_capacity(n as usize);
        let mut times = Vec::with_capacity(n as usize);
        for b in 0..u64::from(n) {
            let (f, min_ns, max_ns) = (c.u64()?, c.u64()?, c.u64()?);
            let start = b * u64::from(block_size);
            first.push(match f.checked_sub(start) {
                _ if f == NONE => NONE32,
                Some(o) if o < u64::from(block_size) => o as u32,
                _ => return Err(IndexError::Corrupt("record offset outside its block")),
            });
            times.push((min_ns, max_ns));
        }
        let wildcard = c.list(n)?;
        let k = c.u32()?;
        let mut keys = Vec::with_capacity((k as usize).min(body.len()));
        for _ in 0..k {
            let tag = c.take(1)?[0];
            let coarse = !v1 && tag & COARSE != 0;
            let key = match tag & !COARSE {
                1 => Key::Proto(c.take(1)?[0]),
                2 => Key::Port(u16::from_le_bytes(c.take(2)?.try_into().expect("2"))),
                3 => Key::V4(u32::from_le_bytes(c.take(4)?.try_into().expect("4"))),
                4 => Key::V6(u128::from_le_bytes(c.take(16)?.try_into().expect("16"))),
                _ => return Err(IndexError::Corrupt("unknown key tag")),
            };
            if v1 && tag & COARSE != 0 {
                return Err(IndexError::Corrupt("unknown key tag"));
            }
            keys.push((key, coarse, c.list(if coarse { nchunks } else { n })?));
        }
        if c.at != body.len() {
            return Err(IndexError::Corrupt("trailing bytes"));
        }
        if !keys.windows(2).all(|w| w[0].0 < w[1].0) {
            return Err(IndexError::Corrupt("keys out of order"));
        }
        Ok(Index {
            covered_len,
            head_hash,
            packets,
            first_ns,
            last_ns,
            chunk_size,
            block_size,
            per,
            first,
            times,
            tper: 1,
            ports: PortGrain::EXACT,
            buckets_apart: false,
            wildcard,
            nkeys: keys.len(),
            keys,
            buckets: Vec::new(),
        })
    }

    /// Checks the index against its segment: the segment's first bytes must hash as recorded
    /// and the segment must be at least as long as what the index covers.
    fn check(self, segment_head: &[u8], segment_len: u64) -> Result<Index, IndexError> {
        if self.head_hash != head_hash(segment_head) {
            return Err(IndexError::Stale("built for another file"));
        }
        if self.covered_len > segment_len {
            return Err(IndexError::Stale("covers more than the segment holds"));
        }
        Ok(self)
    }

    /// Reads `path` and checks it against its segment: the segment's first bytes must hash as
    /// recorded and the segment must be at least as long as what the index covers.
    pub fn load(
        path: &std::path::Path,
        segment_head: &[u8],
        segment_len: u64,
    ) -> Result<Index, IndexError> {
        Index::parse(&std::fs::read(path)?)?.check(segment_head, segment_len)
    }

    /// [`load`](Self::load) of what query `q` needs: of a version 3 index, its head (block,
    /// time and key tables) and the lists of `q`'s keys only, each read with `pread` and checked
    /// (the head by its checksum, the lists by their pages'); a version 1 or 2 index whole.
    /// The result answers [`candidates`](Self::candidates) and [`plan`](Self::plan) for `q` as
    /// the whole index would; its [`lists`](Self::lists) are `q`'s keys' only. `buf` is reused
    /// from call to call (its pages stay mapped).
    pub fn load_for(
        path: &std::path::Path,
        segment_head: &[u8],
        segment_len: u64,
        q: &Query,
        buf: &mut Vec<u8>,
    ) -> Result<Index, IndexError> {
        let f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        // The fixed header and, for a small index, all of it.
        let n = len.min(64 << 10) as usize;
        buf.clear();
        buf.resize(n, 0);
        f.read_exact_at(buf, 0)?;
        if !is_v34(buf) {
            // Formats 1 and 2: the rest of the file, then all of it parsed.
            let have = buf.len();
            let all = usize::try_from(len).map_err(|_| IndexError::Corrupt("too large"))?;
            buf.resize(all, 0);
            f.read_exact_at(&mut buf[have..], have as u64)?;
            return Index::parse(buf)?.check(segment_head, segment_len);
        }
        let (head_len, lists_len) = sizes3(buf)?;
        if len != head_len as u64 + 4 + lists_len {
            return Err(IndexError::Corrupt("truncated or trailing bytes"));
        }
        if buf.len() < head_len + 4 {
            let have = buf.len();
            buf.resize(head_len + 4, 0);
            f.read_exact_at(&mut buf[have..], have as u64)?;
        }
        let (ix, t) = head3(&buf[..head_len + 4])?;
        let mut ix = ix.check(segment_head, segment_len)?;
        let b = &buf[..head_len];
        let mut want = Vec::new();
        wanted(q, &t, b, &mut want);
        want.sort_by_key(|r| r.start);
        let mut lists = Vec::new();
        let mut i = 0;
        while i < want.len() {
            // Ranges of keys that overlap or touch read as one.
            let mut r = want[i].clone();
            i += 1;
            while i < want.len() && want[i].start <= r.end {
                r.end = r.end.max(want[i].end);
                i += 1;
            }
            let (a, e) = (t.off(b, r.start), t.off(b, r.end));
            let p0 = a as usize / PAGE;
            let from = (p0 * PAGE) as u64;
            let to = (e.div_ceil(PAGE as u64) * PAGE as u64).min(lists_len);
            lists.clear();
            lists.resize((to - from) as usize, 0);
            f.read_exact_at(&mut lists, t.head_len as u64 + 4 + from)?;
            t.check_pages(b, p0, &lists)?;
            for g in r {
                let (kind, k) = t.locate(g);
                let (s, e) = (
                    (t.off(b, g) - from) as usize,
                    (t.off(b, g + 1) - from) as usize,
                );
                let (coarse, v) = decode3(&lists[s..e], t.nblocks, t.nchunks)?;
                ix.push(kind, t.key(b, kind, k), coarse, v);
            }
        }
        ix.keys.sort_by_key(|k| k.0);
        ix.keys.dedup_by_key(|k| k.0);
        ix.buckets.sort_by_key(|k| k.0);
        ix.buckets.dedup_by_key(|k| k.0);
        Ok(ix)
    }

    /// Keeps the list of the key `k` of table `kind` (a bucket's first port as a port).
    fn push(&mut self, kind: usize, k: Key, coarse: bool, v: Vec<u32>) {
        match (kind, k) {
            (BUCKETS, Key::Port(p)) => self.buckets.push((p, coarse, v)),
            _ => self.keys.push((k, coarse, v)),
        }
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.first.len().div_ceil(self.per as usize)
    }

    /// Number of blocks (chunks in a version 1 index).
    pub fn blocks(&self) -> usize {
        self.first.len()
    }

    /// Number of distinct keys in the file.
    pub fn keys(&self) -> usize {
        self.nkeys
    }

    /// Every key loaded with its chunks (both in increasing order): all of them unless loaded
    /// [for a query](Self::load_for).
    pub fn postings_list(&self) -> impl Iterator<Item = (Key, Vec<u32>)> + '_ {
        self.keys.iter().map(|(k, coarse, v)| {
            let mut chunks: Vec<u32> = if *coarse {
                v.clone()
            } else {
                v.iter().map(|b| b / self.per).collect()
            };
            chunks.dedup();
            (*k, chunks)
        })
    }

    /// Every key with its list as written: whether it is of chunks (else of blocks), and the
    /// list (increasing). Port buckets are apart: [`bucket_lists`](Self::bucket_lists).
    pub fn lists(&self) -> impl Iterator<Item = (Key, bool, &[u32])> + '_ {
        self.keys.iter().map(|(k, coarse, v)| (*k, *coarse, &v[..]))
    }

    /// Every port bucket of a format 5 index (by its first port) with its list as written, as
    /// [`lists`](Self::lists) gives the keys'. A format 4 index lists its buckets among the
    /// keys (as ports).
    pub fn bucket_lists(&self) -> impl Iterator<Item = (u16, bool, &[u32])> + '_ {
        self.buckets
            .iter()
            .map(|(p, coarse, v)| (*p, *coarse, &v[..]))
    }

    /// How finely the index keys ports ([`PortGrain::EXACT`] before version 4).
    pub fn port_grain(&self) -> PortGrain {
        self.ports
    }

    /// Blocks per chunk (1 in a version 1 index).
    pub fn blocks_per_chunk(&self) -> u32 {
        self.per
    }

    /// Keys (port buckets included) whose list is of blocks, and those whose list is of chunks.
    pub fn fine_and_coarse_keys(&self) -> (usize, usize) {
        let coarse =
            self.keys.iter().filter(|k| k.1).count() + self.buckets.iter().filter(|k| k.1).count();
        (self.keys.len() + self.buckets.len() - coarse, coarse)
    }

    /// The chunks holding a packet the key parser could not read all the way (their blocks
    /// are candidates of every query).
    pub fn wildcard(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.wildcard.iter().map(|b| b / self.per).collect();
        v.dedup();
        v
    }

    /// The blocks that may hold a packet matching `q` with a timestamp in `[from, to]`, in
    /// file order, as file ranges of the records that start in them: `(first record offset,
    /// end)`, consecutive blocks merged into one range. Ranges end at
    /// [`covered_len`](Self::covered_len): the index of a segment being written may know
    /// records past it (added, not yet on disk when it was saved); those, and everything else
    /// from `covered_len` on, are the reader's to scan from [`tail_start`](Self::tail_start),
    /// so no record is both a candidate and in the tail.
    pub fn candidates(&self, q: &Query, from: u64, to: u64) -> Vec<(u64, u64)> {
        let mut set = self.eval(q);
        if let Some(s) = &mut set {
            // Blocks the decoder could not fully read are always candidates.
            let mut merged = Vec::with_capacity(s.len() + self.wildcard.len());
            merge_union(s, &self.wildcard, &mut merged);
            *s = merged;
        }
        let all: Vec<u32>;
        let ids: &[u32] = match &set {
            Some(s) => s,
            None => {
                all = (0..self.first.len() as u32).collect();
                &all
            }
        };
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut last = u32::MAX;
        for &b in ids {
            let (Some(&off), Some(&(min_ns, max_ns))) = (
                self.first.get(b as usize),
                self.times.get((b / self.tper) as usize),
            ) else {
                continue;
            };
            let start = u64::from(b) * u64::from(self.block_size);
            let first = start + u64::from(off);
            let timely = min_ns <= to && max_ns >= from;
            let end = (start + u64::from(self.block_size)).min(self.covered_len);
            if !(off != NONE32 && first < end && timely) {
                continue;
            }
            match out.last_mut() {
                // The block after the last one: no record starts between the two ranges.
                Some(r)
                    if last.wrapping_add(1) == b
                        && r.1 == u64::from(b) * u64::from(self.block_size) =>
                {
                    r.1 = end
                }
                _ => out.push((first, end)),
            }
            last = b;
        }
        out
    }

    /// A record boundary at or before [`covered_len`](Self::covered_len) (the start of the last
    /// chunk's first record there, 0 when there is none) from which to read the part the index
    /// does not cover: the records starting at or after `covered_len`. `covered_len` itself may
    /// fall inside a record (the recorder covers what is on disk, to a disk block).
    pub fn tail_start(&self) -> u64 {
        self.first
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, &o)| o != NONE32)
            .map(|(b, &o)| b as u64 * u64::from(self.block_size) + u64::from(o))
            .find(|&f| f <= self.covered_len)
            .unwrap_or(0)
    }

    /// Blocks matching `q`, or `None` for "all of them".
    fn eval(&self, q: &Query) -> Option<Vec<u32>> {
        match q {
            Query::All => None,
            Query::Key(Key::Port(p)) if self.buckets_apart && self.ports.is_bucketed(*p) => {
                // Its own list (chunks with few ports) and its bucket's (the others).
                let own = self.postings(Key::Port(*p));
                let b = self.ports.key(*p);
                let bucket = match self.buckets.binary_search_by_key(&b, |x| x.0) {
                    Ok(i) => self.blocks_of_list(self.buckets[i].1, &self.buckets[i].2),
                    Err(_) => Vec::new(),
                };
                let mut out = Vec::with_capacity(own.len() + bucket.len());
                merge_union(&own, &bucket, &mut out);
                Some(out)
            }
            Query::Key(k) if self.buckets_apart => Some(self.postings(*k)),
            // Format 4 lists a bucketed port under its bucket's key, among the ports.
            Query::Key(k) => Some(self.postings(self.ports.file_key(*k))),
            Query::V4Net(net, mask) => {
                let lo = Key::V4(net & mask);
                let hi = Key::V4((net & mask) | !mask);
                let mut acc = Vec::new();
                let start = self.keys.partition_point(|(k, _, _)| *k < lo);
                for (i, (k, _, _)) in self.keys[start..].iter().enumerate() {
                    if *k > hi {
                        break;
                    }
                    let mut out = Vec::new();
                    merge_union(&acc, &self.blocks_of(start + i), &mut out);
                    acc = out;
                }
                Some(acc)
            }
            Query::And(a, b) => match (self.eval(a), self.eval(b)) {
                (None, x) | (x, None) => x,
                (Some(x), Some(y)) => Some(intersect(&x, &y)),
            },
            Query::Or(a, b) => match (self.eval(a), self.eval(b)) {
                (Some(x), Some(y)) => {
                    let mut out = Vec::new();
                    merge_union(&x, &y, &mut out);
                    Some(out)
                }
                _ => None,
            },
        }
    }

    /// The blocks of key `k`.
    fn postings(&self, k: Key) -> Vec<u32> {
        match self.keys.binary_search_by(|(x, _, _)| x.cmp(&k)) {
            Ok(i) => self.blocks_of(i),
            Err(_) => Vec::new(),
        }
    }

    /// The blocks of the `i`th key (a chunk list made blocks).
    fn blocks_of(&self, i: usize) -> Vec<u32> {
        let (_, coarse, list) = &self.keys[i];
        self.blocks_of_list(*coarse, list)
    }

    /// The blocks of a list (of chunks when `coarse`, else of blocks).
    fn blocks_of_list(&self, coarse: bool, list: &[u32]) -> Vec<u32> {
        if !coarse {
            return list.to_vec();
        }
        let n = self.first.len() as u32;
        let mut v = Vec::with_capacity(list.len() * self.per as usize);
        for &c in list {
            let first = c.saturating_mul(self.per);
            v.extend(first..first.saturating_add(self.per).min(n));
        }
        v
    }

    /// The start of the last record the index knows (the first record of a block) at or before
    /// byte `at`, or `None` when it knows none there: a record boundary a reader can start
    /// from (index parts, `part.rs`).
    pub fn record_at_or_before(&self, at: u64) -> Option<u64> {
        let bs = u64::from(self.block_size.max(1));
        let last = usize::try_from(at / bs).unwrap_or(usize::MAX);
        let end = self.first.len().min(last.saturating_add(1));
        self.first[..end]
            .iter()
            .enumerate()
            .rev()
            .filter(|(_, &o)| o != NONE32)
            .map(|(b, &o)| b as u64 * bs + u64::from(o))
            .find(|&f| f <= at)
    }
}

/// The places in `t` of the keys `q` needs (ranges of places).
fn wanted(q: &Query, t: &Tables, b: &[u8], out: &mut Vec<std::ops::Range<usize>>) {
    match q {
        Query::All => {}
        Query::Key(Key::Port(p)) if t.apart && t.ports.is_bucketed(*p) => {
            // Format 5: the port's own list and its bucket's.
            let own = t.find(b, Key::Port(*p));
            let bucket = t.find_in(b, BUCKETS, Key::Port(t.ports.key(*p)));
            out.extend(own.into_iter().chain(bucket).map(|g| g..g + 1));
        }
        Query::Key(k) => {
            // Format 4 lists a bucketed port under its bucket's key, among the ports.
            let k = if t.apart { *k } else { t.ports.file_key(*k) };
            if let Some(g) = t.find(b, k) {
                out.push(g..g + 1);
            }
        }
        Query::V4Net(net, mask) => {
            let r = t.v4_range(b, net & mask, (net & mask) | !mask);
            if !r.is_empty() {
                out.push(r);
            }
        }
        Query::And(x, y) | Query::Or(x, y) => {
            wanted(x, t, b, out);
            wanted(y, t, b, out);
        }
    }
}

fn merge_union(a: &[u32], b: &[u32], out: &mut Vec<u32>) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = match (a.get(i), b.get(j)) {
            (Some(&x), Some(&y)) if x == y => {
                i += 1;
                j += 1;
                x
            }
            (Some(&x), Some(&y)) if x < y => {
                i += 1;
                x
            }
            (Some(_), Some(&y)) => {
                j += 1;
                y
            }
            (Some(&x), None) => {
                i += 1;
                x
            }
            (None, Some(&y)) => {
                j += 1;
                y
            }
            (None, None) => unreachable!(),
        };
        out.push(next);
    }
}

fn intersect(a: &[u32], b: &[u32]) -> Vec<u32> {
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                out.push(a[i]);
                i += 1;
                j += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// An index of `nchunks` empty chunks whose wildcard list is `deltas`, varint-coded as they
    /// are (no check that they make a sorted list: a crafted file), with a valid checksum.
    fn crafted(nchunks: u32, deltas: &[u64]) -> Vec<u8> {
        crafted_v1(nchunks, deltas, 0, &[])
    }

    /// A version 1 index (weir before session 15: one list per key, of chunks) of `nchunks`
    /// chunks of 4 KiB, chunk `c`'s first record at `c * 4096` with timestamp `c`, the
    /// wildcard list `deltas`, and `nkeys` keys written in `keys` as a version 1 writer did.
    fn crafted_v1(nchunks: u32, deltas: &[u64], nkeys: u32, keys: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC_V1);
        for v in [0u64, 0, 0, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&4096u32.to_le_bytes());
        out.extend_from_slice(&nchunks.to_le_bytes());
        for c in 0..u64::from(nchunks) {
            for v in [c * 4096, c, c] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        varint(&mut out, deltas.len() as u64);
        for &d in deltas {
            varint(&mut out, d);
        }
        out.extend_from_slice(&nkeys.to_le_bytes());
        out.extend_from_slice(keys);
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    #[test]
    fn a_delta_sum_that_wraps_is_corrupt() {
        // 5, then 5 + (2^64 - 3) = 2 after wrapping: in range, but out of order.
        let bytes = crafted(8, &[5, u64::MAX - 2]);
        assert!(matches!(Index::parse(&bytes), Err(IndexError::Corrupt(_))));
        let ok = crafted(8, &[5, 2]);
        assert_eq!(Index::parse(&ok).unwrap().wildcard, vec![5, 7]);
    }

    /// A version 1 index (stores written before session 15) still answers: its chunk lists
    /// are read as they were written, and a chunk is one block.
    #[test]
    fn a_version_1_index_still_answers() {
        // Port 53 in chunks 2 and 5; 10.0.0.1 in chunk 3; wildcard chunk 7.
        let mut keys = vec![2u8, 53, 0, 2, 2, 3];
        keys.extend([3u8]);
        keys.extend(0x0a00_0001u32.to_le_bytes());
        keys.extend([1u8, 3]);
        let ix = Index::parse(&crafted_v1(8, &[7], 2, &keys)).expect("version 1 parses");
        assert_eq!((ix.chunks(), ix.blocks(), ix.block_size), (8, 8, 4096));
        let ix = Index {
            covered_len: 8 * 4096,
            ..ix
        };
        let port = Query::Key(Key::Port(53));
        let chunk = |c: u64| (c * 4096, (c + 1) * 4096);
        assert_eq!(
            ix.candidates(&port, 0, u64::MAX),
            [chunk(2), chunk(5), chunk(7)]
        );
        assert_eq!(ix.candidates(&port, 3, 6), [chunk(5)]);
        let host = Query::Key(Key::V4(0x0a00_0001));
        assert_eq!(ix.candidates(&host, 0, u64::MAX), [chunk(3), chunk(7)]);
        assert_eq!(
            ix.postings_list().collect::<Vec<_>>(),
            [(Key::Port(53), vec![2, 5]), (Key::V4(0x0a00_0001), vec![3])]
        );
        assert_eq!(ix.wildcard(), [7]);
    }

    /// The index of a segment being written covers part of it and knows records past that:
    /// the candidate ranges and the tail read from `tail_start` (records from `covered_len`
    /// on) name every record exactly once.
    #[test]
    fn candidates_and_tail_partition_the_records() {
        // Records of 1000 bytes from offset 100; chunks of 4 KiB.
        let offsets: Vec<u64> = (0..40).map(|i| 100 + i * 1000).collect();
        for covered in [0, 100, 4096, 5000, 5100, 9000, 20_100, 40_100] {
            let mut b = crate::IndexBuilder::new(4096);
            for &o in &offsets {
                b.add(o, o, weir_packet::LinkType::ETHERNET, &[]);
            }
            let ix = Index::parse(&b.serialize(covered, 0)).unwrap();
            let mut seen: Vec<u64> = Vec::new();
            for (start, end) in ix.candidates(&Query::All, 0, u64::MAX) {
                seen.extend(offsets.iter().filter(|&&o| o >= start && o < end));
            }
            let tail = ix.tail_start();
            assert!(tail <= covered.max(offsets[0]) && (tail == 0 || offsets.contains(&tail)));
            seen.extend(offsets.iter().filter(|&&o| o >= tail && o >= covered));
            seen.sort();
            assert_eq!(seen, offsets, "covered {covered}");
        }
    }

    /// Synthetic frames: 4 096 clients with random source ports to 8 servers on 4 ports, a
    /// rare host every 5 000 packets, a host in bursts (a third of the packets of one chunk in
    /// 20); 96-byte records.
    fn built(n: u64) -> (Vec<u8>, Vec<u64>) {
        let (bytes, frames) = built_with(n, PortGrain::DEFAULT);
        (bytes, frames.into_iter().map(|f| f.0).collect())
    }

    /// [`built`] with ports keyed as `grain` says; the frames with their offsets.
    fn built_with(n: u64, grain: PortGrain) -> (Vec<u8>, Vec<(u64, Vec<u8>)>) {
        let mut b = crate::IndexBuilder::with_port_grain(1 << 17, grain);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut offsets = Vec::new();
        for i in 0..n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut f = vec![0u8; 64];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14..24].copy_from_slice(&[0x45, 0, 0, 50, 0, 1, 0x40, 0, 64, 17]);
            let src = if i % 5000 == 17 {
                0xc000_024d
            } else if (i / 1400) % 20 == 3 && i % 3 == 0 {
                0xc000_0001
            } else {
                0x0a00_0000 | (x as u32 & 0xfff)
            };
            f[26..30].copy_from_slice(&src.to_be_bytes());
            f[30..34].copy_from_slice(&(0xc0a8_0000u32 | ((x >> 12) as u32 & 7)).to_be_bytes());
            f[34..36].copy_from_slice(&((x >> 20) as u16).to_be_bytes());
            f[36..38]
                .copy_from_slice(&[53u16, 80, 443, 5060][(x >> 40) as usize % 4].to_be_bytes());
            f[38..40].copy_from_slice(&30u16.to_be_bytes());
            let off = i * 96;
            b.add(off, i * 1000, weir_packet::LinkType::ETHERNET, &f);
            offsets.push((off, f));
        }
        (b.serialize(n * 96, 7), offsets)
    }

    /// A version 5 file without port buckets (every chunk's ports exact) made version 3 (its
    /// magic, no port grain lines) or version 4 (no bucket line): the head's length and
    /// checksum redone (the lists and their page checksums are the same bytes).
    fn as_version(v5: &[u8], magic: &[u8; 8]) -> Vec<u8> {
        let (head_len, _) = sizes3(v5).unwrap();
        assert_eq!(&v5[104..108], &[0; 4], "no port buckets");
        let fixed = fixed_len(magic);
        let cut = (FIXED - fixed) as u64;
        let mut old = Vec::with_capacity(v5.len());
        old.extend_from_slice(magic);
        old.extend_from_slice(&v5[8..88]);
        old.extend_from_slice(&(head_len as u64 - cut).to_le_bytes());
        old.extend_from_slice(&v5[96..fixed]);
        old.extend_from_slice(&v5[FIXED..head_len]);
        let crc = crc32fast::hash(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        old.extend_from_slice(&v5[head_len + 4..]);
        old
    }

    /// A version 3 index (session 17: every port its own key, 96 bytes before the tables) and
    /// a version 4 one (session 18: 104 bytes, no port bucket table) still answer, whole and
    /// loaded for a query, as the version 5 index of the same keys.
    #[test]
    fn a_version_3_or_4_index_still_answers() {
        for magic in [MAGIC_V3, MAGIC_V4] {
            an_old_version_answers(magic);
        }
    }

    fn an_old_version_answers(magic: &[u8; 8]) {
        let (v4, _) = built_with(60_000, PortGrain::EXACT);
        let mut v3 = as_version(&v4, magic);
        assert_eq!(&v3[..8], magic);
        // Made for a segment whose first bytes are none, the head's checksum redone.
        let (head_len, _) = sizes3(&v3).unwrap();
        v3[16..24].copy_from_slice(&head_hash(&[]).to_le_bytes());
        let crc = crc32fast::hash(&v3[..head_len]);
        v3[head_len..head_len + 4].copy_from_slice(&crc.to_le_bytes());
        let (a, b) = (Index::parse(&v4).unwrap(), Index::parse(&v3).unwrap());
        assert_eq!(b.port_grain(), PortGrain::EXACT);
        let dir = std::env::temp_dir().join(format!(
            "weir-index-{}-{}",
            magic[7] as char,
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("seg.idx");
        std::fs::write(&path, &v3).unwrap();
        let mut buf = Vec::new();
        for expr in [
            "host 192.0.2.77",
            "udp port 5060",
            "port 40000",
            "net 10.0.1.0/24",
            "",
        ] {
            let q = Query::from_expr(expr);
            assert_eq!(
                a.candidates(&q, 0, u64::MAX),
                b.candidates(&q, 0, u64::MAX),
                "{expr}"
            );
            let part = Index::load_for(&path, &[], u64::MAX, &q, &mut buf).unwrap();
            assert_eq!(
                part.candidates(&q, 0, u64::MAX),
                a.candidates(&q, 0, u64::MAX),
                "{expr}"
            );
        }
        // A flipped byte of the version 3 head is caught.
        let mut bad = v3.clone();
        bad[100] ^= 1;
        assert!(Index::parse(&bad).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Whether tcpdump's compiled `expr` matches Ethernet frame `f` (libpcap's code, as
    /// `tcpdump -r` runs it).
    fn bpf(expr: &str) -> weir_filter::Filter {
        weir_filter::Filter::compile_for_file(expr, weir_packet::LinkType::ETHERNET, 262_144, false)
            .expect("compiles")
    }

    /// Format 5's adaptive grain: chunks with a few dozen ports from 1 024 on (ports 2 000 to
    /// 2 039, as a busy host's connections) list them exactly, chunks with random source ports
    /// (32 768 and up) per bucket. The packets read through the index and selected by the BPF
    /// program are exactly those it selects over every frame (the oracle: libpcap's program,
    /// as tcpdump); a port of the few-port chunks (and 5060, alone in its bucket) reads exactly
    /// the blocks the exact grain reads; a random port reads at least as many.
    #[test]
    fn an_adaptive_grain_lists_few_ports_exactly_and_many_per_bucket() {
        let build = |grain: PortGrain| {
            let mut b = crate::IndexBuilder::with_port_grain(1 << 17, grain);
            let mut x = 0x2545_f491_4f6c_dd1du64;
            let mut frames = Vec::new();
            for i in 0..120_000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Even chunks (of 128 KiB) few ports, odd ones random.
                let sport = if ((i * 96) >> 17) % 2 == 0 {
                    2000 + (x % 40) as u16
                } else {
                    32_768 | (x >> 8) as u16
                };
                let mut f = vec![0u8; 64];
                f[12..14].copy_from_slice(&[0x08, 0x00]);
                f[14..24].copy_from_slice(&[0x45, 0, 0, 50, 0, 1, 0x40, 0, 64, 17]);
                f[26..30].copy_from_slice(&(0x0a00_0000 | (x >> 24) as u32 & 0xff).to_be_bytes());
                f[30..34].copy_from_slice(&0xc0a8_0001u32.to_be_bytes());
                f[34..36].copy_from_slice(&sport.to_be_bytes());
                f[36..38].copy_from_slice(&[53u16, 5060][(x >> 40) as usize % 2].to_be_bytes());
                f[38..40].copy_from_slice(&30u16.to_be_bytes());
                b.add(i * 96, i * 1000, weir_packet::LinkType::ETHERNET, &f);
                frames.push((i * 96, f));
            }
            (Index::parse(&b.serialize(120_000 * 96, 7)).unwrap(), frames)
        };
        let (ix, frames) = build(PortGrain::DEFAULT);
        let (ex, _) = build(PortGrain::EXACT);
        assert_eq!(ix.port_grain(), PortGrain::DEFAULT);
        // Both kinds: the few ports exact, buckets of the random ones.
        let exact_ports = ix
            .lists()
            .filter(|l| matches!(l.0, Key::Port(p) if (2000..2040).contains(&p)))
            .count();
        assert_eq!(exact_ports, 40);
        assert!(ix
            .bucket_lists()
            .all(|b| b.0 >= 32_768 || b.0 == 1984 || b.0 == 5056));
        assert!(ix.bucket_lists().filter(|b| b.0 >= 32_768).count() > 500);
        let port = |f: &[u8]| u16::from_be_bytes([f[34], f[35]]);
        let random = port(&frames[7_777].1);
        assert!(random >= 32_768);
        let bytes = |ix: &Index, q: &Query| -> u64 {
            ix.candidates(q, 0, u64::MAX)
                .iter()
                .map(|(s, e)| e - s)
                .sum()
        };
        for expr in [
            "port 2005".to_string(),
            "udp port 5060".into(),
            format!("port {random}"),
            format!("port 2011 or port {random}"),
            "port 40000 and host 10.0.0.7".into(),
            "port 1999".into(),
        ] {
            let q = Query::from_expr(&expr);
            let f = bpf(&expr);
            let cands = ix.candidates(&q, 0, u64::MAX);
            let inside = |o: u64| cands.iter().any(|&(s, e)| o >= s && o < e);
            let want: Vec<u64> = frames
                .iter()
                .filter(|(_, d)| f.matches(d, d.len() as u32))
                .map(|x| x.0)
                .collect();
            let got: Vec<u64> = frames
                .iter()
                .filter(|(o, d)| inside(*o) && f.matches(d, d.len() as u32))
                .map(|x| x.0)
                .collect();
            assert_eq!(got, want, "{expr}");
            assert!(bytes(&ix, &q) >= bytes(&ex, &q), "{expr}");
        }
        for expr in ["port 2005", "udp port 5060", "port 2039 or port 53"] {
            let q = Query::from_expr(expr);
            assert_eq!(
                ix.candidates(&q, 0, u64::MAX),
                ex.candidates(&q, 0, u64::MAX),
                "{expr}"
            );
        }
        let q = Query::from_expr(&format!("port {random}"));
        assert!(bytes(&ix, &q) > 2 * bytes(&ex, &q));
    }

    /// A port keyed by its bucket (random source ports from 1 024 on) names a superset of its
    /// packets' blocks: the packets of the candidate ranges the BPF program selects are exactly
    /// those it selects scanning every frame (the oracle: libpcap's program, as tcpdump). Ports
    /// below 1 024 keep their own key: their candidates are the exact grain's.
    #[test]
    fn a_bucketed_port_reads_a_superset_the_bpf_narrows_to_tcpdumps_packets() {
        let (bytes, frames) = built_with(100_000, PortGrain::DEFAULT);
        let (exact, _) = built_with(100_000, PortGrain::EXACT);
        let (ix, ex) = (Index::parse(&bytes).unwrap(), Index::parse(&exact).unwrap());
        assert_eq!(ix.port_grain(), PortGrain::DEFAULT);
        let port = |f: &[u8]| u16::from_be_bytes([f[34], f[35]]);
        // Ports of a few frames (the random source ports), and one no frame has.
        let mut exprs: Vec<String> = [3, 999, 50_000, 77_777]
            .iter()
            .map(|&i| format!("port {}", port(&frames[i].1)))
            .collect();
        exprs.push(format!("udp port {}", port(&frames[5].1)));
        exprs.push("host 192.0.2.77 or port 61000".into());
        for expr in &exprs {
            let q = Query::from_expr(expr);
            let f = bpf(expr);
            let cands = ix.candidates(&q, 0, u64::MAX);
            let read: Vec<&(u64, Vec<u8>)> = frames
                .iter()
                .filter(|(o, _)| cands.iter().any(|&(s, e)| *o >= s && *o < e))
                .collect();
            let want: Vec<u64> = frames
                .iter()
                .filter(|(_, d)| f.matches(d, d.len() as u32))
                .map(|x| x.0)
                .collect();
            let got: Vec<u64> = read
                .iter()
                .filter(|(_, d)| f.matches(d, d.len() as u32))
                .map(|x| x.0)
                .collect();
            assert_eq!(got, want, "{expr}");
            // A superset: more frames read than match (the bucket's other ports), and at
            // least the exact grain's.
            let exact_read: u64 = ex
                .candidates(&q, 0, u64::MAX)
                .iter()
                .map(|(s, e)| e - s)
                .sum();
            let read_bytes: u64 = cands.iter().map(|(s, e)| e - s).sum();
            assert!(read_bytes >= exact_read, "{expr}");
        }
        for expr in ["port 53", "udp port 443", "host 10.0.0.5 and port 80"] {
            let q = Query::from_expr(expr);
            assert_eq!(
                ix.candidates(&q, 0, u64::MAX),
                ex.candidates(&q, 0, u64::MAX),
                "{expr}"
            );
        }
    }

    /// A query's load reads the head and its keys' lists only, and plans the same ranges as
    /// the whole index; every kind of list occurs (blocks, chunk deltas, chunk bitmaps).
    #[test]
    fn a_load_for_a_query_answers_as_the_whole_index() {
        let (bytes, _) = built(200_000);
        assert_eq!(&bytes[..8], MAGIC);
        let dir = std::env::temp_dir().join(format!("weir-index-v3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("seg.idx");
        std::fs::write(&path, &bytes).unwrap();
        let whole = Index::parse(&bytes).unwrap();
        // Which kinds of list the file holds.
        let (head_len, _) = sizes3(&bytes).unwrap();
        let (_, t) = head3(&bytes[..head_len + 4]).unwrap();
        let mut kinds = [0; 3];
        for g in 0..t.total() {
            kinds[bytes[head_len + 4 + t.off(&bytes, g) as usize] as usize] += 1;
        }
        assert!(kinds.iter().all(|&k| k > 0), "list kinds {kinds:?}");
        let mut buf = Vec::new();
        // The head hash is of no segment here (7 is what the builder was given): stale.
        let ix = Index::load_for(&path, &[], u64::MAX, &Query::All, &mut buf);
        assert!(matches!(ix, Err(IndexError::Stale(_))));
        let mut ix = whole.clone();
        ix.head_hash = head_hash(&[]);
        let mut file = bytes.clone();
        file[16..24].copy_from_slice(&head_hash(&[]).to_le_bytes());
        // Re-sum the head after the edit.
        let crc = crc32fast::hash(&file[..head_len]);
        file[head_len..head_len + 4].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&path, &file).unwrap();
        for expr in [
            "host 192.0.2.77",
            "host 192.0.2.1",
            "udp port 5060",
            "port 40000",
            "host 10.0.0.5 and port 443",
            "net 10.0.1.0/24",
            "host 10.0.0.5 or host 192.168.0.3",
            "host 10.9.9.9",
            "",
        ] {
            let q = Query::from_expr(expr);
            let part = Index::load_for(&path, &[], u64::MAX, &q, &mut buf).unwrap();
            for (from, to) in [(0, u64::MAX), (50_000_000, 90_000_000)] {
                assert_eq!(
                    part.candidates(&q, from, to),
                    ix.candidates(&q, from, to),
                    "{expr}"
                );
            }
            assert_eq!(part.tail_start(), ix.tail_start());
            assert_eq!(part.keys(), ix.keys());
            let loaded: Vec<Key> = part.lists().map(|l| l.0).collect();
            assert!(loaded.len() <= 300, "{expr}: {} keys loaded", loaded.len());
            for (k, coarse, list) in part.lists() {
                let w = ix.keys.iter().find(|x| x.0 == k).unwrap();
                assert_eq!((w.1, &w.2[..]), (coarse, list));
            }
        }
        // A flipped byte in a list the query reads is caught by its page's checksum.
        let mut file = std::fs::read(&path).unwrap();
        let q = Query::from_expr("host 192.0.2.77");
        let (_, t) = head3(&file[..head_len + 4]).unwrap();
        let g = t.find(&file, Key::V4(0xc000_024d)).unwrap();
        let at = head_len + 4 + t.off(&file, g) as usize + 1;
        file[at] ^= 1;
        std::fs::write(&path, &file).unwrap();
        assert!(matches!(
            Index::load_for(&path, &[], u64::MAX, &q, &mut buf),
            Err(IndexError::Corrupt(_))
        ));
        // Cut short: refused.
        std::fs::write(&path, &file[..file.len() - 1]).unwrap();
        assert!(matches!(
            Index::load_for(&path, &[], u64::MAX, &q, &mut buf),
            Err(IndexError::Corrupt(_))
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Formats 1 and 2 load whole through [`Index::load_for`] too, under and over the 64 KiB
    /// it reads first.
    #[test]
    fn a_load_for_reads_old_formats_whole() {
        let dir = std::env::temp_dir().join(format!("weir-index-v1-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("seg.idx");
        let mut buf = Vec::new();
        for nchunks in [8u32, 5000] {
            let mut bytes = crafted_v1(nchunks, &[7], 0, &[]);
            // Made for a segment whose first bytes are none, checksum redone.
            bytes[16..24].copy_from_slice(&head_hash(&[]).to_le_bytes());
            let n = bytes.len() - 4;
            let crc = crc32fast::hash(&bytes[..n]);
            bytes[n..].copy_from_slice(&crc.to_le_bytes());
            std::fs::write(&path, &bytes).unwrap();
            let ix = Index::load_for(&path, &[], u64::MAX, &Query::All, &mut buf).unwrap();
            assert_eq!((ix.blocks(), ix.wildcard()), (nchunks as usize, vec![7]));
            assert_eq!(buf, bytes, "{nchunks} chunks");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Format 3 keeps 2 bytes per block (the first record's offset in it) and 16 per chunk
    /// (its times), where format 2 kept 24 per block: the offsets read back right.
    #[test]
    fn each_block_knows_its_first_record() {
        let (bytes, offsets) = built(20_000);
        let ix = Index::parse(&bytes).unwrap();
        let nblocks = ix.blocks();
        assert_eq!(nblocks as u64, (20_000u64 * 96).div_ceil(4096));
        // Every block's first record is the first record at or after its start.
        for b in 0..nblocks {
            let start = b as u64 * 4096;
            let want = offsets.iter().find(|&&o| o >= start).copied();
            let got = (ix.first[b] != NONE32).then(|| u64::from(ix.first[b]) + start);
            assert_eq!(got, want.filter(|&o| o < start + 4096));
        }
    }

    proptest! {
        /// Whatever the deltas, a list that parses is strictly increasing and in range, and
        /// parsing never panics (overflow checks are on in this debug build).
        #[test]
        fn parsed_lists_are_sorted_and_in_range(
            nchunks in 1u32..64,
            deltas in proptest::collection::vec(
                prop_oneof![0u64..8, (u64::MAX - 64)..=u64::MAX, any::<u64>()],
                0..8,
            ),
        ) {
            let n = deltas.len().min(nchunks as usize);
            if let Ok(ix) = Index::parse(&crafted(nchunks, &deltas[..n])) {
                prop_assert!(ix.wildcard.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(ix.wildcard.iter().all(|&c| c < nchunks));
            }
        }
    }
}
