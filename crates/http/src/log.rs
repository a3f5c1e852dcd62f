//! Writing the analyzer's records: HTTP transactions as JSON lines (Zeek http.log's fields) or
//! in Apache's combined log format, TLS handshakes as JSON lines, each record one whole line.
//!
//! [`LogWriter`] gathers whole lines and writes them in large pieces ([`LogWriter::flush`]
//! after every [`FLUSH_BYTES`] and whenever its owner asks), so a reader of the file, or a
//! process killed in the middle, sees whole lines only up to the last flush.
//!
//! The combined format is `%h %l %u %t "%r" %>s %b "%{Referer}i" "%{User-agent}i"`: the
//! client address, `-` (identd), `-` (user), the request's time `[27/Nov/2026:01:02:03 +0000]`
//! (UTC), the request line, the final status, the response body bytes (`-` for none), the
//! Referer and the User-Agent. What the capture did not show is `-` (a response without its
//! request: `"-"` as request line; a request without a response: `-` as status). Text is
//! escaped the way Apache's `ap_escape_logitem` does: `"` and `\` with a backslash, `\n`,
//! `\r`, `\t`, and every other byte that is not printable ASCII as `\xhh`.

use std::io::{self, Write};

use crate::{Event, HttpRecord, Stats};

/// How HTTP transactions are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line, Zeek http.log's field names.
    #[default]
    Json,
    /// Apache's combined log format.
    Apache,
}

/// Bytes gathered before they are written.
pub const FLUSH_BYTES: usize = 1 << 20;

/// Writes HTTP records to one writer and TLS records (JSON) to another, in whole lines.
pub struct LogWriter<W: Write> {
    format: Format,
    http: (W, Vec<u8>),
    tls: Option<(W, Vec<u8>)>,
    /// HTTP records written.
    pub http_lines: u64,
    /// TLS records written.
    pub tls_lines: u64,
}

impl<W: Write> LogWriter<W> {
    /// HTTP records in `format` to `http`, TLS records to `tls` (dropped without one).
    pub fn new(format: Format, http: W, tls: Option<W>) -> LogWriter<W> {
        LogWriter {
            format,
            http: (http, Vec::with_capacity(FLUSH_BYTES)),
            tls: tls.map(|w| (w, Vec::with_capacity(1 << 16))),
            http_lines: 0,
            tls_lines: 0,
        }
    }

    /// One record; written out once enough lines are gathered.
    pub fn write(&mut self, e: &Event) -> io::Result<()> {
        match e {
            Event::Http(r) => {
                let buf = &mut self.http.1;
                match self.format {
                    Format::Json => serde_json::to_writer(&mut *buf, r)?,
                    Format::Apache => apache_line(buf, r),
                }
                buf.push(b'\n');
                self.http_lines += 1;
            }
            Event::Tls(r) => {
                let Some((_, buf)) = &mut self.tls else {
                    return Ok(());
                };
                serde_json::to_writer(&mut *buf, r)?;
                buf.push(b'\n');
                self.tls_lines += 1;
            }
        }
        if self.http.1.len() >= FLUSH_BYTES
            || self.tls.as_ref().is_some_and(|t| t.1.len() >= FLUSH_BYTES)
        {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes every gathered line and flushes the writers.
    pub fn flush(&mut self) -> io::Result<()> {
        for (w, buf) in std::iter::once(&mut self.http).chain(self.tls.as_mut()) {
            if !buf.is_empty() {
                let r = w.write_all(buf);
                buf.clear();
                r?;
            }
            w.flush()?;
        }
        Ok(())
    }

    /// Flushes and hands back the writers.
    pub fn into_inner(mut self) -> io::Result<(W, Option<W>)> {
        self.flush()?;
        Ok((self.http.0, self.tls.map(|t| t.0)))
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Apache's escaping of a logged item (`ap_escape_logitem`).
fn escaped(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x20..=0x7e => out.push(b),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
}

fn quoted_or_dash(out: &mut Vec<u8>, s: Option<&str>) {
    out.push(b'"');
    match s {
        Some(s) => escaped(out, s),
        None => out.push(b'-'),
    }
    out.push(b'"');
}

/// The combined log format line of `r` (without its line end).
pub fn apache_line(out: &mut Vec<u8>, r: &HttpRecord) {
    let secs = if r.id.ts.is_finite() && r.id.ts > 0.0 {
        r.id.ts.floor() as u64
    } else {
        0
    };
    let t = weir_packet::Utc::from_ns(secs.saturating_mul(1_000_000_000));
    let _ = write!(
        out,
        "{} - - [{:02}/{}/{:04}:{:02}:{:02}:{:02} +0000] ",
        r.id.orig_h,
        t.day,
        MONTHS[(t.month as usize).clamp(1, 12) - 1],
        t.year,
        t.hour,
        t.minute,
        t.second
    );
    match &r.method {
        Some(m) => {
            out.push(b'"');
            escaped(out, m);
            out.push(b' ');
            escaped(out, r.uri.as_deref().unwrap_or(""));
            if let Some(v) = &r.version {
                out.extend_from_slice(b" HTTP/");
                escaped(out, v);
            }
            out.push(b'"');
        }
        None => out.extend_from_slice(b"\"-\""),
    }
    let _ = match r.status_code {
        Some(c) => write!(out, " {c} "),
        None => write!(out, " - "),
    };
    let _ = match r.response_body_len {
        0 => write!(out, "- "),
        n => write!(out, "{n} "),
    };
    quoted_or_dash(out, r.referrer.as_deref());
    out.push(b' ');
    quoted_or_dash(out, r.user_agent.as_deref());
}

impl std::fmt::Display for Stats {
    /// The two summary lines of `weir http`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self;
        writeln!(
            f,
            "weir: {} http transactions ({} requests, {} responses, {} orphan responses) in {} \
             connections; {} tls handshakes in {} connections; {} packets, {} tcp",
            s.http_records,
            s.http.requests,
            s.http.responses,
            s.http.orphan_responses,
            s.http_flows,
            s.tls_records,
            s.tls_flows,
            s.packets,
            s.tcp_packets
        )?;
        writeln!(
            f,
            "weir: reassembly: {} gaps ({} bytes), {} retransmitted bytes, {} conflicting overlap \
             bytes, {} out-of-order segments, {} bytes evicted ({} evictions), {} connections \
             evicted, {} timed out; {} http parse errors, {} tls errors",
            s.stream.gaps,
            s.stream.gap_bytes,
            s.stream.retransmitted_bytes,
            s.stream.overlap_conflicts,
            s.stream.out_of_order_segments,
            s.stream.evicted_bytes,
            s.pending_evictions,
            s.flows_evicted,
            s.flows_timed_out,
            s.http.parse_errors,
            s.tls.errors
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{http::End, ConnId};

    fn record() -> HttpRecord {
        HttpRecord {
            id: ConnId {
                // 2026-11-27 01:02:03.75 UTC
                ts: 1_795_741_323.75,
                uid: "1:x".into(),
                orig_h: "10.1.2.3".parse().unwrap(),
                orig_p: 40000,
                resp_h: "10.9.9.9".parse().unwrap(),
                resp_p: 80,
            },
            trans_depth: 1,
            method: Some("GET".into()),
            host: Some("h".into()),
            uri: Some("/a b?\"q\"".into()),
            referrer: None,
            version: Some("1.1".into()),
            user_agent: Some("curl/7.88.1 \\ é\t".into()),
            request_body_len: 0,
            response_body_len: 1234,
            status_code: Some(404),
            status_msg: Some("Not Found".into()),
            info_code: None,
            info_msg: None,
            request_content_type: None,
            response_content_type: None,
            ttfb: None,
            duration: 0.0,
            gap_bytes: 0,
            end: End::Complete,
        }
    }

    /// A hand-built transaction, its line written out by hand from the format's definition
    /// (1795741323 s = 2026-11-27 01:02:03 UTC: 20 784 days after 1970-01-01, plus 3 723 s).
    #[test]
    fn combined_format_by_hand() {
        let mut out = Vec::new();
        apache_line(&mut out, &record());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "10.1.2.3 - - [27/Nov/2026:01:02:03 +0000] \"GET /a b?\\\"q\\\" HTTP/1.1\" 404 1234 \
             \"-\" \"curl/7.88.1 \\\\ \\xc3\\xa9\\t\""
        );
        // no request, no response body, no status: dashes
        let mut r = record();
        r.method = None;
        r.status_code = None;
        r.response_body_len = 0;
        r.referrer = Some("http://r/".into());
        r.user_agent = None;
        let mut out = Vec::new();
        apache_line(&mut out, &r);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "10.1.2.3 - - [27/Nov/2026:01:02:03 +0000] \"-\" - - \"http://r/\" \"-\""
        );
    }
}
