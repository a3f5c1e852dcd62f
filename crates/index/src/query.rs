//! What the index can use of a tcpdump expression. The parser understands a conservative
//! subset (addresses, networks, ports, protocols, `and`/`or`, parentheses) and maps anything
//! else, and every negation, to [`Query::All`]: a query only ever narrows to a superset of the
//! chunks holding matching packets, and the BPF program decides each packet.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::keys::Key;

/// Which chunks an expression needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Query {
    /// Every chunk.
    All,
    /// Chunks holding a packet with this key.
    Key(Key),
    /// Chunks holding an IPv4 address in `net/mask` (network, mask).
    V4Net(u32, u32),
    /// Both.
    And(Box<Query>, Box<Query>),
    /// Either.
    Or(Box<Query>, Box<Query>),
}

impl Query {
    /// The index query of a tcpdump expression (an empty one selects everything).
    pub fn from_expr(expr: &str) -> Query {
        let spaced = expr
            .replace('(', " ( ")
            .replace(')', " ) ")
            .replace("&&", " and ")
            .replace("||", " or ")
            .replace('!', " not ");
        let tokens: Vec<&str> = spaced.split_whitespace().collect();
        if tokens.is_empty() {
            return Query::All;
        }
        let mut p = Parser { t: &tokens, i: 0 };
        let q = p.expr();
        if p.i != tokens.len() {
            return Query::All;
        }
        q
    }

    /// Whether the query narrows anything.
    pub fn is_all(&self) -> bool {
        matches!(self, Query::All)
    }
}

struct Parser<'a> {
    t: &'a [&'a str],
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&str> {
        self.t.get(self.i).copied()
    }

    /// tcpdump gives `and` and `or` the same precedence, left to right.
    fn expr(&mut self) -> Query {
        let mut q = self.term();
        while let Some(op) = self.peek() {
            let and = match op {
                "and" => true,
                "or" => false,
                _ => break,
            };
            self.i += 1;
            let r = self.term();
            q = if and {
                Query::And(Box::new(q), Box::new(r))
            } else {
                Query::Or(Box::new(q), Box::new(r))
            };
        }
        q
    }

    fn term(&mut self) -> Query {
        match self.peek() {
            Some("not") => {
                self.i += 1;
                self.term();
                Query::All
            }
            Some("(") => {
                self.i += 1;
                let q = self.expr();
                if self.peek() == Some(")") {
                    self.i += 1;
                    q
                } else {
                    self.i = self.t.len() + 1; // unbalanced: give up
                    Query::All
                }
            }
            _ => {
                let start = self.i;
                while let Some(w) = self.peek() {
                    if matches!(w, "and" | "or" | "(" | ")" | "not") {
                        break;
                    }
                    self.i += 1;
                }
                primitive(&self.t[start..self.i])
            }
        }
    }
}

fn proto_of(w: &str) -> Option<u8> {
    Some(match w {
        "tcp" => 6,
        "udp" => 17,
        "icmp" => 1,
        "icmp6" => 58,
        "sctp" => 132,
        _ => return None,
    })
}

fn host_key(w: &str) -> Option<Key> {
    if let Ok(a) = w.parse::<Ipv4Addr>() {
        return Some(Key::V4(u32::from(a)));
    }
    w.parse::<Ipv6Addr>().ok().map(|a| Key::V6(u128::from(a)))
}

fn key(k: Key) -> Query {
    Query::Key(k)
}

fn and(a: Query, b: Query) -> Query {
    Query::And(Box::new(a), Box::new(b))
}

/// One primitive (its words, qualifiers included).
fn primitive(words: &[&str]) -> Query {
    let mut w = words;
    // Direction and the `ip`/`ip6`/`arp` qualifiers do not change which packets carry the key.
    while let Some(first) = w.first() {
        if matches!(*first, "src" | "dst" | "ip" | "ip6" | "arp" | "rarp")
            && w.len() > 1
            && !(matches!(*first, "ip" | "ip6") && w[1] == "proto")
        {
            w = &w[1..];
        } else {
            break;
        }
    }
    match w {
        [a] if host_key(a).is_some() => key(host_key(a).expect("checked")),
        ["host", a] => host_key(a).map_or(Query::All, key),
        ["net", n] => net(n, None),
        ["net", n, "mask", m] => net(n, Some(m)),
        ["port", p] => p.parse().map_or(Query::All, |p| key(Key::Port(p))),
        [t, "port", p] | [t, "src" | "dst", "port", p] => match (proto_of(t), p.parse()) {
            (Some(pr), Ok(p)) => and(key(Key::Proto(pr)), key(Key::Port(p))),
            _ => Query::All,
        },
        [t] => proto_of(t).map_or(Query::All, |p| key(Key::Proto(p))),
        ["proto", p] | ["ip" | "ip6", "proto", p] => {
            p.parse().map_or(Query::All, |p| key(Key::Proto(p)))
        }
        _ => Query::All,
    }
}

fn net(n: &str, mask: Option<&str>) -> Query {
    let (addr, len) = match (n.split_once('/'), mask) {
        (Some((a, l)), None) => (a, l.parse::<u32>().ok()),
        (None, Some(m)) => match m.parse::<Ipv4Addr>() {
            Ok(m) => {
                let m = u32::from(m);
                (
                    n,
                    (m.leading_ones() + m.trailing_zeros() == 32).then(|| m.leading_ones()),
                )
            }
            Err(_) => return Query::All,
        },
        (None, None) => (n, Some(32)),
        _ => return Query::All,
    };
    match (addr.parse::<Ipv4Addr>(), len) {
        (Ok(a), Some(l)) if l <= 32 => {
            let mask = if l == 0 { 0 } else { u32::MAX << (32 - l) };
            Query::V4Net(u32::from(a), mask)
        }
        _ => Query::All,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrows_what_it_understands_and_nothing_else() {
        let h = |s: &str| key(Key::V4(u32::from(s.parse::<Ipv4Addr>().unwrap())));
        assert_eq!(Query::from_expr("host 10.0.0.1"), h("10.0.0.1"));
        assert_eq!(Query::from_expr("src host 10.0.0.1"), h("10.0.0.1"));
        assert_eq!(
            Query::from_expr("tcp port 80"),
            and(key(Key::Proto(6)), key(Key::Port(80)))
        );
        assert_eq!(
            Query::from_expr("host 10.0.0.1 and (port 53 or port 5353)"),
            and(
                h("10.0.0.1"),
                Query::Or(Box::new(key(Key::Port(53))), Box::new(key(Key::Port(5353))))
            )
        );
        assert_eq!(
            Query::from_expr("net 10.1.0.0/16"),
            Query::V4Net(0x0a01_0000, 0xffff_0000)
        );
        assert_eq!(
            Query::from_expr("net 10.1.0.0 mask 255.255.0.0"),
            Query::V4Net(0x0a01_0000, 0xffff_0000)
        );
        // Negations, names, qualifiers it does not know, inherited qualifiers: everything.
        for all in [
            "",
            "not host 10.0.0.1",
            "host example.com",
            "port http",
            "vlan",
            "ether host 00:11:22:33:44:55",
            "tcp[13] & 2 != 0",
            "port 80 or 443",
            "(host 10.0.0.1",
        ] {
            let q = Query::from_expr(all);
            assert!(
                q.is_all() || matches!(&q, Query::Or(_, b) if b.is_all()),
                "{all}: {q:?}"
            );
        }
        // `and` with an unknown side still narrows by the known side.
        assert_eq!(
            Query::from_expr("vlan and host 10.0.0.1"),
            and(Query::All, h("10.0.0.1"))
        );
    }
}
