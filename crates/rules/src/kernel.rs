//! The kernel's share of the rules: the drop rules that a socket filter can run, as one libpcap
//! expression ([`kernel_drops`]). A packet the expression matches is one the engine would drop
//! anyway, so the capture path may reject it in the kernel (`EXPR and not (DROPS)` as the socket
//! filter) and save copying it; those packets then never reach the engine, so its counters do
//! not see them: count them apart (the interface's counters less the socket's).
//!
//! # Which rules
//!
//! * Exact drop rules (they always decide first) without a VLAN, of IPv4 or IPv6; for TCP, UDP
//!   and SCTP with both ports given.
//! * Wildcard drop rules that stop, made of `ip4`/`ip6`, `proto`, `src`/`dst`/`host`, ports,
//!   `flags`, `len` and `bpf` terms (no `vlan`, `bytes` or `payload`), and only when nothing
//!   evaluated before them could keep a packet they match: no `learn` in the set, no exact rule
//!   that keeps packets of a conversation they could match, and no earlier wildcard rule that
//!   stops with another verdict and could match the same packets (a conservative overlap test
//!   on the header fields).
//!
//! Exact drop rules past the limit are counted in [`KernelDrops::unlisted`], not listed. An
//! engine's version answers without walking its rules ([`Engine::kernel_view`](crate::Engine::kernel_view)):
//! its exact table keeps the first 1024 drop rules (in the order they came in), the count per
//! action and, while there are at most 10 000, the keys of the exact rules that keep packets,
//! all updated on every change; so a new version of a million exact rules costs the capture
//! path's filter watcher what one of a hundred does. Exact drop rules past those 1024 are not
//! examined (they are counted in `unlisted`).
//!
//! # Why the expression is longer than the rules
//!
//! The engine matches the innermost IP header of a packet it could decode; libpcap the
//! outermost. Every term therefore also requires what weir-decode requires of the headers (IPv4
//! version, header length, total length; the whole TCP header; the 8-byte UDP header...) and
//! excludes what it would look through (IP-in-IP, GRE, IPv6 extension headers, VXLAN's UDP port),
//! so the expression never matches a packet the engine sees differently: it can only drop less
//! than the engine, never more (tested on the corpus against the engine).
//!
//! Limits: the expression reads the packet as libpcap lays it out (the VLAN tag in the frame).
//! Linux moves the outer VLAN tag of every received frame into metadata before packet sockets
//! see it (and NICs strip it too), so a tagged packet looks untagged to the socket filter:
//! exact rules (which match untagged packets only) would then drop tagged packets the engine
//! keeps. The capture path (weir-capture's `kernel_rules`) therefore runs the expression only
//! on packets without a tag in metadata (the kernel's `vlan_tci` ancillary load), and a tag
//! left in the frame fails the expression's `ip`/`ip6` test. The kernel runs the filter on the
//! whole packet, the engine on the captured bytes: the two agree when the snap length keeps
//! the headers ([`kernel_drops_snap`]).

use crate::fields::{PacketFields, NO_VLAN};
use crate::rule::{ExactKey, Match, Prefix, Rule, RuleId, RuleSet, Verdict, WildMatch};
use crate::{display::Addr, Action};

/// The drop rules the kernel can run, by [`kernel_drops`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelDrops {
    /// The libpcap expression matching the packets those rules drop; `None` when no rule
    /// qualifies.
    pub expr: Option<String>,
    /// Ids of the rules covered, exact then wildcard.
    pub covered: Vec<RuleId>,
    /// Exact rules covered.
    pub exact: usize,
    /// Wildcard rules covered.
    pub wild: usize,
    /// Drop rules left to the engine, with the reason.
    pub skipped: Vec<(RuleId, &'static str)>,
    /// Exact drop rules left to the engine and not listed in `skipped`: those past the limit
    /// (a million exact drop rules are counted here, not listed).
    pub unlisted: usize,
}

impl KernelDrops {
    /// Drop rules left to the engine: `skipped` and `unlisted`.
    pub fn left_out(&self) -> usize {
        self.skipped.len() + self.unlisted
    }
}

const IPIP: u8 = 4;
const IPV6_IN_IP: u8 = 41;
const GRE: u8 = 47;
const VXLAN_PORT: u16 = 4789;

/// True for protocols the decoder looks through (tunnels) or past (IPv6 extension headers).
fn opaque_proto(fam: u8, p: u8) -> bool {
    matches!(p, IPIP | IPV6_IN_IP | GRE)
        || (fam == 6 && matches!(p, 0 | 43 | 44 | 51 | 60 | 135 | 139 | 140))
}

fn has_ports(p: u8) -> bool {
    matches!(p, 6 | 17 | 132)
}

/// The header checks weir-decode makes before it reports an IP header of family `fam`.
fn ip_guard(fam: u8) -> &'static str {
    if fam == 4 {
        "ip and ip[0] & 0xf0 = 0x40 and ip[0] & 0xf >= 5 and ip[(ip[0] & 0xf) * 4 - 1] >= 0 \
         and (ip[2:2] = 0 or ip[2:2] >= (ip[0] & 0xf) * 4)"
    } else {
        "ip6 and ip6[0] & 0xf0 = 0x60 and ip6[39] >= 0"
    }
}

/// The protocol test, and the checks that the transport header is whole when `l4`.
fn proto_cond(fam: u8, p: u8, l4: bool) -> String {
    let mut s = if fam == 4 {
        format!("ip[9] = {p}")
    } else {
        format!("ip6[6] = {p}")
    };
    if p == 17 {
        s += &if fam == 4 {
            format!(" and not udp[2:2] = {VXLAN_PORT}")
        } else {
            format!(" and not ip6[42:2] = {VXLAN_PORT}")
        };
    }
    if l4 {
        s += match (fam, p) {
            (4, 6) => " and tcp[12] & 0xf0 >= 0x50 and tcp[((tcp[12] & 0xf0) >> 2) - 1] >= 0",
            (4, 17) => " and udp[7] >= 0 and (udp[4:2] = 0 or udp[4:2] >= 8)",
            (4, _) => " and sctp[11] >= 0",
            (_, 6) => " and ip6[52] & 0xf0 >= 0x50 and ip6[40 + ((ip6[52] & 0xf0) >> 2) - 1] >= 0",
            (_, 17) => " and ip6[47] >= 0 and (ip6[44:2] = 0 or ip6[44:2] >= 8)",
            _ => " and ip6[51] >= 0",
        };
    }
    s
}

/// The load of a port (`dst` or source) of protocol `p`.
fn port_load(fam: u8, p: u8, dst: bool) -> String {
    let off = if dst { 2 } else { 0 };
    if fam == 6 {
        return format!("ip6[{}:2]", 40 + off);
    }
    let l = match p {
        6 => "tcp",
        17 => "udp",
        _ => "sctp",
    };
    format!("{l}[{off}:2]")
}

fn range(load: &str, lo: u16, hi: u16) -> String {
    if lo == hi {
        format!("{load} = {lo}")
    } else {
        format!("{load} >= {lo} and {load} <= {hi}")
    }
}

fn ip_word(fam: u8) -> &'static str {
    if fam == 4 {
        "ip"
    } else {
        "ip6"
    }
}

/// The expression of an exact drop rule, or why it cannot go to the kernel.
fn exact_expr(k: &ExactKey) -> Result<String, &'static str> {
    if k.vlan != NO_VLAN {
        return Err("a VLAN");
    }
    if opaque_proto(k.family, k.proto) {
        return Err("a tunnel or extension-header protocol");
    }
    let ports = has_ports(k.proto);
    if ports && (k.pa == 0 || k.pb == 0) {
        return Err("port 0");
    }
    if !ports && (k.pa != 0 || k.pb != 0) {
        return Err("ports on a protocol without ports");
    }
    let (fam, ip) = (k.family, ip_word(k.family));
    let dir = |a: u128, pa: u16, b: u128, pb: u16| {
        let mut s = format!(
            "{ip} src host {} and {ip} dst host {}",
            Addr(fam, a),
            Addr(fam, b)
        );
        if ports {
            s += &format!(
                " and {} = {pa} and {} = {pb}",
                port_load(fam, k.proto, false),
                port_load(fam, k.proto, true)
            );
        }
        s
    };
    Ok(format!(
        "({} and {} and (({}) or ({})))",
        ip_guard(fam),
        proto_cond(fam, k.proto, ports),
        dir(k.a, k.pa, k.b, k.pb),
        dir(k.b, k.pb, k.a, k.pa)
    ))
}

/// The family a match is limited to (its `ip4`/`ip6`, else its prefixes'), and false when its
/// terms contradict each other (it matches nothing).
fn family_of(m: &WildMatch) -> (Option<u8>, bool) {
    let mut fam = m.family;
    for p in [m.src, m.dst, m.host].into_iter().flatten() {
        match fam {
            Some(f) if f != p.family => return (fam, false),
            _ => fam = Some(p.family),
        }
    }
    (fam, true)
}

/// The expression of a wildcard drop rule, or why it cannot go to the kernel.
fn wild_expr(m: &WildMatch) -> Result<String, &'static str> {
    if m.vlan.is_some() {
        return Err("a VLAN");
    }
    if !m.bytes.is_empty() {
        return Err("byte matches");
    }
    if !m.payload.is_empty() {
        return Err("payload patterns");
    }
    let (fam, ok) = family_of(m);
    if !ok {
        return Err("it matches nothing");
    }
    let ports = m.sport.is_some() || m.dport.is_some() || m.port.is_some();
    let mut alts = Vec::new();
    for f in fam.map_or(vec![4, 6], |f| vec![f]) {
        let protos: Vec<Option<u8>> = match m.proto {
            Some(p) if opaque_proto(f, p) => return Err("a tunnel or extension-header protocol"),
            Some(p) if (ports && !has_ports(p)) || (m.flags.is_some() && p != 6) => continue,
            Some(p) => vec![Some(p)],
            None if m.flags.is_some() => vec![Some(6)],
            None if ports => vec![Some(6), Some(17), Some(132)],
            None => vec![None],
        };
        for p in protos {
            let mut t = vec![ip_guard(f).to_string()];
            match p {
                Some(p) => t.push(proto_cond(f, p, ports || m.flags.is_some())),
                None if f == 4 => t.push(format!(
                    "ip[9] != {IPIP} and ip[9] != {IPV6_IN_IP} and ip[9] != {GRE} and \
                     not (ip[9] = 17 and udp[2:2] = {VXLAN_PORT})"
                )),
                None => t.push(format!(
                    "(ip6[6] = 6 or ip6[6] = 1 or ip6[6] = 58 or ip6[6] = 132 or \
                     (ip6[6] = 17 and not ip6[42:2] = {VXLAN_PORT}))"
                )),
            }
            let ip = ip_word(f);
            for (w, pre) in [("src net", m.src), ("dst net", m.dst), ("net", m.host)] {
                if let Some(pre) = pre.filter(|p| p.len > 0) {
                    t.push(format!("{ip} {w} {}/{}", Addr(f, pre.addr), pre.len));
                }
            }
            if let Some(p) = p.filter(|&p| has_ports(p)) {
                let (sl, dl) = (port_load(f, p, false), port_load(f, p, true));
                if let Some(r) = m.sport {
                    t.push(range(&sl, r.lo, r.hi));
                }
                if let Some(r) = m.dport {
                    t.push(range(&dl, r.lo, r.hi));
                }
                if let Some(r) = m.port {
                    t.push(format!(
                        "(({}) or ({}))",
                        range(&sl, r.lo, r.hi),
                        range(&dl, r.lo, r.hi)
                    ));
                }
            }
            if let Some((set, mask)) = m.flags {
                let load = if f == 4 { "tcp[13]" } else { "ip6[53]" };
                t.push(format!("{load} & {mask} = {set}"));
            }
            if let Some((lo, hi)) = m.len {
                t.push(format!("len >= {lo} and len <= {hi}"));
            }
            if let Some(e) = &m.bpf {
                t.push(format!("({e})"));
            }
            alts.push(format!("({})", t.join(" and ")));
        }
    }
    if alts.is_empty() {
        return Err("it matches nothing");
    }
    Ok(if alts.len() == 1 {
        alts.remove(0)
    } else {
        format!("({})", alts.join(" or "))
    })
}

pub(crate) fn drops(a: &Action) -> bool {
    a.verdict == Some(Verdict::Drop) && a.learn.is_none()
}

fn prefixes_overlap(a: Option<Prefix>, b: Option<Prefix>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => {
            let len = a.len.min(b.len);
            a.family == b.family
                && a.addr & Prefix::mask(a.family, len) == b.addr & Prefix::mask(a.family, len)
        }
        _ => true,
    }
}

fn both<T: PartialEq + Copy>(a: Option<T>, b: Option<T>, ok: impl Fn(T, T) -> bool) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => ok(a, b),
        _ => true,
    }
}

/// False only when no packet can match both `q` and `r` (decided on the header fields).
fn may_overlap(q: &WildMatch, r: &WildMatch) -> bool {
    let (fq, okq) = family_of(q);
    let (fr, okr) = family_of(r);
    okq && okr
        && both(fq, fr, |a, b| a == b)
        && both(q.vlan, r.vlan, |a, b| a == b)
        && both(q.proto, r.proto, |a, b| a == b)
        && prefixes_overlap(q.src, r.src)
        && prefixes_overlap(q.dst, r.dst)
        && both(q.sport, r.sport, |a, b| a.lo <= b.hi && b.lo <= a.hi)
        && both(q.dport, r.dport, |a, b| a.lo <= b.hi && b.lo <= a.hi)
        && both(q.flags, r.flags, |(s1, m1), (s2, m2)| {
            (s1 ^ s2) & m1 & m2 == 0
        })
        && both(q.len, r.len, |(a1, b1), (a2, b2)| a1 <= b2 && a2 <= b1)
}

/// False only when no packet of conversation `k` can match `r`'s header fields.
fn key_may_match(k: &ExactKey, r: &WildMatch) -> bool {
    let h = WildMatch {
        flags: None,
        len: None,
        bytes: Vec::new(),
        payload: Vec::new(),
        bpf: None,
        ..r.clone()
    };
    [(k.a, k.pa, k.b, k.pb), (k.b, k.pb, k.a, k.pa)]
        .iter()
        .any(|&(src, sport, dst, dport)| {
            let f = PacketFields {
                vlan: k.vlan,
                family: k.family,
                proto: k.proto,
                src,
                dst,
                sport,
                dport,
                l4: 0,
                ..PacketFields::empty(0, 0)
            };
            h.header_matches(&f)
        })
}

/// Exact rules that keep packets, beyond which wildcard rules are not checked one by one.
pub(crate) const MAX_KEEPING_EXACT: usize = 10_000;

/// The drop rules of `set` that the kernel can run safely, at most `limit` of them (a classic
/// BPF program holds 4096 instructions; an exact rule takes about 30), as one libpcap
/// expression. See the [module documentation](self) for which rules qualify.
pub fn kernel_drops(set: &RuleSet, limit: usize) -> KernelDrops {
    kernel_drops_snap(set, limit, WHOLE_PACKET)
}

/// The shortest snap length with which the engine sees every header the expression reads:
/// Ethernet (14) + the longest IPv4 header (60) + the longest TCP header (60).
pub const MIN_KERNEL_SNAPLEN: u32 = 134;

/// The snap length that keeps whole packets (libpcap's and weir's largest).
pub const WHOLE_PACKET: u32 = 262_144;

/// [`kernel_drops`] for a capture whose engine sees the first `snaplen` bytes of each packet
/// while the kernel filter reads the whole packet: below [`MIN_KERNEL_SNAPLEN`] no rule goes
/// to the kernel (the engine may not see the headers the expression tests), and below
/// [`WHOLE_PACKET`] no rule with a `bpf` term does (the term may read past the snap length,
/// where the engine's copy fails and the kernel's matches).
pub fn kernel_drops_snap(set: &RuleSet, limit: usize, snaplen: u32) -> KernelDrops {
    let exact_drops: Vec<(RuleId, ExactKey)> = set
        .rules
        .iter()
        .filter_map(|r| match &r.matcher {
            Match::Exact(k) if drops(&r.action) => Some((r.id, *k)),
            _ => None,
        })
        .collect();
    let keeping: Vec<ExactKey> = set
        .rules
        .iter()
        .filter_map(|r| match &r.matcher {
            Match::Exact(k) if !drops(&r.action) => Some(*k),
            _ => None,
        })
        .collect();
    let mut wild: Vec<(usize, &Rule, &WildMatch)> = set
        .rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match &r.matcher {
            Match::Wild(m) => Some((i, r, &**m)),
            Match::Exact(_) => None,
        })
        .collect();
    wild.sort_by_key(|w| (w.1.prio, w.0));
    let wild: Vec<WildIn<'_>> = wild
        .iter()
        .map(|&(_, r, m)| WildIn {
            id: r.id,
            m,
            action: &r.action,
        })
        .collect();
    let keeping_n = keeping.len();
    drops_of(&Input {
        exact_drops: &exact_drops,
        exact_drop_total: exact_drops.len(),
        keeping: (keeping_n <= MAX_KEEPING_EXACT).then_some(&keeping[..]),
        keeping_total: keeping_n,
        any_learn: set.rules.iter().any(|r| r.action.learn.is_some()),
        default_drop: set.options.default_drop,
        wild: &wild,
        limit,
        snaplen,
    })
}

/// A wildcard rule as [`drops_of`] reads it.
pub(crate) struct WildIn<'a> {
    pub id: RuleId,
    pub m: &'a WildMatch,
    pub action: &'a Action,
}

/// What [`drops_of`] needs of a rule-set version, gathered from a [`RuleSet`] (every rule) or
/// from an engine's version (its exact table keeps the first drop rules and the keeping rules
/// apart, so a million exact rules are not walked).
pub(crate) struct Input<'a> {
    /// The first exact drop rules, in the order they came in (all of them, or at least more
    /// than the limit).
    pub exact_drops: &'a [(RuleId, ExactKey)],
    /// All exact drop rules.
    pub exact_drop_total: usize,
    /// The exact rules that keep packets, when there are at most [`MAX_KEEPING_EXACT`].
    pub keeping: Option<&'a [ExactKey]>,
    /// Their number.
    pub keeping_total: usize,
    /// Any rule (exact or wildcard) learns.
    pub any_learn: bool,
    /// `default drop`.
    pub default_drop: bool,
    /// The wildcard rules in evaluation order.
    pub wild: &'a [WildIn<'a>],
    pub limit: usize,
    pub snaplen: u32,
}

/// The kernel's drop rules of a version: see [`kernel_drops_snap`].
pub(crate) fn drops_of(i: &Input<'_>) -> KernelDrops {
    let mut out = KernelDrops::default();
    let unseen = i.exact_drop_total.saturating_sub(i.exact_drops.len());
    if i.snaplen < MIN_KERNEL_SNAPLEN {
        let why = "the snap length cuts the headers the filter reads";
        out.skipped
            .extend(i.exact_drops.iter().map(|&(id, _)| (id, why)));
        out.unlisted = unseen;
        out.skipped.extend(
            i.wild
                .iter()
                .filter(|w| drops(w.action))
                .map(|w| (w.id, why)),
        );
        return out;
    }
    let whole = i.snaplen >= WHOLE_PACKET;
    let mut terms = Vec::new();
    let mut examined = i.exact_drops.len();
    for (n, &(id, ref k)) in i.exact_drops.iter().enumerate() {
        if out.covered.len() >= i.limit {
            examined = n;
            break;
        }
        match exact_expr(k) {
            Ok(e) => {
                terms.push(e);
                out.covered.push(id);
                out.exact += 1;
            }
            Err(why) => out.skipped.push((id, why)),
        }
    }
    // past the limit, or not examined at all: counted, not listed (there may be a million)
    out.unlisted = i.exact_drops.len() - examined + unseen;
    for (rank, w) in i.wild.iter().enumerate() {
        if !drops(w.action) {
            continue;
        }
        let m = w.m;
        let why = if !w.action.stop {
            Some("it continues: later rules may keep the packet")
        } else if i.any_learn {
            Some("the set learns flows (learnt flows are decided first)")
        } else if i.keeping_total > MAX_KEEPING_EXACT {
            Some("too many exact rules that keep packets")
        } else if i
            .keeping
            .unwrap_or_default()
            .iter()
            .any(|k| key_may_match(k, m))
        {
            Some("an exact rule keeps packets it could match")
        } else if i.wild[..rank].iter().any(|q| {
            q.action.stop
                && q.action.verdict != Some(Verdict::Drop)
                && !(q.action.verdict.is_none() && i.default_drop)
                && may_overlap(q.m, m)
        }) {
            Some("an earlier rule may keep packets it matches")
        } else if m.bpf.is_some() && !whole {
            Some("a bpf term may read past the snap length")
        } else if out.covered.len() >= i.limit {
            Some("over the limit")
        } else {
            None
        };
        if let Some(why) = why {
            out.skipped.push((w.id, why));
            continue;
        }
        match wild_expr(m) {
            Ok(e) => {
                terms.push(e);
                out.covered.push(w.id);
                out.wild += 1;
            }
            Err(why) => out.skipped.push((w.id, why)),
        }
    }
    if !terms.is_empty() {
        out.expr = Some(terms.join(" or "));
    }
    out
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn which_rules_go_to_the_kernel() {
        let set = RuleSet::parse(
            "exact tcp 10.0.0.9:5000 10.0.0.1:873 -> drop\n\
             exact tcp 10.0.0.9:0 10.0.0.1:873 -> drop\n\
             exact udp 10.0.0.9:53 10.0.0.1:53 vlan 3 -> drop\n\
             exact udp 10.0.0.7:53 10.0.0.1:53 -> pass\n\
             proto udp src 10.0.0.0/24 -> drop\n\
             proto udp src 192.168.0.0/16 -> pass\n\
             src 192.168.1.0/24 -> drop\n\
             proto tcp dst 172.16.0.0/12 port 22 -> drop\n\
             payload \"x\" -> drop\n",
        )
        .unwrap();
        let k = kernel_drops(&set, 100);
        assert_eq!(k.covered, vec![1, 8]);
        assert_eq!((k.exact, k.wild), (1, 1));
        let why: Vec<_> = k.skipped.iter().map(|s| s.0).collect();
        assert_eq!(why, vec![2, 3, 5, 7, 9]);
        assert_eq!(k.skipped[2].1, "an exact rule keeps packets it could match");
        assert_eq!(
            k.skipped[3].1,
            "an earlier rule may keep packets it matches"
        );
        assert!(kernel_drops(&set, 1)
            .skipped
            .contains(&(8, "over the limit")));
    }

    #[test]
    fn the_snap_length_decides_too() {
        let set = RuleSet::parse(
            "exact tcp 10.0.0.9:5000 10.0.0.1:873 -> drop\n\
             proto udp src 10.0.0.0/24 bpf \"udp[8] = 1\" -> drop\n\
             proto tcp src 10.0.1.0/24 -> drop\n",
        )
        .unwrap();
        assert_eq!(
            kernel_drops_snap(&set, 100, WHOLE_PACKET).covered,
            vec![1, 2, 3]
        );
        let cut = kernel_drops_snap(&set, 100, 1500);
        assert_eq!(cut.covered, vec![1, 3]);
        assert_eq!(
            cut.skipped,
            vec![(2, "a bpf term may read past the snap length")]
        );
        let short = kernel_drops_snap(&set, 100, MIN_KERNEL_SNAPLEN - 1);
        assert!(short.expr.is_none() && short.covered.is_empty());
        assert_eq!(short.skipped.len(), 3);
    }
}

#[cfg(test)]
mod view_test {
    use crate::{kernel_drops_snap, Engine, RuleSet, WHOLE_PACKET};
    use weir_packet::LinkType;

    /// The engine's kept-apart view gives what a walk of the whole set gives, after a build and
    /// after live additions and removals (the removals eat into the kept lists, and it walks).
    #[test]
    fn the_engines_view_equals_the_walk_of_the_set() {
        let mut text = String::new();
        for i in 0..3000u32 {
            // drop, pass, drop with a VLAN (not for the kernel), drop...
            let vlan = if i % 7 == 3 { " vlan 5" } else { "" };
            let action = if i % 3 == 1 { "pass" } else { "drop" };
            text += &format!(
                "exact tcp 10.1.{}.{}:{} 10.9.0.1:80{vlan} -> {action}\n",
                i >> 8,
                i & 255,
                1000 + i
            );
        }
        text += "proto udp src 10.2.0.0/16 -> drop\nproto tcp dst 10.1.0.0/16 -> drop\n";
        let set = RuleSet::parse(&text).unwrap();
        let e = Engine::new(set.clone(), LinkType::ETHERNET, WHOLE_PACKET).unwrap();
        // small limits: exactly what the walk gives; past the 1024 kept drop rules, the first
        // ones are the walk's and the others are counted, not examined
        let same = |e: &Engine, limit: usize| {
            let want = kernel_drops_snap(&e.rule_set(), limit, WHOLE_PACKET);
            let got = e.kernel_drops_snap(limit, WHOLE_PACKET);
            if limit <= 100 {
                assert!(
                    got == want,
                    "limit {limit}: {:?} vs {:?}",
                    got.covered,
                    want.covered
                );
            } else {
                let n = got.exact;
                assert_eq!(got.covered[..n], want.covered[..n], "limit {limit}");
                assert_eq!(got.wild, want.wild, "limit {limit}");
                assert_eq!(
                    got.covered.len() + got.left_out(),
                    want.covered.len() + want.left_out(),
                    "limit {limit}"
                );
            }
            got
        };
        for limit in [0, 1, 5, 100, 5000] {
            same(&e, limit);
        }
        let k = same(&e, 100);
        assert_eq!((k.exact, k.wild), (100, 0));
        assert_eq!(k.covered[..3], [1, 3, 6]); // 2 passes, 4 has a VLAN, 5 passes
                                               // 2000 exact drop rules (some with a VLAN, which the kernel cannot take), and the
                                               // two wildcard drop rules: the udp one fits (no keeping rule is udp), the tcp one not;
                                               // exact drop rules past the 1024 kept apart are counted, not examined
        let k = e.kernel_drops_snap(1000, WHOLE_PACKET);
        assert_eq!((k.wild, k.unlisted), (1, 2000 - 1024));
        assert_eq!(k.covered.len() + k.left_out(), 2002);
        // remove most drop rules by id: the kept list runs out, the view walks the table
        for id in (1..=2700).filter(|i| (i - 1) % 3 != 1) {
            e.del_rule(id).unwrap();
        }
        for limit in [1, 100, 2000] {
            same(&e, limit);
        }
        // add rules live, drop and pass, then remove every pass rule: the tcp wildcard goes
        let adds: Vec<_> = (0..50u32)
            .map(|i| {
                let k = crate::ExactKey::new(
                    4,
                    crate::NO_VLAN,
                    6,
                    0x0a03_0000 + u128::from(i),
                    7,
                    1,
                    9,
                );
                let line = if i % 2 == 0 {
                    "any -> drop"
                } else {
                    "any -> pass"
                };
                (k, RuleSet::parse(line).unwrap().rules[0].action.clone())
            })
            .collect();
        e.add_exact(&adds).unwrap();
        same(&e, 100);
        let passes: Vec<_> = e
            .exact_rules()
            .into_iter()
            .filter(|r| !super::drops(&r.action))
            .map(|r| r.key)
            .collect();
        assert_eq!(e.del_exact(&passes), passes.len() as u64);
        same(&e, 100);
        let k = same(&e, 5000);
        assert_eq!(k.wild, 2);
    }
}
