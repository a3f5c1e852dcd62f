//! `weir http -i` and `weir record --http` on a veth pair the test creates: Python's
//! http.server in a network namespace, curl from ours. The log must hold exactly the
//! transactions curl made (method, uri, status, body size and user agent as curl reports
//! them), and SIGINT/SIGTERM must write the transaction still pending (a request a silent
//! server never answers). Hostile cases: a missing interface, kill -9 (whole lines only).

mod common;

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::Running;

/// Processes started in the namespace (killed by pid when the test ends).
struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// http.server on PEER:8080 serving `dir`, and a server on PEER:8081 that reads and never
/// answers; returns once both accept connections.
fn servers(bench: &VethBench, dir: &Path) -> Servers {
    let ns = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &bench.ns])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let dir = dir.to_str().unwrap();
    let silent = "import socket,time\n\
                  s=socket.socket()\n\
                  s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
                  s.bind(('0.0.0.0',8081))\n\
                  s.listen(8)\n\
                  cs=[]\n\
                  while True:\n    c,_=s.accept()\n    cs.append(c)\n";
    let s = Servers(vec![
        ns(&[
            "python3",
            "-m",
            "http.server",
            "8080",
            "--bind",
            &bench.peer_ip,
            "--directory",
            dir,
        ]),
        ns(&["python3", "-c", silent]),
    ]);
    for port in [8080, 8081] {
        let t = Instant::now();
        let addr = format!("{}:{port}", bench.peer_ip);
        while TcpStream::connect(&addr).is_err() {
            assert!(t.elapsed() < Duration::from_secs(30), "no server on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    s
}

/// One curl request; returns (status, body bytes) as curl reports them.
fn curl(bench: &VethBench, method: &str, path: &str, ua: &str, data: Option<&str>) -> (u64, u64) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "-o",
        "/dev/null",
        "-A",
        ua,
        "-w",
        "%{http_code} %{size_download}",
    ]);
    match method {
        "HEAD" => {
            c.arg("-I");
        }
        m => {
            c.args(["-X", m]);
        }
    }
    if let Some(d) = data {
        c.args(["--data", d]);
    }
    c.arg(format!("http://{}:8080{path}", bench.peer_ip));
    let out = c.output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut it = text.split(' ').map(|v| v.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// Sends a whole request to the silent server and leaves the connection open (returned).
fn pending_request(bench: &VethBench) -> TcpStream {
    use std::io::Write;
    let mut s = TcpStream::connect(format!("{}:8081", bench.peer_ip)).unwrap();
    s.write_all(b"GET /pending HTTP/1.1\r\nHost: silent\r\nUser-Agent: ua-pending\r\n\r\n")
        .unwrap();
    s
}

type Tx = (String, String, u64, u64, String);

/// The requests the test makes, with what curl reported: (method, uri, status, body, UA).
fn traffic(bench: &VethBench) -> Vec<Tx> {
    let mut v = Vec::new();
    for (m, p, ua, data) in [
        ("GET", "/a.txt", "ua-get-a", None),
        ("GET", "/b.bin", "ua-get-b", None),
        ("GET", "/missing", "ua-missing", None),
        ("HEAD", "/a.txt", "ua-head", None),
        ("POST", "/a.txt", "ua-post", Some("x=1")),
    ] {
        let (code, size) = curl(bench, m, p, ua, data);
        v.push((m.to_string(), p.to_string(), code, size, ua.to_string()));
    }
    v
}

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

fn files(dir: &Path) {
    std::fs::write(dir.join("a.txt"), vec![b'a'; 1234]).unwrap();
    std::fs::write(dir.join("b.bin"), vec![7u8; 70_000]).unwrap();
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
    assert!(text.contains("weir: http: 5 transactions"), "{text}");
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
