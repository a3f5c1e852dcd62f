//! Real SIP calls between two `sipp` instances (Debian `sip-tester`, scripts/setup.sh) through a
//! bottleneck, with `weir voip -i` capturing on the receiving side.
//!
//! The bench: a veth pair the test creates. The callee (sipp's built-in `uas`, `-rtp_echo`)
//! listens on our side; the caller (sipp's built-in `uac_pcap` scenario, playing sip-tester's
//! g711a.pcap as RTP, without its DTMF tail) runs in the namespace. On the namespace's side of
//! the pair, RTP to the callee's media port goes through a token bucket (htb class + tbf, 64
//! kbit/s, 1600-byte burst, 2000-byte queue: the 78 kbit/s G.711 stream is queued, so delayed and
//! jittered, and some packets are dropped); SIP and everything else pass untouched (netem is not
//! built into this kernel: tbf is the bottleneck that exists). The callee echoes every RTP packet
//! it gets back to the caller.
//!
//! What the records must equal:
//! - `weir voip -r` on tcpdump's capture of the same interface: the same lines (live = offline);
//! - sipp's own view (`-trace_msg`, `-trace_stat`): the Call-IDs, the responses the caller got,
//!   SuccessfulCall/FailedCall, the answer → BYE durations (sipp stamps its log in user space
//!   when it writes it, weir has the kernel's capture time: within 20 ms, see `SIPP_CLOCK_MS`)
//!   and sipp's CallLength mean;
//! - tc's counters: the RTP packets the callee got are those tbf sent, the lost ones those tbf
//!   dropped, sent + dropped = the calls × the packets of g711a.pcap (capinfos); the echoed
//!   streams carry as many packets as the callee got;
//! - tshark on tcpdump's capture: the SIP Call-IDs, methods and status codes, and `-z
//!   rtp,streams`: packets and lost exact, max delta, mean and max jitter within tshark's
//!   printed precision (3 decimals).
//!
//! And the calls come out while weir runs (a call is written when it is over and has
//! lingered): after a `kill -9` the file holds every finished call, whole.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::sip::{lines, offline, stop, tcpdump};
use common::Running;

/// The RTP sipp plays (sip-tester's sample, G.711 A-law, 30 ms packets).
const AUDIO: &str = "/usr/share/sip-tester/g711a.pcap";
/// The callee's RTP port (`-mp`), the one the bottleneck shapes.
const UAS_MEDIA: u16 = 6000;
/// The caller's first RTP port.
const UAC_MEDIA: u16 = 7000;
/// How far sipp's log stamps (user space, at write time) may be from the capture's (kernel) for
/// the same message, ms: the time between the kernel handing a datagram over and sipp logging it.
const SIPP_CLOCK_MS: f64 = 20.0;
/// tshark prints delta and jitter with three decimals.
const TSHARK_MS: f64 = 0.0005 + 1e-9;

fn sh(args: &[&str]) {
    let o = common::run(Command::new(args[0]).args(&args[1..]));
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn in_ns(bench: &VethBench, args: &[&str]) {
    let mut v = vec!["ip", "netns", "exec", &bench.ns];
    v.extend_from_slice(args);
    sh(&v);
}

/// The bottleneck on the namespace's side: RTP to the callee's media port through tbf.
fn bottleneck(bench: &VethBench) {
    let dev = bench.peer_if();
    let d = dev.as_str();
    let port = UAS_MEDIA.to_string();
    for c in [
        vec![
            "tc", "qdisc", "add", "dev", d, "root", "handle", "1:", "htb", "default", "10",
        ],
        vec![
            "tc", "class", "add", "dev", d, "parent", "1:", "classid", "1:10", "htb", "rate",
            "1gbit",
        ],
        vec![
            "tc", "class", "add", "dev", d, "parent", "1:", "classid", "1:20", "htb", "rate",
            "1gbit",
        ],
        vec![
            "tc", "qdisc", "add", "dev", d, "parent", "1:20", "handle", "20:", "tbf", "rate",
            "64kbit", "burst", "1600", "limit", "2000",
        ],
        vec![
            "tc", "filter", "add", "dev", d, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
            "match", "ip", "protocol", "17", "0xff", "match", "ip", "dport", &port, "0xffff",
            "flowid", "1:20",
        ],
    ] {
        in_ns(bench, &c);
    }
}

/// tbf's (sent packets, dropped packets) from `tc -s qdisc`.
fn tbf_counts(bench: &VethBench) -> (u64, u64) {
    let o = common::run(Command::new("ip").args([
        "netns",
        "exec",
        &bench.ns,
        "tc",
        "-s",
        "qdisc",
        "show",
        "dev",
        &bench.peer_if(),
    ]));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let block = text
        .split("qdisc ")
        .find(|b| b.starts_with("tbf 20:"))
        .unwrap_or_else(|| panic!("no tbf in {text}"));
    // " Sent 119364 bytes 406 pkt (dropped 66, overlimits ..."
    let t: Vec<&str> = block.split_whitespace().collect();
    let at = t.iter().position(|x| *x == "Sent").unwrap();
    let sent = t[at + 3].parse().unwrap();
    let dropped = t[at + 6].trim_end_matches(',').parse().unwrap();
    (sent, dropped)
}

/// sipp's `uac_pcap` scenario, playing `AUDIO` from its installed path, without the DTMF tail
/// (the pause after the audio shortened to the audio's length).
fn scenario(dir: &Path) -> PathBuf {
    let o = common::run(Command::new("sipp").args(["-sd", "uac_pcap"]));
    let mut s = String::from_utf8(o.stdout).unwrap();
    assert!(s.contains("pcap/g711a.pcap"), "sipp -sd uac_pcap: {s}");
    s = s.replace("pcap/g711a.pcap", AUDIO);
    let a = s
        .find("<pause milliseconds=\"8000\"/>")
        .expect("the audio pause");
    let b = s
        .find("<pause milliseconds=\"1000\"/>")
        .expect("the DTMF pause");
    s.replace_range(
        a..b + "<pause milliseconds=\"1000\"/>".len(),
        "<pause milliseconds=\"7300\"/>",
    );
    let p = dir.join("uac.xml");
    std::fs::write(&p, s).unwrap();
    p
}

/// Packets in `AUDIO`, by capinfos.
fn audio_packets() -> u64 {
    let o = common::run(Command::new("capinfos").args(["-c", "-M", AUDIO]));
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    text.lines()
        .find_map(|l| l.strip_prefix("Number of packets:"))
        .unwrap_or_else(|| panic!("capinfos: {text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The callee: sipp's `uas` on our side, echoing RTP, logging in `dir`.
fn uas(bench: &VethBench, dir: &Path) -> Child {
    let mut c = Command::new("sipp")
        .args([
            "-sn",
            "uas",
            "-i",
            &bench.host_ip,
            "-p",
            "5060",
            "-mi",
            &bench.host_ip,
        ])
        .args(["-mp", &UAS_MEDIA.to_string(), "-rtp_echo", "-nostdin"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sipp runs (scripts/setup.sh installs sip-tester)");
    // until it listens (the caller's INVITE would be retransmitted otherwise)
    let t = Instant::now();
    let want = format!("{}:5060", bench.host_ip);
    while t.elapsed() < Duration::from_secs(30) {
        let o = common::run(Command::new("ss").args(["-uln"]));
        if String::from_utf8_lossy(&o.stdout).contains(&want) {
            return c;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
    panic!("sipp uas never listened on {want}");
}

/// The caller: `calls` calls one after the other from the namespace, logging in `dir`.
fn uac(bench: &VethBench, dir: &Path, calls: u32) {
    let xml = scenario(dir);
    let o = common::run(
        Command::new("ip")
            .args(["netns", "exec", &bench.ns, "sipp"])
            .arg(format!("{}:5060", bench.host_ip))
            .arg("-sf")
            .arg(&xml)
            .args(["-i", &bench.peer_ip, "-p", "5060", "-mi", &bench.peer_ip])
            .args(["-mp", &UAC_MEDIA.to_string()])
            .args(["-m", &calls.to_string(), "-l", "1", "-r", "1"])
            .args(["-trace_stat", "-trace_msg", "-nostdin", "-timeout", "120s"])
            .current_dir(dir)
            .stdin(Stdio::null()),
    );
    assert!(
        o.status.success(),
        "sipp uac: {} {}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

fn file_ending(dir: &Path, end: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().ends_with(end))
        .unwrap_or_else(|| panic!("no *{end} in {}", dir.display()))
}

/// A call as sipp's message log shows it.
#[derive(Debug, Default)]
struct SippCall {
    /// Status codes of the responses received.
    codes: BTreeSet<u16>,
    /// When the 200 to the INVITE was received, s since the epoch.
    answer: Option<f64>,
    /// When the BYE was sent.
    bye: Option<f64>,
}

/// The caller's `-trace_msg` log: Call-ID → what it sent and got, with sipp's stamps (local
/// time, as this machine's `date` reads it).
fn sipp_messages(dir: &Path) -> BTreeMap<String, SippCall> {
    let text = std::fs::read_to_string(file_ending(dir, "_messages.log")).unwrap();
    let mut out: BTreeMap<String, SippCall> = BTreeMap::new();
    for block in text
        .split("----------------------------------------------- ")
        .skip(1)
    {
        let mut lines = block.lines();
        let stamp = lines.next().unwrap().trim();
        let when = epoch(stamp);
        let body: Vec<&str> = lines.collect();
        let received = body.iter().any(|l| l.contains("message received"));
        let Some(first) = body
            .iter()
            .find(|l| l.starts_with("SIP/2.0 ") || l.contains(" SIP/2.0"))
        else {
            continue;
        };
        let call_id = body
            .iter()
            .find_map(|l| l.strip_prefix("Call-ID: "))
            .unwrap()
            .trim()
            .to_string();
        let cseq = body
            .iter()
            .find_map(|l| l.strip_prefix("CSeq: "))
            .unwrap()
            .trim()
            .to_string();
        let c = out.entry(call_id).or_default();
        if let Some(code) = first.strip_prefix("SIP/2.0 ") {
            let code: u16 = code[..3].parse().unwrap();
            if received {
                c.codes.insert(code);
                if code == 200 && cseq.ends_with("INVITE") && c.answer.is_none() {
                    c.answer = Some(when);
                }
            }
        } else if first.starts_with("BYE ") && !received && c.bye.is_none() {
            c.bye = Some(when);
        }
    }
    out
}

/// `2026-11-27 04:18:27.544984` (local time) → seconds since the epoch, by `date`.
fn epoch(stamp: &str) -> f64 {
    let (day, frac) = stamp.rsplit_once('.').unwrap();
    let o = common::run(Command::new("date").args(["-d", day, "+%s"]));
    let secs: f64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    secs + format!("0.{frac}").parse::<f64>().unwrap()
}

/// The caller's `-trace_stat` file: the last row, header → value.
fn sipp_stats(dir: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(file_ending(dir, "_.csv")).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(';').collect()).collect();
    rows[0]
        .iter()
        .zip(rows.last().unwrap())
        .map(|(h, v)| (h.to_string(), v.to_string()))
        .collect()
}

/// `HH:MM:SS:uuuuuu` → seconds.
fn sipp_duration(v: &str) -> f64 {
    let f: Vec<f64> = v.split(':').map(|x| x.parse().unwrap()).collect();
    f[0] * 3600.0 + f[1] * 60.0 + f[2] + f[3] / 1e6
}

/// Waits (up to 120 s) until `path` holds `n` call lines.
fn wait_calls(path: &Path, n: usize) {
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(120) {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.matches("\"type\":\"call\"").count() >= n && text.ends_with('\n') {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{} never held {n} calls", path.display());
}

/// A stream's key in tshark's list: (src, sport, dst, dport, ssrc).
type StreamKey = (String, u16, String, u16, u32);

/// tshark's view of a capture: `-z rtp,streams` lines and the SIP (Call-ID → methods, codes).
#[derive(Debug, Default)]
struct TView {
    /// (src, sport, dst, dport, ssrc) → (packets, lost, max delta, mean jitter, max jitter).
    streams: BTreeMap<StreamKey, (u64, i64, f64, f64, f64)>,
    calls: BTreeMap<String, (BTreeSet<String>, BTreeSet<u16>)>,
}

fn tshark(pcap: &Path) -> TView {
    let o = common::run(
        Command::new("tshark")
            .arg("-r")
            .arg(pcap)
            .args(["-n", "-z", "rtp,streams", "-Y", "sip", "-T", "fields"])
            .args([
                "-E",
                "occurrence=f",
                "-e",
                "sip.Call-ID",
                "-e",
                "sip.Method",
            ])
            .args(["-e", "sip.Status-Code"])
            .stderr(Stdio::null()),
    );
    let mut v = TView::default();
    let mut in_tap = false;
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        if line.starts_with("=====") {
            in_tap = true;
            continue;
        }
        if !in_tap {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 3 || f[0].is_empty() {
                continue;
            }
            let e = v.calls.entry(f[0].to_string()).or_default();
            if !f[1].is_empty() {
                e.0.insert(f[1].to_string());
            }
            if let Ok(c) = f[2].parse() {
                e.1.insert(c);
            }
            continue;
        }
        let t: Vec<&str> = line.split_whitespace().collect();
        let Some(pct) = t
            .iter()
            .position(|x| x.starts_with('(') && x.ends_with("%)"))
        else {
            continue;
        };
        if t.len() < pct + 7 || !t[6].starts_with("0x") {
            continue;
        }
        let num = |i: usize| t[i].parse::<f64>().unwrap();
        v.streams.insert(
            (
                t[2].to_string(),
                t[3].parse().unwrap(),
                t[4].to_string(),
                t[5].parse().unwrap(),
                u32::from_str_radix(&t[6][2..], 16).unwrap(),
            ),
            (
                t[pct - 2].parse().unwrap(),
                t[pct - 1].parse().unwrap(),
                num(pct + 3),
                num(pct + 5),
                num(pct + 6),
            ),
        );
    }
    v
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Two sipp calls through the bottleneck; `weir voip -i` on the callee's side against sipp,
/// tc, tshark and `weir voip -r`.
#[test]
fn sipp_calls_through_a_bottleneck() {
    const CALLS: u32 = 2;
    let bench = VethBench::new();
    bottleneck(&bench);
    let tmp = tempfile::tempdir().unwrap();
    let (uac_dir, uas_dir) = (tmp.path().join("uac"), tmp.path().join("uas"));
    std::fs::create_dir_all(&uac_dir).unwrap();
    std::fs::create_dir_all(&uas_dir).unwrap();
    let live = tmp.path().join("live.jsonl");
    let pcap = tmp.path().join("tcpdump.pcap");
    let err = tmp.path().join("err.txt");
    let dump = tcpdump(&bench, &pcap);
    let weir = Running::start(
        &["voip", "-i", &bench.host_if, "-w", live.to_str().unwrap()],
        &err,
        "analyzing SIP and RTP on",
    );
    let mut callee = uas(&bench, &uas_dir);
    uac(&bench, &uac_dir, CALLS);
    // the calls are written as they finish (BYE + 2 s of linger), while weir runs
    wait_calls(&live, CALLS as usize);
    let (status, text) = weir.signal("-INT");
    stop(dump);
    let _ = callee.kill();
    let _ = callee.wait();
    assert!(status.success(), "{status} {text}");
    assert!(!text.contains("panicked"), "{text}");
    let (tbf_sent, tbf_dropped) = tbf_counts(&bench);

    let got = lines(&live);
    assert_eq!(
        got,
        offline(&pcap, &tmp.path().join("off.jsonl"), &[]),
        "{text}"
    );
    let calls: Vec<&serde_json::Value> = got.iter().filter(|r| r["type"] == "call").collect();
    let streams: Vec<&serde_json::Value> = got.iter().filter(|r| r["type"] == "stream").collect();

    // sipp: the Call-IDs, the responses the caller got, durations, its counters
    let sipp = sipp_messages(&uac_dir);
    let ids: BTreeSet<&str> = calls
        .iter()
        .map(|c| c["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, sipp.keys().map(String::as_str).collect(), "{got:#?}");
    let stats = sipp_stats(&uac_dir);
    assert_eq!(stats["SuccessfulCall(C)"], CALLS.to_string());
    assert_eq!(stats["FailedCall(C)"], "0");
    let mut lengths = 0.0;
    for c in &calls {
        let s = &sipp[c["call_id"].as_str().unwrap()];
        let codes: BTreeSet<u16> = c["status_codes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u16)
            .collect();
        assert_eq!(codes, s.codes, "{c}");
        assert_eq!(c["final_status"], 200, "{c}");
        assert_eq!(c["end_method"], "BYE", "{c}");
        assert_eq!(c["ended_by"], "caller", "{c}");
        assert_eq!(c["streams"], 2, "{c}");
        let sipp_duration_s = s.bye.unwrap() - s.answer.unwrap();
        assert!(
            (f(c, "duration_s") - sipp_duration_s).abs() * 1e3 < SIPP_CLOCK_MS,
            "weir {} s, sipp {sipp_duration_s} s: {c}",
            f(c, "duration_s")
        );
        lengths += f(c, "end_ts") - f(c, "invite_ts");
    }
    // sipp's CallLength: INVITE sent to the BYE's 200 received (mean, ms resolution)
    let sipp_len = sipp_duration(&stats["CallLength(C)"]);
    let weir_len = lengths / f64::from(CALLS);
    assert!(
        (weir_len - sipp_len).abs() * 1e3 < SIPP_CLOCK_MS,
        "weir {weir_len} s, sipp {sipp_len} s"
    );

    // tc: what the callee got is what tbf sent; what is lost, what tbf dropped
    let sent = audio_packets() * u64::from(CALLS);
    assert_eq!(
        tbf_sent + tbf_dropped,
        sent,
        "tbf counts all the RTP sipp played"
    );
    assert!(
        tbf_dropped > 0,
        "the bottleneck dropped nothing: no test of loss"
    );
    let fwd: Vec<&&serde_json::Value> = streams
        .iter()
        .filter(|s| s["dst_port"] == UAS_MEDIA)
        .collect();
    let back: Vec<&&serde_json::Value> = streams
        .iter()
        .filter(|s| s["src_port"] == UAS_MEDIA)
        .collect();
    assert_eq!(
        (fwd.len(), back.len()),
        (CALLS as usize, CALLS as usize),
        "{streams:#?}"
    );
    let sum =
        |v: &[&&serde_json::Value], k: &str| v.iter().map(|s| s[k].as_i64().unwrap()).sum::<i64>();
    assert_eq!(sum(&fwd, "packets") as u64, tbf_sent);
    assert_eq!(sum(&fwd, "lost") as u64, tbf_dropped);
    assert_eq!(sum(&fwd, "expected") as u64, sent);
    for s in &fwd {
        assert_eq!(s["found_by"], "sdp", "{s}");
        assert_eq!(s["duplicates"], 0, "{s}");
        assert_eq!(s["codec"], "PCMA", "{s}");
        // the echo of this stream: as many packets as the callee got
        let e = back
            .iter()
            .find(|b| b["dst_port"] == s["src_port"])
            .unwrap_or_else(|| panic!("no echo of {s}"));
        assert_eq!(e["packets"], s["packets"], "{e}");
        assert_eq!(e["call_id"], s["call_id"], "{e}");
    }

    // tshark on tcpdump's capture
    let t = tshark(&pcap);
    let tcalls: BTreeMap<String, (BTreeSet<String>, BTreeSet<u16>)> = calls
        .iter()
        .map(|c| {
            let m = c["methods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string());
            let s = c["status_codes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u16);
            (
                c["call_id"].as_str().unwrap().to_string(),
                (m.collect(), s.collect()),
            )
        })
        .collect();
    assert_eq!(tcalls, t.calls);
    assert_eq!(t.streams.len(), streams.len(), "{:#?}", t.streams);
    for s in &streams {
        let key = (
            s["src_ip"].as_str().unwrap().to_string(),
            s["src_port"].as_u64().unwrap() as u16,
            s["dst_ip"].as_str().unwrap().to_string(),
            s["dst_port"].as_u64().unwrap() as u16,
            s["ssrc"].as_u64().unwrap() as u32,
        );
        let (packets, lost, max_delta, mean_jitter, max_jitter) = *t
            .streams
            .get(&key)
            .unwrap_or_else(|| panic!("tshark has no {key:?}"));
        assert_eq!(s["packets"], packets, "{s}");
        assert_eq!(s["lost"], lost, "{s}");
        for (k, v) in [
            ("max_delta_ms", max_delta),
            ("mean_jitter_ms", mean_jitter),
            ("max_jitter_ms", max_jitter),
        ] {
            assert!(
                (f(s, k) - v).abs() <= TSHARK_MS,
                "{k}: weir {} tshark {v}: {s}",
                f(s, k)
            );
        }
    }
    // the bottleneck delayed and jittered the callee's stream, not the echo's path
    for s in &fwd {
        assert!(f(s, "max_jitter_ms") > 1.0, "{s}");
    }
}

/// `kill -9` once a call is over: the file already holds it (its streams and the call, whole
/// lines), the same records `weir voip -r` writes from tcpdump's capture.
#[test]
fn kill_9_keeps_the_finished_calls() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (uac_dir, uas_dir) = (tmp.path().join("uac"), tmp.path().join("uas"));
    std::fs::create_dir_all(&uac_dir).unwrap();
    std::fs::create_dir_all(&uas_dir).unwrap();
    let live = tmp.path().join("live.jsonl");
    let pcap = tmp.path().join("tcpdump.pcap");
    let err = tmp.path().join("err.txt");
    let dump = tcpdump(&bench, &pcap);
    let weir = Running::start(
        &[
            "voip",
            "-i",
            &bench.host_if,
            "-w",
            live.to_str().unwrap(),
            "--call-linger",
            "0.5",
        ],
        &err,
        "analyzing SIP and RTP on",
    );
    let mut callee = uas(&bench, &uas_dir);
    uac(&bench, &uac_dir, 1);
    wait_calls(&live, 1);
    let (status, text) = weir.signal("-KILL");
    stop(dump);
    let _ = callee.kill();
    let _ = callee.wait();
    assert_eq!(status.code(), None, "{status} {text}");
    let got = lines(&live);
    assert_eq!(got.len(), 3, "a call and its two streams: {got:#?}");
    let sipp = sipp_messages(&uac_dir);
    let call = got.iter().find(|r| r["type"] == "call").unwrap();
    assert!(
        sipp.contains_key(call["call_id"].as_str().unwrap()),
        "{call}"
    );
    assert_eq!(
        got,
        offline(
            &pcap,
            &tmp.path().join("off.jsonl"),
            &["--call-linger", "0.5"]
        )
    );
}
