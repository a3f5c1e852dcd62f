//! `weir serve`: a store's extract, listing and health over HTTP, for `weir extract --sensor`
//! (see [`crate::remote`]) and for scripts (`curl`).
//!
//! Routes (all `GET`):
//! - `/health`: `{"status":"ok","store":DIR,"segments":N}` (503 with the reason when the store
//!   cannot be listed);
//! - `/ls`: the store's listing as `weir ls --json` prints it;
//! - `/extract?from=NS&to=NS&filter=EXPR&format=pcap|pcapng`: the packets of the time range
//!   (ns since the epoch, both inclusive, each optional) matching the tcpdump expression, in
//!   time order, as nanosecond pcap (default) or pcapng. The body is chunked: a body without
//!   its last chunk was cut by a failure. Notices (a damaged segment, a missing index) come
//!   first as `X-Weir-Notice` headers, and `X-Weir-Damaged: 1` when packets may be missing.
//!
//! The server listens on loopback unless given a token or a client CA ([`check_listen`]); with
//! a token every request must carry `Authorization: Bearer TOKEN` (401 otherwise); with TLS
//! ([`TlsFiles`]) every connection is TLS, and with a client CA the client must present a
//! certificate it signed (the handshake fails otherwise). The server is `weir_httpd`'s: one
//! thread per connection; at most [`MAX_WAITING`] connections sending their request head, each
//! for at most [`HEAD_TIMEOUT`] (then closed, with a warning in the log; when all are taken,
//! the one that has waited longest is closed to make room for a new one), and at most
//! [`MAX_CONNECTIONS`] requests answered at once, counted apart (503 beyond), so that idle
//! connections cannot keep real requests out.
//!
//! A client that stops reading does not hold its thread for ever: a write to it that blocks
//! longer than [`ServeConfig::write_timeout`] (default [`DEFAULT_WRITE_TIMEOUT`]) ends its
//! answer (an extract's body then lacks its last chunk: the client sees it cut) and the
//! connection; `/health` counts these as `clients_dropped`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir_httpd::{Methods, Options, Response};
use weir_index::Query;
use weir_pcap::{FileFormat, PacketWriter, Precision};

use crate::extract::BpfMatcher;
use crate::inventory::Listing;

/// Requests answered at once.
pub const MAX_CONNECTIONS: usize = 32;

/// Connections still sending their request head at once (counted apart from the requests
/// being answered, so that idle connections cannot keep the others out).
pub const MAX_WAITING: usize = 8 * MAX_CONNECTIONS;

/// How long a client may take to send its request head before its connection is closed
/// (said in the log).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a write to a client may block before the client is dropped, by default.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A network address without a token or a client CA.
    #[error(
        "{0} is not a loopback address: serving a store to the network needs --token (clients \
         then send it as a bearer token) or TLS client certificates (--tls-cert, --tls-key and \
         --client-ca)"
    )]
    NeedsToken(SocketAddr),
    /// An empty token.
    #[error("the token is empty")]
    EmptyToken,
    /// The store cannot be listed.
    #[error("{0} is not a readable store")]
    Store(PathBuf, #[source] crate::inventory::InventoryError),
    /// The TLS files cannot be used.
    #[error("TLS")]
    Tls(#[from] weir_httpd::TlsError),
    /// The address cannot be bound.
    #[error("cannot listen on {0}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// Refuses a non-loopback address without a token or a client CA, and an empty token.
pub fn check_listen(
    addr: SocketAddr,
    token: Option<&str>,
    client_ca: bool,
) -> Result<(), ServeError> {
    match token {
        Some("") => Err(ServeError::EmptyToken),
        None if !client_ca && !addr.ip().is_loopback() => Err(ServeError::NeedsToken(addr)),
        _ => Ok(()),
    }
}

/// The TLS files of a server.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// Its certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA (PEM) that must have signed every client's certificate; none: no client
    /// certificate asked.
    pub client_ca: Option<PathBuf>,
}

/// What `weir serve` serves, where and to whom.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The store.
    pub store: PathBuf,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The bearer token every request must carry.
    pub token: Option<String>,
    /// TLS, with client certificates when a client CA is given.
    pub tls: Option<TlsFiles>,
    /// How long one write to a client may block (the client reads nothing) before the answer
    /// and the connection are dropped.
    pub write_timeout: Duration,
}

/// A listening server (see the module documentation).
#[derive(Debug)]
pub struct Server {
    http: weir_httpd::Server,
    tls: bool,
}

impl Server {
    /// Checks the address, the TLS files and the store, binds and starts answering.
    pub fn bind(c: &ServeConfig) -> Result<Server, ServeError> {
        let client_ca = c.tls.as_ref().is_some_and(|t| t.client_ca.is_some());
        check_listen(c.listen, c.token.as_deref(), client_ca)?;
        let tls = match &c.tls {
            Some(t) => Some(weir_httpd::tls::server_config(
                &t.cert,
                &t.key,
                t.client_ca.as_deref(),
            )?),
            None => None,
        };
        Listing::load(&c.store).map_err(|e| ServeError::Store(c.store.clone(), e))?;
        let mut opts = Options::new("weir-serve");
        opts.methods = Methods::Get;
        opts.concurrent = MAX_CONNECTIONS;
        opts.waiting = MAX_WAITING;
        opts.warn_idle = true;
        opts.read_timeout = HEAD_TIMEOUT;
        opts.write_timeout = Some(c.write_timeout);
        opts.max_head = 64 * 1024;
        let secure = tls.is_some();
        opts.tls = tls;
        let (store, token) = (Arc::new(c.store.clone()), c.token.clone().map(Arc::new));
        let dropped = Arc::new(AtomicU64::new(0));
        let handler: weir_httpd::Handler = Arc::new(move |req| {
            handle(req, &store, token.as_deref().map(String::as_str), &dropped)
        });
        let http = weir_httpd::Server::start(c.listen, opts, handler).map_err(|e| match e {
            weir_httpd::StartError::Bind { addr, source } => ServeError::Bind(addr, source),
            weir_httpd::StartError::Thread(e) => ServeError::Bind(c.listen, e),
        })?;
        Ok(Server { http, tls: secure })
    }

    /// The address bound (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.http.local_addr()
    }

    /// `http://ADDR` or `https://ADDR`.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.local_addr())
    }

    /// Serves until the process ends.
    pub fn run(self) {
        self.http.wait();
    }
}

/// Constant-time comparison of the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn handle(
    req: &weir_httpd::Request,
    store: &Path,
    token: Option<&str>,
    dropped: &Arc<AtomicU64>,
) -> Response {
    if let Some(t) = token {
        let given = req
            .header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same(g.as_bytes(), t.as_bytes())) {
            return Response::text(401, "a bearer token is required");
        }
    }
    let Some(params) = req.query_pairs() else {
        return Response::text(400, "malformed query string");
    };
    let json = |v: String| Response::new(200, "application/json", format!("{v}\n"));
    match req.path.as_str() {
        "/health" => match Listing::load(store) {
            Ok(l) => json(
                serde_json::json!({
                    "status": "ok",
                    "store": store.display().to_string(),
                    "segments": l.rows.len(),
                    "clients_dropped": dropped.load(Ordering::Relaxed),
                })
                .to_string(),
            ),
            Err(e) => Response::text(503, &e.to_string()),
        },
        "/ls" => match Listing::load(store) {
            Ok(l) => json(format!("{:#}", l.to_json())),
            Err(e) => Response::text(503, &e.to_string()),
        },
        "/extract" => extract(store, &params, dropped.clone()),
        path => Response::text(
            404,
            &format!("{path}: no such resource (/health, /ls, /extract)"),
        ),
    }
}

/// A request's extract parameters.
struct Request {
    from: u64,
    to: u64,
    filter: String,
    format: FileFormat,
}

fn parse_request(params: &[(String, String)]) -> Result<Request, String> {
    let mut r = Request {
        from: 0,
        to: u64::MAX,
        filter: String::new(),
        format: FileFormat::Pcap(Precision::Nano),
    };
    for (k, v) in params {
        let ns = || {
            v.parse::<u64>()
                .map_err(|_| format!("{k}={v}: give nanoseconds since the epoch (0 to 2^64-1)"))
        };
        match k.as_str() {
            "from" => r.from = ns()?,
            "to" => r.to = ns()?,
            "filter" => r.filter = v.clone(),
            "format" => {
                r.format = match v.as_str() {
                    "pcap" => FileFormat::Pcap(Precision::Nano),
                    "pcapng" => FileFormat::Pcapng,
                    _ => return Err(format!("format={v}: pcap or pcapng")),
                }
            }
            _ => return Err(format!("{k}: unknown parameter (from, to, filter, format)")),
        }
    }
    if r.from > r.to {
        return Err("from is after to".into());
    }
    Ok(r)
}

/// A writer that notes a write that timed out (`SO_SNDTIMEO`: the client stopped reading).
struct Watch<'a> {
    inner: &'a mut dyn Write,
    timed_out: bool,
}

impl Watch<'_> {
    fn note<T>(&mut self, r: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &r {
            self.timed_out |= matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            );
        }
        r
    }
}

impl Write for Watch<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let r = self.inner.write(buf);
        self.note(r)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let r = self.inner.flush();
        self.note(r)
    }
}

fn extract(store: &Path, params: &[(String, String)], dropped: Arc<AtomicU64>) -> Response {
    let req = match parse_request(params) {
        Ok(r) => r,
        Err(e) => return Response::text(400, &e),
    };
    let mut bpf = match BpfMatcher::new(&req.filter) {
        Ok(b) => b,
        // With libpcap's reason, as `weir extract` prints it.
        Err(e) => {
            let why = weir_packet::output::error_chain(&e);
            return Response::text(400, &format!("filter: {why}"));
        }
    };
    let query = Query::from_expr(&req.filter);
    let mut notices = Vec::new();
    let mut damaged = false;
    let inputs = [store.to_owned()];
    let mut notify = |n: crate::Notice| {
        damaged |= n.is_damage();
        if n.is_warning() {
            // one line per header
            notices.push(n.to_string().replace(['\r', '\n'], " "));
        }
    };
    let selection = crate::select(&inputs, &query, (req.from, req.to), &mut bpf, &mut notify);
    let mut sel = match selection {
        Ok(s) => s,
        Err(e) => return Response::text(500, &e.to_string()),
    };
    let specs = match sel.output_interfaces(req.format) {
        Ok(s) => s,
        Err(e) => return Response::text(400, &e.to_string()),
    };
    let format = req.format;
    // packets → 1 MiB buffer → one chunk per buffer-full → the socket
    let mut r = Response::chunked(
        200,
        "application/vnd.tcpdump.pcap",
        Box::new(move |body: &mut dyn Write| {
            let mut watch = Watch {
                inner: body,
                timed_out: false,
            };
            let r = (|| {
                let mut w =
                    PacketWriter::new(&mut watch, format, &specs).map_err(std::io::Error::other)?;
                sel.write(&mut w, format).map_err(std::io::Error::other)?;
                w.finish().map_err(std::io::Error::other)?;
                Ok(())
            })();
            if watch.timed_out {
                dropped.fetch_add(1, Ordering::Relaxed);
            }
            r
        }),
    );
    for n in notices {
        r.headers.push(format!("X-Weir-Notice: {n}"));
    }
    if damaged {
        r.headers.push("X-Weir-Damaged: 1".into());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_addresses_need_a_token() {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let lo6: SocketAddr = "[::1]:0".parse().unwrap();
        let net: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(check_listen(lo, None, false).is_ok() && check_listen(lo6, None, false).is_ok());
        assert!(matches!(
            check_listen(net, None, false),
            Err(ServeError::NeedsToken(_))
        ));
        assert!(check_listen(net, Some("s3cret"), false).is_ok());
        assert!(check_listen(net, None, true).is_ok());
        assert!(matches!(
            check_listen(lo, Some(""), false),
            Err(ServeError::EmptyToken)
        ));
    }

    #[test]
    fn requests_are_checked() {
        let p = |q: &str| parse_request(&weir_httpd::wire::query_pairs(q).unwrap());
        let r = p("from=5&to=9&filter=tcp%20port%2080&format=pcapng").unwrap();
        assert_eq!((r.from, r.to, r.filter.as_str()), (5, 9, "tcp port 80"));
        assert_eq!(r.format, FileFormat::Pcapng);
        assert!(p("from=-1").is_err());
        assert!(p("from=nan").is_err());
        assert!(p("to=99999999999999999999999").is_err());
        assert!(p("from=9&to=5").is_err());
        assert!(p("format=csv").is_err());
        assert!(p("bogus=1").is_err());
    }
}
