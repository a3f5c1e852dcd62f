//! The server: [`Server::start`] binds, then one thread accepts connections and either answers
//! each in turn itself ([`Options::concurrent`] = 1: metrics, the web page) or hands each to a
//! thread of its own (`weir serve`'s long extracts). There a connection first waits for its
//! request head (and TLS handshake), at most [`Options::waiting`] connections at once, then
//! takes one of the [`Options::concurrent`] places of the requests being answered (503 when
//! full). When every waiting place is taken, the connection that has waited longest is closed
//! to make room for the new one. Idle connections (slowloris) thus never hold the answering
//! places, hold a waiting place for at most [`Options::read_timeout`], and cannot keep a real
//! client (which sends its request at once) from being served.
//!
//! Per connection: one request, one answer, `Connection: close`. The request head is read
//! within [`Options::read_timeout`] and at most [`Options::max_head`] bytes (431 beyond), parsed
//! with httparse (400 when it is not HTTP/1.x), the method checked against [`Options::methods`]
//! (405 with `Allow`), then the [`Handler`] answers with a [`Response`]: a whole body
//! (`Content-Length`) or a streamed one (chunked, whose missing last chunk tells a cut body).
//! `HEAD`, where allowed, gets the head only.
//!
//! With [`Options::tls`] every connection is TLS (rustls, client certificates as its
//! configuration asks); a plain HTTP request to it gets a plain 400 saying so, and a TLS
//! handshake to a plain server is closed at once. Nothing a client sends can make a thread
//! panic or grow its memory beyond `max_head`. Dropping the [`Server`] stops the accept thread
//! (woken by a connection to itself) and closes the socket.

use std::collections::VecDeque;
use std::io::{self, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::wire::ChunkedWriter;

/// What answers a request (shared by every connection's thread).
pub type Handler = Arc<dyn Fn(&Request) -> Response + Send + Sync>;

/// A streamed body: writes the body's bytes (chunked on the wire); an error leaves the body
/// without its last chunk, so the client knows it was cut.
pub type Stream = Box<dyn FnOnce(&mut dyn Write) -> io::Result<()>>;

/// The methods the server lets through to the handler; others get 405.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Methods {
    /// `GET` and `HEAD` (the head of the `GET` answer).
    GetHead,
    /// `GET` only.
    Get,
    /// Every method goes to the handler.
    Any,
}

/// How a server behaves.
#[derive(Clone)]
pub struct Options {
    /// Its threads' name.
    pub name: String,
    /// The methods answered (405 for the others).
    pub methods: Methods,
    /// Requests answered at once: 1 answers connections in turn on the accept thread; more
    /// gives each connection its own thread, and a request beyond gets 503.
    pub concurrent: usize,
    /// With `concurrent` > 1: connections still sending their request head at once (counted
    /// apart from the requests being answered); a connection beyond closes the one that has
    /// waited longest.
    pub waiting: usize,
    /// Say (a warning in the log) each connection closed because its request head did not
    /// come within `read_timeout` or to make room for a new one, and each refused with 503.
    pub warn_idle: bool,
    /// How long a client may take to send its request head.
    pub read_timeout: Duration,
    /// How long a write to the client may block (`None`: no limit, for long streams).
    pub write_timeout: Option<Duration>,
    /// The longest request head (request line and headers); longer gets 431.
    pub max_head: usize,
    /// Serve TLS with this configuration (see [`crate::tls::server_config`]).
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("name", &self.name)
            .field("methods", &self.methods)
            .field("concurrent", &self.concurrent)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Options {
    /// One connection at a time, `GET`/`HEAD`, 2 s timeouts, 8 KiB heads, no TLS.
    pub fn new(name: &str) -> Options {
        Options {
            name: name.to_owned(),
            methods: Methods::GetHead,
            concurrent: 1,
            waiting: 0,
            warn_idle: false,
            read_timeout: Duration::from_secs(2),
            write_timeout: Some(Duration::from_secs(2)),
            max_head: 8 * 1024,
            tls: None,
        }
    }
}

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The socket could not be bound (in use, not this host's address...).
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The accept thread could not be started.
    #[error("cannot start the server's thread")]
    Thread(#[source] io::Error),
}

/// A request: its head, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `HEAD`...
    pub method: String,
    /// The target as sent (path and query).
    pub target: String,
    /// The target's path (before `?`).
    pub path: String,
    /// The query string (after `?`, still encoded; empty when none).
    pub query: String,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
}

impl Request {
    /// The first value of header `name` (give it in lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The query's `key=value` pairs decoded; `None` when one is malformed.
    pub fn query_pairs(&self) -> Option<Vec<(String, String)>> {
        crate::wire::query_pairs(&self.query)
    }
}

/// A response's body.
pub enum Body {
    /// The whole body (`Content-Length`).
    Full(Vec<u8>),
    /// A body written as it is made (`Transfer-Encoding: chunked`).
    Chunked(Stream),
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Full(b) => write!(f, "Full({} bytes)", b.len()),
            Body::Chunked(_) => f.write_str("Chunked"),
        }
    }
}

/// An answer: status, media type, extra headers, body.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// The body's media type.
    pub content_type: &'static str,
    /// Extra header lines (`Name: value`, each without CRLF).
    pub headers: Vec<String>,
    /// The body.
    pub body: Body,
    /// Send the head only (`HEAD`).
    pub head_only: bool,
}

/// The reason phrase of a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

impl Response {
    /// A whole body of type `content_type`.
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: Body::Full(body.into()),
            head_only: false,
        }
    }

    /// A plain-text message (a line end added when it has none).
    pub fn text(status: u16, msg: &str) -> Response {
        let mut body = msg.to_owned();
        if !body.ends_with('\n') {
            body.push('\n');
        }
        Response::new(status, "text/plain; charset=utf-8", body)
    }

    /// A streamed (chunked) body.
    pub fn chunked(status: u16, content_type: &'static str, stream: Stream) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: Body::Chunked(stream),
            head_only: false,
        }
    }

    /// Adds a header line (`Name: value`).
    pub fn with_header(mut self, line: impl Into<String>) -> Response {
        self.headers.push(line.into());
        self
    }

    /// The whole body (empty for a streamed one).
    pub fn body_bytes(&self) -> &[u8] {
        match &self.body {
            Body::Full(b) => b,
            Body::Chunked(_) => &[],
        }
    }

    /// The status line and headers, up to and including the blank line.
    pub fn head(&self) -> String {
        let length = match &self.body {
            Body::Full(b) => format!("Content-Length: {}", b.len()),
            Body::Chunked(_) => "Transfer-Encoding: chunked".to_owned(),
        };
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\n{length}\r\nConnection: close\r\n",
            self.status,
            reason(self.status),
            self.content_type,
        );
        for h in &self.headers {
            head.push_str(h);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        head
    }

    /// The bytes sent for a whole body (the head alone for a streamed one or `HEAD`).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.head().into_bytes();
        if !self.head_only {
            out.extend_from_slice(self.body_bytes());
        }
        out
    }

    /// Sends the response to `w`: the head, then the body (a streamed one through 1 MiB
    /// chunks, its last chunk only when the stream ended without error).
    pub fn write_to(self, w: &mut dyn Write) -> io::Result<()> {
        w.write_all(self.head().as_bytes())?;
        if self.head_only {
            return w.flush();
        }
        match self.body {
            Body::Full(b) => w.write_all(&b)?,
            Body::Chunked(stream) => {
                let mut body = BufWriter::with_capacity(1 << 20, ChunkedWriter::new(&mut *w));
                if let Err(e) = stream(&mut body) {
                    // not flushed again on drop: a stuck client would cost one more timeout
                    let _ = body.into_parts();
                    return Err(e);
                }
                body.into_inner().map_err(|e| e.into_error())?.finish()?;
            }
        }
        w.flush()
    }
}

/// How reading a request head ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Head {
    /// The head, up to and including its blank line.
    Complete(Vec<u8>),
    /// More than the limit came without a blank line.
    TooLong,
    /// The client closed the connection, or timed out, before a whole head came.
    Gone,
}

/// Reads a request head (up to the first blank line) from `r`, at most `max` bytes, giving
/// up (as [`Head::Gone`]) once `deadline` has passed.
pub fn read_head(r: &mut impl Read, max: usize, deadline: Instant) -> Head {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = match r.read(&mut chunk) {
            Ok(0) | Err(_) => return Head::Gone,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let find = |pat: &[u8]| buf.windows(pat.len()).position(|w| w == pat);
        let end = [
            find(b"\r\n\r\n").map(|p| p + 4),
            find(b"\n\n").map(|p| p + 2),
        ]
        .into_iter()
        .flatten()
        .min();
        match end {
            Some(end) if end <= max => {
                buf.truncate(end);
                return Head::Complete(buf);
            }
            Some(_) => return Head::TooLong,
            None if buf.len() > max => return Head::TooLong,
            None if Instant::now() >= deadline => return Head::Gone,
            None => {}
        }
    }
}

/// Parses a whole request head with httparse; `None` when it is not an HTTP/1.x request.
pub fn parse_head(head: &[u8]) -> Result<Request, Response> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    let bad = || Response::text(400, "bad request");
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Response::text(431, "too many headers"));
        }
        Ok(httparse::Status::Partial) | Err(_) => return Err(bad()),
    }
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return Err(bad());
    };
    if target.is_empty() {
        return Err(bad());
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(Request {
        method: method.to_owned(),
        target: target.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        headers: req
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_ascii_lowercase(),
                    String::from_utf8_lossy(h.value).trim().to_owned(),
                )
            })
            .collect(),
    })
}

/// The answer to the request head `head`: parsed, the method checked, then `handler`'s.
pub fn answer(head: &[u8], methods: Methods, handler: &dyn Fn(&Request) -> Response) -> Response {
    let req = match parse_head(head) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let head_only = match (methods, req.method.as_str()) {
        (Methods::Any, _) | (_, "GET") => false,
        (Methods::GetHead, "HEAD") => true,
        (Methods::GetHead, m) => {
            return Response::text(405, &format!("{m}: only GET and HEAD are served"))
                .with_header("Allow: GET, HEAD")
        }
        (Methods::Get, m) => {
            return Response::text(405, &format!("{m}: only GET is served"))
                .with_header("Allow: GET")
        }
    };
    let mut r = handler(&req);
    r.head_only |= head_only;
    r
}

/// A running server (see the module documentation).
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Listens on `addr` (port 0 picks a free port, see [`local_addr`](Self::local_addr)) and
    /// answers with `handler`.
    pub fn start(addr: SocketAddr, opts: Options, handler: Handler) -> Result<Server, StartError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| StartError::Bind { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?;
        let stop = Arc::new(AtomicBool::new(false));
        let st = stop.clone();
        let thread = std::thread::Builder::new()
            .name(opts.name.clone())
            .spawn(move || accept(&listener, &st, &Arc::new(opts), &handler))
            .map_err(StartError::Thread)?;
        Ok(Server {
            addr: bound,
            stop,
            thread: Some(thread),
        })
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until the process ends.
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::Release);
        // Wake the accept: a connection to ourselves (to loopback when bound to any address).
        let mut wake = self.addr;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        if TcpStream::connect_timeout(&wake, Duration::from_secs(2)).is_ok() {
            let _ = thread.join();
        }
        // Else the thread is left to end with the process (it answers nothing after stop).
    }
}

/// How many connections wait for their request head, and how many requests are answered; and
/// the waiting connections themselves, oldest first, so that the oldest can be closed to make
/// room for a new one ([`Place::wait`]).
#[derive(Default)]
struct Places {
    waiting: AtomicUsize,
    answering: AtomicUsize,
    /// The connections holding a waiting place (their id and a handle on their socket), in
    /// the order they came.
    waiters: Mutex<VecDeque<(u64, TcpStream)>>,
    /// The next connection's id.
    next_id: AtomicU64,
}

impl Places {
    fn waiters(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, TcpStream)>> {
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A connection's place in [`Places`]: waiting, then answering; given back when dropped.
struct Place {
    places: Arc<Places>,
    answering: bool,
    /// Its entry among the waiters.
    id: u64,
}

impl Place {
    /// Takes a waiting place for `s`. When all `max` are taken, the connection that has waited
    /// longest is closed to make room (as nginx reuses its oldest idle connections when out of
    /// them): a flood of idle connections then only ever holds the most recent places, and a
    /// real client, which sends its request at once, is served. `None` (503) only when every
    /// waiting place is held by a connection already being closed. Returns the closed
    /// connection's socket, for the log.
    fn wait(places: &Arc<Places>, max: usize, s: &TcpStream) -> (Option<Place>, Option<TcpStream>) {
        let Ok(handle) = s.try_clone() else {
            return (None, None);
        };
        let mut waiters = places.waiters();
        let mut evicted = None;
        if places.waiting.load(Ordering::SeqCst) >= max {
            // its thread sees the connection end and gives its place back
            let Some((_, oldest)) = waiters.pop_front() else {
                return (None, None);
            };
            let _ = oldest.shutdown(Shutdown::Both);
            evicted = Some(oldest);
        }
        places.waiting.fetch_add(1, Ordering::SeqCst);
        let id = places.next_id.fetch_add(1, Ordering::SeqCst);
        waiters.push_back((id, handle));
        let place = Place {
            places: places.clone(),
            answering: false,
            id,
        };
        (Some(place), evicted)
    }

    /// Leaves the waiters (if still among them).
    fn unlist(&self) {
        let mut waiters = self.places.waiters();
        if let Some(i) = waiters.iter().position(|(id, _)| *id == self.id) {
            waiters.remove(i);
        }
    }

    /// Trades the waiting place for an answering one, if one of `max` is free (else the place
    /// is given back: false).
    fn answer(mut self, max: usize) -> Option<Place> {
        self.unlist();
        if self.places.answering.fetch_add(1, Ordering::SeqCst) >= max {
            self.places.answering.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        self.places.waiting.fetch_sub(1, Ordering::SeqCst);
        self.answering = true;
        Some(self)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let n = if self.answering {
            &self.places.answering
        } else {
            self.unlist();
            &self.places.waiting
        };
        n.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Says in the log (when asked to: [`Options::warn_idle`]) what happened to the client of `s`.
fn warn(s: &TcpStream, opts: &Options, what: &str) {
    if opts.warn_idle {
        let peer = s.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
        tracing::warn!("{}: {peer} {what}", opts.name);
    }
}

/// Refuses a connection with 503 (plain HTTP only: a TLS client could not read it).
fn busy(s: &TcpStream, opts: &Options, why: &str) {
    warn(s, opts, &format!("refused (503): {why}"));
    if opts.tls.is_none() {
        let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
        let _ = Response::text(503, why).write_to(&mut &*s);
    }
}

/// Says that `s` was closed because its request did not come in time (when asked to).
fn idle(s: &TcpStream, opts: &Options) {
    let t = opts.read_timeout.as_secs_f64();
    warn(
        s,
        opts,
        &format!("sent no whole request within {t} s: connection closed"),
    );
}

/// The accept loop.
fn accept(listener: &TcpListener, stop: &AtomicBool, opts: &Arc<Options>, handler: &Handler) {
    let places = Arc::new(Places::default());
    for conn in listener.incoming() {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let s = match conn {
            Ok(s) => s,
            // Out of file descriptors, say: wait a little rather than spin.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if opts.concurrent <= 1 {
            connection(s, opts, handler, None);
            continue;
        }
        let max = opts.waiting.max(1);
        let (place, evicted) = Place::wait(&places, max, &s);
        if let Some(old) = evicted {
            let why = format!(
                "closed without its request: the oldest of {max} connections waiting for \
                 theirs, to make room for a new one"
            );
            warn(&old, opts, &why);
        }
        let Some(place) = place else {
            let why = format!("too many connections waiting for their request (at most {max})");
            busy(&s, opts, &why);
            continue;
        };
        let (opts, handler) = (opts.clone(), handler.clone());
        // a thread that cannot start drops its place with the closure
        let _ = std::thread::Builder::new()
            .name(opts.name.clone())
            .spawn(move || connection(s, &opts, &handler, Some(place)));
    }
}

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// Answers one connection (errors mean the client went away: nothing to do); `place`: its
/// waiting place, traded for an answering one once its request head came.
fn connection(s: TcpStream, opts: &Options, handler: &Handler, place: Option<Place>) {
    let _ = s.set_read_timeout(Some(opts.read_timeout));
    let _ = s.set_write_timeout(opts.write_timeout);
    let mut first = [0u8; 1];
    let first = match s.peek(&mut first) {
        Ok(1) => first[0],
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return idle(&s, opts);
        }
        _ => return,
    };
    match &opts.tls {
        Some(_) if first != TLS_HANDSHAKE => {
            let _ = s.set_write_timeout(Some(Duration::from_secs(2)));
            let msg = "this server speaks TLS only: use https:// with a client certificate";
            let _ = Response::text(400, msg).write_to(&mut &s);
            close(&mut &s, &s, opts);
        }
        Some(tls) => {
            let Ok(conn) = rustls::ServerConnection::new(tls.clone()) else {
                return;
            };
            let mut tls = rustls::StreamOwned::new(conn, s);
            let sock = tls.sock.try_clone();
            let Ok(sock) = sock else { return };
            exchange(&mut tls, &sock, opts, handler, place);
            tls.conn.send_close_notify();
            let _ = tls.flush();
            close(&mut tls, &sock, opts);
        }
        // a TLS client on a plain port: nothing it could read
        None if first == TLS_HANDSHAKE => {}
        None => {
            exchange(&mut &s, &s, opts, handler, place);
            close(&mut &s, &s, opts);
        }
    }
}

/// Reads the request and sends the answer (`sock`: the connection's socket, for the log);
/// with a `place`, only once an answering place is free (503 else).
fn exchange<S: Read + Write>(
    s: &mut S,
    sock: &TcpStream,
    opts: &Options,
    handler: &Handler,
    place: Option<Place>,
) {
    let deadline = Instant::now() + opts.read_timeout;
    let head = read_head(s, opts.max_head, deadline);
    // kept to the end of the answer
    let place = place.map(|p| p.answer(opts.concurrent));
    let response = match head {
        Head::Gone if Instant::now() >= deadline => return idle(sock, opts),
        Head::Gone => return,
        Head::TooLong => Response::text(431, "too long"),
        Head::Complete(_) if matches!(place, Some(None)) => {
            let why = format!("busy: {} requests being answered", opts.concurrent);
            warn(sock, opts, &format!("refused (503): {why}"));
            Response::text(503, &why)
        }
        Head::Complete(head) => answer(&head, opts.methods, &**handler),
    };
    let mut w = BufWriter::with_capacity(1 << 16, &mut *s);
    if response.write_to(&mut w).is_ok() {
        let _ = w.flush();
    } else {
        // the client is gone, or stopped reading past the write timeout: do not wait for it
        // once more (a flush, then the drop's flush) on what is still buffered
        let _ = w.into_parts();
    }
}

/// Ends the answer: reads what the client still sends (a request body, the rest of a long
/// head) before closing, so that closing does not reset the connection before it has the
/// answer.
fn close(r: &mut impl Read, sock: &TcpStream, opts: &Options) {
    let _ = sock.shutdown(Shutdown::Write);
    let mut sink = [0u8; 1024];
    let mut left = opts.max_head;
    let wait = opts.read_timeout.min(Duration::from_secs(2));
    let _ = sock.set_read_timeout(Some(wait));
    let deadline = Instant::now() + wait;
    while left > 0 && Instant::now() < deadline {
        match r.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
}
