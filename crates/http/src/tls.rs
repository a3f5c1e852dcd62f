//! The TLS handshake facts an operator needs for HTTPS: the ClientHello's server name (SNI) and
//! ALPN list, the ServerHello's version (the `supported_versions` extension's choice when
//! present, so TLS 1.3 reads as 1.3), cipher suite and chosen ALPN protocol.
//!
//! The record layer is parsed by hand with bounds checks on every length: records of content
//! type 20 to 24 and version 3.x, at most 2^14 + 2048 bytes each; handshake fragments are joined
//! across records (at most [`MAX_HANDSHAKE`] bytes) until the hello message is whole. The hello
//! bodies are read by `tls-parser`; the extensions of interest by hand, so one malformed
//! extension does not hide the others. Anything else (SSLv2, a bad length, a message too long)
//! ends the side's parsing and is counted; nothing panics on hostile bytes. The ClientHello's
//! JA4 fingerprint ([`crate::ja4`]) is computed from the same parse.

use weir_packet::bytes::be16_checked;

/// Most handshake bytes joined for one hello message.
pub const MAX_HANDSHAKE: usize = 64 * 1024;
/// Largest TLS record accepted (TLSCiphertext's bound).
const MAX_RECORD: usize = (1 << 14) + 2048;

/// What the TLS parser found in one connection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) ts_ns: u64,
    pub(crate) client_version: Option<u16>,
    pub(crate) server_name: Option<String>,
    pub(crate) alpn: Vec<String>,
    pub(crate) client_supported_versions: Vec<u16>,
    pub(crate) version: Option<u16>,
    pub(crate) cipher: Option<u16>,
    pub(crate) next_protocol: Option<String>,
    pub(crate) established: bool,
    pub(crate) client_hello: bool,
    pub(crate) ja4: Option<String>,
}

/// Counters of the TLS parser.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TlsStats {
    /// ClientHello messages parsed.
    pub client_hellos: u64,
    /// ServerHello messages parsed.
    pub server_hellos: u64,
    /// Records or hello messages refused (bad lengths, not TLS, truncated).
    pub errors: u64,
}

#[derive(Debug, Default)]
struct Side {
    buf: Vec<u8>,
    hs: Vec<u8>,
    done: bool,
}

/// The TLS state of one connection.
#[derive(Debug, Default)]
pub(crate) struct Tls {
    client: Side,
    server: Side,
    pub(crate) hello: Hello,
    pub(crate) stats: TlsStats,
}

/// The name Zeek's ssl.log gives a version.
pub(crate) fn version_name(v: u16) -> String {
    match v {
        0x0300 => "SSLv3".into(),
        0x0301 => "TLSv10".into(),
        0x0302 => "TLSv11".into(),
        0x0303 => "TLSv12".into(),
        0x0304 => "TLSv13".into(),
        0x7f00..=0x7fff => format!("TLSv13-draft{}", v & 0xff),
        _ => format!("0x{v:04x}"),
    }
}

/// The IANA name of a cipher suite, or its number.
pub(crate) fn cipher_name(id: u16) -> String {
    tls_parser::TlsCipherSuite::from_id(id)
        .map(|c| c.name.to_string())
        .unwrap_or_else(|| format!("0x{id:04x}"))
}

/// Walks a hello's extension block: `(type, data)` pairs, stopping at the first bad length.
fn extensions(mut ext: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let ty = be16_checked(ext, 0)?;
        let len = usize::from(be16_checked(ext, 2)?);
        let data = ext.get(4..4 + len)?;
        ext = &ext[4 + len..];
        Some((ty, data))
    })
}

/// The list of a u16-length-prefixed vector of u8-length-prefixed strings (ALPN).
fn alpn_list(d: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let Some(total) = be16_checked(d, 0) else {
        return out;
    };
    let mut l = d.get(2..2 + usize::from(total)).unwrap_or(&d[2..]);
    while let Some((&n, rest)) = l.split_first() {
        let Some(name) = rest.get(..usize::from(n)) else {
            break;
        };
        out.push(String::from_utf8_lossy(name).into_owned());
        l = &rest[usize::from(n)..];
    }
    out
}

/// A vector of u16 behind a length prefix of `prefix` bytes (1 or 2); empty when cut short.
fn u16_list(d: &[u8], prefix: usize) -> Vec<u16> {
    let n = match prefix {
        1 => d.first().map_or(0, |&n| usize::from(n)),
        _ => be16_checked(d, 0).map_or(0, usize::from),
    };
    d.get(prefix..prefix + n)
        .unwrap_or(&[])
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect()
}

/// The raw bytes of the first ALPN value (JA4 reads its first and last byte).
fn first_alpn(d: &[u8]) -> Option<Vec<u8>> {
    let l = d.get(2..)?;
    let (&n, rest) = l.split_first()?;
    rest.get(..usize::from(n)).map(<[u8]>::to_vec)
}

/// The host name of a server_name extension.
fn sni(d: &[u8]) -> Option<String> {
    let total = usize::from(be16_checked(d, 0)?);
    let mut l = d.get(2..2 + total)?;
    while l.len() >= 3 {
        let ty = l[0];
        let n = usize::from(be16_checked(l, 1)?);
        let name = l.get(3..3 + n)?;
        if ty == 0 {
            return Some(String::from_utf8_lossy(name).into_owned());
        }
        l = &l[3 + n..];
    }
    None
}

/// True when `b` starts like a TLS handshake record (type 22, version 3.x).
pub(crate) fn looks_like_tls(b: &[u8]) -> bool {
    b.len() >= 3 && b[0] == 22 && b[1] == 3 && b[2] <= 4
}

impl Tls {
    /// Both hellos were seen, or both sides gave up: nothing more to read.
    pub(crate) fn finished(&self) -> bool {
        self.client.done && self.server.done
    }

    /// Bytes from the client (`client`) or the server.
    pub(crate) fn data(&mut self, client: bool, ts: u64, data: &[u8]) {
        let side = if client {
            &mut self.client
        } else {
            &mut self.server
        };
        if side.done {
            return;
        }
        side.buf.extend_from_slice(data);
        let mut pos = 0;
        let mut failed = false;
        let mut messages: Vec<Vec<u8>> = Vec::new();
        while side.buf.len() - pos >= 5 {
            let h = &side.buf[pos..];
            let (ct, major, len) = (h[0], h[1], usize::from(u16::from_be_bytes([h[3], h[4]])));
            if !(20..=24).contains(&ct) || major != 3 || len > MAX_RECORD {
                failed = true;
                break;
            }
            if h.len() < 5 + len {
                break;
            }
            if ct != 22 {
                // ChangeCipherSpec, alert or data before the hello: the handshake is over for
                // the parts in clear.
                side.done = true;
                break;
            }
            side.hs.extend_from_slice(&h[5..5 + len]);
            pos += 5 + len;
            // Whole handshake messages.
            while side.hs.len() >= 4 {
                let mlen = (usize::from(side.hs[1]) << 16)
                    | (usize::from(side.hs[2]) << 8)
                    | usize::from(side.hs[3]);
                if mlen + 4 > MAX_HANDSHAKE {
                    failed = true;
                    break;
                }
                if side.hs.len() < 4 + mlen {
                    break;
                }
                messages.push(side.hs.drain(..4 + mlen).collect());
            }
            if failed || side.hs.len() > MAX_HANDSHAKE {
                failed = true;
                break;
            }
        }
        side.buf.drain(..pos);
        if side.buf.len() > MAX_HANDSHAKE {
            failed = true;
        }
        for m in messages {
            self.message(client, ts, &m);
        }
        let side = if client {
            &mut self.client
        } else {
            &mut self.server
        };
        if failed && !side.done {
            self.stats.errors += 1;
            side.done = true;
        }
        if side.done {
            side.buf = Vec::new();
            side.hs = Vec::new();
        }
    }

    /// Bytes missing: the record boundary is lost, so this side stops.
    pub(crate) fn gap(&mut self, client: bool) {
        let side = if client {
            &mut self.client
        } else {
            &mut self.server
        };
        side.done = true;
        side.buf = Vec::new();
        side.hs = Vec::new();
    }

    /// One whole handshake message (type, 24-bit length, body).
    fn message(&mut self, client: bool, ts: u64, m: &[u8]) {
        let body = &m[4..];
        match (client, m[0]) {
            (true, 1) => {
                let Ok((_, ch)) = tls_parser::parse_tls_handshake_client_hello(body) else {
                    self.stats.errors += 1;
                    self.client.done = true;
                    return;
                };
                self.stats.client_hellos += 1;
                let h = &mut self.hello;
                h.client_hello = true;
                h.ts_ns = ts;
                h.client_version = Some(ch.version.0);
                let mut facts = crate::ja4::ClientHelloFacts {
                    version: ch.version.0,
                    ciphers: ch.ciphers.iter().map(|c| c.0).collect(),
                    ..Default::default()
                };
                for (ty, d) in extensions(ch.ext.unwrap_or(&[])) {
                    facts.extensions.push(ty);
                    match ty {
                        0 => h.server_name = sni(d),
                        13 => facts.signature_algorithms = u16_list(d, 2),
                        16 => {
                            h.alpn = alpn_list(d);
                            facts.first_alpn = first_alpn(d);
                        }
                        43 => {
                            h.client_supported_versions = u16_list(d, 1);
                            facts.supported_versions = h.client_supported_versions.clone();
                        }
                        _ => {}
                    }
                }
                h.ja4 = Some(crate::ja4::ja4(&facts));
                self.client.done = true;
            }
            (false, 2) => {
                let Ok((_, sh)) = tls_parser::parse_tls_handshake_server_hello(body) else {
                    self.stats.errors += 1;
                    self.server.done = true;
                    return;
                };
                self.stats.server_hellos += 1;
                let h = &mut self.hello;
                if !h.client_hello {
                    h.ts_ns = ts;
                }
                h.established = true;
                h.version = Some(sh.version.0);
                h.cipher = Some(sh.cipher.0);
                for (ty, d) in extensions(sh.ext.unwrap_or(&[])) {
                    match ty {
                        16 => h.next_protocol = alpn_list(d).into_iter().next(),
                        43 => {
                            if let Some(v) = be16_checked(d, 0) {
                                h.version = Some(v);
                            }
                        }
                        _ => {}
                    }
                }
                self.server.done = true;
            }
            // Other messages before the hello (HelloRequest): skipped.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello with SNI "example.com", ALPN h2 + http/1.1 and supported_versions 1.3/1.2.
    pub(crate) fn client_hello() -> Vec<u8> {
        let mut ext = Vec::new();
        let name = b"example.com";
        let mut sni = vec![];
        sni.extend_from_slice(&((name.len() + 3) as u16).to_be_bytes());
        sni.push(0);
        sni.extend_from_slice(&(name.len() as u16).to_be_bytes());
        sni.extend_from_slice(name);
        ext.extend_from_slice(&0u16.to_be_bytes());
        ext.extend_from_slice(&(sni.len() as u16).to_be_bytes());
        ext.extend_from_slice(&sni);
        let alpn = b"\x00\x0c\x02h2\x08http/1.1";
        ext.extend_from_slice(&16u16.to_be_bytes());
        ext.extend_from_slice(&(alpn.len() as u16).to_be_bytes());
        ext.extend_from_slice(alpn);
        let sv = b"\x04\x03\x04\x03\x03";
        ext.extend_from_slice(&43u16.to_be_bytes());
        ext.extend_from_slice(&(sv.len() as u16).to_be_bytes());
        ext.extend_from_slice(sv);
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 2, 0x13, 0x01, 1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut hs = vec![1, 0];
        hs.extend_from_slice(&(body.len() as u16).to_be_bytes());
        hs.extend_from_slice(&body);
        let mut rec = vec![22, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn client_hello_split_across_segments() {
        let ch = client_hello();
        let mut t = Tls::default();
        for piece in ch.chunks(7) {
            t.data(true, 5, piece);
        }
        assert_eq!(t.hello.server_name.as_deref(), Some("example.com"));
        assert_eq!(t.hello.alpn, vec!["h2", "http/1.1"]);
        assert_eq!(t.hello.client_supported_versions, vec![0x0304, 0x0303]);
        assert_eq!(t.stats.client_hellos, 1);
    }

    #[test]
    fn truncations_and_mutations_never_panic() {
        let ch = client_hello();
        for cut in 0..ch.len() {
            let mut t = Tls::default();
            t.data(true, 0, &ch[..cut]);
            for i in 0..ch.len() {
                let mut m = ch.clone();
                m[i] ^= 0xff;
                let mut t = Tls::default();
                t.data(true, 0, &m[..cut.max(i)]);
            }
        }
    }
}
