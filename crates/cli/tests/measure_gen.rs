//! `weir gen`: files checked field by field with tshark (times, sizes, TOS, VLAN, checksums,
//! stamps), and live sending through the TX ring on a veth pair in a namespace made by the test,
//! with tcpdump on the far side as the witness (every packet, in order, bytes as planned; the
//! replay of a capture gives back the same bytes).

mod common;

use std::path::Path;
use std::process::{Child, Command};

use common::netns::VethBench;
use common::{run, start, tshark_fields, tshark_fields_with, wait, weir};

#[test]
fn file_fields_read_back_in_tshark() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("g.pcapng");
    let (start, pps, n) = (1_700_000_000_000_000_000u64, 4000u64, 240u64);
    let out = run(weir()
        .args([
            "gen", "--format", "pcapng", "--size", "imix", "--flows", "2", "--stream", "9",
        ])
        .args([
            "--tos",
            "0xb8",
            "--vlan",
            "42:5",
            "--src",
            "192.0.2.1",
            "--dst",
            "198.51.100.7",
        ])
        .args([
            "--start",
            &start.to_string(),
            "--pps",
            &pps.to_string(),
            "-c",
            &n.to_string(),
        ])
        .args(["--json", "-w"])
        .arg(&f));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rep["sent"].as_u64(), Some(n));
    let rows = tshark_fields_checked(
        &f,
        &[
            "frame.time_epoch",
            "frame.len",
            "vlan.id",
            "vlan.priority",
            "ip.dsfield",
            "ip.src",
            "ip.dst",
            "udp.srcport",
            "ip.checksum.status",
            "udp.checksum.status",
            "udp.payload",
        ],
    );
    assert_eq!(rows.len() as u64, n);
    let mut sizes = std::collections::HashMap::new();
    for (k, r) in rows.iter().enumerate() {
        let k = k as u64;
        // Planned times: start + k / pps, to the nanosecond (tshark prints 9 decimals).
        let t = start + k * 1_000_000_000 / pps;
        assert_eq!(
            r[0],
            format!("{}.{:09}", t / 1_000_000_000, t % 1_000_000_000),
            "packet {k}"
        );
        *sizes.entry(r[1].clone()).or_insert(0) += 1;
        assert_eq!((&r[2][..], &r[3][..]), ("42", "5"));
        assert_eq!(r[4], "0xb8");
        assert_eq!((&r[5][..], &r[6][..]), ("192.0.2.1", "198.51.100.7"));
        // Round robin over two flows: source ports 40000, 40001; streams 9, 10.
        assert_eq!(r[7], (40_000 + k % 2).to_string());
        assert_eq!(
            (&r[8][..], &r[9][..]),
            ("1", "1"),
            "checksums good (tshark status 1)"
        );
        let p = &r[10];
        assert_eq!(&p[..8], "5747454e", "magic WGEN");
        assert_eq!(
            u16::from_str_radix(&p[8..12], 16).unwrap() as u64,
            9 + k % 2,
            "stream"
        );
        assert_eq!(
            u32::from_str_radix(&p[12..20], 16).unwrap() as u64,
            k / 2,
            "sequence"
        );
        assert_eq!(
            u64::from_str_radix(&p[20..36], 16).unwrap(),
            t,
            "send time = planned time"
        );
    }
    // IMIX: 7:4:1 of 64, 594, 1518-byte frames with FCS; with a VLAN tag the smallest grows to
    // the 64 bytes (+ FCS) that hold headers and stamp.
    assert_eq!(sizes["64"], n / 12 * 7);
    assert_eq!(sizes["590"], n / 12 * 4);
    assert_eq!(sizes["1514"], n / 12);
}

/// tshark fields with IP and UDP checksum checking turned on.
fn tshark_fields_checked(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    tshark_fields_with(
        file,
        &["ip.check_checksum:TRUE", "udp.check_checksum:TRUE"],
        fields,
    )
}

/// The namespace side of the bench: its interface name and MAC.
fn peer(bench: &VethBench) -> (String, String) {
    let name = bench.host_if.replacen("wa", "wb", 1);
    let out = run(Command::new("ip")
        .args(["netns", "exec", &bench.ns, "cat"])
        .arg(format!("/sys/class/net/{name}/address")));
    (
        name,
        String::from_utf8(out.stdout).unwrap().trim().to_string(),
    )
}

/// tcpdump in the namespace, on the peer, for `n` packets to UDP port 9000, with nanosecond
/// timestamps (a microsecond file truncates the capture time, which can then read earlier than
/// the nanosecond send stamp of the same packet).
fn witness(bench: &VethBench, peer_if: &str, n: u64, file: &Path) -> Child {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        &bench.ns,
        "tcpdump",
        "--time-stamp-precision=nano",
        "-n",
        "-i",
        peer_if,
        "-c",
        &n.to_string(),
    ])
    .arg("-w")
    .arg(file)
    .arg("udp port 9000");
    start(c, "listening on")
}

#[test]
fn sends_through_the_tx_ring_with_and_without_the_qdisc() {
    let bench = VethBench::new();
    let (peer_if, peer_mac) = peer(&bench);
    let tmp = tempfile::tempdir().unwrap();
    for bypass in [false, true] {
        let cap = tmp.path().join(format!("rx-{bypass}.pcap"));
        let n = 2000u64;
        let w = witness(&bench, &peer_if, n, &cap);
        let mut g = weir();
        g.args([
            "gen",
            "-i",
            &bench.host_if,
            "--src",
            &bench.host_ip,
            "--dst",
            &bench.peer_ip,
        ])
        .args([
            "--dst-mac",
            &peer_mac,
            "--size",
            "100-400",
            "--pps",
            "20000",
        ])
        .args(["-c", &n.to_string(), "--json"]);
        if bypass {
            g.arg("--qdisc-bypass");
        }
        let out = run(&mut g);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(rep["sent"].as_u64(), Some(n));
        assert_eq!(rep["send_errors"].as_u64(), Some(0));
        wait(w);
        let rows = tshark_fields(&cap, &["frame.time_epoch", "frame.len", "udp.payload"]);
        assert_eq!(
            rows.len() as u64,
            n,
            "every packet arrived (bypass {bypass})"
        );
        // The same sizes as the same command writes to a file (same seed, same draws).
        let f = tmp.path().join("plan.pcap");
        let planned = run(weir()
            .args([
                "gen",
                "--size",
                "100-400",
                "--pps",
                "20000",
                "-c",
                &n.to_string(),
                "-w",
            ])
            .arg(&f));
        assert!(planned.status.success());
        let plan = tshark_fields(&f, &["frame.len"]);
        let mut bytes = 0u64;
        for (k, r) in rows.iter().enumerate() {
            assert_eq!(r[1], plan[k][0], "size of packet {k}");
            bytes += r[1].parse::<u64>().unwrap();
            let p = &r[2];
            assert_eq!(&p[..8], "5747454e");
            assert_eq!(
                u32::from_str_radix(&p[12..20], 16).unwrap() as usize,
                k,
                "in order"
            );
            // Stamped before it was handed to the kernel, so before tcpdump saw it.
            let sent = u64::from_str_radix(&p[20..36], 16).unwrap();
            let (s, ns) = r[0].split_once('.').unwrap();
            let seen: u64 = s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap();
            assert!(sent <= seen, "send stamp {sent} after capture {seen}");
        }
        assert_eq!(rep["bytes"].as_u64(), Some(bytes));
    }
}

#[test]
fn replay_sends_the_same_bytes_back() {
    let bench = VethBench::new();
    let (peer_if, peer_mac) = peer(&bench);
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src.pcap");
    let n = 300u64;
    let g = run(weir()
        .args([
            "gen",
            "--src",
            &bench.host_ip,
            "--dst",
            &bench.peer_ip,
            "--dst-mac",
            &peer_mac,
        ])
        .args([
            "--size",
            "imix",
            "--pps",
            "10000",
            "-c",
            &n.to_string(),
            "-w",
        ])
        .arg(&src));
    assert!(g.status.success());
    for (pace, loops) in [(vec!["--multiplier", "4"], 1u64), (vec!["--top"], 2)] {
        let cap = tmp.path().join("rx.pcap");
        let w = witness(&bench, &peer_if, n * loops, &cap);
        let out = run(weir()
            .args(["gen", "-i", &bench.host_if, "--replay"])
            .arg(&src)
            .args(&pace)
            .args(["--loops", &loops.to_string(), "--json"]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rep: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(rep["sent"].as_u64(), Some(n * loops));
        wait(w);
        let got = tshark_fields(&cap, &["frame.len", "udp.payload"]);
        let want = tshark_fields(&src, &["frame.len", "udp.payload"]);
        assert_eq!(got.len() as u64, n * loops);
        for (k, r) in got.iter().enumerate() {
            assert_eq!(r, &want[k % n as usize], "packet {k} ({pace:?})");
        }
    }
}

#[test]
fn tcp_shaped_ipv6_frames_are_valid_in_tshark() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("t.pcap");
    let out = run(weir()
        .args([
            "gen", "--tcp", "--src", "fd00::1", "--dst", "fd00::2", "--size", "300",
        ])
        .args(["--pps", "1000", "-c", "20", "-w"])
        .arg(&f));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(&f)
        .args([
            "-o",
            "tcp.check_checksum:TRUE",
            "-o",
            "tcp.analyze_sequence_numbers:FALSE",
        ])
        .args([
            "-T",
            "fields",
            "-e",
            "ipv6.plen",
            "-e",
            "tcp.checksum.status",
        ])
        .args(["-e", "tcp.seq_raw", "-e", "tcp.len", "-e", "tcp.flags"]);
    let out = run(&mut cmd);
    let rows: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect();
    assert_eq!(rows.len(), 20);
    let payload = 300 - 14 - 40 - 20;
    for (k, r) in rows.iter().enumerate() {
        assert_eq!(r[0], (300 - 14 - 40).to_string());
        assert_eq!(r[1], "1", "TCP checksum good");
        // Sequence numbers advance by the payload, like a real sender's.
        assert_eq!(r[2], (1 + k * payload).to_string());
        assert_eq!(r[3], payload.to_string());
        assert_eq!(r[4], "0x0018", "PSH|ACK");
    }
}

/// `--vlan` (and `--tcp`, IPv6) with the default size: the frames are the smallest that hold
/// the headers and the stamp (tshark: 64 bytes, VLAN 100; by hand: Ethernet 14 + 802.1Q 4 +
/// IPv4 20 + UDP 8 + stamp 18), not a run-time failure; a `--size` given too small is a usage
/// error (status 2) naming the smallest frame.
#[test]
fn the_default_size_grows_to_the_headers_and_a_given_one_too_small_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("v.pcap");
    let out = run(weir()
        .args(["gen", "--vlan", "100", "--pps", "1000", "-c", "3", "-w"])
        .arg(&f));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = tshark_fields(&f, &["frame.len", "vlan.id", "udp.srcport"]);
    assert_eq!(rows, vec![vec!["64", "100", "40000"]; 3]);
    let out = run(weir()
        .args(["gen", "--vlan", "100", "--size", "60", "-c", "3", "-w"])
        .arg(tmp.path().join("x.pcap")));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "--size 60 cannot hold the headers and the 18-byte stamp: the smallest frame is 64"
        ),
        "{err}"
    );
    assert!(!tmp.path().join("x.pcap").exists(), "nothing written");
}
