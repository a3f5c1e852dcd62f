//! The JA4 fingerprints of `weir http --tls-log` against an independent implementation, the
//! `ja4plus` package (PyPI, scapy-based; scripts/setup.sh installs it), on every corpus file
//! whose TLS log has a ClientHello: per connection (client address and port → server address
//! and port), weir's `ja4` must equal ja4plus's `ja4` fingerprint, and both must find the same
//! connections over TCP (ja4plus also fingerprints QUIC's ClientHello, `q…`: weir reads TLS
//! over TCP only, so those are left out; two corpus files have one each). That weir finds every ClientHello tshark finds is tests/http.rs's SNI
//! comparison; the files are chosen by weir's log because ja4plus takes seconds per file.
//! (FoxIO's reference `ja4.py`, run by hand over the same files on 2026-11-27, gave the same
//! fingerprints as ja4plus.)

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// (client, server, ja4) of each ClientHello in weir's TLS log of `file`.
fn weir_ja4(file: &Path, tmp: &Path) -> BTreeSet<(String, String, String)> {
    let tls = tmp.join("tls.jsonl");
    let o = common::run(
        common::weir()
            .args(["http", "-w", "/dev/null", "--tls-log"])
            .arg(&tls)
            .arg("-r")
            .arg(file),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::read_to_string(&tls)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let ja4 = v["ja4"].as_str()?.to_string();
            let s = |k: &str| v[k].to_string().trim_matches('"').to_string();
            Some((
                format!("{}:{}", s("id.orig_h"), s("id.orig_p")),
                format!("{}:{}", s("id.resp_h"), s("id.resp_p")),
                ja4,
            ))
        })
        .collect()
}

/// (client, server, ja4) of each ClientHello ja4plus fingerprints in `file`.
fn ja4plus(file: &Path) -> BTreeSet<(String, String, String)> {
    let o = common::run(
        Command::new("ja4plus")
            .args(["analyze", "--types", "ja4", "--format", "json"])
            .arg(file),
    );
    assert!(
        o.status.success(),
        "ja4plus {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let s = |k: &str| v[k].to_string().trim_matches('"').to_string();
            // TLS over TCP (`t`): weir does not read QUIC's ClientHello (`q`)
            s("fingerprint").starts_with('t').then(|| {
                (
                    format!("{}:{}", s("src_ip"), s("src_port")),
                    format!("{}:{}", s("dst_ip"), s("dst_port")),
                    s("fingerprint"),
                )
            })
        })
        .collect()
}

#[test]
fn ja4_equals_ja4plus_on_every_corpus_client_hello() {
    let tmp = tempfile::tempdir().unwrap();
    let (mut files, mut hellos) = (0, 0);
    for file in common::corpus() {
        let ours = weir_ja4(&file, tmp.path());
        if ours.is_empty() {
            continue;
        }
        let theirs = ja4plus(&file);
        assert_eq!(ours, theirs, "{}", file.display());
        files += 1;
        hellos += ours.len();
    }
    eprintln!("ja4: {hellos} ClientHellos in {files} files equal ja4plus's");
    assert!(
        files >= 10 && hellos >= 10,
        "{files} files, {hellos} hellos"
    );
}
