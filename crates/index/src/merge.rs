//! Joining the lists of index parts into one index (issue 20): the close of a segment whose
//! index was written as parts makes its final index from the lists the parts already encoded,
//! instead of grouping and encoding every entry of the segment again.
//!
//! A **piece** is the [`Writer`] of one part: the lists of the chunks from its first, `c0`, on,
//! counted from there. It is used for its chunks below `end` (the next piece's first chunk; a
//! part written mid-chunk holds the start of the chunk the next one holds whole), so the pieces
//! tile the segment. For every key of any piece (the pieces' key tables sorted together, in the
//! file's key order) its lists are joined:
//!
//! - lists of one kind, blocks or chunks as deltas: their delta bytes copied, only each list's
//!   count and first delta written again (a list's items past its piece's `end` are cut off);
//! - otherwise (a chunk bitmap, or blocks in one piece and chunks in another): decoded and
//!   written again as chunks, deltas or a bitmap, whichever is smaller. A key listed by chunks
//!   in one part is then listed by chunks in all: a superset of its blocks, as the index of the
//!   whole segment may choose too (exact-or-superset either way).
//!
//! One piece that covers the whole segment gives the bytes of the whole index (unit test).

use super::{list, varint, varint_len, Writer, KINDS, WIDTH};
use crate::builder::{FINE_ALWAYS, FINE_PER_CHUNK};

/// One part's lists and the chunks it is used for.
pub(crate) struct Piece<'a> {
    /// Its first chunk (its lists count chunks and blocks from there).
    pub c0: u32,
    /// The chunk its use ends before (the next piece's first; `u32::MAX`: none).
    pub end: u32,
    /// Its lists and key tables.
    pub w: &'a Writer,
}

/// A varint at `b[*at..]` (`None`: truncated or over 64 bits).
fn read_varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let x = *b.get(*at)?;
        *at += 1;
        v |= u64::from(x & 0x7f) << shift;
        if x < 0x80 {
            return Some(v);
        }
    }
    None
}

/// One piece's list of a key, as far as the join needs it.
enum Decoded<'a> {
    /// Kind 0 (blocks) or 1 (chunks as deltas): the items kept (below the piece's end), the
    /// first and the last of them (of the whole segment), and the delta bytes after the first
    /// up to the last.
    Deltas {
        kind: u8,
        n: u64,
        first: u64,
        last: u64,
        rest: &'a [u8],
        /// Of blocks (kind 0): what the choice between blocks and chunks needs.
        fine: FineStats,
    },
    /// Chunks (of the whole segment), from a bitmap.
    Chunks(Vec<u32>),
    /// A bitmap as noted ([`bitmap_noted`]): its items kept, the first and the last (of the
    /// whole segment), the varint bytes of their deltas after the first, and its bytes from the
    /// first's up to the last's.
    Bitmap {
        n: u64,
        first: u64,
        last: u64,
        deltas: usize,
        bits: &'a [u8],
    },
}

impl Decoded<'_> {
    /// The chunks of a list of chunks, each passed to `f`, with `sh` = log2 of the blocks per
    /// chunk (a list of blocks gives its blocks' chunks, repeated). `None`: malformed.
    fn chunks(&self, sh: u32, mut f: impl FnMut(u64) -> Option<()>) -> Option<()> {
        match self {
            Decoded::Deltas {
                kind, first, rest, ..
            } => {
                let shift = if *kind == 0 { sh } else { 0 };
                let (mut x, mut at) = (*first, 0);
                f(x >> shift)?;
                while at < rest.len() {
                    x = x.checked_add(read_varint(rest, &mut at)?)?;
                    f(x >> shift)?;
                }
            }
            Decoded::Chunks(v) => {
                for &c in v {
                    f(u64::from(c))?;
                }
            }
            Decoded::Bitmap {
                first, last, bits, ..
            } => {
                for (i, &byte) in bits.iter().enumerate() {
                    let mut m = byte;
                    while m != 0 {
                        let c = first + i as u64 * 8 + u64::from(m.trailing_zeros());
                        if c <= *last {
                            f(c)?;
                        }
                        m &= m - 1;
                    }
                }
            }
        }
        Some(())
    }
}

/// What the join needs of one list of a part, noted as the part is written
/// ([`Writer::noting`]) so that the join copies its bytes without reading its varints again
/// (session 21: reading every list again cost about a whole serialization's third).
#[derive(Clone, Copy, Default)]
pub(crate) struct Noted {
    /// 0 (blocks) or 1 (chunks as deltas); 2: a bitmap, read again by [`decode`].
    kind: u8,
    /// Items below the cut (none: the list is not used), the first and the last of them
    /// (counted from the part's first chunk, or its first block).
    n: u64,
    first: u64,
    last: u64,
    /// Where the delta bytes after the first item up to the last kept one lie in the lists.
    rest: (usize, usize),
    /// Of blocks (kind 0): what the choice between blocks and chunks needs, chunks counted
    /// from the part's first.
    fine: FineStats,
}

/// Bytes of the varints of the deltas of `items[from..]` (each from the item before it).
fn suffix_bytes(items: &[u32], from: usize) -> usize {
    items[from.max(1)..]
        .iter()
        .zip(&items[from.max(1) - 1..])
        .map(|(&x, &p)| varint_len(x - p))
        .sum()
}

/// Items of `items` (increasing) below `cut`.
fn kept(items: &[u32], cut: u32) -> usize {
    if items.last().is_some_and(|&x| x >= cut) {
        items.partition_point(|&x| x < cut)
    } else {
        items.len()
    }
}

/// The note of a bitmap of chunks `items` (increasing) whose bytes start at `at` in the lists,
/// for its items below chunk `cut` (`rest`: the bytes up to the last of them; `fine.coarse`:
/// the varint bytes of their deltas after the first, as a list of chunk deltas would take),
/// with `deltas` = the bytes of all of `items`' deltas (the first's included).
pub(crate) fn bitmap_noted(items: &[u32], at: usize, cut: u32, deltas: usize) -> Noted {
    let kept = kept(items, cut);
    let mut noted = Noted {
        kind: 2,
        n: kept as u64,
        ..Noted::default()
    };
    if kept > 0 {
        let (first, last) = (items[0], items[kept - 1]);
        noted.first = u64::from(first);
        noted.last = u64::from(last);
        noted.rest = (at, at + (last - first) as usize / 8 + 1);
        noted.fine.coarse = deltas - varint_len(first) - suffix_bytes(items, kept);
    }
    noted
}

/// Writes list `items` (increasing; blocks for kind 0, chunks for kind 1) as `format::list`
/// does, and notes what the join needs of its items below `cut` (with `sh` = log2 of the
/// blocks per chunk): the same as [`decode`] reads of the list written. For blocks, `fine`
/// when the caller has the stats of those below the cut (else they are counted here).
pub(crate) fn list_noted(
    out: &mut Vec<u8>,
    items: &[u32],
    kind: u8,
    cut: u32,
    sh: u32,
    fine: Option<FineStats>,
) -> Noted {
    let start = out.len();
    list(out, items);
    let kept = kept(items, cut);
    let mut noted = Noted {
        kind,
        n: kept as u64,
        ..Noted::default()
    };
    if kept == 0 {
        return noted;
    }
    let (first, last) = (items[0], items[kept - 1]);
    noted.first = u64::from(first);
    noted.last = u64::from(last);
    noted.rest = (
        start + varint_len(items.len() as u32) + varint_len(first),
        out.len() - suffix_bytes(items, kept),
    );
    if let (0, Some(f)) = (kind, fine) {
        noted.fine = f;
    } else if kind == 0 {
        let f = &mut noted.fine;
        (f.chunks, f.first_chunk, f.last_chunk) =
            (1, u64::from(first >> sh), u64::from(first >> sh));
        for w in items[..kept].windows(2) {
            let (p, x) = (w[0], w[1]);
            let c = u64::from(x >> sh);
            if c != f.last_chunk {
                f.chunks += 1;
                f.coarse += varint_len((c - f.last_chunk) as u32);
                f.fine += varint_len(x - p);
                f.last_chunk = c;
            } else {
                f.fine += 1;
            }
        }
    }
    noted
}

/// The list a note describes, as [`decode`] would read it of a piece whose first chunk is
/// `c0`, with `sh` = log2 of the blocks per chunk (`None`: no item kept).
fn from_noted<'a>(n: &Noted, lists: &'a [u8], c0: u32, sh: u32) -> Option<Decoded<'a>> {
    if n.n == 0 {
        return None;
    }
    if n.kind == 2 {
        return Some(Decoded::Bitmap {
            n: n.n,
            first: u64::from(c0) + n.first,
            last: u64::from(c0) + n.last,
            deltas: n.fine.coarse,
            bits: &lists[n.rest.0..n.rest.1],
        });
    }
    let (base, cbase) = if n.kind == 0 {
        (u64::from(c0) << sh, u64::from(c0))
    } else {
        (u64::from(c0), u64::from(c0))
    };
    Some(Decoded::Deltas {
        kind: n.kind,
        n: n.n,
        first: base + n.first,
        last: base + n.last,
        rest: &lists[n.rest.0..n.rest.1],
        fine: FineStats {
            first_chunk: cbase + n.fine.first_chunk,
            last_chunk: cbase + n.fine.last_chunk,
            ..n.fine
        },
    })
}

/// What the writer's choice between a key's blocks and its chunks (`builder::write_list`)
/// reads of a list of blocks, within one piece (the joins between pieces added by
/// [`join`]).
#[derive(Clone, Copy, Default)]
pub(crate) struct FineStats {
    /// Chunks, the first and the last.
    pub chunks: u64,
    pub first_chunk: u64,
    pub last_chunk: u64,
    /// Bytes of the chunk deltas after the first chunk, and the estimate of the block list's
    /// bytes after its first block (a chunk's first block's delta, one byte per other block).
    pub coarse: usize,
    pub fine: usize,
}

/// Decodes list `b` of a piece whose first chunk is `c0` and whose use ends before chunk
/// `end`, with `sh` = log2 of the blocks per chunk. `None`: malformed (the caller writes the
/// whole index instead); `Some(None)`: no item kept.
fn decode(b: &[u8], c0: u32, end: u32, sh: u32) -> Option<Option<Decoded<'_>>> {
    let kind = *b.first()?;
    let mut at = 1;
    match kind {
        0 | 1 => {
            let (base, limit) = if kind == 0 {
                (u64::from(c0) << sh, u64::from(end) << sh)
            } else {
                (u64::from(c0), u64::from(end))
            };
            let n = read_varint(b, &mut at)?;
            if n == 0 {
                return Some(None);
            }
            let first = base.checked_add(read_varint(b, &mut at)?)?;
            if first >= limit {
                return Some(None);
            }
            let (rest_at, mut rest_end, mut last, mut kept) = (at, at, first, 1);
            let mut fine = FineStats {
                chunks: 1,
                first_chunk: first >> sh,
                last_chunk: first >> sh,
                ..FineStats::default()
            };
            while kept < n {
                let d = read_varint(b, &mut at)?;
                let x = last.checked_add(d)?;
                if x >= limit {
                    break;
                }
                if kind == 0 {
                    let c = x >> sh;
                    if c != fine.last_chunk {
                        fine.chunks += 1;
                        fine.coarse += varint_len((c - fine.last_chunk) as u32);
                        fine.fine += varint_len((x - last) as u32);
                        fine.last_chunk = c;
                    } else {
                        fine.fine += 1;
                    }
                }
                (last, rest_end, kept) = (x, at, kept + 1);
            }
            Some(Some(Decoded::Deltas {
                kind,
                n: kept,
                first,
                last,
                rest: &b[rest_at..rest_end],
                fine,
            }))
        }
        2 => {
            let first = read_varint(b, &mut at)?;
            let mut v = Vec::new();
            for (i, &byte) in b.get(at..)?.iter().enumerate() {
                let mut m = byte;
                while m != 0 {
                    let c = u64::from(c0) + first + i as u64 * 8 + u64::from(m.trailing_zeros());
                    if c < u64::from(end) {
                        v.push(u32::try_from(c).ok()?);
                    }
                    m &= m - 1;
                }
            }
            Some((!v.is_empty()).then_some(Decoded::Chunks(v)))
        }
        _ => None,
    }
}

/// The pieces' lists of one key joined into `out`'s lists (its table entry already written).
/// `None`: malformed.
fn join(out: &mut Writer, lists: &[Decoded<'_>], sh: u32, chunks: &mut Vec<u32>) -> Option<()> {
    // One kind of deltas in every list: copied.
    let same = match lists.first()? {
        Decoded::Deltas { kind, .. } => lists
            .iter()
            .all(|l| matches!(l, Decoded::Deltas { kind: k, .. } if k == kind))
            .then_some(*kind),
        Decoded::Chunks(_) | Decoded::Bitmap { .. } => None,
    };
    let deltas = || {
        lists.iter().filter_map(|l| match l {
            Decoded::Deltas {
                n,
                first,
                last,
                rest,
                fine,
                ..
            } => Some((*n, *first, *last, *rest, *fine)),
            Decoded::Chunks(_) | Decoded::Bitmap { .. } => None,
        })
    };
    if let Some(kind) = same {
        let n: u64 = deltas().map(|d| d.0).sum();
        // Blocks, if the writer would list the joined blocks as blocks (the same rule on the
        // same sums: `builder::write_list`).
        let blocks = kind == 0 && {
            let (mut chunks, mut coarse, mut fine) = (0, 0, 0);
            let (mut prev_c, mut prev_b) = (0, 0);
            for (_, first, last, _, s) in deltas() {
                chunks += s.chunks;
                coarse += varint_len((s.first_chunk - prev_c) as u32) + s.coarse;
                fine += varint_len((first - prev_b) as u32) + s.fine;
                (prev_c, prev_b) = (s.last_chunk, last);
            }
            sh == 0
                || n <= FINE_ALWAYS as u64
                || (n <= FINE_PER_CHUNK as u64 * chunks && 2 * fine <= 3 * coarse)
        };
        // Chunks as deltas, unless a bitmap of the joined list is smaller (as the writer
        // chooses for one list).
        let bitmap_smaller = kind == 1 && {
            let (mut bytes, mut prev) = (varint_len(n as u32), 0);
            for (_, first, last, rest, _) in deltas() {
                bytes += varint_len((first - prev) as u32) + rest.len();
                prev = last;
            }
            let (first, last) = (deltas().next()?.1, prev);
            varint_len(first as u32) + (last - first) as usize / 8 + 1 < bytes
        };
        if (kind == 0 && blocks) || (kind == 1 && !bitmap_smaller) {
            let b = &mut out.lists;
            b.push(kind);
            varint(b, n);
            let mut prev = 0;
            for (_, first, last, rest, _) in deltas() {
                varint(b, first - prev);
                b.extend_from_slice(rest);
                prev = last;
            }
            return Some(());
        }
    }
    if join_bitmaps(out, lists).is_some() {
        return Some(());
    }
    // Chunks, from every list (blocks to their chunks), into the reused `chunks`.
    chunks.clear();
    let mut push = |c: u64| -> Option<()> {
        let c = u32::try_from(c).ok()?;
        if chunks.last() != Some(&c) {
            chunks.push(c);
        }
        Some(())
    };
    for l in lists {
        l.chunks(sh, &mut push)?;
    }
    out.body(true, chunks.len(), chunks.iter().copied(), None);
    Some(())
}

/// Lists of chunks, a noted bitmap among them, joined as one bitmap, the bitmaps' bytes
/// shifted into place, when the writer would write the joined chunks as a bitmap (the same
/// rule on the same sums as `Writer::body`). `None`: not such lists, or not a bitmap (the
/// caller joins them otherwise).
fn join_bitmaps(out: &mut Writer, lists: &[Decoded<'_>]) -> Option<()> {
    if !lists.iter().any(|l| matches!(l, Decoded::Bitmap { .. })) {
        return None;
    }
    // Per list: items, first, last, delta bytes after the first.
    let stats = |l: &Decoded<'_>| match l {
        Decoded::Deltas {
            kind: 1,
            n,
            first,
            last,
            rest,
            ..
        } => Some((*n, *first, *last, rest.len())),
        Decoded::Bitmap {
            n,
            first,
            last,
            deltas,
            ..
        } => Some((*n, *first, *last, *deltas)),
        _ => None,
    };
    let (mut n, mut bytes, mut prev) = (0u64, 0usize, 0u64);
    for l in lists {
        let (k, first, last, d) = stats(l)?;
        n += k;
        bytes += varint_len(u32::try_from(first - prev).ok()?) + d;
        prev = last;
    }
    let first = stats(&lists[0])?.1;
    let last = prev;
    let deltas = varint_len(u32::try_from(n).ok()?) + bytes;
    let bitmap_len = (last - first) as usize / 8 + 1;
    if deltas <= varint_len(u32::try_from(first).ok()?) + bitmap_len {
        return None;
    }
    let b = &mut out.lists;
    b.push(2);
    varint(b, first);
    let at = b.len();
    b.resize(at + bitmap_len, 0);
    let bits = &mut b[at..];
    for l in lists {
        match l {
            Decoded::Bitmap {
                first: f,
                last: e,
                bits: src,
                ..
            } => {
                let q0 = (f - first) as usize;
                let (sh, whole) = (q0 % 8, q0 / 8);
                let top = (e - f) as usize;
                for (j, &byte) in src.iter().enumerate() {
                    // The last byte's bits past the last item kept cleared.
                    let byte = if j == top / 8 {
                        byte & ((2u16 << (top % 8)) - 1) as u8
                    } else {
                        byte
                    };
                    bits[whole + j] |= byte << sh;
                    if sh != 0 && byte >> (8 - sh) != 0 {
                        bits[whole + j + 1] |= byte >> (8 - sh);
                    }
                }
            }
            l => l.chunks(0, |c| {
                let i = (c - first) as usize;
                bits[i / 8] |= 1 << (i % 8);
                Some(())
            })?,
        }
    }
    Some(())
}

/// The index lists of `pieces` (in chunk order, tiling the segment) joined into one writer,
/// with `sh` = log2 of the blocks per chunk (see the [module doc](self)). `None` when a piece's
/// list cannot be decoded (the caller then writes the whole index from the entries).
pub(crate) fn merge(pieces: &[Piece<'_>], sh: u32) -> Option<Writer> {
    let mut out = Writer::default();
    // Each piece's list bounds: the offsets of its keys in table order (the order the lists
    // were written in), then the lists' end.
    let bounds: Vec<Vec<usize>> = pieces
        .iter()
        .map(|p| {
            let mut v: Vec<usize> = (0..KINDS)
                .flat_map(|k| {
                    let w = WIDTH[k] + 4;
                    p.w.tables[k].chunks_exact(w).map(move |e| {
                        u32::from_le_bytes(e[WIDTH[k]..].try_into().expect("4")) as usize
                    })
                })
                .collect();
            v.push(p.w.lists.len());
            v
        })
        .collect();
    let mut keys: Vec<(u128, u32, u32)> = Vec::new();
    let (mut decoded, mut chunks) = (Vec::new(), Vec::new());
    let mut base = vec![0usize; pieces.len()];
    for kind in 0..KINDS {
        // (value, piece, place in the piece's lists), sorted: each key's lists in piece order.
        keys.clear();
        for (j, p) in pieces.iter().enumerate() {
            let w = WIDTH[kind] + 4;
            for (i, e) in p.w.tables[kind].chunks_exact(w).enumerate() {
                let mut v = [0u8; 16];
                v[..WIDTH[kind]].copy_from_slice(&e[..WIDTH[kind]]);
                keys.push((u128::from_le_bytes(v), j as u32, (base[j] + i) as u32));
            }
        }
        keys.sort_unstable();
        let mut i = 0;
        while i < keys.len() {
            let value = keys[i].0;
            decoded.clear();
            while i < keys.len() && keys[i].0 == value {
                let (j, g) = (keys[i].1 as usize, keys[i].2 as usize);
                let (p, b) = (&pieces[j], &bounds[j]);
                let noted = if p.w.cut_end == p.end && p.w.noted.len() + 1 == b.len() {
                    p.w.noted.get(g)
                } else {
                    None
                };
                if let Some(n) = noted {
                    if let Some(d) = from_noted(n, &p.w.lists, p.c0, sh) {
                        decoded.push(d);
                    }
                } else {
                    let list = p.w.lists.get(b[g]..*b.get(g + 1)?)?;
                    if let Some(d) = decode(list, p.c0, p.end, sh)? {
                        decoded.push(d);
                    }
                }
                i += 1;
            }
            if !decoded.is_empty() {
                out.entry(kind, value);
                join(&mut out, &decoded, sh, &mut chunks)?;
            }
        }
        for (j, p) in pieces.iter().enumerate() {
            base[j] += p.w.counts[kind] as usize;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::super::list;
    use super::*;

    /// What [`seen`] compares: kind, items, first, last, rest bytes, block stats or chunks.
    type Seen = (u8, u64, u64, u64, Vec<u8>, Vec<u64>);

    /// The items a [`Decoded`] stands for: (kind, items kept, first, last, rest bytes) of
    /// deltas, or the chunks of a bitmap.
    fn seen(d: Option<Decoded<'_>>) -> Option<Seen> {
        let d = d?;
        let mut chunks = Vec::new();
        d.chunks(0, |c| {
            chunks.push(c);
            Some(())
        })?;
        Some(match d {
            Decoded::Deltas {
                kind,
                n,
                first,
                last,
                rest,
                fine,
            } => {
                let f = if kind == 0 {
                    vec![
                        fine.chunks,
                        fine.first_chunk,
                        fine.last_chunk,
                        fine.coarse as u64,
                        fine.fine as u64,
                    ]
                } else {
                    Vec::new()
                };
                (kind, n, first, last, rest.to_vec(), f)
            }
            Decoded::Chunks(_) | Decoded::Bitmap { .. } => (2, 0, 0, 0, Vec::new(), chunks),
        })
    }

    /// What a part notes of a list as it writes it is what reading the list back says
    /// (`decode`, the join's way before session 21), for lists of blocks, of chunks and
    /// bitmaps of random items cut at every chunk of their span (xorshift items; 4 blocks per
    /// chunk; the piece starting at chunk 7).
    #[test]
    fn notes_say_what_reading_the_list_says() {
        let (sh, c0) = (2u32, 7u32);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for case in 0..200 {
            let mut items: Vec<u32> = (0..1 + case % 40)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % (16 + case as u64 * 7)) as u32
                })
                .collect();
            items.sort_unstable();
            items.dedup();
            let chunks_of = |v: &[u32], s: u32| {
                let mut c: Vec<u32> = v.iter().map(|b| b >> s).collect();
                c.dedup();
                c
            };
            let span = items.last().unwrap() + 2;
            for cut in 0..span {
                let end = c0 + cut;
                // Blocks (stats counted by the note itself) and chunks as deltas.
                for (kind, v, item_cut) in [
                    (0u8, items.clone(), cut << sh),
                    (1, chunks_of(&items, 0), cut),
                ] {
                    let mut out = vec![kind];
                    let n = list_noted(&mut out, &v, kind, item_cut, sh, None);
                    assert_eq!(
                        seen(from_noted(&n, &out, c0, sh)),
                        seen(decode(&out, c0, end, sh).unwrap()),
                        "kind {kind}, {v:?} cut at {cut}"
                    );
                }
                // A bitmap of the chunks.
                let v = chunks_of(&items, 0);
                let mut out = vec![2];
                varint(&mut out, u64::from(v[0]));
                let at = out.len();
                out.resize(at + (v[v.len() - 1] - v[0]) as usize / 8 + 1, 0);
                for &c in &v {
                    let i = (c - v[0]) as usize;
                    out[at + i / 8] |= 1 << (i % 8);
                }
                let deltas =
                    v.windows(2).map(|w| varint_len(w[1] - w[0])).sum::<usize>() + varint_len(v[0]);
                let n = bitmap_noted(&v, at, cut, deltas);
                assert_eq!(
                    seen(from_noted(&n, &out, c0, sh)),
                    seen(decode(&out, c0, end, sh).unwrap()),
                    "bitmap {v:?} cut at {cut}"
                );
            }
        }
    }

    /// A joined list decodes to the pieces' items below their ends, of the whole segment
    /// (values by hand: blocks of 4 per chunk, `sh` 2).
    #[test]
    fn lists_are_cut_at_their_piece_end_and_joined() {
        let sh = 2;
        let mut a = Vec::new();
        // Piece 0 (chunks 0..3): blocks 1, 5, 9, 12 (12 is chunk 3: the next piece's).
        a.push(0);
        list(&mut a, &[1, 5, 9, 12]);
        // Piece 1 (from chunk 3): blocks 0, 2 of it = 12, 14.
        let mut b = vec![0];
        list(&mut b, &[0, 2]);
        let da = decode(&a, 0, 3, sh).unwrap().unwrap();
        let db = decode(&b, 3, u32::MAX, sh).unwrap().unwrap();
        let mut w = Writer::default();
        join(&mut w, &[da, db], sh, &mut Vec::new()).unwrap();
        let mut want = vec![0];
        list(&mut want, &[1, 5, 9, 12, 14]);
        assert_eq!(w.lists, want);
        // Chunks in the second piece: all chunks (1, 2 from blocks 5, 9; 0 from 1; 3).
        let mut c = vec![1];
        list(&mut c, &[0]);
        let da = decode(&a, 0, 3, sh).unwrap().unwrap();
        let dc = decode(&c, 3, u32::MAX, sh).unwrap().unwrap();
        let mut w = Writer::default();
        join(&mut w, &[da, dc], sh, &mut Vec::new()).unwrap();
        // (as a bitmap of chunks 0 to 3: smaller than 4 deltas)
        assert_eq!(w.lists, [2, 0, 0b1111]);
        // A list wholly past its piece's end keeps nothing.
        assert!(decode(&b, 3, 3, sh).unwrap().is_none());
        // Malformed: no kind, a truncated varint.
        assert!(decode(&[], 0, 9, sh).is_none());
        assert!(decode(&[0, 2, 0x80], 0, 9, sh).is_none());
    }
}
#[cfg(test)]
mod diverse {
    use crate::{Index, IndexBuilder, Key};
    use weir_packet::LinkType;

    /// On diverse traffic (64-byte frames, 4 096 clients, 256 servers, random source ports,
    /// bench_index's mix), with a part every 8 MiB as the recorder writes them, the final index
    /// joined from the parts lists every key and bucket exactly as the whole index of a builder
    /// serialized whole at the same packets does (same kind of list, same items; a part, like a
    /// whole serialization, ends its chunk's entries so far, and lists that chunk's few ports
    /// so far exactly), and as the whole index of a builder that wrote no part does, but for
    /// those ports.
    #[test]
    fn the_joined_index_lists_every_key_as_the_whole_one() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = 600_000u64;
        let [mut whole, mut parted, mut oracle] = [(); 3].map(|()| IndexBuilder::new(128 << 10));
        let (mut next, mut part_at, mut parts) = (0, 8u64 << 20, 0);
        for i in 0..n {
            let r = rnd();
            let mut f = vec![0u8; 64];
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            f[14] = 0x45;
            f[16..18].copy_from_slice(&50u16.to_be_bytes());
            f[22] = 64;
            f[23] = 17;
            f[26..30].copy_from_slice(&(0x0a00_0000 | (r % 4096) as u32).to_be_bytes());
            f[30..34].copy_from_slice(&(0xc0a8_0000 | ((r >> 12) % 256) as u32).to_be_bytes());
            f[34..36].copy_from_slice(&((r >> 24) as u16).to_be_bytes());
            let dport = [53u16, 80, 443, 8080, 123, 5060, 22, 25][((r >> 40) % 8) as usize];
            f[36..38].copy_from_slice(&dport.to_be_bytes());
            // pcapng records: a 32-byte header, the frame.
            let off = 200 + i * 96;
            whole.add(off, i * 1000, LinkType::ETHERNET, &f);
            parted.add(off, i * 1000, LinkType::ETHERNET, &f);
            oracle.add(off, i * 1000, LinkType::ETHERNET, &f);
            if off >= part_at {
                oracle.serialize(off, 0);
                next = parted.serialize_part(next, off, 0).next_chunk;
                (part_at, parts) = (part_at + (8 << 20), parts + 1);
            }
        }
        assert!(parts >= 6);
        let end = 200 + n * 96;
        let w = Index::parse(&whole.serialize(end, 0)).unwrap();
        let joined = parted.serialize(end, 0);
        let o = Index::parse(&oracle.serialize(end, 0)).unwrap();
        let j = Index::parse(&joined).unwrap();
        assert!(j.keys == o.keys, "keys not listed as the whole index's");
        assert!(
            j.buckets == o.buckets,
            "buckets not listed as the whole index's"
        );
        // Against the builder that wrote no part: the same keys but for exact ports.
        let mut extra = 0;
        let mut at = 0;
        for k in &j.keys {
            if w.keys.get(at).map(|x| x.0) == Some(k.0) {
                at += 1;
            } else {
                assert!(
                    matches!(k.0, Key::Port(p) if p >= 1024),
                    "{:?} only joined",
                    k.0
                );
                extra += 1;
            }
        }
        assert_eq!(
            at,
            w.keys.len(),
            "keys of the whole index not in the joined one"
        );
        assert!(extra <= 256 * parts, "{extra} exact ports in addition");
    }
}
