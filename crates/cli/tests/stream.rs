//! Live streams: `[[stream]]` jobs of `weir run` and `weir stream`.
//!
//! * tshark reads a FIFO stream of a `weir run` record job live while it records: every packet
//!   of the store that matches the stream's filter (tcpdump's count over the segments) reached
//!   tshark or is counted dropped for that stream — exactly; the packets that do not match
//!   never reach it.
//! * A paused reader (the FIFO opened, never read while traffic runs): the recorder stores every
//!   packet (capinfos), the stream counts what it dropped, and what the reader gets afterwards
//!   (tshark's count) plus the drops is exactly what matched.
//! * Hostile: a missing FIFO, a path that is no FIFO, a Unix socket path in use by a live socket
//!   (each a clear error, exit 1, before capture), a stdout reader that closes (`| head -c0`:
//!   exit 0), a reader of a FIFO that closes after a few bytes (the next reader gets a whole
//!   stream, and the counts still add up), 25 FIFO readers in turn each opening the instant
//!   the previous one closed (each gets a header first and exactly its burst, by tshark), bad `--queue-kib` values (usage error, exit 2), a
//!   missing interface, and bad `[[stream]]` tables refused by `weir run --check`.

mod common;

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::{run, segments, weir, Running};
use serde_json::Value;

/// One test of this file at a time. A FIFO reader's close reaches weir as an inotify event
/// when the last reference to the reader's open file goes; a process forked by another test
/// thread (any `Command::spawn`) holds a copy of this process's descriptors until it execs, so
/// a reader this process opened and closed can "close" later, while the next reader reads —
/// and weir would end that reader's session. Readers in their own processes (tshark, Suricata)
/// are not affected; the tests are kept from forking while another holds a FIFO.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn mkfifo(p: &Path) {
    assert!(run(Command::new("mkfifo").arg(p)).status.success());
}

/// tcpdump's count of the packets of the store's segments that match `expr`.
fn store_count(dir: &Path, expr: &str) -> u64 {
    let mut n = 0;
    for seg in segments(dir) {
        let out = run(Command::new("tcpdump")
            .args(["-nn", "-r"])
            .arg(&seg)
            .arg(expr));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        n += String::from_utf8_lossy(&out.stdout).lines().count() as u64;
    }
    n
}

/// tshark's packets of a pcap file: (UDP destination port, sequence number of weir's payload).
fn tshark_udp(file: &Path) -> Vec<(u16, u32)> {
    let out = run(Command::new("tshark").args(["-n", "-r"]).arg(file).args([
        "-T",
        "fields",
        "-e",
        "udp.dstport",
        "-e",
        "data.data",
    ]));
    parse_tshark(&String::from_utf8_lossy(&out.stdout))
}

fn parse_tshark(text: &str) -> Vec<(u16, u32)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split('\t');
            let port = f.next().unwrap().parse().unwrap();
            let data = f.next().unwrap_or("");
            // "WEIR" + 4-byte big-endian sequence number
            let seq = u32::from_str_radix(data.get(8..16).unwrap_or("ffffffff"), 16).unwrap();
            (port, seq)
        })
        .collect()
}

/// The `streams` object of a stats file, once it has `key` ≥ `want` for stream `name`.
fn wait_stats(file: &Path, name: &str, key: &str, want: u64) -> Value {
    let t = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                if v["streams"][name][key].as_u64().is_some_and(|n| n >= want) {
                    return v;
                }
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{name}.{key} never reached {want}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn config(dir: &Path, iface: &str, streams: &str) -> PathBuf {
    let p = dir.join("weir.toml");
    std::fs::write(
        &p,
        format!(
            "[control]\nsocket = \"control.sock\"\n\
             [[record]]\nname = \"one\"\ninterface = \"{iface}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\nfilter = \"udp\"\n\
             stats_json = \"stats.json\"\n{streams}"
        ),
    )
    .unwrap();
    p
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn tshark_reads_a_stream_live_while_weir_records() {
    let _serial = serial();
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("nine.fifo");
    mkfifo(&fifo);
    let cfg = config(
        tmp.path(),
        &b.host_if,
        "[[stream]]\nname = \"nine\"\nto = \"nine.fifo\"\nfilter = \"udp port 9000\"\n",
    );
    // tshark first: it waits on the FIFO for its writer
    let tshark = Command::new("tshark")
        .args(["-n", "-l", "-r"])
        .arg(&fifo)
        .args(["-T", "fields", "-e", "udp.dstport", "-e", "data.data"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let svc = Running::start(
        &["run", cfg.to_str().unwrap()],
        &tmp.path().join("log"),
        ": recording on ",
    );
    let stats = tmp.path().join("stats.json");
    wait_stats(&stats, "nine", "readers", 1);
    b.send_udp(9000, 400, 60);
    b.send_udp(9001, 250, 60);
    b.send_udp(9000, 100, 1200);
    // the recorder has it all before we stop
    let t = Instant::now();
    loop {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap_or_default();
        if v["writer"]["packets"].as_u64() == Some(750) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (st, log) = svc.signal("-TERM");
    assert!(st.success(), "{log}");
    let out = tshark.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = parse_tshark(&String::from_utf8_lossy(&out.stdout));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let s = &v["streams"]["nine"];
    let matched = store_count(&tmp.path().join("store"), "udp port 9000");
    assert_eq!(matched, 500, "the store holds what was sent");
    assert_eq!(u(&s["matched"]), 500, "{s}");
    assert_eq!(
        got.len() as u64 + u(&s["dropped"]),
        matched,
        "tshark's packets + the stream's drops = the store's matching packets: {s}"
    );
    assert_eq!(got.len() as u64, u(&s["written"]), "{s}");
    assert!(
        got.iter().all(|(p, _)| *p == 9000),
        "only the filter's packets"
    );
    // the packets tshark got are distinct sequence numbers of what was sent, in order
    let seqs: Vec<u32> = got.iter().map(|g| g.1).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1] || w[1] == 0),
        "{seqs:?}"
    );
    assert!(
        log.contains("stream nine (") && log.contains("500 matched"),
        "{log}"
    );
}

#[test]
fn a_paused_reader_loses_packets_counted_and_the_recorder_gets_everything() {
    let _serial = serial();
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("slow.fifo");
    mkfifo(&fifo);
    let cfg = config(
        tmp.path(),
        &b.host_if,
        "[[stream]]\nname = \"slow\"\nto = \"slow.fifo\"\nqueue_kib = 64\n",
    );
    // the reader: opened (non-blocking, so before the writer), not read until the end
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let svc = Running::start(
        &["run", cfg.to_str().unwrap()],
        &tmp.path().join("log"),
        ": recording on ",
    );
    let stats = tmp.path().join("stats.json");
    wait_stats(&stats, "slow", "readers", 1);
    let sent = 3000u64;
    b.send_udp(7000, sent as u32, 200);
    wait_stats(&stats, "slow", "matched", sent);
    let t = Instant::now();
    loop {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap_or_default();
        if v["writer"]["packets"].as_u64() == Some(sent) {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (st, log) = svc.signal("-TERM");
    assert!(st.success(), "{log}");
    // now the reader reads what the pipe holds
    let mut bytes = Vec::new();
    loop {
        let mut buf = [0u8; 65536];
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    let got_file = tmp.path().join("got.pcap");
    std::fs::write(&got_file, &bytes).unwrap();
    let got = tshark_udp(&got_file);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let s = &v["streams"]["slow"];
    let recorded = store_count(&tmp.path().join("store"), "udp");
    assert_eq!(recorded, sent, "the recorder lost nothing: {log}");
    assert_eq!(u(&v["writer"]["dropped"]), 0);
    assert_eq!(u(&v["buffer"]["dropped_full"]), 0);
    assert!(u(&s["dropped"]) > 0, "a paused reader drops: {s}");
    assert_eq!(
        got.len() as u64 + u(&s["dropped"]),
        sent,
        "what the reader got + the stream's drops = what matched: {s}"
    );
    assert_eq!(got.len() as u64, u(&s["written"]));
    assert_eq!(u(&s["matched"]), sent);
}

#[test]
fn hostile_stream_targets_and_numbers() {
    let _serial = serial();
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.fifo");
    let w = |args: &[&str]| {
        let out = run(weir().arg("stream").arg("-i").arg(&b.host_if).args(args));
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (c, e) = w(&["-w", missing.to_str().unwrap()]);
    assert_eq!(c, Some(1), "{e}");
    assert!(e.contains("does not exist (create it with mkfifo"), "{e}");
    let file = tmp.path().join("plain");
    std::fs::write(&file, b"x").unwrap();
    let (c, e) = w(&["-w", file.to_str().unwrap()]);
    assert_eq!(c, Some(1), "{e}");
    assert!(e.contains("is not a FIFO"), "{e}");
    assert_eq!(std::fs::read(&file).unwrap(), b"x", "left alone");
    let (c, e) = w(&["-w", "/dev/full"]);
    assert_eq!(c, Some(1), "{e}");
    assert!(e.contains("not a FIFO"), "{e}");
    let sock = tmp.path().join("busy.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let (c, e) = w(&["-w", &format!("unix:{}", sock.display())]);
    assert_eq!(c, Some(1), "{e}");
    assert!(e.contains("is in use by another process"), "{e}");
    assert!(sock.exists(), "the other process's socket is left");
    for bad in ["-1", "nan", "1e99", "0", "99999999999"] {
        let (c, e) = w(&["-w", "-", "--queue-kib", bad]);
        assert_eq!(c, Some(2), "{bad}: {e}");
    }
    let (c, e) = w(&["-w", ""]);
    assert_eq!(c, Some(2), "{e}");
    let out = run(weir().args(["stream", "-i", "nosuchif0", "-w", "-"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuchif0"));

    // a stdout reader that closes at once: the stream ends quietly once it notices
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{} stream -i {} -w - | head -c0",
            env!("CARGO_BIN_EXE_weir"),
            b.host_if
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));

    // a FIFO reader that closes after 10 bytes (the header's start), then another: it gets a
    // whole stream of its own (header first), and every packet sent reaches it
    let fifo = tmp.path().join("s.fifo");
    mkfifo(&fifo);
    let head = Command::new("head")
        .arg("-c10")
        .arg(&fifo)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let fifo_s = fifo.to_str().unwrap();
    let svc = Running::start(
        &["stream", "-i", &b.host_if, "-w", fifo_s, "udp"],
        &tmp.path().join("log"),
        "capturing on",
    );
    assert!(head.wait_with_output().unwrap().status.success());
    // the next reader opens at once. head left 14 header bytes unread in the pipe: weir reads
    // them out when head's close reaches it (inotify); a reader reading in that very instant
    // would get them (stream.rs), so this one waits until the pipe does not hold those 14
    // bytes any more (a state, not a delay)
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let t = Instant::now();
    while fionread(&reader) == 14 {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "weir never drained the pipe"
        );
        std::thread::yield_now();
    }
    let mut bytes = Vec::new();
    // attached once the header arrives
    while bytes.len() < 24 {
        let mut buf = [0u8; 4096];
        match reader.read(&mut buf) {
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no header");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(&bytes[..4], &[0x4d, 0x3c, 0xb2, 0xa1], "a header first");
    b.send_udp(6001, 50, 100);
    let (st, log) = svc.signal("-INT");
    assert!(st.success(), "{log}");
    loop {
        let mut buf = [0u8; 65536];
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("{e}"),
        }
    }
    let got_file = tmp.path().join("got.pcap");
    std::fs::write(&got_file, &bytes).unwrap();
    let got = tshark_udp(&got_file);
    assert_eq!(got.len(), 50, "{log}");
    assert!(got.iter().all(|(p, _)| *p == 6001), "{got:?}");
    assert_eq!(
        got.iter().map(|g| g.1).collect::<Vec<_>>(),
        (0..50).collect::<Vec<u32>>()
    );
    assert!(
        log.contains(": 50 matched, 50 written, 0 dropped (slow or absent reader), 2 reader(s)"),
        "{log}"
    );
}

/// Bytes waiting in the pipe `f` reads.
fn fionread(f: &std::fs::File) -> i32 {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which lives for the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), libc::FIONREAD, &mut n) };
    assert_eq!(r, 0, "FIONREAD");
    n
}

/// Reads `f` (non-blocking) until `want` bytes are in `bytes`; fails after 30 s.
fn read_until(f: &mut std::fs::File, bytes: &mut Vec<u8>, want: usize, what: &str) {
    let t = Instant::now();
    while bytes.len() < want {
        let mut buf = [0u8; 65536];
        match f.read(&mut buf) {
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{what}: {} of {want} bytes: {:02x?}",
            bytes.len(),
            &bytes[..bytes.len().min(64)]
        );
        std::thread::yield_now();
    }
}

#[test]
fn fifo_readers_changing_over_at_once_each_get_a_whole_stream() {
    let _serial = serial();
    // 25 readers in turn, each opening the FIFO the instant the previous one closed (no
    // wait for weir to notice): each must get a pcap header first and then exactly the burst
    // sent while it was attached (tshark reads each one's bytes)
    const ROUNDS: u32 = 25;
    const BURST: u32 = 6;
    const PAD: usize = 20;
    let b = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("c.fifo");
    mkfifo(&fifo);
    let fifo_s = fifo.to_str().unwrap();
    let svc = Running::start(
        &["stream", "-i", &b.host_if, "-w", fifo_s, "udp port 7100"],
        &tmp.path().join("log"),
        "capturing on",
    );
    // Ethernet + IPv4 + UDP + WEIR + seq + pad, each after a 16-byte record header
    let record = 16 + 14 + 20 + 8 + 8 + PAD;
    for round in 0..ROUNDS {
        // opened the instant the previous reader closed
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        let mut bytes = Vec::new();
        read_until(
            &mut reader,
            &mut bytes,
            24,
            &format!("round {round}: header"),
        );
        assert_eq!(
            &bytes[..4],
            &[0x4d, 0x3c, 0xb2, 0xa1],
            "round {round}: a header first"
        );
        b.send_udp(7100, BURST, PAD);
        let whole = 24 + BURST as usize * record;
        read_until(
            &mut reader,
            &mut bytes,
            whole,
            &format!("round {round}: packets"),
        );
        assert_eq!(bytes.len(), whole, "round {round}: nothing more");
        let file = tmp.path().join(format!("r{round}.pcap"));
        std::fs::write(&file, &bytes).unwrap();
        assert_eq!(
            tshark_udp(&file),
            (0..BURST).map(|i| (7100, i)).collect::<Vec<_>>(),
            "round {round}"
        );
    }
    let (st, log) = svc.signal("-INT");
    assert!(st.success(), "{log}");
    let n = ROUNDS * BURST;
    assert!(
        log.contains(&format!(
            ": {n} matched, {n} written, 0 dropped (slow or absent reader), {ROUNDS} reader(s)"
        )),
        "{log}"
    );
}

#[test]
fn bad_stream_tables_are_refused_by_check() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("f.fifo");
    mkfifo(&fifo);
    let cases = [
        (
            "[[stream]]\nto = \"missing.fifo\"\n",
            "stream[0].to: stream FIFO",
        ),
        ("[[stream]]\nto = \"-\"\n", "no standard output"),
        (
            "[[stream]]\nto = \"f.fifo\"\njob = \"zz\"\n",
            "stream[0].job: no record job `zz`",
        ),
        (
            "[[stream]]\nto = \"f.fifo\"\nqueue_kib = -1\n",
            "stream[0].queue_kib: must be between",
        ),
        (
            "[[stream]]\nto = \"f.fifo\"\nfilter = \"udp port\"\n",
            "stream[0].filter",
        ),
        (
            "[[stream]]\nto = \"f.fifo\"\n[[stream]]\nto = \"f.fifo\"\n",
            "is also stream[0]'s",
        ),
        (
            "[[stream]]\nto = \"f.fifo\"\nbogus = 1\n",
            "unknown field `bogus`",
        ),
        ("[[stream]]\nto = \"unix:\"\n", "unix: needs a socket path"),
    ];
    for (extra, want) in cases {
        let cfg = config(tmp.path(), "lo", extra);
        let out = run(weir().args(["run", "--check"]).arg(&cfg));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra}: {err}");
        assert!(err.contains(want), "{extra}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let cfg = config(
        tmp.path(),
        "lo",
        "[[stream]]\nname = \"s\"\nto = \"f.fifo\"\nfilter = \"udp\"\n",
    );
    let out = run(weir().args(["run", "--check"]).arg(&cfg));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("stream s to "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
