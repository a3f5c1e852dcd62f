//! Prometheus metrics of the live jobs (`--metrics ADDR`), on veth pairs in network namespaces
//! made by the test; UDP datagrams are sent from inside the namespace to our side.
//!
//! * `promtool check metrics` (Debian's `prometheus` package) on scrapes taken while `weir
//!   record` (with flows and rules) and `weir capture` run: no lint problem, and the values
//!   are what was sent (the rules' drop rule in the kernel filter, the pass rule's counter) and
//!   what the final summary and capinfos count.
//! * A real Prometheus server (started by the test with its own config and storage in a temp
//!   dir, scraping every second) scrapes `weir record` during a live run; its HTTP API
//!   (`/api/v1/query`) gives, for a scrape taken after the counts settled, the same packets
//!   received by the kernel, read by capture and recorded as weir's final summary.
//! * Hostile addresses: a bad one is a usage error, a port in use or a missing interface a
//!   clear error, each before anything is captured or created.

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::netns::VethBench;
use common::prom::{get, number_after, prometheus, promtool_check, query, samples, served};
use common::{run, weir, Running};

/// The scrape of weir's server at `addr`.
fn scrape(addr: &str) -> (String, BTreeMap<String, f64>) {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    let s = samples(&body);
    (body, s)
}

/// Scrapes until `done` holds (the counters settled), at most 30 s; returns that scrape.
fn settle(
    addr: &str,
    done: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> (String, BTreeMap<String, f64>) {
    let t = Instant::now();
    loop {
        let (body, s) = scrape(addr);
        if done(&s) {
            return (body, s);
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "never settled: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The packets `capinfos` counts in a file.
fn capinfos_count(file: &Path) -> u64 {
    let out = run(Command::new("capinfos").args(["-M", "-c"]).arg(file));
    assert!(out.status.success());
    number_after(&String::from_utf8_lossy(&out.stdout), "Number of packets:")
}

#[test]
fn promtool_checks_live_scrapes() {
    if !weir_testkit::have("promtool") || !weir_testkit::have("capinfos") {
        return;
    }
    let b = VethBench::new();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("r.rules");
    std::fs::write(
        &rules,
        "id 7 proto udp dport 5556 -> drop\nid 8 proto udp dport 5555 -> pass\n",
    )
    .unwrap();
    let store = dir.path().join("store");
    let log = dir.path().join("rec.log");
    let rec = Running::start(
        &[
            "record",
            "-i",
            &b.host_if,
            "-o",
            store.to_str().unwrap(),
            "--buffer-mib",
            "16",
            "--flows",
            "--rules",
            rules.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
            "udp",
        ],
        &log,
        "recording on",
    );
    let addr = served(&rec.text());
    b.send_udp(5555, 200, 40);
    b.send_udp(5556, 50, 40);
    let iface = format!("{{interface=\"{}\"}}", b.host_if);
    let read = format!("weir_capture_read_packets_total{iface}");
    let rule8 = "weir_rule_matched_packets_total{rule=\"8\",action=\"pass\"}";
    let (text, s) = settle(&addr, |s| {
        s.get("weir_writer_packets_total") == Some(&200.0)
            && s.get("weir_flows_packets_total") == Some(&200.0)
            && s.get("weir_kernel_rules_dropped_packets_total") == Some(&50.0)
            // one flow (one socket to port 5555), in the table as of the meter's last tick
            && s.get("weir_flows_active") == Some(&1.0)
            && s.get("weir_flows_created_total") == Some(&1.0)
    });
    promtool_check(&text);
    assert_eq!(s[&read], 200.0, "{text}");
    assert_eq!(s[rule8], 200.0, "{text}");
    assert_eq!(
        s["weir_rule_verdict_packets_total{rule=\"8\",action=\"pass\",verdict=\"passed\"}"],
        200.0
    );
    assert_eq!(s["weir_rules_packets_total{verdict=\"passed\"}"], 200.0);
    assert_eq!(s["weir_buffer_dropped_packets_total{reason=\"full\"}"], 0.0);
    assert!(s["process_cpu_seconds_total"] > 0.0, "{text}");
    assert!(s["process_resident_memory_bytes"] > 0.0, "{text}");
    assert!(s["weir_store_filesystem_avail_bytes"] > 0.0, "{text}");
    let (status, err) = rec.signal("-INT");
    assert!(status.success(), "{err}");
    assert_eq!(number_after(&err, "weir record: "), 200, "{err}");

    // `weir capture`: the scrape's written packets are the file's (capinfos).
    let pcap = dir.path().join("c.pcapng");
    let log = dir.path().join("cap.log");
    let cap = Running::start(
        &[
            "capture",
            "-i",
            &b.host_if,
            "-w",
            pcap.to_str().unwrap(),
            "--metrics",
            "127.0.0.1:0",
            "udp port 5555",
        ],
        &log,
        "capturing on",
    );
    let addr = served(&cap.text());
    b.send_udp(5555, 30, 10);
    let kernel = format!("weir_kernel_received_packets_total{iface}");
    let (text, s) = settle(&addr, |s| {
        s.get("weir_writer_packets_total") == Some(&30.0) && s.get(&kernel) == Some(&30.0)
    });
    promtool_check(&text);
    assert_eq!(s[&read], 30.0, "{text}");
    let (status, err) = cap.signal("-INT");
    assert!(status.success(), "{err}");
    assert_eq!(capinfos_count(&pcap), 30);
}

#[test]
fn prometheus_scrapes_a_live_record() {
    if !weir_testkit::have("prometheus") {
        return;
    }
    let b = VethBench::new();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let log = dir.path().join("rec.log");
    let rec = Running::start(
        &[
            "record",
            "-i",
            &b.host_if,
            "-o",
            store.to_str().unwrap(),
            "--buffer-mib",
            "16",
            "--metrics",
            "127.0.0.1:0",
            "udp port 5555",
        ],
        &log,
        "recording on",
    );
    let addr = served(&rec.text());

    let (_server, prom) = prometheus(dir.path(), &addr);

    b.send_udp(5555, 300, 100);
    let kernel = format!(
        "weir_kernel_received_packets_total{{interface=\"{}\"}}",
        b.host_if
    );
    let read = format!(
        "weir_capture_read_packets_total{{interface=\"{}\"}}",
        b.host_if
    );
    settle(&addr, |s| {
        s.get("weir_writer_packets_total") == Some(&300.0)
            && s.get(&kernel) == Some(&300.0)
            && s.get(&read) == Some(&300.0)
    });
    let settled = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    // Wait for a scrape that started after the counts settled.
    let t = Instant::now();
    while query(&prom, "timestamp(weir_writer_packets_total)").is_none_or(|(_, ts)| ts <= settled) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no scrape after the counts settled: {:?}",
            query(&prom, "up")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let value = |q: &str| query(&prom, q).unwrap_or_else(|| panic!("no {q}")).1;
    let recorded = value("weir_writer_packets_total");
    let received = value(&kernel);
    let captured = value(&read);
    assert_eq!(value("up{job=\"weir\"}"), 1.0);
    assert!(value("process_cpu_seconds_total") > 0.0);

    let (status, err) = rec.signal("-INT");
    assert!(status.success(), "{err}");
    assert_eq!(
        recorded,
        number_after(&err, "weir record: ") as f64,
        "{err}"
    );
    assert_eq!(received, number_after(&err, "kernel: ") as f64, "{err}");
    assert_eq!(captured, number_after(&err, "capture: ") as f64, "{err}");
    assert_eq!(recorded, 300.0);
}

#[test]
fn bad_addresses_fail_before_capture() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    for (cmd, addr) in [
        ("record", "127.0.0.1:99999"),
        ("record", "127.0.0.1"),
        ("capture", "127.0.0.1:-1"),
        ("capture", "no-such-host.invalid:9637"),
    ] {
        let mut c = weir();
        c.args([cmd, "-i", "lo"]);
        if cmd == "record" {
            c.arg("-o").arg(&store);
        }
        let out = run(c.args(["--metrics", addr]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd} {addr}: {err}");
        assert!(
            err.contains("bad metrics address") && err.contains("HOST:PORT"),
            "{err}"
        );
    }
    // A port in use: a clear error, before the store is made or capture starts.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for cmd in ["record", "capture"] {
        let mut c = weir();
        c.args([cmd, "-i", "lo", "--duration", "1", "--metrics", &addr]);
        if cmd == "record" {
            c.arg("-o").arg(&store);
        }
        let out = run(&mut c);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{cmd}: {err}");
        assert!(
            err.contains(&format!(
                "weir: error: cannot listen for metrics on {addr}: Address already in use"
            )),
            "{cmd}: {err}"
        );
        assert!(!err.contains(" on lo "), "{cmd} started capture: {err}");
    }
    assert!(!store.exists(), "the store was made");
    // A missing interface: its error, and the metrics server does not keep weir alive.
    let out = run(weir().args([
        "capture",
        "-i",
        "weirnosuch0",
        "-c",
        "1",
        "--metrics",
        "127.0.0.1:0",
    ]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("weirnosuch0"), "{err}");
}

/// `kill -9` while scrapes were served: a new weir takes the same port at once (the old
/// connections' TIME_WAIT does not block it), and its scrape works.
#[test]
fn the_port_is_free_again_after_kill_9() {
    let b = VethBench::new();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("c.pcapng");
    let args = |addr: &str| {
        [
            "capture",
            "-i",
            &b.host_if,
            "-w",
            out.to_str().unwrap(),
            "--metrics",
            addr,
            "udp port 5555",
        ]
        .map(str::to_owned)
    };
    let first_args = args("127.0.0.1:0");
    let first_args: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let first = Running::start(&first_args, &dir.path().join("1.log"), "capturing on");
    let addr = served(&first.text());
    for _ in 0..3 {
        scrape(&addr);
    }
    let (status, _) = first.signal("-KILL");
    assert!(!status.success());
    let again_args = args(&addr);
    let again_args: Vec<&str> = again_args.iter().map(String::as_str).collect();
    let again = Running::start(&again_args, &dir.path().join("2.log"), "capturing on");
    assert_eq!(served(&again.text()), addr);
    b.send_udp(5555, 5, 0);
    let kernel = format!(
        "weir_kernel_received_packets_total{{interface=\"{}\"}}",
        b.host_if
    );
    settle(&addr, |s| {
        s.get("weir_writer_packets_total") == Some(&5.0) && s.get(&kernel) == Some(&5.0)
    });
    let (status, err) = again.signal("-INT");
    assert!(status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains(" packets written in "))
        .unwrap_or_else(|| panic!("no summary: {err}"));
    assert_eq!(number_after(line, "weir: "), 5, "{err}");
}
