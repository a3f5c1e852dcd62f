//! `weir top` and the web page of `weir run`, against a running service on a veth pair.
//!
//! * `weir top --socket S --once` prints one frame whose recorded and received counts are what
//!   was sent (300) and whose stream row shows the stream's counters; without `--once` on a
//!   pipe, and with a missing socket, it says why and exits 1.
//! * `[web] listen`: a real headless Chromium (Debian's) loads the page, runs its script (which
//!   polls `/api/live`) and the DOM it dumps shows the live counters of the running process
//!   (received 300, recorded 300, the pid) and a chart; `/api/live` over plain HTTP agrees;
//!   a POST is refused (read-only); a bad `[web] listen` is refused by `--check` with its line.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, weir, Running};
use serde_json::Value;

fn http(addr: &str, req: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

fn ctl_counters(sock: &Path) -> Value {
    let out = run(weir()
        .arg("ctl")
        .arg("--socket")
        .arg(sock)
        .args(["--json", "counters"]));
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// The text of the cell of class `class` in the row of id `row`, in `dom`.
fn cell(dom: &str, row: &str, class: &str) -> String {
    let r = dom
        .find(&format!("id=\"{row}\""))
        .unwrap_or_else(|| panic!("no row {row} in {dom}"));
    let rest = &dom[r..];
    let c = rest
        .find(&format!("class=\"{class}\">"))
        .unwrap_or_else(|| panic!("no {class} in {rest}"));
    let rest = &rest[c + class.len() + 9..];
    rest[..rest.find('<').unwrap()].to_string()
}

#[test]
fn top_and_the_web_page_show_the_live_counters() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("s.fifo");
    assert!(run(Command::new("mkfifo").arg(&fifo)).status.success());
    let cfg = tmp.path().join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "[control]\nsocket = \"control.sock\"\n[web]\nlisten = \"127.0.0.1:0\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\n\
             [[stream]]\nname = \"all\"\nto = \"s.fifo\"\n",
            b.host_if
        ),
    )
    .unwrap();
    let sock = tmp.path().join("control.sock");
    let svc = Running::start(
        &["run", cfg.to_str().unwrap()],
        &tmp.path().join("log"),
        ": recording on ",
    );
    let text = svc.text();
    let addr = text
        .split("web page on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("{text}"))
        .to_string();
    b.send_udp(9000, 300, 40);
    let t = Instant::now();
    loop {
        let c = ctl_counters(&sock);
        if c["jobs"]["one"]["writer"]["packets"].as_u64() == Some(300) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{c}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // weir top, one frame
    let out = run(weir().arg("top").arg("--socket").arg(&sock).arg("--once"));
    let frame = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = frame
        .lines()
        .skip_while(|l| !l.starts_with("drops since the start"))
        .find(|l| l.starts_with("one "))
        .unwrap_or_else(|| panic!("{frame}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols, ["one", "0", "0", "0", "0", "0", "300"], "{frame}");
    let srow = frame
        .lines()
        .find(|l| l.starts_with("one") && l.contains(" all "))
        .unwrap_or_else(|| panic!("{frame}"));
    let scols: Vec<&str> = srow.split_whitespace().collect();
    // nobody reads the FIFO: every matched packet is dropped
    assert_eq!(scols, ["one", "all", "300", "0", "300", "no"], "{frame}");
    assert!(
        frame.contains(&format!("pid {}", svc_pid(&sock))),
        "{frame}"
    );
    let out = run(weir().arg("top").arg("--socket").arg(&sock));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give --once"));
    let out = run(weir()
        .arg("top")
        .arg("--socket")
        .arg(tmp.path().join("nope.sock"))
        .arg("--once"));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no such control socket"));

    // the JSON endpoint, and read-only
    let live = http(&addr, "GET /api/live HTTP/1.1\r\nHost: x\r\n\r\n");
    let body = &live[live.find("\r\n\r\n").unwrap() + 4..];
    let v: Value = serde_json::from_str(body).unwrap();
    assert_eq!(v["now"]["jobs"][0]["counters"]["capture"]["received"], 300);
    assert!(http(&addr, "POST /api/live HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));

    // a real browser: the DOM after the page's script ran
    let profile = tmp.path().join("chromium");
    let out = run(Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("http://{addr}/")));
    let dom = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(cell(&dom, "job-one", "received"), "300", "{dom}");
    assert_eq!(cell(&dom, "job-one", "recorded"), "300", "{dom}");
    assert_eq!(cell(&dom, "job-one", "state"), "running", "{dom}");
    assert_eq!(cell(&dom, "stream-one-all", "dropped"), "300", "{dom}");
    assert!(dom.contains(&format!("pid {}", svc_pid(&sock))), "{dom}");
    assert!(dom.contains("<polyline"), "a chart: {dom}");
    assert!(dom.contains("<span id=\"error\"></span>"), "{dom}");
    drop(svc);
}

/// The pid the service's control socket gives.
fn svc_pid(sock: &Path) -> u64 {
    let out = run(weir()
        .arg("ctl")
        .arg("--socket")
        .arg(sock)
        .args(["--json", "status"]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["pid"].as_u64().unwrap()
}

#[test]
fn bad_web_listen_is_refused_by_check() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("weir.toml");
    for bad in ["localhost:80", "127.0.0.1", "127.0.0.1:99999", ""] {
        std::fs::write(
            &cfg,
            format!("[web]\nlisten = \"{bad}\"\n[[record]]\ninterface = \"lo\"\nstore = \"s\"\n"),
        )
        .unwrap();
        let out = run(weir().args(["run", "--check"]).arg(&cfg));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains(":2:10: web.listen: "), "{bad}: {err}");
    }
}
