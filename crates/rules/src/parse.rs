//! The rule-file parser: one rule per line, whitespace-separated words, errors that name the
//! line and column. Hand-written (no allocation for a line without quoted strings), so a million
//! exact rules parse in a fraction of a second. The format is described in the crate
//! documentation and in `RULES.md`.

use core::net::{IpAddr, Ipv6Addr};
use std::borrow::Cow;

use crate::fields::{addr_bits, NO_VLAN};
use crate::rule::{
    Action, Base, ByteMatch, ExactKey, Match, PortRange, Prefix, Rule, RuleId, RuleSet, SliceTo,
    Tag, Verdict, WildMatch,
};

/// A rule file that could not be parsed: where, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column (in bytes) of the offending word.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// One word of a line.
struct Tok<'a> {
    /// 1-based column.
    col: usize,
    text: Cow<'a, str>,
    quoted: bool,
}

struct Lexer<'a> {
    line: &'a str,
    pos: usize,
    lineno: usize,
}

impl<'a> Lexer<'a> {
    fn err<T>(&self, col: usize, message: impl Into<String>) -> Result<T, ParseError> {
        Err(ParseError {
            line: self.lineno,
            column: col,
            message: message.into(),
        })
    }

    fn next(&mut self) -> Result<Option<Tok<'a>>, ParseError> {
        let b = self.line.as_bytes();
        while self.pos < b.len() && b[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        if self.pos >= b.len() || b[self.pos] == b'#' {
            self.pos = b.len();
            return Ok(None);
        }
        let start = self.pos;
        if b[start] == b'"' {
            let mut out = String::new();
            let mut i = start + 1;
            loop {
                let Some(&c) = b.get(i) else {
                    return self.err(start + 1, "unterminated quoted string");
                };
                match c {
                    b'"' => break,
                    b'\\' => {
                        let Some(&e) = b.get(i + 1) else {
                            return self.err(i + 1, "backslash at end of line");
                        };
                        match e {
                            b'\\' => out.push('\\'),
                            b'"' => out.push('"'),
                            b'n' => out.push('\n'),
                            b'r' => out.push('\r'),
                            b't' => out.push('\t'),
                            b'x' => {
                                let hex = self.line.get(i + 2..i + 4).unwrap_or("");
                                let Ok(v) = u8::from_str_radix(hex, 16) else {
                                    return self.err(i + 1, "\\x needs two hex digits");
                                };
                                // a byte, possibly not UTF-8: kept as a char in 0..=255 and
                                // turned back into one byte by `bytes_of`
                                out.push(char::from(v));
                                i += 2;
                            }
                            _ => {
                                return self
                                    .err(i + 1, "unknown escape (use \\\\ \\\" \\n \\r \\t \\xNN)")
                            }
                        }
                        i += 2;
                    }
                    _ => {
                        let ch = self.line[i..].chars().next().unwrap_or('\u{fffd}');
                        out.push(ch);
                        i += ch.len_utf8();
                    }
                }
            }
            self.pos = i + 1;
            return Ok(Some(Tok {
                col: start + 1,
                text: Cow::Owned(out),
                quoted: true,
            }));
        }
        while self.pos < b.len() && !b[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
        Ok(Some(Tok {
            col: start + 1,
            text: Cow::Borrowed(&self.line[start..self.pos]),
            quoted: false,
        }))
    }

    /// The next word, or an error saying what was expected after `after`.
    fn want(&mut self, after: &Tok<'_>, what: &str) -> Result<Tok<'a>, ParseError> {
        match self.next()? {
            Some(t) => Ok(t),
            None => self.err(
                self.line.len() + 1,
                format!("`{}` needs {what}", after.text),
            ),
        }
    }
}

/// Bytes of a quoted string: chars below 256 from `\xNN` escapes become single bytes.
fn bytes_of(s: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(s.len());
    for c in s.chars() {
        if (c as u32) < 256 {
            v.push(c as u32 as u8);
        } else {
            let mut buf = [0; 4];
            v.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    v
}

fn num<T: core::str::FromStr>(lx: &Lexer<'_>, t: &Tok<'_>, what: &str) -> Result<T, ParseError> {
    t.text
        .parse()
        .or_else(|_| lx.err(t.col, format!("expected {what}, found `{}`", t.text)))
}

/// Parses a size with an optional k/m/g suffix (powers of 1024).
fn size(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<u64, ParseError> {
    let s = t.text.to_ascii_lowercase();
    let s = s.trim_end_matches('b');
    let (digits, mul) = match s.as_bytes().last() {
        Some(b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mul))
        .map_or_else(
            || {
                lx.err(
                    t.col,
                    format!("expected a size like 4096 or 4k, found `{}`", t.text),
                )
            },
            Ok,
        )
}

fn proto(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<u8, ParseError> {
    Ok(match &*t.text {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmp6" | "icmpv6" => 58,
        "sctp" => 132,
        "gre" => 47,
        "esp" => 50,
        "ah" => 51,
        _ => num(
            lx,
            t,
            "a protocol (tcp, udp, icmp, icmp6, sctp, gre, esp, ah or 0-255)",
        )?,
    })
}

fn addr(lx: &Lexer<'_>, col: usize, s: &str) -> Result<(u8, u128), ParseError> {
    s.parse::<IpAddr>()
        .map(addr_bits)
        .or_else(|_| lx.err(col, format!("expected an IP address, found `{s}`")))
}

fn prefix(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<Prefix, ParseError> {
    let (a, len) = match t.text.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (&*t.text, None),
    };
    let (family, bits) = addr(lx, t.col, a)?;
    let width = if family == 4 { 32 } else { 128 };
    let len = match len {
        None => width,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= width => n,
            _ => return lx.err(t.col, format!("bad prefix length `/{l}` (0-{width})")),
        },
    };
    Ok(Prefix {
        family,
        addr: bits & Prefix::mask(family, len),
        len,
    })
}

fn port_range(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<PortRange, ParseError> {
    let (lo, hi) = match t.text.split_once('-') {
        Some((a, b)) => (a, b),
        None => (&*t.text, &*t.text),
    };
    match (lo.parse::<u16>(), hi.parse::<u16>()) {
        (Ok(lo), Ok(hi)) if lo <= hi => Ok(PortRange { lo, hi }),
        _ => lx.err(
            t.col,
            format!("expected a port or a range A-B, found `{}`", t.text),
        ),
    }
}

/// An endpoint `ADDR`, `ADDR:PORT`, `[V6]:PORT` or a bare IPv6 address.
fn endpoint(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<(u8, u128, u16), ParseError> {
    let s = &*t.text;
    let port = |p: &str| -> Result<u16, ParseError> {
        p.parse()
            .or_else(|_| lx.err(t.col, format!("bad port `{p}` in `{s}`")))
    };
    if let Some(rest) = s.strip_prefix('[') {
        let Some((a, p)) = rest.split_once("]:") else {
            return lx.err(t.col, format!("expected [IPV6]:PORT, found `{s}`"));
        };
        let v6: Ipv6Addr = a
            .parse()
            .or_else(|_| lx.err(t.col, format!("bad IPv6 address `{a}`")))?;
        return Ok((6, u128::from(v6), port(p)?));
    }
    if let Some(i) = s.find(':') {
        if !s[i + 1..].contains(':') {
            // IPv4:PORT, the common case of a million-line file: parse the v4 address directly
            let a = &s[..i];
            let v4: core::net::Ipv4Addr = a
                .parse()
                .or_else(|_| lx.err(t.col, format!("expected an IP address, found `{a}`")))?;
            return Ok((4, u128::from(u32::from(v4)), port(&s[i + 1..])?));
        }
    }
    let (fam, bits) = addr(lx, t.col, s)?;
    Ok((fam, bits, 0))
}

fn flags(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<(u8, u8), ParseError> {
    let bits = |s: &str| -> Result<u8, ParseError> {
        let mut v = 0u8;
        for c in s.chars() {
            v |= match c.to_ascii_uppercase() {
                'F' => 0x01,
                'S' => 0x02,
                'R' => 0x04,
                'P' => 0x08,
                'A' => 0x10,
                'U' => 0x20,
                'E' => 0x40,
                'C' => 0x80,
                _ => {
                    return lx.err(
                        t.col,
                        format!("unknown TCP flag `{c}` (use F S R P A U E C, as SET/MASK)"),
                    )
                }
            };
        }
        Ok(v)
    };
    let (set, mask) = match t.text.split_once('/') {
        Some((s, m)) => (bits(s)?, bits(m)?),
        None => {
            let s = bits(&t.text)?;
            (s, s)
        }
    };
    if set & !mask != 0 {
        return lx.err(t.col, "flags SET/MASK: every flag in SET must be in MASK");
    }
    Ok((set, mask))
}

fn hex(lx: &Lexer<'_>, col: usize, s: &str) -> Result<Vec<u8>, ParseError> {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s.is_empty() || s.len() % 2 != 0 {
        return lx.err(
            col,
            format!("expected an even number of hex digits, found `{s}`"),
        );
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .or_else(|_| lx.err(col, format!("bad hex digits `{}`", &s[i..i + 2])))
        })
        .collect()
}

/// `[!]BASE+OFFSET=HEX[/HEXMASK]`.
fn byte_match(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<ByteMatch, ParseError> {
    let s = &*t.text;
    let (invert, s) = match s.strip_prefix('!') {
        Some(r) => (true, r),
        None => (false, s),
    };
    let bad = || {
        lx.err(
            t.col,
            format!(
                "expected [!]BASE+OFFSET=HEX[/MASK] with BASE l2, l3, l4 or pl, found `{}`",
                t.text
            ),
        )
    };
    let Some((place, val)) = s.split_once('=') else {
        return bad();
    };
    let (base, off) = place.split_once('+').unwrap_or((place, "0"));
    let base = match base {
        "l2" => Base::L2,
        "l3" => Base::L3,
        "l4" => Base::L4,
        "pl" | "payload" => Base::Payload,
        _ => return bad(),
    };
    let Ok(offset) = off.parse::<u32>() else {
        return bad();
    };
    let (v, m) = match val.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (val, None),
    };
    let value = hex(lx, t.col, v)?;
    let mask = match m {
        Some(m) => hex(lx, t.col, m)?,
        None => vec![0xff; value.len()],
    };
    if mask.len() != value.len() {
        return lx.err(t.col, "the mask must be as long as the value");
    }
    let value = value.iter().zip(&mask).map(|(v, m)| v & m).collect();
    Ok(ByteMatch {
        base,
        offset,
        value,
        mask,
        invert,
    })
}

fn tag(lx: &Lexer<'_>, t: &Tok<'_>) -> Result<Tag, ParseError> {
    if !t.quoted {
        if let Ok(n) = t.text.parse::<u32>() {
            return Ok(Tag::Num(n));
        }
    }
    Tag::text(&t.text).map_or_else(
        || {
            lx.err(
                t.col,
                format!("a text tag holds at most {} bytes", Tag::MAX_TEXT),
            )
        },
        Ok,
    )
}

/// Parses actions up to the end of the line (or a `learn`, whose actions follow it).
fn actions(lx: &mut Lexer<'_>, first: Option<Tok<'_>>, nested: bool) -> Result<Action, ParseError> {
    let mut a = Action::default();
    let mut any = false;
    let mut tok = first;
    let set = |lx: &Lexer<'_>, a: &mut Action, v: Verdict, col: usize| {
        if a.verdict.is_some()
            && !matches!(
                (a.verdict, v),
                (Some(Verdict::Cutoff { .. }), Verdict::Cutoff { .. })
            )
        {
            return lx.err(
                col,
                "a rule has one verdict (pass, drop, slice, sample or cutoff)",
            );
        }
        a.verdict = Some(v);
        Ok(())
    };
    loop {
        let t = match tok.take() {
            Some(t) => t,
            None => match lx.next()? {
                Some(t) => t,
                None => break,
            },
        };
        any = true;
        match &*t.text {
            "pass" => set(lx, &mut a, Verdict::Pass, t.col)?,
            "drop" => set(lx, &mut a, Verdict::Drop, t.col)?,
            "slice" => {
                let n = lx.want(&t, "a byte count or l2, l3, l4")?;
                let s = match &*n.text {
                    "l2" => SliceTo::L2,
                    "l3" => SliceTo::L3,
                    "l4" => SliceTo::L4,
                    _ => SliceTo::Bytes(num(lx, &n, "a byte count or l2, l3, l4")?),
                };
                set(lx, &mut a, Verdict::Slice(s), t.col)?;
            }
            "sample" => {
                let n = lx.want(&t, "N (keep 1 in N)")?;
                let v: u32 = num(lx, &n, "N (keep 1 in N)")?;
                if v == 0 {
                    return lx.err(n.col, "sample 0 keeps nothing: use drop");
                }
                set(lx, &mut a, Verdict::Sample(v), t.col)?;
            }
            "cutoff" | "cutoff-packets" => {
                let n = lx.want(&t, "a budget per flow")?;
                let (mut bytes, mut packets) = match a.verdict {
                    Some(Verdict::Cutoff { bytes, packets }) => (bytes, packets),
                    _ => (u64::MAX, u64::MAX),
                };
                if t.text == "cutoff" {
                    bytes = size(lx, &n)?;
                } else {
                    packets = num(lx, &n, "a packet count")?;
                }
                set(lx, &mut a, Verdict::Cutoff { bytes, packets }, t.col)?;
            }
            "tag" => {
                let n = lx.want(&t, "a number or a short text")?;
                a.tag = Some(tag(lx, &n)?);
            }
            "stop" => a.stop = true,
            "continue" => a.stop = false,
            "learn" => {
                if nested {
                    return lx.err(t.col, "a learnt rule cannot learn again");
                }
                let inner = actions(lx, None, true)?;
                if inner.verdict.is_none() && inner.tag.is_none() {
                    return lx.err(t.col, "`learn` needs the action for the flow (e.g. learn drop)");
                }
                a.learn = Some(Box::new(inner));
                break;
            }
            other => {
                return lx.err(
                    t.col,
                    format!("unknown action `{other}` (pass, drop, slice, sample, cutoff, cutoff-packets, tag, stop, continue, learn)"),
                )
            }
        }
    }
    if !any {
        let what = if nested {
            "`learn` needs the action for the flow (e.g. learn drop)"
        } else {
            "no action after `->`"
        };
        return lx.err(lx.line.len() + 1, what);
    }
    Ok(a)
}

/// Parses one `exact PROTO A[:P] B[:P] [vlan N]` match; `t` is the word after `exact`.
fn exact(lx: &mut Lexer<'_>, kw: &Tok<'_>) -> Result<ExactKey, ParseError> {
    let p = lx.want(kw, "a protocol and two endpoints")?;
    let proto = proto(lx, &p)?;
    let e1 = lx.want(kw, "two endpoints")?;
    let (f1, a1, p1) = endpoint(lx, &e1)?;
    let e2 = lx.want(kw, "two endpoints")?;
    let (f2, a2, p2) = endpoint(lx, &e2)?;
    if f1 != f2 {
        return lx.err(e2.col, "both endpoints must be IPv4 or both IPv6");
    }
    Ok(ExactKey::new(f1, NO_VLAN, proto, a1, p1, a2, p2))
}

fn rule_line(lx: &mut Lexer<'_>, first: Tok<'_>, lineno: usize) -> Result<Rule, ParseError> {
    let mut id = lineno as u32;
    let mut prio = 0i32;
    let mut tok = Some(first);
    let mut exact_key: Option<ExactKey> = None;
    let mut w = WildMatch::default();
    let mut wild_terms = 0usize;
    let mut exact_col = 0;
    let mut saw_arrow = false;
    while let Some(t) = match tok.take() {
        Some(t) => Some(t),
        None => lx.next()?,
    } {
        if t.quoted {
            return lx.err(t.col, format!("unexpected quoted string \"{}\"", t.text));
        }
        macro_rules! once {
            ($field:expr, $v:expr) => {{
                if $field.is_some() {
                    return lx.err(t.col, format!("`{}` given twice", t.text));
                }
                $field = Some($v);
                wild_terms += 1;
            }};
        }
        match &*t.text {
            "->" => {
                saw_arrow = true;
                break;
            }
            "id" => {
                let n = lx.want(&t, "a number")?;
                id = num(lx, &n, "a rule id (0-4294967295)")?;
            }
            "prio" => {
                let n = lx.want(&t, "a number")?;
                prio = num(lx, &n, "a priority (a signed 32-bit number)")?;
            }
            "exact" => {
                if exact_key.is_some() {
                    return lx.err(t.col, "`exact` given twice");
                }
                exact_col = t.col;
                exact_key = Some(exact(lx, &t)?);
            }
            "any" => {}
            "ip4" | "ip" => once!(w.family, 4),
            "ip6" => once!(w.family, 6),
            "vlan" => {
                let n = lx.want(&t, "a VLAN id or `none`")?;
                let v = if n.text == "none" {
                    NO_VLAN
                } else {
                    match n.text.parse::<u16>() {
                        Ok(v) if v < 4096 => v,
                        _ => return lx.err(n.col, format!("expected a VLAN id 0-4095 or `none`, found `{}`", n.text)),
                    }
                };
                if let Some(k) = exact_key.as_mut() {
                    if k.vlan != NO_VLAN {
                        return lx.err(t.col, "`vlan` given twice");
                    }
                    k.vlan = v;
                } else {
                    once!(w.vlan, v);
                }
            }
            "proto" => {
                let n = lx.want(&t, "a protocol")?;
                once!(w.proto, proto(lx, &n)?);
            }
            "src" | "dst" | "host" => {
                let n = lx.want(&t, "an address or CIDR prefix")?;
                let p = prefix(lx, &n)?;
                match &*t.text {
                    "src" => once!(w.src, p),
                    "dst" => once!(w.dst, p),
                    _ => once!(w.host, p),
                }
            }
            "sport" | "dport" | "port" => {
                let n = lx.want(&t, "a port or a range A-B")?;
                let r = port_range(lx, &n)?;
                match &*t.text {
                    "sport" => once!(w.sport, r),
                    "dport" => once!(w.dport, r),
                    _ => once!(w.port, r),
                }
            }
            "flags" => {
                let n = lx.want(&t, "TCP flags SET/MASK, like S/SA")?;
                once!(w.flags, flags(lx, &n)?);
            }
            "len" => {
                let n = lx.want(&t, "a length range A-B")?;
                let (a, b) = n.text.split_once('-').unwrap_or((&n.text, &n.text));
                match (a.parse::<u32>(), b.parse::<u32>()) {
                    (Ok(a), Ok(b)) if a <= b => once!(w.len, (a, b)),
                    _ => return lx.err(n.col, format!("expected a length range A-B, found `{}`", n.text)),
                }
            }
            "bytes" => {
                let n = lx.want(&t, "[!]BASE+OFFSET=HEX[/MASK]")?;
                w.bytes.push(byte_match(lx, &n)?);
                wild_terms += 1;
            }
            "payload" => {
                let n = lx.want(&t, "a quoted pattern or hex:BYTES")?;
                let p = if n.quoted {
                    bytes_of(&n.text)
                } else if let Some(h) = n.text.strip_prefix("hex:") {
                    hex(lx, n.col, h)?
                } else {
                    return lx.err(n.col, "a pattern is a \"quoted string\" or hex:BYTES");
                };
                if p.is_empty() {
                    return lx.err(n.col, "empty pattern");
                }
                w.payload.push(p);
                wild_terms += 1;
            }
            "bpf" => {
                let n = lx.want(&t, "a quoted libpcap expression")?;
                if !n.quoted {
                    return lx.err(n.col, "the BPF expression must be quoted: bpf \"tcp port 80\"");
                }
                once!(w.bpf, n.text.into_owned());
            }
            other => {
                return lx.err(
                    t.col,
                    format!("unknown word `{other}` (a match: exact, any, ip4, ip6, vlan, proto, src, dst, host, sport, dport, port, flags, len, bytes, payload, bpf; then -> and the actions)"),
                )
            }
        }
    }
    if !saw_arrow {
        return lx.err(lx.line.len() + 1, "missing `->` and the actions");
    }
    let action = actions(lx, None, false)?;
    let matcher = match exact_key {
        Some(k) => {
            if wild_terms > 0 {
                return lx.err(
                    exact_col,
                    "an exact rule takes only `vlan` besides its endpoints",
                );
            }
            Match::Exact(k)
        }
        None => Match::Wild(Box::new(w)),
    };
    Ok(Rule {
        id,
        prio,
        matcher,
        action,
        line: lineno as u32,
    })
}

/// The options a stretch of lines set (the last of each wins, in file order).
#[derive(Default)]
struct SetOptions {
    default_drop: Option<bool>,
    scan_limit: Option<u32>,
    flows: Option<u32>,
}

/// Files at least this large are parsed on several threads, in stretches of whole lines.
const PARALLEL_MIN_BYTES: usize = 1 << 20;

/// Where parsed rules go: a plain list ([`RuleSet`]), or the compact form a reload compiles
/// from ([`Prepared`]).
trait Sink: Send + Sized {
    /// Room for `n` rules.
    fn with_capacity(n: usize) -> Self;
    /// One rule, in file order.
    fn push(&mut self, r: Rule);
    /// The rules of the next stretch of lines.
    fn append(&mut self, other: Self);
    /// An exact rule read by [`fast_exact`]: `key`, at line `line` (its id), passing or
    /// dropping.
    fn push_exact(&mut self, key: ExactKey, line: u32, drop: bool) {
        self.push(Rule {
            id: line,
            prio: 0,
            matcher: Match::Exact(key),
            action: fast_action(drop),
            line,
        });
    }
}

/// The action of a `-> pass` or `-> drop` line.
fn fast_action(drop: bool) -> Action {
    Action {
        verdict: Some(if drop { Verdict::Drop } else { Verdict::Pass }),
        ..Action::default()
    }
}

/// The common exact line, `exact tcp|udp A.B.C.D[:P] E.F.G.H[:P] -> pass|drop`, read without
/// the general lexer (a million-line file is mostly these). `None` for anything else, even a
/// line that means the same (a comment after it, leading zeros): the general parser then
/// takes it, so both give the same rule (test `the_fast_exact_path_is_the_general_one`).
fn fast_exact(line: &str) -> Option<(ExactKey, bool)> {
    let b = line.as_bytes();
    let mut pos = 0;
    let mut word = || -> Option<&[u8]> {
        while pos < b.len() && b[pos].is_ascii_whitespace() {
            pos += 1;
        }
        let start = pos;
        while pos < b.len() && !b[pos].is_ascii_whitespace() {
            pos += 1;
        }
        (pos > start).then(|| &b[start..pos])
    };
    if word()? != b"exact" {
        return None;
    }
    let proto = match word()? {
        b"tcp" => 6,
        b"udp" => 17,
        _ => return None,
    };
    let (a1, p1) = fast_v4_endpoint(word()?)?;
    let (a2, p2) = fast_v4_endpoint(word()?)?;
    if word()? != b"->" {
        return None;
    }
    let drop = match word()? {
        b"pass" => false,
        b"drop" => true,
        _ => return None,
    };
    if word().is_some() {
        return None;
    }
    Some((ExactKey::new(4, NO_VLAN, proto, a1, p1, a2, p2), drop))
}

/// `A.B.C.D` or `A.B.C.D:PORT` in plain decimal (no leading zeros, which the general parser
/// refuses in an address), or `None`.
fn fast_v4_endpoint(w: &[u8]) -> Option<(u128, u16)> {
    fn dec(d: &[u8], max: u32, zeros: bool) -> Option<u32> {
        if d.is_empty() || d.len() > 5 || (!zeros && d.len() > 1 && d[0] == b'0') {
            return None;
        }
        let mut v = 0u32;
        for &c in d {
            if !c.is_ascii_digit() {
                return None;
            }
            v = v * 10 + u32::from(c - b'0');
        }
        (v <= max).then_some(v)
    }
    let (addr, port) = match w.iter().position(|&c| c == b':') {
        Some(i) => (&w[..i], dec(&w[i + 1..], 65_535, true)? as u16),
        None => (w, 0),
    };
    let mut bits = 0u32;
    let mut parts = 0;
    for o in addr.split(|&c| c == b'.') {
        if o.len() > 3 {
            return None;
        }
        bits = bits << 8 | dec(o, 255, false)?;
        parts += 1;
    }
    (parts == 4).then_some((u128::from(bits), port))
}

impl Sink for Vec<Rule> {
    fn with_capacity(n: usize) -> Self {
        Vec::with_capacity(n)
    }
    fn push(&mut self, r: Rule) {
        Vec::push(self, r);
    }
    fn append(&mut self, other: Self) {
        if self.is_empty() {
            *self = other;
        } else {
            self.extend(other);
        }
    }
}

/// One exact rule as a reload keeps it: 64 bytes instead of a [`Rule`]'s 144.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ExactItem {
    /// The conversation.
    pub key: ExactKey,
    /// Rule id.
    pub id: RuleId,
    /// Line in the file (0 for rules not from a file).
    pub line: u32,
    /// Rising in file order (the line for a file, the position for a [`RuleSet`]).
    pub order: u32,
    /// Index in [`Prepared::actions`].
    pub action: u32,
}

/// A rule set as compiled: the exact rules compact with their actions interned, the other
/// rules as parsed. A reload parses the file straight into this, without a [`Rule`] per exact
/// line.
#[derive(Debug, Default)]
pub(crate) struct Prepared {
    /// Exact rules, in file order.
    pub exact: Vec<ExactItem>,
    /// The distinct actions of the exact rules.
    pub actions: Vec<Action>,
    /// The other rules, in file order, each with its order key (as [`ExactItem::order`]).
    pub wild: Vec<(u32, Rule)>,
    /// Set-wide options.
    pub options: crate::rule::Options,
    /// Interning index of `actions`.
    index: hashbrown::HashMap<Action, u32>,
    /// The indices of `-> pass` and `-> drop` in `actions`, once interned.
    fast: [Option<u32>; 2],
}

impl Prepared {
    fn intern(&mut self, a: &Action) -> u32 {
        if let Some(last) = self.actions.last() {
            if last == a {
                return (self.actions.len() - 1) as u32;
            }
        }
        if let Some(&i) = self.index.get(a) {
            return i;
        }
        let i = self.actions.len() as u32;
        self.actions.push(a.clone());
        self.index.insert(a.clone(), i);
        i
    }

    /// One rule at order key `order`.
    fn add(&mut self, r: Rule, order: u32) {
        match r.matcher {
            Match::Exact(key) => {
                let action = self.intern(&r.action);
                self.exact.push(ExactItem {
                    key,
                    id: r.id,
                    line: r.line,
                    order,
                    action,
                });
            }
            Match::Wild(_) => self.wild.push((order, r)),
        }
    }

    /// A rule set's rules, their positions as order keys.
    pub(crate) fn of_set(set: RuleSet) -> Prepared {
        let n = set
            .rules
            .iter()
            .filter(|r| matches!(r.matcher, Match::Exact(_)))
            .count();
        let mut p = Prepared {
            exact: Vec::with_capacity(n),
            options: set.options,
            ..Prepared::default()
        };
        for (pos, r) in set.rules.into_iter().enumerate() {
            p.add(r, pos as u32);
        }
        p
    }
}

impl Sink for Prepared {
    fn with_capacity(n: usize) -> Self {
        Prepared {
            exact: Vec::with_capacity(n),
            ..Prepared::default()
        }
    }
    fn push(&mut self, r: Rule) {
        let order = r.line;
        self.add(r, order);
    }
    fn push_exact(&mut self, key: ExactKey, line: u32, drop: bool) {
        let cached = &mut self.fast[usize::from(drop)];
        let action = match *cached {
            Some(i) => i,
            None => {
                let i = self.intern(&fast_action(drop));
                self.fast[usize::from(drop)] = Some(i);
                i
            }
        };
        self.exact.push(ExactItem {
            key,
            id: line,
            line,
            order: line,
            action,
        });
    }
    fn append(&mut self, mut other: Self) {
        if self.exact.is_empty() && self.wild.is_empty() {
            other.options = std::mem::take(&mut self.options);
            *self = other;
            return;
        }
        // the other stretch's action indices, in this one's table
        let map: Vec<u32> = other.actions.iter().map(|a| self.intern(a)).collect();
        self.exact.extend(other.exact.into_iter().map(|mut e| {
            e.action = map[e.action as usize];
            e
        }));
        self.wild.extend(other.wild);
    }
}

impl RuleSet {
    /// Parses a rule file's text (see the crate documentation for the format).
    pub fn parse(text: &str) -> Result<RuleSet, ParseError> {
        parse(text)
    }
}

/// Parses a rule file. A large file (a million exact rules) is cut at line ends into one
/// stretch per available core, each parsed on its own thread with its own line numbers; the
/// rules are then put back in file order and the options applied in file order, so the result
/// (and the first error, by line) is what one pass gives.
pub(crate) fn parse(text: &str) -> Result<RuleSet, ParseError> {
    let (rules, options) = parse_into::<Vec<Rule>>(text)?;
    Ok(RuleSet { rules, options })
}

/// Parses a rule file into the compact form a reload compiles ([`Prepared`]), the same way
/// as [`parse`].
pub(crate) fn parse_prepared(text: &str) -> Result<Prepared, ParseError> {
    let (mut p, options) = parse_into::<Prepared>(text)?;
    p.options = options;
    Ok(p)
}

fn parse_into<S: Sink>(text: &str) -> Result<(S, crate::rule::Options), ParseError> {
    let threads = if text.len() >= PARALLEL_MIN_BYTES {
        std::thread::available_parallelism().map_or(1, |n| n.get().min(16))
    } else {
        1
    };
    let newlines = |t: &str| t.bytes().filter(|&b| b == b'\n').count();
    let mut options = crate::rule::Options::default();
    if threads <= 1 {
        let mut rules = S::with_capacity(newlines(text) + 1);
        let mut opts = SetOptions::default();
        parse_lines(text, 0, &mut rules, &mut opts)?;
        apply(&mut options, &opts);
        return Ok((rules, options));
    }
    // stretches of whole lines, and the number of the line before each
    let mut cuts = vec![0usize];
    for i in 1..threads {
        let from = (text.len() * i / threads).max(*cuts.last().unwrap_or(&0));
        match text.as_bytes()[from..].iter().position(|&b| b == b'\n') {
            Some(p) => cuts.push(from + p + 1),
            None => break,
        }
    }
    cuts.push(text.len());
    cuts.dedup();
    let stretches: Vec<&str> = cuts.windows(2).map(|w| &text[w[0]..w[1]]).collect();
    let counts: Vec<usize> = stretches.iter().map(|t| newlines(t)).collect();
    let total: usize = counts.iter().sum();
    let results: Vec<Result<(S, SetOptions), ParseError>> = std::thread::scope(|s| {
        let mut line0 = 0;
        let mut jobs = Vec::with_capacity(stretches.len());
        for (i, (&t, &n)) in stretches.iter().zip(&counts).enumerate() {
            let first = line0;
            line0 += n;
            // the first stretch's vector gets room for every rule: the others are appended
            let cap = if i == 0 { total + 1 } else { n + 1 };
            jobs.push(s.spawn(move || {
                let mut rules = S::with_capacity(cap);
                let mut opts = SetOptions::default();
                parse_lines(t, first, &mut rules, &mut opts).map(|()| (rules, opts))
            }));
        }
        jobs.into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(ParseError {
                        line: 0,
                        column: 0,
                        message: "the parser failed".into(),
                    })
                })
            })
            .collect()
    });
    let mut all: Option<S> = None;
    for r in results {
        let (rules, opts) = r?;
        match &mut all {
            None => all = Some(rules),
            Some(a) => a.append(rules),
        }
        apply(&mut options, &opts);
    }
    Ok((all.unwrap_or_else(|| S::with_capacity(0)), options))
}

fn apply(o: &mut crate::rule::Options, s: &SetOptions) {
    if let Some(v) = s.default_drop {
        o.default_drop = v;
    }
    if let Some(v) = s.scan_limit {
        o.scan_limit = v;
    }
    if let Some(v) = s.flows {
        o.flows = v;
    }
}

/// Parses the lines of `text`, the first being line `line0 + 1` of the file.
fn parse_lines<S: Sink>(
    text: &str,
    line0: usize,
    rules: &mut S,
    opts: &mut SetOptions,
) -> Result<(), ParseError> {
    for (i, line) in text.lines().enumerate() {
        let lineno = line0 + i + 1;
        if let Some((key, drop)) = fast_exact(line) {
            rules.push_exact(key, lineno as u32, drop);
            continue;
        }
        let mut lx = Lexer {
            line,
            pos: 0,
            lineno,
        };
        let Some(first) = lx.next()? else {
            continue;
        };
        match &*first.text {
            "default" if !first.quoted => {
                let v = lx.want(&first, "pass or drop")?;
                opts.default_drop = Some(match &*v.text {
                    "pass" => false,
                    "drop" => true,
                    _ => return lx.err(v.col, "`default` takes pass or drop"),
                });
            }
            "set" if !first.quoted => {
                let k = lx.want(&first, "an option name")?;
                let v = lx.want(&k, "a value")?;
                match &*k.text {
                    "scan-limit" => {
                        opts.scan_limit = Some(size(&lx, &v)?.min(u64::from(u32::MAX)) as u32)
                    }
                    "flows" => {
                        let n: u32 = num(&lx, &v, "a flow count")?;
                        if n == 0 {
                            return lx.err(v.col, "the flow table needs at least one entry");
                        }
                        opts.flows = Some(n);
                    }
                    other => {
                        return lx.err(
                            k.col,
                            format!("unknown option `{other}` (scan-limit, flows)"),
                        )
                    }
                }
            }
            _ => {
                rules.push(rule_line(&mut lx, first, lineno)?);
                continue;
            }
        }
        if let Some(t) = lx.next()? {
            return lx.err(
                t.col,
                format!("unexpected `{}` at the end of the line", t.text),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file large enough for the parallel parser gives what one pass over its lines gives:
    /// the rules in order with their line numbers and default ids, the options as the last
    /// line setting them says, and the first error by line.
    #[test]
    fn the_parallel_parse_is_the_sequential_one() {
        let mut text = String::from("set flows 100\n");
        let mut i = 0u32;
        while text.len() < 3 * PARALLEL_MIN_BYTES {
            i += 1;
            text += &match i % 5 {
                0 => format!(
                    "id {} proto udp dport {} -> drop\n",
                    10_000_000 + i,
                    i % 60000
                ),
                1 => "\n# a comment\n".to_string(),
                _ => format!(
                    "exact tcp 10.{}.{}.{}:{} 10.0.0.1:80 -> pass\n",
                    (i >> 16) & 255,
                    (i >> 8) & 255,
                    i & 255,
                    1 + i % 60000
                ),
            };
            if i == 40_000 {
                text += "set flows 7\ndefault drop\n";
            }
        }
        let mut one = Vec::new();
        let mut opts = SetOptions::default();
        parse_lines(&text, 0, &mut one, &mut opts).unwrap();
        let set = parse(&text).unwrap();
        assert_eq!(set.rules, one);
        assert_eq!((set.options.flows, set.options.default_drop), (7, true));
        let last = set.rules.last().unwrap();
        assert_eq!(last.line as usize, text.lines().count());
        // two errors: the first by line is reported
        let mut bad = text.clone();
        let at = bad.len() * 3 / 4;
        let nl = at + bad[at..].find('\n').unwrap() + 1;
        bad.insert_str(nl, "exact tcp 10.0.0.1:1 10.0.0.x:2 -> drop\n");
        let half = bad.len() / 2;
        let nl = half + bad[half..].find('\n').unwrap() + 1;
        bad.insert_str(nl, "proto tcp -> explode\n");
        let want = {
            let mut v = Vec::new();
            parse_lines(&bad, 0, &mut v, &mut SetOptions::default()).unwrap_err()
        };
        assert_eq!(parse(&bad).unwrap_err(), want);
        assert!(want.message.contains("explode"), "{want}");
    }

    /// Every line the fast exact path takes gives the rule the general parser gives, and the
    /// lines it declines (unusual spellings) still parse, or fail, the general way.
    #[test]
    fn the_fast_exact_path_is_the_general_one() {
        let general = |line: &str| {
            let mut lx = Lexer {
                line,
                pos: 0,
                lineno: 9,
            };
            let first = lx.next()?.expect("a word");
            rule_line(&mut lx, first, 9)
        };
        let taken = [
            "exact tcp 10.0.0.1:80 10.0.0.2:443 -> pass",
            "exact udp 255.255.255.255:65535 0.0.0.0:0 -> drop",
            "  exact\ttcp 1.2.3.4 5.6.7.8 ->   drop  ",
            "exact tcp 10.0.0.2:443 10.0.0.1:80 -> drop\r",
            "exact udp 1.2.3.4:0080 5.6.7.8:9 -> pass",
        ];
        for line in taken {
            let (key, drop) = fast_exact(line).unwrap_or_else(|| panic!("not taken: {line}"));
            let mut v: Vec<Rule> = Vec::new();
            v.push_exact(key, 9, drop);
            assert_eq!(v[0], general(line).unwrap(), "{line}");
        }
        let declined = [
            "exact tcp 10.0.0.01:80 10.0.0.2:443 -> pass",
            "exact tcp 10.0.0.1:65536 10.0.0.2:443 -> pass",
            "exact tcp 10.0.0.1:80 10.0.0.2:443 -> pass # note",
            "exact tcp 10.0.0.1:80 10.0.0.2:443 vlan 5 -> pass",
            "exact tcp 10.0.0.1:80 10.0.0.2:443 -> pass tag 7",
            "exact tcp 10.0.0.1:80 [::1]:443 -> pass",
            "exact tcp 10.0.0.1:+80 10.0.0.2:443 -> pass",
            "exact tcp 10.0.0.256:80 10.0.0.2:443 -> pass",
            "exact tcp 10.0.0:80 10.0.0.2:443 -> pass",
            "exact icmp 10.0.0.1 10.0.0.2 -> drop",
            "exact tcp 10.0.0.1:80 10.0.0.2:443 ->",
            "exact tcp 10.0.0.1:80 10.0.0.2:443 -> pass drop",
            "id 5 exact tcp 10.0.0.1:80 10.0.0.2:443 -> pass",
        ];
        for line in declined {
            assert_eq!(fast_exact(line), None, "{line}");
        }
        // and whole files: the compact form holds the rules the plain parse gives
        let text = taken
            .iter()
            .chain(&declined[2..5])
            .chain(&declined[9..10])
            .fold(String::from("proto udp -> drop\n"), |t, l| t + l + "\n");
        let set = parse(&text).unwrap();
        let p = parse_prepared(&text).unwrap();
        let exact: Vec<(ExactKey, u32, u32, Action)> = set
            .rules
            .iter()
            .filter_map(|r| match r.matcher {
                Match::Exact(k) => Some((k, r.id, r.line, r.action.clone())),
                Match::Wild(_) => None,
            })
            .collect();
        let compact: Vec<(ExactKey, u32, u32, Action)> = p
            .exact
            .iter()
            .map(|e| (e.key, e.id, e.line, p.actions[e.action as usize].clone()))
            .collect();
        assert_eq!(compact, exact);
        assert_eq!(p.wild.len(), 1);
        assert_eq!(p.wild[0].1, set.rules[0]);
    }
}
