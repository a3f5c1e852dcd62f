//! What lands on an index's wildcard list, and why: reads capture files (or a store's segments)
//! and, for every packet [`weir_index::keys_of`] cannot read all the way, tallies its link type,
//! the decoder's error and the layers it got through; also counts the 128 KiB chunks (of the
//! file read) that such packets put on the list, and packets per IPv4 host (the rare ones make
//! good extraction benchmarks).
//!
//! usage: cargo run --release -p weir-index --example wildcard -- FILE...

use std::collections::{BTreeMap, BTreeSet, HashMap};

use weir_decode::decode;
use weir_index::{keys_of, Key};
use weir_pcap::FileReader;

fn main() {
    let mut why: BTreeMap<String, u64> = BTreeMap::new();
    let mut chunks = BTreeSet::new();
    let mut hosts: HashMap<u32, u64> = HashMap::new();
    let (mut total, mut wild) = (0u64, 0u64);
    let mut keys = Vec::new();
    for (fi, path) in std::env::args().skip(1).enumerate() {
        let mut r = match FileReader::open(std::path::Path::new(&path)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{path}: {e}");
                continue;
            }
        };
        loop {
            let p = match r.next_packet() {
                Ok(Some(p)) => p,
                Ok(None) => break,
                Err(e) => {
                    eprintln!("{path}: {e}");
                    break;
                }
            };
            let (iface, offset, data) =
                (p.meta.interface as usize, p.record_offset, p.data.to_vec());
            let link = r.interfaces()[iface].link;
            total += 1;
            keys.clear();
            let ok = keys_of(link, &data, &mut keys);
            for k in &keys {
                if let Key::V4(a) = k {
                    *hosts.entry(*a).or_default() += 1;
                }
            }
            if !ok {
                wild += 1;
                chunks.insert((fi, offset >> 17));
                let d = decode(link, &data);
                let layers: Vec<String> = d
                    .layers()
                    .iter()
                    .map(|l| format!("{:?}", l.kind()))
                    .collect();
                let e = d.error().map_or("none".into(), |e| format!("{:?}", e));
                *why.entry(format!("link {} | {} | {}", link.0, layers.join("/"), e))
                    .or_default() += 1;
            }
        }
    }
    println!(
        "{total} packets, {wild} on the wildcard list, in {} chunks of 128 KiB",
        chunks.len()
    );
    let mut v: Vec<_> = why.into_iter().collect();
    v.sort_by_key(|b| std::cmp::Reverse(b.1));
    for (k, n) in v.iter().take(40) {
        println!("{n:>10}  {k}");
    }
    let mut h: Vec<_> = hosts.into_iter().collect();
    h.sort_by_key(|&(a, n)| (n, a));
    let pick: Vec<String> = h
        .iter()
        .filter(|(_, n)| (15..=30).contains(n))
        .take(8)
        .map(|(a, n)| format!("{} ({n})", std::net::Ipv4Addr::from(*a)))
        .collect();
    println!(
        "{} IPv4 hosts; with 15-30 packets: {}",
        h.len(),
        pick.join(", ")
    );
}
