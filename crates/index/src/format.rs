//! The index file format, and reading it back.
//!
//! ```text
//! "WEIRIDX2"                                  8 bytes
//! covered_len, head_hash, packets,            u64 each
//! first_ns, last_ns
//! chunk_size, block count N,                  u32 each
//! blocks per chunk P
//! N × (first record offset, min ts, max ts)   u64 each (offset u64::MAX: no record starts there)
//! wildcard block list                         varint count, delta varints
//! key count K                                 u32
//! K × (tag u8, value, list)                   value: 1 (proto), 2 (port), 4 (IPv4), 16 (IPv6) bytes;
//!                                             tag | 0x80: the list is of chunks, else of blocks
//! CRC-32 of all the above                     u32
//! ```
//!
//! A block is `chunk_size / P` bytes of the segment (4 KiB with the default 128 KiB chunks and
//! P = 32). A key found in few blocks of its chunks (a rare host, a port of a few calls) lists
//! its blocks, so an extraction reads a few KiB per packet; a key spread over most blocks of its
//! chunks lists the chunks (a smaller list; reading the blocks would save little).
//!
//! Version 1 (`"WEIRIDX1"`, weir before session 15) has no P: its blocks are its chunks and
//! every list is of chunks. It is still read (stores written before keep their indexes).

use crate::keys::Key;
use crate::query::Query;

const MAGIC: &[u8; 8] = b"WEIRIDX2";
/// Version 1: one block per chunk.
const MAGIC_V1: &[u8; 8] = b"WEIRIDX1";
/// The tag bit of a key whose list is of chunks.
const COARSE: u8 = 0x80;
/// "No record starts in this chunk."
pub(crate) const NONE: u64 = u64::MAX;
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

fn list(out: &mut Vec<u8>, chunks: &[u32]) {
    varint(out, chunks.len() as u64);
    let mut prev = 0u32;
    for (i, &c) in chunks.iter().enumerate() {
        varint(out, u64::from(if i == 0 { c } else { c - prev }));
        prev = c;
    }
}

/// The file up to and including the key count: header, block table, wildcard list.
pub(crate) fn write_head(
    h: &Header,
    chunks: &[ChunkInfo],
    wildcard: &[u32],
    nkeys: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + chunks.len() * 24 + nkeys * 8);
    out.extend_from_slice(MAGIC);
    for v in [h.covered_len, h.head_hash, h.packets, h.first_ns, h.last_ns] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&h.chunk_size.to_le_bytes());
    out.extend_from_slice(&(chunks.len() as u32).to_le_bytes());
    out.extend_from_slice(&h.per.to_le_bytes());
    for c in chunks {
        for v in [c.first, c.min_ns, c.max_ns] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    list(&mut out, wildcard);
    out.extend_from_slice(&(nkeys as u32).to_le_bytes());
    out
}

/// One key and its `n` blocks, or chunks when `coarse` (strictly increasing); keys must come in
/// [`Key`]'s order.
pub(crate) fn write_key(
    out: &mut Vec<u8>,
    k: Key,
    coarse: bool,
    n: usize,
    chunks: impl Iterator<Item = u32>,
) {
    out.push(k.tag() | if coarse { COARSE } else { 0 });
    match k {
        Key::Proto(p) => out.push(p),
        Key::Port(p) => out.extend_from_slice(&p.to_le_bytes()),
        Key::V4(a) => out.extend_from_slice(&a.to_le_bytes()),
        Key::V6(a) => out.extend_from_slice(&a.to_le_bytes()),
    }
    varint(out, n as u64);
    let mut prev = 0u32;
    for (i, c) in chunks.enumerate() {
        varint(out, u64::from(if i == 0 { c } else { c - prev }));
        prev = c;
    }
}

/// The file: `out` with its CRC-32 appended.
pub(crate) fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// A parsed index file.
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
    blocks: Vec<ChunkInfo>,
    /// Blocks.
    wildcard: Vec<u32>,
    /// Sorted by key: the key, whether its list is of chunks (else of blocks), the list.
    keys: Vec<(Key, bool, Vec<u32>)>,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], IndexError> {
        let s = self
            .b
            .get(self.at..self.at + n)
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

impl Index {
    /// Parses and checks an index file's bytes.
    pub fn parse(bytes: &[u8]) -> Result<Index, IndexError> {
        let v1 = bytes.get(..8) == Some(&MAGIC_V1[..]);
        if bytes.len() < 8 + 40 + 8 + 4 || !(v1 || &bytes[..8] == MAGIC) {
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
        let nchunks = n.div_ceil(per);
        let mut blocks = Vec::with_capacity(n as usize);
        for _ in 0..n {
            blocks.push(ChunkInfo {
                first: c.u64()?,
                min_ns: c.u64()?,
                max_ns: c.u64()?,
            });
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
            block_size: chunk_size / per,
            per,
            blocks,
            wildcard,
            keys,
        })
    }

    /// Reads `path` and checks it against its segment: the segment's first bytes must hash as
    /// recorded and the segment must be at least as long as what the index covers.
    pub fn load(
        path: &std::path::Path,
        segment_head: &[u8],
        segment_len: u64,
    ) -> Result<Index, IndexError> {
        let idx = Index::parse(&std::fs::read(path)?)?;
        if idx.head_hash != head_hash(segment_head) {
            return Err(IndexError::Stale("built for another file"));
        }
        if idx.covered_len > segment_len {
            return Err(IndexError::Stale("covers more than the segment holds"));
        }
        Ok(idx)
    }

    /// Number of chunks.
    pub fn chunks(&self) -> usize {
        self.blocks.len().div_ceil(self.per as usize)
    }

    /// Number of blocks (chunks in a version 1 index).
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Number of distinct keys.
    pub fn keys(&self) -> usize {
        self.keys.len()
    }

    /// Every key with its chunks (both in increasing order).
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
    /// list (increasing).
    pub fn lists(&self) -> impl Iterator<Item = (Key, bool, &[u32])> + '_ {
        self.keys.iter().map(|(k, coarse, v)| (*k, *coarse, &v[..]))
    }

    /// Blocks per chunk (1 in a version 1 index).
    pub fn blocks_per_chunk(&self) -> u32 {
        self.per
    }

    /// Keys whose list is of blocks, and keys whose list is of chunks.
    pub fn fine_and_coarse_keys(&self) -> (usize, usize) {
        let coarse = self.keys.iter().filter(|k| k.1).count();
        (self.keys.len() - coarse, coarse)
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
                all = (0..self.blocks.len() as u32).collect();
                &all
            }
        };
        let mut out: Vec<(u64, u64)> = Vec::new();
        let mut last = u32::MAX;
        for &b in ids {
            let info = self.blocks[b as usize];
            let timely = info.min_ns <= to && info.max_ns >= from;
            let end = ((u64::from(b) + 1) * u64::from(self.block_size)).min(self.covered_len);
            if !(info.first != NONE && info.first < end && timely) {
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
                _ => out.push((info.first, end)),
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
        self.blocks
            .iter()
            .rev()
            .map(|c| c.first)
            .find(|&f| f != NONE && f <= self.covered_len)
            .unwrap_or(0)
    }

    /// Blocks matching `q`, or `None` for "all of them".
    fn eval(&self, q: &Query) -> Option<Vec<u32>> {
        match q {
            Query::All => None,
            Query::Key(k) => Some(self.postings(*k)),
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
        if !*coarse {
            return list.clone();
        }
        let n = self.blocks.len() as u32;
        let mut v = Vec::with_capacity(list.len() * self.per as usize);
        for &c in list {
            let first = c.saturating_mul(self.per);
            v.extend(first..first.saturating_add(self.per).min(n));
        }
        v
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
