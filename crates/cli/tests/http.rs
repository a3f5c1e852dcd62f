//! `weir http` against tshark on the corpus, and the command's hostile cases.
//!
//! For every corpus file, tshark (`-Y "http.request || http.response || tls.handshake.type == 1"`)
//! lists the HTTP requests (method, host, uri), the HTTP responses (status code) and the TLS
//! ClientHellos (server name) it finds; `weir http -r FILE --tls-log ...` must report the same
//! multisets, file by file. Where they differ, each difference is put in a named class (see
//! [`Class`]) and every class has a bound: the test fails when a class exceeds its bound or when
//! the matched share falls below the floor. The classes were found by reading the files that
//! differ with `weir decode` and tshark.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::weir;

/// tshark's HTTP and TLS items of one file.
#[derive(Default, Debug)]
struct Items {
    requests: BTreeMap<(String, String, String), i64>,
    responses: BTreeMap<u16, i64>,
    snis: BTreeMap<String, i64>,
}

const SEP: char = '\u{1f}';

fn tshark_items(file: &Path) -> Items {
    let out = Command::new("tshark")
        .arg("-r")
        .arg(file)
        .args([
            "-Y",
            "http.request || http.response || tls.handshake.type == 1",
        ])
        .args(["-T", "fields", "-E", "occurrence=a", "-E"])
        .arg(format!("aggregator={SEP}"))
        .args(["-E", "separator=\t"])
        .args([
            "-e",
            "http.request.method",
            "-e",
            "http.host",
            "-e",
            "http.request.uri",
            "-e",
            "http.response.code",
            "-e",
            "tls.handshake.type",
            "-e",
            "tls.handshake.extensions_server_name",
        ])
        .stderr(Stdio::null())
        .output()
        .expect("tshark runs");
    let mut items = Items::default();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let field = |i: usize| -> Vec<&str> {
            f.get(i)
                .filter(|s| !s.is_empty())
                .map(|s| s.split(SEP).collect())
                .unwrap_or_default()
        };
        let (methods, hosts, uris) = (field(0), field(1), field(2));
        for (i, m) in methods.iter().enumerate() {
            let h = if hosts.len() == methods.len() {
                hosts[i]
            } else {
                ""
            };
            let u = uris.get(i).copied().unwrap_or("");
            *items
                .requests
                .entry((m.to_string(), h.to_string(), u.to_string()))
                .or_default() += 1;
        }
        for c in field(3) {
            if let Ok(c) = c.parse() {
                *items.responses.entry(c).or_default() += 1;
            }
        }
        let hellos = field(4).iter().filter(|t| **t == "1").count();
        let names = field(5);
        for i in 0..hellos {
            let n = if hellos == names.len() { names[i] } else { "" };
            *items.snis.entry(n.to_string()).or_default() += 1;
        }
    }
    items
}

fn weir_items(file: &Path, dir: &Path) -> Option<Items> {
    let http = dir.join("http.jsonl");
    let tls = dir.join("tls.jsonl");
    let out = weir()
        .args(["http", "-r"])
        .arg(file)
        .arg("-w")
        .arg(&http)
        .arg("--tls-log")
        .arg(&tls)
        .output()
        .expect("weir runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{}: {err}", file.display());
    if !out.status.success() && !err.contains("warning") && !err.contains("error: ") {
        panic!("{}: {err}", file.display());
    }
    let mut items = Items::default();
    for line in std::fs::read_to_string(&http).ok()?.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        if v.get("method").is_some() {
            *items
                .requests
                .entry((s("method"), s("host"), s("uri")))
                .or_default() += 1;
        }
        for k in ["info_code", "status_code"] {
            if let Some(c) = v[k].as_u64() {
                *items.responses.entry(c as u16).or_default() += 1;
            }
        }
    }
    for line in std::fs::read_to_string(&tls).ok()?.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        if v["client_version"].is_string() {
            let n = v["server_name"].as_str().unwrap_or("").to_string();
            *items.snis.entry(n).or_default() += 1;
        }
    }
    Some(items)
}

/// Differences between |weir − tshark| per item, summed per file.
fn diff<K: Ord + Clone>(a: &BTreeMap<K, i64>, b: &BTreeMap<K, i64>) -> (i64, i64, i64) {
    // (matched, only weir, only tshark)
    let mut m = 0;
    let mut ow = 0;
    let mut ot = 0;
    for (k, &w) in a {
        let t = b.get(k).copied().unwrap_or(0);
        m += w.min(t);
        ow += (w - t).max(0);
    }
    for (k, &t) in b {
        let w = a.get(k).copied().unwrap_or(0);
        ot += (t - w).max(0);
    }
    (m, ow, ot)
}

#[test]
fn http_and_tls_agree_with_tshark_on_the_corpus() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    if !weir_testkit::have("tshark") {
        return;
    }
    let files: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| std::fs::metadata(f).is_ok_and(|m| m.len() < 50 << 20))
        .collect();
    let results = std::sync::Mutex::new(Vec::new());
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let dir = weir_testkit::TempDir::new("http-corpus");
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(f) = files.get(i) else { break };
                    let t = tshark_items(f);
                    let w = weir_items(f, dir.path()).unwrap_or_default();
                    results.lock().unwrap().push((f.clone(), t, w));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut totals = [[0i64; 3]; 3];
    let mut files_with = 0;
    for (f, t, w) in &results {
        if t.requests.is_empty() && t.responses.is_empty() && t.snis.is_empty() {
            if !(w.requests.is_empty() && w.responses.is_empty() && w.snis.is_empty()) {
                let d = [
                    diff(&w.requests, &t.requests),
                    diff(&w.responses, &t.responses),
                    diff(&w.snis, &t.snis),
                ];
                for (i, x) in d.iter().enumerate() {
                    totals[i][1] += x.1;
                }
                eprintln!("weir-only file {}: {d:?}", f.display());
            }
            continue;
        }
        files_with += 1;
        let d = [
            diff(&w.requests, &t.requests),
            diff(&w.responses, &t.responses),
            diff(&w.snis, &t.snis),
        ];
        for (i, x) in d.iter().enumerate() {
            totals[i][0] += x.0;
            totals[i][1] += x.1;
            totals[i][2] += x.2;
        }
        if d.iter().any(|x| x.1 != 0 || x.2 != 0) {
            let name = f.file_name().unwrap().to_string_lossy();
            eprintln!(
                "differs {name}: req {:?} resp {:?} sni {:?}",
                d[0], d[1], d[2]
            );
            let only = |a: &BTreeMap<(String, String, String), i64>,
                        b: &BTreeMap<(String, String, String), i64>| {
                a.iter()
                    .filter(|(k, v)| b.get(*k).copied().unwrap_or(0) < **v)
                    .map(|(k, _)| k.clone())
                    .take(3)
                    .collect::<Vec<_>>()
            };
            eprintln!(
                "   weir-only {:?}\n   tshark-only {:?}",
                only(&w.requests, &t.requests),
                only(&t.requests, &w.requests)
            );
        }
    }
    eprintln!("files with HTTP/TLS per tshark: {files_with}");
    eprintln!(
        "requests (matched, weir only, tshark only): {:?}",
        totals[0]
    );
    eprintln!("responses: {:?}", totals[1]);
    eprintln!("tls client hellos: {:?}", totals[2]);
    // Measured 2026-11-26 (tshark 4.0.17, 753 corpus files, 439 with HTTP/TLS per tshark):
    // requests [537, 6, 41], responses [346, 25, 117], ClientHellos [50, 0, 17].
    // Classes of difference (168 files differ, 119 of them http-evader-*):
    // * http-evader-*: deliberately malformed HTTP (bad chunking, odd line ends, header
    //   tricks) that httparse refuses or frames differently from Wireshark's lax dissector;
    //   most of the tshark-only responses and requests.
    // * STARTTLS (ldap-starttls, smtp-startssl, pgsql-upgrade-tls): TLS after a clear-text
    //   protocol; weir recognises a connection by its first bytes only.
    // * QUIC (quic-*): ClientHellos over UDP; weir reads TCP only.
    // * A second ClientHello in one connection (HelloRetryRequest: ja4-rules-*, bug-5758):
    //   weir logs one TLS record per connection.
    // * TCP Fast Open (tcp-fastopen-*): was a weir bug (data on the SYN lost its first byte),
    //   fixed 2026-11-27: the SYN's data starts at its sequence number + 1, and
    //   `tcp_fast_open_requests_match_tshark` holds those files to tshark exactly. Its requests
    //   moved from tshark-only to matched (the bounds below were not re-measured then).
    // * weir-only: requests on ports or in connections tshark's dissector did not take as
    //   HTTP (weir detects HTTP by content, any port).
    // The bounds are the measured figures with a small margin; a regression breaks them.
    let [req, resp, tls] = totals;
    assert!(
        req[0] >= 530 && req[1] <= 10 && req[2] <= 48,
        "requests {req:?}"
    );
    assert!(
        resp[0] >= 340 && resp[1] <= 30 && resp[2] <= 125,
        "responses {resp:?}"
    );
    assert!(
        tls[0] >= 50 && tls[1] <= 2 && tls[2] <= 17,
        "client hellos {tls:?}"
    );
    assert!(files_with >= 400, "{files_with} files with HTTP/TLS");
}

/// A small corpus capture with one HTTP transaction, or `None` (after the testkit's skip or
/// failure) without the corpus.
fn sample() -> Option<PathBuf> {
    let f = weir_testkit::corpus_dir()
        .join("bug-1401-03__80000000-037-PTP_Example_IPv4_HTTP_Session-PUBLIC-tp-01.pcap");
    if f.is_file() {
        Some(f)
    } else {
        weir_testkit::missing(&format!("corpus file {} is missing", f.display()));
        None
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn one_transaction_with_zeek_fields_and_community_id() {
    let Some(f) = sample() else { return };
    let out = weir().args(["http", "-r"]).arg(&f).output().unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    let r = &lines[0];
    // Values read off the capture with tshark (-e http.request.method -e http.host
    // -e http.request.uri -e communityid --enable-protocol communityid).
    assert_eq!(r["method"], "GET");
    assert_eq!(r["host"], "suricata-ids.org");
    assert_eq!(r["uri"], "/features/all-features/");
    assert_eq!(r["id.orig_h"], "10.0.2.15");
    assert_eq!(r["id.resp_p"], 80);
    assert_eq!(r["trans_depth"], 1);
    let cid = Command::new("tshark")
        .arg("-r")
        .arg(&f)
        .args(["-c", "1", "-T", "fields", "-e", "communityid"])
        .args(["--enable-protocol", "communityid"])
        .stderr(Stdio::null())
        .output();
    if let Ok(cid) = cid {
        let cid = String::from_utf8_lossy(&cid.stdout).trim().to_string();
        if !cid.is_empty() {
            assert_eq!(r["uid"], cid.as_str());
        }
    }
}

#[test]
fn hostile_paths_and_numbers_are_clear_errors() {
    let Some(f) = sample() else { return };
    let tmp = weir_testkit::TempDir::new("http-hostile");
    // missing input
    let out = weir()
        .args(["http", "-r", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr_of(&out).contains("cannot open /nonexistent/x.pcap"),
        "{}",
        stderr_of(&out)
    );
    // no input at all: a usage error
    let out = weir().args(["http"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr_of(&out).contains("give input files with -r, or interfaces with -i"));
    // output over the input (through a symbolic link too)
    let copy = tmp.join("in.pcap");
    std::fs::copy(&f, &copy).unwrap();
    let link = tmp.join("link.jsonl");
    std::os::unix::fs::symlink(&copy, &link).unwrap();
    for out_path in [&copy, &link] {
        for flag in ["-w", "--tls-log"] {
            let out = weir()
                .args(["http", "-r"])
                .arg(&copy)
                .arg(flag)
                .arg(out_path)
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(1), "{flag}");
            assert!(
                stderr_of(&out).contains("refusing to write"),
                "{}",
                stderr_of(&out)
            );
        }
    }
    assert_eq!(std::fs::read(&copy).unwrap(), std::fs::read(&f).unwrap());
    // both logs to one place
    let same = tmp.join("same.jsonl");
    for (w, t) in [("-", "-"), (same.to_str().unwrap(), same.to_str().unwrap())] {
        let out = weir()
            .args(["http", "-r"])
            .arg(&f)
            .args(["-w", w, "--tls-log", t])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr_of(&out).contains("give the two logs different outputs"));
    }
    // bad numbers: usage errors (exit 2) naming the option
    for (opt, v) in [
        ("--max-flows", "0"),
        ("--max-flows", "-1"),
        ("--max-flows", "1e99"),
        ("--max-memory-mib", "0"),
        ("--max-memory-mib", "99999999"),
        ("--idle-timeout", "nan"),
        ("--idle-timeout", "-5"),
        ("--idle-timeout", "inf"),
    ] {
        let out = weir()
            .args(["http", "-r"])
            .arg(&f)
            .args([opt, v])
            .output()
            .unwrap();
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{opt} {v}: {err}");
        assert!(
            err.contains(opt) && !err.contains("panicked"),
            "{opt} {v}: {err}"
        );
    }
}

#[test]
fn full_and_closed_outputs() {
    let Some(f) = sample() else { return };
    common::full_and_closed_outputs("http", &f);
}

/// Special files as outputs: both logs to /dev/null is fine (nothing mixes); stdout named two
/// ways (`-` and /dev/stdout) and one new file named two ways are refused.
#[test]
fn special_outputs_are_judged_by_what_they_are() {
    let Some(f) = sample() else { return };
    let out = weir()
        .args(["http", "-r"])
        .arg(&f)
        .args(["-w", "/dev/null", "--tls-log", "/dev/null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(out.stdout.is_empty());
    assert!(stderr_of(&out).contains("1 http transactions"));
    let tmp = weir_testkit::TempDir::new("http-special");
    let new = tmp.join("new.jsonl");
    let dotted = tmp.join(".").join("new.jsonl");
    for (w, t) in [
        ("-", "/dev/stdout"),
        ("/dev/stdout", "-"),
        (new.to_str().unwrap(), dotted.to_str().unwrap()),
    ] {
        let out = weir()
            .args(["http", "-r"])
            .arg(&f)
            .args(["-w", w, "--tls-log", t])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{w} {t}");
        assert!(
            stderr_of(&out).contains("give the two logs different outputs"),
            "{w} {t}: {}",
            stderr_of(&out)
        );
    }
    assert!(!new.exists());
}

/// TCP Fast Open: the request carried on the SYN is read whole (it starts at the SYN's
/// sequence number + 1); weir's requests (method, uri) equal tshark's on every tcp-fastopen
/// corpus file (before the fix the first byte was lost and no request was found).
#[test]
fn tcp_fast_open_requests_match_tshark() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let tfo: Vec<_> = files
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("tcp-fastopen"))
        .collect();
    assert!(tfo.len() >= 4, "{tfo:?}");
    let mut requests = 0;
    for f in &tfo {
        let t = Command::new("tshark")
            .arg("-r")
            .arg(f)
            .args(["-Y", "http.request", "-T", "fields"])
            .args(["-e", "http.request.method", "-e", "http.request.uri"])
            .stderr(Stdio::null())
            .output()
            .expect("tshark runs");
        let mut want: Vec<String> = String::from_utf8_lossy(&t.stdout)
            .lines()
            .map(str::to_string)
            .collect();
        let out = weir().args(["http", "-r"]).arg(f).output().unwrap();
        assert!(out.status.success(), "{}", stderr_of(&out));
        let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|v| v["method"].is_string())
            .map(|v| {
                format!(
                    "{}\t{}",
                    v["method"].as_str().unwrap(),
                    v["uri"].as_str().unwrap()
                )
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want, "{}", f.display());
        requests += got.len();
    }
    assert!(requests >= 5, "{requests}");
}

/// `--format apache` on a corpus capture of 8 transactions (one request per packet, with
/// Referer and User-Agent): every line equals the combined-format line built from tshark's
/// fields of the request (ip.src, frame.time_epoch through `date -u`, method, uri, version,
/// Referer, User-Agent) and of its response (code, Content-Length).
#[test]
fn apache_combined_format_agrees_with_tshark() {
    let f = weir_testkit::corpus_dir()
        .join("firewall__ruletype-firewall-21-http-accept-tx__http-sticky-server-s8.pcap");
    if !f.is_file() {
        weir_testkit::missing(&format!("corpus file {} is missing", f.display()));
        return;
    }
    let fields = |filter: &str, fields: &[&str]| -> Vec<Vec<String>> {
        let mut c = Command::new("tshark");
        c.arg("-r").arg(&f).args(["-Y", filter, "-T", "fields"]);
        for x in fields {
            c.args(["-e", x]);
        }
        let out = c.stderr(Stdio::null()).output().expect("tshark runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    };
    let responses: BTreeMap<String, (String, String)> = fields(
        "http.response",
        &[
            "http.request_in",
            "http.response.code",
            "http.content_length_header",
        ],
    )
    .into_iter()
    .map(|r| (r[0].clone(), (r[1].clone(), r[2].clone())))
    .collect();
    let mut want: Vec<String> = fields(
        "http.request",
        &[
            "frame.number",
            "ip.src",
            "frame.time_epoch",
            "http.request.method",
            "http.request.uri",
            "http.request.version",
            "http.referer",
            "http.user_agent",
        ],
    )
    .into_iter()
    .map(|r| {
        let secs = r[2].split('.').next().unwrap().to_string();
        let date = Command::new("date")
            .args(["-u", "-d", &format!("@{secs}"), "+%d/%b/%Y:%H:%M:%S"])
            .env("LC_ALL", "C")
            .output()
            .unwrap();
        let date = String::from_utf8(date.stdout).unwrap().trim().to_string();
        let (code, len) = responses.get(&r[0]).cloned().expect("a response");
        let dash = |s: &str| {
            if s.is_empty() {
                "-".to_string()
            } else {
                s.to_string()
            }
        };
        for s in &r[3..] {
            assert!(s
                .bytes()
                .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\'));
        }
        format!(
            "{} - - [{date} +0000] \"{} {} {}\" {code} {} \"{}\" \"{}\"",
            r[1],
            r[3],
            r[4],
            r[5],
            if len == "0" {
                "-".to_string()
            } else {
                dash(&len)
            },
            dash(&r[6]),
            dash(&r[7])
        )
    })
    .collect();
    let out = weir()
        .args(["http", "--format", "apache", "-r"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr_of(&out));
    let mut got: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    want.sort();
    got.sort();
    assert_eq!(want.len(), 8);
    assert_eq!(got, want);
}
