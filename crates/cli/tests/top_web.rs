//! `weir top` and the web page of `weir run`, against a running service on a veth pair.
//!
//! * `weir top --socket S --once` prints one frame whose recorded and received counts are what
//!   was sent (300) and whose stream row shows the stream's counters; without `--once` on a
//!   pipe, and with a missing socket, it says why and exits 1.
//! * `[web] listen`: a real headless Chromium (Debian's) loads the page, runs its script (which
//!   polls `/api/live`) and the DOM it dumps shows the live counters of the running process
//!   (received 300, recorded 300, the pid) and a chart; `/api/live` over plain HTTP agrees;
//!   a POST is refused (read-only); a bad `[web] listen` is refused by `--check` with its line.
//!   The page's top flow is the flow sent (300 packets, 300 × 76 IP bytes by hand) and its
//!   top rule the one rule that matched it (300 hits).
//! * `WEIR_SCREENSHOT=PATH` makes the browser also write a PNG of the page (the README's).

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
        tmp.path().join("one.rules"),
        "id 1 proto udp dport 9000 -> pass\nid 2 proto tcp -> pass\n",
    )
    .unwrap();
    std::fs::write(
        &cfg,
        format!(
            "[control]\nsocket = \"control.sock\"\n[web]\nlisten = \"127.0.0.1:0\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\n\
             rules = \"one.rules\"\nkernel_rules = false\n\
             [record.flows]\njson = \"flows.json\"\nidle_timeout_s = 600\n\
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
    // the top flow (the one flow sent: 300 datagrams of 20 + 8 + 8 + 40 IP bytes) and the
    // top rule (the 300 hits of rule 1; rule 2 had none and is not shown)
    // the rendered tables (the page's script, dumped with the DOM, holds the same markup)
    let tbody = |id: &str| {
        let at = dom
            .find(&format!("<tbody id=\"{id}\">"))
            .unwrap_or_else(|| panic!("{dom}"));
        let rest = &dom[at..];
        rest[..rest.find("</tbody>").unwrap()].to_string()
    };
    let (flows, rules) = (tbody("flows"), tbody("rules"));
    let flow = &flows[flows
        .find("<tr class=\"flow\">")
        .unwrap_or_else(|| panic!("{dom}"))..];
    let text_of = |row: &str, class: &str| {
        let c = row.find(&format!("class=\"{class}\">")).unwrap();
        let rest = &row[c + class.len() + 9..];
        rest[..rest.find('<').unwrap()].to_string()
    };
    assert_eq!(text_of(flow, "packets"), "300", "{dom}");
    assert_eq!(text_of(flow, "bytes"), (300 * 76).to_string(), "{dom}");
    assert_eq!(text_of(flow, "dst"), format!("{}:9000", b.host_ip), "{dom}");
    let rule = &rules[rules
        .find("<tr class=\"rule\">")
        .unwrap_or_else(|| panic!("{dom}"))..];
    assert_eq!(text_of(rule, "hits"), "300", "{dom}");
    assert_eq!(text_of(rule, "id"), "1", "{dom}");
    assert_eq!(rules.matches("<tr class=\"rule\">").count(), 1, "{dom}");
    assert_eq!(flows.matches("<tr class=\"flow\">").count(), 1, "{dom}");
    // the README's screenshot, when asked: WEIR_SCREENSHOT=PATH (a PNG)
    if let Ok(png) = std::env::var("WEIR_SCREENSHOT") {
        // more traffic over a few seconds, so the charts have a shape
        for i in 0..6u32 {
            b.send_udp(9000 + (i % 3) as u16, 200 * (i + 1), 40 + 100 * i as usize);
            std::thread::sleep(Duration::from_millis(700));
        }
        let out = run(Command::new("chromium")
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
                "--window-size=1100,1000",
                "--virtual-time-budget=3000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--screenshot={png}"))
            .arg(format!("http://{addr}/")));
        assert!(
            out.status.success() && Path::new(&png).exists(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
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
