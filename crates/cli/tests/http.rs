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
}
