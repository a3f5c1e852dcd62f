//! The read-only web page of `weir run` (`[web] listen = "127.0.0.1:PORT"`, off unless set):
//! the same data as `weir top` plus 5-minute charts, from one page with its script and its SVG
//! inline (no external resource), which polls a JSON endpoint once a second.
//!
//! | path | answer |
//! |---|---|
//! | `/` | the page (HTML, inline CSS, JS and SVG) |
//! | `/api/live` | `{"now": SNAPSHOT, "history": [...]}`: the snapshot is `status` + `counters` of the control socket in one object (`pid`, `config`, `uptime_s`, `jobs`: each with `name`, `interface`, `state`, `counters`); `history` holds one sample a second for the last 5 minutes: `{"t": seconds since start, "jobs": {NAME: {"pps", "bps", "disk_bps", "drops"}}}` |
//!
//! Only GET and HEAD are answered; nothing can be changed through it. The server is
//! [`weir_metrics::http`]'s request reader on its own thread, plus a sampler thread.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weir_metrics::http::{read_head, Head, Response};

/// Samples kept: 5 minutes at one a second.
pub const HISTORY: usize = 300;

const TIMEOUT: Duration = Duration::from_secs(2);

/// The page, served as is.
pub const PAGE: &str = include_str!("web/page.html");

/// Why the page cannot be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WebError {
    /// The address is not `IP:PORT`.
    #[error("[web] listen: `{0}` is not an address IP:PORT")]
    Addr(String),
    /// It could not be bound (in use, not ours).
    #[error("[web] listen {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// A thread could not be started.
    #[error("web page thread: {0}")]
    Thread(std::io::Error),
}

/// Parses `IP:PORT` (no host names: nothing is resolved).
pub fn parse_addr(s: &str) -> Result<SocketAddr, WebError> {
    s.parse().map_err(|_| WebError::Addr(s.to_string()))
}

/// What the page shows now: a function the service gives (see the module docs).
pub type Snapshot = Box<dyn Fn() -> Value + Send + Sync>;

/// A running web page; stops when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Listens on `addr` and serves the page of `snapshot`.
    pub fn start(addr: SocketAddr, snapshot: Snapshot) -> Result<Server, WebError> {
        let listener = TcpListener::bind(addr).map_err(|source| WebError::Bind { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| WebError::Bind { addr, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let snapshot: Arc<Snapshot> = Arc::new(snapshot);
        let history: Arc<Mutex<VecDeque<Value>>> = Arc::default();
        let sampler = {
            let (stop, snapshot, history) = (stop.clone(), snapshot.clone(), history.clone());
            std::thread::Builder::new()
                .name("web-sampler".into())
                .spawn(move || sample(&stop, &**snapshot, &history))
                .map_err(WebError::Thread)?
        };
        let server = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("web".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::Acquire) {
                            break;
                        }
                        match conn {
                            Ok(s) => serve(s, &**snapshot, &history),
                            Err(_) => std::thread::sleep(Duration::from_millis(10)),
                        }
                    }
                })
                .map_err(WebError::Thread)?
        };
        Ok(Server {
            addr,
            stop,
            threads: vec![sampler, server],
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        if TcpStream::connect_timeout(&wake, TIMEOUT).is_ok() {
            for t in self.threads.drain(..) {
                let _ = t.join();
            }
        }
    }
}

/// One sample a second: each job's rates since the previous snapshot.
fn sample(stop: &AtomicBool, snapshot: &dyn Fn() -> Value, history: &Mutex<VecDeque<Value>>) {
    let started = Instant::now();
    let mut prev = snapshot();
    let mut next = Instant::now() + Duration::from_secs(1);
    while !stop.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(100));
        if Instant::now() < next {
            continue;
        }
        next += Duration::from_secs(1);
        let now = snapshot();
        let mut jobs = serde_json::Map::new();
        for j in now["jobs"].as_array().into_iter().flatten() {
            let name = j["name"].as_str().unwrap_or("?");
            let before = prev["jobs"]
                .as_array()
                .and_then(|a| a.iter().find(|p| p["name"] == j["name"]))
                .map(|p| p["counters"].clone())
                .unwrap_or(Value::Null);
            let c = &j["counters"];
            let r = weir_control::top::rates(&before, c).unwrap_or_default();
            let drops = ["kernel_drops"]
                .iter()
                .map(|k| c["capture"][k].as_u64().unwrap_or(0))
                .sum::<u64>()
                + c["buffer"]["dropped_full"].as_u64().unwrap_or(0)
                + c["writer"]["dropped"].as_u64().unwrap_or(0);
            jobs.insert(
                name.to_string(),
                json!({"pps": r.pps, "bps": r.bps, "disk_bps": r.disk_bps, "drops": drops}),
            );
        }
        let mut h = history.lock().unwrap_or_else(PoisonError::into_inner);
        h.push_back(json!({"t": started.elapsed().as_secs_f64(), "jobs": jobs}));
        while h.len() > HISTORY {
            h.pop_front();
        }
        drop(h);
        prev = now;
    }
}

fn plain(status: u16, reason: &'static str, body: &str) -> Response {
    Response {
        status,
        reason,
        content_type: "text/plain; charset=utf-8",
        headers: Vec::new(),
        body: format!("{body}\n"),
        head_only: false,
    }
}

/// The answer to a request head.
fn respond(
    head: &[u8],
    snapshot: &dyn Fn() -> Value,
    history: &Mutex<VecDeque<Value>>,
) -> Response {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return plain(400, "Bad Request", "bad request");
    };
    if !version.starts_with("HTTP/1.") {
        return plain(400, "Bad Request", "bad request");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => {
            let mut r = plain(405, "Method Not Allowed", "read-only: GET and HEAD");
            r.headers.push("Allow: GET, HEAD".into());
            return r;
        }
    };
    let path = target.split('?').next().unwrap_or_default();
    let mut r = match path {
        "/" | "/index.html" => Response {
            status: 200,
            reason: "OK",
            content_type: "text/html; charset=utf-8",
            headers: vec![
                "Cache-Control: no-store".into(),
                "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; \
                 style-src 'unsafe-inline'; connect-src 'self'; img-src data:"
                    .into(),
            ],
            body: PAGE.to_string(),
            head_only,
        },
        "/api/live" => {
            let h: Vec<Value> = history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned()
                .collect();
            Response {
                status: 200,
                reason: "OK",
                content_type: "application/json",
                headers: vec!["Cache-Control: no-store".into()],
                body: json!({"now": snapshot(), "history": h}).to_string(),
                head_only,
            }
        }
        _ => plain(404, "Not Found", "not found: weir serves / and /api/live"),
    };
    r.head_only = head_only;
    r
}

fn serve(mut s: TcpStream, snapshot: &dyn Fn() -> Value, history: &Mutex<VecDeque<Value>>) {
    let _ = s.set_read_timeout(Some(TIMEOUT));
    let _ = s.set_write_timeout(Some(TIMEOUT));
    let response = match read_head(&mut s, Instant::now() + TIMEOUT) {
        Head::Complete(head) => respond(&head, snapshot, history),
        Head::TooLong => plain(431, "Request Header Fields Too Large", "too long"),
        Head::Gone => return,
    };
    let _ = s.write_all(&response.to_bytes());
    let _ = s.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_methods() {
        let snap = || json!({"jobs": []});
        let h = Mutex::new(VecDeque::new());
        let r = respond(b"GET / HTTP/1.1\r\n\r\n", &snap, &h);
        assert_eq!(r.status, 200);
        assert!(r.body.contains("<svg"));
        // everything inline: no external script, style, image or font
        for external in ["src=", "<link", "@import", "url("] {
            assert!(!r.body.contains(external), "{external}");
        }
        let r = respond(b"GET /api/live HTTP/1.1\r\n\r\n", &snap, &h);
        let v: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(v["now"]["jobs"], json!([]));
        assert_eq!(respond(b"POST / HTTP/1.1\r\n\r\n", &snap, &h).status, 405);
        assert_eq!(respond(b"GET /x HTTP/1.1\r\n\r\n", &snap, &h).status, 404);
        assert_eq!(respond(b"\xff\xfe\r\n\r\n", &snap, &h).status, 400);
    }
}
