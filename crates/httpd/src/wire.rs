//! The wire pieces both ends use: percent-encoded query strings, a line-by-line message head
//! reader (the client's, for status lines), and chunked transfer encoding, so that a body cut
//! short (the server failed while streaming) is told from a complete one by the missing last
//! chunk. Moved here from weir-store's `http` module (`weir serve` / `weir extract --sensor`).

use std::io::{self, BufRead, Read, Write};

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// Decodes a percent-encoded query value (`+` is a space); `None` when malformed.
pub fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut o = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                o.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                o.push(b' ');
                i += 1;
            }
            c => {
                o.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(o).ok()
}

/// The `key=value` pairs of a query string, decoded; `None` when one is malformed.
pub fn query_pairs(q: &str) -> Option<Vec<(String, String)>> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            Some((decode(k)?, decode(v)?))
        })
        .collect()
}

/// Reads a message head (request or status line and headers) up to the blank line: the first
/// line and the headers as (lower-case name, value). At most 64 KiB.
pub fn read_head(r: &mut impl BufRead) -> io::Result<(String, Vec<(String, String)>)> {
    let mut lines = Vec::new();
    let mut total = 0;
    loop {
        let mut line = String::new();
        let n = r.take(8192).read_line(&mut line)?;
        total += n;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed in the HTTP head",
            ));
        }
        if total > 65536 || !line.ends_with('\n') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "HTTP head too long",
            ));
        }
        let line = line.trim_end_matches(['\r', '\n']).to_owned();
        if line.is_empty() {
            break;
        }
        lines.push(line);
    }
    let mut it = lines.into_iter();
    let first = it.next().unwrap_or_default();
    let headers = it
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        })
        .collect();
    Ok((first, headers))
}

/// A writer that sends what is written as HTTP chunks; [`finish`](Self::finish) sends the
/// last chunk. Dropped without `finish`, the body stays incomplete, as it should when the
/// server failed.
#[derive(Debug)]
pub struct ChunkedWriter<W: Write> {
    inner: W,
}

impl<W: Write> ChunkedWriter<W> {
    /// Chunks into `inner` (buffer it: every write is a chunk).
    pub fn new(inner: W) -> Self {
        ChunkedWriter { inner }
    }

    /// Sends the last (empty) chunk and flushes.
    pub fn finish(mut self) -> io::Result<W> {
        self.inner.write_all(b"0\r\n\r\n")?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for ChunkedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        write!(self.inner, "{:x}\r\n", buf.len())?;
        self.inner.write_all(buf)?;
        self.inner.write_all(b"\r\n")?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads a chunked body; a body that ends without its last chunk is an `UnexpectedEof` error.
#[derive(Debug)]
pub struct ChunkedReader<R: BufRead> {
    inner: R,
    /// Bytes left in the current chunk.
    left: u64,
    done: bool,
}

impl<R: BufRead> ChunkedReader<R> {
    /// Reads the chunks of `inner` (positioned after the head).
    pub fn new(inner: R) -> Self {
        ChunkedReader {
            inner,
            left: 0,
            done: false,
        }
    }
}

fn cut() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the response ended before its last chunk (the sensor failed while sending)",
    )
}

impl<R: BufRead> Read for ChunkedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let mut line = String::new();
            if (&mut self.inner).take(1024).read_line(&mut line)? == 0 {
                return Err(cut());
            }
            let size = line.trim_end().split(';').next().unwrap_or("");
            self.left = u64::from_str_radix(size, 16)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad HTTP chunk size"))?;
            if self.left == 0 {
                // trailer section: lines up to a blank one
                loop {
                    line.clear();
                    if (&mut self.inner).take(8192).read_line(&mut line)? == 0 {
                        return Err(cut());
                    }
                    if line.trim_end().is_empty() {
                        break;
                    }
                }
                self.done = true;
                return Ok(0);
            }
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(cut());
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf).map_err(|_| cut())?;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_encoding_round_trips() {
        let s = "host 10.0.0.1 and (port 80 or port 443) & é+%";
        assert_eq!(decode(&encode(s)).unwrap(), s);
        assert_eq!(decode("a+b%20c").unwrap(), "a b c");
        assert!(decode("%zz").is_none() && decode("%4").is_none());
        assert_eq!(
            query_pairs("from=1&filter=tcp%20port%2080").unwrap(),
            [
                ("from".into(), "1".into()),
                ("filter".into(), "tcp port 80".into())
            ]
        );
    }

    #[test]
    fn chunks_round_trip_and_a_cut_body_is_an_error() {
        let mut w = ChunkedWriter::new(Vec::new());
        w.write_all(b"hello ").unwrap();
        w.write_all(b"world").unwrap();
        let bytes = w.finish().unwrap();
        assert_eq!(bytes, b"6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n");
        let mut s = String::new();
        ChunkedReader::new(&bytes[..])
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "hello world");
        let cut_at = bytes.len() - 5;
        let e = ChunkedReader::new(&bytes[..cut_at])
            .read_to_string(&mut String::new())
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
