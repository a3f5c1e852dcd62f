//! `weir gen --backend xdp`: the AF_XDP transmit path on a veth pair in a namespace made by the
//! test (copy mode: veth offers no zero-copy). Witnesses: tcpdump on the far end (every frame,
//! byte for byte, the same as `--backend packet` sends of the same replayed file) and the far
//! end's `rx_packets` counter (exactly what weir says it sent). Hostile cases: a missing, down,
//! loopback or non-Ethernet interface, a far end without carrier (nothing counted as sent, exit
//! 1), `kill -9` mid-run (the queue is free again at once), bad numbers and options, a full
//! stdout.

mod common;

use std::path::Path;
use std::process::Command;

use common::netns::VethBench;
use common::{run, start, wait, weir};

/// The far end's interface and MAC.
fn peer(b: &VethBench) -> (String, String) {
    let name = b.peer_if();
    let out = run(Command::new("ip")
        .args(["netns", "exec", &b.ns, "cat"])
        .arg(format!("/sys/class/net/{name}/address")));
    (
        name,
        String::from_utf8(out.stdout).unwrap().trim().to_string(),
    )
}

/// The far end's `rx_packets`.
fn rx_packets(b: &VethBench) -> u64 {
    let out = run(Command::new("ip")
        .args(["netns", "exec", &b.ns, "cat"])
        .arg(format!(
            "/sys/class/net/{}/statistics/rx_packets",
            b.peer_if()
        )));
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// tcpdump on the far end for `n` UDP packets to port 9000, once it listens.
fn witness(b: &VethBench, n: u64, file: &Path) -> std::process::Child {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &b.ns, "tcpdump", "-n", "-i"])
        .arg(b.peer_if())
        .args(["-c", &n.to_string(), "-w"])
        .arg(file)
        .arg("udp port 9000");
    start(c, "listening on")
}

/// A bench whose our side sends no IPv6 chatter (router solicitations, MLD) that the far
/// end's counter would count.
fn bench() -> VethBench {
    let b = VethBench::new();
    let out = run(Command::new("sysctl").args([
        "-qw",
        &format!("net.ipv6.conf.{}.disable_ipv6=1", b.host_if),
    ]));
    assert!(out.status.success());
    b
}

fn json(out: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// `weir gen -i IFACE --backend xdp` to the far end's MAC: the start of every xdp run here.
fn xdp_gen(iface: &str) -> Command {
    let mut c = weir();
    c.args(["gen", "-i", iface, "--backend", "xdp"])
        .args(["--dst-mac", "02:00:00:00:00:02"]);
    c
}

#[test]
fn xdp_sends_exactly_what_it_says_and_the_same_bytes_as_packet() {
    let b = bench();
    let (_, peer_mac) = peer(&b);
    let tmp = tempfile::tempdir().unwrap();
    // The file replayed: IMIX sizes, to the far end's address and MAC.
    let src = tmp.path().join("src.pcap");
    let n = 400u64;
    let g = run(weir()
        .args(["gen", "--src", &b.host_ip, "--dst", &b.peer_ip])
        .args(["--dst-mac", &peer_mac, "--size", "imix", "--pps", "10000"])
        .args(["-c", &n.to_string(), "-w"])
        .arg(&src));
    assert!(g.status.success());
    let want = common::frames_hex(&src);
    assert_eq!(want.len() as u64, n);
    let want_bytes: u64 = common::tshark_fields(&src, &["frame.len"])
        .iter()
        .map(|r| r[0].parse::<u64>().unwrap())
        .sum();
    for backend in ["xdp", "packet"] {
        let cap = tmp.path().join(format!("rx-{backend}.pcap"));
        let w = witness(&b, n, &cap);
        let before = rx_packets(&b);
        let out = run(weir()
            .args(["gen", "-i", &b.host_if, "--backend", backend, "--replay"])
            .arg(&src)
            .args(["--top", "--json"]));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        if backend == "xdp" {
            assert!(
                err.contains("(AF_XDP on queue 0, copy mode: the driver offers no zero-copy"),
                "{err}"
            );
        }
        let rep = json(&out);
        assert_eq!(rep["sent"].as_u64(), Some(n), "{rep}");
        assert_eq!(rep["queued"].as_u64(), Some(n), "{rep}");
        assert_eq!(rep["send_errors"].as_u64(), Some(0), "{rep}");
        wait(w);
        // The far end's counter: exactly what weir says it sent.
        assert_eq!(rx_packets(&b) - before, n, "{backend}");
        assert_eq!(rep["bytes"].as_u64(), Some(want_bytes), "{rep}");
        assert_eq!(common::frames_hex(&cap), want, "{backend}: frames as sent");
    }
}

#[test]
fn xdp_top_speed_count_matches_the_far_end_counter() {
    let b = bench();
    let n = 50_000u64;
    let before = rx_packets(&b);
    let out = run(xdp_gen(&b.host_if)
        .args(["--top", "--size", "60", "-c", &n.to_string(), "--json"])
        .args(["--src-mac", "02:00:00:00:00:01"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rep = json(&out);
    assert_eq!(rep["sent"].as_u64(), Some(n), "{rep}");
    assert_eq!(rep["bytes"].as_u64(), Some(n * 60), "{rep}");
    assert_eq!(rx_packets(&b) - before, n);
}

#[test]
fn xdp_refuses_what_it_cannot_send_on() {
    let b = bench();
    let gen = |iface: &str, extra: &[&str]| {
        let rate: &[&str] = if extra.contains(&"--pps") {
            &[]
        } else {
            &["--pps", "100"]
        };
        run(xdp_gen(iface).args(["-c", "5"]).args(rate).args(extra))
    };
    let fails = |out: std::process::Output, code: i32, what: &str| {
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert!(err.contains(what), "want {what:?} in {err}");
        assert!(!err.contains("panicked"), "{err}");
        err
    };
    fails(gen("nosuchif0", &[]), 1, "no such interface: nosuchif0");
    fails(gen("lo", &[]), 1, "lo: AF_XDP: the loopback interface has no AF_XDP path (neither capture nor send): use --backend packet");
    // bad numbers and options: usage errors
    fails(gen(&b.host_if, &["--pps", "nan"]), 2, "invalid value 'nan'");
    fails(gen(&b.host_if, &["--pps", "-5"]), 2, "invalid value '-5'");
    fails(
        gen(&b.host_if, &["--ring-frames", "99999999999"]),
        2,
        "--ring-frames",
    );
    fails(
        gen(&b.host_if, &["--qdisc-bypass"]),
        2,
        "AF_XDP never goes through the qdisc",
    );
    fails(
        run(weir().args([
            "gen",
            "--backend",
            "xdp",
            "--pps",
            "1",
            "-c",
            "1",
            "-w",
            "/dev/null",
        ])),
        2,
        "--backend is for sending on an interface (-i), not for -w",
    );
    // too long for the interface
    fails(
        gen(&b.host_if, &["--size", "9000"]),
        1,
        "do not fit the interface",
    );
    // a tun device carries IP packets, not Ethernet frames
    let tun = format!("wxt{}", std::process::id() % 100_000);
    if run(Command::new("ip").args(["tuntap", "add", "dev", &tun, "mode", "tun"]))
        .status
        .success()
    {
        let _ = run(Command::new("ip").args(["link", "set", &tun, "up"]));
        let out = gen(&tun, &[]);
        let _ = run(Command::new("ip").args(["link", "del", &tun]));
        fails(out, 1, "not an Ethernet interface");
    }
    // a full stdout for --json: the report cannot be written, said so
    let out = xdp_gen(&b.host_if)
        .args(["--top", "-c", "10", "--json"])
        .stdout(std::fs::File::create("/dev/full").unwrap())
        .output()
        .unwrap();
    fails(out, 1, "No space left on device");
    // the far end without carrier: the device drops every frame; none counted as sent
    let (peer_if, _) = peer(&b);
    let down = |up: &str| {
        assert!(run(
            Command::new("ip").args(["netns", "exec", &b.ns, "ip", "link", "set", &peer_if, up])
        )
        .status
        .success())
    };
    down("down");
    let out = gen(&b.host_if, &["--json"]);
    let rep = json(&out);
    let err = fails(out, 1, "5 packets not sent");
    assert_eq!(rep["sent"].as_u64(), Some(0), "{err}");
    assert_eq!(rep["unsent"].as_u64(), Some(5), "{err}");
    assert_eq!(rep["queued"].as_u64(), Some(5), "{err}");
    down("up");
    // our side down
    assert!(
        run(Command::new("ip").args(["link", "set", &b.host_if, "down"]))
            .status
            .success()
    );
    fails(gen(&b.host_if, &[]), 1, "not up");
}

#[test]
fn xdp_kill_9_leaves_the_queue_free() {
    let b = bench();
    let mut c = xdp_gen(&b.host_if);
    c.args(["--pps", "2000", "-c", "100000000"]);
    let mut child = start(c, "sending on");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    // The socket died with the process: the queue binds again, and the far end gets every frame.
    let before = rx_packets(&b);
    let out = run(xdp_gen(&b.host_if)
        .args(["--top", "-c", "300", "--src-mac", "02:00:00:00:00:01"])
        .arg("--json"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["sent"].as_u64(), Some(300));
    assert_eq!(rx_packets(&b) - before, 300);
}
