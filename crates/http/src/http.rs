//! HTTP/1.0 and 1.1 over one reassembled connection: requests (from the originator) paired in
//! order with responses (from the responder), with pipelining and keep-alive, bodies skipped and
//! counted (`Content-Length`, chunked, or until the connection closes), `100 Continue` and the
//! other informational responses, `HEAD` and `204`/`304` responses without a body, `CONNECT`
//! and `101 Switching Protocols` turning the connection into an opaque tunnel.
//!
//! Headers are parsed by `httparse`. Header bytes are buffered (at most [`MAX_HEADER`] per
//! message); body bytes are counted as they pass, never copied. A gap inside a body of known
//! length is skipped and counted; elsewhere it loses the message boundary, and the side looks
//! for the next line that starts a message (a request line, or `HTTP/1.`).

use std::collections::VecDeque;

/// Largest header block (request or status line and header fields) buffered for one message;
/// a longer one is a protocol error for that side.
pub const MAX_HEADER: usize = 64 * 1024;

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// The response was complete.
    Complete,
    /// No response was seen.
    NoResponse,
    /// The response began but its body was cut (end of capture or connection, or a gap that
    /// lost its end).
    Cut,
}

/// One request and its response as the parser built them (the flow layer adds the addresses).
#[derive(Clone, Debug, Default)]
pub(crate) struct Tx {
    pub(crate) ts_ns: u64,
    pub(crate) depth: u32,
    pub(crate) method: Option<String>,
    pub(crate) host: Option<String>,
    pub(crate) uri: Option<String>,
    pub(crate) referrer: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) user_agent: Option<String>,
    pub(crate) request_body_len: u64,
    pub(crate) response_body_len: u64,
    pub(crate) status_code: Option<u16>,
    pub(crate) status_msg: Option<String>,
    pub(crate) info_code: Option<u16>,
    pub(crate) info_msg: Option<String>,
    pub(crate) request_content_type: Option<String>,
    pub(crate) response_content_type: Option<String>,
    pub(crate) response_ts_ns: Option<u64>,
    pub(crate) last_ts_ns: u64,
    pub(crate) gap_bytes: u64,
    pub(crate) response_started: bool,
    pub(crate) end: Option<End>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunked {
    Size,
    Data(u64),
    DataEnd,
    Trailer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between messages: the next bytes start one.
    Start,
    /// A body of this many bytes left.
    Body(u64),
    /// A chunked body.
    Chunked(Chunked),
    /// A response body that ends with the connection.
    UntilClose,
    /// Not HTTP any more (CONNECT, Upgrade): bytes are ignored.
    Tunnel,
    /// The message boundary was lost: looking for the next message start.
    Lost,
}

/// Counters of the HTTP parser.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HttpStats {
    /// Requests parsed.
    pub requests: u64,
    /// Final responses parsed (informational ones not counted).
    pub responses: u64,
    /// Informational (1xx) responses.
    pub informational: u64,
    /// Responses with no request left to pair with.
    pub orphan_responses: u64,
    /// Header blocks httparse refused, or longer than [`MAX_HEADER`].
    pub parse_errors: u64,
    /// Times a side lost the message boundary (parse error or gap outside a body).
    pub desyncs: u64,
    /// Bytes skipped while looking for the next message.
    pub skipped_bytes: u64,
}

#[derive(Debug)]
struct Side {
    state: State,
    buf: Vec<u8>,
    /// Time of the first byte of the message being parsed.
    msg_ts: Option<u64>,
    /// Depth of the transaction this side's body bytes belong to.
    cur: Option<u32>,
    /// In `Lost` after a gap: the next byte may start a message (after a parse error it may
    /// not: the search starts at the next line).
    fresh: bool,
}

impl Default for Side {
    fn default() -> Side {
        Side {
            state: State::Start,
            buf: Vec::new(),
            msg_ts: None,
            cur: None,
            fresh: false,
        }
    }
}

/// The HTTP state of one connection.
#[derive(Debug, Default)]
pub(crate) struct Http {
    txs: VecDeque<Tx>,
    depth: u32,
    req: Side,
    resp: Side,
    pub(crate) stats: HttpStats,
}

/// True when `b` starts like a request line: a method token and a space.
pub(crate) fn looks_like_request(b: &[u8]) -> bool {
    const METHODS: &[&[u8]] = &[
        b"GET ",
        b"POST ",
        b"HEAD ",
        b"PUT ",
        b"DELETE ",
        b"OPTIONS ",
        b"CONNECT ",
        b"TRACE ",
        b"PATCH ",
        b"PROPFIND ",
        b"PROPPATCH ",
        b"MKCOL ",
        b"COPY ",
        b"MOVE ",
        b"LOCK ",
        b"UNLOCK ",
        b"SEARCH ",
        b"REPORT ",
        b"SUBSCRIBE ",
        b"NOTIFY ",
    ];
    METHODS
        .iter()
        .any(|m| b.len() >= m.len() && &b[..m.len()] == *m)
}

/// True when `b` starts like a status line.
pub(crate) fn looks_like_response(b: &[u8]) -> bool {
    b.starts_with(b"HTTP/1.")
}

/// Whether `b` could still grow into a request or status line start (for content sniffing).
pub(crate) fn could_be_http(b: &[u8]) -> bool {
    let n = b.len().min(10);
    b"HTTP/1.".starts_with(&b[..n.min(7)])
        || [
            &b"GET "[..],
            b"POST ",
            b"HEAD ",
            b"PUT ",
            b"DELETE ",
            b"OPTIONS ",
            b"CONNECT ",
            b"PATCH ",
            b"PROPFIND ",
        ]
        .iter()
        .any(|m| m.starts_with(&b[..n.min(m.len())]))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn header<'a>(headers: &[httparse::Header<'a>], name: &str) -> Option<&'a [u8]> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

fn is_chunked(headers: &[httparse::Header<'_>]) -> bool {
    headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding")
            && h.value
                .split(|&c| c == b',')
                .next_back()
                .is_some_and(|v| v.trim_ascii().eq_ignore_ascii_case(b"chunked"))
    })
}

fn content_length(headers: &[httparse::Header<'_>]) -> Option<u64> {
    let v = header(headers, "content-length")?;
    std::str::from_utf8(v).ok()?.trim().parse().ok()
}

fn content_type(headers: &[httparse::Header<'_>]) -> Option<String> {
    header(headers, "content-type").map(|v| {
        let v = v.split(|&c| c == b';').next().unwrap_or(v);
        text(v.trim_ascii()).to_ascii_lowercase()
    })
}

/// What a side's parser does after reading a message head.
enum Head {
    /// Not enough bytes yet.
    Partial,
    /// Parsed `n` bytes.
    Done(usize),
    /// Not HTTP.
    Error,
}

impl Http {
    /// Finished transactions, in order.
    pub(crate) fn take_done(&mut self, out: &mut Vec<Tx>) {
        while self.txs.front().is_some_and(|t| t.end.is_some()) {
            out.extend(self.txs.pop_front());
        }
    }

    fn tx_mut(&mut self, depth: Option<u32>) -> Option<&mut Tx> {
        let d = depth?;
        self.txs.iter_mut().find(|t| t.depth == d)
    }

    /// Bytes from the originator (requests).
    pub(crate) fn request_data(&mut self, ts: u64, data: &[u8]) {
        self.data(true, ts, data);
    }

    /// Bytes from the responder (responses).
    pub(crate) fn response_data(&mut self, ts: u64, data: &[u8]) {
        self.data(false, ts, data);
    }

    fn side(&mut self, req: bool) -> &mut Side {
        if req {
            &mut self.req
        } else {
            &mut self.resp
        }
    }

    fn data(&mut self, req: bool, ts: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let side = self.side(req);
        if side.buf.is_empty() {
            let used = self.run(req, ts, data);
            let rest = &data[used..];
            if !rest.is_empty() {
                self.side(req).buf.extend_from_slice(rest);
            }
        } else {
            let mut buf = std::mem::take(&mut side.buf);
            buf.extend_from_slice(data);
            let used = self.run(req, ts, &buf);
            buf.drain(..used);
            self.side(req).buf = buf;
        }
        // Whatever waits for more bytes is bounded (a header block, a chunk-size line).
        if self.side(req).buf.len() > MAX_HEADER {
            self.stats.parse_errors += 1;
            self.side(req).buf.clear();
            self.desync(req);
        }
    }

    /// Parses what it can of `input`; returns the bytes used (the rest waits for more).
    fn run(&mut self, req: bool, ts: u64, input: &[u8]) -> usize {
        let mut pos = 0;
        while pos < input.len() {
            let rest = &input[pos..];
            let state = self.side(req).state;
            match state {
                State::Start => {
                    // Tolerate stray line ends between messages.
                    let skip = rest
                        .iter()
                        .take_while(|&&c| c == b'\r' || c == b'\n')
                        .count();
                    if skip > 0 {
                        pos += skip;
                        continue;
                    }
                    let side = self.side(req);
                    if side.msg_ts.is_none() {
                        side.msg_ts = Some(ts);
                    }
                    let head = if req {
                        self.request_head(ts, rest)
                    } else {
                        self.response_head(ts, rest)
                    };
                    match head {
                        Head::Partial => {
                            if rest.len() > MAX_HEADER {
                                self.stats.parse_errors += 1;
                                self.desync(req);
                                continue;
                            }
                            return pos;
                        }
                        Head::Done(n) => {
                            self.side(req).msg_ts = None;
                            pos += n;
                        }
                        Head::Error => {
                            self.stats.parse_errors += 1;
                            self.side(req).msg_ts = None;
                            self.desync(req);
                        }
                    }
                }
                State::Body(left) => {
                    let n = left.min(rest.len() as u64);
                    self.body(req, ts, n);
                    pos += n as usize;
                    self.side(req).state = if left == n {
                        self.body_end(req, ts);
                        State::Start
                    } else {
                        State::Body(left - n)
                    };
                }
                State::Chunked(c) => match self.chunked(req, ts, c, rest) {
                    Some(n) => pos += n,
                    None => return pos,
                },
                State::UntilClose | State::Tunnel => {
                    if state == State::UntilClose {
                        self.body(req, ts, rest.len() as u64);
                    }
                    return input.len();
                }
                State::Lost => {
                    let n = self.resync(req, rest);
                    pos += n;
                    self.stats.skipped_bytes += n as u64;
                    if self.side(req).state == State::Lost {
                        return pos;
                    }
                }
            }
        }
        pos
    }

    /// One step of a chunked body: `Some(bytes used)`, `None` when it needs more bytes.
    fn chunked(&mut self, req: bool, ts: u64, c: Chunked, rest: &[u8]) -> Option<usize> {
        let line = |rest: &[u8]| rest.iter().position(|&b| b == b'\n');
        match c {
            Chunked::Size => {
                let Some(end) = line(rest) else {
                    if rest.len() > 1024 {
                        self.stats.parse_errors += 1;
                        self.desync(req);
                        return Some(0);
                    }
                    return None;
                };
                let digits: &[u8] = rest[..end]
                    .split(|&b| b == b';' || b == b'\r')
                    .next()
                    .unwrap_or(&[]);
                let size = std::str::from_utf8(digits.trim_ascii())
                    .ok()
                    .and_then(|s| u64::from_str_radix(s, 16).ok());
                match size {
                    Some(0) => self.side(req).state = State::Chunked(Chunked::Trailer),
                    Some(n) => self.side(req).state = State::Chunked(Chunked::Data(n)),
                    None => {
                        self.stats.parse_errors += 1;
                        self.desync(req);
                        return Some(0);
                    }
                }
                Some(end + 1)
            }
            Chunked::Data(left) => {
                let n = left.min(rest.len() as u64);
                self.body(req, ts, n);
                self.side(req).state = State::Chunked(if n == left {
                    Chunked::DataEnd
                } else {
                    Chunked::Data(left - n)
                });
                Some(n as usize)
            }
            Chunked::DataEnd => {
                let end = line(rest)?;
                self.side(req).state = State::Chunked(Chunked::Size);
                Some(end + 1)
            }
            Chunked::Trailer => {
                let end = line(rest)?;
                if rest[..end].iter().all(|&b| b == b'\r') {
                    self.body_end(req, ts);
                    self.side(req).state = State::Start;
                }
                Some(end + 1)
            }
        }
    }

    fn body(&mut self, req: bool, ts: u64, n: u64) {
        let cur = self.side(req).cur;
        if let Some(t) = self.tx_mut(cur) {
            if req {
                t.request_body_len += n;
            } else {
                t.response_body_len += n;
                t.last_ts_ns = ts;
            }
        }
    }

    /// A message (head and body) ended on side `req`.
    fn body_end(&mut self, req: bool, ts: u64) {
        let cur = self.side(req).cur.take();
        if !req {
            if let Some(t) = self.tx_mut(cur) {
                t.last_ts_ns = ts;
                t.end = Some(End::Complete);
            }
        }
    }

    fn desync(&mut self, req: bool) {
        self.stats.desyncs += 1;
        let cur = self.side(req).cur.take();
        if !req {
            if let Some(t) = self.tx_mut(cur) {
                t.end = Some(End::Cut);
            }
        }
        let side = self.side(req);
        side.state = State::Lost;
        side.msg_ts = None;
        side.fresh = false;
    }

    /// In `Lost`: skips to the next line that starts a message. Returns the bytes skipped.
    fn resync(&mut self, req: bool, rest: &[u8]) -> usize {
        let starts = |b: &[u8]| {
            if req {
                looks_like_request(b)
            } else {
                looks_like_response(b)
            }
        };
        let fresh = std::mem::take(&mut self.side(req).fresh);
        if fresh && starts(rest) {
            self.side(req).state = State::Start;
            return 0;
        }
        let mut i = 0;
        while let Some(p) = rest[i..].iter().position(|&b| b == b'\n') {
            let at = i + p + 1;
            let tail = &rest[at..];
            if tail.len() < 10 && could_be_http(tail) && !tail.is_empty() {
                return at;
            }
            if starts(tail) {
                self.side(req).state = State::Start;
                return at;
            }
            i = at;
        }
        rest.len()
    }

    fn request_head(&mut self, ts: u64, rest: &[u8]) -> Head {
        let mut storage = [httparse::EMPTY_HEADER; 64];
        let mut big;
        let mut r = httparse::Request::new(&mut storage);
        let mut res = r.parse(rest);
        if matches!(res, Err(httparse::Error::TooManyHeaders)) {
            big = vec![httparse::EMPTY_HEADER; 512];
            r = httparse::Request::new(&mut big);
            res = r.parse(rest);
        }
        let n = match res {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Head::Partial,
            Err(_) => return Head::Error,
        };
        self.stats.requests += 1;
        self.depth += 1;
        let method = r.method.unwrap_or("");
        let connect = method.eq_ignore_ascii_case("CONNECT");
        let mut tx = Tx {
            ts_ns: self.req.msg_ts.unwrap_or(ts),
            depth: self.depth,
            method: Some(method.to_string()),
            uri: r.path.map(str::to_string),
            version: r.version.map(|v| format!("1.{v}")),
            host: header(r.headers, "host").map(text),
            referrer: header(r.headers, "referer").map(text),
            user_agent: header(r.headers, "user-agent").map(text),
            request_content_type: content_type(r.headers),
            last_ts_ns: ts,
            ..Tx::default()
        };
        if let Some(h) = &mut tx.host {
            // tshark's http.host is the header as sent; so is Zeek's.
            h.truncate(h.trim_end().len());
        }
        let state = if connect {
            State::Start
        } else if is_chunked(r.headers) {
            State::Chunked(Chunked::Size)
        } else {
            match content_length(r.headers) {
                Some(len) if len > 0 => State::Body(len),
                _ => State::Start,
            }
        };
        self.req.cur = Some(tx.depth);
        self.txs.push_back(tx);
        self.req.state = state;
        Head::Done(n)
    }

    fn response_head(&mut self, ts: u64, rest: &[u8]) -> Head {
        let mut storage = [httparse::EMPTY_HEADER; 64];
        let mut big;
        let mut r = httparse::Response::new(&mut storage);
        let mut res = r.parse(rest);
        if matches!(res, Err(httparse::Error::TooManyHeaders)) {
            big = vec![httparse::EMPTY_HEADER; 512];
            r = httparse::Response::new(&mut big);
            res = r.parse(rest);
        }
        let n = match res {
            Ok(httparse::Status::Complete(n)) => n,
            Ok(httparse::Status::Partial) => return Head::Partial,
            Err(_) => return Head::Error,
        };
        let code = r.code.unwrap_or(0);
        let msg = r.reason.map(str::to_string);
        let version = r.version.map(|v| format!("1.{v}"));
        let start = self.resp.msg_ts.unwrap_or(ts);
        // The oldest request without a final response.
        let idx = match self.txs.iter().position(|t| !t.response_started) {
            Some(i) => i,
            None => {
                self.stats.orphan_responses += 1;
                self.depth += 1;
                self.txs.push_back(Tx {
                    ts_ns: start,
                    depth: self.depth,
                    ..Tx::default()
                });
                self.txs.len() - 1
            }
        };
        if (100..200).contains(&code) && code != 101 {
            self.stats.informational += 1;
            let t = &mut self.txs[idx];
            t.info_code = Some(code);
            t.info_msg = msg;
            self.resp.state = State::Start;
            return Head::Done(n);
        }
        self.stats.responses += 1;
        let chunked = is_chunked(r.headers);
        let length = content_length(r.headers);
        let ctype = content_type(r.headers);
        let t = &mut self.txs[idx];
        t.response_started = true;
        t.status_code = Some(code);
        t.status_msg = msg;
        t.response_content_type = ctype;
        t.response_ts_ns = Some(start);
        t.last_ts_ns = ts;
        if t.version.is_none() {
            t.version = version;
        }
        let method = t.method.clone().unwrap_or_default();
        let depth = t.depth;
        let tunnel = code == 101 || (method.eq_ignore_ascii_case("CONNECT") && code / 100 == 2);
        let no_body = method.eq_ignore_ascii_case("HEAD") || code == 204 || code == 304 || tunnel;
        self.resp.cur = Some(depth);
        self.resp.state = if no_body {
            State::Start
        } else if chunked {
            State::Chunked(Chunked::Size)
        } else {
            match length {
                Some(0) => State::Start,
                Some(len) => State::Body(len),
                None => State::UntilClose,
            }
        };
        if self.resp.state == State::Start {
            self.body_end(false, ts);
        }
        if tunnel {
            self.resp.state = State::Tunnel;
            self.req.state = State::Tunnel;
            self.req.buf.clear();
        }
        Head::Done(n)
    }

    /// `n` bytes of side `req` are missing from the capture.
    pub(crate) fn gap(&mut self, req: bool, n: u64) {
        let cur = self.side(req).cur;
        if let Some(t) = self.tx_mut(cur) {
            t.gap_bytes += n;
        } else if let Some(t) = self.txs.back_mut() {
            t.gap_bytes += n;
        }
        let side = self.side(req);
        let state = side.state;
        let fits = side.buf.is_empty();
        match state {
            State::Body(left) if fits && n < left => {
                self.side(req).state = State::Body(left - n);
                self.body(req, 0, n);
            }
            State::Chunked(Chunked::Data(left)) if fits && n < left => {
                self.side(req).state = State::Chunked(Chunked::Data(left - n));
                self.body(req, 0, n);
            }
            State::UntilClose => self.body(req, 0, n),
            State::Tunnel | State::Lost => {}
            _ => {
                self.side(req).buf.clear();
                self.desync(req);
                self.side(req).fresh = true;
            }
        }
    }

    /// The connection ended (or the capture did): every transaction left is finished.
    pub(crate) fn end(&mut self, ts: u64, out: &mut Vec<Tx>) {
        if self.resp.state == State::UntilClose {
            self.body_end(false, ts);
        }
        for mut t in self.txs.drain(..) {
            if t.end.is_none() {
                t.end = Some(if t.response_started {
                    End::Cut
                } else {
                    End::NoResponse
                });
            }
            out.push(t);
        }
        self.req = Side::default();
        self.resp = Side::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(h: &mut Http) -> Vec<Tx> {
        let mut v = Vec::new();
        h.end(99, &mut v);
        v
    }

    #[test]
    fn pipelined_keep_alive_chunked_head_and_continue() {
        let mut h = Http::default();
        h.request_data(
            1,
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nHEAD /b HTTP/1.1\r\nHost: x\r\n\r\nPOST /c HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
        );
        h.response_data(2, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc");
        h.response_data(3, b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        h.response_data(4, b"HTTP/1.1 100 Continue\r\n\r\n");
        h.request_data(5, b"hello");
        h.response_data(
            6,
            b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n2;x=y\r\nef\r\n0\r\n\r\n",
        );
        let mut done = Vec::new();
        h.take_done(&mut done);
        assert_eq!(done.len(), 3);
        assert_eq!(done[0].response_body_len, 3);
        assert_eq!(done[1].method.as_deref(), Some("HEAD"));
        assert_eq!(done[1].response_body_len, 0);
        assert_eq!(done[2].info_code, Some(100));
        assert_eq!(done[2].status_code, Some(201));
        assert_eq!(done[2].request_body_len, 5);
        assert_eq!(done[2].response_body_len, 6);
        assert_eq!(done[2].end, Some(End::Complete));
        assert_eq!(done[2].response_ts_ns, Some(6));
    }

    #[test]
    fn no_response_cut_and_until_close() {
        let mut h = Http::default();
        h.request_data(1, b"GET / HTTP/1.0\r\n\r\n");
        h.response_data(2, b"HTTP/1.0 200 OK\r\n\r\nbody bytes");
        let v = all(&mut h);
        assert_eq!(v[0].end, Some(End::Complete));
        assert_eq!(v[0].response_body_len, 10);
        let mut h = Http::default();
        h.request_data(1, b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
        h.response_data(2, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc");
        let v = all(&mut h);
        assert_eq!(v[0].end, Some(End::Cut));
        assert_eq!(v[1].end, Some(End::NoResponse));
    }

    #[test]
    fn connect_tunnel_and_gap_in_body() {
        let mut h = Http::default();
        h.request_data(1, b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n");
        h.response_data(2, b"HTTP/1.1 200 Connection established\r\n\r\n");
        h.request_data(3, b"\x16\x03\x01 binary");
        h.response_data(3, b"\x16\x03\x03 binary");
        let v = all(&mut h);
        assert_eq!(v.len(), 1);
        assert_eq!(h.stats.parse_errors, 0);
        let mut h = Http::default();
        h.request_data(1, b"GET / HTTP/1.1\r\n\r\n");
        h.response_data(2, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab");
        h.gap(false, 5);
        h.response_data(3, b"abc");
        let mut v = Vec::new();
        h.take_done(&mut v);
        assert_eq!(v[0].response_body_len, 10);
        assert_eq!(v[0].gap_bytes, 5);
        assert_eq!(v[0].end, Some(End::Complete));
    }

    #[test]
    fn a_request_httparse_refuses_is_skipped_not_looped_on() {
        let mut h = Http::default();
        h.request_data(
            1,
            b"GET /a b HTTP/1.1\r\nHost: h\r\n\r\nGET /ok HTTP/1.1\r\n\r\n",
        );
        let v = all(&mut h);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].uri.as_deref(), Some("/ok"));
        assert_eq!(h.stats.parse_errors, 1);
    }

    #[test]
    fn resync_after_garbage() {
        let mut h = Http::default();
        h.request_data(1, b"\x00\x01garbage\r\nGET /x HTTP/1.1\r\nHost: h\r\n\r\n");
        let v = all(&mut h);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].uri.as_deref(), Some("/x"));
        assert_eq!(h.stats.desyncs, 1);
    }
}
