//! The keys a packet is indexed under: every IPv4/IPv6 address in its IP headers (tunnelled ones
//! too) and ARP's protocol addresses, every TCP/UDP/SCTP port, and the IP protocol numbers.

use weir_decode::quick::{self, Upper};
use weir_decode::{decode, ErrorKind, Layer, LayerKind, LinkType};

/// One index key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// An IP protocol number (IPv4 protocol, IPv6 next header, the final upper layer).
    Proto(u8),
    /// A TCP, UDP or SCTP port (source or destination).
    Port(u16),
    /// An IPv4 address (source, destination, ARP sender/target).
    V4(u32),
    /// An IPv6 address.
    V6(u128),
}

/// How finely an index keys ports: each port below `exact_below` is a key of its own; from
/// there on a chunk lists its ports exactly when it holds at most `chunk_exact_ports` distinct
/// ones (format 5), else it lists them per bucket of `1 << bucket_shift` ports, under the
/// bucket's key (the bucket's first port, in a table of its own from format 5 on). A query for
/// a port from `exact_below` on reads the port's own list and its bucket's: a superset, which
/// the BPF program then narrows to the exact packets.
///
/// Why buckets: random ephemeral source ports (one per connection, thousands of clients) made
/// every one of the 65 536 ports a key present in a few dozen chunks each, 1.07 % of the data
/// on 64-byte frames and half of the index's sorting (bench_index `--traffic diverse`);
/// service ports, which queries ask for, are mostly below 1 024 (see [`PortGrain::DEFAULT`]).
/// Why exact lists where a chunk has few ports (format 5): on real traffic (the corpus trace)
/// a chunk holds a few dozen ephemeral ports, and format 4's buckets in every chunk made the
/// extraction of one such port read 28 times more (bench/README.md, issue 20, session 18).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortGrain {
    /// Ports below this are keys of their own (65 536: every port, as formats 1 to 3).
    pub exact_below: u32,
    /// log2 of the ports per bucket from `exact_below` on.
    pub bucket_shift: u32,
    /// A chunk with at most this many distinct ports from `exact_below` on lists them exactly
    /// (0: every chunk lists buckets, as format 4 did).
    pub chunk_exact_ports: u32,
}

impl PortGrain {
    /// Every port a key of its own (index formats 1 to 3).
    pub const EXACT: PortGrain = PortGrain {
        exact_below: 1 << 16,
        bucket_shift: 0,
        chunk_exact_ports: 0,
    };

    /// What the builder writes in 128 KiB chunks ([`IndexBuilder::new`](crate::IndexBuilder::new)
    /// scales `chunk_exact_ports` to its chunk size): ports below 1 024 exact; from there on
    /// exact in a chunk with at most 256 distinct such ports, else per bucket of 64 ports.
    /// Buckets of 16 left the diverse traffic's index at 2.35 % of the data, 64 make it 1.34 %
    /// (bench/README.md, issue 20, session 18). 256 exact ports of a 128 KiB chunk, at worst
    /// each in a list of its own blocks (two or three bytes), add at most 0.6 % of the data.
    pub const DEFAULT: PortGrain = PortGrain {
        exact_below: 1024,
        bucket_shift: 6,
        chunk_exact_ports: 256,
    };

    /// Format 4's grain: ports from 1 024 on per bucket of 64 in every chunk.
    pub const BUCKETS: PortGrain = PortGrain {
        exact_below: 1024,
        bucket_shift: 6,
        chunk_exact_ports: 0,
    };

    /// Whether the grain is one an index may hold: buckets of at most 32 768 ports, and
    /// `exact_below` at most 65 536 and a multiple of the bucket size.
    pub fn is_valid(self) -> bool {
        self.bucket_shift <= 15
            && self.exact_below <= 1 << 16
            && self.exact_below % (1 << self.bucket_shift) == 0
    }

    /// The bucket key of port `p` (its bucket's first port) from `exact_below` on, else `p`.
    #[inline(always)]
    pub fn key(self, p: u16) -> u16 {
        if u32::from(p) >= self.exact_below {
            p & !((1u16 << self.bucket_shift) - 1)
        } else {
            p
        }
    }

    /// The key `k` is listed under in a format 4 index, where every chunk lists buckets (a
    /// port's bucket for a bucketed port, else `k`).
    #[inline]
    pub fn file_key(self, k: Key) -> Key {
        match k {
            Key::Port(p) => Key::Port(self.key(p)),
            k => k,
        }
    }

    /// Whether port `p` may be listed under its bucket (it then shares that key with other
    /// ports).
    pub fn is_bucketed(self, p: u16) -> bool {
        self.bucket_shift > 0 && u32::from(p) >= self.exact_below
    }
}

/// Appends the keys of one frame to `out`; returns `false` when decoding stopped on an error
/// before the outermost IP header's payload (the packet may match filters on bytes the decoder
/// did not read, so its chunk must be a candidate for every query; see [`keys_of_decoded`]).
///
/// The common shapes are read by the fast header parser ([`weir_decode::quick`]); everything it
/// refuses, and IPv6 packets with extension headers (each one's next header is a key), goes to
/// the full decoder ([`keys_of_decoded`]). Why: the full decoder made indexing cost 0.19 s of
/// CPU per GB of the corpus trace (38 % of a core at the disk's 2 GB/s,
/// bench/extract_vs_tcpdump.py); the test `fast_path_agrees_with_the_decoder` checks both give
/// the same keys on every corpus packet.
pub fn keys_of(link: LinkType, frame: &[u8], out: &mut Vec<Key>) -> bool {
    match quick::parse(link, frame) {
        Some(h) if h.ipv6_extensions == 0 => {
            if h.v6 {
                out.extend([Key::V6(h.src), Key::V6(h.dst), Key::Proto(h.proto)]);
            } else {
                out.extend([
                    Key::V4(h.src as u32),
                    Key::V4(h.dst as u32),
                    Key::Proto(h.proto),
                ]);
            }
            if matches!(h.upper, Upper::Tcp | Upper::Udp | Upper::Sctp) {
                out.extend([Key::Port(h.src_port), Key::Port(h.dst_port)]);
            }
            true
        }
        _ => keys_of_decoded(link, frame, out),
    }
}

/// The keys as the full decoder finds them (every layer, tunnels included), and whether they
/// are complete (`true`) or the packet must be a candidate of every query (`false`: its chunk
/// goes on the wildcard list).
///
/// A packet the decoder gave up on still has its keys indexed up to where it stopped, and is
/// complete when everything the index's primitives (tcpdump's `host`, `net`, `port` and
/// protocol primitives, which read the outermost headers) can ask of it is known:
///
/// - its outermost IP header was read: its addresses and protocol are keys; when the damage is
///   in the transport header after it (a TCP data offset below 5, an SCTP header cut short...)
///   the ports are read from the header's first four bytes as they are, which is where tcpdump's
///   `port` reads them (as many as were captured); when it is in an IPv6 extension header, that
///   header's next-header byte is a key; damage further in (a tunnel's inner packet, a payload)
///   is beyond what those primitives read;
/// - or the decoder stopped at its layer limit ([`weir_decode::MAX_LAYERS`], e.g. eight nested
///   MPLS pseudowires, sixteen IPv6 extension headers) after reading everything before it.
///
/// Only packets whose outermost IP header could not be read (an unknown link type, a cut
/// Ethernet header, a damaged IPv4 header) remain wildcards. Before (session 14) any damage
/// before the outermost IP header's payload made the packet a wildcard: on the corpus trace
/// 245 packets, which put 196 chunks of 128 KiB (25 MB of the 1 GB) into every query.
pub fn keys_of_decoded(link: LinkType, frame: &[u8], out: &mut Vec<Key>) -> bool {
    let d = decode(link, frame);
    let layers = d.layers();
    let ip_read = layers
        .iter()
        .any(|l| matches!(l, Layer::Ipv4(_) | Layer::Ipv6(_)));
    let complete = match d.error() {
        None => true,
        Some(e) if e.kind == ErrorKind::TooDeep => true,
        Some(e) => {
            if ip_read {
                let at = e.offset as usize;
                match e.layer {
                    LayerKind::Tcp | LayerKind::Udp | LayerKind::Sctp => {
                        // The ports as they are: tcpdump reads them at fixed offsets whether or
                        // not the rest of the header makes sense.
                        let b = frame.get(at..).unwrap_or(&[]);
                        for p in b.chunks_exact(2).take(2) {
                            out.push(Key::Port(u16::from_be_bytes([p[0], p[1]])));
                        }
                    }
                    LayerKind::Ipv6Ext => {
                        if let Some(&next) = frame.get(at) {
                            out.push(Key::Proto(next));
                        }
                    }
                    _ => {}
                }
            }
            ip_read
        }
    };
    for layer in layers {
        match layer {
            Layer::Ipv4(v) => {
                out.push(Key::V4(u32::from(v.src_addr())));
                out.push(Key::V4(u32::from(v.dst_addr())));
                out.push(Key::Proto(v.protocol()));
            }
            Layer::Ipv6(v) => {
                out.push(Key::V6(u128::from(v.src_addr())));
                out.push(Key::V6(u128::from(v.dst_addr())));
                out.push(Key::Proto(v.next_header()));
            }
            Layer::Ipv6Ext { header, .. } => out.push(Key::Proto(header.next_header())),
            Layer::Arp(a) => {
                for addr in [a.sender_protocol_addr(), a.target_protocol_addr()] {
                    if let Ok(b) = <[u8; 4]>::try_from(addr) {
                        out.push(Key::V4(u32::from_be_bytes(b)));
                    }
                }
            }
            Layer::Tcp(t) => {
                out.push(Key::Port(t.src_port()));
                out.push(Key::Port(t.dst_port()));
            }
            Layer::Udp(u) => {
                out.push(Key::Port(u.src_port()));
                out.push(Key::Port(u.dst_port()));
            }
            Layer::Sctp(s) => {
                out.push(Key::Port(s.src_port()));
                out.push(Key::Port(s.dst_port()));
            }
            _ => {}
        }
    }
    complete
}

#[cfg(test)]
mod test {
    use super::*;

    /// Ethernet with `tags` 802.1Q tags, IPv4, UDP 1000 -> 53.
    fn tagged(tags: usize) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        for i in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0, i as u8 + 1]);
        }
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(&[
            0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x03, 0xe8, 0, 53, 0, 8, 0, 0]);
        f
    }

    /// Any depth of VLAN tags gives the decoder's keys: the fast parser follows up to
    /// `quick::MAX_VLAN_TAGS`, the decoder the rest (before, the fast path here took one tag
    /// and the flow meter's two; both fell back to the decoder beyond, so no key changed).
    #[test]
    fn vlan_stacks_of_any_depth_give_the_decoders_keys() {
        for tags in 0..7 {
            let f = tagged(tags);
            let (mut fast, mut slow) = (Vec::new(), Vec::new());
            assert!(keys_of(LinkType::ETHERNET, &f, &mut fast));
            assert!(keys_of_decoded(LinkType::ETHERNET, &f, &mut slow));
            assert_eq!(fast, slow, "{tags} tags");
            assert_eq!(
                fast,
                [
                    Key::V4(0x0a00_0001),
                    Key::V4(0x0a00_0002),
                    Key::Proto(17),
                    Key::Port(1000),
                    Key::Port(53)
                ]
            );
            let read = quick::parse(LinkType::ETHERNET, &f).is_some();
            assert_eq!(
                read,
                tags <= usize::from(quick::MAX_VLAN_TAGS),
                "{tags} tags"
            );
        }
    }

    /// Ethernet, IPv4 with protocol `proto`, then `l4`.
    fn ipv4(proto: u8, l4: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        let total = (20 + l4.len()) as u16;
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&[0, 1, 0, 0, 64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        f.extend_from_slice(l4);
        f
    }

    /// Whether tcpdump's compiled `expr` matches `f` (libpcap's code generator, in weir-filter).
    fn bpf(expr: &str, f: &[u8]) -> bool {
        weir_filter::Filter::compile_for_file(expr, LinkType::ETHERNET, 262_144, false)
            .expect("compiles")
            .matches(f, f.len() as u32)
    }

    /// Damaged transport headers: the packet is no wildcard; its ports are keys exactly when
    /// tcpdump's `port` can read them (the oracle: the BPF program of `port N`).
    #[test]
    fn a_damaged_transport_header_still_gives_its_ports() {
        // TCP with a data offset of 2 (below the minimum 5): ports 1000 -> 80.
        let mut tcp = [0u8; 20];
        tcp[..4].copy_from_slice(&[0x03, 0xe8, 0, 80]);
        tcp[12] = 0x20;
        // SCTP cut after 3 bytes (source port and half the destination port).
        let cases: [(u8, &[u8], &[u16]); 3] = [
            (6, &tcp, &[1000, 80]),
            (132, &[0x13, 0xc4, 0], &[5060]),
            (17, &[0x00], &[]),
        ];
        for (proto, l4, ports) in cases {
            let f = ipv4(proto, l4);
            let mut keys = Vec::new();
            assert!(
                keys_of(LinkType::ETHERNET, &f, &mut keys),
                "{proto}: complete"
            );
            for p in [53u16, 80, 1000, 5060] {
                assert_eq!(
                    keys.contains(&Key::Port(p)),
                    bpf(&format!("port {p}"), &f),
                    "{proto}: port {p} in {keys:?}"
                );
            }
            assert_eq!(
                keys.iter().filter(|k| matches!(k, Key::Port(_))).count(),
                ports.len()
            );
            assert!(keys.contains(&Key::V4(0x0a00_0001)) && bpf("host 10.0.0.1", &f));
            assert!(keys.contains(&Key::Proto(proto)));
        }
    }

    /// Decoding stopped at the layer limit (nested MPLS pseudowires), an IP-in-IP packet whose
    /// inner header is cut: complete. A cut Ethernet header or a damaged outer IPv4 header:
    /// wildcard.
    #[test]
    fn what_stays_on_the_wildcard_list() {
        // Eight MPLS labels each followed by a control word and Ethernet: 16+ layers.
        let mut deep = vec![0u8; 12];
        for _ in 0..9 {
            deep.extend_from_slice(&[0x88, 0x47, 0, 0, 0x11, 64, 0, 0, 0, 0]);
            deep.extend_from_slice(&[0u8; 12]);
        }
        deep.extend_from_slice(&[0x08, 0x00]);
        let d = decode(LinkType::ETHERNET, &deep);
        assert_eq!(d.error().map(|e| e.kind), Some(ErrorKind::TooDeep));
        assert!(keys_of(LinkType::ETHERNET, &deep, &mut Vec::new()));
        // IPv4 carrying IPv4 (protocol 4) cut after 8 bytes of the inner header.
        let f = ipv4(4, &[0x45, 0, 0, 40, 0, 0, 0, 0]);
        let mut keys = Vec::new();
        assert!(keys_of(LinkType::ETHERNET, &f, &mut keys));
        assert_eq!(
            keys,
            [Key::V4(0x0a00_0001), Key::V4(0x0a00_0002), Key::Proto(4)]
        );
        // A cut Ethernet header; an IPv4 header with IHL 3.
        assert!(!keys_of(LinkType::ETHERNET, &[0u8; 10], &mut Vec::new()));
        let mut bad = ipv4(17, &[0, 53, 0, 53, 0, 8, 0, 0]);
        bad[14] = 0x43;
        assert!(!keys_of(LinkType::ETHERNET, &bad, &mut Vec::new()));
    }
}
