//! The index never hides a packet: on every corpus file, for every filter expression of the
//! shared list and for time windows, every packet the BPF program (libpcap's code, as tcpdump
//! runs it) selects lies in a chunk the index names as a candidate. Also: the index narrows
//! (a host query reads fewer chunks than a full scan on most files), and a damaged index is
//! refused.

use std::path::{Path, PathBuf};

use weir_filter::Filter;
use weir_index::{Index, IndexBuilder, Query};
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

fn expressions() -> Vec<String> {
    include_str!("../../filter/tests/expressions.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

struct Pkt {
    offset: u64,
    ts: u64,
    iface: usize,
    orig_len: u32,
    data: Vec<u8>,
}

#[test]
fn candidates_cover_every_matching_packet_on_the_corpus() {
    let exprs = expressions();
    let queries: Vec<Query> = exprs.iter().map(|e| Query::from_expr(e)).collect();
    let (mut files, mut checked, mut narrowed) = (0, 0u64, 0u64);
    for path in corpus() {
        let Ok(mut r) = FileReader::open(&path) else {
            continue;
        };
        let mut pkts = Vec::new();
        let mut b = IndexBuilder::new(4096);
        while let Ok(Some(p)) = r.next_packet() {
            b.add(p.record_offset, p.meta.ts_ns, p.link, p.data);
            pkts.push(Pkt {
                offset: p.record_offset,
                ts: p.meta.ts_ns,
                iface: p.meta.interface as usize,
                orig_len: p.meta.orig_len,
                data: p.data.to_vec(),
            });
        }
        if pkts.is_empty() {
            continue;
        }
        files += 1;
        let ifaces = r.interfaces().to_vec();
        let ix = Index::parse(&b.serialize(r.offset(), 0)).expect("own index parses");
        for (expr, q) in exprs.iter().zip(&queries) {
            let filters: Vec<Option<Filter>> = ifaces
                .iter()
                .map(|i| {
                    Filter::compile_for_file(
                        expr,
                        i.link,
                        weir_filter::effective_snaplen(i.snaplen),
                        i.swapped,
                    )
                    .ok()
                })
                .collect();
            let cands = ix.candidates(q, 0, u64::MAX);
            let in_cands = |off: u64| cands.iter().any(|&(s, e)| off >= s && off < e);
            if cands.len() < ix.blocks() {
                narrowed += 1;
            }
            for p in &pkts {
                let Some(Some(f)) = filters.get(p.iface) else {
                    continue;
                };
                if f.matches(&p.data, p.orig_len) {
                    checked += 1;
                    assert!(
                        in_cands(p.offset),
                        "{}: `{expr}` matches the packet at {} but the index ({q:?}) does not name its chunk",
                        path.display(),
                        p.offset
                    );
                }
            }
        }
        // Time windows: a third of the file's time span, at three places.
        let (lo, hi) = (
            pkts.iter().map(|p| p.ts).min().unwrap(),
            pkts.iter().map(|p| p.ts).max().unwrap(),
        );
        let span = (hi - lo) / 3;
        for k in 0..3 {
            let (from, to) = (lo + k * span, lo + (k + 1) * span);
            let cands = ix.candidates(&Query::All, from, to);
            for p in pkts.iter().filter(|p| p.ts >= from && p.ts <= to) {
                assert!(
                    cands.iter().any(|&(s, e)| p.offset >= s && p.offset < e),
                    "{}: time window misses the packet at {}",
                    path.display(),
                    p.offset
                );
            }
        }
    }
    eprintln!("{files} files, {checked} matching packets checked, {narrowed} (file, expression) pairs narrowed");
    assert!(files > 100 && checked > 100_000 && narrowed > 1000);
}

#[test]
fn fast_path_agrees_with_the_decoder() {
    let mut total = 0u64;
    let keys = |f: fn(weir_packet::LinkType, &[u8], &mut Vec<weir_index::Key>) -> bool,
                link,
                data: &[u8]| {
        let mut v = Vec::new();
        let ok = f(link, data, &mut v);
        v.sort_unstable();
        v.dedup();
        (ok, v)
    };
    for path in corpus() {
        let Ok(mut r) = FileReader::open(&path) else {
            continue;
        };
        while let Ok(Some(p)) = r.next_packet() {
            // The packet, and cuts of it at and around header boundaries.
            let n = p.data.len();
            for cut in [
                n,
                13,
                14,
                17,
                18,
                33,
                34,
                37,
                38,
                41,
                42,
                53,
                54,
                57,
                58,
                61,
                62,
                n.saturating_sub(1),
            ] {
                let data = &p.data[..cut.min(n)];
                assert_eq!(
                    keys(weir_index::keys_of, p.link, data),
                    keys(weir_index::keys_of_decoded, p.link, data),
                    "{}: packet at {}, cut to {cut}",
                    path.display(),
                    p.record_offset
                );
            }
            total += 1;
        }
    }
    assert!(total > 50_000, "{total} packets");
}

#[test]
fn damaged_indexes_are_refused() {
    let mut b = IndexBuilder::new(4096);
    let frame = [0u8; 60];
    for i in 0..1000u64 {
        b.add(i * 100, i, weir_packet::LinkType::ETHERNET, &frame);
    }
    let bytes = b.serialize(100_000, 7);
    assert!(Index::parse(&bytes).is_ok());
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x40;
        assert!(
            Index::parse(&bad).is_err(),
            "flipped byte {i} went unnoticed"
        );
    }
    for n in 0..bytes.len() {
        assert!(Index::parse(&bytes[..n]).is_err(), "truncated to {n}");
    }
}
