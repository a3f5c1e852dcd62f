//! Compilation against the real tcpdump: weir's programs must be the ones `tcpdump -r FILE -d`
//! prints for a file of the same link type, snapshot length and byte order, and weir's errors
//! must be tcpdump's, word for word.

mod common;

use common::{have_tcpdump, tcpdump_error, tcpdump_listing, write_pcap, TempDir};
use weir_filter::{testing, Filter, FilterError};
use weir_packet::LinkType;

/// (LINKTYPE, snaplen, big-endian writer) combinations covered.
const FILES: &[(u32, u32, bool)] = &[
    (1, 65535, false),
    (1, 0, false),
    (1, 96, true),
    (0, 262144, false),
    (0, 65535, true),
    (9, 1500, false),
    (12, 65535, false),
    (50, 65535, false),
    (51, 65535, false),
    (101, 9000, false),
    (108, 65535, false),
    (113, 65535, false),
    (228, 65535, false),
    (229, 65535, false),
    (276, 65535, false),
];

fn weir(expr: &str, lt: u32, snap: u32, big: bool) -> Result<String, String> {
    let swapped = big != cfg!(target_endian = "big");
    Filter::compile_for_file(expr, LinkType(lt), snap, swapped)
        .map(|f| f.listing().to_string())
        .map_err(|e| e.to_string())
}

#[test]
fn programs_and_errors_equal_tcpdump_d() {
    if !have_tcpdump() {
        return;
    }
    let dir = TempDir::new("compile");
    let (mut same_prog, mut same_err) = (0, 0);
    for &(lt, snap, big) in FILES {
        let file = dir.path(&format!("lt{lt}-{snap}-{big}.pcap"));
        write_pcap(&file, lt, snap, big, &[]);
        for expr in testing::expressions() {
            let theirs = tcpdump_listing(&file, expr);
            let ours = weir(expr, lt, snap, big);
            assert_eq!(
                ours, theirs,
                "expression {expr:?}, LINKTYPE {lt}, snaplen {snap}, big-endian {big}"
            );
            if theirs.is_ok() {
                same_prog += 1;
            } else {
                same_err += 1;
            }
        }
    }
    println!("identical programs: {same_prog}, identical errors: {same_err}");
    assert!(same_prog > 500 && same_err > 20);
}

#[test]
fn syntax_error_message_is_tcpdumps() {
    let err = Filter::compile("tcp port", LinkType::ETHERNET, 65535).unwrap_err();
    assert_eq!(
        err,
        FilterError::Compile("can't parse filter expression: syntax error".into())
    );
    if !have_tcpdump() {
        return;
    }
    let dir = TempDir::new("errors");
    let file = dir.path("eth.pcap");
    write_pcap(&file, 1, 65535, false, &[]);
    for expr in [
        "tcp port",
        "host",
        "foo bar",
        "ip[2:2] / 0 > 1",
        "tcp[0] << 40 != 0",
        "port 99999",
        "net 10.0.0.1/8",
        "ether host 1:2:3",
        "ip6 host 10.0.0.1",
        "tcp[tcpflags] & tcp-bogus != 0",
        "(tcp",
    ] {
        let out = std::process::Command::new("tcpdump")
            .arg("-r")
            .arg(&file)
            .arg("--")
            .arg(expr)
            .output()
            .unwrap();
        assert!(!out.status.success(), "tcpdump accepted {expr:?}");
        let theirs = tcpdump_error(&out.stderr);
        let ours = Filter::compile(expr, LinkType::ETHERNET, 65535).unwrap_err();
        assert!(matches!(ours, FilterError::Compile(_)), "{ours:?}");
        assert_eq!(ours.to_string(), theirs, "expression {expr:?}");
    }
}

#[test]
fn unknown_link_type_is_reported_as_such() {
    let err = Filter::compile("ip", LinkType(300), 65535).unwrap_err();
    match &err {
        FilterError::UnsupportedLinkType(LinkType(300), msg) => {
            assert!(msg.starts_with("unknown data link type 300"), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    if have_tcpdump() {
        let dir = TempDir::new("lt300");
        let file = dir.path("lt300.pcap");
        write_pcap(&file, 300, 65535, false, &[]);
        assert_eq!(tcpdump_listing(&file, "ip"), Err(err.to_string()));
    }
}

#[test]
fn linktype_14_compiles_as_raw_ip() {
    // libpcap (and so tcpdump) refuses LINKTYPE 14 on Linux; weir treats it as raw IP.
    let a = Filter::compile("tcp port 80", LinkType::RAW_14, 65535).unwrap();
    let b = Filter::compile("tcp port 80", LinkType::RAW, 65535).unwrap();
    let c = Filter::compile("tcp port 80", LinkType::RAW_12, 65535).unwrap();
    assert_eq!(a.instructions(), b.instructions());
    assert_eq!(a.instructions(), c.instructions());
    if have_tcpdump() {
        let dir = TempDir::new("lt14");
        let file = dir.path("lt14.pcap");
        write_pcap(&file, 14, 65535, false, &[]);
        assert_eq!(
            tcpdump_listing(&file, "tcp port 80"),
            Err("unknown data link type 14 (min 104, max 289)".to_string())
        );
    }
}

/// An IPv4/UDP packet from 10.0.0.1 to 10.0.0.2 behind a 4-byte BSD loopback header whose address
/// family word is written in the given byte order.
fn null_packet(big_endian_family: bool) -> Vec<u8> {
    let family: u32 = 2; // AF_INET everywhere
    let mut p = if big_endian_family {
        family.to_be_bytes().to_vec()
    } else {
        family.to_le_bytes().to_vec()
    };
    p.extend_from_slice(&[
        0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x30, 0x39, 0, 53, 0,
        8, 0, 0,
    ]);
    p
}

#[test]
fn dlt_null_follows_the_writers_byte_order() {
    // On this (little-endian) machine, a big-endian file is "swapped".
    let native_big = cfg!(target_endian = "big");
    let le_file =
        Filter::compile_for_file("ip and udp port 53", LinkType::NULL, 65535, native_big).unwrap();
    let be_file =
        Filter::compile_for_file("ip and udp port 53", LinkType::NULL, 65535, !native_big).unwrap();
    let (le_pkt, be_pkt) = (null_packet(false), null_packet(true));
    let w = le_pkt.len() as u32;
    assert!(le_file.matches(&le_pkt, w));
    assert!(!le_file.matches(&be_pkt, w));
    assert!(be_file.matches(&be_pkt, w));
    assert!(!be_file.matches(&le_pkt, w));
    // Loopback (DLT_LOOP) is always network byte order.
    let lo = Filter::compile_for_file("ip", LinkType::LOOP, 65535, true).unwrap();
    assert!(lo.matches(&be_pkt, w));
    assert!(!lo.matches(&le_pkt, w));
}

#[test]
fn ip_broadcast_uses_tcpdump_r_netmask_zero() {
    // With netmask 0 the host part is all 32 bits: only 255.255.255.255 and 0.0.0.0 match.
    let f = Filter::compile("ip broadcast", LinkType::RAW, 65535).unwrap();
    let mut pkt = vec![
        0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 255, 255, 255, 255,
    ];
    assert!(f.matches(&pkt, 20));
    pkt[16..20].copy_from_slice(&[0, 0, 0, 0]);
    assert!(f.matches(&pkt, 20));
    pkt[16..20].copy_from_slice(&[10, 255, 255, 255]);
    assert!(!f.matches(&pkt, 20));
}

#[test]
fn nul_byte_is_refused() {
    assert_eq!(
        Filter::compile("tcp\0", LinkType::ETHERNET, 65535).unwrap_err(),
        FilterError::NulInExpression
    );
}

#[test]
fn concurrent_compiles_agree() {
    let exprs = testing::expressions();
    let reference: Vec<_> = exprs
        .iter()
        .map(|e| Filter::compile(e, LinkType::ETHERNET, 65535).map(|f| f.instructions().to_vec()))
        .collect();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for (e, want) in exprs.iter().zip(&reference) {
                    let got = Filter::compile(e, LinkType::ETHERNET, 65535)
                        .map(|f| f.instructions().to_vec());
                    assert_eq!(&got, want);
                }
            });
        }
    });
}

#[test]
fn protochain_keeps_its_backward_jumps() {
    let f = Filter::compile("ip6 protochain 6", LinkType::ETHERNET, 65535).unwrap();
    assert!(f.has_backward_jumps());
    // The strict validator refuses the same program, as the kernel would.
    assert!(Filter::from_instructions(f.instructions()).is_err());
    let g = Filter::compile("tcp port 80", LinkType::ETHERNET, 65535).unwrap();
    assert!(!g.has_backward_jumps());
    assert!(Filter::from_instructions(g.instructions()).is_ok());
}
