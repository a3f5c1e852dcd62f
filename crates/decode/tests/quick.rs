//! Differential tests of `weir_decode::quick` against the full decoder: on frames generated from
//! every shape quick reads (and shapes next to them), on the same frames with bytes overwritten
//! and cut anywhere, and on the hand-built encapsulations. Whenever quick accepts a frame, the
//! decoder must find the same headers without error (`common::quick_agrees`); every packet of
//! the corpus goes through the same check in `tests/corpus.rs`.

mod common;

use common::*;
use proptest::prelude::*;
use weir_decode::quick::{self, Upper};
use weir_decode::LinkType;

/// The IP packet of a generated frame: version, extension headers, protocol, fragment fields,
/// options.
#[derive(Clone, Debug)]
struct Ip {
    v6: bool,
    /// IPv6 extension header kinds before the upper protocol (0, 43, 44, 60, 51...).
    exts: Vec<u8>,
    proto: u8,
    mf: bool,
    frag_units: u16,
    options: usize,
    tos: u8,
    ttl: u8,
    id: u32,
}

fn upper(proto: u8, sport: u16, dport: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    match proto {
        6 => tcp(sport, dport, 1, 2, flags, payload),
        17 => udp(sport, dport, payload),
        1 | 58 => icmp(sport as u8, dport as u8, 1, 2, payload),
        132 => sctp(sport, dport, 7, payload),
        _ => payload.to_vec(),
    }
}

fn ip_packet(ip: &Ip, l4: &[u8]) -> Vec<u8> {
    if ip.v6 {
        // innermost first: the last extension header carries `proto`
        let mut next = ip.proto;
        let mut body = l4.to_vec();
        for &k in ip.exts.iter().rev() {
            body = match k {
                44 => frag6(next, ip.frag_units, ip.mf, ip.id, &body),
                51 => ah(next, 1, &body),
                _ => ext(next, (ip.options / 4) as u8, &body),
            };
            next = k;
        }
        let mut p = ipv6_full(ip.tos, ip.id & 0xfffff, next, &body);
        p[7] = ip.ttl;
        p
    } else {
        let v4 = V4 {
            tos: ip.tos,
            ttl: ip.ttl,
            id: ip.id as u16,
            mf: ip.mf,
            frag_units: ip.frag_units,
            df: false,
            ..V4::new(ip.proto)
        };
        v4.build_opts(&vec![1u8; ip.options / 4 * 4], l4)
    }
}

fn ip_strategy() -> impl Strategy<Value = Ip> {
    (
        any::<bool>(),
        prop::collection::vec(prop::sample::select(vec![0u8, 43, 44, 60, 51, 135]), 0..6),
        prop::sample::select(vec![6u8, 17, 1, 58, 132, 47, 4, 41, 50, 89, 0, 44, 59]),
        any::<bool>(),
        prop::sample::select(vec![0u16, 0, 0, 1, 185]),
        prop::sample::select(vec![0usize, 0, 4, 12, 40]),
        any::<u8>(),
        any::<u8>(),
        any::<u32>(),
    )
        .prop_map(
            |(v6, exts, proto, mf, frag_units, options, tos, ttl, id)| Ip {
                v6,
                exts: if v6 { exts } else { Vec::new() },
                proto,
                mf,
                frag_units,
                options,
                tos,
                ttl,
                id,
            },
        )
}

/// A whole frame: link type, tags, labels, IP, transport.
fn frame_strategy() -> impl Strategy<Value = (u32, Vec<u8>)> {
    (
        prop::sample::select(vec![1u32, 1, 1, 101, 12, 228, 229, 113, 276, 0, 108]),
        prop::collection::vec(
            (
                prop::sample::select(vec![0x8100u16, 0x88a8, 0x9100, 0x9200]),
                0u16..4096,
            ),
            0..7,
        ),
        0usize..7,
        ip_strategy(),
        any::<u16>(),
        prop::sample::select(vec![80u16, 53, 4789, 443]),
        any::<u8>(),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(|(link, tags, labels, ip, sport, dport, flags, payload)| {
            let l4 = upper(ip.proto, sport, dport, flags, &payload);
            let packet = ip_packet(&ip, &l4);
            let et = if ip.v6 { 0x86dd } else { 0x0800 };
            // MPLS labels, then tags outside them
            let mut body = packet;
            let mut t = et;
            if labels > 0 {
                let mut stack = Vec::new();
                for i in 0..labels {
                    stack.extend_from_slice(&mpls(100 + i as u32, 0, i + 1 == labels, 64));
                }
                stack.extend_from_slice(&body);
                body = stack;
                t = 0x8847;
            }
            for &(tpid, vid) in tags.iter().rev() {
                body = vlan(vid, t, &body);
                t = tpid;
            }
            let frame = match link {
                1 => eth(t, &body),
                113 => sll(t, &body),
                276 => sll2(t, &body),
                // no link header for tags and labels: the bare IP packet
                0 => cat(&[
                    &(if ip.v6 { 24u32 } else { 2 }).to_le_bytes(),
                    &ip_packet(&ip, &l4),
                ]),
                108 => cat(&[
                    &(if ip.v6 { 24u32 } else { 2 }).to_be_bytes(),
                    &ip_packet(&ip, &l4),
                ]),
                _ => ip_packet(&ip, &l4),
            };
            // raw IPv4 / IPv6 links carry one version only
            let link = match (link, ip.v6) {
                (228, true) => 229,
                (229, false) => 228,
                (l, _) => l,
            };
            (link, frame)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]

    /// Generated frames of every shape, whole: quick and the decoder agree.
    #[test]
    fn quick_agrees_on_generated_frames((link, frame) in frame_strategy()) {
        quick_agrees(LinkType(link), &frame);
    }

    /// The same frames with bytes overwritten and cut anywhere (lengths that lie, truncated
    /// headers, flipped versions and flags).
    #[test]
    fn quick_agrees_on_damaged_frames(
        (link, mut frame) in frame_strategy(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        for (at, v) in flips {
            let i = at.index(frame.len());
            frame[i] = v;
        }
        let n = cut.index(frame.len() + 1);
        quick_agrees(LinkType(link), &frame[..n]);
    }

    /// Random bytes on every link type: never a panic, and agreement when accepted.
    #[test]
    fn quick_never_panics(
        link in prop::sample::select(vec![0u32, 1, 12, 14, 101, 108, 113, 228, 229, 276, 147]),
        bytes in prop::collection::vec(any::<u8>(), 0..128),
    ) {
        quick_agrees(LinkType(link), &bytes);
    }
}

/// Quick reads the shapes it claims (it is not refusing everything) and refuses the others.
#[test]
fn quick_reads_the_common_encapsulations() {
    let mut accepted = Vec::new();
    for (name, link, frame) in all_encapsulations() {
        if quick_agrees(LinkType(link), &frame) {
            accepted.push(name);
        }
    }
    for name in [
        "eth/ipv4/tcp",
        "eth/ipv6/udp",
        "eth/ipv4/icmp",
        "eth/ipv6/icmpv6",
        "eth/ipv4/sctp",
        "eth/qinq/ipv4/tcp",
        "eth/9100/ipv6/udp",
        "eth/mpls/mpls/ipv4/tcp",
        "eth/mpls/ipv6/udp",
    ] {
        assert!(
            accepted.contains(&name),
            "{name} refused; accepted {accepted:?}"
        );
    }
    for name in ["eth/arp", "eth/mpls/cw/eth/ipv4/tcp", "eth/pppoe/ipv4/tcp"] {
        assert!(!accepted.contains(&name), "{name} accepted");
    }
}

/// The fields of a QinQ / MPLS / IPv6 fragment frame, read back.
#[test]
fn quick_reads_stacks_and_fragments() {
    let l4 = udp(1000, 53, b"abcd");
    let ip = ipv6(44, &frag6(17, 0, true, 0xdead_beef, &l4));
    let mut body = cat(&[&mpls(16, 0, true, 9), &ip]);
    body = vlan(10, 0x8847, &body);
    let frame = eth(0x88a8, &vlan(200, 0x8100, &body));
    let h = quick::parse(LinkType::ETHERNET, &frame).unwrap();
    assert!(quick_agrees(LinkType::ETHERNET, &frame));
    assert_eq!((h.vlan_tags, h.vlan, h.mpls_labels), (2, 200, 1));
    assert_eq!((h.upper, h.src_port, h.dst_port), (Upper::Udp, 1000, 53));
    let f = h.fragment.unwrap();
    assert_eq!((f.id, f.offset, f.more), (0xdead_beef, 0, true));
    // five tags: beyond quick's depth, the decoder's business
    let mut deep = eth(0x0800, &ipv4(17, &l4))[14..].to_vec();
    let mut t = 0x0800;
    for vid in 0..5 {
        deep = vlan(vid, t, &deep);
        t = 0x8100;
    }
    let deep = eth(t, &deep);
    assert_eq!(quick::parse(LinkType::ETHERNET, &deep), None);
    assert!(weir_decode::decode(LinkType::ETHERNET, &deep)
        .ip()
        .is_some());
}

/// The generator reaches the shapes quick reads: a good share of its frames is accepted (and
/// agreed on), so the properties above test agreement, not only refusal.
#[test]
fn generated_frames_are_mostly_read() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let s = frame_strategy();
    let (mut n, mut accepted) = (0, 0);
    for _ in 0..5000 {
        let (link, frame) = s.new_tree(&mut runner).unwrap().current();
        n += 1;
        accepted += usize::from(quick_agrees(LinkType(link), &frame));
    }
    eprintln!("{accepted} of {n} generated frames read by quick");
    assert!(accepted * 3 >= n, "only {accepted} of {n}");
}
