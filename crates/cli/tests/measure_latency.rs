//! `weir latency` on files whose truth the test knows: A is written by `weir gen -w` (planned send
//! times as timestamps), B is built here from A by dropping, duplicating and delaying chosen
//! packets (variable delays reorder some of them), and every figure the analyzer reports is
//! compared with the same figure computed by the test from its own list of what it did.

mod common;

use std::collections::HashMap;
use std::path::Path;

use common::{run, weir};
use weir_packet::{LinkType, PacketMeta};
use weir_pcap::FileReader;
use weir_pcap::{FileFormat, Interface, PacketWriter, Precision};

/// One packet of A: time, bytes, (stream, seq) read from its stamp by the test itself.
struct APacket {
    ts: u64,
    data: Vec<u8>,
    stream: u16,
    seq: u32,
}

fn read_a(path: &Path) -> Vec<APacket> {
    let mut r = FileReader::open(path).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        // Ethernet + IPv4 (20 bytes) + UDP: the stamp starts at byte 42 (layout in weir-gen).
        let s = &p.data[42..];
        assert_eq!(&s[..4], b"WGEN");
        v.push(APacket {
            ts: p.meta.ts_ns,
            data: p.data.to_vec(),
            stream: u16::from_be_bytes([s[4], s[5]]),
            seq: u32::from_be_bytes([s[6], s[7], s[8], s[9]]),
        });
    }
    v
}

/// What the test did to each packet of A.
struct Plan {
    drop: bool,
    dup: bool,
    delay_ns: u64,
}

/// A deterministic, irregular plan: about 1 % lost, 1 % duplicated, delays 100 µs .. 5.1 ms
/// varying fast enough (the stream sends every 100 µs) for later packets to overtake earlier ones.
fn plan(i: usize) -> Plan {
    Plan {
        drop: i % 97 == 5,
        dup: i % 101 == 7,
        delay_ns: 100_000 + ((i as u64 * 7919) % 5000) * 1000,
    }
}

/// Writes B: the surviving packets (and duplicates, 10 µs after their original) in arrival order,
/// with `clock_ns` added to every timestamp (B's clock error). Returns B's records in the order
/// written: (stream, seq, arrival time at B in A's clock, latency, is_duplicate).
fn write_b(a: &[APacket], path: &Path, clock_ns: i64) -> Vec<(u16, u32, u64, u64, bool)> {
    let mut arrivals = Vec::new();
    for (i, p) in a.iter().enumerate() {
        let pl = plan(i);
        if pl.drop {
            continue;
        }
        let t = p.ts + pl.delay_ns;
        arrivals.push((t, i, false));
        if pl.dup {
            arrivals.push((t + 10_000, i, true));
        }
    }
    arrivals.sort_by_key(|&(t, i, dup)| (t, i, dup)); // stable, explicit tie-break
    let out = std::fs::File::create(path).unwrap();
    let spec = Interface::new(LinkType::ETHERNET, 0);
    let mut w = PacketWriter::new(out, FileFormat::Pcap(Precision::Nano), &[spec]).unwrap();
    let mut records = Vec::new();
    for &(t, i, dup) in &arrivals {
        let mut data = a[i].data.clone();
        // One hop later: TTL - 1 and the IPv4 checksum adjusted, other MACs (the hash matcher
        // must not care).
        data[22] -= 1;
        let ck = u16::from_be_bytes([data[24], data[25]]);
        let sum = ck as u32 + 0x0100;
        let ck = ((sum & 0xffff) + (sum >> 16)) as u16;
        data[24..26].copy_from_slice(&ck.to_be_bytes());
        data[0..6].copy_from_slice(&[2, 0xb, 0xb, 0xb, 0xb, 0xb]);
        data[6..12].copy_from_slice(&[2, 0xc, 0xc, 0xc, 0xc, 0xc]);
        let meta = PacketMeta {
            ts_ns: (t as i64 + clock_ns) as u64,
            orig_len: data.len() as u32,
            interface: 0,
        };
        w.write(&meta, &data).unwrap();
        records.push((a[i].stream, a[i].seq, t, t - a[i].ts, dup));
    }
    w.finish().unwrap();
    records
}

/// The figures of one stream, computed the way the definitions say.
#[derive(Debug, Default)]
struct Expected {
    sent: u64,
    lost: u64,
    dup: u64,
    reordered: u64,
    latencies: Vec<u64>,
    jitter: f64,
}

fn expected(a: &[APacket], b: &[(u16, u32, u64, u64, bool)]) -> HashMap<u16, Expected> {
    let mut e: HashMap<u16, Expected> = HashMap::new();
    for (i, p) in a.iter().enumerate() {
        let x = e.entry(p.stream).or_default();
        x.sent += 1;
        x.lost += plan(i).drop as u64;
    }
    let mut next: HashMap<u16, u64> = HashMap::new();
    let mut last: HashMap<u16, f64> = HashMap::new();
    for &(stream, seq, _t, lat, dup) in b {
        let x = e.get_mut(&stream).unwrap();
        if dup {
            x.dup += 1;
            continue;
        }
        // RFC 4737: reordered when the sequence number is below the next expected one.
        let n = next.entry(stream).or_insert(0);
        if (seq as u64) < *n {
            x.reordered += 1;
        } else {
            *n = seq as u64 + 1;
        }
        // RFC 3550: J += (|D| - J) / 16, D the change in transit time, in arrival order.
        if let Some(prev) = last.insert(stream, lat as f64) {
            x.jitter += ((lat as f64 - prev).abs() - x.jitter) / 16.0;
        }
        x.latencies.push(lat);
    }
    e
}

fn latency_json(args: &[&str]) -> (serde_json::Value, String) {
    let out = run(weir().arg("latency").args(args).args(["--json", "-"]));
    assert!(
        out.status.success(),
        "weir latency failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        serde_json::from_slice(&out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The stream objects of the only run, by name.
fn streams(doc: &serde_json::Value) -> HashMap<String, serde_json::Value> {
    doc["runs"][0]["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["stream"].as_str().unwrap().to_string(), s.clone()))
        .collect()
}

/// Checks one reported stream against the test's own figures.
fn check(name: &str, got: &serde_json::Value, want: &Expected) {
    let u = |k: &str| {
        got[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: {k} missing"))
    };
    let f = |k: &str| got[k].as_f64().unwrap();
    assert_eq!(u("sent"), want.sent, "{name}: sent");
    assert_eq!(u("received"), want.sent - want.lost, "{name}: received");
    assert_eq!(u("lost"), want.lost, "{name}: lost");
    assert_eq!(u("duplicated"), want.dup, "{name}: duplicated");
    assert_eq!(u("reordered"), want.reordered, "{name}: reordered");
    assert!(
        want.reordered > 0,
        "{name}: the plan must reorder something"
    );
    let mut lat = want.latencies.clone();
    lat.sort_unstable();
    assert_eq!(
        got["min_ns"].as_i64().unwrap(),
        lat[0] as i64,
        "{name}: min"
    );
    assert_eq!(
        got["max_ns"].as_i64().unwrap(),
        *lat.last().unwrap() as i64,
        "{name}: max"
    );
    let mean = lat.iter().sum::<u64>() as f64 / lat.len() as f64;
    let var = lat.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / lat.len() as f64;
    assert!(
        (f("mean_ns") - mean).abs() < 1e-6 * mean,
        "{name}: mean {} vs {mean}",
        f("mean_ns")
    );
    assert!(
        (f("stddev_ns") - var.sqrt()).abs() < 1e-6 * var.sqrt(),
        "{name}: stddev"
    );
    assert!(
        (f("jitter_ns") - want.jitter).abs() < 1e-6 * want.jitter,
        "{name}: jitter"
    );
    // Percentiles come from an HDR histogram with 3 significant digits: within 0.1 % of the
    // exact order statistic (the smallest value with at least q of the packets at or below it).
    for (k, q) in [
        ("p50_ns", 0.5),
        ("p90_ns", 0.9),
        ("p99_ns", 0.99),
        ("p999_ns", 0.999),
    ] {
        let rank = ((q * lat.len() as f64).ceil() as usize).max(1);
        let exact = lat[rank - 1] as f64;
        let v = u(k) as f64;
        assert!(
            (v - exact).abs() <= exact * 1e-3 + 1.0,
            "{name}: {k} {v} vs exact {exact}"
        );
    }
}

#[test]
fn analyzer_recovers_known_loss_duplicates_reordering_and_delays() {
    let tmp = tempfile::tempdir().unwrap();
    let a_path = tmp.path().join("a.pcap");
    let b_path = tmp.path().join("b.pcap");
    // Three flows (streams 5, 6, 7), 10 000 pps in total, IMIX sizes, 6000 packets.
    let g = run(weir()
        .args([
            "gen", "--pps", "10000", "-c", "6000", "--flows", "3", "--stream", "5",
        ])
        .args(["--size", "imix", "--start", "1700000000000000000", "-w"])
        .arg(&a_path));
    assert!(g.status.success(), "{}", String::from_utf8_lossy(&g.stderr));
    let a = read_a(&a_path);
    assert_eq!(a.len(), 6000);
    let b = write_b(&a, &b_path, 0);
    let want = expected(&a, &b);
    let (a_s, b_s) = (a_path.to_str().unwrap(), b_path.to_str().unwrap());

    // By stamp.
    let (doc, _) = latency_json(&[a_s, b_s]);
    let got = streams(&doc);
    assert_eq!(got.len(), 3);
    for (stream, w) in &want {
        let name = format!("stream {stream}");
        check(&name, &got[&name], w);
    }

    // By invariant bytes (no stamps), one stream per flow: the same figures (each flow's A order
    // is its sequence order), despite the TTL, checksum and MAC changes.
    let (doc, _) = latency_json(&["--no-stamps", "--unstamped", "flow", a_s, b_s]);
    let got = streams(&doc);
    assert_eq!(got.len(), 3);
    assert_eq!(doc["runs"][0]["collisions"].as_u64(), Some(0));
    for (stream, w) in &want {
        let sport = 40_000 + (stream - 5);
        let name = format!("udp 10.0.0.1:{sport} > 10.0.0.2:9000");
        check(&name, &got[&name], w);
    }

    // CSV: one row per first copy, with the latency the test applied to that packet.
    let csv_path = tmp.path().join("m.csv");
    let out = run(weir().args(["latency", a_s, b_s, "--csv"]).arg(&csv_path));
    assert!(out.status.success());
    let text = std::fs::read_to_string(&csv_path).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("run,stream,seq,a_ns,b_ns,latency_ns,len")
    );
    let mut by_key: HashMap<(u16, u32), u64> = HashMap::new();
    for &(s, q, _, lat, dup) in &b {
        if !dup {
            by_key.insert((s, q), lat);
        }
    }
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), by_key.len());
    for row in rows {
        let f: Vec<&str> = row.split(',').collect();
        let stream: u16 = f[1].strip_prefix("stream ").unwrap().parse().unwrap();
        let seq: u32 = f[2].parse().unwrap();
        assert_eq!(
            f[5].parse::<u64>().unwrap(),
            by_key[&(stream, seq)],
            "{row}"
        );
    }
}

#[test]
fn clock_offset_is_warned_about_and_corrected() {
    let tmp = tempfile::tempdir().unwrap();
    let a_path = tmp.path().join("a.pcap");
    let b_path = tmp.path().join("b.pcap");
    let g = run(weir()
        .args(["gen", "--pps", "10000", "-c", "3000", "--size", "200"])
        .args(["--start", "1700000000000000000", "-w"])
        .arg(&a_path));
    assert!(g.status.success());
    let a = read_a(&a_path);
    // B's clock runs 20 ms behind A's: every latency (≤ 5.1 ms) reads negative.
    let offset: i64 = -20_000_000;
    let b = write_b(&a, &b_path, offset);
    let want = expected(&a, &b);
    let (a_s, b_s) = (a_path.to_str().unwrap(), b_path.to_str().unwrap());
    let (doc, err) = latency_json(&[a_s, b_s]);
    let got = streams(&doc);
    let received = want[&0].sent - want[&0].lost;
    assert_eq!(got["stream 0"]["negative"].as_u64(), Some(received));
    assert!(err.contains("negative latency"), "warned: {err}");
    let off = offset.to_string();
    let (doc, err) = latency_json(&["--offset", &off, a_s, b_s]);
    assert!(!err.contains("negative latency"), "{err}");
    check("stream 0", &streams(&doc)["stream 0"], &want[&0]);
}

#[test]
fn several_runs_overlaid_in_charts() {
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for (label, pps) in [("slow", "2000"), ("fast", "20000")] {
        let a_path = tmp.path().join(format!("{label}-a.pcap"));
        let b_path = tmp.path().join(format!("{label}-b.pcap"));
        let g = run(weir()
            .args([
                "gen",
                "--pps",
                pps,
                "-c",
                "2000",
                "--start",
                "1700000000000000000",
                "-w",
            ])
            .arg(&a_path));
        assert!(g.status.success());
        write_b(&read_a(&a_path), &b_path, 0);
        runs.push(format!("{label}={},{}", a_path.display(), b_path.display()));
    }
    let dir = tmp.path().join("charts");
    let out = run(weir()
        .args(["latency", "--run", &runs[0], "--run", &runs[1], "--plot"])
        .arg(&dir));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.lines().any(|l| l.starts_with("slow ")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("fast ")), "{table}");
    for chart in ["cdf", "box", "scatter"] {
        let svg = std::fs::read_to_string(dir.join(format!("{chart}.svg"))).unwrap();
        // Both runs are in the legend of every chart.
        assert!(
            svg.contains("slow: stream 0") && svg.contains("fast: stream 0"),
            "{chart}"
        );
        let png = std::fs::read(dir.join(format!("{chart}.png"))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{chart}.png is a PNG");
    }
}
