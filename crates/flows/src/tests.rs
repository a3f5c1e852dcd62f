//! Unit tests of the meter as a whole: frames built here go through [`Meter`] and the records
//! that come out are checked (expiry order, FIN/RST grace, LRU eviction, fragments, ICMP, IPv4 and
//! IPv6, VLAN, memory per flow, and the threaded pipeline against the inline one).

use std::net::IpAddr;

use weir_packet::LinkType;

use crate::record::{EndReason, FlowRecord};
use crate::{Config, Meter};

const S: u64 = 1_000_000_000;

/// A frame under construction.
#[derive(Clone)]
struct Pkt {
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    sport: u16,
    dport: u16,
    flags: u8,
    payload: usize,
    vlan: Option<u16>,
    ttl: u8,
    /// (id, offset in bytes, more fragments)
    frag: Option<(u32, u16, bool)>,
}

fn pkt(src: &str, dst: &str, proto: u8, sport: u16, dport: u16) -> Pkt {
    Pkt {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        proto,
        sport,
        dport,
        flags: 0x10,
        payload: 10,
        vlan: None,
        ttl: 64,
        frag: None,
    }
}

impl Pkt {
    fn flags(mut self, f: u8) -> Pkt {
        self.flags = f;
        self
    }
    fn vlan(mut self, v: u16) -> Pkt {
        self.vlan = Some(v);
        self
    }
    fn frag(mut self, id: u32, off: u16, more: bool) -> Pkt {
        self.frag = Some((id, off, more));
        self
    }
    fn rev(&self) -> Pkt {
        Pkt {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            ..self.clone()
        }
    }

    /// The transport header and payload.
    fn l4(&self) -> Vec<u8> {
        let mut v = Vec::new();
        match self.proto {
            6 => {
                v.extend(self.sport.to_be_bytes());
                v.extend(self.dport.to_be_bytes());
                v.extend([
                    0, 0, 0, 1, 0, 0, 0, 0, 0x50, self.flags, 0xff, 0xff, 0, 0, 0, 0,
                ]);
            }
            17 => {
                v.extend(self.sport.to_be_bytes());
                v.extend(self.dport.to_be_bytes());
                v.extend(((8 + self.payload) as u16).to_be_bytes());
                v.extend([0, 0]);
            }
            1 | 58 => v.extend([(self.dport >> 8) as u8, self.dport as u8, 0, 0, 0, 0, 0, 0]),
            _ => {}
        }
        v.extend(std::iter::repeat_n(0xaa, self.payload));
        v
    }

    /// An Ethernet frame (with an 802.1Q tag when asked).
    fn frame(&self) -> Vec<u8> {
        let mut l4 = self.l4();
        if let Some((_, off, _)) = self.frag {
            if off != 0 {
                l4 = vec![0xbb; self.payload];
            }
        }
        let mut f = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1];
        if let Some(v) = self.vlan {
            f.extend([0x81, 0x00]);
            f.extend(v.to_be_bytes());
        }
        match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                f.extend([0x08, 0x00]);
                let (id, fo) = match self.frag {
                    Some((id, off, more)) => (id as u16, (off / 8) | if more { 0x2000 } else { 0 }),
                    None => (1, 0),
                };
                f.extend([0x45, 0]);
                f.extend(((20 + l4.len()) as u16).to_be_bytes());
                f.extend(id.to_be_bytes());
                f.extend(fo.to_be_bytes());
                f.extend([self.ttl, self.proto, 0, 0]);
                f.extend(s.octets());
                f.extend(d.octets());
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                f.extend([0x86, 0xdd]);
                let ext = if self.frag.is_some() { 8 } else { 0 };
                f.extend([0x60, 0, 0, 0]);
                f.extend(((ext + l4.len()) as u16).to_be_bytes());
                f.push(if self.frag.is_some() { 44 } else { self.proto });
                f.push(self.ttl);
                f.extend(s.octets());
                f.extend(d.octets());
                if let Some((id, off, more)) = self.frag {
                    f.extend([self.proto, 0]);
                    f.extend((off | u16::from(more)).to_be_bytes());
                    f.extend(id.to_be_bytes());
                }
            }
            _ => unreachable!(),
        }
        f.extend(l4);
        f
    }
}

fn cfg() -> Config {
    Config {
        seed: Some(42),
        ..Config::default()
    }
}

fn run(cfg: &Config, pkts: &[(u64, Pkt)]) -> (Vec<FlowRecord>, crate::MeterStats) {
    let mut m = Meter::new(cfg, Vec::new());
    for (t, p) in pkts {
        m.packet(LinkType::ETHERNET, *t, &p.frame());
    }
    let done = m.finish();
    assert!(done.error.is_none());
    (done.sink, done.stats)
}

fn ports(r: &FlowRecord) -> (u16, u16) {
    (r.key.src_port, r.key.dst_port)
}

#[test]
fn uniflow_two_records_biflow_one() {
    let a = pkt("10.0.0.1", "10.0.0.2", 6, 40000, 80);
    let pkts = [(S, a.clone()), (S + 1, a.rev()), (S + 2, a.clone())];
    let (recs, st) = run(&cfg(), &pkts);
    assert_eq!(recs.len(), 2);
    assert_eq!(ports(&recs[0]), (40000, 80));
    assert_eq!(recs[0].forward.packets, 2);
    assert_eq!(recs[0].forward.bytes, 2 * (20 + 20 + 10));
    assert_eq!(recs[0].reverse.packets, 0);
    assert_eq!(ports(&recs[1]), (80, 40000));
    assert_eq!(recs[1].key, recs[0].key.reversed());
    assert_eq!(recs[1].forward.packets, 1);
    assert!(recs.iter().all(|r| r.end_reason == EndReason::ForcedEnd));
    assert_eq!(
        (st.flows, st.records, st.metered, st.forced_ended),
        (1, 2, 3, 1)
    );

    let (recs, _) = run(
        &Config {
            biflow: true,
            ..cfg()
        },
        &pkts,
    );
    assert_eq!(recs.len(), 1);
    let r = recs[0];
    assert_eq!((r.forward.packets, r.reverse.packets), (2, 1));
    assert_eq!((r.forward.first_ns, r.forward.last_ns), (S, S + 2));
    assert_eq!((r.reverse.first_ns, r.reverse.last_ns), (S + 1, S + 1));
    assert_eq!((r.forward.min_ttl, r.forward.max_ttl), (64, 64));
}

#[test]
fn initiator_is_first_sender_even_when_it_sorts_second() {
    let a = pkt("10.0.0.9", "10.0.0.1", 17, 5353, 53);
    let (recs, _) = run(
        &Config {
            biflow: true,
            ..cfg()
        },
        &[(S, a.clone()), (S + 5, a.rev())],
    );
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].key.src.to_string(), "10.0.0.9");
    assert_eq!(ports(&recs[0]), (5353, 53));
}

#[test]
fn idle_timeout_splits_and_sweeps_in_order() {
    let a = pkt("10.0.0.1", "10.0.0.2", 17, 1, 2);
    let b = pkt("10.0.0.3", "10.0.0.4", 17, 1, 2);
    let c = pkt("10.0.0.5", "10.0.0.6", 17, 1, 2);
    let pkts = [
        (S, a.clone()),
        (2 * S, b.clone()),
        (10 * S, a.clone()), // a touched again: now b is the least recently seen
        (41 * S, c.clone()), // b due at 32 s, a at 40 s: both swept, b first
        (41 * S + 1, a.clone()),
    ];
    let (recs, st) = run(&cfg(), &pkts);
    let order: Vec<(String, EndReason, u64)> = recs
        .iter()
        .map(|r| (r.key.src.to_string(), r.end_reason, r.forward.packets))
        .collect();
    assert_eq!(
        order,
        [
            ("10.0.0.3".into(), EndReason::IdleTimeout, 1),
            ("10.0.0.1".into(), EndReason::IdleTimeout, 2),
            ("10.0.0.5".into(), EndReason::ForcedEnd, 1),
            ("10.0.0.1".into(), EndReason::ForcedEnd, 1),
        ]
    );
    assert_eq!((st.idle_ended, st.forced_ended, st.flows), (2, 2, 4));
}

#[test]
fn idle_exactly_at_timeout_is_a_new_flow() {
    let a = pkt("10.0.0.1", "10.0.0.2", 17, 1, 2);
    let (recs, _) = run(&cfg(), &[(S, a.clone()), (31 * S - 1, a.clone())]);
    assert_eq!(recs.len(), 1);
    let (recs, _) = run(&cfg(), &[(S, a.clone()), (31 * S, a.clone())]);
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].end_reason, EndReason::IdleTimeout);
}

#[test]
fn active_timeout_restarts_a_busy_flow() {
    let a = pkt("10.0.0.1", "10.0.0.2", 6, 1000, 80);
    let pkts: Vec<_> = (0..=25).map(|i| (i * 10 * S, a.clone())).collect(); // 0..250 s
    let (recs, st) = run(&cfg(), &pkts);
    let reasons: Vec<_> = recs
        .iter()
        .map(|r| (r.end_reason, r.forward.packets))
        .collect();
    assert_eq!(
        reasons,
        [
            (EndReason::ActiveTimeout, 12), // 0..110 s
            (EndReason::ActiveTimeout, 12), // 120..230 s
            (EndReason::ForcedEnd, 2),      // 240, 250 s
        ]
    );
    assert_eq!(st.active_ended, 2);
}

#[test]
fn fin_and_rst_end_after_the_grace() {
    let a = pkt("10.0.0.1", "10.0.0.2", 6, 1000, 80);
    const FIN: u8 = 0x11;
    const RST: u8 = 0x04;
    let pkts = [
        (S, a.clone()),
        (2 * S, a.clone().flags(FIN)),
        (2 * S + 1000, a.rev().flags(FIN)), // the other FIN, within the grace: same flow
        (2 * S + 2000, a.clone()),          // last ACK
        (4 * S, a.clone().flags(0x02)),     // after the grace: a new flow
        (5 * S, a.clone().flags(RST)),
        (7 * S, a.clone()), // after the RST's grace: a third flow
    ];
    let (recs, st) = run(
        &Config {
            biflow: true,
            ..cfg()
        },
        &pkts,
    );
    let got: Vec<_> = recs
        .iter()
        .map(|r| {
            (
                r.end_reason,
                r.forward.packets,
                r.reverse.packets,
                r.forward.tcp_flags,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (EndReason::EndOfFlow, 3, 1, 0x11),
            (EndReason::EndOfFlow, 2, 0, 0x06),
            (EndReason::ForcedEnd, 1, 0, 0x10),
        ]
    );
    assert_eq!(st.tcp_ended, 2);
}

#[test]
fn lru_eviction_when_full() {
    let c = Config {
        max_flows: 3,
        ..cfg()
    };
    let f = |i: u16| pkt("10.0.0.1", "10.0.0.2", 17, i, 53);
    let pkts = [
        (S, f(1)),
        (S + 1, f(2)),
        (S + 2, f(3)),
        (S + 3, f(1)), // 2 is now the least recently seen
        (S + 4, f(4)), // evicts 2
        (S + 5, f(5)), // evicts 3
    ];
    let (recs, st) = run(&c, &pkts);
    let evicted: Vec<_> = recs
        .iter()
        .filter(|r| r.end_reason == EndReason::LackOfResources)
        .map(|r| r.key.src_port)
        .collect();
    assert_eq!(evicted, [2, 3]);
    assert_eq!((st.evicted, st.peak_flows, st.flows), (2, 3, 5));
}

#[test]
fn icmp_type_code_in_dst_port() {
    let echo = pkt("10.0.0.1", "10.0.0.2", 1, 0, 0x0800);
    let reply = pkt("10.0.0.2", "10.0.0.1", 1, 0, 0x0000);
    let unreach = pkt("10.0.0.9", "10.0.0.1", 1, 0, 0x0303);
    let v6 = pkt("2001:db8::1", "2001:db8::2", 58, 0, 0x8000);
    let (recs, _) = run(
        &cfg(),
        &[
            (S, echo.clone()),
            (S + 1, reply.clone()),
            (S + 2, unreach),
            (S + 3, v6),
        ],
    );
    let mut got: Vec<_> = recs
        .iter()
        .map(|r| (r.key.src.to_string(), r.key.proto, ports(r)))
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("10.0.0.1".to_string(), 1, (0, 0x0800)),
            ("10.0.0.2".to_string(), 1, (0, 0x0000)),
            ("10.0.0.9".to_string(), 1, (0, 0x0303)),
            ("2001:db8::1".to_string(), 58, (0, 0x8000)),
        ]
    );
}

#[test]
fn ipv4_fragments_are_attributed() {
    let first = pkt("10.0.0.1", "10.0.0.2", 17, 5000, 53).frag(77, 0, true);
    let later = pkt("10.0.0.1", "10.0.0.2", 17, 5000, 53).frag(77, 1480, false);
    let orphan = pkt("10.0.0.1", "10.0.0.2", 17, 5000, 53).frag(78, 1480, false);
    let stale = pkt("10.0.0.1", "10.0.0.2", 17, 5000, 53).frag(77, 2960, false);
    let (recs, st) = run(
        &Config {
            idle_timeout_ns: 3600 * S,
            active_timeout_ns: 3600 * S,
            ..cfg()
        },
        &[
            (S, first),
            (S + 1, later),
            (S + 2, orphan),
            (40 * S, stale), // after the 30 s fragment timeout
        ],
    );
    assert_eq!((st.frag_attributed, st.frag_unattributed), (1, 2));
    let mut got: Vec<_> = recs.iter().map(|r| (ports(r), r.forward.packets)).collect();
    got.sort();
    assert_eq!(got, [((0, 0), 2), ((5000, 53), 2)]);
}

#[test]
fn ipv6_fragments_and_flows() {
    let first = pkt("2001:db8::1", "2001:db8::2", 17, 5000, 53).frag(0x1234_5678, 0, true);
    let later = pkt("2001:db8::1", "2001:db8::2", 17, 5000, 53).frag(0x1234_5678, 1232, false);
    let plain = pkt("2001:db8::2", "2001:db8::1", 17, 53, 5000);
    let (recs, st) = run(
        &Config {
            biflow: true,
            ..cfg()
        },
        &[(S, first), (S + 1, later), (S + 2, plain)],
    );
    assert_eq!(st.frag_attributed, 1);
    assert_eq!(recs.len(), 1);
    let r = recs[0];
    assert!(r.key.src.is_ipv6());
    assert_eq!((r.forward.packets, r.reverse.packets), (2, 1));
    // IPv6 bytes: payload length + 40
    assert_eq!(r.reverse.bytes, 40 + 8 + 10);
}

#[test]
fn vlan_is_part_of_the_key() {
    let a = pkt("10.0.0.1", "10.0.0.2", 17, 1, 2);
    let (recs, _) = run(
        &cfg(),
        &[
            (S, a.clone().vlan(10)),
            (S + 1, a.clone().vlan(20)),
            (S + 2, a.clone().vlan(10)),
        ],
    );
    let mut got: Vec<_> = recs
        .iter()
        .map(|r| (r.key.vlan, r.forward.packets))
        .collect();
    got.sort();
    assert_eq!(got, [(10, 2), (20, 1)]);
}

#[test]
fn tos_key_splits_flows_only_when_asked() {
    let a = pkt("10.0.0.1", "10.0.0.2", 17, 1, 2);
    let mut f1 = a.frame();
    let mut f2 = a.frame();
    f1[15] = 0x10;
    f2[15] = 0x28;
    for (tos_key, want) in [(false, 1), (true, 2)] {
        let mut m = Meter::new(&Config { tos_key, ..cfg() }, Vec::new());
        m.packet(LinkType::ETHERNET, S, &f1);
        m.packet(LinkType::ETHERNET, S + 1, &f2);
        let recs = m.finish().sink;
        assert_eq!(recs.len(), want);
        assert_eq!(recs[0].key.tos, 0x10);
    }
}

#[test]
fn drops_are_counted_by_reason() {
    let arp = {
        let mut f = vec![0xff; 6];
        f.extend([0, 0, 0, 0, 0, 1, 0x08, 0x06]);
        f.extend([0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend([0; 20]);
        f
    };
    let mut truncated = pkt("10.0.0.1", "10.0.0.2", 6, 1, 2).frame();
    truncated.truncate(14 + 10); // inside the IPv4 header
    let mut m = Meter::new(&cfg(), Vec::new());
    m.packet(LinkType::ETHERNET, S, &arp);
    m.packet(LinkType::ETHERNET, S, &truncated);
    m.packet(
        LinkType::ETHERNET,
        S,
        &pkt("10.0.0.1", "10.0.0.2", 6, 1, 2).frame(),
    );
    let st = m.finish().stats;
    assert_eq!(
        (st.packets, st.non_ip, st.decode_errors, st.metered),
        (3, 1, 1, 1)
    );
}

#[test]
fn min_tcp_bytes_filters_small_tcp_records_only() {
    let t = pkt("10.0.0.1", "10.0.0.2", 6, 1, 2); // 50 bytes
    let u = pkt("10.0.0.1", "10.0.0.2", 17, 1, 2); // 38 bytes
    let (recs, st) = run(
        &Config {
            min_tcp_bytes: 100,
            ..cfg()
        },
        &[(S, t.clone()), (S + 1, u), (2 * S, t.rev())],
    );
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].key.proto, 17);
    assert_eq!(st.below_min_bytes, 2);
}

#[test]
fn memory_per_flow_is_at_most_128_bytes() {
    assert_eq!(crate::table::entry_size(), 120);
    for cap in [1_000u64, 8_192, 100_000, 1_000_000] {
        let m: Meter<Vec<FlowRecord>> = Meter::new(
            &Config {
                max_flows: cap,
                ..cfg()
            },
            Vec::new(),
        );
        let st = m.finish().stats;
        assert!(st.bytes_per_flow <= 128.0, "{cap}: {}", st.bytes_per_flow);
        assert!(st.bytes_per_flow >= 120.0);
    }
}

/// Pseudo-random traffic: many flows over many hosts, both directions, some FIN/RST.
fn mixed_traffic(n: usize) -> Vec<(u64, Pkt)> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let host = (x % 200) as u8;
        let port = 1024 + (x >> 8) as u16 % 300;
        let mut p = match (x >> 20) % 4 {
            0 => pkt(&format!("10.0.1.{host}"), "10.0.0.1", 6, port, 443),
            1 => pkt(&format!("10.0.1.{host}"), "10.0.0.1", 17, port, 53),
            2 => pkt(&format!("2001:db8::{host:x}"), "2001:db8::1", 6, port, 80),
            _ => pkt(&format!("10.0.1.{host}"), "10.0.0.2", 1, 0, 0x0800),
        };
        if (x >> 30) % 50 == 0 {
            p = p.flags(0x11);
        }
        if (x >> 40) % 2 == 0 {
            p = p.rev();
        }
        out.push((i as u64 * 7_000_000, p)); // 7 ms apart: timeouts happen
    }
    out
}

fn normalised(mut recs: Vec<FlowRecord>) -> Vec<String> {
    let mut v: Vec<String> = recs.drain(..).map(|r| format!("{r:?}")).collect();
    v.sort();
    v
}

/// Two inputs, the second starting before the first ends (`-r later -r earlier`): with
/// `Meter::new_input` before each, every shard count, inline or threaded, gives the records of
/// metering each input alone (the first one's flows end at its end, the second starts afresh).
#[test]
fn an_input_that_starts_earlier_restarts_every_shard() {
    let earlier = traffic_with_fragments(8_000);
    let later: Vec<(u64, Pkt)> = earlier
        .iter()
        .map(|(t, p)| (t + 1000 * S, p.clone().rev()))
        .collect();
    let c = Config {
        idle_timeout_ns: 2 * S,
        ..cfg()
    };
    let (mut want, a) = run(&c, &later);
    let (b_recs, b) = run(&c, &earlier);
    want.extend(b_recs);
    let want = normalised(want);
    for workers in [1, 2, 3] {
        let cw = Config {
            workers,
            ..c.clone()
        };
        let mut m = Meter::new(&cw, Vec::new());
        for input in [&later, &earlier] {
            m.new_input(input[0].0);
            for (t, p) in input {
                m.packet(LinkType::ETHERNET, *t, &p.frame());
            }
        }
        let done = m.finish();
        let got = normalised(done.sink);
        assert!(
            got == want,
            "{workers} shards: {} records, {} wanted",
            got.len(),
            want.len()
        );
        let st = done.stats;
        assert_eq!(st.flows, a.flows + b.flows);
        assert_eq!(st.packets, a.packets + b.packets);
        assert_eq!(st.frag_attributed, a.frag_attributed + b.frag_attributed);
        assert_eq!(st.records, a.records + b.records);
        assert_eq!(st.idle_ended, a.idle_ended + b.idle_ended);
        assert_eq!(st.forced_ended, a.forced_ended + b.forced_ended);
    }
}

#[test]
fn threaded_equals_inline() {
    let traffic = mixed_traffic(30_000);
    let base = Config {
        idle_timeout_ns: 5 * S,
        active_timeout_ns: 20 * S,
        ..cfg()
    };
    let (one, st1) = run(&base, &traffic);
    assert!(st1.idle_ended > 0 && st1.active_ended > 0 && st1.tcp_ended > 0);
    for workers in [2, 3, 4] {
        let (many, stn) = run(
            &Config {
                workers,
                ..base.clone()
            },
            &traffic,
        );
        assert_eq!(stn.flows, st1.flows, "{workers} workers");
        assert_eq!(stn.records, st1.records);
        let (a, b) = (normalised(many), normalised(one.clone()));
        let only_many: Vec<_> = a.iter().filter(|x| !b.contains(x)).collect();
        let only_one: Vec<_> = b.iter().filter(|x| !a.contains(x)).collect();
        assert!(
            only_many.is_empty() && only_one.is_empty(),
            "{workers} workers: {only_many:#?}\ninline: {only_one:#?}"
        );
    }
}

/// The lock-free handoff under stress: many workers, tiny timeouts, tiny tables (eviction),
/// every packet and every record accounted for.
#[test]
fn stress_pipeline_accounts_everything() {
    let traffic = mixed_traffic(60_000);
    for workers in [2, 5, 8] {
        let (recs, st) = run(
            &Config {
                workers,
                max_flows: 64,
                idle_timeout_ns: S,
                active_timeout_ns: 3 * S,
                biflow: true,
                ..cfg()
            },
            &traffic,
        );
        assert_eq!(st.metered, 60_000);
        let pkts: u64 = recs
            .iter()
            .map(|r| r.forward.packets + r.reverse.packets)
            .sum();
        assert_eq!(pkts, 60_000);
        assert_eq!(recs.len() as u64, st.flows);
        assert_eq!(
            st.flows,
            st.idle_ended + st.active_ended + st.tcp_ended + st.forced_ended + st.evicted
        );
        assert!(st.evicted > 0);
    }
}

/// Traffic with fragments too (IPv4 and IPv6, attributed and not), for the prepare tests.
fn traffic_with_fragments(n: usize) -> Vec<(u64, Pkt)> {
    let mut v = mixed_traffic(n);
    let mut t = n as u64 * 7_000_000;
    for k in 0..200u32 {
        let (a, b) = if k % 2 == 0 {
            ("10.9.0.1", "10.9.0.2")
        } else {
            ("2001:db8::9", "2001:db8::8")
        };
        let p = pkt(a, b, 17, 5000 + k as u16, 53);
        if k % 7 != 0 {
            v.push((t, p.clone().frag(k, 0, true)));
        }
        t += 1_000_000;
        v.push((t, p.frag(k, 1480, false)));
        t += 1_000_000;
    }
    v
}

/// `work(i)` for `i` in `0..n` on `threads` threads (each takes every `threads`-th item, last
/// first, so items finish out of order); the results in item order.
fn on_threads<T: Send>(n: usize, threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let mut done: Vec<Option<T>> = (0..n).map(|_| None).collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|k| {
                let work = &work;
                s.spawn(move || {
                    (0..n)
                        .filter(|i| i % threads == k)
                        .rev()
                        .map(|i| (i, work(i)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in hs {
            for (i, x) in h.join().unwrap() {
                done[i] = Some(x);
            }
        }
    });
    done.into_iter().map(Option::unwrap).collect()
}

/// `prepare` on several threads, batches finished in any order, then `packet_prepared` in packet
/// order: the same records and counters as `packet`.
#[test]
fn prepared_on_threads_equals_packet() {
    let traffic = traffic_with_fragments(20_000);
    let frames: Vec<(u64, Vec<u8>)> = traffic.iter().map(|(t, p)| (*t, p.frame())).collect();
    for c in [
        cfg(),
        Config {
            biflow: true,
            tos_key: true,
            idle_timeout_ns: 2 * S,
            ..cfg()
        },
    ] {
        let (whole_recs, whole_stats) = run(&c, &traffic);

        let mut m = Meter::new(&c, Vec::new());
        let preparer = m.preparer().clone();
        let batches: Vec<&[(u64, Vec<u8>)]> = frames.chunks(97).collect();
        let done = on_threads(batches.len(), 4, |i| -> Vec<crate::Prepared> {
            batches[i]
                .iter()
                .map(|(t, f)| preparer.prepare(LinkType::ETHERNET, *t, f))
                .collect()
        });
        for b in done {
            for p in b {
                m.packet_prepared(&p);
            }
        }
        let split = m.finish();
        assert!(whole_stats.frag_attributed > 100 && whole_stats.frag_unattributed > 10);
        assert_eq!(split.stats, whole_stats);
        assert_eq!(split.sink, whole_recs);
    }
}

/// Ranges prepared and routed on several threads (`Meter::router`), fed in order
/// (`Meter::feed`), with 1 to 3 workers: the same records (as sets) and counters as `packet`
/// on one worker, fragments included (they are routed to their flow's shard).
#[test]
fn routed_ranges_equal_packet() {
    let traffic = traffic_with_fragments(20_000);
    let frames: Vec<(u64, Vec<u8>)> = traffic.iter().map(|(t, p)| (*t, p.frame())).collect();
    let c = Config {
        idle_timeout_ns: 2 * S,
        ..cfg()
    };
    let (whole_recs, whole_stats) = run(&c, &traffic);
    assert!(whole_stats.frag_attributed > 100 && whole_stats.frag_unattributed > 10);
    for workers in [1, 2, 3] {
        let mut m = Meter::new(
            &Config {
                workers,
                ..c.clone()
            },
            Vec::new(),
        );
        let ranges: Vec<&[(u64, Vec<u8>)]> = frames.chunks(1009).collect();
        let (preparer, template) = (m.preparer().clone(), m.router());
        let done = on_threads(ranges.len(), 3, |i| {
            let mut r = template.empty_like();
            for (t, f) in ranges[i] {
                r.push(preparer.prepare(LinkType::ETHERNET, *t, f));
            }
            r.into_routed()
        });
        for r in done {
            m.feed(r);
        }
        let split = m.finish();
        let mut st = split.stats.clone();
        // per shard: the sum of the shards' peaks, and their capacities
        st.peak_flows = whole_stats.peak_flows;
        st.capacity = whole_stats.capacity;
        st.bytes_per_flow = whole_stats.bytes_per_flow;
        st.workers = 1;
        assert_eq!(st, whole_stats, "{workers} workers");
        assert_eq!(
            normalised(split.sink),
            normalised(whole_recs.clone()),
            "{workers} workers"
        );
    }
}

/// The shards of a file read on every core (`FileShards`, what `Plan::run_lanes` runs as its
/// lanes): ranges prepared and routed on several threads, then each shard's batches run in
/// range order on a thread of their own that owns the shard (`&mut`, no lock), all shards at
/// once: the same counters and records as `packet` on one worker, in the same order with one
/// shard.
#[test]
fn file_shards_equal_packet() {
    let traffic = traffic_with_fragments(20_000);
    let frames: Vec<(u64, Vec<u8>)> = traffic.iter().map(|(t, p)| (*t, p.frame())).collect();
    let c = Config {
        idle_timeout_ns: 2 * S,
        ..cfg()
    };
    let (whole_recs, whole_stats) = run(&c, &traffic);
    for workers in [1, 2, 3] {
        let lanes = Config {
            workers,
            ..c.clone()
        };
        let (file, mut shards) = crate::meter::FileShards::new(&lanes, Vec::new(), 1009 * 64);
        assert_eq!(shards.len(), workers);
        let ranges: Vec<&[(u64, Vec<u8>)]> = frames.chunks(1009).collect();
        let done = on_threads(ranges.len(), 3, |i| {
            let mut r = file.new_range();
            for (t, f) in ranges[i] {
                file.push(&mut r, LinkType::ETHERNET, *t, f);
            }
            crate::meter::FileShards::<Vec<FlowRecord>>::split(r)
        });
        let mut per_shard: Vec<Vec<Vec<crate::Prepared>>> = vec![Vec::new(); workers];
        for batches in done {
            assert_eq!(batches.len(), workers);
            for (s, b) in batches.into_iter().enumerate() {
                per_shard[s].push(b);
            }
        }
        std::thread::scope(|scope| {
            for (shard, batches) in shards.iter_mut().zip(per_shard) {
                let file = &file;
                scope.spawn(move || batches.into_iter().for_each(|b| file.run(shard, b)));
            }
        });
        let split = file.finish(shards);
        let mut st = split.stats.clone();
        st.peak_flows = whole_stats.peak_flows;
        st.capacity = whole_stats.capacity;
        st.bytes_per_flow = whole_stats.bytes_per_flow;
        st.workers = 1;
        assert_eq!(st, whole_stats, "{workers} workers");
        if workers == 1 {
            assert!(split.sink == whole_recs, "one shard: the sequential order");
        }
        assert_eq!(
            normalised(split.sink),
            normalised(whole_recs.clone()),
            "{workers} workers"
        );
    }
}

#[test]
fn prepared_is_64_bytes_and_send() {
    fn send<T: Send + Sync>() {}
    fn copy<T: Copy>() {}
    send::<crate::Prepared>();
    copy::<crate::Prepared>();
    send::<crate::Preparer>();
    assert_eq!(std::mem::size_of::<crate::Prepared>(), 64);
}

mod fast_path {
    use proptest::prelude::*;
    use weir_packet::LinkType;

    use crate::{KeyHasher, Preparer};

    fn preparers() -> [Preparer; 2] {
        [
            Preparer::new(KeyHasher::with_seed(7), false),
            Preparer::new(KeyHasher::with_seed(7), true),
        ]
    }

    fn same(link: LinkType, frame: &[u8]) {
        for p in preparers() {
            let fast = p.prepare(link, 123, frame);
            let slow = p.prepare_slow(link, 123, frame);
            assert_eq!(fast, slow, "link {link:?} frame {frame:02x?}");
        }
    }

    /// Builds a frame from the shape chosen by `s` and the bytes `b` (used as field values).
    fn build(s: &[u8], b: &[u8]) -> (LinkType, Vec<u8>) {
        let mut f = Vec::new();
        let pick = |i: usize| s.get(i).copied().unwrap_or(0);
        let byte = |i: usize| b.get(i % b.len().max(1)).copied().unwrap_or(0);
        let link = match pick(0) % 4 {
            0 | 1 => LinkType::ETHERNET,
            2 => LinkType::RAW,
            _ => LinkType::IPV6,
        };
        let v6 = link == LinkType::IPV6 || pick(1) % 2 == 1;
        if link == LinkType::ETHERNET {
            f.extend((0..12).map(byte));
            for k in 0..usize::from(pick(2) % 4) {
                let tpid: u16 = [0x8100, 0x88a8, 0x9100, 0x9200][usize::from(pick(3 + k)) % 4];
                f.extend(tpid.to_be_bytes());
                f.extend([byte(20 + k), byte(30)]);
            }
            f.extend(if v6 { [0x86, 0xdd] } else { [0x08, 0x00] });
        }
        let protos = [6u8, 17, 1, 58, 132, 47, 4, 41, 50, 0, 89];
        let mut proto = protos[usize::from(pick(7)) % protos.len()];
        let mut l4 = Vec::new();
        let mut exts = Vec::new();
        if v6 {
            // extension headers
            for k in 0..usize::from(pick(8) % 4) {
                let kind = [0u8, 60, 43, 44, 51][usize::from(pick(9 + k)) % 5];
                let mut h = vec![proto, if kind == 44 { 0 } else { pick(12) % 2 }];
                let len = if kind == 44 {
                    8
                } else if kind == 51 {
                    (usize::from(h[1]) + 2) * 4
                } else {
                    (usize::from(h[1]) + 1) * 8
                };
                while h.len() < len {
                    h.push(byte(40 + h.len()));
                }
                if kind == 44 {
                    h[2] = [0, 0, 5, 0][usize::from(pick(13)) % 4];
                    h[3] = [0, 1, 0, 0][usize::from(pick(13)) % 4];
                }
                let mut e = h;
                e.extend(exts);
                exts = e;
                proto = kind;
            }
        }
        let l4_len = match protos[usize::from(pick(7)) % protos.len()] {
            6 => 20 + 4 * usize::from(pick(14) % 3),
            17 => 8,
            132 => 12,
            1 | 58 => 8,
            _ => 4,
        } + usize::from(pick(15) % 16);
        l4.extend((0..l4_len).map(|i| byte(60 + i)));
        let t = protos[usize::from(pick(7)) % protos.len()];
        if t == 6 {
            l4[12] = (((l4_len.min(60) / 4) as u8) << 4) | (byte(3) & 1);
        }
        if t == 17 {
            let n = if pick(16) % 4 == 0 { 0 } else { l4_len as u16 };
            l4[4..6].copy_from_slice(&n.to_be_bytes());
            if pick(17) % 5 == 0 {
                l4[2..4].copy_from_slice(&4789u16.to_be_bytes());
            }
        }
        if v6 {
            let pl = (exts.len() + l4.len()) as u16;
            f.extend([0x60 | (byte(1) & 0xf), byte(2), byte(3), byte(4)]);
            f.extend(pl.to_be_bytes());
            f.extend([proto, byte(5)]);
            f.extend((0..32).map(|i| byte(70 + i % (1 + usize::from(pick(18) % 40)))));
            f.extend(exts);
        } else {
            let ihl = 5 + pick(19) % 3;
            let total = (usize::from(ihl) * 4 + l4.len()) as u16;
            let fl: u16 = [0, 0x4000, 0x2000, 0x00b9, 0x20b9][usize::from(pick(20)) % 5];
            f.extend([0x40 | ihl, byte(6)]);
            f.extend(total.to_be_bytes());
            f.extend([byte(7), byte(8)]);
            f.extend(fl.to_be_bytes());
            f.extend([byte(9), proto, 0, 0]);
            f.extend((0..8).map(|i| byte(80 + i % (1 + usize::from(pick(21) % 8)))));
            f.extend((0..(usize::from(ihl) - 5) * 4).map(|i| byte(90 + i)));
        }
        f.extend(l4);
        if pick(22) % 3 == 0 {
            f.extend([0u8; 6]); // Ethernet padding
        }
        (link, f)
    }

    /// The generated shapes do exercise the fast path (and the fallback).
    #[test]
    fn generator_reaches_the_fast_path() {
        let mut x = 1u64;
        let (mut fast, n) = (0, 5000);
        for _ in 0..n {
            let mut shape = [0u8; 24];
            for v in &mut shape {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *v = x as u8;
            }
            let (link, f) = build(&shape, &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
            same(link, &f);
            fast += usize::from(crate::prepare::fast_accepts(link, &f));
        }
        assert!(fast > n / 4 && fast < n * 9 / 10, "{fast} of {n}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Well-formed frames of every shape the fast path knows (and some it refuses), then
        /// cut short and with bytes flipped.
        #[test]
        fn fast_path_equals_decoder(
            shape in proptest::collection::vec(any::<u8>(), 24),
            bytes in proptest::collection::vec(any::<u8>(), 1..64),
            cut in any::<u16>(),
            flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..3),
        ) {
            let (link, mut f) = build(&shape, &bytes);
            same(link, &f);
            for (at, x) in &flips {
                if !f.is_empty() {
                    let i = usize::from(*at) % f.len();
                    f[i] ^= x;
                }
            }
            same(link, &f);
            let n = usize::from(cut) % (f.len() + 1);
            same(link, &f[..n]);
        }

        /// Arbitrary bytes on every link type the fast path reads.
        #[test]
        fn fast_path_equals_decoder_on_noise(
            link in prop_oneof![Just(1u32), Just(101), Just(12), Just(14), Just(228), Just(229), Just(113)],
            f in proptest::collection::vec(any::<u8>(), 0..96),
        ) {
            same(LinkType(link), &f);
        }
    }
}

/// Share of a trace's packets the fast path handles: `WEIR_TRACE=FILE cargo test --release -p
/// weir-flows fast_share -- --ignored --nocapture`.
#[test]
#[ignore]
fn fast_share() {
    let path = std::env::var("WEIR_TRACE").unwrap();
    let mut r = weir_pcap::FileReader::open(&path).unwrap();
    let (mut n, mut fast) = (0u64, 0u64);
    let mut shown = 0;
    while let Some(p) = r.next_packet().unwrap() {
        n += 1;
        if crate::prepare::fast_accepts(p.link, p.data) {
            fast += 1;
        } else if shown < 5 && n % 1000 == 0 {
            shown += 1;
            eprintln!("{:?} {:02x?}", p.link, &p.data[..p.data.len().min(80)]);
        }
    }
    eprintln!("{fast} of {n} on the fast path");
}

// ---- tags (the rules' `tag` action) ----

fn tag(s: &str) -> crate::Tag {
    crate::Tag::text(s).unwrap()
}

fn run_tagged(
    cfg: &Config,
    pkts: &[(u64, Pkt, Option<&str>)],
) -> (Vec<FlowRecord>, crate::MeterStats) {
    let mut m = Meter::new(cfg, Vec::new());
    for (t, p, g) in pkts {
        let g = g.map(tag);
        m.packet_tagged(LinkType::ETHERNET, *t, &p.frame(), g.as_ref());
    }
    let done = m.finish();
    assert!(done.error.is_none());
    let mut recs = done.sink;
    recs.sort_by_key(|r| (r.forward.first_ns, r.key.src_port));
    (recs, done.stats)
}

/// A flow keeps the last tag its packets carried (either direction; untagged packets do not
/// clear it), both uniflow records carry it, an untagged flow has none, and a slot reused by a
/// new flow starts untagged; the same with one shard and with four (tag marks through the
/// router).
#[test]
fn a_flow_keeps_the_last_tag_seen() {
    let a = pkt("10.0.0.1", "10.0.0.2", 6, 40000, 80);
    let b = pkt("10.0.0.3", "10.0.0.4", 17, 5000, 53);
    let c = pkt("10.0.0.5", "10.0.0.6", 17, 6000, 53);
    let pkts = [
        (S, a.clone(), None),
        (S + 1, a.rev(), Some("lab")),
        (S + 2, a.clone(), None),
        (S + 3, b.clone(), None),
        (S + 4, c.clone(), Some("x")),
        (S + 5, c.clone(), Some("alert")),
        (S + 6, c.clone(), None),
        // after the idle timeout: a new flow of c, in the freed slot, untagged
        (100 * S, c.clone(), None),
    ];
    for workers in [1, 4] {
        let cfg = Config { workers, ..cfg() };
        let (recs, st) = run_tagged(&cfg, &pkts);
        let got: Vec<(u16, u64, Option<String>)> = recs
            .iter()
            .map(|r| {
                (
                    r.key.src_port,
                    r.forward.packets,
                    r.tag.map(|t| t.to_string()),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (40000, 2, Some("lab".into())),
                (80, 1, Some("lab".into())),
                (5000, 1, None),
                (6000, 3, Some("alert".into())),
                (6000, 1, None),
            ],
            "{workers} workers"
        );
        assert_eq!(
            (st.tagged_packets, st.tagged_records, st.tags_lost),
            (3, 3, 0)
        );
        assert_eq!(st.metered, 8);
    }
}

/// Tags do not change anything else: the records of mixed traffic with every 7th packet tagged
/// equal the untagged run's once the tags are removed, with 1 and 3 shards, and the tags equal
/// a hand-made model (the last tag of each record's packets).
#[test]
fn tags_change_nothing_else() {
    let traffic = mixed_traffic(20_000);
    let tagged: Vec<(u64, Pkt, Option<&str>)> = traffic
        .iter()
        .enumerate()
        .map(|(i, (t, p))| {
            let g = match i % 7 {
                0 => Some("seven"),
                3 => Some("three"),
                _ => None,
            };
            (*t, p.clone(), g)
        })
        .collect();
    for workers in [1, 3] {
        let cfg = Config {
            workers,
            seed: Some(7),
            ..Config::default()
        };
        let (mut plain, st0) = run(&cfg, &traffic);
        plain.sort_by_key(|r| (r.forward.first_ns, r.key.src_port, r.key.dst_port));
        let (mut with, st1) = run_tagged(&cfg, &tagged);
        with.sort_by_key(|r| (r.forward.first_ns, r.key.src_port, r.key.dst_port));
        assert!(with.iter().any(|r| r.tag.is_some()));
        let stripped: Vec<FlowRecord> = with
            .iter()
            .map(|r| FlowRecord { tag: None, ..*r })
            .collect();
        assert_eq!(stripped, plain, "{workers} workers");
        assert_eq!((st0.metered, st0.records), (st1.metered, st1.records));
        assert!(st1.tagged_packets > 0 && st1.tagged_records > 0);
    }
}

/// Runs without tags keep the 120-byte entry and their bytes per flow; a run with tags adds
/// 2 bytes per flow, still within 128.
#[test]
fn the_tag_side_table_costs_two_bytes_per_flow_and_only_with_tags() {
    let cfg = Config {
        max_flows: 100_000,
        ..cfg()
    };
    let a = pkt("10.0.0.1", "10.0.0.2", 6, 40000, 80);
    let (_, plain) = run_tagged(&cfg, &[(S, a.clone(), None)]);
    let (_, tagged) = run_tagged(&cfg, &[(S, a, Some("lab"))]);
    assert!((tagged.bytes_per_flow - plain.bytes_per_flow - 2.0).abs() < 1e-9);
    assert!(tagged.bytes_per_flow <= 128.0, "{}", tagged.bytes_per_flow);
}

/// A tag mark carries every kind of tag through the key words unchanged.
#[test]
fn tag_marks_carry_the_tag() {
    let p = crate::Prepared::default();
    for t in [
        crate::Tag::Num(0),
        crate::Tag::Num(u32::MAX),
        tag(""),
        tag("a"),
        tag("fifteen bytes!!"),
    ] {
        let m = crate::Prepared::tag_mark(&t, &p);
        assert!(!m.is_metered());
        assert_eq!(m.mark_tag(), t);
    }
}

/// A buffer record's comment gives its tag only when it is a rules tag.
#[test]
fn comment_tags() {
    assert_eq!(crate::comment_tag(b"weir-tag=alert"), Some(tag("alert")));
    assert_eq!(crate::comment_tag(b"weir-tag=42"), Some(tag("42")));
    assert_eq!(crate::comment_tag(b"something else"), None);
    assert_eq!(crate::comment_tag(b"weir-tag=this is far too long"), None);
}

/// `Config::check`: 16 777 214 flows fit one shard (the index's most), 16 777 215 do not;
/// 256 shards take 256 × 16 777 214 and refuse one more (rounded up: 16 777 215 per shard);
/// the message is `weir flows`' usage error.
#[test]
fn config_check_flows_per_worker() {
    let c = |max_flows, workers| Config {
        max_flows,
        workers,
        ..Config::default()
    };
    assert_eq!(crate::MAX_FLOWS_PER_WORKER, 16_777_214);
    assert!(c(16_777_214, 1).check().is_ok());
    assert!(Config::default().check().is_ok());
    assert!(c(256 * 16_777_214, 256).check().is_ok());
    let e = c(16_777_215, 1).check().unwrap_err();
    assert_eq!(e.per_worker, 16_777_215);
    let e = c(256 * 16_777_214 + 1, 256).check().unwrap_err();
    assert_eq!(e.per_worker, 16_777_215);
    assert_eq!(
        c(1_000_000_000, 2).check().unwrap_err().to_string(),
        "--max-flows 1000000000 over 2 worker(s) is 500000000 flows per worker; the most is \
         16777214 per worker"
    );
    assert!(c(u64::MAX, 0).check().is_err());
}
