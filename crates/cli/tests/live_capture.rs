//! Live capture on veth pairs in network namespaces made by the test: every packet sent is
//! captured, byte-identical to what tcpdump captures at the same time, in order, with monotonic
//! timestamps; fanout over two threads loses and duplicates nothing; several interfaces land in
//! one pcapng with one interface block each; the snap length cuts packets but keeps their length.

mod common;

use std::path::Path;
use std::process::Command;

use common::netns::VethBench;
use common::{start, tshark_fields, wait, weir};

/// (epoch time, frame length, captured length, interface name, UDP payload hex) per frame.
fn frames(file: &Path) -> Vec<(String, u64, u64, String, String)> {
    let fields = [
        "frame.time_epoch",
        "frame.len",
        "frame.cap_len",
        "frame.interface_name",
        "udp.payload",
    ];
    tshark_fields(file, &fields)
        .into_iter()
        .map(|f| {
            let [t, len, cap, iface, payload] = <[String; 5]>::try_from(f).expect("5 fields");
            (
                t,
                len.parse().unwrap(),
                cap.parse().unwrap(),
                iface,
                payload,
            )
        })
        .collect()
}

/// The sequence number carried in a payload (hex of "WEIR" + u32).
fn seq(payload_hex: &str) -> u32 {
    assert!(
        payload_hex.starts_with("57454952"),
        "not a weir payload: {payload_hex}"
    );
    u32::from_str_radix(&payload_hex[8..16], 16).unwrap()
}

#[test]
fn capture_matches_tcpdump_packet_for_packet() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (w, t) = (
        tmp.path().join("weir.pcapng"),
        tmp.path().join("tcpdump.pcap"),
    );
    let n = 3000u32;
    let expr = "udp port 9999";
    let mut wc = weir();
    wc.args(["capture", "-i", &bench.host_if, "-c", &n.to_string(), "-w"])
        .arg(&w)
        .arg(expr);
    let weir_child = start(wc, "capturing on");
    let mut tc = Command::new("tcpdump");
    tc.args(["-n", "-i", &bench.host_if, "-c", &n.to_string(), "-w"])
        .arg(&t)
        .arg(expr);
    let tcpdump_child = start(tc, "listening on");
    bench.send_udp(9999, n, 100);
    wait(weir_child);
    wait(tcpdump_child);

    let (wf, tf) = (frames(&w), frames(&t));
    assert_eq!(wf.len(), n as usize, "every packet sent was captured");
    let seqs: Vec<u32> = wf.iter().map(|f| seq(&f.4)).collect();
    assert_eq!(
        seqs,
        (0..n).collect::<Vec<_>>(),
        "in order, none missing or repeated"
    );
    assert!(
        wf.windows(2).all(|p| p[0].0 <= p[1].0),
        "monotonic timestamps"
    );
    assert!(
        wf.iter().all(|f| f.3 == bench.host_if),
        "interface named in pcapng"
    );
    // The same bytes as tcpdump's capture of the same packets.
    let strip = |v: &[(String, u64, u64, String, String)]| -> Vec<(u64, u64, String)> {
        v.iter().map(|f| (f.1, f.2, f.4.clone())).collect()
    };
    assert_eq!(strip(&wf), strip(&tf));
}

#[test]
fn fanout_over_two_threads_loses_and_duplicates_nothing() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("fanout.pcapng");
    let n = 4000u32;
    let mut wc = weir();
    wc.args([
        "capture",
        "-i",
        &bench.host_if,
        "--threads",
        "2",
        "--fanout",
        "lb",
        "-c",
    ])
    .arg(n.to_string())
    .arg("-w")
    .arg(&w)
    .arg("udp port 9998");
    let child = start(wc, "capturing on");
    bench.send_udp(9998, n, 10);
    wait(child);
    let mut seqs: Vec<u32> = frames(&w).iter().map(|f| seq(&f.4)).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..n).collect::<Vec<_>>());
}

#[test]
fn two_interfaces_and_a_snap_length() {
    let (a, b) = (VethBench::new(), VethBench::new());
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("two.pcapng");
    let mut wc = weir();
    wc.args(["capture", "-s", "60", "-c", "200", "-i"])
        .arg(format!("{},{}", a.host_if, b.host_if))
        .arg("-w")
        .arg(&w)
        .arg("udp port 9997");
    let child = start(wc, &format!("capturing on {}", b.host_if));
    a.send_udp(9997, 100, 200);
    b.send_udp(9997, 100, 200);
    wait(child);
    let f = frames(&w);
    assert_eq!(f.len(), 200);
    for (name, bench) in [(&a.host_if, &a), (&b.host_if, &b)] {
        let mine: Vec<_> = f.iter().filter(|x| &x.3 == name).collect();
        assert_eq!(mine.len(), 100, "{} packets from {}", mine.len(), bench.ns);
        // 14 + 20 + 8 + 4 + 4 + 200 bytes on the wire, 60 kept.
        assert!(
            mine.iter().all(|x| x.1 == 250 && x.2 == 60),
            "{:?}",
            mine[0]
        );
    }
}
