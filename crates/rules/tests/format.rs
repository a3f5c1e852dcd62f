//! The rule-file format: every example of RULES.md parses and compiles, errors name their line
//! and column, a million exact rules parse, compile and fit in 64 MiB of table.

use std::time::Instant;

use weir_decode::LinkType;
use weir_rules::{Engine, Match, RuleSet, SliceTo, Tag, Verdict};

#[test]
fn every_example_in_rules_md_parses_and_compiles() {
    examples_compile(include_str!("../RULES.md"), 7);
}

#[test]
fn every_example_in_the_readme_parses_and_compiles() {
    examples_compile(include_str!("../../../README.md"), 4);
}

/// Parses and compiles every ```rules block of `md`; there must be at least `min`.
fn examples_compile(md: &str, min: usize) {
    let mut blocks = 0;
    let mut rest = md;
    while let Some(i) = rest.find("```rules\n") {
        let body = &rest[i + 9..];
        let end = body.find("```").unwrap();
        let set =
            RuleSet::parse(&body[..end]).unwrap_or_else(|e| panic!("{e} in\n{}", &body[..end]));
        Engine::new(set, LinkType::ETHERNET, 262_144).unwrap();
        blocks += 1;
        rest = &body[end..];
    }
    assert!(blocks >= min, "only {blocks} rules blocks found");
}

#[test]
fn a_rule_line_reads_as_written() {
    let set = RuleSet::parse(
        "id 7 prio -2 ip4 vlan 10 proto tcp src 10.0.0.0/8 dport 80-90 flags S/SA len 0-100 \
         bytes !l4+2=0050/ffff payload \"GE\\x54\" payload hex:0d0a bpf \"tcp\" -> slice l4 tag \"a b\" continue",
    )
    .unwrap();
    let r = &set.rules[0];
    assert_eq!((r.id, r.prio, r.line), (7, -2, 1));
    let Match::Wild(m) = &r.matcher else { panic!() };
    assert_eq!(m.vlan, Some(10));
    assert_eq!(m.proto, Some(6));
    assert_eq!(m.src.unwrap().len, 8);
    assert_eq!((m.dport.unwrap().lo, m.dport.unwrap().hi), (80, 90));
    assert_eq!(m.flags, Some((0x02, 0x12)));
    assert_eq!(m.len, Some((0, 100)));
    assert!(m.bytes[0].invert);
    assert_eq!(m.payload, vec![b"GET".to_vec(), b"\r\n".to_vec()]);
    assert_eq!(m.bpf.as_deref(), Some("tcp"));
    assert_eq!(r.action.verdict, Some(Verdict::Slice(SliceTo::L4)));
    assert_eq!(r.action.tag, Tag::text("a b"));
    assert!(!r.action.stop);
}

#[test]
fn errors_name_line_and_column() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("any -> pass\nport 8o -> drop", 2, 6, "port"),
        ("src 10.0.0.0/33 -> drop", 1, 5, "prefix length"),
        ("any -> explode", 1, 8, "unknown action"),
        ("any pass", 1, 5, "unknown word `pass`"),
        ("src 10.0.0.1", 1, 13, "missing `->`"),
        (
            "exact tcp 10.0.0.1:1 ::1 -> drop",
            1,
            22,
            "IPv4 or both IPv6",
        ),
        ("payload \"abc -> drop", 1, 9, "unterminated"),
        ("any -> drop pass", 1, 13, "one verdict"),
        ("any -> tag \"sixteen bytes!!!!\"", 1, 12, "at most 15"),
        ("bytes l5+0=00 -> drop", 1, 7, "BASE"),
        (
            "exact tcp 10.0.0.1:1 10.0.0.2:2 dport 80 -> drop",
            1,
            1,
            "only `vlan`",
        ),
        ("\n\n   flags SX -> drop", 3, 10, "unknown TCP flag"),
        ("set flows 0", 1, 11, "at least one"),
        ("any -> learn", 1, 13, "`learn` needs the action"),
        ("any ->", 1, 7, "no action after `->`"),
    ];
    for &(text, line, column, words) in cases {
        let e = RuleSet::parse(text).expect_err(text);
        assert_eq!((e.line, e.column), (line, column), "{text:?}: {e}");
        assert!(e.to_string().contains(words), "{text:?}: {e}");
        assert!(e
            .to_string()
            .starts_with(&format!("line {line}, column {column}: ")));
    }
}

#[test]
fn duplicates_are_refused_with_both_lines() {
    let set = RuleSet::parse(
        "exact udp 1.1.1.1:53 2.2.2.2:99 -> drop\n\nexact udp 2.2.2.2:99 1.1.1.1:53 -> pass",
    )
    .unwrap();
    let e = Engine::new(set, LinkType::ETHERNET, 0).err().unwrap();
    assert_eq!(
        e.to_string(),
        "line 3: an exact rule for this conversation already exists (line 1)"
    );
    let set = RuleSet::parse("id 4 any -> drop\nid 4 any -> pass").unwrap();
    let e = Engine::new(set, LinkType::ETHERNET, 0).err().unwrap();
    assert!(
        e.to_string()
            .contains("rule id 4 is already used on line 1"),
        "{e}"
    );
    let set = RuleSet::parse("bpf \"tcp port\" -> drop").unwrap();
    let e = Engine::new(set, LinkType::ETHERNET, 0).err().unwrap();
    assert!(e.to_string().starts_with("line 1: bpf: "), "{e}");
}

/// One million exact rules: they parse and compile (times printed, not asserted: timing
/// belongs to the benchmark), and their table holds in 64 MiB.
#[test]
fn a_million_exact_rules_fit_in_64_mib() {
    let mut text = String::with_capacity(50 << 20);
    for i in 0..1_000_000u32 {
        let (a, b, c) = (i >> 16, (i >> 8) & 255, i & 255);
        text += &format!(
            "exact tcp 10.{a}.{b}.{c}:{} 192.168.0.1:80 -> drop\n",
            1024 + (i % 50_000)
        );
    }
    let t = Instant::now();
    let set = RuleSet::parse(&text).unwrap();
    let parse = t.elapsed();
    drop(text);
    let t = Instant::now();
    let engine = Engine::new(set, LinkType::ETHERNET, 0).unwrap();
    let compile = t.elapsed();
    let (n, bytes) = engine.exact_size();
    assert_eq!(n, 1_000_000);
    eprintln!(
        "1 M exact rules: parse {parse:?}, compile {compile:?}, table {:.1} MiB ({:.1} B/rule)",
        bytes as f64 / (1 << 20) as f64,
        bytes as f64 / n as f64
    );
    assert!(bytes <= 64 << 20, "{bytes} bytes");
}
