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
    let p = dir.join("weir.toml");
    std::fs::write(
        &p,
        format!(
            "[control]\nsocket = \"control.sock\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{iface}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\n\
             stats_json = \"stats.json\"\n[record.flows]\n{flows}"
        ),
    )
    .unwrap();
    p
}

#[test]
fn a_flows_change_restarts_the_meter_only_and_recording_has_no_gap() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = write_config(
        dir,
        &b.host_if,
        "json = \"flows.json\"\nidle_timeout_s = 600\n",
    );
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &dir.join("log"),
        ": recording on ",
    );
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
    let out = run(weir()
        .args(["ctl", "--socket"])
        .arg(dir.join("control.sock"))
        .arg("reload"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
