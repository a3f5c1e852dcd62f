//! The engine against the brute-force oracle (tests/common): random rule files (written as text,
//! so the parser is in the loop) and random packets built here, then verdicts and every counter
//! compared. Payload patterns are checked against a naive search of each flow's stream, with
//! segments in order, retransmitted, overlapping and after gaps.

mod common;

use std::collections::HashSet;

use common::{addr, compare, frame, Pkt};
use proptest::prelude::*;
use weir_decode::LinkType;
use weir_rules::{Match, RuleSet};

/// xorshift64*: the proptest seed drives everything else, so a failure reproduces from it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
}

const PORTS: [u16; 5] = [53, 80, 443, 1000, 1001];

fn endpoint(v6: bool, n: u8, port: Option<u16>) -> String {
    match (addr(v6, n), port) {
        (a, None) => a.to_string(),
        (std::net::IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
    }
}

fn pattern(r: &mut Rng) -> String {
    let n = 1 + r.below(3);
    (0..n).map(|_| *r.pick(&['a', 'b', 'c'])).collect()
}

fn ports(r: &mut Rng) -> String {
    if r.chance(60) {
        r.pick(&PORTS).to_string()
    } else {
        let a = *r.pick(&PORTS);
        let b = *r.pick(&PORTS);
        format!("{}-{}", a.min(b), a.max(b))
    }
}

fn prefix(r: &mut Rng) -> String {
    let v6 = r.chance(25);
    let a = addr(v6, r.below(8) as u8);
    let len = if v6 {
        *r.pick(&[0, 64, 112, 126, 128])
    } else {
        *r.pick(&[0, 8, 16, 24, 30, 32])
    };
    format!("{a}/{len}")
}

fn rule_line(r: &mut Rng) -> String {
    let mut s = String::new();
    if r.chance(30) {
        s += &format!("prio {} ", r.below(3));
    }
    if r.chance(20) {
        let proto = *r.pick(&["tcp", "udp", "icmp"]);
        let v6 = r.chance(20);
        let p = |r: &mut Rng| (proto != "icmp").then(|| *r.pick(&PORTS));
        let (pa, pb) = (p(r), p(r));
        s += &format!(
            "exact {proto} {} {}",
            endpoint(v6, r.below(8) as u8, pa),
            endpoint(v6, r.below(8) as u8, pb)
        );
        if r.chance(15) {
            s += " vlan 10";
        }
    } else {
        let mut terms = Vec::new();
        if r.chance(8) {
            terms.push(r.pick(&["ip4", "ip6"]).to_string());
        }
        if r.chance(12) {
            terms.push(format!("vlan {}", r.pick(&["10", "20", "none"])));
        }
        if r.chance(35) {
            terms.push(format!("proto {}", r.pick(&["tcp", "udp", "icmp", "6"])));
        }
        for k in ["src", "dst", "host"] {
            if r.chance(25) {
                terms.push(format!("{k} {}", prefix(r)));
            }
        }
        for k in ["sport", "dport", "port"] {
            if r.chance(20) {
                terms.push(format!("{k} {}", ports(r)));
            }
        }
        if r.chance(12) {
            terms.push(format!(
                "flags {}",
                r.pick(&["S/SA", "A", "F/F", "R", "SA/SAFR", "P/PA"])
            ));
        }
        if r.chance(10) {
            let a = 40 + r.below(40);
            terms.push(format!("len {a}-{}", a + r.below(40)));
        }
        if r.chance(15) {
            let b = r.pick(&[
                "l3+9=06",
                "!l3+9=11",
                "l4+2=0050",
                "l4+0=0035/ff00",
                "pl+0=61",
                "!pl+1=62",
                "l2+12=8100",
                "l3+12=0a000001/ffff00ff",
            ]);
            terms.push(format!("bytes {b}"));
        }
        if r.chance(25) {
            for _ in 0..1 + r.below(3) {
                terms.push(format!("payload \"{}\"", pattern(r)));
            }
        }
        if r.chance(5) {
            terms.push(format!(
                "bpf \"{}\"",
                r.pick(&["tcp port 80", "udp", "host 10.0.0.1", "vlan", "ip6"])
            ));
        }
        if terms.is_empty() {
            terms.push("any".into());
        }
        s += &terms.join(" ");
    }
    s += " ->";
    let verdict = *r.pick(&[
        "",
        "pass",
        "drop",
        "drop",
        "slice 40",
        "slice l2",
        "slice l3",
        "slice l4",
        "sample 2",
        "sample 3",
        "cutoff 150",
        "cutoff-packets 2",
        "cutoff 100 cutoff-packets 3",
    ]);
    if !verdict.is_empty() {
        s += &format!(" {verdict}");
    }
    if r.chance(30) {
        s += &format!(" tag {}", r.pick(&["7", "alert", "\"two words\""]));
    }
    if r.chance(35) {
        s += " continue";
    }
    if verdict.is_empty() && !s.contains("tag") || r.chance(8) {
        s += &format!(
            " learn {}",
            r.pick(&["drop", "pass tag 9", "slice l4", "sample 2"])
        );
    }
    s
}

/// A random rule file, parsed, with duplicate exact conversations left out.
fn rule_set(r: &mut Rng, n: usize) -> RuleSet {
    let mut text = String::new();
    if r.chance(30) {
        text += "default drop\n";
    }
    if r.chance(50) {
        text += &format!("set scan-limit {}\n", 4 + r.below(60));
    }
    for _ in 0..n {
        text += &rule_line(r);
        text.push('\n');
    }
    let mut set = RuleSet::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let mut keys = HashSet::new();
    set.rules.retain(|rule| match &rule.matcher {
        Match::Exact(k) => keys.insert(*k),
        Match::Wild(_) => true,
    });
    set
}

/// Random packets of a few flows, TCP segments mostly in order, sometimes retransmitted,
/// overlapping or after a gap.
fn packets(r: &mut Rng, n: usize) -> Vec<Vec<u8>> {
    let mut next_seq = std::collections::HashMap::new();
    (0..n)
        .map(|_| {
            let v6 = r.chance(20);
            let proto = *r.pick(&[6, 6, 6, 17, 17, 1]);
            let mut p = Pkt {
                vlan: r.chance(15).then(|| *r.pick(&[10, 20])),
                v6,
                src: r.below(8) as u8,
                dst: r.below(8) as u8,
                proto,
                sport: *r.pick(&PORTS),
                dport: *r.pick(&PORTS),
                flags: (r.next() & 0x1f) as u8,
                seq: 0,
                payload: (0..r.below(12)).map(|_| *r.pick(b"aabbc")).collect(),
            };
            if proto == 6 {
                let k = (p.v6, p.vlan, p.src, p.dst, p.sport, p.dport);
                let next: &mut u32 = next_seq.entry(k).or_insert(r.next() as u32);
                let len = p.payload.len() as u32;
                p.seq = match r.below(10) {
                    0 => next.wrapping_sub(r.below(u64::from(len) + 3) as u32),
                    1 => next.wrapping_add(1 + r.below(5) as u32),
                    _ => *next,
                };
                let end = p
                    .seq
                    .wrapping_add(len)
                    .wrapping_add(u32::from(p.flags & 3 != 0) * u32::from(p.flags & 2 != 0))
                    .wrapping_add(u32::from(p.flags & 1 != 0));
                if end.wrapping_sub(*next) as i32 > 0 {
                    *next = end;
                }
            }
            frame(&p)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Random rule sets and random packets: the engine equals the oracle.
    #[test]
    fn engine_equals_oracle(seed in any::<u64>(), rules in 1usize..40, n in 1usize..300) {
        let mut r = Rng(seed | 1);
        let set = rule_set(&mut r, rules);
        let pkts = packets(&mut r, n);
        compare(&set, LinkType::ETHERNET, &pkts, &format!("seed {seed}"));
    }

}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Many patterns, one TCP conversation cut into random segments: Aho-Corasick streams equal
    /// the naive search, matches split across segments included.
    #[test]
    fn patterns_across_segments_equal_naive_search(seed in any::<u64>(), npat in 1usize..3000) {
        let mut r = Rng(seed | 1);
        let mut text = String::from("set scan-limit 1m\n");
        for i in 0..npat {
            let len = 1 + r.below(6);
            let p: String = (0..len).map(|_| *r.pick(&['a', 'b', 'c', 'd'])).collect();
            text += &format!("id {} payload \"{p}\" -> tag {i} continue\n", i + 1);
        }
        let set = RuleSet::parse(&text).unwrap();
        let stream: Vec<u8> = (0..2000).map(|_| *r.pick(b"abcdabce")).collect();
        let mut pkts = Vec::new();
        let mut pos = 0usize;
        while pos < stream.len() {
            let len = (1 + r.below(20) as usize).min(stream.len() - pos);
            // sometimes resend a piece that overlaps what was sent
            let start = if r.chance(10) { pos.saturating_sub(r.below(10) as usize) } else { pos };
            let p = Pkt {
                vlan: None, v6: false, src: 1, dst: 2, proto: 6, sport: 1000, dport: 80,
                flags: 0x18, seq: 1000 + start as u32, payload: stream[start..pos + len].to_vec(),
            };
            pkts.push(frame(&p));
            pos += len;
        }
        compare(&set, LinkType::ETHERNET, &pkts, &format!("patterns seed {seed}"));
    }
}

#[test]
fn a_fixed_mix_exercises_every_action() {
    let text = "\
default drop
exact tcp 10.0.0.1:1000 10.0.0.2:80 -> drop tag backup
exact udp 10.0.0.3:53 10.0.0.1:53 vlan 10 -> slice l4
prio -1 src 10.0.1.0/24 -> tag lab continue
host 10.0.0.4 -> sample 3
proto tcp dport 443 -> learn drop tag learnt
proto tcp flags S/SA -> pass
payload \"ab\" -> tag alert continue
proto tcp -> cutoff 200 cutoff-packets 4
bytes l4+2=0035 -> slice 60
";
    let set = RuleSet::parse(text).unwrap();
    let mut r = Rng(7);
    let pkts = packets(&mut r, 5000);
    let t = compare(&set, LinkType::ETHERNET, &pkts, "fixed mix");
    assert!(
        t.cut > 0 && t.sampled_out > 0 && t.sliced > 0 && t.learned > 0,
        "{t:?}"
    );
}
