//! `weir record` on veth pairs in network namespaces made by the test: every packet sent is in
//! the store, byte-identical, in order, with monotonic timestamps, in segments of exactly the
//! configured size that tcpdump and tshark read cleanly; the counters add up (sent = recorded +
//! counted drops); fanout over two threads, two interfaces, retention, slicing, `kill -9` and a
//! full disk; and the flow meter as a consumer of the same buffer (`weir flows -i`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segment_bytes, segments, tshark_fields, weir, Running};

/// Sends `signal` to a recorder (or `weir flows -i`) once the last packets had time to reach
/// the rings, and waits for its exit.
fn stop(r: Running, signal: &str) -> (ExitStatus, String) {
    std::thread::sleep(Duration::from_millis(300));
    r.signal(signal)
}

/// Starts `weir ARGS` and waits up to 30 s for `banner`.
fn spawn(args: &[&str], log: &Path, banner: &str) -> Running {
    Running::start_within(args, log, banner, Duration::from_secs(30))
}

/// Starts `weir record -i IFACES -o DIR --buffer-mib 64 EXTRA... 'udp port 9999'`.
fn record(ifaces: &str, dir: &Path, extra: &[&str], log: &Path) -> Running {
    let mut args = vec!["record", "-i", ifaces, "-o", dir.to_str().unwrap()];
    args.extend_from_slice(&["--buffer-mib", "64"]);
    args.extend_from_slice(extra);
    args.push("udp port 9999");
    spawn(&args, log, "recording on")
}

/// tcpdump reads the file with no complaint.
fn tcpdump_clean(file: &Path) -> usize {
    let out = run(Command::new("tcpdump").arg("-nr").arg(file));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {err}", file.display());
    assert!(
        !err.contains("truncated") && !err.contains("rror"),
        "{}: {err}",
        file.display()
    );
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// (epoch time, wire length, captured length, interface, UDP source port, payload hex) of
/// every frame of the store, segment after segment.
type Frame = (String, u64, u64, String, u16, String);
fn store_frames(dir: &Path) -> Vec<Frame> {
    let fields = [
        "frame.time_epoch",
        "frame.len",
        "frame.cap_len",
        "frame.interface_name",
        "udp.srcport",
        "udp.payload",
    ];
    let mut out = Vec::new();
    for seg in segments(dir) {
        let n = tcpdump_clean(&seg);
        let frames = tshark_fields(&seg, &fields);
        assert_eq!(
            frames.len(),
            n,
            "tshark and tcpdump agree on {}",
            seg.display()
        );
        for f in frames {
            let [t, len, cap, iface, sport, payload] = <[String; 6]>::try_from(f).unwrap();
            out.push((
                t,
                len.parse().unwrap(),
                cap.parse().unwrap(),
                iface,
                sport.parse().unwrap_or(0),
                payload,
            ));
        }
    }
    out
}

fn seq(payload_hex: &str) -> u32 {
    assert!(
        payload_hex.starts_with("57454952"),
        "not ours: {payload_hex}"
    );
    u32::from_str_radix(&payload_hex[8..16], 16).unwrap()
}

/// The payload the sender puts in datagram `i`, as tshark prints it.
fn payload_hex(i: u32, pad: usize) -> String {
    format!("57454952{i:08x}{}", "78".repeat(pad))
}

fn stats(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_packet_sent_is_recorded_byte_identical_in_full_segments() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let st = tmp.path().join("stats.json");
    let r = record(
        &bench.host_if,
        &dir,
        &["--segment-mib", "1", "--stats-json", st.to_str().unwrap()],
        &tmp.path().join("log"),
    );
    let (n, pad) = (6000u32, 700usize);
    bench.send_udp(9999, n, pad);
    let (status, log) = stop(r, "-INT");
    assert!(status.success(), "{log}");
    let frames = store_frames(&dir);
    assert_eq!(frames.len(), n as usize, "{log}");
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(
            f.5,
            payload_hex(i as u32, pad),
            "packet {i}: in order, byte-identical"
        );
        assert_eq!(f.1, 14 + 20 + 8 + 8 + pad as u64);
        assert_eq!(f.1, f.2);
        assert_eq!(f.3, bench.host_if);
    }
    assert!(
        frames.windows(2).all(|p| p[0].0 <= p[1].0),
        "monotonic timestamps"
    );
    // Every segment but the last is exactly 1 MiB (padded with blocks readers skip).
    let segs = segments(&dir);
    assert!(segs.len() >= 4, "{} segments", segs.len());
    for s in &segs[..segs.len() - 1] {
        assert_eq!(std::fs::metadata(s).unwrap().len(), 1 << 20);
    }
    // sent = recorded + drops counted at each stage.
    let s = stats(&st);
    let recorded = s["writer"]["packets"].as_u64().unwrap();
    let drops = s["capture"]["kernel_drops"].as_u64().unwrap()
        + s["buffer"]["dropped_full"].as_u64().unwrap()
        + s["buffer"]["dropped_too_long"].as_u64().unwrap()
        + s["writer"]["dropped"].as_u64().unwrap();
    assert_eq!(u64::from(n), recorded + drops, "{s:#}");
    assert_eq!(
        s["capture"]["kernel_packets"].as_u64().unwrap(),
        u64::from(n)
    );
    // The manifest lists every segment and every packet.
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let listed = m["segments"].as_array().unwrap();
    assert_eq!(listed.len(), segs.len());
    let packets: u64 = listed.iter().map(|x| x["packets"].as_u64().unwrap()).sum();
    assert_eq!(packets, u64::from(n));
}

#[test]
fn two_threads_in_fanout_keep_every_flow_whole_and_in_order() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let r = record(
        &bench.host_if,
        &dir,
        &["--threads", "2", "--format", "pcap"],
        &tmp.path().join("log"),
    );
    let (n, flows) = (4000u32, 8u32);
    bench.send_udp_flows(9999, flows, n, 50);
    let (status, log) = stop(r, "-TERM");
    assert!(status.success(), "{log}");
    let frames = store_frames(&dir);
    let mut seqs: Vec<u32> = frames.iter().map(|f| seq(&f.5)).collect();
    // Per flow (source port), the sequence numbers come in the order they were sent.
    let mut by_flow: std::collections::BTreeMap<u16, Vec<u32>> = Default::default();
    for f in &frames {
        by_flow.entry(f.4).or_default().push(seq(&f.5));
    }
    assert_eq!(by_flow.len(), flows as usize);
    for (port, s) in &by_flow {
        assert!(
            s.windows(2).all(|w| w[0] < w[1]),
            "flow {port} out of order"
        );
    }
    seqs.sort_unstable();
    assert_eq!(
        seqs,
        (0..n).collect::<Vec<_>>(),
        "none lost, none twice: {log}"
    );
}

#[test]
fn two_interfaces_land_in_one_store_with_their_names() {
    let (a, b) = (VethBench::new(), VethBench::new());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let ifaces = format!("{},{}", a.host_if, b.host_if);
    let r = record(&ifaces, &dir, &["--flows"], &tmp.path().join("log"));
    a.send_udp(9999, 500, 10);
    b.send_udp(9999, 700, 10);
    let (status, log) = stop(r, "-INT");
    assert!(status.success(), "{log}");
    let frames = store_frames(&dir);
    let count = |i: &str| frames.iter().filter(|f| f.3 == i).count();
    assert_eq!((count(&a.host_if), count(&b.host_if)), (500, 700), "{log}");
    // --flows: the meter read the same buffer; one flow per interface, by default in the store.
    let text = std::fs::read_to_string(dir.join("flows.json")).unwrap();
    let mut packets: Vec<u64> = text
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["packetDeltaCount"]
                .as_u64()
                .unwrap()
        })
        .collect();
    packets.sort_unstable();
    assert_eq!(packets, [500, 700], "{text}");
}

#[test]
fn retention_and_slicing() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let r = record(
        &bench.host_if,
        &dir,
        &["--segment-mib", "1", "--max-mib", "3"],
        &tmp.path().join("log"),
    );
    let (n, pad) = (8000u32, 1000usize);
    bench.send_udp(9999, n, pad);
    let (status, log) = stop(r, "-INT");
    assert!(status.success(), "{log}");
    let total: u64 = segments(&dir)
        .iter()
        .map(|s| std::fs::metadata(s).unwrap().len())
        .sum();
    assert!(total <= 3 << 20, "{total} bytes kept: {log}");
    assert!(log.contains("retention deleted"), "{log}");
    // What is kept is the newest packets, ending with the last one sent.
    let frames = store_frames(&dir);
    let seqs: Vec<u32> = frames.iter().map(|f| seq(&f.5)).collect();
    let first = seqs[0];
    assert_eq!(seqs, (first..n).collect::<Vec<_>>());

    // --slice l4: Ethernet + IPv4 + UDP headers kept, the wire length preserved.
    let dir = tmp.path().join("sliced");
    let r = record(
        &bench.host_if,
        &dir,
        &["--slice", "l4"],
        &tmp.path().join("log2"),
    );
    bench.send_udp(9999, 100, pad);
    let (status, log) = stop(r, "-INT");
    assert!(status.success(), "{log}");
    let frames = store_frames(&dir);
    assert_eq!(frames.len(), 100);
    assert!(frames
        .iter()
        .all(|f| f.2 == 14 + 20 + 8 && f.1 == 14 + 20 + 8 + 8 + pad as u64));
}

#[test]
fn after_kill_9_a_restart_repairs_the_store() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let r = record(
        &bench.host_if,
        &dir,
        &["--segment-mib", "2"],
        &tmp.path().join("log"),
    );
    bench.send_udp(9999, 5000, 600);
    // Wait for the periodic flush (1 s) to put most of the packets on disk (a fixed sleep was
    // too short on a loaded machine), then kill -9.
    let on_disk = || segment_bytes(&dir);
    let t = Instant::now();
    while on_disk() < 4100 * 650 {
        assert!(t.elapsed() < Duration::from_secs(60), "{} bytes", on_disk());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, _) = stop(r, "-KILL");
    assert!(!status.success());
    let r = record(
        &bench.host_if,
        &dir,
        &["--segment-mib", "2"],
        &tmp.path().join("log2"),
    );
    let (status, log) = stop(r, "-INT");
    assert!(status.success(), "{log}");
    assert!(log.contains("repaired"), "{log}");
    // Every segment reads cleanly, and what survived is the sent sequence, in order.
    let frames = store_frames(&dir);
    let seqs: Vec<u32> = frames.iter().map(|f| seq(&f.5)).collect();
    assert!(seqs.len() > 4000, "{} packets survived", seqs.len());
    assert_eq!(seqs, (0..seqs.len() as u32).collect::<Vec<_>>());
}

/// A small tmpfs mounted for the test and unmounted when dropped.
struct SmallDisk(PathBuf);

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn a_full_disk_stops_writing_cleanly_and_counts_what_was_lost() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let disk = SmallDisk(tmp.path().join("disk"));
    std::fs::create_dir(&disk.0).unwrap();
    let out = run(Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=3m", "tmpfs"])
        .arg(&disk.0));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = disk.0.join("store");
    let st = tmp.path().join("stats.json");
    let r = record(
        &bench.host_if,
        &dir,
        &["--segment-mib", "1", "--stats-json", st.to_str().unwrap()],
        &tmp.path().join("log"),
    );
    let n = 6000u32;
    bench.send_udp(9999, n, 1000);
    let (status, log) = stop(r, "-INT");
    assert_eq!(status.code(), Some(1), "a lossy run fails: {log}");
    assert!(log.contains("No space left"), "{log}");
    let s = stats(&st);
    let recorded = s["writer"]["packets"].as_u64().unwrap();
    let lost = s["writer"]["dropped"].as_u64().unwrap();
    assert!(lost > 0 && recorded > 0, "{s:#}");
    assert_eq!(
        recorded + lost + s["capture"]["kernel_drops"].as_u64().unwrap(),
        u64::from(n),
        "{s:#}"
    );
    // The store is consistent: every segment reads cleanly, holds what the writer counted,
    // and in the order sent.
    let frames = store_frames(&dir);
    assert_eq!(frames.len() as u64, recorded);
    let seqs: Vec<u32> = frames.iter().map(|f| seq(&f.5)).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn flows_from_a_live_interface() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("flows.json");
    let r = spawn(
        &[
            "flows",
            "-i",
            &bench.host_if,
            "--json",
            json.to_str().unwrap(),
            "--buffer-mib",
            "64",
            "udp port 9999",
        ],
        &tmp.path().join("log"),
        "metering flows on",
    );
    bench.send_udp_flows(9999, 3, 300, 20);
    let (status, log) = stop(r, "-INT");
    assert!(status.success(), "{log}");
    let text = std::fs::read_to_string(&json).unwrap();
    let flows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(flows.len(), 3, "{text}");
    for f in &flows {
        assert_eq!(f["packetDeltaCount"].as_u64(), Some(100), "{f}");
        assert_eq!(
            f["octetDeltaCount"].as_u64(),
            Some(100 * (20 + 8 + 8 + 20)),
            "{f}"
        );
    }
}

#[test]
fn packets_are_searchable_while_recording() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("store");
    let r = record(
        &bench.host_if,
        &dir,
        &["--segment-mib", "64"],
        &tmp.path().join("log"),
    );
    let (n, pad) = (2000u32, 100usize);
    bench.send_udp(9999, n, pad);
    // The recorder flushes data every second and the open segment's index every 5 s: asked
    // again until the open segment's index holds every packet (a fixed 7 s wait was too short
    // on a loaded machine), for at most a minute
    let out = tmp.path().join("found.pcap");
    let t = Instant::now();
    loop {
        let o = run(weir().arg("ls").arg(&dir).arg("--json"));
        let ls: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        // Before the first flush (every second) the manifest may list no segment yet
        let seg = &ls["segments"][0];
        if !seg.is_null() {
            assert_eq!(seg["state"], "open", "{ls:#}");
        }
        let indexed = seg["index"].as_str().is_some_and(|i| i.starts_with("ok"));
        let seqs: Vec<u32> = if indexed {
            let o = run(weir()
                .arg("extract")
                .arg(&dir)
                .arg("-w")
                .arg(&out)
                .arg("udp port 9999"));
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let found = tshark_fields(&out, &["udp.payload"]);
            found.iter().map(|f| seq(&f[0])).collect()
        } else {
            Vec::new()
        };
        if seqs.len() == n as usize || t.elapsed() > Duration::from_secs(60) {
            assert!(indexed, "{ls:#}");
            assert_eq!(seqs, (0..n).collect::<Vec<_>>());
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (status, log) = stop(r, "-INT");
    assert!(status.success(), "{log}");
}
