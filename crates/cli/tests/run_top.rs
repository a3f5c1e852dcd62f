//! Top flows and top rules of a running `weir run` (`weir ctl top`, the `top` request of the
//! control socket, `weir top --once`), and the index-lag series (`/metrics`, `weir ctl
//! status`).
//!
//! The test sends three UDP flows of known sizes from a namespace (30 datagrams of 136 IP
//! bytes to port 9001, 20 of 1 036 to 9002, 10 of 36 to 9003: hand-computed from the payload
//! sizes) through a record job with a flow meter and rules (one rule for 9001, one for 9002,
//! one for a port nobody uses). Oracles: the hand-computed order and counts (by packets 9001,
//! 9002, 9003; by bytes 9002, 9001, 9003), the rules' hits = the datagrams sent to their
//! port, the meter's own flow records at the end (same packets and bytes), promtool on the
//! scrape, and the index lag back to 0 once the index covers every packet recorded.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::prom::{metrics_text, promtool_check, samples};
use common::{run, weir, Running};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `weir ctl --socket SOCK ARGS`: (exit code, stdout, stderr).
fn ctl(sock: &Path, args: &[&str]) -> (i32, String, String) {
    let out = run(weir().arg("ctl").arg("--socket").arg(sock).args(args));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ctl_json(sock: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let (code, out, err) = ctl(sock, &a);
    assert_eq!(code, 0, "ctl {args:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn write_config(dir: &Path, iface: &str) -> PathBuf {
    std::fs::write(
        dir.join("one.rules"),
        "id 1 proto udp dport 9001 -> pass\nid 2 proto udp dport 9002 -> pass\n\
         id 3 proto udp dport 9999 -> pass\n",
    )
    .unwrap();
    let p = dir.join("weir.toml");
    std::fs::write(
        &p,
        format!(
            "[control]\nsocket = \"control.sock\"\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{iface}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\n\
             filter = \"udp and dst portrange 9001-9003\"\nrules = \"one.rules\"\n\
             kernel_rules = false\nstats_json = \"stats.json\"\n\
             [record.flows]\njson = \"flows.json\"\nidle_timeout_s = 600\n"
        ),
    )
    .unwrap();
    p
}

/// (destination port, packets, bytes) of the flows of a `top` list.
fn listed(v: &Value) -> Vec<(u64, u64, u64)> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|f| (u(&f["dst_port"]), u(&f["packets"]), u(&f["bytes"])))
        .collect()
}

#[test]
fn top_ranks_the_flows_and_rules_the_test_sent() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = write_config(dir, &b.host_if);
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &dir.join("log"),
        ": recording on ",
    );
    let sock = dir.join("control.sock");
    // (port, datagrams, filler bytes): IP length = 20 + 8 + 8 + filler
    let sent = [(9001u16, 30u32, 100usize), (9002, 20, 1000), (9003, 10, 0)];
    for (port, n, pad) in sent {
        b.send_udp(port, n, pad);
    }
    let (p1, p2, p3) = (
        (9001, 30, 30 * 136),
        (9002, 20, 20 * 1036),
        (9003, 10, 10 * 36),
    );

    // the meter has every packet once the since-start counts add up (a real signal)
    let t = Instant::now();
    let by_packets = loop {
        let v = ctl_json(&sock, &["top", "-n", "3", "--by", "packets"]);
        let f = &v["jobs"]["one"]["flows"];
        let total: u64 = listed(&f["since_start"]).iter().map(|x| x.1).sum();
        if total == 60 {
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(by_packets["by"], "packets");
    let f = &by_packets["jobs"]["one"]["flows"];
    assert_eq!(u(&f["open"]), 3, "{f}");
    assert_eq!(listed(&f["since_start"]), [p1, p2, p3], "{f}");
    for x in f["since_start"].as_array().unwrap() {
        assert_eq!(x["proto"], 17);
        assert_eq!(x["src"], b.peer_ip.as_str());
        assert_eq!(x["dst"], b.host_ip.as_str());
        assert!(u(&x["interval_packets"]) <= u(&x["packets"]), "{x}");
        assert!(u(&x["interval_bytes"]) <= u(&x["bytes"]), "{x}");
    }
    let by_bytes = ctl_json(&sock, &["top", "-n", "2"]);
    let f = &by_bytes["jobs"]["one"]["flows"];
    assert_eq!(listed(&f["since_start"]), [p2, p1], "{f}");

    // the rules: hits = the datagrams sent to each rule's port; the rule nobody hit is left out
    let rules = &by_bytes["jobs"]["one"]["rules"];
    let hits: Vec<(u64, u64)> = rules["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (u(&r["id"]), u(&r["packets"])))
        .collect();
    assert_eq!(hits, [(1, 30), (2, 20)], "{rules}");

    // nothing more is sent: the interval empties (flows) and falls to 0 hits (rules)
    let t = Instant::now();
    loop {
        let v = ctl_json(&sock, &["top", "-n", "3"]);
        let j = &v["jobs"]["one"];
        let quiet_rules = j["rules"]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| u(&r["interval_packets"]) == 0);
        if j["flows"]["interval"].as_array().unwrap().is_empty() && quiet_rules {
            assert_eq!(listed(&j["flows"]["since_start"]), [p2, p1, p3], "{v}");
            assert!(j["flows"]["interval_s"].as_f64().unwrap() >= 1.0, "{v}");
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{v}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // the same as tables: `weir ctl top` and one frame of `weir top`
    let (code, text, err) = ctl(&sock, &["top", "-n", "3", "--by", "packets"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("one: top flows by packets since they started (3 open)"),
        "{text}"
    );
    let row = format!("{}:9001", b.host_ip);
    assert!(text.contains(&row), "{text}");
    assert!(text.contains("proto udp dport 9001 -> pass"), "{text}");
    let out = run(weir()
        .args(["top", "--once", "-n", "2", "--socket"])
        .arg(&sock));
    let frame = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(frame.contains("one: top flows by bytes"), "{frame}");
    assert!(frame.contains("one: top rules by hits"), "{frame}");

    // bad requests are refused by name, before asking the process or by it
    for bad in [
        &["top", "-n", "0"][..],
        &["top", "-n", "-1"],
        &["top", "-n", "nan"],
        &["top", "-n", "1001"],
        &["top", "-n", "99999999999999999999"],
        &["top", "--by", "flows"],
    ] {
        let (code, _, err) = ctl(&sock, bad);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, err) = ctl(&sock, &["top", "--job", "nope"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no job `nope`"), "{err}");
    for (req, said) in [
        (r#"{"cmd":"top","n":0}"#, "\"n\" must be"),
        (r#"{"cmd":"top","n":-3}"#, "\"n\" must be"),
        (r#"{"cmd":"top","n":1e300}"#, "\"n\" must be"),
        (r#"{"cmd":"top","by":"flows"}"#, "\"by\" must be"),
    ] {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        writeln!(s, "{req}").unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(s), &mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["ok"], false, "{req}: {line}");
        assert!(v["error"].as_str().unwrap().contains(said), "{req}: {line}");
    }
    // closed stdout: no panic
    let out = run(weir()
        .args(["ctl", "top", "--socket"])
        .arg(&sock)
        .stdout(std::fs::File::open("/dev/null").unwrap()));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));

    // the index lag: a gauge on /metrics (promtool clean) and in status, back to 0 once the
    // open segment's index covers every packet recorded (it is written every few seconds)
    let addr = {
        let log = svc.text();
        let rest = log.split("metrics on http://").nth(1).unwrap().to_string();
        rest.split('/').next().unwrap().to_string()
    };
    let scrape = metrics_text(&addr);
    promtool_check(&scrape);
    let key = "weir_record_index_lag_seconds{weir_job=\"one\"}";
    assert!(samples(&scrape).contains_key(key), "{scrape}");
    let t = Instant::now();
    loop {
        let st = ctl_json(&sock, &["status"]);
        let lag = st["jobs"][0]["index_lag_s"].as_f64().unwrap();
        assert!(lag >= 0.0, "{st}");
        if lag == 0.0 && samples(&metrics_text(&addr))[key] == 0.0 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(60), "{st}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, status, _) = ctl(&sock, &["status"]);
    assert!(
        status.contains("INDEX_LAG") && status.contains("0.0 s"),
        "{status}"
    );

    let (code, log) = svc.signal("-TERM");
    assert!(code.success(), "{log}");
    // the meter's own records agree with what `top` said
    let recs: Vec<(u64, u64, u64)> = std::fs::read_to_string(dir.join("flows.json"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            (
                u(&r["destinationTransportPort"]),
                u(&r["packetDeltaCount"]),
                u(&r["octetDeltaCount"]),
            )
        })
        .collect();
    let mut recs = recs;
    recs.sort();
    assert_eq!(recs, [p1, p2, p3], "{log}");
}

/// A job without a meter or rules answers `null` for them; `top` on a job with a meter ranks
/// nothing before traffic.
#[test]
fn top_without_meter_or_rules_says_null() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let p = dir.join("weir.toml");
    std::fs::write(
        &p,
        format!(
            "[control]\nsocket = \"control.sock\"\n\
             [[record]]\nname = \"bare\"\ninterface = \"{}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\nfilter = \"udp port 9\"\n",
            b.host_if
        ),
    )
    .unwrap();
    let svc = Running::start(
        &["run", p.to_str().unwrap()],
        &dir.join("log"),
        ": recording on ",
    );
    let v = ctl_json(&dir.join("control.sock"), &["top"]);
    assert_eq!(v["jobs"]["bare"]["flows"], Value::Null, "{v}");
    assert_eq!(v["jobs"]["bare"]["rules"], Value::Null, "{v}");
    let (code, text, _) = ctl(&dir.join("control.sock"), &["top"]);
    assert_eq!(code, 0);
    assert!(!text.contains("top flows"), "{text}");
    let (code, log) = svc.signal("-TERM");
    assert!(code.success(), "{log}");
}
