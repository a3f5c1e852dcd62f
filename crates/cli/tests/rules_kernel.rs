//! The drop rules in the kernel socket filter (weir-capture's `kernel_rules`), on veth pairs in
//! network namespaces made by the test; `weir gen` sends from inside the namespace to a MAC
//! address no one has (captured in promiscuous mode, going nowhere else).
//!
//! * `weir capture --rules` with a file dropping one conversation (an exact rule) and one host
//!   (a wildcard rule) and slicing a port: the dropped packets never reach user space (the
//!   capture threads' `received` and the kernel's `received` exclude them, the engine's
//!   counters for those rules stay at 0), the file holds exactly the expected packets (tshark),
//!   and the summary names the two rules in the kernel and counts their packets, which
//!   reconcile with what was sent.
//! * `weir record --rules --control`: a drop rule added through `weir rules add` replaces the
//!   kernel filter (the stats JSON shows the new version and the rule's id); from then on its
//!   packets reach no ring and are counted as dropped in the kernel; a rule deleted lets its
//!   packets through again; the store holds exactly the kept packets (tshark, capinfos).
//! * The same with `--backend xdp`, where the drop rules run in the XDP program
//!   (weir-capture's `xdp_rules`): the same traffic, tagged frames included, gives the same file
//!   and the same kernel count as AF_PACKET's socket filter, and a rule change replaces the
//!   program on its link (the count goes on across the replacements).
//! * `weir record --rules` with libpcap's `vlan` in the user filter (`udp or (vlan and udp)`),
//!   both backends: untagged frames that the old joined expression `(USER) and not (DROPS)`
//!   would have dropped (its drop test read them 4 bytes on) are recorded, byte for byte as a
//!   plain tcpdump on the sending side saw them, and the kernel counter is exactly the frames
//!   the rule drops.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::{VethBench, NOWHERE};
use common::{rules_control, run, segments, tshark_fields, weir};
use serde_json::Value;

/// `weir gen` inside the namespace to [`NOWHERE`], 10.50.1.1, `n` packets from `src` to UDP
/// port `dport` (one flow: source port 40000), and waits; checks it sent everything.
fn send(b: &VethBench, src: &str, dport: u16, n: u32) {
    let out = run(Command::new("ip")
        .args([
            "netns",
            "exec",
            &b.ns,
            env!("CARGO_BIN_EXE_weir"),
            "gen",
            "-i",
        ])
        .arg(b.peer_if())
        .args(["--dst-mac", NOWHERE, "--dst", "10.50.1.1", "--src", src])
        .args(["--dport", &dport.to_string(), "-c", &n.to_string()])
        .args(["--size", "120", "--pps", "2000"])
        .stdout(Stdio::null()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gen: {err}");
    assert!(err.contains(" 0 send errors"), "gen: {err}");
}

/// A weir command running in the background, stderr in a file; killed if the test ends first.
struct Bg {
    child: Child,
    log: std::path::PathBuf,
}

impl Bg {
    fn start(mut cmd: Command, log: &Path, banner: &str) -> Bg {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut bg = Bg {
            child,
            log: log.to_path_buf(),
        };
        let t = Instant::now();
        while !bg.text().contains(banner) {
            assert!(t.elapsed() < Duration::from_secs(30), "{}", bg.text());
            if let Some(s) = bg.child.try_wait().unwrap() {
                panic!("exited ({s}) before its banner: {}", bg.text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bg
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGINT (after the last packets had time to reach the rings); checks the exit.
    fn stop(mut self) -> String {
        std::thread::sleep(Duration::from_millis(300));
        let pid = self.child.id().to_string();
        assert!(run(Command::new("kill").args(["-INT", &pid]))
            .status
            .success());
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                let text = self.text();
                assert!(s.success(), "{s}: {text}");
                return text;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// (source, destination port, captured length) of every frame of `files`, with counts.
fn frames(files: &[std::path::PathBuf]) -> BTreeMap<(String, String, u64), u64> {
    let mut m = BTreeMap::new();
    for f in files {
        for r in tshark_fields(f, &["ip.src", "udp.dstport", "frame.cap_len"]) {
            *m.entry((r[0].clone(), r[1].clone(), r[2].parse().unwrap()))
                .or_insert(0) += 1;
        }
    }
    m
}

fn key(src: &str, dport: u16, cap: u64) -> (String, String, u64) {
    (src.to_string(), dport.to_string(), cap)
}

/// The number after `what` in `text` (`"received 12"` → 12 for `what = "received "`).
fn number_after(text: &str, what: &str) -> u64 {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {text}"));
    text[at + what.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number after {what:?} in {text}"))
}

#[test]
fn capture_drops_exact_and_wildcard_rules_in_the_kernel() {
    let (got, text) = capture_with_rules(&["--threads", "2"], "ip and udp", false);

    let untagged = |src: &str, dport: &str, cap: &str| {
        (
            String::new(),
            src.to_string(),
            dport.to_string(),
            cap.to_string(),
        )
    };
    let mut want = BTreeMap::new();
    want.insert(untagged("10.50.0.9", "9001", "120"), 20);
    want.insert(untagged("10.50.0.1", "7000", "64"), 30);
    want.insert(untagged("10.50.0.3", "5000", "120"), 40);
    assert_eq!(got, want, "{text}");

    assert!(
        text.contains(
            "dropped in the kernel by 2 rules (socket filter of version 1: 1 exact, 1 wildcard; \
             ids 1, 2): 110"
        ),
        "{text}"
    );
    // The 110 packets reached no ring: the kernel queued and the threads read the other 90.
    assert_eq!(number_after(&text, "kernel: "), 90, "{text}");
    assert_eq!(number_after(&text, "capture: "), 90, "{text}");
    assert_eq!(number_after(&text, "filtered out; buffer: "), 0, "{text}");
    // The engine saw 90 packets and dropped none of them.
    assert!(text.contains("rules: 0 dropped after the filter"), "{text}");
    assert!(text.contains(": 90 in, 60 passed, 0 dropped"), "{text}");
}

/// The stats JSON of a running record, once it is there and parses.
fn stats(path: &Path) -> Value {
    let t = Instant::now();
    loop {
        if let Some(v) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
        {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no stats JSON");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the stats JSON shows the kernel filter of `version`, and returns it.
fn kernel_at(path: &Path, version: u64) -> Value {
    let t = Instant::now();
    loop {
        let k = stats(path)["capture"]["kernel_rules"].clone();
        if k["version"].as_u64() == Some(version) {
            return k;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the kernel filter never reached version {version}: {k}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `weir record --backend BACKEND --rules` while rules change through the control socket:
/// rule 1 (a host) from the start, rule 5 (a port) added, rule 1 deleted; checks what the
/// kernel dropped (10 + 25), the replacements (2), that the engine never saw rule 5's packets
/// and that the store holds exactly the kept packets. Returns the stats JSON and the summary.
fn rules_change_while_recording(backend: &str) -> (Value, String) {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, rules, log, sock, sj) = (
        tmp.path().join("store"),
        tmp.path().join("rules.txt"),
        tmp.path().join("log"),
        tmp.path().join("ctl.sock"),
        tmp.path().join("stats.json"),
    );
    std::fs::write(&rules, "id 1 host 10.50.0.9 -> drop\n").unwrap();
    let mut cmd = weir();
    cmd.args(["record", "-i", &b.host_if, "--backend", backend, "-o"])
        .arg(&dir)
        .args(["--buffer-mib", "64", "--rules"])
        .arg(&rules)
        .arg("--control")
        .arg(&sock)
        .arg("--stats-json")
        .arg(&sj)
        .arg("ip and udp");
    let rec = Bg::start(cmd, &log, "recording on");
    let k = kernel_at(&sj, 1);
    assert_eq!(k["rules"], serde_json::json!([1]), "{k}");
    send(&b, "10.50.0.9", 9000, 10); // rule 1: kernel
    send(&b, "10.50.0.1", 7000, 10); // kept

    // A drop rule for port 7000 through the control socket: the kernel's program is replaced.
    let added = rules_control(&sock, &["add", "id 5 dport 7000 -> drop"]);
    assert_eq!(added["version"].as_u64(), Some(2), "{added}");
    let k = kernel_at(&sj, 2);
    assert_eq!(k["rules"], serde_json::json!([1, 5]), "{k}");
    assert_eq!((u(&k["swaps"]), u(&k["wild"])), (1, 2), "{k}");
    send(&b, "10.50.0.1", 7000, 25); // rule 5 now: kernel
    send(&b, "10.50.0.3", 5000, 5); // kept

    // Rule 1 deleted: its host's packets reach user space (and the store) again.
    let deleted = rules_control(&sock, &["del", "1"]);
    assert_eq!(deleted["version"].as_u64(), Some(3), "{deleted}");
    let k = kernel_at(&sj, 3);
    assert_eq!(k["rules"], serde_json::json!([5]), "{k}");
    send(&b, "10.50.0.9", 9000, 7);

    let text = rec.stop();
    let s = stats(&sj);
    let k = &s["capture"]["kernel_rules"];
    // 10 (rule 1) + 25 (rule 5) in the kernel, across two replacements
    assert_eq!(u(&k["dropped"]), 35, "{s}");
    assert_eq!(u(&k["swaps"]), 2, "{s}");
    // The engine never saw a packet of rule 5: the kernel took them all.
    let r5 = s["rules"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == 5)
        .unwrap_or_else(|| panic!("{s}"))
        .clone();
    assert_eq!(u(&r5["packets"]), 0, "{s}");
    let mut want = BTreeMap::new();
    want.insert(key("10.50.0.1", 7000, 120), 10);
    want.insert(key("10.50.0.3", 5000, 120), 5);
    want.insert(key("10.50.0.9", 9000, 120), 7);
    assert_eq!(frames(&segments(&dir)), want, "{text}");
    (s, text)
}

#[test]
fn record_replaces_the_kernel_filter_when_rules_change() {
    let (s, text) = rules_change_while_recording("packet");
    let c = &s["capture"];
    // everything the socket filter kept was read from the rings
    assert_eq!(u(&c["received"]), 10 + 5 + 7, "{s}");
    assert_eq!(
        u(&c["kernel_packets"]),
        u(&c["received"]) + u(&c["kernel_drops"]),
        "{s}"
    );
    assert!(
        text.contains(
            "dropped in the kernel by 1 rules (socket filter of version 3: 0 exact, 1 wildcard; \
             ids 5): 35"
        ),
        "{text}"
    );
    assert!(text.contains("filter replaced 2 times"), "{text}");
}

/// `weir gen` like [`send`], with an 802.1Q tag.
fn send_tagged(b: &VethBench, src: &str, dport: u16, n: u32, vlan: u16) {
    let out = run(Command::new("ip")
        .args([
            "netns",
            "exec",
            &b.ns,
            env!("CARGO_BIN_EXE_weir"),
            "gen",
            "-i",
        ])
        .arg(b.peer_if())
        .args(["--dst-mac", NOWHERE, "--dst", "10.50.1.1", "--src", src])
        .args(["--dport", &dport.to_string(), "-c", &n.to_string()])
        .args([
            "--size",
            "120",
            "--pps",
            "2000",
            "--vlan",
            &vlan.to_string(),
        ])
        .stdout(Stdio::null()));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "gen: {err}");
    assert!(err.contains(" 0 send errors"), "gen: {err}");
}

/// (VLAN id, source, destination port) of every frame of `file`, with counts.
fn tagged_frames(file: &Path) -> BTreeMap<(String, String, String), u64> {
    let mut m = BTreeMap::new();
    for r in tshark_fields(file, &["vlan.id", "ip.src", "udp.dstport"]) {
        *m.entry((r[0].clone(), r[1].clone(), r[2].clone()))
            .or_insert(0) += 1;
    }
    m
}

#[test]
fn tagged_packets_and_user_space_filters_are_left_to_the_engine() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (out, rules, log) = (
        tmp.path().join("cap.pcap"),
        tmp.path().join("rules.txt"),
        tmp.path().join("log"),
    );
    // The exact rule matches untagged packets only; the wildcard rule any VLAN. Linux hands the
    // socket filter tagged frames with the tag in metadata: the kernel must not drop them.
    std::fs::write(
        &rules,
        "id 1 exact udp 10.50.0.9:40000 10.50.1.1:9000 -> drop\n\
         id 2 host 10.50.0.8 -> drop\n",
    )
    .unwrap();
    // `protochain` jumps backwards: the kernel refuses the expression, it runs in user space
    // (on the frame with its tag put back, hence the `vlan` half), and the kernel still runs
    // the drop rules (`not (DROPS)` alone).
    let mut cmd = weir();
    cmd.args(["capture", "-i", &b.host_if, "-w"])
        .arg(&out)
        .arg("--rules")
        .arg(&rules)
        .arg("ip protochain 17 or (vlan 7 and ip protochain 17)");
    let cap = Bg::start(cmd, &log, "capturing on");
    send(&b, "10.50.0.9", 9000, 20); // rule 1 in the kernel
    send_tagged(&b, "10.50.0.9", 9000, 15, 7); // tagged: rule 1 does not match; kept
    send(&b, "10.50.0.8", 9000, 25); // rule 2 in the kernel
    send_tagged(&b, "10.50.0.8", 9000, 12, 7); // tagged: dropped by the engine, not the kernel
    send(&b, "10.50.0.3", 5000, 10); // kept
    let text = cap.stop();

    let mut want = BTreeMap::new();
    want.insert(("7".into(), "10.50.0.9".into(), "9000".into()), 15);
    want.insert((String::new(), "10.50.0.3".into(), "5000".into()), 10);
    assert_eq!(tagged_frames(&out), want, "{text}");
    assert!(
        text.contains(
            "dropped in the kernel by 2 rules (socket filter of version 1: 1 exact, 1 wildcard; \
             ids 1, 2): 45"
        ),
        "{text}"
    );
    // The engine saw the 37 packets the filter (in user space) kept, and dropped the 12
    // tagged ones of rule 2.
    assert!(
        text.contains("rules: 12 dropped after the filter"),
        "{text}"
    );
    assert!(text.contains(": 37 in, 25 passed, 12 dropped"), "{text}");
}

#[test]
fn no_kernel_rules_keeps_every_rule_in_user_space() {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (out, rules, log) = (
        tmp.path().join("cap.pcap"),
        tmp.path().join("rules.txt"),
        tmp.path().join("log"),
    );
    std::fs::write(&rules, "id 2 host 10.50.0.8 -> drop\n").unwrap();
    let mut cmd = weir();
    cmd.args(["capture", "-i", &b.host_if, "-w"])
        .arg(&out)
        .arg("--rules")
        .arg(&rules)
        .arg("--no-kernel-rules")
        .arg("ip and udp");
    let cap = Bg::start(cmd, &log, "capturing on");
    send(&b, "10.50.0.8", 9000, 60); // rule 2: dropped, by the engine this time
    send(&b, "10.50.0.3", 5000, 40); // no rule: kept
    let text = cap.stop();
    let mut want = BTreeMap::new();
    want.insert(key("10.50.0.3", 5000, 120), 40);
    assert_eq!(frames(&[out]), want, "{text}");
    assert!(!text.contains("dropped in the kernel by"), "{text}");
    // Every packet reached the ring and the engine, which dropped rule 2's.
    assert_eq!(number_after(&text, "kernel: "), 100, "{text}");
    assert!(
        text.contains("rules: 60 dropped after the filter"),
        "{text}"
    );
}

/// Counts by (VLAN id, source, destination port, captured length).
type TaggedFrames = BTreeMap<(String, String, String, String), u64>;

/// (VLAN id, source, destination port, captured length) of every frame of `file`, with counts.
fn frames_with_tags(file: &Path) -> TaggedFrames {
    let mut m = BTreeMap::new();
    for r in tshark_fields(file, &["vlan.id", "ip.src", "udp.dstport", "frame.cap_len"]) {
        *m.entry((r[0].clone(), r[1].clone(), r[2].clone(), r[3].clone()))
            .or_insert(0) += 1;
    }
    m
}

/// The user filter of the tests that send tagged frames to both backends: AF_PACKET's socket
/// filter sees a tagged frame without its tag (`udp`), AF_XDP's user-space filter the frame as
/// sent (a tag, then IPv4 and UDP). Not libpcap's `vlan`, which shifts the offsets of what
/// follows it (see [`vlan_in_the_user_filter_shifts_no_drop_rule`] for that case).
const TAGGED_OR_NOT: &str =
    "udp or (ether[12:2] = 0x8100 and ether[16:2] = 0x0800 and ether[27] = 17)";

/// `weir capture ARGS --rules FILTER` on a new bench, of one set of traffic: five untagged
/// conversations (rule 1, exact, drops 50; rule 2, a host, 60; 20 kept; rule 3 slices 30; 40
/// kept), then, when `tagged`, two tagged ones (15 that rule 1, untagged only, keeps; 12 of
/// rule 2's host, left to the engine). Returns the file's frames and the summary.
fn capture_with_rules(args: &[&str], filter: &str, tagged: bool) -> (TaggedFrames, String) {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (out, rules, log) = (
        tmp.path().join("cap.pcap"),
        tmp.path().join("rules.txt"),
        tmp.path().join("log"),
    );
    // gen's single flow has source port 40000.
    std::fs::write(
        &rules,
        "id 1 exact udp 10.50.0.9:40000 10.50.1.1:9000 -> drop\n\
         id 2 host 10.50.0.8 -> drop\n\
         id 3 dport 7000 -> slice 64\n",
    )
    .unwrap();
    let mut cmd = weir();
    cmd.args(["capture", "-i", &b.host_if])
        .args(args)
        .arg("-w")
        .arg(&out)
        .arg("--rules")
        .arg(&rules)
        .arg(filter);
    let cap = Bg::start(cmd, &log, "capturing on");
    send(&b, "10.50.0.9", 9000, 50); // rule 1, exact: dropped in the kernel
    send(&b, "10.50.0.8", 9000, 60); // rule 2, wildcard: dropped in the kernel
    send(&b, "10.50.0.9", 9001, 20); // another conversation of the same host: kept
    send(&b, "10.50.0.1", 7000, 30); // rule 3: sliced to 64 bytes
    send(&b, "10.50.0.3", 5000, 40); // no rule: kept
    if tagged {
        send_tagged(&b, "10.50.0.9", 9000, 15, 7); // tagged: rule 1 (untagged only) keeps it
        send_tagged(&b, "10.50.0.8", 9000, 12, 7); // tagged: rule 2 in the engine, not the kernel
    }
    let text = cap.stop();
    (frames_with_tags(&out), text)
}

#[test]
fn xdp_drops_the_same_packets_in_the_kernel_as_the_socket_filter() {
    let (xdp, text) = capture_with_rules(&["--backend", "xdp"], TAGGED_OR_NOT, true);
    assert!(text.contains("AF_XDP on "), "{text}");
    // 50 + 60 untagged packets of rules 1 and 2 dropped by the XDP program, counted by its map
    assert!(
        text.contains(
            "dropped in the kernel by 2 rules (XDP program of version 1: 1 exact, 1 wildcard; \
             ids 1, 2): 110"
        ),
        "{text}"
    );
    // The rest reached weir: 20 + 30 + 40 + 15 + 12 = 117 passed the filter (in user space),
    // and the engine dropped the 12 tagged packets of rule 2.
    let (read, filtered) = (
        number_after(&text, "capture: "),
        number_after(&text, " read, "),
    );
    assert_eq!(read - filtered, 117, "{text}");
    assert_eq!(
        110 + read - filtered,
        50 + 60 + 20 + 30 + 40 + 15 + 12,
        "{text}"
    );
    assert!(
        text.contains("rules: 12 dropped after the filter"),
        "{text}"
    );
    assert!(text.contains(": 117 in, 75 passed, 12 dropped"), "{text}");
    let by_key = |m: &TaggedFrames| {
        let mut k: BTreeMap<(String, String, String), u64> = BTreeMap::new();
        for ((v, s, p, _), n) in m {
            *k.entry((v.clone(), s.clone(), p.clone())).or_insert(0) += n;
        }
        k
    };
    let mut want = BTreeMap::new();
    want.insert((String::new(), "10.50.0.9".into(), "9001".into()), 20);
    want.insert((String::new(), "10.50.0.1".into(), "7000".into()), 30);
    want.insert((String::new(), "10.50.0.3".into(), "5000".into()), 40);
    want.insert(("7".into(), "10.50.0.9".into(), "9000".into()), 15);
    assert_eq!(by_key(&xdp), want, "{text}");
    assert!(
        xdp.keys().any(|k| k.2 == "7000" && k.3 == "64"),
        "sliced: {xdp:?}"
    );

    // The same traffic through AF_PACKET with its socket filter: the same file, the same
    // kernel count.
    let (packet, ptext) = capture_with_rules(&["--backend", "packet"], TAGGED_OR_NOT, true);
    assert_eq!(packet, xdp, "{ptext}");
    assert!(
        ptext.contains(
            "dropped in the kernel by 2 rules (socket filter of version 1: 1 exact, 1 wildcard; \
             ids 1, 2): 110"
        ),
        "{ptext}"
    );
    assert!(ptext.contains(": 117 in, 75 passed, 12 dropped"), "{ptext}");
}

#[test]
fn xdp_replaces_its_program_when_rules_change() {
    let (_, text) = rules_change_while_recording("xdp");
    assert!(
        text.contains(
            "dropped in the kernel by 1 rules (XDP program of version 3: 0 exact, 1 wildcard; \
             ids 5): 35, program replaced 2 times"
        ),
        "{text}"
    );
}

/// An Ethernet frame to [`NOWHERE`]: optionally tagged (VLAN `vlan`), IPv4 UDP `src` → `dst`
/// with IP total length `ip_len` (whatever the frame's real length), ports `sport` → `dport`,
/// 32 bytes of payload.
fn udp_frame(
    vlan: Option<u16>,
    src: [u8; 4],
    dst: [u8; 4],
    ip_len: u16,
    ports: (u16, u16),
) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x99, 0x02, 0, 0, 0, 0, 0x01];
    if let Some(v) = vlan {
        f.extend([0x81, 0x00]);
        f.extend(v.to_be_bytes());
    }
    f.extend([0x08, 0x00, 0x45, 0x00]);
    f.extend(ip_len.to_be_bytes());
    f.extend([0, 0, 0, 0, 64, 17, 0, 0]);
    f.extend(src);
    f.extend(dst);
    f.extend(ports.0.to_be_bytes());
    f.extend(ports.1.to_be_bytes());
    f.extend(40u16.to_be_bytes());
    f.extend([0, 0]);
    f.extend([0x5a; 32]);
    f
}

/// Sends each frame of `plan` its number of times from the namespace side, through a raw
/// AF_PACKET socket (python), in order.
fn send_raw(b: &VethBench, plan: &[(Vec<u8>, u32)]) {
    let frames: Vec<String> = plan
        .iter()
        .map(|(f, n)| {
            let hex: String = f.iter().map(|x| format!("{x:02x}")).collect();
            format!("(bytes.fromhex('{hex}'),{n})")
        })
        .collect();
    let script = format!(
        "import socket\n\
         s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\n\
         s.bind(('{}',0))\n\
         for f,n in [{}]:\n    for _ in range(n): s.send(f)\n",
        b.peer_if(),
        frames.join(",")
    );
    let out = run(Command::new("ip").args(["netns", "exec", &b.ns, "python3", "-c", &script]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `weir record --backend BACKEND --rules` (rule 1: host 10.0.0.9 → drop) with the user filter
/// `udp or (vlan and udp)`, libpcap's `vlan` included, beside a plain tcpdump of the same
/// filter. The traffic: untagged frames (UDP 10.0.0.7 → 10.0.0.1, IP length 2048, ports
/// 2560 → 9) that the one joined expression `(USER) and not (DROPS)` would have dropped (its
/// drop test reads them 4 bytes on, as 10.0.0.9), rule 1's untagged packets (dropped in the
/// kernel), rule 1's tagged ones (dropped by the engine) and other tagged and untagged ones
/// (kept). Checks: the store holds exactly the plain capture's frames but rule 1's, byte for
/// byte; the kernel counter is rule 1's untagged packets.
fn vlan_in_the_user_filter(backend: &str) {
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, rules, log, sj, plain) = (
        tmp.path().join("store"),
        tmp.path().join("rules.txt"),
        tmp.path().join("log"),
        tmp.path().join("stats.json"),
        tmp.path().join("plain.pcap"),
    );
    std::fs::write(&rules, "id 1 host 10.0.0.9 -> drop\n").unwrap();
    let filter = "udp or (vlan and udp)";
    let plan = vec![
        (
            udp_frame(None, [10, 0, 0, 7], [10, 0, 0, 1], 2048, (2560, 9)),
            30,
        ),
        (
            udp_frame(None, [10, 0, 0, 9], [10, 0, 0, 1], 60, (4000, 53)),
            20,
        ),
        (
            udp_frame(Some(7), [10, 0, 0, 9], [10, 0, 0, 1], 60, (4000, 53)),
            12,
        ),
        (
            udp_frame(Some(7), [10, 0, 0, 3], [10, 0, 0, 1], 60, (4000, 53)),
            15,
        ),
        (
            udp_frame(None, [10, 0, 0, 3], [10, 0, 0, 1], 60, (4000, 53)),
            10,
        ),
    ];
    let total: u32 = plan.iter().map(|p| p.1).sum();
    // The plain capture: tcpdump on the sending side (with an XDP program on our side, no
    // packet socket there sees what it redirects), of every frame of ours, tags inline.
    let mut tcpdump = Command::new("ip");
    tcpdump
        .args(["netns", "exec", &b.ns, "tcpdump", "-n", "-i"])
        .arg(b.peer_if())
        .args(["-c", &total.to_string(), "-w"])
        .arg(&plain)
        .arg("ether src 02:00:00:00:00:01");
    let witness = common::start(tcpdump, "listening on");
    let mut cmd = weir();
    cmd.args(["record", "-i", &b.host_if, "--backend", backend, "-o"])
        .arg(&dir)
        .args(["--buffer-mib", "64", "--rules"])
        .arg(&rules)
        .arg("--stats-json")
        .arg(&sj)
        .arg(filter);
    let rec = Bg::start(cmd, &log, "recording on");
    send_raw(&b, &plan);
    common::wait(witness);
    let text = rec.stop();
    let s = stats(&sj);

    // The plain capture's frames that the user filter takes (tcpdump reading the file), but
    // rule 1's (by tshark's reading of the source address).
    let taken = tmp.path().join("taken.pcap");
    let out = run(Command::new("tcpdump")
        .arg("-r")
        .arg(&plain)
        .arg("-w")
        .arg(&taken)
        .arg(filter));
    assert!(out.status.success());
    let plain = taken;
    let sources = tshark_fields(&plain, &["ip.src"]);
    let all = common::frames_hex(&plain);
    assert_eq!(all.len(), total as usize, "{text}");
    assert_eq!(sources.len(), all.len());
    let mut want: Vec<String> = all
        .into_iter()
        .zip(&sources)
        .filter(|(_, src)| src[0] != "10.0.0.9")
        .map(|(f, _)| f)
        .collect();
    want.sort();
    assert_eq!(want.len(), 30 + 15 + 10);
    let mut got: Vec<String> = segments(&dir)
        .iter()
        .flat_map(|f| common::frames_hex(f))
        .collect();
    got.sort();
    assert_eq!(got, want, "{backend}: {text}");
    // Rule 1's 20 untagged packets in the kernel, its 12 tagged ones in the engine.
    let k = &s["capture"]["kernel_rules"];
    assert_eq!(u(&k["dropped"]), 20, "{backend}: {s}");
    let r1 = s["rules"]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == 1)
        .unwrap_or_else(|| panic!("{s}"))
        .clone();
    assert_eq!(u(&r1["packets"]), 12, "{backend}: {s}");
}

#[test]
fn vlan_in_the_user_filter_shifts_no_drop_rule() {
    vlan_in_the_user_filter("packet");
    vlan_in_the_user_filter("xdp");
}
