//! Session 21: the live consumers of the packet buffer (flow meter, HTTP and VoIP analyzers,
//! a stream's two threads) wait on the buffer's doorbell or their queue instead of sleeping
//! 1–2 ms at a time, and are woken at once when asked to stop. Asserted on behaviour: with no
//! traffic each consumer thread wakes a few times a second at most (its 1 s tick, a stream
//! writer's 100 ms look at its readers), counted from /proc (voluntary context switches: a
//! sleep or a wait that ended; the 1–2 ms polls made 500–1 000 a second), and a stop while idle
//! ends the run with its counters reconciled and every packet sent before metered.
//!
//! Every test runs on a veth pair in a namespace it creates. Both fail with session 20's binary
//! in place of this one's (its idle http/voip/stream threads: 830–1 660 wake-ups in 2 s; its
//! meter thread was not named).

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::netns::VethBench;
use common::Running;

/// Voluntary context switches of each thread of `pid` now, by thread name (threads of one
/// name summed).
fn wakeups(pid: u32) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let dir = t.path();
        let (Ok(comm), Ok(status)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("status")),
        ) else {
            continue;
        };
        let n: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        *out.entry(comm.trim().to_string()).or_default() += n;
    }
    out
}

/// The wake-ups of each thread named by `names` (a prefix) over `window`, while idle.
fn idle_wakeups(pid: u32, names: &[&str], window: Duration) -> BTreeMap<String, u64> {
    let before = wakeups(pid);
    std::thread::sleep(window);
    let after = wakeups(pid);
    let mut out = BTreeMap::new();
    for (name, n) in after {
        if names.iter().any(|p| name.starts_with(p)) {
            out.insert(name.clone(), n - before.get(&name).copied().unwrap_or(0));
        }
    }
    out
}

/// Most wake-ups a waiting consumer thread may have in 2 s with no traffic: its 1 s tick (2),
/// a stream writer's 100 ms look at its readers (20), a few more for the odd packet the kernel
/// sends on a new link (IPv6 neighbour discovery); the 1–2 ms polls made ≈ 1 000 to 2 000.
const IDLE_BOUND: u64 = 50;
const WINDOW: Duration = Duration::from_secs(2);

/// The number right before `label` in `text` (`"123 received"` → 123).
fn number_before(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    let word = text[..at].trim_end().rsplit([' ', '(']).next().unwrap();
    word.parse()
        .unwrap_or_else(|_| panic!("{word:?} before {label:?} in:\n{text}"))
}

/// Packets of the flow records in JSON lines file `path` whose destination port is `port`.
fn packets_to_port(path: &Path, port: u64) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["destinationTransportPort"] == port)
        .map(|v| v["packetDeltaCount"].as_u64().unwrap())
        .sum()
}

/// `weir flows -i`: 300 datagrams sent, then idle: the meter's thread wakes for its tick only,
/// and a SIGINT while it waits ends the run at once with every datagram in the flow records
/// (300, counted by hand: the sender's loop) and the kernel's count = read + dropped.
#[test]
fn an_idle_flow_meter_waits_and_stops_with_every_packet_metered() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("flows.json");
    let r = Running::start(
        &[
            "flows",
            "-i",
            &bench.host_if,
            "--json",
            json.to_str().unwrap(),
        ],
        &tmp.path().join("log"),
        "metering flows on",
    );
    bench.send_udp_flows(5555, 4, 300, 10);
    let idle = idle_wakeups(r.pid(), &["flow-meter"], WINDOW);
    assert_eq!(idle.len(), 1, "one meter thread: {idle:?}");
    assert!(
        idle.values().all(|&n| n <= IDLE_BOUND),
        "an idle meter waits (its tick once a second): {idle:?} wake-ups in {WINDOW:?}"
    );
    let (status, text) = r.signal("-INT");
    assert!(status.success(), "{status}:\n{text}");
    let line = text.lines().find(|l| l.contains("kernel:")).unwrap();
    let (received, dropped, read) = (
        number_before(line, " received"),
        number_before(line, " dropped;"),
        number_before(line, " read"),
    );
    assert_eq!(received, read + dropped, "{text}");
    assert_eq!(dropped, 0, "{text}");
    assert_eq!(packets_to_port(&json, 5555), 300, "{text}");
}

/// `weir run` with a recorder, its flow meter, a stream to a FIFO nobody opens, the HTTP and
/// the VoIP analyzers: with no traffic every consumer thread waits, and SIGINT stops the
/// service cleanly.
#[test]
fn an_idle_sensor_s_consumers_wait() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let fifo = d.join("stream.fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let cfg = d.join("weir.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[record]]\ninterface = \"{}\"\nstore = \"{}\"\nbuffer_mib = 64\n\
             [record.flows]\njson = \"{}\"\n\
             [[stream]]\nname = \"s\"\nto = \"{}\"\n\
             [[http]]\nlog = \"{}\"\n\
             [[voip]]\ncalls = \"{}\"\n",
            bench.host_if,
            d.join("store").display(),
            d.join("flows.json").display(),
            fifo.display(),
            d.join("http.jsonl").display(),
            d.join("calls.jsonl").display(),
        ),
    )
    .unwrap();
    let r = Running::start(
        &["run", cfg.to_str().unwrap()],
        &d.join("log"),
        ": recording on ",
    );
    // the consumers start after the banner
    std::thread::sleep(Duration::from_millis(500));
    let names = ["flow-meter", "http", "voip", "stream-in-s", "stream-s"];
    let idle = idle_wakeups(r.pid(), &names, WINDOW);
    for n in names {
        assert!(idle.contains_key(n), "no thread {n}: {idle:?}");
    }
    assert!(
        idle.values().all(|&n| n <= IDLE_BOUND),
        "idle consumers wait: {idle:?} wake-ups in {WINDOW:?}"
    );
    let (status, text) = r.signal("-INT");
    assert!(status.success(), "{status}:\n{text}");
}
