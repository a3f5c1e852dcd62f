//! Issue 14, the flow exporter's part, end to end against real collectors: `--export` with
//! several `udp://` collectors as the help writes them (two nfcapd, each must get every record),
//! NetFlow v5 / v9 times on input whose clock runs backwards (nfdump's decoded First/Last must
//! equal weir's own JSON times to the millisecond), and the errors a hostile user gets for
//! outputs that cannot work.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{run, weir};

/// One test with collectors at a time: a free port is released before nfcapd binds it.
static COLLECTORS: Mutex<()> = Mutex::new(());

fn corpus_file(name: &str) -> PathBuf {
    common::corpus()
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == name))
        .unwrap_or_else(|| panic!("{name} missing from the corpus"))
}

/// A capture from 2021 (82 one-way flows' worth of HTTP range requests) and one from 2020
/// (zerologon): ten months apart, more than a 32-bit ms uptime spans.
fn later() -> PathBuf {
    corpus_file("http-range-multiflows__input.pcap")
}

fn earlier() -> PathBuf {
    corpus_file("dcerpc__zerologon__input.pcap")
}

/// A real nfcapd on 127.0.0.1 writing into its own directory.
struct Nfcapd {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

fn udp_bound(port: u16) -> bool {
    let want = format!("0100007F:{port:04X} ");
    std::fs::read_to_string("/proc/net/udp").is_ok_and(|s| s.contains(&want))
}

impl Nfcapd {
    fn start() -> Nfcapd {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = Command::new("nfcapd")
            .args([
                "-b",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-B",
                "4000000",
                "-w",
            ])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nfcapd (from nfdump) must be installed");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !udp_bound(port) {
            assert!(Instant::now() < deadline, "nfcapd did not bind {port}");
            assert!(child.try_wait().unwrap().is_none(), "nfcapd exited");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nfcapd {
            child: Some(child),
            port,
            dir,
        }
    }

    /// Stops nfcapd (SIGTERM: it writes its file) and returns nfdump's records.
    fn stop_and_read(mut self) -> Vec<serde_json::Value> {
        std::thread::sleep(Duration::from_millis(300)); // let it drain its socket
        let mut child = self.child.take().unwrap();
        run(Command::new("kill").args(["-TERM", &child.id().to_string()]));
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "nfcapd did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = run(Command::new("nfdump")
            .env("TZ", "UTC")
            .args(["-o", "json", "-R"])
            .arg(self.dir.path()));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        v.as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Nfcapd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// weir's JSON records (one-way: no --biflow).
fn json_records(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// (src, dst, sport, dport, proto, first ms, last ms) → how many records, from weir's JSON:
/// its ISO times cut to the millisecond, as nfdump prints them.
fn weir_times(recs: &[serde_json::Value]) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for r in recs {
        let ms = |k: &str| r[k].as_str().unwrap()[..23].to_string();
        let key = format!(
            "{} {} {} {} {} {} {}",
            r["sourceIPAddress"].as_str().unwrap(),
            r["destinationIPAddress"].as_str().unwrap(),
            r["sourceTransportPort"],
            r["destinationTransportPort"],
            r["protocolIdentifier"],
            ms("flowStartNanoseconds"),
            ms("flowEndNanoseconds"),
        );
        *m.entry(key).or_default() += 1;
    }
    m
}

/// The same from nfdump's JSON records.
fn nfdump_times(rows: &[serde_json::Value]) -> BTreeMap<String, u32> {
    let mut m = BTreeMap::new();
    for r in rows {
        let addr = |a: &str| {
            r[format!("{a}4_addr")]
                .as_str()
                .or(r[format!("{a}6_addr")].as_str())
                .unwrap()
                .to_string()
        };
        let key = format!(
            "{} {} {} {} {} {} {}",
            addr("src"),
            addr("dst"),
            r["src_port"],
            r["dst_port"],
            r["proto"],
            r["first"].as_str().unwrap(),
            r["last"].as_str().unwrap(),
        );
        *m.entry(key).or_default() += 1;
    }
    m
}

#[test]
fn export_to_two_collectors_written_as_the_help_shows() {
    let _turn = COLLECTORS.lock().unwrap_or_else(|e| e.into_inner());
    let (a, b) = (Nfcapd::start(), Nfcapd::start());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("flows.json");
    let target = format!("udp://127.0.0.1:{},udp://127.0.0.1:{}", a.port, b.port);
    let out = run(weir()
        .args(["flows", "-r"])
        .arg(later())
        .args(["--export", &target, "--json"])
        .arg(&json));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let want = json_records(&json);
    assert!(want.len() > 50, "{} records", want.len());
    for (name, c) in [("first", a), ("second", b)] {
        let rows = c.stop_and_read();
        assert_eq!(rows.len(), want.len(), "{name} collector");
        assert_eq!(nfdump_times(&rows), weir_times(&want), "{name} collector");
    }
}

/// `weir flows -r LATER -r EARLIER` (the clock jumps back ten months) exported as `format`:
/// every record's First/Last as nfdump decodes it is weir's own JSON time.
fn backwards_clock(format: &str) {
    let _turn = COLLECTORS.lock().unwrap_or_else(|e| e.into_inner());
    let c = Nfcapd::start();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("flows.json");
    let out = run(weir()
        .args(["flows", "-r"])
        .arg(later())
        .arg("-r")
        .arg(earlier())
        .args(["--format", format, "--export"])
        .arg(format!("udp://127.0.0.1:{}", c.port))
        .arg("--json")
        .arg(&json));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let want = weir_times(&json_records(&json));
    let got = nfdump_times(&c.stop_and_read());
    let wrong: Vec<_> = want
        .iter()
        .filter(|(k, n)| got.get(*k) != Some(n))
        .map(|(k, _)| k)
        .collect();
    assert!(
        wrong.is_empty() && got.len() == want.len(),
        "{format}: {} of {} records' times differ from nfdump's, e.g. {:?}",
        wrong.len(),
        want.len(),
        wrong.iter().take(3).collect::<Vec<_>>()
    );
    assert!(want.values().sum::<u32>() > 150);
}

#[test]
fn v9_times_survive_a_clock_running_backwards() {
    backwards_clock("v9");
}

#[test]
fn v5_times_survive_a_clock_running_backwards() {
    backwards_clock("v5");
}

/// `weir flows -r FILE ARGS...`: exit status and stderr.
fn flows_with(args: &[&str]) -> (Option<i32>, String) {
    let out = run(weir().args(["flows", "-r"]).arg(later()).args(args));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn outputs_that_cannot_work_are_clear_errors() {
    for (args, says) in [
        (&["--export", "udp://127.0.0.1:0"][..], "port 0"),
        (
            &["--export", "udp://127.0.0.1:2055,udp://127.0.0.1:0"][..],
            "port 0",
        ),
        (
            &["--export", "udp://no-such-host.invalid:2055"][..],
            "cannot resolve",
        ),
        (
            &["--export", "file:/dev/full", "--json", "/dev/null"][..],
            "/dev/full",
        ),
        (&["--json", "/dev/full"][..], "cannot write /dev/full"),
        (&["--csv", "/dev/full"][..], "cannot write /dev/full"),
        (&["--stats", "/nonexistent/dir/x"][..], "/nonexistent/dir/x"),
        // a send the kernel refuses (broadcast without SO_BROADCAST): nothing leaves the host
        (
            &[
                "--export",
                "udp://255.255.255.255:2055",
                "--json",
                "/dev/null",
            ][..],
            "records could not be sent",
        ),
    ] {
        let (code, err) = flows_with(args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            err.matches("os error").count() <= 1,
            "{args:?}: the OS error is printed twice: {err}"
        );
    }
    // A --stats file that cannot be created fails before the run, not after it.
    let (_, err) = flows_with(&["--stats", "/nonexistent/dir/x", "--json", "/dev/null"]);
    assert!(!err.contains("packets read"), "{err}");
}

/// `weir latency A B --json -`: the first stream's summary.
fn latency_stream(a: &Path, b: &Path) -> serde_json::Value {
    let out = run(weir().arg("latency").arg(a).arg(b).args(["--json", "-"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["runs"][0]["streams"][0].clone()
}

fn tool(cmd: &mut Command) {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn latency_percentiles_of_negative_latencies() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    tool(
        weir()
            .args(["gen", "--pps", "1000", "-c", "500", "--size", "200"])
            .args(["--start", "1700000000000000000", "-w"])
            .arg(p("a.pcap")),
    );
    // B = A 1 ms earlier: every latency is -1 ms, percentiles too (they were 0).
    tool(
        Command::new("editcap")
            .args(["-t", "-0.001"])
            .arg(p("a.pcap"))
            .arg(p("b.pcap")),
    );
    let s = latency_stream(&p("a.pcap"), &p("b.pcap"));
    assert_eq!(s["received"], 500);
    for k in ["min_ns", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"] {
        assert_eq!(s[k], -1_000_000, "{k}: {s}");
    }
    // Mixed, by hand: of 10 packets the first 6 arrive 1 ms "early", the last 4 2 ms late.
    // Rank ceil(p * 10): p50 = 5th = -1 ms, p90 = 9th, p99 and p99.9 = 10th = +2 ms.
    tool(
        weir()
            .args(["gen", "--pps", "1000", "-c", "10", "--size", "200"])
            .args(["--start", "1700000000000000000", "-w"])
            .arg(p("m.pcap")),
    );
    tool(
        Command::new("editcap")
            .args(["-r", "-t", "-0.001"])
            .arg(p("m.pcap"))
            .arg(p("m1.pcap"))
            .arg("1-6"),
    );
    tool(
        Command::new("editcap")
            .args(["-r", "-t", "0.002"])
            .arg(p("m.pcap"))
            .arg(p("m2.pcap"))
            .arg("7-10"),
    );
    tool(
        Command::new("mergecap")
            .args(["-F", "pcap", "-a", "-w"])
            .arg(p("mb.pcap"))
            .arg(p("m1.pcap"))
            .arg(p("m2.pcap")),
    );
    let s = latency_stream(&p("m.pcap"), &p("mb.pcap"));
    assert_eq!(
        (s["received"].clone(), s["negative"].clone()),
        (10.into(), 6.into())
    );
    let want = [
        ("min_ns", -1_000_000),
        ("p50_ns", -1_000_000),
        ("p90_ns", 2_000_000),
        ("p99_ns", 2_000_000),
        ("p999_ns", 2_000_000),
        ("max_ns", 2_000_000),
    ];
    for (k, v) in want {
        assert_eq!(s[k], v, "{k}: {s}");
    }
}

/// A veth pair the test creates (left down) and deletes when dropped.
struct DownVeth(String);

impl DownVeth {
    fn new(tag: &str) -> DownVeth {
        let name = format!("wd{tag}{}", std::process::id() % 100_000);
        tool(Command::new("ip").args([
            "link",
            "add",
            &name,
            "type",
            "veth",
            "peer",
            "name",
            &format!("{name}p"),
        ]));
        DownVeth(name)
    }
}

impl Drop for DownVeth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

#[test]
fn gen_refuses_an_interface_that_is_down() {
    let v = DownVeth::new("a");
    let out = run(weir().args(["gen", "-i", &v.0, "-c", "10"]));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("{}: That device is not up", v.0)),
        "{err}"
    );
    assert!(!err.contains("sent "), "refused before sending: {err}");
}

#[test]
fn gen_send_errors_at_run_time_are_an_exit_1_with_the_count() {
    let v = DownVeth::new("b");
    tool(Command::new("ip").args(["link", "set", &v.0, "up"]));
    // 400 packets at 100 pps: the interface goes down a second after sending started.
    let mut child = weir()
        .args(["gen", "-i", &v.0, "-c", "400", "--pps", "100"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut err = String::new();
    while !err.contains("sending on") {
        use std::io::BufRead as _;
        assert!(stderr.read_line(&mut err).unwrap() > 0, "gen exited: {err}");
    }
    std::thread::sleep(Duration::from_secs(1));
    tool(Command::new("ip").args(["link", "set", &v.0, "down"]));
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    let failed: u64 = err
        .split("weir: error: ")
        .nth(1)
        .and_then(|e| e.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of failed sends: {err}"));
    assert!(failed > 0 && err.contains("Network is down"), "{err}");
    // what was sent and what was not add up to the 400 packets asked for
    let num_before = |tail: &str| -> u64 {
        let head = err.split(tail).next().unwrap();
        head.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let sent = num_before(" packets (");
    let unsent = num_before(" packets not sent");
    assert_eq!(sent + unsent, 400, "{err}");
    assert!(unsent > 0, "{err}");
}

/// `weir flows ARGS --workers N --json -`, records sorted.
fn sorted_records(args: &[&Path], workers: usize) -> Vec<String> {
    let mut cmd = weir();
    cmd.arg("flows");
    for a in args {
        cmd.arg("-r").arg(a);
    }
    let out = run(cmd.args(["--workers", &workers.to_string(), "--json", "-"]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    v.sort();
    v
}

#[test]
fn more_workers_than_files_or_ranges_give_the_same_records() {
    // One small file (a single range of the parallel reader) and two files in time order:
    // any worker count, also far more than ranges or files, meters the same flows.
    let (e, l, big) = (earlier(), later(), corpus_file("smb2-03-rule__smb2.pcap"));
    for input in [
        vec![e.as_path(), l.as_path()],
        vec![l.as_path()],
        vec![big.as_path()],
    ] {
        let one = sorted_records(&input, 1);
        assert!(!one.is_empty());
        for w in [2, 3, 64, 256] {
            assert!(
                sorted_records(&input, w) == one,
                "{input:?}: --workers {w} differs from --workers 1"
            );
        }
    }
}

#[test]
fn an_input_that_starts_before_the_clock_gives_the_same_records_for_any_worker_count() {
    // `-r LATER -r EARLIER`: the clock runs back ten months at the second file. Each shard then
    // ends its flows as at the end of input and restarts its clock at the new input (with more
    // than one worker the shards used to expire the earlier file's flows by the later file's
    // clock, splitting them: 226 records with 2 workers against 188 with 1), so the records
    // are those of each file metered alone, whatever the worker count.
    let (l, e) = (later(), earlier());
    let mut alone = sorted_records(&[l.as_path()], 1);
    alone.extend(sorted_records(&[e.as_path()], 1));
    alone.sort();
    assert!(alone.len() > 100, "{} records", alone.len());
    for w in [1, 2, 3] {
        let got = sorted_records(&[l.as_path(), e.as_path()], w);
        assert!(
            got == alone,
            "--workers {w}: {} records, {} metering each file alone",
            got.len(),
            alone.len()
        );
    }
}
