//! `weir flows` against softflowd on the corpus: for every capture (up to 20 MB), the set of
//! conversations (canonical 5-tuples) weir meters must be softflowd's, or the file must be in
//! [`KNOWN`] with the reason it differs.
//!
//! Both run with timeouts far beyond any capture (softflowd `-t ...=100000000s`, weir
//! `--idle-timeout/--active-timeout/--fin-grace 1e8`), so each tool holds one flow per
//! conversation and the comparison does not depend on the two tools' different expiry rules
//! (softflowd in `-r` mode expires on table size only; it also has no FIN grace).
//!
//! Normalisation, each for a documented difference of convention, not of result:
//! * keys are compared as unordered endpoint pairs: softflowd keys a flow by sorted *addresses*
//!   only, so when both ends share one address (127.0.0.1 ↔ 127.0.0.1, many test captures) it
//!   makes one flow per direction where weir makes one flow with two directions;
//! * weir keys on the VLAN id, softflowd's default track level ("full") does not: VLANs are
//!   dropped from weir's keys before comparing (the set merges them);
//! * ICMP: both carry type/code in the ports but with different conventions; ICMP ports are
//!   zeroed on both sides;
//! * SCTP: weir keys on SCTP ports, softflowd (ports for TCP and UDP only) does not; SCTP ports
//!   are zeroed on both sides.
//!
//! softflowd's flows come from its `-D` debug output (`EXPIRED: ... [A]:p <> [B]:q proto:N`),
//! weir's from `--json` with `--biflow`.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{corpus, run, weir};

type Conv = (String, u16, String, u16, u8);

/// Files whose conversation sets differ, and why (found by inspecting each with `weir decode`
/// and softflowd -D). Every entry is a difference of decoding depth, not a metering error.
const KNOWN: &[(&str, &str)] = &[
    // Tunnels: weir meters the innermost IP packet (the conversation), softflowd the outer one.
    ("bug-5633-gre-02__gre-sample.pcap", "GRE tunnel"),
    ("bug-7725-01__ip_in_ip.pcap", "IP in IP"),
    ("bug-7725-03__ip_in_ip.pcap", "IP in IP"),
    ("decode-erspan-typeI-02__input.pcap", "ERSPAN"),
    (
        "flow-pkt-recursion__middleware-pkt-flows.pcap",
        "nested tunnels",
    ),
    // Framings softflowd does not decode at all (it reports 0 flows or skips those packets).
    ("bug-4810__pppoe-session-http.pcap", "PPPoE"),
    (
        "defrag__bug-6887-defrag-ppp-ipv4-tcp-syn__frag-ppp-ip-tcp-syn.pcap",
        "PPP link type",
    ),
    ("http-ipv6__input.pcap", "link type softflowd skips"),
    ("http-post-file__input.pcap", "link type softflowd skips"),
    // More tunnels (GRE, IP in IP, IPv6 in IPv6, VXLAN, GRE+PPP): inner vs outer conversation.
    ("bug-2576-01-ips__temp6.pcap", "GRE tunnel"),
    ("bug-2576-02-ips__temp1.pcap", "GRE tunnel"),
    ("bug-2576-03-ips__temp6.pcap", "GRE tunnel"),
    ("bug-2576-04-ips__temp6.pcap", "GRE tunnel"),
    ("bug-4571-01__ipv4_over_ipv4.pcap", "IPv4 in IPv4"),
    ("bug-4571-03__ipv6_over_ipv6.pcap", "IPv6 in IPv6"),
    ("bug-5437-01__input.pcap", "IP in IP"),
    (
        "defrag__bug-6942-6887-defrag-eth-ip-gre-ppp-ip-udp-data__eth-ip-gre-ppp-max-ip-packet.pcap",
        "GRE carrying PPP",
    ),
    ("vxlan-decoder-02__vxlan.pcap", "VXLAN"),
    ("vxlan-non-zero-reserved-fields__input.pcap", "VXLAN"),
    // A TCP header cut short (snap length / damage): softflowd takes the ports from the first
    // four bytes, weir's decoder rejects the partial header and meters the packet with ports 0
    // (counted as "without a transport header" in the summary).
    ("transform-base64-7296__input.pcap", "truncated TCP header"),
    ("drop-protocol-change__input.pcap", "truncated TCP header"),
    // Malformed IPv6 fragment chains (nested or overlapping fragment headers): softflowd keys the
    // leftover fragments with next header 0, weir with the fragment header's next header (44 when
    // a fragment header follows a fragment header) or attributes them to their flow.
    ("ipv6-evasion__ipv6-malformed-fragments-*", "malformed IPv6 fragment chains"),
    // IPv6 packets softflowd does not meter at all (not investigated further): link-local mDNS
    // to ff02::fb, and one ::1 <-> ::1 TCP connection.
    ("smb-length-5770__input.pcap", "IPv6 link-local multicast missing in softflowd"),
    ("http-urldecode-body__input.pcap", "IPv6 loopback flow missing in softflowd"),
];

fn known(name: &str) -> Option<&'static str> {
    KNOWN.iter().find_map(|(n, why)| {
        let hit = match n.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => *n == name,
        };
        hit.then_some(*why)
    })
}

fn softflowd_convs(file: &Path) -> Option<BTreeSet<Conv>> {
    let big = "100000000s";
    let mut cmd = std::process::Command::new("softflowd");
    cmd.args(["-r"])
        .arg(file)
        .args(["-v", "5", "-n", "127.0.0.1:9", "-D", "-m", "1000000"]);
    for t in [
        "general", "maxlife", "tcp", "tcp.rst", "tcp.fin", "udp", "icmp",
    ] {
        cmd.args(["-t", &format!("{t}={big}")]);
    }
    let out = run(&mut cmd);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !text.contains("Flows expired:") {
        return None; // softflowd refused the file (link type it does not know)
    }
    let mut set = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("EXPIRED: ") else {
            continue;
        };
        let t: Vec<&str> = rest.split_whitespace().collect();
        let ep = |s: &str| -> (String, u16) {
            let (a, p) = s.rsplit_once("]:").expect("[addr]:port");
            (
                a.trim_start_matches('[').to_string(),
                p.parse().expect("port"),
            )
        };
        let (a, pa) = ep(t[1]);
        let (b, pb) = ep(t[3]);
        let proto: u8 = t[4]
            .strip_prefix("proto:")
            .expect("proto:")
            .parse()
            .unwrap();
        set.insert(conv(a, pa, b, pb, proto));
    }
    Some(set)
}

fn conv(a: String, pa: u16, b: String, pb: u16, proto: u8) -> Conv {
    let (pa, pb) = if matches!(proto, 1 | 58 | 132) {
        (0, 0)
    } else {
        (pa, pb)
    };
    let (a, b) = (
        (a.parse::<std::net::IpAddr>().unwrap(), pa),
        (b.parse::<std::net::IpAddr>().unwrap(), pb),
    );
    let (x, y) = if a <= b { (a, b) } else { (b, a) };
    (x.0.to_string(), x.1, y.0.to_string(), y.1, proto)
}

fn weir_convs(file: &Path, dir: &Path) -> BTreeSet<Conv> {
    let json = dir.join("flows.json");
    let out = run(weir()
        .args(["flows", "-r"])
        .arg(file)
        .args([
            "--biflow",
            "--idle-timeout",
            "1e8",
            "--active-timeout",
            "1e8",
        ])
        .args(["--fin-grace", "1e8", "--json"])
        .arg(&json));
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "weir flows failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&json).unwrap();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            conv(
                v["sourceIPAddress"].as_str().unwrap().to_string(),
                v["sourceTransportPort"].as_u64().unwrap() as u16,
                v["destinationIPAddress"].as_str().unwrap().to_string(),
                v["destinationTransportPort"].as_u64().unwrap() as u16,
                v["protocolIdentifier"].as_u64().unwrap() as u8,
            )
        })
        .collect()
}

#[test]
fn conversations_match_softflowd() {
    let dir = tempfile::tempdir().unwrap();
    let (mut compared, mut same, mut known_seen) = (0, 0, Vec::new());
    let mut unexplained = Vec::new();
    for file in corpus() {
        if std::fs::metadata(&file).unwrap().len() > 20_000_000 {
            continue;
        }
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let w = weir_convs(&file, dir.path());
        let Some(s) = softflowd_convs(&file) else {
            continue;
        };
        compared += 1;
        if w == s {
            same += 1;
            continue;
        }
        if let Some(why) = known(&name) {
            known_seen.push((name, why));
            continue;
        }
        let only_w: Vec<_> = w.difference(&s).take(3).collect();
        let only_s: Vec<_> = s.difference(&w).take(3).collect();
        unexplained.push(format!(
            "{name}: weir {} softflowd {}; only weir {only_w:?}; only softflowd {only_s:?}",
            w.len(),
            s.len()
        ));
    }
    eprintln!(
        "{compared} files compared, {same} identical, {} known differences",
        known_seen.len()
    );
    assert!(compared > 500, "only {compared} files compared");
    assert!(
        unexplained.is_empty(),
        "{} files differ without an explanation:\n{}",
        unexplained.len(),
        unexplained.join("\n")
    );
}
