//! What weir writes must read the same in tshark, tcpdump and capinfos: same packets, lengths and
//! nanosecond timestamps, in pcap (ns and µs) and in pcapng (one interface block per interface).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{corpus, run, tshark_frames, weir};

/// A corpus file with nanosecond digits in its timestamps: editcap shifts every packet by 123 ns
/// and writes nanosecond pcap, so the oracle file is made by a peer, not by weir.
fn ns_input(dir: &Path, src: &Path) -> PathBuf {
    let out = dir.join("ns-input.pcap");
    let r = run(Command::new("editcap")
        .args(["-F", "nsecpcap", "-t", "0.000000123"])
        .arg(src)
        .arg(&out));
    assert!(
        r.status.success(),
        "editcap: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    out
}

fn sample(name: &str) -> PathBuf {
    corpus()
        .into_iter()
        .find(|p| p.file_name().unwrap().to_str().unwrap().contains(name))
        .unwrap_or_else(|| panic!("corpus file {name} missing"))
}

fn weir_read(args: &[&str], input: &Path, out: &Path) {
    let r = run(weir()
        .arg("read")
        .arg("-r")
        .arg(input)
        .arg("-w")
        .arg(out)
        .args(args));
    assert!(
        r.status.success(),
        "weir read: {}",
        String::from_utf8_lossy(&r.stderr)
    );
}

#[test]
fn pcap_ns_pcap_us_and_pcapng_read_back_identically_in_tshark() {
    let tmp = tempfile::tempdir().unwrap();
    let input = ns_input(tmp.path(), &sample("bug-4810__pppoe-session-http"));
    let want = tshark_frames(&input);
    assert!(want.len() > 5);
    assert!(
        want.iter().any(|f| f.0.ends_with("123")),
        "oracle has ns digits: {:?}",
        want[0]
    );

    let ns = tmp.path().join("out-ns.pcap");
    weir_read(&[], &input, &ns);
    assert_eq!(tshark_frames(&ns), want, "pcap (ns)");

    let ng = tmp.path().join("out.pcapng");
    weir_read(&["--format", "pcapng"], &input, &ng);
    assert_eq!(tshark_frames(&ng), want, "pcapng");

    // Microsecond pcap: the same frames with times cut to µs.
    let us = tmp.path().join("out-us.pcap");
    weir_read(&["--micro"], &input, &us);
    let got = tshark_frames(&us);
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            g.0[..g.0.len() - 3],
            w.0[..w.0.len() - 3],
            "µs part of the time"
        );
        assert!(g.0.ends_with("000"));
        assert_eq!((g.1, g.2), (w.1, w.2));
    }

    // tcpdump prints the same nanosecond times and capinfos counts the same packets.
    for f in [&ns, &ng] {
        let t = run(Command::new("tcpdump")
            .args(["--nano", "-tt", "-n", "-r"])
            .arg(f));
        assert!(t.status.success());
        let times: Vec<String> = String::from_utf8(t.stdout)
            .unwrap()
            .lines()
            .map(|l| l.split(' ').next().unwrap().to_string())
            .collect();
        let want_times: Vec<String> = want.iter().map(|w| w.0.clone()).collect();
        assert_eq!(times, want_times, "tcpdump --nano on {}", f.display());
        let c = run(Command::new("capinfos").args(["-T", "-r", "-c"]).arg(f));
        let text = String::from_utf8(c.stdout).unwrap();
        let count: usize = text.trim().split('\t').nth(1).unwrap().parse().unwrap();
        assert_eq!(count, want.len(), "capinfos on {}", f.display());
    }
}

#[test]
fn pcapng_declares_one_interface_per_input_interface() {
    let tmp = tempfile::tempdir().unwrap();
    // An Ethernet file and a raw-IP file: pcapng keeps both link types.
    let eth = sample("bug-4810__pppoe-session-http");
    let raw = corpus()
        .into_iter()
        .find(|p| {
            let b = std::fs::read(p).unwrap();
            b.len() > 24 && b[..4] == [0xd4, 0xc3, 0xb2, 0xa1] && b[20] == 101
        })
        .expect("a raw-IP corpus file");
    let ng = tmp.path().join("two.pcapng");
    let r = run(weir()
        .args(["read", "--format", "pcapng", "-r"])
        .arg(&eth)
        .arg("-r")
        .arg(&raw)
        .arg("-w")
        .arg(&ng));
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let out = run(Command::new("tshark").arg("-r").arg(&ng).args([
        "-T",
        "fields",
        "-e",
        "frame.interface_id",
        "-e",
        "frame.encap_type",
    ]));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut ids: Vec<&str> = text
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    let n_eth = tshark_frames(&eth).len();
    let n_raw = tshark_frames(&raw).len();
    assert_eq!(ids.len(), n_eth + n_raw);
    assert!(ids[..n_eth].iter().all(|&i| i == "0"));
    assert!(ids[n_eth..].iter().all(|&i| i == "1"));
    ids.dedup();
    assert_eq!(ids, ["0", "1"]);
    // Classic pcap cannot hold both link types: a clear error.
    let r = run(weir()
        .args(["read", "-r"])
        .arg(&eth)
        .arg("-r")
        .arg(&raw)
        .arg("-w")
        .arg(tmp.path().join("two.pcap")));
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stderr).contains("--format pcapng"));
}
