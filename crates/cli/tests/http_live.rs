//! `weir http -i` and `weir record --http` on a veth pair the test creates: Python's
//! http.server in a network namespace, curl from ours. The log must hold exactly the
//! transactions curl made (method, uri, status, body size and user agent as curl reports
//! them), and SIGINT/SIGTERM must write the transaction still pending (a request a silent
//! server never answers). Hostile cases: a missing interface, kill -9 (whole lines only).

mod common;

use std::path::Path;
use std::time::Duration;

use common::netns::VethBench;
use common::web::{files, pending_request, servers, traffic, Tx};
use common::Running;

fn logged(path: &Path) -> Vec<(Tx, String)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("whole JSON lines");
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            (
                (
                    s("method"),
                    s("uri"),
                    v["status_code"].as_u64().unwrap_or(0),
                    v["response_body_len"].as_u64().unwrap(),
                    s("user_agent"),
                ),
                s("end"),
            )
        })
        .collect()
}

/// `weir http -i` on the veth: exactly curl's transactions, and the pending one written at
/// SIGINT and at SIGTERM (status none, end `no_response`).
#[test]
fn live_log_has_exactly_the_transactions_and_signals_flush_pending() {
    for signal in ["-INT", "-TERM"] {
        let bench = VethBench::new();
        let tmp = tempfile::tempdir().unwrap();
        files(tmp.path());
        let _servers = servers(&bench, tmp.path());
        let log = tmp.path().join("http.jsonl");
        let err = tmp.path().join("err.txt");
        let weir = Running::start(
            &[
                "http",
                "-i",
                &bench.host_if,
                "-w",
                log.to_str().unwrap(),
                "tcp",
            ],
            &err,
            "analyzing HTTP and TLS on",
        );
        let mut want = traffic(&bench);
        let _open = pending_request(&bench);
        // the pending request reached weir once the silent server's kernel acknowledged it;
        // give the capture thread the same moment to pass it through the buffer
        std::thread::sleep(Duration::from_millis(500));
        let (status, text) = weir.signal(signal);
        assert!(status.success(), "{signal}: {status} {text}");
        assert!(!text.contains("panicked"), "{text}");
        let got = logged(&log);
        let mut got_tx: Vec<Tx> = got.iter().map(|g| g.0.clone()).collect();
        want.push(("GET".into(), "/pending".into(), 0, 0, "ua-pending".into()));
        want.sort();
        got_tx.sort();
        assert_eq!(got_tx, want, "{signal}: {text}");
        let pending = got.iter().find(|g| g.0 .1 == "/pending").unwrap();
        assert_eq!(pending.1, "no_response");
        // every other one complete
        assert_eq!(
            got.iter().filter(|g| g.1 == "complete").count(),
            5,
            "{got:?}"
        );
    }
}

/// `weir record --http FILE`: the recorder's buffer feeds the analyzer too; the log has curl's
/// transactions and the store holds the packets.
#[test]
fn record_logs_http_beside_the_store() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    files(tmp.path());
    let _servers = servers(&bench, tmp.path());
    let log = tmp.path().join("http.jsonl");
    let store = tmp.path().join("store");
    let err = tmp.path().join("err.txt");
    let weir = Running::start(
        &[
            "record",
            "-i",
            &bench.host_if,
            "-o",
            store.to_str().unwrap(),
            "--http",
            log.to_str().unwrap(),
            "--buffer-mib",
            "16",
        ],
        &err,
        "recording on",
    );
    let mut want = traffic(&bench);
    std::thread::sleep(Duration::from_millis(500));
    let (status, text) = weir.signal("-INT");
    assert!(status.success(), "{status} {text}");
    assert!(text.contains("  http: 5 transactions"), "{text}");
    let mut got: Vec<Tx> = logged(&log).into_iter().map(|g| g.0).collect();
    want.sort();
    got.sort();
    assert_eq!(got, want, "{text}");
    assert!(!common::segments(&store).is_empty());
}

/// Hostile: a missing interface is a clear error before any log is made; kill -9 leaves only
/// whole lines.
#[test]
fn missing_interface_and_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("http.jsonl");
    let out = common::weir()
        .args(["http", "-i", "weir-no-such0", "-w"])
        .arg(&log)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no such interface: weir-no-such0"), "{err}");
    assert!(!err.contains("panicked"));
    assert!(!log.exists());

    let bench = VethBench::new();
    files(tmp.path());
    let _servers = servers(&bench, tmp.path());
    let err = tmp.path().join("err.txt");
    let weir = Running::start(
        &["http", "-i", &bench.host_if, "-w", log.to_str().unwrap()],
        &err,
        "analyzing HTTP and TLS on",
    );
    let want = traffic(&bench);
    // past a one-second flush of the log
    std::thread::sleep(Duration::from_millis(2500));
    let (status, _) = weir.signal("-KILL");
    assert!(!status.success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "{text}");
    let got = logged(&log);
    assert!(got.len() <= want.len());
    for (tx, _) in &got {
        assert!(want.contains(tx), "{tx:?} not among {want:?}");
    }
}
