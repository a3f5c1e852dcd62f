//! `weir record --http ... --voip ...` with every analyzer option beside the recording (the
//! same options as `weir http`/`weir voip`, under `--http-`/`--voip-`), on a veth pair the test
//! creates: curl's HTTP requests and a TLS ClientHello to Python's http.server in a namespace,
//! and the hand-built SIP call with its RTP. The oracle is the store itself: `weir http -r` and
//! `weir voip -r` with the same options on the recorded segments must write the same records
//! (record by record, in the same order) and the same charts (byte for byte) as the analyzers
//! that ran beside the recorder. With a call linger longer than the run the call is still open
//! when recording stops: its chart is the one drawn at exit. Hostile: every new option with
//! bad numbers, two options naming one file, an option without its `--http`/`--voip`, a chart
//! directory that is a file, a bad analyzer filter, /dev/full.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::netns::VethBench;
use common::sip::call;
use common::web::{files, servers, traffic};
use common::Running;

/// Packets through `iface` so far, as the kernel counts them (received + sent).
fn iface_packets(iface: &str) -> u64 {
    ["rx_packets", "tx_packets"]
        .iter()
        .map(|c| {
            std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{c}"))
                .unwrap()
                .trim()
                .parse::<u64>()
                .unwrap()
        })
        .sum()
}

/// Waits until the recorder's capture socket has taken at least `n` packets (its
/// `--stats-json`, rewritten every second), 60 s at most.
fn wait_captured(stats: &Path, n: u64) {
    let t = Instant::now();
    loop {
        let got = std::fs::read_to_string(stats)
            .ok()
            .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
            .and_then(|v| v["capture"]["kernel_packets"].as_u64())
            .unwrap_or(0);
        if got >= n {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "captured {got} of {n} packets"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A TLS ClientHello (SNI weir.test, ALPN h2/http1.1) to the plain HTTP server: curl sends
/// it, the server answers it with an HTTP 400 and curl gives up (its status is not checked).
fn tls_hello(bench: &VethBench) {
    let _ = Command::new("curl")
        .args(["-sk", "--max-time", "5", "-o", "/dev/null", "--resolve"])
        .arg(format!("weir.test:8080:{}", bench.peer_ip))
        .arg("https://weir.test:8080/hello")
        .output()
        .unwrap();
}

/// The files of `dir`, by name, with their bytes.
fn dir_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// `weir ARGS` that must succeed; its stderr.
fn weir_ok(args: &[&str], files: &[PathBuf]) -> String {
    let o = common::run(common::weir().args(args).args(files));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{args:?}: {err}");
    err
}

fn text(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

/// Both analyzers beside the recorder with every option; their records and charts equal the
/// offline analyzers' on the store (once with the HTTP log as JSON, once as Apache's combined
/// log format).
#[test]
fn record_analyzers_with_every_option_equal_the_offline_analyzers_of_the_store() {
    for format in ["json", "apache"] {
        let bench = VethBench::new();
        let tmp = tempfile::tempdir().unwrap();
        let t = |n: &str| tmp.path().join(n);
        let s = |p: &PathBuf| p.to_str().unwrap().to_string();
        files(tmp.path());
        let _servers = servers(&bench, tmp.path());
        let (store, stats, err) = (t("store"), t("stats.json"), t("err.txt"));
        let (http, tls, calls, streams, plot) = (
            t("http.log"),
            t("tls.jsonl"),
            t("calls.jsonl"),
            t("streams.jsonl"),
            t("charts"),
        );
        let http_opts = [
            "--format",
            format,
            "--max-flows",
            "1000",
            "--max-memory-mib",
            "8",
            "--idle-timeout",
            "120",
        ];
        // a linger longer than the run: the call is written (and charted) when recording stops
        let voip_opts = [
            "--max-calls",
            "50",
            "--max-streams",
            "60",
            "--call-linger",
            "600",
            "--call-timeout",
            "900",
            "--plot-interval",
            "0.1",
        ];
        let mut args = common::record_analyzers_args(
            &bench.host_if,
            &store,
            &http,
            &calls,
            &[
                "--stats-json",
                &s(&stats),
                "--http-tls-log",
                &s(&tls),
                "--voip-streams",
                &s(&streams),
                "--voip-plot",
                &s(&plot),
            ],
        );
        for pair in http_opts.chunks(2) {
            args.push(format!("--http-{}", &pair[0][2..]));
            args.push(pair[1].to_string());
        }
        for pair in voip_opts.chunks(2) {
            args.push(format!("--voip-{}", &pair[0][2..]));
            args.push(pair[1].to_string());
        }
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let weir = Running::start(&argv, &err, "recording on");
        let before = iface_packets(&bench.host_if);
        let want = traffic(&bench);
        tls_hello(&bench);
        call(&bench);
        wait_captured(&stats, iface_packets(&bench.host_if) - before);
        let (status, said) = weir.signal("-INT");
        assert!(status.success(), "{status} {said}");
        assert!(!said.contains("panicked"), "{said}");

        // the offline analyzers, same options, on the recorded segments
        let segs = common::segments(&store);
        assert!(!segs.is_empty());
        let (ohttp, otls, ocalls, ostreams, oplot) = (
            t("off-http.log"),
            t("off-tls.jsonl"),
            t("off-calls.jsonl"),
            t("off-streams.jsonl"),
            t("off-charts"),
        );
        let mut a = vec!["http", "-w", ohttp.to_str().unwrap()];
        a.extend(["--tls-log", otls.to_str().unwrap()]);
        a.extend(http_opts);
        a.extend(["tcp", "-r"]);
        weir_ok(&a, &segs);
        let mut a = vec!["voip", "-w", ocalls.to_str().unwrap()];
        a.extend(["--streams", ostreams.to_str().unwrap()]);
        a.extend(["--plot", oplot.to_str().unwrap()]);
        a.extend(voip_opts);
        a.extend(["udp", "-r"]);
        weir_ok(&a, &segs);

        // record by record, in order
        assert_eq!(text(&http), text(&ohttp), "{format}: {said}");
        assert_eq!(text(&tls), text(&otls), "{format}: {said}");
        assert_eq!(text(&calls), text(&ocalls), "{said}");
        assert_eq!(text(&streams), text(&ostreams), "{said}");
        assert_eq!(dir_files(&plot), dir_files(&oplot), "{said}");

        // and what the traffic was: curl's 5 transactions, one TLS hello, one call with its
        // two streams and its chart
        let http_lines: Vec<String> = text(&http).lines().map(String::from).collect();
        assert_eq!(http_lines.len(), want.len(), "{format}: {http_lines:#?}");
        for (m, uri, code, _, ua) in &want {
            let found = http_lines.iter().any(|l| match format {
                "json" => {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v["method"] == m.as_str()
                        && v["uri"] == uri.as_str()
                        && v["status_code"] == *code
                        && v["user_agent"] == ua.as_str()
                }
                _ => {
                    l.contains(&format!("\"{m} {uri} HTTP/1.1\" {code} "))
                        && l.ends_with(&format!("\"{ua}\""))
                }
            });
            assert!(
                found,
                "{format}: {m} {uri} {code} {ua} not in {http_lines:#?}"
            );
        }
        let tls_lines: Vec<serde_json::Value> = text(&tls)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(tls_lines.len(), 1, "{tls_lines:#?}");
        assert_eq!(tls_lines[0]["server_name"], "weir.test", "{tls_lines:#?}");
        let call_lines: Vec<serde_json::Value> = text(&calls)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(call_lines.len(), 1, "{call_lines:#?}");
        assert_eq!(call_lines[0]["call_id"], common::sip::CALL_ID);
        assert_eq!(text(&streams).lines().count(), 2);
        let charts: Vec<String> = dir_files(&plot).into_iter().map(|f| f.0).collect();
        let stem = "call-1-live-call-1_weir.test";
        assert_eq!(charts, [format!("{stem}.csv"), format!("{stem}.svg")]);
    }
}

/// Hostile: bad numbers, missing companions, two options naming one output, an output that is
/// the input, a chart directory that is a file, a bad analyzer filter: each refused by name
/// before anything is recorded; /dev/full as the HTTP log fails with a clear error.
#[test]
fn record_analyzer_options_refuse_bad_values_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |n: &str| tmp.path().join(n).to_str().unwrap().to_string();
    let store = t("store");
    let afile = t("a-file");
    std::fs::write(&afile, "x").unwrap();
    // (arguments after `record -i lo -o STORE`, comma-separated; exit status; message)
    let cases: &[(&str, i32, &str)] = &[
        ("--http,h,--http-max-flows,-1", 2, "--http-max-flows"),
        ("--http,h,--http-max-flows,0", 2, "--http-max-flows"),
        (
            "--http,h,--http-max-memory-mib,99999999",
            2,
            "--http-max-memory-mib",
        ),
        ("--http,h,--http-idle-timeout,nan", 2, "--http-idle-timeout"),
        ("--http,h,--http-idle-timeout,-3", 2, "--http-idle-timeout"),
        ("--http,h,--http-format,xml", 2, "--http-format"),
        ("--http-tls-log,t", 2, "--http <FILE>"),
        ("--voip-plot,d", 2, "--voip <FILE>"),
        ("--voip,v,--voip-plot-interval,1", 2, "--voip-plot <DIR>"),
        ("--voip,v,--voip-max-calls,1e99", 2, "--voip-max-calls"),
        ("--voip,v,--voip-max-streams,-5", 2, "--voip-max-streams"),
        ("--voip,v,--voip-call-linger,inf", 2, "--voip-call-linger"),
        (
            "--voip,v,--voip-call-timeout,1e300",
            2,
            "--voip-call-timeout",
        ),
        (
            "--voip,v,--voip-plot,d,--voip-plot-interval,0",
            2,
            "--voip-plot-interval",
        ),
        ("--http,same,--voip,same", 1, "--http and --voip both name"),
        (
            "--voip,v,--voip-streams,-,--http,-",
            1,
            "--http and --voip-streams both name",
        ),
        (
            "--http,h,--http-tls-log,h",
            1,
            "--http and --http-tls-log both name",
        ),
        ("--voip,v,--voip-plot,A-FILE", 1, "is not a directory"),
        ("--http,h,--http-filter,tcp port", 1, "--http-filter"),
        ("--voip,v,--voip-filter,udp and (", 1, "--voip-filter"),
    ];
    for &(extra, code, msg) in cases {
        let extra: Vec<&str> = extra
            .split(',')
            .map(|a| if a == "A-FILE" { afile.as_str() } else { a })
            .collect();
        let o = common::run(
            common::weir()
                .current_dir(tmp.path())
                .args(["record", "-i", "lo", "-o", &store])
                .args(&extra),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{extra:?}: {err}");
        assert!(err.contains(msg), "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{extra:?}: {err}");
        assert!(!Path::new(&store).exists(), "{extra:?}: a store was made");
    }
    // an output that is the imported file; /dev/full as the call log: clear errors
    let input = common::corpus()
        .into_iter()
        .find(|p| p.to_string_lossy().ends_with("sip-method__sip.pcap"))
        .expect("the corpus' sip-method__sip.pcap");
    let pcap = t("in.pcap");
    std::fs::copy(&input, &pcap).unwrap();
    for (out, msg) in [(pcap.as_str(), "--voip"), ("/dev/full", "/dev/full")] {
        let o =
            common::run(common::weir().args(["record", "-r", &pcap, "-o", &store, "--voip", out]));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{out}: {err}");
        assert!(err.contains(msg), "{out}: {err}");
        assert!(!err.contains("panicked"), "{out}: {err}");
    }
    assert_eq!(
        std::fs::read(&pcap).unwrap(),
        std::fs::read(&input).unwrap()
    );
}
