//! A small HTTP/1.1 server for Prometheus to scrape: `GET /metrics` (or `HEAD`) is answered
//! with what the render function returns now, any other path with 404, any other method with
//! 405, a request that is not HTTP/1.x with 400, a request head longer than
//! [`MAX_REQUEST`] with 431. Every answer closes the connection (`Connection: close`), so no
//! connection outlives one request.
//!
//! The server is `weir_httpd`'s, answering connections in turn on one thread; a client that
//! sends nothing (or sends slowly) holds it at most [`TIMEOUT`] before it is dropped, and the
//! render function is the only work done per request. Nothing a client sends can make the
//! thread panic or grow its memory beyond [`MAX_REQUEST`]. Dropping the [`Server`] stops the
//! thread and closes the socket.

use std::io::{self, Read};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use weir_httpd::{Head, Response};

use crate::text::CONTENT_TYPE;

/// The default listen address (Prometheus' port allocation list has nothing at 9637).
pub const DEFAULT_ADDR: &str = "127.0.0.1:9637";

/// The longest request head read (request line and headers); longer gets 431.
pub const MAX_REQUEST: usize = 8 * 1024;

/// How long a client may take to send its request, or to take the answer.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// The function that renders the exposition for each scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The address is not `HOST:PORT`, or names no host.
    #[error("bad metrics address {addr:?}: give HOST:PORT, e.g. {DEFAULT_ADDR} ({why})")]
    BadAddress {
        /// What was given.
        addr: String,
        /// What is wrong with it.
        why: String,
    },
    /// The socket could not be bound (the port is in use, the address is not this host's...).
    #[error("cannot listen for metrics on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The server's thread could not be started.
    #[error("cannot start the metrics server's thread")]
    Thread(#[source] io::Error),
}

/// Resolves `addr` (`127.0.0.1:9637`, `[::1]:9637`, `localhost:9637`) to its first address.
pub fn parse_addr(addr: &str) -> Result<SocketAddr, ServeError> {
    let bad = |why: String| ServeError::BadAddress {
        addr: addr.to_owned(),
        why,
    };
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(a);
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(bad("no port".into()));
    };
    if host.is_empty() {
        return Err(bad("no host".into()));
    }
    port.parse::<u16>()
        .map_err(|_| bad(format!("port {port:?} is not a number from 0 to 65535")))?;
    addr.to_socket_addrs()
        .map_err(|e| bad(e.to_string()))?
        .next()
        .ok_or_else(|| bad("the host has no address".into()))
}

/// A running metrics server (see the module documentation); stops when dropped.
#[derive(Debug)]
pub struct Server(weir_httpd::Server);

impl Server {
    /// Listens on `addr` (see [`parse_addr`]; port 0 picks a free port, see
    /// [`local_addr`](Self::local_addr)) and answers scrapes with `render()`.
    pub fn start(addr: &str, render: Render) -> Result<Server, ServeError> {
        let want = parse_addr(addr)?;
        let mut opts = weir_httpd::Options::new("metrics");
        opts.read_timeout = TIMEOUT;
        opts.write_timeout = Some(TIMEOUT);
        opts.max_head = MAX_REQUEST;
        let handler: weir_httpd::Handler = Arc::new(move |req| route(req, &*render));
        weir_httpd::Server::start(want, opts, handler)
            .map(Server)
            .map_err(|e| match e {
                weir_httpd::StartError::Bind { addr, source } => ServeError::Bind { addr, source },
                weir_httpd::StartError::Thread(e) => ServeError::Thread(e),
            })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.0.local_addr()
    }
}

/// Reads a request head (up to the first blank line) from `r`, at most [`MAX_REQUEST`] bytes,
/// giving up (as [`Head::Gone`]) once `deadline` has passed.
pub fn read_head(r: &mut impl Read, deadline: Instant) -> Head {
    weir_httpd::read_head(r, MAX_REQUEST, deadline)
}

/// `/metrics` rendered, 404 elsewhere.
fn route(req: &weir_httpd::Request, render: &dyn Fn() -> String) -> Response {
    if req.path == "/metrics" {
        Response::new(200, CONTENT_TYPE, render())
    } else {
        Response::text(404, "not found: weir serves /metrics")
    }
}

/// The answer to the request head `head`, rendering the metrics with `render` when asked.
pub fn respond(head: &[u8], render: &dyn Fn() -> String) -> Response {
    weir_httpd::answer(head, weir_httpd::Methods::GetHead, &|req| {
        route(req, render)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};
    use std::net::{TcpListener, TcpStream};

    fn body() -> String {
        "# HELP weir_up_total x\n# TYPE weir_up_total counter\nweir_up_total 1\n".into()
    }

    #[test]
    fn answers() {
        let r = respond(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &body);
        assert_eq!((r.status, r.content_type), (200, CONTENT_TYPE));
        assert_eq!(r.body_bytes(), body().as_bytes());
        let bytes = String::from_utf8(r.to_bytes()).unwrap();
        assert_eq!(
            bytes,
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {CONTENT_TYPE}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{}",
                body().len(),
                body()
            )
        );
        let r = respond(b"GET /metrics?x=1 HTTP/1.0\n\n", &body);
        assert_eq!(r.status, 200);
        let r = respond(b"HEAD /metrics HTTP/1.1\r\n\r\n", &body);
        assert!(r.head_only && r.status == 200);
        let head = String::from_utf8(r.to_bytes()).unwrap();
        assert!(
            head.ends_with("\r\n\r\n") && head.contains(&format!("Length: {}", body().len())),
            "{head}"
        );
        assert_eq!(respond(b"GET / HTTP/1.1\r\n\r\n", &body).status, 404);
        assert_eq!(
            respond(b"GET /metricsx HTTP/1.1\r\n\r\n", &body).status,
            404
        );
        let r = respond(b"POST /metrics HTTP/1.1\r\n\r\n", &body);
        assert_eq!(r.status, 405);
        assert_eq!(r.headers, ["Allow: GET, HEAD"]);
        for garbage in [
            &b"\r\n\r\n"[..],
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics SPDY/3\r\n\r\n",
            b"GET  /metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics HTTP/1.1 x\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n",
        ] {
            assert_eq!(respond(garbage, &body).status, 400, "{garbage:?}");
        }
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(3600)
    }

    #[test]
    fn heads() {
        let mut c = Cursor::new(b"GET /metrics HTTP/1.1\r\nA: b\r\n\r\nbody".to_vec());
        assert_eq!(
            read_head(&mut c, far()),
            Head::Complete(b"GET /metrics HTTP/1.1\r\nA: b\r\n\r\n".to_vec())
        );
        assert_eq!(
            read_head(&mut Cursor::new(b"GET /".to_vec()), far()),
            Head::Gone
        );
        assert_eq!(read_head(&mut Cursor::new(Vec::new()), far()), Head::Gone);
        let long = vec![b'a'; MAX_REQUEST + 1];
        assert_eq!(read_head(&mut Cursor::new(long), far()), Head::TooLong);
        let mut long = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_REQUEST, b'x');
        long.extend_from_slice(b"\r\n\r\n");
        assert_eq!(read_head(&mut Cursor::new(long), far()), Head::TooLong);
    }

    #[test]
    fn bad_addresses() {
        for (a, want) in [
            ("127.0.0.1", "no port"),
            ("127.0.0.1:99999", "is not a number"),
            ("127.0.0.1:-1", "is not a number"),
            (":9637", "no host"),
            ("", "no port"),
        ] {
            let e = parse_addr(a).unwrap_err().to_string();
            assert!(e.contains(want) && e.contains("HOST:PORT"), "{a}: {e}");
        }
        assert_eq!(
            parse_addr("127.0.0.1:9637").unwrap(),
            "127.0.0.1:9637".parse().unwrap()
        );
        assert_eq!(parse_addr("[::1]:1").unwrap(), "[::1]:1".parse().unwrap());
        assert!(parse_addr("no-such-host.invalid:9637").is_err());
    }

    /// Sends `req` to the server and returns everything it answers.
    fn ask(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(req).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Over TCP: a scrape, a 404, garbage, an oversize request, a client that closes at once,
    /// and one that sends half a request and goes; the server answers the next scrape every
    /// time, and a second server on the same port is refused with a clear error.
    #[test]
    fn serves_over_tcp() {
        let server = Server::start("127.0.0.1:0", Arc::new(body)).unwrap();
        let addr = server.local_addr();
        let ok = ask(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.ends_with(&body()), "{ok}");
        assert!(ask(addr, b"GET /x HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404 "));
        assert!(ask(addr, b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
        let mut big = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        big.resize(64 * 1024, b'x');
        assert!(ask(addr, &big).starts_with("HTTP/1.1 431 "));
        drop(TcpStream::connect(addr).unwrap());
        {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /met").unwrap();
        }
        let again = ask(addr, b"GET /metrics HTTP/1.1\r\n\r\n");
        assert!(again.starts_with("HTTP/1.1 200 OK\r\n"), "{again}");

        let e = Server::start(&addr.to_string(), Arc::new(body)).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("cannot listen for metrics on {addr}")
        );
        let source = std::error::Error::source(&e).unwrap().to_string();
        assert!(source.contains("in use"), "{source}");
        drop(server);
        // Stopped: the port is free again.
        drop(TcpListener::bind(addr).unwrap());
    }
}
