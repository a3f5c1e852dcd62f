//! SIGTERM to `weir run` while `weir gen` sends at 100 kpps (or what the machine gives) from a
//! network namespace into the veth `weir run` records: nothing is lost uncounted.
//!
//! The record job's closing summary must add up exactly: every packet the kernel queued to the
//! socket was recorded or counted dropped (kernel, buffer, writer), the store holds exactly the
//! packets recorded (capinfos over every segment), the interface's own drops (rx_dropped from
//! /sys/class/net/IF/statistics, reported in the summary's "before the ring") are the same
//! figure the kernel gives, and gen sent at least what reached the socket plus what the
//! interface dropped (the rest was sent after weir closed its socket). The time from SIGTERM
//! to exit and the rate reached are printed (measured, not asserted).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segments, Running};

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

/// The number just before `word` in the text after the first `marker` of `log`.
fn num(log: &str, marker: &str, word: &str) -> u64 {
    let at = log
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker}: {log}"));
    let rest = &log[at + marker.len()..];
    let end = rest
        .find(word)
        .unwrap_or_else(|| panic!("no {word} after {marker}: {log}"));
    rest[..end]
        .split(|c: char| !c.is_ascii_digit())
        .rfind(|s| !s.is_empty())
        .unwrap_or_else(|| panic!("no number before {word}: {log}"))
        .parse()
        .unwrap()
}

fn stat(iface: &str, name: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{name}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn sigterm_under_load_loses_nothing_uncounted() {
    if !weir_testkit::have("capinfos") {
        return;
    }
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("weir.toml");
    std::fs::write(
        &config,
        format!(
            "[control]\nsocket = \"c.sock\"\n\
             [[record]]\nname = \"rec\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 64\n\
             write_mib = 1\nbuffer_mib = 64\nfilter = \"udp port 9400\"\n",
            b.host_if
        ),
    )
    .unwrap();
    let host_mac = std::fs::read_to_string(format!("/sys/class/net/{}/address", b.host_if))
        .unwrap()
        .trim()
        .to_string();
    let rx_dropped_before = stat(&b.host_if, "rx_dropped");
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &tmp.path().join("log"),
        "rec: recording on",
    );
    let gen_started = Instant::now();
    let gen = Command::new("ip")
        .args(["netns", "exec", &b.ns, env!("CARGO_BIN_EXE_weir"), "gen"])
        .args(["-i", &b.peer_if(), "--src", &b.peer_ip, "--dst", &b.host_ip])
        .args(["--dst-mac", &host_mac, "--dport", "9400", "--size", "100"])
        .args(["--pps", "100000", "-c", "3000000", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // under load: SIGTERM once the recorder has 300 000 packets (about 3 s at 100 kpps)
    common::counters_until(
        &tmp.path().join("c.sock"),
        &svc,
        Duration::from_secs(120),
        "300 000 packets recorded",
        |v| v["jobs"]["rec"]["writer"]["packets"].as_u64().unwrap_or(0) >= 300_000,
    );
    let load_s = gen_started.elapsed().as_secs_f64();
    let term = Instant::now();
    let (status, log) = svc.signal("-TERM");
    let exit_s = term.elapsed().as_secs_f64();
    assert!(status.success(), "{log}");
    // stop the generator (it would go on for 30 s)
    let _ = Command::new("kill")
        .args(["-INT", &gen.id().to_string()])
        .status();
    let g = gen.wait_with_output().unwrap();
    let gen_log = String::from_utf8_lossy(&g.stderr).to_string();
    let rep: serde_json::Value = serde_json::from_slice(&g.stdout)
        .unwrap_or_else(|e| panic!("gen's report: {e}: {gen_log}"));
    let sent = rep["sent"].as_u64().unwrap_or_else(|| panic!("{rep}"));

    let recorded = num(&log, "weir run: rec (", "packets recorded");
    let kernel = num(&log, "kernel: ", "received");
    let kernel_dropped = num(&log, "kernel: ", "dropped;");
    let read = num(&log, "capture: ", "read");
    let filtered = num(&log, "capture: ", "filtered out");
    let buffer_full = num(&log, "buffer: ", "dropped (full)");
    let buffer_long = num(&log, "dropped (full), ", "dropped (too long)");
    let writer = num(&log, "writer: ", "dropped");
    let if_rx_dropped = num(&log, "before the ring: interface ", "(rx_dropped");
    let stored: u64 = segments(&tmp.path().join("s"))
        .iter()
        .map(|s| count(s))
        .sum();
    eprintln!(
        "SIGTERM after {load_s:.1} s of load: exit in {exit_s:.3} s; gen sent {sent} \
         (~{:.0} pps over the whole run); recorded {recorded}, kernel {kernel} received / \
         {kernel_dropped} dropped, capture read {read}, filtered {filtered}, buffer {buffer_full} \
         + {buffer_long}, writer {writer}, interface rx_dropped {if_rx_dropped}",
        rep["pps"].as_f64().unwrap_or(f64::NAN)
    );
    assert_eq!(stored, recorded, "the store holds what was recorded: {log}");
    assert_eq!(kernel, read + kernel_dropped, "{log}");
    assert_eq!(
        read,
        recorded + filtered + buffer_full + buffer_long + writer,
        "every packet read was recorded or counted: {log}"
    );
    let rx_dropped_after = stat(&b.host_if, "rx_dropped");
    assert!(
        if_rx_dropped <= rx_dropped_after - rx_dropped_before,
        "interface drops: {if_rx_dropped} reported, {} by /sys: {log}",
        rx_dropped_after - rx_dropped_before
    );
    assert!(
        sent >= kernel + if_rx_dropped,
        "gen sent {sent}, the socket saw {kernel} and the interface dropped {if_rx_dropped}"
    );
}
