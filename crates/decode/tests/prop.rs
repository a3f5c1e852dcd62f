//! Property tests: no input makes the decoder panic, truncation only ever removes layers from
//! the end, and field values put into built packets come back out.

mod common;

use common::*;
use proptest::prelude::*;
use weir_decode::{
    decode, decode_into, protocol_name, summary, Decoded, ErrorKind, Layer, LayerKind, LinkType,
    Transport, MAX_LAYERS,
};

const LINKS: [u32; 14] = [0, 1, 9, 12, 14, 50, 51, 101, 108, 113, 228, 229, 276, 147];

/// Calls every accessor and checks the invariants that hold for any input.
fn exercise(d: &Decoded<'_>, frame_len: usize) {
    assert!(d.layers().len() <= MAX_LAYERS);
    if let Some(e) = d.error() {
        assert!(e.offset as usize <= frame_len, "{e:?} in {frame_len} bytes");
    }
    let _ = summary(d).to_string();
    let _ = protocol_name(d);
    let ip = d.ip();
    let _ = d.outer_ip();
    let t = d.transport();
    assert!(t.is_none() || ip.is_some());
    let _ = d.vlan();
    let _ = d.payload();
    for l in d.layers() {
        let _ = format!("{:?}", l.kind());
    }
}

fn kinds(d: &Decoded<'_>) -> Vec<LayerKind> {
    d.layers().iter().map(Layer::kind).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]

    #[test]
    fn random_bytes_never_panic(
        link in prop::sample::select(LINKS.to_vec()),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let d = decode(LinkType(link), &bytes);
        exercise(&d, bytes.len());
    }

    /// Random bytes behind a valid Ethernet header with an interesting ethertype, to get past
    /// the first layer more often than pure noise does.
    #[test]
    fn random_after_ethertype(
        t in prop::sample::select(vec![
            0x0800u16, 0x86dd, 0x0806, 0x8100, 0x88a8, 0x9100, 0x8847, 0x8848, 0x8863, 0x8864,
            0x880b, 0x6558, 0x0020, 0x05dc,
        ]),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let frame = eth(t, &bytes);
        let d = decode(LinkType::ETHERNET, &frame);
        exercise(&d, frame.len());
    }

    /// Random bytes behind a valid IP header with an interesting protocol.
    #[test]
    fn random_after_ip_proto(
        proto in prop::sample::select(vec![0u8, 1, 4, 6, 17, 41, 43, 44, 47, 50, 51, 58, 59, 60, 132, 135]),
        v6 in any::<bool>(),
        bytes in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let frame = if v6 { ipv6(proto, &bytes) } else { ipv4(proto, &bytes) };
        let d = decode(LinkType::RAW, &frame);
        exercise(&d, frame.len());
        prop_assert!(d.ip().is_some());
    }

    /// Valid frames of every encapsulation with random bytes overwritten never panic.
    #[test]
    fn flipped_bytes_never_panic(
        which in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let all = all_encapsulations();
        let (_, link, mut frame) = all[which.index(all.len())].clone();
        for (at, v) in flips {
            let i = at.index(frame.len());
            frame[i] = v;
        }
        let n = cut.index(frame.len() + 1);
        let d = decode(LinkType(link), &frame[..n]);
        exercise(&d, n);
    }

    /// Fields put into an Ethernet / VLAN / IPv4 / TCP frame come back out of the accessors.
    #[test]
    fn built_fields_round_trip(
        vid in 0u16..4096,
        src in any::<[u8; 4]>(),
        dst in any::<[u8; 4]>(),
        ttl in any::<u8>(),
        tos in any::<u8>(),
        id in any::<u16>(),
        sport in any::<u16>(),
        dport in any::<u16>(),
        seq in any::<u32>(),
        ack in any::<u32>(),
        flags in any::<u8>(),
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let v4 = V4 { src, dst, tos, id, ttl, ..V4::new(6) };
        let frame = eth(0x8100, &vlan(vid, 0x0800, &v4.build(&tcp(sport, dport, seq, ack, flags, &payload))));
        let d = decode(LinkType::ETHERNET, &frame);
        prop_assert_eq!(d.error(), None);
        prop_assert_eq!(d.vlan(), Some(vid));
        let ip = d.ip().unwrap();
        prop_assert_eq!(ip.src, std::net::IpAddr::from(src));
        prop_assert_eq!(ip.dst, std::net::IpAddr::from(dst));
        prop_assert_eq!((ip.ttl, ip.tos, ip.proto), (ttl, tos, 6));
        prop_assert_eq!(ip.len as usize, 20 + 20 + payload.len());
        prop_assert_eq!(
            d.transport(),
            Some(Transport::Tcp {
                src: sport,
                dst: dport,
                flags,
                seq,
                ack,
                window: 65535,
                hdr_len: 20,
                payload: &payload,
            })
        );
    }

    /// Same for IPv6 / UDP inside VXLAN inside IPv4 / UDP.
    #[test]
    fn built_vxlan_round_trip(
        vni in 0u32..(1 << 24),
        tc in any::<u8>(),
        flow in 0u32..(1 << 20),
        sport in any::<u16>(),
        // an inner datagram to the VXLAN port would be (rightly) decoded as VXLAN again
        dport in any::<u16>().prop_filter("not VXLAN", |p| *p != 4789),
        payload in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let inner = eth(0x86dd, &ipv6_full(tc, flow, 17, &udp(sport, dport, &payload)));
        let frame = eth(0x0800, &ipv4(17, &udp(1000, 4789, &vxlan(vni, &inner))));
        let d = decode(LinkType::ETHERNET, &frame);
        prop_assert_eq!(d.error(), None);
        let Layer::Vxlan(v) = d.layers()[3] else { panic!("{:?}", d.layers()) };
        prop_assert_eq!(v.vni(), vni);
        let ip = d.ip().unwrap();
        prop_assert_eq!((ip.version, ip.tos, ip.flow_label), (6, tc, flow));
        prop_assert_eq!(
            d.transport(),
            Some(Transport::Udp { src: sport, dst: dport, len: (payload.len() + 8) as u16, payload: &payload })
        );
    }
}

/// A reused `Decoded` gives the same answers as a fresh one, whatever it held before.
#[test]
fn decode_into_forgets_the_previous_packet() {
    let all = all_encapsulations();
    let mut d = Decoded::new();
    for (_, la, a) in &all {
        for (name, lb, b) in &all {
            decode_into(&mut d, LinkType(*la), a);
            decode_into(&mut d, LinkType(*lb), &b[..b.len() / 2]);
            let fresh = decode(LinkType(*lb), &b[..b.len() / 2]);
            assert_eq!(kinds(&d), kinds(&fresh), "{name}");
            assert_eq!(d.error(), fresh.error(), "{name}");
            assert_eq!(d.clipped(), fresh.clipped(), "{name}");
            assert_eq!(d.ip(), fresh.ip(), "{name}");
            assert_eq!(d.transport(), fresh.transport(), "{name}");
            assert_eq!(
                summary(&d).to_string(),
                summary(&fresh).to_string(),
                "{name}"
            );
            assert_eq!(format!("{d:?}"), format!("{fresh:?}"), "{name}");
        }
    }
}

/// Cutting a valid frame anywhere yields a prefix of its layers, and when layers are missing,
/// a `Truncated` error naming the first missing one, at an offset inside the cut frame.
#[test]
fn truncation_yields_a_prefix_of_layers() {
    for (name, link, frame) in all_encapsulations() {
        let full = decode(LinkType(link), &frame);
        assert_eq!(full.error(), None, "{name}");
        let full_kinds = kinds(&full);
        for n in 0..=frame.len() {
            let d = decode(LinkType(link), &frame[..n]);
            exercise(&d, n);
            let k = kinds(&d);
            let common = k
                .iter()
                .zip(&full_kinds)
                .take_while(|(a, b)| a == b)
                .count();
            // the last layer may be a payload that the full frame decodes further only when
            // nothing is missing; everything before it must match
            assert!(
                common == k.len(),
                "{name} cut at {n}: {k:?} is not a prefix of {full_kinds:?}"
            );
            if k.len() < full_kinds.len() {
                let e = d
                    .error()
                    .unwrap_or_else(|| panic!("{name} cut at {n}: layers missing, no error"));
                assert_eq!(e.kind, ErrorKind::Truncated, "{name} cut at {n}: {e:?}");
                assert!(e.offset as usize <= n, "{name} cut at {n}: {e:?}");
                let next = full_kinds[k.len()];
                // raw IP and MPLS guess the next layer from a byte that is not there
                let guessed = matches!(
                    (e.layer, next),
                    (LayerKind::Ipv4, LayerKind::Ipv6) | (LayerKind::Payload, _)
                );
                assert!(
                    e.layer == next || guessed,
                    "{name} cut at {n}: error at {:?}, full has {next:?}",
                    e.layer
                );
            } else {
                assert_eq!(d.error(), None, "{name} cut at {n}");
            }
        }
    }
}
