//! A `weir run` record job with a live stream, on a veth pair in a network namespace made by
//! the test: the stream's counters are Prometheus series (scraped over HTTP, checked by
//! `promtool check metrics` when it is installed), and deleting the interface while it
//! records (`ip link del`) stops the job cleanly: the service says the interface disappeared,
//! prints the job's counters (the store holds what was recorded, by capinfos) and exits 1,
//! not a hang.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segments, weir};

/// capinfos' packet count of one file.
fn count(file: &Path) -> u64 {
    let out = run(Command::new("capinfos").args(["-c", "-M"]).arg(file));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("Number of packets"))
        .unwrap();
    line.rsplit(' ').next().unwrap().trim().parse().unwrap()
}

/// `GET /metrics` from `addr`: the body.
fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let at = text.find("\r\n\r\n").unwrap();
    text[at + 4..].to_string()
}

/// The value of the sample whose line starts with `series`.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn stream_series_and_a_deleted_interface_stops_the_job_cleanly() {
    if !weir_testkit::have("capinfos") {
        return;
    }
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    assert!(run(Command::new("mkfifo").arg(tmp.path().join("s.fifo")))
        .status
        .success());
    let config = tmp.path().join("weir.toml");
    std::fs::write(
        &config,
        format!(
            "[metrics]\nlisten = \"127.0.0.1:0\"\n\
             [[record]]\nname = \"rec\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp port 9500\"\n\
             [[stream]]\nname = \"nine\"\nto = \"s.fifo\"\nfilter = \"udp port 9500\"\n",
            b.host_if
        ),
    )
    .unwrap();
    let log_file = tmp.path().join("log");
    let mut child = weir()
        .arg("run")
        .arg(&config)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_file).unwrap())
        .spawn()
        .unwrap();
    let log_text = || std::fs::read_to_string(&log_file).unwrap_or_default();
    let t = Instant::now();
    while !log_text().contains("rec: recording on") {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", log_text());
        assert!(child.try_wait().unwrap().is_none(), "{}", log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = log_text();
    let addr = text
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("{text}"))
        .to_string();
    b.send_udp(9500, 50, 20);
    // the stream has no reader: every matching packet is dropped, counted
    let label = "{weir_job=\"rec\",stream=\"nine\"}";
    let t = Instant::now();
    let m = loop {
        let m = scrape(&addr);
        if sample(&m, &format!("weir_stream_dropped_packets_total{label}")) == Some(50) {
            break m;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{m}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        sample(&m, &format!("weir_stream_matched_packets_total{label}")),
        Some(50),
        "{m}"
    );
    assert_eq!(
        sample(&m, &format!("weir_stream_written_packets_total{label}")),
        Some(0),
        "{m}"
    );
    assert_eq!(
        sample(&m, &format!("weir_stream_attached{label}")),
        Some(0),
        "{m}"
    );
    assert!(
        m.contains("# TYPE weir_stream_matched_packets_total counter"),
        "{m}"
    );
    if weir_testkit::have("promtool") {
        let f = tmp.path().join("m.txt");
        std::fs::write(&f, &m).unwrap();
        let out = run(Command::new("sh")
            .arg("-c")
            .arg(format!("promtool check metrics < {}", f.display())));
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // the interface goes away while the job records
    assert!(run(Command::new("ip").args(["link", "del", &b.host_if]))
        .status
        .success());
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "weir run hangs after the interface went: {}",
            log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = log_text();
    eprintln!(
        "weir run ended {:.2} s after ip link del",
        t.elapsed().as_secs_f64()
    );
    assert_eq!(status.code(), Some(1), "{log}");
    assert!(log.contains("is gone: stopping the job"), "{log}");
    assert!(
        log.contains(&format!(
            "weir: error: rec: interface {} disappeared while recording",
            b.host_if
        )),
        "{log}"
    );
    assert!(
        log.contains("rec (") && log.contains("50 packets recorded"),
        "{log}"
    );
    assert!(log.contains("job(s) failed: rec"), "{log}");
    assert!(!log.contains("panicked"), "{log}");
    let stored: u64 = segments(&tmp.path().join("s"))
        .iter()
        .map(|s| count(s))
        .sum();
    assert_eq!(stored, 50, "{log}");
}
