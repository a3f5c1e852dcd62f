//! Prometheus helpers of the metrics tests: a scrape's samples, promtool's verdict on it, a
//! Prometheus server started for a test, its queries, and the plain HTTP GET they use.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The samples of a scrape: `name{labels}` as printed → value.
pub(crate) fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse().unwrap())
        })
        .collect()
}

/// `promtool check metrics` on `text`: no problem reported.
pub(crate) fn promtool_check(text: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.trim().is_empty(),
        "promtool: {}: {said}\n{text}",
        out.status
    );
}

/// A plain HTTP/1.0 GET: the status code and the body.
pub(crate) fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status: {head}"));
    (status, body.to_string())
}

/// `GET /metrics` from `addr`: the body (the status must be 200).
pub(crate) fn metrics_text(addr: &str) -> String {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The address the service says it serves metrics on (`metrics on http://ADDR/metrics`).
pub(crate) fn served(log: &str) -> String {
    let rest = log
        .split("metrics on http://")
        .nth(1)
        .unwrap_or_else(|| panic!("no metrics line: {log}"));
    rest.split('/').next().unwrap().to_string()
}

/// A free TCP port on loopback (bound, then released for the server to take).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `s` percent-encoded for a query string.
pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b == b'_' {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The one sample Prometheus' instant query `q` returns: (timestamp, value).
pub(crate) fn query(prom: &str, q: &str) -> Option<(f64, f64)> {
    let (status, body) = get(prom, &format!("/api/v1/query?query={}", encode(q)));
    assert_eq!(status, 200, "{q}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{body}");
    let result = v["data"]["result"].as_array()?;
    assert!(result.len() <= 1, "{q}: {body}");
    let pair = &result.first()?["value"];
    Some((pair[0].as_f64()?, pair[1].as_str()?.parse().ok()?))
}

/// A child we started, killed (by its pid) when dropped.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts a Prometheus server scraping `target` every second; returns it and its address.
pub(crate) fn prometheus(dir: &Path, target: &str) -> (Killed, String) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: \
             weir\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let prom = format!("127.0.0.1:{}", free_port());
    let prom_log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let server = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={prom}"))
            .stdout(Stdio::null())
            .stderr(prom_log)
            .spawn()
            .unwrap(),
    );
    let t = Instant::now();
    while !TcpStream::connect(&prom).is_ok_and(|_| get(&prom, "/-/ready").0 == 200) {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "prometheus not ready: {}",
            std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (server, prom)
}

/// The number after `before` in `text`.
pub(crate) fn number_after(text: &str, before: &str) -> u64 {
    let rest = match before {
        "" => text,
        _ => text
            .split(before)
            .nth(1)
            .unwrap_or_else(|| panic!("no {before:?} in {text}")),
    };
    rest.trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {before:?} in {text}"))
}
