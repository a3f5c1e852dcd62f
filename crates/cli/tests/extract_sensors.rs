//! `weir serve` and `weir extract --sensor` against mergecap: two stores built from different
//! real captures (`weir record -r`), each served by its own `weir serve` on loopback; the
//! merged extract of both equals `mergecap` of the two stores' `tcpdump -r … -w` outputs for the
//! same expression (and time window), packet for packet (mergecap's output stably sorted by
//! time: a capture of the corpus has packets slightly out of order, which extract sorts). A sensor that cannot be reached is
//! reported and the others' packets still written (exit 1); a server bound to the network needs
//! a token, and a client without it is refused. Over TLS with client certificates (a CA, a
//! server and client certificates made by the `openssl` CLI): the merged extract equals the
//! plain one; a client with no certificate, with one from another CA, or speaking plain HTTP
//! is refused with the sensor named; `curl` as an independent client gets `/health` and `/ls`;
//! missing, unreadable and garbage PEM files are refused before anything listens.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{corpus, run, segments, weir};
use weir_pcap::FileReader;

/// Each store is recorded from captures in time order, so that its segments follow one another
/// in time as mergecap wants its inputs, and without runs of equal timestamps across segments
/// (whose order mergecap does not keep).
const STORE_A: [&str; 2] = [
    "smb2-ntlmssp-negotiateflags__input.pcap",
    "smb2-async-read__input.pcap",
];
const STORE_B: [&str; 3] = [
    "rule-hooks__http-body-hook-01__input.pcap",
    "ipv6-evasion__ipv6-dos-with-ext-headers-6__denial6-6.pcap",
    "mime__mime-stream-depth__input.pcap",
];

type Pkt = (u64, u32, Vec<u8>);

fn build_store(dir: &Path, files: &[&str]) {
    let all = corpus();
    let mut cmd = weir();
    cmd.args(["record", "--segment-mib", "1", "--buffer-mib", "64", "-o"])
        .arg(dir);
    for f in files {
        cmd.arg("-r")
            .arg(all.iter().find(|p| p.ends_with(f)).expect("in the corpus"));
    }
    let o = run(&mut cmd);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn packets(file: &Path) -> Vec<Pkt> {
    let mut r = FileReader::open(file).unwrap();
    let mut v = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        v.push((p.meta.ts_ns, p.meta.orig_len, p.data.to_vec()));
    }
    v
}

/// A `weir serve` on an ephemeral loopback port: the child (killed on drop), its URL, and
/// what it printed on stderr after its banner.
struct Serve(Child, String, Arc<Mutex<String>>);

impl Serve {
    /// Waits (a minute at most) until the server has printed a line containing `what`.
    fn wait_log(&self, what: &str) -> String {
        let t = Instant::now();
        loop {
            let log = self.2.lock().unwrap().clone();
            if log.contains(what) {
                return log;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "no {what:?} in: {log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(store: &Path, extra: &[&str]) -> Serve {
    let mut child = weir()
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store)
        .args(extra)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let url = line
        .trim()
        .rsplit(' ')
        .next()
        .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
        .unwrap_or_else(|| panic!("no banner: {line}"))
        .to_owned();
    let log = Arc::new(Mutex::new(String::new()));
    let l = log.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        while err.read_line(&mut line).is_ok_and(|n| n > 0) {
            l.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
    Serve(child, url, log)
}

/// mergecap of the stores' tcpdump selections (each segment through `tcpdump -r -w`), then the
/// time window.
fn oracle(stores: &[&Path], expr: &str, (from, to): (u64, u64), tmp: &Path) -> Vec<Pkt> {
    let mut per_store = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        let mut outs = Vec::new();
        for (j, seg) in segments(s).iter().enumerate() {
            let out = tmp.join(format!("td-{i}-{j}.pcap"));
            let mut cmd = Command::new("tcpdump");
            cmd.args(["--time-stamp-precision=nano", "-r"])
                .arg(seg)
                .arg("-w")
                .arg(&out);
            if !expr.is_empty() {
                cmd.arg(expr);
            }
            let o = run(&mut cmd);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            outs.push(out);
        }
        let store_out = tmp.join(format!("store-{i}.pcap"));
        let o = run(Command::new("mergecap")
            .args(["-F", "nsecpcap", "-w"])
            .arg(&store_out)
            .args(&outs));
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        per_store.push(store_out);
    }
    let merged = tmp.join("merged.pcap");
    let o = run(Command::new("mergecap")
        .args(["-F", "nsecpcap", "-w"])
        .arg(&merged)
        .args(&per_store));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut all: Vec<Pkt> = packets(&merged)
        .into_iter()
        .filter(|p| p.0 >= from && p.0 <= to)
        .collect();
    // mergecap merges inputs it takes to be in time order; a few corpus captures are not
    // inside (packets a few ms out of order), which `weir extract` sorts: so do the same here,
    // stably (equal timestamps keep mergecap's order)
    all.sort_by_key(|p| p.0);
    all
}

fn extract(
    urls: &[&str],
    expr: &str,
    window: Option<(u64, u64)>,
    out: &Path,
) -> (Option<i32>, String) {
    let mut cmd = weir();
    cmd.args(["extract", "--sensor", &urls.join(","), "-w"])
        .arg(out);
    if let Some((from, to)) = window {
        let s = |ns: u64| format!("{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
        cmd.args(["--from", &s(from), "--to", &s(to)]);
    }
    if !expr.is_empty() {
        cmd.arg(expr);
    }
    let o = run(&mut cmd);
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn stores(tmp: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (tmp.join("a"), tmp.join("b"));
    build_store(&a, &STORE_A);
    build_store(&b, &STORE_B);
    (a, b)
}

#[test]
fn merged_extract_of_two_sensors_equals_mergecap_of_their_tcpdump_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = stores(tmp.path());
    let (sa, sb) = (serve(&a, &[]), serve(&b, &[]));
    let all = oracle(&[&a, &b], "", (0, u64::MAX), tmp.path());
    assert!(all.len() > 10_000, "{} packets", all.len());
    // a window from the middle of store B's first capture to the middle of its last
    // whole seconds: --from/--to are exact there
    let sec = |ns: u64| ns - ns % 1_000_000_000;
    let (lo, hi) = (
        sec(all[all.len() / 3].0),
        sec(all[all.len() * 5 / 6].0) + 1_000_000_000,
    );
    let out = tmp.path().join("out.pcap");
    for expr in ["", "tcp", "udp", "ip6", "host 192.168.1.1 or tcp port 445"] {
        for window in [None, Some((lo, hi))] {
            let want = oracle(&[&a, &b], expr, window.unwrap_or((0, u64::MAX)), tmp.path());
            let (code, err) = extract(&[&sa.1, &sb.1], expr, window, &out);
            assert_eq!(code, Some(0), "`{expr}` {window:?}: {err}");
            let got = packets(&out);
            assert_eq!(got.len(), want.len(), "`{expr}` {window:?}");
            let at = got.iter().zip(&want).position(|(g, w)| g != w);
            assert!(
                at.is_none(),
                "`{expr}` {window:?}: packet {at:?} differs: {:?} vs mergecap's {:?}",
                at.map(|i| (got[i].0, got[i].1, got[i].2.len())),
                at.map(|i| (want[i].0, want[i].1, want[i].2.len())),
            );
        }
    }
    // a sensor that is down: reported, the others' packets written, exit 1
    let down = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let (code, err) = extract(&[&sa.1, &down, &sb.1], "tcp", None, &out);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&down) && err.contains("cannot connect"),
        "{err}"
    );
    assert!(err.contains("2 of 3 sensor(s) answered"), "{err}");
    assert!(packets(&out) == oracle(&[&a, &b], "tcp", (0, u64::MAX), tmp.path()));
    // a bad expression is refused before any sensor is asked
    let (code, err) = extract(&[&sa.1], "port port", None, &out);
    assert_eq!(code, Some(1), "{err}");
}

#[test]
fn health_ls_and_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    build_store(&a, &STORE_A[..1]);
    // a network address without a token is refused
    let o = run(weir()
        .args(["serve", "--listen", "0.0.0.0:0", "--store"])
        .arg(&a));
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs --token"));
    // a store that does not exist
    let o = run(weir()
        .args(["serve", "--store"])
        .arg(tmp.path().join("missing")));
    assert_eq!(o.status.code(), Some(1));
    let s = serve(&a, &["--token", "s3cret"]);
    let out = tmp.path().join("out.pcap");
    let (code, err) = extract(&[&s.1], "", None, &out);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("401"), "{err}");
    let mut cmd = weir();
    cmd.args(["extract", "--token", "s3cret", "--sensor", &s.1, "-w"])
        .arg(&out);
    let o = run(&mut cmd);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(packets(&out), oracle(&[&a], "", (0, u64::MAX), tmp.path()));
    // health and ls, by hand over a socket
    let get = |path: &str| {
        let hp = s.1.trim_start_matches("http://");
        let mut c = std::net::TcpStream::connect(hp).unwrap();
        write!(
            c,
            "GET {path} HTTP/1.1\r\nHost: {hp}\r\nAuthorization: Bearer s3cret\r\n\r\n"
        )
        .unwrap();
        let mut r = String::new();
        c.read_to_string(&mut r).unwrap();
        r.split_once("\r\n\r\n").unwrap().1.to_owned()
    };
    let h: serde_json::Value = serde_json::from_str(&get("/health")).unwrap();
    assert_eq!(h["status"], "ok");
    let ls: serde_json::Value = serde_json::from_str(&get("/ls")).unwrap();
    let mine = run(weir().args(["ls", "--json"]).arg(&a));
    let want: serde_json::Value = serde_json::from_slice(&mine.stdout).unwrap();
    assert_eq!(ls, want, "/ls is `weir ls --json`");
    assert!(get("/extract?from=9&to=5").contains("from is after to"));
    // A bad filter: libpcap's reason, as `tcpdump -d 'tcp port'` prints it.
    let bad = get("/extract?filter=tcp%20port");
    assert!(
        bad.contains(
            "filter: invalid filter expression: can't parse filter expression: syntax error"
        ),
        "{bad}"
    );
    assert!(get("/nope").contains("no such resource"));
}

/// A sensor that accepts the connection and never answers (a listener nobody accepts on: the
/// kernel completes the handshake) fails after `--sensor-timeout` seconds, named with the
/// reason, and the real sensor's packets are still written, equal to tcpdump's (exit 1).
#[test]
fn a_silent_sensor_fails_after_its_timeout() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    build_store(&a, &STORE_A[..1]);
    let s = serve(&a, &[]);
    let silent_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = format!("http://{}", silent_listener.local_addr().unwrap());
    let out = tmp.path().join("out.pcap");
    let o = run(weir()
        .args(["extract", "--sensor", &format!("{silent},{}", s.1)])
        .args(["--sensor-timeout", "1", "-w"])
        .arg(&out));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{silent}: failed: the sensor sent nothing for 1 s (--sensor-timeout)"
        )),
        "{err}"
    );
    assert!(err.contains("1 of 2 sensor(s) answered"), "{err}");
    assert_eq!(packets(&out), oracle(&[&a], "", (0, u64::MAX), tmp.path()));
}

/// `silent` connections that send nothing and `half` that send half a request head, then a
/// real request: `/health` answers 200 and an extract equals tcpdump's (the idle ones never
/// keep it out); every idle socket is then closed by the server with nothing sent, and the
/// server's log says `said`.
fn idle_connections_then_a_request(silent: usize, half: usize, said: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    build_store(&a, &STORE_A[..1]);
    let s = serve(&a, &[]);
    let hp = s.1.trim_start_matches("http://").to_owned();
    let mut idle: Vec<std::net::TcpStream> = (0..silent)
        .map(|_| std::net::TcpStream::connect(&hp).unwrap())
        .collect();
    for _ in 0..half {
        let mut c = std::net::TcpStream::connect(&hp).unwrap();
        c.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n").unwrap();
        idle.push(c);
    }
    let mut c = std::net::TcpStream::connect(&hp).unwrap();
    write!(c, "GET /health HTTP/1.1\r\nHost: {hp}\r\n\r\n").unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 200 "), "{r}");
    // and an extract, the long request
    let out = tmp.path().join("out.pcap");
    let (code, err) = extract(&[&s.1], "", None, &out);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(packets(&out), oracle(&[&a], "", (0, u64::MAX), tmp.path()));
    // the idle ones are closed by the server (end of stream, nothing sent), and said
    for c in &mut idle {
        c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).unwrap();
        assert!(buf.is_empty(), "{}", String::from_utf8_lossy(&buf));
    }
    s.wait_log(said);
}

/// Slowloris: 40 connections that send nothing and 10 that send half a request head do not
/// keep a real request out (idle connections wait apart from the 32 requests answered); they
/// are closed after the head timeout, with a line in the server's log.
#[test]
fn idle_connections_do_not_keep_requests_out() {
    idle_connections_then_a_request(
        40,
        10,
        "sent no whole request within 5 s: connection closed",
    );
}

/// A listener on loopback that drips its answer to every connection: `head` at once, then
/// one byte of `drip` (cycled) every 200 ms, until the client goes away. Its URL.
fn dripping_sensor(head: &'static [u8], drip: &'static [u8]) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(mut c) = conn else { return };
            std::thread::spawn(move || {
                if c.write_all(head).is_err() {
                    return;
                }
                for b in drip.iter().cycle() {
                    if c.write_all(&[*b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
        }
    });
    url
}

/// Two sensors that drip (5 bytes/s, never silent for a second): one its response head, one
/// the body after a whole head. Below `--sensor-min-rate 100` (bytes/s over each
/// `--sensor-timeout 1`), each is reported failed by name with the rate, and the real
/// sensor's packets are written, equal to tcpdump's (exit 1). Without a minimum rate they
/// would hold the extract for ever (the silence is never reached).
#[test]
fn a_dripping_sensor_fails_on_its_rate() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    build_store(&a, &STORE_A[..1]);
    let s = serve(&a, &[]);
    let head_drip = dripping_sensor(b"", b"HTTP/1.1 200 OK\r\nX-Pad: ");
    let body_drip = dripping_sensor(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        // one chunk: a nanosecond pcap file header (24 bytes)
        b"18\r\nM<\xb2\xa1\x02\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\xff\xff\x00\x00\
          \x01\x00\x00\x00\r\n",
    );
    let out = tmp.path().join("out.pcap");
    let sensors = format!("{head_drip},{},{body_drip}", s.1);
    let o = run(weir()
        .args(["extract", "--sensor", &sensors])
        .args(["--sensor-timeout", "1", "--sensor-min-rate", "100", "-w"])
        .arg(&out));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for url in [&head_drip, &body_drip] {
        let line = err
            .lines()
            .find(|l| l.contains(&format!("{url}: failed: ")))
            .unwrap_or_else(|| panic!("{url} not reported: {err}"));
        assert!(
            line.contains("the sensor sent ")
                && line.ends_with("slower than 100 bytes/s (--sensor-min-rate)"),
            "{line}"
        );
    }
    assert!(err.contains("1 of 3 sensor(s) answered"), "{err}");
    assert_eq!(packets(&out), oracle(&[&a], "", (0, u64::MAX), tmp.path()));
}

/// More idle connections than the server has waiting places (300 > 256): the oldest are
/// closed to make room (said in the log), so a real request that comes after them is answered
/// (200, then an extract equal to tcpdump's), not refused with 503 as before.
#[test]
fn a_flood_of_idle_connections_does_not_keep_a_request_out() {
    idle_connections_then_a_request(
        300,
        0,
        "the oldest of 256 connections waiting for theirs, to make room for a new one",
    );
}

/// `openssl` with its output checked.
fn openssl(dir: &Path, args: &[&str]) {
    let o = run(Command::new("openssl").current_dir(dir).args(args));
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A CA (`NAME-ca.pem`/`.key`) and, signed by it, a certificate for each of `leaves` (name,
/// extensions section): `NAME.pem`, `NAME.key`. EC P-256 keys, PKCS#8.
fn pki(dir: &Path, ca: &str, leaves: &[(&str, &str)]) {
    std::fs::write(
        dir.join("openssl.cnf"),
        "[req]\ndistinguished_name = dn\n[dn]\n\
         [ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n\
         subjectKeyIdentifier = hash\n\
         [server]\nbasicConstraints = CA:FALSE\nsubjectAltName = IP:127.0.0.1\n\
         extendedKeyUsage = serverAuth\nkeyUsage = critical,digitalSignature\n\
         [client]\nbasicConstraints = CA:FALSE\nextendedKeyUsage = clientAuth\n\
         keyUsage = critical,digitalSignature\n",
    )
    .unwrap();
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let (ca_pem, ca_key) = (format!("{ca}-ca.pem"), format!("{ca}-ca.key"));
    let subj = format!("/CN={ca} test CA");
    let mut a = vec![
        "req",
        "-x509",
        "-config",
        "openssl.cnf",
        "-extensions",
        "ca",
    ];
    a.extend(key);
    a.extend([
        "-keyout", &ca_key, "-out", &ca_pem, "-days", "2", "-subj", &subj,
    ]);
    openssl(dir, &a);
    for (name, ext) in leaves {
        let (csr, pem, k) = (
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.key"),
        );
        let subj = format!("/CN={name}");
        let mut a = vec!["req", "-new", "-config", "openssl.cnf"];
        a.extend(key);
        a.extend(["-keyout", &k, "-out", &csr, "-subj", &subj]);
        openssl(dir, &a);
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-set_serial",
                "7",
                "-days",
                "2",
                "-extfile",
                "openssl.cnf",
                "-extensions",
                ext,
                "-out",
                &pem,
            ],
        );
    }
}

fn p(dir: &Path, f: &str) -> String {
    dir.join(f).display().to_string()
}

#[test]
fn tls_client_certificates() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    pki(t, "good", &[("server", "server"), ("client", "client")]);
    pki(t, "other", &[("stranger", "client")]);
    let (a, b) = (t.join("a"), t.join("b"));
    build_store(&a, &STORE_A[..1]);
    build_store(&b, &STORE_B[..1]);
    let tls = [
        "--tls-cert",
        &p(t, "server.pem"),
        "--tls-key",
        &p(t, "server.key"),
        "--client-ca",
        &p(t, "good-ca.pem"),
    ];
    let (sa, sb) = (serve(&a, &tls), serve(&b, &tls));
    assert!(sa.1.starts_with("https://127.0.0.1:"), "{}", sa.1);
    let (pa, pb) = (serve(&a, &[]), serve(&b, &[]));
    let extract_tls = |urls: &[&str], client: Option<(&str, &str)>, ca: &str, out: &Path| {
        let mut cmd = weir();
        cmd.args([
            "extract",
            "--sensor",
            &urls.join(","),
            "--tls-ca",
            &p(t, ca),
        ]);
        if let Some((cert, key)) = client {
            cmd.args(["--tls-cert", &p(t, cert), "--tls-key", &p(t, key)]);
        }
        let o = run(cmd.arg("-w").arg(out).arg("tcp"));
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    // the merged extract over TLS is the plain one, and mergecap's
    let (plain, secure) = (t.join("plain.pcap"), t.join("tls.pcap"));
    let (code, err) = extract(&[&pa.1, &pb.1], "tcp", None, &plain);
    assert_eq!(code, Some(0), "{err}");
    let client = Some(("client.pem", "client.key"));
    let (code, err) = extract_tls(&[&sa.1, &sb.1], client, "good-ca.pem", &secure);
    assert_eq!(code, Some(0), "{err}");
    let got = packets(&secure);
    assert!(got.len() > 100, "{} packets", got.len());
    assert!(got == packets(&plain), "TLS and plain extracts differ");
    assert!(got == oracle(&[&a, &b], "tcp", (0, u64::MAX), t));
    // refused, with the sensor named; the other sensor's packets still written (exit 1)
    let only_b = |out: &Path| packets(out) == oracle(&[&b], "tcp", (0, u64::MAX), t);
    let out = t.join("out.pcap");
    for (what, client, ca, want) in [
        (
            "no client certificate",
            None,
            "good-ca.pem",
            "CertificateRequired",
        ),
        (
            "another CA's client",
            Some(("stranger.pem", "stranger.key")),
            "good-ca.pem",
            "TLS with",
        ),
        (
            "a server from another CA",
            client,
            "other-ca.pem",
            "UnknownIssuer",
        ),
    ] {
        let (code, err) = extract_tls(&[&sa.1, &pb.1], client, ca, &out);
        assert_eq!(code, Some(1), "{what}: {err}");
        assert!(
            err.contains(&format!("{}: failed: ", sa.1)) && err.contains(want),
            "{what}: {err}"
        );
        assert!(err.contains("1 of 2 sensor(s) answered"), "{what}: {err}");
        assert!(only_b(&out), "{what}");
    }
    // plain HTTP to the TLS port, and https without --tls-ca
    let plain_url = sa.1.replacen("https://", "http://", 1);
    let (code, err) = extract(&[&plain_url, &pb.1], "tcp", None, &out);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&plain_url) && err.contains("speaks TLS only"),
        "{err}"
    );
    assert!(only_b(&out));
    let (code, err) = extract(&[&sa.1, &pb.1], "tcp", None, &out);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&sa.1) && err.contains("https needs --tls-ca"),
        "{err}"
    );
    // https to a plain port: the handshake is closed at once
    let (code, err) = extract_tls(
        &[&pa.1.replacen("http://", "https://", 1)],
        client,
        "good-ca.pem",
        &out,
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("TLS with"), "{err}");

    // curl, an independent client: /health and /ls; refused without a certificate
    let curl = |path: &str, cert: bool| {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--fail", "--cacert", &p(t, "good-ca.pem")]);
        if cert {
            cmd.args(["--cert", &p(t, "client.pem"), "--key", &p(t, "client.key")]);
        }
        run(cmd.arg(format!("{}{path}", sa.1)))
    };
    let h = curl("/health", true);
    assert!(h.status.success(), "{}", String::from_utf8_lossy(&h.stderr));
    let h: serde_json::Value = serde_json::from_slice(&h.stdout).unwrap();
    assert_eq!(
        (h["status"].as_str(), h["segments"].as_u64()),
        (Some("ok"), Some(segments(&a).len() as u64))
    );
    let ls = curl("/ls", true);
    assert!(
        ls.status.success(),
        "{}",
        String::from_utf8_lossy(&ls.stderr)
    );
    let ls: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    let want: serde_json::Value =
        serde_json::from_slice(&run(weir().args(["ls", "--json"]).arg(&a)).stdout).unwrap();
    assert_eq!(ls, want, "/ls is `weir ls --json`");
    assert!(!curl("/health", false).status.success());
}

#[test]
fn tls_files_are_checked_before_listening() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    pki(t, "good", &[("server", "server"), ("client", "client")]);
    let a = t.join("a");
    build_store(&a, &STORE_A[..1]);
    std::fs::write(t.join("garbage.pem"), b"not PEM at all\n\x00\xff").unwrap();
    let serve_with = |listen: &str, cert: &str, key: &str, ca: Option<&str>| {
        let mut cmd = weir();
        cmd.args(["serve", "--listen", listen, "--store"]).arg(&a);
        cmd.args(["--tls-cert", &p(t, cert), "--tls-key", &p(t, key)]);
        if let Some(ca) = ca {
            cmd.args(["--client-ca", &p(t, ca)]);
        }
        let o = run(&mut cmd);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let lo = "127.0.0.1:0";
    for (cert, key, ca, want) in [
        (
            "missing.pem",
            "server.key",
            Some("good-ca.pem"),
            "cannot read the certificate",
        ),
        (
            "garbage.pem",
            "server.key",
            Some("good-ca.pem"),
            "not a certificate",
        ),
        (
            "server.key",
            "server.key",
            Some("good-ca.pem"),
            "not a certificate",
        ),
        (
            "server.pem",
            "garbage.pem",
            Some("good-ca.pem"),
            "not a private key",
        ),
        (
            "server.pem",
            "server.pem",
            Some("good-ca.pem"),
            "not a private key",
        ),
        (
            "server.pem",
            "client.key",
            Some("good-ca.pem"),
            "server.pem with key",
        ),
        (
            "server.pem",
            "server.key",
            Some("missing.pem"),
            "cannot read the client CA",
        ),
        (
            "server.pem",
            "server.key",
            Some("garbage.pem"),
            "not a client CA certificate",
        ),
        // a directory: unreadable as a file
        (
            "server.pem",
            "server.key",
            Some("a"),
            "cannot read the client CA",
        ),
    ] {
        let (code, err) = serve_with(lo, cert, key, ca);
        assert_eq!(code, Some(1), "{cert} {key} {ca:?}: {err}");
        assert!(
            err.contains(want) && !err.contains("panicked"),
            "{cert} {key} {ca:?}: {err}"
        );
        assert!(!err.contains("weir serve:"), "listened: {err}");
    }
    // TLS alone does not open a network address: it needs a client CA (or a token)
    let (code, err) = serve_with("0.0.0.0:0", "server.pem", "server.key", None);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("needs --token"), "{err}");
    // an option without its partner is a usage error
    let o = run(weir()
        .args(["serve", "--store"])
        .arg(&a)
        .args(["--tls-cert", &p(t, "server.pem")]));
    assert_eq!(o.status.code(), Some(2));
    let o = run(weir()
        .args(["serve", "--store"])
        .arg(&a)
        .args(["--client-ca", &p(t, "good-ca.pem")]));
    assert_eq!(o.status.code(), Some(2));
    // the client's files are checked before any sensor is asked
    let out = t.join("out.pcap");
    for (ca, cert, want) in [
        (
            "missing.pem",
            "client.pem",
            "cannot read the CA certificate",
        ),
        ("garbage.pem", "client.pem", "not a CA certificate"),
        ("good-ca.pem", "garbage.pem", "not a certificate"),
    ] {
        let o = run(weir()
            .args([
                "extract",
                "--sensor",
                "https://127.0.0.1:1",
                "--tls-ca",
                &p(t, ca),
            ])
            .args([
                "--tls-cert",
                &p(t, cert),
                "--tls-key",
                &p(t, "client.key"),
                "-w",
            ])
            .arg(&out));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(
            err.contains(want) && !err.contains("127.0.0.1:1: failed"),
            "{err}"
        );
    }
}

/// `GET path` over a plain socket: the body of the answer.
fn get(url: &str, path: &str) -> String {
    let hp = url.trim_start_matches("http://");
    let mut c = std::net::TcpStream::connect(hp).unwrap();
    write!(c, "GET {path} HTTP/1.1\r\nHost: {hp}\r\n\r\n").unwrap();
    let mut r = String::new();
    c.read_to_string(&mut r).unwrap();
    r.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// `weir serve --write-timeout 1`: a client that asks for a 60 MB extract and reads nothing
/// (the socket buffers hold a few MB) is dropped once a write to it has blocked 1 s: it then
/// reads a body cut before its last chunk, and `/health` counts it. Other clients are served
/// while it is stuck and after (a whole extract equal to the store's tcpdump output). Bad
/// timeouts are refused by name.
#[test]
fn a_client_that_stops_reading_is_dropped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    for bad in ["0", "-1", "nan", "99999999999", ""] {
        let o = run(weir()
            .args(["serve", "--store"])
            .arg(tmp.path())
            .args(["--write-timeout", bad]));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--write-timeout"), "{bad}: {err}");
    }
    let big = tmp.path().join("big.pcap");
    let o = run(weir()
        .args(["gen", "-w"])
        .arg(&big)
        .args(["--count", "40000", "--size", "1500", "--pps", "1000000"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let store = tmp.path().join("s");
    let o = run(weir()
        .args(["record", "--segment-mib", "16", "-o"])
        .arg(&store)
        .arg("-r")
        .arg(&big));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = serve(&store, &["--write-timeout", "1"]);
    let health = || -> serde_json::Value { serde_json::from_str(&get(&s.1, "/health")).unwrap() };
    assert_eq!(health()["clients_dropped"], 0);

    let hp = s.1.trim_start_matches("http://").to_owned();
    let mut stuck = std::net::TcpStream::connect(&hp).unwrap();
    write!(stuck, "GET /extract HTTP/1.1\r\nHost: {hp}\r\n\r\n").unwrap();
    // served meanwhile: the whole store, as tcpdump reads it
    let want = oracle(&[&store], "", (0, u64::MAX), tmp.path());
    assert_eq!(want.len(), 40_000);
    let out = tmp.path().join("other.pcap");
    let (code, err) = extract(&[&s.1], "", None, &out);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(packets(&out), want);
    // the stuck one is dropped and counted (the server's count is the signal; 120 s at most)
    let t = std::time::Instant::now();
    while health()["clients_dropped"] != 1 {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(120),
            "never dropped: {}",
            health()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // what it can still read is what the socket buffers held: a body without its last chunk
    stuck
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        match stuck.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the dropped connection did not end: {e}"),
        }
    }
    let whole = std::fs::metadata(&out).unwrap().len() as usize;
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &got[..got.len().min(64)]
    );
    assert!(got.len() < whole, "{} of {whole} bytes", got.len());
    assert!(!got.ends_with(b"\r\n0\r\n\r\n"), "the body is cut");
    // and the server still answers
    let (code, err) = extract(&[&s.1], "udp", None, &out);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(packets(&out), want);
    assert_eq!(health()["clients_dropped"], 1);
}
