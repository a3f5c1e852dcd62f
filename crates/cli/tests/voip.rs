//! `weir voip` against tshark and against hand-computed figures, and the command's hostile cases.
//!
//! - Corpus: for every file, one tshark run gives its RTP streams (`-z rtp,streams` with
//!   `-o rtp.heuristic_rtp:TRUE`, so RTP without SIP counts too) and its SIP messages
//!   (`-Y sip -T fields -e sip.Call-ID -e sip.Method -e sip.Status-Code`); `weir voip` must run
//!   without a panic on every file, report every stream tshark reports (same addresses, ports,
//!   SSRC, payload type) with the same packet and lost counts, max delta and max/mean jitter
//!   within [`TOL_MS`], and the same Call-IDs with the same methods and status codes.
//! - A hand-built capture (a SIP call with SDP, a re-INVITE to a new port, loss, a duplicate,
//!   reordering and a late packet; a SIP call over TCP cut across segments; RTP without SIP;
//!   RTP-looking noise): every figure is computed by hand in the test, and tshark is asked too.
//! - sipp calls (uac_pcap: RTP from a pcap) captured on loopback, when sipp is installed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::weir;

/// Tolerance on max delta and jitter against tshark, ms. tshark prints them with three
/// decimals (±0.0005 ms of rounding) and computes them with the same RFC 3550 formulas; the
/// remaining room is for packets whose RTP timestamp goes backwards, where tshark measures
/// from the last in-order packet and weir from the previous arrival (none in the corpus or
/// the generated calls: the bound is what rounding needs plus a margin).
const TOL_MS: f64 = 0.002;

/// One stream line of `tshark -z rtp,streams`.
#[derive(Clone, Debug, PartialEq)]
struct TStream {
    key: (String, u16, String, u16, u32),
    payload: String,
    packets: u64,
    lost: i64,
    max_delta: f64,
    mean_jitter: f64,
    max_jitter: f64,
}

/// tshark's streams and SIP (Call-ID → methods, codes) of one file.
#[derive(Default, Debug)]
struct TView {
    streams: Vec<TStream>,
    calls: BTreeMap<String, (BTreeSet<String>, BTreeSet<u16>)>,
}

fn tshark_view(file: &Path) -> TView {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args(["-n", "-o", "rtp.heuristic_rtp:TRUE", "-z", "rtp,streams"])
        .args(["-Y", "sip", "-T", "fields", "-E", "occurrence=f"])
        .args([
            "-e",
            "sip.Call-ID",
            "-e",
            "sip.Method",
            "-e",
            "sip.Status-Code",
        ])
        .stderr(Stdio::null())
        .output()
        .expect("tshark runs");
    let mut v = TView::default();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut in_tap = false;
    for line in text.lines() {
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
        if pct < 10 || t.len() < pct + 7 || !t[6].starts_with("0x") {
            continue;
        }
        let num = |i: usize| t[i].parse::<f64>().unwrap();
        v.streams.push(TStream {
            key: (
                t[2].to_string(),
                t[3].parse().unwrap(),
                t[4].to_string(),
                t[5].parse().unwrap(),
                u32::from_str_radix(&t[6][2..], 16).unwrap(),
            ),
            payload: t[7..pct - 2].join(" "),
            packets: t[pct - 2].parse().unwrap(),
            lost: t[pct - 1].parse().unwrap(),
            max_delta: num(pct + 3),
            mean_jitter: num(pct + 5),
            max_jitter: num(pct + 6),
        });
    }
    v
}

/// weir's stream and call records of one file.
fn weir_view(file: &Path, dir: &Path) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let calls = dir.join("calls.jsonl");
    let streams = dir.join("streams.jsonl");
    let out = weir()
        .args(["voip", "-r"])
        .arg(file)
        .arg("-w")
        .arg(&calls)
        .arg("--streams")
        .arg(&streams)
        .output()
        .expect("weir runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{}: {err}", file.display());
    // damaged corpus files end with a clear error or warning, never silently
    if !out.status.success() && !err.contains("warning") && !err.contains("error: ") {
        panic!("{}: {err}", file.display());
    }
    let read = |p: &Path| -> Vec<serde_json::Value> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON line"))
            .collect()
    };
    (read(&streams), read(&calls))
}

fn key_of(s: &serde_json::Value) -> (String, u16, String, u16, u32) {
    (
        s["src_ip"].as_str().unwrap().to_string(),
        s["src_port"].as_u64().unwrap() as u16,
        s["dst_ip"].as_str().unwrap().to_string(),
        s["dst_port"].as_u64().unwrap() as u16,
        s["ssrc"].as_u64().unwrap() as u32,
    )
}

/// tshark's payload column for a payload type, as far as the corpus and the tests need it.
fn tshark_payload_name(pt: u64, codec: Option<&str>) -> String {
    match (pt, codec) {
        (0, _) => "g711U".into(),
        (8, _) => "g711A".into(),
        (18, _) => "g729".into(),
        (_, Some(c)) => c.to_string(),
        _ => format!("{pt}"),
    }
}

/// What [`compare`] counted in one file.
#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    /// Streams in both lists, every figure agreeing.
    streams: usize,
    /// tshark-only streams of fewer than 4 packets: its heuristic takes any single datagram
    /// that parses as RTP version 2; weir's wants a steady SSRC and sequence over ≥ 4 packets
    /// (see `StreamStats::steady`), so it leaves these out on purpose.
    short_tshark_only: usize,
    /// Call-IDs in both lists with the same methods and status codes.
    calls: usize,
}

/// Compares one file's views and panics on any difference outside [`Counts`]' classes.
fn compare(file: &Path, t: &TView, ws: &[serde_json::Value], wc: &[serde_json::Value]) -> Counts {
    let name = file.display();
    let mut n = Counts::default();
    for ts in &t.streams {
        let Some(w) = ws.iter().find(|s| key_of(s) == ts.key) else {
            assert!(
                ts.packets < 4,
                "{name}: tshark stream {ts:?} not reported by weir: {ws:?}"
            );
            n.short_tshark_only += 1;
            continue;
        };
        let pt = w["payload_type"].as_u64().unwrap();
        let pname = tshark_payload_name(pt, w["codec"].as_str());
        assert!(
            ts.payload.eq_ignore_ascii_case(&pname) || ts.payload.contains(&pname),
            "{name}: payload {} vs weir {pt} ({pname})",
            ts.payload
        );
        assert_eq!(w["packets"].as_u64().unwrap(), ts.packets, "{name} {ts:?}");
        assert_eq!(w["lost"].as_i64().unwrap(), ts.lost, "{name} {ts:?}");
        let close = |k: &str, want: f64| {
            let got = w[k].as_f64().unwrap();
            assert!(
                (got - want).abs() <= TOL_MS,
                "{name} {k}: weir {got} tshark {want} {ts:?}"
            );
        };
        close("max_delta_ms", ts.max_delta);
        // tshark's mean jitter is a running mean divided by all packets so far but updated on
        // regular packets only, and around duplicates and reordered packets its reference
        // packet differs from weir's (the hand-built stream: max jitter 4.901 vs weir 4.839);
        // on streams where every packet after the first is regular both are the same formula
        if w["seq_errors"] == 0
            && w["markers"].as_u64() <= Some(1)
            && w["payload_type_changes"] == 0
        {
            close("max_jitter_ms", ts.max_jitter);
            close("mean_jitter_ms", ts.mean_jitter);
        }
        n.streams += 1;
    }
    // every weir stream is one of tshark's
    for w in ws {
        assert!(
            t.streams.iter().any(|ts| ts.key == key_of(w)),
            "{name}: weir stream not in tshark's list: {w}"
        );
    }
    // tshark's call list has one entry per Call-ID over the whole file; weir writes a call once
    // it is over and has lingered, so messages of the same Call-ID that come later (REGISTER
    // refreshes minutes apart, CANCEL retransmissions after the 408) start a new record: the
    // records of one Call-ID, in the order written, must start one after the other and together
    // hold what tshark saw
    let mut wcalls: BTreeMap<String, (BTreeSet<String>, BTreeSet<u16>)> = BTreeMap::new();
    let mut last_start: BTreeMap<String, f64> = BTreeMap::new();
    for c in wc {
        let id = c["call_id"].as_str().unwrap().to_string();
        let ts = c["ts"].as_f64().unwrap();
        if let Some(prev) = last_start.insert(id.clone(), ts) {
            assert!(
                prev < ts,
                "{name}: records of {id} out of order: {prev} then {ts}"
            );
        }
        let (methods, codes) = wcalls.entry(id).or_default();
        methods.extend(
            c["methods"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_str().unwrap().to_string()),
        );
        codes.extend(
            c["status_codes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.as_u64().unwrap() as u16),
        );
    }
    assert_eq!(
        wcalls, t.calls,
        "{name}: SIP call list (Call-ID → methods, codes)"
    );
    n.calls = t.calls.len();
    n
}

#[test]
fn streams_and_calls_agree_with_tshark_on_the_corpus() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    if !weir_testkit::have("tshark") {
        return;
    }
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let dir = weir_testkit::TempDir::new("voip-corpus");
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(f) = files.get(i) else { break };
                    let (ws, wc) = weir_view(f, dir.path());
                    let t = tshark_view(f);
                    results.lock().unwrap().push((f.clone(), t, ws, wc));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut streams, mut short, mut calls, mut files_with) = (0, 0, 0, 0);
    for (f, t, ws, wc) in &results {
        if t.streams.is_empty() && t.calls.is_empty() && ws.is_empty() && wc.is_empty() {
            continue;
        }
        files_with += 1;
        let c = compare(f, t, ws, wc);
        streams += c.streams;
        short += c.short_tshark_only;
        calls += c.calls;
    }
    eprintln!(
        "corpus: {} files, {files_with} with SIP/RTP; {streams} streams and {calls} Call-IDs \
         agree with tshark; {short} tshark-only heuristic streams of < 4 packets",
        results.len()
    );
    assert_eq!(results.len(), files.len());
    assert!(
        files_with >= 5 && streams >= 1 && calls >= 8,
        "{files_with} {streams} {calls}"
    );
}

// ---------------------------------------------------------------------------------------
// A hand-built capture.

const BASE_S: u64 = 1_700_000_000;

struct Pcap(Vec<u8>);

impl Pcap {
    fn new() -> Pcap {
        let mut b = Vec::new();
        b.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes()); // nanosecond pcap
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&4u16.to_le_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&65535u32.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes()); // Ethernet
        Pcap(b)
    }

    fn frame(&mut self, at_ms: f64, src: [u8; 4], dst: [u8; 4], proto: u8, l4: &[u8]) {
        let ns = (at_ms * 1e6).round() as u64;
        let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0];
        let total = (20 + l4.len()) as u16;
        let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0, 0, 64, proto, 0, 0];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip.extend_from_slice(&src);
        ip.extend_from_slice(&dst);
        let mut sum: u32 = ip
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(l4);
        let secs = BASE_S + ns / 1_000_000_000;
        self.0.extend_from_slice(&(secs as u32).to_le_bytes());
        self.0
            .extend_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
        self.0.extend_from_slice(&(f.len() as u32).to_le_bytes());
        self.0.extend_from_slice(&(f.len() as u32).to_le_bytes());
        self.0.extend_from_slice(&f);
    }

    fn udp(&mut self, at_ms: f64, src: ([u8; 4], u16), dst: ([u8; 4], u16), p: &[u8]) {
        let mut u = Vec::new();
        u.extend_from_slice(&src.1.to_be_bytes());
        u.extend_from_slice(&dst.1.to_be_bytes());
        u.extend_from_slice(&((8 + p.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(p);
        self.frame(at_ms, src.0, dst.0, 17, &u);
    }

    fn tcp(&mut self, at_ms: f64, src: ([u8; 4], u16), dst: ([u8; 4], u16), seq: u32, p: &[u8]) {
        let mut t = Vec::new();
        t.extend_from_slice(&src.1.to_be_bytes());
        t.extend_from_slice(&dst.1.to_be_bytes());
        t.extend_from_slice(&seq.to_be_bytes());
        t.extend_from_slice(&1u32.to_be_bytes());
        t.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
        t.extend_from_slice(p);
        self.frame(at_ms, src.0, dst.0, 6, &t);
    }
}

fn rtp(pt: u8, marker: bool, seq: u16, ts: u32, ssrc: u32) -> Vec<u8> {
    let mut p = vec![0x80, pt | if marker { 0x80 } else { 0 }];
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&ts.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(&[0xd5; 160]);
    p
}

fn sip(
    start: &str,
    call_id: &str,
    cseq: &str,
    from: &str,
    to: &str,
    extra: &str,
    sdp: Option<&str>,
) -> Vec<u8> {
    let body = sdp.unwrap_or("");
    let ct = if sdp.is_some() {
        "Content-Type: application/sdp\r\n"
    } else {
        ""
    };
    format!(
        "{start}\r\nVia: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK{cseq_n}\r\nFrom: {from}\r\n\
         To: {to}\r\nCall-ID: {call_id}\r\nCSeq: {cseq}\r\n{extra}{ct}Content-Length: {}\r\n\r\n{body}",
        body.len(),
        cseq_n = cseq.split(' ').next().unwrap()
    )
    .into_bytes()
}

fn sdp(addr: &str, port: u16) -> String {
    format!(
        "v=0\r\no=- 1 1 IN IP4 {addr}\r\ns=-\r\nc=IN IP4 {addr}\r\nt=0 0\r\n\
         m=audio {port} RTP/AVP 0 101\r\na=rtpmap:101 telephone-event/8000\r\n"
    )
}

/// An IPv4 address and port.
type Ep4 = ([u8; 4], u16);

const A: [u8; 4] = [10, 0, 0, 1];
const B: [u8; 4] = [10, 0, 0, 2];

/// The hand-built capture; see the assertions of [`hand_built_call_and_streams`] for what it
/// holds and what each figure must be.
fn hand_capture() -> Vec<u8> {
    let mut p = Pcap::new();
    let (a5060, b5060) = ((A, 5060), (B, 5060));
    let (alice, bob) = ("<sip:alice@a>;tag=a1", "<sip:bob@b>");
    let bob_t = "<sip:bob@b>;tag=b1";
    let id = "hand-1@test";
    p.udp(
        0.0,
        a5060,
        b5060,
        &sip(
            "INVITE sip:bob@b SIP/2.0",
            id,
            "1 INVITE",
            alice,
            bob,
            "User-Agent: hand-caller\r\n",
            Some(&sdp("10.0.0.1", 40000)),
        ),
    );
    p.udp(
        100.0,
        b5060,
        a5060,
        &sip("SIP/2.0 100 Trying", id, "1 INVITE", alice, bob, "", None),
    );
    p.udp(
        1500.0,
        b5060,
        a5060,
        &sip(
            "SIP/2.0 180 Ringing",
            id,
            "1 INVITE",
            alice,
            bob_t,
            "Server: hand-callee\r\n",
            None,
        ),
    );
    p.udp(
        3000.0,
        b5060,
        a5060,
        &sip(
            "SIP/2.0 200 OK",
            id,
            "1 INVITE",
            alice,
            bob_t,
            "",
            Some(&sdp("10.0.0.2", 50000)),
        ),
    );
    p.udp(
        3010.0,
        a5060,
        b5060,
        &sip("ACK sip:bob@b SIP/2.0", id, "1 ACK", alice, bob_t, "", None),
    );
    // A → B: 20 packets, seq 65530.. (wraps after 65535), 160 samples / 20 ms apart.
    // index 5 lost; index 10 sent twice (duplicate 1 ms later); 15 before 14.
    let t0 = 3100.0;
    let seq = |i: u16| 65530u16.wrapping_add(i);
    let mut order: Vec<(f64, u16)> = Vec::new();
    for i in 0..20u16 {
        match i {
            5 => continue,
            14 => order.push((t0 + 15.0 * 20.0 + 1.0, 14)),
            15 => order.push((t0 + 14.0 * 20.0, 15)),
            _ => order.push((t0 + f64::from(i) * 20.0, i)),
        }
        if i == 10 {
            order.push((t0 + 10.0 * 20.0 + 1.0, 10));
        }
    }
    order.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    // B → A: 10 packets, index 4 arrives 8 ms late, the others on time
    let t1 = 3105.0;
    let mut all: Vec<(f64, Ep4, Ep4, Vec<u8>)> = Vec::new();
    for (at, i) in order {
        all.push((
            at,
            (A, 40000),
            (B, 50000),
            rtp(0, i == 0, seq(i), u32::from(i) * 160, 0x1111_1111),
        ));
    }
    for i in 0..10u16 {
        let late = if i == 4 { 8.0 } else { 0.0 };
        all.push((
            t1 + f64::from(i) * 20.0 + late,
            (B, 50000),
            (A, 40000),
            rtp(0, false, 1000 + i, 5000 + u32::from(i) * 160, 0x2222_2222),
        ));
    }
    // RTP without SIP: 10.0.0.3:30000 → 10.0.0.4:30002, PCMA, 10 clean packets
    for i in 0..10u16 {
        all.push((
            t0 + 2.0 + f64::from(i) * 20.0,
            ([10, 0, 0, 3], 30000),
            ([10, 0, 0, 4], 30002),
            rtp(8, false, 7 + i, u32::from(i) * 160, 0x3333_3333),
        ));
    }
    // noise that parses as RTP once: three datagrams with random sequence numbers
    for (i, q) in [4000u16, 17, 60000].into_iter().enumerate() {
        all.push((
            t0 + 3.0 + i as f64 * 50.0,
            ([10, 0, 0, 5], 40000),
            ([10, 0, 0, 6], 40002),
            rtp(96, false, q, u32::from(q) * 7, 0x4444_4444 + i as u32),
        ));
    }
    all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    for (at, s, d, pl) in &all {
        p.udp(*at, *s, *d, pl);
    }
    // re-INVITE from B at 6 s moving B's port to 50002; A → B continues there (5 packets)
    p.udp(
        6000.0,
        b5060,
        a5060,
        &sip(
            "INVITE sip:alice@a SIP/2.0",
            id,
            "1 INVITE",
            bob_t,
            alice,
            "",
            Some(&sdp("10.0.0.2", 50002)),
        ),
    );
    p.udp(
        6010.0,
        a5060,
        b5060,
        &sip(
            "SIP/2.0 200 OK",
            id,
            "1 INVITE",
            bob_t,
            alice,
            "",
            Some(&sdp("10.0.0.1", 40000)),
        ),
    );
    for i in 0..5u16 {
        p.udp(
            6100.0 + f64::from(i) * 20.0,
            (A, 40000),
            (B, 50002),
            &rtp(0, i == 0, 100 + i, 80_000 + u32::from(i) * 160, 0x1111_1111),
        );
    }
    p.udp(
        10_000.0,
        a5060,
        b5060,
        &sip("BYE sip:bob@b SIP/2.0", id, "2 BYE", alice, bob_t, "", None),
    );
    p.udp(
        10_020.0,
        b5060,
        a5060,
        &sip("SIP/2.0 200 OK", id, "2 BYE", alice, bob_t, "", None),
    );
    // SIP over TCP: an INVITE cut across two segments, then 100 and 486 in one segment
    let (c, s) = (([10, 0, 0, 7], 5070), ([10, 0, 0, 8], 5060));
    let inv = sip(
        "INVITE sip:carol@c SIP/2.0",
        "tcp-1@test",
        "1 INVITE",
        "<sip:dave@d>;tag=d1",
        "<sip:carol@c>",
        "",
        None,
    );
    p.tcp(11_000.0, c, s, 1000, &inv[..30]);
    p.tcp(11_001.0, c, s, 1030, &inv[30..]);
    let mut resp = sip(
        "SIP/2.0 100 Trying",
        "tcp-1@test",
        "1 INVITE",
        "<sip:dave@d>;tag=d1",
        "<sip:carol@c>",
        "",
        None,
    );
    resp.extend(sip(
        "SIP/2.0 486 Busy Here",
        "tcp-1@test",
        "1 INVITE",
        "<sip:dave@d>;tag=d1",
        "<sip:carol@c>;tag=c1",
        "",
        None,
    ));
    // the 100 alone, then the 486 in its own segment: tshark's fields output (-E
    // occurrence=f) shows one message per segment; two messages in one segment are framed in
    // weir-voip's unit test `stream_framing_by_content_length`
    let split = resp.windows(11).position(|w| w == b"SIP/2.0 486").unwrap();
    p.tcp(11_050.0, s, c, 5000, &resp[..split]);
    p.tcp(11_060.0, s, c, 5000 + split as u32, &resp[split..]);
    p.0
}

fn stream(ws: &[serde_json::Value], src_port: u64, dst_port: u64) -> &serde_json::Value {
    ws.iter()
        .find(|s| s["src_port"] == src_port && s["dst_port"] == dst_port)
        .unwrap_or_else(|| panic!("no stream {src_port} → {dst_port} in {ws:?}"))
}

#[test]
fn hand_built_call_and_streams() {
    let tmp = weir_testkit::TempDir::new("voip-hand");
    let f = tmp.join("hand.pcap");
    std::fs::write(&f, hand_capture()).unwrap();
    let (ws, wc) = weir_view(&f, tmp.path());
    assert_eq!(ws.len(), 4, "{ws:?}");

    // A → B before the re-INVITE: seq 65530..=13 with one wrap; 20 sent, #5 lost, #10 twice.
    // expected = 20; received = 19 + 1 duplicate = 20; RFC 3550 lost = 20 − 20 = 0;
    // missing = 20 − 19 distinct = 1; reordered 1 (#14 after #15).
    let ab = stream(&ws, 40000, 50000);
    assert_eq!(ab["found_by"], "sdp");
    assert_eq!(ab["call_id"], "hand-1@test");
    assert_eq!(ab["packets"], 20);
    assert_eq!(ab["expected"], 20);
    assert_eq!(ab["lost"], 0);
    assert_eq!(ab["missing"], 1);
    assert_eq!(ab["duplicates"], 1);
    assert_eq!(ab["reordered"], 1);
    assert_eq!(ab["markers"], 1);
    assert_eq!(ab["codec"], "PCMU");
    assert_eq!(ab["ptime_ms"], 20.0);

    // B → A: 20 ms apart, #4 8 ms late. |D| = 8 at #4, 8 at #5, else 0:
    // J4 = 8/16 = 0.5, J5 = 0.5 + (8 − 0.5)/16 = 0.96875, then ×15/16 four times.
    // Gaps: 28 ms before #4 (the largest), 12 after.
    let ba = stream(&ws, 50000, 40000);
    let j_end = 0.96875 * (15.0f64 / 16.0).powi(4);
    assert!(
        (ba["jitter_ms"].as_f64().unwrap() - j_end).abs() < 1e-6,
        "{ba}"
    );
    assert!((ba["max_jitter_ms"].as_f64().unwrap() - 0.96875).abs() < 1e-6);
    // mean over the 9 estimates after packets 2..10: 0,0,0,0.5,0.96875,J6..J9
    let mut js = vec![0.0, 0.0, 0.0, 0.5, 0.96875];
    for _ in 0..4 {
        let last = *js.last().unwrap();
        js.push(last * 15.0 / 16.0);
    }
    let mean = js.iter().sum::<f64>() / 9.0;
    assert!((ba["mean_jitter_ms"].as_f64().unwrap() - mean).abs() < 1e-6);
    assert!((ba["max_delta_ms"].as_f64().unwrap() - 28.0).abs() < 1e-6);
    assert_eq!(ba["lost"], 0);
    assert_eq!(ba["missing"], 0);
    // E-model for G.711 (Ie 0, Bpl 25.1), no loss, d = 20 ms ptime + max(2 × mean, 20) = 40:
    // R = 93.2 − 0.024·40 = 92.24
    assert!((ba["r_factor"].as_f64().unwrap() - 92.24).abs() < 1e-9);

    // after the re-INVITE: the same SSRC to B's new port, found through the new SDP
    let moved = stream(&ws, 40000, 50002);
    assert_eq!(moved["found_by"], "sdp");
    assert_eq!(moved["packets"], 5);
    assert_eq!(moved["ssrc"], 0x1111_1111u32);

    // RTP without SIP, marked as such; the noise is not reported
    let h = stream(&ws, 30000, 30002);
    assert_eq!(h["found_by"], "heuristic");
    assert!(h.get("call_id").is_none());
    assert_eq!(
        (h["packets"].as_u64(), h["lost"].as_i64()),
        (Some(10), Some(0))
    );
    assert_eq!(h["codec"], "PCMA");

    // the call
    assert_eq!(wc.len(), 2, "{wc:?}");
    let c = &wc[0];
    assert_eq!(c["call_id"], "hand-1@test");
    assert_eq!(c["method"], "INVITE");
    assert_eq!(c["from"], "sip:alice@a");
    assert_eq!(c["to"], "sip:bob@b");
    assert_eq!(c["user_agent"], "hand-caller");
    assert_eq!(c["callee_user_agent"], "hand-callee");
    assert_eq!(c["caller"], "10.0.0.1:5060");
    assert_eq!(c["final_status"], 200);
    assert_eq!(c["invite_ts"], BASE_S as f64);
    assert_eq!(c["ringing_ts"], BASE_S as f64 + 1.5);
    assert_eq!(c["answer_ts"], BASE_S as f64 + 3.0);
    assert_eq!(c["end_ts"], BASE_S as f64 + 10.0);
    assert_eq!(c["end_method"], "BYE");
    assert_eq!(c["ended_by"], "caller");
    assert!((c["post_dial_delay_ms"].as_f64().unwrap() - 1500.0).abs() < 1e-6);
    assert!((c["duration_s"].as_f64().unwrap() - 7.0).abs() < 1e-9);
    assert_eq!(c["reinvites"], 1);
    assert_eq!(c["streams"], 3);
    assert_eq!(c["rtp_packets"], 35);
    assert_eq!(c["status_codes"], serde_json::json!([100, 180, 200]));
    assert_eq!(c["methods"], serde_json::json!(["INVITE", "ACK", "BYE"]));
    assert_eq!(c["sdp"].as_array().unwrap().len(), 3);
    // the worst stream is the one with a missing packet: 5 % loss over 20 expected
    let ie_eff = 95.0 * 5.0 / (5.0 + 25.1);
    let worst_r = c["r_factor"].as_f64().unwrap();
    assert!(
        worst_r < 92.24 - ie_eff + 1.0 && worst_r > 92.24 - ie_eff - 1.0,
        "{worst_r}"
    );

    let t = &wc[1];
    assert_eq!(t["call_id"], "tcp-1@test");
    assert_eq!(t["transport"], "tcp");
    assert_eq!(t["final_status"], 486);
    assert_eq!(t["status_codes"], serde_json::json!([100, 486]));

    // tshark on the same file: same calls; same packets/lost/max delta/jitter where it sees
    // the streams (it follows the SDP; the heuristic finds the SIP-less one)
    if weir_testkit::have("tshark") {
        let tv = tshark_view(&f);
        let c = compare(&f, &tv, &ws, &wc);
        // the four streams, and tshark's heuristic takes each noise datagram as a stream
        assert_eq!(
            (c.streams, c.short_tshark_only, c.calls),
            (4, 3, 2),
            "{tv:?}"
        );
    }
}

/// `--plot DIR --plot-interval 0.1` on the hand-built capture: one chart for the call (its 3
/// streams) and one for the stream found without SIP; the TCP call (486, no media) gets none.
/// The CSV's intervals of A → B (first packet at 3.100 s, 100 ms intervals), by hand from the
/// capture: [3.1, 3.2) #0–#4: 5 packets, expected 5; [3.2, 3.3) #6–#9 (#5 never sent): 4,
/// expected 5, lost 1; [3.3, 3.4) #10 twice, #11–#13, #15: 6, expected 6 (highest #15);
/// [3.4, 3.5) #14 late, #16–#19: 5, expected 4, lost −1. For every stream the intervals add
/// up to its record's packets, expected and lost, and the last interval's jitter is the
/// record's. The SVG parses as XML with one line per stream in each of its two panels.
/// A CSV row of a chart: packets, expected, lost, jitter (ms).
type Interval = (u64, u64, i64, f64);

#[test]
fn plot_charts_each_calls_streams_over_time() {
    let tmp = weir_testkit::TempDir::new("voip-plot");
    let f = tmp.join("hand.pcap");
    std::fs::write(&f, hand_capture()).unwrap();
    let dir = tmp.join("charts");
    let out = weir()
        .args(["voip", "-r"])
        .arg(&f)
        .arg("-w")
        .arg(tmp.join("calls.jsonl"))
        .arg("--streams")
        .arg(tmp.join("streams.jsonl"))
        .arg("--plot")
        .arg(&dir)
        .args(["--plot-interval", "0.1"])
        .output()
        .unwrap();
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("weir: 2 charts in "), "{err}");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "call-1-hand-1_test.csv",
            "call-1-hand-1_test.svg",
            "stream-2-33333333.csv",
            "stream-2-33333333.svg"
        ]
    );
    let records: Vec<serde_json::Value> = std::fs::read_to_string(tmp.join("streams.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // (src, dst, ssrc) → its intervals (packets, expected, lost, jitter)
    let mut rows: BTreeMap<(String, String, String), Vec<Interval>> = BTreeMap::new();
    for name in ["call-1-hand-1_test.csv", "stream-2-33333333.csv"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("stream,src,dst,ssrc,start_s,offset_s,packets,expected,lost,jitter_ms")
        );
        for l in lines {
            let c: Vec<&str> = l.split(',').collect();
            assert_eq!(c.len(), 10, "{l}");
            rows.entry((c[1].into(), c[2].into(), c[3].into()))
                .or_default()
                .push((
                    c[6].parse().unwrap(),
                    c[7].parse().unwrap(),
                    c[8].parse().unwrap(),
                    c[9].parse().unwrap(),
                ));
        }
    }
    assert_eq!(rows.len(), 4, "{rows:?}");
    let ab = &rows[&(
        "10.0.0.1:40000".to_string(),
        "10.0.0.2:50000".to_string(),
        "11111111".to_string(),
    )];
    let by_hand: Vec<(u64, u64, i64)> = ab.iter().map(|r| (r.0, r.1, r.2)).collect();
    assert_eq!(by_hand, [(5, 5, 0), (4, 5, 1), (6, 6, 0), (5, 4, -1)]);
    for r in &records {
        let k = (
            format!("{}:{}", r["src_ip"].as_str().unwrap(), r["src_port"]),
            format!("{}:{}", r["dst_ip"].as_str().unwrap(), r["dst_port"]),
            format!("{:08x}", r["ssrc"].as_u64().unwrap()),
        );
        let v = rows.get(&k).unwrap_or_else(|| panic!("{k:?} not charted"));
        assert_eq!(v.iter().map(|x| x.0).sum::<u64>(), r["packets"], "{k:?}");
        assert_eq!(v.iter().map(|x| x.1).sum::<u64>(), r["expected"], "{k:?}");
        assert_eq!(v.iter().map(|x| x.2).sum::<i64>(), r["lost"], "{k:?}");
        let last = v.last().unwrap().3;
        assert!(
            (last - r["jitter_ms"].as_f64().unwrap()).abs() < 1e-6,
            "{k:?}: {last} vs {}",
            r["jitter_ms"]
        );
    }
    for (svg, streams) in [("call-1-hand-1_test.svg", 3), ("stream-2-33333333.svg", 1)] {
        let path = dir.join(svg);
        let o = Command::new("python3")
            .args([
                "-c",
                "import sys,xml.etree.ElementTree as E\n\
                 r=E.parse(sys.argv[1]).getroot()\n\
                 print(len(r.findall('{http://www.w3.org/2000/svg}polyline')))",
            ])
            .arg(&path)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", stderr_of(&o));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            (2 * streams).to_string(),
            "{svg}"
        );
    }

    // hostile: bad intervals, live, a file where the directory goes, /dev/full
    for bad in ["0", "-1", "nan", "inf", "1e99", "x"] {
        let out = weir()
            .args(["voip", "-r"])
            .arg(&f)
            .arg("--plot")
            .arg(&dir)
            .args(["--plot-interval", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr_of(&out));
        assert!(
            stderr_of(&out).contains("--plot-interval"),
            "{bad}: {}",
            stderr_of(&out)
        );
    }
    // live, a file where the chart directory goes fails before capture starts
    let out = weir()
        .args(["voip", "-i", "lo", "-w"])
        .arg(tmp.join("live.jsonl"))
        .arg("--plot")
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains(&format!("cannot write {}", f.display())),
        "{}",
        stderr_of(&out)
    );
    assert!(!stderr_of(&out).contains("panicked"));
    for target in [f.clone(), PathBuf::from("/dev/full")] {
        let out = weir()
            .args(["voip", "-r"])
            .arg(&f)
            .arg("-w")
            .arg(tmp.join("c2.jsonl"))
            .arg("--plot")
            .arg(&target)
            .output()
            .unwrap();
        let e = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{e}");
        assert!(e.contains("--plot: cannot create"), "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

// ---------------------------------------------------------------------------------------
// Hostile cases.

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn sample(tmp: &weir_testkit::TempDir) -> PathBuf {
    let f = tmp.join("s.pcap");
    std::fs::write(&f, hand_capture()).unwrap();
    f
}

#[test]
fn hostile_paths_numbers_and_outputs() {
    let tmp = weir_testkit::TempDir::new("voip-hostile");
    let f = sample(&tmp);
    let out = weir()
        .args(["voip", "-r", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("cannot open /nonexistent/x.pcap"),
        "{}",
        stderr_of(&out)
    );
    // a usage error (exit 2), as for weir http and weir flows: -r or -i
    let out = weir().args(["voip"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("give input files with -r"));
    // output over the input
    for flag in ["-w", "--streams"] {
        let out = weir()
            .args(["voip", "-r"])
            .arg(&f)
            .arg(flag)
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flag}");
        assert!(
            stderr_of(&out).contains("refusing to write"),
            "{}",
            stderr_of(&out)
        );
    }
    assert_eq!(std::fs::read(&f).unwrap(), hand_capture());
    // both to one named place
    let same = tmp.join("same.jsonl");
    let out = weir()
        .args(["voip", "-r"])
        .arg(&f)
        .arg("-w")
        .arg(&same)
        .arg("--streams")
        .arg(&same)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr_of(&out).contains("both name"), "{}", stderr_of(&out));
    // bad numbers
    for (opt, v) in [
        ("--max-calls", "0"),
        ("--max-calls", "-1"),
        ("--max-calls", "1e99"),
        ("--max-calls", "nan"),
        ("--max-streams", "0"),
        ("--max-streams", "99999999999"),
        ("--call-linger", "-1"),
        ("--call-linger", "nan"),
        ("--call-timeout", "0"),
        ("--call-timeout", "1e99"),
        ("--call-timeout", "inf"),
    ] {
        let out = weir()
            .args(["voip", "-r"])
            .arg(&f)
            .args([opt, v])
            .output()
            .unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{opt} {v}: {err}");
        assert!(
            err.contains(opt) && !err.contains("panicked"),
            "{opt} {v}: {err}"
        );
    }
    // a bound reached is said, not silent
    let out = weir()
        .args(["voip", "-r"])
        .arg(&f)
        .args(["--max-calls", "1", "--max-streams", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = stderr_of(&out);
    assert!(err.contains("call-ids ignored (--max-calls)"), "{err}");
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    assert_eq!(lines, 2, "one stream and one call");
    common::full_and_closed_outputs("voip", &f);
    // a truncated capture (as after kill -9 of a writer): what was read is reported, with a
    // warning about the cut
    let cut = tmp.join("cut.pcap");
    let bytes = hand_capture();
    std::fs::write(&cut, &bytes[..bytes.len() - 37]).unwrap();
    let out = weir().args(["voip", "-r"]).arg(&cut).output().unwrap();
    let err = stderr_of(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("warning") || err.contains("truncated") || err.contains("error"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("hand-1@test"));
}
