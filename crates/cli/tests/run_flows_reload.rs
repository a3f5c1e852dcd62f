//! A reload that changes only a record job's `[record.flows]` restarts the flow meter alone:
//! capture and the recorder go on with no gap.
//!
//! UDP traffic runs from a namespace through the reload (`weir ctl reload` while the sender
//! is sending; it stops only once packets were recorded after the restart). Oracles: the
//! sender's own count of what it sent; capinfos over the store's segments; the kernel's
//! received count in the job's statistics; the flows files: the old meter's JSON (moved aside
//! to `flows.json.1`, since the new settings write the same path) plus the new meter's JSON
//! hold the one UDP flow's packets exactly once between them (sum = sent), and the new meter
//! also writes the CSV output the new settings added.
//!
//! The hostile cases: new outputs that cannot be opened, a config that fails validation, a
//! meter added to and removed from a job (it restarts whole), and a `[metrics]` change applied
//! without a restart.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segments, weir, Running};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The job's statistics file, once it parses.
fn stats(p: &Path) -> Value {
    std::fs::read_to_string(p)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Waits (30 s at most) until the recorder wrote at least `n` packets.
fn wait_written(p: &Path, n: u64) {
    let t = Instant::now();
    while stats(p)["writer"]["packets"].as_u64().unwrap_or(0) < n {
        assert!(t.elapsed() < Duration::from_secs(30), "{}", stats(p));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (30 s at most) until the flow meter has read at least `n` packets.
fn wait_metered(p: &Path, n: u64) {
    let t = Instant::now();
    while stats(p)["flows"]["packets"].as_u64().unwrap_or(0) < n {
        assert!(t.elapsed() < Duration::from_secs(30), "{}", stats(p));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (30 s at most) until a restarted job has written its first statistics (its
/// recorder's count starts again from 0).
fn wait_restarted(p: &Path) {
    let t = Instant::now();
    while stats(p)["writer"]["packets"].as_u64() != Some(0) {
        assert!(t.elapsed() < Duration::from_secs(30), "{}", stats(p));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// capinfos' packet count over every segment of the store.
fn capinfos_count(dir: &Path) -> u64 {
    segments(dir)
        .iter()
        .map(|seg| {
            let out = run(Command::new("capinfos").args(["-c", "-M"]).arg(seg));
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            text.lines()
                .find_map(|l| l.strip_prefix("Number of packets:"))
                .map(|n| n.trim().parse::<u64>().unwrap())
                .unwrap_or_else(|| panic!("{text}"))
        })
        .sum()
}

/// (destination port, packets) of each flow of a JSON lines file.
fn json_flows(p: &Path) -> Vec<(u64, u64)> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| (u(&r["destinationTransportPort"]), u(&r["packetDeltaCount"])))
        .collect()
}

fn write_config(dir: &Path, iface: &str, flows: &str) -> PathBuf {
    write_config_with(dir, iface, "", &format!("[record.flows]\n{flows}"))
}

/// The config: `head` before the job (`[metrics]`...), `tail` after its keys (its
/// `[record.flows]`, or nothing).
fn write_config_with(dir: &Path, iface: &str, head: &str, tail: &str) -> PathBuf {
    let p = dir.join("weir.toml");
    std::fs::write(
        &p,
        format!(
            "[control]\nsocket = \"control.sock\"\n{head}\
             [[record]]\nname = \"one\"\ninterface = \"{iface}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\n\
             stats_json = \"stats.json\"\n{tail}"
        ),
    )
    .unwrap();
    p
}

/// `weir ctl --socket SOCK reload`: (exit code, stdout + stderr).
fn reload(dir: &Path) -> (i32, String) {
    let out = run(weir()
        .args(["ctl", "--socket"])
        .arg(dir.join("control.sock"))
        .arg("reload"));
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// [`reload`], which must succeed: its output.
fn reload_ok(dir: &Path) -> String {
    let (code, said) = reload(dir);
    assert_eq!(code, 0, "{said}");
    said
}

/// `weir run CONFIG` in `dir` (log `dir/log`), once its job records.
fn start_run(dir: &Path, config: &Path) -> Running {
    Running::start(
        &["run", config.to_str().unwrap()],
        &dir.join("log"),
        ": recording on ",
    )
}

/// A `[record.flows]` body: JSON flows to `flows.json`, idle flows kept 10 minutes.
const JSON_FLOWS: &str = "json = \"flows.json\"\nidle_timeout_s = 600\n";

/// Waits (60 s at most) until the service's log holds `text` `n` times.
fn wait_log(svc: &Running, text: &str, n: usize) {
    let t = Instant::now();
    while svc.text().matches(text).count() < n {
        assert!(t.elapsed() < Duration::from_secs(60), "{}", svc.text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_flows_change_restarts_the_meter_only_and_recording_has_no_gap() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = write_config(dir, &b.host_if, JSON_FLOWS);
    let svc = start_run(dir, &config);
    let st = dir.join("stats.json");
    // the sender: one UDP flow, paced, until the stop file appears; prints what it sent
    let stop = dir.join("stop");
    let script = format!(
        "import socket,struct,os,time\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         i=0\n\
         while not os.path.exists('{}'):\n    \
         s.sendto(b'WEIR'+struct.pack('>I',i)+b'x'*100,('{}',9000))\n    \
         i+=1\n    time.sleep(0.0005)\n\
         print(i)\n",
        stop.display(),
        b.host_ip
    );
    let sender = Command::new("ip")
        .args(["netns", "exec", &b.ns, "python3", "-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_written(&st, 200);
    // the new settings: a CSV output added, the JSON output on the same path, another timeout
    write_config(
        dir,
        &b.host_if,
        "json = \"flows.json\"\ncsv = \"flows.csv\"\nidle_timeout_s = 500\n",
    );
    reload_ok(dir);
    let t = Instant::now();
    while !svc.text().contains("flows: the meter restarted") {
        assert!(t.elapsed() < Duration::from_secs(30), "{}", svc.text());
        std::thread::sleep(Duration::from_millis(20));
    }
    // traffic goes on after the restart before it stops
    let at = stats(&st)["writer"]["packets"].as_u64().unwrap_or(0);
    wait_written(&st, at + 200);
    std::fs::write(&stop, b"").unwrap();
    let out = sender.wait_with_output().unwrap();
    assert!(out.status.success());
    let sent: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    wait_written(&st, sent);
    let (status, log) = svc.signal("-TERM");
    assert!(status.success(), "{log}");

    // one run of capture and recording, the meter restarted once
    assert_eq!(log.matches("one: recording on").count(), 1, "{log}");
    assert!(
        log.contains("one: its [record.flows] changed: restarting the flow meter only"),
        "{log}"
    );
    assert!(!log.contains("restarting the job"), "{log}");
    assert!(log.contains("flows.json moved to"), "{log}");
    // every packet sent is in the store, and the kernel received each
    let v = stats(&st);
    let c = &v["capture"];
    assert_eq!(capinfos_count(&dir.join("store")), sent, "{log}");
    assert_eq!(u(&v["writer"]["packets"]), sent, "{v}");
    assert_eq!(u(&c["received"]) - u(&c["filtered"]), sent, "{c}");
    assert_eq!(u(&c["kernel_drops"]), 0, "{c}");
    assert_eq!(u(&v["writer"]["dropped"]), 0, "{v}");
    // the flow's packets, each metered once: before the restart by the old meter (its file
    // moved aside), after it by the new one, into both of its outputs
    let before = json_flows(&dir.join("flows.json.1"));
    let after = json_flows(&dir.join("flows.json"));
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!((before[0].0, after[0].0), (9000, 9000));
    assert!(
        before[0].1 >= 200 && after[0].1 >= 200,
        "{before:?} {after:?}"
    );
    assert_eq!(before[0].1 + after[0].1, sent, "{log}");
    let csv = std::fs::read_to_string(dir.join("flows.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 2, "a header and the flow: {csv}");
    let header: Vec<&str> = rows[0].split(',').collect();
    let row: Vec<&str> = rows[1].split(',').collect();
    let col = |name: &str| {
        let i = header
            .iter()
            .position(|h| *h == name)
            .unwrap_or_else(|| panic!("{csv}"));
        row[i].parse::<u64>().unwrap()
    };
    assert_eq!(col("packetDeltaCount"), after[0].1, "{csv}");
    assert_eq!(col("destinationTransportPort"), 9000, "{csv}");
}

/// New flow outputs that cannot be opened (a file in /proc, which the check before the reload
/// cannot tell from a writable place; even root cannot create it): the reload's
/// answer says so, the meter goes on with the old settings and nothing it metered is lost (the
/// old JSON file, written again, is moved aside first: old + new file = every packet sent).
/// A config that fails validation changes nothing and the answer says why.
#[test]
fn bad_new_outputs_and_a_bad_config_leave_the_old_settings_running() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = write_config(dir, &b.host_if, JSON_FLOWS);
    let svc = start_run(dir, &config);
    let st = dir.join("stats.json");
    b.send_udp(9000, 100, 50);
    wait_written(&st, 100);
    wait_metered(&st, 100);
    write_config(
        dir,
        &b.host_if,
        "json = \"/proc/weir-flows.json\"\nidle_timeout_s = 600\n",
    );
    let said = reload_ok(dir);
    assert!(
        said.contains("warning: one: flows: the new outputs did not open")
            && said.contains("/proc/weir-flows.json")
            && said.contains("config reloaded with 1 warning(s)"),
        "{said}"
    );
    b.send_udp(9000, 70, 50);
    wait_written(&st, 170);
    // a config that does not check: nothing changes, the answer says why
    std::fs::write(&config, "[[record]]\nname = \"one\"\nsegment_mib = -4\n").unwrap();
    let said = reload_ok(dir);
    assert!(
        said.contains("warning: config not reloaded")
            && said.contains("the jobs go on as they were"),
        "{said}"
    );
    b.send_udp(9000, 30, 50);
    wait_written(&st, 200);
    let (status, log) = svc.signal("-TERM");
    assert!(status.success(), "{log}");
    assert_eq!(log.matches("one: recording on").count(), 1, "{log}");
    assert!(!log.contains("restarting the job"), "{log}");
    assert_eq!(capinfos_count(&dir.join("store")), 200, "{log}");
    // the old meter's flows until the failed restart, moved aside; then the same settings on
    // (the file written again from the restart)
    let before = json_flows(&dir.join("flows.json.1"));
    let mut after = json_flows(&dir.join("flows.json"));
    after.sort();
    assert_eq!(before, [(9000, 100)], "{log}");
    // two senders after it (each its own source port): two flows
    assert_eq!(after, [(9000, 30), (9000, 70)], "{log}");
    assert!(!Path::new("/proc/weir-flows.json").exists());
}

/// A meter added to a running record job, then removed: the job restarts whole each time
/// (capture and recording start again: three "recording on"), and every packet sent between
/// the restarts is recorded (capinfos = sent) and, while the meter runs, metered (its flow =
/// the datagrams sent then).
#[test]
fn a_meter_added_or_removed_restarts_the_job_whole_and_counts_every_packet() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = write_config_with(dir, &b.host_if, "", "");
    let svc = start_run(dir, &config);
    let st = dir.join("stats.json");
    b.send_udp(9000, 50, 10);
    wait_written(&st, 50);
    write_config(dir, &b.host_if, JSON_FLOWS);
    let said = reload_ok(dir);
    assert!(
        said.contains("one: its config changed: restarting the job"),
        "{said}"
    );
    wait_log(&svc, "one: recording on", 2);
    wait_restarted(&st);
    b.send_udp(9001, 40, 10);
    wait_written(&st, 40);
    write_config_with(dir, &b.host_if, "", "");
    reload_ok(dir);
    wait_log(&svc, "one: recording on", 3);
    wait_restarted(&st);
    b.send_udp(9002, 30, 10);
    wait_written(&st, 30);
    let (status, log) = svc.signal("-TERM");
    assert!(status.success(), "{log}");
    assert_eq!(
        log.matches("its config changed: restarting the job")
            .count(),
        2,
        "{log}"
    );
    assert_eq!(capinfos_count(&dir.join("store")), 120, "{log}");
    assert_eq!(json_flows(&dir.join("flows.json")), [(9001, 40)], "{log}");
}

/// `[metrics]` changed by a reload, without a restart: moved to another port (the old one
/// closed), removed (closed), added again, and moved to a port in use (refused: the old
/// listener goes on, the answer says so); the job records throughout (one "recording on").
#[test]
fn a_metrics_change_is_applied_by_a_reload() {
    use std::net::{TcpListener, TcpStream};
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let port = || {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let metrics = |p: u16| format!("[metrics]\nlisten = \"127.0.0.1:{p}\"\n");
    let serves = |p: u16| {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", p)) else {
            return false;
        };
        use std::io::{Read, Write};
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out.contains("weir_writer_packets_total")
    };
    let (p1, p2) = (port(), port());
    let config = write_config_with(dir, &b.host_if, &metrics(p1), "");
    let svc = start_run(dir, &config);
    assert!(serves(p1));
    write_config_with(dir, &b.host_if, &metrics(p2), "");
    let said = reload_ok(dir);
    assert!(
        said.contains("[metrics] changed: metrics moved from"),
        "{said}"
    );
    assert!(serves(p2) && !serves(p1), "{said}");
    write_config_with(dir, &b.host_if, "", "");
    let (_, said) = reload(dir);
    assert!(said.contains("[metrics] removed"), "{said}");
    assert!(!serves(p2), "{said}");
    write_config_with(dir, &b.host_if, &metrics(p1), "");
    let (_, said) = reload(dir);
    assert!(said.contains("[metrics] added"), "{said}");
    assert!(serves(p1), "{said}");
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let p3 = taken.local_addr().unwrap().port();
    write_config_with(dir, &b.host_if, &metrics(p3), "");
    let said = reload_ok(dir);
    assert!(
        said.contains("warning: [metrics] not changed")
            && said.contains(&format!("metrics stay on http://127.0.0.1:{p1}/metrics")),
        "{said}"
    );
    assert!(serves(p1));
    b.send_udp(9000, 20, 10);
    wait_written(&dir.join("stats.json"), 20);
    let (status, log) = svc.signal("-TERM");
    assert!(status.success(), "{log}");
    assert_eq!(log.matches("one: recording on").count(), 1, "{log}");
    assert_eq!(capinfos_count(&dir.join("store")), 20, "{log}");
    drop(taken);
}
