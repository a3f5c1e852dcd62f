//! The JA4 fingerprint of a TLS ClientHello (FoxIO's JA4, the `ja4` of the JA4+ suite; the
//! specification is FoxIO's technical details, BSD-licensed, written down here):
//!
//! `t` (TCP) + version + `d`/`i` (SNI present or not) + cipher count (2 digits) + extension
//! count (2 digits) + ALPN (first and last character of the first value, `00` without one)
//! `_` the first 12 hex digits of SHA-256 of the cipher suites (4 hex digits each, sorted,
//! comma-joined) `_` the first 12 hex digits of SHA-256 of the extensions (sorted, without
//! server_name 0x0000 and ALPN 0x0010) joined with `_` and the signature algorithms in their
//! order (comma-joined; nothing after the extensions when the hello has none).
//!
//! GREASE values (RFC 8701: 0x?A?A with both bytes equal) are left out everywhere. The version
//! is the highest of the supported_versions extension, else the hello's version field. Counts
//! stop at 99. An ALPN value whose first or last byte is not an ASCII letter or digit gives the
//! first and last hex digits of the value instead. An empty list hashes to `000000000000`.
//!
//! Checked against two independent implementations (FoxIO's reference `ja4.py` by hand, the
//! `ja4plus` package in the tests) on every ClientHello of the corpus.

use sha2::{Digest, Sha256};

/// What JA4 reads from a ClientHello.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientHelloFacts {
    /// The hello's version field.
    pub version: u16,
    /// The cipher suites, in order.
    pub ciphers: Vec<u16>,
    /// The extension types, in order.
    pub extensions: Vec<u16>,
    /// The supported_versions extension's list.
    pub supported_versions: Vec<u16>,
    /// The signature_algorithms extension's list, in order.
    pub signature_algorithms: Vec<u16>,
    /// The first ALPN value's bytes, if any.
    pub first_alpn: Option<Vec<u8>>,
}

/// True for a GREASE value (RFC 8701).
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// JA4's two characters for a TLS version.
fn version(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 | 0x0200 => "s2",
        0xfeff => "d1",
        0xfefd => "d2",
        0xfefc => "d3",
        _ => "00",
    }
}

/// The first 12 hex digits of SHA-256 of `s`; `000000000000` for an empty `s`.
fn hash12(s: &str) -> String {
    if s.is_empty() {
        return "000000000000".into();
    }
    let d = Sha256::digest(s.as_bytes());
    d.iter().take(6).map(|b| format!("{b:02x}")).collect()
}

/// Values as 4 lowercase hex digits, comma-joined.
fn hex_list(v: &[u16]) -> String {
    v.iter()
        .map(|x| format!("{x:04x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// JA4's ALPN part.
fn alpn(first: Option<&[u8]>) -> String {
    let Some(a) = first.filter(|a| !a.is_empty()) else {
        return "00".into();
    };
    let (f, l) = (a[0], a[a.len() - 1]);
    if f.is_ascii_alphanumeric() && l.is_ascii_alphanumeric() {
        format!("{}{}", f as char, l as char)
    } else {
        let hex = format!("{f:02x}{l:02x}");
        format!("{}{}", &hex[..1], &hex[3..])
    }
}

/// The JA4 fingerprint of a ClientHello over TCP.
pub fn ja4(h: &ClientHelloFacts) -> String {
    let ciphers: Vec<u16> = h
        .ciphers
        .iter()
        .copied()
        .filter(|c| !is_grease(*c))
        .collect();
    let exts: Vec<u16> = h
        .extensions
        .iter()
        .copied()
        .filter(|e| !is_grease(*e))
        .collect();
    let ver = h
        .supported_versions
        .iter()
        .copied()
        .filter(|v| !is_grease(*v))
        .max()
        .unwrap_or(h.version);
    let sni = if exts.contains(&0) { 'd' } else { 'i' };
    let a = format!(
        "t{}{sni}{:02}{:02}{}",
        version(ver),
        ciphers.len().min(99),
        exts.len().min(99),
        alpn(h.first_alpn.as_deref())
    );
    let mut sorted = ciphers;
    sorted.sort_unstable();
    let b = hash12(&hex_list(&sorted));
    let mut e: Vec<u16> = exts.into_iter().filter(|&x| x != 0 && x != 0x10).collect();
    e.sort_unstable();
    let sigs: Vec<u16> = h
        .signature_algorithms
        .iter()
        .copied()
        .filter(|s| !is_grease(*s))
        .collect();
    let mut c_in = hex_list(&e);
    if !sigs.is_empty() {
        c_in.push('_');
        c_in.push_str(&hex_list(&sigs));
    }
    let c = if e.is_empty() {
        "000000000000".to_string()
    } else {
        hash12(&c_in)
    };
    format!("{a}_{b}_{c}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIPS 180-2's SHA-256 test vector ("abc"), the first 12 hex digits.
    #[test]
    fn hash12_is_sha256s_first_six_bytes() {
        assert_eq!(hash12("abc"), "ba7816bf8f01");
        assert_eq!(hash12(""), "000000000000");
    }

    #[test]
    fn grease_and_alpn_rules() {
        assert!(is_grease(0x0a0a) && is_grease(0xfafa) && !is_grease(0x0a1a));
        assert_eq!(alpn(Some(b"h2")), "h2");
        assert_eq!(alpn(Some(b"http/1.1")), "h1");
        assert_eq!(alpn(None), "00");
        // 0xab .. 0xcd: first hex digit of the first byte, last of the last
        assert_eq!(alpn(Some(&[0xab, b'x', 0xcd])), "ad");
    }

    /// FoxIO's published example (its python README: a Chrome hello to www.google.com; the
    /// JA4_ro line gives the original orders): JA4 t13d1516h2_8daaf6152771_e5627efa2ab1.
    #[test]
    fn foxios_published_example() {
        let h = ClientHelloFacts {
            version: 0x0303,
            ciphers: vec![
                0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013,
                0xc014, 0x009c, 0x009d, 0x002f, 0x0035,
            ],
            extensions: vec![
                0x0a0a, 0xff01, 0x0033, 0x002d, 0x0005, 0x4469, 0x000d, 0x0010, 0x0023, 0x001b,
                0x002b, 0x0000, 0x0012, 0x000a, 0x0017, 0x000b, 0x0015,
            ],
            supported_versions: vec![0x3a3a, 0x0304, 0x0303],
            signature_algorithms: vec![
                0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
            ],
            first_alpn: Some(b"h2".to_vec()),
        };
        assert_eq!(ja4(&h), "t13d1516h2_8daaf6152771_e5627efa2ab1");
    }
}
