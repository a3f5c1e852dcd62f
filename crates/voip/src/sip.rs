//! A SIP message parser (RFC 3261 §7) for the fields a call record needs: start line, Call-ID,
//! From, To, CSeq, User-Agent, Server, Content-Type, Content-Length and the body.
//!
//! Hand-written because the Rust SIP crates found (rsip, sip-codec and kin) are either
//! unmaintained or parse the full grammar into owned trees, which is more than a passive
//! analyzer needs and slower. The parser borrows from the input, never panics on any bytes
//! (property-tested in the crate's tests), and bounds the header block ([`MAX_HEADER`]).
//! Compact header forms (`i`, `f`, `t`, `l`, `c`) are recognised; folded (continuation) lines
//! are skipped; header names are case-insensitive.

/// Longest header block accepted (start line through the blank line).
pub const MAX_HEADER: usize = 16 * 1024;

/// Longest body accepted from a stream transport (TCP); longer Content-Length is an error.
pub const MAX_BODY: usize = 64 * 1024;

/// Errors of [`parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SipError {
    /// The start line is neither a request line nor a status line.
    #[error("bad start line")]
    StartLine,
    /// No blank line ends the header block within [`MAX_HEADER`] bytes (or a datagram).
    #[error("header block not terminated")]
    Unterminated,
    /// Content-Length is not a number or exceeds [`MAX_BODY`].
    #[error("bad Content-Length")]
    ContentLength,
}

/// The first line of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start<'a> {
    /// A request: method and Request-URI.
    Request {
        /// Method token (`INVITE`, `BYE`...).
        method: &'a str,
        /// Request-URI as sent.
        uri: &'a str,
    },
    /// A response: status code and reason phrase.
    Response {
        /// Status code (100–699).
        code: u16,
        /// Reason phrase.
        reason: &'a str,
    },
}

/// One parsed SIP message, borrowing from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message<'a> {
    /// Start line.
    pub start: Start<'a>,
    /// Call-ID header.
    pub call_id: Option<&'a str>,
    /// From header (whole value).
    pub from: Option<&'a str>,
    /// To header (whole value).
    pub to: Option<&'a str>,
    /// CSeq number and method.
    pub cseq: Option<(u32, &'a str)>,
    /// User-Agent header.
    pub user_agent: Option<&'a str>,
    /// Server header.
    pub server: Option<&'a str>,
    /// Content-Type header.
    pub content_type: Option<&'a str>,
    /// Content-Length header.
    pub content_length: Option<usize>,
    /// The body (clamped to Content-Length when given).
    pub body: &'a [u8],
}

impl Message<'_> {
    /// True when the body is SDP.
    pub fn has_sdp(&self) -> bool {
        !self.body.is_empty()
            && self
                .content_type
                .is_some_and(|c| c.trim().to_ascii_lowercase().starts_with("application/sdp"))
    }
}

/// Result of [`parse`] on a byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A whole message and the bytes it took.
    Complete(Message<'a>, usize),
    /// More bytes are needed (stream transports only).
    Incomplete,
}

/// Methods recognised at the start of a payload by [`looks_like_sip`].
const METHODS: &[&str] = &[
    "INVITE",
    "ACK",
    "BYE",
    "CANCEL",
    "OPTIONS",
    "REGISTER",
    "PRACK",
    "SUBSCRIBE",
    "NOTIFY",
    "PUBLISH",
    "INFO",
    "REFER",
    "MESSAGE",
    "UPDATE",
];

/// Cheap test whether a payload starts like a SIP message: `SIP/2.0 ` or a known method,
/// a space, and `SIP/2.0` ending the first line.
pub fn looks_like_sip(p: &[u8]) -> bool {
    if p.starts_with(b"SIP/2.0 ") {
        return true;
    }
    let Some(sp) = p.iter().take(12).position(|&b| b == b' ') else {
        return false;
    };
    if !METHODS.iter().any(|m| m.as_bytes() == &p[..sp]) {
        return false;
    }
    let line_end = p.iter().take(2048).position(|&b| b == b'\n');
    match line_end {
        Some(e) => trim_cr(&p[..e]).ends_with(b" SIP/2.0"),
        None => false,
    }
}

fn trim_cr(l: &[u8]) -> &[u8] {
    l.strip_suffix(b"\r").unwrap_or(l)
}

/// Position just past the blank line ending the header block, and the header block's length.
fn header_end(buf: &[u8]) -> Option<(usize, usize)> {
    let lim = buf.len().min(MAX_HEADER + 4);
    let mut i = 0;
    while i < lim {
        if buf[i] == b'\n' {
            // "\n\n" or "\n\r\n"
            if buf.get(i + 1) == Some(&b'\n') {
                return Some((i + 2, i + 1));
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some((i + 3, i + 1));
            }
        }
        i += 1;
    }
    None
}

/// Parses one message at the start of `buf`. With `stream` (TCP) the body is Content-Length
/// bytes (0 without the header) and a short buffer is [`Parsed::Incomplete`]; without it
/// (a UDP datagram) the body is the rest of the datagram, clamped to Content-Length.
pub fn parse(buf: &[u8], stream: bool) -> Result<Parsed<'_>, SipError> {
    let Some((body_at, head_len)) = header_end(buf) else {
        if stream && buf.len() <= MAX_HEADER {
            return Ok(Parsed::Incomplete);
        }
        if !stream && buf.len() <= MAX_HEADER {
            // a datagram whose headers end with the datagram (no body, no blank line)
            return finish(buf, buf.len(), buf.len(), false);
        }
        return Err(SipError::Unterminated);
    };
    finish(buf, head_len, body_at, stream)
}

fn finish(
    buf: &[u8],
    head_len: usize,
    body_at: usize,
    stream: bool,
) -> Result<Parsed<'_>, SipError> {
    let head = &buf[..head_len];
    let mut lines = head.split(|&b| b == b'\n').map(trim_cr);
    let first = lines.next().ok_or(SipError::StartLine)?;
    let start = start_line(first).ok_or(SipError::StartLine)?;
    let mut m = Message {
        start,
        call_id: None,
        from: None,
        to: None,
        cseq: None,
        user_agent: None,
        server: None,
        content_type: None,
        content_length: None,
        body: &[],
    };
    for line in lines {
        if line.is_empty() || line[0] == b' ' || line[0] == b'\t' {
            continue;
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let Ok(name) = std::str::from_utf8(&line[..colon]) else {
            continue;
        };
        let Ok(value) = std::str::from_utf8(&line[colon + 1..]) else {
            continue;
        };
        let name = name.trim();
        let value = value.trim();
        let eq = |long: &str, short: &str| {
            name.eq_ignore_ascii_case(long)
                || (!short.is_empty() && name.eq_ignore_ascii_case(short))
        };
        if eq("call-id", "i") {
            m.call_id.get_or_insert(value);
        } else if eq("from", "f") {
            m.from.get_or_insert(value);
        } else if eq("to", "t") {
            m.to.get_or_insert(value);
        } else if eq("cseq", "") {
            let mut it = value.split_ascii_whitespace();
            if let (Some(n), Some(meth)) = (it.next(), it.next()) {
                if let Ok(n) = n.parse() {
                    m.cseq.get_or_insert((n, meth));
                }
            }
        } else if eq("user-agent", "") {
            m.user_agent.get_or_insert(value);
        } else if eq("server", "") {
            m.server.get_or_insert(value);
        } else if eq("content-type", "c") {
            m.content_type.get_or_insert(value);
        } else if eq("content-length", "l") {
            let n: usize = value.parse().map_err(|_| SipError::ContentLength)?;
            m.content_length.get_or_insert(n);
        }
    }
    let rest = &buf[body_at.min(buf.len())..];
    if stream {
        let n = m.content_length.unwrap_or(0);
        if n > MAX_BODY {
            return Err(SipError::ContentLength);
        }
        if rest.len() < n {
            return Ok(Parsed::Incomplete);
        }
        m.body = &rest[..n];
        Ok(Parsed::Complete(m, body_at + n))
    } else {
        let n = m.content_length.unwrap_or(rest.len()).min(rest.len());
        m.body = &rest[..n];
        Ok(Parsed::Complete(m, buf.len()))
    }
}

fn start_line(l: &[u8]) -> Option<Start<'_>> {
    let l = std::str::from_utf8(l).ok()?;
    if let Some(rest) = l.strip_prefix("SIP/2.0 ") {
        let (code, reason) = rest.split_once(' ').unwrap_or((rest, ""));
        if code.len() != 3 {
            return None;
        }
        let code: u16 = code.parse().ok()?;
        if !(100..=699).contains(&code) {
            return None;
        }
        return Some(Start::Response { code, reason });
    }
    let mut it = l.split(' ');
    let method = it.next()?;
    let uri = it.next()?;
    let version = it.next()?;
    if it.next().is_some() || version != "SIP/2.0" || method.is_empty() || uri.is_empty() {
        return None;
    }
    if !method
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-.!%*_+`'~".contains(&b))
    {
        return None;
    }
    Some(Start::Request { method, uri })
}

/// The URI of a From/To value (`"Alice" <sip:a@x>;tag=1` → `sip:a@x`).
pub fn uri_of(v: &str) -> &str {
    if let Some(lt) = v.find('<') {
        let rest = &v[lt + 1..];
        return rest.split('>').next().unwrap_or(rest).trim();
    }
    v.split(';').next().unwrap_or(v).trim()
}

/// The `tag` parameter of a From/To value.
pub fn tag_of(v: &str) -> Option<&str> {
    let params = match v.find('>') {
        Some(gt) => &v[gt + 1..],
        None => v,
    };
    params.split(';').skip(1).find_map(|p| {
        let (k, val) = p.split_once('=')?;
        k.trim().eq_ignore_ascii_case("tag").then(|| val.trim())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const INVITE: &[u8] = b"INVITE sip:bob@b.example SIP/2.0\r\n\
Via: SIP/2.0/UDP a.example;branch=z9hG4bK1\r\n\
f: \"Alice\" <sip:alice@a.example>;tag=1928\r\n\
To: <sip:bob@b.example>\r\n\
i: abc@a.example\r\n\
CSeq: 314159 INVITE\r\n\
User-Agent: softphone 1.0\r\n\
c: application/sdp\r\n\
l: 4\r\n\
\r\n\
v=0\r\nEXTRA";

    #[test]
    fn a_request_with_compact_headers() {
        let Parsed::Complete(m, used) = parse(INVITE, false).unwrap() else {
            panic!("incomplete")
        };
        assert_eq!(used, INVITE.len());
        assert_eq!(
            m.start,
            Start::Request {
                method: "INVITE",
                uri: "sip:bob@b.example"
            }
        );
        assert_eq!(m.call_id, Some("abc@a.example"));
        assert_eq!(m.cseq, Some((314159, "INVITE")));
        assert_eq!(m.user_agent, Some("softphone 1.0"));
        assert_eq!(m.body, b"v=0\r");
        assert!(m.has_sdp());
        assert_eq!(uri_of(m.from.unwrap()), "sip:alice@a.example");
        assert_eq!(tag_of(m.from.unwrap()), Some("1928"));
        assert_eq!(tag_of(m.to.unwrap()), None);
    }

    #[test]
    fn stream_framing_by_content_length() {
        let invite = &INVITE[..INVITE.len() - 6];
        let two = [
            invite,
            b"SIP/2.0 180 Ringing\r\nCall-ID: x\r\n\r\n".as_slice(),
        ]
        .concat();
        let Parsed::Complete(m, used) = parse(&two, true).unwrap() else {
            panic!()
        };
        assert_eq!(m.body, b"v=0\r");
        let Parsed::Complete(r, used2) = parse(&two[used..], true).unwrap() else {
            panic!()
        };
        assert_eq!(
            r.start,
            Start::Response {
                code: 180,
                reason: "Ringing"
            }
        );
        assert_eq!(used + used2, two.len());
        assert_eq!(parse(&two[..20], true).unwrap(), Parsed::Incomplete);
        // header complete, body short
        assert_eq!(
            parse(&invite[..invite.len() - 2], true).unwrap(),
            Parsed::Incomplete
        );
    }

    #[test]
    fn bad_messages_are_errors() {
        assert_eq!(parse(b"HELLO\r\n\r\n", false), Err(SipError::StartLine));
        assert_eq!(
            parse(b"SIP/2.0 99 x\r\n\r\n", false),
            Err(SipError::StartLine)
        );
        assert_eq!(
            parse(b"SIP/2.0 200 OK\r\nContent-Length: x\r\n\r\n", false),
            Err(SipError::ContentLength)
        );
        assert_eq!(
            parse(b"SIP/2.0 200 OK\r\nl: 99999999\r\n\r\n", true),
            Err(SipError::ContentLength)
        );
        assert!(looks_like_sip(INVITE));
        assert!(!looks_like_sip(b"INVITE me to dinner\n"));
        assert!(!looks_like_sip(b"\x80\x00"));
    }
}
