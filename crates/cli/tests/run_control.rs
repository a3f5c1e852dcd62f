//! `weir ctl rotate`, `pause JOB` and `resume JOB` against a live `weir run`, on a veth pair in
//! a network namespace made by the test.
//!
//! 100 packets, rotate, 50 packets, pause, 40 packets, resume, 30 packets: the store holds three
//! segments of exactly 100, 50 and 30 packets (capinfos), the 40 sent while paused are counted
//! as such (`weir ctl`, the final summary), and the kernel's count is the sum of the recorded
//! and the paused ones: nothing is lost uncounted. Hostile requests (no such job, a job that is
//! not a string, a missing job) get a clear error, never a panic.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segments, weir, Running};
use serde_json::Value;

/// `weir ctl --socket S ARGS`: (exit code, stdout, stderr).
fn ctl(socket: &Path, args: &[&str]) -> (i32, String, String) {
    let out = run(weir().arg("ctl").arg("--socket").arg(socket).args(args));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// One raw JSON line to the socket: the reply.
fn raw(socket: &Path, line: &str) -> Value {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    writeln!(s, "{line}").unwrap();
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap_or_else(|e| panic!("{e}: {reply}"))
}

/// Waits until the job's published writer counters satisfy `done`.
fn wait_writer(socket: &Path, done: impl Fn(&Value) -> bool) -> Value {
    let t = Instant::now();
    loop {
        let (code, out, err) = ctl(socket, &["--json", "counters"]);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        let w = &v["jobs"]["one"]["writer"];
        if done(w) {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never: {v}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

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

#[test]
fn rotate_pause_and_resume_a_live_job() {
    if !weir_testkit::have("capinfos") {
        return;
    }
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let sock = tmp.path().join("c.sock");
    let config = write(
        tmp.path(),
        "weir.toml",
        &format!(
            "[control]\nsocket = \"c.sock\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp port 9000\"\n",
            b.host_if
        ),
    );
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &tmp.path().join("log"),
        "one: recording on",
    );
    let n = |w: &Value, k: &str| w[k].as_u64().unwrap_or(u64::MAX);

    b.send_udp(9000, 100, 20);
    wait_writer(&sock, |w| n(w, "packets") == 100);
    let (code, out, err) = ctl(&sock, &["rotate"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("one: segment closed"), "{out}");

    b.send_udp(9000, 50, 20);
    wait_writer(&sock, |w| n(w, "packets") == 150);
    let (code, out, err) = ctl(&sock, &["pause", "one"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "one: paused (0 packet(s) not recorded while paused so far)\n"
    );
    let (_, out, _) = ctl(&sock, &["pause", "one"]);
    assert!(out.starts_with("one: paused already"), "{out}");
    let (_, out, _) = ctl(&sock, &["status"]);
    assert!(out.contains(" paused "), "{out}");

    b.send_udp(9000, 40, 20);
    let v = wait_writer(&sock, |w| n(w, "paused_packets") == 40);
    assert_eq!(v["jobs"]["one"]["writer"]["packets"], 150, "{v}");
    assert_eq!(v["jobs"]["one"]["writer"]["paused"], true, "{v}");
    let (code, out, err) = ctl(&sock, &["resume", "one"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "one: recording (40 packet(s) not recorded while paused so far)\n"
    );
    b.send_udp(9000, 30, 20);
    wait_writer(&sock, |w| n(w, "packets") == 180);

    // Hostile requests.
    let (code, _, err) = ctl(&sock, &["pause", "nosuch"]);
    assert_eq!(code, 1);
    assert!(err.contains("no job `nosuch` (jobs: one)"), "{err}");
    let (code, _, err) = ctl(&sock, &["rotate", "--job", ""]);
    assert_eq!(code, 1);
    assert!(err.contains("no job ``"), "{err}");
    let (code, _, err) = ctl(&sock, &["pause"]);
    assert_eq!(code, 2, "{err}");
    for (line, word) in [
        (r#"{"cmd":"pause","job":5}"#, "must be a job's name"),
        (r#"{"cmd":"resume"}"#, "resume needs \"job\""),
        (r#"{"cmd":"rotate","job":null}"#, "must be a job's name"),
    ] {
        let r = raw(&sock, line);
        assert_eq!(r["ok"], false, "{r}");
        assert!(r["error"].as_str().unwrap().contains(word), "{r}");
    }

    let (status, log) = svc.signal("-TERM");
    assert!(status.success(), "{log}");
    assert!(
        log.contains(&format!(
            "weir run: one ({}): 180 packets recorded",
            b.host_if
        )),
        "{log}"
    );
    assert!(
        log.contains("writer: 0 dropped, 40 not recorded (paused)"),
        "{log}"
    );
    assert!(log.contains("kernel: 220 received"), "{log}");
    let counts: Vec<u64> = segments(&tmp.path().join("s"))
        .iter()
        .map(|s| count(s))
        .collect();
    assert_eq!(counts, [100, 50, 30]);
}

/// `weir run --log-format json`: every line of stderr (notices, the summary, the library's
/// tracing events at `WEIR_LOG=debug`) is a JSON object with `ts`, `level` and `message`; the
/// job's lines name it. In text mode with stderr not a terminal, no ANSI escape anywhere. A
/// bad format is a usage error.
#[test]
fn json_logs_and_no_colours_off_a_terminal() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let config = write(
        tmp.path(),
        "weir.toml",
        &format!(
            "[[record]]\nname = \"one\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp port 9000\"\n",
            b.host_if
        ),
    );
    std::env::set_var("WEIR_LOG", "debug");
    let svc = Running::start(
        &["run", "--log-format", "json", config.to_str().unwrap()],
        &tmp.path().join("log"),
        "recording on",
    );
    b.send_udp(9000, 10, 20);
    std::thread::sleep(Duration::from_millis(500));
    let (status, log) = svc.signal("-TERM");
    assert!(status.success(), "{log}");
    assert!(!log.contains('\u{1b}'), "{log}");
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?} in\n{log}")))
        .collect();
    for v in &lines {
        assert!(v["ts"].as_f64().is_some_and(|t| t > 1.6e9), "{v}");
        assert!(v["level"].is_string() && v["message"].is_string(), "{v}");
    }
    assert!(
        lines.iter().any(|v| v["job"] == "one"
            && v["level"] == "info"
            && v["message"].as_str().unwrap().starts_with(&format!(
                "weir run: one ({}): 10 packets recorded",
                b.host_if
            ))),
        "{log}"
    );
    assert!(lines
        .iter()
        .any(|v| v["message"].as_str().unwrap().starts_with("recording on")));

    // Text: the same run, stderr a file: no colour codes, the summary as before.
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &tmp.path().join("log2"),
        "recording on",
    );
    let (status, log) = svc.signal("-TERM");
    std::env::remove_var("WEIR_LOG");
    assert!(status.success(), "{log}");
    assert!(!log.contains('\u{1b}'), "{log}");
    assert!(log.contains("weir: one: recording on"), "{log}");
    assert!(log.contains("weir run: one ("), "{log}");

    let out = run(weir().args(["run", "--log-format", "xml"]).arg(&config));
    assert_eq!(out.status.code(), Some(2));
}
