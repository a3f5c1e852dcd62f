//! `weir flows --kafka` against a real Apache Kafka 3.9.1 broker (KRaft, one node, from Maven
//! Central's jars: `scripts/kafka/jars.sh` writes their classpath to target/kafka/classpath.txt),
//! started and stopped by each test on free loopback ports.
//!
//! * JSON one record per message (`--kafka-records-per-message 1`): the records consumed back
//!   with kcat equal, record by record, what `weir flows --json` prints for the same files;
//!   every record of one flow key is on one partition, in the order weir exported them; the
//!   message key is the documented one.
//! * protobuf: `protoc --decode` with goflow2's flow.proto (proto/flow.proto) reads every
//!   length-delimited FlowMessage of every Kafka message (100, 7 or 1 records per message), and
//!   its fields equal the JSON record's, in `--json`'s order when packed.
//! * broker killed mid-run and restarted: every record is delivered or counted as failed, and
//!   what was delivered is consumed exactly once (idempotent producer).
//! * `weir run` with `[record.flows.kafka]`: the records in the topic are `weir flows -r` of
//!   the job's store, record by record (UDP flows sent over a veth pair the test makes).
//! * the analyzers' logs (`weir http|voip --kafka`, files and live, and `weir run`'s
//!   `[voip.kafka]`): the topics weir.http, weir.tls, weir.calls and weir.rtp hold the `--json`
//!   lines (or the job's log files) message for message, under the documented keys.
//! * JSON by default (100 records per message) and `--kafka-records-per-message 3`: the
//!   messages split on newlines are `--json` record by record, in order, on one partition under
//!   the sensor's key.
//! * `weir record --http-kafka/--voip-kafka`: the topics hold the logs' lines.
//! * hostile input: bad numbers and names, a missing broker: clear errors, no panic, no hang.
//!
//! java, kcat, protoc and the jars are peers: missing, the test is skipped, or fails under
//! WEIR_REQUIRE_PEERS=1.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::prom::{metrics_text, promtool_check, samples, served};
use common::sip::call;
use common::web::{files as web_files, servers, traffic};
use common::{
    counters_until, fed_and_held_with_stderr, record_analyzers_args, run, segments, weir, Running,
};
use serde_json::Value;
use weir_testkit::{have, missing, TempDir};

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A one-node KRaft broker this test started (killed on drop).
struct Broker {
    dir: TempDir,
    classpath: String,
    port: u16,
    child: Option<Child>,
}

impl Broker {
    /// Starts a broker, or says what is missing (`None`).
    fn start() -> Option<Broker> {
        if !(have("java") && have("kcat") && have("protoc")) {
            return None;
        }
        let cp_file = root().join("target/kafka/classpath.txt");
        if !cp_file.exists() {
            // fetch the jars now (mvn, Maven Central), as scripts/setup.sh does
            let ok = Command::new(root().join("scripts/kafka/jars.sh"))
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                missing("Kafka's jars (scripts/kafka/jars.sh failed: is mvn installed?)");
                return None;
            }
        }
        let classpath = std::fs::read_to_string(&cp_file).unwrap().trim().to_owned();
        let dir = TempDir::new("kafka");
        let (port, ctrl) = (free_port(), free_port());
        std::fs::write(
            dir.join("server.properties"),
            format!(
                "process.roles=broker,controller\nnode.id=1\n\
                 controller.quorum.voters=1@127.0.0.1:{ctrl}\n\
                 listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{ctrl}\n\
                 advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
                 controller.listener.names=CONTROLLER\n\
                 listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
                 log.dirs={}\nnum.partitions=3\n\
                 offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n\
                 transaction.state.log.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n",
                dir.join("data").display()
            ),
        )
        .unwrap();
        let out = run(Command::new("java")
            .args(["-cp", &classpath, "kafka.tools.StorageTool", "format"])
            .args(["-t", "weirkafkatestclusterA", "-c"])
            .arg(dir.join("server.properties")));
        assert!(out.status.success(), "storage format: {out:?}");
        let mut b = Broker {
            dir,
            classpath,
            port,
            child: None,
        };
        b.run();
        Some(b)
    }

    fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts the broker process and waits until it answers metadata requests.
    fn run(&mut self) {
        let log = std::fs::File::create(self.dir.join("broker.log")).unwrap();
        let child = Command::new("java")
            .args(["-Xmx512m", "-cp", &self.classpath, "kafka.Kafka"])
            .arg(self.dir.join("server.properties"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start the broker");
        self.child = Some(child);
        let start = Instant::now();
        loop {
            let up = TcpStream::connect(("127.0.0.1", self.port)).is_ok()
                && Command::new("kcat")
                    .args(["-L", "-b", &self.brokers(), "-m", "5"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
            if up {
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default();
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "the broker did not start: {log}"
            );
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the broker exited ({st}): {log}");
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Kills the broker process (SIGKILL: no clean shutdown) and waits for it.
    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Every message of `topic`: (partition, offset, key, payload), in offset order.
    fn consume(&self, topic: &str) -> Vec<(u32, u64, String, Vec<u8>)> {
        let out = run(Command::new("kcat")
            .args(["-C", "-b", &self.brokers(), "-t", topic, "-e", "-q"])
            .args(["-f", "%p %o %K %S %k%s"]));
        if String::from_utf8_lossy(&out.stderr).contains("Unknown topic or partition") {
            return Vec::new(); // nothing was ever sent to it
        }
        assert!(out.status.success(), "kcat: {out:?}");
        // each message: "P O KEYLEN PAYLOADLEN " then the key and the payload, raw
        let (b, mut at, mut msgs) = (&out.stdout, 0, Vec::new());
        while at < b.len() {
            let mut nums = [0u64; 4];
            for n in &mut nums {
                let sp = b[at..].iter().position(|&c| c == b' ').unwrap();
                *n = std::str::from_utf8(&b[at..at + sp])
                    .unwrap()
                    .parse()
                    .unwrap();
                at += sp + 1;
            }
            let (kl, pl) = (nums[2] as usize, nums[3] as usize);
            let key = String::from_utf8(b[at..at + kl].to_vec()).unwrap();
            let payload = b[at + kl..at + kl + pl].to_vec();
            at += kl + pl;
            msgs.push((nums[0] as u32, nums[1], key, payload));
        }
        msgs.sort_by_key(|m| (m.0, m.1));
        msgs
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The set-up of the live tests: a broker, a veth pair and a directory (`None`: a peer is
/// missing, said by [`Broker::start`]).
fn live_set_up(name: &str) -> Option<(Broker, VethBench, TempDir)> {
    let b = Broker::start()?;
    Some((b, VethBench::new(), TempDir::new(name)))
}

/// Corpus files for the comparisons: IPv4 and IPv6, TCP/UDP/ICMP, VLAN.
fn files() -> Vec<PathBuf> {
    let dir = weir_testkit::corpus_dir();
    [
        "bug-2158__public-ex1_section8_Sofacy.pcap",
        "arp__detect-arp-03-vlan__input.pcap",
        "bug-2769__issue_no_icmp.pcap",
        "ipv6-evasion__ipv6-dos-with-ext-headers-6__denial6-6.pcap",
        "smb2-async-read__input.pcap",
        "dhcp-request-flood__test.pcap",
    ]
    .iter()
    .map(|f| dir.join(f))
    .filter(|p| p.exists())
    .collect()
}

/// `weir flows --json -` of `file` (one worker: records in a fixed order), one line each.
fn json_lines(file: &Path, extra: &[&str]) -> Vec<String> {
    let out = run(weir()
        .args(["flows", "--workers", "1", "--json", "-", "-r"])
        .arg(file)
        .args(extra));
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Runs `weir flows -r file --kafka ...`, returns its stderr.
fn to_kafka(b: &Broker, file: &Path, topic: &str, extra: &[&str]) -> String {
    let out = run(weir()
        .args(["flows", "--workers", "1", "-r"])
        .arg(file)
        .args(["--kafka", &b.brokers(), "--kafka-topic", topic])
        .args(["--kafka-sensor", "s1"])
        .args(extra));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout with --kafka alone"
    );
    err
}

/// The key weir documents for a JSON record.
fn expected_key(v: &Value) -> String {
    let ep = |a: &str, p: &str| {
        (
            v[a].as_str().unwrap().parse::<IpAddr>().unwrap(),
            v[p].as_u64().unwrap(),
        )
    };
    let a = ep("sourceIPAddress", "sourceTransportPort");
    let b = ep("destinationIPAddress", "destinationTransportPort");
    let (l, h) = if a <= b { (a, b) } else { (b, a) };
    format!(
        "s1/{}/{}/{}/{}/{}/{}",
        v["vlanId"], v["protocolIdentifier"], l.0, l.1, h.0, h.1
    )
}

/// The summary's Kafka line: (records, messages, delivered, failed, overflow).
fn kafka_counts(stderr: &str) -> (u64, u64, u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("kafka "))
        .unwrap_or_else(|| panic!("no kafka line in {stderr}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    // "kafka json T@127.0.0.1:PORT: R records, M messages (B bytes): D delivered, F failed,
    //  O lost to a full queue (of Q)" — the numbers after the port
    let n = nums.len();
    (
        nums[n - 7],
        nums[n - 6],
        nums[n - 4],
        nums[n - 3],
        nums[n - 2],
    )
}

#[test]
fn json_records_equal_weir_flows_json_in_order_per_key() {
    let Some(b) = Broker::start() else { return };
    let files = files();
    assert!(files.len() >= 4, "corpus files missing: {files:?}");
    for (i, f) in files.iter().enumerate() {
        let topic = format!("json{i}");
        let compression = ["zstd", "lz4", "none"][i % 3];
        // the largest batch (above librdkafka's most message.max.bytes), the least, the default
        let batch = ["1073741824", "1024", ""][i % 3];
        let mut extra = vec![
            "--kafka-compression",
            compression,
            "--kafka-records-per-message",
            "1",
        ];
        if !batch.is_empty() {
            extra.extend(["--kafka-batch-bytes", batch]);
        }
        let err = to_kafka(&b, f, &topic, &extra);
        let want = json_lines(f, &[]);
        let (records, messages, delivered, failed, overflow) = kafka_counts(&err);
        assert_eq!(
            (records, messages, delivered, failed, overflow),
            (
                want.len() as u64,
                want.len() as u64,
                want.len() as u64,
                0,
                0
            ),
            "{}: {err}",
            f.display()
        );
        let got = b.consume(&topic);
        // record by record: the same multiset of lines
        let mut g: Vec<String> = got
            .iter()
            .map(|m| String::from_utf8(m.3.clone()).unwrap())
            .collect();
        let mut w = want.clone();
        g.sort();
        w.sort();
        assert_eq!(g, w, "{}", f.display());
        // keys as documented; one partition per key; per key, weir's export order
        let mut by_key: BTreeMap<&str, (BTreeSet<u32>, Vec<&[u8]>)> = BTreeMap::new();
        for (p, _, k, payload) in &got {
            let v: Value = serde_json::from_slice(payload).unwrap();
            assert_eq!(k, &expected_key(&v));
            let e = by_key.entry(k).or_default();
            e.0.insert(*p);
            e.1.push(payload);
        }
        for (k, (parts, seq)) in &by_key {
            assert_eq!(parts.len(), 1, "key {k} on partitions {parts:?}");
            let in_json: Vec<&[u8]> = want
                .iter()
                .filter(|l| expected_key(&serde_json::from_str(l).unwrap()) == *k)
                .map(|l| l.as_bytes())
                .collect();
            assert_eq!(seq, &in_json, "order of key {k}");
        }
    }
}

/// JSON's default (100 records per message) and `--kafka-records-per-message 3`: every message
/// holds 1 to N of the `--json` lines joined by newlines (none after the last), under the
/// sensor's key; split on newlines and taken in partition order, the messages are `weir flows
/// --json` record by record, in its order (one key: one partition); the summary counts the
/// records and the messages, all delivered.
#[test]
fn packed_json_records_split_on_newlines_equal_weir_flows_json() {
    let Some(b) = Broker::start() else { return };
    for most in [3, 100] {
        packed_json_files(&b, most);
    }
}

/// [`packed_json_records_split_on_newlines_equal_weir_flows_json`] with `most` records per
/// message (100: the default, no option given).
fn packed_json_files(b: &Broker, most: usize) {
    let files = files();
    assert!(files.len() >= 4, "corpus files missing: {files:?}");
    let mut packed = 0;
    for (i, f) in files.iter().enumerate() {
        let topic = format!("packed{most}-{i}");
        let n = most.to_string();
        let extra: &[&str] = if most == 100 {
            &[]
        } else {
            &["--kafka-records-per-message", &n]
        };
        let err = to_kafka(b, f, &topic, extra);
        let want = json_lines(f, &[]);
        let (records, messages, delivered, failed, overflow) = kafka_counts(&err);
        let got = b.consume(&topic);
        assert_eq!(
            (records, messages, delivered, failed, overflow),
            (want.len() as u64, got.len() as u64, got.len() as u64, 0, 0),
            "{}: {err}",
            f.display()
        );
        assert!(
            got.len() >= want.len().div_ceil(most),
            "{}: at most {most} records a message",
            f.display()
        );
        if got.len() < want.len() {
            packed += 1;
        }
        let parts: BTreeSet<u32> = got.iter().map(|m| m.0).collect();
        assert_eq!(
            parts.len(),
            usize::from(!want.is_empty()),
            "one key, one partition: {parts:?}"
        );
        let mut lines = Vec::new();
        for (_, _, key, payload) in &got {
            assert_eq!(key, "s1");
            let text = std::str::from_utf8(payload).unwrap();
            assert!(!text.ends_with('\n') && !text.is_empty(), "{text}");
            let n = text.split('\n').count();
            assert!((1..=most).contains(&n), "{n} records in one message");
            lines.extend(text.split('\n').map(str::to_owned));
        }
        assert_eq!(lines, want, "{}: record by record, in order", f.display());
    }
    assert!(
        packed >= 3,
        "{packed} files had messages of several records ({most} at most)"
    );
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468
}

/// `2015-03-22T13:35:47.797855000Z` as ns since the epoch.
fn iso_ns(s: &str) -> u64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
    let secs =
        days(n(0, 4), n(5, 7), n(8, 10)) * 86_400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19);
    secs as u64 * 1_000_000_000 + n(20, 29) as u64
}

/// protoc's text escapes of a bytes field (`"\300\250#\001"`), undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let (mut i, mut o) = (0, Vec::new());
    while i < b.len() {
        if b[i] != b'\\' {
            o.push(b[i]);
            i += 1;
            continue;
        }
        match b[i + 1] {
            d @ b'0'..=b'7' => {
                let mut v = u32::from(d - b'0');
                let mut j = i + 2;
                while j < i + 4 && j < b.len() && (b'0'..=b'7').contains(&b[j]) {
                    v = v * 8 + u32::from(b[j] - b'0');
                    j += 1;
                }
                o.push(v as u8);
                i = j;
            }
            c => {
                o.push(match c {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    c => c,
                });
                i += 2;
            }
        }
    }
    o
}

fn ip(bytes: &[u8]) -> IpAddr {
    match bytes.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(bytes).unwrap()),
        16 => IpAddr::from(<[u8; 16]>::try_from(bytes).unwrap()),
        n => panic!("address of {n} bytes"),
    }
}

/// The fields a JSON record must have in goflow2's message, as protoc prints them (proto3
/// text format leaves out zero values, so zeros are left out here too).
fn expected_fields(v: &Value) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, val: String| {
        if val != "0" {
            m.insert(k.to_owned(), val);
        }
    };
    let u = |k: &str| v[k].as_u64().unwrap().to_string();
    put("type", "IPFIX".into());
    put("sampling_rate", "1".into());
    let start = iso_ns(v["flowStartNanoseconds"].as_str().unwrap());
    let end = iso_ns(v["flowEndNanoseconds"].as_str().unwrap());
    put("time_flow_start_ns", start.to_string());
    put("time_flow_end_ns", end.to_string());
    put("time_received_ns", end.to_string());
    put("bytes", u("octetDeltaCount"));
    put("packets", u("packetDeltaCount"));
    let src: IpAddr = v["sourceIPAddress"].as_str().unwrap().parse().unwrap();
    put("src_addr", src.to_string());
    put(
        "dst_addr",
        v["destinationIPAddress"].as_str().unwrap().to_owned(),
    );
    put("etype", if src.is_ipv4() { "2048" } else { "34525" }.into());
    let proto = v["protocolIdentifier"].as_u64().unwrap();
    put("proto", proto.to_string());
    put("src_port", u("sourceTransportPort"));
    let dport = v["destinationTransportPort"].as_u64().unwrap();
    put("dst_port", dport.to_string());
    if proto == 1 || proto == 58 {
        put("icmp_type", (dport >> 8).to_string());
        put("icmp_code", (dport & 0xff).to_string());
    }
    put("vlan_id", u("vlanId"));
    put("src_vlan", u("vlanId"));
    put("ip_tos", u("ipClassOfService"));
    put("ip_ttl", u("minimumTTL"));
    put("tcp_flags", u("tcpControlBits"));
    m
}

/// A Kafka message of length-delimited FlowMessages split into them: each one's bytes with its
/// varint length (the framing of protobuf's `writeDelimitedTo`; the lengths must cover the
/// payload exactly).
fn length_delimited(payload: &[u8]) -> Vec<&[u8]> {
    let (mut at, mut items) = (0, Vec::new());
    while at < payload.len() {
        let (mut len, mut shift, mut i) = (0usize, 0, at);
        loop {
            let b = payload[i];
            len |= usize::from(b & 0x7f) << shift;
            shift += 7;
            i += 1;
            if b & 0x80 == 0 {
                break;
            }
        }
        assert!(i + len <= payload.len(), "a length past the payload's end");
        items.push(&payload[at..i + len]);
        at = i + len;
    }
    items
}

/// `protoc --decode` of FlowMessages (each with its varint length), with goflow2's flow.proto:
/// one map of field → value per message, addresses as text.
fn protoc_decode(dir: &Path, messages: &[&[u8]]) -> Vec<BTreeMap<String, String>> {
    // a wrapper whose field 1 is a FlowMessage: tag 0x0a then a length-delimited message, which
    // is exactly 0x0a followed by one of weir's (varint-length-prefixed) FlowMessages
    std::fs::write(
        dir.join("batch.proto"),
        "syntax = \"proto3\";\nimport \"flow.proto\";\nmessage Batch { repeated flowpb.FlowMessage m = 1; }\n",
    )
    .unwrap();
    let mut batch = Vec::new();
    for m in messages {
        batch.push(0x0a);
        batch.extend_from_slice(m);
    }
    let mut child = Command::new("protoc")
        .arg(format!("-I{}", root().join("proto").display()))
        .arg(format!("-I{}", dir.display()))
        .args(["--decode=Batch", "batch.proto"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("protoc");
    child.stdin.take().unwrap().write_all(&batch).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "protoc: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    // "m {", "  field: value", "}"
    let mut decoded: Vec<BTreeMap<String, String>> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line == "m {" {
            decoded.push(BTreeMap::new());
        } else if let Some((k, v)) = line.split_once(": ") {
            let v = if k.ends_with("_addr") {
                ip(&unescape(&v[1..v.len() - 1])).to_string()
            } else {
                v.to_owned()
            };
            decoded.last_mut().unwrap().insert(k.to_owned(), v);
        }
    }
    assert_eq!(decoded.len(), messages.len());
    decoded
}

/// Protobuf, three ways: the default (up to 100 records per Kafka message), 7 per message (so
/// the small corpus files fill several) and 1 per message (goflow2's way). Every Kafka message
/// splits exactly into length-delimited FlowMessages, which `protoc --decode` with goflow2's
/// flow.proto reads; their fields equal the `--json` records'. Packed: under the sensor's key,
/// on one partition, record by record in `--json`'s order with sequence numbers 0, 1, 2...;
/// one per message: under each flow's key, the same multiset.
#[test]
fn protobuf_records_decode_with_goflow2_flow_proto_and_equal_the_json() {
    let Some(b) = Broker::start() else { return };
    let dir = TempDir::new("kafka-pb");
    let mut several = 0;
    for (i, f) in files().iter().enumerate() {
        let want = json_lines(f, &[]);
        let w: Vec<_> = want
            .iter()
            .map(|l| expected_fields(&serde_json::from_str(l).unwrap()))
            .collect();
        for (mode, per) in [("default", 100), ("7", 7), ("1", 1)] {
            let topic = format!("pb{i}-{mode}");
            let mut extra = vec!["--kafka-format", "protobuf"];
            if mode != "default" {
                extra.extend(["--kafka-records-per-message", mode]);
            }
            let err = to_kafka(&b, f, &topic, &extra);
            let got = b.consume(&topic);
            let (records, messages, delivered, failed, overflow) = kafka_counts(&err);
            assert_eq!(
                (records, messages, delivered, failed, overflow),
                (want.len() as u64, got.len() as u64, got.len() as u64, 0, 0),
                "{} {mode}: {err}",
                f.display()
            );
            assert!(got.len() >= want.len().div_ceil(per), "{mode}: {err}");
            let items: Vec<&[u8]> = got.iter().flat_map(|m| length_delimited(&m.3)).collect();
            for m in &got {
                let n = length_delimited(&m.3).len();
                assert!((1..=per).contains(&n), "{mode}: {n} FlowMessages in one");
                several += usize::from(n > 1);
            }
            let mut decoded = protoc_decode(dir.path(), &items);
            assert_eq!(decoded.len(), want.len(), "{mode}");
            let seqs: Vec<u64> = decoded
                .iter_mut()
                .map(|d| d.remove("sequence_num").map_or(0, |s| s.parse().unwrap()))
                .collect();
            if per == 1 {
                // one key per flow, spread over partitions: the same records, each
                // sequence number once (protoc leaves out the 0)
                for (_, _, k, _) in &got {
                    assert!(k.starts_with("s1/"), "{k}");
                }
                let mut seqs = seqs;
                seqs.sort();
                assert_eq!(seqs, (0..want.len() as u64).collect::<Vec<_>>());
                let (mut d, mut w) = (decoded, w.clone());
                d.sort();
                w.sort();
                assert_eq!(d, w, "{} {mode}", f.display());
            } else {
                let parts: BTreeSet<u32> = got.iter().map(|m| m.0).collect();
                assert_eq!(parts.len(), usize::from(!want.is_empty()), "{parts:?}");
                assert!(got.iter().all(|m| m.2 == "s1"), "the sensor's key");
                assert_eq!(seqs, (0..want.len() as u64).collect::<Vec<_>>());
                assert_eq!(decoded, w, "{} {mode}: in order", f.display());
            }
        }
    }
    assert!(
        several >= 3,
        "{several} Kafka messages held several FlowMessages"
    );
}

/// A `weir flows -r -` sending to Kafka, fed part of a generated capture through its stdin.
struct Feeding {
    child: Child,
    stdin: ChildStdin,
    /// The capture's bytes not fed yet.
    rest: Vec<u8>,
    /// `weir flows --json` of the whole capture, same timeouts.
    want: Vec<String>,
    _dir: TempDir,
}

/// Generates `count` packets at 2 000/s over `flows` flows, starts `weir flows --workers 1
/// -r -` (0.5 s idle and 1 s active timeouts) to `topic` as sensor `s1` with `extra`
/// options, and feeds it the first 1/`part` of the capture.
fn spawn_flows_to_kafka(
    b: &Broker,
    topic: &str,
    (count, flows): (u32, u32),
    part: usize,
    extra: &[&str],
) -> Feeding {
    let dir = TempDir::new(&format!("kafka-{topic}"));
    let f = dir.join("g.pcap");
    let out = run(weir()
        .args(["gen", "-w"])
        .arg(&f)
        .args(["--pps", "2000", "-c", &count.to_string()])
        .args(["--flows", &flows.to_string()])
        .args(["--start", "1700000000000000000"]));
    assert!(out.status.success(), "{out:?}");
    let flags = ["--idle-timeout", "0.5", "--active-timeout", "1"];
    let want = json_lines(&f, &flags);
    let mut data = std::fs::read(&f).unwrap();
    let rest = data.split_off(data.len() / part);
    let (child, stdin) = fed_and_held_with_stderr(
        weir()
            .args(["flows", "--workers", "1", "-r", "-"])
            .args(flags)
            .args(["--kafka", &b.brokers(), "--kafka-topic", topic])
            .args(["--kafka-sensor", "s1"])
            .args(extra),
        &data,
    );
    Feeding {
        child,
        stdin,
        rest,
        want,
        _dir: dir,
    }
}

#[test]
fn broker_killed_mid_run_and_restarted_loses_nothing_uncounted() {
    let Some(mut b) = Broker::start() else { return };
    // 200 flows over 20 s of packet time: with a 1 s active timeout, records all along the file
    let Feeding {
        child,
        mut stdin,
        rest,
        want,
        _dir,
    } = spawn_flows_to_kafka(&b, "restart", (40_000, 200), 2, &["--kafka-timeout", "300"]);
    // let some records through before the broker goes (at most 30 s; fewer is fine)
    let t = Instant::now();
    let before = loop {
        let n = b.consume("restart").len();
        if n > 0 || t.elapsed() > Duration::from_secs(30) {
            break n;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    b.kill();
    stdin.write_all(&rest).unwrap();
    drop(stdin);
    // the rest is metered and produced while the broker is away; it comes back
    std::thread::sleep(Duration::from_secs(2));
    b.run();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (records, messages, delivered, failed, overflow) = kafka_counts(&err);
    eprintln!("before the kill: {before} consumed; {err}");
    assert_eq!(records, want.len() as u64, "{err}");
    assert_eq!(messages, delivered + failed + overflow, "{err}");
    assert_eq!(out.status.success(), failed + overflow == 0, "{err}");
    // what was delivered is consumed exactly once, and is weir's: messages of records packed
    // by default (JSON lines under the sensor's key)
    let msgs = b.consume("restart");
    assert_eq!(
        msgs.len() as u64,
        delivered,
        "no duplicate, no uncounted loss"
    );
    let got: Vec<String> = msgs
        .iter()
        .inspect(|m| assert_eq!(m.2, "s1", "the sensor's key"))
        .flat_map(|m| {
            std::str::from_utf8(&m.3)
                .unwrap()
                .split('\n')
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(got.len() as u64 >= delivered, "at least a record a message");
    let mut pool: BTreeMap<&str, usize> = BTreeMap::new();
    for l in &want {
        *pool.entry(l).or_default() += 1;
    }
    for g in &got {
        let n = pool
            .get_mut(g.as_str())
            .unwrap_or_else(|| panic!("not weir's: {g}"));
        assert!(*n > 0, "duplicate: {g}");
        *n -= 1;
    }
    // with a 300 s delivery timeout and a broker back within it, nothing failed
    assert_eq!((failed, overflow), (0, 0), "{err}");
}

/// The broker paused (SIGSTOP: connected, answering nothing) mid-run with a producer queue of
/// 10 messages: the records that find the queue full are counted as lost to it, those queued
/// and never acknowledged as failed, the run fails, and what the broker holds once it resumes
/// is weir's, at least the delivered count and at most delivered + failed (a message that timed
/// out in flight may still have been written).
#[test]
fn a_full_queue_while_the_broker_is_paused_is_counted() {
    let Some(b) = Broker::start() else { return };
    let Feeding {
        child,
        mut stdin,
        rest,
        want,
        _dir,
    } = spawn_flows_to_kafka(
        &b,
        "overflow",
        (20_000, 400),
        4,
        &[
            "--kafka-queue",
            "10",
            "--kafka-timeout",
            "2",
            "--kafka-linger-ms",
            "0",
            "--kafka-records-per-message",
            "1",
        ],
    );
    let t = Instant::now();
    while b.consume("overflow").is_empty() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(300));
    }
    // the broker process this test started and still owns
    let pid = b.child.as_ref().unwrap().id().to_string();
    assert!(run(Command::new("kill").args(["-STOP", &pid]))
        .status
        .success());
    stdin.write_all(&rest).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(run(Command::new("kill").args(["-CONT", &pid]))
        .status
        .success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let (records, messages, delivered, failed, overflow) = kafka_counts(&err);
    eprintln!("{err}");
    assert_eq!(records, want.len() as u64, "{err}");
    assert_eq!(messages, records, "JSON: one message per record");
    assert_eq!(messages, delivered + failed + overflow, "{err}");
    assert!(overflow > 0, "the 10-message queue overflowed: {err}");
    assert!(!out.status.success(), "a loss fails the run: {err}");
    assert!(err.contains("lost to a full queue (of 10)"), "{err}");
    let got = b.consume("overflow");
    assert!(
        got.len() as u64 >= delivered && got.len() as u64 <= delivered + failed,
        "{} consumed: {err}",
        got.len()
    );
    let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
    for m in &got {
        let g = std::str::from_utf8(&m.3).unwrap();
        assert!(want.contains(g), "not weir's: {g}");
    }
}

#[test]
fn hostile_kafka_options_are_clear_errors() {
    let f = weir_testkit::corpus_dir().join("bug-2158__public-ex1_section8_Sofacy.pcap");
    if !f.exists() {
        missing("corpus file bug-2158__public-ex1_section8_Sofacy.pcap");
        return;
    }
    let closed = format!("127.0.0.1:{}", free_port());
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &["--kafka-topic", "t"],
            2,
            "--kafka-topic describes the Kafka output; give --kafka",
        ),
        (
            &["--kafka-format", "protobuf"],
            2,
            "--kafka-format describes the Kafka output",
        ),
        (
            &["--kafka", "b:1", "--kafka-queue", "0"],
            2,
            "--kafka-queue",
        ),
        (
            &["--kafka", "b:1", "--kafka-queue", "-5"],
            2,
            "--kafka-queue",
        ),
        (
            &["--kafka", "b:1", "--kafka-queue", "99999999999"],
            2,
            "--kafka-queue",
        ),
        (
            &["--kafka", "b:1", "--kafka-timeout", "nan"],
            2,
            "not a number of seconds from 1",
        ),
        (
            &["--kafka", "b:1", "--kafka-timeout", "inf"],
            2,
            "not a number of seconds from 1",
        ),
        (
            &["--kafka", "b:1", "--kafka-linger-ms", "-1"],
            2,
            "--kafka-linger-ms",
        ),
        (
            &["--kafka", "b:1", "--kafka-batch-bytes", "10"],
            2,
            "--kafka-batch-bytes",
        ),
        (
            &["--kafka", "b:1", "--kafka-format", "avro"],
            2,
            "--kafka-format",
        ),
        (
            &["--kafka", "b:1", "--kafka-topic", "a b"],
            2,
            "bad topic name \"a b\"",
        ),
        (
            &["--kafka", "b:1", "--kafka-topic", ""],
            2,
            "bad topic name",
        ),
        (&["--kafka", ""], 2, "bad broker list"),
        // Ports out of range: refused at once, not after the broker timeout.
        (&["--kafka", "host:notaport"], 2, "bad broker list"),
        (&["--kafka", "127.0.0.1:99999"], 2, "bad broker list"),
        (&["--kafka", &closed], 1, "no Kafka broker answered at"),
        (
            &["--kafka-records-per-message", "5"],
            2,
            "--kafka-records-per-message describes the Kafka output; give --kafka",
        ),
        (
            &["--kafka", "b:1", "--kafka-records-per-message", "0"],
            2,
            "--kafka-records-per-message",
        ),
        (
            &["--kafka", "b:1", "--kafka-records-per-message", "-1"],
            2,
            "--kafka-records-per-message",
        ),
        (
            &["--kafka", "b:1", "--kafka-records-per-message", "nan"],
            2,
            "--kafka-records-per-message",
        ),
        (
            &["--kafka", "b:1", "--kafka-records-per-message", "100001"],
            2,
            "100001 is not in 1..=100000",
        ),
        (
            &["--kafka", "b:1", "--kafka-records-per-message", "1e99"],
            2,
            "--kafka-records-per-message",
        ),
    ];
    clear_errors(&["flows", "-r", f.to_str().unwrap()], cases);
}

/// Each case (`weir PREFIX ARGS`) exits with its code and says its message on stderr: no
/// panic, nothing on stdout.
fn clear_errors(prefix: &[&str], cases: &[(&[&str], i32, &str)]) {
    for (args, code, msg) in cases {
        let out = run(weir().args(prefix).args(*args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{prefix:?} {args:?}: {err}");
        assert!(err.contains(msg), "{prefix:?} {args:?}: {err}");
        assert!(!err.contains("panicked"), "{prefix:?} {args:?}: {err}");
        assert!(out.stdout.is_empty(), "{prefix:?} {args:?}");
    }
}

/// `weir run` with a record job whose flows go to Kafka (`[record.flows.kafka]`): three UDP
/// flows sent over a veth pair; after SIGTERM the topic holds, record by record, what
/// `weir flows -r` prints for the job's store (the same packets, the same timeouts), packed by
/// default as JSON lines under the sensor's key, and the job's summary counts them all
/// delivered.
#[test]
fn weir_run_sends_a_record_jobs_flows_to_kafka() {
    let Some((b, bench, dir)) = live_set_up("kafka-run") else {
        return;
    };
    let config = dir.join("weir.toml");
    let write = |extra: &str| {
        std::fs::write(
            &config,
            format!(
                "[control]\nsocket = \"control.sock\"\n\
                 [[record]]\nname = \"k\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 4\n\
                 write_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\n\
                 [record.flows]\nidle_timeout_s = 600\n\
                 [record.flows.kafka]\nbrokers = \"{}\"\ntopic = \"run\"\nsensor = \"s1\"\n{extra}",
                bench.host_if,
                b.brokers()
            ),
        )
        .unwrap();
    };
    for (extra, msg) in [
        (
            "records_per_message = 0\n",
            "record[0].flows.kafka.records_per_message: 0 is out of range: 1 to 100000",
        ),
        (
            "records_per_message = -1\n",
            "record[0].flows.kafka.records_per_message: -1 is out of range",
        ),
        ("records_per_message = 1e9\n", "records_per_message"),
    ] {
        write(extra);
        let out = run(weir().args(["run", "--check"]).arg(&config));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra}: {err}");
        assert!(err.contains(msg), "{extra}: {err}");
        assert!(!err.contains("panicked"), "{extra}: {err}");
    }
    write("");
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &dir.join("log"),
        ": recording on ",
    );
    bench.send_udp_flows(9000, 3, 300, 40);
    // the recorder has every packet (its counter, through the control socket)
    counters_until(
        &dir.join("control.sock"),
        &svc,
        Duration::from_secs(30),
        "300 packets recorded",
        |c| c["jobs"]["k"]["writer"]["packets"].as_u64() == Some(300),
    );
    let (st, log) = svc.signal("-TERM");
    assert!(st.success(), "{st}: {log}");
    let (records, messages, delivered, failed, overflow) = kafka_counts(&log);
    assert_eq!(
        (records, delivered, failed, overflow),
        (3, messages, 0, 0),
        "{log}"
    );
    assert!((1..=3).contains(&messages), "{log}");
    // the oracle: weir flows -r over the store's segments, the job's timeouts
    let mut cmd = weir();
    cmd.args([
        "flows",
        "--workers",
        "1",
        "--json",
        "-",
        "--idle-timeout",
        "600",
    ]);
    for seg in segments(&dir.join("s")) {
        cmd.arg("-r").arg(seg);
    }
    let out = run(&mut cmd);
    assert!(out.status.success(), "{out:?}");
    let mut want: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(want.len(), 3, "three flows in the store");
    // by default the records are packed, JSON lines under the sensor's key
    let msgs = b.consume("run");
    assert_eq!(msgs.len() as u64, messages, "{log}");
    let mut got = Vec::new();
    for (_, _, key, payload) in &msgs {
        assert_eq!(key, "s1");
        for line in std::str::from_utf8(payload).unwrap().split('\n') {
            let _: Value = serde_json::from_str(line).unwrap();
            got.push(line.to_owned());
        }
    }
    got.sort();
    want.sort();
    assert_eq!(got, want, "{log}");
}

/// The one sample of family `name` in a scrape (this test's one Kafka output).
fn sample(text: &str, name: &str) -> u64 {
    let prefix = format!("{name}{{");
    let got: Vec<f64> = samples(text)
        .into_iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(got.len(), 1, "{name}: {text}");
    got[0] as u64
}

/// kill -9 of `weir run` whose flows go to Kafka, with the broker paused (SIGSTOP) so that
/// records are held unacknowledged: the last scrape of /metrics bounds the loss. Three UDP
/// flows (port 9000) are exported and acknowledged (`weir_kafka_delivered_messages_total` 3),
/// the broker is paused, four more (port 9100) are exported and held
/// (`weir_kafka_unacknowledged_records` 4: none can be acknowledged), weir is killed with
/// SIGKILL and the broker resumed. The topic then holds at least the 3 delivered records, each
/// flow at most once (no duplicate), each one of the seven sent (its ports, 10 packets), and
/// the flows missing from it are at most the 4 reported unacknowledged.
#[test]
fn kill_9_loses_at_most_the_reported_unacknowledged_records() {
    let Some((b, bench, dir)) = live_set_up("kafka-kill9") else {
        return;
    };
    let config = dir.join("weir.toml");
    std::fs::write(
        &config,
        format!(
            "[metrics]\nlisten = \"127.0.0.1:0\"\n\
             [[record]]\nname = \"k\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 4\n\
             write_mib = 1\nbuffer_mib = 16\nfilter = \"udp and (dst port 9000 or dst port 9100)\"\n\
             [record.flows]\nidle_timeout_s = 1\n\
             [record.flows.kafka]\nbrokers = \"{}\"\ntopic = \"kill9\"\nsensor = \"s1\"\n\
             records_per_message = 1\n",
            bench.host_if,
            b.brokers()
        ),
    )
    .unwrap();
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &dir.join("log"),
        ": recording on ",
    );
    let addr = served(&svc.text());
    // scrapes until `done` holds for the scrape, at most 60 s
    let scrape_until = |what: &str, done: &dyn Fn(&str) -> bool| -> String {
        let t = Instant::now();
        loop {
            let text = metrics_text(&addr);
            if text.contains("weir_kafka_messages_total{") && done(&text) {
                return text;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "{what} never came: {text}\n{}",
                svc.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    bench.send_udp_flows(9000, 3, 30, 40);
    let first = scrape_until("3 delivered", &|t| {
        sample(t, "weir_kafka_delivered_messages_total") == 3
    });
    if have("promtool") {
        promtool_check(&first);
    }
    assert_eq!(sample(&first, "weir_kafka_unacknowledged_records"), 0);
    // the broker process this test started and still owns
    let pid = b.child.as_ref().unwrap().id().to_string();
    assert!(run(Command::new("kill").args(["-STOP", &pid]))
        .status
        .success());
    bench.send_udp_flows(9100, 4, 40, 40);
    let last = scrape_until("7 records exported", &|t| {
        sample(t, "weir_export_records_total") == 7 && sample(t, "weir_kafka_messages_total") == 7
    });
    let delivered = sample(&last, "weir_kafka_delivered_messages_total");
    let bound = sample(&last, "weir_kafka_unacknowledged_records");
    assert_eq!(
        (
            delivered,
            bound,
            sample(&last, "weir_kafka_unacknowledged_messages")
        ),
        (3, 4, 4),
        "the paused broker acknowledges nothing: {last}"
    );
    assert_eq!(sample(&last, "weir_kafka_failed_messages_total"), 0);
    let (st, log) = svc.signal("-KILL");
    assert!(!st.success(), "{st}: {log}");
    assert!(run(Command::new("kill").args(["-CONT", &pid]))
        .status
        .success());
    let got = b.consume("kill9");
    let mut seen = BTreeSet::new();
    let mut per_port: BTreeMap<u64, u64> = BTreeMap::new();
    for (_, _, key, payload) in &got {
        let line = String::from_utf8(payload.clone()).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(key, &expected_key(&v), "{line}");
        assert_eq!(v["packetDeltaCount"], 10, "{line}");
        assert_eq!(v["sourceIPAddress"], bench.peer_ip.as_str(), "{line}");
        let flow = (
            v["sourceTransportPort"].as_u64().unwrap(),
            v["destinationTransportPort"].as_u64().unwrap(),
        );
        assert!(seen.insert(flow), "duplicate: {line}");
        *per_port.entry(flow.1).or_default() += 1;
    }
    eprintln!(
        "delivered {delivered}, unacknowledged {bound}, consumed {}: {per_port:?}",
        got.len()
    );
    assert!(got.len() as u64 >= delivered, "{per_port:?}");
    assert_eq!(
        per_port.get(&9000),
        Some(&3),
        "the acknowledged flows are there"
    );
    let held = per_port.get(&9100).copied().unwrap_or(0);
    assert!(held <= 4, "{per_port:?}");
    assert!(4 - held <= bound, "missing flows beyond the reported bound");
    assert_eq!(
        per_port.len() as u64,
        1 + u64::from(held > 0),
        "{per_port:?}"
    );
}

/// The summary line of an analyzer's Kafka output: (messages, delivered, failed, overflow).
fn log_counts(stderr: &str) -> (u64, u64, u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.contains("kafka json to "))
        .unwrap_or_else(|| panic!("no kafka line in {stderr}"));
    // "weir: kafka json to 127.0.0.1:PORT: M messages (B bytes): D delivered, F failed,
    //  O lost to a full queue (of Q)"
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let n = nums.len();
    (nums[n - 6], nums[n - 4], nums[n - 3], nums[n - 2])
}

/// The lines of a file.
fn lines_of(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `topic`'s messages equal `want` (the analyzer's `--json` lines), each under
/// `s1/` + `key(record)`, one partition per key, in the lines' order per key.
fn same_records(b: &Broker, topic: &str, want: &[String], key: &dyn Fn(&Value) -> String) {
    let got = b.consume(topic);
    let mut g: Vec<String> = got
        .iter()
        .map(|m| String::from_utf8(m.3.clone()).unwrap())
        .collect();
    let mut w = want.to_vec();
    g.sort();
    w.sort();
    assert_eq!(g, w, "{topic}: the messages are the --json lines");
    let mut by_key: BTreeMap<&str, (BTreeSet<u32>, Vec<&[u8]>)> = BTreeMap::new();
    for (p, _, k, payload) in &got {
        let v: Value = serde_json::from_slice(payload).unwrap();
        assert_eq!(k, &format!("s1/{}", key(&v)), "{topic}");
        let e = by_key.entry(k).or_default();
        e.0.insert(*p);
        e.1.push(payload);
    }
    for (k, (parts, seq)) in &by_key {
        assert_eq!(parts.len(), 1, "{topic}: key {k} on partitions {parts:?}");
        let in_file: Vec<&[u8]> = want
            .iter()
            .filter(|l| format!("s1/{}", key(&serde_json::from_str(l).unwrap())) == *k)
            .map(|l| l.as_bytes())
            .collect();
        assert_eq!(seq, &in_file, "{topic}: order of key {k}");
    }
}

/// `weir http -r FILES --kafka` and `weir voip -r FILE --kafka`: the topics weir.http, weir.tls,
/// weir.calls and weir.rtp hold, message for message, the lines `--json` writes for the same
/// files (HTTP/TLS keyed by the connection's uid, calls and their streams by the Call-ID), and
/// the summary counts them all delivered; nothing goes to stdout without -w.
#[test]
fn http_and_voip_records_equal_their_json_lines() {
    let dir = weir_testkit::corpus_dir();
    let http_files: Vec<PathBuf> = [
        "http-range-multiflows__input.pcap",
        "base64-decode-5885__input.pcap",
        "ethernet-eve__test.pcap",
    ]
    .iter()
    .map(|f| dir.join(f))
    .collect();
    let sip = dir.join("sip-method__sip.pcap");
    if let Some(m) = http_files.iter().chain([&sip]).find(|p| !p.exists()) {
        missing(&format!("corpus file {}", m.display()));
        return;
    }
    let Some(b) = Broker::start() else { return };
    let tmp = TempDir::new("kafka-logs");
    // the reference: the --json lines
    let (h, t) = (tmp.join("http.json"), tmp.join("tls.json"));
    let out = run(weir()
        .arg("http")
        .args(http_files.iter().flat_map(|f| [Path::new("-r"), f]))
        .arg("-w")
        .arg(&h)
        .arg("--tls-log")
        .arg(&t));
    assert!(out.status.success(), "{out:?}");
    let (want_http, want_tls) = (lines_of(&h), lines_of(&t));
    assert!(
        want_http.len() >= 40 && want_tls.len() >= 10,
        "{want_http:?} {want_tls:?}"
    );
    let out = run(weir()
        .arg("http")
        .args(http_files.iter().flat_map(|f| [Path::new("-r"), f]))
        .args(["--kafka", &b.brokers(), "--kafka-sensor", "s1"]));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout with --kafka alone"
    );
    let n = (want_http.len() + want_tls.len()) as u64;
    assert_eq!(log_counts(&err), (n, n, 0, 0), "{err}");
    let uid = |v: &Value| v["uid"].as_str().unwrap().to_owned();
    same_records(&b, "weir.http", &want_http, &uid);
    same_records(&b, "weir.tls", &want_tls, &uid);

    // VoIP, with -w as well: the file is written as without --kafka
    let (c, s) = (tmp.join("calls.json"), tmp.join("streams.json"));
    let out = run(weir()
        .args(["voip", "-r"])
        .arg(&sip)
        .arg("-w")
        .arg(&c)
        .arg("--streams")
        .arg(&s));
    assert!(out.status.success(), "{out:?}");
    let (want_calls, want_streams) = (lines_of(&c), lines_of(&s));
    assert!(!want_calls.is_empty() && !want_streams.is_empty());
    let both = tmp.join("both.json");
    let out = run(weir()
        .args(["voip", "-r"])
        .arg(&sip)
        .arg("-w")
        .arg(&both)
        .args(["--kafka", &b.brokers(), "--kafka-sensor", "s1"])
        .args(["--kafka-compression", "lz4"]));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    let mut file = lines_of(&both);
    let mut all = [want_calls.clone(), want_streams.clone()].concat();
    file.sort();
    all.sort();
    assert_eq!(file, all, "-w beside --kafka: the same lines");
    let n = all.len() as u64;
    assert_eq!(log_counts(&err), (n, n, 0, 0), "{err}");
    let call_key = |v: &Value| match v["call_id"].as_str() {
        Some(id) => id.to_owned(),
        None => format!(
            "{}/{}/{}/{}/{}",
            v["ssrc"],
            v["src_ip"].as_str().unwrap(),
            v["src_port"],
            v["dst_ip"].as_str().unwrap(),
            v["dst_port"]
        ),
    };
    same_records(&b, "weir.calls", &want_calls, &call_key);
    same_records(&b, "weir.rtp", &want_streams, &call_key);
}

/// The analyzers' Kafka options: bad numbers, names and combinations exit 2 by name, a
/// missing broker exits 1 and says so; no panic, nothing on stdout.
#[test]
fn hostile_analyzer_kafka_options_are_clear_errors() {
    let f = weir_testkit::corpus_dir().join("sip-method__sip.pcap");
    if !f.exists() {
        missing("corpus file sip-method__sip.pcap");
        return;
    }
    let closed = format!("127.0.0.1:{}", free_port());
    let cases: &[(&str, &[&str], i32, &str)] = &[
        (
            "http",
            &["--kafka-queue", "5"],
            2,
            "--kafka-queue describes the Kafka output; give --kafka",
        ),
        (
            "voip",
            &["--kafka-sensor", "x"],
            2,
            "--kafka-sensor describes the Kafka output; give --kafka",
        ),
        (
            "http",
            &["--kafka", "b:1", "--kafka-queue", "0"],
            2,
            "--kafka-queue",
        ),
        (
            "voip",
            &["--kafka", "b:1", "--kafka-queue", "-5"],
            2,
            "--kafka-queue",
        ),
        (
            "http",
            &["--kafka", "b:1", "--kafka-timeout", "nan"],
            2,
            "not a number of seconds from 1",
        ),
        (
            "voip",
            &["--kafka", "b:1", "--kafka-timeout", "1e300"],
            2,
            "not a number of seconds from 1",
        ),
        (
            "http",
            &["--kafka", "b:1", "--kafka-linger-ms", "-1"],
            2,
            "--kafka-linger-ms",
        ),
        (
            "voip",
            &["--kafka", "b:1", "--kafka-batch-bytes", "10"],
            2,
            "--kafka-batch-bytes",
        ),
        (
            "http",
            &["--kafka", "b:1", "--kafka-compression", "gzip"],
            2,
            "--kafka-compression",
        ),
        (
            "http",
            &["--kafka", "b:1", "--format", "apache"],
            2,
            "--kafka sends the JSON records: leave out --format apache",
        ),
        ("voip", &["--kafka", ""], 2, "bad broker list"),
        (
            "http",
            &["--kafka", &closed],
            1,
            "no Kafka broker answered at",
        ),
        (
            "voip",
            &["--kafka", &closed],
            1,
            "no Kafka broker answered at",
        ),
    ];
    for (cmd, args, code, msg) in cases {
        clear_errors(&[cmd, "-r", f.to_str().unwrap()], &[(args, *code, msg)]);
    }
}

/// `weir run` with a `[[voip]]` job whose records go to Kafka (`[voip.kafka]`): a hand-built
/// call over a veth pair; after SIGTERM weir.calls and weir.rtp hold, message for message, the
/// job's calls and streams files, under the Call-ID key, and the closing summary counts them
/// delivered. `topic`/`format` in an analyzer's kafka table are refused by --check.
#[test]
fn weir_run_sends_a_voip_jobs_records_to_kafka() {
    let Some((b, bench, dir)) = live_set_up("kafka-run-voip") else {
        return;
    };
    let config = dir.join("weir.toml");
    let write = |extra: &str| {
        std::fs::write(
            &config,
            format!(
                "[control]\nsocket = \"control.sock\"\n\
                 [[record]]\nname = \"k\"\ninterface = \"{}\"\nstore = \"s\"\nsegment_mib = 4\n\
                 write_mib = 1\nbuffer_mib = 16\n\
                 [[voip]]\nfilter = \"udp\"\ncalls = \"calls.jsonl\"\nstreams = \"streams.jsonl\"\n\
                 [voip.kafka]\nbrokers = \"{}\"\nsensor = \"s1\"\n{extra}",
                bench.host_if,
                b.brokers()
            ),
        )
        .unwrap();
    };
    for (extra, msg) in [
        ("topic = \"t\"\n", "voip[0].kafka.topic"),
        ("format = \"protobuf\"\n", "leave out `format`"),
        ("compression = \"gzip\"\n", "`gzip` is no compression"),
        (
            "records_per_message = 5\n",
            "leave out `records_per_message`",
        ),
    ] {
        write(extra);
        let out = run(weir().args(["run", "--check"]).arg(&config));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra}: {err}");
        assert!(err.contains(msg), "{extra}: {err}");
    }
    write("");
    let svc = Running::start(
        &["run", config.to_str().unwrap()],
        &dir.join("log"),
        ": recording on ",
    );
    call(&bench);
    counters_until(
        &dir.join("control.sock"),
        &svc,
        Duration::from_secs(30),
        "7 SIP messages",
        |c| c["jobs"]["k"]["voip"]["sip_messages"].as_u64() >= Some(7),
    );
    let (st, log) = svc.signal("-TERM");
    assert!(st.success(), "{st}: {log}");
    let (calls, streams) = (
        lines_of(&dir.join("calls.jsonl")),
        lines_of(&dir.join("streams.jsonl")),
    );
    assert!(!calls.is_empty() && !streams.is_empty(), "{log}");
    let n = (calls.len() + streams.len()) as u64;
    assert_eq!(log_counts(&log), (n, n, 0, 0), "{log}");
    let call_key = |v: &Value| v["call_id"].as_str().unwrap().to_owned();
    same_records(&b, "weir.calls", &calls, &call_key);
    same_records(&b, "weir.rtp", &streams, &call_key);
}

/// `weir http -i IF -w LOG --kafka`: curl's five transactions to Python's http.server over a
/// veth pair; after SIGTERM weir.http holds the log's lines, message for message, and the
/// summary counts them delivered.
#[test]
fn live_http_log_goes_to_kafka_too() {
    let Some((b, bench, dir)) = live_set_up("kafka-http-live") else {
        return;
    };
    web_files(dir.path());
    let _servers = servers(&bench, dir.path());
    let log = dir.join("http.jsonl");
    let weir = Running::start(
        &[
            "http",
            "-i",
            &bench.host_if,
            "-w",
            log.to_str().unwrap(),
            "--kafka",
            &b.brokers(),
            "--kafka-sensor",
            "s1",
            "tcp",
        ],
        &dir.join("err.txt"),
        "analyzing HTTP and TLS on",
    );
    let want = traffic(&bench);
    let (status, text) = weir.signal("-TERM");
    assert!(status.success(), "{status} {text}");
    let lines = lines_of(&log);
    assert_eq!(lines.len(), want.len(), "{text}");
    let n = lines.len() as u64;
    assert_eq!(log_counts(&text), (n, n, 0, 0), "{text}");
    let uid = |v: &Value| v["uid"].as_str().unwrap().to_owned();
    same_records(&b, "weir.http", &lines, &uid);
}

/// `weir record -i IF --http LOG --http-kafka B --voip CALLS --voip-kafka B`: curl's five
/// transactions and a hand-built call over a veth pair; after SIGTERM weir.http holds the HTTP
/// log's lines and weir.calls/weir.rtp the calls' and streams' lines (`--voip` writes both to
/// one file), message for message, keyed by the host name (the default sensor) and the uid or
/// Call-ID; the summary has both Kafka lines, nothing failed. Hostile: `--http-kafka` without
/// `--http`, a bad broker list, a broker that does not answer: clear errors.
#[test]
fn record_sends_its_analyzers_records_to_kafka() {
    let Some((b, bench, dir)) = live_set_up("kafka-record") else {
        return;
    };
    let store = dir.join("store");
    let (http, voip) = (dir.join("http.jsonl"), dir.join("voip.jsonl"));
    let closed = format!("127.0.0.1:{}", free_port());
    for (args, code, msg) in [
        (
            vec!["--http-kafka", "b:1"],
            2,
            "the following required arguments were not provided:\n  --http <FILE>",
        ),
        (
            vec!["--voip", "v.json", "--voip-kafka", ""],
            1,
            "--voip-kafka: kafka: bad broker list",
        ),
        (
            vec!["--http", "h.json", "--http-kafka", &closed],
            1,
            "no Kafka broker answered at",
        ),
    ] {
        let out = run(weir()
            .current_dir(dir.path())
            .args(["record", "-i", &bench.host_if, "-o", "hostile-store"])
            .args(&args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
        assert!(err.contains(msg), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    web_files(dir.path());
    let _servers = servers(&bench, dir.path());
    let brokers = b.brokers();
    let args = record_analyzers_args(
        &bench.host_if,
        &store,
        &http,
        &voip,
        &["--http-kafka", &brokers, "--voip-kafka", &brokers],
    );
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let weir = Running::start(&argv, &dir.join("err.txt"), "recording on");
    let want = traffic(&bench);
    call(&bench);
    let (status, text) = weir.signal("-TERM");
    assert!(status.success(), "{status} {text}");
    let kafka_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("kafka json to "))
        .collect();
    assert_eq!(kafka_lines.len(), 2, "{text}");
    for l in &kafka_lines {
        assert!(l.contains(" 0 failed, 0 lost"), "{text}");
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned();
    let http_lines = lines_of(&http);
    assert_eq!(http_lines.len(), want.len(), "{text}");
    let voip_lines = lines_of(&voip);
    let (calls, streams): (Vec<String>, Vec<String>) = voip_lines.iter().cloned().partition(|l| {
        serde_json::from_str::<Value>(l)
            .unwrap()
            .get("ssrc")
            .is_none()
    });
    assert!(!calls.is_empty() && !streams.is_empty(), "{voip_lines:?}");
    for (topic, want, field) in [
        ("weir.http", &http_lines, "uid"),
        ("weir.calls", &calls, "call_id"),
        ("weir.rtp", &streams, "call_id"),
    ] {
        let got = b.consume(topic);
        let mut g: Vec<String> = Vec::new();
        for (_, _, key, payload) in &got {
            let line = String::from_utf8(payload.clone()).unwrap();
            let v: Value = serde_json::from_str(&line).unwrap();
            assert_eq!(
                key,
                &format!("{host}/{}", v[field].as_str().unwrap()),
                "{line}"
            );
            g.push(line);
        }
        let mut w = want.clone();
        g.sort();
        w.sort();
        assert_eq!(g, w, "{topic}: the messages are the log's lines");
    }
}
