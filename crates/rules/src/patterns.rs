//! Payload patterns: every `payload` pattern of a rule set in one Aho-Corasick automaton
//! (the aho-corasick crate), stepped byte by byte so its state can be carried from one packet of
//! a flow to the next ([`Stream`]).
//!
//! # Streams, retransmissions and reordering
//!
//! Each TCP flow keeps one automaton state per direction, so a pattern split across two
//! segments is found in the segment holding its last byte. There is no reassembly buffer:
//!
//! * a **retransmitted** segment (all its bytes before the next expected sequence number) is
//!   not scanned again, and a segment that **overlaps** what was scanned has its old bytes
//!   skipped, so a pattern is never reported twice for the same stream bytes;
//! * a segment that arrives **ahead** of the next expected byte (a gap: loss or reordering)
//!   resets the automaton to its start state and scanning resumes from that segment; a pattern
//!   spanning the gap is missed, and the late segment, when it comes, is behind the stream and
//!   is not scanned. The reset is counted (`stream_resets`);
//! * SYN and FIN take one sequence number each;
//! * at most `scan_limit` payload bytes are scanned per flow and direction (`set scan-limit`).
//!
//! Other protocols (UDP...) have no sequence numbers: each datagram is scanned on its own from
//! the start state, within the same per-flow limit.

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::{dfa, nfa, Anchored, MatchKind};

/// The DFA (fastest per byte: one table lookup) is used while it stays under this size; past
/// it, the contiguous NFA (much smaller, slower per byte: it follows failure links).
const DFA_MAX_BYTES: usize = 64 << 20;

/// The automaton of a rule set, and which wildcard rule each pattern belongs to.
pub(crate) struct Patterns {
    auto: Auto,
    /// Pattern index → wildcard rule rank.
    pub owner: Vec<u32>,
    start: StateID,
}

enum Auto {
    Dfa(dfa::DFA),
    Nfa(nfa::contiguous::NFA),
}

/// Per flow and direction: where the automaton is and where the stream is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stream {
    state: StateID,
    /// Next expected TCP sequence number (valid when `synced`).
    next_seq: u32,
    synced: bool,
    /// Payload bytes scanned so far.
    pub scanned: u32,
}

impl Patterns {
    /// Builds the automaton over `(pattern, owner rank)` pairs.
    pub(crate) fn new(pats: Vec<(Vec<u8>, u32)>) -> Result<Patterns, aho_corasick::BuildError> {
        Patterns::build(pats, false)
    }

    fn build(
        pats: Vec<(Vec<u8>, u32)>,
        force_nfa: bool,
    ) -> Result<Patterns, aho_corasick::BuildError> {
        let owner = pats.iter().map(|p| p.1).collect();
        let it = pats.iter().map(|p| &p.0);
        let total: usize = pats.iter().map(|p| p.0.len()).sum();
        let dfa = if !force_nfa && total <= DFA_MAX_BYTES / 64 {
            let d = dfa::Builder::new()
                .match_kind(MatchKind::Standard)
                .build(it.clone())?;
            (d.memory_usage() <= DFA_MAX_BYTES).then_some(d)
        } else {
            None
        };
        let auto = match dfa {
            Some(d) => Auto::Dfa(d),
            None => Auto::Nfa(
                nfa::contiguous::Builder::new()
                    .match_kind(MatchKind::Standard)
                    .build(it)?,
            ),
        };
        let start = match &auto {
            Auto::Dfa(a) => a.start_state(Anchored::No),
            Auto::Nfa(a) => a.start_state(Anchored::No),
        }
        .expect("unanchored start state exists");
        Ok(Patterns { auto, owner, start })
    }

    /// A stream at its start.
    pub(crate) fn stream(&self) -> Stream {
        Stream {
            state: self.start,
            next_seq: 0,
            synced: false,
            scanned: 0,
        }
    }

    /// Heap bytes of the automaton.
    pub(crate) fn memory_bytes(&self) -> usize {
        match &self.auto {
            Auto::Dfa(a) => a.memory_usage(),
            Auto::Nfa(a) => a.memory_usage(),
        }
    }

    /// Feeds one packet's payload to `s` and calls `hit(pattern)` for every pattern occurrence
    /// that ends in the bytes newly scanned. `tcp` is `Some((seq, flags))` for TCP. Returns
    /// `(bytes scanned, stream reset)`.
    pub(crate) fn feed(
        &self,
        s: &mut Stream,
        payload: &[u8],
        tcp: Option<(u32, u8)>,
        limit: u32,
        hit: impl FnMut(u32),
    ) -> (u32, bool) {
        let mut reset = false;
        let new: &[u8] = match tcp {
            None => {
                s.state = self.start;
                payload
            }
            Some((seq, flags)) => {
                const SYN: u8 = 0x02;
                const FIN: u8 = 0x01;
                let data_seq = seq.wrapping_add(u32::from(flags & SYN != 0));
                if !s.synced {
                    s.synced = true;
                    s.next_seq = data_seq;
                }
                let seg_end = data_seq
                    .wrapping_add(payload.len() as u32)
                    .wrapping_add(u32::from(flags & FIN != 0));
                let rel = data_seq.wrapping_sub(s.next_seq) as i32;
                if rel > 0 {
                    // a gap: resynchronise on this segment
                    reset = true;
                    s.state = self.start;
                    s.next_seq = seg_end;
                    payload
                } else {
                    if seg_end.wrapping_sub(s.next_seq) as i32 > 0 {
                        s.next_seq = seg_end;
                    }
                    payload.get(rel.unsigned_abs() as usize..).unwrap_or(&[])
                }
            }
        };
        let room = limit.saturating_sub(s.scanned) as usize;
        let new = &new[..new.len().min(room)];
        if new.is_empty() {
            return (0, reset);
        }
        s.scanned += new.len() as u32;
        s.state = match &self.auto {
            Auto::Dfa(a) => run(a, s.state, new, hit),
            Auto::Nfa(a) => run(a, s.state, new, hit),
        };
        (new.len() as u32, reset)
    }
}

#[inline]
fn run<A: Automaton>(a: &A, mut sid: StateID, bytes: &[u8], mut hit: impl FnMut(u32)) -> StateID {
    for &b in bytes {
        sid = a.next_state(Anchored::No, sid, b);
        if a.is_special(sid) && a.is_match(sid) {
            for i in 0..a.match_len(sid) {
                hit(a.match_pattern(sid, i).as_u32());
            }
        }
    }
    sid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hits(p: &Patterns, s: &mut Stream, data: &[u8], tcp: Option<(u32, u8)>) -> Vec<u32> {
        let mut v = Vec::new();
        p.feed(s, data, tcp, u32::MAX, |i| v.push(i));
        v.sort_unstable();
        v
    }

    #[test]
    fn a_pattern_split_across_segments_is_found_once() {
        let p = Patterns::new(vec![(b"GET /admin".to_vec(), 0), (b"admin".to_vec(), 1)]).unwrap();
        let mut s = p.stream();
        assert_eq!(
            hits(&p, &mut s, b"xxGET /ad", Some((100, 0))),
            Vec::<u32>::new()
        );
        assert_eq!(hits(&p, &mut s, b"min yy", Some((109, 0))), vec![0, 1]);
        // retransmission of both: nothing new
        assert_eq!(
            hits(&p, &mut s, b"xxGET /admin yy", Some((100, 0))),
            Vec::<u32>::new()
        );
        // overlap: only the new tail is scanned
        assert_eq!(hits(&p, &mut s, b"yyadmin", Some((113, 0))), vec![1]);
    }

    #[test]
    fn a_gap_resets_the_stream() {
        let p = Patterns::new(vec![(b"abcd".to_vec(), 0)]).unwrap();
        let mut s = p.stream();
        assert!(hits(&p, &mut s, b"ab", Some((0, 0))).is_empty());
        // bytes 2..4 lost; "cd" arrives at 4: no match across the gap
        assert!(hits(&p, &mut s, b"cd", Some((4, 0))).is_empty());
        assert!(hits(&p, &mut s, b"abcd", Some((6, 0))) == vec![0]);
    }

    #[test]
    fn the_dfa_and_the_nfa_find_the_same_matches() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let pats: Vec<(Vec<u8>, u32)> = (0..500)
            .map(|i| {
                (
                    (0..1 + rnd(5)).map(|_| b"abcd"[rnd(4) as usize]).collect(),
                    i,
                )
            })
            .collect();
        let dfa = Patterns::build(pats.clone(), false).unwrap();
        let nfa = Patterns::build(pats, true).unwrap();
        assert!(matches!(dfa.auto, Auto::Dfa(_)) && matches!(nfa.auto, Auto::Nfa(_)));
        let (mut sd, mut sn) = (dfa.stream(), nfa.stream());
        let mut seq = 0u32;
        let mut total = 0;
        for _ in 0..300 {
            let seg: Vec<u8> = (0..rnd(30)).map(|_| b"abcde"[rnd(5) as usize]).collect();
            let (a, b) = (
                hits(&dfa, &mut sd, &seg, Some((seq, 0))),
                hits(&nfa, &mut sn, &seg, Some((seq, 0))),
            );
            assert_eq!(a, b);
            total += a.len();
            seq = seq.wrapping_add(seg.len() as u32);
        }
        assert!(total > 100);
    }

    #[test]
    fn the_scan_limit_bounds_the_work() {
        let p = Patterns::new(vec![(b"zz".to_vec(), 0)]).unwrap();
        let mut s = p.stream();
        let (n, _) = p.feed(&mut s, b"aaaaaaaazz", Some((0, 0)), 4, |_| {
            panic!("beyond the limit")
        });
        assert_eq!(n, 4);
    }
}
