//! Tuple-space search over the wildcard rules (Srinivasan, Suri and Varghese, 1999).
//!
//! Each rule is filed under a *tuple*: which header fields it pins and how many prefix bits
//! (family, source and destination prefix lengths, VLAN given or not, protocol given or not,
//! single source / destination port or not). Rules of one tuple sit in a hash table keyed by
//! the packet's fields masked the tuple's way, so a packet costs one hash probe per tuple, not
//! one test per rule. Everything a tuple does not pin (port ranges, flags, lengths, bytes,
//! payload, BPF, and the either-direction `host` / `port` when combined with `src` / `dst`) is
//! checked on the few rules the probe returns.
//!
//! Rules with `payload` patterns are not filed at all: the Aho-Corasick scan names the rules
//! whose patterns hit in a packet, and only those are checked (10 000 pattern rules must not
//! mean 10 000 checks per packet).
//!
//! A rule with `host P` (and no `src` / `dst`) is filed twice, under `src P` and `dst P`;
//! likewise a single `port`: the caller removes the duplicate hits.
//!
//! Rules are ranked (priority, then position); tuples are visited in the order of their best
//! rank, and the search stops at the first tuple that cannot beat the best matching rule that
//! ends evaluation (`stop`).

use hashbrown::HashMap;

use crate::fields::PacketFields;
use crate::rule::{Prefix, WildMatch};

/// Which fields a tuple pins.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Spec {
    /// 0 (addresses not pinned), 4 or 6.
    family: u8,
    src_len: u8,
    dst_len: u8,
    vlan: bool,
    proto: bool,
    sport: bool,
    dport: bool,
}

/// A packet's fields masked by a [`Spec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
struct Key {
    src: u128,
    dst: u128,
    vlan: u16,
    proto: u8,
    sport: u16,
    dport: u16,
}

impl Spec {
    #[inline]
    fn key(&self, f: &PacketFields) -> Key {
        Key {
            src: f.src & Prefix::mask(self.family, self.src_len),
            dst: f.dst & Prefix::mask(self.family, self.dst_len),
            vlan: if self.vlan { f.vlan } else { 0 },
            proto: if self.proto { f.proto } else { 0 },
            sport: if self.sport { f.sport } else { 0 },
            dport: if self.dport { f.dport } else { 0 },
        }
    }
}

struct Tuple {
    spec: Spec,
    /// Best (lowest) rank filed here.
    best: u32,
    /// Key → ranks, ascending.
    map: HashMap<Key, Vec<u32>>,
}

/// The tuple-space index of a rule set's wildcard rules.
pub(crate) struct Tss {
    tuples: Vec<Tuple>,
}

/// The `(spec, key)` filings of one rule.
fn filings(m: &WildMatch) -> Vec<(Spec, Key)> {
    let family = m
        .src
        .or(m.dst)
        .or(m.host)
        .map(|p| p.family)
        .or(m.family)
        .unwrap_or(0);
    let mut base = Spec {
        family,
        src_len: 0,
        dst_len: 0,
        vlan: m.vlan.is_some(),
        proto: m.proto.is_some(),
        sport: false,
        dport: false,
    };
    let mut key = Key {
        vlan: m.vlan.unwrap_or(0),
        proto: m.proto.unwrap_or(0),
        ..Key::default()
    };
    // prefixes of another family than the rule's never match: leave them to the full check
    let fam_ok = |p: &Prefix| p.family == family;
    if let Some(p) = m.src.filter(fam_ok) {
        base.src_len = p.len;
        key.src = p.addr;
    }
    if let Some(p) = m.dst.filter(fam_ok) {
        base.dst_len = p.len;
        key.dst = p.addr;
    }
    if let Some(r) = m.sport.filter(|r| r.is_single()) {
        base.sport = true;
        key.sport = r.lo;
    }
    if let Some(r) = m.dport.filter(|r| r.is_single()) {
        base.dport = true;
        key.dport = r.lo;
    }
    let mut out = vec![(base, key)];
    if let Some(h) = m.host.filter(fam_ok) {
        if m.src.is_none() && m.dst.is_none() {
            out = out
                .iter()
                .flat_map(|&(s, k)| {
                    [
                        (
                            Spec {
                                src_len: h.len,
                                ..s
                            },
                            Key { src: h.addr, ..k },
                        ),
                        (
                            Spec {
                                dst_len: h.len,
                                ..s
                            },
                            Key { dst: h.addr, ..k },
                        ),
                    ]
                })
                .collect();
        }
    }
    if let Some(r) = m.port.filter(|r| r.is_single()) {
        if m.sport.is_none() && m.dport.is_none() {
            out = out
                .iter()
                .flat_map(|&(s, k)| {
                    [
                        (Spec { sport: true, ..s }, Key { sport: r.lo, ..k }),
                        (Spec { dport: true, ..s }, Key { dport: r.lo, ..k }),
                    ]
                })
                .collect();
        }
    }
    out
}

impl Tss {
    /// Indexes rules given in rank order (the slice index is the rank). Rules with payload
    /// patterns are left out: the caller finds them through the patterns that hit.
    pub(crate) fn new<'a>(rules: impl Iterator<Item = &'a WildMatch>) -> Tss {
        let mut by_spec: HashMap<Spec, Tuple> = HashMap::new();
        for (rank, m) in rules.enumerate() {
            let rank = rank as u32;
            if !m.payload.is_empty() {
                continue;
            }
            for (spec, key) in filings(m) {
                let t = by_spec.entry(spec).or_insert_with(|| Tuple {
                    spec,
                    best: rank,
                    map: HashMap::new(),
                });
                t.best = t.best.min(rank);
                let v = t.map.entry(key).or_default();
                if v.last() != Some(&rank) {
                    v.push(rank);
                }
            }
        }
        let mut tuples: Vec<Tuple> = by_spec.into_values().collect();
        tuples.sort_by_key(|t| t.best);
        Tss { tuples }
    }

    /// Number of tuples.
    pub(crate) fn tuples(&self) -> usize {
        self.tuples.len()
    }

    /// Collects into `out`, ascending, the ranks of the rules that match `f` and that `check`
    /// accepts (the full match), stopping after the first one for which `stops` is true: the
    /// rules evaluation reaches, in order. `check` may be called twice for a rule filed twice.
    /// `extra` are candidates found elsewhere (rules whose patterns hit), checked the same way.
    #[inline]
    pub(crate) fn lookup(
        &self,
        f: &PacketFields,
        extra: &[u32],
        mut check: impl FnMut(u32) -> bool,
        stops: impl Fn(u32) -> bool,
        out: &mut Vec<u32>,
    ) {
        out.clear();
        let mut bound = u32::MAX;
        for t in &self.tuples {
            if t.best >= bound {
                break;
            }
            if t.spec.family != 0 && t.spec.family != f.family {
                continue;
            }
            let Some(list) = t.map.get(&t.spec.key(f)) else {
                continue;
            };
            for &r in list {
                if r >= bound {
                    break;
                }
                if check(r) {
                    out.push(r);
                    if stops(r) {
                        bound = r;
                    }
                }
            }
        }
        for &r in extra {
            if r < bound && check(r) {
                out.push(r);
            }
        }
        out.sort_unstable();
        out.dedup();
        if let Some(p) = out.iter().position(|&r| stops(r)) {
            out.truncate(p + 1);
        }
    }
}
