//! Shared helpers of the peer-validation tests: synthetic flow records, a real nfcapd on
//! loopback read back with nfdump, and classic pcap files of exported datagrams for tshark.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::{IpAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir_export::{open_sink, ExportStats, NetflowFormat, SinkSpec, Target};
use weir_flows::{Direction, EndReason, FlowKey, FlowRecord};

/// 2026-11-21T10:20:30Z in ns.
pub(crate) const T0: u64 = 1_795_256_430_000_000_000;

/// Whether a peer program is installed; prints why a test is skipped otherwise (set
/// `WEIR_REQUIRE_PEERS=1` to make a missing peer fail instead).
pub(crate) fn have(program: &str) -> bool {
    let ok = Command::new(program)
        .arg("-h")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        assert!(
            std::env::var_os("WEIR_REQUIRE_PEERS").is_none(),
            "{program} is not installed"
        );
        eprintln!("SKIPPED: {program} is not installed");
    }
    ok
}

fn dir(packets: u64, bytes: u64, start_ms: u64, dur_ms: u64, flags: u8, ttl: u8) -> Direction {
    Direction {
        packets,
        bytes,
        first_ns: T0 + start_ms * 1_000_000 + 123_456,
        last_ns: T0 + (start_ms + dur_ms) * 1_000_000 + 654_321,
        tcp_flags: flags,
        min_ttl: ttl,
        max_ttl: ttl.saturating_add(2),
    }
}

fn key(src: &str, dst: &str, proto: u8, sp: u16, dp: u16, vlan: u16, tos: u8) -> FlowKey {
    FlowKey {
        vlan,
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        proto,
        src_port: sp,
        dst_port: dp,
        tos,
    }
}

/// A mix of flows: IPv4 and IPv6; TCP, UDP, ICMP, ICMPv6, GRE, SCTP; VLANs; one-way and two-way;
/// a flow whose counters exceed 32 bits (5e9 packets, 2e10 bytes); then `extra` small flows to
/// fill many datagrams.
pub(crate) fn records(extra: u32) -> Vec<FlowRecord> {
    let none = Direction::default();
    let r = |key, forward, reverse, end_reason| FlowRecord {
        key,
        forward,
        reverse,
        end_reason,
        tag: None,
    };
    let mut v = vec![
        r(
            key("10.1.0.1", "10.2.0.1", 6, 40000, 443, 0, 0),
            dir(12, 5_000, 0, 2_500, 0x1b, 64),
            dir(10, 80_000, 30, 2_400, 0x1b, 57),
            EndReason::EndOfFlow,
        ),
        r(
            key("10.1.0.2", "10.3.0.53", 17, 53001, 53, 10, 0),
            dir(1, 60, 100, 0, 0, 64),
            dir(1, 200, 101, 0, 0, 60),
            EndReason::IdleTimeout,
        ),
        r(
            key("192.168.7.1", "192.168.7.2", 1, 0, 8 << 8, 0, 0),
            dir(4, 336, 200, 3_000, 0, 64),
            none,
            EndReason::IdleTimeout,
        ),
        r(
            key("172.16.0.1", "172.16.0.2", 47, 0, 0, 42, 0x20),
            dir(1_000, 1_400_000, 10, 60_000, 0, 255),
            none,
            EndReason::ActiveTimeout,
        ),
        r(
            key("10.9.9.9", "10.8.8.8", 6, 5001, 5201, 0, 0),
            dir(5_000_000_000, 20_000_000_000, 0, 110_000, 0x18, 64),
            dir(2_500_000_000, 130_000_000_000, 1, 110_000, 0x10, 63),
            EndReason::ForcedEnd,
        ),
        r(
            key("2001:db8::1", "2001:db8::2", 6, 50000, 80, 0, 0),
            dir(7, 1_234, 0, 900, 0x1b, 64),
            dir(6, 9_876, 1, 899, 0x1b, 64),
            EndReason::EndOfFlow,
        ),
        r(
            key("2001:db8:1::10", "2001:db8:2::20", 17, 5353, 5353, 5, 0),
            dir(3, 330, 5, 10, 0, 255),
            none,
            EndReason::LackOfResources,
        ),
        r(
            key("fe80::1", "ff02::1", 58, 0, 128 << 8, 0, 0),
            dir(2, 208, 0, 1_000, 0, 64),
            none,
            EndReason::IdleTimeout,
        ),
        r(
            key("2001:db8::a", "2001:db8::b", 132, 36412, 36412, 0, 0),
            dir(9, 900, 7, 77, 0, 64),
            dir(8, 800, 8, 76, 0, 64),
            EndReason::IdleTimeout,
        ),
    ];
    for i in 0..extra {
        let v6 = i % 4 == 3;
        let (s, d) = if v6 {
            (
                format!("2001:db8:10::{:x}", i + 1),
                "2001:db8:20::1".to_string(),
            )
        } else {
            (
                format!("10.100.{}.{}", i / 200, i % 200 + 1),
                "10.200.0.1".to_string(),
            )
        };
        v.push(r(
            key(&s, &d, 17, 10_000 + i as u16, 9_999, 0, 0),
            dir(
                u64::from(i % 50) + 1,
                u64::from(i) * 100 + 28,
                u64::from(i),
                5,
                0,
                64,
            ),
            none,
            EndReason::IdleTimeout,
        ));
    }
    v
}

/// One-way flow identity and counters, as a collector reports them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Uniflow {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Protocol.
    pub proto: u8,
    /// Source port.
    pub sp: u16,
    /// Destination port (ICMP type << 8 | code).
    pub dp: u16,
}

/// Expected one-way flows (packets, bytes summed per key) for a list of records.
pub(crate) fn expected_uniflows(
    recs: &[FlowRecord],
    ipv4_only: bool,
) -> BTreeMap<Uniflow, (u64, u64)> {
    let mut m = BTreeMap::new();
    for r in recs {
        if ipv4_only && r.key.src.is_ipv6() {
            continue;
        }
        for (k, d) in [(r.key, &r.forward), (r.key.reversed(), &r.reverse)] {
            if d.packets == 0 {
                continue;
            }
            let e = m
                .entry(Uniflow {
                    src: k.src,
                    dst: k.dst,
                    proto: k.proto,
                    sp: k.src_port,
                    dp: k.dst_port,
                })
                .or_insert((0, 0));
            e.0 += d.packets;
            e.1 += d.bytes;
        }
    }
    m
}

/// A temporary directory removed on drop.
pub(crate) struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory named after `tag` and the process id.
    pub(crate) fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!("weir-export-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A free UDP port on loopback (bound, read, released).
pub(crate) fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether something listens on UDP 127.0.0.1:`port` (from /proc/net/udp).
fn udp_bound(port: u16) -> bool {
    let want = format!("0100007F:{port:04X} ");
    std::fs::read_to_string("/proc/net/udp")
        .map(|s| s.contains(&want))
        .unwrap_or(false)
}

/// One nfcapd at a time: `free_udp_port` releases its port before nfcapd binds it, so two tests
/// starting collectors at once could get the same port number, one nfcapd would fail to bind,
/// and its test would send to the other test's collector (seen once in CI: "Flows: 0").
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A real nfcapd collecting on 127.0.0.1 into a temporary directory.
pub(crate) struct Nfcapd {
    _turn: std::sync::MutexGuard<'static, ()>,
    child: Option<Child>,
    /// Its UDP port.
    pub port: u16,
    dir: TempDir,
    log: PathBuf,
}

impl Nfcapd {
    /// Starts nfcapd on a free loopback port and waits until it listens.
    pub(crate) fn start(tag: &str) -> Nfcapd {
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let dir = TempDir::new(tag);
        let flows = dir.0.join("flows");
        std::fs::create_dir_all(&flows).unwrap();
        let log = dir.0.join("nfcapd.log");
        let port = free_udp_port();
        let child = Command::new("nfcapd")
            .args([
                "-b",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-B",
                "4000000",
                "-w",
            ])
            .arg(&flows)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(log.with_extension("err")).unwrap())
            .spawn()
            .expect("start nfcapd");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !udp_bound(port) {
            assert!(Instant::now() < deadline, "nfcapd did not bind port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut child = child;
        // The port is bound, but by this nfcapd? One that failed to bind has exited.
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            child.try_wait().expect("nfcapd status").is_none(),
            "nfcapd exited at start (port {port} taken?)"
        );
        Nfcapd {
            _turn: turn,
            child: Some(child),
            port,
            dir,
            log,
        }
    }

    /// The collector as an export target.
    pub(crate) fn target(&self) -> Target {
        Target::Udp(vec![format!("127.0.0.1:{}", self.port).parse().unwrap()])
    }

    /// Stops nfcapd (SIGTERM to its pid, so it writes its file), checks its own summary line
    /// reports no sequence errors and no bad packets, and returns nfdump's records
    /// (`nfdump -o json`, times in UTC).
    pub(crate) fn stop_and_read(mut self) -> Vec<serde_json::Value> {
        // Give nfcapd time to drain its socket before the signal.
        std::thread::sleep(Duration::from_millis(300));
        self.terminate();
        let mut log = String::new();
        for path in [self.log.clone(), self.log.with_extension("err")] {
            std::fs::File::open(path)
                .unwrap()
                .read_to_string(&mut log)
                .unwrap();
        }
        let summary = log
            .lines()
            .find(|l| l.contains("Sequence Errors"))
            .unwrap_or_else(|| panic!("no nfcapd summary in {log}"));
        eprintln!("nfcapd: {summary}");
        assert!(
            summary.contains("Sequence Errors: 0,") && summary.contains("Bad Packets: 0"),
            "{summary}"
        );
        let out = Command::new("nfdump")
            .env("TZ", "UTC")
            .args(["-o", "json", "-R"])
            .arg(self.dir.0.join("flows"))
            .output()
            .expect("run nfdump");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("nfdump json: {e}: {text}"));
        v.as_array().cloned().unwrap_or_default()
    }

    fn terminate(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while child.try_wait().unwrap().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("nfcapd did not stop on SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for Nfcapd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Exports `recs` (ticking between them like the meter would) and returns the stats.
pub(crate) fn export_all(spec: &SinkSpec, recs: &[FlowRecord]) -> ExportStats {
    let mut sink = open_sink(spec).unwrap();
    sink.tick(T0).unwrap();
    for (i, r) in recs.iter().enumerate() {
        sink.export(r).unwrap();
        if i % 50 == 49 {
            // Pace the burst a little so a loopback collector never overflows its socket.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    sink.finish().unwrap()
}

/// A NetFlow spec.
pub(crate) fn netflow(
    target: Target,
    format: NetflowFormat,
    biflow: bool,
    ts_nanos: bool,
) -> SinkSpec {
    SinkSpec::Netflow {
        target,
        format,
        biflow,
        ts_nanos,
    }
}

/// Splits a NetFlow file written by weir back into datagrams (2-byte length prefix for v5/v9,
/// IPFIX messages back to back).
pub(crate) fn read_datagrams(path: &Path, format: NetflowFormat) -> Vec<Vec<u8>> {
    let data = std::fs::read(path).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < data.len() {
        let (start, len) = if format == NetflowFormat::Ipfix {
            (
                at,
                usize::from(u16::from_be_bytes([data[at + 2], data[at + 3]])),
            )
        } else {
            (
                at + 2,
                usize::from(u16::from_be_bytes([data[at], data[at + 1]])),
            )
        };
        out.push(data[start..start + len].to_vec());
        at = start + len;
    }
    out
}

/// A classic pcap (µs, Ethernet) with each datagram in a UDP/IPv4 packet from 127.0.0.1:40000 to
/// 127.0.0.1:`port`, one per millisecond.
pub(crate) fn pcap_of(datagrams: &[Vec<u8>], port: u16) -> Vec<u8> {
    let mut f = Vec::new();
    for w in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65_535, 1] {
        // magic, version 2.4 (as two u16 in one u32, little-endian), thiszone, sigfigs,
        // snaplen, linktype Ethernet
        f.extend_from_slice(&w.to_le_bytes());
    }
    for (i, d) in datagrams.iter().enumerate() {
        let ip_len = 20 + 8 + d.len();
        let mut p = Vec::with_capacity(14 + ip_len);
        p.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&(i as u16).to_be_bytes());
        ip[6] = 0x40; // DF
        ip[8] = 64;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[127, 0, 0, 1]);
        ip[16..20].copy_from_slice(&[127, 0, 0, 1]);
        let sum = ip
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], c[1]])))
            .sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        let sum = !((sum & 0xffff) + (sum >> 16)) as u16;
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        p.extend_from_slice(&ip);
        p.extend_from_slice(&40000u16.to_be_bytes());
        p.extend_from_slice(&port.to_be_bytes());
        p.extend_from_slice(&((8 + d.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[0, 0]); // no UDP checksum
        p.extend_from_slice(d);
        let ts = T0 / 1000 + i as u64 * 1000; // µs
        f.extend_from_slice(&((ts / 1_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&((ts % 1_000_000) as u32).to_le_bytes());
        f.extend_from_slice(&(p.len() as u32).to_le_bytes());
        f.extend_from_slice(&(p.len() as u32).to_le_bytes());
        f.extend_from_slice(&p);
    }
    f
}

/// Expected first / last times (ms since the epoch) per one-way flow.
pub(crate) fn expected_times(recs: &[FlowRecord]) -> BTreeMap<Uniflow, (u64, u64)> {
    let mut m = BTreeMap::new();
    for r in recs {
        for (k, d) in [(r.key, &r.forward), (r.key.reversed(), &r.reverse)] {
            if d.packets > 0 {
                m.insert(
                    Uniflow {
                        src: k.src,
                        dst: k.dst,
                        proto: k.proto,
                        sp: k.src_port,
                        dp: k.dst_port,
                    },
                    (d.first_ns / 1_000_000, d.last_ns / 1_000_000),
                );
            }
        }
    }
    m
}

/// ms since the epoch of nfdump's `YYYY-MM-DDTHH:MM:SS.mmm` (UTC).
pub(crate) fn parse_nfdump_time(s: &str) -> u64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19);
    (secs * 1000 + n(20, 23)) as u64
}

/// One nfdump record's identity (ICMP type/code folded into the destination port as NetFlow
/// does).
pub(crate) fn nfdump_key(row: &serde_json::Value) -> Uniflow {
    let addr = |v4: &str, v6: &str| -> IpAddr {
        row.get(v4)
            .or_else(|| row.get(v6))
            .and_then(|v| v.as_str())
            .unwrap_or_else(|| panic!("no address in {row}"))
            .parse()
            .unwrap()
    };
    let num = |k: &str| row.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
    let proto = num("proto") as u8;
    let dp = if proto == 1 || proto == 58 {
        (num("icmp_type") << 8 | num("icmp_code")) as u16
    } else {
        num("dst_port") as u16
    };
    Uniflow {
        src: addr("src4_addr", "src6_addr"),
        dst: addr("dst4_addr", "dst6_addr"),
        proto,
        sp: num("src_port") as u16,
        dp,
    }
}

/// tshark's output for `pcap` with UDP port 2055 decoded as NetFlow/IPFIX (`cflow`).
pub(crate) fn tshark(pcap: &Path, args: &[&str]) -> String {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(pcap)
        .args(["-d", "udp.port==2055,cflow"])
        .args(args)
        .output()
        .expect("run tshark");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every value of `field` over all frames (tshark separates occurrences with `;`; a value with
/// a `;` would not survive this, none of ours has one).
pub(crate) fn values(pcap: &Path, field: &str) -> Vec<String> {
    tshark(
        pcap,
        &[
            "-T",
            "fields",
            "-e",
            field,
            "-E",
            "occurrence=a",
            "-E",
            "aggregator=;",
        ],
    )
    .lines()
    .flat_map(|l| l.split(';').map(str::to_string).collect::<Vec<_>>())
    .filter(|v| !v.is_empty())
    .collect()
}
