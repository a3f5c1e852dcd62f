//! The AF_XDP backend (`--backend xdp`) on veth pairs in network namespaces made by the test.
//!
//! Once weir's XDP program redirects an interface's packets to its sockets, tcpdump on that
//! interface no longer sees them, so the oracle is the traffic the test itself sends: every
//! datagram's bytes are known (`WEIR` + sequence number + filler, from the namespace's address
//! to ours), and the capture file read back by tshark must hold exactly those frames, in order,
//! with the summary's counters reconciling (sent = written + every drop counter, none silent).
//! After weir exits, normally or by `kill -9`, the interface has no XDP program. Bad uses
//! (loopback, a missing or down interface, `-r` with `--backend`, an unknown backend, a second
//! capture on an interface that already has an XDP program) fail with clear errors.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, tshark_fields, weir, Running};

/// Whether `ip link show IFACE` shows an XDP program (`prog/xdp`, or the `xdp`/`xdpgeneric`
/// flag word on the first line).
fn has_xdp(iface: &str) -> bool {
    let out = run(Command::new("ip").args(["-d", "link", "show", iface]));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    text.contains("prog/xdp")
        || text
            .split_whitespace()
            .any(|w| matches!(w, "xdp" | "xdpgeneric" | "xdpdrv" | "xdpoffload"))
}

/// A number that follows `label` in `text` (`"kernel: "` → the number after it).
fn number_after(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in: {text}"))
        + label.len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {label:?} in: {text}"))
}

/// (frame length, captured length, source, destination, UDP destination port, UDP payload hex)
/// of every frame of a file.
fn frames(file: &Path) -> Vec<(u64, u64, String, String, String, String)> {
    let fields = [
        "frame.len",
        "frame.cap_len",
        "ip.src",
        "ip.dst",
        "udp.dstport",
        "udp.payload",
    ];
    tshark_fields(file, &fields)
        .into_iter()
        .map(|f| {
            let [len, cap, src, dst, port, payload] = <[String; 6]>::try_from(f).expect("6");
            (
                len.parse().unwrap(),
                cap.parse().unwrap(),
                src,
                dst,
                port,
                payload,
            )
        })
        .collect()
}

/// Starts `weir ARGS` with its stderr in `log`, returns once `banner` is in it (the process
/// fails the test if it exits first).
fn start(args: &[&str], log: &Path, banner: &str) -> std::process::Child {
    let mut child = weir()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(banner) {
            return child;
        }
        if let Some(s) = child.try_wait().unwrap() {
            panic!("exited ({s}) before its banner: {text}");
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no banner: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (up to a minute) for a child to end by itself; returns its status and stderr log.
fn finish(mut child: std::process::Child, log: &Path) -> (std::process::ExitStatus, String) {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return (s, std::fs::read_to_string(log).unwrap());
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("did not finish: {}", std::fs::read_to_string(log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn xdp_capture_equals_the_traffic_sent_and_detaches() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("xdp.pcapng");
    let log = tmp.path().join("weir.log");
    let (n, pad) = (3000u32, 100usize);
    let w_s = w.to_str().unwrap();
    let count = n.to_string();
    let child = start(
        &[
            "capture",
            "-i",
            &bench.host_if,
            "--backend",
            "xdp",
            "-c",
            &count,
            "-w",
            w_s,
            "udp port 9999",
        ],
        &log,
        "capturing on",
    );
    let start = std::fs::read_to_string(&log).unwrap();
    assert!(has_xdp(&bench.host_if), "program attached while running");
    assert!(
        start.contains(&format!("AF_XDP on {}: 1 socket(s)", bench.host_if)),
        "{start}"
    );
    assert!(
        start.contains("copy mode"),
        "veth has no zero-copy: {start}"
    );
    assert!(
        start.contains("software timestamps at receive (AF_XDP)"),
        "{start}"
    );
    assert!(
        start.contains("attached in native (driver) mode"),
        "{start}"
    );
    bench.send_udp(9999, n, pad);
    let (status, text) = finish(child, &log);
    assert!(status.success(), "{text}");

    // The oracle: the frames the test sent, byte for byte.
    let f = frames(&w);
    assert_eq!(
        f.len(),
        n as usize,
        "every datagram sent was written: {text}"
    );
    let wire = 14 + 20 + 8 + 8 + pad as u64;
    let filler = "78".repeat(pad);
    for (i, fr) in f.iter().enumerate() {
        let expect = format!("57454952{i:08x}{filler}");
        assert_eq!(
            fr,
            &(
                wire,
                wire,
                bench.peer_ip.clone(),
                bench.host_ip.clone(),
                "9999".to_string(),
                expect
            ),
            "frame {i}"
        );
    }

    // The counters reconcile: sent = written + every drop counter, each one reported.
    let kernel = number_after(&text, "kernel: ");
    let dropped = number_after(&text, " received, ");
    let read = number_after(&text, "capture: ");
    let filtered = number_after(&text, " read, ");
    let rx_dropped = number_after(&text, "rx_dropped ");
    let ring_full = number_after(&text, "rx_ring_full ");
    let invalid = number_after(&text, "rx_invalid_descs ");
    let fill_empty = number_after(&text, "rx_fill_ring_empty_descs ");
    let buffer_full = number_after(&text, "buffer: ");
    assert_eq!(kernel, read + dropped, "{text}");
    assert_eq!(dropped, rx_dropped + ring_full, "{text}");
    assert_eq!(
        u64::from(n),
        read - filtered + dropped + buffer_full,
        "sent = written + drops: {text}"
    );
    assert_eq!(
        (dropped, invalid, fill_empty, buffer_full),
        (0, 0, 0, 0),
        "{text}"
    );

    // Detached on exit.
    assert!(!has_xdp(&bench.host_if), "no XDP program after exit");
}

#[test]
fn kill_9_detaches_the_program() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("k.pcapng");
    let r = Running::start(
        &[
            "capture",
            "-i",
            &bench.host_if,
            "--backend",
            "xdp",
            "-w",
            w.to_str().unwrap(),
        ],
        &tmp.path().join("k.log"),
        "capturing on",
    );
    assert!(has_xdp(&bench.host_if));
    let (status, _) = r.signal("-KILL");
    assert!(!status.success());
    // The link's descriptor closed with the process: the kernel detached the program.
    assert!(!has_xdp(&bench.host_if), "no XDP program after kill -9");
    // And the interface takes a new capture.
    let out = run(weir().args([
        "capture",
        "-i",
        &bench.host_if,
        "--backend",
        "xdp",
        "-c",
        "5",
        "-w",
        w.to_str().unwrap(),
        "--duration",
        "0.5",
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_second_xdp_program_is_refused_by_name() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("a.pcapng");
    let first = Running::start(
        &[
            "capture",
            "-i",
            &bench.host_if,
            "--backend",
            "xdp",
            "-w",
            w.to_str().unwrap(),
        ],
        &tmp.path().join("a.log"),
        "capturing on",
    );
    let out = run(weir().args([
        "capture",
        "-i",
        &bench.host_if,
        "--backend",
        "xdp",
        "-c",
        "1",
        "-w",
        tmp.path().join("b.pcapng").to_str().unwrap(),
    ]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("another XDP program is already attached"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    // The first capture still runs and still owns the interface.
    assert!(has_xdp(&bench.host_if));
    let (status, text) = first.signal("-INT");
    assert!(status.success(), "{text}");
    assert!(!has_xdp(&bench.host_if));
}

#[test]
fn bad_uses_of_the_backend_fail_clearly() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let w = tmp.path().join("x.pcapng");
    let ws = w.to_str().unwrap();
    let file = tmp.path().join("in.pcap");
    std::fs::write(
        &file,
        [
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ],
    )
    .unwrap();
    let store = tmp.path().join("store");
    let down = VethBench::new();
    run(Command::new("ip").args(["link", "set", &down.host_if, "down"]));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "capture",
                "-i",
                "lo",
                "--backend",
                "xdp",
                "-c",
                "1",
                "-w",
                ws,
            ],
            "loopback interface has no AF_XDP path (neither capture nor send): use --backend packet",
        ),
        (
            vec![
                "capture",
                "-i",
                "nosuch0",
                "--backend",
                "xdp",
                "-c",
                "1",
                "-w",
                ws,
            ],
            "no such interface: nosuch0",
        ),
        (
            vec![
                "capture",
                "-i",
                &down.host_if,
                "--backend",
                "xdp",
                "-c",
                "1",
                "-w",
                ws,
            ],
            "That device is not up",
        ),
        (
            vec![
                "record",
                "-r",
                file.to_str().unwrap(),
                "--backend",
                "xdp",
                "-o",
                store.to_str().unwrap(),
            ],
            "--backend is for live capture",
        ),
        (
            vec![
                "capture",
                "-i",
                &bench.host_if,
                "--backend",
                "foo",
                "-w",
                ws,
            ],
            "invalid value 'foo' for '--backend",
        ),
        (
            vec![
                "capture",
                "-i",
                &bench.host_if,
                "--backend",
                "xdp",
                "--threads",
                "2",
                "-c",
                "1",
                "-w",
                ws,
            ],
            "--threads does not apply to the AF_XDP backend",
        ),
    ];
    for (args, want) in cases {
        let out = run(weir().args(&args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!has_xdp(&bench.host_if), "{args:?} left a program");
    }
}
