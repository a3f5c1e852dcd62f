//! Peer validation against Wireshark's dissector: weir writes v5, v9 and IPFIX datagrams to a
//! file, the test wraps each in UDP/IPv4/Ethernet in a classic pcap, and `tshark` (decoding UDP
//! port 2055 as cflow) must decode every frame with no malformed packet, no expert warning or
//! error, no unknown field and no data set without its template, and the decoded values must be
//! the records sent. Biflow IPFIX: the RFC 5103 reverse (PEN 29305) fields must be decoded too.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::*;
use weir_export::{NetflowFormat, Target};
use weir_flows::FlowRecord;

struct Capture {
    _dir: TempDir,
    pcap: PathBuf,
    datagrams: usize,
    recs: Vec<FlowRecord>,
}

/// Writes `format` datagrams for `records(extra)` to a pcap.
fn capture(format: NetflowFormat, biflow: bool, nanos: bool, extra: u32, tag: &str) -> Capture {
    let dir = TempDir::new(tag);
    let raw = dir.0.join("raw");
    let recs = records(extra);
    let spec = netflow(Target::File(raw.clone()), format, biflow, nanos);
    let stats = export_all(&spec, &recs);
    let dgs = read_datagrams(&raw, format);
    assert_eq!(dgs.len() as u64, stats.datagrams);
    let pcap = dir.0.join("x.pcap");
    std::fs::write(&pcap, pcap_of(&dgs, 2055)).unwrap();
    Capture {
        _dir: dir,
        pcap,
        datagrams: dgs.len(),
        recs,
    }
}

fn sum(pcap: &Path, field: &str) -> u64 {
    values(pcap, field)
        .iter()
        .map(|v| v.parse::<u64>().unwrap())
        .sum()
}

fn multiset<T: Ord>(it: impl IntoIterator<Item = T>) -> BTreeMap<T, usize> {
    let mut m = BTreeMap::new();
    for v in it {
        *m.entry(v).or_insert(0) += 1;
    }
    m
}

/// tshark's absolute time text for ns since the epoch (all test times fall on 2026-11-21).
fn tshark_time(ns: u64) -> String {
    let sod = ns / 1_000_000_000 % 86_400;
    format!(
        "Nov 21, 2026 {:02}:{:02}:{:02}.{:09} UTC",
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        ns % 1_000_000_000
    )
}

/// The checks every format must pass; returns the `-V` text for format-specific checks.
fn check(c: &Capture, v5: bool) -> String {
    // Every frame is NetFlow / IPFIX.
    let frames = tshark(&c.pcap, &["-Y", "cflow"]).lines().count();
    assert_eq!(frames, c.datagrams);
    // No malformed frame, no expert info of any severity.
    assert_eq!(tshark(&c.pcap, &["-Y", "_ws.malformed || _ws.expert"]), "");
    let expert = tshark(&c.pcap, &["-q", "-z", "expert"]);
    assert!(
        !expert.contains("Errors") && !expert.contains("Warns"),
        "{expert}"
    );
    let text = tshark(&c.pcap, &["-V"]);
    for bad in [
        "Malformed",
        "Unknown",
        "unknown",
        "no template",
        "Data (",
        "Padding: 01",
    ] {
        assert!(!text.contains(bad), "tshark -V shows {bad:?}");
    }
    // Counters and keys.
    let want = expected_uniflows(&c.recs, v5);
    let packets: u64 = want.values().map(|v| v.0).sum();
    let bytes: u64 = want.values().map(|v| v.1).sum();
    assert_eq!(sum(&c.pcap, "cflow.packets"), packets);
    assert_eq!(sum(&c.pcap, "cflow.octets"), bytes);
    let protos = values(&c.pcap, "cflow.protocol");
    let srcports = values(&c.pcap, "cflow.srcport");
    let dstports = values(&c.pcap, "cflow.dstport");
    let mut addrs = values(&c.pcap, "cflow.srcaddr");
    addrs.extend(values(&c.pcap, "cflow.srcaddrv6"));
    // One decoded record per key (v5 splits repeat a key; biflow records carry two keys).
    let keys = |f: fn(&Uniflow) -> String| multiset(want.keys().map(f));
    if !v5 && !text.contains("[Reverse]") {
        assert_eq!(multiset(protos), keys(|k| k.proto.to_string()));
        assert_eq!(multiset(srcports), keys(|k| k.sp.to_string()));
        assert_eq!(multiset(dstports), keys(|k| k.dp.to_string()));
        assert_eq!(multiset(addrs), keys(|k| k.src.to_string()));
    } else {
        let set = |v: Vec<String>| v.into_iter().collect::<std::collections::BTreeSet<_>>();
        let wset = |f: fn(&Uniflow) -> String| want.keys().map(f).collect();
        assert!(set(addrs).is_subset(&wset(|k| k.src.to_string())));
        assert!(set(dstports).is_subset(&wset(|k| k.dp.to_string())));
    }
    text
}

#[test]
fn v5_decodes_cleanly() {
    if !have("tshark") {
        return;
    }
    let c = capture(NetflowFormat::V5, false, false, 300, "tshark-v5");
    let text = check(&c, true);
    assert!(text.contains("Version: 5"));
}

#[test]
fn v9_decodes_cleanly() {
    if !have("tshark") {
        return;
    }
    // 800 extra flows: about 30 packets, templates resent in packet 20.
    let c = capture(NetflowFormat::V9, false, false, 800, "tshark-v9");
    let text = check(&c, false);
    assert_eq!(
        text.matches("FlowSet Id: Data Template (V9) (0)").count(),
        2
    );
    let seqs: Vec<u64> = values(&c.pcap, "cflow.sequence")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(seqs, (0..c.datagrams as u64).collect::<Vec<_>>());
}

#[test]
fn ipfix_millis_decodes_cleanly() {
    if !have("tshark") {
        return;
    }
    let c = capture(NetflowFormat::Ipfix, false, false, 800, "tshark-ipfix");
    check(&c, false);
    let mut want: Vec<String> = Vec::new();
    for r in &c.recs {
        for d in [&r.forward, &r.reverse] {
            if d.packets > 0 {
                want.push(tshark_time(d.first_ns / 1_000_000 * 1_000_000));
            }
        }
    }
    assert_eq!(
        multiset(values(&c.pcap, "cflow.abstimestart")),
        multiset(want)
    );
    // sequence = data records before the message.
    let seqs: Vec<u64> = values(&c.pcap, "cflow.sequence")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(seqs[0], 0);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn ipfix_biflow_nanos_decodes_reverse_elements() {
    if !have("tshark") {
        return;
    }
    let c = capture(NetflowFormat::Ipfix, true, true, 300, "tshark-ipfix-bi");
    let text = check(&c, false);
    // Reverse elements are declared with PEN 29305 and decoded with their values.
    assert!(text.contains("PEN: IPFIX Reverse Information Element Private Enterprise (29305)"));
    let rev = |label: &str| -> Vec<u64> {
        text.lines()
            .filter(|l| l.contains(label))
            .map(|l| {
                let v = l.trim().split(' ').nth(1).unwrap();
                v.parse().unwrap()
            })
            .collect()
    };
    let two_way: Vec<_> = c.recs.iter().filter(|r| r.reverse.packets > 0).collect();
    let mut want_octets: Vec<u64> = two_way.iter().map(|r| r.reverse.bytes).collect();
    let mut want_packets: Vec<u64> = two_way.iter().map(|r| r.reverse.packets).collect();
    let (mut octets, mut packets) = (rev("(Reverse Type 1 BYTES)"), rev("(Reverse Type 2 PKTS)"));
    for v in [
        &mut want_octets,
        &mut want_packets,
        &mut octets,
        &mut packets,
    ] {
        v.sort_unstable();
    }
    assert_eq!(octets, want_octets);
    assert_eq!(packets, want_packets);
    assert_eq!(
        text.matches("(Reverse Type 52 IP TTL MINIMUM)").count(),
        two_way.len()
    );
    // Nanosecond times (forward and reverse) decode exactly.
    let mut want: Vec<String> = Vec::new();
    for r in &c.recs {
        for d in [&r.forward, &r.reverse] {
            if d.packets > 0 {
                want.push(tshark_time(d.first_ns));
            }
        }
    }
    assert_eq!(
        multiset(values(&c.pcap, "cflow.abstimestart")),
        multiset(want)
    );
    // flowEndReason of every record.
    let reasons = multiset(values(&c.pcap, "cflow.flow_end_reason"));
    let want = multiset(c.recs.iter().map(|r| (r.end_reason as u8).to_string()));
    assert_eq!(reasons, want);
}
