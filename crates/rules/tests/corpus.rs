//! The engine on the real captures of the shared corpus: never a panic and counters that
//! reconcile on every packet of every file; the oracle's verdicts and counters on rule sets
//! built from each file's own addresses and ports; and, for rule sets BPF can express, the same
//! packets kept as libpcap's compiled program run by weir-filter.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::compare;
use weir_decode::{decode, Decoded, Layer, LinkType};
use weir_pcap::FileReader;
use weir_rules::{fields_from_frame, Engine, RuleSet};

/// Packets as (captured bytes, length on the wire).
type Packets = Vec<(Vec<u8>, u32)>;

/// Up to `max` packets of one link type (the first packet's) from a file.
fn read(path: &Path, max: usize) -> Option<(LinkType, Packets)> {
    let mut r = FileReader::open(path).ok()?;
    let mut link = None;
    let mut out = Vec::new();
    while out.len() < max {
        let p = match r.next_packet() {
            Ok(Some(p)) => p,
            _ => break,
        };
        let l = *link.get_or_insert(p.link);
        if p.link == l {
            out.push((p.data.to_vec(), p.meta.orig_len));
        }
    }
    Some((link?, out))
}

const RICH: &str = r#"
set scan-limit 2k
prio -5 bytes l2+12=8100 -> tag vlan continue
exact tcp 192.168.1.1:80 192.168.1.2:1025 -> drop
src 10.0.0.0/8 proto udp dport 53 -> tag dns continue
host 192.168.0.0/16 flags S/SA -> pass tag syn
payload "GET " payload "POST " payload "HTTP/1." -> tag http continue
payload hex:0d0a0d0a -> slice l4 continue
bytes pl+0=1603/ffff -> tag tls
bytes !l3+9=06 bytes !l3+9=11 -> sample 3
proto tcp port 0-1023 -> cutoff 4k cutoff-packets 20
ip6 -> slice l3 continue
len 1000-65535 -> slice 128
any -> learn pass tag seen
"#;

#[test]
fn every_corpus_packet_is_decided_and_counters_reconcile() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let set = RuleSet::parse(RICH).unwrap();
    let (mut files_read, mut packets) = (0, 0u64);
    for path in &files {
        let Some((link, pkts)) = read(path, usize::MAX) else {
            continue;
        };
        files_read += 1;
        // BPF-free rules for every link type
        let engine = Engine::new(set.clone(), link, 262_144).unwrap();
        let mut ev = engine.evaluator();
        let mut scratch = Decoded::new();
        for (data, wire) in &pkts {
            let f = fields_from_frame(&mut scratch, link, data, *wire);
            let d = ev.eval(&f, data);
            assert!(d.keep as usize <= data.len(), "{}", path.display());
            packets += 1;
        }
        let s = engine.stats();
        assert_eq!(s.totals.packets_in, pkts.len() as u64);
        assert!(s.totals.reconciles(), "{}: {:?}", path.display(), s.totals);
        for w in &s.wild {
            assert!(w.stats.reconciles(), "{}: rule {}", path.display(), w.id);
        }
    }
    eprintln!("{files_read} files, {packets} packets decided");
    assert!(files_read > 0);
}

/// Rules from the file's own traffic: its busiest addresses and ports, as exact and wildcard
/// rules, plus patterns and byte matches.
fn rules_for(pkts: &[(Vec<u8>, u32)], link: LinkType) -> String {
    let mut scratch = Decoded::new();
    let mut hosts: HashMap<String, u32> = HashMap::new();
    let mut ports: HashMap<u16, u32> = HashMap::new();
    let mut convs: Vec<String> = Vec::new();
    for (data, wire) in pkts.iter().take(2000) {
        let f = fields_from_frame(&mut scratch, link, data, *wire);
        if f.family == 0 {
            continue;
        }
        let d = decode(link, data);
        let ip = d.ip().unwrap();
        *hosts.entry(ip.src.to_string()).or_default() += 1;
        *ports.entry(f.dport).or_default() += 1;
        if matches!(f.proto, 6 | 17) && convs.len() < 20 {
            let ep = |a: std::net::IpAddr, p: u16| match a {
                std::net::IpAddr::V6(a) => format!("[{a}]:{p}"),
                a => format!("{a}:{p}"),
            };
            let vlan = if f.vlan == weir_rules::NO_VLAN {
                String::new()
            } else {
                format!(" vlan {}", f.vlan)
            };
            let proto = if f.proto == 6 { "tcp" } else { "udp" };
            let line = format!(
                "exact {proto} {} {}{vlan}",
                ep(ip.src, f.sport),
                ep(ip.dst, f.dport)
            );
            let rev = format!(
                "exact {proto} {} {}{vlan}",
                ep(ip.dst, f.dport),
                ep(ip.src, f.sport)
            );
            if !convs
                .iter()
                .any(|c| c.starts_with(&line) || c.starts_with(&rev))
            {
                convs.push(line);
            }
        }
    }
    let mut hosts: Vec<_> = hosts.into_iter().collect();
    hosts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut ports: Vec<_> = ports.into_iter().collect();
    ports.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let mut text = String::from("set scan-limit 4k\n");
    let actions = [
        "drop",
        "slice l4",
        "sample 2",
        "pass tag x",
        "cutoff 3000",
        "learn drop",
    ];
    for (i, c) in convs.iter().enumerate().step_by(3) {
        text += &format!("{c} -> {}\n", actions[i % actions.len()]);
    }
    for (i, (h, _)) in hosts.iter().take(4).enumerate() {
        let cidr = if h.contains(':') {
            format!("{h}/64")
        } else {
            format!("{h}/24")
        };
        text += &format!("prio {} host {cidr} -> tag h{i} continue\n", i % 2);
    }
    for (i, (p, _)) in ports.iter().take(4).enumerate() {
        text += &format!("port {p} -> {}\n", actions[(i + 1) % actions.len()]);
    }
    text += "payload \"HTTP\" payload \"GET \" -> tag http continue\n";
    text += "bytes l3+9=11 -> slice 100\n";
    text += "flags S/SA -> pass\n";
    text += "len 0-80 -> sample 3\n";
    text
}

#[test]
fn engine_equals_oracle_on_corpus_files() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let mut compared = 0usize;
    for path in &files {
        let Some((link, pkts)) = read(path, 3000) else {
            continue;
        };
        if pkts.is_empty() {
            continue;
        }
        let text = rules_for(&pkts, link);
        let set = RuleSet::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let data: Vec<Vec<u8>> = pkts.iter().map(|p| p.0.clone()).collect();
        compare(&set, link, &data, &path.display().to_string());
        compared += data.len();
    }
    eprintln!("{compared} corpus packets compared with the oracle");
}

/// Ethernet packets with one plain IPv4/IPv6 header right after the Ethernet header (no VLAN,
/// no tunnel, no IPv6 extension header, nothing damaged): where libpcap's offsets and the
/// decoder's layers mean the same thing.
fn plain(data: &[u8]) -> bool {
    let d = decode(LinkType::ETHERNET, data);
    let l = d.layers();
    d.error().is_none()
        && l.len() >= 2
        && matches!(l[0], Layer::Ethernet(_))
        && matches!(l[1], Layer::Ipv4(_) | Layer::Ipv6(_))
        && l[2..].iter().all(|x| {
            !matches!(
                x,
                Layer::Ipv4(_) | Layer::Ipv6(_) | Layer::Ipv6Ext { .. } | Layer::Vlan { .. }
            )
        })
}

#[test]
fn bpf_expressible_rule_sets_keep_what_libpcap_keeps() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let mut pkts: Packets = Vec::new();
    for path in &files {
        if let Some((link, p)) = read(path, 20_000) {
            if link == LinkType::ETHERNET {
                pkts.extend(p.into_iter().filter(|(d, _)| plain(d)));
            }
        }
    }
    if pkts.is_empty() {
        weir_testkit::missing("no plain Ethernet packets in the corpus");
        return;
    }
    // the busiest source addresses and a busy conversation, to make the sets bite
    let mut scratch = Decoded::new();
    let mut hosts: HashMap<std::net::IpAddr, u32> = HashMap::new();
    let mut conv = None;
    for (d, w) in &pkts {
        let f = fields_from_frame(&mut scratch, LinkType::ETHERNET, d, *w);
        let ip = decode(LinkType::ETHERNET, d).ip().unwrap();
        *hosts.entry(ip.src).or_default() += 1;
        if conv.is_none() && f.proto == 6 && f.family == 4 {
            conv = Some((ip.src, f.sport, ip.dst, f.dport));
        }
    }
    let mut hosts: Vec<_> = hosts.into_iter().collect();
    hosts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top: Vec<_> = hosts.iter().take(5).map(|h| h.0).collect();
    let (ca, cp, cb, cq) = conv.unwrap();

    let mut cases: Vec<(String, String)> = vec![
        ("proto tcp port 80 -> pass".into(), "tcp port 80".into()),
        (
            "proto udp port 53 -> pass\nproto tcp port 443 -> pass".into(),
            "udp port 53 or tcp port 443".into(),
        ),
        (
            "proto udp dport 1024-65535 -> pass".into(),
            "udp dst portrange 1024-65535".into(),
        ),
        (
            "src 192.168.0.0/16 proto udp -> pass".into(),
            "src net 192.168.0.0/16 and udp".into(),
        ),
        (
            "ip4 proto tcp flags S/SA -> pass".into(),
            "tcp[tcpflags] & (tcp-syn|tcp-ack) == tcp-syn".into(),
        ),
        ("len 0-100 -> pass".into(), "len <= 100".into()),
        (
            "ip4 bytes l3+9=11 -> pass".into(),
            "ip and ip[9] == 17".into(),
        ),
        ("ip6 -> pass".into(), "ip6".into()),
        (
            "proto tcp sport 1024-65535 dport 0-1023 -> pass".into(),
            "tcp src portrange 1024-65535 and tcp dst portrange 0-1023".into(),
        ),
        (
            "bytes l4+13=02/02 proto tcp -> pass".into(),
            "(tcp and ip and tcp[13] & 2 != 0) or (ip6 and tcp and ip6[40+13] & 2 != 0)".into(),
        ),
        (
            "proto tcp port 80 -> drop\nany -> pass".into(),
            "not (tcp port 80)".into(),
        ),
    ];
    cases.push((
        top.iter().map(|h| format!("host {h} -> pass\n")).collect(),
        top.iter()
            .map(|h| format!("host {h}"))
            .collect::<Vec<_>>()
            .join(" or "),
    ));
    cases.push((
        format!("exact tcp {ca}:{cp} {cb}:{cq} -> pass"),
        format!(
            "tcp and ((src host {ca} and src port {cp} and dst host {cb} and dst port {cq}) or (src host {cb} and src port {cq} and dst host {ca} and dst port {cp}))"
        ),
    ));
    cases.push((
        "bpf \"tcp port 80 or udp\" -> pass".into(),
        "tcp port 80 or udp".into(),
    ));
    for (rules, expr) in &cases {
        let text = format!("default drop\n{rules}\n");
        let set = RuleSet::parse(&text).unwrap();
        let engine = Engine::new(set, LinkType::ETHERNET, 262_144).unwrap();
        let mut ev = engine.evaluator();
        let filter = weir_filter::Filter::compile(expr, LinkType::ETHERNET, 262_144).unwrap();
        let (mut kept, mut differ) = (0, Vec::new());
        for (i, (d, w)) in pkts.iter().enumerate() {
            let f = fields_from_frame(&mut scratch, LinkType::ETHERNET, d, *w);
            let ours = ev.eval(&f, d).kept();
            let theirs = filter.matches(d, *w);
            kept += usize::from(theirs);
            if ours != theirs {
                differ.push(i);
            }
        }
        assert!(
            differ.is_empty(),
            "`{rules}` vs `{expr}`: {} of {} packets differ (first {:?}, {:?})",
            differ.len(),
            pkts.len(),
            differ.first(),
            differ.first().map(|&i| &pkts[i].0)
        );
        eprintln!("`{expr}`: {kept} of {} packets kept by both", pkts.len());
    }
}

/// `fields_from_frame` takes the fast header parser when it covers a frame: its fields equal
/// the full decoder's on every packet of every corpus file, whole and cut at every length up to
/// 128 bytes (the truncations exercise each bound check, and the fallback).
#[test]
fn fast_fields_equal_the_decoders_on_every_corpus_packet() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let (mut packets, mut frames) = (0u64, 0u64);
    for path in &files {
        let Ok(mut r) = FileReader::open(path) else {
            continue;
        };
        while let Ok(Some(p)) = r.next_packet() {
            let mut scratch = Decoded::new();
            packets += 1;
            let data = p.data;
            let cuts = (0..data.len().min(128)).chain([data.len()]);
            for n in cuts {
                let d = &data[..n];
                let wire = p.meta.orig_len;
                let fast = fields_from_frame(&mut scratch, p.link, d, wire);
                let full = weir_rules::fields_from_decoded(&decode(p.link, d), d, wire);
                assert_eq!(
                    fast,
                    full,
                    "{}: packet {packets} cut to {n} bytes",
                    path.display()
                );
                frames += 1;
            }
        }
    }
    assert!(packets > 1000, "{packets} corpus packets");
    eprintln!("{packets} packets, {frames} frames compared");
}
