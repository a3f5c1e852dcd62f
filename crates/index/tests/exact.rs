//! The index built per packet (flat key arrays, radix-sorted when serialized) holds exactly the
//! postings a plain map gives: for every key [`weir_index::keys_of`] finds in a packet, the set
//! of chunks holding such a packet, and the chunks where it gave up as the wildcard list. Checked
//! on every corpus file and on synthetic traffic with diverse keys (random ports, thousands of
//! addresses, IPv6), with the index also serialized mid-way (the recorder saves the index of the
//! segment being written every few seconds), and with one builder cleared and reused.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use weir_index::{keys_of, Index, IndexBuilder, Key, PortGrain};
use weir_packet::LinkType;
use weir_pcap::FileReader;

fn corpus() -> Vec<PathBuf> {
    let dir = std::env::var_os("WEIR_CORPUS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/corpus/pcaps"),
        PathBuf::from,
    );
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// The postings of the keys and of the port buckets (by first port), and the wildcard list, of
/// packets `(offset, link, data)` by plain maps.
type Naive = (
    BTreeMap<Key, BTreeSet<u32>>,
    BTreeMap<u16, BTreeSet<u32>>,
    BTreeSet<u32>,
);

/// Ports are listed as `grain` says: from `grain.exact_below` on, per bucket (its first port)
/// in a chunk with more than `grain.chunk_exact_ports` distinct such ports, else exactly. The
/// builder decides per chunk on the ports added since its last serialization (after packet `i`
/// when `i % every == every - 1`), so this does too.
fn naive(chunk: u64, pkts: &[(u64, LinkType, Vec<u8>)], grain: PortGrain, every: usize) -> Naive {
    let (mut map, mut buckets, mut wild) = (
        BTreeMap::<Key, BTreeSet<u32>>::new(),
        BTreeMap::<u16, BTreeSet<u32>>::new(),
        BTreeSet::new(),
    );
    // The current chunk's ports from `exact_below` on, since the last settle.
    let mut pending = BTreeSet::<u16>::new();
    let mut settle = |pending: &mut BTreeSet<u16>, c: u32| {
        let exact = pending.len() <= grain.chunk_exact_ports as usize || grain.bucket_shift == 0;
        for &p in pending.iter() {
            if exact {
                map.entry(Key::Port(p)).or_default().insert(c);
            } else {
                buckets.entry(grain.key(p)).or_default().insert(c);
            }
        }
        pending.clear();
    };
    let mut keys = Vec::new();
    let mut cur = None;
    let mut others = Vec::new();
    for (i, (off, link, data)) in pkts.iter().enumerate() {
        let c = (off / chunk) as u32;
        if cur.is_some_and(|x| x != c) {
            settle(&mut pending, cur.unwrap());
        }
        cur = Some(c);
        keys.clear();
        if !keys_of(*link, data, &mut keys) {
            wild.insert(c);
        }
        for k in &keys {
            match k {
                Key::Port(p) if u32::from(*p) >= grain.exact_below => {
                    pending.insert(*p);
                }
                k => others.push((*k, c)),
            }
        }
        if i % every == every - 1 {
            settle(&mut pending, c);
        }
    }
    if let Some(c) = cur {
        settle(&mut pending, c);
    }
    for (k, c) in others {
        map.entry(k).or_default().insert(c);
    }
    (map, buckets, wild)
}

fn parsed(ix: &Index) -> Naive {
    let map = ix
        .postings_list()
        .map(|(k, v)| (k, v.iter().copied().collect()))
        .collect();
    let per = ix.blocks_per_chunk();
    let buckets = ix
        .bucket_lists()
        .map(|(p, coarse, v)| {
            let chunks = v.iter().map(|&b| if coarse { b } else { b / per });
            (p, chunks.collect())
        })
        .collect();
    (map, buckets, ix.wildcard().iter().copied().collect())
}

/// Builds the index of `pkts` with `b` (serializing after every `every` packets too), and
/// compares it with the plain map's.
fn check(b: &mut IndexBuilder, chunk: u32, pkts: &[(u64, LinkType, Vec<u8>)], every: usize) {
    b.clear();
    let grain = b.port_grain();
    let want = naive(u64::from(chunk), pkts, grain, every);
    for (i, (off, link, data)) in pkts.iter().enumerate() {
        b.add(*off, i as u64, *link, data);
        if i % every == every - 1 {
            // The index of the packets so far (the recorder's periodic save).
            let upto = naive(u64::from(chunk), &pkts[..=i], grain, every);
            let ix = Index::parse(&b.serialize(*off, 0)).expect("parses");
            assert_eq!(parsed(&ix), upto, "after {} packets", i + 1);
        }
    }
    let ix = Index::parse(&b.serialize(u64::MAX / 2, 0)).expect("parses");
    assert_eq!(ix.port_grain(), grain);
    assert_eq!(ix.packets, pkts.len() as u64);
    assert_eq!(parsed(&ix), want);
}

#[test]
fn postings_equal_a_plain_maps_on_the_corpus() {
    let mut b = IndexBuilder::new(4096);
    let (mut files, mut total) = (0, 0);
    for path in corpus() {
        let Ok(mut r) = FileReader::open(&path) else {
            continue;
        };
        let mut pkts = Vec::new();
        while let Ok(Some(p)) = r.next_packet() {
            pkts.push((p.record_offset, p.link, p.data.to_vec()));
        }
        if pkts.is_empty() {
            continue;
        }
        files += 1;
        total += pkts.len();
        check(&mut b, 4096, &pkts, pkts.len() / 3 + 1);
    }
    assert!(
        files > 50 && total > 50_000,
        "{files} files, {total} packets"
    );
}

/// A 64-byte Ethernet frame: IPv4 (or IPv6 when `v6`) and UDP.
fn frame(src: u32, dst: u32, sport: u16, dport: u16, v6: bool) -> Vec<u8> {
    let mut f = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
    if v6 {
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0, 0, 8, 17, 64]);
        for a in [src, dst] {
            f.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0]);
            f.extend_from_slice(&a.to_be_bytes());
        }
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0, 0]);
        f.extend_from_slice(&src.to_be_bytes());
        f.extend_from_slice(&dst.to_be_bytes());
    }
    f.extend_from_slice(&sport.to_be_bytes());
    f.extend_from_slice(&dport.to_be_bytes());
    f.extend_from_slice(&[0, 8, 0, 0]);
    f.resize(f.len().max(64), 0);
    f
}

#[test]
fn postings_equal_a_plain_maps_on_diverse_traffic() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut pkts = Vec::new();
    let mut off = 0;
    for i in 0..60_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut f = frame(
            0x0a00_0000 | (x as u32 & 0x1fff),
            0xc0a8_0000 | ((x >> 16) as u32 & 0xff),
            (x >> 24) as u16,
            [53, 80, 443][(x >> 40) as usize % 3],
            i % 7 == 0,
        );
        if i % 1000 == 999 {
            // A truncated header: the decoder gives up, the chunk is a wildcard.
            f.truncate(20);
        }
        pkts.push((off, LinkType::ETHERNET, f));
        off += 96;
    }
    let mut b = IndexBuilder::new(4096);
    for every in [usize::MAX, 7_777, 999] {
        check(&mut b, 4096, &pkts, every);
    }
    // Fresh builders agree with the reused one, at another chunk size.
    check(&mut IndexBuilder::new(1 << 17), 1 << 17, &pkts, 20_000);
    // Chunks of 4 KiB (some 40 packets) with at most 20 distinct ports from 1 024 on list them
    // exactly, the others per bucket of 64: both kinds of chunk, split by the saves too.
    let few = PortGrain {
        chunk_exact_ports: 20,
        ..PortGrain::DEFAULT
    };
    let mut b = IndexBuilder::with_port_grain(4096, few);
    for every in [usize::MAX, 999, 2_001] {
        check(&mut b, 4096, &pkts, every);
    }
}

/// Bytes of the delta varints of an increasing list.
fn varint_bytes(v: &[u32]) -> usize {
    let mut prev = 0;
    v.iter()
        .map(|&x| {
            let d = x - prev;
            prev = x;
            (32 - d.leading_zeros()).div_ceil(7).max(1) as usize
        })
        .sum()
}

/// The lists as written, block by block: every key lists exactly the 4 KiB blocks of 128 KiB
/// chunks its packets are in (a plain map of blocks), or exactly its chunks, as the format's
/// rule says (blocks when in at most 16 of them, or in at most 4 per chunk for at most 1.5
/// times the varint bytes); serialized mid-way too (masks of one chunk merged across saves).
#[test]
fn lists_equal_a_plain_map_of_blocks() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut pkts = Vec::new();
    let mut off = 0u64;
    for i in 0..40_000u32 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        // Rare hosts, hosts in every block, random and fixed ports, IPv6.
        let f = frame(
            0x0a00_0000 | (x as u32 & 0x3fff),
            0xc0a8_0000 | ((x >> 16) as u32 & 0x7),
            (x >> 24) as u16,
            [53, 80, 443, 5060][(x >> 40) as usize % 4],
            i % 11 == 0,
        );
        let len = 64 + (x >> 50) % 1400;
        pkts.push((off, LinkType::ETHERNET, f));
        off += 32 + len;
    }
    let mut b = IndexBuilder::new(1 << 17);
    for every in [usize::MAX, 3_333] {
        b.clear();
        let mut blocks = BTreeMap::<Key, BTreeSet<u32>>::new();
        let mut keys = Vec::new();
        for (i, (off, link, data)) in pkts.iter().enumerate() {
            b.add(*off, i as u64, *link, data);
            keys.clear();
            assert!(keys_of(*link, data, &mut keys));
            for k in &keys {
                blocks.entry(*k).or_default().insert((off / 4096) as u32);
            }
            if i % every == every - 1 {
                b.serialize(*off, 0);
            }
        }
        let ix = Index::parse(&b.serialize(u64::MAX / 2, 0)).expect("parses");
        assert_eq!(ix.blocks_per_chunk(), 32);
        let (mut fine, mut coarse) = (0, 0);
        let mut got = 0;
        for (k, is_coarse, list) in ix.lists() {
            got += 1;
            let want_blocks: Vec<u32> = blocks[&k].iter().copied().collect();
            let mut want_chunks: Vec<u32> = want_blocks.iter().map(|b| b / 32).collect();
            want_chunks.dedup();
            let n = want_blocks.len();
            let want_fine = n <= 16
                || (n <= 4 * want_chunks.len()
                    && 2 * varint_bytes(&want_blocks) <= 3 * varint_bytes(&want_chunks));
            assert_eq!(
                !is_coarse,
                want_fine,
                "{k:?}: {n} blocks, {} chunks",
                want_chunks.len()
            );
            if is_coarse {
                coarse += 1;
                assert_eq!(list, &want_chunks[..], "{k:?}");
            } else {
                fine += 1;
                assert_eq!(list, &want_blocks[..], "{k:?}");
            }
        }
        assert_eq!(got, blocks.len());
        // Chunks of some 160 packets: at most 161 ports from 1 024 on, every one exact.
        assert_eq!(ix.bucket_lists().count(), 0);
        // Both kinds of list occur.
        assert!(fine > 100 && coarse > 5, "{fine} fine, {coarse} coarse");
    }
}

/// The ports at the edges of the builder's touched-port bitmap (word and summary-word
/// boundaries, 0 and 65 535), several in one block, one chunk and across chunks, with a
/// serialize in the middle of a chunk.
#[test]
fn edge_ports_equal_a_plain_map() {
    let edges = [
        0u16, 1, 63, 64, 127, 4095, 4096, 32_767, 32_768, 61_440, 65_472, 65_535,
    ];
    let mut pkts = Vec::new();
    let mut off = 0;
    for round in 0..40u32 {
        for (i, &p) in edges.iter().enumerate() {
            let q = edges[(i + round as usize) % edges.len()];
            pkts.push((
                off,
                LinkType::ETHERNET,
                frame(0x0a00_0001 + round, 0x0a00_0002, p, q, false),
            ));
            off += 96 + 64 * u64::from(round % 5);
        }
    }
    for every in [usize::MAX, 5, 37] {
        check(&mut IndexBuilder::new(4096), 4096, &pkts, every);
        check(&mut IndexBuilder::new(1 << 17), 1 << 17, &pkts, every);
        // Every port its own key (format 3's keys), and buckets of 16 from 4 096 on.
        for grain in [
            PortGrain::EXACT,
            PortGrain {
                exact_below: 4096,
                bucket_shift: 4,
                chunk_exact_ports: 0,
            },
            PortGrain {
                exact_below: 1024,
                bucket_shift: 6,
                chunk_exact_ports: 3,
            },
        ] {
            check(
                &mut IndexBuilder::with_port_grain(4096, grain),
                4096,
                &pkts,
                every,
            );
        }
    }
}
