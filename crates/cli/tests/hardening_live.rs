//! Issue 14, the live pipeline: counters that reconcile exactly when capture is stopped under
//! load (every packet the kernel counted is read or counted as dropped), a down interface
//! refused as tcpdump refuses it, and the packets lost before the ring (interface, backlog)
//! counted and reported, so that sent = recorded + every counted drop.
//!
//! Every test runs on veth pairs in namespaces it creates. `WEIR_BIN` runs another weir binary
//! (to check that these tests fail on an older build).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::netns::VethBench;
use common::{run, segments, Running};

/// The weir under test (`WEIR_BIN` overrides the one cargo built).
fn weir() -> Command {
    match std::env::var_os("WEIR_BIN") {
        Some(b) => Command::new(b),
        None => common::weir(),
    }
}

/// The peer of the bench's host interface (in the namespace).
fn peer(b: &VethBench) -> String {
    b.host_if.replacen("wa", "wb", 1)
}

/// `weir gen` in the bench's namespace, sending UDP to our side at `pps` for `secs`.
fn gen(b: &VethBench, pps: u32, secs: f64) -> Child {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &b.ns]);
    cmd.arg(weir().get_program());
    let child = cmd
        .args(["gen", "-i", &peer(b), "--pps", &pps.to_string()])
        .args(["--duration", &secs.to_string(), "--flows", "8"])
        .args(["--src", &b.peer_ip, "--dst", &b.host_ip])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
}

/// The number right before `label` in `text` (`"123 received"` → 123).
fn number_before(text: &str, label: &str) -> u64 {
    let at = text
        .find(label)
        .unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
    let word = text[..at].trim_end().rsplit([' ', '(']).next().unwrap();
    word.parse()
        .unwrap_or_else(|_| panic!("{word:?} before {label:?} in:\n{text}"))
}

/// The kernel's and the capture's counters of a summary: (received, dropped, read).
fn ring_counters(text: &str) -> (u64, u64, u64) {
    let line = text
        .lines()
        .find(|l| l.contains("kernel:"))
        .unwrap_or_else(|| panic!("no kernel line in:\n{text}"));
    (
        number_before(line, " received"),
        number_before(line, " dropped;"),
        number_before(line, " read"),
    )
}

/// Packets tcpdump reads in `files`.
fn tcpdump_count(files: &[PathBuf]) -> u64 {
    let mut n = 0;
    for f in files {
        let out = run(Command::new("tcpdump").arg("-nr").arg(f));
        assert!(
            out.status.success(),
            "{}: {}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        n += String::from_utf8_lossy(&out.stdout).lines().count() as u64;
    }
    n
}

/// Stops a live command with SIGINT while `weir gen` sends 30 kpps, several times (one ring,
/// then two in a fanout group, in turn); each time
/// the kernel's count must equal read + dropped exactly, and `check` sees the directory and the
/// summary. `args` gets the interface and a fresh directory.
fn under_load(
    rounds: usize,
    banner: &str,
    args: impl Fn(&str, &Path) -> Vec<String>,
    check: impl Fn(&Path, &str),
) {
    let bench = VethBench::new();
    for round in 0..rounds {
        let tmp = tempfile::tempdir().unwrap();
        let mut args = args(&bench.host_if, tmp.path());
        // Every other round, two rings in a fanout group: each is drained.
        if round % 2 == 1 {
            args.extend(["--threads".to_string(), "2".to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = Running::start(&args, &tmp.path().join("log"), banner);
        let mut g = gen(&bench, 30_000, 4.0);
        // Stop in the middle of the traffic, at a different point each round.
        std::thread::sleep(Duration::from_millis(900 + 170 * round as u64));
        let (status, text) = r.signal("-INT");
        let _ = g.wait();
        assert!(status.success(), "round {round}: {status}:\n{text}");
        let (received, dropped, read) = ring_counters(&text);
        assert!(
            read > 1000,
            "round {round}: traffic reached the ring:\n{text}"
        );
        assert_eq!(
            received,
            read + dropped,
            "round {round}: every packet the kernel counted is read or counted dropped:\n{text}"
        );
        check(tmp.path(), &text);
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn record_stopped_under_load_reconciles() {
    under_load(
        4,
        "recording on",
        |iface, d| {
            let store = d.join("store");
            strings(&[
                "record",
                "-i",
                iface,
                "-o",
                store.to_str().unwrap(),
                "--buffer-mib",
                "64",
            ])
        },
        |d, text| {
            let recorded = number_before(text, " packets recorded");
            let (_, _, read) = ring_counters(text);
            assert_eq!(
                recorded, read,
                "nothing lost between ring and store:\n{text}"
            );
            assert_eq!(
                tcpdump_count(&segments(&d.join("store"))),
                recorded,
                "the store holds what the summary says:\n{text}"
            );
        },
    );
}

#[test]
fn capture_stopped_under_load_reconciles() {
    under_load(
        4,
        "capturing on",
        |iface, d| {
            let out = d.join("out.pcap");
            strings(&["capture", "-i", iface, "-w", out.to_str().unwrap()])
        },
        |d, text| {
            let written = number_before(text, " packets written");
            let (_, _, read) = ring_counters(text);
            assert_eq!(written, read, "nothing lost between ring and file:\n{text}");
            assert_eq!(tcpdump_count(&[d.join("out.pcap")]), written, "{text}");
        },
    );
}

#[test]
fn flows_stopped_under_load_reconciles() {
    under_load(
        3,
        "metering flows on",
        |iface, d| {
            let json = d.join("flows.json");
            strings(&["flows", "-i", iface, "--json", json.to_str().unwrap()])
        },
        |_, _| {},
    );
}

/// A veth pair left down, removed on drop.
struct DownVeth(String);

impl DownVeth {
    fn new() -> DownVeth {
        let name = format!("wdn{}", std::process::id() % 100_000);
        let out = run(Command::new("ip").args([
            "link",
            "add",
            &name,
            "type",
            "veth",
            "peer",
            "name",
            &format!("{name}p"),
        ]));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        DownVeth(name)
    }
}

impl Drop for DownVeth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

#[test]
fn down_interface_is_refused() {
    let veth = DownVeth::new();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let pcap = tmp.path().join("out.pcap");
    let json = tmp.path().join("flows.json");
    let cases: [Vec<&str>; 3] = [
        vec!["capture", "-i", &veth.0, "-w", pcap.to_str().unwrap()],
        vec!["record", "-i", &veth.0, "-o", store.to_str().unwrap()],
        vec!["flows", "-i", &veth.0, "--json", json.to_str().unwrap()],
    ];
    for args in cases {
        let out = run(weir().args(&args).args(["--duration", "1"]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("{}: That device is not up", veth.0)),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    assert!(!store.exists(), "record touched nothing");
    assert!(!pcap.exists(), "capture created no file");
}

/// Sets the global `net.core.netdev_max_backlog` for the life of the value, restoring the old
/// value on drop (also when the test panics).
struct Backlog(String);

const BACKLOG: &str = "/proc/sys/net/core/netdev_max_backlog";

impl Backlog {
    fn set(n: u32) -> Backlog {
        let old = std::fs::read_to_string(BACKLOG).unwrap();
        std::fs::write(BACKLOG, n.to_string()).unwrap();
        Backlog(old.trim().to_string())
    }
}

impl Drop for Backlog {
    fn drop(&mut self) {
        let _ = std::fs::write(BACKLOG, &self.0);
    }
}

/// The receiving CPU's backlog overflows (receive steering sends every packet of our veth to
/// CPU 0, the sender runs on CPU 1, the backlog holds 8 packets): packets are lost before any
/// socket sees them. The summary and `--stats-json` must count them, so that sent = recorded +
/// every counted drop.
#[test]
fn drops_before_the_ring_are_counted() {
    let bench = VethBench::new();
    let peer = peer(&bench);
    let nsx = |args: &[&str]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &bench.ns]).args(args);
        let out = run(&mut c);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    // No packet of the machine's own (IPv6 neighbour discovery) in the count.
    let v6 = |i: &str| format!("net.ipv6.conf.{i}.disable_ipv6=1");
    assert!(
        run(Command::new("sysctl").args(["-qw", &v6(&bench.host_if)]))
            .status
            .success()
    );
    nsx(&["sysctl", "-qw", &v6(&peer)]);
    std::fs::write(
        format!("/sys/class/net/{}/queues/rx-0/rps_cpus", bench.host_if),
        "1",
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let stats = tmp.path().join("stats.json");
    let r = Running::start(
        &[
            "record",
            "-i",
            &bench.host_if,
            "-o",
            store.to_str().unwrap(),
            "--buffer-mib",
            "64",
            "--stats-json",
            stats.to_str().unwrap(),
            "udp port 9999",
        ],
        &tmp.path().join("log"),
        "recording on",
    );
    let sent: u64 = 300_000;
    {
        let _backlog = Backlog::set(8);
        let script = format!(
            "import socket\n\
             s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
             for i in range({sent}):\n    s.sendto(b'WEIR%08d' % i,('{}',9999))\n",
            bench.host_ip
        );
        nsx(&["taskset", "-c", "1", "python3", "-c", &script]);
    }
    std::thread::sleep(Duration::from_millis(300));
    let (status, text) = r.signal("-INT");
    assert!(status.success(), "{status}:\n{text}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let n = |a: &str, b: &str| {
        json[a][b]
            .as_u64()
            .unwrap_or_else(|| panic!("no {a}.{b} in {json:#}"))
    };
    let recorded = n("writer", "packets");
    let interface =
        n("capture", "if_rx_dropped") + n("capture", "if_rx_missed") + n("capture", "if_rx_fifo");
    let counted = interface
        + n("capture", "kernel_drops")
        + n("buffer", "dropped_full")
        + n("buffer", "dropped_too_long")
        + n("writer", "dropped");
    assert!(
        interface > 0,
        "the backlog overflowed and the interface said so:\n{text}\n{json:#}"
    );
    assert!(
        n("capture", "softnet_dropped") >= n("capture", "if_rx_dropped"),
        "the backlog's own count (machine-wide) holds ours:\n{json:#}"
    );
    assert_eq!(
        recorded + counted,
        sent,
        "sent = recorded + every counted drop:\n{text}\n{json:#}"
    );
    assert_eq!(tcpdump_count(&segments(&store)), recorded, "{text}");
    assert!(
        text.contains(&format!("rx_dropped {}", n("capture", "if_rx_dropped"))),
        "the summary says it:\n{text}"
    );
}
