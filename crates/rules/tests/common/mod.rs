//! What the rule tests share: a brute-force oracle evaluator (every rule, in priority order,
//! each field tested directly, payload patterns searched naively in a per-flow copy of the
//! stream), a packet builder, and the engine-vs-oracle comparison.
#![allow(dead_code)]

use std::collections::HashMap;

use weir_decode::{Decoded, LinkType};
use weir_rules::{
    fields_from_frame, Action, Base, Decision, Engine, ExactKey, Match, Outcome, PacketFields,
    Rule, RuleSet, RuleStats, SliceTo, Tag, Totals, Verdict, WildMatch, NO_OFFSET,
};

/// One flow direction's stream as the oracle keeps it: the scanned bytes themselves.
#[derive(Default, Clone)]
struct OStream {
    buf: Vec<u8>,
    next_seq: u32,
    synced: bool,
    scanned: u32,
}

#[derive(Default)]
struct OFlow {
    cut_bytes: u64,
    cut_packets: u64,
    streams: [OStream; 2],
    learned: Option<(usize, Action)>,
}

/// Endpoints of a conversation in a canonical order, computed independently of `ExactKey`.
type FlowId = (u8, u16, u8, (u128, u16), (u128, u16));

fn flow_id(f: &PacketFields) -> Option<FlowId> {
    if f.family == 0 {
        return None;
    }
    let (x, y) = ((f.src, f.sport), (f.dst, f.dport));
    Some((f.family, f.vlan, f.proto, x.min(y), x.max(y)))
}

/// The brute-force evaluator.
pub(crate) struct Oracle {
    /// Exact rules then wildcard rules by (prio, position).
    rules: Vec<Rule>,
    default_drop: bool,
    scan_limit: u32,
    flows: HashMap<FlowId, OFlow>,
    samples: HashMap<usize, u32>,
    /// Counters by rule index in `rules`.
    pub counters: Vec<RuleStats>,
    pub totals: Totals,
    has_patterns: bool,
    bpf: Vec<Option<weir_filter::Filter>>,
}

fn prefix_ok(p: &weir_rules::Prefix, fam: u8, a: u128) -> bool {
    if p.family != fam {
        return false;
    }
    let width = if fam == 4 { 32 } else { 128 };
    if p.len == 0 {
        return true;
    }
    (a >> (width - u32::from(p.len))) == (p.addr >> (width - u32::from(p.len)))
}

fn wild_ok(m: &WildMatch, f: &PacketFields, bytes: &[u8]) -> bool {
    let ip = f.family != 0;
    let ports = ip && matches!(f.proto, 6 | 17 | 132) && f.l4 != NO_OFFSET;
    if m.family.is_some_and(|x| x != f.family) {
        return false;
    }
    if m.vlan.is_some_and(|v| v != f.vlan) {
        return false;
    }
    if m.proto.is_some_and(|p| !ip || p != f.proto) {
        return false;
    }
    if m.src.is_some_and(|p| !prefix_ok(&p, f.family, f.src)) {
        return false;
    }
    if m.dst.is_some_and(|p| !prefix_ok(&p, f.family, f.dst)) {
        return false;
    }
    if m.host
        .is_some_and(|p| !prefix_ok(&p, f.family, f.src) && !prefix_ok(&p, f.family, f.dst))
    {
        return false;
    }
    let inr = |r: weir_rules::PortRange, p: u16| (r.lo..=r.hi).contains(&p);
    if m.sport.is_some_and(|r| !ports || !inr(r, f.sport)) {
        return false;
    }
    if m.dport.is_some_and(|r| !ports || !inr(r, f.dport)) {
        return false;
    }
    if m.port
        .is_some_and(|r| !ports || (!inr(r, f.sport) && !inr(r, f.dport)))
    {
        return false;
    }
    if m.flags
        .is_some_and(|(s, mask)| !f.is_tcp || f.tcp_flags & mask != s)
    {
        return false;
    }
    if m.len.is_some_and(|(a, b)| !(a..=b).contains(&f.wire_len)) {
        return false;
    }
    for b in &m.bytes {
        let base = match b.base {
            Base::L2 => 0,
            Base::L3 => f.l3,
            Base::L4 => f.l4,
            Base::Payload => f.payload,
        };
        if base == NO_OFFSET {
            return false;
        }
        let start = (base + b.offset) as usize;
        if start + b.value.len() > bytes.len() {
            return false;
        }
        let mut eq = true;
        for i in 0..b.value.len() {
            if bytes[start + i] & b.mask[i] != b.value[i] {
                eq = false;
            }
        }
        if eq == b.invert {
            return false;
        }
    }
    true
}

fn exact_ok(k: &ExactKey, f: &PacketFields) -> bool {
    if f.family == 0 || k.family != f.family || k.vlan != f.vlan || k.proto != f.proto {
        return false;
    }
    let fwd = (k.a, k.pa, k.b, k.pb) == (f.src, f.sport, f.dst, f.dport);
    let rev = (k.a, k.pa, k.b, k.pb) == (f.dst, f.dport, f.src, f.sport);
    fwd || rev
}

struct Acc {
    outcome: Option<Outcome>,
    keep: u32,
    tag: Option<Tag>,
    cut: bool,
}

impl Oracle {
    pub(crate) fn new(set: &RuleSet, link: LinkType) -> Oracle {
        let mut exact: Vec<Rule> = Vec::new();
        let mut wild: Vec<(i32, usize, Rule)> = Vec::new();
        for (i, r) in set.rules.iter().enumerate() {
            match r.matcher {
                Match::Exact(_) => exact.push(r.clone()),
                Match::Wild(_) => wild.push((r.prio, i, r.clone())),
            }
        }
        wild.sort_by_key(|w| (w.0, w.1));
        let rules: Vec<Rule> = exact
            .into_iter()
            .chain(wild.into_iter().map(|w| w.2))
            .collect();
        let has_patterns = rules
            .iter()
            .any(|r| matches!(&r.matcher, Match::Wild(m) if !m.payload.is_empty()));
        let bpf = rules
            .iter()
            .map(|r| match &r.matcher {
                Match::Wild(m) => m
                    .bpf
                    .as_ref()
                    .map(|e| weir_filter::Filter::compile(e, link, 262_144).unwrap()),
                Match::Exact(_) => None,
            })
            .collect();
        Oracle {
            counters: vec![RuleStats::default(); rules.len()],
            rules,
            default_drop: set.options.default_drop,
            scan_limit: set.options.scan_limit,
            flows: HashMap::new(),
            samples: HashMap::new(),
            totals: Totals::default(),
            has_patterns,
            bpf,
        }
    }

    /// Feeds the payload to the flow's stream; returns the indices of rules with a pattern
    /// occurrence ending in the newly scanned bytes.
    fn scan(&mut self, f: &PacketFields, bytes: &[u8]) -> Vec<bool> {
        let mut hits = vec![false; self.rules.len()];
        let Some(id) = flow_id(f) else {
            return hits;
        };
        let dir = usize::from((f.src, f.sport) > (f.dst, f.dport));
        let fl = self.flows.entry(id).or_default();
        let s = &mut fl.streams[dir];
        let payload = f.payload_bytes(bytes);
        let mut context: Vec<u8>;
        let new: &[u8];
        if f.is_tcp {
            let data_seq = f.tcp_seq.wrapping_add(u32::from(f.tcp_flags & 2 != 0));
            if !s.synced {
                s.synced = true;
                s.next_seq = data_seq;
            }
            let end = data_seq
                .wrapping_add(payload.len() as u32)
                .wrapping_add(u32::from(f.tcp_flags & 1 != 0));
            let rel = data_seq.wrapping_sub(s.next_seq) as i32;
            if rel > 0 {
                self.totals.stream_resets += 1;
                s.buf.clear();
                s.next_seq = end;
                new = payload;
            } else {
                if end.wrapping_sub(s.next_seq) as i32 > 0 {
                    s.next_seq = end;
                }
                new = payload.get((-(rel as i64)) as usize..).unwrap_or(&[]);
            }
            context = s.buf.clone();
        } else {
            context = Vec::new();
            new = payload;
        }
        let room = self.scan_limit.saturating_sub(s.scanned) as usize;
        let new = &new[..new.len().min(room)];
        s.scanned += new.len() as u32;
        self.totals.scanned_bytes += new.len() as u64;
        let old = context.len();
        context.extend_from_slice(new);
        for (i, r) in self.rules.iter().enumerate() {
            if let Match::Wild(m) = &r.matcher {
                hits[i] = m.payload.iter().any(|p| {
                    (old.saturating_sub(p.len())..context.len()).any(|start| {
                        let end = start + p.len();
                        end > old && end <= context.len() && &context[start..end] == p.as_slice()
                    })
                });
            }
        }
        if f.is_tcp {
            s.buf = context;
        }
        hits
    }

    fn apply(&mut self, f: &PacketFields, idx: usize, a: &Action, acc: &mut Acc) {
        if let Some(t) = a.tag {
            acc.tag = Some(t);
        }
        if let Some(l) = &a.learn {
            acc.outcome = Some(Outcome::Passed);
            acc.keep = f.cap_len;
            acc.cut = false;
            if let Some(id) = flow_id(f) {
                let fl = self.flows.entry(id).or_default();
                if fl.learned.is_none() {
                    self.totals.learned += 1;
                }
                fl.learned = Some((idx, (**l).clone()));
            }
            return;
        }
        let Some(v) = a.verdict else { return };
        acc.cut = false;
        let (o, keep) = match v {
            Verdict::Pass => (Outcome::Passed, f.cap_len),
            Verdict::Drop => (Outcome::Dropped, 0),
            Verdict::Slice(s) => {
                let n = match s {
                    SliceTo::Bytes(n) => n,
                    SliceTo::L2 => f.l3,
                    SliceTo::L3 => f.l4,
                    SliceTo::L4 => f.payload,
                };
                if n < f.cap_len {
                    (Outcome::Sliced, n)
                } else {
                    (Outcome::Passed, f.cap_len)
                }
            }
            Verdict::Sample(n) => {
                let c = self.samples.entry(idx).or_insert(0);
                let keep = *c % n == 0;
                *c = (*c + 1) % n;
                if keep {
                    (Outcome::Passed, f.cap_len)
                } else {
                    (Outcome::SampledOut, 0)
                }
            }
            Verdict::Cutoff { bytes, packets } => match flow_id(f) {
                None => (Outcome::Passed, f.cap_len),
                Some(id) => {
                    let fl = self.flows.entry(id).or_default();
                    let (b0, p0) = (fl.cut_bytes, fl.cut_packets);
                    fl.cut_bytes += u64::from(f.cap_len);
                    fl.cut_packets += 1;
                    if p0 >= packets || b0 >= bytes {
                        acc.cut = true;
                        (Outcome::Dropped, 0)
                    } else if b0 + u64::from(f.cap_len) > bytes {
                        acc.cut = true;
                        (Outcome::Sliced, (bytes - b0) as u32)
                    } else {
                        (Outcome::Passed, f.cap_len)
                    }
                }
            },
        };
        acc.outcome = Some(o);
        acc.keep = keep;
    }

    /// Decides one packet, the slow and obvious way.
    pub(crate) fn eval(&mut self, f: &PacketFields, bytes: &[u8]) -> (Outcome, u32, Option<Tag>) {
        self.totals.packets_in += 1;
        self.totals.bytes_in += u64::from(f.cap_len);
        let hits = if self.has_patterns {
            self.scan(f, bytes)
        } else {
            vec![false; self.rules.len()]
        };
        let mut acc = Acc {
            outcome: None,
            keep: f.cap_len,
            tag: None,
            cut: false,
        };
        let mut applied = Vec::new();
        let exact = self
            .rules
            .iter()
            .position(|r| matches!(&r.matcher, Match::Exact(k) if exact_ok(k, f)));
        let learned = flow_id(f)
            .and_then(|id| self.flows.get(&id))
            .and_then(|fl| fl.learned.clone());
        if let Some(i) = exact {
            let a = self.rules[i].action.clone();
            self.apply(f, i, &a, &mut acc);
            applied.push(i);
        } else if let Some((i, a)) = learned {
            self.apply(f, i, &a, &mut acc);
            applied.push(i);
        } else {
            // every rule in order, the brute-force way
            #[allow(clippy::needless_range_loop)]
            for i in 0..self.rules.len() {
                let Match::Wild(m) = &self.rules[i].matcher else {
                    continue;
                };
                let ok = wild_ok(m, f, bytes)
                    && (m.payload.is_empty() || hits[i])
                    && self.bpf[i]
                        .as_ref()
                        .is_none_or(|b| b.run(bytes, f.wire_len) != 0);
                if ok {
                    let a = self.rules[i].action.clone();
                    self.apply(f, i, &a, &mut acc);
                    applied.push(i);
                    if a.stop {
                        break;
                    }
                }
            }
        }
        let (o, keep) = match acc.outcome {
            Some(o) => (o, acc.keep),
            None if self.default_drop => (Outcome::Dropped, 0),
            None => (Outcome::Passed, f.cap_len),
        };
        if applied.is_empty() {
            self.totals.unmatched += 1;
        }
        let t = &mut self.totals;
        match o {
            Outcome::Passed => t.passed += 1,
            Outcome::Dropped => t.dropped += 1,
            Outcome::Sliced => t.sliced += 1,
            Outcome::SampledOut => t.sampled_out += 1,
        }
        if acc.cut && acc.outcome.is_some() {
            if o == Outcome::Dropped {
                t.cut += 1;
            }
            t.cut_bytes += u64::from(f.cap_len - keep);
        }
        for i in applied {
            let c = &mut self.counters[i];
            c.packets += 1;
            c.bytes += u64::from(f.cap_len);
            match o {
                Outcome::Passed => c.passed += 1,
                Outcome::Dropped => c.dropped += 1,
                Outcome::Sliced => c.sliced += 1,
                Outcome::SampledOut => c.sampled_out += 1,
            }
        }
        (o, keep, acc.tag)
    }

    /// The oracle's counters of the rule with this id.
    pub(crate) fn by_id(&self, id: u32) -> RuleStats {
        let i = self.rules.iter().position(|r| r.id == id).unwrap();
        self.counters[i]
    }

    /// The oracle's counters of the exact rule with this key.
    pub(crate) fn by_key(&self, k: &ExactKey) -> RuleStats {
        let i = self
            .rules
            .iter()
            .position(|r| r.matcher == Match::Exact(*k))
            .unwrap();
        self.counters[i]
    }
}

/// Runs `packets` (link type, bytes) through a fresh engine and the oracle and asserts that every
/// verdict and every counter agree. Returns the engine's totals.
pub(crate) fn compare(set: &RuleSet, link: LinkType, packets: &[Vec<u8>], what: &str) -> Totals {
    let engine = Engine::new(set.clone(), link, 262_144).unwrap();
    let mut ev = engine.evaluator();
    let mut oracle = Oracle::new(set, link);
    let mut scratch = Decoded::new();
    for (n, p) in packets.iter().enumerate() {
        let f = fields_from_frame(&mut scratch, link, p, p.len() as u32);
        let d: Decision = ev.eval(&f, p);
        let want = oracle.eval(&f, p);
        assert_eq!(
            (d.outcome, d.keep, d.tag),
            want,
            "{what}: packet {n} {f:?}\nrules:\n{set:#?}"
        );
    }
    let stats = engine.stats();
    // the oracle's flow-table-free counters: evictions do not happen (flows are few)
    let mut t = stats.totals;
    assert_eq!(t.flow_evictions, 0, "{what}: the flow table overflowed");
    t.flow_evictions = 0;
    assert_eq!(t, oracle.totals, "{what}: totals");
    assert!(t.reconciles(), "{what}: totals do not reconcile: {t:?}");
    for w in &stats.wild {
        assert_eq!(
            w.stats,
            oracle.by_id(w.id),
            "{what}: counters of rule {}",
            w.id
        );
        assert!(w.stats.reconciles());
    }
    for e in engine.exact_rules() {
        assert_eq!(
            e.stats,
            oracle.by_key(&e.key),
            "{what}: counters of {:?}",
            e.key
        );
        assert!(e.stats.reconciles());
    }
    stats.totals
}

/// A packet to build.
#[derive(Clone, Debug)]
pub(crate) struct Pkt {
    pub vlan: Option<u16>,
    pub v6: bool,
    pub src: u8,
    pub dst: u8,
    /// 6, 17 or 1.
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
    pub flags: u8,
    pub seq: u32,
    pub payload: Vec<u8>,
}

/// Address number `n` of the test universe: 10.0.(n/4).(n%4+1), or 2001:db8::(same).
pub(crate) fn addr(v6: bool, n: u8) -> std::net::IpAddr {
    let (c, d) = (n / 4, n % 4 + 1);
    if v6 {
        std::net::IpAddr::V6(std::net::Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            u16::from(c),
            u16::from(d),
        ))
    } else {
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, c, d))
    }
}

/// An Ethernet frame for `p`.
pub(crate) fn frame(p: &Pkt) -> Vec<u8> {
    let mut l4 = Vec::new();
    match p.proto {
        6 => {
            l4.extend_from_slice(&p.sport.to_be_bytes());
            l4.extend_from_slice(&p.dport.to_be_bytes());
            l4.extend_from_slice(&p.seq.to_be_bytes());
            l4.extend_from_slice(&[0, 0, 0, 0, 0x50, p.flags, 0xff, 0xff, 0, 0, 0, 0]);
        }
        17 => {
            l4.extend_from_slice(&p.sport.to_be_bytes());
            l4.extend_from_slice(&p.dport.to_be_bytes());
            l4.extend_from_slice(&((8 + p.payload.len()) as u16).to_be_bytes());
            l4.extend_from_slice(&[0, 0]);
        }
        _ => l4.extend_from_slice(&[8, 0, 0, 0, 0, 1, 0, 1]),
    }
    l4.extend_from_slice(&p.payload);
    let mut f = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1];
    if let Some(v) = p.vlan {
        f.extend_from_slice(&[0x81, 0x00]);
        f.extend_from_slice(&v.to_be_bytes());
    }
    let proto = if p.v6 && p.proto == 1 { 58 } else { p.proto };
    match (addr(p.v6, p.src), addr(p.v6, p.dst)) {
        (std::net::IpAddr::V4(s), std::net::IpAddr::V4(d)) => {
            f.extend_from_slice(&[0x08, 0x00]);
            let len = (20 + l4.len()) as u16;
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&len.to_be_bytes());
            f.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        (std::net::IpAddr::V6(s), std::net::IpAddr::V6(d)) => {
            f.extend_from_slice(&[0x86, 0xdd]);
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
            f.extend_from_slice(&[proto, 64]);
            f.extend_from_slice(&s.octets());
            f.extend_from_slice(&d.octets());
        }
        _ => unreachable!(),
    }
    f.extend_from_slice(&l4);
    f
}
