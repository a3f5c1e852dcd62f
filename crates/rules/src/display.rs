//! Rules written back in the rule-file syntax (`RULES.md`): `Display` for [`Rule`],
//! [`ExactKey`], [`WildMatch`] and [`Action`], such that parsing the text gives the same rule
//! back (tested below). The control socket lists rules this way.

use core::fmt::{self, Write as _};
use core::net::{Ipv4Addr, Ipv6Addr};

use crate::fields::NO_VLAN;
use crate::rule::{
    Action, Base, ExactKey, Match, PortRange, Prefix, Rule, SliceTo, Tag, Verdict, WildMatch,
};

fn proto_name(p: u8) -> Option<&'static str> {
    Some(match p {
        6 => "tcp",
        17 => "udp",
        1 => "icmp",
        58 => "icmp6",
        132 => "sctp",
        47 => "gre",
        50 => "esp",
        51 => "ah",
        _ => return None,
    })
}

struct Proto(u8);

impl fmt::Display for Proto {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match proto_name(self.0) {
            Some(n) => f.write_str(n),
            None => write!(f, "{}", self.0),
        }
    }
}

/// An address in [`PacketFields`](crate::PacketFields)' encoding.
pub(crate) struct Addr(pub u8, pub u128);

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 4 {
            write!(f, "{}", Ipv4Addr::from(self.1 as u32))
        } else {
            write!(f, "{}", Ipv6Addr::from(self.1))
        }
    }
}

fn endpoint(f: &mut fmt::Formatter<'_>, family: u8, a: u128, port: u16) -> fmt::Result {
    if family == 4 {
        write!(f, "{}:{port}", Addr(4, a))
    } else {
        write!(f, "[{}]:{port}", Addr(6, a))
    }
}

impl fmt::Display for ExactKey {
    /// `PROTO A:PORT B:PORT [vlan N]`, the words after `exact`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", Proto(self.proto))?;
        endpoint(f, self.family, self.a, self.pa)?;
        f.write_char(' ')?;
        endpoint(f, self.family, self.b, self.pb)?;
        if self.vlan != NO_VLAN {
            write!(f, " vlan {}", self.vlan)?;
        }
        Ok(())
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", Addr(self.family, self.addr), self.len)
    }
}

impl fmt::Display for PortRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_single() {
            write!(f, "{}", self.lo)
        } else {
            write!(f, "{}-{}", self.lo, self.hi)
        }
    }
}

fn flag_letters(f: &mut fmt::Formatter<'_>, v: u8) -> fmt::Result {
    for (bit, c) in [
        (0x01, 'F'),
        (0x02, 'S'),
        (0x04, 'R'),
        (0x08, 'P'),
        (0x10, 'A'),
        (0x20, 'U'),
        (0x40, 'E'),
        (0x80, 'C'),
    ] {
        if v & bit != 0 {
            f.write_char(c)?;
        }
    }
    Ok(())
}

fn hex(f: &mut fmt::Formatter<'_>, b: &[u8]) -> fmt::Result {
    b.iter().try_for_each(|x| write!(f, "{x:02x}"))
}

/// A quoted string with the parser's escapes; bytes that are not printable ASCII as `\xNN`.
fn quoted(f: &mut fmt::Formatter<'_>, b: &[u8]) -> fmt::Result {
    f.write_char('"')?;
    for &c in b {
        match c {
            b'"' => f.write_str("\\\"")?,
            b'\\' => f.write_str("\\\\")?,
            b'\n' => f.write_str("\\n")?,
            b'\r' => f.write_str("\\r")?,
            b'\t' => f.write_str("\\t")?,
            0x20..=0x7e => f.write_char(c as char)?,
            _ => write!(f, "\\x{c:02x}")?,
        }
    }
    f.write_char('"')
}

impl fmt::Display for WildMatch {
    /// The match terms, `any` when there are none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words = 0;
        let mut sep = |f: &mut fmt::Formatter<'_>| {
            words += 1;
            if words > 1 {
                f.write_char(' ')
            } else {
                Ok(())
            }
        };
        if let Some(fam) = self.family {
            sep(f)?;
            f.write_str(if fam == 4 { "ip4" } else { "ip6" })?;
        }
        if let Some(v) = self.vlan {
            sep(f)?;
            if v == NO_VLAN {
                f.write_str("vlan none")?;
            } else {
                write!(f, "vlan {v}")?;
            }
        }
        if let Some(p) = self.proto {
            sep(f)?;
            write!(f, "proto {}", Proto(p))?;
        }
        for (w, p) in [("src", self.src), ("dst", self.dst), ("host", self.host)] {
            if let Some(p) = p {
                sep(f)?;
                write!(f, "{w} {p}")?;
            }
        }
        for (w, r) in [
            ("sport", self.sport),
            ("dport", self.dport),
            ("port", self.port),
        ] {
            if let Some(r) = r {
                sep(f)?;
                write!(f, "{w} {r}")?;
            }
        }
        if let Some((set, mask)) = self.flags {
            sep(f)?;
            f.write_str("flags ")?;
            flag_letters(f, set)?;
            f.write_char('/')?;
            flag_letters(f, mask)?;
        }
        if let Some((a, b)) = self.len {
            sep(f)?;
            write!(f, "len {a}-{b}")?;
        }
        for b in &self.bytes {
            sep(f)?;
            let base = match b.base {
                Base::L2 => "l2",
                Base::L3 => "l3",
                Base::L4 => "l4",
                Base::Payload => "pl",
            };
            write!(
                f,
                "bytes {}{base}+{}=",
                if b.invert { "!" } else { "" },
                b.offset
            )?;
            hex(f, &b.value)?;
            f.write_char('/')?;
            hex(f, &b.mask)?;
        }
        for p in &self.payload {
            sep(f)?;
            f.write_str("payload ")?;
            quoted(f, p)?;
        }
        if let Some(e) = &self.bpf {
            sep(f)?;
            f.write_str("bpf ")?;
            quoted(f, e.as_bytes())?;
        }
        if words == 0 {
            f.write_str("any")?;
        }
        Ok(())
    }
}

impl fmt::Display for Action {
    /// The actions after `->`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words = Vec::<String>::new();
        if let Some(v) = self.verdict {
            match v {
                Verdict::Pass => words.push("pass".into()),
                Verdict::Drop => words.push("drop".into()),
                Verdict::Slice(SliceTo::Bytes(n)) => words.push(format!("slice {n}")),
                Verdict::Slice(SliceTo::L2) => words.push("slice l2".into()),
                Verdict::Slice(SliceTo::L3) => words.push("slice l3".into()),
                Verdict::Slice(SliceTo::L4) => words.push("slice l4".into()),
                Verdict::Sample(n) => words.push(format!("sample {n}")),
                Verdict::Cutoff { bytes, packets } => {
                    if bytes != u64::MAX {
                        words.push(format!("cutoff {bytes}"));
                    }
                    if packets != u64::MAX {
                        words.push(format!("cutoff-packets {packets}"));
                    }
                }
            }
        }
        if let Some(t) = self.tag {
            words.push(match t {
                Tag::Num(n) => format!("tag {n}"),
                Tag::Text { .. } => format!("tag {}", Quoted(t.to_string().as_bytes())),
            });
        }
        if !self.stop {
            words.push("continue".into());
        }
        if let Some(l) = &self.learn {
            words.push(format!("learn {l}"));
        }
        if words.is_empty() {
            words.push("stop".into());
        }
        f.write_str(&words.join(" "))
    }
}

struct Quoted<'a>(&'a [u8]);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        quoted(f, self.0)
    }
}

impl fmt::Display for Match {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Match::Exact(k) => write!(f, "exact {k}"),
            Match::Wild(m) => write!(f, "{m}"),
        }
    }
}

impl fmt::Display for Rule {
    /// The rule as one line of a rule file: `id N [prio P] MATCH -> ACTIONS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "id {} ", self.id)?;
        if self.prio != 0 {
            write!(f, "prio {} ", self.prio)?;
        }
        write!(f, "{} -> {}", self.matcher, self.action)
    }
}

#[cfg(test)]
mod test {
    use crate::RuleSet;

    /// Every rule written back parses to the same rule.
    #[test]
    fn rules_written_back_parse_to_themselves() {
        let text = "\
default pass
id 10 exact tcp 10.0.0.9:5000 10.0.0.1:873 -> drop
exact udp [2001:db8::1]:53 [2001:db8::2]:4000 vlan 7 -> tag 5 pass
exact icmp 10.0.0.1 10.0.0.2 -> drop tag \"noisy\"
exact 99 10.0.0.1 10.0.0.2 -> sample 3
id 20 prio -1 src 10.1.0.0/16 -> tag lab continue
id 30 proto tcp dport 80 payload \"GET /admin\" -> tag alert pass
host 10.0.0.9 port 873 -> drop
ip6 vlan none dst 2001:db8::/32 sport 1024-65535 -> slice l4
proto tcp flags S/SA len 40-100 -> sample 10
proto tcp flags /SA -> slice 64
ip4 bytes !l3+8=40 -> tag odd-ttl continue
bytes l3+9=11 bytes l4+2=0035/ffff -> pass tag dns
payload hex:0d0a00ff payload \"a\\\"b\\\\c\\n\" -> drop
bpf \"tcp[tcpflags] & tcp-push != 0 and port 443\" -> slice 128
any -> cutoff 4096 cutoff-packets 10
proto tcp flags R/R -> learn drop tag \"12\"
proto udp -> tag 7
proto 200 -> stop
";
        let set = RuleSet::parse(text).unwrap();
        for r in &set.rules {
            let line = r.to_string();
            let back = RuleSet::parse(&line)
                .unwrap_or_else(|e| panic!("{line}: {e}"))
                .rules
                .remove(0);
            assert_eq!(back.id, r.id, "{line}");
            assert_eq!(back.prio, r.prio, "{line}");
            assert_eq!(back.matcher, r.matcher, "{line}");
            assert_eq!(back.action, r.action, "{line}");
        }
        assert_eq!(
            set.rules[0].to_string(),
            "id 10 exact tcp 10.0.0.1:873 10.0.0.9:5000 -> drop"
        );
        assert_eq!(
            set.rules[4].to_string(),
            "id 20 prio -1 src 10.1.0.0/16 -> tag \"lab\" continue"
        );
    }
}
