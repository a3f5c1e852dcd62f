//! Bounded TCP reassembly of one direction of a connection.
//!
//! A [`Stream`] turns segments, in whatever order they arrive, into the in-order byte stream
//! the application parsers read, as a sequence of [`Chunk`]s: data, or a gap of a known number
//! of bytes that the capture never saw. Rules:
//!
//! * Sequence numbers are mapped to 64-bit stream offsets relative to the first sequence number
//!   seen (the SYN's + 1 when the SYN was seen), so wrap-around is handled.
//! * The first copy of a byte wins. A retransmission of bytes already delivered is counted
//!   (`retransmitted_bytes`); where a later copy of a byte still held (out of order) differs
//!   from the first copy, the overlap is counted in `overlap_conflicts`.
//! * Out-of-order segments wait in a bounded map (at most `max_pending` bytes). A gap is
//!   declared, never invented: when the receiver acknowledges bytes the capture never saw, when
//!   the waiting bytes exceed the bound, or at the end of the connection; the parser is told
//!   how many bytes are missing and never sees made-up bytes.

use std::collections::BTreeMap;

/// One piece of the in-order stream handed to a parser.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Chunk<'a> {
    /// Bytes, in order.
    Data(&'a [u8]),
    /// This many bytes are missing from the capture.
    Gap(u64),
}

/// Counters of one direction, added up into the analyzer's totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StreamStats {
    /// Bytes delivered in order to the parsers.
    pub delivered_bytes: u64,
    /// Bytes declared missing (gaps).
    pub gap_bytes: u64,
    /// Gaps declared.
    pub gaps: u64,
    /// Bytes seen again after they were delivered or held (retransmissions).
    pub retransmitted_bytes: u64,
    /// Bytes whose later copy differed from the first one (the first copy was kept).
    pub overlap_conflicts: u64,
    /// Segments that arrived ahead of a hole and waited.
    pub out_of_order_segments: u64,
    /// Bytes dropped from the waiting map to respect its bound (turned into a gap).
    pub evicted_bytes: u64,
}

/// One direction's reassembly state.
#[derive(Debug, Default)]
pub(crate) struct Stream {
    /// Sequence number of stream offset `next` (valid once `started`).
    next_seq: u32,
    /// Offset of the next byte to deliver.
    next: u64,
    started: bool,
    /// Segments ahead of `next`, by offset.
    pending: BTreeMap<u64, Vec<u8>>,
    pending_bytes: usize,
    /// The FIN's offset, once seen.
    fin: Option<u64>,
    /// The SYN's sequence number, once seen.
    isn: Option<u32>,
    /// End offset of the furthest byte the sender was seen to send (data or FIN): what an ACK
    /// may declare missing is bounded by it.
    high: u64,
    pub(crate) stats: StreamStats,
}

impl Stream {
    /// Bytes held out of order.
    pub(crate) fn held(&self) -> usize {
        self.pending_bytes
    }

    /// The stream starts after this SYN (its sequence number + 1).
    pub(crate) fn syn(&mut self, seq: u32) {
        if !self.started {
            self.started = true;
            self.next_seq = seq.wrapping_add(1);
            self.isn = Some(seq);
        }
    }

    /// A SYN with sequence number `seq` starts a new connection on this stream's 5-tuple (the
    /// port was reused): the stream already carried bytes or another SYN, and this SYN is not a
    /// retransmission of its own.
    pub(crate) fn is_new_connection(&self, seq: u32) -> bool {
        self.started && self.isn != Some(seq)
    }

    /// Offset of sequence number `seq` (relative to `next`, within ±2 GiB).
    fn offset(&self, seq: u32) -> i128 {
        i128::from(self.next) + i128::from(seq.wrapping_sub(self.next_seq) as i32)
    }

    fn advance(&mut self, n: u64) {
        self.next += n;
        self.next_seq = self.next_seq.wrapping_add(n as u32);
    }

    /// A segment: `seq`, its payload and FIN flag. In-order bytes go to `out` at once (without a
    /// copy when nothing waits); later ones wait, bounded by `max_pending` bytes. Returns the
    /// bytes newly held (for the analyzer's total), negative when held bytes were released.
    pub(crate) fn segment(
        &mut self,
        seq: u32,
        data: &[u8],
        fin: bool,
        max_pending: usize,
        out: &mut dyn FnMut(Chunk<'_>),
    ) -> isize {
        let before = self.pending_bytes as isize;
        if !self.started {
            self.started = true;
            self.next_seq = seq;
        }
        let off = self.offset(seq);
        let end = off + data.len() as i128;
        if fin && end >= 0 && self.fin.is_none() {
            self.fin = Some(end as u64);
        }
        if end > i128::from(self.high) {
            self.high = end as u64;
        }
        if data.is_empty() {
            return 0;
        }
        let next = i128::from(self.next);
        if end <= next {
            self.stats.retransmitted_bytes += data.len() as u64;
            return 0;
        }
        if off <= next {
            let skip = (next - off) as usize;
            self.stats.retransmitted_bytes += skip as u64;
            let fresh = &data[skip..];
            self.check_conflicts(self.next, fresh);
            self.deliver(fresh, out);
            self.drain(out);
        } else {
            self.hold(off as u64, data, max_pending, out);
        }
        self.pending_bytes as isize - before
    }

    /// Counts the bytes of `data` (at offset `at`) that differ from held copies, which win.
    fn check_conflicts(&mut self, at: u64, data: &[u8]) {
        if self.pending.is_empty() {
            return;
        }
        let end = at + data.len() as u64;
        for (&o, held) in self.pending.range(..end) {
            let hend = o + held.len() as u64;
            if hend <= at {
                continue;
            }
            let lo = o.max(at);
            let hi = hend.min(end);
            let a = &data[(lo - at) as usize..(hi - at) as usize];
            let b = &held[(lo - o) as usize..(hi - o) as usize];
            self.stats.overlap_conflicts += a.iter().zip(b).filter(|(x, y)| x != y).count() as u64;
        }
    }

    fn deliver(&mut self, data: &[u8], out: &mut dyn FnMut(Chunk<'_>)) {
        // Bytes covered by held segments are delivered from the segments (first copy wins) in
        // `drain`; here only up to the first held offset.
        let first_held = self.pending.keys().next().copied();
        let n = match first_held {
            Some(h) if h < self.next + data.len() as u64 => (h.max(self.next) - self.next) as usize,
            _ => data.len(),
        };
        if n > 0 {
            self.stats.delivered_bytes += n as u64;
            out(Chunk::Data(&data[..n]));
            self.advance(n as u64);
        }
        // The rest overlaps held bytes: deliver the held copies, then what follows them.
        if n < data.len() {
            let rest_at = self.next;
            self.drain(out);
            let done = (self.next - rest_at) as usize;
            if n + done < data.len() {
                let rest = &data[n + done..];
                self.deliver(rest, out);
            }
        }
    }

    /// Delivers held segments that are now in order.
    fn drain(&mut self, out: &mut dyn FnMut(Chunk<'_>)) {
        while let Some(entry) = self.pending.first_entry() {
            let o = *entry.key();
            if o > self.next {
                break;
            }
            let seg = entry.remove();
            self.pending_bytes -= seg.len();
            let end = o + seg.len() as u64;
            if end <= self.next {
                self.stats.retransmitted_bytes += seg.len() as u64;
                continue;
            }
            let skip = (self.next - o) as usize;
            self.stats.retransmitted_bytes += skip as u64;
            self.stats.delivered_bytes += (seg.len() - skip) as u64;
            out(Chunk::Data(&seg[skip..]));
            self.advance((seg.len() - skip) as u64);
        }
    }

    fn hold(&mut self, off: u64, data: &[u8], max_pending: usize, out: &mut dyn FnMut(Chunk<'_>)) {
        self.stats.out_of_order_segments += 1;
        // Trim what is already held (first copy wins), counting differing bytes.
        let mut pieces: Vec<(u64, &[u8])> = vec![(off, data)];
        let end = off + data.len() as u64;
        for (&o, held) in self.pending.range(..end) {
            let hend = o + held.len() as u64;
            if hend <= off {
                continue;
            }
            let mut next_pieces = Vec::with_capacity(pieces.len() + 1);
            for (po, p) in pieces {
                let pend = po + p.len() as u64;
                let lo = o.max(po);
                let hi = hend.min(pend);
                if lo >= hi {
                    next_pieces.push((po, p));
                    continue;
                }
                let a = &p[(lo - po) as usize..(hi - po) as usize];
                let b = &held[(lo - o) as usize..(hi - o) as usize];
                self.stats.retransmitted_bytes += a.len() as u64;
                self.stats.overlap_conflicts +=
                    a.iter().zip(b).filter(|(x, y)| x != y).count() as u64;
                if po < lo {
                    next_pieces.push((po, &p[..(lo - po) as usize]));
                }
                if hi < pend {
                    next_pieces.push((hi, &p[(hi - po) as usize..]));
                }
            }
            pieces = next_pieces;
        }
        for (po, p) in pieces {
            if p.is_empty() {
                continue;
            }
            self.pending_bytes += p.len();
            self.pending.insert(po, p.to_vec());
        }
        while self.pending_bytes > max_pending {
            if !self.skip_to_held(out) {
                break;
            }
        }
    }

    /// Declares the hole before the first held segment a gap and delivers what follows it.
    /// False when nothing is held.
    fn skip_to_held(&mut self, out: &mut dyn FnMut(Chunk<'_>)) -> bool {
        let Some(&o) = self.pending.keys().next() else {
            return false;
        };
        if o > self.next {
            let n = o - self.next;
            self.stats.gaps += 1;
            self.stats.gap_bytes += n;
            out(Chunk::Gap(n));
            self.advance(n);
        }
        self.drain(out);
        true
    }

    /// The other side acknowledged up to `ack`: bytes before it that the capture never saw are
    /// a gap (the receiver had them). Only bytes the sender was seen to send (below the end of
    /// its furthest segment or its FIN) are declared: beyond them the capture cannot tell how
    /// many bytes there were (an ACK of another connection on the same ports, or of bytes sent
    /// while the capture missed everything); the sender's next segment declares that hole.
    pub(crate) fn acked(&mut self, ack: u32, out: &mut dyn FnMut(Chunk<'_>)) -> isize {
        if !self.started {
            return 0;
        }
        let before = self.pending_bytes as isize;
        let a = self.offset(ack);
        // A FIN takes one sequence number that is not a byte.
        let limit = match self.fin {
            Some(f) => i128::from(f).min(i128::from(self.high)),
            None => i128::from(self.high),
        };
        let a = a.min(limit);
        while a > i128::from(self.next) {
            match self.pending.keys().next() {
                Some(&o) if i128::from(o) < a => {
                    self.skip_to_held(out);
                }
                _ => {
                    let n = (a - i128::from(self.next)) as u64;
                    self.stats.gaps += 1;
                    self.stats.gap_bytes += n;
                    out(Chunk::Gap(n));
                    self.advance(n);
                    self.drain(out);
                }
            }
        }
        self.pending_bytes as isize - before
    }

    /// The connection ends: every held segment is delivered, holes before them as gaps.
    /// Returns the bytes released.
    pub(crate) fn flush(&mut self, out: &mut dyn FnMut(Chunk<'_>)) -> usize {
        let before = self.pending_bytes;
        while self.skip_to_held(out) {}
        before
    }

    /// Drops every held byte (memory pressure), counted as evicted. Returns the bytes released.
    pub(crate) fn evict(&mut self, out: &mut dyn FnMut(Chunk<'_>)) -> usize {
        let before = self.pending_bytes;
        self.stats.evicted_bytes += before as u64;
        self.flush(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stream: &mut Stream, segs: &[(u32, &[u8])], max: usize) -> (Vec<u8>, u64) {
        let mut data = Vec::new();
        let mut gaps = 0;
        for (seq, d) in segs {
            stream.segment(*seq, d, false, max, &mut |c| match c {
                Chunk::Data(b) => data.extend_from_slice(b),
                Chunk::Gap(n) => gaps += n,
            });
        }
        stream.flush(&mut |c| match c {
            Chunk::Data(b) => data.extend_from_slice(b),
            Chunk::Gap(n) => gaps += n,
        });
        (data, gaps)
    }

    #[test]
    fn in_order_out_of_order_and_wrap() {
        let mut s = Stream::default();
        s.syn(u32::MAX - 2);
        let (d, g) = run(
            &mut s,
            &[(u32::MAX - 1, b"ab"), (2, b"ef"), (0, b"cd"), (0, b"cd")],
            1 << 20,
        );
        assert_eq!(d, b"abcdef".to_vec());
        assert_eq!(g, 0);
        assert_eq!(s.stats.retransmitted_bytes, 2);
        assert_eq!(s.stats.out_of_order_segments, 1);
    }

    #[test]
    fn first_copy_wins_and_conflicts_counted() {
        let mut s = Stream::default();
        s.syn(99);
        // "XYZ" held at 2..5, then "abcdef" at 0..6 overlapping with different bytes.
        let (d, _) = run(&mut s, &[(102, b"XYZ"), (100, b"abcdef")], 1 << 20);
        assert_eq!(d, b"abXYZf");
        assert_eq!(s.stats.overlap_conflicts, 3);
    }

    #[test]
    fn gaps_are_reported_not_invented() {
        let mut s = Stream::default();
        s.syn(0);
        let (d, g) = run(&mut s, &[(1, b"ab"), (10, b"xy")], 1 << 20);
        assert_eq!(d, b"abxy");
        assert_eq!(g, 7);
        // bound: a second hole is declared as soon as held bytes exceed it
        let mut s = Stream::default();
        s.syn(0);
        let mut gaps = Vec::new();
        s.segment(11, b"0123456789", false, 4, &mut |c| {
            if let Chunk::Gap(n) = c {
                gaps.push(n)
            }
        });
        assert_eq!(gaps, vec![10]);
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn ack_beyond_the_seen_bytes_is_a_gap() {
        let mut s = Stream::default();
        s.syn(0);
        let mut out = Vec::new();
        s.segment(1, b"abc", false, 100, &mut |_| {});
        // held at offset 9: the sender was seen to send up to offset 10
        s.segment(10, b"z", false, 100, &mut |_| {});
        s.acked(11, &mut |c| {
            if let Chunk::Gap(n) = c {
                out.push(n)
            }
        });
        assert_eq!(out, vec![6]);
    }

    /// An ACK beyond every byte the sender was seen to send declares only the hole before the
    /// furthest segment seen (here none: 0 bytes), not the up to 1 GiB the ACK claims; the
    /// sender's next segment then declares the hole by its own numbers.
    #[test]
    fn ack_gaps_are_bounded_by_what_the_sender_was_seen_to_send() {
        let mut s = Stream::default();
        s.syn(0);
        let mut gaps = Vec::new();
        let mut data = Vec::new();
        let mut step = |s: &mut Stream, seg: Option<(u32, &[u8])>, ack: u32| {
            let mut take = |c: Chunk<'_>| match c {
                Chunk::Gap(n) => gaps.push(n),
                Chunk::Data(b) => data.extend_from_slice(b),
            };
            if let Some((seq, d)) = seg {
                s.segment(seq, d, false, 100, &mut take);
            }
            s.acked(ack, &mut take);
        };
        step(&mut s, Some((1, b"abc")), 500_000_001);
        // a segment at offset 100: the ACK covering it declares the 97 bytes before it
        step(&mut s, Some((101, b"xy")), 500_000_001);
        assert_eq!(gaps, vec![97]);
        assert_eq!(data, b"abcxy");
        assert_eq!((s.stats.gaps, s.stats.gap_bytes), (1, 97));
    }
}
