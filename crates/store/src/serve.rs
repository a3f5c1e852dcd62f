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
//! The server listens on loopback unless given a token ([`check_listen`]); with a token every
//! request must carry `Authorization: Bearer TOKEN` (401 otherwise). One thread per connection,
//! at most [`MAX_CONNECTIONS`] at once (503 beyond).

use std::io::{BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weir_index::Query;
use weir_pcap::{FileFormat, PacketWriter, Precision};

use crate::extract::BpfMatcher;
use crate::http::{query_pairs, read_head, ChunkedWriter};
use crate::inventory::Listing;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 32;

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A network address without a token.
    #[error(
        "{0} is not a loopback address: serving a store to the network needs --token (clients \
         then send it as a bearer token)"
    )]
    NeedsToken(SocketAddr),
    /// An empty token.
    #[error("the token is empty")]
    EmptyToken,
    /// The store cannot be listed.
    #[error("{0} is not a readable store")]
    Store(PathBuf, #[source] crate::inventory::InventoryError),
    /// The address cannot be bound.
    #[error("cannot listen on {0}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// Refuses a non-loopback address without a token, and an empty token.
pub fn check_listen(addr: SocketAddr, token: Option<&str>) -> Result<(), ServeError> {
    match token {
        Some("") => Err(ServeError::EmptyToken),
        None if !addr.ip().is_loopback() => Err(ServeError::NeedsToken(addr)),
        _ => Ok(()),
    }
}

/// A bound server (see the module documentation).
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    store: Arc<PathBuf>,
    token: Option<Arc<String>>,
    active: Arc<AtomicUsize>,
}

impl Server {
    /// Checks the address and the store, and binds.
    pub fn bind(store: &Path, addr: SocketAddr, token: Option<&str>) -> Result<Server, ServeError> {
        check_listen(addr, token)?;
        Listing::load(store).map_err(|e| ServeError::Store(store.to_owned(), e))?;
        let listener = TcpListener::bind(addr).map_err(|e| ServeError::Bind(addr, e))?;
        Ok(Server {
            listener,
            store: Arc::new(store.to_owned()),
            token: token.map(|t| Arc::new(t.to_owned())),
            active: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// The address bound (with the port the system chose for port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the process ends (a failed accept is skipped).
    pub fn run(&self) {
        for conn in self.listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (store, token, active) =
                (self.store.clone(), self.token.clone(), self.active.clone());
            if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
                active.fetch_sub(1, Ordering::SeqCst);
                let _ = respond(&conn, 503, "text/plain", &[], b"too many connections\n");
                continue;
            }
            let spawned = std::thread::Builder::new()
                .name("weir-serve".into())
                .spawn(move || {
                    let _ = handle(conn, &store, token.as_deref().map(String::as_str));
                    active.fetch_sub(1, Ordering::SeqCst);
                });
            if spawned.is_err() {
                self.active.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        500 => "Internal Server Error",
        _ => "Service Unavailable",
    }
}

/// A whole (small) response.
fn respond(
    mut conn: &TcpStream,
    code: u16,
    ctype: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        reason(code),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.write_all(body)?;
    conn.flush()
}

/// Constant-time comparison of the token.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn handle(conn: TcpStream, store: &Path, token: Option<&str>) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let (line, headers) = read_head(&mut BufReader::new(&conn))?;
    let text = |code, msg: String| respond(&conn, code, "text/plain", &[], msg.as_bytes());
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if let Some(t) = token {
        let given = headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .and_then(|(_, v)| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same(g.as_bytes(), t.as_bytes())) {
            return text(401, "a bearer token is required\n".into());
        }
    }
    if method != "GET" {
        return text(405, format!("{method}: only GET is served\n"));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let Some(params) = query_pairs(query) else {
        return text(400, "malformed query string\n".into());
    };
    match path {
        "/health" => match Listing::load(store) {
            Ok(l) => {
                let body = serde_json::json!({
                    "status": "ok",
                    "store": store.display().to_string(),
                    "segments": l.rows.len(),
                });
                respond(
                    &conn,
                    200,
                    "application/json",
                    &[],
                    format!("{body}\n").as_bytes(),
                )
            }
            Err(e) => text(503, format!("{e}\n")),
        },
        "/ls" => match Listing::load(store) {
            Ok(l) => respond(
                &conn,
                200,
                "application/json",
                &[],
                format!("{:#}\n", l.to_json()).as_bytes(),
            ),
            Err(e) => text(503, format!("{e}\n")),
        },
        "/extract" => extract(&conn, store, &params),
        _ => text(
            404,
            format!("{path}: no such resource (/health, /ls, /extract)\n"),
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

fn extract(conn: &TcpStream, store: &Path, params: &[(String, String)]) -> std::io::Result<()> {
    let text = |code, msg: String| respond(conn, code, "text/plain", &[], msg.as_bytes());
    let req = match parse_request(params) {
        Ok(r) => r,
        Err(e) => return text(400, format!("{e}\n")),
    };
    let mut bpf = match BpfMatcher::new(&req.filter) {
        Ok(b) => b,
        Err(e) => return text(400, format!("filter: {e}\n")),
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
        Err(e) => return text(500, format!("{e}\n")),
    };
    let specs = match sel.output_interfaces(req.format) {
        Ok(s) => s,
        Err(e) => return text(400, format!("{e}\n")),
    };
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.tcpdump.pcap\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n",
    );
    for n in &notices {
        head.push_str(&format!("X-Weir-Notice: {n}\r\n"));
    }
    if damaged {
        head.push_str("X-Weir-Damaged: 1\r\n");
    }
    head.push_str("\r\n");
    let mut out = BufWriter::with_capacity(1 << 16, conn);
    out.write_all(head.as_bytes())?;
    // packets → 1 MiB buffer → one chunk per buffer-full → the socket
    let body = BufWriter::with_capacity(1 << 20, ChunkedWriter::new(out));
    let mut w = PacketWriter::new(body, req.format, &specs).map_err(std::io::Error::other)?;
    sel.write(&mut w, req.format)
        .map_err(std::io::Error::other)?;
    let body = w.finish().map_err(std::io::Error::other)?;
    body.into_inner()
        .map_err(|e| e.into_error())?
        .finish()?
        .flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_addresses_need_a_token() {
        let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let lo6: SocketAddr = "[::1]:0".parse().unwrap();
        let net: SocketAddr = "0.0.0.0:8080".parse().unwrap();
        assert!(check_listen(lo, None).is_ok() && check_listen(lo6, None).is_ok());
        assert!(matches!(
            check_listen(net, None),
            Err(ServeError::NeedsToken(_))
        ));
        assert!(check_listen(net, Some("s3cret")).is_ok());
        assert!(matches!(
            check_listen(lo, Some("")),
            Err(ServeError::EmptyToken)
        ));
    }

    #[test]
    fn requests_are_checked() {
        let p = |q: &str| parse_request(&query_pairs(q).unwrap());
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
