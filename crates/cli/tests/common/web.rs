//! HTTP traffic across a veth bench (`weir http -i`, `weir record --http`, `weir run`'s
//! `[[http]]` tests): Python's http.server and a never-answering server in the namespace, curl
//! from ours.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::netns::VethBench;

/// Processes started in the namespace (killed by pid when the test ends).
pub(crate) struct Servers(Vec<Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// http.server on PEER:8080 serving `dir`, and a server on PEER:8081 that reads and never
/// answers; returns once both accept connections.
pub(crate) fn servers(bench: &VethBench, dir: &Path) -> Servers {
    let ns = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &bench.ns])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let dir = dir.to_str().unwrap();
    let silent = "import socket,time\n\
                  s=socket.socket()\n\
                  s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
                  s.bind(('0.0.0.0',8081))\n\
                  s.listen(8)\n\
                  cs=[]\n\
                  while True:\n    c,_=s.accept()\n    cs.append(c)\n";
    let s = Servers(vec![
        ns(&[
            "python3",
            "-m",
            "http.server",
            "8080",
            "--bind",
            &bench.peer_ip,
            "--directory",
            dir,
        ]),
        ns(&["python3", "-c", silent]),
    ]);
    for port in [8080, 8081] {
        let t = Instant::now();
        let addr = format!("{}:{port}", bench.peer_ip);
        while TcpStream::connect(&addr).is_err() {
            assert!(t.elapsed() < Duration::from_secs(30), "no server on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    s
}

/// One curl request; returns (status, body bytes) as curl reports them.
pub(crate) fn curl(
    bench: &VethBench,
    method: &str,
    path: &str,
    ua: &str,
    data: Option<&str>,
) -> (u64, u64) {
    let mut c = Command::new("curl");
    c.args([
        "-s",
        "-o",
        "/dev/null",
        "-A",
        ua,
        "-w",
        "%{http_code} %{size_download}",
    ]);
    match method {
        "HEAD" => {
            c.arg("-I");
        }
        m => {
            c.args(["-X", m]);
        }
    }
    if let Some(d) = data {
        c.args(["--data", d]);
    }
    c.arg(format!("http://{}:8080{path}", bench.peer_ip));
    let out = c.output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut it = text.split(' ').map(|v| v.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap())
}

/// Sends a whole request to the silent server and leaves the connection open (returned).
pub(crate) fn pending_request(bench: &VethBench) -> TcpStream {
    use std::io::Write;
    let mut s = TcpStream::connect(format!("{}:8081", bench.peer_ip)).unwrap();
    s.write_all(b"GET /pending HTTP/1.1\r\nHost: silent\r\nUser-Agent: ua-pending\r\n\r\n")
        .unwrap();
    s
}

pub(crate) type Tx = (String, String, u64, u64, String);

/// The requests the test makes, with what curl reported: (method, uri, status, body, UA).
pub(crate) fn traffic(bench: &VethBench) -> Vec<Tx> {
    let mut v = Vec::new();
    for (m, p, ua, data) in [
        ("GET", "/a.txt", "ua-get-a", None),
        ("GET", "/b.bin", "ua-get-b", None),
        ("GET", "/missing", "ua-missing", None),
        ("HEAD", "/a.txt", "ua-head", None),
        ("POST", "/a.txt", "ua-post", Some("x=1")),
    ] {
        let (code, size) = curl(bench, m, p, ua, data);
        v.push((m.to_string(), p.to_string(), code, size, ua.to_string()));
    }
    v
}

/// The files the server serves.
pub(crate) fn files(dir: &Path) {
    std::fs::write(dir.join("a.txt"), vec![b'a'; 1234]).unwrap();
    std::fs::write(dir.join("b.bin"), vec![7u8; 70_000]).unwrap();
}
