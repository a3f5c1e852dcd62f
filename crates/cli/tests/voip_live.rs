//! `weir voip -i` and `weir record --voip` on a veth pair the test creates: a hand-built SIP
//! call over UDP (INVITE with SDP, 100, 180, 200 with SDP, ACK, BYE, 200) and its RTP, sent by
//! the test from our side and from the namespace, the caller's stream with one packet never
//! sent (lost) and one sent twice (duplicate). tcpdump captures the same interface at the same
//! time (nanosecond timestamps): the records `weir voip -i` writes must equal, line for line,
//! what `weir voip -r` writes from tcpdump's file, and hold the known call and loss figures.
//! `weir record --voip` must write the same records beside a store holding every UDP packet
//! tcpdump saw. `weir voip -i --plot DIR` draws the call's chart when the call ends (while weir
//! still runs), byte for byte the chart `weir voip -r --plot` draws from tcpdump's capture.
//! Hostile: a missing interface is a clear error before any output is made.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::netns::VethBench;
use common::sip::{call, lines, offline, stop, tcpdump, CALL_ID};
use common::Running;

/// The known figures of the call and its two streams.
fn check_known(recs: &[serde_json::Value], bench: &VethBench) {
    let calls: Vec<_> = recs.iter().filter(|r| r["type"] == "call").collect();
    assert_eq!(calls.len(), 1, "{recs:#?}");
    let c = calls[0];
    assert_eq!(c["call_id"], CALL_ID);
    assert_eq!(c["final_status"], 200, "{c}");
    assert_eq!(c["ended_by"].as_str().map(|_| ()), Some(()), "{c}");
    let streams: Vec<_> = recs.iter().filter(|r| r["type"] == "stream").collect();
    assert_eq!(streams.len(), 2, "{recs:#?}");
    let fwd = streams
        .iter()
        .find(|s| s["src_ip"] == bench.host_ip.as_str())
        .unwrap();
    assert_eq!(fwd["call_id"], CALL_ID);
    assert_eq!(fwd["found_by"], "sdp");
    assert_eq!(fwd["src_port"], 40000);
    assert_eq!(fwd["dst_port"], 50000);
    // 19 distinct sequence numbers sent, one twice: 20 packets, 20 expected, RFC 3550 loss 0
    // (the duplicate makes up for the lost one), 1 missing, 1 duplicate
    assert_eq!(fwd["packets"], 20, "{fwd}");
    assert_eq!(fwd["expected"], 20, "{fwd}");
    assert_eq!(fwd["lost"], 0, "{fwd}");
    assert_eq!(fwd["missing"], 1, "{fwd}");
    assert_eq!(fwd["duplicates"], 1, "{fwd}");
    let back = streams
        .iter()
        .find(|s| s["src_ip"] == bench.peer_ip.as_str())
        .unwrap();
    assert_eq!(back["packets"], 10, "{back}");
    assert_eq!(back["expected"], 10, "{back}");
    assert_eq!(back["missing"], 0, "{back}");
    assert_eq!(back["duplicates"], 0, "{back}");
}

/// `weir voip -i` on the veth: the records equal `weir voip -r` on tcpdump's capture of the
/// same traffic, and hold the known figures; at SIGINT and at SIGTERM.
#[test]
fn live_records_equal_offline_on_tcpdumps_capture() {
    for signal in ["-INT", "-TERM"] {
        let bench = VethBench::new();
        let tmp = tempfile::tempdir().unwrap();
        let live = tmp.path().join("live.jsonl");
        let pcap = tmp.path().join("tcpdump.pcap");
        let err = tmp.path().join("err.txt");
        let dump = tcpdump(&bench, &pcap);
        let weir = Running::start(
            &["voip", "-i", &bench.host_if, "-w", live.to_str().unwrap()],
            &err,
            "analyzing SIP and RTP on",
        );
        call(&bench);
        // the last datagram was handed to the kernel; give both captures the same moment to
        // take it from their rings
        std::thread::sleep(Duration::from_millis(500));
        let (status, text) = weir.signal(signal);
        stop(dump);
        assert!(status.success(), "{signal}: {status} {text}");
        assert!(!text.contains("panicked"), "{text}");
        let got = lines(&live);
        check_known(&got, &bench);
        assert_eq!(
            got,
            offline(&pcap, &tmp.path().join("offline.jsonl"), &[]),
            "{signal}: {text}"
        );
    }
}

/// `weir voip -i --plot DIR`: the call's chart (CSV and SVG) is written when the call is over
/// and has lingered, before weir is stopped, and equals byte for byte the chart `weir voip -r
/// --plot` draws from tcpdump's capture of the same traffic; the records are equal too.
#[test]
fn live_plot_is_drawn_when_the_call_ends_and_equals_the_offline_plot() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let live = tmp.path().join("live.jsonl");
    let plot = tmp.path().join("charts");
    let pcap = tmp.path().join("tcpdump.pcap");
    let err = tmp.path().join("err.txt");
    let opts = ["--plot-interval", "0.1", "--call-linger", "0.5"];
    let dump = tcpdump(&bench, &pcap);
    let mut args = vec!["voip", "-i", &bench.host_if, "-w", live.to_str().unwrap()];
    args.extend(["--plot", plot.to_str().unwrap()]);
    args.extend(opts);
    let weir = Running::start(&args, &err, "analyzing SIP and RTP on");
    call(&bench);
    // the call is over (BYE, 200): its chart appears once it has lingered, weir still running
    let svg = plot.join("call-1-live-call-1_weir.test.svg");
    let t = std::time::Instant::now();
    while !svg.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no chart while running: {}",
            std::fs::read_to_string(&err).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, text) = weir.signal("-INT");
    stop(dump);
    assert!(status.success(), "{status} {text}");
    assert!(text.contains("weir: 1 charts in"), "{text}");
    let got = lines(&live);
    check_known(&got, &bench);
    let oplot = tmp.path().join("offline-charts");
    let mut extra = vec!["--plot", oplot.to_str().unwrap()];
    extra.extend(opts);
    assert_eq!(
        got,
        offline(&pcap, &tmp.path().join("offline.jsonl"), &extra),
        "{text}"
    );
    let charts = common::dir_files(&plot);
    assert_eq!(
        charts.len(),
        2,
        "{:?}",
        charts.iter().map(|c| &c.0).collect::<Vec<_>>()
    );
    assert_eq!(charts, common::dir_files(&oplot));
}

/// UDP packets in a capture file (or a store's segment), as tcpdump reads them.
fn udp_packets(file: &Path) -> usize {
    let o = common::run(
        Command::new("tcpdump")
            .args(["-n", "-r"])
            .arg(file)
            .arg("udp"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().lines().count()
}

/// `weir record --voip FILE`: the same records beside a store holding every UDP packet.
#[test]
fn record_writes_voip_records_beside_the_store() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("voip.jsonl");
    let store = tmp.path().join("store");
    let pcap = tmp.path().join("tcpdump.pcap");
    let err = tmp.path().join("err.txt");
    let dump = tcpdump(&bench, &pcap);
    let weir = Running::start(
        &[
            "record",
            "-i",
            &bench.host_if,
            "-o",
            store.to_str().unwrap(),
            "--voip",
            log.to_str().unwrap(),
            "--buffer-mib",
            "16",
        ],
        &err,
        "recording on",
    );
    call(&bench);
    std::thread::sleep(Duration::from_millis(500));
    let (status, text) = weir.signal("-INT");
    stop(dump);
    assert!(status.success(), "{status} {text}");
    assert!(text.contains("  voip: 1 calls, 2 RTP streams"), "{text}");
    let got = lines(&log);
    check_known(&got, &bench);
    assert_eq!(
        got,
        offline(&pcap, &tmp.path().join("offline.jsonl"), &[]),
        "{text}"
    );
    let stored: usize = common::segments(&store)
        .iter()
        .map(|s| udp_packets(s))
        .sum();
    // 7 SIP + 20 + 10 RTP datagrams
    assert_eq!(stored, 37);
    assert_eq!(stored, udp_packets(&pcap));
}

/// Hostile: a missing interface is a clear error before any output is made, for `weir voip -i`
/// and for `weir record --voip`; `-i` with `-r` is refused.
#[test]
fn missing_interface_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("voip.jsonl");
    let out = common::weir()
        .args(["voip", "-i", "weir-no-such0", "-w"])
        .arg(&log)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no such interface: weir-no-such0"), "{err}");
    assert!(!err.contains("panicked"));
    assert!(!log.exists());

    let store = tmp.path().join("store");
    let out = common::weir()
        .args(["record", "-i", "weir-no-such0", "-o"])
        .arg(&store)
        .arg("--voip")
        .arg(&log)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no such interface: weir-no-such0"), "{err}");
    assert!(!err.contains("panicked"));

    let out = common::weir()
        .args(["voip", "-i", "lo", "-r", "/dev/null"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("-i and -r"), "{err}");
}
