//! The command line as a user meets it: exit codes, stdin, error messages, `info` against
//! capinfos, `decode` line counts.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{corpus, run, weir};

#[test]
fn exit_codes() {
    assert_eq!(run(weir().arg("--help")).status.code(), Some(0));
    for sub in ["info", "read", "decode"] {
        let h = run(weir().args([sub, "--help"]));
        assert_eq!(h.status.code(), Some(0), "{sub} --help");
    }
    // Usage errors: 2.
    assert_eq!(run(weir().arg("no-such-command")).status.code(), Some(2));
    assert_eq!(run(weir().arg("read")).status.code(), Some(2));
    // Run-time errors: 1, with the cause named.
    let r = run(weir().args(["info", "/nonexistent/x.pcap"]));
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("/nonexistent/x.pcap"));
}

#[test]
fn invalid_expression_gets_libpcaps_message() {
    let f = &corpus()[0];
    let w = run(weir().args(["read", "-r"]).arg(f).arg("tcp port"));
    let t = run(Command::new("tcpdump").arg("-r").arg(f).arg("tcp port"));
    assert_eq!(w.status.code(), Some(1));
    assert!(!t.status.success());
    // tcpdump prints "tcpdump: <libpcap message>"; weir must include the same message.
    let t_err = String::from_utf8_lossy(&t.stderr);
    let msg = t_err
        .lines()
        .find_map(|l| l.strip_prefix("tcpdump: "))
        .expect("tcpdump error line")
        .trim();
    let w_err = String::from_utf8_lossy(&w.stderr);
    assert!(
        w_err.contains(msg),
        "weir said {w_err:?}, libpcap says {msg:?}"
    );
}

#[test]
fn stdin_reads_like_a_file_for_pcap_and_pcapng() {
    let tmp = tempfile::tempdir().unwrap();
    let src = corpus()
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let ng = tmp.path().join("x.pcapng");
    assert!(run(weir()
        .args(["read", "--format", "pcapng", "-r"])
        .arg(&src)
        .arg("-w")
        .arg(&ng))
    .status
    .success());
    for input in [src, ng] {
        let from_file = run(weir().args(["read", "-r"]).arg(&input).args(["-w", "-"]));
        let mut child = weir()
            .args(["read", "-r", "-", "-w", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let bytes = std::fs::read(&input).unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || stdin.write_all(&bytes));
        let from_pipe = child.wait_with_output().unwrap();
        feeder.join().unwrap().unwrap();
        assert!(from_file.status.success() && from_pipe.status.success());
        assert!(from_file.stdout.len() > 24);
        assert_eq!(from_file.stdout, from_pipe.stdout, "{}", input.display());
    }
}

#[test]
fn info_agrees_with_capinfos() {
    let mut checked = 0;
    for f in corpus().iter().step_by(25) {
        let c = run(Command::new("capinfos")
            .args(["-T", "-r", "-c", "-d", "-S", "-a", "-e"])
            .arg(f));
        if !c.status.success() {
            continue;
        }
        let text = String::from_utf8(c.stdout).unwrap();
        let cols: Vec<&str> = text.trim_end().split('\t').collect();
        let w = run(weir().args(["info", "--json"]).arg(f));
        assert!(w.status.success(), "{}", String::from_utf8_lossy(&w.stderr));
        let j: serde_json::Value = serde_json::from_slice(&w.stdout).unwrap();
        let j = &j[0];
        assert_eq!(
            j["packets"].as_u64().unwrap(),
            cols[1].parse::<u64>().unwrap(),
            "{}",
            f.display()
        );
        assert_eq!(
            j["captured_bytes"].as_u64().unwrap(),
            cols[2].parse::<u64>().unwrap()
        );
        if j["packets"].as_u64().unwrap() > 0 {
            // capinfos -S prints epoch seconds with the file's precision (µs here).
            let first = cols[3].parse::<f64>().unwrap();
            let last = cols[4].parse::<f64>().unwrap();
            let ours_first = j["first_ns"].as_u64().unwrap() as f64 / 1e9;
            let ours_last = j["last_ns"].as_u64().unwrap() as f64 / 1e9;
            assert!(
                (first - ours_first).abs() < 1e-5,
                "{} {first} {ours_first}",
                f.display()
            );
            assert!(
                (last - ours_last).abs() < 1e-5,
                "{} {last} {ours_last}",
                f.display()
            );
        }
        checked += 1;
    }
    assert!(checked > 20, "checked {checked}");
}

#[test]
fn decode_prints_one_line_per_packet() {
    let f = corpus()
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let all = run(weir().args(["decode", "-r"]).arg(&f));
    assert!(all.status.success());
    let t = run(Command::new("tcpdump").arg("-n").arg("-r").arg(&f));
    let n_tcpdump = String::from_utf8_lossy(&t.stdout).lines().count();
    assert_eq!(
        String::from_utf8_lossy(&all.stdout).lines().count(),
        n_tcpdump
    );
    let five = run(weir().args(["decode", "-c", "5", "-r"]).arg(&f));
    assert_eq!(String::from_utf8_lossy(&five.stdout).lines().count(), 5);
}

#[test]
fn unsupported_link_type_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("user0.pcap");
    let mut v = Vec::new();
    for x in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 65535, 147, 1, 0, 4, 4] {
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.extend_from_slice(b"abcd");
    std::fs::write(&f, v).unwrap();
    let d = run(weir().args(["decode", "-r"]).arg(&f));
    assert!(d.status.success());
    assert!(String::from_utf8_lossy(&d.stdout).contains("unknown link type 147"));
    assert!(String::from_utf8_lossy(&d.stderr).contains("link type 147"));
    // Filtering it is libpcap's call, and libpcap's words come through.
    let r = run(weir().args(["read", "-r"]).arg(&f).arg("tcp"));
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("147"));
}

#[test]
fn truncated_file_keeps_every_packet_before_the_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let src = corpus()
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let bytes = std::fs::read(&src).unwrap();
    let cut = tmp.path().join("cut.pcap");
    // Three bytes short of the end: the last record is cut.
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).unwrap();
    let (a, b) = (tmp.path().join("w.pcap"), tmp.path().join("t.pcap"));
    let w = run(weir()
        .args(["read", "--micro", "-r"])
        .arg(&cut)
        .arg("-w")
        .arg(&a));
    let t = run(Command::new("tcpdump")
        .arg("-r")
        .arg(&cut)
        .arg("-w")
        .arg(&b));
    assert_eq!(w.status.code(), Some(1));
    assert!(!t.status.success());
    let err = String::from_utf8_lossy(&w.stderr);
    assert!(
        err.contains("truncated dump file") && err.contains("byte offset"),
        "{err}"
    );
    let (wa, tb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert!(tb.len() > 24);
    assert_eq!(wa, tb, "the same packets before the damage");
}
