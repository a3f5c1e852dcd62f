//! Reader tests on files built here byte by byte: every classic pcap variant, pcapng with several
//! sections, byte orders, resolutions and block types, damage at every offset, stdin-like streams.

use std::io::Cursor;

use proptest::prelude::*;
use weir_packet::LinkType;
use weir_pcap::{FileFormat, FileReader, Precision, ReadError};

/// (ts_ns, orig_len, data)
type Pkt = (u64, u32, Vec<u8>);

fn pkts() -> Vec<Pkt> {
    vec![
        (1_700_000_000_123_456_789, 60, (0..60u8).collect()),
        (1_700_000_001_000_000_001, 1514, (0..100u8).collect()),
        (1_700_000_002_999_999_999, 3, vec![1, 2, 3]),
    ]
}

fn w16(v: &mut Vec<u8>, x: u16, be: bool) {
    v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
}
fn w32(v: &mut Vec<u8>, x: u32, be: bool) {
    v.extend_from_slice(&if be { x.to_be_bytes() } else { x.to_le_bytes() });
}

fn pcap(be: bool, nanos: bool, link: u32, snaplen: u32, packets: &[Pkt]) -> Vec<u8> {
    let mut v = Vec::new();
    w32(&mut v, if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 }, be);
    w16(&mut v, 2, be);
    w16(&mut v, 4, be);
    w32(&mut v, 0, be);
    w32(&mut v, 0, be);
    w32(&mut v, snaplen, be);
    w32(&mut v, link, be);
    for (ts, orig, data) in packets {
        w32(&mut v, (ts / 1_000_000_000) as u32, be);
        let frac = ts % 1_000_000_000;
        w32(&mut v, if nanos { frac } else { frac / 1000 } as u32, be);
        w32(&mut v, data.len() as u32, be);
        w32(&mut v, *orig, be);
        v.extend_from_slice(data);
    }
    v
}

fn block(v: &mut Vec<u8>, kind: u32, body: &[u8], be: bool) {
    let total = 12 + body.len() as u32;
    assert_eq!(total % 4, 0);
    w32(v, kind, be);
    w32(v, total, be);
    v.extend_from_slice(body);
    w32(v, total, be);
}

fn shb(v: &mut Vec<u8>, be: bool) {
    let mut b = Vec::new();
    w32(&mut b, 0x1A2B_3C4D, be);
    w16(&mut b, 1, be);
    w16(&mut b, 0, be);
    b.extend_from_slice(&[0xff; 8]);
    block(v, 0x0A0D_0D0A, &b, be);
}

fn idb(v: &mut Vec<u8>, be: bool, link: u16, snaplen: u32, tsresol: Option<u8>, name: &str) {
    let mut b = Vec::new();
    w16(&mut b, link, be);
    w16(&mut b, 0, be);
    w32(&mut b, snaplen, be);
    // if_name
    w16(&mut b, 2, be);
    w16(&mut b, name.len() as u16, be);
    b.extend_from_slice(name.as_bytes());
    b.resize((b.len() + 3) & !3, 0);
    if let Some(r) = tsresol {
        w16(&mut b, 9, be);
        w16(&mut b, 1, be);
        b.extend_from_slice(&[r, 0, 0, 0]);
    }
    w16(&mut b, 0, be);
    w16(&mut b, 0, be);
    block(v, 1, &b, be);
}

fn epb(v: &mut Vec<u8>, be: bool, iface: u32, units: u64, orig: u32, data: &[u8]) {
    let mut b = Vec::new();
    w32(&mut b, iface, be);
    w32(&mut b, (units >> 32) as u32, be);
    w32(&mut b, units as u32, be);
    w32(&mut b, data.len() as u32, be);
    w32(&mut b, orig, be);
    b.extend_from_slice(data);
    b.resize((b.len() + 3) & !3, 0);
    block(v, 6, &b, be);
}

/// (ts_ns, orig_len, interface, link, data) of a packet read back.
type Read = (u64, u32, u32, LinkType, Vec<u8>);

fn read_all(bytes: Vec<u8>) -> (Vec<Read>, Option<ReadError>) {
    let mut r = FileReader::from_bytes("mem", bytes).expect("header");
    let mut out = Vec::new();
    loop {
        match r.next_packet() {
            Ok(Some(p)) => out.push((
                p.meta.ts_ns,
                p.meta.orig_len,
                p.meta.interface,
                p.link,
                p.data.to_vec(),
            )),
            Ok(None) => return (out, None),
            Err(e) => {
                assert!(r.next_packet().unwrap().is_none(), "damage ends the file");
                return (out, Some(e));
            }
        }
    }
}

#[test]
fn classic_pcap_all_variants() {
    for be in [false, true] {
        for nanos in [false, true] {
            let bytes = pcap(be, nanos, 1, 65535, &pkts());
            let r = FileReader::from_bytes("mem", bytes.clone()).unwrap();
            let precision = if nanos {
                Precision::Nano
            } else {
                Precision::Micro
            };
            assert_eq!(r.format(), FileFormat::Pcap(precision));
            assert_eq!(r.interfaces()[0].swapped, be);
            assert!(!r.is_modified_pcap());
            let (got, err) = read_all(bytes);
            assert!(err.is_none());
            assert_eq!(got.len(), 3);
            for ((ts, orig, data), g) in pkts().iter().zip(&got) {
                let want_ts = if nanos { *ts } else { ts - ts % 1000 };
                assert_eq!(g.0, want_ts);
                assert_eq!(g.1, *orig);
                assert_eq!(g.3, LinkType::ETHERNET);
                assert_eq!(&g.4, data);
            }
        }
    }
}

#[test]
fn classic_pcap_truncated_last_record() {
    let bytes = pcap(false, true, 1, 65535, &pkts());
    // Cut the last packet's data in half: two packets, then damage at the third record.
    let cut = bytes.len() - 2;
    let (got, err) = read_all(bytes[..cut].to_vec());
    assert_eq!(got.len(), 2);
    match err {
        Some(ReadError::Damaged {
            offset,
            packets,
            reason,
            ..
        }) => {
            let third = 24 + 16 + 60 + 16 + 100;
            assert_eq!(offset, third as u64);
            assert_eq!(packets, 2);
            assert!(reason.contains("truncated dump file"), "{reason}");
            assert!(
                reason.contains("tried to read 3 captured bytes, only got 1"),
                "{reason}"
            );
        }
        other => panic!("expected damage, got {other:?}"),
    }
}

#[test]
fn classic_pcap_snaplen_cuts_like_libpcap() {
    // A record longer than the declared snap length is cut to it.
    let bytes = pcap(false, false, 1, 50, &pkts());
    let (got, err) = read_all(bytes);
    assert!(err.is_none());
    assert_eq!(got[0].4.len(), 50);
    assert_eq!(got[1].4.len(), 50);
    assert_eq!(got[2].4.len(), 3);
}

#[test]
fn classic_pcap_absurd_caplen_is_damage() {
    let mut bytes = pcap(false, false, 1, 65535, &pkts()[..1]);
    let mut extra = Vec::new();
    w32(&mut extra, 1, false);
    w32(&mut extra, 0, false);
    w32(&mut extra, 0x7fff_ffff, false);
    w32(&mut extra, 60, false);
    bytes.extend_from_slice(&extra);
    let (got, err) = read_all(bytes);
    assert_eq!(got.len(), 1);
    let msg = err.unwrap().to_string();
    assert!(msg.contains("invalid packet capture length"), "{msg}");
}

#[test]
fn unknown_and_short_files_are_clear_errors() {
    let e = FileReader::from_bytes("x", b"hello world, not a capture".to_vec())
        .err()
        .unwrap();
    assert!(matches!(e, ReadError::UnknownFormat { .. }), "{e}");
    let e = FileReader::from_bytes("x", vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0])
        .err()
        .unwrap();
    assert!(matches!(e, ReadError::ShortHeader { .. }), "{e}");
}

/// Two sections of different byte orders, three interfaces with different resolutions and link
/// types, EPB/SPB/OPB and blocks that must be skipped.
fn pcapng_sample() -> Vec<u8> {
    let mut v = Vec::new();
    shb(&mut v, false);
    idb(&mut v, false, 1, 0, None, "eth0"); // µs by default
    idb(&mut v, false, 101, 128, Some(9), "tun0"); // ns
                                                   // A name resolution block and a custom block: skipped.
    block(&mut v, 4, &[0, 0, 0, 0], false);
    block(&mut v, 0x0000_0BAD, &[1, 2, 3, 4, 5, 6, 7, 8], false);
    epb(&mut v, false, 0, 1_700_000_000_123_456, 60, &[0xaa; 60]);
    epb(
        &mut v,
        false,
        1,
        1_700_000_000_123_456_789,
        1000,
        &[0x45; 21],
    );
    // SPB on interface 0 (snaplen 0 = unlimited): orig 7, data 7 padded to 8.
    let mut b = Vec::new();
    w32(&mut b, 7, false);
    b.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 0]);
    block(&mut v, 3, &b, false);
    // Section 2, big-endian, binary resolution 2^-20 s, and one OPB.
    shb(&mut v, true);
    idb(&mut v, true, 113, 65535, Some(0x80 | 20), "any");
    epb(
        &mut v,
        true,
        0,
        (1_700_000_005u64 << 20) + (1 << 19),
        44,
        &[9; 44],
    );
    let mut b = Vec::new();
    w16(&mut b, 0, true);
    w16(&mut b, 0, true);
    let units = (1_700_000_006u64 << 20) + (1 << 18);
    w32(&mut b, (units >> 32) as u32, true);
    w32(&mut b, units as u32, true);
    w32(&mut b, 5, true);
    w32(&mut b, 5, true);
    b.extend_from_slice(&[7, 7, 7, 7, 7, 0, 0, 0]);
    block(&mut v, 2, &b, true);
    v
}

#[test]
fn pcapng_sections_interfaces_resolutions_and_blocks() {
    let bytes = pcapng_sample();
    let (got, err) = read_all(bytes.clone());
    assert!(err.is_none(), "{err:?}");
    assert_eq!(got.len(), 5);
    // EPB, µs units.
    assert_eq!(got[0].0, 1_700_000_000_123_456_000);
    assert_eq!((got[0].1, got[0].2, got[0].3), (60, 0, LinkType::ETHERNET));
    // EPB, ns units, raw IP on interface 1.
    assert_eq!(got[1].0, 1_700_000_000_123_456_789);
    assert_eq!((got[1].1, got[1].2, got[1].3), (1000, 1, LinkType::RAW));
    assert_eq!(got[1].4, vec![0x45; 21]);
    // SPB: no timestamp, interface 0, 7 bytes.
    assert_eq!((got[2].0, got[2].2), (0, 0));
    assert_eq!(got[2].4, vec![1, 2, 3, 4, 5, 6, 7]);
    // Section 2's interface 0 is global interface 2; 2^-20 s units, half a second.
    assert_eq!(got[3].0, 1_700_000_005_500_000_000);
    assert_eq!((got[3].2, got[3].3), (2, LinkType::LINUX_SLL));
    // OPB: a quarter second.
    assert_eq!(got[4].0, 1_700_000_006_250_000_000);
    assert_eq!(got[4].4, vec![7; 5]);
    let mut r = FileReader::from_bytes("mem", bytes).unwrap();
    while r.next_packet().unwrap().is_some() {}
    assert_eq!(r.skipped_blocks(), 2);
    let names: Vec<_> = r
        .interfaces()
        .iter()
        .map(|i| i.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["eth0", "tun0", "any"]);
}

#[test]
fn pcapng_packet_on_undeclared_interface_is_damage() {
    let mut v = Vec::new();
    shb(&mut v, false);
    idb(&mut v, false, 1, 0, None, "eth0");
    epb(&mut v, false, 0, 1, 60, &[0; 60]);
    let at = v.len();
    epb(&mut v, false, 3, 1, 60, &[0; 60]);
    let (got, err) = read_all(v);
    assert_eq!(got.len(), 1);
    match err {
        Some(ReadError::Damaged { offset, reason, .. }) => {
            assert_eq!(offset, at as u64);
            assert!(reason.contains("interface 3"), "{reason}");
        }
        e => panic!("{e:?}"),
    }
}

#[test]
fn pcapng_bad_lengths_are_damage_not_loops() {
    let good = pcapng_sample();
    // Zero length, unaligned length and mismatched trailer right after the first SHB (28 bytes).
    for bad in [0u32, 13, 8, 0xffff_fff0] {
        let mut v = good[..28].to_vec();
        w32(&mut v, 6, false);
        w32(&mut v, bad, false);
        v.extend_from_slice(&[0; 40]);
        let (got, err) = read_all(v);
        assert!(got.is_empty());
        assert!(err.unwrap().is_damage());
    }
}

#[test]
fn stream_reader_matches_mapped_reader() {
    for bytes in [pcap(true, false, 1, 65535, &pkts()), pcapng_sample()] {
        let (want, _) = read_all(bytes.clone());
        // A stream that hands out 7 bytes at a time exercises every refill path.
        struct Trickle(Cursor<Vec<u8>>);
        impl std::io::Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = buf.len().min(7);
                self.0.read(&mut buf[..n])
            }
        }
        let mut r = FileReader::from_reader("pipe", Box::new(Trickle(Cursor::new(bytes)))).unwrap();
        let mut got = Vec::new();
        while let Some(p) = r.next_packet().unwrap() {
            got.push((
                p.meta.ts_ns,
                p.meta.orig_len,
                p.meta.interface,
                p.link,
                p.data.to_vec(),
            ));
        }
        assert_eq!(got, want);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Cutting a file anywhere after its header yields a prefix of its packets, then at most one
    /// damage report, and never a panic.
    #[test]
    fn truncation_yields_a_prefix(cut in 0usize..2000, which in 0usize..2) {
        let bytes = if which == 0 { pcap(false, true, 1, 65535, &pkts()) } else { pcapng_sample() };
        let (full, _) = read_all(bytes.clone());
        let cut = cut.min(bytes.len());
        if let Ok(mut r) = FileReader::from_bytes("cut", bytes[..cut].to_vec()) {
            let mut n = 0;
            loop {
                match r.next_packet() {
                    Ok(Some(p)) => {
                        prop_assert_eq!(p.data, &full[n].4[..]);
                        n += 1;
                    }
                    Ok(None) => break,
                    Err(e) => { prop_assert!(e.is_damage()); break; }
                }
            }
        }
    }

    /// Flipping bytes anywhere never panics or loops.
    #[test]
    fn mutation_never_panics(flips in proptest::collection::vec((0usize..2000, any::<u8>()), 1..16), which in 0usize..2) {
        let mut bytes = if which == 0 { pcap(true, false, 1, 65535, &pkts()) } else { pcapng_sample() };
        for (at, x) in flips {
            let n = bytes.len();
            bytes[at % n] ^= x;
        }
        if let Ok(mut r) = FileReader::from_bytes("mut", bytes) {
            let mut steps = 0;
            while let Ok(Some(_)) = r.next_packet() {
                steps += 1;
                prop_assert!(steps < 100);
            }
        }
    }
}

#[test]
fn split_ranges_cover_the_file_in_order() {
    let packets: Vec<Pkt> = (0..5000u64)
        .map(|i| {
            let len = 60 + (i as usize * 13) % 700;
            (
                1_700_000_000_000_000_000 + i * 1000,
                len as u32,
                vec![i as u8; len],
            )
        })
        .collect();
    let bytes = pcap(false, true, 1, 65535, &packets);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("split.pcap");
    std::fs::write(&path, &bytes).unwrap();
    let (want, _) = read_all(bytes);
    for n in 2..=4 {
        let reader = FileReader::open(&path).unwrap();
        let chunks = reader.split(n).expect("a split");
        assert!(chunks.len() >= 2 && chunks.len() <= n);
        let mut got = Vec::new();
        for mut c in chunks {
            // Every range ends cleanly: the guessed boundaries of this regular file are real.
            while let Some(p) = c.next_packet().unwrap() {
                got.push((
                    p.meta.ts_ns,
                    p.meta.orig_len,
                    p.meta.interface,
                    p.link,
                    p.data.to_vec(),
                ));
            }
        }
        assert_eq!(got, want, "{n} ranges");
    }
    // A streamed or already-started reader does not split.
    let mut started = FileReader::open(&path).unwrap();
    started.next_packet().unwrap();
    assert!(started.split(2).is_none());
}

#[test]
fn seek_rereads_a_record() {
    let bytes = pcapng_sample();
    let mut r = FileReader::from_bytes("mem", bytes).unwrap();
    let mut seen = Vec::new();
    while let Some(p) = r.next_packet().unwrap() {
        seen.push((p.record_offset, p.meta, p.data.to_vec()));
    }
    // Packets of the second section only (same section state after seeking back).
    for (off, meta, data) in seen.iter().skip(3).rev() {
        r.seek(*off).unwrap();
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((&p.meta, p.data), (meta, &data[..]));
    }
}

/// With records of up to 200 KB (longer than the distance the reader prefetches ahead) and a
/// cut mid-record at the end of the file, every range gives the whole-file reader's packets at
/// the same offsets, and the last range reports the truncation at the offset the whole-file
/// reader does.
#[test]
fn split_ranges_read_large_records_and_a_cut_end_like_the_whole_file() {
    let packets: Vec<Pkt> = (0..3000u64)
        .map(|i| {
            // mostly small records, a few far larger than the gaps between refills
            let len = if i % 97 == 5 {
                200_000 - i as usize
            } else {
                40 + (i as usize * 7919) % 1500
            };
            (
                1_700_000_000_000_000_000 + i * 1000,
                len as u32,
                vec![(i % 251) as u8; len],
            )
        })
        .collect();
    let mut bytes = pcap(false, true, 1, 262_144, &packets);
    // the last record loses its end
    bytes.truncate(bytes.len() - 7);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("refills.pcap");
    std::fs::write(&path, &bytes).unwrap();

    let mut whole = FileReader::open(&path).unwrap();
    let mut want = Vec::new();
    let want_end = loop {
        match whole.next_packet() {
            Ok(Some(p)) => want.push((p.record_offset, p.meta.ts_ns, p.data.to_vec())),
            Ok(None) => panic!("the cut record is damage"),
            Err(e) => break e,
        }
    };
    assert_eq!(want.len(), packets.len() - 1);
    for n in [2, 5, 9] {
        let ranges = FileReader::open(&path).unwrap().split(n).expect("a split");
        let last = ranges.len() - 1;
        let mut got = Vec::new();
        for (k, mut r) in ranges.into_iter().enumerate() {
            loop {
                match r.next_packet() {
                    Ok(Some(p)) => got.push((p.record_offset, p.meta.ts_ns, p.data.to_vec())),
                    Ok(None) => {
                        assert_ne!(k, last, "the last range ends in the cut record");
                        break;
                    }
                    Err(e) => {
                        assert_eq!(k, last, "range {k} of {n} ended early: {e}");
                        match (&e, &want_end) {
                            (
                                ReadError::Damaged { offset: a, .. },
                                ReadError::Damaged { offset: b, .. },
                            ) => assert_eq!(a, b),
                            other => panic!("{other:?}"),
                        }
                        break;
                    }
                }
            }
        }
        assert!(got == want, "{n} ranges");
    }
}

/// An EPB whose option list is `opts` (raw bytes, zero-padded to 4).
fn epb_opts(v: &mut Vec<u8>, be: bool, units: u64, data: &[u8], opts: &[u8]) {
    let mut b = Vec::new();
    w32(&mut b, 0, be);
    w32(&mut b, (units >> 32) as u32, be);
    w32(&mut b, units as u32, be);
    w32(&mut b, data.len() as u32, be);
    w32(&mut b, data.len() as u32, be);
    b.extend_from_slice(data);
    b.resize((b.len() + 3) & !3, 0);
    b.extend_from_slice(opts);
    b.resize((b.len() + 3) & !3, 0);
    block(v, 6, &b, be);
}

/// An option (code, value) padded to 4 bytes.
fn opt(code: u16, value: &[u8], be: bool) -> Vec<u8> {
    let mut b = Vec::new();
    w16(&mut b, code, be);
    w16(&mut b, value.len() as u16, be);
    b.extend_from_slice(value);
    b.resize((b.len() + 3) & !3, 0);
    b
}

/// One packet's data and its comments.
type DataAndComments = (Vec<u8>, Vec<Vec<u8>>);

/// (data, comments) of every packet, and the reader's count of damaged option lists.
fn comments_of(bytes: Vec<u8>) -> (Vec<DataAndComments>, u64) {
    let mut r = FileReader::from_bytes("mem", bytes).expect("header");
    let mut out = Vec::new();
    while let Some(p) = r.next_packet().expect("no damage") {
        let c = p.options.comments().map(<[u8]>::to_vec).collect();
        out.push((p.data.to_vec(), c));
    }
    (out, r.damaged_options())
}

#[test]
fn pcapng_packet_comments_in_both_byte_orders_as_tshark_reads_them() {
    for be in [false, true] {
        let mut v = Vec::new();
        shb(&mut v, be);
        idb(&mut v, be, 1, 65535, Some(9), "eth0");
        let frame: Vec<u8> = (0..61u8).collect();
        // epb_flags, a comment, epb_hash, a second comment, end
        let mut o = opt(2, &[0, 0, 0, 1], be);
        o.extend(opt(1, b"weir-tag=lab", be));
        o.extend(opt(3, &[2, 1, 2, 3, 4], be));
        o.extend(opt(1, b"second", be));
        o.extend(opt(0, b"", be));
        epb_opts(&mut v, be, 1, &frame, &o);
        epb_opts(&mut v, be, 2, &frame[..7], &[]);
        let two = v.clone();
        // a comment with no opt_endofopt, then one whose length runs past the block
        let mut o = opt(1, b"weir-tag=x", be);
        o.extend(opt(1, b"", be)[..2].to_vec());
        w16(&mut o, 200, be);
        o.extend_from_slice(b"cut");
        epb_opts(&mut v, be, 3, &frame[..3], &o);
        let (got, damaged) = comments_of(v.clone());
        let c = |v: &[&[u8]]| v.iter().map(|c| c.to_vec()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                (frame.clone(), c(&[b"weir-tag=lab", b"second"])),
                (frame[..7].to_vec(), vec![]),
                (frame[..3].to_vec(), c(&[b"weir-tag=x"])),
            ]
        );
        assert_eq!(damaged, 1, "be {be}");
        // tshark reads the same comments from the first two (the third's list is damaged: not
        // compared)
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("c.pcapng");
        std::fs::write(&f, &two).unwrap();
        let out = std::process::Command::new("tshark")
            .args([
                "-r",
                f.to_str().unwrap(),
                "-T",
                "fields",
                "-e",
                "frame.comment",
            ])
            .output()
            .expect("tshark is installed (scripts/setup.sh)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(text, "weir-tag=lab,second\n\n", "be {be}: {out:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A packet's option list cut anywhere, with any stray bytes after it, never panics and
    /// never costs the packet: its data is whole and its comments are those of the options that
    /// fit (a hand-written oracle), in order.
    #[test]
    fn truncated_options_keep_the_packet_and_the_comments_before_the_damage(
        opts in proptest::collection::vec((0u16..5, proptest::collection::vec(any::<u8>(), 0..20)), 0..6),
        cut in 0usize..200,
        stray in proptest::collection::vec(any::<u8>(), 0..8),
        be in any::<bool>(),
    ) {
        let mut list = Vec::new();
        let mut ends = Vec::new();
        for (code, value) in &opts {
            // code 0 would end the list: comments and other options only
            list.extend(opt(code + 1, value, be));
            ends.push((list.len(), code + 1, value.clone()));
        }
        let cut = cut.min(list.len());
        let mut raw = list[..cut].to_vec();
        raw.extend_from_slice(&stray);
        let mut v = Vec::new();
        shb(&mut v, be);
        idb(&mut v, be, 1, 65535, Some(9), "eth0");
        epb_opts(&mut v, be, 1, b"abcde", &raw);
        epb_opts(&mut v, be, 2, b"xyz", &opt(1, b"next", be));
        let (got, damaged) = comments_of(v);
        prop_assert_eq!(got.len(), 2);
        prop_assert_eq!(&got[0].0, b"abcde");
        // comments of the options wholly before the cut come first, in order; stray bytes may
        // read as more options after them
        let want: Vec<Vec<u8>> = ends
            .iter()
            .filter(|(end, code, _)| *end <= cut && *code == 1)
            .map(|(_, _, v)| v.clone())
            .collect();
        prop_assert!(got[0].1.len() >= want.len());
        prop_assert_eq!(&got[0].1[..want.len()], &want[..]);
        prop_assert!(damaged <= 1);
        prop_assert_eq!(&got[1], &(b"xyz".to_vec(), vec![b"next".to_vec()]));
    }
}

/// A reader of `open_scattered` (pread into one buffer) gives, for every range of records
/// `[a, b)` it is sent to with `resume_range`, exactly the packets the mapped reader reads
/// there, records of 256 KiB (far more than a refill with no range ahead) included, in any
/// order;
/// a file cut mid-record since it was opened ends in the damage report the mapped reader gives
/// for the same bytes, and a FIFO is refused.
#[test]
fn scattered_reader_reads_ranges_like_the_mapped_reader() {
    let sizes = [60usize, 1_514, 9_000, 300_000, 3, 2_000_000, 70, 1_500, 40];
    let packets: Vec<Pkt> = (0..90)
        .map(|i| {
            let n = sizes[i % sizes.len()].min(262_144);
            let data = (0..n).map(|k| (k * 7 + i) as u8).collect();
            (1_700_000_000_000_000_000 + i as u64 * 1_000, n as u32, data)
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("a.pcap", pcap(false, true, 1, 262_144, &packets)),
        ("b.pcapng", {
            let mut v = Vec::new();
            shb(&mut v, true);
            idb(&mut v, true, 1, 0, Some(9), "eth0");
            for (ts, orig, data) in &packets {
                epb(&mut v, true, 0, *ts, *orig, data);
            }
            v
        }),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let mut mapped = FileReader::open(&path).unwrap();
        let mut all = Vec::new();
        while let Some(p) = mapped.next_packet().unwrap() {
            all.push((p.record_offset, p.meta, p.data.to_vec()));
        }
        assert_eq!(all.len(), packets.len());
        let mut r = FileReader::open_scattered(&path).unwrap();
        assert_eq!(r.next_packet().unwrap().unwrap().data, &all[0].2[..]);
        // ranges of 1, 2 and 5 records, forwards then backwards
        let mut starts: Vec<(usize, usize)> = (0..all.len()).step_by(3).map(|i| (i, 1)).collect();
        starts.extend((0..all.len()).step_by(7).map(|i| (i, 5)).rev());
        starts.extend((1..all.len()).step_by(11).map(|i| (i, 2)));
        for (i, n) in starts {
            let end = all.get(i + n).map_or(bytes.len() as u64, |p| p.0);
            r.resume_range(all[i].0, end, 0).unwrap();
            let mut got = Vec::new();
            while let Some(p) = r.next_packet().unwrap() {
                if p.record_offset >= end {
                    break;
                }
                got.push((p.record_offset, p.meta, p.data.to_vec()));
            }
            assert!(
                got[..] == all[i..(i + n).min(all.len())],
                "{name} [{i}, +{n})"
            );
        }
        // cut mid-record after opening: the mapped reader of the cut bytes reports the damage
        let cut = all[50].0 as usize + 100;
        let mut r = FileReader::open_scattered(&path).unwrap();
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let mut want = FileReader::open(&path).unwrap();
        // the first packet first: the section header (byte order) and interfaces
        want.next_packet().unwrap();
        r.next_packet().unwrap();
        want.resume_at(all[48].0, 0).unwrap();
        r.resume_range(all[48].0, u64::MAX, 0).unwrap();
        for _ in 0..2 {
            let (a, b) = (
                want.next_packet().unwrap().unwrap(),
                r.next_packet().unwrap().unwrap(),
            );
            assert_eq!((a.meta, a.data), (b.meta, b.data));
        }
        let (a, b) = (
            want.next_packet().unwrap_err(),
            r.next_packet().unwrap_err(),
        );
        assert_eq!(a.to_string(), b.to_string());
        assert!(r.next_packet().unwrap().is_none());
    }
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let Err(e) = FileReader::open_scattered(&fifo) else {
        panic!("a FIFO opened for pread");
    };
    assert!(e.to_string().contains("not a regular file"), "{e}");
}
