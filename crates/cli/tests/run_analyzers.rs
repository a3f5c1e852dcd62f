//! `[[http]]` and `[[voip]]` jobs of `weir run` on a veth pair the test creates, beside a
//! `[[record]]` job on the same interface (one capture): curl's requests to Python's
//! http.server in the namespace and a hand-built SIP call with its RTP. Oracles: the HTTP log
//! (and TLS log) equal, line for line, what `weir http -r` writes from the recorded store's
//! extract with the same filter, and hold exactly curl's transactions; the call and stream
//! records equal what `weir voip -r` writes from the same extract; `weir ctl counters` and the
//! closing summary count the same transactions and calls. Hostile tables are refused by
//! `weir run --check` with their line and key.
//!
//! The analyzers' Prometheus series (`[metrics]`): a scrape passes `promtool check metrics`,
//! every `weir_http_*`/`weir_voip_*` sample equals the counter `weir ctl counters --json` shows
//! for the job at the same moment, and the counts are the traffic's: curl's transactions, the
//! call's 7 SIP messages, its 2 streams of 20 + 10 RTP packets (by hand: 19 sequence numbers
//! of the caller's 20 sent, one twice), their RFC 3550 losses as `weir voip -r` of the store
//! reports them; after SIGTERM the closing summary says the same.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::prom::{metrics_text, promtool_check, samples};
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
                    streams = \"streams.jsonl\"\nmax_calls = 10\n\
                    call_linger_s = 1.5\ncall_timeout_s = 600\nplot = \"charts\"\n\
                    plot_interval_s = 0.25\n";

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
        .arg("--plot")
        .arg(d.join("charts-r"))
        .args([
            "--plot-interval",
            "0.25",
            "--call-linger",
            "1.5",
            "--call-timeout",
            "600",
        ])
        .arg("udp")));
    // the job's charts (plot, plot_interval_s) are the offline ones, byte for byte
    let drawn = common::dir_files(&d.join("charts"));
    assert_eq!(drawn.len(), 2, "one call: its CSV and SVG");
    assert_eq!(drawn, common::dir_files(&d.join("charts-r")));
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
    std::fs::write(tmp.path().join("afile"), "x").unwrap();
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
        (
            "[[voip]]\ncalls = \"c\"\ncall_linger_s = -1.0\n",
            "voip[0].call_linger_s: must be a number of seconds",
        ),
        (
            "[[voip]]\ncalls = \"c\"\ncall_timeout_s = nan\n",
            "voip[0].call_timeout_s: must be a number of seconds",
        ),
        (
            "[[voip]]\ncalls = \"c\"\nplot = \"p\"\nplot_interval_s = 0.0\n",
            "voip[0].plot_interval_s: must be a number of seconds",
        ),
        (
            "[[voip]]\ncalls = \"c\"\nplot_interval_s = 1.0\n",
            "voip[0].plot_interval_s: plot_interval_s configures plot",
        ),
        (
            "[[voip]]\ncalls = \"c\"\nplot = \"afile\"\n",
            "voip[0].plot: ",
        ),
        (
            "[[voip]]\ncalls = \"c\"\nplot = \"/nonexistent/x/p\"\n",
            "voip[0].plot: the directory /nonexistent/x does not exist",
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
        for f in ["h", "h2", "c", "p"] {
            assert!(!tmp.path().join(f).exists(), "{extra}: {f} made");
        }
    }
}

/// Each analyzer sample (name with its labels but the job's) and the counter of `weir ctl
/// counters --json` (path under the job's `http`/`voip`) it must equal.
const SERIES: &[(&str, &str)] = &[
    ("weir_http_read_packets_total", "http/read"),
    ("weir_http_analyzed_packets_total", "http/packets"),
    ("weir_http_tcp_packets_total", "http/tcp_packets"),
    ("weir_http_connections_total", "http/flows"),
    (
        "weir_http_connections_recognised_total{protocol=\"http\"}",
        "http/http_flows",
    ),
    (
        "weir_http_connections_recognised_total{protocol=\"tls\"}",
        "http/tls_flows",
    ),
    (
        "weir_http_connections_ended_early_total{reason=\"evicted\"}",
        "http/flows_evicted",
    ),
    (
        "weir_http_connections_ended_early_total{reason=\"timeout\"}",
        "http/flows_timed_out",
    ),
    (
        "weir_http_held_bytes_evictions_total",
        "http/pending_evictions",
    ),
    ("weir_http_held_bytes_peak", "http/max_pending_seen"),
    ("weir_http_transactions_total", "http/http_records"),
    ("weir_http_tls_handshakes_total", "http/tls_records"),
    (
        "weir_http_reassembly_delivered_bytes_total",
        "http/stream/delivered_bytes",
    ),
    ("weir_http_reassembly_gaps_total", "http/stream/gaps"),
    (
        "weir_http_reassembly_gap_bytes_total",
        "http/stream/gap_bytes",
    ),
    (
        "weir_http_reassembly_retransmitted_bytes_total",
        "http/stream/retransmitted_bytes",
    ),
    (
        "weir_http_reassembly_overlap_conflict_bytes_total",
        "http/stream/overlap_conflicts",
    ),
    (
        "weir_http_reassembly_out_of_order_segments_total",
        "http/stream/out_of_order_segments",
    ),
    (
        "weir_http_reassembly_evicted_bytes_total",
        "http/stream/evicted_bytes",
    ),
    (
        "weir_http_messages_total{kind=\"request\"}",
        "http/http/requests",
    ),
    (
        "weir_http_messages_total{kind=\"response\"}",
        "http/http/responses",
    ),
    (
        "weir_http_messages_total{kind=\"informational\"}",
        "http/http/informational",
    ),
    (
        "weir_http_orphan_responses_total",
        "http/http/orphan_responses",
    ),
    ("weir_http_parse_errors_total", "http/http/parse_errors"),
    ("weir_http_desyncs_total", "http/http/desyncs"),
    ("weir_http_skipped_bytes_total", "http/http/skipped_bytes"),
    (
        "weir_http_tls_hellos_total{hello=\"client\"}",
        "http/tls/client_hellos",
    ),
    (
        "weir_http_tls_hellos_total{hello=\"server\"}",
        "http/tls/server_hellos",
    ),
    ("weir_http_tls_errors_total", "http/tls/errors"),
    ("weir_voip_read_packets_total", "voip/read"),
    ("weir_voip_analyzed_packets_total", "voip/packets"),
    ("weir_voip_sip_messages_total", "voip/sip_messages"),
    ("weir_voip_sip_tcp_messages_total", "voip/sip_tcp_messages"),
    ("weir_voip_sip_parse_errors_total", "voip/sip_errors"),
    ("weir_voip_sip_no_call_id_total", "voip/sip_no_call_id"),
    ("weir_voip_calls_total", "voip/calls"),
    ("weir_voip_calls_over_limit_total", "voip/calls_dropped"),
    ("weir_voip_calls_written_early_total", "voip/calls_expired"),
    ("weir_voip_rtp_packets_total", "voip/rtp_packets"),
    ("weir_voip_rtp_lost_packets_total", "voip/rtp_lost"),
    (
        "weir_voip_stream_packets_over_limit_total",
        "voip/streams_dropped_packets",
    ),
    ("weir_voip_rtcp_packets_total", "voip/rtcp_packets"),
    ("weir_voip_rtcp_reports_total", "voip/rtcp_reports"),
    (
        "weir_voip_tcp_dropped_bytes_total",
        "voip/tcp_bytes_dropped",
    ),
    (
        "weir_voip_streams_total{found_by=\"sdp\"}",
        "voip/sdp_streams",
    ),
    (
        "weir_voip_streams_total{found_by=\"heuristic\"}",
        "voip/heuristic_streams",
    ),
    (
        "weir_voip_stream_candidates_discarded_total",
        "voip/candidates_discarded",
    ),
];

/// The scrape's key for `series` of job `edge` (the job's label first).
fn key(series: &str) -> String {
    match series.split_once('{') {
        Some((name, labels)) => format!("{name}{{weir_job=\"edge\",{labels}"),
        None => format!("{series}{{weir_job=\"edge\"}}"),
    }
}

/// The analyzers' counters of job `edge` in `weir ctl counters --json`.
fn ctl_counters(sock: &Path) -> serde_json::Value {
    let c = run(weir()
        .args(["ctl", "--socket"])
        .arg(sock)
        .args(["counters", "--json"]));
    let v: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {} {}",
            String::from_utf8_lossy(&c.stdout),
            String::from_utf8_lossy(&c.stderr)
        )
    });
    let job = &v["jobs"]["edge"];
    serde_json::json!({ "http": job["http"], "voip": job["voip"] })
}

/// Where `SERIES`' samples and `ctl` disagree: (series, scraped, ctl).
fn differences(
    s: &BTreeMap<String, f64>,
    ctl: &serde_json::Value,
) -> Vec<(String, Option<f64>, Option<f64>)> {
    SERIES
        .iter()
        .filter_map(|(series, path)| {
            let want = ctl
                .pointer(&format!("/{path}"))
                .and_then(serde_json::Value::as_f64);
            let got = s.get(&key(series)).copied();
            (got != want).then(|| (series.to_string(), got, want))
        })
        .collect()
}

/// `[[http]]` and `[[voip]]` jobs with `[metrics]`: their series pass promtool, equal the
/// jobs' own counters and count the traffic sent (see the module documentation).
#[test]
fn analyzer_series_on_the_metrics_endpoint_equal_the_jobs_counters() {
    let bench = VethBench::new();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    files(d);
    let _servers = servers(&bench, d);
    let cfg = config(
        d,
        &bench.host_if,
        &format!("{JOBS}[metrics]\nlisten = \"127.0.0.1:0\"\n"),
    );
    let err = d.join("err.txt");
    let svc = Running::start(&["run", cfg.to_str().unwrap()], &err, ": recording on ");
    let log = svc.text();
    let addr = log
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no metrics line: {log}"))
        .to_string();
    let want = traffic(&bench);
    call(&bench);

    // Settled: the call written (its two streams) and the transactions logged, and a scrape
    // between two equal readings of the job's counters equal to them.
    let sock = d.join("control.sock");
    let t = Instant::now();
    let (text, s, ctl) = loop {
        let before = ctl_counters(&sock);
        let text = metrics_text(&addr);
        let after = ctl_counters(&sock);
        let s = samples(&text);
        let settled = before == after
            && after["voip"]["streams"] == 2
            && after["http"]["http_records"] == want.len();
        if settled && differences(&s, &after).is_empty() {
            break (text, s, after);
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never settled: {:?}\n{after:#}\n{text}",
            differences(&s, &after)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    promtool_check(&text);
    let v = |series: &str| s[&key(series)];
    assert_eq!(
        v("weir_http_transactions_total"),
        want.len() as f64,
        "{ctl}"
    );
    assert_eq!(
        v("weir_http_messages_total{kind=\"request\"}"),
        want.len() as f64
    );
    assert_eq!(v("weir_http_tls_handshakes_total"), 0.0);
    assert_eq!(v("weir_voip_calls_total"), 1.0);
    assert_eq!(v("weir_voip_sip_messages_total"), 7.0);
    assert_eq!(v("weir_voip_streams_total{found_by=\"sdp\"}"), 2.0);
    assert_eq!(v("weir_voip_streams_total{found_by=\"heuristic\"}"), 0.0);
    assert_eq!(v("weir_voip_rtp_packets_total"), 30.0);
    assert_eq!(v("weir_voip_calls_written_early_total"), 1.0);
    // read = every udp packet of the job's filter: 7 SIP + 30 RTP
    assert_eq!(v("weir_voip_read_packets_total"), 37.0, "{text}");

    let (status, end) = svc.signal("-TERM");
    assert!(status.success(), "{status} {end}");
    assert!(
        end.contains(&format!(
            "  http: {} transactions, 0 TLS handshakes",
            want.len()
        )),
        "{end}"
    );
    assert!(
        end.contains("  voip: 1 calls, 2 RTP streams from 37 packets"),
        "{end}"
    );

    // the RFC 3550 losses of the streams as the offline analyzer reports them from the store
    let pcap = d.join("extract.pcapng");
    ok(&run(weir()
        .arg("extract")
        .arg(d.join("store"))
        .arg("-w")
        .arg(&pcap)));
    ok(&run(weir()
        .args(["voip", "-r"])
        .arg(&pcap)
        .arg("-w")
        .arg(d.join("calls-r.jsonl"))
        .arg("--streams")
        .arg(d.join("streams-r.jsonl"))
        .arg("udp")));
    let (mut lost, mut packets) = (0.0, 0.0);
    for l in sorted_lines(&d.join("streams-r.jsonl")) {
        let r: serde_json::Value = serde_json::from_str(&l).unwrap();
        lost += r["lost"].as_i64().unwrap().max(0) as f64;
        packets += r["packets"].as_u64().unwrap() as f64;
    }
    assert_eq!(v("weir_voip_rtp_lost_packets_total"), lost);
    assert_eq!(v("weir_voip_rtp_packets_total"), packets);
}
