//! The read-only web page of `weir run` (`[web] listen = "127.0.0.1:PORT"`, off unless set):
//! the same data as `weir top` plus 5-minute charts, from one page with its script and its SVG
//! inline (no external resource), which polls a JSON endpoint once a second.
//!
//! | path | answer |
//! |---|---|
//! | `/` | the page (HTML, inline CSS, JS and SVG) |
//! | `/api/live` | `{"now": SNAPSHOT, "history": [...]}`: the snapshot is `status` + `counters` of the control socket in one object (`pid`, `config`, `uptime_s`, `jobs`: each with `name`, `interface`, `state`, `counters`, `top`: the `top` reply of the job, ten flows and rules); `history` holds one sample a second for the last 5 minutes: `{"t": seconds since start, "jobs": {NAME: {"pps", "bps", "disk_bps", "drops"}}}` |
//!
//! Only GET and HEAD are answered; nothing can be changed through it. The server is
//! `weir_httpd`'s (one connection at a time), plus a sampler thread.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weir_httpd::Response;

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
    http: Option<weir_httpd::Server>,
    stop: Arc<AtomicBool>,
    sampler: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.local_addr())
            .finish()
    }
}

impl Server {
    /// Listens on `addr` and serves the page of `snapshot`.
    pub fn start(addr: SocketAddr, snapshot: Snapshot) -> Result<Server, WebError> {
        let stop = Arc::new(AtomicBool::new(false));
        let snapshot: Arc<Snapshot> = Arc::new(snapshot);
        let history: Arc<Mutex<VecDeque<Value>>> = Arc::default();
        let handler: weir_httpd::Handler = {
            let (snapshot, history) = (snapshot.clone(), history.clone());
            Arc::new(move |req| route(req, &**snapshot, &history))
        };
        let mut opts = weir_httpd::Options::new("web");
        opts.read_timeout = TIMEOUT;
        opts.write_timeout = Some(TIMEOUT);
        let http = weir_httpd::Server::start(addr, opts, handler).map_err(|e| match e {
            weir_httpd::StartError::Bind { addr, source } => WebError::Bind { addr, source },
            weir_httpd::StartError::Thread(e) => WebError::Thread(e),
        })?;
        let sampler = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("web-sampler".into())
                .spawn(move || sample(&stop, &**snapshot, &history))
                .map_err(WebError::Thread)?
        };
        Ok(Server {
            http: Some(http),
            stop,
            sampler: Some(sampler),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.http
            .as_ref()
            .map(weir_httpd::Server::local_addr)
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        drop(self.http.take());
        if let Some(t) = self.sampler.take() {
            let _ = t.join();
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

/// The answer to a request (method already checked).
fn route(
    req: &weir_httpd::Request,
    snapshot: &dyn Fn() -> Value,
    history: &Mutex<VecDeque<Value>>,
) -> Response {
    match req.path.as_str() {
        "/" | "/index.html" => Response::new(200, "text/html; charset=utf-8", PAGE)
            .with_header("Cache-Control: no-store")
            .with_header(
                "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; \
                 style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
            ),
        "/api/live" => {
            let h: Vec<Value> = history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .cloned()
                .collect();
            Response::new(
                200,
                "application/json",
                json!({"now": snapshot(), "history": h}).to_string(),
            )
            .with_header("Cache-Control: no-store")
        }
        _ => Response::text(404, "not found: weir serves / and /api/live"),
    }
}

/// The answer to a request head.
#[cfg(test)]
fn respond(
    head: &[u8],
    snapshot: &dyn Fn() -> Value,
    history: &Mutex<VecDeque<Value>>,
) -> Response {
    weir_httpd::answer(head, weir_httpd::Methods::GetHead, &|req| {
        route(req, snapshot, history)
    })
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
        let body = String::from_utf8_lossy(r.body_bytes()).into_owned();
        assert!(body.contains("<svg"));
        // everything inline: no external script, style, image or font
        for external in ["src=", "<link", "@import", "url("] {
            assert!(!body.contains(external), "{external}");
        }
        let r = respond(b"GET /api/live HTTP/1.1\r\n\r\n", &snap, &h);
        let v: Value = serde_json::from_slice(r.body_bytes()).unwrap();
        assert_eq!(v["now"]["jobs"], json!([]));
        assert_eq!(respond(b"POST / HTTP/1.1\r\n\r\n", &snap, &h).status, 405);
        assert_eq!(respond(b"GET /x HTTP/1.1\r\n\r\n", &snap, &h).status, 404);
        assert_eq!(respond(b"\xff\xfe\r\n\r\n", &snap, &h).status, 400);
    }
}
