//! `[[http]]` and `[[voip]]` jobs of `weir run` on a veth pair the test creates, beside a
//! `[[record]]` job on the same interface (one capture): curl's requests to Python's
//! http.server in the namespace and a hand-built SIP call with its RTP. Oracles: the HTTP log
//! (and TLS log) equal, line for line, what `weir http -r` writes from the recorded store's
//! extract with the same filter, and hold exactly curl's transactions; the call and stream
//! records equal what `weir voip -r` writes from the same extract; `weir ctl counters` and the
//! closing summary count the same transactions and calls. Hostile tables are refused by
//! `weir run --check` with their line and key.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::netns::VethBench;
use common::sip::{call, CALL_ID};
use common::web::{files, servers, traffic, Tx};
use common::{run, weir, Running};

/// The config: a record job on `iface` into `store`, then `extra` tables.
fn config(dir: &Path, iface: &str, extra: &str) -> PathBuf {
    let p = dir.join("weir.toml");
    std::fs::write(
        &p,
        format!(
            "[control]\nsocket = \"control.sock\"\n\
             [[record]]\nname = \"edge\"\ninterface = \"{iface}\"\nstore = \"store\"\n\
             segment_mib = 4\nwrite_mib = 1\nbuffer_mib = 16\n{extra}"
        ),
    )
    .unwrap();
    p
}

const JOBS: &str = "[[http]]\nfilter = \"tcp\"\nlog = \"http.jsonl\"\ntls_log = \"tls.jsonl\"\n\
                    [[voip]]\nfilter = \"udp\"\ncalls = \"calls.jsonl\"\n\
                    streams = \"streams.jsonl\"\nmax_calls = 10\n";

/// The lines of `path`, sorted (the live analyzer writes a connection's records when it ends,
/// the offline one at the end of the file: the same lines, maybe in another order).
fn sorted_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'), "{text}");
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

fn ok(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

/// A record job, an HTTP job and a VoIP job on one interface: their logs equal the offline
/// analyzers' on the store's extract, and hold curl's transactions and the known call.
#[test]
fn http_and_voip_jobs_equal_the_offline_analyzers_on_the_store() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    files(d);
    let _servers = servers(&bench, d);
    let cfg = config(d, &bench.host_if, JOBS);

    let out = run(weir().args(["run", "--check"]).arg(&cfg));
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &ok(&out);
    assert!(
        text.contains(&format!(
            "  http: JSON log to {}, TLS log to {} (tcp)",
            d.join("http.jsonl").display(),
            d.join("tls.jsonl").display()
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "  voip: calls to {}, streams to {} (udp)",
            d.join("calls.jsonl").display(),
            d.join("streams.jsonl").display()
        )),
        "{text}"
    );

    let err = d.join("err.txt");
    let svc = Running::start(&["run", cfg.to_str().unwrap()], &err, ": recording on ");
    let mut want = traffic(&bench);
    call(&bench);
    // past a once-a-second publication of the counters
    std::thread::sleep(Duration::from_millis(2500));
    let c = run(weir()
        .args(["ctl", "--socket"])
        .arg(d.join("control.sock"))
        .args(["counters", "--json"]));
    let counters: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} {}",
            String::from_utf8_lossy(&c.stdout),
            String::from_utf8_lossy(&c.stderr)
        )
    });
    let job = &counters["jobs"]["edge"];
    assert_eq!(job["http"]["http_records"], 5, "{counters}");
    assert!(
        job["voip"]["sip_messages"].as_u64().unwrap() >= 7,
        "{counters}"
    );
    let table = run(weir()
        .args(["ctl", "--socket"])
        .arg(d.join("control.sock"))
        .arg("counters"));
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(table.contains("edge http: 5 transactions"), "{table}");

    let (status, text) = svc.signal("-TERM");
    assert!(status.success(), "{status} {text}");
    assert!(!text.contains("panicked"), "{text}");
    assert!(
        text.contains("  http: 5 transactions, 0 TLS handshakes"),
        "{text}"
    );
    assert!(text.contains("  voip: 1 calls, 2 RTP streams"), "{text}");

    // curl's own view of its transactions
    let mut got: Vec<Tx> = std::fs::read_to_string(d.join("http.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            (
                s("method"),
                s("uri"),
                v["status_code"].as_u64().unwrap_or(0),
                v["response_body_len"].as_u64().unwrap(),
                s("user_agent"),
            )
        })
        .collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // the store's extract through the offline analyzers, with the jobs' filters
    let pcap = d.join("extract.pcapng");
    ok(&run(weir()
        .arg("extract")
        .arg(d.join("store"))
        .arg("-w")
        .arg(&pcap)));
    ok(&run(weir()
        .args(["http", "-r"])
        .arg(&pcap)
        .arg("-w")
        .arg(d.join("http-r.jsonl"))
        .arg("--tls-log")
        .arg(d.join("tls-r.jsonl"))
        .arg("tcp")));
    assert_eq!(
        sorted_lines(&d.join("http.jsonl")),
        sorted_lines(&d.join("http-r.jsonl"))
    );
    assert_eq!(
        sorted_lines(&d.join("tls.jsonl")),
        sorted_lines(&d.join("tls-r.jsonl"))
    );
    ok(&run(weir()
        .args(["voip", "-r"])
        .arg(&pcap)
        .arg("-w")
        .arg(d.join("calls-r.jsonl"))
        .arg("--streams")
        .arg(d.join("streams-r.jsonl"))
        .arg("udp")));
    let calls = sorted_lines(&d.join("calls.jsonl"));
    assert_eq!(calls, sorted_lines(&d.join("calls-r.jsonl")));
    assert_eq!(calls.len(), 1);
    assert!(calls[0].contains(CALL_ID), "{calls:?}");
    let streams = sorted_lines(&d.join("streams.jsonl"));
    assert_eq!(streams, sorted_lines(&d.join("streams-r.jsonl")));
    assert_eq!(streams.len(), 2, "{streams:?}");
}

/// Bad `[[http]]` and `[[voip]]` tables: each refused by `--check` with its key, nothing
/// started.
#[test]
fn bad_analyzer_tables_are_refused_by_check() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("adir")).unwrap();
    let cases = [
        ("[[http]]\n", "missing field `log`"),
        (
            "[[http]]\nlog = \"h\"\ninterface = \"weir-no-such0\"\n",
            "http[0].interface: no [[record]] job on `weir-no-such0`",
        ),
        (
            "[[http]]\nlog = \"h\"\n[[http]]\nlog = \"h2\"\n",
            "http[1].interface: http[0] analyzes lo already",
        ),
        (
            "[[http]]\nlog = \"h\"\nformat = \"xml\"\n",
            "http[0].format: `xml` is no HTTP log format",
        ),
        (
            "[[http]]\nlog = \"h\"\nmax_flows = -1\n",
            "http[0].max_flows: must be between 1",
        ),
        (
            "[[http]]\nlog = \"h\"\nmax_flows = 99999999999999999999\n",
            "12:13: invalid type: integer",
        ),
        (
            "[[http]]\nlog = \"h\"\nmax_memory_mib = 0\n",
            "http[0].max_memory_mib: must be between 1",
        ),
        (
            "[[http]]\nlog = \"h\"\nidle_timeout_s = nan\n",
            "http[0].idle_timeout_s: must be a number of seconds",
        ),
        (
            "[[http]]\nlog = \"h\"\nidle_timeout_s = -1.0\n",
            "http[0].idle_timeout_s",
        ),
        (
            "[[http]]\nlog = \"h\"\nfilter = \"tcp port\"\n",
            "http[0].filter",
        ),
        ("[[http]]\nlog = \"\"\n", "http[0].log: is empty"),
        ("[[http]]\nlog = \"adir\"\n", "http[0].log: "),
        (
            "[[http]]\nlog = \"/nonexistent/x/h\"\n",
            "http[0].log: the directory /nonexistent/x does not exist",
        ),
        (
            "[[http]]\nlog = \"h\"\ntls_log = \"h\"\n",
            "http[0].tls_log: ",
        ),
        (
            "[[http]]\nlog = \"h\"\n[[voip]]\ncalls = \"./h\"\n",
            "voip[0].calls: ",
        ),
        (
            "[[http]]\nlog = \"control.sock\"\n",
            "is also control.socket",
        ),
        (
            "[[http]]\nlog = \"h\"\nbogus = 1\n",
            "unknown field `bogus`",
        ),
        ("[[voip]]\n", "missing field `calls`"),
        (
            "[[voip]]\ncalls = \"c\"\nmax_calls = 0\n",
            "voip[0].max_calls: must be between 1",
        ),
        (
            "[[voip]]\ncalls = \"c\"\nmax_streams = -5\n",
            "voip[0].max_streams: must be between 1",
        ),
        (
            "[[voip]]\ncalls = \"c\"\nstreams = \"c\"\n",
            "voip[0].streams: ",
        ),
        (
            "[[voip]]\ncalls = \"c\"\nfilter = \"udp and\"\n",
            "voip[0].filter",
        ),
    ];
    for (extra, want) in cases {
        let cfg = config(tmp.path(), "lo", extra);
        let out = run(weir().args(["run", "--check"]).arg(&cfg));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra}: {err}");
        assert!(err.contains(want), "{extra}: {err}");
        assert!(err.contains("weir.toml:"), "{extra}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        for f in ["h", "h2", "c"] {
            assert!(!tmp.path().join(f).exists(), "{extra}: {f} made");
        }
    }
}
