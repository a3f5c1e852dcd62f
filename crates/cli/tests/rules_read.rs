//! `weir read --rules` on corpus files, against the peers:
//!
//! * rule sets BPF can express (exact conversations, hosts, CIDR, ports and ranges, protocol,
//!   length, drop/pass with priorities and `continue`, default drop): the output equals
//!   `tcpdump -r IN -w OUT EXPR` byte for byte (`--micro`, as in `tcpdump_equivalence.rs`);
//! * slicing: equals `editcap -s N` of tcpdump's selection of the same packets;
//! * tags: tshark shows them as `frame.comment` on exactly the packets the rule matched (and
//!   classic pcap says how many it could not store);
//! * sampling: the 1st, 4th, 7th... packet, by hand;
//! * the README's "keep 4 KB per flow" example: the bytes kept per flow, recomputed from
//!   tshark's fields of the input;
//! * counters: packets in = the input's packets = passed + dropped + sliced + sampled out, and
//!   the packets written = passed + sliced.
//!
//! The files are the corpus's classic-pcap Ethernet captures whose every packet is either
//! non-IP or one plain IP header after the Ethernet header (no VLAN, tunnel, extension header,
//! fragment or damage): there, the engine's fields and libpcap's offsets mean the same thing.

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{run, weir};
use weir_decode::{decode, Layer, LinkType};
use weir_pcap::{FileFormat, FileReader};

/// One packet as the tests compare them.
#[derive(Debug, PartialEq, Eq)]
struct Pkt {
    ts_ns: u64,
    orig_len: u32,
    data: Vec<u8>,
}

fn packets(path: &Path) -> Vec<Pkt> {
    let mut r = FileReader::open(path).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        out.push(Pkt {
            ts_ns: p.meta.ts_ns,
            orig_len: p.meta.orig_len,
            data: p.data.to_vec(),
        });
    }
    out
}

/// Non-IP, or one plain IPv4/IPv6 header right after Ethernet with nothing unusual after it.
fn plain(data: &[u8]) -> bool {
    let d = decode(LinkType::ETHERNET, data);
    let l = d.layers();
    if d.error().is_some() || d.clipped() || l.is_empty() {
        return false;
    }
    if d.ip().is_none() {
        return l.iter().all(|x| !matches!(x, Layer::Vlan { .. }));
    }
    l.len() >= 2
        && matches!(l[0], Layer::Ethernet(_))
        && matches!(l[1], Layer::Ipv4(_) | Layer::Ipv6(_))
        && d.ip().is_some_and(|ip| ip.fragment.is_none())
        && l[2..].iter().all(|x| {
            !matches!(
                x,
                Layer::Ipv4(_) | Layer::Ipv6(_) | Layer::Ipv6Ext { .. } | Layer::Vlan { .. }
            )
        })
}

/// What a file offers the rule sets: a TCP conversation over IPv4 and the busiest IPv4 source.
struct Sample {
    path: PathBuf,
    packets: usize,
    conv: (IpAddr, u16, IpAddr, u16),
    host: IpAddr,
}

/// The busiest qualifying corpus files (at most `n`).
fn samples(n: usize) -> Vec<Sample> {
    let Some(files) = weir_testkit::corpus() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for path in files {
        let Ok(mut r) = FileReader::open(&path) else {
            continue;
        };
        if !matches!(r.format(), FileFormat::Pcap(_)) {
            continue;
        }
        let (mut count, mut ok) = (0usize, true);
        let mut conv = None;
        let mut hosts: std::collections::HashMap<IpAddr, usize> = Default::default();
        loop {
            match r.next_packet() {
                Ok(Some(p)) => {
                    count += 1;
                    if p.link != LinkType::ETHERNET || !plain(p.data) {
                        ok = false;
                        break;
                    }
                    let d = decode(p.link, p.data);
                    if let Some(ip) = d.ip() {
                        if ip.src.is_ipv4() {
                            *hosts.entry(ip.src).or_default() += 1;
                        }
                        if let (None, Some(weir_decode::Transport::Tcp { src, dst, .. })) =
                            (&conv, d.transport())
                        {
                            if ip.src.is_ipv4() {
                                conv = Some((ip.src, src, ip.dst, dst));
                            }
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        let host = hosts.into_iter().max_by_key(|h| (h.1, h.0)).map(|h| h.0);
        if let (true, Some(conv), Some(host)) = (ok && count >= 20, conv, host) {
            out.push(Sample {
                path,
                packets: count,
                conv,
                host,
            });
        }
    }
    out.sort_by(|a, b| b.packets.cmp(&a.packets).then(a.path.cmp(&b.path)));
    out.truncate(n);
    if out.is_empty() {
        weir_testkit::missing("no plain Ethernet pcap file with TCP in the corpus");
    }
    out
}

/// The rules summary's first line (the live commands' wording), as numbers: packets in, passed,
/// dropped, sliced, sampled out.
fn summary(stderr: &str) -> [u64; 5] {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("  rules (version ") && l.contains(" in, "))
        .unwrap_or_else(|| panic!("no rules summary in {stderr}"));
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(|w| w.parse().unwrap())
        .collect();
    // version, reloads, failed reloads, packets in, passed, dropped, cut off, sliced, sampled
    // out, unmatched, tagged
    [nums[3], nums[4], nums[5], nums[7], nums[8]]
}

/// Runs `weir read --rules` (text `rules`) on `input` into `out` with `extra` options; checks the
/// counters against the input and the output, and returns stderr.
fn weir_read(rules: &str, input: &Path, out: &Path, extra: &[&str]) -> String {
    weir_read_with(rules, input, out, extra, false)
}

/// [`weir_read`], through the parallel reader when `parallel` (`WEIR_PARALLEL_MIN_BYTES=0`:
/// reading threads filter ranges, the main thread replays the packets in file order into the
/// rules), else sequentially.
fn weir_read_with(rules: &str, input: &Path, out: &Path, extra: &[&str], parallel: bool) -> String {
    let dir = out.parent().unwrap();
    let rf = dir.join("rules.txt");
    std::fs::write(&rf, rules).unwrap();
    let min = if parallel { "0" } else { "1000000000000000" };
    let o = run(weir()
        .env("WEIR_PARALLEL_MIN_BYTES", min)
        .arg("read")
        .args(extra)
        .arg("--rules")
        .arg(&rf)
        .arg("-r")
        .arg(input)
        .arg("-w")
        .arg(out));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "weir read --rules failed: {err}");
    let [n, passed, dropped, sliced, sampled] = summary(&err);
    assert_eq!(n, packets(input).len() as u64, "{err}");
    assert_eq!(n, passed + dropped + sliced + sampled, "{err}");
    assert_eq!(packets(out).len() as u64, passed + sliced, "{err}");
    // every per-rule line: packets = passed + dropped + sliced + sampled out
    for l in err
        .lines()
        .filter(|l| l.starts_with("    ") && l.contains(" packets, "))
    {
        let v: Vec<u64> = l
            .split_once(": ")
            .map(|x| x.1)
            .unwrap()
            .split(|c: char| !c.is_ascii_digit())
            .filter(|w| !w.is_empty())
            .map(|w| w.parse().unwrap())
            .collect();
        assert_eq!(v[0], v[2] + v[3] + v[4] + v[5], "{l}");
    }
    err
}

/// `tshark -T fields` of `fields` for every frame, without the dissectors these fields do not
/// need that are slow on some corpus files (VNC: minutes on one file), and without TCP
/// reassembly.
fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r").arg(file).args([
        "--disable-protocol",
        "vnc",
        "-o",
        "tcp.desegment_tcp_streams:FALSE",
        "-T",
        "fields",
    ]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = run(&mut cmd);
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split('\t').map(String::from).collect())
        .collect()
}

fn tcpdump(input: &Path, out: &Path, expr: &str) {
    let o = run(Command::new("tcpdump")
        .arg("-r")
        .arg(input)
        .arg("-w")
        .arg(out)
        .arg(expr));
    assert!(
        o.status.success(),
        "tcpdump {expr}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn net16(a: IpAddr) -> String {
    let IpAddr::V4(v) = a else { unreachable!() };
    let o = v.octets();
    format!("{}.{}.0.0/16", o[0], o[1])
}

#[test]
fn bpf_expressible_rule_sets_write_what_tcpdump_writes() {
    if !weir_testkit::have("tcpdump") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (
        tmp.path().join("weir.pcap"),
        tmp.path().join("tcpdump.pcap"),
    );
    let mut compared = 0;
    for s in samples(12) {
        let (ca, cp, cb, cq) = s.conv;
        let h = s.host;
        let net = net16(h);
        let cases = [
            (
                format!("exact tcp {ca}:{cp} {cb}:{cq} -> drop"),
                format!(
                    "not (tcp and ((ip src host {ca} and src port {cp} and ip dst host {cb} and \
                     dst port {cq}) or (ip src host {cb} and src port {cq} and ip dst host {ca} \
                     and dst port {cp})))"
                ),
            ),
            (
                format!("default drop\nhost {h} -> pass"),
                format!("ip host {h}"),
            ),
            (
                format!("default drop\nsrc {net} -> pass"),
                format!("ip src net {net}"),
            ),
            (
                "default drop\nproto tcp dport 1-1023 -> pass\nproto udp port 53 -> pass".into(),
                "(tcp dst portrange 1-1023) or (udp port 53)".into(),
            ),
            ("proto icmp -> drop".into(), "not icmp".into()),
            ("len 0-100 -> drop".into(), "not len <= 100".into()),
            (
                format!(
                    "default drop\nprio 5 proto tcp -> drop\nprio -1 host {h} proto tcp -> pass\n\
                     prio 0 proto udp -> pass"
                ),
                format!("(ip host {h} and tcp) or udp"),
            ),
            (
                format!("proto tcp -> drop continue\nproto tcp port {cp} -> pass"),
                format!("not tcp or tcp port {cp}"),
            ),
            (
                format!(
                    "exact tcp {cb}:{cq} {ca}:{cp} -> pass\nprio 1 dst {net} -> drop\n\
                     prio 2 any -> pass"
                ),
                format!(
                    "(tcp and ((ip src host {ca} and src port {cp} and ip dst host {cb} and \
                     dst port {cq}) or (ip src host {cb} and src port {cq} and ip dst host {ca} \
                     and dst port {cp}))) or not ip dst net {net}"
                ),
            ),
        ];
        for (rules, expr) in &cases {
            weir_read(rules, &s.path, &a, &["--micro"]);
            tcpdump(&s.path, &b, expr);
            let (wa, tb) = (std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
            assert!(
                wa == tb,
                "{}: rules {rules:?} vs tcpdump {expr:?}: {} vs {} packets",
                s.path.display(),
                packets(&a).len(),
                packets(&b).len()
            );
            compared += 1;
        }
    }
    eprintln!("{compared} rule sets compared with tcpdump");
    assert!(compared > 0 || !weir_testkit::peers_required());
}

#[test]
fn slicing_equals_editcap_on_the_same_packets() {
    if !weir_testkit::have("tcpdump") || !weir_testkit::have("editcap") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (a, sel, cut) = (
        tmp.path().join("weir.pcap"),
        tmp.path().join("tcp.pcap"),
        tmp.path().join("cut.pcap"),
    );
    for s in samples(6) {
        for n in [54usize, 60, 100] {
            let err = weir_read(
                &format!("default drop\nproto tcp -> slice {n}"),
                &s.path,
                &a,
                &["--micro"],
            );
            tcpdump(&s.path, &sel, "tcp");
            let o = run(Command::new("editcap")
                .args(["-F", "pcap", "-s", &n.to_string()])
                .arg(&sel)
                .arg(&cut));
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let (w, e) = (packets(&a), packets(&cut));
            assert_eq!(w, e, "{}: slice {n}", s.path.display());
            // a packet no longer than N passes whole, a longer one is sliced
            let sel = packets(&sel);
            let whole = sel.iter().filter(|p| p.data.len() <= n).count() as u64;
            let [_, passed, _, sliced, _] = summary(&err);
            assert_eq!((passed, sliced), (whole, sel.len() as u64 - whole), "{err}");
        }
    }
}

#[test]
fn tags_are_packet_comments_tshark_shows() {
    if !weir_testkit::have("tshark") || !weir_testkit::have("tcpdump") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (a, p, t) = (
        tmp.path().join("weir.pcapng"),
        tmp.path().join("weir.pcap"),
        tmp.path().join("tcpdump.pcap"),
    );
    for s in samples(2) {
        let net = net16(s.host);
        let rules = format!("src {net} -> tag lab pass\nproto udp -> tag 7 continue");
        weir_read(&rules, &s.path, &a, &["--format", "pcapng"]);
        tcpdump(&s.path, &t, &format!("ip src net {net}"));
        let tagged = packets(&t).len();
        let rows = tshark_fields(&a, &["frame.comment", "ip.src", "ip.proto", "ipv6.nxt"]);
        assert_eq!(rows.len(), s.packets);
        let prefix: Vec<&str> = net.split('.').take(2).collect();
        let mut labs = 0;
        for r in &rows {
            let in_net = r[1].split('.').take(2).eq(prefix.iter().copied());
            // the first rule stops: a UDP packet from the subnet is "lab", others UDP "7"
            let want = if in_net {
                "lab"
            } else if r[2] == "17" || r[3] == "17" {
                "7"
            } else {
                ""
            };
            assert_eq!(r[0], want, "{}: {r:?}", s.path.display());
            labs += usize::from(in_net);
        }
        assert_eq!(labs, tagged, "{}", s.path.display());
        // classic pcap cannot hold them: counted and said
        let err = weir_read(&rules, &s.path, &p, &[]);
        let udp = rows.iter().filter(|r| r[0] == "7").count();
        if labs + udp > 0 {
            assert!(
                err.contains(&format!(
                    "{} tagged packets written without their tags or comments",
                    labs + udp
                )),
                "{err}"
            );
        }
    }
}

#[test]
fn sampling_keeps_one_packet_in_n_in_file_order() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("weir.pcap");
    for s in samples(3) {
        for parallel in [false, true] {
            let err = weir_read_with("any -> sample 3", &s.path, &a, &[], parallel);
            let want: Vec<Pkt> = packets(&s.path).into_iter().step_by(3).collect();
            assert_eq!(packets(&a), want, "{}", s.path.display());
            let [n, passed, _, _, out] = summary(&err);
            assert_eq!((passed, out), (n.div_ceil(3), n - n.div_ceil(3)));
        }
    }
}

/// The README's rules blocks.
fn readme_blocks() -> Vec<String> {
    let md = include_str!("../../../README.md");
    let mut out = Vec::new();
    let mut rest = md;
    while let Some(i) = rest.find("```rules\n") {
        let body = &rest[i + 9..];
        let end = body.find("```").unwrap();
        out.push(body[..end].to_string());
        rest = &body[end..];
    }
    out
}

#[test]
fn the_readme_cutoff_example_keeps_4k_per_flow() {
    if !weir_testkit::have("tshark") {
        return;
    }
    let block = readme_blocks()
        .into_iter()
        .find(|b| b.contains("cutoff 4k"))
        .expect("README has the 4 KB per flow example");
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("weir.pcap");
    let fields = [
        "ip.src",
        "ipv6.src",
        "ip.dst",
        "ipv6.dst",
        "ip.proto",
        "ipv6.nxt",
        "tcp.srcport",
        "udp.srcport",
        "tcp.dstport",
        "udp.dstport",
        "frame.cap_len",
    ];
    for (i, s) in samples(3).into_iter().enumerate() {
        weir_read_with(&block, &s.path, &a, &[], i % 2 == 1);
        // the lengths the cutoff keeps, flow by flow (both directions), recomputed from tshark
        let mut used: std::collections::HashMap<(String, String, String), u64> = Default::default();
        let mut want = Vec::new();
        for r in tshark_fields(&s.path, &fields) {
            let cap: u64 = r[10].parse().unwrap();
            // the outer header's values (an ICMP error shows its quoted header's too)
            let first = |i: usize| r[i].split(',').next().unwrap_or("");
            let ip = |i: usize| format!("{}{}", first(i), first(i + 1));
            let (src, dst) = (ip(0), ip(2));
            if src.is_empty() {
                want.push(cap); // no IP: no flow, kept whole
                continue;
            }
            let proto = ip(4);
            let (sp, dp) = (ip(6), ip(8));
            let (x, y) = (format!("{src} {sp}"), format!("{dst} {dp}"));
            let key = if x <= y { (proto, x, y) } else { (proto, y, x) };
            let u = used.entry(key).or_default();
            if *u < 4096 {
                want.push(cap.min(4096 - *u));
            }
            *u += cap;
        }
        let got: Vec<u64> = packets(&a).iter().map(|p| p.data.len() as u64).collect();
        assert_eq!(got, want, "{}", s.path.display());
    }
}

#[test]
fn a_bad_rule_file_is_refused_with_its_line_and_column() {
    let Some(s) = samples(1).into_iter().next() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let rf = tmp.path().join("bad.rules");
    std::fs::write(&rf, "any -> pass\nproto tcp port 8o -> drop\n").unwrap();
    let o = run(weir()
        .arg("read")
        .arg("--rules")
        .arg(&rf)
        .arg("-r")
        .arg(&s.path)
        .arg("-w")
        .arg(tmp.path().join("o.pcap")));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("bad.rules") && err.contains("line 2, column"),
        "{err}"
    );
    // --control is for the live commands
    let o = run(weir()
        .args(["read", "--control", "/tmp/x.sock", "--rules"])
        .arg(&rf)
        .arg("-r")
        .arg(&s.path));
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
