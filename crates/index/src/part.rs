//! Index **parts**: the index of a segment being written, in pieces, so that each periodic
//! refresh costs what is new since the last one instead of the whole index so far (issue 20:
//! re-serializing the open segment's whole index every 5 s made each segment O(n²), 55–95 ns of
//! CPU per packet covered at every rewrite).
//!
//! # What a part is
//!
//! A part is an ordinary index file (the format [`IndexBuilder::serialize`] writes) of the
//! segment's chunks from its **first chunk** on, as they stood when it was written, with its
//! offsets counted from that chunk's start (`from`, a multiple of the chunk size, kept in the
//! file's name: `SEGMENT.idx.p<from>`, [`part_path`]). [`IndexBuilder::serialize_part`] builds
//! it from the builder's entries of those chunks only (they are appended in chunk order, so a
//! binary search finds where they start), grouped and written where they are: no merge with
//! what earlier parts hold. The builder keeps each part's key tables and lists, and the final
//! index at the close joins them with the lists of the chunks since the last part
//! (`format/merge.rs`) instead of grouping and encoding every entry again (session 20). The next part
//! starts at the chunk the builder was in (its [`PartWritten::next_chunk`]), so consecutive
//! parts share at most one chunk, and a part written again from the same chunk (no chunk ended
//! since) holds everything the earlier one did and replaces it under the same name.
//!
//! Part `i` describes exactly every record starting in `[from_i, max(last_i, from_i +
//! covered_i))`, its **claim** (`last_i`: the start of its last chunk, which the next part
//! holds whole; `covered_i`: what was on disk when it was written, all of which the builder had
//! seen). It also knows the keys of records past its `covered_len` that were not on disk yet
//! (the builder runs ahead of the disk by up to a flush interval); the next part does not hold
//! those when they lie before its first chunk, so a reader widens every part's `covered_len`
//! to the furthest any valid part covers ([`Parts::covered_len`]).
//!
//! # Reading
//!
//! Until the segment's final `SEGMENT.idx` exists (written at its close, after which the
//! recorder unlinks the parts; stale parts next to a final index are ignored), a reader loads
//! every part ([`Parts::load_for`]) and [plans](Parts::plan) the union of their candidate
//! ranges; what no valid part claims before the covered length (a damaged, stale or missing
//! part) is read whole from a record boundary another part knows (or the file's start), and
//! the tail past the covered length is read whole, as for one index. The result is the same
//! exact-or-superset as the whole index's: every record the whole index would give is in it
//! (unit test below: union of the parts' candidates ⊇ the whole index's, for random queries).

use std::path::{Path, PathBuf};

use super::IndexBuilder;
use crate::format::merge::{merge, Piece};
use crate::format::{ChunkInfo, Writer, NONE};
use crate::{index_path, Index, IndexError, Query, ReadRange};

/// The file of the part of `segment`'s index whose first chunk starts at byte `from` of the
/// segment: `SEGMENT.idx.p<from>`.
pub fn part_path(segment: &Path, from: u64) -> PathBuf {
    let mut s = index_path(segment).into_os_string();
    s.push(format!(".p{from}"));
    PathBuf::from(s)
}

/// The parts of `segment`'s index on disk, as `(from, path)` sorted by `from` (none when the
/// directory cannot be read). Temporary files (`.tmp`) and other names are not parts.
pub fn part_paths(segment: &Path) -> Vec<(u64, PathBuf)> {
    let (Some(dir), Some(name)) = (segment.parent(), segment.file_name()) else {
        return Vec::new();
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut prefix = name.to_owned();
    prefix.push(".idx.p");
    let prefix = prefix.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| {
            let e = e.ok()?;
            let n = e.file_name();
            let digits = n.to_str()?.strip_prefix(&prefix)?;
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            Some((digits.parse().ok()?, segment.with_file_name(&n)))
        })
        .collect();
    v.sort();
    v
}

/// Removes the parts of `segment`'s index (once its final index is in place, or with the
/// segment); returns how many were removed.
pub fn remove_parts(segment: &Path) -> usize {
    part_paths(segment)
        .into_iter()
        .filter(|(_, p)| std::fs::remove_file(p).is_ok())
        .count()
}

/// A part built by [`IndexBuilder::serialize_part`].
#[derive(Debug)]
pub struct PartWritten {
    /// Byte offset of its first chunk in the segment (the name's number, [`part_path`]).
    pub from: u64,
    /// The chunk the next part starts at (the chunk of the last packet added).
    pub next_chunk: u32,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// The lists of the parts written so far, kept for the final index (`merge.rs`).
#[derive(Default)]
pub(crate) struct Pieces {
    /// `(first chunk, the chunk the next part starts at, the part's key tables and lists)`,
    /// in chunk order.
    list: Vec<(u32, u32, Writer)>,
    /// A part did not start where the last one said the next would (or the first not at the
    /// segment's start): the final index is written from the entries.
    broken: bool,
}

impl Pieces {
    /// Keeps part `w` of chunks `c0` and later, the next from `next` (it replaces the last one
    /// when from the same chunk).
    fn keep(&mut self, c0: u32, next: u32, w: Writer) {
        match self.list.last_mut() {
            Some(last) if last.0 == c0 => *last = (c0, next, w),
            Some(last) if last.1 == c0 => self.list.push((c0, next, w)),
            None if c0 == 0 => self.list.push((c0, next, w)),
            _ => self.broken = true,
        }
    }

    pub(crate) fn clear(&mut self) {
        self.list.clear();
        self.broken = false;
    }
}

impl IndexBuilder {
    /// The blocks of the chunks from `first_chunk` on, their first records counted from the
    /// first of them, and the wildcard blocks among them, numbered from it: a part's own.
    fn blocks_from(&self, first_chunk: u32) -> (Vec<ChunkInfo>, Vec<u32>) {
        let b0 = (u64::from(first_chunk) << self.sh).min(self.chunks.len() as u64) as usize;
        let base = b0 as u64 * u64::from(self.block_size);
        let blocks = self.chunks[b0..]
            .iter()
            .map(|c| ChunkInfo {
                first: if c.first == NONE {
                    NONE
                } else {
                    c.first - base
                },
                ..*c
            })
            .collect();
        let w0 = self.wildcard.partition_point(|&b| (b as usize) < b0);
        let wildcard = self.wildcard[w0..].iter().map(|&b| b - b0 as u32).collect();
        (blocks, wildcard)
    }

    /// The part of the index from chunk `first_chunk` on (see the [module doc](self)),
    /// covering the segment up to `covered_len` (absolute; what is on disk), whose first
    /// [`HEAD_LEN`](crate::HEAD_LEN) bytes hash to `head_hash`. Costs the entries of those
    /// chunks, not the whole index (they are grouped and written where they are, session 20;
    /// session 19 copied them into a scratch builder first). The builder keeps everything
    /// for the final [`serialize`](Self::serialize), and the part's lists, which the final
    /// index joins when the parts follow each other from the segment's start.
    /// `first_chunk` past the last chunk added gives a part of no chunk.
    pub fn serialize_part(
        &mut self,
        first_chunk: u32,
        covered_len: u64,
        head_hash: u64,
    ) -> PartWritten {
        // The current chunk's keys so far into the entries (as `serialize` does).
        self.flush();
        let from = u64::from(first_chunk) * u64::from(self.chunk_size);
        let next_chunk = if self.chunk == u32::MAX {
            first_chunk
        } else {
            self.chunk.max(first_chunk)
        };
        let w = self.write_lists(first_chunk, Some(next_chunk));
        let (blocks, wildcard) = self.blocks_from(first_chunk);
        // The segment's packets so far; the part's time span from its chunks.
        let timed = blocks.iter().filter(|c| c.first != NONE);
        let first_ns = timed.clone().map(|c| c.min_ns).min().unwrap_or(0);
        let last_ns = timed.map(|c| c.max_ns).max().unwrap_or(0);
        let h = self.header(
            covered_len.saturating_sub(from),
            head_hash,
            first_ns,
            last_ns,
        );
        let bytes = w.finish(&h, &blocks, &wildcard);
        self.pieces.keep(first_chunk, next_chunk, w);
        PartWritten {
            from,
            next_chunk,
            bytes,
        }
    }

    /// The final index's key tables and lists joined from the parts' and those of the chunks
    /// since the last part, when the parts follow each other from the segment's start (else
    /// `None`: written from the entries).
    pub(super) fn merged_parts(&mut self) -> Option<Writer> {
        if self.pieces.broken || self.pieces.list.is_empty() {
            return None;
        }
        let tail_c0 = self.pieces.list.last().expect("a part").1;
        let tail = self.write_lists(tail_c0, Some(u32::MAX));
        let mut pieces: Vec<Piece<'_>> = self
            .pieces
            .list
            .iter()
            .map(|(c0, end, w)| Piece {
                c0: *c0,
                end: *end,
                w,
            })
            .collect();
        pieces.push(Piece {
            c0: tail_c0,
            end: u32::MAX,
            w: &tail,
        });
        merge(&pieces, self.sh)
    }
}

/// One part as a reader found it: where it starts and its index, or why it cannot be used.
#[derive(Debug)]
pub struct LoadedPart {
    /// Byte offset of its first chunk (from its name).
    pub from: u64,
    /// Its file.
    pub path: PathBuf,
    /// Its index (checked against the segment), or why it is unusable.
    pub index: Result<Index, IndexError>,
    /// Its own covered length (absolute; the reader widens the index's to
    /// [`Parts::covered_len`]).
    own_covered: u64,
}

/// The parts of a segment's index (see the [module doc](self)).
#[derive(Debug, Default)]
pub struct Parts {
    /// Sorted by `from`.
    pub parts: Vec<LoadedPart>,
    covered: u64,
}

impl Parts {
    /// Loads every part of `segment` (`head`: its first bytes, `segment_len`: its length) with
    /// what query `q` needs of each ([`Index::load_for`]; `buf` reused). No part: empty.
    pub fn load_for(
        segment: &Path,
        head: &[u8],
        segment_len: u64,
        q: &Query,
        buf: &mut Vec<u8>,
    ) -> Parts {
        Parts::load_with(segment, segment_len, |p, from| {
            Index::load_for(p, head, segment_len.saturating_sub(from), q, buf)
        })
    }

    /// Loads every part of `segment` whole ([`Index::load`]).
    pub fn load(segment: &Path, head: &[u8], segment_len: u64) -> Parts {
        Parts::load_with(segment, segment_len, |p, from| {
            Index::load(p, head, segment_len.saturating_sub(from))
        })
    }

    fn load_with(
        segment: &Path,
        segment_len: u64,
        mut load: impl FnMut(&Path, u64) -> Result<Index, IndexError>,
    ) -> Parts {
        let mut parts: Vec<LoadedPart> = part_paths(segment)
            .into_iter()
            .map(|(from, path)| {
                let index = load(&path, from).and_then(|ix| {
                    if ix.chunk_size == 0 || from % u64::from(ix.chunk_size) != 0 {
                        Err(IndexError::Corrupt("part not at a chunk boundary"))
                    } else {
                        Ok(ix)
                    }
                });
                let own_covered = index.as_ref().map_or(0, |ix| from + ix.covered_len);
                LoadedPart {
                    from,
                    path,
                    index,
                    own_covered,
                }
            })
            .collect();
        let covered = parts
            .iter()
            .map(|p| p.own_covered)
            .max()
            .unwrap_or(0)
            .min(segment_len);
        // Every valid part answers up to the furthest covered length (module doc).
        for p in &mut parts {
            if let Ok(ix) = &mut p.index {
                ix.covered_len = covered.saturating_sub(p.from);
            }
        }
        Parts { parts, covered }
    }

    /// No part on disk.
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty()
    }

    /// The parts that cannot be used, with why.
    pub fn damaged(&self) -> impl Iterator<Item = (&Path, &IndexError)> {
        self.parts
            .iter()
            .filter_map(|p| p.index.as_ref().err().map(|e| (p.path.as_path(), e)))
    }

    /// How far the valid parts cover the segment (bytes from its start).
    pub fn covered_len(&self) -> u64 {
        self.covered
    }

    /// The valid parts' indexes with their first byte.
    fn valid(&self) -> impl Iterator<Item = (u64, u64, &Index)> + Clone {
        self.parts
            .iter()
            .filter_map(|p| p.index.as_ref().ok().map(|ix| (p.from, p.own_covered, ix)))
    }

    /// The start of the last record a valid part knows at or before `at`, else 0 (the file's
    /// start, where reading may always begin).
    fn boundary_at_or_before(&self, at: u64) -> u64 {
        self.valid()
            .filter(|(from, _, _)| *from <= at)
            .filter_map(|(from, _, ix)| ix.record_at_or_before(at - from).map(|r| from + r))
            .max()
            .unwrap_or(0)
    }

    /// What to read of a segment of `segment_len` bytes for query `q` and timestamps in
    /// `[from, to]`: the union of the valid parts' candidates, the stretches before the
    /// covered length that no valid part claims (read whole), and the tail past it; disjoint,
    /// in file order. No valid part: the whole segment.
    pub fn plan(&self, q: &Query, from: u64, to: u64, segment_len: u64) -> Vec<ReadRange> {
        if self.valid().next().is_none() {
            return vec![ReadRange::WHOLE];
        }
        let covered = self.covered;
        let mut ranges = Vec::new();
        // What the valid parts claim, as [start, end) (module doc).
        let mut claims = Vec::new();
        for (start, own, ix) in self.valid() {
            for (s, e) in ix.candidates(q, from, to) {
                ranges.push(ReadRange {
                    start: start + s,
                    end: start + e,
                    skip_below: 0,
                });
            }
            let last = start + (ix.chunks().max(1) as u64 - 1) * u64::from(ix.chunk_size);
            claims.push((start, last.max(own)));
        }
        // The holes of the claims before `covered`, read whole.
        claims.sort_unstable();
        let mut at = 0;
        let mut holes = Vec::new();
        for (s, e) in claims {
            if s > at {
                holes.push((at, s.min(covered)));
            }
            at = at.max(e);
            if at >= covered {
                break;
            }
        }
        if at < covered {
            holes.push((at, covered));
        }
        for (s, e) in holes.into_iter().filter(|(s, e)| s < e) {
            ranges.push(ReadRange {
                start: self.boundary_at_or_before(s),
                end: e,
                skip_below: s,
            });
        }
        if covered < segment_len {
            ranges.push(ReadRange {
                start: self.boundary_at_or_before(covered),
                end: u64::MAX,
                skip_below: covered,
            });
        }
        union(ranges)
    }
}

/// The ranges as disjoint ones in file order: those whose used records (from
/// `max(start, skip_below)` to `end`) overlap or touch merged, each read from the first one's
/// start (a record boundary at or before all of them).
fn union(mut ranges: Vec<ReadRange>) -> Vec<ReadRange> {
    let lo = |r: &ReadRange| r.start.max(r.skip_below);
    ranges.sort_by_key(|r| (lo(r), r.start));
    let mut out: Vec<ReadRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        if r.end <= lo(&r) {
            continue;
        }
        match out.last_mut() {
            Some(p) if lo(&r) <= p.end => p.end = p.end.max(r.end),
            _ => out.push(ReadRange {
                start: r.start,
                end: r.end,
                skip_below: lo(&r),
            }),
        }
    }
    if let [r] = &out[..] {
        if r.start == 0 && r.skip_below == 0 && r.end == u64::MAX {
            return vec![ReadRange::WHOLE];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::head_hash;
    use weir_packet::LinkType;

    /// xorshift64.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// One recorded packet: its record's offset and length, time, addresses, ports, protocol.
    #[derive(Clone, Copy, Debug)]
    struct Rec {
        off: u64,
        len: u64,
        ts: u64,
        src: u32,
        dst: u32,
        sport: u16,
        dport: u16,
        proto: u8,
        broken: bool,
    }

    /// An Ethernet/IPv4/UDP-or-TCP frame of `r` (a truncated IP header when `broken`: the
    /// index puts its block on the wildcard list).
    fn frame(r: &Rec) -> Vec<u8> {
        let mut f = vec![0u8; 64];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&50u16.to_be_bytes());
        f[22] = 64;
        f[23] = r.proto;
        f[26..30].copy_from_slice(&r.src.to_be_bytes());
        f[30..34].copy_from_slice(&r.dst.to_be_bytes());
        f[34..36].copy_from_slice(&r.sport.to_be_bytes());
        f[36..38].copy_from_slice(&r.dport.to_be_bytes());
        if r.broken {
            f.truncate(20);
        }
        f
    }

    /// Diverse traffic: 300 addresses, random source ports, a few service ports.
    fn traffic(rng: &mut Rng, n: usize) -> Vec<Rec> {
        let mut off = 200;
        (0..n)
            .map(|i| {
                let len = 80 + rng.below(120);
                let r = Rec {
                    off,
                    len,
                    // Mostly increasing, some out of order (capture threads).
                    ts: 1_000_000 + i as u64 * 1000 - rng.below(3000),
                    src: 0x0a00_0000 | rng.below(300) as u32,
                    dst: 0x0a00_0000 | rng.below(300) as u32,
                    sport: rng.below(65536) as u16,
                    dport: [53, 80, 443, 5060, 40000][rng.below(5) as usize],
                    proto: if rng.below(4) == 0 { 6 } else { 17 },
                    broken: rng.below(700) == 0,
                };
                off += len;
                r
            })
            .collect()
    }

    /// What a reader following `ranges` selects (record indexes), checking that every range
    /// starts at a record boundary (or 0), that they are disjoint and in order, and that no
    /// record is read twice.
    fn read(recs: &[Rec], ranges: &[ReadRange]) -> Vec<usize> {
        let mut got = Vec::new();
        let mut prev_end = 0;
        for r in ranges {
            let lo = r.start.max(r.skip_below);
            assert!(lo >= prev_end, "overlapping ranges {ranges:?}");
            prev_end = r.end;
            assert!(
                r.start == 0 || recs.iter().any(|x| x.off == r.start),
                "{r:?} starts inside a record"
            );
            got.extend(
                recs.iter()
                    .enumerate()
                    .filter(|(_, x)| x.off >= lo && x.off < r.end)
                    .map(|(i, _)| i),
            );
        }
        let n = got.len();
        got.dedup();
        assert_eq!(got.len(), n, "a record read twice");
        got
    }

    /// Whether a record matches a query (the scan's oracle).
    type Oracle = Box<dyn Fn(&Rec) -> bool>;

    /// The queries: (expression, oracle on a record).
    fn queries(rng: &mut Rng) -> Vec<(String, Oracle)> {
        let mut v: Vec<(String, Oracle)> = Vec::new();
        for _ in 0..12 {
            let a = 0x0a00_0000 | rng.below(300) as u32;
            let p = [53u16, 5060, 40000, rng.below(65536) as u16][rng.below(4) as usize];
            let ip = std::net::Ipv4Addr::from(a);
            v.push((
                format!("host {ip}"),
                Box::new(move |r| r.src == a || r.dst == a),
            ));
            v.push((
                format!("port {p}"),
                Box::new(move |r| r.sport == p || r.dport == p),
            ));
            v.push((
                format!("host {ip} and udp"),
                Box::new(move |r| (r.src == a || r.dst == a) && r.proto == 17),
            ));
            v.push((
                format!("host {ip} or port {p}"),
                Box::new(move |r| r.src == a || r.dst == a || r.sport == p || r.dport == p),
            ));
        }
        v
    }

    /// Writes the parts a recorder would: every `every` packets one from the chunk of the
    /// last packet of the previous one, covering up to `lag` packets less (what is on disk;
    /// sometimes mid-record).
    fn record_with_parts(
        dir: &Path,
        recs: &[Rec],
        chunk: u32,
        every: usize,
        lag: usize,
        rng: &mut Rng,
    ) -> (IndexBuilder, u64) {
        let seg = dir.join("seg.pcapng");
        let hh = head_hash(b"segment head");
        let mut b = IndexBuilder::new(chunk);
        let mut next = 0;
        let mut covered = 0;
        for (i, r) in recs.iter().enumerate() {
            b.add(r.off, r.ts, LinkType::ETHERNET, &frame(r));
            if i % every == every - 1 && i > lag {
                let d = &recs[i - lag - rng.below(lag as u64) as usize];
                covered = (d.off + rng.below(d.len)).max(covered);
                let p = b.serialize_part(next, covered, hh);
                std::fs::write(part_path(&seg, p.from), &p.bytes).unwrap();
                next = p.next_chunk;
            }
        }
        (b, covered)
    }

    /// The union of the parts' candidates holds every record the whole index names and every
    /// record a scan finds matching (random queries and time windows on diverse traffic), with
    /// every part valid, one damaged, one missing; each record read once.
    #[test]
    fn parts_candidates_cover_the_whole_index_and_a_scan() {
        let mut rng = Rng(0x5eed_1234_5678_9abc);
        let recs = traffic(&mut rng, 12_000);
        let end = recs.last().map(|r| r.off + r.len).unwrap();
        let qs = queries(&mut rng);
        let head = b"segment head";
        for (chunk, every, lag) in [(8192u32, 1000usize, 200usize), (4096, 333, 50)] {
            let dir = std::env::temp_dir()
                .join(format!("weir-parts-{}-{chunk}-{every}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let seg = dir.join("seg.pcapng");
            let (mut b, covered) = record_with_parts(&dir, &recs, chunk, every, lag, &mut rng);
            // The whole index from a builder that wrote no part (the final index of the one
            // that did is joined from its parts: tested below).
            let whole = Index::parse(&whole_index(&recs, chunk, covered, head)).unwrap();
            let joined = Index::parse(&b.serialize(covered, head_hash(head))).unwrap();
            assert_eq!(joined.packets, whole.packets);
            let paths = part_paths(&seg);
            assert!(paths.len() > 5, "{} parts", paths.len());
            for damage in ["none", "damaged", "missing"] {
                match damage {
                    "damaged" => {
                        let (_, p) = &paths[paths.len() / 2];
                        let mut bytes = std::fs::read(p).unwrap();
                        let at = bytes.len() / 2;
                        bytes[at] ^= 0x55;
                        std::fs::write(p, bytes).unwrap();
                    }
                    "missing" => std::fs::remove_file(&paths[paths.len() / 3].1).unwrap(),
                    _ => {}
                }
                let mut buf = Vec::new();
                let mut reads = (0, 0, 0);
                let all = Parts::load(&seg, head, end);
                assert_eq!(all.damaged().count(), usize::from(damage != "none"));
                if damage == "none" {
                    assert_eq!(all.covered_len(), covered);
                }
                for (expr, matches) in &qs {
                    let q = Query::from_expr(expr);
                    let (from, to) = {
                        let a = 1_000_000 + rng.below(12_000_000);
                        (a, a + rng.below(6_000_000))
                    };
                    let parts = Parts::load_for(&seg, head, end, &q, &mut buf);
                    let got = read(&recs, &parts.plan(&q, from, to, end));
                    let want_ix = read(&recs, &whole.plan(&q, from, to, end));
                    let got_joined = read(&recs, &joined.plan(&q, from, to, end));
                    let whole_reads = want_ix.len();
                    let scan: Vec<usize> = (0..recs.len())
                        .filter(|&i| {
                            let r = &recs[i];
                            r.ts >= from && r.ts <= to && matches(r)
                        })
                        .collect();
                    // Every matching record of the whole index's ranges (its lists may be of
                    // chunks where a part's are of blocks), and of a scan.
                    let want_ix: Vec<usize> =
                        want_ix.into_iter().filter(|i| scan.contains(i)).collect();
                    reads.0 += got.len();
                    reads.1 += whole_reads;
                    reads.2 += got_joined.len();
                    // The final index joined from the parts finds every matching record.
                    let lost: Vec<&usize> = scan
                        .iter()
                        .filter(|i| got_joined.binary_search(i).is_err())
                        .collect();
                    assert!(lost.is_empty(), "{expr}: joined index misses {lost:?}");
                    for (what, want) in [("whole index", &want_ix), ("scan", &scan)] {
                        let missing: Vec<usize> = want
                            .iter()
                            .filter(|i| got.binary_search(i).is_err())
                            .copied()
                            .collect();
                        assert!(
                            missing.is_empty(),
                            "{expr} in [{from}, {to}], {damage} part, chunk {chunk}: {} \
                             records of the {what} not in the parts' plan: {:?}",
                            missing.len(),
                            &missing[..missing.len().min(5)]
                        );
                    }
                    // The parts narrow (a host of 300 in 12 000 packets).
                    if damage == "none" && expr.starts_with("host") && !expr.contains(" or ") {
                        assert!(got.len() < recs.len() / 2, "{expr}: {} read", got.len());
                    }
                }
                // Intact parts read no more than the whole index would (their lists are of
                // blocks more often: 63 208 vs 66 325 and 59 932 vs 70 274 records here).
                if damage == "none" {
                    assert!(reads.0 <= reads.1, "chunk {chunk}: {reads:?}");
                }
                // The joined final index reads no more than the whole one (a key listed by
                // blocks in every part keeps its blocks).
                assert!(reads.2 <= reads.1, "chunk {chunk}: {reads:?}");
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// The whole index of `recs` covering `covered` bytes, from a builder that wrote no part.
    fn whole_index(recs: &[Rec], chunk: u32, covered: u64, head: &[u8]) -> Vec<u8> {
        let mut b = IndexBuilder::new(chunk);
        for r in recs {
            b.add(r.off, r.ts, LinkType::ETHERNET, &frame(r));
        }
        b.serialize(covered, head_hash(head))
    }

    /// Session 19's part (the oracle of the part written in place, its lists chosen as a part's
    /// are now): the builder's entries of
    /// chunks `c0` and later copied into a scratch builder, chunks renumbered from `c0`,
    /// serialized whole. `b` must have been flushed (by the part written just before).
    fn copied_part(b: &IndexBuilder, c0: u32, covered: u64, hh: u64) -> Vec<u8> {
        use crate::builder::Postings;
        fn copy(from: &Postings, to: &mut Postings, c0: u32, mut id: impl FnMut(u32) -> u32) {
            for i in from.since(c0)..from.id.len() {
                let x = from.cm[i];
                to.push(id(from.id[i]), (x >> 32) as u32 - c0, x as u32);
            }
        }
        let mut sub = IndexBuilder::with_port_grain(b.chunk_size, b.grain);
        (sub.chunks, sub.wildcard) = b.blocks_from(c0);
        copy(&b.protos, &mut sub.protos, c0, |id| id);
        copy(&b.ports, &mut sub.ports, c0, |id| id);
        copy(&b.buckets, &mut sub.buckets, c0, |id| id);
        let mut map = vec![u32::MAX; b.v4_ids.addr.len()];
        let sub_ids = &mut sub.v4_ids;
        copy(&b.v4, &mut sub.v4, c0, |id| {
            let m = &mut map[id as usize];
            if *m == u32::MAX {
                *m = sub_ids.id(b.v4_ids.addr[id as usize]);
            }
            *m
        });
        sub.v6 =
            b.v6.iter()
                .filter(|e| e.1 >= c0)
                .map(|&(a, c, m)| (a, c - c0, m))
                .collect();
        sub.packets = b.packets;
        let timed = sub.chunks.iter().filter(|c| c.first != NONE);
        sub.first_ns = timed.clone().map(|c| c.min_ns).min();
        sub.last_ns = timed.map(|c| c.max_ns).max().unwrap_or(0);
        sub.serialize(
            covered.saturating_sub(u64::from(c0) * u64::from(b.chunk_size)),
            hh,
        )
    }

    /// A part written in place from the builder's entries is byte for byte the part session
    /// 19 wrote by copying them into a scratch builder (IPv4 and IPv6 traffic, damaged frames,
    /// parts mid-chunk, a part written again from the same chunk).
    #[test]
    fn parts_written_in_place_are_the_copied_ones() {
        let mut rng = Rng(0xfeed_0042);
        let recs = traffic(&mut rng, 6_000);
        let hh = head_hash(b"head");
        for (chunk, every) in [(8192u32, 700usize), (4096, 150), (4096, 20)] {
            let mut b = IndexBuilder::new(chunk);
            let (mut next, mut parts) = (0, 0);
            for (i, r) in recs.iter().enumerate() {
                let mut f = frame(r);
                if i % 5 == 0 {
                    // Some IPv6/UDP frames: the v6 entries too.
                    f = vec![0u8; 62];
                    f[12..14].copy_from_slice(&[0x86, 0xdd]);
                    f[14] = 0x60;
                    f[18..20].copy_from_slice(&8u16.to_be_bytes());
                    f[20] = 17;
                    f[21] = 64;
                    f[22..38].copy_from_slice(&u128::from(r.src).to_be_bytes());
                    f[38..54].copy_from_slice(&u128::from(r.dst).to_be_bytes());
                    f[54..56].copy_from_slice(&r.sport.to_be_bytes());
                    f[56..58].copy_from_slice(&r.dport.to_be_bytes());
                }
                b.add(r.off, r.ts, LinkType::ETHERNET, &f);
                if i % every == every - 1 {
                    let covered = r.off - rng.below(3000).min(r.off);
                    let p = b.serialize_part(next, covered, hh);
                    let old = copied_part(&b, next, covered, hh);
                    assert!(
                        p.bytes == old,
                        "part {parts}, chunk {chunk}: not the copied one"
                    );
                    next = p.next_chunk;
                    parts += 1;
                }
            }
            assert!(parts > 5);
        }
    }

    /// The final index joined from parts is the whole index byte for byte when one piece
    /// covers everything (a part of no chunk at the start), and answers as the whole index
    /// (a superset of the scan's records, never more read than the whole index's; checked
    /// above) at about its size when the parts are many.
    #[test]
    fn the_final_index_joined_from_parts_is_the_whole_one() {
        let mut rng = Rng(0x1dea_5eed);
        let recs = traffic(&mut rng, 8_000);
        let end = recs.last().map(|r| r.off + r.len).unwrap();
        let hh = head_hash(b"head");
        let chunk = 4096;
        let whole = whole_index(&recs, chunk, end, b"head");
        // A part before the first packet: the tail piece is everything.
        let mut b = IndexBuilder::new(chunk);
        let p = b.serialize_part(0, 0, hh);
        assert_eq!(p.next_chunk, 0);
        for r in &recs {
            b.add(r.off, r.ts, LinkType::ETHERNET, &frame(r));
        }
        assert!(
            b.serialize(end, hh) == whole,
            "one piece: not the whole index"
        );
        // Parts every 100 packets: the joined index within 10 % of the whole one's size.
        let mut b = IndexBuilder::new(chunk);
        let mut next = 0;
        for (i, r) in recs.iter().enumerate() {
            b.add(r.off, r.ts, LinkType::ETHERNET, &frame(r));
            if i % 100 == 99 {
                next = b.serialize_part(next, r.off, hh).next_chunk;
            }
        }
        let joined = b.serialize(end, hh);
        let (j, w) = (joined.len() as f64, whole.len() as f64);
        assert!((j - w).abs() <= w * 0.1, "joined {j} bytes, whole {w}");
        let (j, w) = (
            Index::parse(&joined).unwrap(),
            Index::parse(&whole).unwrap(),
        );
        assert_eq!(
            (j.packets, j.first_ns, j.last_ns),
            (w.packets, w.first_ns, w.last_ns)
        );
        // A part not from the segment's start: written from the entries, as by a builder
        // serialized whole at the same packet (which flushes the chunk's keys so far too).
        let (mut b, mut oracle) = (IndexBuilder::new(chunk), IndexBuilder::new(chunk));
        for (i, r) in recs.iter().enumerate() {
            b.add(r.off, r.ts, LinkType::ETHERNET, &frame(r));
            oracle.add(r.off, r.ts, LinkType::ETHERNET, &frame(r));
            if i == 4000 {
                b.serialize_part(3, r.off, hh);
                oracle.serialize(r.off, hh);
            }
        }
        assert!(b.serialize(end, hh) == oracle.serialize(end, hh));
    }

    /// The union of ranges: overlapping or touching ones merged from the earliest start,
    /// empty ones dropped (values by hand).
    #[test]
    fn ranges_are_merged_into_disjoint_ones() {
        let r = |start, end, skip_below| ReadRange {
            start,
            end,
            skip_below,
        };
        let got = union(vec![
            r(500, 600, 0),
            r(100, 200, 0),
            r(150, 300, 0),
            r(300, 350, 0),
            r(400, 450, 450),
            r(380, u64::MAX, 700),
        ]);
        assert_eq!(
            got,
            vec![r(100, 350, 100), r(500, 600, 500), r(380, u64::MAX, 700)]
        );
        assert_eq!(union(vec![r(0, u64::MAX, 0)]), vec![ReadRange::WHOLE]);
    }
}
