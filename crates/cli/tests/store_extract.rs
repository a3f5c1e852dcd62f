//! `weir extract` against tcpdump: a store built from real captures (`weir record -r`), then
//! for several expressions and time windows, the packets extract returns are exactly those
//! `tcpdump -r` selects from the same segments, in time order; with the index missing, damaged
//! or stale the answer is the same (with a warning); `weir index` makes plain capture files
//! searchable; `weir ls` accounts for every packet and the index stays under 2 % of the data.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{corpus, run, segments, weir};
use weir_pcap::FileReader;

const FILES: [&str; 5] = [
    "smb2-async-read__input.pcap",
    "dhcp-request-flood__test.pcap",
    "mime__mime-stream-depth__input.pcap",
    "rule-hooks__http-body-hook-01__input.pcap",
    "ipv6-evasion__ipv6-dos-with-ext-headers-6__denial6-6.pcap",
];

fn inputs() -> Vec<PathBuf> {
    let all = corpus();
    FILES
        .iter()
        .map(|f| {
            all.iter()
                .find(|p| p.ends_with(f))
                .unwrap_or_else(|| panic!("{f} not in the corpus"))
                .clone()
        })
        .collect()
}

fn build_store(dir: &Path) {
    let mut cmd = weir();
    cmd.args(["record", "--segment-mib", "1", "--buffer-mib", "64", "-o"])
        .arg(dir);
    for f in inputs() {
        cmd.arg("-r").arg(f);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

type Pkt = (u64, u32, Vec<u8>);

fn packets(file: &Path) -> Vec<Pkt> {
    let mut r = FileReader::open(file).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        v.push((p.meta.ts_ns, p.meta.orig_len, p.data.to_vec()));
    }
    v
}

/// What tcpdump selects from the segments, in time order (stable: segment order for ties).
fn tcpdump(segs: &[PathBuf], expr: &str, from: u64, to: u64, tmp: &Path) -> Vec<Pkt> {
    let mut all = Vec::new();
    for s in segs {
        let out = tmp.join("tcpdump.pcap");
        let mut cmd = Command::new("tcpdump");
        cmd.args(["--time-stamp-precision=nano", "-r"])
            .arg(s)
            .arg("-w")
            .arg(&out);
        if !expr.is_empty() {
            cmd.arg(expr);
        }
        let o = run(&mut cmd);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        all.extend(
            packets(&out)
                .into_iter()
                .filter(|p| p.0 >= from && p.0 <= to),
        );
    }
    all.sort_by_key(|p| p.0);
    all
}

fn extract(dir: &Path, expr: &str, window: Option<(u64, u64)>, tmp: &Path) -> (Vec<Pkt>, String) {
    let out = tmp.join("extract.pcap");
    let mut cmd = weir();
    cmd.arg("extract").arg(dir).arg("-v").arg("-w").arg(&out);
    if let Some((from, to)) = window {
        let s = |ns: u64| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
        cmd.args(["--from", &s(from), "--to", &s(to)]);
    }
    if !expr.is_empty() {
        cmd.arg(expr);
    }
    let o = run(&mut cmd);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    (packets(&out), err)
}

#[test]
fn extract_returns_exactly_what_tcpdump_selects() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    build_store(&dir);
    let segs = segments(&dir);
    assert!(segs.len() >= 4, "{} segments", segs.len());
    let all = tcpdump(&segs, "", 0, u64::MAX, tmp.path());
    let (lo, hi) = (
        all.iter().map(|p| p.0).min().unwrap(),
        all.iter().map(|p| p.0).max().unwrap(),
    );
    let third = (hi - lo) / 3;
    let exprs = [
        "",
        "tcp port 445",
        "udp and port 67",
        "host 192.168.1.1 or host 10.0.0.1",
        "icmp6",
        "ip6 and not tcp",
        "tcp[tcpflags] & tcp-syn != 0",
        "net 192.168.0.0/16 and tcp",
    ];
    let mut narrowed = 0;
    for expr in exprs {
        for window in [None, Some((lo + third, lo + 2 * third))] {
            let (from, to) = window.unwrap_or((0, u64::MAX));
            let want = tcpdump(&segs, expr, from, to, tmp.path());
            let (got, log) = extract(&dir, expr, window, tmp.path());
            assert_eq!(got.len(), want.len(), "`{expr}` {window:?}: {log}");
            assert!(got == want, "`{expr}` {window:?}: same packets, same order");
            if !log.contains("(100.00 %)") {
                narrowed += 1;
            }
        }
    }
    assert!(narrowed >= 6, "the index narrowed only {narrowed} searches");

    // `weir ls` accounts for every packet; the index is small.
    let o = run(weir().arg("ls").arg(&dir).arg("--json"));
    assert!(o.status.success());
    let ls: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(ls["packets"].as_u64().unwrap(), all.len() as u64);
    let ratio = ls["index_bytes"].as_f64().unwrap() / ls["bytes"].as_f64().unwrap();
    assert!(
        ratio > 0.0 && ratio < 0.02,
        "index is {:.3} % of the data",
        ratio * 100.0
    );

    // Missing, corrupt and stale indexes: the same answer, with a warning.
    let expr = "tcp port 445";
    let want = tcpdump(&segs, expr, 0, u64::MAX, tmp.path());
    let idx = |s: &Path| PathBuf::from(format!("{}.idx", s.display()));
    std::fs::remove_file(idx(&segs[0])).unwrap();
    let mut bytes = std::fs::read(idx(&segs[1])).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(idx(&segs[1]), bytes).unwrap();
    std::fs::copy(idx(&segs[3]), idx(&segs[2])).unwrap();
    let (got, log) = extract(&dir, expr, None, tmp.path());
    assert!(got == want, "{log}");
    assert!(
        log.contains("corrupt index") && log.contains("stale index"),
        "{log}"
    );
    // `weir index DIR` rebuilds what is missing or damaged; then no warning.
    let o = run(weir().arg("index").arg(&dir));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (got, log) = extract(&dir, expr, None, tmp.path());
    assert!(got == want && !log.contains("warning"), "{log}");
}

#[test]
fn weir_index_makes_capture_files_searchable() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("copy.pcap");
    std::fs::copy(&inputs()[0], &file).unwrap();
    let o = run(weir().arg("index").arg(&file));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(tmp.path().join("copy.pcap.idx").exists());
    let expr = "tcp port 445 and tcp[tcpflags] & tcp-push != 0";
    let want = tcpdump(std::slice::from_ref(&file), expr, 0, u64::MAX, tmp.path());
    let (got, log) = extract(&file, expr, None, tmp.path());
    assert!(!want.is_empty());
    assert!(got == want, "{log}");
}

/// Stores written by weir before session 15 (index format 1: one list of chunks per key;
/// tests/data/store-v1, synthetic packets from tests/data/make-store-v1.py recorded by the
/// binary of d79d235 with 8 KiB chunks) and in sessions 15-16 (format 2: lists of blocks or
/// chunks, 24 bytes per block; tests/data/store-v2, the same packets recorded by the binary of
/// dea9dc8; see their README.md) and in session 17 (format 3: key tables, every port its own
/// key; tests/data/store-v3, by the binary of 867d603) and in session 18 (format 4: ports
/// from 1 024 on per bucket of 64 in every chunk; tests/data/store-v4, by the binary of
/// 567838e) still extract exactly what tcpdump selects, through their index (no warning,
/// searches narrowed); `weir index --force` rewrites the index in today's format (5: ports
/// from 1 024 on exact in chunks with few of them, as all of this fixture's, per bucket of 64
/// in the others, a superset the BPF program narrows), with the same answers.
#[test]
fn a_store_with_the_old_index_format_still_extracts() {
    old_store_extracts("store-v1", b"WEIRIDX1");
    old_store_extracts("store-v2", b"WEIRIDX2");
    old_store_extracts("store-v3", b"WEIRIDX3");
    old_store_extracts("store-v4", b"WEIRIDX4");
}

fn old_store_extracts(name: &str, magic: &[u8; 8]) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    std::fs::create_dir(&dir).unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    for e in std::fs::read_dir(&fixture).unwrap() {
        let e = e.unwrap();
        if e.file_name() == "README.md" {
            continue;
        }
        std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
    }
    let segs = segments(&dir);
    assert_eq!(segs.len(), 1);
    let idx = PathBuf::from(format!("{}.idx", segs[0].display()));
    assert_eq!(&std::fs::read(&idx).unwrap()[..8], magic);
    let exprs = [
        "host 192.0.2.77",
        "udp and port 5060",
        "tcp port 22",
        "udp port 53",
        "host 2001:db8:1::2",
        "vlan and port 5060",
        "port 443 or port 80",
        // Ephemeral ports (one packet each in the fixture): a bucket's key in format 4, their
        // own in format 5's chunks of few ports.
        "port 39857",
        "tcp port 49196 or udp port 39857",
    ];
    for pass in ["as written", "format 5"] {
        let mut narrowed = 0;
        for expr in exprs {
            let want = tcpdump(&segs, expr, 0, u64::MAX, tmp.path());
            assert!(!want.is_empty(), "{expr}");
            let (got, log) = extract(&dir, expr, None, tmp.path());
            assert!(
                got == want,
                "{name} {pass} `{expr}`: {} vs {}: {log}",
                got.len(),
                want.len()
            );
            assert!(!log.contains("warning"), "{pass}: {log}");
            if !log.contains("(100.00 %)") {
                narrowed += 1;
            }
        }
        assert_eq!(narrowed, exprs.len(), "{pass}");
        let o = run(weir().arg("index").arg("--force").arg(&dir));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(&std::fs::read(&idx).unwrap()[..8], b"WEIRIDX5");
    }
}

/// Writes a classic pcap (ns, Ethernet) of the `n` frames `frame(i)`, 1 µs apart.
fn write_ns_pcap(path: &Path, n: u32, mut frame: impl FnMut(u32) -> Vec<u8>) {
    let mut out = Vec::new();
    out.extend_from_slice(&[0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0]);
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&65_535u32.to_le_bytes());
    out.extend_from_slice(&1u32.to_le_bytes());
    for i in 0..n {
        let f = frame(i);
        let ts = 1_700_000_000_000_000_000u64 + u64::from(i) * 1_000;
        out.extend_from_slice(&((ts / 1_000_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&((ts % 1_000_000_000) as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(&f);
    }
    std::fs::write(path, out).unwrap();
}

/// A classic pcap (ns) of `n` frames 1 µs apart: 1 400-byte TCP 10.0.0.1:40000 -> 10.0.0.2:443,
/// and every `every`-th a 102-byte DNS query 10.0.0.3:33333 -> 10.0.0.4:53.
fn scattered_dns_capture(path: &Path, n: u32, every: u32) {
    write_ns_pcap(path, n, |i| {
        let dns = i % every == every / 2;
        let (proto, src, dst, l4): (u8, [u8; 4], [u8; 4], Vec<u8>) = if dns {
            let mut udp = Vec::new();
            udp.extend_from_slice(&33_333u16.to_be_bytes());
            udp.extend_from_slice(&53u16.to_be_bytes());
            udp.extend_from_slice(&68u16.to_be_bytes());
            udp.extend_from_slice(&[0, 0]);
            udp.extend_from_slice(&(i as u16).to_be_bytes());
            udp.resize(68, 0);
            (17, [10, 0, 0, 3], [10, 0, 0, 4], udp)
        } else {
            let mut tcp = Vec::new();
            tcp.extend_from_slice(&40_000u16.to_be_bytes());
            tcp.extend_from_slice(&443u16.to_be_bytes());
            tcp.extend_from_slice(&i.to_be_bytes());
            tcp.extend_from_slice(&[0, 0, 0, 0, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
            tcp.resize(1_366, 0);
            (6, [10, 0, 0, 1], [10, 0, 0, 2], tcp)
        };
        let mut f = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&(20 + l4.len() as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0, 0x40, 0, 64, proto, 0, 0]);
        f.extend_from_slice(&src);
        f.extend_from_slice(&dst);
        f.extend_from_slice(&l4);
        f
    });
}

/// Peak RSS (KiB, GNU time's %M) of `weir extract DIR -w OUT EXPR`, and its stderr.
fn extract_peak_kib(dir: &Path, expr: &str, out: &Path, tmp: &Path) -> (u64, String) {
    let rss = tmp.join("rss");
    let o = run(Command::new("/usr/bin/time")
        .args(["-f", "%M", "-o"])
        .arg(&rss)
        .arg(env!("CARGO_BIN_EXE_weir"))
        .arg("extract")
        .arg(dir)
        .arg("-v")
        .arg("-w")
        .arg(out)
        .arg(expr));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let text = std::fs::read_to_string(&rss).unwrap();
    let kib = text.trim().lines().last().unwrap().parse().unwrap();
    (kib, err)
}

/// An extract whose candidates are scattered over a segment (500 DNS packets, one in every 200
/// frames of a 140 MB segment of 1 400-byte TCP frames, each in its own index block) returns
/// exactly what tcpdump selects, and is read range by range with `pread` into one buffer: its
/// peak RSS (GNU time) stays within that of an extract selecting nothing from the same store
/// (same binary, same index loaded) plus 8 MiB. The bound, computed: the buffer (one range,
/// at most a 128 KiB chunk here), the packets kept for the time-ordered output (500 x 102
/// bytes) and their 500 entries, under 1 MiB together; 8 MiB leaves room for the allocator.
/// Through a map, each candidate faulted in the page-cache folio around it.
#[test]
fn a_scattered_extract_equals_tcpdump_within_a_memory_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("scattered.pcap");
    scattered_dns_capture(&capture, 100_000, 200);
    let dir = tmp.path().join("store");
    let o = run(weir()
        .args(["record", "--segment-mib", "256", "--buffer-mib", "64", "-o"])
        .arg(&dir)
        .arg("-r")
        .arg(&capture));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::remove_file(&capture).unwrap();
    let segs = segments(&dir);
    assert_eq!(segs.len(), 1);
    let expr = "udp and port 53";
    let want = tcpdump(&segs, expr, 0, u64::MAX, tmp.path());
    assert_eq!(want.len(), 500);
    let out = tmp.path().join("extract.pcap");
    let (none_kib, log) = extract_peak_kib(&dir, "udp and port 54", &out, tmp.path());
    assert!(packets(&out).is_empty(), "{log}");
    let (kib, log) = extract_peak_kib(&dir, expr, &out, tmp.path());
    assert!(packets(&out) == want, "{log}");
    assert!(!log.contains("(100.00 %)"), "the index narrowed it: {log}");
    assert!(
        kib <= none_kib + 8 * 1024,
        "peak RSS {kib} KiB, {none_kib} KiB selecting nothing: {log}"
    );
}

/// A classic pcap (ns) of 64-byte UDP frames 1 µs apart, 10.0.0.1:`sport(i)` -> 10.0.0.2:53.
fn udp_ports_capture(path: &Path, n: u32, sport: impl Fn(u32) -> u16) {
    write_ns_pcap(path, n, |i| {
        let mut f = vec![0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00];
        f.extend_from_slice(&[0x45, 0, 0, 50, 0, 0, 0x40, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(&sport(i).to_be_bytes());
        f.extend_from_slice(&53u16.to_be_bytes());
        f.extend_from_slice(&30u16.to_be_bytes());
        f.resize(64, 0);
        f
    });
}

/// Index format 5's adaptive port grain through the CLI: 128 KiB chunks of 64-byte frames
/// whose source ports are 40 000 to 40 199 (at most 200 distinct ports: listed exactly) for
/// the first 20 000 packets, then random from 32 768 on (some 1 300 per chunk: per bucket of
/// 64 ports) for 20 000 more. `weir extract` of ports of either part, and of both, returns
/// exactly what tcpdump selects, through the index (searches narrowed).
#[test]
fn ephemeral_ports_extract_what_tcpdump_selects_in_both_grains() {
    let tmp = tempfile::tempdir().unwrap();
    let capture = tmp.path().join("ports.pcap");
    // xorshift32 from the packet's number: a fixed random port per packet.
    let random = |i: u32| {
        let mut x = i.wrapping_mul(0x9e37_79b9) | 1;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        32_768 | x as u16
    };
    let sport = move |i: u32| {
        if i < 20_000 {
            40_000 + (i * 7 % 200) as u16
        } else {
            random(i)
        }
    };
    udp_ports_capture(&capture, 40_000, sport);
    let dir = tmp.path().join("store");
    let o = run(weir()
        .args(["record", "--segment-mib", "64", "-o"])
        .arg(&dir)
        .arg("-r")
        .arg(&capture));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let segs = segments(&dir);
    let exprs = [
        "port 40007".to_string(),
        "udp and port 40199".into(),
        format!("port {}", sport(30_001)),
        format!("udp port {} or port 40123", sport(25_555)),
        "port 40000 and host 10.0.0.1".into(),
    ];
    for expr in &exprs {
        let want = tcpdump(&segs, expr, 0, u64::MAX, tmp.path());
        assert!(!want.is_empty(), "{expr}");
        let (got, log) = extract(&dir, expr, None, tmp.path());
        assert!(
            got == want,
            "`{expr}`: {} vs {}: {log}",
            got.len(),
            want.len()
        );
        assert!(
            !log.contains("(100.00 %)"),
            "the index narrowed `{expr}`: {log}"
        );
    }
}
