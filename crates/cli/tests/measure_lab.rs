//! `weir lab` on a real bench of namespaces and veth pairs: an idle path is sub-millisecond; a
//! tbf bottleneck (rate R, latency L) saturated by bulk traffic holds the interactive stream for
//! about L plus the bucket's burst, within a tolerance computed from R, L and the packet sizes;
//! setups the kernel cannot apply are skipped with the reason `tc` gives (tc itself is the
//! oracle); `lab down` leaves no namespace, link or process behind, also after a crash.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, weir};

/// Removes a bench when dropped, also when the test panics.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = weir().args(["lab", "down", "--name", &self.0]).output();
    }
}

fn bench_name(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 100_000)
}

fn lab_namespaces(name: &str) -> Vec<String> {
    let out = run(Command::new("ip").args(["netns", "list"]));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("weirlab-{name}-")))
        .map(String::from)
        .collect()
}

/// Links in our namespace that were not there before and carry a name the lab gives its
/// interfaces (it creates them inside its namespaces; none may leak here). Other tests running
/// at the same time add and remove their own pairs, so the whole list cannot be compared.
fn leaked(before: &[String]) -> Vec<String> {
    links()
        .into_iter()
        .filter(|l| !before.contains(l))
        .filter(|l| ["eth0", "in0", "out0", "p0", "p1"].contains(&l.as_str()))
        .collect()
}

/// Interface names in the test's own namespace.
fn links() -> Vec<String> {
    let out = run(Command::new("ip").args(["-o", "link", "show"]));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap().to_string())
        .collect()
}

/// Whether this kernel takes qdisc `kind`, asked of tc directly in a namespace the test makes.
fn tc_accepts(kind: &str) -> bool {
    let b = VethBench::new();
    let peer = b.host_if.replacen("wa", "wb", 1);
    Command::new("ip")
        .args([
            "netns", "exec", &b.ns, "tc", "qdisc", "add", "dev", &peer, "root", kind,
        ])
        .output()
        .unwrap()
        .status
        .success()
}

// Bottleneck: R = 10 Mbit/s, L = 20 ms, burst B = 5 KiB (tc's "5kb"); bulk at 2R in 1514-byte
// frames; interactive 200-byte frames every 10 ms.
const R_BPS: f64 = 10e6;
const L_S: f64 = 0.020;
const BURST: f64 = 5.0 * 1024.0;
const MTU_FRAME: f64 = 1514.0;

#[test]
fn idle_path_is_sub_millisecond_and_tbf_queues_for_its_latency() {
    let name = bench_name("m");
    let _down = Down(name.clone());
    let links_before = links();
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("s.toml");
    std::fs::write(
        &scenario,
        r#"
name = "test"
duration = 3.0
warmup = 1.0
[interactive]
size = 200
interval_ms = 10.0
tos = 0xc0
[bulk]
tool = "gen"
rate_mbit = 20.0
size = 1514
[[setup]]
label = "idle"
qdisc = "pfifo_fast"
bulk = false
[[setup]]
label = "tbf"
qdisc = "tbf rate 10mbit burst 5kb latency 20ms"
[[setup]]
label = "fq_codel"
qdisc = "fq_codel"
[[setup]]
label = "xdp"
qdisc = "tbf rate 10mbit burst 5kb latency 20ms"
xdp = true
"#,
    )
    .unwrap();
    let out_dir = tmp.path().join("out");
    let out = run(weir()
        .args(["lab", "run", "--name", &name, "--out"])
        .arg(&out_dir)
        .arg(&scenario));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let stream = |label: &str| -> serde_json::Value {
        let run = doc["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["label"] == label)
            .unwrap_or_else(|| panic!("run {label} missing: {doc}"));
        run["streams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stream"] == "stream 1")
            .unwrap()
            .clone()
    };
    // Idle: nothing queues on a veth path; every packet arrives, well under a millisecond.
    let idle = stream("idle");
    let sent = idle["sent"].as_u64().unwrap();
    assert!(sent >= 290, "about 300 packets in 3 s: {sent}");
    assert_eq!(idle["received"].as_u64(), Some(sent));
    assert!(
        idle["p99_ns"].as_u64().unwrap() < 1_000_000,
        "idle p99 {}",
        idle["p99_ns"]
    );
    // tbf: its byte limit is R·L + B, so a full queue holds a packet (limit)/R = L + B/R; the bulk
    // keeps it within one bulk frame (plus the interactive frame) of full, and a packet may wait
    // one more frame time for the bucket: L + B/R - 2·MTU/R ≤ p50 ≤ L + B/R + MTU/R.
    let tbf = stream("tbf");
    let full = L_S + BURST * 8.0 / R_BPS;
    let frame = MTU_FRAME * 8.0 / R_BPS;
    let p50 = tbf["p50_ns"].as_u64().unwrap() as f64 / 1e9;
    assert!(
        p50 >= full - 2.0 * frame && p50 <= full + frame,
        "tbf p50 {p50} s outside [{}, {}]",
        full - 2.0 * frame,
        full + frame
    );
    assert!(tbf["received"].as_u64().unwrap() > 0);
    // Capability detection agrees with tc.
    let skipped: Vec<(String, String)> = doc["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let f = |k: &str| s[k].as_str().unwrap().to_string();
            (f("label"), f("why"))
        })
        .collect();
    let fq = skipped.iter().find(|s| s.0 == "fq_codel");
    if tc_accepts("fq_codel") {
        assert!(fq.is_none(), "{skipped:?}");
        stream("fq_codel");
    } else {
        let why = &fq.expect("fq_codel skipped").1;
        assert!(
            why.contains("fq_codel is not offered by this kernel"),
            "{why}"
        );
    }
    // XDP forwarding, where the kernel offers it, takes frames past out0 and its tbf: the same
    // load no longer queues. Where it does not, the setup is skipped and says so.
    match skipped.iter().find(|s| s.0 == "xdp") {
        Some((_, why)) => assert!(why.contains("XDP"), "{why}"),
        None => {
            let x = stream("xdp");
            assert_eq!(x["received"], x["sent"]);
            assert!(
                x["p99_ns"].as_u64().unwrap() < 1_000_000,
                "xdp p99 {}",
                x["p99_ns"]
            );
        }
    }
    assert!(skipped.len() <= 2, "{skipped:?}");
    for chart in ["cdf", "box", "scatter"] {
        assert!(out_dir.join(format!("{chart}.svg")).exists());
        assert!(out_dir.join(format!("{chart}.png")).exists());
    }
    // The run built the bench itself, so it removed it.
    assert!(lab_namespaces(&name).is_empty());
    assert!(
        leaked(&links_before).is_empty(),
        "no link left in our namespace"
    );
}

#[test]
fn lab_down_cleans_up_after_a_crash() {
    let name = bench_name("c");
    let _down = Down(name.clone());
    let links_before = links();
    let tmp = tempfile::tempdir().unwrap();
    let scenario = tmp.path().join("long.toml");
    std::fs::write(
        &scenario,
        "name = \"long\"\nduration = 60.0\nwarmup = 0.5\n[bulk]\ntool = \"gen\"\nrate_mbit = 5.0\n[[setup]]\nlabel = \"x\"\nqdisc = \"pfifo\"\n",
    )
    .unwrap();
    let out_dir = tmp.path().join("crash-out");
    let mut child = weir()
        .args(["lab", "run", "--name", &name, "--out"])
        .arg(&out_dir)
        .arg(&scenario)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until both captures write their files, then kill the run outright (no cleanup).
    let t = Instant::now();
    while !(out_dir.join("01-a.pcap").exists() && out_dir.join("01-b.pcap").exists()) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the run did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        lab_namespaces(&name).len(),
        3,
        "the crash left the bench behind"
    );
    let out = run(weir().args(["lab", "down", "--name", &name]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(lab_namespaces(&name).is_empty());
    assert!(leaked(&links_before).is_empty());
    // The captures and generators the run started inside the bench are gone too.
    let marker = out_dir.display().to_string();
    let t = Instant::now();
    loop {
        let left: Vec<String> = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains(&marker))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "left running: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
