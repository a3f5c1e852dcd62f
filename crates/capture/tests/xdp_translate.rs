//! The classic-to-eBPF translation of the AF_XDP backend's drop stage
//! (`weir_capture::ebpf::classic_to_xdp`, in the program of `weir_capture::xdp::program`)
//! against its oracle, the classic program itself: for each of a set of libpcap-compiled
//! filters (host, net, port, portrange, vlan, ip6, TCP flags, fragments, indirect loads,
//! arithmetic, `len`), the classic program run by weir-filter's interpreter (checked against
//! libpcap by weir-filter's own tests) and the translated XDP program run by the kernel
//! (`BPF_PROG_TEST_RUN`) give the same verdict on every packet: `XDP_DROP` where the classic
//! program matches, the redirect's fallback `XDP_PASS` (no socket in the map) where it does
//! not; and the program's per-CPU drop counter counts exactly the matches.
//!
//! The packets: hand-built frames (tagged, fragmented, truncated right after a header, IPv6)
//! and the Ethernet captures of the shared corpus (whole packets of 14 to 3 000 bytes; the
//! corpus through weir-testkit, so a missing corpus fails under `WEIR_REQUIRE_PEERS=1`).
//! Needs root (`CAP_BPF`/`CAP_SYS_ADMIN`) like every capture test.

use std::os::fd::AsRawFd;
use std::path::Path;

use weir_capture::ebpf;
use weir_filter::Filter;
use weir_packet::LinkType;

const FILTERS: &[&str] = &[
    "host 10.0.0.9",
    "host 192.168.1.1 or host 10.1.1.1",
    "net 10.0.0.0/8",
    "src net 192.168.0.0/16 and not dst net 192.168.0.0/16",
    "port 80",
    "udp port 53",
    "tcp portrange 1000-2000",
    "portrange 5060-5070",
    "vlan",
    "vlan 100",
    "vlan and host 10.0.0.9",
    "ip6",
    "ip6 and tcp",
    "ip6 and udp port 53",
    "tcp[tcpflags] & (tcp-syn|tcp-fin) != 0",
    "tcp[tcpflags] == tcp-syn",
    "tcp[13] = 18",
    "ip[6:2] & 0x1fff != 0",
    "ip[6] & 0x20 != 0",
    "ip and (ip[2:2] - ((ip[0] & 0xf) << 2)) > 100",
    "tcp and tcp[((tcp[12] & 0xf0) >> 2):4] = 0x47455420",
    "ip[2:2] / 4 > 100 and ip[2:2] % 3 == 1",
    "len > 500",
    "greater 100 and less 200",
    "ether broadcast",
    "icmp or icmp6",
    "ip proto 47",
    "mpls",
];

/// Ethernet frame with `ethertype` after optional 802.1Q tags, then `rest`.
fn eth(tags: &[u16], ethertype: u16, rest: &[u8]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
    for t in tags {
        f.extend_from_slice(&0x8100u16.to_be_bytes());
        f.extend_from_slice(&t.to_be_bytes());
    }
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(rest);
    f
}

/// IPv4 header (20 bytes) + `l4`, with `frag` as the flags/offset word.
fn ipv4(proto: u8, src: [u8; 4], dst: [u8; 4], frag: u16, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 1]);
    h.extend_from_slice(&frag.to_be_bytes());
    h.extend_from_slice(&[64, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    h.extend_from_slice(l4);
    h
}

fn tcp(sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&sport.to_be_bytes());
    t.extend_from_slice(&dport.to_be_bytes());
    t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    t
}

fn udp(sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = Vec::new();
    u.extend_from_slice(&sport.to_be_bytes());
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

fn ipv6(next: u8, l4: &[u8]) -> Vec<u8> {
    let mut h = vec![0x60, 0, 0, 0];
    h.extend_from_slice(&(l4.len() as u16).to_be_bytes());
    h.extend_from_slice(&[next, 64]);
    h.extend_from_slice(&[0x20, 1, 0xd, 0xb8]);
    h.extend_from_slice(&[0; 11]);
    h.push(1);
    h.extend_from_slice(&[0x20, 1, 0xd, 0xb8]);
    h.extend_from_slice(&[0; 11]);
    h.push(2);
    h.extend_from_slice(l4);
    h
}

/// Frames that exercise each filter both ways, and the bounds checks.
fn synthetic() -> Vec<Vec<u8>> {
    let (a, b, c) = ([10, 0, 0, 9], [10, 0, 0, 1], [192, 168, 1, 1]);
    let get = b"GET / HTTP/1.1\r\n";
    let big = vec![0x78u8; 600];
    let mut v = vec![
        eth(&[], 0x0800, &ipv4(17, a, b, 0, &udp(4000, 53, b"q"))),
        eth(&[], 0x0800, &ipv4(6, c, b, 0, &tcp(1500, 80, 0x02, b""))),
        eth(&[], 0x0800, &ipv4(6, b, c, 0, &tcp(80, 1500, 0x12, get))),
        eth(&[], 0x0800, &ipv4(6, b, a, 0, &tcp(3333, 80, 0x18, get))),
        eth(&[], 0x0800, &ipv4(6, b, a, 0, &tcp(3333, 8080, 0x11, &big))),
        eth(
            &[],
            0x0800,
            &ipv4(17, c, a, 0, &udp(5060, 5065, &big[..150])),
        ),
        eth(&[], 0x0800, &ipv4(17, c, a, 0x2000, &udp(7, 7, b"first"))),
        eth(&[], 0x0800, &ipv4(17, c, a, 0x0010, b"second fragment")),
        eth(&[], 0x0800, &ipv4(1, a, c, 0, &[8, 0, 0, 0, 0, 0, 0, 0])),
        eth(&[], 0x0800, &ipv4(47, a, c, 0, &[0; 8])),
        eth(&[100], 0x0800, &ipv4(17, a, b, 0, &udp(4000, 53, b"q"))),
        eth(&[200], 0x0800, &ipv4(6, c, a, 0, &tcp(1500, 80, 0x02, b""))),
        eth(
            &[100, 7],
            0x0800,
            &ipv4(6, a, c, 0, &tcp(1500, 80, 0x01, b"")),
        ),
        eth(&[], 0x86dd, &ipv6(6, &tcp(1999, 443, 0x02, b""))),
        eth(&[], 0x86dd, &ipv6(17, &udp(1234, 53, b"query"))),
        eth(&[], 0x86dd, &ipv6(58, &[128, 0, 0, 0, 0, 0, 0, 0])),
        eth(&[], 0x8847, &[0, 1, 0x41, 64]),
        eth(&[], 0x0806, &[0; 28]),
    ];
    // truncated right after each header: every load past the end must mean "no match"
    let whole = eth(&[], 0x0800, &ipv4(6, b, a, 0, &tcp(3333, 80, 0x18, get)));
    for cut in [14, 15, 20, 33, 34, 35, 40, 47, 48, 54, 56] {
        v.push(whole[..cut].to_vec());
    }
    let tagged = eth(&[100], 0x86dd, &ipv6(17, &udp(1, 53, b"x")));
    for cut in [16, 18, 30, 58, 60] {
        v.push(tagged[..cut].to_vec());
    }
    // an IPv4 header length word that points past the end (indirect loads)
    let mut wild = eth(&[], 0x0800, &ipv4(6, b, a, 0, &tcp(1, 80, 0x02, b"")));
    wild[14] = 0x4f;
    v.push(wild);
    v
}

/// The whole packets (14..=3000 bytes, captured = original length) of a classic pcap file
/// with link type Ethernet, at most `limit`; none for anything else.
fn ethernet_packets(path: &Path, limit: usize) -> Vec<Vec<u8>> {
    let Ok(b) = std::fs::read(path) else {
        return Vec::new();
    };
    if b.len() < 24 {
        return Vec::new();
    }
    let le = match b[..4] {
        [0xd4, 0xc3, 0xb2, 0xa1] | [0x4d, 0x3c, 0xb2, 0xa1] => true,
        [0xa1, 0xb2, 0xc3, 0xd4] | [0xa1, 0xb2, 0x3c, 0x4d] => false,
        _ => return Vec::new(),
    };
    let u32_at = |at: usize| {
        let w = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if le {
            u32::from_le_bytes(w)
        } else {
            u32::from_be_bytes(w)
        }
    };
    if u32_at(20) & 0x03ff_ffff != 1 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() && out.len() < limit {
        let (cap, orig) = (u32_at(at + 8) as usize, u32_at(at + 12) as usize);
        let end = at + 16 + cap;
        if end > b.len() {
            break;
        }
        if cap == orig && (14..=3000).contains(&cap) {
            out.push(b[at + 16..end].to_vec());
        }
        at = end;
    }
    out
}

/// Runs `expr`'s classic program and its XDP translation on every packet; returns (packets,
/// matches).
fn compare(expr: &str, packets: &[Vec<u8>]) -> (usize, usize) {
    let filter = Filter::compile(expr, LinkType::ETHERNET, 262_144).unwrap();
    let xsks = ebpf::map_create(ebpf::map_type::XSKMAP, 4, 4, 1).unwrap();
    let counter = ebpf::map_create(ebpf::map_type::PERCPU_ARRAY, 4, 8, 1).unwrap();
    let insns = weir_capture::xdp::program(
        xsks.as_raw_fd(),
        counter.as_raw_fd(),
        Some(filter.instructions()),
    )
    .unwrap_or_else(|e| panic!("{expr}: {e}"));
    let prog = ebpf::prog_load(ebpf::PROG_TYPE_XDP, &insns, "weir_test")
        .unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut matches = 0;
    for (i, p) in packets.iter().enumerate() {
        let want = filter.matches(p, p.len() as u32);
        let got = ebpf::prog_test_run(&prog, p)
            .unwrap_or_else(|e| panic!("{expr}: packet {i} ({} bytes): {e}", p.len()));
        let want_action = if want {
            ebpf::xdp_action::DROP
        } else {
            ebpf::xdp_action::PASS
        };
        assert_eq!(
            got as i32,
            want_action,
            "{expr}: packet {i} ({} bytes) {:02x?}",
            p.len(),
            &p[..p.len().min(64)]
        );
        matches += usize::from(want);
    }
    assert_eq!(
        ebpf::percpu_sum(&counter, 0).unwrap() as usize,
        matches,
        "{expr}: the drop counter"
    );
    (packets.len(), matches)
}

#[test]
fn the_translation_gives_the_classic_verdicts_on_hand_built_frames() {
    let packets = synthetic();
    for expr in FILTERS {
        let (n, m) = compare(expr, &packets);
        eprintln!("{expr}: {m} of {n} match");
    }
    // the set exercises both verdicts of the main filters
    for expr in [
        "host 10.0.0.9",
        "vlan",
        "ip6 and tcp",
        "ip[6:2] & 0x1fff != 0",
        "tcp[13] = 18",
        "tcp and tcp[((tcp[12] & 0xf0) >> 2):4] = 0x47455420",
        "len > 500",
        "portrange 5060-5070",
        "vlan and host 10.0.0.9",
    ] {
        let (n, m) = compare(expr, &packets);
        assert!(m > 0 && m < n, "{expr}: {m} of {n}");
    }
}

#[test]
fn the_translation_gives_the_classic_verdicts_on_the_corpus() {
    let Some(files) = weir_testkit::corpus() else {
        return;
    };
    let mut packets = Vec::new();
    for f in &files {
        packets.extend(ethernet_packets(f, 200));
    }
    assert!(packets.len() > 10_000, "{} corpus packets", packets.len());
    let mut matched = 0;
    for expr in FILTERS {
        let (n, m) = compare(expr, &packets);
        eprintln!("{expr}: {m} of {n} corpus packets match");
        matched += usize::from(m > 0);
    }
    assert!(matched >= FILTERS.len() - 4, "most filters match something");
}

#[test]
fn untranslatable_programs_are_refused_by_name() {
    use weir_filter::{op, Insn};
    // an ancillary load (what libpcap emits for live handles only)
    let prog = [
        Insn::stmt(op::BPF_LD | op::BPF_W | op::BPF_ABS, 0xffff_f000 + 48),
        Insn::stmt(op::BPF_RET | op::BPF_A, 0),
    ];
    let e = ebpf::classic_to_xdp(&prog, &[ebpf::Insn::exit()], &[ebpf::Insn::exit()]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "classic instruction 0 (code 0x0020, k 0xfffff030) has no eBPF translation"
    );
    // a jump past the end
    let prog = [Insn::jump(op::BPF_JMP | op::BPF_JEQ | op::BPF_K, 0, 5, 0)];
    let e = ebpf::classic_to_xdp(&prog, &[], &[]).unwrap_err();
    assert_eq!(e, ebpf::TranslateError::BadJump(0));
}
