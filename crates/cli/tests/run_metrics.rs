//! Prometheus metrics of `weir run` (`[metrics] listen = ...`), on two veth pairs in network
//! namespaces made by the test: one process records both interfaces, each with a flow meter
//! exporting IPFIX to a UDP socket of the test (job `one` also with rules).
//!
//! * `promtool check metrics` (Debian's `prometheus` package) on a live scrape: no problem.
//! * The scrape has both jobs' series, each labelled `weir_job`, with what was sent: packets
//!   recorded, the rule's counter, flows created, IPFIX datagrams per sink while the job runs
//!   (the test's socket received exactly that many), interface and softnet series present.
//! * A real Prometheus server (its own config and storage in a temp dir, scraping every second)
//!   scrapes the service; its HTTP API gives, for a scrape after the counts settled, the same
//!   values as the service's final summary after SIGTERM (recorded, kernel received, capture
//!   read per job; flow records and datagrams per sink).
//! * A bad `[metrics] listen` is refused by `--check` with its line and key; a port in use
//!   stops `weir run` before any job starts.

mod common;

use std::collections::BTreeMap;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::netns::VethBench;
use common::prom::{get, number_after, prometheus, promtool_check, query, samples, served};
use common::{run, weir, Running};

/// Writes `text` as a config file `name` in `dir`.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Datagrams waiting on `sock` (non-blocking drain).
fn datagrams(sock: &UdpSocket) -> u64 {
    let mut n = 0;
    let mut buf = [0u8; 65536];
    while sock.recv(&mut buf).is_ok() {
        n += 1;
    }
    n
}

#[test]
fn prometheus_scrapes_every_job_of_weir_run() {
    if !weir_testkit::have("prometheus") || !weir_testkit::have("promtool") {
        return;
    }
    let (b1, b2) = (VethBench::new(), VethBench::new());
    let tmp = tempfile::tempdir().unwrap();
    let collectors: Vec<UdpSocket> = (0..2)
        .map(|_| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            s
        })
        .collect();
    let port = |i: usize| collectors[i].local_addr().unwrap().port();
    write(
        tmp.path(),
        "one.rules",
        "id 7 dport 9999 -> drop\nid 8 dport 9000 -> pass\n",
    );
    let config = write(
        tmp.path(),
        "weir.toml",
        &format!(
            "[metrics]\nlisten = \"127.0.0.1:0\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"s1\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\nrules = \"one.rules\"\n\
             kernel_rules = false\n\
             [record.flows]\nexport = \"udp://127.0.0.1:{}\"\nidle_timeout_s = 1\n\
             [[record]]\nname = \"two\"\ninterface = \"{}\"\nstore = \"s2\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\n\
             [record.flows]\nexport = \"udp://127.0.0.1:{}\"\nidle_timeout_s = 1\n",
            b1.host_if,
            port(0),
            b2.host_if,
            port(1)
        ),
    );
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &tmp.path().join("log"),
        "two: recording on",
    );
    let addr = served(&svc.text());
    let (_prom_server, prom) = prometheus(tmp.path(), &addr);

    b1.send_udp_flows(9000, 2, 200, 50);
    b1.send_udp(9999, 50, 50);
    b2.send_udp_flows(9001, 3, 300, 80);

    // Settle: everything recorded, every flow ended by the idle timeout and exported.
    let w = |j: &str| format!("weir_writer_packets_total{{weir_job=\"{j}\"}}");
    let created = |j: &str| format!("weir_flows_created_total{{weir_job=\"{j}\"}}");
    let ended = |j: &str| format!("weir_flows_ended_total{{weir_job=\"{j}\",reason=\"idle\"}}");
    let sink = |i: usize| format!("ipfix udp://127.0.0.1:{}", port(i));
    let dgrams = |j: &str, i: usize| {
        format!(
            "weir_export_datagrams_total{{weir_job=\"{j}\",sink=\"{}\"}}",
            sink(i)
        )
    };
    let recs = |j: &str, i: usize| {
        format!(
            "weir_export_records_total{{weir_job=\"{j}\",sink=\"{}\"}}",
            sink(i)
        )
    };
    let t = Instant::now();
    let (text, s) = loop {
        let (status, body) = get(&addr, "/metrics");
        assert_eq!(status, 200, "{body}");
        let s = samples(&body);
        let is = |k: &str, v: f64| s.get(k) == Some(&v);
        if is(&w("one"), 200.0)
            && is(&w("two"), 300.0)
            && is(&ended("one"), 2.0)
            && is(&ended("two"), 3.0)
            && is(&recs("one", 0), 2.0)
            && is(&recs("two", 1), 3.0)
        {
            break (body, s);
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "never settled: {body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    promtool_check(&text);
    // The process series once, each job's series labelled with the job.
    assert_eq!(text.matches("\nprocess_cpu_seconds_total ").count(), 1);
    for l in text.lines().filter(|l| l.starts_with("weir_")) {
        assert!(l.contains("{weir_job=\""), "{l}");
    }
    // two sockets to 9000 (the rules drop port 9999 before the buffer: the meter never sees it)
    assert_eq!(s[&created("one")], 2.0);
    assert_eq!(s[&created("two")], 3.0);
    let rule = |id: &str, action: &str| {
        format!(
            "weir_rule_matched_packets_total{{weir_job=\"one\",rule=\"{id}\",action=\"{action}\"}}"
        )
    };
    assert_eq!(s[&rule("7", "drop")], 50.0, "{text}");
    assert_eq!(s[&rule("8", "pass")], 200.0, "{text}");
    for (j, b) in [("one", &b1), ("two", &b2)] {
        let iface = format!("{{weir_job=\"{j}\",interface=\"{}\"}}", b.host_if);
        for fam in [
            "weir_kernel_received_packets_total",
            "weir_kernel_dropped_packets_total",
            "weir_interface_rx_dropped_packets_total",
            "weir_interface_rx_missed_packets_total",
            "weir_capture_read_packets_total",
        ] {
            assert!(
                s.contains_key(&format!("{fam}{iface}")),
                "{fam}{iface}: {text}"
            );
        }
        for fam in [
            "weir_softnet_backlog_dropped_packets_total",
            "weir_buffer_fill_ratio",
            "weir_store_written_bytes_total",
            "weir_store_filesystem_avail_bytes",
            "weir_store_segments_started_total",
            "weir_store_retention_deleted_segments_total",
            "weir_flows_peak",
            "weir_flows_evicted_total",
        ] {
            assert!(
                s.contains_key(&format!("{fam}{{weir_job=\"{j}\"}}")),
                "{fam} of {j}: {text}"
            );
        }
    }
    // The datagrams the live series count are those the collectors received.
    let got = [datagrams(&collectors[0]), datagrams(&collectors[1])];
    assert!(got[0] > 0 && got[1] > 0, "{got:?}");
    assert_eq!(s[&dgrams("one", 0)], got[0] as f64, "{text}");
    assert_eq!(s[&dgrams("two", 1)], got[1] as f64, "{text}");

    // Prometheus' own view, from a scrape that started after the counts settled.
    let settled = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let t = Instant::now();
    while query(&prom, &format!("timestamp({})", w("two"))).is_none_or(|(_, ts)| ts <= settled) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no scrape after the counts settled: {:?}",
            query(&prom, "up")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let value = |q: &str| query(&prom, q).unwrap_or_else(|| panic!("no {q}")).1;
    assert_eq!(value("up{job=\"weir\"}"), 1.0);
    let mut scraped = BTreeMap::new();
    for (j, b) in [("one", &b1), ("two", &b2)] {
        let iface = format!("{{weir_job=\"{j}\",interface=\"{}\"}}", b.host_if);
        scraped.insert((j, "recorded"), value(&w(j)));
        scraped.insert(
            (j, "kernel"),
            value(&format!("weir_kernel_received_packets_total{iface}")),
        );
        scraped.insert(
            (j, "read"),
            value(&format!("weir_capture_read_packets_total{iface}")),
        );
    }
    scraped.insert(("one", "datagrams"), value(&dgrams("one", 0)));
    scraped.insert(("two", "datagrams"), value(&dgrams("two", 1)));
    scraped.insert(("one", "records"), value(&recs("one", 0)));
    scraped.insert(("two", "records"), value(&recs("two", 1)));

    let (status, err) = svc.signal("-TERM");
    assert!(status.success(), "{err}");
    for (j, b) in [("one", &b1), ("two", &b2)] {
        let part = err
            .split(&format!("weir run: {j} ({}): ", b.host_if))
            .nth(1)
            .unwrap_or_else(|| panic!("no summary of {j}: {err}"));
        assert_eq!(scraped[&(j, "recorded")], number_after(part, "") as f64);
        assert_eq!(
            scraped[&(j, "kernel")],
            number_after(part, "kernel: ") as f64
        );
        assert_eq!(
            scraped[&(j, "read")],
            number_after(part, "capture: ") as f64
        );
    }
    for (j, i) in [("one", 0), ("two", 1)] {
        let line = format!("  {}: ", sink(i));
        let part = err
            .split(&format!("weir: {j}: flows:"))
            .nth(1)
            .and_then(|p| p.split(&line).nth(1))
            .unwrap_or_else(|| panic!("no flows summary of {j}: {err}"));
        assert_eq!(
            scraped[&(j, "records")],
            number_after(part, "") as f64,
            "{err}"
        );
        assert_eq!(
            scraped[&(j, "datagrams")],
            number_after(part, "records, ") as f64,
            "{err}"
        );
    }
    assert_eq!(scraped[&("one", "recorded")], 200.0);
    assert_eq!(scraped[&("two", "recorded")], 300.0);
}

#[test]
fn bad_metrics_settings() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().display().to_string();
    let base = format!("[[record]]\ninterface = \"lo\"\nstore = \"{d}/s\"\n");
    for (text, at) in [
        (
            format!("[metrics]\nlisten = \"127.0.0.1:99999\"\n{base}"),
            "2:10: metrics.listen",
        ),
        (
            format!("[metrics]\nlisten = \"127.0.0.1\"\n{base}"),
            "2:10: metrics.listen",
        ),
        (
            format!("[metrics]\nlisten = \"\"\n{base}"),
            "2:10: metrics.listen",
        ),
        (format!("[metrics]\nlisten = -1\n{base}"), "2:10:"),
        (format!("[metrics]\nport = 9637\n{base}"), "2:1:"),
    ] {
        let file = write(tmp.path(), "c.toml", &text);
        let out = run(weir().args(["run", "--check"]).arg(&file));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}: {err}");
        let want = format!("weir: error: {}:{at}", file.display());
        assert!(err.starts_with(&want), "{text}\nwant {want}\ngot {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // `[metrics]` with no listen: the default address.
    let file = write(tmp.path(), "c.toml", &format!("[metrics]\n{base}"));
    let out = run(weir().args(["run", "--check"]).arg(&file));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("metrics on http://127.0.0.1:9637/metrics"),
        "{said}"
    );
    // A port in use: `weir run` stops before any job starts (nothing created).
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let file = write(
        tmp.path(),
        "c.toml",
        &format!(
            "[metrics]\nlisten = \"{}\"\n{base}",
            busy.local_addr().unwrap()
        ),
    );
    let out = run(weir().arg("run").arg(&file));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot listen for metrics on"), "{err}");
    assert!(!tmp.path().join("s").exists(), "{err}");
}
